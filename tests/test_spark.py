"""The PySpark connector (format ``kesque``) on Spark local[2] against a real broker process.

1. batch reads return exactly what was produced, for every way to say where to start/end;
2. a streaming query with maxOffsetsPerTrigger makes micro-batches of the right sizes and
   resumes from its checkpoint with no gap and no repeat;
3. the exactly-once sink under failure: a task failing on its first attempt; a driver
   SIGKILLed between the tasks' writes and the commit, and one killed in the middle of the
   commit, each restarted from its checkpoint;
4. read_committed skips aborted records and control markers, read_uncommitted does not;
6. bad options fail fast naming the option; an unreachable broker fails within the
   configured timeout; failOnDataLoss as Spark's.
(5, the examples, is tests/test_examples.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

pyspark = pytest.importorskip("pyspark")

from conftest import java_missing  # noqa: E402

if java_missing():
    pytest.skip(f"Spark {java_missing()}", allow_module_level=True)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from conftest import running_broker  # noqa: E402
from kesque.client.consumer import EARLIEST, WireConsumer  # noqa: E402
from kesque.client.producer import Producer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BROKER = {
    "transaction.two.phase.commit.enable": "true",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "log.retention.check.interval.ms": "200",
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("spark") / "data", BROKER) as b:
        b.admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        yield b


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2,4]")
        .appName("kesque-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )  # local[2,4]: 4 task attempts
    s.sparkContext.setLogLevel("ERROR")
    import kesque.spark

    kesque.spark.register(s)
    yield s
    s.stop()


def topic(kb, partitions: int = 3, config: dict | None = None) -> str:
    """A new topic; no time-based retention unless asked (tests write 2023 timestamps and the
    broker checks retention every 200 ms for the data-loss test)."""
    name = "sp-" + uuid.uuid4().hex[:8]
    config = {"retention.ms": "-1", **(config or {})}
    kb.admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(10)
    return name


def produce(kb, t: str, n: int, partitions: int = 3, start: int = 0, ts: int | None = None) -> None:
    with Producer(kb.bootstrap_servers) as p:
        for i in range(start, start + n):
            p.send(
                t,
                f"v{i}".encode(),
                key=f"k{i}".encode(),
                partition=i % partitions,
                headers=[("n", str(i).encode())],
                timestamp=None if ts is None else ts + i,
            )
        p.flush()


def read(spark, kb, **opts):
    r = spark.read.format("kesque").option("kafka.bootstrap.servers", kb.bootstrap_servers)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def values(df) -> list[str]:
    return sorted(r.value.decode() for r in df.select("value").collect())


def committed_messages(kb, t: str, partitions: int) -> list:
    """What read_committed sees of the topic, partition by partition in offset order."""
    c = WireConsumer(kb.bootstrap_servers, isolation_level=1)
    try:
        c.assign({(t, p): EARLIEST for p in range(partitions)})
        return sorted(c.drain(), key=lambda m: (m.partition, m.offset))
    finally:
        c.close()


def committed_values(kb, t: str, partitions: int) -> list[str]:
    return sorted(m.value.decode() for m in committed_messages(kb, t, partitions))


def assert_copied(kb, dst: str, n: int, src_partitions: int, dst_partitions: int) -> None:
    """``dst`` holds, committed, each of the ``n`` records ``produce`` wrote (key k<i>, value
    v<i>, source partition i % src_partitions) once, with its key, in the partition the
    default partitioner gives its key, and each source partition's records in their order
    (records of different source partitions interleave as their tasks ran)."""
    from kesque.utils import murmur2

    got = [(m.partition, m.key, m.value) for m in committed_messages(kb, dst, dst_partitions)]
    assert sorted(v for _p, _k, v in got) == sorted(f"v{i}".encode() for i in range(n))  # each once
    for p, k, v in got:
        assert k == b"k" + v[1:], f"{v.decode()} lost its key: {k!r}"
        assert p == (murmur2(k) & 0x7FFFFFFF) % dst_partitions, f"{k!r} in partition {p}"
    for p in range(dst_partitions):
        for q in range(src_partitions):
            seq = [int(v[1:]) for pp, _k, v in got if pp == p and int(v[1:]) % src_partitions == q]
            assert seq == sorted(seq), f"partition {p}: source partition {q}'s records out of order: {seq}"


# ============================================================================ 1. batch reads


def test_batch_read_returns_what_was_produced(spark, kb):
    t = topic(kb)
    produce(kb, t, 30, ts=1_700_000_000_000)
    rows = read(spark, kb, subscribe=t, includeHeaders="true").collect()
    assert len(rows) == 30
    for r in rows:
        i = int(r.value[1:])
        assert (r.key, r.topic, r.partition, r.offset, r.timestampType) == (f"k{i}".encode(), t, i % 3, i // 3, 0)
        assert int(r.timestamp.timestamp() * 1000) == 1_700_000_000_000 + i
        assert [(h.key, h.value) for h in r.headers] == [("n", str(i).encode())]
    assert "headers" not in read(spark, kb, subscribe=t).columns


def test_batch_read_bounds(spark, kb):
    t = topic(kb)
    produce(kb, t, 30, ts=1_700_000_000_000)
    assert len(values(read(spark, kb, subscribe=t, startingOffsets="earliest", endingOffsets="latest"))) == 30
    # JSON offsets with -2 (earliest) and an explicit end
    got = values(
        read(
            spark,
            kb,
            subscribe=t,
            startingOffsets=json.dumps({t: {"0": 5, "1": -2, "2": 9}}),
            endingOffsets=json.dumps({t: {"0": 8, "1": -1, "2": 10}}),
        )
    )
    assert got == sorted([f"v{i}" for i in (15, 18, 21)] + [f"v{3 * k + 1}" for k in range(10)] + ["v29"])
    # timestamps: records from 1_700_000_000_020 on
    assert values(read(spark, kb, subscribe=t, startingTimestamp="1700000000020")) == sorted(
        f"v{i}" for i in range(20, 30)
    )
    by_ts = {t: {"0": 1_700_000_000_012, "1": 1_700_000_000_000, "2": 1_700_000_000_029}}
    assert values(read(spark, kb, subscribe=t, startingOffsetsByTimestamp=json.dumps(by_ts))) == sorted(
        [f"v{i}" for i in range(12, 30, 3)] + [f"v{i}" for i in range(1, 30, 3)] + ["v29"]
    )
    assert values(read(spark, kb, subscribe=t, endingTimestamp="1700000000010")) == sorted(f"v{i}" for i in range(10))
    # assign and subscribePattern
    assert values(read(spark, kb, assign=json.dumps({t: [1]}))) == sorted(f"v{i}" for i in range(1, 30, 3))
    assert len(values(read(spark, kb, subscribePattern=t[:6] + ".*"))) >= 30
    # minPartitions splits the ranges into more tasks, same rows; about minPartitions, as in
    # Spark: each of 3 ranges of 10 gets round(10 / 30 * 7) = 2 tasks
    df = read(spark, kb, subscribe=t, minPartitions="7")
    assert df.rdd.getNumPartitions() == 6 and len(values(df)) == 30


# ============================================================================ 2. streaming


def _stream_once(spark, kb, t, checkpoint, sizes: list[int], seen: list[str], **opts):
    df = (
        spark.readStream.format("kesque")
        .option("kafka.bootstrap.servers", kb.bootstrap_servers)
        .option("subscribe", t)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        df = df.option(k, v)

    def batch(bdf, batch_id):
        vals = [r.value.decode() for r in bdf.collect()]
        sizes.append(len(vals))
        seen.extend(vals)

    q = (
        df.load()
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert not q.isActive


def test_streaming_max_offsets_per_trigger_and_resume(spark, kb, tmp_path):
    t = topic(kb, 2)
    produce(kb, t, 50, partitions=2)
    sizes: list[int] = []
    seen: list[str] = []
    cp = str(tmp_path / "cp")
    _stream_once(spark, kb, t, cp, sizes, seen, maxOffsetsPerTrigger="20")
    assert sizes == [20, 20, 10]
    produce(kb, t, 30, partitions=2, start=50)
    sizes2: list[int] = []
    _stream_once(spark, kb, t, cp, sizes2, seen, maxOffsetsPerTrigger="20")
    assert sizes2 == [20, 10]
    assert sorted(seen) == sorted(f"v{i}" for i in range(80))  # no gap, no repeat


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(spark, kb, tmp_path):
    t = topic(kb, 1)
    batches: list[tuple[float, int]] = []

    def batch(bdf, batch_id):
        n = bdf.count()
        if n:
            batches.append((time.monotonic(), n))

    q = (
        spark.readStream.format("kesque")
        .option("kafka.bootstrap.servers", kb.bootstrap_servers)
        .option("subscribe", t)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "30")
        .option("maxTriggerDelay", "6s")
        .load()
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        time.sleep(1)  # the query is running and has seen the (empty) topic
        t0 = time.monotonic()
        produce(kb, t, 10, partitions=1)
        while not batches:
            assert time.monotonic() - t0 < 30, "no batch after maxTriggerDelay"
            time.sleep(0.05)
        assert batches[0][1] == 10 and batches[0][0] - t0 >= 3.0  # held back until the delay (6 s) passed
        t1 = time.monotonic()
        produce(kb, t, 40, partitions=1, start=10)
        while len(batches) < 2:
            assert time.monotonic() - t1 < 30
            time.sleep(0.05)
        # enough offsets: no waiting. Waiting would put the batch 6 s after the last one; the margin
        # is for a loaded machine, where a micro-batch alone can take seconds
        assert batches[1][1] == 40 and batches[1][0] - batches[0][0] < 5.0
    finally:
        q.stop()


def test_streaming_picks_up_new_partitions(spark, kb, tmp_path):
    from confluent_kafka.admin import NewPartitions

    t = topic(kb, 1)
    produce(kb, t, 5, partitions=1)
    seen: list[str] = []
    cp = str(tmp_path / "cp")
    _stream_once(spark, kb, t, cp, [], seen)
    kb.admin.create_partitions([NewPartitions(t, 2)])[t].result(10)
    time.sleep(0.5)
    with Producer(kb.bootstrap_servers) as p:
        p.send(t, b"new-partition", partition=1)
        p.send(t, b"old-partition", partition=0)
        p.flush()
    _stream_once(spark, kb, t, cp, [], seen)
    assert sorted(seen) == sorted([f"v{i}" for i in range(5)] + ["new-partition", "old-partition"])


# ============================================================================ 3. exactly-once sink


def test_batch_write_with_a_failing_first_attempt(spark, kb):
    """The first attempt of task 0 meets a null topic half-way through, after it has sent
    records (kafka.batch.size is tiny): it fails, its transaction is aborted, the retry
    writes everything once."""
    from pyspark.sql.functions import udf

    src, dst = topic(kb), topic(kb, 2)
    produce(kb, src, 300)

    @udf("string")
    def topic_of(v):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return None if ctx.attemptNumber() == 0 and ctx.partitionId() == 0 and v == b"v150" else dst

    df = read(spark, kb, subscribe=src).selectExpr("key", "value").withColumn("topic", topic_of("value"))
    (
        df.write.format("kesque")
        .option("kafka.bootstrap.servers", kb.bootstrap_servers)
        .option("kafka.batch.size", "200")
        .option("transactionalIdPrefix", "flaky")
        .mode("append")
        .save()
    )
    assert_copied(kb, dst, 300, 3, 2)
    # the failed attempt's records are in the log, aborted: only read_uncommitted sees them
    assert len(read(spark, kb, subscribe=dst).collect()) > 300
    assert _open_txns(kb, "flaky.") == []


def test_sink_places_rows_as_kafka_and_keeps_their_order(spark, kb):
    """Keyed rows go where murmur2 puts them, a partition column wins, unkeyed rows stick to
    one partition; within a partition the rows keep the task's order (column-wise path)."""
    from kesque.utils import murmur2

    dst = topic(kb, 3)
    rows = [(f"k{i % 5}", f"v{i}", 2 if i % 7 == 0 else None) for i in range(300)] + [
        (None, f"n{i}", None) for i in range(20)
    ]
    df = spark.createDataFrame(rows, "key string, value string, partition int").coalesce(1)
    (
        df.write.format("kesque")
        .option("kafka.bootstrap.servers", kb.bootstrap_servers)
        .option("topic", dst)
        .option("kafka.batch.size", "2048")
        .mode("append")
        .save()
    )
    got = read(spark, kb, subscribe=dst).collect()
    assert len(got) == 320
    by_part: dict[int, list[str]] = {}
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        by_part.setdefault(r.partition, []).append(r.value.decode())
        i = int(r.value[1:])
        if r.key is not None:
            expected = 2 if i % 7 == 0 else (murmur2(r.key) & 0x7FFFFFFF) % 3
            assert r.partition == expected, r
    assert len({r.partition for r in got if r.key is None}) == 1
    for vals in by_part.values():  # the order of the rows, partition by partition
        assert vals == [v for _k, v, _p in rows if v in set(vals)]
    bad = spark.createDataFrame([("x", 9)], "value string, partition int")
    with pytest.raises(Exception, match="Invalid partition given with record: 9"):
        (
            bad.write.format("kesque")
            .option("kafka.bootstrap.servers", kb.bootstrap_servers)
            .option("topic", dst)
            .mode("append")
            .save()
        )


