"""kesque's PySpark connector: format ``kesque``, Spark's Kafka connector's options and
schema, exactly-once writes.

    import kesque.spark
    kesque.spark.register(spark)          # or nothing: Spark finds the pyspark_kesque module
    df = (spark.read.format("kesque")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

See docs/spark.md for the options, the schemas and the delivery guarantee.
"""

from __future__ import annotations

import time
import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from . import sink
from .options import _bool, sink_options, source_options
from .source import (
    HEADERS_DDL,
    SCHEMA_DDL,
    KesqueSourceError,
    OffsetPlanner,
    OffsetRange,
    data_loss,
    from_json_offsets,
    rate_limit,
    read_range,
    split_ranges,
    to_json_offsets,
)

__all__ = ["KesqueDataSource", "register", "KesqueSourceError", "KesqueSinkError"]

KesqueSinkError = sink.KesqueSinkError

# Spark's Kafka sink takes Append and ErrorIfExists (its default) and refuses the others; a Python
# data source is handed only Append and Overwrite (Spark itself refuses ErrorIfExists for it with
# UNSUPPORTED_DATA_SOURCE_SAVE_MODE), so batch writes to format kesque say .mode("append")
MODE_HELP = (
    "Save mode Overwrite is not allowed for format kesque: it appends to Kafka topics, as Spark's Kafka "
    'sink does. Use .mode("append"). (Spark\'s default save mode, ErrorIfExists, which format kafka treats '
    "as append, is refused by Spark for every Python data source: batch writes to format kesque need "
    '.mode("append").)'
)


class RangePartition(InputPartition):
    def __init__(self, r: OffsetRange):
        super().__init__(r)
        self.range = r


class KesqueDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kesque"

    def schema(self) -> str:
        return SCHEMA_DDL + (HEADERS_DDL if _bool(self.options, "includeHeaders", False) else "")

    def reader(self, schema) -> DataSourceReader:
        return KesqueBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return KesqueStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise KesqueSinkError(MODE_HELP)
        o = sink_options(self.options)
        sink.check_schema(schema, o)
        return KesqueBatchWriter(o)

    def streamWriter(self, schema, overwrite: bool):
        o = sink_options(self.options)
        sink.check_schema(schema, o)
        return KesqueStreamWriter(o)


def register(spark) -> None:
    """Register format ``kesque`` with a session (Spark also finds it by itself through the
    ``pyspark_kesque`` module when kesque is installed)."""
    spark.dataSource.register(KesqueDataSource)


# ---------------------------------------------------------------------- readers
class KesqueBatchReader(DataSourceReader):
    def __init__(self, o):
        self.o = o

    def partitions(self):
        planner = OffsetPlanner(self.o)
        try:
            tps = planner.partitions()
            start = planner.resolve(self.o.starting, tps, is_start=True)
            end = planner.resolve(self.o.ending, tps, is_start=False)
        finally:
            planner.close()
        ranges = []
        for tp in tps:
            s, e = start[tp], end[tp]
            if s > e:
                raise KesqueSourceError(
                    f"Beginning offset {s} is after the ending offset {e} for topic {tp[0]} "
                    f"partition {tp[1]}. You either provided an invalid startingOffsets or "
                    "endingOffsets, or the data was deleted."
                )
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        o = self.o
        return [RangePartition(r) for r in split_ranges(ranges, o.min_partitions, o.max_records_per_partition)]

    def read(self, partition):
        if isinstance(partition, RangePartition):  # Spark plans one empty InputPartition for no ranges
            yield from read_range(self.o, partition.range)


class KesqueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, o):
        self.o = o
        self._planner = OffsetPlanner(o)
        self._target: dict | None = None  # Trigger.AvailableNow: do not read past this
        self._last_trigger = time.monotonic()  # minOffsetsPerTrigger waits at most maxTriggerDelay

    def initialOffset(self) -> dict:
        tps = self._planner.partitions()
        return to_json_offsets(self._planner.resolve(self.o.starting, tps, is_start=True))

    def getDefaultReadLimit(self):
        n = self.o.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._planner.partitions()
        self._target = self._planner.latest(tps)

    def _latest(self) -> dict:
        if self._target is not None:
            return dict(self._target)
        return self._planner.latest(self._planner.partitions())

    def latestOffset(self, start: dict, limit) -> dict:
        begin = from_json_offsets(start)
        latest = self._latest()
        gone = sorted(set(begin) - set(latest))
        if gone and self._target is None:
            data_loss(self.o, f"{gone} are gone. Some data may have been missed.")
        new = sorted(set(latest) - set(begin))
        if new:  # new partitions are read from their start
            first = self._planner.earliest(new)
            for tp in new:
                if first[tp] != 0:
                    data_loss(
                        self.o,
                        f"Added partition {tp[0]}-{tp[1]} starts from {first[tp]} instead of 0. "
                        "Some data may have been missed.",
                    )
                begin[tp] = first[tp]
        if self._waits_for_more(begin, latest):
            return start
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, latest)
        else:
            end = latest
        # never go backwards: a partition whose latest dropped below the start keeps its start
        for tp, off in begin.items():
            if tp in end and end[tp] < off:
                end[tp] = off
        return to_json_offsets(end)

    def _waits_for_more(self, begin: dict, latest: dict) -> bool:
        """minOffsetsPerTrigger: no batch while fewer new offsets than that are available,
        unless maxTriggerDelay has passed since the last batch (never under AvailableNow)."""
        need = self.o.min_offsets_per_trigger
        if not need or self._target is not None:
            return False
        backlog = sum(max(0, off - begin.get(tp, off)) for tp, off in latest.items())
        now = time.monotonic()
        if backlog >= need or (backlog and now - self._last_trigger >= self.o.max_trigger_delay_ms / 1000):
            self._last_trigger = now
            return False
        return True

    def reportLatestOffset(self):
        return to_json_offsets(self._latest())

    def partitions(self, start: dict, end: dict):
        begin = from_json_offsets(start)
        stop = from_json_offsets(end)
        new = sorted(set(stop) - set(begin))
        if new:
            begin.update(self._planner.earliest(new))
        ranges = []
        for tp, e in sorted(stop.items()):
            s = begin[tp]
            if e < s:
                data_loss(
                    self.o,
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {s} to {e}, some data may have been missed.",
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        o = self.o
        return [RangePartition(r) for r in split_ranges(ranges, o.min_partitions, o.max_records_per_partition)]

    def read(self, partition):
        if isinstance(partition, RangePartition):  # Spark plans one empty InputPartition for no ranges
            yield from read_range(self.o, partition.range)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in kesque."""

    def stop(self) -> None:
        self._planner.close()


# ---------------------------------------------------------------------- writers
class _TaskWriter:
    """What both writers' tasks do: write the rows in a prepared transaction whose id starts
    with ``<prefix>.<kind><writer uuid>`` (``kind``: ``b`` batch, ``s`` streaming)."""

    kind = ""

    def __init__(self, o):
        self.o = o
        self.id_prefix = f"{o.transactional_id_prefix}.{self.kind}{uuid.uuid4().hex[:12]}"

    def write(self, iterator):
        return sink.write_task(self.o, iterator, self.id_prefix)


class KesqueBatchWriter(_TaskWriter, DataSourceArrowWriter):
    kind = "b"

    def commit(self, messages) -> None:
        sink.commit_batch(self.o, messages, self.id_prefix)

    def abort(self, messages) -> None:
        sink.abort_batch(self.o, messages, self.id_prefix)


class KesqueStreamWriter(_TaskWriter, DataSourceStreamArrowWriter):
    kind = "s"

    def commit(self, messages, batchId: int) -> None:
        sink.commit_stream(self.o, messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        sink.abort_stream(self.o, messages)
