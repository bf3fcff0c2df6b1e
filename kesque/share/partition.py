"""SharePartition: the delivery state of one topic partition for one share group (sans-IO).

Theory of operation
-------------------
A share group's members read the same partition together. The partition leader keeps, per
share group, a window of *in-flight* records: offsets at or above the share-partition start
offset (SPSO) that have been handed out at least once and are not yet finished with, up to the
share-partition end offset (SPEO, exclusive here: the first offset never handed out). Records
below the SPSO are done; records at or above the SPEO have never been delivered.

Each in-flight record has a state, a delivery count and, while acquired, the member holding it
and the time its acquisition lock runs out:

* ``AVAILABLE``: may be handed out (acquired) by the next fetch of any member;
* ``ACQUIRED``: handed to one member, which must acknowledge it before the lock expires;
* ``ACKNOWLEDGED``: processed (accepted); never delivered again;
* ``ARCHIVED``: given up (rejected, a gap, aborted, below the log start offset, or delivered
  ``delivery_count_limit`` times); never delivered again.

ACKNOWLEDGED and ARCHIVED are terminal. The window is a list indexed by offset - SPSO;
whenever the records at the SPSO are terminal, the SPSO moves past them and they leave the
window. New records enter the window as AVAILABLE with delivery count 0 when a fetch
acquires them; at most ``max_record_locks`` offsets may be in flight, so a slow group cannot
pin an unbounded window (records already in the window are still re-acquired when the window
is full).

Every state change goes through :meth:`SharePartition._move`, driven by ``_TRANSITIONS``:

    state      event     new state     side effects
    ---------  --------  ------------  -------------------------------------------------
    AVAILABLE  acquire   ACQUIRED      delivery count + 1, member and lock deadline set
    AVAILABLE  archive   ARCHIVED      (below the log start offset, aborted, control)
    ACQUIRED   archive   ARCHIVED      (below the log start offset: its acknowledgement
                                       is then ignored, as for any offset below the SPSO)
    ACQUIRED   accept    ACKNOWLEDGED
    ACQUIRED   release   AVAILABLE     ARCHIVED instead at the delivery-count limit or

    ACQUIRED   expire    AVAILABLE     as release: the lock ran out or the member left
    ACQUIRED   reject    ARCHIVED      (acknowledge types REJECT and GAP)
    ACQUIRED   renew     ACQUIRED      a new lock deadline (acknowledge type RENEW, KIP-1222:
                                       ShareFetch / ShareAcknowledge v2 with IsRenewAck)

Anything else (acknowledging a record that is not acquired, or acquired by another member)
is refused with INVALID_RECORD_STATE, and an acknowledgement request is all or nothing: it is
checked whole before any record moves.

Time is passed in (``now_ms``): every operation first expires the locks that ran out, so an
acknowledgement that arrives after its lock expired is refused even if no timer fired yet.
:meth:`next_lock_deadline` tells the I/O layer when to call :meth:`expire_locks`.

Durable form: :meth:`state_batches` gives the window as Kafka's share-group state batches
(first offset, last offset, state, delivery count), an acquired record written as AVAILABLE
(its lock does not survive a restart); :meth:`restore` rebuilds a partition from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kesque.errors import error

# record states, with the ids Kafka persists (RecordState)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged", ARCHIVED: "Archived"}

# acknowledge types on the wire (ShareFetch / ShareAcknowledge AcknowledgeTypes)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_ACK_EVENTS = {GAP: "reject", ACCEPT: "accept", RELEASE: "release", REJECT: "reject", RENEW: "renew"}

_TRANSITIONS = {
    (AVAILABLE, "acquire"): ACQUIRED,
    (AVAILABLE, "archive"): ARCHIVED,
    (ACQUIRED, "accept"): ACKNOWLEDGED,
    (ACQUIRED, "release"): AVAILABLE,
    (ACQUIRED, "expire"): AVAILABLE,
    (ACQUIRED, "reject"): ARCHIVED,
    (ACQUIRED, "archive"): ARCHIVED,
    (ACQUIRED, "renew"): ACQUIRED,
}


class _InFlight:
    __slots__ = ("state", "delivery_count", "member_id", "deadline")

    def __init__(self, state: int = AVAILABLE, delivery_count: int = 0):
        self.state = state
        self.delivery_count = delivery_count
        self.member_id: str | None = None
        self.deadline = 0


@dataclass(frozen=True)
class AcquiredRange:
    """Offsets ``first..last`` (inclusive) acquired with this delivery count."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True)