def _open_txns(kb, prefix):
    from kesque.spark.options import sink_options
    from kesque.spark.sink import open_transactions

    return open_transactions(sink_options({"kafka.bootstrap.servers": kb.bootstrap_servers}), prefix)


# two Spark drivers one after the other: a couple of minutes on a loaded 2-core machine, more
# than the suite's 300 s per test when other work shares it
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stage", [pytest.param("before-commit", marks=pytest.mark.slow), "mid-commit"])
def test_driver_killed_around_the_commit(kb, tmp_path, stage):
    src, dst = topic(kb, 2), topic(kb, 2)
    produce(kb, src, 60, partitions=2)
    cp, prefix = str(tmp_path / "cp"), "crash" + uuid.uuid4().hex[:6]
    marker = tmp_path / "paused"
    args = [sys.executable, os.path.join(HERE, "spark_driver.py"), kb.bootstrap_servers, src, dst, cp, prefix]
    env = {**os.environ, "KESQUE_SPARK_PAUSE": f"{stage}:{marker}", "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 180
        while not marker.exists():
            assert proc.poll() is None, "the driver ended before it reached the commit"
            assert time.time() < deadline, "the driver never reached the commit"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        proc.wait()
    assert _open_txns(kb, prefix + ".") != []  # prepared transactions are waiting for a decision
    env.pop("KESQUE_SPARK_PAUSE")
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert "done" in out.stdout, out.stderr[-3000:]
    assert_copied(kb, dst, 60, 2, 2)
    assert _open_txns(kb, prefix + ".") == []


# ============================================================================ 4. isolation levels


def test_read_committed_skips_aborted_records_and_markers(spark, kb):
    t = topic(kb, 1)
    with Producer(kb.bootstrap_servers, transactional_id="ab-" + uuid.uuid4().hex[:6]) as p:
        p.init_transactions()
        for word, commit in (("c1", True), ("a1", False), ("c2", True)):
            p.begin_transaction()
            for i in range(3):
                p.send(t, f"{word}-{i}".encode(), partition=0)
            p.commit_transaction() if commit else (p.flush(), p.abort_transaction())
    rc = read(spark, kb, subscribe=t, **{"kafka.isolation.level": "read_committed"}).collect()
    assert sorted(r.value.decode() for r in rc) == sorted(f"c{k}-{i}" for k in (1, 2) for i in range(3))
    assert sorted(r.offset for r in rc) == [0, 1, 2, 8, 9, 10]  # gaps: markers at 3, 7, 11; aborted 4-6
    ru = read(spark, kb, subscribe=t).collect()
    assert len(ru) == 9 and sorted(r.offset for r in ru) == [0, 1, 2, 4, 5, 6, 8, 9, 10]  # no markers


# ============================================================================ 6. bad options, data loss


@pytest.mark.parametrize(
    "opts, fragment",
    [
        ({}, "subscribe, subscribePattern, assign"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "subscribe, subscribePattern, assign"),
        ({"subscribe": "a", "startingOffsets": "{not json"}, "startingOffsets"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "auto.offset.reset"),
        ({"subscribe": "a", "kafka.value.deserializer": "x"}, "value.deserializer"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),  # batch: latest start is refused
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "a", "kafka.security.protocol": "SSL"}, "kafka.security.protocol"),
        ({"subscribe": "a", "kafka.fetch.max.bytes": "lots"}, "kafka.fetch.max.bytes"),
    ],
)
def test_bad_options_fail_fast(spark, kb, opts, fragment):
    with pytest.raises(Exception) as e:
        read(spark, kb, **opts).collect()
    assert fragment in str(e.value)


