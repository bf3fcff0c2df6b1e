"""The file-backed :class:`~kesque.raft.log.RaftLog` and :class:`~kesque.raft.log.QuorumStateStore`.

``FileRaftLog`` is ``__cluster_metadata-0`` in Kafka's layout: the segments, indexes and
``leader-epoch-checkpoint`` of :class:`kesque.storage.unified_log.UnifiedLog`, holding RecordBatch v2 batches
encoded by :mod:`kesque.raft.batches` (each batch's partition leader epoch is its records'
epoch; a new leader's LeaderChange control batch opens its epoch). The contract is the
in-memory log's: :meth:`FileRaftLog.flush` makes everything appended durable (fsync) and moves
:meth:`durable_end_offset`; a truncation is applied to the files at once. The flush also comes
in three steps (``begin_flush`` / ``FileFlushJob.run`` / ``end_flush``) so that the server runs
the fsyncs in a worker thread: the job holds duplicates of the segment file descriptors taken
on the loop, so a segment closed, rolled or deleted meanwhile never leaves the thread with a
stale descriptor, and ``end_flush`` moves the recovery point to the end noted at the start,
or to the lowest truncation since, whichever is lower. Only ``.log`` files are synced: the
indexes are rebuilt by the recovery every open does. On open the log
always recovers from the start of what was not known durable, as Kafka's ``LogLoader`` does
after an unclean shutdown: a torn or corrupt tail batch is cut off, so the log is a prefix of
what was written (KRaft reads no high watermark from disk, so nothing else needs restoring).

``FileQuorumStateStore`` is the ``quorum-state`` file, written as Kafka's
``FileQuorumStateStore`` writes it: one line of compact JSON (``QuorumStateData`` v1 plus
``data_version``), into ``quorum-state.tmp``, fsynced, then renamed over the old file (and
the directory fsynced), so a crash leaves the old state or the new one, never a torn file.
"""

from __future__ import annotations

import bisect
import os
import time

from ..config.topic import LogConfig
from ..storage.checkpoint import atomic_write, fsync_dir
from ..storage.unified_log import UnifiedLog
from . import batches, snapshot
from .log import NO_TRUNCATION, ElectionState, FlushJob, Record, SnapshotId

METADATA_PARTITION = "__cluster_metadata-0"
QUORUM_STATE = "quorum-state"
SEGMENT_BYTES = 1024 * 1024 * 1024  # metadata.log.segment.bytes' default


def _now_ms() -> int:
    return int(time.time() * 1000)


class FileFlushJob(FlushJob):
    """The blocking half of a flush: fsync duplicated descriptors (and directories). Touches no
    Python state of the log, so it may run in a worker thread while the loop appends."""

    __slots__ = ("fds", "dirs")

    def __init__(self, end: int, fds: list[int], dirs: list[str]):
        super().__init__(end)
        self.fds = fds
        self.dirs = dirs

    def run(self) -> None:
        for fd in self.fds:
            os.fsync(fd)
        for d in self.dirs:
            fsync_dir(d)

    def close(self) -> None:
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)


