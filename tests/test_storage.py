"""kesque.storage: indexes, segments, the UnifiedLog (append, read, roll, retention, truncation,
recovery), checkpoint files and the leader epoch cache, against Kafka's semantics.
"""

from __future__ import annotations

import os
import struct
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.config.topic import LogConfig
from kesque.errors import ErrorCode, KafkaError
from kesque.records import batch as rb
from kesque.records.records import build_batch, iter_records
from kesque.storage import checkpoint as ck
from kesque.storage import segment as segment_mod
from kesque.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from kesque.storage.leader_epoch import LeaderEpochFileCache
from kesque.storage.segment import LogSegment
from kesque.storage.unified_log import UnifiedLog

SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NOW = 1_700_000_000_000


def make_batch(n: int = 1, ts: int = NOW, value_size: int = 10, key: bytes = b"k") -> bytearray:
    return bytearray(build_batch([(key, b"v" * value_size, ()) for _ in range(n)], timestamp=ts))


def new_log(path, cfg: LogConfig | None = None, **kw) -> UnifiedLog:
    kw.setdefault("now_ms", NOW)
    return UnifiedLog(str(path), "t", 0, cfg or LogConfig(), **kw)


def append(log: UnifiedLog, n: int = 1, ts: int = NOW, now: int | None = None, value_size: int = 10, epoch: int = 0):
    return log.append_as_leader(memoryview(make_batch(n, ts, value_size)), epoch, NOW if now is None else now)


def fetched(data) -> bytes:
    return b"".join(os.pread(h.fd, size, pos) for h, pos, size in data.regions)


def all_batches(log: UnifiedLog) -> list[tuple[rb.BatchHeader, bytes]]:
    return list(log.read_batches(log.log_start_offset))


def crash(log: UnifiedLog) -> None:
    """The process dies: descriptors go away, nothing else is written."""
    for seg in log.segments:
        seg.close()


# ======================================================================== OffsetIndex


def assert_index_file(idx, expected: bytes) -> None:
    """While appended to, an index file is preallocated (the entries, then zeros, which
    loading stops at); closing trims it to exactly the entries."""
    with open(idx.path, "rb") as f:
        raw = f.read()
    assert raw[: len(expected)] == expected and raw[len(expected) :] == bytes(len(raw) - len(expected))
    idx.close()
    with open(idx.path, "rb") as f:
        assert f.read() == expected


@st.composite
def offset_entries(draw):
    base = draw(st.integers(0, 2**40))
    n = draw(st.integers(0, 40))
    offs = sorted(draw(st.sets(st.integers(0, 2**31 - 1), min_size=n, max_size=n)))
    positions = sorted(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)))
    return base, [(base + o, p) for o, p in zip(offs, positions)]


@SETTINGS
@given(case=offset_entries(), targets=st.lists(st.integers(-5, 2**41), max_size=30), data=st.data())
def test_offset_index_matches_brute_force(case, targets, data):
    base, entries = case
    with tempfile.TemporaryDirectory() as d:
        idx = OffsetIndex(os.path.join(d, "0.index"), base, max_index_size=8 * 64)
        idx.reset()
        for off, pos in entries:
            idx.append(off, pos)
            idx.append(off, pos + 1)  # not above the last offset: ignored
        for t in targets + [o for o, _ in entries] + [o - 1 for o, _ in entries]:
            le = [e for e in entries if e[0] <= t]
            assert idx.lookup(t) == (le[-1] if le else (base, 0))
        # Kafka's layout: 8-byte entries, relative offset then position, big-endian
        assert_index_file(idx, b"".join(struct.pack(">ii", o - base, p) for o, p in entries))
        loaded = OffsetIndex(idx.path, base)
        loaded.load()
        assert list(loaded.offsets) == [o for o, _ in entries] and list(loaded.positions) == [p for _, p in entries]
        cut = data.draw(st.integers(base - 1, base + 2**31))
        idx.truncate_to_offset(cut)
        kept = [e for e in entries if e[0] < cut]
        assert list(zip(idx.offsets, idx.positions)) == kept
        loaded.load()
        assert list(zip(loaded.offsets, loaded.positions)) == kept
        idx.close()


def test_offset_index_sanity_checks(tmp_path):
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(str(p), 100)
    for data in (
        b"\x00" * 7,
        struct.pack(">ii", 5, 10) + struct.pack(">ii", 4, 20),  # offsets go back
        struct.pack(">ii", 5, 10) + struct.pack(">ii", 6, 5),  # positions go back
        struct.pack(">ii", -1, 0),
    ):  # negative relative offset
        p.write_bytes(data)
        with pytest.raises(CorruptIndexError):
            idx.load()
    # a preallocated zero tail (Kafka's unclean shutdown) ends the entries
    p.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 3, 100) + b"\x00" * 16)
    idx.load()
    assert list(idx.offsets) == [100, 103]


def test_offset_index_is_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, max_index_size=20)  # two 8-byte entries
    idx.reset()
    idx.append(1, 0)
    assert not idx.is_full()
    idx.append(2, 10)
    assert idx.is_full() and idx.file_size() == 16
    idx.close()


# ======================================================================== TimeIndex


@st.composite
def time_appends(draw):
    base = draw(st.integers(0, 2**40))
    n = draw(st.integers(0, 40))
    offs = sorted(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)))
    stamps = draw(st.lists(st.integers(-1, 2**42), min_size=n, max_size=n))
    return base, [(ts, base + o) for ts, o in zip(stamps, offs)]


@SETTINGS
@given(case=time_appends(), targets=st.lists(st.integers(-5, 2**42), max_size=30), data=st.data())
def test_time_index_matches_kafka_model(case, targets, data):
    base, appends = case
    with tempfile.TemporaryDirectory() as d:
        idx = TimeIndex(os.path.join(d, "0.timeindex"), base, max_index_size=12 * 64)
        idx.reset()
        model: list[tuple[int, int]] = []
        for ts, off in appends:
            idx.maybe_append(ts, off)
            last_ts = model[-1][0] if model else -1  # Kafka's lastEntry of an empty index: (-1, base)
            if ts > last_ts:
                model.append((ts, off))
        assert list(zip(idx.timestamps, idx.offsets)) == model
        assert idx.last_entry() == (model[-1] if model else (-1, base))
        for t in targets + [ts for ts, _ in model]:
            le = [e for e in model if e[0] <= t]
            assert idx.lookup(t) == (le[-1] if le else (-1, base))
        assert_index_file(idx, b"".join(struct.pack(">qi", ts, o - base) for ts, o in model))
        loaded = TimeIndex(idx.path, base)
        loaded.load()
        assert list(zip(loaded.timestamps, loaded.offsets)) == model
        cut = data.draw(st.integers(base, base + 2**31))
        idx.truncate_to_offset(cut)
        assert list(zip(idx.timestamps, idx.offsets)) == [e for e in model if e[1] < cut]
        idx.close()


