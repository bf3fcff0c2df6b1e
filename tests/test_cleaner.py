"""The log cleaner on one log (kesque.storage.cleaner): Kafka's compaction guarantees."""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.config.topic import LogConfig
from kesque.records.records import build_batch, iter_records
from kesque.storage.cleaner import Cleaner, first_dirty_offset, first_uncleanable_offset
from kesque.storage.unified_log import UnifiedLog

NOW = 1_700_000_000_000
DAY = 86_400_000


_OPENED: list[UnifiedLog] = []


def new_log(path, **cfg) -> UnifiedLog:
    cfg.setdefault("cleanup_policy", ("compact",))
    lg = UnifiedLog(str(path), "t", 0, LogConfig(**cfg), now_ms=NOW)
    _OPENED.append(lg)
    return lg


@pytest.fixture(autouse=True)
def _close_opened_logs():
    """Every log a test opened is closed after it: the suite runs in one process, and its
    broker tests wait on pipes with descriptors that must stay countable."""
    yield
    while _OPENED:
        lg = _OPENED.pop()
        with contextlib.suppress(OSError, ValueError):
            lg.close()


def put(lg: UnifiedLog, pairs, now: int = NOW, **kw):
    batch = build_batch([(k, v, ()) for k, v in pairs], timestamp=now, **kw)
    info = lg.append_as_leader(memoryview(bytearray(batch)), 0, now)
    lg.update_high_watermark(lg.log_end_offset)
    return info


def end_txn(lg: UnifiedLog, pid: int, commit: bool, now: int = NOW):
    lg.append_txn_marker(pid, 0, commit, 0, 0, now)
    lg.update_high_watermark(lg.log_end_offset)


def records(lg: UnifiedLog, start: int = 0):
    """(offset, key, value) of every data record from ``start``, as a read_uncommitted consumer."""
    out = []
    for h, data in lg.read_batches(start):
        if not h.is_control:
            out += [(r.offset, r.key, r.value) for r in iter_records(data, 0, h) if r.offset >= start]
    return out


def clean(lg: UnifiedLog, now: int = NOW, checkpoint: int | None = None, **kw):
    return Cleaner(**kw).clean(lg, first_dirty_offset(lg, checkpoint), first_uncleanable_offset(lg, now), now)


def user_emails(lg: UnifiedLog, updates: int = 50, users: int = 5):
    """The seed's user-email topic: every user changes address many times."""
    for i in range(updates):
        uid = str(100 + i % users).encode()
        put(lg, [(uid, b"user%s@mail-%d.example" % (uid, i))])
        if i % 7 == 6:
            lg.roll(NOW)


def test_each_key_keeps_its_last_value_and_offsets_do_not_change(tmp_path):
    lg = new_log(tmp_path / "t-0")
    user_emails(lg)
    before = records(lg)
    lg.roll(NOW)
    stats = clean(lg)
    assert stats is not None and stats.end_offset == 50
    after = records(lg)
    last = {}
    for off, k, v in before:
        last[k] = (off, k, v)
    assert after == sorted(last.values())  # one record per key: the last, at its offset
    assert lg.log_end_offset == 50 and lg.log_start_offset == 0
    assert not [n for n in os.listdir(lg.dir) if n.endswith((".cleaned", ".swap"))]


def _descriptors_into(directory: str) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(directory + os.sep):
                out.append(target)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_closing_a_cleaned_log_closes_the_segments_it_replaced(tmp_path):
    """The segments a swap replaced wait as .deleted for file.delete.delay.ms; a log closed
    before then must still close them (a broker or a test process otherwise keeps one
    descriptor per replaced segment)."""
    lg = new_log(tmp_path / "t-0")
    user_emails(lg)
    lg.roll(NOW)
    clean(lg)
    assert any(n.endswith(".deleted") for n in os.listdir(lg.dir))
    lg.close()
    assert _descriptors_into(str(lg.dir)) == []


def test_fetch_inside_a_compacted_gap_starts_at_the_next_survivor(tmp_path):
    lg = new_log(tmp_path / "t-0")
    for i in range(40):
        put(lg, [(b"k%d" % (i % 3), b"v%d" % i)])  # k0 k1 k2 k0 ...: the last three survive
    lg.roll(NOW)
    clean(lg)
    assert [r[0] for r in records(lg)] == [37, 38, 39]
    for start in (30, 36, 37):
        assert records(lg, start)[0][0] == 37
    assert records(lg, 38)[0][0] == 38
    data = lg.read(20, 1 << 20, lg.log_end_offset, True)
    assert data.size > 0  # a read below the first survivor gets bytes, not an empty answer


