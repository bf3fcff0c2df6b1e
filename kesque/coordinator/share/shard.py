"""ShareCoordinatorShard: the durable state of the share-partitions whose keys map to one
``__share_group_state`` partition (Kafka's ShareCoordinatorShard), sans-IO.

A share-partition's state is its start offset (SPSO), its state epoch (bumped when the state
is initialized again, e.g. an offset reset) and state batches: offset ranges with a delivery
state (0 Available, 2 Acknowledged, 4 Archived) and delivery count. A write is a ShareUpdate
record whose batches are laid over the state (the newer batch wins for each offset, and
anything below the new start offset goes); every ``records_per_snapshot`` writes a
ShareSnapshot with the merged state is written instead, so a reload replays at most one
snapshot and a few updates per share-partition. An operation returns the records to write;
the state changes only when they are replayed, once written (Kafka's CoordinatorRuntime).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ...errors import ErrorCode, KafkaError
from ...share.partition import ACKNOWLEDGED, ARCHIVED, StateBatch
from ..runtime import CoordinatorRecord, CoordinatorResult
from . import records as R


@dataclass
class ShareState:
    state_epoch: int = 0
    start_offset: int = 0
    leader_epoch: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    snapshot_epoch: int = 0
    updates: int = 0  # ShareUpdate records since the last snapshot


@dataclass(frozen=True)
class ShareSummary:
    """What ReadShareGroupStateSummary answers: the epochs, the start offset and how many
    offsets at or above it are delivery-complete (acknowledged or archived)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


def summary(s: ShareState) -> ShareSummary:
    done = sum(
        b.last - max(b.first, s.start_offset) + 1
        for b in s.batches
        if b.state in (ACKNOWLEDGED, ARCHIVED) and b.last >= s.start_offset
    )
    return ShareSummary(s.state_epoch, s.leader_epoch, s.start_offset, done)


def merge(start_offset: int, old: list[StateBatch], new: list[StateBatch]) -> list[StateBatch]:
    """``new`` laid over ``old`` (a later batch wins where batches overlap), offsets below
    ``start_offset`` dropped, neighbours joined. A sweep over batch edges, not over offsets:
    a state is a few batches spanning thousands of offsets."""
    ranked = [(b, rank) for rank, b in enumerate([*old, *new]) if b.last >= start_offset]
    starts = sorted(ranked, key=lambda x: max(x[0].first, start_offset))
    edges = sorted({max(b.first, start_offset) for b, _ in ranked} | {b.last + 1 for b, _ in ranked})
    active: list[tuple[int, int, StateBatch]] = []  # (-rank, end, batch): the latest batch on top
    out: list[StateBatch] = []
    i = 0
    for lo, hi in zip(edges, edges[1:]):
        while i < len(starts) and max(starts[i][0].first, start_offset) <= lo:
            b, rank = starts[i]
            heapq.heappush(active, (-rank, b.last + 1, b))
            i += 1
        while active and active[0][1] <= lo:  # ended: not under this interval any more
            heapq.heappop(active)
        if not active:
            continue
        b = active[0][2]
        if out and out[-1].last == lo - 1 and (out[-1].state, out[-1].delivery_count) == (b.state, b.delivery_count):
            out[-1] = StateBatch(out[-1].first, hi - 1, b.state, b.delivery_count)
        else:
            out.append(StateBatch(lo, hi - 1, b.state, b.delivery_count))
    return out


def _batches_value(batches: list[StateBatch]) -> list[dict]:
    return [
        {"first_offset": b.first, "last_offset": b.last, "delivery_state": b.state, "delivery_count": b.delivery_count}
        for b in batches
    ]


