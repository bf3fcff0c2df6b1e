"""pytest plugin (installed with kesque): fixtures that start a real broker.

* ``kesque_broker`` — one broker for the whole test session (subprocess, temp dir,
  free port). Use ``kesque_broker.bootstrap_servers``.
* ``kesque_broker_factory`` — call it to start extra brokers (each cleaned up after the
  test): ``kesque_broker_factory(config={"num.partitions": 3})``.
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


@pytest.fixture
def kesque_broker_factory():
    brokers: list[Broker] = []

    def make(**kwargs) -> Broker:
        b = Broker(**kwargs)
        b.start()
        brokers.append(b)
        return b

    try:
        yield make
    finally:
        for b in brokers:
            b.close()
