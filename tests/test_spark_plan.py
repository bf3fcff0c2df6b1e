"""The Spark connector's pieces that need no JVM (issue 30): read tasks planned as Spark's
Kafka source plans them (minPartitions, maxRecordsPerPartition), source options Spark's
connector takes, a fetched batch whose CRC does not match failing the read, and the sink's
unkeyed rows spread over the partitions as the Java producer's sticky partitioner spreads them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from kesque.client.consumer import _PartitionState  # noqa: E402
from kesque.records import batch as rb  # noqa: E402
from kesque.records.records import build_batch  # noqa: E402
from kesque.spark.options import OptionError, sink_options, source_options  # noqa: E402
from kesque.spark.sink import Sticky, _write_columns, _write_rows  # noqa: E402
from kesque.spark.source import ColumnConsumer, KesqueSourceError, OffsetRange, split_ranges  # noqa: E402


def R(topic: str, start: int, end: int, partition: int = 0) -> OffsetRange:
    return OffsetRange(topic, partition, start, end)


def spans(ranges) -> list[tuple]:
    return [(r.topic, r.start, r.end) for r in ranges]


@pytest.mark.parametrize(
    "ranges, min_partitions, max_records, expected",
    [
        # nothing to split: one task per non-empty range
        ([R("a", 0, 5), R("b", 3, 3)], None, None, [("a", 0, 5)]),
        ([R("a", 0, 5), R("b", 0, 9)], 2, None, [("a", 0, 5), ("b", 0, 9)]),
        # the small range stays whole and is taken out of the share; the large one gets the rest
        ([R("a", 1, 5), R("b", 1, 21)], 3, None, [("a", 1, 5), ("b", 1, 11), ("b", 11, 21)]),
        ([R("a", 0, 3), R("b", 0, 1)], 3, None, [("a", 0, 1), ("a", 1, 3), ("b", 0, 1)]),
        # 2.5 parts rounds up (Scala's math.round), 1.5 too
        (
            [R("a", 0, 5), R("b", 0, 3)],
            4,
            None,
            [("a", 0, 1), ("a", 1, 3), ("a", 3, 5), ("b", 0, 1), ("b", 1, 3)],
        ),
        # maxRecordsPerPartition: ceil(size / max) parts, then minPartitions on what that gives
        ([R("a", 0, 5)], None, 2, [("a", 0, 1), ("a", 1, 3), ("a", 3, 5)]),
        ([R("a", 0, 4)], None, 4, [("a", 0, 4)]),
        (
            [R("a", 0, 5), R("b", 10, 11)],
            4,
            4,
            [("a", 0, 2), ("a", 2, 3), ("a", 3, 5), ("b", 10, 11)],
        ),
        # more tasks asked for than offsets: no empty task
        ([R("a", 0, 2)], 5, None, [("a", 0, 1), ("a", 1, 2)]),
    ],
)
def test_split_ranges_as_spark(ranges, min_partitions, max_records, expected):
    got = split_ranges(ranges, min_partitions, max_records)
    assert spans(got) == expected
    # the parts cover each range exactly once
    for r in ranges:
        mine = [x for x in got if x.topic == r.topic]
        assert sum(x.size for x in mine) == r.size


BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_spark_source_options_are_taken():
    o = source_options(
        {
            **BASE,
            "maxRecordsPerPartition": "100",
            "groupIdPrefix": "g",
            "kafka.group.id": "gid",
            "fetchOffset.numRetries": "3",
            "fetchOffset.retryIntervalMs": "10",
        },
        streaming=False,
    )
    assert o.max_records_per_partition == 100
    for name, bad in (("maxRecordsPerPartition", "0"), ("fetchOffset.numRetries", "x")):
        with pytest.raises(OptionError, match=name):
            source_options({**BASE, name: bad}, streaming=False)


def test_corrupt_batch_fails_the_read():
    """A batch whose CRC does not match its bytes fails the read naming the partition and
    the offset, as Kafka's consumer does (check.crcs); a good batch decodes."""
    good = build_batch([(b"k%d" % i, b"v%d" % i, ()) for i in range(5)], base_offset=40, timestamp=1000)
    c = ColumnConsumer("127.0.0.1:1")
    try:
        chunks = c._decode(_PartitionState("t", 0, 40), good, [])
        assert [len(ch.offsets) for ch in chunks] == [5]
        bad = bytearray(good)
        bad[rb.HEADER_SIZE + 3] ^= 0xFF
        with pytest.raises(KesqueSourceError, match=r"partition t-0 at offset 40 is invalid.*Record is corrupt"):
            c._decode(_PartitionState("t", 0, 40), bytes(bad), [])
    finally:
        c.close()


