"""A partition's KIP-890 verification state (issue 25): Kafka's VerificationStateEntry and the
verification guard, on the real UnifiedLog and ProducerStateManager.

While a producer's first transactional batch here waits on the transaction coordinator, the
partition remembers the lowest sequence it saw; a higher one is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER so that it cannot be appended ahead of the lower one (which failed
verification with a retriable error and comes again). The append must bring the guard of the
verification it passed; a marker or the transaction's first data ends the verification.
"""

from __future__ import annotations

import time

import pytest

from kesque.config.topic import LogConfig
from kesque.errors import ErrorCode, KafkaError
from kesque.records.records import build_batch
from kesque.storage.producer_state import ProducerStateManager
from kesque.storage.unified_log import UnifiedLog

PID, EPOCH = 7000, 0


def new_log(path) -> UnifiedLog:
    return UnifiedLog(str(path), "t", 0, LogConfig())


def txn_batch(seq: int, epoch: int = EPOCH, n: int = 1, transactional: bool = True) -> memoryview:
    return memoryview(
        bytearray(
            build_batch(
                [(None, f"v{seq + i}".encode(), ()) for i in range(n)],
                producer_id=PID,
                producer_epoch=epoch,
                base_sequence=seq,
                transactional=transactional,
            )
        )
    )


def now() -> int:
    return int(time.time() * 1000)


def append(lg: UnifiedLog, seq: int, guard=None, epoch: int = EPOCH, require: bool = True):
    return lg.append_as_leader(txn_batch(seq, epoch), 0, now(), guard, require)


def code_of(fn) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        fn()
    return e.value.code


def test_a_higher_sequence_waits_for_the_lowest_one_being_verified(tmp_path):
    """librdkafka 0103 reduced: sequences 0-5 of a new producer, 0 fails verification with a
    retriable error and 4 passes. Kafka refuses 4 (the client resends from 0); appending it made
    the client count 0-3 as 'implicitly acked' and lose them."""
    lg = new_log(tmp_path)
    guard = None
    for seq in range(6):  # each pipelined request starts (or continues) the verification
        guard = lg.maybe_start_transaction_verification(PID, seq, EPOCH, now())
    assert code_of(lambda: append(lg, 4, guard)) == ErrorCode.out_of_order_sequence_number
    assert lg.log_end_offset == 0
    info = append(lg, 0, guard)  # the resend from the lowest sequence
    assert info.first_offset == 0
    for seq in range(1, 6):  # the transaction is open here now: no verification, no guard
        assert lg.maybe_start_transaction_verification(PID, seq, EPOCH, now()) is None
        assert append(lg, seq).first_offset == seq
    assert [h.base_sequence for h, _data in lg.read_batches(0)] == list(range(6))


def test_the_lowest_sequence_follows_a_lower_one_and_a_new_epoch(tmp_path):
    ps = ProducerStateManager(str(tmp_path), "t-0")
    v = ps.maybe_create_verification_state(PID, 3, EPOCH, 0)
    ps.maybe_create_verification_state(PID, 5, EPOCH, 0)
    assert v.lowest_sequence == 3
    ps.maybe_create_verification_state(PID, 1, EPOCH, 0)
    assert v.lowest_sequence == 1
    ps.maybe_create_verification_state(PID, 0, EPOCH - 1, 0)  # an older epoch changes nothing
    assert (v.lowest_sequence, v.epoch) == (1, EPOCH)
    ps.maybe_create_verification_state(PID, 4, EPOCH + 1, 0)  # a new epoch starts its sequences again
    assert (v.lowest_sequence, v.epoch) == (4, EPOCH + 1)
    assert ps.verification_guard(PID) is v.guard


def test_a_tv2_producer_without_state_here_starts_at_sequence_zero(tmp_path):
    lg = new_log(tmp_path)
    guard = lg.maybe_start_transaction_verification(PID, 2, EPOCH, now(), supports_epoch_bump=True)
    assert code_of(lambda: append(lg, 2, guard)) == ErrorCode.out_of_order_sequence_number
    guard = lg.maybe_start_transaction_verification(PID, 0, EPOCH, now(), supports_epoch_bump=True)
    assert append(lg, 0, guard).first_offset == 0


