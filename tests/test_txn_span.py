"""Transactions that span segment rolls (issue 11): a read_committed fetch must list every
aborted transaction overlapping what it returns, also when the ABORT marker (and so the
``.txnindex`` entry) lies in a later segment than the fetched bytes. Kafka keeps collecting
from later segments until an entry's last stable offset reaches the fetch's upper bound
(LocalLog.collectAbortedTransactions, TransactionIndex.collectAbortedTxns).

* a model test (hypothesis, in-process, sans-IO): random producers, transactions, aborts and
  segment sizes, fetched through ``Partition.read`` as the Fetch handler does, with random
  offsets and sizes; the records a read_committed consumer keeps (Kafka's client-side
  filtering with the aborted list) are exactly the committed ones. The same after a clean
  restart, after recovery rebuilt the ``.txnindex`` files from the log, and after retention
  deleted the first segments;
* the issue's case and friends against a broker subprocess, read by confluent-kafka and
  kafka-python at both isolation levels.
"""

from __future__ import annotations

import glob
import os
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kesque.config.topic import LogConfig
from kesque.records import batch as rb
from kesque.records.records import CONTROL_ABORT, build_batch, iter_records, read_end_txn_marker
from kesque.replication.partition import FETCH_HIGH_WATERMARK, FETCH_TXN_COMMITTED, Partition
from kesque.storage.log import Log
from kesque.storage.txn_index import AbortedTxn

NOW = 1_700_000_000_000
LEADER_EPOCH = 0


# ============================================================================ in-process model

@dataclass
class Workload:
    """Drives a leader Partition the way the broker does and remembers, per offset, the
    value written and whether a read_committed consumer may see it."""

    part: Partition
    values: dict[int, bytes] = field(default_factory=dict)  # data offset -> value
    owner: dict[int, tuple[int, int]] = field(default_factory=dict)  # data offset -> (pid, txn no)
    committed_txns: set = field(default_factory=set)
    seq: dict[int, int] = field(default_factory=dict)
    open_txn: dict[int, int] = field(default_factory=dict)  # pid -> txn no
    txn_count: int = 0

    @property
    def log(self) -> Log:
        return self.part.log

    def produce(self, pid: int, n: int, size: int, transactional: bool) -> None:
        """n records from producer ``pid`` (-1: a plain producer), in its open transaction
        (opened here) when ``transactional``."""
        if transactional and pid not in self.open_txn:
            self.txn_count += 1
            self.open_txn[pid] = self.txn_count
        vals = [f"{pid}:{len(self.values) + i}:".encode().ljust(size, b"x") for i in range(n)]
        seq = self.seq.get(pid, 0) if pid >= 0 else -1
        batch = build_batch([(None, v, ()) for v in vals], producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                            base_sequence=seq, transactional=transactional, timestamp=NOW)
        info = self.part.append_records_to_leader(memoryview(bytearray(batch)), -1, NOW)
        if pid >= 0:
            self.seq[pid] = seq + n
        for i, v in enumerate(vals):
            self.values[info.first_offset + i] = v
            if transactional:
                self.owner[info.first_offset + i] = (pid, self.open_txn[pid])

    def end(self, pid: int, commit: bool) -> None:
        txn = self.open_txn.pop(pid, None)
        if txn is not None and commit:
            self.committed_txns.add((pid, txn))
        self.log.append_txn_marker(pid, 0, commit, 0, LEADER_EPOCH, NOW)
        self.part.maybe_increment_high_watermark()

    def visible(self, offset: int) -> bool:
        owner = self.owner.get(offset)
        return owner is None or owner in self.committed_txns

    def committed_between(self, start: int, end: int) -> list[tuple[int, bytes]]:
        return [(o, v) for o, v in sorted(self.values.items()) if start <= o < end and self.visible(o)]


def leader(lg: Log) -> Partition:
    part = Partition(lg.topic, lg.partition, uuid.uuid4(), lg, local_id=1)
    part.make_leader([1], [1], LEADER_EPOCH, 0)
    return part


def new_log(path, segment_bytes: int, index_interval: int = 128) -> Log:
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    return Log(str(path), "t", 0, cfg, now_ms=NOW)


def response_bytes(data) -> bytes:
    return b"".join(os.pread(h.fd, size, pos) for h, pos, size in data.regions)


