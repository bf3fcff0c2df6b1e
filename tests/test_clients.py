"""Client compatibility: real clients against a real kesque broker process.

Clients: confluent-kafka (librdkafka 2.16), kafka-python 3.0, aiokafka 0.14 and kcat (Debian's,
librdkafka 2.0; skipped when kcat is missing). Helpers live in tests/clientlib.py.

Round trips (``test_roundtrip``): for every client and codec a 3-partition topic gets a data
set with keys (incl. null and empty), headers (binary, duplicate, non-ASCII names), explicit
timestamps and sizes from empty to 30 KB (incl. null values), which is read back and compared
byte for byte: key, value, headers, timestamp, partition, offsets contiguous from 0. The
on-disk batches are checked too (the codec the client was asked for is the one stored).

Sizes: 100,000 records for ``none`` and ``lz4`` (the compressed codec run at full size), and
10,000 for gzip, snappy and zstd, to keep the default suite within its time budget on a
2-core machine; cross-client checks (``test_cross_client``) use 10,000. kcat cannot set
timestamps or per-message headers: its records carry fixed ``-H`` headers and a CreateTime
stamped by librdkafka, checked to lie in the produce window; kcat -P skips empty input
lines, so kcat data sets have no null-key + empty-value record, and no null values.

Consumers use ``assign()`` with explicit offsets: consumer groups are not implemented yet.

Also: idempotent producers (producer ids and sequences checked on disk), ListOffsets by
timestamp / earliest / latest / max-timestamp from every client, DeleteRecords,
CreatePartitions, topic and broker configs, DescribeCluster / DescribeTopicPartitions,
auto-creation on produce (on and off), long-poll Fetch timing (raw and through librdkafka),
fetches starting inside a compressed batch, LogAppendTime, Kafka's produce error codes,
kafka-python pinned to older protocol versions, and fetch sizes below one batch (KIP-74).

aiokafka and kcat fetch with non-flexible Fetch versions (v11); a bug in that path once hung
the whole broker, so tests whose consumer is one of them run on a second shared broker
(``v11_broker``) and the main one stays healthy if it comes back.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
import uuid

import pytest

from clientlib import (
    CODEC_IDS,
    CODECS,
    KCAT_HEADERS,
    RawConnection,
    assert_same,
    broker_alive,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    consume_kcat,
    counts,
    decode_fetch,
    decode_fetch_v12,
    expected_by_partition,
    fetch_nonflexible_body,
    fetch_v12_body,
    make_records,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    produce_kcat,
    segment_batches,
    segment_files,
)
from kesque.protocol.api_keys import ApiKeys
from kesque.testing.broker import Broker

HAS_KCAT = shutil.which("kcat") is not None
needs_kcat = pytest.mark.skipif(not HAS_KCAT, reason="kcat not installed (apt-get install kcat)")
KCAT = pytest.param("kcat", marks=needs_kcat)

FULL_SIZE_CODECS = {"none", "lz4"}  # 100k records; the other codecs use 10k (time budget)

# Clients that fetch with a non-flexible Fetch version (v4-v11): aiokafka 0.14 and kcat's
# librdkafka 2.0. They once hung the whole broker (an empty trailing buffer in the response
# made Connection._flush spin), so they read from a broker of their own.
V11_CONSUMERS = {"aiokafka", "kcat"}


def new_topic() -> str:
    return "t-" + uuid.uuid4().hex[:10]


def admin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create_topic(broker, topic: str, partitions: int = 3, config: dict | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(broker)  # keep a reference: futures fail if the client is destroyed
    fs = a.create_topics([NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=10)
    for f in fs.values():
        f.result(15)


def _close(b: Broker) -> None:
    """Stop a broker; kill it if it stopped answering (a spinning broker ignores SIGTERM)."""
    if b.process is not None and broker_alive(b.bootstrap_servers, 1.0):
        b.stop(timeout=10)
    elif b.process is not None:
        b.kill()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    """One broker for the module (shadows conftest's: this one is killed, not waited for,
    if a test left it unable to answer)."""
    b = Broker(data_dir=str(tmp_path_factory.mktemp("kesque") / "data"))
    b.start()
    try:
        yield b
    finally:
        _close(b)


@pytest.fixture(scope="module")
def _v11_broker(tmp_path_factory):
    b = Broker(data_dir=str(tmp_path_factory.mktemp("kesque-v11") / "data"))
    b.start()
    try:
        yield b
    finally:
        _close(b)


@pytest.fixture
def v11_broker(_v11_broker):
    """The broker the Fetch v4-v11 consumers read from; fails fast if an earlier test hung it."""
    if not broker_alive(_v11_broker.bootstrap_servers, 2.0):
        pytest.fail("the v11-consumer broker stopped answering in an earlier test")
    return _v11_broker


@pytest.fixture(autouse=True)
def _brokers_still_answer(request):
    """After each test, the shared brokers it used must still answer (pinpoints the culprit)."""
    request.node.shared_brokers = {}
    for name in ("module_broker", "v11_broker"):
        if name in request.fixturenames:
            request.node.shared_brokers[name] = request.getfixturevalue(name)
    yield
    for name, b in request.node.shared_brokers.items():
        assert broker_alive(b.bootstrap_servers, 5.0), f"{name} stopped answering after this test"


def broker_for(request, *clients):
    name = "v11_broker" if V11_CONSUMERS & set(clients) else "module_broker"
    b = request.node.shared_brokers[name] = request.getfixturevalue(name)
    return b


# =============================================================================== round trips


def _size(codec: str) -> int:
    return 100_000 if codec in FULL_SIZE_CODECS else 10_000


def _dataset(n: int, seed: int, producer: str, consumer: str):
    # kcat -P can send neither null values (next to empty ones) nor per-message headers, and
    # kcat -C prints headers as name=value: data sets touching kcat are text-only, header-less
    return make_records(n, seed=seed, null_values=producer != "kcat", text_only="kcat" in (producer, consumer))


def _produce(client: str, broker, topic: str, recs, codec: str):
    """Produce; returns the produce window (ms) for kcat, whose timestamps librdkafka sets."""
    bs = broker.bootstrap_servers
    if client == "confluent":
        produce_confluent(bs, topic, recs, codec)
    elif client == "kafka-python":
        produce_kafka_python(bs, topic, recs, codec)
    elif client == "aiokafka":
        produce_aiokafka(bs, topic, recs, codec)
    else:
        return produce_kcat(bs, topic, recs, codec)
    return None


def _consume(client: str, broker, topic: str, want: dict, start: dict | None = None):
    fn = {
        "confluent": consume_confluent,
        "kafka-python": consume_kafka_python,
        "aiokafka": consume_aiokafka,
        "kcat": consume_kcat,
    }[client]
    return fn(broker.bootstrap_servers, topic, want, start)


def _expected(producer: str, recs, got=None, window=None):
    """What a consumer must see. For kcat-produced records: the fixed -H headers, and the
    CreateTime librdkafka stamped, taken from the consumed rows and checked to lie inside
    the produce window."""
    if producer != "kcat":
        return expected_by_partition(recs)
    expected = expected_by_partition([type(r)(r.partition, r.key, r.value, KCAT_HEADERS, 0) for r in recs])
    lo, hi = window
    out = {}
    for p, rows in expected.items():
        fixed = []
        for i, row in enumerate(rows):
            ts = got[p][i][4] if i < len(got.get(p, [])) else 0
            assert lo - 1000 <= ts <= hi + 1000, f"kcat record p{p}/{row[0]}: timestamp {ts} outside produce window"
            fixed.append(row[:4] + (ts,))
        out[p] = fixed
    return out


def _check_disk(broker, topic, partitions, codec, producer: str) -> list:
    """The codec the producer was asked for is the one stored (librdkafka and kafka-python
    send a batch uncompressed when compression does not shrink it, as a few all-random
    batches do: those may be stored as 'none'); snappy framing is kept as sent (librdkafka:
    raw snappy; kafka-python, aiokafka: xerial)."""
    batches = [b for p in range(partitions) for b in segment_batches(broker.data_dir, topic, p)]
    assert batches, "no batches on disk"
    codecs = {b.codec for b in batches}
    want = CODEC_IDS[codec]
    assert codecs <= {0, want}, f"stored codecs {codecs}, producer was asked for {codec}"
    compressed = sum(b.count for b in batches if b.codec == want)
    assert compressed >= 0.9 * sum(b.count for b in batches), (
        f"only {compressed} of {sum(b.count for b in batches)} records stored {codec}-compressed"
    )
    if codec == "snappy":
        xerial = producer in ("kafka-python", "aiokafka")
        framing = {b.xerial for b in batches if b.codec == want}
        assert framing == {xerial}, f"snappy framing on disk: xerial={framing}, {producer} sends xerial={xerial}"
    return batches


def _round_trip(request, producer: str, consumer: str, codec: str, n: int, seed: int) -> None:
    broker = broker_for(request, consumer)
    topic = new_topic()
    create_topic(broker, topic)
    recs = _dataset(n, seed, producer, consumer)
    window = _produce(producer, broker, topic, recs, codec)
    _check_disk(broker, topic, 3, codec, producer)
    want = counts(expected_by_partition(recs))
    got = _consume(consumer, broker, topic, want)
    assert_same(got, _expected(producer, recs, got, window), f"{producer}->{consumer}/{codec}")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", KCAT])
def test_roundtrip(request, client, codec):
    """Produce with a client, consume with the same client: byte-identical.
    100k records for none/lz4, 10k for gzip/snappy/zstd."""
    seed = CODECS.index(codec) + 10 * ["confluent", "kafka-python", "aiokafka", "kcat"].index(client)
    _round_trip(request, client, client, codec, _size(codec), seed)


# =============================================================================== cross-client

CROSS = [
    # (producer, consumer, codec), 10k records each
    ("aiokafka", "confluent", "snappy"),  # xerial snappy read by librdkafka
    ("confluent", "kafka-python", "snappy"),  # librdkafka raw snappy read by kafka-python
    ("confluent", "aiokafka", "snappy"),  # ... and by aiokafka
    ("kafka-python", "confluent", "snappy"),
    ("kafka-python", "aiokafka", "lz4"),
    ("aiokafka", "kafka-python", "zstd"),
    ("kafka-python", "confluent", "gzip"),
    ("confluent", "kafka-python", "zstd"),
    ("kafka-python", "confluent", "lz4"),
    ("kcat", "confluent", "snappy"),
    ("kcat", "kafka-python", "zstd"),
    ("confluent", "kcat", "lz4"),
    ("aiokafka", "kcat", "gzip"),
]


@pytest.mark.parametrize(
    "producer,consumer,codec",
    [pytest.param(*c, marks=needs_kcat) if "kcat" in c else c for c in CROSS],
    ids=["-".join(x) for x in CROSS],
)
def test_cross_client(request, producer, consumer, codec):
    _round_trip(request, producer, consumer, codec, 10_000, seed=100 + CROSS.index((producer, consumer, codec)))


# =============================================================================== idempotence


def _check_idempotent_batches(broker, topic, partitions):
    for p in range(partitions):
        batches = segment_batches(broker.data_dir, topic, p)
        assert batches
        pids = {b.producer_id for b in batches}
        assert len(pids) == 1 and min(pids) >= 0, f"p{p}: producer ids on disk {pids}"
        assert all(b.producer_epoch >= 0 for b in batches)
        seq = 0
        for b in batches:
            assert b.base_sequence == seq, (
                f"p{p}: batch at {b.base_offset} has sequence {b.base_sequence}, expected {seq}"
            )
            seq += b.count


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_idempotent_producer(module_broker, client):
    """confluent enable.idempotence=true, kafka-python's default (idempotent), aiokafka
    enable_idempotence=True: batches carry a producer id and gap-free sequences."""
    topic = new_topic()
    create_topic(module_broker, topic)
    recs = make_records(10_000, seed=81)
    bs = module_broker.bootstrap_servers
    if client == "confluent":
        produce_confluent(bs, topic, recs, "lz4", **{"enable.idempotence": True})
    elif client == "kafka-python":
        produce_kafka_python(bs, topic, recs, "lz4")  # enable_idempotence defaults to True
    else:
        produce_aiokafka(bs, topic, recs, "lz4", enable_idempotence=True)
    _check_idempotent_batches(module_broker, topic, 3)
    expected = expected_by_partition(recs)
    assert_same(consume_confluent(bs, topic, counts(expected)), expected, f"idempotent {client}")


# =============================================================================== ListOffsets


def _ts_topic(broker, per_partition=300, partitions=3):
    """Monotonic timestamps: record i of partition p has ts base + 10*i + p, in lz4 batches
    of many records (so some lookups land inside a compressed batch)."""
    from clientlib import Rec

    topic = new_topic()
    create_topic(broker, topic, partitions)
    base = int(time.time() * 1000) - 600_000
    recs = [
        Rec(p, b"k%d" % i, b"v%d" % i, (), base + 10 * i + p) for i in range(per_partition) for p in range(partitions)
    ]
    produce_confluent(broker.bootstrap_servers, topic, recs, "lz4", **{"linger.ms": 200})
    batches = segment_batches(broker.data_dir, topic, 0)
    assert any(b.count > 1 for b in batches), "expected multi-record batches"
    return topic, base, per_partition, partitions


def _ts_cases(base, n, p):
    """(timestamp, expected offset or None) for partition p."""
    return [
        (base - 100_000, 0),  # before everything: first offset
        (base + p, 0),  # exact first
        (base + 10 * 137 + p, 137),  # exact, inside a batch
        (base + 10 * 137 + p - 3, 137),  # between 136 and 137
        (base + 10 * (n - 1) + p, n - 1),
        (base + 10 * n + p + 1, None),  # after the last record: no offset
    ]


def test_offsets_for_times_confluent(module_broker):
    from confluent_kafka import Consumer, TopicPartition

    topic, base, n, parts = _ts_topic(module_broker)
    c = Consumer({"bootstrap.servers": module_broker.bootstrap_servers, "group.id": "unused"})
    try:
        for p in range(parts):
            for ts, want in _ts_cases(base, n, p):
                [r] = c.offsets_for_times([TopicPartition(topic, p, ts)], timeout=10)
                assert r.error is None
                assert r.offset == (want if want is not None else -1), f"p{p} ts {ts - base}: {r.offset} != {want}"
            assert c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) == (0, n)
    finally:
        c.close()


def test_list_offsets_confluent_admin(module_broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic, base, n, parts = _ts_topic(module_broker)
    a = admin(module_broker)
    for spec, want in [
        (OffsetSpec.earliest(), 0),
        (OffsetSpec.latest(), n),
        (OffsetSpec.max_timestamp(), n - 1),
        (OffsetSpec.for_timestamp(base + 10 * 42), 42),
    ]:
        fs = a.list_offsets({TopicPartition(topic, p): spec for p in range(parts)}, request_timeout=10)
        for tp, f in fs.items():
            r = f.result()
            assert r.offset == want, f"{spec} p{tp.partition}: {r.offset} != {want}"
            if want == n - 1:
                assert r.timestamp == base + 10 * (n - 1) + tp.partition


def test_offsets_for_times_kafka_python(module_broker):
    from kafka import KafkaConsumer, TopicPartition

    topic, base, n, parts = _ts_topic(module_broker)
    c = KafkaConsumer(bootstrap_servers=module_broker.bootstrap_servers, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(parts)]
        for p in range(parts):
            for ts, want in _ts_cases(base, n, p):
                r = c.offsets_for_times({tps[p]: ts})[tps[p]]
                if want is None:
                    assert r is None, f"p{p} ts {ts - base}: {r}"
                else:
                    assert r is not None and r.offset == want, f"p{p} ts {ts - base}: {r} != {want}"
                    if ts >= base:
                        assert r.timestamp == base + 10 * want + p
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert c.end_offsets(tps) == {tp: n for tp in tps}
    finally:
        c.close()


def test_offsets_for_times_aiokafka(module_broker):
    """ListOffsets only (no fetch): safe on the shared broker."""
    import aiokafka

    topic, base, n, parts = _ts_topic(module_broker)

    async def run():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=module_broker.bootstrap_servers, enable_auto_commit=False)
        await c.start()
        try:
            tps = [aiokafka.TopicPartition(topic, p) for p in range(parts)]
            for p in range(parts):
                for ts, want in _ts_cases(base, n, p):
                    r = (await c.offsets_for_times({tps[p]: ts}))[tps[p]]
                    if want is None:
                        assert r is None, f"p{p} ts {ts - base}: {r}"
                    else:
                        assert r is not None and r.offset == want, f"p{p} ts {ts - base}: {r} != {want}"
            assert await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
            assert await c.end_offsets(tps) == {tp: n for tp in tps}
        finally:
            await c.stop()

    asyncio.run(run())


@needs_kcat
def test_offsets_for_times_kcat(module_broker):
    topic, base, n, parts = _ts_topic(module_broker)
    for p in range(parts):
        for ts, want in _ts_cases(base, n, p):
            r = subprocess.run(
                ["kcat", "-Q", "-b", module_broker.bootstrap_servers, "-t", f"{topic}:{p}:{ts}"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert r.returncode == 0, r.stderr
            # "<topic> [<p>] offset <n>"
            got = int(r.stdout.strip().rsplit(" ", 1)[1])
            assert got == (want if want is not None else -1), f"p{p} ts {ts - base}: {r.stdout!r}"
    for spec, want in [(-2, 0), (-1, n)]:
        r = subprocess.run(
            ["kcat", "-Q", "-b", module_broker.bootstrap_servers, "-t", f"{topic}:0:{spec}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert int(r.stdout.strip().rsplit(" ", 1)[1]) == want, r.stdout


# =============================================================================== DeleteRecords


def _delete_topic(broker):
    from clientlib import Rec

    topic = new_topic()
    create_topic(broker, topic, 2)
    recs = [Rec(p, b"k%d" % i, b"v%d" % i, (), int(time.time() * 1000)) for i in range(200) for p in range(2)]
    produce_confluent(broker.bootstrap_servers, topic, recs, "lz4", **{"linger.ms": 200})
    return topic


def _first_offset_from_beginning_confluent(broker, topic, p):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                return m.offset(), c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    finally:
        c.close()
    raise AssertionError("no record from the beginning")


def test_delete_records_confluent(module_broker):
    from confluent_kafka import TopicPartition

    topic = _delete_topic(module_broker)
    # offset 57 sits inside a compressed batch: the log start moves to exactly 57
    inside = [b for b in segment_batches(module_broker.data_dir, topic, 0) if b.base_offset < 57 <= b.last_offset]
    assert inside, "expected offset 57 inside a multi-record batch"
    a = admin(module_broker)
    fs = a.delete_records([TopicPartition(topic, 0, 57)], request_timeout=10)
    [(tp, f)] = list(fs.items())
    assert f.result().low_watermark == 57
    first, (low, high) = _first_offset_from_beginning_confluent(module_broker, topic, 0)
    assert (first, low, high) == (57, 57, 200)
    # untouched partition
    first, (low, high) = _first_offset_from_beginning_confluent(module_broker, topic, 1)
    assert (first, low, high) == (0, 0, 200)
    # a fetch below the log start is out of range: auto.offset.reset=earliest lands on 57
    got = consume_confluent(
        module_broker.bootstrap_servers, topic, {0: 143}, start={0: 10}, **{"auto.offset.reset": "earliest"}
    )
    assert [r[0] for r in got[0]] == list(range(57, 200))


def test_delete_records_kafka_python(module_broker):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient

    topic = _delete_topic(module_broker)
    a = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap_servers)
    try:
        res = a.delete_records({TopicPartition(topic, 1): 120})
        [(tp, meta)] = list(res.items())
        low = meta["low_watermark"] if isinstance(meta, dict) else getattr(meta, "low_watermark", meta)
        assert low == 120, res
    finally:
        a.close()
    c = KafkaConsumer(bootstrap_servers=module_broker.bootstrap_servers, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 1)
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert c.beginning_offsets([tp])[tp] == 120
        recs = []
        deadline = time.monotonic() + 15
        while len(recs) < 80 and time.monotonic() < deadline:
            for _tp, rs in c.poll(500).items():
                recs.extend(rs)
        assert [r.offset for r in recs] == list(range(120, 200))
    finally:
        c.close()


# =============================================================================== CreatePartitions


def test_create_partitions(module_broker):
    from confluent_kafka.admin import NewPartitions
    from kafka.admin import KafkaAdminClient

    from clientlib import Rec

    topic = new_topic()
    create_topic(module_broker, topic, 3)
    bs = module_broker.bootstrap_servers
    a = admin(module_broker)
    fs = a.create_partitions([NewPartitions(topic, 5)], operation_timeout=10)
    for f in fs.values():
        f.result(15)
    md = admin(module_broker).list_topics(topic, timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3, 4]
    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        ka.create_partitions({topic: 7})
    finally:
        ka.close()
    md = admin(module_broker).list_topics(topic, timeout=10)
    assert sorted(md.topics[topic].partitions) == list(range(7))
    assert all(p.leader == 1 and p.isrs == [1] for p in md.topics[topic].partitions.values())
    ts = int(time.time() * 1000)
    a = [Rec(p, b"c%d" % i, b"x" * i, (("h", b"1"),), ts + i) for i in range(50) for p in range(7)]
    b = [Rec(p, b"k%d" % i, b"y" * i, (), ts + i) for i in range(30) for p in range(3, 7)]
    produce_confluent(bs, topic, a, "none")
    produce_kafka_python(bs, topic, b, "gzip")
    expected = expected_by_partition(a + b)
    assert_same(consume_confluent(bs, topic, counts(expected)), expected, "after CreatePartitions")


def test_create_partitions_refuses_decrease(module_broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    topic = new_topic()
    create_topic(module_broker, topic, 3)
    a = admin(module_broker)
    fs = a.create_partitions([NewPartitions(topic, 2)], operation_timeout=10)
    with pytest.raises(KafkaException) as e:
        list(fs.values())[0].result(15)
    assert e.value.args[0].name() == "INVALID_PARTITIONS"


# =============================================================================== configs


def _describe(a, topic):
    from confluent_kafka.admin import ConfigResource, ResourceType

    fs = a.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=10)
    return list(fs.values())[0].result()


def test_configs_confluent(module_broker):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

    topic = new_topic()
    create_topic(module_broker, topic, 1)
    a = admin(module_broker)
    d = _describe(a, topic)
    assert d["retention.ms"].value == "604800000"
    assert d["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert d["cleanup.policy"].value == "delete"

    def incremental(*entries):
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        for f in a.incremental_alter_configs([res], request_timeout=10).values():
            f.result()

    incremental(ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET))
    d = _describe(a, topic)
    assert d["retention.ms"].value == "123456"
    assert d["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not d["retention.ms"].is_default

    incremental(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    d = _describe(a, topic)
    assert d["retention.ms"].value == "604800000"
    assert d["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # legacy AlterConfigs replaces the whole set: cleanup.policy not named -> back to default
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "1000", "cleanup.policy": "compact"})
    for f in a.alter_configs([res], request_timeout=10).values():
        f.result()
    d = _describe(a, topic)
    assert (d["retention.ms"].value, d["cleanup.policy"].value) == ("1000", "compact")
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "2000"})
    for f in a.alter_configs([res], request_timeout=10).values():
        f.result()
    d = _describe(a, topic)
    assert (d["retention.ms"].value, d["cleanup.policy"].value) == ("2000", "delete")
    assert d["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value


def test_configs_unknown_name_refused(module_broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic = new_topic()
    create_topic(module_broker, topic, 1)
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    a = admin(module_broker)
    with pytest.raises(KafkaException) as e:
        for f in a.incremental_alter_configs([res], request_timeout=10).values():
            f.result()
    assert e.value.args[0].name() == "INVALID_CONFIG"


def test_broker_configs_describe(module_broker):
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    a = admin(module_broker)
    fs = a.describe_configs([ConfigResource(ResourceType.BROKER, "1")], request_timeout=10)
    d = list(fs.values())[0].result()
    assert d["num.partitions"].value == "1"
    assert d["auto.create.topics.enable"].value == "true"
    assert d["log.segment.bytes"].value == str(1 << 30)
    assert d["node.id"].value == "1"
    assert len(d) > 50
    # set on the command line (--override, like server.properties): static; untouched: default
    assert d["node.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert d["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value and d["num.partitions"].is_default


def test_configs_kafka_python(module_broker):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = new_topic()
    create_topic(module_broker, topic, 1)
    a = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap_servers)

    def describe():
        r = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        return r["topic"][topic]

    try:
        assert describe()["retention.ms"]["value"] == "604800000"
        res = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "777"})])
        assert res["topic"][topic] == "OK", res
        d = describe()["retention.ms"]
        assert (d["value"], d["config_source"]) == ("777", "DYNAMIC_TOPIC_CONFIG")
        # non-incremental path (AlterConfigs v*)
        res = a.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "888"})], incremental=False
        )
        assert res["topic"][topic] == "OK", res
        assert describe()["retention.ms"]["value"] == "888"
        res = a.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": None})])
        assert res["topic"][topic] == "OK", res
        d = describe()["retention.ms"]
        assert (d["value"], d["config_source"]) == ("604800000", "DEFAULT_CONFIG")
        b = a.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        assert b["broker"]["1"]["num.partitions"]["value"] == "1"
    finally:
        a.close()


# =============================================================================== cluster / topics


def test_describe_cluster_and_topics_confluent(module_broker):
    from confluent_kafka import TopicCollection

    topic = new_topic()
    create_topic(module_broker, topic, 3)
    a = admin(module_broker)
    cl = a.describe_cluster(request_timeout=10).result()
    assert cl.cluster_id and cl.controller is not None and cl.controller.id == 1
    assert [(n.id, n.host, n.port) for n in cl.nodes] == [(1, "127.0.0.1", module_broker.port)]
    md = a.list_topics(timeout=10)
    assert md.cluster_id == cl.cluster_id
    assert topic in md.topics and len(md.topics[topic].partitions) == 3
    # describe_topics uses DescribeTopicPartitions (KIP-966) on brokers that advertise it
    [(name, f)] = list(a.describe_topics(TopicCollection([topic]), request_timeout=10).items())
    d = f.result()
    assert d.name == topic and not d.is_internal
    assert d.topic_id is not None and str(d.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr]) for p in d.partitions] == [
        (i, 1, [1], [1]) for i in range(3)
    ]


def test_describe_cluster_and_topics_kafka_python(module_broker):
    from kafka.admin import KafkaAdminClient

    topic = new_topic()
    create_topic(module_broker, topic, 3)
    a = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap_servers)
    try:
        cl = a.describe_cluster()
        assert cl["controller_id"] == 1 and cl["cluster_id"]
        assert [(b["broker_id"], b["host"], b["port"]) for b in cl["brokers"]] == [(1, "127.0.0.1", module_broker.port)]
        assert topic in a.list_topics()
        [t] = a.describe_topics([topic])
        assert t["name"] == topic and t["error_code"] == 0
        assert [
            (p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]) for p in t["partitions"]
        ] == [(i, 1, [1], [1]) for i in range(3)]
        # DescribeTopicPartitions (KIP-966)
        [d] = a.describe_topic_partitions([topic])["topics"]
        assert d["name"] == topic and d["error_code"] == 0 and str(d["topic_id"]) == t["topic_id"]
        assert [p["partition_index"] for p in d["partitions"]] == [0, 1, 2]
    finally:
        a.close()


# =============================================================================== auto-create


def test_auto_create_topic_on_produce(module_broker):
    from clientlib import Rec

    bs = module_broker.bootstrap_servers
    t1, t2 = new_topic(), new_topic()
    ts = int(time.time() * 1000)
    produce_confluent(bs, t1, [Rec(0, b"k", b"v", (), ts)])
    produce_kafka_python(bs, t2, [Rec(0, b"k", b"v2", (), ts)])
    md = admin(module_broker).list_topics(timeout=10)
    for t in (t1, t2):
        assert t in md.topics and len(md.topics[t].partitions) == 1  # num.partitions default 1
    assert consume_confluent(bs, t1, {0: 1})[0] == [(0, b"k", b"v", (), ts)]
    assert consume_kafka_python(bs, t2, {0: 1})[0] == [(0, b"k", b"v2", (), ts)]


def test_auto_create_disabled(tmp_path):
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    with Broker(data_dir=str(tmp_path / "d"), config={"auto.create.topics.enable": "false"}) as b:
        topic = new_topic()
        errors = []
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "message.timeout.ms": 3000,
                "topic.metadata.propagation.max.ms": 1000,
            }
        )
        p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, errors[0]
        kp = KafkaProducer(bootstrap_servers=b.bootstrap_servers, max_block_ms=2000)
        try:
            with pytest.raises(KafkaTimeoutError):
                kp.send(topic, b"v").get(5)
        finally:
            kp.close(2)
        md = admin(b).list_topics(timeout=10)
        assert topic not in md.topics


# =============================================================================== long poll


def test_long_poll_empty_fetch_waits_max_wait(module_broker):
    """An empty Fetch answers after max_wait (not earlier, not hanging), with empty records."""
    topic = new_topic()
    create_topic(module_broker, topic, 1)
    with RawConnection(module_broker.bootstrap_servers) as c:
        for wait_ms in (300, 1000):
            t0 = time.monotonic()
            c.send(ApiKeys.FETCH, 12, fetch_v12_body(topic, 0, 0, wait_ms), flexible=True)
            body = c.recv(True, timeout=wait_ms / 1000 + 5)
            elapsed = time.monotonic() - t0
            r = decode_fetch_v12(body)
            [t] = r.responses
            [p] = t.partitions
            assert p.error_code == 0 and p.high_watermark == 0
            assert p.records is not None and len(p.records) == 0
            assert wait_ms / 1000 - 0.02 <= elapsed <= wait_ms / 1000 + 0.5, (
                f"max_wait {wait_ms}: answered in {elapsed:.3f}s"
            )


def test_long_poll_wakes_on_produce_raw(module_broker):
    """A Fetch parked on an empty partition (max_wait 10 s) is answered as soon as a record
    is produced 1 s later."""
    from confluent_kafka import Producer

    topic = new_topic()
    create_topic(module_broker, topic, 1)
    p = Producer({"bootstrap.servers": module_broker.bootstrap_servers, "linger.ms": 0, "acks": "all"})
    p.list_topics(topic, timeout=10)  # connect and learn the leader before the clock starts
    with RawConnection(module_broker.bootstrap_servers) as c:
        t0 = time.monotonic()
        c.send(ApiKeys.FETCH, 12, fetch_v12_body(topic, 0, 0, 10_000), flexible=True)
        result = {}

        def recv():
            result["body"] = c.recv(True, timeout=15)
            result["t"] = time.monotonic()

        th = threading.Thread(target=recv)
        th.start()
        time.sleep(1.0)
        assert "t" not in result, "fetch answered before any record was produced"
        t_send = time.monotonic()
        p.produce(topic, b"wake", partition=0)
        p.flush(10)
        th.join(15)
        assert "t" in result, "long-poll fetch never answered"
        latency = result["t"] - t_send
        r = decode_fetch_v12(result["body"])
        assert len(r.responses[0].partitions[0].records) > 0
        assert latency < 0.15, f"fetch answered {latency * 1000:.0f} ms after the produce"
        assert result["t"] - t0 >= 1.0


def test_long_poll_consumer_latency_confluent(module_broker):
    """End to end: a librdkafka consumer waiting (fetch.wait.max.ms=5000) on an empty
    partition receives a record produced 1 s later within ~100 ms."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic()
    create_topic(module_broker, topic, 1)
    bs = module_broker.bootstrap_servers
    c = Consumer(
        {"bootstrap.servers": bs, "group.id": "unused", "fetch.wait.max.ms": 5000, "enable.auto.commit": False}
    )
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        p.list_topics(topic, timeout=10)
        assert c.poll(1.0) is None
        t_send = time.monotonic()
        p.produce(topic, b"wake", partition=0)
        p.flush(10)
        m = c.poll(6.0)
        latency = time.monotonic() - t_send
        assert m is not None and m.error() is None and m.value() == b"wake"
        assert latency < 0.2, f"consumer got the record {latency * 1000:.0f} ms after the produce"
    finally:
        c.close()


