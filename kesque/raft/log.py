"""What the Raft state machine needs from storage: a replicated log and a quorum-state store.

Both are interfaces (``RaftLog``, ``QuorumStateStore``) with an in-memory implementation used
by the simulator and the unit tests. The in-memory log keeps a *durable* end offset: what
``flush`` made durable survives :meth:`MemoryRaftLog.crash`; the rest is lost (or, with a torn
tail, a random prefix of it survives, as a crash in the middle of a write leaves it). The file
implementations (``__cluster_metadata-0`` segments, ``.checkpoint`` snapshots and the
``quorum-state`` JSON file) are in :mod:`kesque.raft.file_log`.

Flushing is split in three so that the fsync can run off the event loop: ``begin_flush`` (on
the loop) notes the end offset X and returns a :class:`FlushJob`; ``job.run()`` is the blocking
part (the fsyncs, safe in a worker thread while the loop appends: it touches nothing but file
descriptors); ``end_flush(job)`` (on the loop again) makes the log durable up to X, or up to the
lowest point the log was truncated to since the flush began, whichever is lower: an fsync makes
durable only what was written before it started, and records written again after a truncation
are new writes. One flush at a time per log; ``flush()`` does all three at once.

Snapshots (KIP-630): a snapshot holds the application's state after every record below its end
offset; creating or installing one moves the log start offset to that end and drops the records
below it. The latest snapshot's epoch stands for the records it replaced (``epoch_at`` of its
last offset, ``end_offset_for_epoch``, ``last_fetched_epoch`` of an empty log).

Offsets are Kafka's: a record's offset, the log's *end offset* (the next offset to be written).
An epoch's *end offset* is the start offset of the next epoch in the log, or the log end offset
for the latest epoch: the leader epoch cache, as ``LeaderEpochFileCache.endOffsetFor``.
"""

from __future__ import annotations

import bisect
import json
import pickle
from dataclasses import dataclass, field
from typing import Any, Protocol

NO_TRUNCATION = 1 << 62
NO_DIRECTORY_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID, base64


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """The control record a new leader writes first in its epoch (Kafka's LeaderChangeMessage)."""

    leader_id: int
    voters: tuple = ()
    granting_voters: tuple = ()


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of the replicated log. ``value`` is the application's (``bytes`` in the file
    log, anything in memory) or a control record (:class:`LeaderChange`, ``batches.ControlRecord``)."""

    offset: int
    epoch: int
    value: Any
    # the size of the batch on disk, on the first record read from each batch of a file log (0
    # elsewhere): what Kafka counts for metadata.log.max.record.bytes.between.snapshots
    batch_bytes: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot holds every record below ``end_offset``; ``epoch`` is that of the last one."""

    end_offset: int
    epoch: int


class RaftLog(Protocol):
    def end_offset(self) -> int: ...
    def log_start_offset(self) -> int: ...
    def last_fetched_epoch(self) -> int: ...
    def durable_end_offset(self) -> int: ...
    def append(self, epoch: int, values: list) -> int: ...
    def append_as_follower(self, records: list[Record]) -> None: ...
    def read(self, start: int, max_records: int) -> list[Record]: ...
    def truncate_to(self, offset: int) -> None: ...
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...
    def epoch_at(self, offset: int) -> int: ...
    def flush(self) -> None: ...
    def begin_flush(self) -> FlushJob: ...
    def end_flush(self, job: FlushJob) -> int: ...
    # snapshots (KIP-630): written whole and durable at once; the log start moves to the latest
    def latest_snapshot(self) -> SnapshotId | None: ...
    def create_snapshot(self, end_offset: int, values: list) -> SnapshotId: ...
    def snapshot_bytes(self, sid: SnapshotId) -> bytes | None: ...
    def install_snapshot(self, sid: SnapshotId, data: bytes) -> list: ...
    def snapshot_values(self, sid: SnapshotId) -> list: ...


