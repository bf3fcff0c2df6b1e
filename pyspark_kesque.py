"""Lets Spark find format ``kesque`` by itself: PySpark registers the ``DefaultSource`` of
every top-level ``pyspark_*`` module it can import (pyspark.sql.worker.lookup_data_sources)."""

from kesque.spark import KesqueDataSource as DefaultSource

__all__ = ["DefaultSource"]