@pytest.mark.parametrize("version", [4, 11])
def test_nonflexible_fetch_with_records_answers_and_broker_survives(v11_broker, version):
    """Fetch v4/v11 (aiokafka, librdkafka 2.0) whose last partition carries records: the
    response arrives whole and the broker keeps answering. Until 382214c the response ended
    with a zero-length buffer that Connection._flush could never send (sendmsg([b'']) == 0):
    the event loop spun at 100% CPU and the broker stopped answering every client."""
    topic = new_topic()
    create_topic(v11_broker, topic, 2)
    recs = make_records(2_000, partitions=2, seed=5)
    produce_confluent(v11_broker.bootstrap_servers, topic, recs, "none")
    with RawConnection(v11_broker.bootstrap_servers) as c:
        for _ in range(3):
            c.send(
                ApiKeys.FETCH, version, fetch_nonflexible_body(version, topic, [(0, 0), (1, 0)], 100), flexible=False
            )
            r = decode_fetch(version, c.recv(False, timeout=10))
            sizes = [len(p.records) for t in r.responses for p in t.partitions]
            assert len(sizes) == 2 and all(s > 0 for s in sizes), sizes
        # empty fetch at the end of the log still answers after max_wait
        t0 = time.monotonic()
        ends = [(p, len(rows)) for p, rows in sorted(expected_by_partition(recs).items())]
        c.send(ApiKeys.FETCH, version, fetch_nonflexible_body(version, topic, ends, 300), flexible=False)
        r = decode_fetch(version, c.recv(False, timeout=10))
        assert 0.28 <= time.monotonic() - t0 <= 1.0
        assert [len(p.records) for t in r.responses for p in t.partitions] == [0, 0]
    assert broker_alive(v11_broker.bootstrap_servers), "broker stopped answering after a non-flexible fetch"


