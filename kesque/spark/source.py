"""The reader side: plan offset ranges on the driver, read them on the executors as Arrow
record batches.

Offsets are Kafka-style JSON, ``{"topic": {"0": 23}}``: what Spark's Kafka source writes
to the checkpoint's offset log, so a reader of the checkpoint sees the same shape.

A range ``[start, end)`` of one partition is one Spark task (split further when
``minPartitions`` asks for more tasks than there are partitions). The task fetches from the
leader with kesque's own consumer (:mod:`kesque.client.consumer`) until its position reaches
``end``: with read_committed the aborted records and the control markers leave gaps in the
offsets, so the position — not a record count — decides when a range is done.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..client.consumer import EARLIEST, LATEST, FetchError, WireConsumer
from ..client.wire import WireError
from ..records import batch as rb
from ..records.records import iter_records, record_columns, records_payload
from .options import CONSUMER_PARAMS, Bound, SourceOptions, client_kwargs

log = logging.getLogger("kesque.spark")

BATCH_ROWS = 65536  # rows per Arrow record batch handed to Spark
# ListOffsets errors the driver asks again after: LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
# REQUEST_TIMED_OUT, FENCED/UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE
RETRIABLE_OFFSETS = frozenset({5, 6, 7, 74, 75, 78})


class KesqueSourceError(RuntimeError):
    pass


DATA_LOSS = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was "
    "aged out by Kafka or the topic may have been deleted before all the data in the topic was processed. "
    'If you want your streaming query to fail on such cases, set the source option "failOnDataLoss" to '
    '"true".'
)
DATA_LOSS_FAIL = (
    "Some data may have been lost because they are not available in Kafka any more; either the data "
    "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
    "processed. If you don't want your streaming query to fail on such cases, set the source option "
    '"failOnDataLoss" to "false".'
)


def data_loss(o: SourceOptions, detail: str) -> None:
    """Fail the query (failOnDataLoss=true) or log a warning, as Spark's source does."""
    if o.fail_on_data_loss:
        raise KesqueSourceError(f"{detail}\n{DATA_LOSS_FAIL}")
    log.warning("%s\n%s", detail, DATA_LOSS)


# ---------------------------------------------------------------------- offset JSON
def to_json_offsets(offsets: dict[tuple[str, int], int]) -> dict:
    out: dict = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def from_json_offsets(obj: dict) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in (obj or {}).items() for p, o in parts.items()}