def test_an_append_needs_the_guard_of_a_verification_still_pending(tmp_path):
    """Kafka's batchMissingRequiredVerification: no guard, a guard a marker has ended, or the
    guard of another verification is INVALID_TXN_STATE (the verification raced with the end of
    the transaction: the ABA case); without required verification anything goes."""
    lg = new_log(tmp_path)
    assert code_of(lambda: append(lg, 0, None)) == ErrorCode.invalid_txn_state
    stale = lg.maybe_start_transaction_verification(PID, 0, EPOCH, now())
    lg.append_txn_marker(PID, EPOCH, False, 0, 0, now())  # the transaction ends meanwhile
    assert lg.producer_state.verification_guard(PID) is None
    assert code_of(lambda: append(lg, 0, stale)) == ErrorCode.invalid_txn_state
    fresh = lg.maybe_start_transaction_verification(PID, 0, EPOCH, now())
    assert fresh is not stale
    assert code_of(lambda: append(lg, 0, stale)) == ErrorCode.invalid_txn_state
    assert append(lg, 0, fresh).first_offset == 1  # after the marker at 0
    assert lg.producer_state.verification_guard(PID) is None  # the data ends the verification
    assert append(lg, 1, None).first_offset == 2  # the transaction is open: no guard needed
    other = new_log(tmp_path / "other")
    assert append(other, 0, None, require=False).first_offset == 0


def test_a_duplicate_is_acknowledged_before_any_verification_check(tmp_path):
    lg = new_log(tmp_path)
    guard = lg.maybe_start_transaction_verification(PID, 0, EPOCH, now())
    append(lg, 0, guard)
    lg.maybe_start_transaction_verification(PID, 0, EPOCH, now())  # open already: nothing started
    dup = append(lg, 0, None)
    assert dup.duplicate and dup.first_offset == 0


def test_verifications_never_answered_expire_with_the_producers(tmp_path):
    ps = ProducerStateManager(str(tmp_path), "t-0", expiration_ms=1000)
    ps.maybe_create_verification_state(PID, 0, EPOCH, now_ms=5000)
    ps.remove_expired(5999)
    assert ps.verification_guard(PID) is not None
    ps.remove_expired(6000)
    assert ps.verification_guard(PID) is None


def test_a_tv2_marker_leaves_the_next_transactions_verification_in_place(tmp_path):
    """Transaction version 2: EndTxn bumps the epoch and the markers carry the bumped one. The
    producer's next transaction may start verifying here (at the bumped epoch) before the
    previous transaction's marker lands; the marker must not end that verification, or the
    append it lets through is refused INVALID_TXN_STATE (Kafka Streams' thread died on it)."""
    lg = new_log(tmp_path)
    guard = lg.maybe_start_transaction_verification(PID, 0, EPOCH, now(), supports_epoch_bump=True)
    append(lg, 0, guard)  # transaction 1 at epoch 0
    nxt = lg.maybe_start_transaction_verification(PID, 0, EPOCH + 1, now(), supports_epoch_bump=True)
    assert nxt is not None  # not open at epoch 1 yet
    lg.append_txn_marker(PID, EPOCH + 1, True, 0, 0, now())  # transaction 1's marker, bumped epoch
    assert lg.producer_state.verification_guard(PID) is nxt
    assert append(lg, 0, nxt, epoch=EPOCH + 1).first_offset == 2
    # a transaction version 1 producer's marker (same epoch, no bump) still ends it
    lg2 = new_log(tmp_path / "tv1")
    g1 = lg2.maybe_start_transaction_verification(PID, 0, EPOCH, now())
    lg2.append_txn_marker(PID, EPOCH, False, 0, 0, now())
    assert lg2.producer_state.verification_guard(PID) is None and g1 is not None