class StateBatch:
    """Kafka's persisted state batch: offsets ``first..last`` in one state and delivery count."""

    first: int
    last: int
    state: int
    delivery_count: int


class SharePartition:
    """In-flight records of one share-partition; see the module docstring."""

    def __init__(
        self,
        start_offset: int,
        *,
        delivery_count_limit: int = 5,
        max_record_locks: int = 200,
        lock_duration_ms: int = 30000,
    ):
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.lock_duration_ms = lock_duration_ms
        self.start_offset = start_offset  # SPSO: the offset of self._window[0]
        # the share coordinator's state epoch this window was read at (sent with each write, which
        # is fenced once the state is initialized again, e.g. by an offset reset)
        self.state_epoch = 0
        self._window: list[_InFlight] = []
        # no lock runs out before this: expire_locks skips its scan until then (a lower bound,
        # lowered by every acquisition, made exact by every scan)
        self._next_expiry = _NEVER
        self.lock_timeouts = 0  # records whose acquisition lock ran out (AcquisitionLockTimeoutPerSec)

    # -- views ---------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """SPEO: the first offset never handed out (exclusive)."""
        return self.start_offset + len(self._window)

    def state_of(self, offset: int) -> tuple[int, int, str | None] | None:
        """(state, delivery count, member) of an in-flight offset, None outside the window."""
        rec = self._get(offset)
        return None if rec is None else (rec.state, rec.delivery_count, rec.member_id)

    def in_flight_count(self) -> int:
        return self.end_offset - self.start_offset

    def acquired_count(self) -> int:
        return sum(1 for r in self._window if r.state == ACQUIRED)

    def state_counts(self) -> dict[int, int]:
        """In-flight records per state (read at scrape time: one pass over the window)."""
        counts = dict.fromkeys(STATE_NAMES, 0)
        for rec in self._window:
            counts[rec.state] += 1
        return counts

    def next_fetch_offset(self, now_ms: int) -> int:
        """Where the next fetch should read: the first AVAILABLE in-flight record, else the SPEO."""
        self.expire_locks(now_ms)
        for i, rec in enumerate(self._window):
            if rec.state == AVAILABLE:
                return self.start_offset + i
        return self.end_offset

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self._window if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- the one place where a record changes state ---------------------------------------------

    def _move(self, offset: int, rec: _InFlight, event: str, member_id: str | None = None, deadline: int = 0) -> None:
        new = _TRANSITIONS.get((rec.state, event))
        if new is None:
            raise AssertionError(f"offset {offset}: no transition from {STATE_NAMES[rec.state]} on {event}")
        if new == AVAILABLE and rec.delivery_count >= self.delivery_count_limit:
            new = ARCHIVED
        if event == "acquire":
            rec.delivery_count += 1
        if event in ("acquire", "renew"):
            self._next_expiry = min(self._next_expiry, deadline)
        rec.state = new
        rec.member_id = member_id if new == ACQUIRED else None
        rec.deadline = deadline if new == ACQUIRED else 0

    # -- operations -----------------------------------------------------------------------------

    def acquire(
        self, member_id: str, last_offset: int, max_records: int, now_ms: int, skip: list[tuple[int, int]] = ()
    ) -> list[AcquiredRange]:
        """Acquire up to ``max_records`` records from the next fetch offset through ``last_offset``
        (the last offset the leader read for this fetch) for ``member_id``.

        ``skip`` lists offset ranges that must never be delivered (aborted transactional
        records for read_committed, control batches): they are archived, not acquired."""
        self.expire_locks(now_ms)
        deadline = now_ms + self.lock_duration_ms
        limit_end = self.start_offset + self.max_record_locks  # new records stop here
        runs: list[list[int]] = []  # [first, last, delivery count]
        offset = self.next_fetch_offset(now_ms)
        w, base = self._window, self.start_offset
        while offset <= last_offset and max_records > 0:
            i = offset - base
            if i >= len(w):
                if offset >= limit_end:
                    break
                w.append(_InFlight())
            rec = w[i]
            if rec.state == AVAILABLE:
                if skip and _in_ranges(offset, skip):
                    self._move(offset, rec, "archive")
                else:
                    self._move(offset, rec, "acquire", member_id, deadline)
                    if runs and runs[-1][1] == offset - 1 and runs[-1][2] == rec.delivery_count:
                        runs[-1][1] = offset
                    else:
                        runs.append([offset, offset, rec.delivery_count])
                    max_records -= 1
            offset += 1
        self._advance_start()
        return [AcquiredRange(*r) for r in runs]

    def acknowledge(
        self, member_id: str, batches: list[tuple[int, int, list[int]]], now_ms: int, renew: bool = False
    ) -> None:
        """Apply acknowledgement batches ``(first, last, types)`` from ``member_id``: ``types`` has
        one acknowledge type for the whole range or one per offset. All or nothing: a bad batch
        raises INVALID_REQUEST / INVALID_RECORD_STATE and no record moves. RENEW (a new lock for
        records the member keeps) is valid only in a request that says so (``renew``: v2 with
        IsRenewAck), as Kafka checks.

        Returns what :meth:`undo` needs to put the records back (the acknowledgement could not
        be made durable)."""
        self.expire_locks(now_ms)
        plan: dict[int, tuple[_InFlight, str]] = {}
        for first, last, types in batches:
            if RENEW in types and not renew:
                raise error("invalid_request", None)
            for offset, event in self._ack_events(first, last, types):
                if offset in plan:
                    raise error("invalid_record_state", f"Offset {offset} is acknowledged twice in the request.")
                rec = self._get(offset)
                if rec is None or rec.state != ACQUIRED or rec.member_id != member_id:
                    raise error(
                        "invalid_record_state",
                        f"Offset {offset} is not acquired by member {member_id}; it cannot be acknowledged.",
                    )
                plan[offset] = rec, event
        token = (
            self.start_offset,
            list(self._window),
            [(rec, rec.state, rec.delivery_count, rec.member_id, rec.deadline) for rec, _ in plan.values()],
        )
        for offset, (rec, event) in plan.items():
            if event == "renew":
                self._move(offset, rec, event, rec.member_id, now_ms + self.lock_duration_ms)
            else:
                self._move(offset, rec, event)
        self._advance_start()
        return token

    def undo(self, token) -> None:
        """Back to before the :meth:`acknowledge` that returned ``token`` (nothing else since)."""
        self.start_offset, self._window, recs = token
        for rec, state, count, member_id, deadline in recs:
            rec.state, rec.delivery_count, rec.member_id, rec.deadline = state, count, member_id, deadline

    def _ack_events(self, first: int, last: int, types: list[int]):
        if first > last or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise error("invalid_request", f"Invalid acknowledgement batch {first}-{last} with types {types}.")
        if any(t not in _ACK_EVENTS for t in types):
            raise error("invalid_request", None)  # (Kafka refuses the request's types without a message)
        if last < self.start_offset:
            return  # all already finished with (archived): nothing to do, as Kafka
        if last >= self.end_offset:
            raise error(
                "invalid_request",
                f"Batch record not found. The offsets {first}-{last} are past the "
                f"acquired records (end offset {self.end_offset}).",
            )
        for offset in range(max(first, self.start_offset), last + 1):
            yield offset, _ACK_EVENTS[types[0] if len(types) == 1 else types[offset - first]]

    def release_member(self, member_id: str, now_ms: int) -> int:
        """Release every record ``member_id`` holds (its share session closed or it left)."""
        self.expire_locks(now_ms)
        n = self._move_where(lambda r: r.state == ACQUIRED and r.member_id == member_id, "release")
        self._advance_start()
        return n

    def expire_locks(self, now_ms: int) -> int:
        """Make acquired records whose lock ran out available again (or archive them)."""
        if now_ms < self._next_expiry:
            return 0
        n, nxt = 0, _NEVER
        for i, rec in enumerate(self._window):
            if rec.state == ACQUIRED:
                if rec.deadline <= now_ms:
                    self._move(self.start_offset + i, rec, "expire")
                    n += 1
                else:
                    nxt = min(nxt, rec.deadline)
        self._next_expiry = nxt
        if n:
            self.lock_timeouts += n
            self._advance_start()
        return n

    def advance_log_start(self, log_start_offset: int) -> None:
        """The log's start offset moved (retention, DeleteRecords): records below it can no longer
        be delivered, so they are archived and the SPSO moves up to it."""
        if log_start_offset <= self.start_offset:
            return
        for i, rec in enumerate(self._window[: log_start_offset - self.start_offset]):
            if rec.state in (AVAILABLE, ACQUIRED):
                self._move(self.start_offset + i, rec, "archive")
        if log_start_offset >= self.end_offset:
            self._window, self.start_offset = [], log_start_offset
        self._advance_start()

    # -- durable form ---------------------------------------------------------------------------

    def state_batches(self) -> list[StateBatch]:
        """The window from the SPSO as persisted state batches (acquired written as available)."""
        out: list[StateBatch] = []
        first, run = self.start_offset, None
        for i, rec in enumerate(self._window):
            key = (AVAILABLE if rec.state == ACQUIRED else rec.state, rec.delivery_count)
            if key != run:
                if run is not None:
                    out.append(StateBatch(first, self.start_offset + i - 1, *run))
                first, run = self.start_offset + i, key
        if run is not None:
            out.append(StateBatch(first, self.end_offset - 1, *run))
        return out

    @classmethod
    def restore(cls, start_offset: int, batches: list[StateBatch], **kw) -> SharePartition:
        """Rebuild from persisted state; offsets between batches are available, never delivered.
        A record that had used up its deliveries is archived rather than delivered once more."""
        sp = cls(start_offset, **kw)
        for b in sorted(batches, key=lambda b: b.first):
            if b.last < start_offset:
                continue
            while sp.end_offset < max(b.first, start_offset):
                sp._window.append(_InFlight())
            for offset in range(max(b.first, sp.end_offset), b.last + 1):
                rec = _InFlight(AVAILABLE if b.state == ACQUIRED else b.state, b.delivery_count)
                sp._window.append(rec)
                if rec.state == AVAILABLE and rec.delivery_count >= sp.delivery_count_limit:
                    sp._move(offset, rec, "archive")  # its last delivery was lost with the lock
        sp._advance_start()
        return sp

    # -- internals ------------------------------------------------------------------------------

    def _get(self, offset: int) -> _InFlight | None:
        i = offset - self.start_offset
        return self._window[i] if 0 <= i < len(self._window) else None

    def _move_where(self, pred, event: str) -> int:
        n = 0
        for i, rec in enumerate(self._window):
            if pred(rec):
                self._move(self.start_offset + i, rec, event)
                n += 1
        return n

    def _advance_start(self) -> None:
        """Move the SPSO past the terminal records at the head of the window and drop them."""
        w, i = self._window, 0
        while i < len(w) and w[i].state in (ACKNOWLEDGED, ARCHIVED):
            i += 1
        if i:
            del w[:i]
            self.start_offset += i


_NEVER = float("inf")


def _in_ranges(offset: int, ranges) -> bool:
    return any(first <= offset <= last for first, last in ranges)
