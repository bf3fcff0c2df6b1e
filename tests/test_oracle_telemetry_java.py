"""KIP-714 from Kafka's Java client (issue 29): Kafka 4.4's producer and consumer (their
``enable.metrics.push`` is on by default) ask a kesque broker with ``metrics.listener`` set for
their subscription and push; their metrics appear on ``/metrics`` under the client instance id
the broker gave each, their delta counters added up to what they did.

Oracle-marked: it needs java and Kafka's jars (``make kafka``), not a Kafka broker."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

import oracle
from kesque.cli.tools import _console
from kesque.metrics.telemetry import kafka_uuid
from kesque.testing import kafka as K
from kesque.testing.broker import Broker

pytestmark = oracle.MARKS

RECORDS = 20


@pytest.fixture(scope="module")
def broker():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Broker(mode="thread", config={"metrics.listener": f"http://127.0.0.1:{port}"}) as b:
        b.metrics_port = port
        with contextlib.redirect_stdout(io.StringIO()):
            code = _console(
                "client_metrics",
                [
                    "--bootstrap-server",
                    b.bootstrap_servers,
                    "--alter",
                    "--name",
                    "java-clients",
                    "--metrics",
                    "org.apache.kafka.producer.,org.apache.kafka.consumer.",
                    "--interval",
                    "500",
                    "--match",
                    "client_software_name=apache-kafka-java",
                ],
            )
        assert code == 0
        yield b


def java_client(tool: str, args: list[str], **popen) -> subprocess.Popen:
    return subprocess.Popen(
        K.java_command(K.TOOLS[tool], args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen
    )


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_value(proc: subprocess.Popen, port: int, client_id: str, name: str, want: float) -> dict:
    """The client's series once ``name`` (its all-topics series) shows ``want``: the client pushes
    every 500 ms while it runs, each push adding what it did since the last."""
    deadline = time.monotonic() + 30
    while True:
        series = client_series(port, client_id)
        if [v for (n, ls), v in series.items() if n == name and "topic" not in dict(ls)] == [want]:
            return series
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, sorted((n, v) for (n, _ls), v in series.items())
        time.sleep(0.2)


def check_labels(broker, series: dict, client_id: str, prefix: str) -> None:
    """One client instance, the Java client's software name and version, the id the broker handed
    it in GetTelemetrySubscriptions, and only the subscribed prefix."""
    labels = {dict(ls)["client_instance_id"]: dict(ls) for _name, ls in series}
    assert len(labels) == 1, labels
    (iid, attrs), *_ = labels.items()
    assert attrs["client_software_name"] == "apache-kafka-java"
    assert attrs["client_software_version"] == K.kafka_version()
    known = broker._server.client_telemetry.instances
    assert [kafka_uuid(i) for i, inst in known.items() if inst.attributes["client_id"] == client_id] == [iid]
    names = {name for name, _labels in series}
    assert all(n.startswith(prefix) for n in names), names


def client_series(port: int, client_id: str) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.labels.get("client_id") == client_id
    }


def test_the_java_producer_pushes_telemetry_that_appears_in_the_metrics_endpoint(broker):
    client_id, topic = "java-producer", "java-telemetry"
    producer = java_client(
        "kafka-console-producer.sh",
        ["--bootstrap-server", broker.bootstrap_servers, "--topic", topic]
        + ["--producer-property", f"client.id={client_id}"],
        stdin=subprocess.PIPE,
    )
    try:
        producer.stdin.write("".join(f"record-{i}\n" for i in range(RECORDS)))
        producer.stdin.flush()
        series = wait_for_value(
            producer, broker.metrics_port, client_id, "org_apache_kafka_producer_record_send_total", RECORDS
        )
    finally:
        producer.stdin.close()  # end of input: the console producer closes and exits
        stop(producer)
    assert producer.returncode == 0, producer.stderr.read()[-3000:]
    producer.stderr.close()
    check_labels(broker, series, client_id, "org_apache_kafka_producer_")
    per_topic = [
        v
        for (name, ls), v in series.items()
        if name == "org_apache_kafka_producer_topic_record_send_total" and ("topic", topic) in ls
    ]
    assert per_topic == [RECORDS]


def test_the_java_consumer_pushes_telemetry_too(broker):
    client_id, topic = "java-consumer", "java-telemetry-consumed"
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(RECORDS):
        p.produce(topic, b"%d" % i)
    assert p.flush(10) == 0
    consumer = java_client(
        "kafka-console-consumer.sh",
        [
            "--bootstrap-server",
            broker.bootstrap_servers,
            "--topic",
            topic,
            "--from-beginning",
            "--consumer-property",
            f"client.id={client_id}",
        ],
    )
    try:
        series = wait_for_value(
            consumer,
            broker.metrics_port,
            client_id,
            "org_apache_kafka_consumer_fetch_manager_records_consumed_total",
            RECORDS,
        )
    finally:
        consumer.terminate()  # the console consumer's shutdown hook closes it
        stop(consumer)
        consumer.stderr.close()
    check_labels(broker, series, client_id, "org_apache_kafka_consumer_")
    per_topic = [
        v
        for (name, ls), v in series.items()
        if name == "org_apache_kafka_consumer_fetch_manager_records_consumed_total" and ("topic", topic) in ls
    ]
    assert per_topic == [RECORDS]
