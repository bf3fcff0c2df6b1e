"""Issue 30's figures: format ``kesque`` against Spark's own Kafka connector (format ``kafka``,
``spark-sql-kafka-0-10``, resolved by ``make spark-kafka`` into build/spark-kafka) on the same
kesque cluster, in the same SparkSession, steps alternating between the two formats:

* batch write: ``spark.range`` rows (null key, 100 B value) written to a topic
  (kesque: the exactly-once sink, its default; kafka: Spark's at-least-once sink, its default);
* batch read: that topic read into ``write.format("noop")`` (every column materialised);
* streaming read: ``readStream`` with ``Trigger.AvailableNow`` into the noop sink, both formats
  reading the same topic in a pass (written by the pass's first format: the sinks spread rows
  over partitions differently, and a read's slowest task is its biggest partition);
* streaming write + read back: ``readStream`` (AvailableNow) copying the topic to a new one
  with the same format, then a batch count of the copy with the same format;

and the Python data-source ceiling: an in-memory Python source yielding Arrow batches of the
Kafka schema (bench/spark.py's ``kesque-memory``), no I/O. Rows/s from the best of
``passes``; the ratio is kesque/kafka, of the best passes and (``median``) of the median
times, with the lowest and highest ratio of one pass's two times. Nothing here asserts.
Spark's Python processes run without hypothesis, as where kesque is deployed
(``KESQUE_BENCH_HYPOTHESIS=1`` keeps it: see SUBPROCESS_SITE).

    python bench/spark_kafka.py [rows] [passes] [nodes] [steps] [--compiled-pyspark] [--trace FILE]

``steps``: a comma-separated subset of write,read,stream,copy,ceiling (default all; without
write, each format writes its topic once, untimed, and the passes read those).

``--compiled-pyspark``: Spark runs from a private SPARK_HOME (links to the real one's files)
whose python/lib/pyspark.zip holds bytecode (``kesque spark compile-pyspark``'s zip); the
installation itself is not touched. ``--trace FILE``: every Python process Spark starts
appends a JSON line to FILE (its command line, when it started, when its sitecustomize ran,
when it first imported kesque.spark, when it ended, its CPU at each), and the bench appends
one per streaming query (its format and when ``start()`` was called).
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JARS_DIR = os.path.join(ROOT, "build", "spark-kafka")
CLUSTER = {
    "transaction.two.phase.commit.enable": "true",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}


def jars() -> list[str]:
    found = sorted(glob.glob(os.path.join(JARS_DIR, "*.jar")))
    if not any("spark-sql-kafka" in os.path.basename(j) for j in found):
        raise SystemExit(f"no spark-sql-kafka jar in {JARS_DIR}: run `make spark-kafka` first")
    return found


# Spark's Python processes (the streaming source runner, the planners, the task workers) inherit this
# process's environment. kio imports hypothesis whenever it is importable, and the bench's venv has it
# (the test extra): ≈ 0.1 s of CPU more in every fresh interpreter, which format kafka never starts.
# Where kesque is deployed hypothesis is absent, so the bench's Python processes run as the tests'
# subprocesses do, with it marked absent (tests/subprocess_site); KESQUE_BENCH_HYPOTHESIS=1 keeps it.
SUBPROCESS_SITE = os.path.join(ROOT, "tests", "subprocess_site")


# --trace: the sitecustomize of every Python process Spark starts (it replaces SUBPROCESS_SITE's and
# does what that does too, unless KESQUE_BENCH_HYPOTHESIS=1)
TRACE_SITE = """
import json, os, sys, time
_T0 = time.time()
if os.environ.get("KESQUE_BENCH_HYPOTHESIS") != "1":
    sys.modules.setdefault("hypothesis", None)
with open("/proc/self/stat") as f:
    _ticks = int(f.read().rsplit(")", 1)[1].split()[19])
with open("/proc/stat") as f:
    _btime = next(int(x.split()[1]) for x in f if x.startswith("btime"))
with open("/proc/self/cmdline", "rb") as f:
    _cmd = f.read().replace(b"\\0", b" ").decode(errors="replace").strip()
_rec = {"pid": os.getpid(), "cmd": _cmd[-120:], "exec": _btime + _ticks / os.sysconf("SC_CLK_TCK"), "site": _T0,
        "site_cpu": time.process_time()}


def _write(**more):
    with open(os.environ["KESQUE_BENCH_TRACE"], "a") as f:
        f.write(json.dumps({**_rec, **more}) + "\\n")


class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "kesque.spark" and "kesque" not in _rec:
            _rec["kesque"], _rec["kesque_cpu"] = time.time(), time.process_time()
        return None