class FileRaftLog:
    """``__cluster_metadata-0`` under ``metadata_dir``. Record values must be ``bytes`` or
    control records (:class:`~kesque.raft.log.LeaderChange`)."""

    def __init__(self, metadata_dir: str, *, segment_bytes: int = SEGMENT_BYTES, clock=_now_ms):
        self.clock = clock
        self.path = os.path.join(metadata_dir, METADATA_PARTITION)
        cfg = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, cleanup_policy=("delete",))
        # never trust a clean-shutdown marker: recovery scans the segments and cuts a torn tail
        os.makedirs(self.path, exist_ok=True)
        self.snapshots = snapshot.list_snapshots(self.path)  # deletes partial ones
        self.flush_floor = NO_TRUNCATION  # lowest truncation point since the flush in flight began
        latest = self.latest_snapshot()
        self.log = UnifiedLog(
            self.path,
            "__cluster_metadata",
            0,
            cfg,
            had_clean_shutdown=False,
            recovery_point=0,
            log_start_offset=latest.end_offset if latest else 0,
            now_ms=clock(),
        )
        if latest:
            self._delete_before(latest)
        # what recovery kept is the durable prefix: fsync it once, so that the node may report
        # it (UnifiedLog leaves the recovery point behind until a flush)
        self.log.flush()

    # -- reads -------------------------------------------------------------------------------
    def end_offset(self) -> int:
        return self.log.log_end_offset

    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def durable_end_offset(self) -> int:
        return min(self.log.recovery_point, self.log.log_end_offset)

    def last_fetched_epoch(self) -> int:
        if self.log.leader_epoch_cache.entries:
            return self.log.latest_epoch()
        latest = self.latest_snapshot()
        return latest.epoch if latest else 0

    def read(self, start: int, max_records: int) -> list[Record]:
        out: list[Record] = []
        if max_records <= 0:
            return out
        for h, data in self.log.read_batches(start):
            for r in batches.decode_batch(h, data):
                if r.offset >= start:
                    out.append(r)
                    if len(out) == max_records:
                        return out
        return out

    def epoch_at(self, offset: int) -> int:
        latest = self.latest_snapshot()
        if latest is not None and offset == latest.end_offset - 1:
            return latest.epoch
        return self.log.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, its end offset); (0, 0) when none."""
        entries = self.log.leader_epoch_cache.entries
        i = bisect.bisect_right([e for e, _ in entries], epoch) - 1
        if i < 0:
            latest = self.latest_snapshot()
            if latest is not None and latest.epoch <= epoch:
                return latest.epoch, entries[0][1] if entries else self.end_offset()
            return 0, 0
        end = entries[i + 1][1] if i + 1 < len(entries) else self.end_offset()
        return entries[i][0], end

    # -- writes ------------------------------------------------------------------------------
    def append(self, epoch: int, values: list) -> int:
        """Leader append of one batch (a control record gets a batch of its own)."""
        if epoch < self.last_fetched_epoch():
            raise ValueError(f"epoch {epoch} below the log's latest epoch {self.last_fetched_epoch()}")
        start = self.end_offset()
        self._write([Record(start + i, epoch, v) for i, v in enumerate(values)])
        return self.end_offset() - 1

    def append_as_follower(self, records: list[Record]) -> None:
        if records and records[0].offset != self.end_offset():
            raise ValueError(f"non-contiguous append at {records[0].offset}, end offset {self.end_offset()}")
        self._write(records)

    def _write(self, records: list[Record]) -> None:
        if records:
            self.log.append_raw(batches.encode(records, self.clock()), self.clock())

    def truncate_to(self, offset: int) -> None:
        """Cut the log at ``offset``, which may fall inside a batch (followers re-batch what they
        fetch): the batch's records before it are written again, and flushed with the cut."""
        if offset >= self.end_offset():
            return
        keep: list[Record] = []
        for h, data in self.log.read_batches(offset):
            if h.base_offset < offset:
                keep = [r for r in batches.decode_batch(h, data) if r.offset < offset]
            break
        durable = self.durable_end_offset()
        cut = keep[0].offset if keep else offset
        self.log.truncate_to(cut)
        # what a flush in flight syncs past the cut is not what the log holds there any more
        self.flush_floor = min(self.flush_floor, cut)
        if keep:
            self._write(keep)
            if durable >= offset:
                # rare (a divergence inside a batch of durable records): the records before the
                # cut were durable and must stay so, as they may be committed; one fsync here
                self.log.flush()

    def flush(self) -> None:
        self.log.flush()
        self.flush_floor = NO_TRUNCATION

    def begin_flush(self) -> FileFlushJob:
        """On the loop: note the end offset and duplicate the descriptors of the segments that
        hold unflushed offsets (and take the directories to sync, if segments were created)."""
        local = self.log.local_log
        end = local.log_end_offset
        fds = [os.dup(seg.handle.fd) for seg in local.unflushed_segments()]
        dirs = local.take_dirs_to_sync()
        self.flush_floor = NO_TRUNCATION
        return FileFlushJob(end, fds, dirs)

    def end_flush(self, job: FileFlushJob, ok: bool = True) -> int:
        """On the loop, once ``job.run()`` returned (``ok``) or failed: the recovery point moves
        to the job's end, never past a truncation made while it ran; returns the durable end."""
        job.close()
        log = self.log
        if ok:
            target = min(job.end, self.flush_floor, log.log_end_offset)
            log.recovery_point = max(log.recovery_point, target)
        else:  # sync them next time
            log.local_log.dirs_not_synced(job.dirs)
        self.flush_floor = NO_TRUNCATION
        return self.durable_end_offset()

    # -- snapshots (KIP-630) ---------------------------------------------------------------------
    def latest_snapshot(self) -> SnapshotId | None:
        return max(self.snapshots) if self.snapshots else None

    def create_snapshot(self, end_offset: int, values: list) -> SnapshotId:
        """Write ``<end offset>-<epoch>.checkpoint`` from the application's record values, then
        move the log start offset to it and delete the segments and snapshots below it."""
        start, durable = self.log_start_offset(), self.durable_end_offset()
        if not start < end_offset <= durable:
            raise ValueError(f"snapshot end {end_offset} outside ({start}, {durable}]")
        sid = SnapshotId(end_offset, self.epoch_at(end_offset - 1))
        data = snapshot.encode(sid, values, self.clock())
        snapshot.write(self.path, sid, data)
        self.snapshots.add(sid)
        self._delete_before(sid)
        return sid

    def _delete_before(self, sid: SnapshotId) -> None:
        log = self.log
        if sid.end_offset > log.log_end_offset:
            log.truncate_fully_and_start_at(sid.end_offset)
            self.flush_floor = min(self.flush_floor, sid.end_offset)
        else:
            log.update_high_watermark(max(log.high_watermark, sid.end_offset))
            log.maybe_increment_log_start_offset(sid.end_offset)
            log.delete_old_segments(self.clock())
            log.delete_expired_files(self.clock(), force=True)
        for old in [s for s in self.snapshots if s < sid]:
            snapshot.delete(self.path, old)
            self.snapshots.discard(old)

    def snapshot_bytes(self, sid: SnapshotId) -> bytes | None:
        return snapshot.read(self.path, sid) if sid in self.snapshots else None

    def install_snapshot(self, sid: SnapshotId, data: bytes) -> list:
        """A snapshot fetched from the leader (its file's bytes) replaces the whole log."""
        values = snapshot.decode(data)
        snapshot.write(self.path, sid, data)
        self.snapshots.add(sid)
        self.log.truncate_fully_and_start_at(sid.end_offset)
        self.flush_floor = min(self.flush_floor, sid.end_offset)  # the old log is gone
        self._delete_before(sid)
        return values

    def snapshot_values(self, sid: SnapshotId) -> list:
        return snapshot.decode(snapshot.read(self.path, sid))

    def close(self) -> None:
        self.log.flush()
        self.log.close()


class FileQuorumStateStore:
    """The ``quorum-state`` file in ``metadata_dir`` (Kafka's ``FileQuorumStateStore``)."""

    def __init__(self, metadata_dir: str):
        self.path = os.path.join(metadata_dir, QUORUM_STATE)

    def read(self) -> ElectionState | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                line = f.readline()
        except FileNotFoundError:
            return None
        if not line:
            raise ValueError(
                f"Error while reading the Quorum status from the file {self.path}: File ended prematurely."
            )
        return ElectionState.from_json(line)

    def write(self, state: ElectionState) -> None:
        atomic_write(self.path, state.to_json())

    def clear(self) -> None:
        for p in (self.path, self.path + ".tmp"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
