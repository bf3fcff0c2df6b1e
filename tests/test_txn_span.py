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
import time
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples, running_broker
from kesque.config.topic import LogConfig
from kesque.records import batch as rb
from kesque.records.records import CONTROL_ABORT, build_batch, iter_records, read_end_txn_marker
from kesque.replication.partition import FETCH_HIGH_WATERMARK, FETCH_TXN_COMMITTED, Partition
from kesque.storage.txn_index import AbortedTxn
from kesque.storage.unified_log import UnifiedLog

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
    def log(self) -> UnifiedLog:
        return self.part.log

    def produce(self, pid: int, n: int, size: int, transactional: bool) -> None:
        """n records from producer ``pid`` (-1: a plain producer), in its open transaction
        (opened here) when ``transactional``."""
        if transactional and pid not in self.open_txn:
            self.txn_count += 1
            self.open_txn[pid] = self.txn_count
        vals = [f"{pid}:{len(self.values) + i}:".encode().ljust(size, b"x") for i in range(n)]
        seq = self.seq.get(pid, 0) if pid >= 0 else -1
        batch = build_batch(
            [(None, v, ()) for v in vals],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=transactional,
            timestamp=NOW,
        )
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


def leader(lg: UnifiedLog) -> Partition:
    part = Partition(lg.topic, lg.partition, uuid.uuid4(), lg, local_id=1)
    part.make_leader([1], [1], LEADER_EPOCH, 0)
    return part


def new_log(path, segment_bytes: int, index_interval: int = 128) -> UnifiedLog:
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    return UnifiedLog(str(path), "t", 0, cfg, now_ms=NOW)


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
            marker = read_end_txn_marker(memoryview(buf)[pos : pos + h.size], h)
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
    st.tuples(st.just("plain"), st.sampled_from([-1, 9]), st.integers(1, 6), st.integers(1, 150)),
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
    """Reopen the log: cleanly; after a crash that lost every ``.txnindex`` file and producer
    snapshot (recovery from offset 0 rebuilds them from the log); after a crash past a
    recovery point in the middle of the log that lost the ``.txnindex`` files of the
    segments from there on but kept the snapshots (recovery must rebuild the index of every
    segment it rescans, not only replay the batches after the newest snapshot); or after
    retention deleted the first half of the segments."""
    lg = w.log
    if how == "clean":
        lg.close()
        lg = UnifiedLog(lg.dir, "t", 0, lg.config, had_clean_shutdown=True, now_ms=NOW)
    elif how in ("rebuilt", "crash past a recovery point"):
        rp = 0 if how == "rebuilt" else lg.segments[len(lg.segments) // 2].base_offset
        for seg in lg.segments:
            seg.close()
            if seg.base_offset >= rp and os.path.exists(seg.txn_index.path):
                os.unlink(seg.txn_index.path)
        if how == "rebuilt":
            for p in glob.glob(os.path.join(lg.dir, "*.snapshot")):
                os.unlink(p)
        lg = UnifiedLog(lg.dir, "t", 0, lg.config, recovery_point=rp, had_clean_shutdown=False, now_ms=NOW)
    elif how == "retention":
        half = lg.segments[len(lg.segments) // 2].base_offset
        lg.maybe_increment_log_start_offset(min(half, lg.high_watermark))
        lg.delete_old_segments(NOW)
        lg.delete_expired_files(NOW, force=True)
        return
    w.part = leader(lg)


FETCH = st.tuples(st.floats(0, 1), st.integers(1, 4000), st.booleans())


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    workloads(),
    st.sampled_from(["live", "clean", "rebuilt", "crash past a recovery point", "retention"]),
    st.lists(FETCH, max_size=8),
    st.integers(60, 3000),
)
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


def test_recovery_rebuilds_the_txnindex_of_rescanned_segments(tmp_path):
    """A crash past a recovery point in the middle of the log lost the ``.txnindex`` files
    from there on; the producer snapshots of later rolls survived. Replaying only the batches
    after the newest snapshot would leave the aborted transactions in between unlisted."""
    w = Workload(leader(new_log(tmp_path, segment_bytes=300)))
    for _ in range(8):
        w.produce(1, 2, 100, transactional=True)
        w.end(1, commit=False)
    assert len(w.log.segments) > 8
    restart(w, "crash past a recovery point")
    assert sum(len(s.txn_index.entries) for s in w.log.segments) == 8
    assert consume_committed(w.part, 0, 1 << 20) == []


# ============================================================================ real clients

SEGMENT_BYTES = 1 << 20  # the smallest segment.bytes: 1,000 records of 1 KB fill a segment
VALUE = 1000


SPAN_BROKER = {"log.flush.interval.messages": "1000000", "log.retention.check.interval.ms": "200"}


@pytest.fixture(scope="module")
def span_broker(tmp_path_factory):

    with running_broker(tmp_path_factory.mktemp("span") / "data", SPAN_BROKER) as b:
        yield b


def _txn_producer(bs: str):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "transactional.id": "span-" + uuid.uuid4().hex[:8], "linger.ms": 5})
    p.init_transactions(15)
    return p