# =============================================================================== mid-batch fetch


def _mid_batch_topic(broker):
    from clientlib import Rec

    topic = new_topic()
    create_topic(broker, topic, 1)
    ts = int(time.time() * 1000)
    recs = [Rec(0, b"k%d" % i, b"value-%d" % i, (("i", b"%d" % i),), ts + i) for i in range(1000)]
    produce_confluent(broker.bootstrap_servers, topic, recs, "lz4", **{"linger.ms": 500})
    batches = segment_batches(broker.data_dir, topic, 0)
    [batch] = [b for b in batches if b.base_offset < 537 <= b.last_offset]
    assert batch.base_offset < 537 < batch.last_offset and batch.codec == 3
    return topic, recs, batch


def test_fetch_from_middle_of_compressed_batch(module_broker):
    topic, recs, batch = _mid_batch_topic(module_broker)
    bs = module_broker.bootstrap_servers
    expected = expected_by_partition(recs)[0][537:]
    got = consume_confluent(bs, topic, {0: len(expected)}, start={0: 537})
    assert got[0] == expected
    got = consume_kafka_python(bs, topic, {0: len(expected)}, start={0: 537})
    assert got[0] == expected
    # the broker returns the whole batch holding 537 (clients skip the earlier records)
    with RawConnection(bs) as c:
        c.send(ApiKeys.FETCH, 12, fetch_v12_body(topic, 0, 537, 0), flexible=True)
        r = decode_fetch_v12(c.recv(True, timeout=10))
        records = bytes(r.responses[0].partitions[0].records)
        import struct

        assert struct.unpack_from(">q", records, 0)[0] == batch.base_offset


