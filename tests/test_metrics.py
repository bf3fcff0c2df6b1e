"""Prometheus metrics (issue 29): ``metrics.listener`` serves /metrics with the JMX exporter's
names for Kafka's MBeans (docs/metrics.md), and the values match what was done: bytes and
messages in and out, requests and errors per API, log sizes and end offsets, consumer lag, and
under-replicated partitions on a leader while a follower's process is stopped (issue test 1)."""

from __future__ import annotations

import datetime
import json
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import SimpleNamespace as NS

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic
from prometheus_client.parser import text_string_to_metric_families

from kesque.client.share_consumer import ShareConsumer
from kesque.config.broker import KAFKA_INTERNAL_BROKER_KEYS, BrokerConfig
from kesque.config.types import ConfigError
from kesque.metrics import stats
from kesque.metrics.collectors import BrokerCollector, Sources
from kesque.metrics.stats import (
    PENDING_CAP,
    PENDING_FIELDS,
    TOTAL_TIME_BUCKETS_MS,
    BrokerTopicStats,
    RequestMetrics,
    error_counts,
)
from kesque.server.drivers.share_manager import SharePartitionManager as SPM
from kesque.share.partition import SharePartition
from kesque.testing.broker import Broker
from kesque.testing.cluster import Cluster

ROOT = pathlib.Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """(sample name, labels) -> value, parsed with prometheus-client's own text parser."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# ======================================================================== config and cores


@pytest.mark.parametrize("bad", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://h:70000"])
def test_a_bad_metrics_listener_names_the_key(bad):
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"metrics.listener": bad})
    assert e.value.name == "metrics.listener"
    assert "metrics.listener" in str(e.value)


def test_a_busy_metrics_port_stops_the_start_naming_the_key():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        b = Broker(config={"metrics.listener": f"http://127.0.0.1:{port}"})  # `kesque serve`
        try:
            with pytest.raises(Exception) as e:
                b.start(60)
        finally:
            b.close()
    assert "Unable to listen on" in str(e.value) and "metrics.listener" in str(e.value)


def test_metrics_listener_is_off_unless_set_and_not_described():
    assert BrokerConfig({}).get("metrics.listener") is None
    assert "metrics.listener" in KAFKA_INTERNAL_BROKER_KEYS


def test_request_time_histogram_buckets_and_fetch_names():
    m = RequestMetrics()
    ms = 1_000_000  # the request path gives ns
    m.record(0, 9, 200_000)
    m.record(0, 9, ms // 2)  # le="0.5" holds it
    m.record(0, 10, 7 * ms)
    m.record(0, 10, 10**9 * ms)
    m.record(1, 16, 3 * ms, follower=True)
    m.record_phases(1, 100, 2 * ms, 500 * ms, 3 * ms, follower=True)
    m.record_throttle(0, 7)  # one of the four Produces throttled 7 ms
    m.record_throttle(1, 2000, follower=True)
    requests, _errors, buckets, sums, phases, throttles = m.snapshot()
    produce_throttles, produce_throttled_ms = throttles[0]
    assert produce_throttles[0] == 3 and produce_throttles[TOTAL_TIME_BUCKETS_MS.index(10.0)] == 1
    assert sum(produce_throttles) == 4 and produce_throttled_ms == 7
    assert throttles[-2][0][TOTAL_TIME_BUCKETS_MS.index(2500.0)] == 1  # as FetchFollower too
    queue, queue_sum = phases[(1, "RequestQueueTimeMs")]
    assert queue[0] == 1 and queue_sum == pytest.approx(100 / 1e6)
    remote, remote_sum = phases[(-2, "RemoteTimeMs")]  # FetchFollower's too
    assert remote[TOTAL_TIME_BUCKETS_MS.index(500.0)] == 1 and remote_sum == 500.0
    assert requests == {(0, 9): 2, (0, 10): 2, (1, 16): 1, (-2, 16): 1}
    assert buckets[0][0] == 2 and buckets[0][TOTAL_TIME_BUCKETS_MS.index(10.0)] == 1 and buckets[0][-1] == 1
    assert sums[0] == pytest.approx(0.2 + 0.5 + 7.0 + 1e9)
    fam = {f.name: f for f in BrokerCollector(_sources(request_metrics=m)).collect()}
    hist = fam["kafka_network_requestmetrics_totaltimems"]
    produce = {s.labels.get("le"): s.value for s in hist.samples if s.labels["request"] == "Produce"}
    assert produce["0.5"] == 2 and produce["10.0"] == 3 and produce["+Inf"] == 4
    throttle = {
        s.labels.get("le"): s.value
        for s in fam["kafka_network_requestmetrics_throttletimems"].samples
        if s.labels["request"] == "Produce"
    }
    assert throttle["0.5"] == 3 and throttle["10.0"] == 4 and throttle["+Inf"] == 4
    names = {s.labels["request"] for s in fam["kafka_network_requestmetrics_requests"].samples}
    assert names == {"Produce", "Fetch", "FetchFollower"}


def _noted_requests(rng, n):
    """``n`` requests' clock readings (RequestMetrics.note's arguments), often exactly on a
    bucket bound, with waits, reads after the request (queue 0), connections without reads and
    handlers whose return was not noted."""
    bounds = [0, *(int(ms * 1e6) for ms in TOTAL_TIME_BUCKETS_MS)]

    def step():
        return rng.choice(bounds) if rng.random() < 0.3 else rng.randrange(0, 12 * 10**9)

    for i in range(n):
        api, version = rng.choice([(0, 9), (0, 11), (1, 16), (1, 16), (3, 12)])
        recv = 10**12 + i
        read = rng.choice([0, recv - step(), recv + step()])
        local = recv + step()
        remote = local + step() if rng.random() < 0.3 else 0
        end = (remote or local) + step()
        yield (
            api,
            version,
            api == 1 and rng.random() < 0.5,
            read,
            recv,
            0 if rng.random() < 0.05 else local,
            remote,
            end,
        )


def test_pending_requests_fold_into_the_same_histograms_as_one_at_a_time():
    # the request path notes clock readings (RequestMetrics.note) and they are folded in bulk:
    # the same counts and sums as record + record_phases per request, whatever the mix of APIs,
    # versions and Fetch kinds
    bulk, one = RequestMetrics(), RequestMetrics()
    for noted in _noted_requests(random.Random(29), 2 * PENDING_CAP + 100):
        bulk.note(*noted)
        api, version, follower, read, recv, local, remote, end = noted
        local = local or end
        one.record(api, version, end - recv, follower)
        queue = max(recv - read, 0) if read else 0
        one.record_phases(api, queue, local - recv, remote - local if remote else 0, end - (remote or local), follower)
    assert len(bulk.pending) == 100 * PENDING_FIELDS  # folded twice at the cap, the rest at the snapshot
    assert bulk.snapshot() == one.snapshot() and not bulk.pending
    uniform = RequestMetrics()  # one API, version and kind: one pass over the batch
    for _ in range(3):
        uniform.note(0, 9, False, 0, 5, 3 + 10**6, 0, 5 + 10**6)  # 1 ms in all, no wait
    _requests, _errors, buckets, sums, phases, _throttles = uniform.snapshot()
    assert buckets[0][TOTAL_TIME_BUCKETS_MS.index(1.0)] == 3 and sums[0] == pytest.approx(3.0)
    assert phases[(0, "RemoteTimeMs")] == ([3] + [0] * len(TOTAL_TIME_BUCKETS_MS), 0.0)


@pytest.mark.skipif(stats._cfold is None, reason="the compiled fold is not built")
def test_the_compiled_fold_counts_as_its_python_reference():
    rng = random.Random(30)
    pending = [x for r in _noted_requests(rng, 3000) for x in r]
    for v in range(80):  # more (API, version, follower) than the compiled fold keeps at once
        pending += (18, v, False, 0, 10, 20, 0, 10 + v * 10**6)
    pending += (1, 16, True, 0, 0, 2**62, 0, 2**63 - 1)  # huge times: sums past 64 bits
    pending += (1, 16, True, 0, 0, 2**62, 0, 2**63 - 1)
    pending += (1, 16, 1, -(2**40), 2**31, 2**31 + 2**30, 0, 2**32)  # an int for a bool, a negative read
    args = (stats.TOTAL_TIME_BUCKETS_NS, stats.FETCH, stats.FETCH_CONSUMER, stats.FETCH_FOLLOWER)
    compiled, python = ({(0, 9): [7] * (len(args[0]) + 2)}, {}), ({(0, 9): [7] * (len(args[0]) + 2)}, {})
    stats._cfold.fold(pending, args[0], *compiled, *args[1:])
    stats._fold_python(pending, args[0], *python, *args[1:])
    assert compiled == python and len(compiled[0]) > 80
    with pytest.raises(ValueError):
        stats._cfold.fold(pending[:-1], args[0], *compiled, *args[1:])


@pytest.mark.parametrize(
    "note, extend",
    [
        pytest.param(
            getattr(stats._cfold, "note", None),
            getattr(stats._cfold, "extend", None),
            marks=pytest.mark.skipif(stats._cfold is None, reason="the compiled fold is not built"),
            id="compiled",
        ),
        pytest.param(stats._note_python, stats._extend_python, id="python"),
    ],
)
def test_the_request_path_adds_its_items_and_the_time(note, extend):
    # what the request path adds per request (note: its readings, then the time the response is
    # queued, on perf_counter_ns' clock) and per partition appended (extend); True at the cap
    pending = ["x"]
    before = time.perf_counter_ns()
    assert note(pending, 10, 0, 9, False, 0, before, 0, 0) is False
    after = time.perf_counter_ns()
    assert pending[:-1] == ["x", 0, 9, False, 0, before, 0, 0] and before <= pending[-1] <= after
    assert note(pending, 10, "a") is True and len(pending) == 11
    assert extend(pending, 14, "t", 2**70, 3) is True and pending[-3:] == ["t", 2**70, 3]
    assert extend(pending, 15) is False and len(pending) == 14
    room = sys.getsizeof(pending)
    (list.clear if note is stats._note_python else stats._cfold.reset)(pending)
    assert pending == [] and note(pending, 3, "b") is False and pending[0] == "b"
    if note is not stats._note_python:
        assert sys.getsizeof(pending) == room  # the compiled reset keeps the list's room for the next batch
        assert stats.note is note  # the compiled clock is perf_counter_ns' here
        with pytest.raises(TypeError):
            note((), 1, 2)


def test_error_counts_walk_a_kio_response():
    topic = MetadataResponseTopic  # an error code per topic, nested in the response
    resp = MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=1,
        topics=tuple(
            topic(
                error_code=code, name=n, topic_id=None, is_internal=False, partitions=(), topic_authorized_operations=0
            )
            for code, n in ((0, "a"), (3, "b"), (3, "c"))
        ),
    )
    counts = {}
    error_counts(resp, counts)
    assert counts == {0: 1, 3: 2}


def test_deleted_topics_leave_the_per_topic_series_but_not_the_totals():
    stats = BrokerTopicStats()
    stats.produced("a", 100, 2)
    stats.produced("b", 50, 1)
    stats.retire({"b"})
    per_topic, totals, _out, _in = stats.snapshot()
    assert set(per_topic) == {"b"} and totals[0] == 150 and totals[1] == 3


def test_appends_noted_by_the_produce_path_are_counted_at_the_snapshot():
    bulk, one = BrokerTopicStats(), BrokerTopicStats()
    for batch in ([("a", 100, 2)] * 3, [("a", 10, 1), ("b", 50, 1), ("a", 7, 3)]):  # one topic, then a mix
        for appended in batch:
            bulk.pending += appended  # what the Produce handler adds per partition
            one.produced(*appended)
        assert bulk.snapshot() == one.snapshot() and not bulk.pending
    bulk.pending += ("b", 1, 1)
    bulk.retire({"a"})  # b is deleted: what it had pending still counts in the totals
    _per_topic, totals, _out, _in = bulk.snapshot()
    assert totals[:2] == (100 * 3 + 10 + 50 + 7 + 1, 2 * 3 + 1 + 1 + 3 + 1)


def test_partitions_are_copied_in_chunks_one_loop_turn_each():
    def part(i: int):
        log = NS(
            config=NS(min_insync_replicas=2),
            size_in_bytes=lambda: 100,
            log_start_offset=0,
            log_end_offset=10,
            high_watermark=7,
            local_log=NS(segments=[1]),
        )
        return NS(log=log, repl=NS(is_leader=i % 2 == 0, replicas=[1, 2, 3], isr=[1, 2] if i == 0 else [1, 2, 3]))

    sources = _sources()
    sources.replica_manager.partitions = {("wide", i): part(i) for i in range(2500)}
    turns = []
    collector = BrokerCollector(sources, lambda fn: turns.append(fn) or fn())
    fams = {f.name: f for f in collector.collect()}
    assert len(turns) == 1 + 3  # the rest, then 1,000 + 1,000 + 500 partitions
    assert len(fams["kafka_log_log_size"].samples) == 2500
    assert fams["kafka_server_replicamanager_leadercount"].samples[0].value == 1250
    assert fams["kafka_server_replicamanager_underreplicatedpartitions"].samples[0].value == 1  # partition 0
    assert fams["kafka_server_replicamanager_atminisrpartitioncount"].samples[0].value == 1


def test_share_partitions_are_read_in_chunks_one_loop_turn_each():
    refs = []
    for i in range(250):
        sp = SharePartition(100, max_record_locks=10)
        sp.acquire("m", 104, 5, now_ms=0)  # 100-104 acquired
        sp.acknowledge("m", [(101, 101, [1])], now_ms=1)  # 101 accepted, behind 100
        sp.expire_locks(10**9)  # the others' locks run out: available again
        refs.append((("g", "tid", i), sp))
    sources = _sources(share_manager=NS(metrics_refs=lambda: (refs, {1: 250}), metrics_rows=SPM.metrics_rows))
    sources.image.topics_by_id = {"tid": NS(name="shared", partitions={})}
    turns = []
    fams = {f.name: f for f in BrokerCollector(sources, lambda fn: turns.append(fn) or fn()).collect()}
    assert len(turns) == 1 + 3  # the rest, then 100 + 100 + 50 share partitions
    states = [s for s in fams["kesque_server_sharepartition_records"].samples if s.labels["partition"] == "249"]
    assert {s.labels["state"]: s.value for s in states} == {
        "Available": 4,
        "Acquired": 0,
        "Acknowledged": 1,
        "Archived": 0,
    }
    assert states[0].labels["topic"] == "shared" and len(fams["kesque_server_sharepartition_records"].samples) == 1000
    timeouts = fams["kafka_server_sharepartitionmetrics_acquisitionlocktimeout"].samples
    assert len(timeouts) == 250 and {s.value for s in timeouts} == {4}
    acks = {s.labels["ackType"]: s.value for s in fams["kafka_server_sharegroupmetrics_recordacknowledgements"].samples}
    assert acks == {"Accept": 250}


def _sources(**kw) -> Sources:
    class Image:
        topics_by_id: dict = {}
        brokers: dict = {}
        offset = -1

    class RM:
        partitions: dict = {}
        offline_partitions: set = set()
        isr_shrinks = isr_expands = failed_isr_updates = 0

    return Sources(
        **{
            "node_id": 1,
            "topic_stats": BrokerTopicStats(),
            "request_metrics": RequestMetrics(),
            "image": Image(),
            "replica_manager": RM(),
            **kw,
        }
    )


# ======================================================================== one broker


@pytest.fixture(scope="module")
def broker():
    port = free_port()
    config = {
        "metrics.listener": f"http://127.0.0.1:{port}",
        "log.cleaner.backoff.ms": "300",
        "group.share.enable": "true",
        "group.share.min.record.lock.duration.ms": "1000",  # the share test's locks run out in 1 s
    }
    with Broker(mode="thread", config=config) as b:
        b.metrics_port = port
        yield b


def test_bytes_messages_requests_log_size_and_lag(broker):
    topic, n, size = "metered", 40, 300
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, bytes([i]) * size, partition=0)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "metered-g", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 20
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    assert got == n

    def waited() -> bool:
        # a Fetch that finds nothing waits (fetch.wait.max.ms): remote time, not local. Under load
        # every Fetch of the loop above may have found records; polling on reaches the log's end
        c.poll(0.2)
        s = scrape(broker.metrics_port)
        return value(s, "kafka_network_requestmetrics_remotetimems_sum", request="FetchConsumer") > value(
            s, "kafka_network_requestmetrics_localtimems_sum", request="FetchConsumer"
        )

    wait_for(waited, 20, "a consumer Fetch that waited at the log's end")
    c.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False)
    c.close()

    s = scrape(broker.metrics_port)
    bytes_in = value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    # the batches are stored as they came: the log holds exactly the bytes counted in
    assert bytes_in == value(s, "kafka_log_log_size", topic=topic, partition=0) > n * size
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == bytes_in  # read once
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total") >= bytes_in  # all topics
    assert value(s, "kafka_log_log_logendoffset", topic=topic, partition=0) == n
    assert value(s, "kafka_consumergroup_current_offset", consumergroup="metered-g", topic=topic, partition=0) == 15
    assert value(s, "kafka_consumergroup_lag", consumergroup="metered-g", topic=topic, partition=0) == n - 15
    produce_requests = sum(
        v
        for (name, labels), v in s.items()
        if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels
    )
    assert produce_requests >= 1
    # every partition appended is a NONE in Produce's errors (counted with the topics' appends)
    appended = value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total") - value(
        s, "kafka_server_brokertopicmetrics_failedproducerequests_total"
    )
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == appended >= 1
    assert value(s, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produce_requests
    # the total split as Kafka's RequestChannel splits it: each phase counts every request
    for phase in ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems"):
        assert value(s, f"kafka_network_requestmetrics_{phase}_count", request="Produce") == produce_requests
    fetches = value(s, "kafka_network_requestmetrics_localtimems_count", request="FetchConsumer")
    assert fetches == value(s, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") >= 1
    # a consumer's Fetch that found nothing waited (fetch.wait.max.ms): remote time, not local
    assert value(s, "kafka_network_requestmetrics_remotetimems_sum", request="FetchConsumer") > value(
        s, "kafka_network_requestmetrics_localtimems_sum", request="FetchConsumer"
    )
    # the metadata quorum's leader commits its own records: a commit latency (ms, last minute)
    assert (
        value(s, "kafka_server_raftmetrics_commit_latency_max")
        >= value(s, "kafka_server_raftmetrics_commit_latency_avg")
        >= 0
    )
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= 1
    assert value(s, "kafka_network_requestmetrics_errors_total", request="OffsetCommit", error="NONE") >= 1
    assert value(s, "kafka_server_replicamanager_leadercount") >= 1
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(s, "kafka_server_raftmetrics_current_state", current_state="leader") == 1


def test_an_error_is_counted_by_its_kafka_name(broker):
    # the client lets it go (its own limit raised); the broker refuses it: MESSAGE_TOO_LARGE
    p = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "message.max.bytes": 5_000_000, "message.timeout.ms": 5000}
    )
    reports = []
    p.produce("metered-too-big", b"x" * 2_000_000, on_delivery=lambda err, _m: reports.append(err))
    p.flush(10)
    assert reports and reports[0] is not None
    s = scrape(broker.metrics_port)
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="MESSAGE_TOO_LARGE") >= 1
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="metered-too-big") >= 1
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="metered-too-big") == 0


def test_connections_per_listener(broker):
    def plaintext_connections() -> float:
        s = scrape(broker.metrics_port)
        labels = {"listener": "PLAINTEXT", "networkProcessor": 0}
        return value(s, "kafka_server_socket_server_metrics_connection_count", **labels) or 0

    before = plaintext_connections()
    with socket.create_connection(("127.0.0.1", broker.port)), socket.create_connection(("127.0.0.1", broker.port)):
        wait_for(lambda: plaintext_connections() >= before + 2, 10, "two more connections")
    wait_for(lambda: plaintext_connections() == before, 10, "the two closed")


def test_quota_rates_and_throttling_per_entity(broker):
    r = subprocess.run(
        [sys.executable, "-m", "kesque", "configs", "--bootstrap-server", broker.bootstrap_servers, "--alter"]
        + ["--entity-type", "clients", "--entity-name", "slowpoke", "--add-config", "producer_byte_rate=1000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    time.sleep(0.5)  # the quota reaches the broker's image with the next committed metadata
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "client.id": "slowpoke", "linger.ms": 20})
    for _ in range(100):
        p.produce("metered-quota", b"q" * 1000)
    assert p.flush(30) == 0

    def slowpoke(name: str) -> float:
        return sum(
            v
            for (n, labels), v in scrape(broker.metrics_port).items()
            if n == name and ("clientId", "slowpoke") in labels and ("resource", "Produce") in labels
        )

    assert slowpoke("kesque_server_quota_throttles_total") >= 1
    assert slowpoke("kesque_server_quota_throttle_time_ms_total") > 0
    assert slowpoke("kafka_server_quota_byte_rate") > 0
    s = scrape(broker.metrics_port)  # Kafka's RequestMetrics ThrottleTimeMs: some Produce was throttled
    produced = value(s, "kafka_network_requestmetrics_throttletimems_count", request="Produce")
    assert value(s, "kafka_network_requestmetrics_throttletimems_bucket", request="Produce", le="0.5") < produced
    assert value(s, "kafka_network_requestmetrics_throttletimems_sum", request="Produce") > 0


def test_log_flush_time(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("metered-flushed", 1, 1, config={"flush.messages": "1"})])["metered-flushed"].result(
        20
    )
    before = value(scrape(broker.metrics_port), "kafka_log_logflushstats_logflushrateandtimems_count") or 0
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(5):
        p.produce("metered-flushed", b"%d" % i, partition=0)
        p.flush(10)  # one batch, one flush, each
    s = scrape(broker.metrics_port)
    assert value(s, "kafka_log_logflushstats_logflushrateandtimems_count") >= before + 5
    assert value(s, "kafka_log_logflushstats_logflushrateandtimems_bucket", le="+Inf") == value(
        s, "kafka_log_logflushstats_logflushrateandtimems_count"
    )


def test_log_cleaner_gauges(broker):
    topic = "metered-compacted"
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(20)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(60):
        p.produce(topic, b"v%d" % i, key=b"k%d" % (i % 3), partition=0)
    assert p.flush(10) == 0
    time.sleep(0.2)
    p.produce(topic, b"roll", key=b"k0", partition=0)  # past segment.ms: the dirty segment rolls
    assert p.flush(10) == 0
    s = wait_for(
        lambda: (
            (s := scrape(broker.metrics_port))
            and (value(s, "kafka_log_logcleaner_cleaner_recopy_percent") or 0) > 0
            and s
        ),
        20,
        "a cleaning",
    )
    assert value(s, "kafka_log_logcleaner_max_clean_time_secs") > 0
    assert 0 < value(s, "kafka_log_logcleaner_cleaner_recopy_percent") < 100  # 3 keys of 60 records kept


def test_transactions_and_groups_per_state(broker):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "metered-txn"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce("metered-txn-topic", b"t", partition=0)
    p.commit_transaction(20)
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "metered-txn-g"})
    c.commit(offsets=[TopicPartition("metered-txn-topic", 0, 1)], asynchronous=False)
    c.close()
    s = scrape(broker.metrics_port)
    assert value(s, "kesque_transaction_coordinator_transactions", state="COMPLETE_COMMIT") >= 1
    assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="classic") >= 1
    assert value(s, "kafka_server_group_coordinator_metrics_group_count", protocol="share") is not None


# long enough for a loaded machine's acquire-to-acknowledge (1 s made the first commit find the
# locks already run out: INVALID_RECORD_STATE in a clean-clone run of four workers)
LOCK_MS = 4000


def test_share_partition_states(broker):
    """A share consumer acquires records: the scrape shows them acquired; after it accepts some
    and releases one, acknowledged and available; a lock that runs out is counted, and once all
    are accepted the window is empty and its start offset at the end."""
    topic, group = "metered-share", "metered-share-g"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    res = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS)}.items()
        ],
    )
    admin.incremental_alter_configs([res])[res].result(20)
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(5):
        p.produce(topic, b"%d" % i, partition=0)
    assert p.flush(10) == 0
    acks_before = {
        t: value(scrape(broker.metrics_port), "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType=t)
        for t in ("Accept", "Release")
    }
    labels = {"group": group, "topic": topic, "partition": 0}

    def shown(s):
        return {
            st: value(s, "kesque_server_sharepartition_records", state=st, **labels)
            for st in ("Available", "Acquired", "Acknowledged", "Archived")
        }

    c1 = ShareConsumer(broker.bootstrap_servers, group, acknowledgement_mode="explicit", timeout=20)
    c2 = ShareConsumer(broker.bootstrap_servers, group, timeout=20)
    try:
        c1.subscribe([topic])
        msgs = []
        wait_for(lambda: msgs.extend(c1.poll(0.5)) or len(msgs) >= 5, 20, "five records acquired")
        s = scrape(broker.metrics_port)
        assert shown(s) == {"Available": 0, "Acquired": 5, "Acknowledged": 0, "Archived": 0}
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 5
        assert value(s, "kesque_server_sharepartition_startoffset", **labels) == 0
        assert value(s, "kesque_server_sharepartition_endoffset", **labels) == 5
        assert value(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 0

        for m in msgs:
            c1.acknowledge(m, "release" if m.offset == 0 else "accept")
        assert set(c1.commit_sync().values()) == {0}
        s = scrape(broker.metrics_port)
        assert shown(s) == {"Available": 1, "Acquired": 0, "Acknowledged": 4, "Archived": 0}
        assert value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == (
            acks_before["Accept"] + 4
        )
        assert value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Release") == (
            acks_before["Release"] + 1
        )

        again = []
        wait_for(lambda: again.extend(c1.poll(0.5)) or again, 20, "the released record again")
        assert [m.offset for m in again] == [0]
        assert shown(scrape(broker.metrics_port))["Acquired"] == 1
        time.sleep(LOCK_MS / 1000 + 0.2)  # c1 holds it past its lock: c2's fetch finds it run out, takes it
        c2.subscribe([topic])
        taken = []
        wait_for(lambda: taken.extend(c2.poll(0.5)) or taken, 20, "the expired record at the other member")
        assert [m.offset for m in taken] == [0]
        c2.commit_sync()
        s = scrape(broker.metrics_port)
        assert value(s, "kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", **labels) == 1
        assert value(s, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 0
        assert value(s, "kesque_server_sharepartition_startoffset", **labels) == 5
        assert value(s, "kafka_server_sharegroupmetrics_recordacknowledgements_total", ackType="Accept") == (
            acks_before["Accept"] + 5
        )
    finally:
        c2.close()
        c1.close()


def test_bad_scrapes_get_a_4xx_and_the_broker_is_unaffected(broker):
    with socket.create_connection(("127.0.0.1", broker.metrics_port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert b" 400 " in sock.recv(1000).split(b"\r\n")[0] + b" "
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics?" + "x" * 70_000, timeout=5)
    assert 400 <= e.value.code < 500
    assert scrape(broker.metrics_port)  # still serving, and so is the broker:
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce("metered-after", b"v")
    assert p.flush(10) == 0


def test_the_grafana_dashboard_queries_only_what_a_broker_exposes(broker):
    """docs/grafana/kesque.json parses, and every metric name its panels query is in a live scrape."""
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce("dashboard", b"v", partition=0)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "dashboard-g"})
    c.commit(offsets=[TopicPartition("dashboard", 0, 0)], asynchronous=False)  # a group: its lag series
    c.close()
    dash = json.loads((ROOT / "docs" / "grafana" / "kesque.json").read_text())
    exprs = [t["expr"] for panel in dash["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 8
    names = {m for e in exprs for m in re.findall(r"\b((?:kafka|kesque|process)_[a-z0-9_]+)", e)}
    exposed = {name for name, _labels in scrape(broker.metrics_port)}
    assert names and names <= exposed, sorted(names - exposed)


def test_no_listener_no_endpoint_no_counting():
    with Broker(mode="thread") as b:
        assert b._server.metrics_endpoint is None and b._server.request_metrics is None


# ======================================================================== a cluster (issue test 1)


def test_a_stopped_follower_raises_under_replicated_partitions_on_the_leader(tmp_path):
    config = {
        "controller.quorum.election.timeout.ms": "300",
        "controller.quorum.fetch.timeout.ms": "600",
        "controller.quorum.request.timeout.ms": "500",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "8000",
        "replica.lag.time.max.ms": "1500",
        "replica.fetch.backoff.ms": "200",
    }
    c = Cluster(nodes=3, data_dir=str(tmp_path), config=config, host="127.0.0.1")
    ports = {}
    for node_id, b in c.nodes.items():  # an endpoint of its own for each node
        ports[node_id] = free_port()
        b.config["metrics.listener"] = f"http://127.0.0.1:{ports[node_id]}"
    with c:
        try:
            topic = "urp"
            admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
            admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(20)
            isr_full = lambda: value(  # noqa: E731
                scrape(ports[1]), "kafka_cluster_partition_insyncreplicascount", topic=topic, partition=0
            )
            wait_for(lambda: isr_full() == 3, 20, "an ISR of 3")
            p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
            for i in range(20):
                p.produce(topic, b"%03d" % i, partition=0)
            assert p.flush(20) == 0
            s = scrape(ports[1])
            # bytes in on the leader are the bytes its log holds; followers count none as "in"
            assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == value(
                s, "kafka_log_log_size", topic=topic, partition=0
            )
            assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 20
            # acks=all appends answered once the followers have them: each a NONE, once
            appended = value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic)
            assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == appended
            assert value(scrape(ports[2]), "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) is None
            # what the followers appended is their ReplicationBytesIn, the leader's ReplicationBytesOut
            repl_in = lambda n: value(scrape(ports[n]), "kafka_server_brokertopicmetrics_replicationbytesin_total")  # noqa: E731
            wait_for(lambda: repl_in(2) >= value(s, "kafka_log_log_size", topic=topic, partition=0), 20, "bytes in")
            assert value(s, "kafka_server_brokertopicmetrics_replicationbytesout_total") > 0
            assert repl_in(1) == 0
            raft_leader = int(value(s, "kafka_server_raftmetrics_current_leader"))
            follower = 3 if raft_leader != 3 else 2  # stopping the active controller would stall the ISR change
            before = value(s, "kafka_server_replicamanager_isrshrinks_total")
            urp = lambda: value(scrape(ports[1]), "kafka_server_replicamanager_underreplicatedpartitions")  # noqa: E731
            assert urp() == 0
            c.node(follower).process.send_signal(signal.SIGSTOP)
            try:
                # a follower is out of sync once the leader's log end has moved past it for
                # replica.lag.time.max.ms (Kafka's rule): records go on, acknowledged by the leader
                p1 = Producer({"bootstrap.servers": c.node(1).bootstrap_servers, "acks": "1"})
                p1.produce(topic, b"while-stopped", partition=0)
                assert p1.flush(10) == 0
                wait_for(lambda: urp() >= 1, 20, "under-replicated partitions on the leader")
                s = scrape(ports[1])
                assert value(s, "kafka_cluster_partition_underreplicated", topic=topic, partition=0) == 1
                assert value(s, "kafka_server_replicamanager_isrshrinks_total") > before
            finally:
                c.node(follower).process.send_signal(signal.SIGCONT)
            wait_for(lambda: urp() == 0, 20, "the follower back in the ISR")
            assert value(scrape(ports[1]), "kafka_server_replicamanager_isrexpands_total") >= 1
        finally:
            for b in c.nodes.values():  # the last node's controlled shutdown would wait for a lost quorum
                if b.process is not None:
                    b.kill()
