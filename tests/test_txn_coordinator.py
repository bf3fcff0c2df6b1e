"""TransactionCoordinatorShard, sans-IO: Kafka's transitions and error codes, writes before
state changes, replay of what was written, markers re-sent for transactions loaded in a
Prepare state, timeouts, transactional id expiration, KIP-360 and KIP-939."""

from __future__ import annotations

import pytest

from kesque.coordinator.transaction.records import TxnState
from kesque.coordinator.transaction.shard import TWO_PHASE_TIMEOUT_MS, TransactionCoordinatorShard, TxnConfig
from kesque.errors import ErrorCode, KafkaError


class Clock:
    def __init__(self):
        self.t = 1_000_000

    def now_ms(self):
        return self.t


class Harness:
    def __init__(self, **cfg):
        self.clock = Clock()
        self.log: list = []
        self.markers: list = []
        self.fail_writes = False
        self.next_pid = 1000
        self.shard = self.new_shard(TxnConfig(**cfg))

    def new_shard(self, config):
        return TransactionCoordinatorShard(
            0, config, self.write, lambda txn, commit: self.markers.append((txn, commit)), self.clock, self.allocate
        )

    def allocate(self):
        self.next_pid += 1
        return self.next_pid

    def write(self, records):
        if self.fail_writes:
            raise KafkaError(ErrorCode.not_enough_replicas)
        self.log.extend(records)

    def replayed(self) -> TransactionCoordinatorShard:
        s = self.new_shard(self.shard.config)
        for k, v in self.log:
            s.replay(k, v)
        return s

    def complete_markers(self):
        for txn, _commit in self.markers:
            self.shard.markers_written(txn.transactional_id, txn.producer_id, txn.producer_epoch)
        self.markers.clear()


def snapshot(shard):
    return {
        k: (t.producer_id, t.producer_epoch, t.state, sorted(t.partitions), t.timeout_ms) for k, t in shard.txns.items()
    }


def test_lifecycle_commit_and_replay():
    h = Harness()
    s = h.shard
    r = s.init_producer_id("t", 60000)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 0)
    pid = r.producer_id
    s.add_partitions("t", pid, 0, {("a", 0), ("a", 1)})
    assert s.txns["t"].state == TxnState.ONGOING
    s.add_partitions("t", pid, 0, {("a", 0)})  # already there: nothing written
    n = len(h.log)
    s.add_partitions("t", pid, 0, {("a", 0)})
    assert len(h.log) == n
    s.end_txn("t", pid, 0, commit=True)
    assert s.txns["t"].state == TxnState.PREPARE_COMMIT
    assert [(t.producer_id, sorted(t.partitions), c) for t, c in h.markers] == [(pid, [("a", 0), ("a", 1)], True)]
    with pytest.raises(KafkaError) as e:
        s.add_partitions("t", pid, 0, {("a", 2)})
    assert e.value.code == ErrorCode.concurrent_transactions
    with pytest.raises(KafkaError) as e:
        s.end_txn("t", pid, 0, commit=True)
    assert e.value.code == ErrorCode.concurrent_transactions
    h.complete_markers()
    assert s.txns["t"].state == TxnState.COMPLETE_COMMIT and not s.txns["t"].partitions
    s.end_txn("t", pid, 0, commit=True)  # a retry of the completed commit
    with pytest.raises(KafkaError) as e:
        s.end_txn("t", pid, 0, commit=False)
    assert e.value.code == ErrorCode.invalid_txn_state
    assert snapshot(h.replayed()) == snapshot(s)