# =============================================================================== segment roll


def test_old_timestamps_do_not_roll_a_segment_per_batch(module_broker):
    """Records stamped long ago (older than segment.ms = 7 days) are appended in 20 batches:
    Kafka keeps them in one segment (LogSegment.timeWaitedForRoll compares the incoming
    batch's max timestamp with the segment's first batch timestamp, not with wall-clock now).
    kesque rolled a segment per batch until cfb4199."""
    from confluent_kafka import Producer

    topic = new_topic()
    create_topic(module_broker, topic, 1)
    p = Producer({"bootstrap.servers": module_broker.bootstrap_servers, "linger.ms": 0})
    old = 1_700_000_000_000  # November 2023
    for i in range(20):
        p.produce(topic, b"v%d" % i, partition=0, timestamp=old + i)
        p.flush(10)
    assert len(segment_batches(module_broker.data_dir, topic, 0)) == 20
    files = segment_files(module_broker.data_dir, topic, 0)
    assert len(files) == 1, f"{len(files)} segments for 20 batches"


# =============================================================================== more broker behaviour


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_log_append_time(module_broker, codec):
    """message.timestamp.type=LogAppendTime: the broker stamps the batch (attributes bit 3,
    maxTimestamp) and consumers see the broker's time, type LogAppendTime, for every record."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    from clientlib import Rec

    topic = new_topic()
    create_topic(module_broker, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    bs = module_broker.bootstrap_servers
    recs = [Rec(0, b"k%d" % i, b"value %d " % i * 10, (("h", b"1"),), 1000 + i) for i in range(300)]
    t0 = int(time.time() * 1000)
    produce_confluent(bs, topic, recs, codec)
    t1 = int(time.time() * 1000)
    batches = segment_batches(module_broker.data_dir, topic, 0)
    assert all(b.timestamp_type == 1 and t0 <= b.max_timestamp <= t1 for b in batches), batches
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "check.crcs": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 300 and time.monotonic() < deadline:
            got += [m for m in c.consume(1000, 0.5) if m.error() is None]
    finally:
        c.close()
    assert len(got) == 300
    assert {m.timestamp()[0] for m in got} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(t0 <= m.timestamp()[1] <= t1 for m in got)
    assert [(m.key(), m.value(), m.headers()) for m in got] == [(r.key, r.value, list(r.headers)) for r in recs]
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=bs, check_crcs=True, enable_auto_commit=False)
    try:
        kc.assign([KTP(topic, 0)])
        kc.seek(KTP(topic, 0), 0)
        kg = []
        deadline = time.monotonic() + 10
        while len(kg) < 300 and time.monotonic() < deadline:
            for _tp, rs in kc.poll(500).items():
                kg += rs
    finally:
        kc.close()
    assert len(kg) == 300 and {r.timestamp_type for r in kg} == {1}
    assert all(t0 <= r.timestamp <= t1 for r in kg)


def test_produce_errors_are_kafkas(module_broker):
    """Refused produces come back with Kafka's error codes."""
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaProducer

    bs = module_broker.bootstrap_servers

    def confluent_error(topic, **kw):
        errors = []
        p = Producer({"bootstrap.servers": bs, "message.max.bytes": 5_000_000, "message.timeout.ms": 5000})
        p.produce(topic, partition=0, on_delivery=lambda err, _m: errors.append(err), **kw)
        p.flush(10)
        assert len(errors) == 1 and errors[0] is not None, errors
        return errors[0].code()

    t = new_topic()
    create_topic(module_broker, t, 1)
    # batch above message.max.bytes (1 MiB default)
    assert confluent_error(t, value=b"x" * 1_200_000) == KafkaError.MSG_SIZE_TOO_LARGE
    # timestamp more than log.message.timestamp.after.max.ms (1 h, Kafka 4.0) in the future
    future = int(time.time() * 1000) + 2 * 3_600_000
    assert confluent_error(t, value=b"v", timestamp=future) == KafkaError.INVALID_TIMESTAMP
    # compacted topics refuse records without a key
    t2 = new_topic()
    create_topic(module_broker, t2, 1, {"cleanup.policy": "compact"})
    assert confluent_error(t2, value=b"v") == KafkaError.INVALID_RECORD
    # acks=all with min.insync.replicas above the replication factor: Kafka holds the ISR to
    # min(min.insync.replicas, replication factor) (Partition.effectiveMinIsr), so a single
    # replica takes it (NOT_ENOUGH_REPLICAS needs replicas that left the ISR: test_replication.py)
    t3 = new_topic()
    create_topic(module_broker, t3, 1, {"min.insync.replicas": "2"})
    kp = KafkaProducer(bootstrap_servers=bs, acks="all", retries=0, enable_idempotence=False)
    try:
        assert kp.send(t3, b"v", partition=0).get(10).offset == 0
    finally:
        kp.close(5)