def test_bad_sink_options(spark, kb):
    df = spark.createDataFrame([("x",)], "value string")
    for opts, fragment in (
        ({}, "topic option required"),
        ({"topic": "t", "kafka.key.serializer": "x"}, "key.serializer"),
    ):
        w = df.write.format("kesque").option("kafka.bootstrap.servers", kb.bootstrap_servers)
        for k, v in opts.items():
            w = w.option(k, v)
        with pytest.raises(Exception) as e:
            w.mode("append").save()
        assert fragment in str(e.value)
    # save modes: Spark refuses its default (ErrorIfExists) for a Python data source, naming
    # Append; overwrite is refused by the sink (it appends, as Spark's Kafka sink)
    w = df.write.format("kesque").option("kafka.bootstrap.servers", kb.bootstrap_servers).option("topic", "t")
    with pytest.raises(Exception) as e:
        w.save()
    assert "Append" in str(e.value)
    with pytest.raises(Exception) as e:
        w.mode("overwrite").save()
    assert 'Use .mode("append")' in str(e.value)


def test_unreachable_broker_fails_within_the_timeout(spark):
    started = time.monotonic()
    with pytest.raises(Exception) as e:
        (
            spark.read.format("kesque")
            .option("kafka.bootstrap.servers", "127.0.0.1:1")
            .option("subscribe", "x")
            .option("kafka.default.api.timeout.ms", "3000")
            .load()
            .collect()
        )
    assert time.monotonic() - started < 30
    assert "cannot reach kafka.bootstrap.servers=127.0.0.1:1" in str(e.value)


