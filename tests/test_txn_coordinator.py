"""TransactionCoordinatorShard, sans-IO: Kafka's transitions and error codes, writes before
state changes, replay of what was written, markers re-sent for transactions loaded in a
Prepare state, timeouts, transactional id expiration, KIP-360 and KIP-939."""

from __future__ import annotations

import pytest

from kesque.coordinator.runtime import append_and_replay
from kesque.coordinator.transaction.records import TxnState
from kesque.coordinator.transaction.requests import AddPartitionsToTxn, EndTxn, InitProducerId
from kesque.coordinator.transaction.shard import (
    TWO_PHASE_TIMEOUT_MS,
    InitResult,
    TransactionCoordinatorShard,
    TxnConfig,
    TxnMarkers,
)
from kesque.errors import ErrorCode, KafkaError


class Clock:
    def __init__(self):
        self.t = 1_000_000

    def now_ms(self):
        return self.t


class Harness:
    """A shard and what its TransactionCoordinator does with an operation's result: the records
    appended (to ``log``) and replayed, then the markers queued (to ``markers``)."""

    def __init__(self, **cfg):
        self.clock = Clock()
        self.log: list = []
        self.markers: list = []
        self.fail_writes = False
        self.next_pid = 1000
        self.shard = self.new_shard(TxnConfig(**cfg))

    def new_shard(self, config):
        return TransactionCoordinatorShard(
            0, config, lambda txn, commit: self.markers.append((txn, commit)), self.clock, self.allocate
        )

    def allocate(self):
        self.next_pid += 1
        return self.next_pid

    def write(self, records, producer_id=-1, producer_epoch=-1):
        if self.fail_writes:
            raise KafkaError(ErrorCode.not_enough_replicas)
        self.log.extend(records)

    def run(self, result):
        response = append_and_replay(self.shard, self.write, result)
        markers = response if isinstance(response, TxnMarkers) else getattr(response, "markers", None)
        if markers is not None:
            self.markers.append((markers.txn, markers.commit))
        return response

    # the operations, as TransactionCoordinator runs them
    def init(self, txn_id, timeout_ms, **kw) -> InitResult:
        return self.run(self.shard.init_producer_id(InitProducerId(txn_id, timeout_ms, **kw)))

    def add(self, txn_id, producer_id, producer_epoch, partitions, tv=0) -> None:
        self.run(
            self.shard.add_partitions(
                AddPartitionsToTxn(txn_id, producer_id, producer_epoch, frozenset(partitions), tv)
            )
        )

    def end(self, txn_id, producer_id, producer_epoch, commit, tv2=False) -> tuple[int, int]:
        r = self.run(self.shard.end_txn(EndTxn(txn_id, producer_id, producer_epoch, commit, tv2)))
        return r.producer_id, r.producer_epoch

    def abort_timed_out(self) -> list[str]:
        aborted = []
        for txn_id in self.shard.timed_out():
            try:
                self.run(self.shard.abort_timed_out(txn_id))
                aborted.append(txn_id)
            except KafkaError:
                pass  # logged by the coordinator, tried again at the next round
        return aborted

    def expire(self) -> list[str]:
        return list(self.run(self.shard.expire_transactional_ids()))

    def replayed(self) -> TransactionCoordinatorShard:
        """A shard loaded from the log (a new leader's)."""
        s = self.new_shard(self.shard.config)
        for k, v in self.log:
            s.replay(k, v)
        return s

    def complete_markers(self):
        for txn, _commit in self.markers:
            self.run(self.shard.markers_written(txn.transactional_id, txn.producer_id, txn.producer_epoch))
        self.markers.clear()


def snapshot(shard):
    return {
        k: (t.producer_id, t.producer_epoch, t.state, sorted(t.partitions), t.timeout_ms) for k, t in shard.txns.items()
    }


def test_lifecycle_commit_and_replay():
    h = Harness()
    s = h.shard
    r = h.init("t", 60000)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 0)
    pid = r.producer_id
    h.add("t", pid, 0, {("a", 0), ("a", 1)})
    assert s.txns["t"].state == TxnState.ONGOING
    h.add("t", pid, 0, {("a", 0)})  # already there: nothing written
    n = len(h.log)
    h.add("t", pid, 0, {("a", 0)})
    assert len(h.log) == n
    h.end("t", pid, 0, commit=True)
    assert s.txns["t"].state == TxnState.PREPARE_COMMIT
    assert [(t.producer_id, sorted(t.partitions), c) for t, c in h.markers] == [(pid, [("a", 0), ("a", 1)], True)]
    with pytest.raises(KafkaError) as e:
        h.add("t", pid, 0, {("a", 2)})
    assert e.value.code == ErrorCode.concurrent_transactions
    with pytest.raises(KafkaError) as e:
        h.end("t", pid, 0, commit=True)
    assert e.value.code == ErrorCode.concurrent_transactions
    h.complete_markers()
    assert s.txns["t"].state == TxnState.COMPLETE_COMMIT and not s.txns["t"].partitions
    h.end("t", pid, 0, commit=True)  # a retry of the completed commit
    with pytest.raises(KafkaError) as e:
        h.end("t", pid, 0, commit=False)
    assert e.value.code == ErrorCode.invalid_txn_state
    assert snapshot(h.replayed()) == snapshot(s)