def test_time_index_sanity_checks_and_full(tmp_path):
    p = tmp_path / "0.timeindex"
    idx = TimeIndex(str(p), 0, max_index_size=24)
    for data in (
        b"\x00" * 13,
        struct.pack(">qi", 10, 1) + struct.pack(">qi", 9, 2),
        struct.pack(">qi", 10, 5) + struct.pack(">qi", 11, 4),
    ):
        p.write_bytes(data)
        with pytest.raises(CorruptIndexError):
            idx.load()
    idx.reset()
    idx.maybe_append(10, 1)
    idx.maybe_append(20, 2)
    assert idx.is_full()
    idx.maybe_append(30, 3)  # full: not appended...
    assert len(idx) == 2
    idx.maybe_append(30, 3, skip_full_check=True)  # ...unless the caller is rolling the segment
    assert len(idx) == 3
    idx.close()


# ======================================================================== LogSegment


def fill_segment(seg: LogSegment, batches: int, records: int = 2, ts0: int = NOW, value_size: int = 50):
    """Append batches as the UnifiedLog does; returns [(position, first, last, max_ts)]."""
    out = []
    off = seg.base_offset
    for i in range(batches):
        b = make_batch(records, ts0 + i * 10, value_size)
        rb.patch_offset_and_epoch(b, 0, off, 0)
        last = off + records - 1
        pos = seg.append(last, ts0 + i * 10, last, b)
        out.append((pos, off, last, ts0 + i * 10))
        off = last + 1
    return out


def test_segment_append_find_read(tmp_path):
    seg = LogSegment(str(tmp_path), 100, index_interval_bytes=200, create=True, now_ms=NOW)
    assert os.path.basename(seg.log_path) == "00000000000000000100.log"
    layout = fill_segment(seg, 20)
    assert seg.read_end_offset() == layout[-1][2] + 1
    assert seg.largest_timestamp() == layout[-1][3]
    assert len(seg.offset_index) > 3  # one entry every index.interval.bytes
    for off, pos in zip(seg.offset_index.offsets, seg.offset_index.positions):
        # an entry maps a batch's last offset to that batch's position
        assert any(p == pos and last == off for p, _f, last, _t in layout)
    for pos, first, last, _ts in layout:
        for target in (first, last):
            found = seg.find_batch(target)
            assert found is not None and found[0] == pos and found[1].base_offset == first
            assert seg.find_position_for_offset(target) == pos
    assert seg.find_batch(layout[-1][2] + 1) is None
    assert seg.find_position_for_offset(10**9) == seg.size
    pos, first, last, _ = layout[3]
    data = seg.pread(pos, rb.read_header(seg.pread(pos, rb.HEADER_SIZE)).size)
    assert [r.offset for r in iter_records(data)] == [first, last]
    # by timestamp: first record at or after it
    assert seg.find_offset_by_timestamp(layout[5][3], seg.base_offset) == (layout[5][1], layout[5][3])
    assert seg.find_offset_by_timestamp(layout[5][3] - 5, seg.base_offset) == (layout[5][1], layout[5][3])
    assert seg.find_offset_by_timestamp(layout[5][3], layout[7][1]) == (layout[7][1], layout[7][3])
    assert seg.find_offset_by_timestamp(layout[-1][3] + 1, seg.base_offset) is None
    seg.close()


def test_segment_recover_rebuilds_the_same_indexes(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=300, create=True, now_ms=NOW)
    fill_segment(seg, 30)
    offsets, positions = list(seg.offset_index.offsets), list(seg.offset_index.positions)
    seg.time_index.maybe_append(seg.max_timestamp_so_far, seg.offset_of_max_timestamp, True)
    times = list(zip(seg.time_index.timestamps, seg.time_index.offsets))
    end = seg.read_end_offset()
    assert seg.recover() == 0
    assert (list(seg.offset_index.offsets), list(seg.offset_index.positions)) == (offsets, positions)
    assert list(zip(seg.time_index.timestamps, seg.time_index.offsets)) == times
    assert seg.read_end_offset() == end
    seg.close()


@pytest.mark.parametrize("damage", ["truncate-mid-batch", "flip-last-batch", "garbage-tail", "bad-length"])
def test_segment_recover_truncates_at_first_invalid_batch(tmp_path, damage):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100, create=True, now_ms=NOW)
    layout = fill_segment(seg, 10)
    last_pos = layout[-1][0]
    size = seg.size
    seg.close()
    with open(seg.log_path, "r+b") as f:
        if damage == "truncate-mid-batch":
            f.truncate(size - 7)
        elif damage == "flip-last-batch":
            f.seek(size - 3)
            b = f.read(1)
            f.seek(size - 3)
            f.write(bytes([b[0] ^ 0xFF]))
        elif damage == "garbage-tail":
            f.seek(size)
            f.write(os.urandom(100))
        else:
            f.seek(last_pos + 8)
            f.write(struct.pack(">i", 10**6))
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100, now_ms=NOW)
    truncated = seg.recover()
    keep = size if damage == "garbage-tail" else last_pos
    assert seg.size == keep and os.path.getsize(seg.log_path) == keep
    assert truncated == (
        size + 100 - keep if damage == "garbage-tail" else (size - 7 if damage == "truncate-mid-batch" else size) - keep
    )
    assert seg.read_end_offset() == (layout[-1][2] + 1 if damage == "garbage-tail" else layout[-1][1])
    assert all(p < keep for p in seg.offset_index.positions)
    seg.close()


