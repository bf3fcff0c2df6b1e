"""TransactionCoordinatorShard under transaction version 2 (KIP-890 part 2), sans-IO, as Kafka
4.4's TransactionCoordinator.endTransaction and TransactionMetadata.prepareAbortOrCommit /
prepareComplete have it: an epoch bump in every Prepare record (the markers carry it), a new
producer id after an exhausted epoch, retries recognised by the epoch, aborts of transactions
with no partitions, the double bump of a fenced TV2 transaction, and the record's
ClientTransactionVersion / NextProducerId fields surviving a replay."""

from __future__ import annotations

import pytest

from kesque.coordinator.transaction.records import TxnState, decode_value
from kesque.coordinator.transaction.shard import MAX_EPOCH
from kesque.errors import ErrorCode, KafkaError
from test_txn_coordinator import Harness, snapshot

A0, A1 = ("a", 0), ("a", 1)


def begin(h: Harness, txn="t"):
    r = h.init(txn, 60000)
    assert r.error == ErrorCode.none
    return r.producer_id, r.producer_epoch


def code_of(fn, *args, **kw):
    with pytest.raises(KafkaError) as e:
        fn(*args, **kw)
    return e.value.code


def test_every_end_txn_bumps_the_epoch_and_the_markers_carry_it():
    h = Harness()
    s = h.shard
    pid, epoch = begin(h)
    for i in range(3):
        h.add("t", pid, epoch, {A0, A1}, 2)  # the leader adds them (AddPartitionsToTxn v5)
        assert s.txns["t"].client_transaction_version == 2
        answer = h.end("t", pid, epoch, commit=i != 1, tv2=True)
        assert answer == (pid, epoch + 1)
        assert s.txns["t"].state == (TxnState.PREPARE_ABORT if i == 1 else TxnState.PREPARE_COMMIT)
        assert [(t.producer_id, t.producer_epoch) for t, _c in h.markers] == [(pid, epoch + 1)]
        # the old epoch is fenced at once, even before the markers are written
        assert code_of(h.add, "t", pid, epoch, {A0}, 2) == ErrorCode.producer_fenced
        h.complete_markers()
        assert s.txns["t"].state == (TxnState.COMPLETE_ABORT if i == 1 else TxnState.COMPLETE_COMMIT)
        epoch += 1
        assert s.txns["t"].producer_epoch == epoch
    # the written records hold the bumped epochs and the client's transaction version
    last = decode_value(h.log[-1][1])
    assert (last.producer_epoch, last.client_transaction_version) == (3, 2)
    assert snapshot(h.replayed()) == snapshot(s)
    assert h.replayed().txns["t"].client_transaction_version == 2


def test_transaction_version_1_keeps_the_epoch():
    h = Harness()
    s = h.shard
    pid, epoch = begin(h)
    h.add("t", pid, epoch, {A0})
    assert h.end("t", pid, epoch, commit=True) == (pid, epoch)
    assert [t.producer_epoch for t, _c in h.markers] == [epoch]
    h.complete_markers()
    assert s.txns["t"].producer_epoch == epoch
    assert decode_value(h.log[-1][1]).client_transaction_version == 0


def test_a_retried_end_txn_is_answered_with_the_current_epoch():
    h = Harness()
    pid, epoch = begin(h)
    h.add("t", pid, epoch, {A0}, 2)
    h.end("t", pid, epoch, commit=True, tv2=True)
    # markers in flight: the retry waits
    assert code_of(h.end, "t", pid, epoch, True, tv2=True) == ErrorCode.concurrent_transactions
    h.complete_markers()
    n = len(h.log)
    assert h.end("t", pid, epoch, commit=True, tv2=True) == (pid, epoch + 1)
    assert len(h.log) == n  # nothing written for a retry
    # a retry with the other result is an invalid transition
    assert code_of(h.end, "t", pid, epoch, False, tv2=True) == ErrorCode.invalid_txn_state
    # an epoch two behind is a zombie
    h.add("t", pid, epoch + 1, {A0}, 2)
    h.end("t", pid, epoch + 1, commit=True, tv2=True)
    h.complete_markers()
    assert code_of(h.end, "t", pid, epoch, True, tv2=True) == ErrorCode.producer_fenced


def test_abort_without_partitions_bumps_the_epoch():
    """A TV2 client cannot know whether a leader added a partition, so it may abort a
    transaction the coordinator sees as Empty or Complete: PrepareAbort with no markers."""
    h = Harness()
    s = h.shard
    pid, epoch = begin(h)
    assert s.txns["t"].state == TxnState.EMPTY
    assert h.end("t", pid, epoch, commit=False, tv2=True) == (pid, epoch + 1)
    assert s.txns["t"].state == TxnState.PREPARE_ABORT
    h.complete_markers()
    assert (s.txns["t"].state, s.txns["t"].producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    # a commit of nothing is still refused
    assert code_of(h.end, "t", pid, epoch + 1, True, tv2=True) == ErrorCode.invalid_txn_state
    # and an abort after a commit is a new (empty) abort
    h.add("t", pid, epoch + 1, {A0}, 2)
    h.end("t", pid, epoch + 1, commit=True, tv2=True)
    h.complete_markers()
    assert h.end("t", pid, epoch + 2, commit=False, tv2=True) == (pid, epoch + 3)


def test_an_exhausted_epoch_moves_to_a_new_producer_id():
    h = Harness()
    s = h.shard
    pid, _ = begin(h)
    s.txns["t"].producer_epoch = MAX_EPOCH - 1
    h.add("t", pid, MAX_EPOCH - 1, {A0}, 2)
    new_pid, new_epoch = h.end("t", pid, MAX_EPOCH - 1, commit=True, tv2=True)
    assert new_pid != pid and new_epoch == 0
    prepared = s.txns["t"]
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (pid, MAX_EPOCH, new_pid)
    assert [(t.producer_id, t.producer_epoch) for t, _c in h.markers] == [(pid, MAX_EPOCH)]
    assert decode_value(h.log[-1][1]).next_producer_id == new_pid
    h.complete_markers()
    done = s.txns["t"]
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id, done.next_producer_id) == (
        new_pid,
        0,
        pid,
        -1,
    )
    # the client's retry with the old producer id at the last epoch gets the new one
    assert h.end("t", pid, MAX_EPOCH - 1, commit=True, tv2=True) == (new_pid, 0)
    # and the next transaction runs on the new producer id
    h.add("t", new_pid, 0, {A1}, 2)
    assert h.end("t", new_pid, 0, commit=False, tv2=True) == (new_pid, 1)
    assert snapshot(h.replayed()) == snapshot(s)


def test_fencing_a_tv2_transaction_bumps_twice():
    """InitProducerId (or a timeout) on an open TV2 transaction fences it and aborts it with the
    TV2 bump on top (Kafka's endTransaction after prepareFenceProducerEpoch)."""
    h = Harness()
    s = h.shard
    pid, epoch = begin(h)
    h.add("t", pid, epoch, {A0}, 2)
    assert h.init("t", 60000).error == ErrorCode.concurrent_transactions
    assert s.txns["t"].producer_epoch == epoch + 2
    assert [t.producer_epoch for t, _c in h.markers] == [epoch + 2]
    h.complete_markers()
    r = h.init("t", 60000)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 3)
    # a TV1 transaction is fenced with one bump, as before
    h2 = Harness()
    pid2, e2 = begin(h2, "u")
    h2.add("u", pid2, e2, {A0})
    h2.init("u", 60000)
    assert h2.shard.txns["u"].producer_epoch == e2 + 1