def test_error_codes():
    h = Harness(max_timeout_ms=1000)
    s = h.shard
    assert h.init("t", 1001).error == ErrorCode.invalid_transaction_timeout
    assert h.init("", 100).error == ErrorCode.invalid_request
    assert h.init("t", 100, enable_2pc=True).error == ErrorCode.transactional_id_authorization_failed
    pid = h.init("t", 1000).producer_id
    cases = [
        (lambda: h.add("t", pid + 1, 0, {("a", 0)}), ErrorCode.invalid_producer_id_mapping),
        (lambda: h.add("nope", pid, 0, {("a", 0)}), ErrorCode.invalid_producer_id_mapping),
        (lambda: h.add("t", pid, 3, {("a", 0)}), ErrorCode.producer_fenced),
        (lambda: h.end("t", pid, 0, True), ErrorCode.invalid_txn_state),
        (lambda: h.end("t", pid, 1, True), ErrorCode.producer_fenced),
        (lambda: h.end("t", pid + 1, 0, True), ErrorCode.invalid_producer_id_mapping),
    ]
    for fn, code in cases:
        with pytest.raises(KafkaError) as e:
            fn()
        assert e.value.code == code
    assert s.txns["t"].state == TxnState.EMPTY
    assert s.verify_partitions("t", pid, 0, [("a", 0)]) == {("a", 0): ErrorCode.transaction_abortable}
    h.add("t", pid, 0, {("a", 0)})
    assert s.verify_partitions("t", pid, 0, [("a", 0), ("b", 0)]) == {
        ("a", 0): ErrorCode.none,
        ("b", 0): ErrorCode.transaction_abortable,
    }
    assert s.verify_partitions("t", pid, 1, [("a", 0)]) == {("a", 0): ErrorCode.producer_fenced}


def test_failed_write_changes_nothing():
    h = Harness()
    s = h.shard
    pid = h.init("t", 60000).producer_id
    h.add("t", pid, 0, {("a", 0)})
    before = snapshot(s)
    h.fail_writes = True
    for fn in (
        lambda: h.add("t", pid, 0, {("b", 0)}),
        lambda: h.end("t", pid, 0, True),
        lambda: h.init("t", 60000),
    ):
        with pytest.raises(KafkaError):
            fn()
        assert snapshot(s) == before
    assert not h.markers


def test_init_on_ongoing_fences_and_aborts():
    h = Harness()
    s = h.shard
    pid = h.init("t", 60000).producer_id
    h.add("t", pid, 0, {("a", 0)})
    r = h.init("t", 60000)
    assert r.error == ErrorCode.concurrent_transactions
    txn = s.txns["t"]
    assert (txn.state, txn.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert [(m.producer_epoch, c) for m, c in h.markers] == [(1, False)]  # abort markers with the bumped epoch
    assert h.init("t", 60000).error == ErrorCode.concurrent_transactions  # markers still pending
    h.complete_markers()
    r = h.init("t", 60000)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, 2)
    with pytest.raises(KafkaError) as e:
        h.end("t", pid, 0, True)
    assert e.value.code == ErrorCode.producer_fenced


def test_kip360_epoch_bump_and_retry():
    h = Harness()
    pid = h.init("t", 60000).producer_id
    r = h.init("t", 60000, producer_id=pid, producer_epoch=0)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 1)
    # the response was lost: the retry with the old epoch gets the current epoch back
    r = h.init("t", 60000, producer_id=pid, producer_epoch=0)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 1)
    assert h.init("t", 60000, producer_id=pid + 7, producer_epoch=1).error == ErrorCode.producer_fenced


def test_epoch_exhaustion_rotates_the_producer_id():
    h = Harness()
    s = h.shard
    pid = h.init("t", 60000).producer_id
    s.txns["t"].producer_epoch = 32766
    r = h.init("t", 60000)
    assert r.producer_id != pid and r.producer_epoch == 0
    assert s.txns["t"].previous_producer_id == pid


