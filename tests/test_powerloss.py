"""Storage against power loss (issue 11): a LogManager and its log driven in-process through
appends (plain, idempotent, transactional), markers, rolls, flushes (``flush.messages`` and
explicit), checkpoints, new leader epochs, DeleteRecords with retention and clean restarts,
with the power cut at random points by :mod:`powerloss` (everything not fsynced is lost,
directory entries included). After each cut the log is reopened as a restarted broker
would, and checked:

* every offset the log reported flushed (its recovery point: with ``flush.messages=1`` every
  acknowledged append) is present and byte-identical, and the log holds nothing that was not
  written: it is a prefix of what was appended;
* the recovery-point checkpoint never points past the durable log, the log start offset
  never falls behind its checkpoint;
* the indexes point at batch starts, the leader epoch cache matches the batches' epochs,
  the producer state and the last stable offset match the batches, the ``.txnindex``
  files list exactly the aborted transactions, and a read_committed consumer gets exactly
  the committed records.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.clock import ManualClock
from kesque.config.topic import LogConfig
from kesque.records import batch as rb
from kesque.records.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, iter_records, read_end_txn_marker
from kesque.replication.partition import Partition
from kesque.storage import checkpoint as ck
from kesque.storage.log_manager import LogManager
from kesque.storage.unified_log import UnifiedLog
from powerloss import PowerLossFS
from test_txn_span import fetch_committed

TOPIC = "p"
TP = (TOPIC, 0)
TOPIC_ID = uuid.UUID(int=0x1234)
LONG_MAX = (1 << 63) - 1


# ============================================================================ the layer itself


def test_layer_keeps_only_what_was_synced(tmp_path, monkeypatch):
    fs = PowerLossFS(tmp_path).install(monkeypatch)
    (tmp_path / "old").write_bytes(b"old")
    d = os.open(tmp_path, os.O_RDONLY)
    os.fsync(d)  # "old" is named durably, with no durable content
    with open(tmp_path / "synced", "wb") as f:
        f.write(b"abc")
        f.flush()
        os.fsync(f.fileno())
        f.write(b"def")  # after the fsync: lost
    ck.atomic_write(str(tmp_path / "ck"), "checkpoint")  # tmp, fsync, rename, fsync dir
    os.fsync(d)
    (tmp_path / "unsynced-name").write_bytes(b"x")  # the directory is not synced again
    os.unlink(tmp_path / "ck")  # an unlink not synced either: it comes back
    os.replace(tmp_path / "synced", tmp_path / "moved")  # an unsynced rename is undone
    os.close(d)
    tree = fs.lose_power()
    assert tree == {"old": b"", "synced": b"abc", "ck": b"checkpoint"}
    assert sorted(os.listdir(tmp_path)) == ["ck", "old", "synced"]


def _write_synced(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def test_layer_retires_reused_inodes(tmp_path, monkeypatch):
    """An unlinked file whose removal was not synced comes back with its own content, even
    when a later file got its inode number."""
    fs = PowerLossFS(tmp_path).install(monkeypatch)
    d = os.open(tmp_path, os.O_RDONLY)
    for i in range(10):  # ext4 and tmpfs hand the freed inode number to the next file
        _write_synced(tmp_path / f"a{i}", b"a")
        os.fsync(d)
        os.unlink(tmp_path / f"a{i}")
        _write_synced(tmp_path / f"b{i}", b"b")
        os.unlink(tmp_path / f"b{i}")
    os.close(d)
    assert fs.lose_power() == {"a9": b"a"}  # with its own content even where "b9" took its inode


def test_layer_mmap_flush_is_durable(tmp_path, monkeypatch):
    import mmap

    fs = PowerLossFS(tmp_path).install(monkeypatch)
    ck.atomic_write(str(tmp_path / "idx"), "\0" * 8)
    fd = os.open(tmp_path / "idx", os.O_RDWR)
    m = mmap.mmap(fd, 8)
    os.close(fd)
    m[:4] = b"abcd"
    m.flush()
    m[4:] = b"efgh"  # not flushed
    m.close()
    assert fs.lose_power() == {"idx": b"abcd\0\0\0\0"}


# ============================================================================ the storage model


@dataclass
class Model:
    """What was written and what the storage claimed, across power cuts."""

    batches: dict[int, bytes] = field(default_factory=dict)  # base offset -> bytes as stored
    flushed: int = 0  # highest offset UnifiedLog.flush reported durable (exclusive)
    log_start_checkpointed: int = 0
    log_start_max: int = 0  # highest log start set before the last cut (epochs below it may be gone)
    epoch: int = 0
    pid_base: int = 1000
    seqs: dict[int, int] = field(default_factory=dict)
    open_txns: set = field(default_factory=set)

    def forget_from(self, offset: int) -> None:
        self.batches = {o: b for o, b in self.batches.items() if o < offset}


class Node:
    """One broker's storage: a LogManager with one partition, driven as the server does."""

    def __init__(self, root: str, clock: ManualClock, cfg: LogConfig):
        self.clock = clock
        self.cfg = cfg
        self.lm = LogManager([root], clock, node_id=1, cluster_id="powerloss")
        self.lm.prepare_dirs()
        self.lm.load_logs(lambda _topic: (cfg, TOPIC_ID))
        self.log: UnifiedLog = self.lm.get_or_create_log(TOPIC, 0, cfg, TOPIC_ID)
        self.log.update_high_watermark(self.log.log_end_offset)

    def crash(self) -> None:
        """The process dies with the machine: descriptors go (its log-dir locks with them),
        nothing is flushed."""
        for seg in self.log.segments + [s for _due, s in self.log.local_log.pending_deletes]:
            seg.close()
        self.lm.release_locks()