class FlushJob:
    """One flush of a log up to ``end`` (the log end offset when it began). ``run`` is the
    blocking part; the in-memory log has none."""

    __slots__ = ("end",)

    def __init__(self, end: int):
        self.end = end

    def run(self) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryRaftLog:
    """A list of records from the log start offset, a leader epoch cache, a durable watermark,
    and snapshots (kept as pickled value lists: their bytes are what FetchSnapshot carries)."""

    __slots__ = ("records", "start", "epochs", "starts", "durable", "truncated_to", "snapshots", "flush_floor")

    def __init__(self):
        self.records: list[Record] = []  # records[i].offset == start + i
        self.start = 0
        self.epochs: list[int] = []  # leader epoch cache: epochs[i] starts at starts[i]
        self.starts: list[int] = []
        self.durable = 0
        self.truncated_to = NO_TRUNCATION  # lowest truncation point since the simulator last looked
        self.snapshots: dict[SnapshotId, bytes] = {}
        self.flush_floor = NO_TRUNCATION  # lowest truncation point since the flush in flight began

    # -- reads -------------------------------------------------------------------------------
    def end_offset(self) -> int:
        return self.start + len(self.records)

    def log_start_offset(self) -> int:
        return self.start

    def durable_end_offset(self) -> int:
        return self.durable

    def last_fetched_epoch(self) -> int:
        if self.epochs:
            return self.epochs[-1]
        snap = self.latest_snapshot()
        return snap.epoch if snap else 0

    def read(self, start: int, max_records: int) -> list[Record]:
        i = max(start - self.start, 0)
        return self.records[i : max(start + max_records - self.start, 0)]

    def epoch_at(self, offset: int) -> int:
        if offset < self.start:
            snap = self.latest_snapshot()
            if snap is not None and offset == snap.end_offset - 1:
                return snap.epoch
            raise IndexError(f"offset {offset} is below the log start offset {self.start}")
        return self.records[offset - self.start].epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, its end offset); (0, 0) when none. The
        latest snapshot's epoch counts as in the log, ending at the first epoch after it."""
        i = bisect.bisect_right(self.epochs, epoch) - 1
        if i < 0:
            snap = self.latest_snapshot()
            if snap is not None and snap.epoch <= epoch:
                return snap.epoch, self.starts[0] if self.starts else self.end_offset()
            return 0, 0
        end = self.starts[i + 1] if i + 1 < len(self.starts) else self.end_offset()
        return self.epochs[i], end

    # -- writes ------------------------------------------------------------------------------
    def _put(self, epoch: int, value) -> None:
        end = self.end_offset()
        if not self.epochs or self.epochs[-1] != epoch:
            if epoch < self.last_fetched_epoch():
                raise ValueError(f"epoch {epoch} below the log's latest epoch {self.last_fetched_epoch()}")
            self.epochs.append(epoch)
            self.starts.append(end)
        self.records.append(Record(end, epoch, value))

    def append(self, epoch: int, values: list) -> int:
        """Leader append; returns the last offset written."""
        for v in values:
            self._put(epoch, v)
        return self.end_offset() - 1

    def append_as_follower(self, records: list[Record]) -> None:
        for r in records:
            if r.offset != self.end_offset():
                raise ValueError(f"non-contiguous append at {r.offset}, end offset {self.end_offset()}")
            self._put(r.epoch, r.value)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset():
            return
        if offset < self.start:
            raise ValueError(f"truncation to {offset}, below the log start offset {self.start}")
        del self.records[offset - self.start :]
        while self.starts and self.starts[-1] >= offset:
            self.starts.pop()
            self.epochs.pop()
        # Truncation is durable at once (Kafka truncates the segment file and the epoch cache
        # before it appends again); the simulator does not model a truncation undone by a crash.
        self.durable = min(self.durable, offset)
        self.truncated_to = min(self.truncated_to, offset)
        self.flush_floor = min(self.flush_floor, offset)

    def flush(self) -> None:
        self.end_flush(self.begin_flush())

    def begin_flush(self) -> FlushJob:
        self.flush_floor = NO_TRUNCATION
        return FlushJob(self.end_offset())

    def end_flush(self, job: FlushJob) -> int:
        """Durable up to the job's end, never past a truncation made while it ran."""
        self.durable = max(self.durable, min(job.end, self.flush_floor, self.end_offset()))
        self.flush_floor = NO_TRUNCATION
        return self.durable

    # -- snapshots -------------------------------------------------------------------------------
    def latest_snapshot(self) -> SnapshotId | None:
        return max(self.snapshots) if self.snapshots else None

    def create_snapshot(self, end_offset: int, values: list) -> SnapshotId:
        """The application's state after the records below ``end_offset`` (flushed ones)."""
        if not self.start < end_offset <= self.durable:
            raise ValueError(f"snapshot end {end_offset} outside ({self.start}, {self.durable}]")
        sid = SnapshotId(end_offset, self.epoch_at(end_offset - 1))
        self.snapshots[sid] = pickle.dumps(values)
        self._delete_before(sid)
        return sid

    def _delete_before(self, sid: SnapshotId) -> None:
        """Move the log start to the snapshot: records, epoch entries, older snapshots go."""
        end = sid.end_offset
        if end <= self.end_offset() and end > self.start:
            del self.records[: end - self.start]
        elif end > self.end_offset():
            self.records = []
            self.durable = end
        self.start = end
        self.durable = max(self.durable, end)
        i = bisect.bisect_right(self.starts, end)
        # the epoch that holds ``end``, if records follow: its entry now starts at ``end``
        keep_epochs, keep_starts = self.epochs[i:], self.starts[i:]
        if i > 0 and self.records and (not keep_starts or keep_starts[0] > end):
            keep_epochs.insert(0, self.epochs[i - 1])
            keep_starts.insert(0, end)
        self.epochs, self.starts = keep_epochs, keep_starts
        for old in [s for s in self.snapshots if s < sid]:
            del self.snapshots[old]

    def snapshot_bytes(self, sid: SnapshotId) -> bytes | None:
        return self.snapshots.get(sid)

    def install_snapshot(self, sid: SnapshotId, data: bytes) -> list:
        """A snapshot fetched from the leader replaces the whole log; returns its values."""
        values = pickle.loads(data)
        self.snapshots[sid] = bytes(data)
        # the old log is gone, also when the snapshot is not ahead of it: the log is the snapshot,
        # durable (as the file log's truncate_fully_and_start_at moves its recovery point there)
        if self.end_offset() > sid.end_offset:  # records past the snapshot are dropped
            self.truncated_to = min(self.truncated_to, sid.end_offset)
        self.records, self.epochs, self.starts = [], [], []
        self.flush_floor = min(self.flush_floor, sid.end_offset)
        self._delete_before(sid)
        self.durable = sid.end_offset
        return values

    def snapshot_values(self, sid: SnapshotId) -> list:
        return pickle.loads(self.snapshots[sid])

    # -- faults (simulator) ------------------------------------------------------------------
    def crash(self, keep_unflushed: int = 0) -> None:
        """Lose what was not flushed, except a prefix of ``keep_unflushed`` records (torn tail)."""
        keep = min(self.durable + keep_unflushed, self.end_offset())
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
        """The line Kafka's ``FileQuorumStateStore`` writes: ``QuorumStateData`` v1 as compact
        JSON in schema order, then ``data_version``, no newline."""
        return json.dumps(
            {
                "leaderId": self.leader_id,
                "leaderEpoch": self.epoch,
                "votedId": self.voted_id,
                "votedDirectoryId": self.voted_directory_id or NO_DIRECTORY_ID,
                "data_version": 1,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ElectionState:
        """Read v1, or v0 (kraft.version 0: no directory ids; its voter list is ignored)."""
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError(f"Deserialized node {text.strip()} is not an object node")
        if "data_version" not in d:
            raise ValueError(f"Deserialized node {text.strip()} does not have data_version field")
        version = d["data_version"]
        if version not in (0, 1):
            raise ValueError(f"data_version ({version}) is not within the min (0) and max (1) supported version")
        vd = d.get("votedDirectoryId")
        return cls(
            d["leaderEpoch"], d.get("leaderId", -1), d.get("votedId", -1), None if vd in (None, NO_DIRECTORY_ID) else vd
        )


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