sys.meta_path.insert(0, _Watch())


def _end(*_):
    _write(end=time.time(), end_cpu=time.process_time())
    if _:  # the JVM ends the streaming source runner with SIGTERM: atexit would not run
        os._exit(143)


import atexit, signal
atexit.register(_end)
signal.signal(signal.SIGTERM, _end)
"""


def trace(**rec) -> None:
    path = os.environ.get("KESQUE_BENCH_TRACE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def private_spark_home(real: str, where: str) -> str:
    """A SPARK_HOME in ``where`` that links to every file of ``real`` but python/lib/pyspark.zip,
    which is a copy with bytecode (kesque spark compile-pyspark's)."""
    from kesque.cli.spark import compile_zip, zip_path

    home = os.path.join(where, "spark-home")
    stock = zip_path(real)
    if not os.path.isfile(stock):
        raise SystemExit(f"--compiled-pyspark: no pyspark.zip at {stock}")
    for top, dirs, files in os.walk(real):
        rel = os.path.relpath(top, real)
        keep = []
        for d in dirs:  # only the path down to pyspark.zip is copied; every other directory is linked
            if os.path.join(rel, d) in (os.path.join(".", "python"), os.path.join("python", "lib")):
                keep.append(d)
            else:
                os.makedirs(os.path.join(home, rel), exist_ok=True)
                os.symlink(os.path.join(top, d), os.path.join(home, rel, d))
        dirs[:] = keep
        os.makedirs(os.path.join(home, rel), exist_ok=True)
        for f in files:
            if os.path.join(top, f) != stock:
                os.symlink(os.path.join(top, f), os.path.join(home, rel, f))
    compile_zip(stock, zip_path(home))
    return home


def session(cores: int = 2):
    """local[cores] with Spark's Kafka connector on the class path and format kesque registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if os.environ.get("KESQUE_BENCH_TRACE"):
        site = tempfile.mkdtemp(prefix="bench-site-")
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(TRACE_SITE)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (site, os.environ.get("PYTHONPATH"))))
    elif os.environ.get("KESQUE_BENCH_HYPOTHESIS") != "1":
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (SUBPROCESS_SITE, os.environ.get("PYTHONPATH"))))
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("kesque-bench-vs-kafka")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.jars", ",".join(jars()))
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    import kesque.spark

    sys.path.insert(0, HERE)
    import spark as bench_spark

    kesque.spark.register(s)
    s.dataSource.register(bench_spark._memory_source())
    return s


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _write(spark, fmt: str, bootstrap: str, topic: str, rows: int, partitions: int) -> None:
    df = spark.range(rows, numPartitions=partitions).selectExpr(
        "CAST(NULL AS BINARY) AS key", "repeat('x', 100) AS value"
    )
    w = df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    if fmt == "kesque":
        w = w.option("transactionalIdPrefix", "bw" + uuid.uuid4().hex[:8])
    w.mode("append").save()


def _read(spark, fmt: str, bootstrap: str, topic: str):
    return (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def _stream(spark, fmt: str, bootstrap: str, topic: str):
    return (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def _stream_read(spark, fmt: str, bootstrap: str, topic: str) -> None:
    trace(query=fmt, start=time.time())
    q = (
        _stream(spark, fmt, bootstrap, topic)
        .writeStream.format("noop")
        .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-cp-"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    trace(query=fmt, end=time.time(), progress=[p["durationMs"] for p in q.recentProgress])


def _stream_copy(spark, fmt: str, bootstrap: str, topic: str, out: str, rows: int) -> None:
    w = (
        _stream(spark, fmt, bootstrap, topic)
        .selectExpr("key", "value")
        .writeStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-cp-"))
        .trigger(availableNow=True)
    )
    if fmt == "kesque":
        w = w.option("transactionalIdPrefix", "sw" + uuid.uuid4().hex[:8])
    w.start().awaitTermination()
    n = _read(spark, fmt, bootstrap, out).count()
    if n < rows:
        raise RuntimeError(f"{fmt}: the copy has {n} rows, expected {rows}")


STEPS = ("write", "read", "stream", "copy", "ceiling")


def compare(spark, bootstrap: str, admin, rows: int, partitions: int, passes: int, rf: int, steps=STEPS) -> dict:
    from confluent_kafka.admin import NewTopic

    def new_topic() -> str:
        name = "bk-" + uuid.uuid4().hex[:8]
        admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)
        return name

    times: dict[str, dict[str, list[float]]] = {}

    def note(step, fmt, seconds):
        times.setdefault(step, {}).setdefault(fmt, []).append(seconds)

    # warm-up: the JVM, the Python workers and both connectors' classes
    warm = new_topic()
    for fmt in ("kafka", "kesque"):
        _write(spark, fmt, bootstrap, warm, 1000, partitions)
        _read(spark, fmt, bootstrap, warm).write.format("noop").mode("overwrite").save()
    topics = {}
    for i in range(passes):
        order = ("kafka", "kesque") if i % 2 == 0 else ("kesque", "kafka")
        if "write" in steps or not topics:  # without the write step, each format's topic is written once
            for fmt in order:
                t = new_topic()
                topics[fmt] = t
                seconds = _timed(lambda: _write(spark, fmt, bootstrap, t, rows, partitions))
                if "write" in steps:
                    note("batch write", fmt, seconds)
        if "read" in steps:
            for fmt in order:
                df = _read(spark, fmt, bootstrap, topics[fmt])
                note("batch read", fmt, _timed(lambda: df.write.format("noop").mode("overwrite").save()))
        if "stream" in steps:
            for fmt in order:
                note("streaming read", fmt, _timed(lambda: _stream_read(spark, fmt, bootstrap, topics[order[0]])))
        if "copy" in steps:
            for fmt in order:
                out = new_topic()
                note(
                    "streaming write + read back",
                    fmt,
                    _timed(lambda: _stream_copy(spark, fmt, bootstrap, topics[fmt], out, rows)),
                )
        if "ceiling" in steps:
            mem = (
                spark.read.format("kesque-memory")
                .option("rows", str(rows))
                .option("partitions", str(partitions))
                .load()
            )
            note("ceiling", "memory", _timed(lambda: mem.write.format("noop").mode("overwrite").save()))
    out = {}
    for step, by_fmt in times.items():
        rates = {fmt: rows / min(s) for fmt, s in by_fmt.items()}
        row = {f"{fmt}_rows_s": round(r) for fmt, r in rates.items()}
        row.update({f"{fmt}_seconds": [round(x, 2) for x in s] for fmt, s in by_fmt.items()})
        if "kafka" in rates:
            row["ratio"] = round(rates["kesque"] / rates["kafka"], 2)
            row["ratio_median"] = round(statistics.median(by_fmt["kafka"]) / statistics.median(by_fmt["kesque"]), 2)
            per_pass = [k / q for k, q in zip(by_fmt["kafka"], by_fmt["kesque"])]
            row["ratio_per_pass"] = [round(min(per_pass), 2), round(max(per_pass), 2)]
        out[step] = row
    return out


def main(argv: list[str]) -> None:
    sys.path.insert(0, ROOT)
    from confluent_kafka.admin import AdminClient

    from kesque.testing.cluster import Cluster

    compiled = "--compiled-pyspark" in argv
    argv = [a for a in argv if a != "--compiled-pyspark"]
    if "--trace" in argv:
        i = argv.index("--trace")
        os.environ["KESQUE_BENCH_TRACE"] = os.path.abspath(argv[i + 1])
        del argv[i : i + 2]
    if compiled:
        from kesque.cli.spark import spark_home

        where = tempfile.mkdtemp(prefix="bench-spark-")
        atexit.register(shutil.rmtree, where, ignore_errors=True)  # links and an 11 MB zip
        os.environ["SPARK_HOME"] = private_spark_home(spark_home(), where)
    rows = int(argv[0]) if argv else 200_000
    passes = int(argv[1]) if len(argv) > 1 else 3
    nodes = int(argv[2]) if len(argv) > 2 else 3
    steps = tuple(argv[3].split(",")) if len(argv) > 3 else STEPS
    with Cluster(nodes=nodes, config=CLUSTER) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        spark = session()
        try:
            res = compare(spark, c.bootstrap_servers, admin, rows, 4, passes, min(3, nodes), steps)
        finally:
            spark.stop()
    print(f"rows={rows} passes={passes} nodes={nodes} partitions=4 pyspark.zip={'compiled' if compiled else 'stock'}")
    print(f"{'step':30} {'kafka rows/s':>13} {'kesque rows/s':>14} {'ratio':>6} {'median':>7}  per pass")
    for step, r in res.items():
        if "kafka_rows_s" in r:
            lo, hi = r["ratio_per_pass"]
            print(
                f"{step:30} {r['kafka_rows_s']:>13,} {r['kesque_rows_s']:>14,} {r['ratio']:>6} "
                f"{r['ratio_median']:>7}  {lo}-{hi}"
            )
        else:
            print(f"{step:30} {'':>13} {r['memory_rows_s']:>14,}  (Python data source, no I/O)")
    print(res)


if __name__ == "__main__":
    main(sys.argv[1:])