def _stored(lg: UnifiedLog, first: int, last: int) -> dict[int, bytes]:
    return {h.base_offset: bytes(data) for h, data in lg.read_batches(first, last + 1)}


def append(node: Node, m: Model, kind: str, slot: int, n: int, size: int) -> None:
    lg = node.log
    now = node.clock.now_ms()
    pid = m.pid_base + slot if kind != "plain" else -1
    txn = kind == "txn"
    if txn:
        m.open_txns.add(pid)
    elif pid in m.open_txns:
        return  # a transactional producer does not write outside its transaction
    seq = m.seqs.get(pid, 0) if pid >= 0 else -1
    b = build_batch(
        [(None, b"v" * size, ())] * n,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=txn,
        timestamp=now,
    )
    info = lg.append_as_leader(memoryview(bytearray(b)), m.epoch, now)
    if pid >= 0:
        m.seqs[pid] = seq + n
    lg.update_high_watermark(lg.log_end_offset)
    m.batches.update(_stored(lg, info.first_offset, info.last_offset))


def end_txn(node: Node, m: Model, slot: int, commit: bool) -> None:
    pid = m.pid_base + slot
    if pid not in m.open_txns:
        return
    m.open_txns.discard(pid)
    lg = node.log
    info = lg.append_txn_marker(pid, 0, commit, 0, m.epoch, node.clock.now_ms())
    lg.update_high_watermark(lg.log_end_offset)
    m.batches.update(_stored(lg, info.first_offset, info.last_offset))


def delete_records(node: Node, m: Model, frac: float) -> None:
    lg = node.log
    target = lg.log_start_offset + int(frac * (lg.high_watermark - lg.log_start_offset))
    batch_start = max((o for o in m.batches if o <= target), default=lg.log_start_offset)
    lg.maybe_increment_log_start_offset(max(batch_start, lg.log_start_offset))
    m.log_start_max = max(m.log_start_max, lg.log_start_offset)
    lg.delete_old_segments(node.clock.now_ms())
    node.clock.advance(lg.config.file_delete_delay_ms + 1)
    lg.delete_expired_files(node.clock.now_ms())


def checkpoint(node: Node, m: Model) -> None:
    node.lm.checkpoint_high_watermarks()
    node.lm.checkpoint_recovery_points()
    node.lm.checkpoint_log_start_offsets()
    m.log_start_checkpointed = max(m.log_start_checkpointed, node.log.log_start_offset)