# ---------------------------------------------------------------------- driver side
class OffsetPlanner:
    """The driver's view of the subscribed partitions and their offsets."""

    def __init__(self, o: SourceOptions):
        self.o = o
        self._consumer: WireConsumer | None = None

    def _client(self) -> WireConsumer:
        if self._consumer is None:
            self._consumer = WireConsumer(
                self.o.bootstrap,
                client_id="kesque-spark-driver",
                isolation_level=self.o.isolation_level,
                auto_offset_reset="none",
                timeout=max(1.0, min(30.0, self.o.api_timeout_ms / 1000)),
            )
        return self._consumer

    def __getstate__(self):  # a reader may be pickled to the executors: never with a socket
        return {**self.__dict__, "_consumer": None}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _retrying(self, what: str, fn):
        """Retry connection problems until ``kafka.default.api.timeout.ms``, then fail
        with a message that names the servers and the timeout."""
        deadline = time.monotonic() + self.o.api_timeout_ms / 1000
        last: Exception | None = None
        while True:
            try:
                return fn(self._client())
            except (OSError, WireError) as e:
                last = e
                self.close()
            except FetchError as e:
                if e.code not in RETRIABLE_OFFSETS:
                    raise
                last = e  # a leader is being elected (a broker restarted): ask again
            if time.monotonic() >= deadline:
                raise KesqueSourceError(
                    f"{what}: cannot reach kafka.bootstrap.servers={self.o.bootstrap} within "
                    f"kafka.default.api.timeout.ms={self.o.api_timeout_ms} ms ({last})"
                ) from last
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def partitions(self) -> list[tuple[str, int]]:
        o = self.o
        if o.strategy == "assign":
            return sorted((t, p) for t, ps in o.assign.items() for p in ps)
        md = self._retrying(
            "fetching topic metadata", lambda c: c.metadata(o.topics if o.strategy == "subscribe" else None)
        )
        out = []
        for t, info in md.items():
            if info["error"] != 0:
                continue
            if o.strategy == "subscribePattern" and (info["internal"] or not re.fullmatch(o.pattern, t)):
                continue
            if o.strategy == "subscribe" and t not in o.topics:
                continue
            out += [(t, p) for p in info["partitions"]]
        return sorted(out)

    def list_offsets(self, tps: list[tuple[str, int]], spec: int) -> dict[tuple[str, int], int]:
        if not tps:
            return {}
        try:
            return self._retrying("listing offsets", lambda c: c.list_offsets(tps, spec))
        except FetchError as e:
            raise KesqueSourceError(f"ListOffsets failed for {tps}: {e}") from None

    def earliest(self, tps):
        return self.list_offsets(tps, EARLIEST)

    def latest(self, tps):
        return self.list_offsets(tps, LATEST)

    def by_timestamp(self, timestamps: dict[tuple[str, int], int], is_start: bool) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        by_ts: dict[int, list] = {}
        for tp, ts in timestamps.items():
            by_ts.setdefault(ts, []).append(tp)
        for ts, tps in by_ts.items():
            found = self.list_offsets(tps, ts)
            missing = [tp for tp, off in found.items() if off < 0]
            if missing:
                if is_start and self.o.timestamp_strategy == "error":
                    raise KesqueSourceError(
                        f"No offset matched the timestamp {ts} for partitions {missing}: the timestamp is later "
                        "than every record. Set 'startingOffsetsByTimestampStrategy' to 'latest' to start from "
                        "the latest offset instead."
                    )
                latest = self.latest(missing)
                for tp in missing:
                    found[tp] = latest[tp]
            out.update(found)
        return out

    def resolve(self, bound: Bound, tps: list[tuple[str, int]], is_start: bool) -> dict[tuple[str, int], int]:
        """Concrete offsets of ``bound`` for ``tps``."""
        if bound.kind == "earliest":
            return self.earliest(tps)
        if bound.kind == "latest":
            return self.latest(tps)
        if bound.kind == "timestamp":
            return self.by_timestamp({tp: bound.timestamp for tp in tps}, is_start)
        if bound.kind == "timestamps":
            missing = set(tps) - set(bound.offsets)
            if missing:
                raise KesqueSourceError(
                    f"option '{'starting' if is_start else 'ending'}OffsetsByTimestamp' has no "
                    f"timestamp for {sorted(missing)}"
                )
            return self.by_timestamp({tp: bound.offsets[tp] for tp in tps}, is_start)
        # explicit offsets, with -2/-1 inside
        missing = set(tps) - set(bound.offsets)
        if missing and is_start:
            raise KesqueSourceError(
                f"option 'startingOffsets' has no offset for {sorted(missing)}; specify all TopicPartitions"
            )
        out: dict[tuple[str, int], int] = {}
        specials = {tp: off for tp, off in bound.offsets.items() if off < 0 and tp in tps}
        for spec in (EARLIEST, LATEST):
            group = [tp for tp, off in specials.items() if off == spec]
            out.update(self.list_offsets(group, spec))
        for tp in tps:
            if tp in bound.offsets and bound.offsets[tp] >= 0:
                out[tp] = bound.offsets[tp]
        if missing:  # ending offsets not given: latest
            out.update(self.latest(sorted(missing)))
        return out


