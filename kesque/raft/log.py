"""What the Raft state machine needs from storage: a replicated log and a quorum-state store.

Both are interfaces (``RaftLog``, ``QuorumStateStore``) with an in-memory implementation used
by the simulator and the unit tests. The in-memory log keeps a *durable* end offset: what
``flush`` made durable survives :meth:`MemoryRaftLog.crash`; the rest is lost (or, with a torn
tail, a random prefix of it survives, as a crash in the middle of a write leaves it). The file
implementations (``__cluster_metadata-0`` segments and the ``quorum-state`` JSON file) come with
the server wiring.

Offsets are Kafka's: a record's offset, the log's *end offset* (the next offset to be written).
An epoch's *end offset* is the start offset of the next epoch in the log, or the log end offset
for the latest epoch: the leader epoch cache, as ``LeaderEpochFileCache.endOffsetFor``.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any, Protocol

NO_TRUNCATION = 1 << 62


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of the replicated log. ``value`` None marks a control record (LeaderChange)."""

    offset: int
    epoch: int
    value: Any


class RaftLog(Protocol):
    def end_offset(self) -> int: ...
    def last_fetched_epoch(self) -> int: ...
    def durable_end_offset(self) -> int: ...
    def append(self, epoch: int, values: list) -> int: ...
    def append_as_follower(self, records: list[Record]) -> None: ...
    def read(self, start: int, max_records: int) -> list[Record]: ...
    def truncate_to(self, offset: int) -> None: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def epoch_at(self, offset: int) -> int: ...
    def flush(self) -> None: ...


class MemoryRaftLog:
    """A list of records with a leader epoch cache and a durable watermark."""

    __slots__ = ("records", "epochs", "starts", "durable", "truncated_to")

    def __init__(self):
        self.records: list[Record] = []
        self.epochs: list[int] = []     # leader epoch cache: epochs[i] starts at starts[i]
        self.starts: list[int] = []
        self.durable = 0
        self.truncated_to = NO_TRUNCATION   # lowest truncation point since the simulator last looked

    # -- reads -------------------------------------------------------------------------------
    def end_offset(self) -> int:
        return len(self.records)

    def durable_end_offset(self) -> int:
        return self.durable

    def last_fetched_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else 0

    def read(self, start: int, max_records: int) -> list[Record]:
        return self.records[start:start + max_records]

    def epoch_at(self, offset: int) -> int:
        return self.records[offset].epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, its end offset); (0, 0) when none."""
        i = bisect.bisect_right(self.epochs, epoch) - 1
        if i < 0:
            return 0, 0
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.records)
        return self.epochs[i], end

    # -- writes ------------------------------------------------------------------------------
    def _put(self, epoch: int, value) -> None:
        if not self.epochs or self.epochs[-1] != epoch:
            if self.epochs and epoch < self.epochs[-1]:
                raise ValueError(f"epoch {epoch} below the log's latest epoch {self.epochs[-1]}")
            self.epochs.append(epoch)
            self.starts.append(len(self.records))
        self.records.append(Record(len(self.records), epoch, value))

    def append(self, epoch: int, values: list) -> int:
        """Leader append; returns the last offset written."""
        for v in values:
            self._put(epoch, v)
        return len(self.records) - 1

    def append_as_follower(self, records: list[Record]) -> None:
        for r in records:
            if r.offset != len(self.records):
                raise ValueError(f"non-contiguous append at {r.offset}, end offset {len(self.records)}")
            self._put(r.epoch, r.value)

    def truncate_to(self, offset: int) -> None:
        if offset >= len(self.records):
            return
        del self.records[offset:]
        while self.starts and self.starts[-1] >= offset:
            self.starts.pop()
            self.epochs.pop()
        # Truncation is durable at once (Kafka truncates the segment file and the epoch cache
        # before it appends again); the simulator does not model a truncation undone by a crash.
        self.durable = min(self.durable, offset)
        self.truncated_to = min(self.truncated_to, offset)

    def flush(self) -> None:
        self.durable = len(self.records)

    # -- faults (simulator) ------------------------------------------------------------------
    def crash(self, keep_unflushed: int = 0) -> None:
        """Lose what was not flushed, except a prefix of ``keep_unflushed`` records (torn tail)."""
        keep = min(self.durable + keep_unflushed, len(self.records))
        self.truncate_to(keep)
        self.durable = keep


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The durable election state: the content of Kafka's ``quorum-state`` file."""

    epoch: int
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: str | None = None

    def to_json(self) -> str:
        """The JSON Kafka writes (``QuorumStateData`` v1, as ``FileQuorumStateStore``)."""
        return json.dumps({
            "leaderId": self.leader_id, "leaderEpoch": self.epoch, "votedId": self.voted_id,
            "votedDirectoryId": self.voted_directory_id or "AAAAAAAAAAAAAAAAAAAAAA",
            "data_version": 1,
        })

    @classmethod
    def from_json(cls, text: str) -> ElectionState:
        d = json.loads(text)
        vd = d.get("votedDirectoryId")
        return cls(d["leaderEpoch"], d.get("leaderId", -1), d.get("votedId", -1),
                   None if vd in (None, "AAAAAAAAAAAAAAAAAAAAAA") else vd)


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None: ...
    def write(self, state: ElectionState) -> None: ...


class MemoryQuorumStateStore:
    """Writes are durable when ``write`` returns (Kafka writes a temp file, fsyncs, renames)."""

    __slots__ = ("state", "writes")

    def __init__(self):
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1