def test_active_segment_and_head_are_not_cleaned(tmp_path):
    lg = new_log(tmp_path / "t-0")
    put(lg, [(b"a", b"1")])
    put(lg, [(b"a", b"2")])
    lg.roll(NOW)
    put(lg, [(b"a", b"3")])
    put(lg, [(b"a", b"4")])  # active segment: kept whole
    clean(lg)
    assert records(lg) == [(1, b"a", b"2"), (2, b"a", b"3"), (3, b"a", b"4")]


def test_tombstones_stay_until_delete_retention_has_passed(tmp_path):
    lg = new_log(tmp_path / "t-0", delete_retention_ms=DAY)
    put(lg, [(b"a", b"1"), (b"b", b"1")])
    put(lg, [(b"a", None)])
    lg.roll(NOW)
    stats = clean(lg)
    assert records(lg) == [(1, b"b", b"1"), (2, b"a", None)]  # the tombstone now carries its horizon
    put(lg, [(b"c", b"1")])
    lg.roll(NOW)
    clean(lg, NOW + DAY - 1, checkpoint=stats.end_offset)
    assert (2, b"a", None) in records(lg)
    clean(lg, NOW + DAY, checkpoint=stats.end_offset)
    assert records(lg) == [(1, b"b", b"1"), (3, b"c", b"1")]


def test_aborted_records_go_and_markers_follow_in_a_later_pass(tmp_path):
    lg = new_log(tmp_path / "t-0", delete_retention_ms=0)
    put(lg, [(b"a", b"committed")])
    put(lg, [(b"a", b"aborted")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    end_txn(lg, 7, commit=False)
    put(lg, [(b"b", b"1")], producer_id=7, producer_epoch=0, base_sequence=1, transactional=True)
    end_txn(lg, 7, commit=True)
    lg.roll(NOW)
    clean(lg)
    # the aborted value neither survives nor shadows the committed one
    assert records(lg) == [(0, b"a", b"committed"), (3, b"b", b"1")]
    markers = [h.base_offset for h, _ in lg.read_batches(0) if h.is_control]
    assert markers == [2, 4]  # kept: their transactions had data in this pass
    clean(lg, NOW + 1)  # no aborted data left: the ABORT marker gets a delete horizon (now + 0)
    assert [h.base_offset for h, _ in lg.read_batches(0) if h.is_control] == [2, 4]
    clean(lg, NOW + 2)  # past the horizon: it goes; the COMMIT marker of live data stays
    assert [h.base_offset for h, _ in lg.read_batches(0) if h.is_control] == [4]
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == []


def test_committed_transaction_keeps_its_marker_while_its_data_lives(tmp_path):
    lg = new_log(tmp_path / "t-0", delete_retention_ms=0)
    put(lg, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    end_txn(lg, 7, commit=True)
    put(lg, [(b"z", b"1")])
    lg.roll(NOW)
    for t in range(3):
        clean(lg, NOW + t)
    assert records(lg) == [(0, b"a", b"1"), (2, b"z", b"1")]
    assert [h.base_offset for h, _ in lg.read_batches(0) if h.is_control] == [1]


def test_last_batch_of_a_producer_survives_as_an_empty_batch(tmp_path):
    lg = new_log(tmp_path / "t-0")
    put(lg, [(b"a", b"1")], producer_id=9, producer_epoch=0, base_sequence=0)
    put(lg, [(b"a", b"2")])
    lg.roll(NOW)
    clean(lg)
    batches = list(lg.read_batches(0))
    assert [(h.base_offset, h.producer_id, h.records_count) for h, _ in batches] == [(0, 9, 0), (1, -1, 1)]
    lg.close()
    lg = new_log(tmp_path / "t-0")  # the producer's sequence survives: a retry is a duplicate
    dup = lg.append_as_leader(
        memoryview(
            bytearray(build_batch([(b"a", b"1", ())], timestamp=NOW, producer_id=9, producer_epoch=0, base_sequence=0))
        ),
        0,
        NOW,
    )
    assert dup.duplicate


def test_compressed_batches_keep_their_codec(tmp_path):
    lg = new_log(tmp_path / "t-0")
    put(lg, [(b"a", b"1" * 100), (b"b", b"1"), (b"a", b"2" * 100)], compression_codec=1)
    lg.roll(NOW)
    clean(lg)
    ((h, _),) = list(lg.read_batches(0))
    assert h.compression == 1 and h.base_offset == 0 and h.last_offset == 2
    assert records(lg) == [(1, b"b", b"1"), (2, b"a", b"2" * 100)]


def test_small_offset_map_cleans_in_several_rounds(tmp_path):
    lg = new_log(tmp_path / "t-0")
    for i in range(30):
        put(lg, [(b"k%d" % (i % 10), b"v%d" % i)])
        if i % 5 == 4:
            lg.roll(NOW)
    lg.roll(NOW)
    checkpoint = None
    for _ in range(20):
        stats = clean(lg, checkpoint=checkpoint, map_memory=24 * 5)  # about four keys at a time
        if stats is None:
            break
        checkpoint = stats.end_offset
    assert [r[0] for r in records(lg)] == list(range(20, 30))


def test_a_batch_larger_than_the_offset_map_is_an_error_naming_the_setting(tmp_path):
    """Kafka refuses a dirty section whose first unit does not fit the map (the partition then
    becomes uncleanable); returning "nothing to clean" would pick the log again forever."""
    lg = new_log(tmp_path / "t-0")
    put(lg, [(b"k%d" % i, b"v") for i in range(10)])
    lg.roll(NOW)
    with pytest.raises(ValueError, match=r"first dirty batch of t-0 \(offset 0\).*log.cleaner.dedupe.buffer.size"):
        clean(lg, map_memory=24 * 5)
    assert len(records(lg)) == 10


def test_cleaning_groups_segments_into_one(tmp_path):
    lg = new_log(tmp_path / "t-0")
    user_emails(lg, updates=30)
    lg.roll(NOW)
    n = len(lg.segments)
    stats = clean(lg)
    assert stats.groups == 1 and len(lg.segments) == 2 and n > 2


# ------------------------------------------------------------------ the model (seed 000's guarantees)

KEYS = st.sampled_from([b"a", b"b", b"c", b"d"])
VALUES = st.one_of(st.none(), st.binary(min_size=1, max_size=3))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3)),
        st.tuples(
            st.just("txn"), st.integers(1, 2), st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=2), st.booleans()
        ),
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean"), st.integers(0, 3)),
    ),
    max_size=30,
)