@dataclass
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` cut into ``parts`` consecutive ranges, each the remaining size divided by the
    parts left (integer division: the last parts take the remainder)."""
    out: list[OffsetRange] = []
    left, at = r.size, r.start
    for i in range(parts):
        n = left // (parts - i)
        left -= n
        out.append(OffsetRange(r.topic, r.partition, at, min(at + n, r.end)))
        at = out[-1].end
    return [x for x in out if x.size > 0]


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """The read tasks of a batch, planned as Spark's KafkaOffsetRangeCalculator plans them, so
    a query has as many tasks with format ``kesque`` as with ``kafka``: empty ranges dropped;
    with ``maxRecordsPerPartition``, each range cut into ceil(size / max) parts; then, while
    ``minPartitions`` is above the number of ranges, each range gets round(share x
    minPartitions) parts (at least 1), where the ranges left whole by that rule are taken out
    of the share and of minPartitions first."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records:
        ranges = [x for r in ranges for x in _divide(r, -(-r.size // max_records))]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges

    def part_count(size: int, total: int, parts: int) -> int:
        return max(1, _round_half_up(size / total * parts))

    total = sum(r.size for r in ranges)
    whole = [part_count(r.size, total, min_partitions) == 1 for r in ranges]
    rest_total = total - sum(r.size for r, w in zip(ranges, whole) if w)
    rest_parts = max(min_partitions - sum(whole), 1)
    out: list[OffsetRange] = []
    for r, w in zip(ranges, whole):
        out += [r] if w else _divide(r, part_count(r.size, rest_total, rest_parts))
    return out


def _round_half_up(x: float) -> int:
    """Scala's math.round (half up), not Python's round (half to even)."""
    return int(math.floor(x + 0.5))


def rate_limit(
    limit: int, start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """maxOffsetsPerTrigger split by backlog, as Spark's KafkaMicroBatchStream.rateLimit."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    total = sum(max(0, s) for s in sizes.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp)
        if begin is None or sizes[tp] <= 0:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        step = int(prorate) if prorate >= 1 else (1 if prorate > 0 else 0)
        out[tp] = min(end, begin + step)
    return out


# ---------------------------------------------------------------------- executor side
def arrow_schema(include_headers: bool):
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(
            pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
        )
    return pa.schema(fields)


SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key:string,value:binary>>"


class _Chunk:
    """One batch's visible records as Arrow arrays (offset, timestamp-in-us, key, value)."""

    __slots__ = ("offsets", "stamps", "keys", "values", "ts_type", "headers")

    def slice(self, start: int, stop: int) -> None:
        """Keep records ``[start, stop)`` (zero-copy Arrow slices; headers are a list)."""
        self.offsets, self.stamps, self.keys, self.values = (
            x.slice(start, stop - start) for x in (self.offsets, self.stamps, self.keys, self.values)
        )
        if self.headers is not None:
            self.headers = self.headers[start:stop]


class ColumnConsumer(WireConsumer):
    """A consumer whose :meth:`poll` returns Arrow column chunks, one per record batch,
    decoded by ``records.record_columns`` (compiled: no Python object per record). With
    ``headers=True`` it falls back to decoding records one by one, for the header column."""

    def __init__(self, *a, headers: bool = False, **kw):
        super().__init__(*a, **kw)
        self.headers = headers

    def _decode(self, st, data, aborted):

        out = []
        for pos, h in self._visible_batches(st, data, aborted):
            if not rb.is_crc_valid(data, pos, h.size):
                # as Kafka's consumer (check.crcs=true) and so Spark's connector: the read fails
                # whatever failOnDataLoss says; the record is there, it is not data loss
                raise KesqueSourceError(
                    f"Record batch for partition {st.topic}-{st.partition} at offset {h.base_offset} is "
                    f"invalid, cause: Record is corrupt (stored crc = {h.crc}, computed crc = "
                    f"{rb.compute_crc(data, pos, h.size)})"
                )
            c = _Chunk()
            if self.headers:
                recs = [r for r in iter_records(data, pos, h) if r.offset >= st.position]
                c.offsets = pa.array([r.offset for r in recs], pa.int64())
                c.stamps = pa.array([r.timestamp * 1000 for r in recs], pa.int64())
                c.keys = pa.array([r.key for r in recs], pa.binary())
                c.values = pa.array([r.value for r in recs], pa.binary())
                # a record without headers has a null headers column, as in Spark's connector
                c.headers = [[{"key": k, "value": v} for k, v in r.headers] or None for r in recs]
            else:
                n, ts, off, kv, ko, kd, vv, vo, vd = record_columns(records_payload(data, pos, h), h.records_count)
                offsets = np.frombuffer(off, np.int64, n) + h.base_offset
                c.offsets = pa.array(offsets)  # zero-copy from numpy
                if h.is_log_append_time:
                    c.stamps = pa.array(np.full(n, h.max_timestamp * 1000, np.int64))
                else:
                    c.stamps = pa.array((np.frombuffer(ts, np.int64, n) + h.base_timestamp) * 1000)
                c.keys = pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(kv), pa.py_buffer(ko), pa.py_buffer(kd)])
                c.values = pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(vv), pa.py_buffer(vo), pa.py_buffer(vd)])
                c.headers = None
                if h.base_offset < st.position:  # a fetch from the middle of a batch
                    # offsets rise within a batch: the records kept are a suffix, sliced without a copy
                    c.slice(int(np.searchsorted(offsets, st.position)), n)
            c.ts_type = 1 if h.is_log_append_time else 0
            out.append(c)
        return out


def read_range(o: SourceOptions, r: OffsetRange):
    """Yield Arrow record batches of the records of ``r`` (a task's whole job)."""

    schema = arrow_schema(o.include_headers)
    c = ColumnConsumer(
        o.bootstrap,
        isolation_level=o.isolation_level,
        auto_offset_reset="none",
        headers=o.include_headers,
        timeout=max(1.0, min(30.0, o.api_timeout_ms / 1000)),
        **client_kwargs(o.params, CONSUMER_PARAMS, client_id="kesque-spark-executor", max_wait_ms=500),
    )
    tp = (r.topic, r.partition)
    pending: list[_Chunk] = []
    rows = 0
    try:
        c.assign({tp: r.start})
        state = c.assignment[tp]
        idle_since = time.monotonic()
        while state.position < r.end:
            try:
                chunks = c.poll(0.5)
            except FetchError as e:
                if e.code != 1:  # not OFFSET_OUT_OF_RANGE
                    raise KesqueSourceError(f"reading {r.topic}-{r.partition}: {e}") from None
                earliest = c.list_offsets([tp], EARLIEST)[tp]
                if state.position >= earliest:
                    raise KesqueSourceError(
                        f"reading {r.topic}-{r.partition}: offset {state.position} is out of range"
                    ) from None
                data_loss(
                    o,
                    f"Cannot fetch offset {state.position} of {r.topic}-{r.partition}: the earliest "
                    f"available offset is {earliest}; offsets {state.position} to {earliest - 1} are "
                    "skipped.",
                )
                state.position = min(earliest, r.end)
                continue
            if chunks:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > o.poll_timeout_ms / 1000:
                raise KesqueSourceError(
                    f"Timed out waiting for offset {state.position} of {r.topic}-{r.partition} "
                    f"(range ends at {r.end}) after kafkaConsumer.pollTimeoutMs="
                    f"{o.poll_timeout_ms} ms"
                )
            for ch in chunks:
                n = len(ch.offsets)
                if n and ch.offsets[n - 1].as_py() >= r.end:  # the range ends inside this batch
                    ch.slice(0, int(np.searchsorted(ch.offsets.to_numpy(), r.end)))
                pending.append(ch)
                rows += len(ch.offsets)
            if pending and (rows >= BATCH_ROWS or state.position >= r.end):
                yield _batch(pa, schema, r, pending, o.include_headers)
                pending, rows = [], 0
    finally:
        c.close()


def _batch(pa, schema, r: OffsetRange, chunks: list[_Chunk], include_headers: bool):
    n = sum(len(ch.offsets) for ch in chunks)
    ts_type = pa.concat_arrays([pa.repeat(pa.scalar(ch.ts_type, pa.int32()), len(ch.offsets)) for ch in chunks])

    def cat(name):
        return pa.concat_arrays([getattr(ch, name) for ch in chunks])

    arrays = [
        cat("keys"),
        cat("values"),
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        cat("offsets"),
        cat("stamps").cast(pa.timestamp("us", tz="UTC")),
        ts_type,
    ]
    if include_headers:
        arrays.append(pa.array([h for ch in chunks for h in ch.headers], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
