"""kesque.testing.kafka: finding Kafka, saying why it cannot run, and running it like kesque.Broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import oracle
from kesque.testing import kafka as K


def test_without_java_the_reason_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert K.unavailable() == "the Apache Kafka oracle needs a JDK: no `java` on PATH"


def test_without_jars_the_reason_says_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setenv(K.LIBS_ENV, str(tmp_path))
    reason = K.jars_missing()
    assert "make kafka" in reason and K.LIBS_ENV in reason and "\n" not in reason
    assert K.jar_resources("kafka-clients", "common/message") is None


def test_the_jars_are_found_repo_relative_by_default(monkeypatch):
    monkeypatch.delenv(K.LIBS_ENV, raising=False)
    assert K.libs_dir() == K.REPO / "build" / "kafka" / "libs"


def test_cluster_ids_never_start_with_a_dash():
    """kafka-storage.sh format -t ID: an id starting with '-' (1 in 64) is read as an option."""
    ids = [K.random_cluster_id() for _ in range(3000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


@pytest.mark.skipif(K.jars_missing() is not None, reason=K.jars_missing() or "")
def test_schemas_come_from_the_jars():
    messages = K.jar_resources("kafka-clients", "common/message")
    assert "ProduceRequest.json" in messages and '"apiKey": 0' in messages["ProduceRequest.json"]
    assert "TopicRecord.json" in K.jar_resources("kafka-metadata", "common/metadata")
    assert K.jar_path("kafka-clients").name == f"kafka-clients-{K.kafka_version()}.jar"


def _produce(servers: str, topic: str, value: bytes) -> None:
    p = Producer({"bootstrap.servers": servers, "acks": "all"})
    p.produce(topic, value)
    assert p.flush(30) == 0


def _read(servers: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": servers, "group.id": "harness", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        while (m := c.poll(10)) is not None and not m.error():
            out.append(m.value())
            if len(out) == 2:
                break
        return out
    finally:
        c.close()


@pytest.mark.oracle
def test_kafka_broker_fixture_restart_keeps_port_and_data(kafka_broker_factory):
    kafka = kafka_broker_factory(config={"num.partitions": 1})
    port = kafka.port
    r = K.run_tool("kafka-topics.sh", "--bootstrap-server", kafka.bootstrap_servers, "--create", "--topic", "h")
    assert (r.returncode, r.stdout) == (0, "Created topic h.\n"), r.stderr
    _produce(kafka.bootstrap_servers, "h", b"before")
    kafka.restart()
    assert kafka.port == port
    _produce(kafka.bootstrap_servers, "h", b"after")
    assert _read(kafka.bootstrap_servers, "h") == [b"before", b"after"]


@pytest.mark.oracle
@pytest.mark.slow
def test_kafka_broker_kill_then_start(kafka_broker_factory):
    kafka = kafka_broker_factory()
    _produce(kafka.bootstrap_servers, "k", b"acked")
    kafka.kill()
    assert kafka.process is None
    kafka.start()
    assert _read(kafka.bootstrap_servers, "k")[:1] == [b"acked"]


@pytest.mark.oracle
@pytest.mark.slow
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_three_node_cluster_replicates():
    with K.KafkaCluster(3) as cluster:
        r = K.run_tool(
            "kafka-topics.sh",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--create",
            "--topic",
            "rf3",
            "--replication-factor",
            "3",
        )
        assert r.returncode == 0, r.stderr
        r = K.run_tool(
            "kafka-topics.sh", "--bootstrap-server", cluster.bootstrap_servers, "--describe", "--topic", "rf3"
        )
        assert "ReplicationFactor: 3" in r.stdout
        assert sorted(r.stdout.split("Isr: ")[1].split()[0].split(",")) == ["1", "2", "3"]
