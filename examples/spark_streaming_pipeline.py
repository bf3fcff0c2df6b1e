"""A streaming pipeline on Spark, exactly once: JSON click events from a kesque topic,
parsed, counted per page in 1-minute event-time windows with a 30-second watermark, and
written to a kesque topic through the exactly-once sink.

    python examples/spark_streaming_pipeline.py --bootstrap 127.0.0.1:9092 \\
        --input clicks --output clicks-per-minute --checkpoint /tmp/clicks-cp [--available-now]

Input records: {"page": "/home", "user": "u1", "ts": "2026-11-22T10:00:05Z"}.
Output records: key = page, value = {"page", "window_start", "window_end", "clicks"}; a window
is emitted once the watermark has passed its end (append mode), exactly once even if the
query is killed and restarted from its checkpoint.
"""

import argparse
import os
import sys


def build(spark, bootstrap: str, source: str, sink: str, checkpoint: str, available_now: bool):
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("kesque")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    parsed = (
        events.select(F.from_json(F.col("value").cast("string"), "page string, user string, ts timestamp").alias("e"))
        .select("e.*")
        .where(F.col("page").isNotNull())
    )
    counts = (
        parsed.withWatermark("ts", "30 seconds")
        .groupBy(F.window("ts", "1 minute"), "page")
        .agg(F.count("*").alias("clicks"))
    )
    out = counts.select(
        F.col("page").alias("key"),
        F.to_json(
            F.struct(
                "page", F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "clicks"
            )
        ).alias("value"),
    )
    writer = (
        out.writeStream.format("kesque")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("transactionalIdPrefix", f"clicks-{sink}")
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--input", default="clicks")
    ap.add_argument("--output", default="clicks-per-minute")
    ap.add_argument("--checkpoint", default="/tmp/kesque-clicks-checkpoint")
    ap.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kesque-clicks")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import kesque.spark

    kesque.spark.register(spark)
    q = build(spark, a.bootstrap, a.input, a.output, a.checkpoint, a.available_now)
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
