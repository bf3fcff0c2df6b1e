"""Offline data load (seed 000): a whole topic to Parquet files, one Spark task per
partition range, read_committed so aborted transactions never reach the files.

    python examples/offline_load_to_parquet.py --bootstrap 127.0.0.1:9092 --topic clicks \\
        --path /tmp/clicks-parquet [--min-partitions 8]
"""

import argparse
import os
import sys


def load(spark, bootstrap: str, topic: str, path: str, min_partitions: int | None = None) -> int:
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("kesque")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", "read_committed")
    )
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    df = reader.load().select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "partition",
        "offset",
        "timestamp",
    )
    df.write.mode("overwrite").partitionBy("partition").parquet(path)
    return spark.read.parquet(path).count()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--path", default="/tmp/kesque-clicks-parquet")
    ap.add_argument("--min-partitions", type=int, default=None)
    a = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kesque-offline-load")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import kesque.spark

    kesque.spark.register(spark)
    n = load(spark, a.bootstrap, a.topic, a.path, a.min_partitions)
    print(f"{n} records of {a.topic} written to {a.path}")
    spark.stop()


if __name__ == "__main__":
    main()