def read_committed_filter(buf: bytes, fetch_offset: int, aborted: list[AbortedTxn]) -> tuple[list, int]:
    """What a read_committed consumer keeps of one fetch response (Kafka's CompletedFetch):
    whole batches only; a producer's batches are dropped from the first offset of one of its
    aborted transactions up to its ABORT marker. Returns (records, next fetch offset)."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    aborting: set[int] = set()
    kept, next_offset = [], fetch_offset
    for pos, h in rb.iter_headers(buf):
        next_offset = h.next_offset
        if h.producer_id >= 0:
            while pending and pending[0].first_offset <= h.last_offset:
                aborting.add(pending.pop(0).producer_id)
        if h.is_control:
            marker = read_end_txn_marker(memoryview(buf)[pos:pos + h.size], h)
            if marker is not None and marker[0] == CONTROL_ABORT:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        kept += [(r.offset, r.value) for r in iter_records(buf, pos, h) if r.offset >= fetch_offset]
    return kept, next_offset


def fetch_committed(part: Partition, offset: int, max_bytes: int, min_one: bool) -> tuple[list, int]:
    """One read_committed fetch as the Fetch handler makes it, filtered as a client would."""
    res = part.read(offset, max_bytes, FETCH_TXN_COMMITTED, min_one)
    buf = response_bytes(res.data)
    for _pos, h in rb.iter_headers(buf):
        assert h.last_offset < res.last_stable_offset, "read_committed fetch returned data past the LSO"
    return read_committed_filter(buf, offset, res.aborted_transactions or [])


def consume_committed(part: Partition, start: int, max_bytes: int) -> list:
    out, offset = [], start
    while offset < part.log.last_stable_offset:
        kept, nxt = fetch_committed(part, offset, max_bytes, min_one=True)
        assert nxt > offset, f"no progress at offset {offset}"
        out += kept
        offset = nxt
    return out


OP = st.one_of(
    st.tuples(st.just("txn"), st.integers(0, 3), st.integers(1, 6), st.integers(1, 150)),
    st.tuples(st.just("plain"), st.integers(-1, -1) | st.just(9), st.integers(1, 6), st.integers(1, 150)),
    st.tuples(st.just("end"), st.integers(0, 3), st.booleans()),
)


@st.composite
def workloads(draw):
    segment_bytes = draw(st.sampled_from([300, 500, 900, 2000, 1 << 20]))
    ops = draw(st.lists(OP, min_size=1, max_size=50))
    close_all = draw(st.booleans())
    return segment_bytes, ops, close_all


def run_workload(path, segment_bytes: int, ops, close_all: bool) -> Workload:
    w = Workload(leader(new_log(path, segment_bytes)))
    for op in ops:
        if op[0] == "txn":
            w.produce(op[1], op[2], op[3], transactional=True)
        elif op[0] == "plain":
            w.produce(op[1], op[2], op[3], transactional=False)
        elif op[1] in w.open_txn:
            w.end(op[1], op[2])
    if close_all:
        for pid in list(w.open_txn):
            w.end(pid, commit=pid % 2 == 0)
    return w


def restart(w: Workload, how: str) -> None:
    """Reopen the log: cleanly, or after a crash with the ``.txnindex`` files and producer
    snapshots gone (recovery rebuilds them from the log; with the snapshots kept it must still
    rebuild the index of every segment it recovers), or after retention deleted the
    first half of the segments."""
    lg = w.log
    if how == "clean":
        lg.close()
        lg = Log(lg.dir, "t", 0, lg.config, had_clean_shutdown=True, now_ms=NOW)
    elif how in ("rebuilt", "rebuilt from snapshots"):
        for seg in lg.segments:
            seg.close()
        lost = ("*.txnindex",) if how == "rebuilt from snapshots" else ("*.txnindex", "*.snapshot")
        for pattern in lost:
            for p in glob.glob(os.path.join(lg.dir, pattern)):
                os.unlink(p)
        lg = Log(lg.dir, "t", 0, lg.config, had_clean_shutdown=False, now_ms=NOW)
    elif how == "retention":
        half = lg.segments[len(lg.segments) // 2].base_offset
        lg.maybe_increment_log_start_offset(min(half, lg.high_watermark))
        lg.delete_old_segments(NOW)
        lg.delete_expired_files(NOW, force=True)
        return
    w.part = leader(lg)


FETCH = st.tuples(st.floats(0, 1), st.integers(1, 4000), st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads(), st.sampled_from(["live", "clean", "rebuilt", "rebuilt from snapshots", "retention"]), st.lists(FETCH, max_size=8),
       st.integers(60, 3000))
def test_read_committed_fetches_match_the_model(tmp_path_factory, workload, after, fetches, consume_size):
    w = run_workload(tmp_path_factory.mktemp("span"), *workload)
    if after != "live":
        restart(w, after)
    lg = w.log
    start, lso = lg.log_start_offset, lg.last_stable_offset
    for where, max_bytes, min_one in fetches:
        offset = start + int(where * (lso - start))
        kept, nxt = fetch_committed(w.part, offset, max_bytes, min_one)
        assert kept == w.committed_between(offset, nxt), f"fetch at {offset} of {max_bytes} bytes"
    assert consume_committed(w.part, start, consume_size) == w.committed_between(start, lso)


# ---------------------------------------------------------------------------- worked examples

def test_aborted_transaction_across_a_roll_is_listed(tmp_path):
    """The issue's shape in miniature: the fetch reads the segment before the roll; the abort
    entry sits in the next segment's .txnindex."""
    w = Workload(leader(new_log(tmp_path, segment_bytes=600)))
    for _ in range(6):
        w.produce(1, 2, 100, transactional=True)
    w.end(1, commit=False)
    lg = w.log
    assert len(lg.segments) > 2
    marker_seg = lg.segments[-1]
    assert [e.producer_id for e in marker_seg.txn_index.entries] == [1]
    assert all(not s.txn_index.entries for s in lg.segments[:-1])
    res = w.part.read(0, 1 << 20, FETCH_TXN_COMMITTED, True)
    assert res.data.upper_bound == lg.segments[1].base_offset  # one segment's worth
    assert res.aborted_transactions == [AbortedTxn(1, 0, lg.log_end_offset - 1, lg.log_end_offset)]
    assert consume_committed(w.part, 0, 1 << 20) == []
    read_uncommitted = w.part.read(0, 1 << 20, FETCH_HIGH_WATERMARK, True)
    assert read_uncommitted.aborted_transactions is None


def test_search_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path):
    """Kafka's completeness rule: later segments are not consulted once an entry's LSO is at or
    past the upper bound, and entries of transactions starting at or after it are not sent."""
    w = Workload(leader(new_log(tmp_path, segment_bytes=400)))
    w.produce(1, 3, 100, transactional=True)
    w.end(1, commit=False)  # entry (1, 0, 3, lso 4) in the first segment
    for _ in range(4):
        w.produce(2, 2, 100, transactional=True)
    w.end(2, commit=False)
    lg = w.log
    first_upper = lg.segments[1].base_offset
    assert lg.collect_aborted_transactions(0, first_upper) == [AbortedTxn(1, 0, 3, 4)]
    assert consume_committed(w.part, 0, 1 << 20) == []
