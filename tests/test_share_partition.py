"""SharePartition (kesque/share/partition.py): record states, delivery counts, locks, SPSO."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conftest import examples
from kesque.errors import ErrorCode, KafkaError
from kesque.share.partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AcquiredRange,
    SharePartition,
    StateBatch,
)

LOCK = 1000


def sp(start=0, **kw) -> SharePartition:
    kw.setdefault("lock_duration_ms", LOCK)
    return SharePartition(start, **kw)


def code(exc_info) -> ErrorCode:
    return exc_info.value.code


# ---------------------------------------------------------------------------- acquire


def test_acquire_new_records_counts_one_delivery():
    p = sp(10)
    assert p.acquire("a", last_offset=14, max_records=100, now_ms=0) == [AcquiredRange(10, 14, 1)]
    assert p.state_of(12) == (ACQUIRED, 1, "a")
    assert (p.start_offset, p.end_offset) == (10, 15)


def test_acquire_stops_at_max_records_and_the_next_fetch_continues():
    p = sp()
    assert p.acquire("a", 9, 3, 0) == [AcquiredRange(0, 2, 1)]
    assert p.acquire("b", 9, 100, 0) == [AcquiredRange(3, 9, 1)]
    assert p.acquire("c", 9, 100, 0) == []  # nothing available


def test_record_locks_bound_new_records_but_not_reacquisition():
    p = sp(max_record_locks=4)
    assert p.acquire("a", 99, 100, 0) == [AcquiredRange(0, 3, 1)]
    assert p.acquire("b", 99, 100, 0) == []
    p.acknowledge("a", [(1, 1, [RELEASE])], 0)
    assert p.acquire("b", 99, 100, 0) == [AcquiredRange(1, 1, 2)]
    p.acknowledge("a", [(0, 0, [ACCEPT])], 0)  # SPSO moves to 1: one more new record fits
    assert p.start_offset == 1
    assert p.acquire("b", 99, 100, 0) == [AcquiredRange(4, 4, 1)]


def test_skipped_ranges_are_archived_not_delivered():
    p = sp()
    assert p.acquire("a", 5, 100, 0, skip=[(0, 1), (4, 4)]) == [AcquiredRange(2, 3, 1), AcquiredRange(5, 5, 1)]
    assert p.state_of(0) is None and p.start_offset == 2  # archived head left the window
    assert p.state_of(4) == (ARCHIVED, 0, None)


# ---------------------------------------------------------------------------- acknowledge


def test_accept_advances_spso_past_acknowledged_head_only():
    p = sp()
    p.acquire("a", 4, 100, 0)
    p.acknowledge("a", [(1, 2, [ACCEPT])], 0)
    assert p.start_offset == 0
    p.acknowledge("a", [(0, 0, [ACCEPT])], 0)
    assert (p.start_offset, p.state_of(3)) == (3, (ACQUIRED, 1, "a"))


def test_per_offset_types():
    p = sp()
    p.acquire("a", 3, 100, 0)
    p.acknowledge("a", [(0, 3, [ACCEPT, RELEASE, REJECT, GAP])], 0)
    assert [p.state_of(o) for o in range(1, 4)] == [(AVAILABLE, 1, None), (ARCHIVED, 1, None), (ARCHIVED, 1, None)]
    assert p.start_offset == 1


def test_released_record_is_redelivered_with_delivery_count_two():
    p = sp()
    p.acquire("a", 2, 100, 0)
    p.acknowledge("a", [(1, 1, [RELEASE])], 0)
    assert p.next_fetch_offset(0) == 1
    assert p.acquire("b", 2, 100, 0) == [AcquiredRange(1, 1, 2)]


def test_renew_gives_the_holder_a_new_lock_and_nothing_else():
    """RENEW (KIP-1222, ShareFetch/ShareAcknowledge v2 with IsRenewAck): the records stay the
    member's with the same delivery count and a lock running from the renewal; only in a request
    that says it renews (INVALID_REQUEST otherwise, nothing moved); another member's records or
    ones not acquired cannot be renewed (INVALID_RECORD_STATE)."""
    p = sp()
    p.acquire("a", 3, 100, now_ms=0)
    with pytest.raises(KafkaError) as e:
        p.acknowledge("a", [(0, 1, [RENEW])], 900)
    assert code(e) == ErrorCode.invalid_request and p.state_of(0) == (ACQUIRED, 1, "a")
    p.acknowledge("a", [(0, 1, [RENEW]), (2, 2, [ACCEPT])], 900, renew=True)
    assert p.next_lock_deadline() == LOCK  # 3's lock is the original one
    assert p.expire_locks(LOCK) == 1 and p.state_of(3) == (AVAILABLE, 1, None)
    assert p.state_of(0) == p.state_of(1) == (ACQUIRED, 1, "a") and p.state_of(2)[0] == ACKNOWLEDGED
    assert p.next_lock_deadline() == 900 + LOCK
    for member, offset in (("b", 0), ("a", 3)):
        with pytest.raises(KafkaError) as e:
            p.acknowledge(member, [(offset, offset, [RENEW])], 1000, renew=True)
        assert code(e) == ErrorCode.invalid_record_state
    assert p.expire_locks(900 + LOCK) == 2 and p.state_of(0) == (AVAILABLE, 1, None)


def test_delivery_count_limit_archives_on_release_and_expiry():
    p = sp(delivery_count_limit=2)
    for member in ("a", "b"):
        assert p.acquire(member, 0, 1, 0) != []
        p.acknowledge(member, [(0, 0, [RELEASE])], 0)
    assert p.start_offset == 1 and p.acquire("c", 0, 1, 0) == []
    q = sp(delivery_count_limit=1)
    q.acquire("a", 0, 1, 0)
    q.expire_locks(LOCK)
    assert q.start_offset == 1


def test_acknowledge_is_all_or_nothing():
    p = sp()
    p.acquire("a", 4, 100, 0)
    p.acquire("b", 4, 100, 0)  # nothing left: b holds nothing
    with pytest.raises(KafkaError) as e:
        p.acknowledge("a", [(0, 1, [ACCEPT]), (3, 5, [ACCEPT])], 0)  # 5 is past the window
    assert code(e) == ErrorCode.invalid_request
    with pytest.raises(KafkaError) as e:
        p.acknowledge("a", [(0, 1, [ACCEPT]), (1, 1, [REJECT])], 0)
    assert code(e) == ErrorCode.invalid_record_state
    assert all(p.state_of(o) == (ACQUIRED, 1, "a") for o in range(5))


@pytest.mark.parametrize(
    "member, batch, err",
    [
        ("b", (0, 0, [ACCEPT]), ErrorCode.invalid_record_state),  # another member's record
        ("a", (2, 2, [ACCEPT]), ErrorCode.invalid_record_state),  # available, not acquired
        ("a", (0, 1, [ACCEPT, ACCEPT, ACCEPT]), ErrorCode.invalid_request),  # types don't match range
        ("a", (0, 0, [7]), ErrorCode.invalid_request),  # unknown type
        ("a", (1, 0, [ACCEPT]), ErrorCode.invalid_request),  # reversed range
        ("a", (0, 9, [ACCEPT]), ErrorCode.invalid_request),  # past the end offset
    ],
)
def test_bad_acknowledgements_change_nothing(member, batch, err):
    p = sp()
    p.acquire("a", 1, 100, 0)
    p.acquire("a", 2, 1, 0)
    p.acknowledge("a", [(2, 2, [RELEASE])], 0)
    before = [p.state_of(o) for o in range(3)]
    with pytest.raises(KafkaError) as e:
        p.acknowledge(member, [batch], 0)
    assert code(e) == err
    assert [p.state_of(o) for o in range(3)] == before


def test_acknowledging_twice_is_refused():
    p = sp()
    p.acquire("a", 1, 100, 0)
    p.acknowledge("a", [(1, 1, [ACCEPT])], 0)
    with pytest.raises(KafkaError) as e:
        p.acknowledge("a", [(1, 1, [ACCEPT])], 0)
    assert code(e) == ErrorCode.invalid_record_state


def test_acknowledgement_below_spso_is_ignored():
    p = sp()
    p.acquire("a", 1, 100, 0)
    p.acknowledge("a", [(0, 0, [ACCEPT])], 0)
    p.acknowledge("a", [(0, 0, [ACCEPT])], 0)  # already done: no error, as Kafka
    assert p.start_offset == 1


# ---------------------------------------------------------------------------- locks and members


def test_lock_expiry_makes_records_available_to_another_member():
    p = sp()
    p.acquire("a", 2, 100, now_ms=0)
    assert p.next_lock_deadline() == LOCK
    assert p.acquire("b", 2, 100, now_ms=LOCK - 1) == []
    assert p.acquire("b", 2, 100, now_ms=LOCK) == [AcquiredRange(0, 2, 2)]
    with pytest.raises(KafkaError) as e:  # a's late acknowledgement
        p.acknowledge("a", [(0, 0, [ACCEPT])], LOCK)
    assert code(e) == ErrorCode.invalid_record_state


def test_expired_lock_refuses_a_late_acknowledgement_without_a_timer():
    p = sp()
    p.acquire("a", 0, 1, 0)
    with pytest.raises(KafkaError):
        p.acknowledge("a", [(0, 0, [ACCEPT])], LOCK)
    assert p.state_of(0) == (AVAILABLE, 1, None)


def test_release_member_frees_only_its_records():
    p = sp()
    p.acquire("a", 1, 2, 0)
    p.acquire("b", 3, 2, 0)
    assert p.release_member("a", 0) == 2
    assert [p.state_of(o)[0] for o in range(4)] == [AVAILABLE, AVAILABLE, ACQUIRED, ACQUIRED]


def test_log_start_movement_archives_what_it_passes():
    p = sp()
    p.acquire("a", 3, 2, 0)
    p.advance_log_start(3)
    assert p.start_offset == 3 and p.acquire("b", 5, 100, 0) == [AcquiredRange(3, 5, 1)]
    p.acknowledge("a", [(0, 1, [ACCEPT])], 0)  # below the SPSO now: ignored
    p.advance_log_start(50)
    assert (p.start_offset, p.end_offset, p.acquire("b", 50, 100, 0)) == (50, 50, [AcquiredRange(50, 50, 1)])


# ---------------------------------------------------------------------------- durable form


def test_state_batches_round_trip_and_locks_do_not_survive():
    p = sp(5)
    p.acquire("a", 12, 100, 0)
    p.acknowledge("a", [(5, 12, [ACCEPT, RELEASE, ACCEPT, REJECT, ACCEPT, ACCEPT, RELEASE, RELEASE])], 0)
    p.acquire("b", 12, 1, 0)  # re-acquire 6
    batches = p.state_batches()
    assert batches == [
        StateBatch(6, 6, AVAILABLE, 2),
        StateBatch(7, 7, ACKNOWLEDGED, 1),
        StateBatch(8, 8, ARCHIVED, 1),
        StateBatch(9, 10, ACKNOWLEDGED, 1),
        StateBatch(11, 12, AVAILABLE, 1),
    ]
    q = SharePartition.restore(p.start_offset, batches)
    assert (q.start_offset, q.end_offset, q.state_batches()) == (6, 13, batches)
    assert q.acquire("c", 20, 100, 0) == [AcquiredRange(6, 6, 3), AcquiredRange(11, 12, 2), AcquiredRange(13, 20, 1)]


def test_restore_fills_gaps_with_new_records_and_skips_below_start():
    q = SharePartition.restore(10, [StateBatch(2, 4, ACKNOWLEDGED, 1), StateBatch(12, 12, ACKNOWLEDGED, 1)])
    assert (q.start_offset, q.end_offset) == (10, 13)
    assert q.acquire("a", 13, 100, 0) == [AcquiredRange(10, 11, 1), AcquiredRange(13, 13, 1)]


# ---------------------------------------------------------------------------- model test

MEMBERS = ("m1", "m2", "m3")


class Model:
    """A naive per-offset dictionary of the same rules, written independently of the window."""

    def __init__(self, limit, locks):
        self.limit, self.locks = limit, locks
        self.recs: dict[int, list] = {}  # offset -> [state, delivery count, member, deadline]
        self.spso = 0

    def end(self):
        return max(self.recs, default=self.spso - 1) + 1 if self.recs else self.spso

    def expire(self, now):
        for r in self.recs.values():
            if r[0] == ACQUIRED and r[3] <= now:
                self.give_back(r)

    def give_back(self, r):
        r[0], r[2] = (ARCHIVED if r[1] >= self.limit else AVAILABLE), None

    def settle(self):
        while self.spso in self.recs and self.recs[self.spso][0] in (ACKNOWLEDGED, ARCHIVED):
            del self.recs[self.spso]
            self.spso += 1

    def acquire(self, member, last, n, now):
        self.expire(now)
        got = []
        for o in range(self.spso, last + 1):
            if n == 0:
                break
            if o not in self.recs:
                if o >= self.spso + self.locks:
                    break
                self.recs[o] = [AVAILABLE, 0, None, 0]
            r = self.recs[o]
            if r[0] == AVAILABLE:
                r[:] = [ACQUIRED, r[1] + 1, member, now + LOCK]
                got.append(o)
                n -= 1
        self.settle()
        return got

    def ack(self, member, first, last, typ, now):
        self.expire(now)
        offs = [o for o in range(max(first, self.spso), last + 1)]
        if last >= self.spso and last >= self.end():
            return ErrorCode.invalid_request
        if any(self.recs[o][0] != ACQUIRED or self.recs[o][2] != member for o in offs):
            return ErrorCode.invalid_record_state
        for o in offs:
            r = self.recs[o]
            if typ == ACCEPT:
                r[0], r[2] = ACKNOWLEDGED, None
            elif typ == RELEASE:
                self.give_back(r)
            else:
                r[0], r[2] = ARCHIVED, None
        self.settle()
        return None


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.now = 0
        self.p = SharePartition(0, delivery_count_limit=3, max_record_locks=8, lock_duration_ms=LOCK)
        self.m = Model(3, 8)
        self.log_end = 0
        self.accepted: set[int] = set()

    @rule(n=st.integers(1, 6))
    def produce(self, n):
        self.log_end += n

    @rule(member=st.sampled_from(MEMBERS), n=st.integers(1, 5))
    def acquire(self, member, n):
        got = self.p.acquire(member, self.log_end - 1, n, self.now)
        offsets = [o for r in got for o in range(r.first, r.last + 1)]
        assert offsets == self.m.acquire(member, self.log_end - 1, n, self.now)
        assert not set(offsets) & self.accepted, "an accepted record was delivered again"
        for r in got:
            assert all(self.p.state_of(o)[1] == r.delivery_count for o in range(r.first, r.last + 1))

    @rule(
        member=st.sampled_from(MEMBERS),
        first=st.integers(0, 40),
        width=st.integers(0, 3),
        typ=st.sampled_from([ACCEPT, RELEASE, REJECT]),
    )
    def acknowledge(self, member, first, width, typ):
        want = self.m.ack(member, first, first + width, typ, self.now)
        try:
            self.p.acknowledge(member, [(first, first + width, [typ])], self.now)
            got = None
        except KafkaError as e:
            got = e.code
        assert got == want
        if got is None and typ == ACCEPT:
            self.accepted |= set(range(first, first + width + 1))

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member):
        self.p.release_member(member, self.now)
        self.m.expire(self.now)
        for r in self.m.recs.values():
            if r[0] == ACQUIRED and r[2] == member:
                self.m.give_back(r)
        self.m.settle()

    @rule(ms=st.sampled_from([1, LOCK // 2, LOCK]))
    def tick(self, ms):
        self.now += ms

    @precondition(lambda self: self.p.in_flight_count() > 0)
    @rule()
    def restart(self):
        """A broker restart: the persisted state comes back, locks are lost."""
        self.p = SharePartition.restore(
            self.p.start_offset,
            self.p.state_batches(),
            delivery_count_limit=3,
            max_record_locks=8,
            lock_duration_ms=LOCK,
        )
        for r in self.m.recs.values():
            if r[0] == ACQUIRED:
                r[0], r[2] = (ARCHIVED if r[1] >= 3 else AVAILABLE), None
        self.m.settle()

    @invariant()
    def same_as_model(self):
        self.p.expire_locks(self.now)
        self.m.expire(self.now)
        self.m.settle()
        assert self.p.start_offset == self.m.spso
        for o in range(self.m.spso, self.m.end()):
            st_, dc, member, _ = self.m.recs[o]
            assert self.p.state_of(o) == (st_, dc, member), o
            assert dc <= 3

    @invariant()
    def window_bounded(self):
        assert self.p.in_flight_count() <= 8


# the loaded profile (tests/conftest.py: ci derandomized, fuzz fresh and 20x) governs
SharePartitionMachine.TestCase.settings = settings(max_examples=examples(150), stateful_step_count=40)
test_share_partition_model = SharePartitionMachine.TestCase


def test_undo_puts_an_acknowledgement_back():
    """The acknowledgement could not be persisted: every record, the SPSO and the locks are
    as before it."""
    p = sp()
    p.acquire("a", 3, 100, 0)
    before = [p.state_of(o) for o in range(4)]
    p.undo(p.acknowledge("a", [(0, 1, [ACCEPT]), (2, 2, [RELEASE]), (3, 3, [REJECT])], 0))
    assert p.start_offset == 0 and [p.state_of(o) for o in range(4)] == before
    assert p.next_lock_deadline() == LOCK
    assert p.expire_locks(LOCK) == 4  # the locks still run out
