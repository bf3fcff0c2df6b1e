"""Issue 30: format ``kesque`` against Spark's own Kafka connector (format ``kafka``,
spark-sql-kafka-0-10 from build/spark-kafka, ``make spark-kafka``) on the same broker, the
same queries with both formats, the rows compared.

* batch reads, for every source option format ``kesque`` takes (subscribe, subscribePattern,
  assign, starting/ending offsets, by timestamp, includeHeaders, minPartitions,
  maxRecordsPerPartition, read_committed, failOnDataLoss, groupIdPrefix, kafka.* tuning);
* streaming reads with Trigger.AvailableNow (maxOffsetsPerTrigger: the same micro-batches);
* writes (topic option, topic column, key/value as string or binary, partition column,
  headers), read back by a read_committed consumer, partition by partition;
* malformed input: a batch whose CRC does not match fails the read, for both formats and
  whatever failOnDataLoss says; a record larger than max.partition.fetch.bytes is read.

Slow (a JVM with both connectors, every query twice): marker ``spark_kafka``, ``make spark``.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import uuid

import pytest

pyspark = pytest.importorskip("pyspark")

from conftest import java_missing, running_broker  # noqa: E402

if java_missing():
    pytest.skip(f"Spark {java_missing()}", allow_module_level=True)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kesque.client.consumer import EARLIEST, WireConsumer  # noqa: E402
from kesque.client.producer import Producer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JARS = sorted(glob.glob(os.path.join(ROOT, "build", "spark-kafka", "*.jar")))
# skipped by a mark, not at import: the default suite deselects this file without a skip
pytestmark = [
    pytest.mark.spark_kafka,
    pytest.mark.skipif(
        not any("spark-sql-kafka" in j for j in JARS),
        reason="Spark's Kafka connector is not in build/spark-kafka (make spark-kafka)",
    ),
]

BROKER = {
    "transaction.two.phase.commit.enable": "true",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "log.retention.check.interval.ms": "200",
}
T0 = 1_700_000_000_000  # record timestamps: T0 + i


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("spark-diff") / "data", BROKER) as b:
        b.admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        yield b


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("kesque-differential")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "1")
        .config("spark.jars", ",".join(JARS))
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    import kesque.spark

    kesque.spark.register(s)
    yield s
    s.stop()


def new_topic(kb, partitions: int = 3, config: dict | None = None, name: str | None = None) -> str:
    name = name or "df-" + uuid.uuid4().hex[:8]
    cfg = {"retention.ms": "-1", **(config or {})}
    kb.admin.create_topics([NewTopic(name, partitions, 1, config=cfg)])[name].result(10)
    return name


def produce(kb, t: str, n: int, partitions: int = 3, start: int = 0) -> None:
    with Producer(kb.bootstrap_servers) as p:
        for i in range(start, start + n):
            p.send(
                t,
                f"v{i}".encode(),
                key=None if i % 5 == 0 else f"k{i}".encode(),
                partition=i % partitions,
                headers=[("n", str(i).encode()), ("h", None)] if i % 2 else [],
                timestamp=T0 + i,
            )
        p.flush()


@pytest.fixture(scope="module")
def data(kb):
    """Two topics of 90 records over 3 partitions (keys, null keys, headers, timestamps T0+i)."""
    prefix = "dfx" + uuid.uuid4().hex[:6]
    a, b = new_topic(kb, name=prefix + "-a"), new_topic(kb, name=prefix + "-b")
    produce(kb, a, 90)
    produce(kb, b, 90, start=1000)
    return {"a": a, "b": b, "prefix": prefix}


def load(spark, kb, fmt: str, streaming: bool = False, **opts):
    r = (spark.readStream if streaming else spark.read).format(fmt)
    r = r.option("kafka.bootstrap.servers", kb.bootstrap_servers)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    cols = [
        c for c in ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType") if c in df.columns
    ]
    out = []
    for r in df.collect():
        t = tuple(r[c] for c in cols)
        if "headers" in df.columns:
            t += (None if r.headers is None else tuple((h.key, h.value) for h in r.headers),)
        out.append(t)
    return sorted(out, key=repr)


def both(spark, kb, **opts) -> tuple[list, list]:
    return rows(load(spark, kb, "kafka", **opts)), rows(load(spark, kb, "kesque", **opts))


def same(spark, kb, **opts) -> list:
    k, q = both(spark, kb, **opts)
    assert q == k, f"kesque differs from kafka for {opts}"
    return k


# ============================================================================ batch reads


def test_schema_is_the_same(spark, kb, data):
    for headers in ("false", "true"):
        k = load(spark, kb, "kafka", subscribe=data["a"], includeHeaders=headers).schema
        q = load(spark, kb, "kesque", subscribe=data["a"], includeHeaders=headers).schema
        assert [(f.name, f.dataType) for f in q.fields] == [(f.name, f.dataType) for f in k.fields]


def test_batch_subscriptions(spark, kb, data):
    a, b = data["a"], data["b"]
    assert len(same(spark, kb, subscribe=a)) == 90
    assert len(same(spark, kb, subscribe=f"{a},{b}")) == 180
    assert len(same(spark, kb, subscribePattern=data["prefix"] + "-.*")) == 180
    assert len(same(spark, kb, assign=json.dumps({a: [0, 2], b: [1]}))) == 90


def test_batch_offsets(spark, kb, data):
    a = data["a"]
    r = same(spark, kb, subscribe=a, startingOffsets=json.dumps({a: {"0": 3, "1": -2, "2": 29}}))
    assert len(r) == 27 + 30 + 1
    r = same(
        spark,
        kb,
        subscribe=a,
        startingOffsets=json.dumps({a: {"0": 1, "1": 2, "2": -2}}),
        endingOffsets=json.dumps({a: {"0": 5, "1": -1, "2": 7}}),
    )
    assert len(r) == 4 + 28 + 7
    assert same(spark, kb, subscribe=a, endingOffsets=json.dumps({a: {"0": 0, "1": 0, "2": 0}})) == []


def test_batch_timestamps(spark, kb, data):
    a = data["a"]
    assert len(same(spark, kb, subscribe=a, startingTimestamp=str(T0 + 30))) == 60
    assert len(same(spark, kb, subscribe=a, startingTimestamp=str(T0 + 30), endingTimestamp=str(T0 + 60))) == 30
    by_ts = json.dumps({a: {"0": T0 + 10, "1": T0 + 40, "2": T0 + 89}})
    end_ts = json.dumps({a: {"0": T0 + 50, "1": T0 + 80, "2": T0 + 90}})
    same(spark, kb, subscribe=a, startingOffsetsByTimestamp=by_ts)
    same(spark, kb, subscribe=a, startingOffsetsByTimestamp=by_ts, endingOffsetsByTimestamp=end_ts)
    late = str(T0 + 10_000)  # later than every record: latest with strategy latest
    assert same(spark, kb, subscribe=a, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == []


def test_batch_headers_and_splits(spark, kb, data):
    a = data["a"]
    same(spark, kb, subscribe=a, includeHeaders="true")
    for opts in ({"minPartitions": "7"}, {"minPartitions": "5", "includeHeaders": "true"}):
        assert len(same(spark, kb, subscribe=a, **opts)) == 90
        nk = load(spark, kb, "kafka", subscribe=a, **opts).rdd.getNumPartitions()
        nq = load(spark, kb, "kesque", subscribe=a, **opts).rdd.getNumPartitions()
        assert nq == nk, opts  # the same tasks: the ranges are split as Spark splits them
    # the same rows; format kafka's batch read (Spark 4.2) leaves its tasks unsplit by this option
    assert len(same(spark, kb, subscribe=a, maxRecordsPerPartition="8")) == 90


def test_batch_kafka_params_and_group_options(spark, kb, data):
    a = data["a"]
    same(
        spark,
        kb,
        subscribe=a,
        groupIdPrefix="diff",
        **{
            "kafka.client.id": "diff",
            "kafka.fetch.max.bytes": "2048",
            "kafka.max.partition.fetch.bytes": "1024",
            "kafka.fetch.min.bytes": "1",
            "kafka.fetch.max.wait.ms": "100",
            "kafka.request.timeout.ms": "20000",
            "fetchOffset.numRetries": "2",
            "fetchOffset.retryIntervalMs": "20",
        },
    )
    same(spark, kb, subscribe=a, **{"kafka.group.id": "diff-" + uuid.uuid4().hex[:6]})


def test_batch_read_committed(spark, kb):
    t = new_topic(kb, 1)
    with Producer(kb.bootstrap_servers, transactional_id="dfab-" + uuid.uuid4().hex[:6]) as p:
        p.init_transactions()
        for word, commit in (("c1", True), ("a1", False), ("c2", True)):
            p.begin_transaction()
            for i in range(3):
                p.send(t, f"{word}-{i}".encode(), partition=0)
            p.commit_transaction() if commit else (p.flush(), p.abort_transaction())
    assert len(same(spark, kb, subscribe=t, **{"kafka.isolation.level": "read_committed"})) == 6
    assert len(same(spark, kb, subscribe=t)) == 9


def test_batch_fail_on_data_loss(spark, kb):
    """Offsets before the log start (DeleteRecords): an error with failOnDataLoss=true, the
    rows that are left with false."""
    from confluent_kafka import TopicPartition

    t = new_topic(kb, 1)
    produce(kb, t, 20, partitions=1)
    kb.admin.delete_records([TopicPartition(t, 0, 8)])[TopicPartition(t, 0, 8)].result(10) if hasattr(
        kb.admin, "delete_records"
    ) else pytest.skip("confluent_kafka without delete_records")
    start = json.dumps({t: {"0": 2}})
    for fmt in ("kafka", "kesque"):
        with pytest.raises(Exception) as e:
            load(spark, kb, fmt, subscribe=t, startingOffsets=start).collect()
        assert "failOnDataLoss" in str(e.value), (fmt, str(e.value)[-2000:])
    kept = same(spark, kb, subscribe=t, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r[4] for r in kept) == list(range(8, 20))


# ============================================================================ streaming reads


def stream(spark, kb, fmt: str, **opts) -> tuple[list, list[int]]:
    """Rows of an AvailableNow query into the memory sink, and its micro-batches' sizes."""
    name = f"q_{fmt}_{uuid.uuid4().hex[:8]}"
    q = (
        load(spark, kb, fmt, streaming=True, **opts)
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="df-cp-"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    return rows(spark.table(name)), sizes


def same_stream(spark, kb, **opts) -> tuple[list, list[int]]:
    k, ks = stream(spark, kb, "kafka", **opts)
    q, qs = stream(spark, kb, "kesque", **opts)
    assert q == k, f"kesque differs from kafka for {opts}"
    assert qs == ks, f"micro-batches differ for {opts}: kafka {ks}, kesque {qs}"
    return k, ks


def test_streaming_reads(spark, kb, data):
    a, b = data["a"], data["b"]
    r, _ = same_stream(spark, kb, subscribe=f"{a},{b}", startingOffsets="earliest", includeHeaders="true")
    assert len(r) == 180
    r, _ = same_stream(spark, kb, subscribe=a, startingOffsets=json.dumps({a: {"0": 10, "1": -2, "2": 25}}))
    assert len(r) == 20 + 30 + 5
    same_stream(spark, kb, subscribePattern=data["prefix"] + "-a", startingTimestamp=str(T0 + 45))
    same_stream(spark, kb, assign=json.dumps({b: [1]}), startingOffsets="earliest", minPartitions="4")


def test_streaming_max_offsets_per_trigger(spark, kb, data):
    _, sizes = same_stream(spark, kb, subscribe=data["a"], startingOffsets="earliest", maxOffsetsPerTrigger="25")
    assert sum(sizes) == 90 and len(sizes) == 4


def test_streaming_latest_start_reads_nothing(spark, kb, data):
    r, sizes = same_stream(spark, kb, subscribe=data["a"])
    assert r == [] and sizes == []


# ============================================================================ writes


def committed(kb, t: str, partitions: int) -> dict[int, list[tuple]]:
    c = WireConsumer(kb.bootstrap_servers, isolation_level=1)
    try:
        c.assign({(t, p): EARLIEST for p in range(partitions)})
        out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
        for m in sorted(c.drain(), key=lambda m: (m.partition, m.offset)):
            out[m.partition].append((m.key, m.value, tuple(m.headers or ())))
        return out
    finally:
        c.close()


def write_both(spark, kb, df, partitions: int = 3, topic_option: bool = True) -> tuple[dict, dict]:
    out = {}
    for fmt in ("kafka", "kesque"):
        t = new_topic(kb, partitions)
        w = df.write.format(fmt).option("kafka.bootstrap.servers", kb.bootstrap_servers)
        if topic_option:
            w = w.option("topic", t)
        else:
            w = df.selectExpr(f"'{t}' AS topic", "*").write.format(fmt)
            w = w.option("kafka.bootstrap.servers", kb.bootstrap_servers)
        w.mode("append").save()
        out[fmt] = committed(kb, t, partitions)
    return out["kafka"], out["kesque"]


def test_writes_place_rows_as_kafka(spark, kb):
    base = spark.range(0, 300, numPartitions=1)  # one task: the order within a partition is defined
    # keyed rows: murmur2 of the key, the same partition and order in both
    k, q = write_both(spark, kb, base.selectExpr("CAST(id AS STRING) AS key", "CONCAT('v', id) AS value"))
    assert q == k and sum(len(v) for v in k.values()) == 300
    # binary key and value, a partition column, headers
    df = base.selectExpr(
        "CAST(CONCAT('k', id) AS BINARY) AS key",
        "CAST(CONCAT('v', id) AS BINARY) AS value",
        "CAST(id % 3 AS INT) AS partition",
        "ARRAY(NAMED_STRUCT('key', 'n', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers",
    )
    k, q = write_both(spark, kb, df)
    assert q == k
    # the topic from a column
    k, q = write_both(
        spark, kb, base.selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value"), topic_option=False
    )
    assert q == k
    # no key: partitions may differ (a sticky random partition), the rows may not
    k, q = write_both(spark, kb, base.selectExpr("CAST(id AS STRING) AS value"))
    assert sorted(r for v in q.values() for r in v) == sorted(r for v in k.values() for r in v)
    # ... and both spread them: a new partition about every 16 KiB (Kafka's batch.size), not one
    # per Arrow batch (20,000 rows of 100 B in two Arrow batches: 70-140 switches, Kafka's producer
    # switching after 16-32 KiB)
    many = spark.range(0, 20_000, numPartitions=1).selectExpr("CONCAT(CAST(id AS STRING), REPEAT('x', 95)) AS value")
    for fmt, rows in zip(("kafka", "kesque"), write_both(spark, kb, many)):
        counts = sorted(len(v) for v in rows.values())
        assert sum(counts) == 20_000 and counts[0] > 0.4 * 20_000 / 3 and counts[-1] < 1.6 * 20_000 / 3, (fmt, counts)


def test_streaming_copy_is_the_same(spark, kb, data):
    outs = {}
    for fmt in ("kafka", "kesque"):
        t = new_topic(kb, 3)
        (
            load(spark, kb, fmt, streaming=True, subscribe=data["a"], startingOffsets="earliest")
            .selectExpr("key", "value", "partition")
            .writeStream.format(fmt)
            .option("kafka.bootstrap.servers", kb.bootstrap_servers)
            .option("topic", t)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="df-cp-"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination(180)
        )
        outs[fmt] = committed(kb, t, 3)
    assert outs["kesque"] == outs["kafka"] and sum(len(v) for v in outs["kafka"].values()) == 90


# ============================================================================ malformed input


def test_record_larger_than_the_fetch_size_is_read(spark, kb):
    t = new_topic(kb, 1)
    with Producer(kb.bootstrap_servers) as p:
        for i in range(3):
            p.send(t, bytes([65 + i]) * 50_000, partition=0)
            p.flush()
    small = {"kafka.max.partition.fetch.bytes": "1024", "kafka.fetch.max.bytes": "1024"}
    assert len(same(spark, kb, subscribe=t, **small)) == 3


def _corrupt_first_batch(kb, t: str) -> None:
    """Flip a byte inside the records of the first batch of ``t``-0 on disk (the CRC no
    longer matches)."""
    seg = os.path.join(kb.data_dir, f"{t}-0", "00000000000000000000.log")
    with open(seg, "r+b") as f:
        f.seek(61 + 10)  # past the batch header, inside the first record
        b = f.read(1)
        f.seek(61 + 10)
        f.write(bytes([b[0] ^ 0xFF]))


def test_corrupt_batch_fails_the_read(spark, kb):
    t = new_topic(kb, 1)
    with Producer(kb.bootstrap_servers) as p:
        for i in range(10):
            p.send(t, f"value-{i:04d}".encode() * 4, partition=0)
        p.flush()
    _corrupt_first_batch(kb, t)
    for fmt in ("kafka", "kesque"):
        for fail in ("true", "false"):
            with pytest.raises(Exception) as e:
                load(spark, kb, fmt, subscribe=t, failOnDataLoss=fail).collect()
            assert "corrupt" in str(e.value).lower(), (fmt, fail, str(e.value)[-2000:])