def test_error_codes():
    h = Harness(max_timeout_ms=1000)
    s = h.shard
    assert s.init_producer_id("t", 1001).error == ErrorCode.invalid_transaction_timeout
    assert s.init_producer_id("", 100).error == ErrorCode.invalid_request
    assert s.init_producer_id("t", 100, enable_2pc=True).error == ErrorCode.transactional_id_authorization_failed
    pid = s.init_producer_id("t", 1000).producer_id
    cases = [
        (lambda: s.add_partitions("t", pid + 1, 0, {("a", 0)}), ErrorCode.invalid_producer_id_mapping),
        (lambda: s.add_partitions("nope", pid, 0, {("a", 0)}), ErrorCode.invalid_producer_id_mapping),
        (lambda: s.add_partitions("t", pid, 3, {("a", 0)}), ErrorCode.producer_fenced),
        (lambda: s.end_txn("t", pid, 0, True), ErrorCode.invalid_txn_state),
        (lambda: s.end_txn("t", pid, 1, True), ErrorCode.producer_fenced),
        (lambda: s.end_txn("t", pid + 1, 0, True), ErrorCode.invalid_producer_id_mapping),
    ]
    for fn, code in cases:
        with pytest.raises(KafkaError) as e:
            fn()
        assert e.value.code == code
    assert s.txns["t"].state == TxnState.EMPTY
    assert s.verify_partitions("t", pid, 0, [("a", 0)]) == {("a", 0): ErrorCode.transaction_abortable}
    s.add_partitions("t", pid, 0, {("a", 0)})
    assert s.verify_partitions("t", pid, 0, [("a", 0), ("b", 0)]) == {
        ("a", 0): ErrorCode.none,
        ("b", 0): ErrorCode.transaction_abortable,
    }
    assert s.verify_partitions("t", pid, 1, [("a", 0)]) == {("a", 0): ErrorCode.producer_fenced}


def test_failed_write_changes_nothing():
    h = Harness()
    s = h.shard
    pid = s.init_producer_id("t", 60000).producer_id
    s.add_partitions("t", pid, 0, {("a", 0)})
    before = snapshot(s)
    h.fail_writes = True
    for fn in (
        lambda: s.add_partitions("t", pid, 0, {("b", 0)}),
        lambda: s.end_txn("t", pid, 0, True),
        lambda: s.init_producer_id("t", 60000),
    ):
        with pytest.raises(KafkaError):
            fn()
        assert snapshot(s) == before
    assert not h.markers


def test_init_on_ongoing_fences_and_aborts():
    h = Harness()
    s = h.shard
    pid = s.init_producer_id("t", 60000).producer_id
    s.add_partitions("t", pid, 0, {("a", 0)})
    r = s.init_producer_id("t", 60000)
    assert r.error == ErrorCode.concurrent_transactions
    txn = s.txns["t"]
    assert (txn.state, txn.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert [(m.producer_epoch, c) for m, c in h.markers] == [(1, False)]  # abort markers with the bumped epoch
    assert s.init_producer_id("t", 60000).error == ErrorCode.concurrent_transactions  # markers still pending
    h.complete_markers()
    r = s.init_producer_id("t", 60000)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, 2)
    with pytest.raises(KafkaError) as e:
        s.end_txn("t", pid, 0, True)
    assert e.value.code == ErrorCode.producer_fenced


def test_kip360_epoch_bump_and_retry():
    h = Harness()
    s = h.shard
    pid = s.init_producer_id("t", 60000).producer_id
    r = s.init_producer_id("t", 60000, producer_id=pid, producer_epoch=0)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 1)
    # the response was lost: the retry with the old epoch gets the current epoch back
    r = s.init_producer_id("t", 60000, producer_id=pid, producer_epoch=0)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 1)
    assert s.init_producer_id("t", 60000, producer_id=pid + 7, producer_epoch=1).error == ErrorCode.producer_fenced


def test_epoch_exhaustion_rotates_the_producer_id():
    h = Harness()
    s = h.shard
    pid = s.init_producer_id("t", 60000).producer_id
    s.txns["t"].producer_epoch = 32766
    r = s.init_producer_id("t", 60000)
    assert r.producer_id != pid and r.producer_epoch == 0
    assert s.txns["t"].previous_producer_id == pid