def test_segment_load_indexes(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100, create=True, now_ms=NOW)
    fill_segment(seg, 10)
    seg.close()
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100, now_ms=NOW)
    assert seg.load_indexes() and len(seg.offset_index) > 0
    os.unlink(seg.time_index.path)
    assert not seg.load_indexes()  # missing
    seg.recover()
    with open(seg.offset_index.path, "ab") as f:
        f.write(b"\x01\x02\x03")  # not a multiple of 8
    assert not seg.load_indexes()
    seg.recover()
    seg.close()
    with open(seg.offset_index.path, "ab") as f:
        f.write(struct.pack(">ii", 10**6, 10**7))  # points past the end of the log
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100, now_ms=NOW)
    assert not seg.load_indexes()
    seg.close()


def test_segment_truncate_to(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100, create=True, now_ms=NOW)
    layout = fill_segment(seg, 10)
    size = seg.size
    removed = seg.truncate_to(layout[6][1] + 1)  # an offset inside a batch removes the whole batch
    assert removed == size - layout[6][0] and os.path.getsize(seg.log_path) == layout[6][0]
    assert seg.size == layout[6][0] and seg.read_end_offset() == layout[6][1]
    assert all(o < layout[6][1] for o in seg.offset_index.offsets)
    assert all(o < layout[6][1] for o in seg.time_index.offsets)
    assert seg.largest_timestamp() == layout[5][3]
    assert seg.truncate_to(10**9) == 0
    seg.truncate_to(0)
    assert seg.size == 0 and seg.read_end_offset() == 0
    assert seg.rolling_based_timestamp is None and seg.max_timestamp_so_far == -1 and seg.offset_of_max_timestamp == -1
    seg.close()


def test_segment_reopened_rolls_from_its_first_batch_timestamp(tmp_path):
    seg = LogSegment(str(tmp_path), 0, create=True, now_ms=NOW)
    fill_segment(seg, 3, ts0=NOW - 5000)
    assert seg.rolling_based_timestamp == NOW - 5000
    seg.close()
    seg = LogSegment(str(tmp_path), 0, now_ms=NOW + 10**6)
    assert seg.rolling_based_timestamp == NOW - 5000  # Kafka's loadFirstBatchTimestamp
    seg.close()


# ======================================================================== UnifiedLog: append / read


def test_log_append_assigns_offsets_and_epochs(tmp_path):
    log = new_log(tmp_path)
    infos = [append(log, n=3, epoch=e) for e in (0, 0, 2, 2, 5)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14)]
    assert log.log_end_offset == 15
    assert [(h.base_offset, h.partition_leader_epoch) for h, _ in all_batches(log)] == [
        (0, 0),
        (3, 0),
        (6, 2),
        (9, 2),
        (12, 5),
    ]
    assert all(rb.is_crc_valid(d, 0, len(d)) for _, d in all_batches(log))
    assert log.leader_epoch_cache.entries == [(0, 0), (2, 6), (5, 12)]
    log.close()


def test_log_read(tmp_path):
    log = new_log(tmp_path)
    for _ in range(5):
        append(log, n=3)
    batches = all_batches(log)
    size = len(batches[0][1])
    leo = log.log_end_offset
    everything = b"".join(d for _, d in batches)
    assert fetched(log.read(0, 1 << 20, leo, False)) == everything
    mid = log.read(4, 1 << 20, leo, False)  # a fetch from the middle of a batch returns the whole batch
    assert mid.first_offset == 3 and fetched(mid) == everything[size:]
    # partial reads: max_bytes cuts through a batch (the client drops the partial tail)...
    part = log.read(0, size + 10, leo, False)
    assert fetched(part) == everything[: size + 10]
    # ...and min_one_message returns the whole first batch even when it is larger than max_bytes
    assert fetched(log.read(0, 10, leo, True)) == everything[:size]
    assert fetched(log.read(0, 10, leo, False)) == everything[:10]
    # max_offset (high watermark) bounds what is returned, at batch granularity
    assert fetched(log.read(0, 1 << 20, 6, False)) == everything[: 2 * size]
    assert fetched(log.read(0, 1 << 20, 7, True)) == everything[: 2 * size]
    assert log.read(6, 1 << 20, 6, True).size == 0
    assert log.read(leo, 1 << 20, leo, True).size == 0
    for bad in (-1, leo + 1):
        with pytest.raises(KafkaError) as e:
            log.read(bad, 100, leo, True)
        assert e.value.code == ErrorCode.offset_out_of_range
    log.close()


def test_log_read_stays_in_one_segment(tmp_path):
    size = len(make_batch())
    log = new_log(tmp_path, LogConfig(segment_bytes=3 * size))
    for _ in range(7):
        append(log)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    data = log.read(1, 1 << 20, log.log_end_offset, False)
    assert data.size == 2 * size and data.first_offset == 1
    data = log.read(3, 1 << 20, log.log_end_offset, False)
    assert data.size == 3 * size and data.first_offset == 3
    log.update_high_watermark(4)
    assert log.read(3, 1 << 20, log.high_watermark, False).size == size
    log.close()


# ======================================================================== UnifiedLog: roll


def test_roll_on_segment_bytes(tmp_path):
    size = len(make_batch())
    log = new_log(tmp_path, LogConfig(segment_bytes=3 * size))
    for _ in range(10):
        append(log)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= 3 * size for s in log.segments)
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".log")) == ["%020d.log" % b for b in (0, 3, 6, 9)]
    log.close()


