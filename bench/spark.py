"""The Spark connector figures (issue 6), against an already-running broker:

* batch read throughput from kesque into Spark (records of ~100 B), rows/s, and its ratio
  to an in-memory Python data source that yields Arrow batches of the same schema and sizes
  — the ceiling of the Python data-source path on this machine, measured in the same run;
* streaming end-to-end latency with the default trigger: a record appended to the input
  topic until it is visible to a read_committed consumer of the output topic (the query
  copies input to output through the exactly-once sink), p50/p99.

Both sides of a ratio run in one SparkSession (local[2]); the query is
``df.write.format("noop")``, which materialises every column. Nothing here asserts.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

VALUE = b"x" * 100


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("kesque-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    import kesque.spark

    kesque.spark.register(s)
    s.dataSource.register(_memory_source())
    return s


def _memory_source():
    """format("kesque-memory"): ``partitions`` tasks of ``rows`` rows each, Arrow batches of
    the Kafka schema built once per task and yielded like kesque's reader yields them."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kesque.spark.source import BATCH_ROWS, SCHEMA_DDL, arrow_schema

    class MemoryReader(DataSourceReader):
        def __init__(self, options):
            self.rows = int(options["rows"])
            self.parts = int(options["partitions"])

        def partitions(self):
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition):
            import pyarrow as pa

            n = self.rows // self.parts
            schema = arrow_schema(False)
            size = min(BATCH_ROWS, n)
            arrays = [
                pa.array([None] * size, pa.binary()),
                pa.array([VALUE] * size, pa.binary()),
                pa.array(["t"] * size, pa.string()),
                pa.array([partition.value] * size, pa.int32()),
                pa.array(range(size), pa.int64()),
                pa.array([0] * size, pa.timestamp("us", tz="UTC")),
                pa.array([0] * size, pa.int32()),
            ]
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            done = 0
            while done < n:
                k = min(size, n - done)
                yield batch if k == size else batch.slice(0, k)
                done += k

    class MemorySource(DataSource):
        @classmethod
        def name(cls):
            return "kesque-memory"

        def schema(self):
            return SCHEMA_DDL

        def reader(self, schema):
            return MemoryReader(self.options)

    return MemorySource


def fill(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from kesque.client.producer import Producer

    with Producer(bootstrap, acks=1, enable_idempotence=False) as p:
        for i in range(records):
            p.send(topic, VALUE, partition=i % partitions)
        p.flush()


def _noop(df) -> float:
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def batch_read(spark, bootstrap: str, topic: str, records: int, partitions: int, passes: int = 3) -> dict:
    kesque_s, memory_s = [], []
    for _ in range(passes):
        df = spark.read.format("kesque").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
        kesque_s.append(_noop(df))
        mem = (
            spark.read.format("kesque-memory").option("rows", str(records)).option("partitions", str(partitions)).load()
        )
        memory_s.append(_noop(mem))
    count = (
        spark.read.format("kesque")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .count()
    )
    return {
        "records": count,
        "kesque_seconds": kesque_s,
        "memory_seconds": memory_s,
        "rate": records / min(kesque_s),
        "ceiling": records / min(memory_s),
    }


def batch_write(spark, bootstrap: str, topic: str, records: int, partitions: int, passes: int = 3) -> dict:
    """In-memory rows (key null, 100 B values) written through the exactly-once sink, against
    the same rows into the noop sink (the ceiling of the path without kesque)."""
    src = (
        spark.read.format("kesque-memory")
        .option("rows", str(records))
        .option("partitions", str(partitions))
        .load()
        .select("key", "value")
    )
    kesque_s, noop_s = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        (
            src.write.format("kesque")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("transactionalIdPrefix", "bench-w" + uuid.uuid4().hex[:6])
            .mode("append")
            .save()
        )
        kesque_s.append(time.perf_counter() - t0)
        noop_s.append(_noop(src))
    return {
        "records": records,
        "kesque_seconds": kesque_s,
        "noop_seconds": noop_s,
        "rate": records / min(kesque_s),
        "ceiling": records / min(noop_s),
    }


def streaming_latency(spark, bootstrap: str, seconds: float, checkpoint: str, interval: float = 0.1) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from kesque.client.consumer import LATEST, WireConsumer
    from kesque.client.producer import Producer

    src, dst = "lat-in-" + uuid.uuid4().hex[:6], "lat-out-" + uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t in (src, dst):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(15)
    q = (
        spark.readStream.format("kesque")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("kesque")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("transactionalIdPrefix", "bench-" + uuid.uuid4().hex[:6])
        .option("checkpointLocation", checkpoint)
        .start()
    )
    sent: dict[bytes, float] = {}
    seen: dict[bytes, float] = {}
    stop = threading.Event()

    def consume():
        c = WireConsumer(bootstrap, isolation_level=1, max_wait_ms=100)
        c.assign({(dst, 0): LATEST})
        while not stop.is_set():
            for m in c.poll(0.2):
                seen.setdefault(m.value, time.perf_counter())
        c.close()

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    time.sleep(5)  # the query's first (empty) batches and the JVM's warm-up
    with Producer(bootstrap, acks=-1) as p:
        warm_until = time.perf_counter() + 3
        end = warm_until + seconds
        i = 0
        while time.perf_counter() < end:
            v = f"{i}".encode()
            p.send(src, v, partition=0)
            p.flush()
            if time.perf_counter() >= warm_until:
                sent[v] = time.perf_counter()
            i += 1
            time.sleep(interval)
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline and not all(v in seen for v in sent):
        time.sleep(0.2)
    stop.set()
    th.join(5)
    q.stop()
    lat = sorted((seen[v] - t) * 1000 for v, t in sent.items() if v in seen)
    if not lat:
        return {"records": len(sent), "visible": 0}

    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))]

    return {"records": len(sent), "visible": len(lat), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": lat[-1]}


if __name__ == "__main__":  # a quick standalone run: python bench/spark.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tempfile

    from confluent_kafka.admin import AdminClient, NewTopic

    from kesque.testing.broker import Broker

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with Broker(config={"transaction.two.phase.commit.enable": "true"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("bench-spark", 4, 1)])["bench-spark"].result(15)
        fill(b.bootstrap_servers, "bench-spark", n, 4)
        s = session()
        print(batch_read(s, b.bootstrap_servers, "bench-spark", n, 4, passes=2))
        admin.create_topics([NewTopic("bench-spark-w", 4, 1)])["bench-spark-w"].result(15)
        print(batch_write(s, b.bootstrap_servers, "bench-spark-w", n, 4, passes=2))
        print(streaming_latency(s, b.bootstrap_servers, 10, tempfile.mkdtemp()))
        s.stop()
