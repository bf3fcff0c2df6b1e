"""KIP-714 client telemetry (issue 29): client metrics subscriptions as CLIENT_METRICS config
resources (``kesque client-metrics``, kafka-client-metrics.sh's flags and output),
GetTelemetrySubscriptions and PushTelemetry checked as Kafka's ClientMetricsManager checks them,
the pushed OTLP metrics on ``/metrics``, and librdkafka pushing to kesque (issue test 4)."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from prometheus_client.parser import text_string_to_metric_families

from kesque.cli.tools import _console
from kesque.config.client_metrics import Subscription
from kesque.errors import ErrorCode
from kesque.metrics.telemetry import ClientTelemetry, client_families, kafka_uuid, subscription_id
from kesque.protocol.api_keys import ApiKeys
from kesque.records.compression import GZIP, ZSTD, compress
from kesque.server.apis import served_versions
from kesque.testing.broker import Broker
from wire import Msg, WireClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def payload(gauge: float = 1.5, delta: int = 3, node: str = "1") -> bytes:
    """A MetricsData with a gauge and a delta counter, as a client pushes it."""
    attrs = [KeyValue(key="node.id", value=AnyValue(string_value=node))]
    metrics = [
        Metric(
            name="org.apache.kafka.producer.node.request.latency.avg",
            gauge=Gauge(data_points=[NumberDataPoint(as_double=gauge, attributes=attrs)]),
        ),
        Metric(
            name="org.apache.kafka.producer.connection.creation.total",
            sum=Sum(
                data_points=[NumberDataPoint(as_int=delta)],
                is_monotonic=True,
                aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
            ),
        ),
    ]
    data = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=metrics)])])
    return data.SerializeToString()


# ======================================================================== in-process cores


def test_subscription_matching_takes_the_union_and_the_shortest_interval():
    subs = [
        Subscription("a", {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000"}),
        Subscription("b", {"metrics": "org.apache.kafka.consumer.", "interval.ms": "1000", "match": "client_id=app.*"}),
        Subscription("c", {"metrics": "x.", "match": "client_software_name=java"}),
    ]
    image = type("Image", (), {"offset": 1, "configs": {(16, s.name): {} for s in subs}})()
    t = ClientTelemetry(image, 1024, now_ms=lambda: 10**9)
    t._parsed, t._subs, t._image_offset = subs, {"x": {}}, 1
    inst = t.get_subscriptions(None, lambda iid: {"client_id": "app-1", "client_software_name": "librdkafka"})
    assert inst.metrics == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    assert inst.interval_ms == 1000
    assert inst.subscription_id == subscription_id(inst.metrics, 1000, inst.id)
    # a regex must match the whole value (Java's Matcher.matches)
    assert not Subscription("d", {"match": "client_id=app"}).matches({"client_id": "app-1"})


def test_push_checks_in_kafkas_order_and_keeps_the_series():
    now = [10**9]
    image = type("Image", (), {"offset": 1, "configs": {(16, "all"): {"metrics": "*", "interval.ms": "1000"}}})()
    t = ClientTelemetry(image, 200, now_ms=lambda: now[0])
    attrs = {"client_id": "app", "client_software_name": "librdkafka", "client_software_version": "2.16.0"}
    inst = t.get_subscriptions(None, lambda iid: {**attrs, "client_instance_id": iid})
    assert inst.metrics == ["*"]

    def push(sub=None, data=b"", codec=0, terminating=False):
        req = type("R", (), {})()
        req.client_instance_id, req.subscription_id = inst.id, inst.subscription_id if sub is None else sub
        req.compression_type, req.metrics, req.terminating = codec, data, terminating
        try:
            t.push(req, lambda iid: attrs)
        except Exception as e:
            return e.code
        return ErrorCode.none

    assert push(data=compress(ZSTD, payload()), codec=ZSTD) == ErrorCode.none  # the first push after a get
    assert push(data=payload()) == ErrorCode.throttling_quota_exceeded  # before the interval
    now[0] += 1000
    assert push(sub=inst.subscription_id + 1) == ErrorCode.unknown_subscription_id
    now[0] += 1000
    assert push(codec=7) == ErrorCode.unsupported_compression_type
    now[0] += 1000
    assert push(data=b"x" * 201) == ErrorCode.telemetry_too_large
    now[0] += 1000
    assert push(data=b"\xff\xff\xff") == ErrorCode.invalid_record  # not a protobuf
    now[0] += 1000
    assert push(data=compress(GZIP, payload(gauge=2.5, delta=4)), codec=GZIP) == ErrorCode.none
    # a get within the interval is throttled too
    with pytest.raises(Exception) as e:
        t.get_subscriptions(inst.id, lambda iid: attrs)
    assert e.value.code == ErrorCode.throttling_quota_exceeded
    # terminating: accepted early, then nothing more
    assert push(data=payload(), terminating=True) == ErrorCode.none
    assert push(data=payload()) == ErrorCode.invalid_request

    fams = {f.name: f for f in client_families(t.snapshot())}
    gauge = fams["org_apache_kafka_producer_node_request_latency_avg"]
    assert gauge.type == "gauge"
    [s] = gauge.samples
    assert s.value == 1.5  # the terminating push's value, the last one
    assert s.labels["node_id"] == "1" and s.labels["client_instance_id"] == kafka_uuid(inst.id)
    assert s.labels["client_id"] == "app" and s.labels["client_software_name"] == "librdkafka"
    counter = fams["org_apache_kafka_producer_connection_creation"]
    assert counter.type == "counter"
    assert [(x.name, x.value) for x in counter.samples] == [("org_apache_kafka_producer_connection_creation_total", 10)]


def test_telemetry_apis_are_advertised_with_metrics_listener_only():
    assert ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS not in served_versions()
    served = served_versions({"metrics.listener": "http://127.0.0.1:9404"})
    assert served[ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS] == (0, 0) and served[ApiKeys.PUSH_TELEMETRY] == (0, 0)
    assert served_versions()[ApiKeys.LIST_CONFIG_RESOURCES] == (0, 1)


# ======================================================================== one broker


@pytest.fixture(scope="module")
def broker():
    port = free_port()
    with Broker(mode="thread", config={"metrics.listener": f"http://127.0.0.1:{port}"}) as b:
        b.metrics_port = port
        yield b


def client_metrics(broker, *args) -> subprocess.CompletedProcess:
    """``kesque client-metrics`` in this process (as kafka-client-metrics.sh runs it), its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _console("client_metrics", ["--bootstrap-server", broker.bootstrap_servers, *args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_client_metrics_tool_alters_describes_lists_and_deletes(broker):
    r = client_metrics(broker, "--alter", "--name", "tool-sub", "--metrics", "org.apache.kafka.", "--interval", "2000")
    assert (r.returncode, r.stdout) == (0, "Altered client metrics config for tool-sub.\n")
    r = client_metrics(broker, "--alter", "--name", "tool-sub", "--match", "client_id=x.*,client_software_name=java")
    assert r.returncode == 0
    r = client_metrics(broker, "--describe", "--name", "tool-sub")
    assert r.stdout == (
        "Client metrics configs for tool-sub are:\n"
        "  interval.ms=2000\n"
        "  match=client_id=x.*,client_software_name=java\n"
        "  metrics=org.apache.kafka.\n"
    )
    assert "tool-sub" in client_metrics(broker, "--list").stdout.split("\n")
    r = client_metrics(broker, "--alter", "--name", "tool-sub", "--interval", "50")
    assert r.returncode == 1
    assert r.stdout == (
        "Error while executing client metrics command : "
        "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)\n"
    )
    r = client_metrics(broker, "--alter", "--name", "tool-sub", "--match", "nope=1")
    assert r.stdout == "Error while executing client metrics command : Illegal client matching pattern: nope=1\n"
    r = client_metrics(broker, "--delete", "--name", "tool-sub")
    assert (r.returncode, r.stdout) == (0, "Deleted client metrics config for tool-sub.\n")
    r = client_metrics(broker, "--describe", "--name", "tool-sub")
    assert r.stdout == "The client metric resource tool-sub doesn't exist and doesn't have dynamic config.\n"
    r = client_metrics(broker, "--alter")
    assert (r.returncode, r.stderr) == (1, "One of --name or --generate-name must be specified with --alter.\n")


def test_get_and_push_over_the_wire(broker):
    assert (
        client_metrics(broker, "--alter", "--name", "wire-sub", "--metrics", "org.", "--interval", "100").returncode
        == 0
    )
    host, port = broker.bootstrap_servers.split(":")
    with WireClient((host, int(port)), client_id="wire-app") as c:
        g = Msg(ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS, 0)
        resp = c.request(ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS, 0, g(client_instance_id=uuid.UUID(int=0)))
        assert resp.error_code == ErrorCode.none
        assert list(resp.accepted_compression_types) == [4, 3, 1, 2]
        assert resp.push_interval.total_seconds() == 0.1 and resp.delta_temporality
        assert "org." in resp.requested_metrics and resp.telemetry_max_bytes == 1048576
        iid, sub = resp.client_instance_id, resp.subscription_id
        p = Msg(ApiKeys.PUSH_TELEMETRY, 0)
        push = p(client_instance_id=iid, subscription_id=sub, terminating=False, compression_type=0, metrics=payload())
        assert c.request(ApiKeys.PUSH_TELEMETRY, 0, push).error_code == ErrorCode.none
        bad = p(
            client_instance_id=uuid.UUID(int=0), subscription_id=sub, terminating=False, compression_type=0, metrics=b""
        )
        assert c.request(ApiKeys.PUSH_TELEMETRY, 0, bad).error_code == ErrorCode.invalid_request
    samples = scrape(broker.metrics_port)
    labels = {
        "client_instance_id": kafka_uuid(iid),
        "client_id": "wire-app",
        "client_software_name": "unknown",
        "client_software_version": "unknown",
        "node_id": "1",
    }
    assert samples[("org_apache_kafka_producer_node_request_latency_avg", frozenset(labels.items()))] == 1.5
    client_metrics(broker, "--delete", "--name", "wire-sub")


def test_librdkafka_pushes_telemetry_that_appears_in_the_metrics_endpoint(broker):
    """Issue 29's test 4: librdkafka (enable.metrics.push defaults to true) asks for a
    subscription, gets one matching its software name, and pushes; its metrics show up with its
    client instance id."""
    r = client_metrics(
        broker,
        "--alter",
        "--name",
        "rdkafka",
        "--metrics",
        "org.apache.kafka.producer.",
        "--interval",
        "500",
        "--match",
        "client_software_name=confluent-kafka-python",
    )
    assert r.returncode == 0, r.stdout
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "client.id": "rdkafka-telemetry"})
    try:
        deadline = time.monotonic() + 30
        found = {}
        while time.monotonic() < deadline and not found:
            p.produce("telemetry-topic", b"x")
            p.poll(0.3)
            found = {
                k: v
                for k, v in scrape(broker.metrics_port).items()
                if k[0] == "org_apache_kafka_producer_node_request_latency_avg"
                and ("client_id", "rdkafka-telemetry") in k[1]
            }
        assert found, "no telemetry from librdkafka in the scrape"
        labels = dict(next(iter(found))[1])
        assert len(labels["client_instance_id"]) == 22  # Kafka's base64 Uuid
        assert labels["client_software_name"] == "confluent-kafka-python"
    finally:
        p.flush(10)
        client_metrics(broker, "--delete", "--name", "rdkafka")