def test_timeout_aborts_with_bumped_epoch_but_not_two_phase():
    h = Harness(two_phase_enabled=True)
    s = h.shard
    pid = s.init_producer_id("t", 1000).producer_id
    s.add_partitions("t", pid, 0, {("a", 0)})
    pid2 = s.init_producer_id("t2", 1000, enable_2pc=True).producer_id
    s.add_partitions("t2", pid2, 0, {("a", 0)})
    assert s.txns["t2"].timeout_ms == TWO_PHASE_TIMEOUT_MS
    h.clock.t += 999
    assert s.abort_timed_out() == []
    h.clock.t += 10_000_000
    assert s.abort_timed_out() == ["t"]
    assert (s.txns["t"].state, s.txns["t"].producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert s.txns["t2"].state == TxnState.ONGOING


def test_keep_prepared_transaction():
    h = Harness(two_phase_enabled=True)
    s = h.shard
    pid = s.init_producer_id("t", 1000, enable_2pc=True).producer_id
    s.add_partitions("t", pid, 0, {("a", 0)})
    r = s.init_producer_id("t", 1000, enable_2pc=True, keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (
        ErrorCode.none,
        pid,
        1,
        pid,
        0,
    )
    r = s.init_producer_id("t", 1000, enable_2pc=True, keep_prepared_txn=True)  # a crash loop
    assert (r.producer_epoch, r.ongoing_producer_epoch) == (2, 0)
    # the coordinator restarts between recoveries: the kept epoch comes back from the log
    h.shard = s = h.replayed()
    r = s.init_producer_id("t", 1000, enable_2pc=True, keep_prepared_txn=True)
    assert (r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (3, pid, 0)
    assert s.txns["t"].state == TxnState.ONGOING and s.txns["t"].partitions == {("a", 0)}
    with pytest.raises(KafkaError) as e:
        s.end_txn("t", pid, 0, True)
    assert e.value.code == ErrorCode.producer_fenced
    s.end_txn("t", pid, 3, True)
    assert [(t.producer_epoch, c) for t, c in h.markers] == [(3, True)]
    # with nothing open there is nothing to keep: a plain epoch bump, no ongoing transaction
    h.complete_markers()
    r = s.init_producer_id("t", 1000, enable_2pc=True, keep_prepared_txn=True)
    assert (r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (4, -1, -1)
    assert h.replayed().txns["t"].ongoing_pid_epoch == (-1, -1)


def test_loaded_prepare_state_resends_markers():
    h = Harness()
    s = h.shard
    pid = s.init_producer_id("t", 60000).producer_id
    s.add_partitions("t", pid, 0, {("a", 0), ("b", 1)})
    s.end_txn("t", pid, 0, commit=False)
    h.markers.clear()  # the broker dies before any marker is written
    s2 = h.replayed()
    h.shard = s2
    s2.on_loaded()
    assert [(sorted(t.partitions), c) for t, c in h.markers] == [([("a", 0), ("b", 1)], False)]
    with pytest.raises(KafkaError) as e:
        s2.add_partitions("t", pid, 0, {("a", 0)})
    assert e.value.code == ErrorCode.concurrent_transactions
    h.complete_markers()
    assert s2.txns["t"].state == TxnState.COMPLETE_ABORT


def test_transactional_id_expiration():
    h = Harness(id_expiration_ms=1000)
    s = h.shard
    s.init_producer_id("idle", 60000)
    pid = s.init_producer_id("busy", 60000).producer_id
    s.add_partitions("busy", pid, 0, {("a", 0)})
    h.clock.t += 1000
    assert s.expire_transactional_ids() == ["idle"]
    assert "idle" not in s.txns and "busy" in s.txns  # an ongoing transaction never expires
    assert h.log[-1][1] is None  # a tombstone
    assert "idle" not in h.replayed().txns