def test_fail_on_data_loss(spark, kb):
    """Retention (retention.bytes, checked every 200 ms) deletes the first segment of a
    topic; a read from offset 0 then fails with failOnDataLoss=true (the default) and skips
    the deleted offsets with failOnDataLoss=false."""
    t = topic(kb, 1, {"segment.bytes": str(1 << 20), "retention.bytes": "1000000"})
    value = b"x" * 1000
    with Producer(kb.bootstrap_servers) as p:
        for i in range(2500):
            p.send(t, value + str(i).encode(), partition=0)
        p.flush()
    c = WireConsumer(kb.bootstrap_servers)
    try:
        deadline = time.time() + 30
        while (first := c.list_offsets([(t, 0)], EARLIEST)[(t, 0)]) == 0:
            assert time.time() < deadline, "retention never deleted the first segment"
            time.sleep(0.2)
    finally:
        c.close()
    start = json.dumps({t: {"0": 0}})
    with pytest.raises(Exception) as e:
        read(spark, kb, subscribe=t, startingOffsets=start).collect()
    assert "failOnDataLoss" in str(e.value)
    rows = read(spark, kb, subscribe=t, startingOffsets=start, failOnDataLoss="false").select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(first, 2500))


def test_format_is_registered_automatically(tmp_path):
    """No register() call: Spark finds pyspark_kesque.DefaultSource by itself."""
    script = (
        "import os, sys\nos.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "print(s.read.format('kesque').option('kafka.bootstrap.servers', 'x:1').option('subscribe', 't')"
        ".load().columns)\ns.stop()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert "['key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType']" in out.stdout, out.stderr[
        -2000:
    ]


# ============================================================================ the commit protocol, without Spark


def _prepared(kb, txn_id: str, t: str, values: list[str]):
    from kesque.spark.sink import KesqueCommitMessage

    p = Producer(kb.bootstrap_servers, transactional_id=txn_id, enable_2pc=True)
    p.init_transactions()
    p.begin_transaction()
    for v in values:
        p.send(t, v.encode(), partition=0)
    st = p.prepare_transaction()
    p.close()
    return KesqueCommitMessage(txn_id, st.producer_id, st.epoch, len(values))


def test_commit_protocol_replay_and_takeover(kb):
    from kesque.spark import sink
    from kesque.spark.options import sink_options

    t = topic(kb, 1)
    prefix = "proto" + uuid.uuid4().hex[:6]
    o = sink_options({"kafka.bootstrap.servers": kb.bootstrap_servers, "topic": t, "transactionalIdPrefix": prefix})
    first = _prepared(kb, f"{prefix}.sA.0.0", t, ["a", "b"])
    sink.commit_stream(o, [first], 0)
    # batch 0 again (a replay after a restart): its new transaction is aborted, nothing is added
    sink.commit_stream(o, [_prepared(kb, f"{prefix}.sB.0.0", t, ["a", "b"])], 0)
    assert committed_values(kb, t, 1) == ["a", "b"]
    # a prepared transaction whose id another attempt took over: the commit refuses, logs nothing
    taken = _prepared(kb, f"{prefix}.sB.1.0", t, ["c"])
    _prepared(kb, f"{prefix}.sB.1.0", t, ["c-again"])  # same id: aborts the first, prepares anew
    with pytest.raises(sink.KesqueSinkError, match="no longer open"):
        sink.commit_stream(o, [taken], 1)
    assert sink.SinkLog(o).last() == {"batchId": 0, "state": "committed"}
    sink.abort_stream(o, [taken])  # what Spark does next: nothing stays open
    assert _open_txns(kb, prefix + ".") == []
    assert committed_values(kb, t, 1) == ["a", "b"]


def test_sink_names_the_broker_setting_when_two_phase_commit_is_off(tmp_path):
    """A broker with Kafka's default (transaction.two.phase.commit.enable=false) refuses the
    sink's InitProducerId with TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the task's error says which
    broker setting to change, and at-least-once writes without it."""
    import pyarrow as pa

    from kesque.spark import sink
    from kesque.spark.options import sink_options

    with running_broker(tmp_path / "data") as b:  # kesque.Broker's defaults: Kafka's, 2PC off
        b.admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        t = topic(b, 1)
        batch = pa.record_batch({"value": pa.array([b"x", b"y"], pa.binary())})
        o = sink_options({"kafka.bootstrap.servers": b.bootstrap_servers, "topic": t})
        with pytest.raises(
            sink.KesqueSinkError,
            match=r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED\): set "
            r"transaction\.two\.phase\.commit\.enable=true on the "
            r"brokers",
        ):
            sink.write_task(o, [batch], "no2pc")
        o = sink_options(
            {"kafka.bootstrap.servers": b.bootstrap_servers, "topic": t, "deliveryGuarantee": "at-least-once"}
        )
        assert sink.write_task(o, [batch], "no2pc").rows == 2


@pytest.mark.slow  # 33 s (make slow); the default suite keeps the driver kill mid-commit
def test_streaming_query_survives_a_broker_sigkill(tmp_path):
    """The broker is SIGKILLed just as the driver starts a commit and is back 3 s later: the
    commit retries through it, the query finishes, each input is in the output once."""
    with running_broker(tmp_path / "data", BROKER) as b:
        b.admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        src, dst = topic(b, 2), topic(b, 2)
        produce(b, src, 60, partitions=2)
        marker = tmp_path / "committing"
        args = [
            sys.executable,
            os.path.join(HERE, "spark_driver.py"),
            b.bootstrap_servers,
            src,
            dst,
            str(tmp_path / "cp"),
            "bk" + uuid.uuid4().hex[:6],
        ]
        env = {**os.environ, "KESQUE_SPARK_PAUSE": f"before-commit:{marker}:2", "PYTHONPATH": os.getcwd()}
        proc = subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            deadline = time.time() + 180
            while not marker.exists():
                assert proc.poll() is None and time.time() < deadline, "the driver never reached a commit"
                time.sleep(0.1)
            b.kill()
            time.sleep(3)
            b.restart()
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert "done" in out, err[-3000:]
        assert_copied(b, dst, 60, 2, 2)