def test_roll_on_segment_ms(tmp_path):
    log = new_log(tmp_path, LogConfig(segment_ms=1000))
    append(log, ts=NOW, now=NOW)
    append(log, ts=NOW + 1000, now=NOW + 1000)
    assert len(log.segments) == 1
    append(log, ts=NOW + 1001, now=NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_on_segment_ms_uses_message_timestamps(tmp_path):
    log = new_log(tmp_path, LogConfig(segment_ms=1000))
    append(log, ts=NOW, now=NOW)
    # producer timestamps run ahead of the broker clock: Kafka rolls
    append(log, ts=NOW + 5000, now=NOW + 1)
    assert len(log.segments) == 2
    # old timestamps arriving late: Kafka does not roll (5000 - 5000 < segment.ms)
    append(log, ts=NOW + 5000, now=NOW + 10_000)
    assert len(log.segments) == 2
    log.close()


def test_roll_on_segment_ms_after_restart(tmp_path):
    log = new_log(tmp_path, LogConfig(segment_ms=1000))
    append(log, ts=NOW, now=NOW)
    log.close()
    later = NOW + 5000
    log = new_log(tmp_path, LogConfig(segment_ms=1000), had_clean_shutdown=True, now_ms=later)
    append(log, ts=later, now=later)
    assert [s.base_offset for s in log.segments] == [0, 1]  # the old segment's age survives the restart
    log.close()


def test_roll_on_full_index(tmp_path):
    # 16-byte indexes: two offset entries, one time entry; an entry after every append
    log = new_log(tmp_path, LogConfig(segment_index_bytes=16, index_interval_bytes=0))
    for i in range(12):
        append(log, ts=NOW + i)
    assert len(log.segments) > 3
    for seg in log.segments:
        assert len(seg.offset_index) <= 2
    assert [h.base_offset for h, _ in all_batches(log)] == list(range(12))
    log.close()


# ======================================================================== UnifiedLog: retention


def test_retention_ms_renames_then_deletes(tmp_path):
    size = len(make_batch())
    cfg = LogConfig(segment_bytes=2 * size, retention_ms=10_000, file_delete_delay_ms=60_000)
    log = new_log(tmp_path, cfg)
    for i in range(6):
        append(log, ts=NOW + i * 1000, now=NOW + i * 1000)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    now = NOW + 1000 + 10_001  # the first segment's newest record is 10001 ms old
    assert log.delete_old_segments(now) == 0  # nothing is deletable above the high watermark
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(now - 1) == 0  # its first record is 11000 ms old, its newest 10000
    assert log.delete_old_segments(now) == 1
    assert [s.base_offset for s in log.segments] == [2, 4] and log.log_start_offset == 2
    names = set(os.listdir(tmp_path))
    assert "00000000000000000000.log.deleted" in names and "00000000000000000000.log" not in names
    assert "00000000000000000000.index.deleted" in names and "00000000000000000000.timeindex.deleted" in names
    log.delete_expired_files(now + 59_999)
    assert "00000000000000000000.log.deleted" in set(os.listdir(tmp_path))
    log.delete_expired_files(now + 60_000)
    assert not any(n.startswith("00000000000000000000") for n in os.listdir(tmp_path))
    with pytest.raises(KafkaError):
        log.read(1, 100, log.log_end_offset, True)
    # everything expired: the active segment goes too, a new one starts at the log end
    assert log.delete_old_segments(NOW + 10**6) == 2
    assert [s.base_offset for s in log.segments] == [6] and log.log_start_offset == 6 == log.log_end_offset
    log.close()


def test_retention_ms_judges_a_segment_by_its_newest_record(tmp_path):
    """As Kafka's deleteRetentionMsBreachedSegments (segment.largestTimestamp): a segment whose
    first and last batches are past retention.ms stays while any record in it is younger."""
    size = len(make_batch())
    log = new_log(tmp_path, LogConfig(segment_bytes=3 * size, retention_ms=10_000))
    for ts in (NOW, NOW + 9000, NOW + 1000, NOW + 20_000):  # out of order, as producers may set them
        append(log, ts=ts, now=NOW)
    log.update_high_watermark(log.log_end_offset)
    assert [s.base_offset for s in log.segments] == [0, 3]
    # the first batch is 15000 ms old and the last 14000 ms, the newest record only 6000 ms
    assert log.delete_old_segments(NOW + 15_000) == 0
    assert log.delete_old_segments(NOW + 9000 + 10_000) == 0  # exactly retention.ms is no breach
    assert log.delete_old_segments(NOW + 9000 + 10_001) == 1
    assert [s.base_offset for s in log.segments] == [3] and log.log_start_offset == 3
    log.close()


def test_retention_bytes(tmp_path):
    size = len(make_batch())
    log = new_log(tmp_path, LogConfig(segment_bytes=2 * size, retention_bytes=3 * size, retention_ms=-1))
    for _ in range(7):
        append(log)
    log.update_high_watermark(log.log_end_offset)
    assert [s.size for s in log.segments] == [2 * size, 2 * size, 2 * size, size]
    # 7 batches, 3 allowed: whole segments go while what is left stays >= retention.bytes
    assert log.delete_old_segments(NOW) == 2
    assert [s.base_offset for s in log.segments] == [4, 6] and log.size_in_bytes() == 3 * size
    assert log.delete_old_segments(NOW) == 0
    log.close()


def test_log_start_offset_movement(tmp_path):
    size = len(make_batch())
    log = new_log(tmp_path, LogConfig(segment_bytes=2 * size, retention_ms=-1))
    for e in range(6):
        append(log, epoch=e)
    with pytest.raises(KafkaError) as e:
        log.maybe_increment_log_start_offset(3)  # beyond the high watermark
    assert e.value.code == ErrorCode.offset_out_of_range
    log.update_high_watermark(log.log_end_offset)
    assert log.maybe_increment_log_start_offset(3) == 3
    assert log.maybe_increment_log_start_offset(1) == 3  # never moves back
    assert log.leader_epoch_cache.entries[0] == (3, 3)
    with pytest.raises(KafkaError):
        log.read(2, 100, log.log_end_offset, True)
    assert log.read(3, 100, log.log_end_offset, True).first_offset == 3
    # segments entirely below the log start offset are deleted on the next retention pass
    assert log.delete_old_segments(NOW) == 1
    assert [s.base_offset for s in log.segments] == [2, 4]
    log.close()


def test_log_start_offset_breach_keeps_the_active_segment(tmp_path):
    log = new_log(tmp_path, LogConfig(retention_ms=-1))
    for _ in range(3):
        append(log)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(3)
    assert log.delete_old_segments(NOW) == 0
    assert [s.base_offset for s in log.segments] == [0]
    log.close()


# ======================================================================== UnifiedLog: truncation


def test_truncate_to(tmp_path):
    size = len(make_batch(2))
    log = new_log(tmp_path, LogConfig(segment_bytes=2 * size))
    for e in range(6):
        append(log, n=2, epoch=e)  # offsets 0-11, batches at 0, 2, 4, ...
    log.update_high_watermark(12)
    log.truncate_to(6)
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert [h.base_offset for h, _ in all_batches(log)] == [0, 2, 4]
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 2), (2, 4)]
    assert append(log, n=2, epoch=9).first_offset == 6
    log.truncate_to(3 * 100)  # beyond the end: nothing
    assert log.log_end_offset == 8
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.log_start_offset == 0 and all_batches(log) == []
    assert append(log).first_offset == 0
    log.close()