def clean_restart(node: Node, m: Model, root: str) -> Node:
    node.lm.shutdown(broker_epoch=1)
    node.lm.release_locks()  # as the server does once its log manager has shut down
    m.log_start_checkpointed = max(m.log_start_checkpointed, node.log.log_start_offset)
    return Node(root, node.clock, node.cfg)


def lose_power(node: Node, m: Model, fs: PowerLossFS, root: str) -> Node:
    node.crash()
    fs.lose_power()
    rp_ck = ck.OffsetCheckpointFile(os.path.join(root, ck.RECOVERY_POINT_CHECKPOINT)).read().get(TP, 0)
    node = Node(root, node.clock, node.cfg)
    assert not node.lm.had_clean_shutdown[root], "the clean shutdown marker consumed at the last start came back"
    lg = node.log
    leo, start = lg.log_end_offset, lg.log_start_offset
    assert leo >= m.flushed or start >= m.flushed, (
        f"offsets below the reported recovery point {m.flushed} lost: log end {leo} after the power cut"
    )
    assert rp_ck <= leo or rp_ck <= start, f"recovery-point checkpoint {rp_ck} past the durable log end {leo}"
    assert start >= m.log_start_checkpointed, f"log start {start} behind its checkpoint {m.log_start_checkpointed}"
    check_consistent(lg, m)
    m.forget_from(leo)
    m.flushed = leo
    # a new producer generation (the old ones' state may be gone); the coordinator aborts
    # transactions left open by the cut, as it would on their timeout
    m.pid_base += 100
    m.seqs.clear()
    m.open_txns.clear()
    for _first, pid in sorted(lg.producer_state.ongoing_txns.items()):
        epoch = lg.producer_state.producers[pid].epoch
        info = lg.append_txn_marker(pid, epoch, False, 0, m.epoch, node.clock.now_ms())
        lg.update_high_watermark(lg.log_end_offset)
        m.batches.update(_stored(lg, info.first_offset, info.last_offset))
    check_read_committed(lg)
    return node


def check_read_committed(lg: UnifiedLog) -> None:
    """A read_committed consumer from the log start gets exactly the records of committed
    transactions and of plain producers, below the LSO: what a lost or stale ``.txnindex``
    or producer state would break."""
    outcome: dict[int, bool] = {}  # data batch base offset -> committed
    pending: dict[int, list[int]] = {}
    for h, data in lg.read_batches(lg.segments[0].base_offset):
        if h.is_control:
            marker = read_end_txn_marker(data, h)
            for base in pending.pop(h.producer_id, []):
                outcome[base] = marker is not None and marker[0] == CONTROL_COMMIT
        elif h.is_transactional:
            pending.setdefault(h.producer_id, []).append(h.base_offset)
        else:
            outcome[h.base_offset] = True
    start, lso = lg.log_start_offset, lg.last_stable_offset
    expected = [
        (r.offset, r.value)
        for h, data in lg.read_batches(start, lso)
        if outcome.get(h.base_offset)
        for r in iter_records(data, 0, h)
        if r.offset >= start
    ]
    part = Partition(TOPIC, 0, TOPIC_ID, lg, local_id=1)
    part.repl.leader_id, part.repl.leader_epoch = 1, lg.latest_epoch()  # leads, HW left as recovered
    got, offset = [], start
    while offset < lso:
        kept, nxt = fetch_committed(part, offset, 1 << 20, True)
        if nxt == offset:  # only a gap of lost offsets before the log end
            break
        got += kept
        offset = nxt
    assert got == expected, "read_committed after the power cut"


