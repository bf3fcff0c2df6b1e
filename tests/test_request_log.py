"""Kafka's request log (kesque/server/request_log.py): with ``kafka.request.logger`` at DEBUG,
each completed request is one ``Completed request:{...}`` line naming the authenticated
principal, the listener, its security protocol and the client's software, as Kafka's
RequestChannel logs it; off, nothing is logged."""

from __future__ import annotations

import json
import logging

import confluent_kafka as ck
import pytest

from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def broker():
    port = free_port()
    b = Broker(
        mode="thread",
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        },
    ).start()
    b.sasl = f"127.0.0.1:{port}"
    yield b
    b.stop()
    b.close()


def _produce(bootstrap: str, topic: str, **settings) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "client.id": "log-test", **settings})
    p.produce(topic, b"v")
    assert p.flush(30) == 0


def _logged(broker, bootstrap: str, topic: str, **settings) -> list[dict]:
    logger = logging.getLogger("kafka.request.logger")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        _produce(bootstrap, topic, **settings)
    finally:
        logger.setLevel(level)
        logger.removeHandler(handler)
    prefix = "Completed request:"
    return [json.loads(line[len(prefix) :]) for line in handler.lines if line.startswith(prefix)]


def test_a_completed_request_names_the_sasl_principal_and_listener(broker):
    got = _logged(
        broker,
        broker.sasl,
        "logged-sasl",
        **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
        **{"sasl.username": "alice", "sasl.password": "alice-secret"},
    )
    produce = [d for d in got if d["requestHeader"]["requestApiKeyName"] == "PRODUCE"]
    assert produce, [d["requestHeader"] for d in got]
    d = produce[-1]
    assert d["principal"] == "User:alice"
    assert d["listener"] == "SASL_PLAINTEXT" and d["securityProtocol"] == "SASL_PLAINTEXT"
    assert d["requestHeader"]["clientId"] == "log-test" and d["requestHeader"]["requestApiKey"] == 0
    assert d["clientInformation"]["softwareName"] != "unknown"  # from the client's ApiVersions
    assert d["totalTimeMs"] >= 0 and d["connection"].endswith(tuple("0123456789"))


def test_plaintext_requests_are_anonymous_and_nothing_is_logged_when_off(broker):
    got = _logged(broker, broker.bootstrap_servers, "logged-plain")
    assert got and all(d["principal"] == "User:ANONYMOUS" and d["listener"] == "PLAINTEXT" for d in got)
    logger = logging.getLogger("kafka.request.logger")
    handler = _Lines()
    logger.addHandler(handler)
    try:
        _produce(broker.bootstrap_servers, "logged-plain")
    finally:
        logger.removeHandler(handler)
    assert not [line for line in handler.lines if line.startswith("Completed request:")]