# ======================================================================== UnifiedLog: recovery


def _write_log(path, n=12, cfg=None):
    log = new_log(path, cfg or LogConfig(segment_bytes=4 * len(make_batch()), index_interval_bytes=50))
    for i in range(n):
        append(log, ts=NOW + i)
    return log


def _reopen(path, clean: bool, recovery_point: int = 0, cfg=None):
    return new_log(
        path,
        cfg or LogConfig(segment_bytes=4 * len(make_batch()), index_interval_bytes=50),
        had_clean_shutdown=clean,
        recovery_point=recovery_point,
    )


def test_recovery_tail_truncated_mid_batch(tmp_path):
    log = _write_log(tmp_path)
    active = log.active_segment.log_path
    crash(log)
    with open(active, "r+b") as f:
        f.truncate(os.path.getsize(active) - 5)
    log = _reopen(tmp_path, clean=False)
    assert log.log_end_offset == 11
    assert [h.base_offset for h, _ in all_batches(log)] == list(range(11))
    assert append(log).first_offset == 11
    log.close()


def test_recovery_flipped_bytes_in_last_batch(tmp_path):
    log = _write_log(tmp_path)
    active = log.active_segment.log_path
    crash(log)
    with open(active, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        f.write(b"\xde\xad")
    log = _reopen(tmp_path, clean=False)
    assert log.log_end_offset == 11
    assert all(rb.is_crc_valid(d, 0, len(d)) for _, d in all_batches(log))
    log.close()


def test_recovery_corrupt_middle_segment_drops_later_segments(tmp_path):
    log = _write_log(tmp_path)
    second = log.segments[1].log_path
    crash(log)
    with open(second, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        f.write(b"\xde\xad")
    log = _reopen(tmp_path, clean=False)
    assert log.log_end_offset == 7 and [s.base_offset for s in log.segments] == [0, 4]
    assert not os.path.exists(os.path.join(tmp_path, "%020d.log" % 8))
    log.close()


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_recovery_rebuilds_indexes(tmp_path, damage):
    log = _write_log(tmp_path, n=40, cfg=LogConfig(index_interval_bytes=50))
    seg = log.active_segment
    want_offsets, want_positions = list(seg.offset_index.offsets), list(seg.offset_index.positions)
    log.close()
    want_times = list(zip(seg.time_index.timestamps, seg.time_index.offsets))
    for path in (seg.offset_index.path, seg.time_index.path):
        if damage == "missing":
            os.unlink(path)
        else:
            with open(path, "ab") as f:
                f.write(b"\x07\x07\x07")
    log = _reopen(tmp_path, clean=True, cfg=LogConfig(index_interval_bytes=50))
    seg = log.active_segment
    assert (list(seg.offset_index.offsets), list(seg.offset_index.positions)) == (want_offsets, want_positions)
    assert list(zip(seg.time_index.timestamps, seg.time_index.offsets)) == want_times
    assert log.log_end_offset == 40
    for off in range(40):
        assert log.read(off, 1, 40, True).first_offset == off
    assert log.fetch_offset_by_timestamp(NOW + 17)[:2] == (17, NOW + 17)
    log.close()  # rebuilt in place; trimmed to the entries on close
    assert os.path.getsize(seg.offset_index.path) == 8 * len(want_offsets)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_one_descriptor_per_segment(tmp_path):
    """Indexes keep no descriptor (the active ones are mapped, recovery writes them whole): a
    segment holds its .log open and nothing else, after appends, after recovery (which used
    to leave three per segment) and after appends to the recovered log."""
    cfg = LogConfig(segment_bytes=4 * len(make_batch()), index_interval_bytes=0)
    before = _open_descriptors()
    log = _write_log(tmp_path, n=40, cfg=cfg)
    assert len(log.segments) >= 10 and all(len(s.offset_index) and len(s.time_index) for s in log.segments)
    assert _open_descriptors() - before == len(log.segments)
    crash(log)
    assert _open_descriptors() == before
    log = _reopen(tmp_path, clean=False, cfg=cfg)
    assert log.log_end_offset == 40 and all(len(s.offset_index) for s in log.segments)
    assert _open_descriptors() - before == len(log.segments)
    for i in range(3):
        append(log, ts=NOW + 100 + i)
    assert len(log.active_segment.offset_index) and _open_descriptors() - before == len(log.segments)
    log.close()


def test_recovery_garbage_after_unclean_shutdown(tmp_path):
    log = _write_log(tmp_path)
    active = log.active_segment.log_path
    rp = log.recovery_point
    log.close()  # a clean close, but the marker is gone: the next start is unclean
    with open(active, "ab") as f:
        f.write(b"\x00" * 7 + os.urandom(200))
    log = _reopen(tmp_path, clean=False, recovery_point=rp)
    assert log.log_end_offset == 12 and len(all_batches(log)) == 12
    assert os.path.getsize(active) == log.active_segment.size
    log.close()


def test_clean_shutdown_trusts_the_log(tmp_path):
    log = _write_log(tmp_path)
    log.close()
    log = _reopen(tmp_path, clean=True)
    assert log.log_end_offset == 12 and log.recovery_point == 12
    log.close()


@st.composite
def log_operations(draw):
    return draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 200)),
                st.tuples(st.just("roll"), st.just(0), st.just(0)),
                st.tuples(st.just("clean"), st.just(0), st.just(0)),
                st.tuples(st.just("crash"), st.booleans(), st.just(0)),
                st.tuples(st.just("torn"), st.integers(1, 60), st.just(0)),
                st.tuples(st.just("flush"), st.just(0), st.just(0)),
            ),
            min_size=1,
            max_size=30,
        )
    )


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(ops=log_operations())
def test_random_appends_rolls_restarts_never_lose_or_expose_corruption(ops):
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=100)
    with tempfile.TemporaryDirectory() as d:
        log = new_log(d, cfg)
        written: list[bytes] = []  # every fully written batch, as stored (offsets patched)
        for op, a, b in ops:
            if op == "append":
                batch = bytearray(build_batch([(b"k", os.urandom(b), ())] * a, timestamp=NOW))
                info = log.append_as_leader(memoryview(batch), 1, NOW)
                assert info.first_offset == sum(rb.read_header(w).records_count for w in written)
                written.append(bytes(batch))
            elif op == "roll":
                log.roll(NOW)
            elif op == "flush":
                log.flush()
            elif op == "clean":
                log.close()
                log = new_log(d, cfg, had_clean_shutdown=True, recovery_point=log.recovery_point)
            elif op in ("crash", "torn"):
                rp = log.recovery_point if (op == "crash" and a) else 0
                active = log.active_segment.log_path
                crash(log)
                if op == "torn":  # the start of a batch that never finished
                    with open(active, "ab") as f:
                        f.write(build_batch([(b"k", b"x" * 100, ())], base_offset=10**6)[:a])
                log = new_log(d, cfg, had_clean_shutdown=False, recovery_point=rp)
            stored = all_batches(log)
            assert [bytes(data) for _h, data in stored] == written
            for _h, data in stored:
                assert rb.is_crc_valid(data, 0, len(data))
            assert log.log_end_offset == sum(rb.read_header(w).records_count for w in written)
        # every offset is readable where it is
        for off in range(0, log.log_end_offset, 3):
            got = log.read(off, 1, log.log_end_offset, True)
            h = rb.read_header(fetched(got))
            assert h.base_offset <= off <= h.last_offset
        log.close()