def test_timeout_aborts_with_bumped_epoch_but_not_two_phase():
    h = Harness(two_phase_enabled=True)
    s = h.shard
    pid = h.init("t", 1000).producer_id
    h.add("t", pid, 0, {("a", 0)})
    pid2 = h.init("t2", 1000, enable_2pc=True).producer_id
    h.add("t2", pid2, 0, {("a", 0)})
    assert s.txns["t2"].timeout_ms == TWO_PHASE_TIMEOUT_MS
    h.clock.t += 999
    assert h.abort_timed_out() == []
    h.clock.t += 10_000_000
    assert h.abort_timed_out() == ["t"]
    assert (s.txns["t"].state, s.txns["t"].producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert s.txns["t2"].state == TxnState.ONGOING


def test_keep_prepared_transaction():
    h = Harness(two_phase_enabled=True)
    s = h.shard
    pid = h.init("t", 1000, enable_2pc=True).producer_id
    h.add("t", pid, 0, {("a", 0)})
    r = h.init("t", 1000, enable_2pc=True, keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (
        ErrorCode.none,
        pid,
        1,
        pid,
        0,
    )
    r = h.init("t", 1000, enable_2pc=True, keep_prepared_txn=True)  # a crash loop
    assert (r.producer_epoch, r.ongoing_producer_epoch) == (2, 0)
    # the coordinator restarts between recoveries: the kept epoch comes back from the log
    h.shard = s = h.replayed()
    r = h.init("t", 1000, enable_2pc=True, keep_prepared_txn=True)
    assert (r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (3, pid, 0)
    assert s.txns["t"].state == TxnState.ONGOING and s.txns["t"].partitions == {("a", 0)}
    with pytest.raises(KafkaError) as e:
        h.end("t", pid, 0, True)
    assert e.value.code == ErrorCode.producer_fenced
    h.end("t", pid, 3, True)
    assert [(t.producer_epoch, c) for t, c in h.markers] == [(3, True)]
    # with nothing open there is nothing to keep: a plain epoch bump, no ongoing transaction
    h.complete_markers()
    r = h.init("t", 1000, enable_2pc=True, keep_prepared_txn=True)
    assert (r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (4, -1, -1)
    assert h.replayed().txns["t"].ongoing_pid_epoch == (-1, -1)


def test_loaded_prepare_state_resends_markers():
    h = Harness()
    pid = h.init("t", 60000).producer_id
    h.add("t", pid, 0, {("a", 0), ("b", 1)})
    h.end("t", pid, 0, commit=False)
    h.markers.clear()  # the broker dies before any marker is written
    s2 = h.replayed()
    h.shard = s2
    s2.on_loaded()
    assert [(sorted(t.partitions), c) for t, c in h.markers] == [([("a", 0), ("b", 1)], False)]
    with pytest.raises(KafkaError) as e:
        h.add("t", pid, 0, {("a", 0)})
    assert e.value.code == ErrorCode.concurrent_transactions
    h.complete_markers()
    assert s2.txns["t"].state == TxnState.COMPLETE_ABORT


def test_transactional_id_expiration():
    h = Harness(id_expiration_ms=1000)
    s = h.shard
    h.init("idle", 60000)
    pid = h.init("busy", 60000).producer_id
    h.add("busy", pid, 0, {("a", 0)})
    h.clock.t += 1000
    assert h.expire() == ["idle"]
    assert "idle" not in s.txns and "busy" in s.txns  # an ongoing transaction never expires
    assert h.log[-1][1] is None  # a tombstone
    assert "idle" not in h.replayed().txns


def test_an_operation_changes_nothing_until_its_record_is_replayed():
    """Kafka's CoordinatorRuntime shape: an operation returns its record and its response; the
    state changes when the record is replayed, the live shard's with what no record holds (the
    pending Complete state), a loaded one's from the record alone."""
    h = Harness()
    pid = h.init("t", 60000).producer_id
    h.add("t", pid, 0, {("a", 0)})
    before = snapshot(h.shard)
    result = h.shard.end_txn(EndTxn("t", pid, 0, committed=True))
    assert snapshot(h.shard) == before and h.shard.txns["t"].pending is None
    assert len(result.records) == 1 and result.response.markers.commit
    loaded = h.replayed()
    loaded.replay(*result.records[0])  # the bytes alone, as a new leader reads them
    assert (loaded.txns["t"].state, loaded.txns["t"].pending) == (TxnState.PREPARE_COMMIT, None)
    h.run(result)
    assert (h.shard.txns["t"].state, h.shard.txns["t"].pending) == (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    assert snapshot(loaded) == snapshot(h.shard)
