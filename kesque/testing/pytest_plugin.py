"""pytest plugin (installed with kesque): fixtures that start a real broker.

* ``kesque_broker`` — one broker for the whole test session (subprocess, temp dir,
  free port). Use ``kesque_broker.bootstrap_servers``.
* ``kesque_broker_factory`` — call it to start extra brokers (each cleaned up after the
  test): ``kesque_broker_factory(config={"num.partitions": 3})``.
* ``kesque_cluster_factory`` — call it to start a cluster of kesque processes
  (:class:`kesque.Cluster`, closed after the test): ``kesque_cluster_factory(nodes=3)``.
* ``kafka_broker`` / ``kafka_broker_factory`` — the same with Apache Kafka
  (:class:`kesque.testing.kafka.KafkaBroker`, KRaft combined mode) as the oracle to compare
  kesque with; they skip the test, saying why in one line, when Kafka's jars (``make kafka``)
  or ``java`` are missing.
"""

from __future__ import annotations

import pytest

from .broker import Broker


@pytest.fixture(scope="session")
def kesque_broker():
    broker = Broker()
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def _factory(cls):
    brokers = []

    def make(**kwargs):
        b = cls(**kwargs)
        brokers.append(b)
        b.start()
        return b

    try:
        yield make
    finally:
        for b in brokers:
            b.close()


@pytest.fixture
def kesque_broker_factory():
    yield from _factory(Broker)


@pytest.fixture
def kesque_cluster_factory():
    # lazy: pytest loads this plugin in every run of the venv; fixtures load what they use
    from .cluster import Cluster

    yield from _factory(Cluster)


def _kafka_class():
    # lazy: pytest loads this plugin in every run of the venv; fixtures load what they use
    from . import kafka

    reason = kafka.unavailable()
    if reason:
        pytest.skip(reason)
    return kafka.KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker():
    broker = _kafka_class()()
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def kafka_broker_factory():
    yield from _factory(_kafka_class())