# ======================================================================== checkpoint files


def test_offset_checkpoint_layout(tmp_path):
    p = tmp_path / "recovery-point-offset-checkpoint"
    f = ck.OffsetCheckpointFile(str(p))
    f.write({("orders", 1): 17, ("orders", 0): 42, ("__consumer_offsets", 12): 0})
    assert p.read_text() == "0\n3\n__consumer_offsets 12 0\norders 0 42\norders 1 17\n"
    assert f.read() == {("orders", 1): 17, ("orders", 0): 42, ("__consumer_offsets", 12): 0}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


TOPICS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789._-", min_size=1, max_size=40)


@SETTINGS
@given(st.dictionaries(st.tuples(TOPICS, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=20))
def test_offset_checkpoint_round_trip(offsets):
    with tempfile.TemporaryDirectory() as d:
        f = ck.OffsetCheckpointFile(os.path.join(d, "cp"))
        f.write(offsets, fsync=False)
        assert f.read() == offsets


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "x\n0\n",
        " 0\n0\n",  # Integer.parseInt takes no spaces
        "0\nx\n",
        "0\n2\nt 0 1\n",  # fewer entries than the count
        "0\n1\nt 0 1\nt 1 2\n",  # more
        "0\n1\nt 0\n",  # wrong number of fields
        "0\n1\nt 0 1 2\n",
        "0\n1\nt x 1\n",  # not a number
        "0\n1\nt 0 1.5\n",
        "0\n1\nt 0 99999999999999999999\n",  # not a long
        "0\n1\nt 99999999999 1\n",  # not an int
        "0\n1\n\n",  # blank line
        "0\n1\n t 0 1\n",  # leading whitespace makes an empty first field in Java's split
    ],
)
def test_malformed_offset_checkpoint(tmp_path, text):
    p = tmp_path / "cp"
    p.write_text(text)
    with pytest.raises(ck.CheckpointError):
        ck.OffsetCheckpointFile(str(p)).read()


@pytest.mark.parametrize("text", ["", "0\n", "0\n0\n"])
def test_empty_checkpoints(tmp_path, text):
    # Kafka's CheckpointFile creates the file empty, and reads an empty file as no entries
    p = tmp_path / "cp"
    p.write_text(text)
    assert ck.OffsetCheckpointFile(str(p)).read() == {}
    assert ck.LeaderEpochCheckpointFile(str(p)).read() == []
    assert ck.OffsetCheckpointFile(str(tmp_path / "missing")).read() == {}


def test_offset_checkpoint_separators_like_java(tmp_path):
    p = tmp_path / "cp"
    p.write_text("0\n2\nt  0\t5\nu 1 6   \n")  # \s+ between fields, trailing whitespace dropped
    assert ck.OffsetCheckpointFile(str(p)).read() == {("t", 0): 5, ("u", 1): 6}


def test_leader_epoch_checkpoint_layout(tmp_path):
    p = tmp_path / "leader-epoch-checkpoint"
    f = ck.LeaderEpochCheckpointFile(str(p))
    f.write([(0, 0), (1, 57), (4, 1000)])
    assert p.read_text() == "0\n3\n0 0\n1 57\n4 1000\n"
    assert f.read() == [(0, 0), (1, 57), (4, 1000)]
    p.write_text("0\n1\n0 0 0\n")
    with pytest.raises(ck.CheckpointError):
        f.read()


KAFKA_UUIDS = [  # (most, least significant bits) -> Uuid.toString, from Java's Base64 URL encoder
    ((0, 1), "AAAAAAAAAAAAAAAAAAAAAQ"),  # Kafka's METADATA_TOPIC_ID
    ((0, 0), "AAAAAAAAAAAAAAAAAAAAAA"),  # ZERO_UUID
    ((-1, -1), "_____________________w"),
    ((0x123456789ABCDEF0, 0x0FEDCBA987654321), "EjRWeJq83vAP7cuph2VDIQ"),
    ((-(2**63), 42), "gAAAAAAAAAAAAAAAAAAAKg"),
    ((0xFBFFBFEFBEFFFFFF - 2**64, 0xFFFFFBEFFBEFFFFF - 2**64), "-_-_777_______vv--___w"),
]


def _uuid(msb: int, lsb: int) -> uuid.UUID:
    return uuid.UUID(bytes=struct.pack(">qq", msb, lsb))


@pytest.mark.parametrize("bits,text", KAFKA_UUIDS)
def test_kafka_uuid_text(bits, text):
    u = _uuid(*bits)
    assert ck.uuid_to_kafka(u) == text
    assert ck.uuid_from_kafka(text) == u


@SETTINGS
@given(st.uuids())
def test_kafka_uuid_round_trip(u):
    s = ck.uuid_to_kafka(u)
    assert len(s) == 22 and ck.uuid_from_kafka(s) == u


@pytest.mark.parametrize(
    "bad",
    [
        "AAAA",
        "A" * 25,
        "AAAAAAAAAAAAAAAAAAAAA+",
        "AAAAAAAAAAAAAAAAAAAA/Q",
        "AAAAAAAAAAAAAAAAAAAA!Q",
        "AAAAAAAAAAAAAAAAAAAAAAAA",
    ],
)
def test_kafka_uuid_rejects(bad):
    with pytest.raises(ValueError):
        ck.uuid_from_kafka(bad)


