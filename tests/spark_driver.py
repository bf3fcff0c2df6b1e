"""A Spark driver for the crash tests (run as a subprocess so the test can SIGKILL it).

    python spark_driver.py BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT PREFIX

Streams IN_TOPIC to OUT_TOPIC through format kesque (exactly-once sink, 2 records a
trigger per partition at most) with Trigger.AvailableNow, and prints "done" at the end.
"""

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

import kesque.spark  # noqa: E402

bs, src, dst, checkpoint, prefix = sys.argv[1:6]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
kesque.spark.register(spark)
df = (
    spark.readStream.format("kesque")
    .option("kafka.bootstrap.servers", bs)
    .option("subscribe", src)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "20")
    .load()
)
q = (
    df.selectExpr("key", "value")
    .writeStream.format("kesque")
    .option("kafka.bootstrap.servers", bs)
    .option("topic", dst)
    .option("transactionalIdPrefix", prefix)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
q.awaitTermination()
print("done", flush=True)
spark.stop()
