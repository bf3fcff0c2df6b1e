"""Run both Spark examples against a throwaway broker (``make examples``).

Starts kesque in a temporary directory (two-phase commit enabled for the exactly-once
sink), produces N click events over ten minutes of event time, runs the streaming pipeline
with Trigger.AvailableNow and the offline load, and checks what they produced.
"""

import argparse
import json
import os
import random
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PAGES = ["/home", "/cart", "/search", "/item"]


def events(n: int, seed: int = 7):
    rnd = random.Random(seed)
    t0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    for i in range(n):
        ts = t0 + timedelta(seconds=600 * i / n)
        yield {"page": rnd.choice(PAGES), "user": f"u{rnd.randrange(50)}", "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    a = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from confluent_kafka.admin import AdminClient, NewTopic
    from offline_load_to_parquet import load
    from pyspark.sql import SparkSession
    from spark_streaming_pipeline import build

    import kesque.spark
    from kesque.client.consumer import EARLIEST, WireConsumer
    from kesque.client.producer import Producer
    from kesque.testing.broker import Broker

    work = tempfile.mkdtemp(prefix="kesque-examples-")
    with Broker(data_dir=os.path.join(work, "data"), config={"transaction.two.phase.commit.enable": "true"}) as b:
        bs = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        for t, n in (("clicks", 3), ("clicks-per-minute", 2)):
            admin.create_topics([NewTopic(t, n, 1)])[t].result(15)
        evs = list(events(a.events))
        with Producer(bs) as p:
            for e in evs:
                p.send("clicks", json.dumps(e).encode(), key=e["user"].encode())
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("kesque-examples")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        kesque.spark.register(spark)
        try:
            q = build(spark, bs, "clicks", "clicks-per-minute", os.path.join(work, "cp"), available_now=True)
            q.awaitTermination()
            n = load(spark, bs, "clicks", os.path.join(work, "parquet"), min_partitions=6)
        finally:
            spark.stop()
        # what the pipeline wrote, as a read_committed consumer sees it
        c = WireConsumer(bs, isolation_level=1)
        c.assign({("clicks-per-minute", p): EARLIEST for p in range(2)})
        got = [json.loads(m.value) for m in c.drain()]
        c.close()
    expected = Counter((e["page"], e["ts"][:16]) for e in evs)
    # append mode emits the windows the watermark (latest event - 30 s) has passed
    last = max(datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%SZ") for e in evs) - timedelta(seconds=30)
    closed = {
        k: v for k, v in expected.items() if datetime.strptime(k[1], "%Y-%m-%dT%H:%M") + timedelta(minutes=1) <= last
    }
    produced = Counter()
    for r in got:
        produced[(r["page"], r["window_start"][:16])] += r["clicks"]
    ok = produced == closed and n == len(evs)
    print(f"offline load: {n} of {len(evs)} records in Parquet")
    print(
        f"streaming: {len(got)} window counts for {len(closed)} closed (page, minute) windows; "
        f"{'exactly once' if produced == closed else 'MISMATCH'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