def test_partition_metadata_layout(tmp_path):
    p = tmp_path / "partition.metadata"
    tid = _uuid(0x123456789ABCDEF0, 0x0FEDCBA987654321)
    f = ck.PartitionMetadataFile(str(p))
    f.write(tid)
    assert p.read_bytes() == b"version: 0\ntopic_id: EjRWeJq83vAP7cuph2VDIQ"  # Kafka writes no final newline
    assert f.read() == tid
    p.write_text("version: 1\ntopic_id: EjRWeJq83vAP7cuph2VDIQ\n")  # newer versions are read (downgrade)
    assert f.read() == tid
    assert ck.PartitionMetadataFile(str(tmp_path / "none")).read() is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "version: 0\n",
        "version 0\ntopic_id: EjRWeJq83vAP7cuph2VDIQ",
        "version: x\ntopic_id: EjRWeJq83vAP7cuph2VDIQ",
        "version: -1\ntopic_id: EjRWeJq83vAP7cuph2VDIQ",
        "version: 0\ntopic_id: nope",
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
        "version: 0\ntopic_id EjRWeJq83vAP7cuph2VDIQ",
    ],
)
def test_malformed_partition_metadata(tmp_path, text):
    p = tmp_path / "partition.metadata"
    p.write_text(text)
    with pytest.raises(ck.CheckpointError):
        ck.PartitionMetadataFile(str(p)).read()


def test_meta_properties(tmp_path):
    p = tmp_path / "meta.properties"
    ck.write_properties(
        str(p),
        {
            "version": "1",
            "node.id": "3",
            "cluster.id": "MkU3OEVBNTcwNTJENDM2Qk",
            "directory.id": "EjRWeJq83vAP7cuph2VDIQ",
        },
    )
    lines = p.read_text().split("\n")
    # java.util.Properties.store(writer, ""): an empty comment line, the date, then key=value
    assert (
        lines[0] == "#"
        and lines[1].startswith("#")
        and lines[1].endswith(("UTC 2024", "UTC 2025", "UTC 2026", "UTC 2027", "UTC 2028"))
    )
    assert lines[2:] == [
        "cluster.id=MkU3OEVBNTcwNTJENDM2Qk",
        "directory.id=EjRWeJq83vAP7cuph2VDIQ",
        "node.id=3",
        "version=1",
        "",
    ]
    assert ck.read_properties(str(p)) == {
        "version": "1",
        "node.id": "3",
        "cluster.id": "MkU3OEVBNTcwNTJENDM2Qk",
        "directory.id": "EjRWeJq83vAP7cuph2VDIQ",
    }
    # as Kafka writes it (kafka-storage format), and Java's other separators
    p.write_text(
        "#\n#Tue Oct 29 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=_____________________w\nversion=1\ncluster.id=abc\n"
    )
    assert ck.read_properties(str(p))["directory.id"] == "_____________________w"
    p.write_text("! comment\ncluster.id: abc\nnode.id 7\n")
    assert ck.read_properties(str(p)) == {"cluster.id": "abc", "node.id": "7"}
    assert ck.read_properties(str(tmp_path / "missing")) is None


def test_clean_shutdown_marker(tmp_path):
    ck.write_clean_shutdown(str(tmp_path), 7)
    assert (tmp_path / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":7}'  # Jackson's form
    assert ck.consume_clean_shutdown(str(tmp_path))
    assert not ck.consume_clean_shutdown(str(tmp_path))


# ======================================================================== LeaderEpochFileCache


class KafkaEpochCache:
    """A transcription of the semantics of Kafka's LeaderEpochFileCache (TreeMap by epoch)."""

    def __init__(self):
        self.epochs: dict[int, int] = {}

    def entries(self):
        return sorted(self.epochs.items())

    def assign(self, epoch, start):
        latest = self.entries()[-1] if self.epochs else None
        if latest is not None and not (epoch != latest[0] or start < latest[1]):
            return
        for e, s in reversed(self.entries()):
            if e >= epoch or s >= start:
                del self.epochs[e]
            else:
                break
        self.epochs[epoch] = start

    def end_offset_for(self, requested, leo):
        if requested == -1:
            return -1, -1
        entries = self.entries()
        if entries and entries[-1][0] == requested:
            return requested, leo
        higher = [e for e in entries if e[0] > requested]
        if not higher:
            return -1, -1
        floor = [e for e in entries if e[0] <= requested]
        if not floor:
            return requested, higher[0][1]
        return floor[-1][0], higher[0][1]

    def truncate_from_end(self, end):
        entries = self.entries()
        if end >= 0 and entries and entries[-1][1] >= end:
            for e, s in reversed(entries):
                if s >= end:
                    del self.epochs[e]
                else:
                    break

    def truncate_from_start(self, start):
        removed = []
        for e, s in self.entries():
            if s <= start:
                removed.append(e)
                del self.epochs[e]
            else:
                break
        if removed:
            self.epochs[removed[-1]] = start

    def epoch_for_offset(self, offset):
        prev = -1
        for e, s in self.entries():
            if s == offset:
                return e
            if s > offset:
                return prev
            prev = e
        return prev


EPOCH_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 300)),
        st.tuples(st.just("end"), st.integers(-2, 300), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 300), st.just(0)),
    ),
    max_size=40,
)


@SETTINGS
@given(ops=EPOCH_OPS, queries=st.lists(st.tuples(st.integers(-1, 14), st.integers(0, 400)), max_size=10))
def test_leader_epoch_cache_matches_kafka(ops, queries):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "leader-epoch-checkpoint")
        cache = LeaderEpochFileCache(path, "t-0")
        model = KafkaEpochCache()
        for op, a, b in ops:
            if op == "assign":
                cache.assign(a, b)
                model.assign(a, b)
            elif op == "end":
                cache.truncate_from_end(a)
                model.truncate_from_end(a)
            else:
                cache.truncate_from_start(a)
                model.truncate_from_start(a)
            assert cache.entries == model.entries()
        for epoch, leo in queries:
            assert cache.end_offset_for(epoch, leo) == model.end_offset_for(epoch, leo)
            assert cache.epoch_for_offset(leo) == model.epoch_for_offset(leo)
        assert cache.latest_epoch() == (model.entries()[-1][0] if model.epochs else -1)
        cache.flush()
        assert LeaderEpochFileCache(path).entries == model.entries()