def _values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}-".encode().ljust(VALUE, b".") for i in range(n)]


def _write_span_topic(bs: str) -> tuple[str, list[bytes], list[bytes]]:
    """The issue's aborted 1,500-record transaction (one roll), then a committed and an aborted
    transaction of 2,500 records each (several rolls) interleaved in chunks with each other
    and with a plain producer, then a committed one. Returns (topic, log order of every
    value, the committed values in log order)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "span-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})])[topic].result(10)
    plain = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    t1, t2 = _txn_producer(bs), _txn_producer(bs)
    written, visible = [], []

    def send(p, vals, keep: bool):
        for v in vals:
            p.produce(topic, v, partition=0)
        p.flush(30)
        written.extend(vals)
        if keep:
            visible.extend(vals)

    t1.begin_transaction()
    send(t1, _values("abort1500", 1500), False)
    t1.abort_transaction(30)
    t1.begin_transaction()
    t2.begin_transaction()
    commit, abort = _values("commit2500", 2500), _values("abort2500", 2500)
    for i in range(0, 2500, 250):
        send(t1, commit[i : i + 250], True)
        send(plain, _values(f"plain{i}", 20), True)
        send(t2, abort[i : i + 250], False)
    t2.abort_transaction(30)
    t1.commit_transaction(30)
    t1.begin_transaction()
    send(t1, _values("commit1200", 1200), True)
    t1.commit_transaction(30)
    return topic, written, visible


@pytest.fixture(scope="module")
def span_topic(span_broker):
    return _write_span_topic(span_broker.bootstrap_servers)


def _consume(client: str, bs: str, topic: str, want: int, start: int, isolation: str) -> list[tuple[int, bytes]]:
    """(offset, value) of the records a client reads from ``start``."""
    from clientlib import consume_confluent, consume_kafka_python

    if client == "confluent":
        rows = consume_confluent(bs, topic, {0: want}, {0: start}, idle_timeout=5, **{"isolation.level": isolation})
    else:
        rows = consume_kafka_python(bs, topic, {0: want}, {0: start}, idle_timeout=5, isolation_level=isolation)
    return [(r[0], r[2]) for r in rows[0]]


def test_spanning_transactions_roll_segments(span_broker, span_topic):
    from clientlib import segment_files

    topic, _written, _visible = span_topic
    logs = [f for f in segment_files(span_broker.data_dir, topic, 0) if f.endswith(".log")]
    assert len(logs) >= 9, logs  # ~10 MB in 1 MB segments: every transaction spans rolls


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_both_isolation_levels_across_rolls(span_broker, span_topic, client):
    bs = span_broker.bootstrap_servers
    topic, written, visible = span_topic
    everything = _consume(client, bs, topic, len(written), 0, "read_uncommitted")
    assert [v for _o, v in everything] == written
    committed = _consume(client, bs, topic, len(visible), 0, "read_committed")
    assert len(committed) == len(visible)
    assert [v for _o, v in committed] == visible

    # from inside the interleaved aborted transaction, several rolls before its marker
    start = next(o for o, v in everything if v == _values("abort2500", 301)[300])
    expected = _committed_from(everything, visible, start)
    got = _consume(client, bs, topic, len(expected), start, "read_committed")
    assert [v for _o, v in got] == expected


def _committed_from(rows: list[tuple[int, bytes]], visible: list[bytes], start: int) -> list[bytes]:
    keep = set(visible)
    return [v for o, v in rows if o >= start and v in keep]


def test_spanning_transactions_after_crash_recovery_and_retention(tmp_path):
    """SIGKILL (recovery rescans the segments past the recovery point and rebuilds their
    .txnindex), then DeleteRecords past the first roll and retention deleting the segments
    before it: read_committed still drops every aborted record, for both clients."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from clientlib import segment_files

    with running_broker(tmp_path / "data", SPAN_BROKER) as b:
        bs = b.bootstrap_servers
        topic, written, visible = _write_span_topic(bs)
        everything = _consume("confluent", bs, topic, len(written), 0, "read_uncommitted")
        b.kill()
        b.restart()
        for client in ("confluent", "kafka-python"):
            got = _consume(client, bs, topic, len(visible), 0, "read_committed")
            assert [v for _o, v in got] == visible, client

        first_logs = [f for f in segment_files(b.data_dir, topic, 0) if f.endswith(".log")]
        start = int(os.path.basename(first_logs[2]).split(".")[0])  # two segments go
        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_records([TopicPartition(topic, 0, start)])[TopicPartition(topic, 0, start)].result(10)
        deadline = time.monotonic() + 10
        while first_logs[0] in segment_files(b.data_dir, topic, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first_logs[0] not in segment_files(b.data_dir, topic, 0)
        expected = _committed_from(everything, visible, start)
        for client in ("confluent", "kafka-python"):
            got = _consume(client, bs, topic, len(expected), start, "read_committed")
            assert [v for _o, v in got] == expected, client