@pytest.mark.parametrize("api_version", [(0, 11), (2, 0), (3, 0)], ids=lambda v: "%d.%d" % v)
def test_kafka_python_older_protocol_versions(module_broker, api_version):
    """kafka-python pinned to an older broker version uses older, non-flexible versions of
    Metadata/Produce/Fetch/ListOffsets (e.g. Fetch v4 for 0.11): round trip still identical."""
    topic = new_topic()
    create_topic(module_broker, topic)
    recs = make_records(3000, seed=200 + api_version[0])
    bs = module_broker.bootstrap_servers
    produce_kafka_python(bs, topic, recs, "gzip", api_version=api_version)
    expected = expected_by_partition(recs)
    got = consume_kafka_python(bs, topic, counts(expected), api_version=api_version)
    assert_same(got, expected, f"kafka-python api_version={api_version}")


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_fetch_max_bytes_below_batch_size(request, client):
    """max.partition.fetch.bytes / fetch.max.bytes far below a batch (and a 30 KB record):
    the broker still returns the first batch whole (KIP-74), consumers make progress."""
    broker = broker_for(request, client)
    bs = broker.bootstrap_servers
    topic = new_topic()
    create_topic(broker, topic)
    recs = make_records(3000, seed=300)
    produce_confluent(bs, topic, recs, "zstd")
    expected = expected_by_partition(recs)
    if client == "confluent":
        got = consume_confluent(
            bs,
            topic,
            counts(expected),
            **{"max.partition.fetch.bytes": 100, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
        )
    elif client == "kafka-python":
        got = consume_kafka_python(bs, topic, counts(expected), max_partition_fetch_bytes=100, fetch_max_bytes=100)
    else:
        got = consume_aiokafka(bs, topic, counts(expected), max_partition_fetch_bytes=100, fetch_max_bytes=100)
    assert_same(got, expected, f"{client} with tiny fetch sizes")