def _apply(lg: UnifiedLog, ops, model: list, retention: int, now: int, checkpoint, map_memory: int):
    seqs: dict[int, int] = {}
    for op in ops:
        if op[0] == "put":
            first = put(lg, op[1], now).first_offset
            model += [(first + i, k, v, "plain") for i, (k, v) in enumerate(op[1])]
        elif op[0] == "txn":
            _, pid, pairs, commit = op
            seq = seqs.get(pid, 0)
            first = put(lg, pairs, now, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
            seqs[pid] = seq + len(pairs)
            end_txn(lg, pid, commit, now)
            model += [
                (first.first_offset + i, k, v, "committed" if commit else "aborted") for i, (k, v) in enumerate(pairs)
            ]
        elif op[0] == "roll":
            lg.roll(now)
        else:
            now += op[1] * retention // 2
            stats = clean(lg, now, checkpoint, map_memory=map_memory)
            if stats is not None:
                checkpoint = stats.end_offset
    return now, checkpoint


def _check(lg: UnifiedLog, model: list, retention_passed_never: bool, head: int):
    by_offset = {m[0]: m for m in model}
    got = records(lg)
    assert [r[0] for r in got] == sorted(r[0] for r in got)  # order kept
    for off, k, v in got:  # offsets unchanged: the record there is the one written there
        assert by_offset[off][1:3] == (k, v)
    aborted = lg.collect_aborted_transactions(0, lg.log_end_offset)
    visible = [r for r in got if not any(a.first_offset <= r[0] <= a.last_offset for a in aborted)]
    for off, *_ in visible:
        assert by_offset[off][3] != "aborted"
    for off, *_ in got:  # aborted records below the cleaned end are gone
        assert by_offset[off][3] != "aborted" or off >= head
    markers = [h for h, _ in lg.read_batches(0) if h.is_control]
    for h, _ in lg.read_batches(0):  # transactional data keeps its marker (or it would read as open)
        if h.is_transactional and not h.is_control and h.records_count:
            assert any(m.producer_id == h.producer_id and m.base_offset > h.last_offset for m in markers)
    have = {r[0] for r in visible}
    for m in model:  # a caught-up consumer sees every committed record of the head
        if m[0] >= head and m[3] != "aborted":
            assert m[0] in have
    final, last_tombstone = {}, {}
    for off, k, v, status in model:
        if status != "aborted":
            final[k] = v
            last_tombstone[k] = off if v is None else None
    seen = {}
    for _off, k, v in visible:
        seen[k] = v
    assert {k: v for k, v in seen.items() if v is not None} == {k: v for k, v in final.items() if v is not None}
    if retention_passed_never:
        for _k, off in last_tombstone.items():
            if off is not None:
                assert off in have


# 96 bytes: the smallest map holding a put of 3 keys (a first dirty batch larger than the map is
# an error, see above); 144 and 96 still clean a long log in several rounds
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, long_retention=st.booleans(), map_memory=st.sampled_from([96, 144, 1 << 20]))
def test_compaction_model(tmp_path_factory, ops, long_retention, map_memory):
    """Random keys, values, tombstones, committed and aborted transactions, rolls and cleaning
    points: the cleaned log keeps order and offsets, every record of the uncleaned head, the
    final value of every key, and each final tombstone while delete.retention.ms has not passed."""
    retention = 10 * DAY if long_retention else 1000
    lg = new_log(tmp_path_factory.mktemp("model") / "t-0", delete_retention_ms=retention, segment_bytes=1 << 20)
    model: list = []
    now, checkpoint = _apply(lg, ops, model, retention, NOW, None, map_memory)
    for later in (0, 0 if long_retention else retention):  # two passes: KIP-98's markers, KIP-534's horizons
        _apply(lg, [("put", [(b"z", b"%d" % later)]), ("roll",)], model, retention, now, None, map_memory)
        stats = clean(lg, now + later, checkpoint, map_memory=map_memory)
        checkpoint = stats.end_offset if stats else checkpoint
    head = checkpoint or 0
    _check(lg, model, long_retention, head)
    lg.close()
    reopened = new_log(lg.dir, delete_retention_ms=retention)
    _check(reopened, model, long_retention, head)
    reopened.close()