def _batches(value: list[dict]) -> list[StateBatch]:
    return [StateBatch(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"]) for b in value]


class ShareCoordinatorShard:
    """Operations return a :class:`~kesque.coordinator.runtime.CoordinatorResult` (Kafka's
    ShareCoordinatorShard): the records to write and the response; the state changes only when
    the runtime replays the records once written, so a refused or failed write leaves it as it
    was."""

    def __init__(self, partition: int, records_per_snapshot: int = 500):
        self.partition = partition
        self.records_per_snapshot = records_per_snapshot
        self.states: dict[tuple, ShareState] = {}

    # ------------------------------------------------------------------ replay
    def replay(self, key: bytes, value: bytes | None, decoded: tuple | None = None) -> None:
        """``decoded``: ``(share-partition key, state)`` of a record an operation of this shard
        wrote, the state it computed (an update's batches merged already); from the log (load,
        committed view) the record is decoded and laid over the state."""
        if decoded is not None:
            skey, state = decoded
            self.states[skey] = state
            return
        version, k = R.decode_key(key)
        skey = (k["group_id"], k["topic_id"], k["partition"])
        v = R.decode_value(version, value)
        if v is None:
            self.states.pop(skey, None)
            return
        if version == R.SHARE_SNAPSHOT:
            self.states[skey] = ShareState(
                v["state_epoch"],
                v["start_offset"],
                v["leader_epoch"],
                _batches(v["state_batches"]),
                v["snapshot_epoch"],
                0,
            )
            return
        s = self.states.get(skey)
        if s is None:
            return  # an update without its snapshot (compacted away with a deleted state)
        start = v["start_offset"] if v["start_offset"] >= 0 else s.start_offset
        s.batches = merge(start, s.batches, _batches(v["state_batches"]))
        s.start_offset, s.leader_epoch, s.updates = start, v["leader_epoch"], s.updates + 1

    def on_loaded(self) -> None:
        pass

    # ------------------------------------------------------------------ reads and writes
    def read(self, key: tuple) -> ShareState | None:
        return self.states.get(key)

    def initialize(
        self, key: tuple, start_offset: int, leader_epoch: int = -1, state_epoch: int = -1
    ) -> CoordinatorResult:
        """(Re)initialize a share-partition's state at ``start_offset``: a new state epoch, the
        given one (refused with FENCED_STATE_EPOCH unless newer than the stored one) or the next.
        The response is the new state."""
        old = self.states.get(key)
        if state_epoch >= 0 and old is not None and state_epoch <= old.state_epoch:
            raise KafkaError(
                ErrorCode.fenced_state_epoch,
                f"State epoch {state_epoch} is not newer than {old.state_epoch} of the state.",
            )
        epoch = state_epoch if state_epoch >= 0 else (old.state_epoch + 1) if old else 0
        s = ShareState(epoch, start_offset, leader_epoch, [], (old.snapshot_epoch + 1) if old else 0)
        return CoordinatorResult([_snapshot_record(key, s)], s)

    def write_state(
        self, key: tuple, start_offset: int, batches: list[StateBatch], leader_epoch: int = -1, state_epoch: int = -1
    ) -> CoordinatorResult:
        """Lay ``batches`` over the state. As Kafka's share coordinator, a leader older than the
        last one that read or wrote it is refused (FENCED_LEADER_EPOCH), and so is a writer
        that read the state before it was initialized again, e.g. by an offset reset
        (FENCED_STATE_EPOCH); -1 means unknown (not checked)."""
        old = self.states.get(key)
        if old is not None and 0 <= leader_epoch < old.leader_epoch:
            raise KafkaError(
                ErrorCode.fenced_leader_epoch,
                f"Leader epoch {leader_epoch} is older than {old.leader_epoch} of the state.",
            )
        if old is not None and 0 <= state_epoch < old.state_epoch:
            raise KafkaError(
                ErrorCode.fenced_state_epoch, f"State epoch {state_epoch} is older than {old.state_epoch} of the state."
            )
        if old is None:
            old = ShareState(0, start_offset)
        merged = merge(start_offset, old.batches, batches)
        if key not in self.states or old.updates + 1 >= self.records_per_snapshot:
            s = ShareState(old.state_epoch, start_offset, leader_epoch, merged, old.snapshot_epoch + 1, 0)
            return CoordinatorResult([_snapshot_record(key, s)])
        s = ShareState(old.state_epoch, start_offset, leader_epoch, merged, old.snapshot_epoch, old.updates + 1)
        update = R.encode_value(
            R.SHARE_UPDATE,
            {
                "snapshot_epoch": old.snapshot_epoch,
                "leader_epoch": leader_epoch,
                "start_offset": start_offset,
                "state_batches": _batches_value(batches),
            },
        )
        return CoordinatorResult([CoordinatorRecord(R.encode_key(R.SHARE_UPDATE, *key), update, (key, s))])

    def delete(self, key: tuple) -> CoordinatorResult:
        """Tombstones for the state of ``key``; nothing to write when it has none."""
        if key not in self.states:
            return CoordinatorResult([])
        return CoordinatorResult(
            [(R.encode_key(R.SHARE_SNAPSHOT, *key), None), (R.encode_key(R.SHARE_UPDATE, *key), None)]
        )


def _snapshot_record(key: tuple, s: ShareState) -> CoordinatorRecord:
    value = R.encode_value(
        R.SHARE_SNAPSHOT,
        {
            "snapshot_epoch": s.snapshot_epoch,
            "state_epoch": s.state_epoch,
            "leader_epoch": s.leader_epoch,
            "start_offset": s.start_offset,
            "state_batches": _batches_value(s.batches),
        },
    )
    return CoordinatorRecord(R.encode_key(R.SHARE_SNAPSHOT, *key), value, (key, s))