def test_a_new_log_has_an_empty_leader_epoch_checkpoint(tmp_path):
    """As Kafka's CheckpointFile, the file exists from the log's creation: a follower that has
    fetched nothing yet shows an empty leader-epoch-checkpoint (issue 14, test 10); the first
    entry replaces it, and an empty file reads as no entries."""
    log = new_log(str(tmp_path / "t-0"))
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == ""
    log.leader_epoch_cache.assign(0, 0)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    log.close()
    assert LeaderEpochFileCache(str(tmp_path / "empty")).entries == []


def test_leader_epoch_cache_examples(tmp_path):
    cache = LeaderEpochFileCache(str(tmp_path / "leader-epoch-checkpoint"))
    cache.assign(2, 10)
    cache.assign(4, 25)
    cache.assign(4, 30)  # same epoch, later start: no change
    cache.assign(5, 40)
    assert cache.entries == [(2, 10), (4, 25), (5, 40)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n2 10\n4 25\n5 40\n"
    assert cache.end_offset_for(5, 99) == (5, 99)  # latest epoch: the log end offset
    assert cache.end_offset_for(4, 99) == (4, 40)
    assert cache.end_offset_for(3, 99) == (2, 25)  # the largest epoch <= 3 and the start of the next one
    assert cache.end_offset_for(1, 99) == (1, 10)  # older than everything: the first start offset
    assert cache.end_offset_for(7, 99) == (-1, -1)
    assert cache.end_offset_for(-1, 99) == (-1, -1)
    assert cache.epoch_for_offset(9) == -1 and cache.epoch_for_offset(25) == 4 and cache.epoch_for_offset(39) == 4
    cache.assign(3, 30)  # a lower epoch: later entries conflicting with it are removed (Kafka)
    assert cache.entries == [(2, 10), (3, 30)]
    cache.assign(3, 20)  # the latest epoch starting earlier replaces it
    assert cache.entries == [(2, 10), (3, 20)]
    cache.assign(-1, 50)  # batches without a leader epoch are not recorded
    assert cache.entries == [(2, 10), (3, 20)]
    cache.truncate_from_start(15)
    assert cache.entries == [(2, 15), (3, 20)]
    cache.truncate_from_end(-1)  # Kafka ignores a negative end offset
    assert cache.entries == [(2, 15), (3, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(2, 15)]


def test_leader_epoch_cache_repairs_a_non_monotonic_checkpoint(tmp_path):
    p = tmp_path / "leader-epoch-checkpoint"
    p.write_text("0\n3\n1 0\n3 50\n2 60\n")
    assert LeaderEpochFileCache(str(p)).entries == [(1, 0), (2, 60)]
    p.write_text("garbage")
    assert LeaderEpochFileCache(str(p)).entries == []


def test_segment_refuses_offsets_its_index_cannot_hold(tmp_path):
    from kesque.storage.segment import LogSegmentOffsetOverflowError

    seg = LogSegment(str(tmp_path), 100, create=True, now_ms=NOW)
    b = make_batch()
    for bad in (100 + 2**31, 99):
        with pytest.raises(LogSegmentOffsetOverflowError):
            seg.append(bad, NOW, bad, b)
    assert seg.size == 0 and os.path.getsize(seg.log_path) == 0  # nothing written
    seg.append(100 + 2**31 - 1, NOW, 100 + 2**31 - 1, b)
    seg.close()


def test_find_batch_reads_headers_in_chunks_and_across_their_ends(tmp_path, monkeypatch):
    """find_batch reads the headers after an index entry a chunk at a time: every batch is found
    where a scan of the headers one by one finds it, a header cut by a chunk's end included,
    and a file shorter than the segment believes ends the scan as a short header read did."""
    monkeypatch.setattr(segment_mod, "SCAN_CHUNK", 1000)  # headers straddle chunk ends often
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=10**6, create=True, now_ms=NOW)
    layout = fill_segment(seg, 80, value_size=37)
    assert seg.size > 10 * 1000
    assert any(pos % 1000 > 1000 - rb.HEADER_SIZE for pos, *_ in layout)  # some header is cut
    for pos, first, last, _ts in layout:
        for target in (first, last):
            found = seg.find_batch(target)
            assert found is not None and (found[0], found[1].base_offset, found[1].last_offset) == (pos, first, last)
    assert seg.find_batch(layout[-1][2] + 1) is None
    os.ftruncate(seg.handle.fd, layout[40][0] + 30)  # the file lost its tail under the segment
    assert seg.find_batch(layout[39][1])[0] == layout[39][0]
    assert seg.find_batch(layout[40][1]) is None
    seg.close()


def test_roll_when_offsets_overflow_the_segment(tmp_path):
    log = new_log(tmp_path, LogConfig(index_interval_bytes=0))
    log.append_raw(build_batch([(b"k", b"v", ())], base_offset=0, partition_leader_epoch=0, timestamp=NOW), NOW)
    far = 2**31 + 10
    log.append_raw(build_batch([(b"k", b"v", ())], base_offset=far, partition_leader_epoch=0, timestamp=NOW), NOW)
    log.append_raw(build_batch([(b"k", b"v", ())], base_offset=far + 1, partition_leader_epoch=0, timestamp=NOW), NOW)
    assert log.log_end_offset == far + 2
    assert log.read(far, 1, log.log_end_offset, True).first_offset == far
    log.close()


def test_segment_scans_stop_at_a_corrupt_length(tmp_path):
    # a segment trusted after a clean shutdown, with a batch length of 0 in the middle: the
    # header scans must end rather than loop forever
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=10**6, create=True, now_ms=NOW)
    layout = fill_segment(seg, 5)
    seg.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(layout[2][0] + 8)
        f.write(struct.pack(">i", 0))
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=10**6, now_ms=NOW)
    assert seg.find_batch(layout[1][1])[0] == layout[1][0]
    assert seg.find_batch(layout[4][1]) is None
    assert [p for p, _h in seg.iter_headers()] == [layout[0][0], layout[1][0]]
    assert seg.find_offset_by_timestamp(layout[4][3], 0) is None
    seg.close()