# ------------------------------------------------------------------ crashes

STAGES = ["copy", "cleaned", "swap", "deleted", "done"]


class Crash(BaseException):
    """The process dies here (a BaseException: no clean-up handler runs)."""


def crash_while_cleaning(lg: UnifiedLog, stage: str) -> None:
    def hook(s):
        if s == stage:
            raise Crash

    with pytest.raises(Crash):
        Cleaner(hook=hook).clean(lg, 0, first_uncleanable_offset(lg, NOW), NOW)
    for seg in lg.segments + [s for _due, s in lg.local_log.pending_deletes]:
        seg.close()


def last_per_key(recs) -> list:
    last = {}
    for off, k, v in recs:
        last[k] = (off, k, v)
    return sorted(last.values())


def assert_recovered(path, before, stage: str, cleaned_stages=("swap", "deleted", "done")) -> None:
    reopened = new_log(path)
    assert records(reopened) == (last_per_key(before) if stage in cleaned_stages else before)
    assert not [n for n in os.listdir(reopened.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert reopened.log_end_offset == 40
    reopened.close()


@pytest.mark.parametrize("stage", STAGES)
def test_crash_at_each_stage_recovers_a_consistent_log(tmp_path, stage):
    """A crash (the process dies, the page cache survives) at each step of a cleaning: the
    reopened log holds either the old segments or the cleaned one, never both or neither."""
    lg = new_log(tmp_path / "t-0")
    user_emails(lg, updates=40)
    lg.roll(NOW)
    before = records(lg)
    crash_while_cleaning(lg, stage)
    assert_recovered(tmp_path / "t-0", before, stage)


@pytest.mark.parametrize("stage", STAGES)
def test_power_cut_at_each_stage_recovers_a_consistent_log(tmp_path, monkeypatch, stage):
    """The same with the power cut (only what was fsynced survives): up to the directory sync
    that ends the swap the old segments come back, from it on the cleaned one."""
    from powerloss import PowerLossFS

    fs = PowerLossFS(tmp_path).install(monkeypatch)
    lg = new_log(tmp_path / "t-0")
    user_emails(lg, updates=40)
    lg.roll(NOW)
    lg.flush()
    before = records(lg)
    crash_while_cleaning(lg, stage)
    fs.lose_power()
    assert_recovered(tmp_path / "t-0", before, stage, cleaned_stages=("done",))


def test_load_drops_a_swap_file_of_an_unfinished_operation(tmp_path):
    """Kafka's KAFKA-6264 rule: a .swap at or past the lowest .cleaned offset is not complete."""
    lg = new_log(tmp_path / "t-0")
    user_emails(lg, updates=40)
    lg.roll(NOW)
    before = records(lg)
    crash_while_cleaning(lg, "swap")
    swap = [n for n in os.listdir(lg.dir) if n.endswith(".log.swap")][0]
    open(os.path.join(lg.dir, swap.replace(".log.swap", ".log.cleaned")), "wb").close()
    assert_recovered(tmp_path / "t-0", before, "swap", cleaned_stages=())


# ------------------------------------------------------------------ choosing the log (CleanerManager)


def _dirty_log(path, updates: int, **cfg) -> UnifiedLog:
    lg = new_log(path, **cfg)
    user_emails(lg, updates=updates)
    lg.roll(NOW)
    return lg


def test_the_filthiest_log_above_the_ratio_is_chosen(tmp_path):
    from kesque.server.drivers.log_cleaner import CleanerManager

    a = _dirty_log(tmp_path / "a-0", 40)
    b = _dirty_log(tmp_path / "b-0", 40)
    plain = _dirty_log(tmp_path / "p-0", 40, cleanup_policy=("delete",))
    m = CleanerManager()
    m.checkpoints[("a", 0)] = 35  # most of a is clean already
    job = m.grab_filthiest({("a", 0): a, ("b", 0): b, ("p", 0): plain}, NOW)
    assert job.tp == ("b", 0) and job.ratio == 1.0 and ("b", 0) in m.in_progress
    job2 = m.grab_filthiest({("a", 0): a, ("b", 0): b}, NOW)  # b is busy; a's ratio is under 0.5
    assert job2 is None
    a.config.min_cleanable_dirty_ratio = 0.01
    assert m.grab_filthiest({("a", 0): a, ("b", 0): b}, NOW).tp == ("a", 0)


def test_max_compaction_lag_cleans_whatever_the_ratio(tmp_path):
    from kesque.server.drivers.log_cleaner import CleanerManager

    lg = _dirty_log(tmp_path / "a-0", 40, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000)
    m = CleanerManager()
    m.checkpoints[("a", 0)] = 35
    assert m.grab_filthiest({("a", 0): lg}, NOW + 1000) is None
    job = m.grab_filthiest({("a", 0): lg}, NOW + 1001)
    assert job is not None and job.needs_now and m.max_compaction_delay_secs > 0


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    lg = _dirty_log(tmp_path / "a-0", 40, min_compaction_lag_ms=1000)
    assert first_uncleanable_offset(lg, NOW + 999) == 0
    assert first_uncleanable_offset(lg, NOW + 1001) == lg.active_segment.base_offset


def test_cleaner_checkpoint_survives_a_restart(tmp_path):
    from kesque.server.drivers.log_cleaner import CleanerManager
    from kesque.storage.log_manager import LogManager

    class Clock:
        def now_ms(self):
            return NOW

    lm = LogManager([str(tmp_path)], Clock(), node_id=1, cluster_id="c")
    lm.prepare_dirs()
    lg = lm.get_or_create_log("a", 0, LogConfig(cleanup_policy=("compact",)), None)
    m = CleanerManager()
    job = m.grab_filthiest(lm.logs, NOW)
    assert job is None  # empty
    m.checkpoints[("a", 0)] = lg.log_end_offset
    m.checkpoints[("gone", 0)] = 7  # a deleted log's entry is not written
    lm.write_checkpoints(m.checkpoint_jobs(lm))
    again = CleanerManager()
    again.load_checkpoints(lm.log_dirs)
    assert again.checkpoints == {("a", 0): 0}
    lm.release_locks()


# ------------------------------------------------------------------ the compiled per-record work

RECORDS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b""])),
        VALUES,
        st.lists(st.tuples(st.just("h"), st.one_of(st.none(), st.binary(max_size=2))), max_size=2),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(200), deadline=None)
@given(
    mapped=RECORDS,
    recs=RECORDS,
    base=st.integers(0, 20),
    start=st.integers(0, 25),
    latest=st.integers(-1, 40),
    memory=st.sampled_from([48, 72, 1 << 12]),
    drop=st.booleans(),
)
def test_compiled_offset_map_matches_the_reference(mapped, recs, base, start, latest, memory, drop):
    """The compiled map (a table of key hashes, no GIL) and the dict reference agree."""
    from kesque.records import records as rr
    from kesque.storage.cleaner import OffsetMap

    if rr._cscan is None:
        pytest.skip("the compiled scan is not built")
    maps = [OffsetMap(memory, compiled=True), OffsetMap(memory, compiled=False)]
    first = build_batch(mapped, timestamp=NOW)[61:]
    assert maps[0].map_batch(first, len(mapped), base, start) == maps[1].map_batch(first, len(mapped), base, start)
    assert len(maps[0]) == len(maps[1])
    payload = build_batch(recs, timestamp=NOW)[61:]
    for m in maps:
        m.latest_offset = latest
    assert maps[0].retain(payload, len(recs), base + 10, drop) == maps[1].retain(payload, len(recs), base + 10, drop)