@pytest.mark.parametrize("headers", [False, True])
def test_a_fetch_from_the_middle_of_a_batch_keeps_the_records_from_the_position(headers):
    """A batch fetched for a position inside it yields only the records from the position on,
    with their own offsets, timestamps, keys and values; a range that ends inside a chunk keeps
    the records before its end (both are slices: offsets rise within a batch)."""
    records = [(b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i in range(8)]
    good = build_batch(records, base_offset=40, timestamp=1000)
    c = ColumnConsumer("127.0.0.1:1", headers=headers)
    try:
        (ch,) = c._decode(_PartitionState("t", 0, 43), good, [])
        assert ch.offsets.to_pylist() == [43, 44, 45, 46, 47]
        assert ch.keys.to_pylist() == [b"k3", b"k4", b"k5", b"k6", b"k7"]
        assert ch.values.to_pylist() == [b"v3", b"v4", b"v5", b"v6", b"v7"]
        assert ch.stamps.to_pylist() == [1_000_000] * 5  # ms to us
        ch.slice(0, 2)  # the range ends at 45
        assert (ch.offsets.to_pylist(), ch.keys.to_pylist(), ch.values.to_pylist()) == (
            [43, 44],
            [b"k3", b"k4"],
            [b"v3", b"v4"],
        )
        assert ch.headers == ([[{"key": "h", "value": b"3"}], [{"key": "h", "value": b"4"}]] if headers else None)
    finally:
        c.close()


def test_sticky_partitioner_switches_every_batch_size_bytes():
    """A run of rows stays on one partition until batch.size bytes have gone to it, across
    the task's Arrow batches; each topic has its own run."""
    draws = iter([1, 3, 0, 2, 2, 2, 3])

    class Rng:
        def integers(self, n, size=None):
            return next(draws) if size is None else np.array([next(draws) for _ in range(size)])

    s = Sticky(1000, Rng())
    sizes = np.full(25, 100)
    # rows 0-9 on the first draw, 10-19 on the next, 20-24 start the third run
    assert s.place("t", sizes, 4).tolist() == [1] * 10 + [3] * 10 + [0] * 5
    assert s.place("t", np.full(7, 100), 4).tolist() == [0] * 5 + [2] * 2  # the run goes on
    # a row larger than batch.size fills its run alone; the next opens one run, not five
    assert s.place("u", np.array([5000, 10]), 4).tolist() == [2, 2]
    assert s.place("u", np.array([10]), 4).tolist() == [2]  # 10 bytes in that run so far: it goes on
    assert s.place("u", np.array([990, 1]), 4).tolist() == [2, 3]
    assert s.place("t", np.zeros(0), 4).tolist() == []


class _Counting:
    """The producer side of the sink's write paths, counting rows per partition."""

    batch_size = 1 << 20

    def __init__(self, nparts: int):
        self.rows = [0] * nparts

    def _topic_partitions(self, topic):
        return list(range(len(self.rows)))

    def send_encoded(self, topic, partition, body, count):
        assert len(body) <= self.batch_size
        self.rows[partition] += count

    def send(self, topic, value, key=None, headers=(), partition=None):
        self.rows[partition] += 1


@pytest.mark.parametrize("headers", [False, True])
def test_unkeyed_rows_spread_over_the_partitions_as_kafkas(headers):
    """200,000 unkeyed rows of 100 bytes written in 10,000-row Arrow batches (as a Spark task
    hands them over) land on every partition about evenly, as the Java producer's sticky
    partitioner spreads them (a new partition about every 16 KiB); once a whole Arrow batch
    went to one partition, leaving 10,000-110,000 rows per partition. The column path and
    the row path (headers) place them alike; kafka.batch.size moves the switch."""
    o = sink_options({"kafka.bootstrap.servers": "x:9092", "topic": "t"})
    p, sticky = _Counting(4), Sticky(16384, np.random.default_rng(7))
    batches = 4 if headers else 20
    for b in range(batches):
        values = pa.array([b"%099d" % (b * 10_000 + i) for i in range(10_000)], pa.binary())
        cols, names = [values], ["value"]
        if headers:
            cols.append(pa.array([[{"key": "h", "value": b"x"}]] * 10_000))
            names.append("headers")
        batch = pa.RecordBatch.from_arrays(cols, names=names)
        if headers:
            _write_rows(p, o, batch, sticky)
        else:
            assert _write_columns(p, o, batch, sticky)
    mean = batches * 10_000 / 4
    assert sum(p.rows) == batches * 10_000
    assert all(abs(r - mean) < 0.15 * mean for r in p.rows), p.rows
    # batch.size as large as the Arrow batch: about one partition per batch, as before
    big = _Counting(4)
    sticky = Sticky(1 << 20, np.random.default_rng(7))
    for _ in range(4):
        values = pa.array([b"%099d" % i for i in range(10_000)], pa.binary())
        _write_columns(big, o, pa.RecordBatch.from_arrays([values], names=["value"]), sticky)
    assert sorted(big.rows)[-1] >= 20_000, big.rows