def check_consistent(lg: UnifiedLog, m: Model) -> None:
    base = lg.segments[0].base_offset
    stored = list(lg.read_batches(base))
    expected_next = base
    for h, data in stored:
        assert h.base_offset == expected_next, f"gap or overlap at {h.base_offset} (expected {expected_next})"
        assert m.batches.get(h.base_offset) == bytes(data), f"batch at {h.base_offset} is not what was written"
        assert rb.is_crc_valid(data, 0, h.size)
        expected_next = h.next_offset
    # an empty last segment whose directory entry outlived the cut keeps its base as the log
    # end (as in Kafka): a gap of lost, never-flushed offsets, not a hole in durable data
    active = lg.active_segment
    assert lg.log_end_offset == expected_next or (active.size == 0 and lg.log_end_offset == active.base_offset)
    check_indexes(lg)
    check_epochs(lg, stored, max(lg.log_start_offset, m.log_start_max))
    check_transactions(lg, stored)


def check_indexes(lg: UnifiedLog) -> None:
    for seg in lg.segments:
        for off, pos in zip(seg.offset_index.offsets, seg.offset_index.positions):
            h = rb.read_header(seg.pread(pos, rb.HEADER_SIZE))
            assert h.last_offset == off, f"{seg.log_path}: index entry ({off}, {pos}) is not a batch start"
        end = seg.read_end_offset()
        assert all(seg.base_offset <= o < max(end, seg.base_offset + 1) for o in seg.time_index.offsets)
        for h in (hh for _p, hh in seg.iter_headers()):
            found = seg.find_batch(h.base_offset)
            assert found is not None and found[1].base_offset == h.base_offset


def check_epochs(lg: UnifiedLog, stored, start: int) -> None:
    """The cache agrees with every batch from ``start`` on (below a log start that was once set
    the cache may have been truncated already: Kafka's truncateFromStart)."""
    cache = lg.leader_epoch_cache
    starts = [s for _e, s in cache.entries]
    assert starts == sorted(starts) and all(s < lg.log_end_offset for s in starts)
    for h, _data in stored:
        if h.base_offset >= start:
            assert cache.epoch_for_offset(h.base_offset) == h.partition_leader_epoch, (
                f"epoch cache {cache.entries} disagrees with batch {h.base_offset} (epoch {h.partition_leader_epoch})"
            )


def check_transactions(lg: UnifiedLog, stored) -> None:
    """Producer state, LSO and aborted-transaction index against a replay of the batches from
    the log start (the state of producers below it may come from a snapshot, or be gone)."""
    start = lg.log_start_offset
    open_at: dict[int, int] = {}
    last_seq: dict[int, int] = {}
    aborted = set()
    for h, data in stored:
        if h.producer_id < 0 or h.base_offset < start:
            continue
        if h.is_control:
            marker = read_end_txn_marker(data, h)
            first = open_at.pop(h.producer_id, None)
            if marker and marker[0] == CONTROL_ABORT and first is not None:
                aborted.add((h.producer_id, first, h.base_offset))
            continue
        last_seq[h.producer_id] = h.last_sequence
        if h.is_transactional:
            open_at.setdefault(h.producer_id, h.base_offset)
    ps = lg.producer_state
    for first, pid in ps.ongoing_txns.items():  # those starting below the log start come from a snapshot
        assert first < start or open_at.get(pid) == first, f"open transaction ({pid}, {first}) not in the log"
    for pid, first in open_at.items():
        assert ps.ongoing_txn_of(pid) in range(first + 1), f"open transaction of {pid} at {first} lost"
    for pid, seq in last_seq.items():
        assert pid in ps.producers and ps.producers[pid].last_seq == seq, f"producer {pid}: last sequence {seq} lost"
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == max(min(ps.ongoing_txns, default=lg.log_end_offset), start)
    assert lg.last_stable_offset <= min(open_at.values(), default=lg.log_end_offset)
    indexed = {(e.producer_id, e.first_offset, e.last_offset) for seg in lg.segments for e in seg.txn_index.entries}
    assert {e for e in indexed if e[1] >= start} == aborted


OPS = st.one_of(
    st.tuples(
        st.just("append"),
        st.sampled_from(["plain", "idem", "txn", "txn"]),
        st.integers(0, 2),
        st.integers(1, 4),
        st.integers(1, 120),
    ),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.sampled_from(["flush", "checkpoint", "roll", "epoch", "restart", "cut"])),
    st.tuples(st.just("delete"), st.floats(0, 1)),
)


def run(disk: str, fs: PowerLossFS, cfg: LogConfig, ops, m: Model) -> Model:
    """Apply ``ops`` to a broker whose log dir the first start creates on ``disk``, then cut."""
    root = os.path.join(disk, "data")
    clock = ManualClock()
    node = Node(root, clock, cfg)
    for op in ops:
        clock.advance(7)
        if op[0] == "append":
            append(node, m, *op[1:])
        elif op[0] == "end":
            end_txn(node, m, *op[1:])
        elif op[0] == "flush":
            node.log.flush()
        elif op[0] == "checkpoint":
            checkpoint(node, m)
        elif op[0] == "roll":
            node.log.roll(clock.now_ms())
        elif op[0] == "epoch":
            m.epoch += 1
        elif op[0] == "delete":
            delete_records(node, m, op[1])
        elif op[0] == "restart":
            node = clean_restart(node, m, root)
        else:
            node = lose_power(node, m, fs, root)
    lose_power(node, m, fs, root).crash()
    return m


def record_flushes(mp, m: Model) -> None:
    """Spy on UnifiedLog.flush: what it reports durable is everything below the offset it flushed to."""
    real = UnifiedLog.flush

    def flush(lg: UnifiedLog, up_to: int | None = None) -> None:
        target = lg.log_end_offset if up_to is None else up_to
        real(lg, up_to)
        m.flushed = max(m.flushed, target)

    mp.setattr(UnifiedLog, "flush", flush)


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([1, 3, LONG_MAX]), st.sampled_from([400, 1000, 4000]), st.lists(OPS, max_size=40))
def test_power_cut_at_random_points(tmp_path_factory, flush_messages, segment_bytes, ops):
    root = str(tmp_path_factory.mktemp("power"))
    with pytest.MonkeyPatch.context() as mp:
        fs = PowerLossFS(root).install(mp)
        m = Model()
        record_flushes(mp, m)
        cfg = LogConfig(segment_bytes=segment_bytes, flush_messages=flush_messages, index_interval_bytes=128)
        run(root, fs, cfg, ops, m)


def _plain(n: int, size: int = 100) -> list:
    return [("append", "plain", 0, 1, size)] * n


SCENARIOS = {  # name: (flush.messages, segment.bytes, ops); the cut comes after the ops
    "flush per message across rolls": (1, 400, _plain(8)),
    "a new partition's first flushed message": (1, 4000, _plain(1)),
    "retention deleted whole segments": (LONG_MAX, 400, _plain(8) + [("flush",), ("delete", 0.75), ("checkpoint",)]),
    "DeleteRecords inside the first segment": (
        LONG_MAX,
        4000,
        _plain(4) + [("flush",), ("delete", 0.5), ("checkpoint",)],
    ),
    "DeleteRecords past the durable end": (LONG_MAX, 4000, _plain(4) + [("delete", 1.0), ("checkpoint",)]),
    "writes after a clean restart": (LONG_MAX, 4000, _plain(2) + [("restart",)] + _plain(2)),
    "leader epochs below the recovery point": (
        LONG_MAX,
        400,
        _plain(2) + [("epoch",)] + _plain(3) + [("epoch",)] + _plain(4) + [("flush",), ("checkpoint",)],
    ),
    "aborted transaction below the recovery point": (
        LONG_MAX,
        400,
        [("append", "txn", 0, 2, 50), ("end", 0, False), ("roll",), ("restart",)]
        + _plain(3)
        + [("flush",), ("checkpoint",)],
    ),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_power_cut_scenario(tmp_path, monkeypatch, name):
    """Worked cases, one per ordering rule (each fails when that fsync is removed)."""
    flush_messages, segment_bytes, ops = SCENARIOS[name]
    fs = PowerLossFS(tmp_path).install(monkeypatch)
    m = Model()
    record_flushes(monkeypatch, m)
    cfg = LogConfig(segment_bytes=segment_bytes, flush_messages=flush_messages, index_interval_bytes=128)
    run(str(tmp_path), fs, cfg, ops, m)
    assert fs.cuts == 1
