"""LocalLog: the segments of one partition directory (Kafka's LocalLog).

It knows files, not offsets' meaning: the list of segments (the last one active) and their
base offsets, the directory and the log dir holding it, the recovery point (everything below
it is fsynced) and the segments renamed ``.deleted`` that wait for ``file.delete.delay.ms``.
Its operations are the ones that touch those files: append to the active segment, roll, read
byte regions, truncate, remove and replace segments, flush, close and delete. The log start
offset, the high watermark, producer state, the leader epoch cache and every decision about
when to roll, retain or truncate belong to :class:`~kesque.storage.unified_log.UnifiedLog`.

Disk errors (KIP-112): :func:`maybe_handle_io_exception` guards the UnifiedLog and LogLoader
operations that reach these files. The first ``OSError`` fails the log (``io_error``) and, with
the broker's LogDirFailureChannel, takes the whole log dir offline; from then on no operation
touches the files again in this process.

File access goes through the ``os`` module and :class:`~kesque.storage.segment.LogSegment`,
the layer the fault-injecting tests (``tests/faultfs.py``, ``tests/powerloss.py``) wrap.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from ..config.topic import LogConfig
from .checkpoint import fsync_dir
from .log_dir_failure import KafkaStorageError, LogDirFailureChannel, offline_error
from .segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment

log = logging.getLogger(__name__)

SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
SEGMENT_FILES = re.compile(r"^\d{20}\.(log|index|timeindex|txnindex)$")
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"  # a replica being moved into this log dir (AlterReplicaLogDirs)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``topic-3`` -> ("topic", 3); None for other names (incl. ``…-delete`` dirs)."""
    if name.endswith(DELETE_DIR_SUFFIX) or "." in name.rsplit("-", 1)[-1]:
        return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def maybe_handle_io_exception(what: str):
    """A method that touches the disk, as Kafka's maybeHandleIOException, on any object whose
    ``local_log`` is the :class:`LocalLog` concerned: refused once that log (or its log dir) has
    failed; an ``OSError`` fails the log and its dir (the channel's handler takes the dir
    offline) and reaches the caller as KAFKA_STORAGE_ERROR. Nothing is written to a log after a
    failed write: a partial batch stays the last bytes of its segment, which recovery truncates
    at the next start."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            local = self.local_log
            if local.io_error is not None or (
                local.dir_failure is not None and local.dir_failure.has_offline_log_dir(local.log_dir)
            ):
                raise offline_error(local.log_dir)
            try:
                return fn(self, *args, **kwargs)
            except OSError as e:
                raise local.failed(f"Error while {what} for {local.tp} in dir {local.log_dir}", e) from e

        return wrapper

    return deco


class SegmentsChangedError(Exception):
    """Segments a cleaning copied left the log before the swap (retention, truncation)."""


@dataclass(slots=True)
class FetchData:
    """Bytes to send for one partition: ``(handle, position, size)`` regions of segments."""

    regions: list = field(default_factory=list)
    size: int = 0
    first_offset: int = -1
    upper_bound: int = -1  # end of the range read: segment end, capped by the fetch's max offset (LSO)


class LocalLog:
    # test-only switch (the simulator's --bug keep_writing_after_io_error): an I/O error fails the
    # call and nothing more, as if it were transient; the log and its dir stay online and take the
    # next writes (the rule broken: nothing is written to a log dir after its first failed write)
    keep_writing_after_io_error = False

    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        tp: str,
        *,
        recovery_point: int = 0,
        dir_failure: LogDirFailureChannel | None = None,
    ):
        self.dir = dir_path
        self.log_dir = os.path.dirname(os.path.abspath(dir_path))  # the log dir holding it
        self.config = config
        self.tp = tp
        # the broker's LogDirFailureChannel (None: a log on its own); io_error: the first
        # failed disk operation of this log (it takes no more writes in this process)
        self.dir_failure = dir_failure
        self.io_error: str | None = None
        os.makedirs(dir_path, exist_ok=True)
        self.segments: list[LogSegment] = []
        self.bases: list[int] = []  # the segments' base offsets, for bisect
        self.recovery_point = recovery_point
        self.pending_deletes: list[tuple[int, LogSegment]] = []  # (due ms, segment renamed .deleted)
        # directory entries to fsync at the next flush (files created since the last one), and
        # whether this process has synced the partition directory's own entry in the log dir
        self._dir_dirty = True
        self._parent_synced = False

    # ================================================================== failure
    def failed(self, msg: str, e: OSError) -> KafkaStorageError:
        if self.keep_writing_after_io_error:
            log.error("%s: %s", msg, e)
            return KafkaStorageError(f"{msg}: {e}")
        if self.io_error is None:
            self.io_error = f"{msg}: {e}"
        if self.dir_failure is not None:
            self.dir_failure.maybe_add_offline_log_dir(self.log_dir, msg, e)
        else:
            log.error("%s: %s", msg, e)
        return KafkaStorageError(f"{msg}: {e}")

    @property
    def offline(self) -> bool:
        return self.io_error is not None or (
            self.dir_failure is not None and self.dir_failure.has_offline_log_dir(self.log_dir)
        )

    # ================================================================== segments
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].read_end_offset()

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def open_segment(self, base: int, create: bool, now_ms: int) -> LogSegment:
        cfg = self.config
        seg = LogSegment(
            self.dir,
            base,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            create=create,
            now_ms=now_ms,
        )
        self._dir_dirty |= create
        jitter = cfg.segment_jitter_ms
        seg.roll_jitter_ms = random.randrange(min(jitter, cfg.segment_ms)) if jitter > 0 else 0
        return seg

    def add_segment(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self.bases.append(seg.base_offset)

    def position_of(self, offset: int) -> tuple[int, int]:
        """(segment index, position) of the batch starting at ``offset`` (a batch boundary)."""
        if offset >= self.log_end_offset:
            return len(self.segments) - 1, self.active_segment.size
        i = max(0, bisect_right(self.bases, offset) - 1)
        while i < len(self.segments):
            found = self.segments[i].find_batch(offset)
            if found:
                return i, found[0]
            i += 1
        return len(self.segments) - 1, self.active_segment.size

    # ================================================================== append / roll
    def append(self, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int, records) -> None:
        self.segments[-1].append(last_offset, max_timestamp, offset_of_max_timestamp, records)

    def roll(self, now_ms: int, reason: str, next_offset: int | None = None) -> LogSegment | None:
        """Start a new active segment at the log end (or at ``next_offset`` past it: a
        follower's batch after a compaction gap); None when the active segment is empty and
        already starts there."""
        new_base = max(self.log_end_offset, next_offset or 0)
        old = self.segments[-1]
        if old.size == 0 and old.base_offset == new_base:
            return None
        # trim the finished segment's indexes: already exact-size; record the final time entry
        old.time_index.maybe_append(old.max_timestamp_so_far, old.offset_of_max_timestamp, True)
        old.offset_index.close()
        old.time_index.close()
        seg = self.open_segment(new_base, create=True, now_ms=now_ms)
        self.add_segment(seg)
        log.info("%s: rolled new log segment at offset %d (%s)", self.tp, new_base, reason)
        return seg

    # ================================================================== read
    def read(
        self, start_offset: int, max_bytes: int, max_offset: int, min_one_message: bool, max_seg: int, max_pos: int
    ) -> FetchData:
        """Regions from the batch holding ``start_offset``, up to position ``max_pos`` of segment
        ``max_seg`` (where ``max_offset`` lies); whole first batch with ``min_one_message``."""
        bases = self.bases
        segments = self.segments
        i = max(0, bisect_right(bases, start_offset) - 1)
        while i < len(segments) and i <= max_seg:
            seg = segments[i]
            found = seg.find_batch(start_offset)
            if found is not None:
                pos, h = found
                limit = max_pos if i == max_seg else seg.size
                if pos >= limit:
                    return FetchData(first_offset=start_offset)
                size = min(limit - pos, max_bytes)
                if min_one_message and size < h.size:
                    size = min(h.size, limit - pos)
                if size <= 0:
                    return FetchData(first_offset=start_offset)
                upper = bases[i + 1] if i + 1 < len(segments) else self.log_end_offset
                return FetchData([(seg.handle, pos, size)], size, h.base_offset, min(upper, max_offset))
            i += 1
        return FetchData(first_offset=start_offset)

    def read_batches(self, start_offset: int, end: int, max_bytes: int):
        """Yield (BatchHeader, bytes) of whole batches from ``start_offset`` below ``end``."""
        i = max(0, bisect_right(self.bases, start_offset) - 1)
        total = 0
        while i < len(self.segments):
            seg = self.segments[i]
            found = seg.find_batch(start_offset)
            if found:
                pos = found[0]
                for p, h in seg.iter_headers(pos):
                    if h.base_offset >= end or total >= max_bytes:
                        return
                    data = seg.pread(p, h.size)
                    if len(data) < h.size:
                        return
                    total += h.size
                    yield h, data
            i += 1

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the segment holding
        ``fetch_offset`` onward. An entry lives in the segment of its ABORT marker, which may lie
        past ``upper_bound`` (a transaction spanning a roll), so the search goes on through later
        segments until an entry's LSO reaches the bound, as Kafka's collectAbortedTransactions."""
        out: list = []
        i = max(0, bisect_right(self.bases, fetch_offset) - 1)
        for seg in self.segments[i:]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    # ================================================================== truncation
    def truncate_to(self, offset: int) -> bool:
        """Delete the segments starting at or after ``offset`` and cut the active one there.
        False, touching nothing more, when no segment would keep an offset below it (the
        caller then starts the log afresh at ``offset``)."""
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self.bases.pop()
            seg.delete_files()
        if self.segments[-1].base_offset >= offset and len(self.segments) == 1:
            return False
        self.segments[-1].truncate_to(offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start with an empty one at ``offset``."""
        for seg in self.segments:
            seg.delete_files()
        self.segments = []
        self.bases = []
        self.add_segment(self.open_segment(offset, create=True, now_ms=0))
        self.recovery_point = offset

    # ================================================================== removing segments
    def remove_and_delete_segments(self, segs: list[LogSegment], now_ms: int, reason: str) -> None:
        """Take ``segs`` out of the log and rename them ``.deleted`` (their files go after
        file.delete.delay.ms: a queued send may still read them), then sync the directory."""
        for seg in segs:
            self.segments.remove(seg)
            self.bases.remove(seg.base_offset)
            seg.rename_suffix(DELETED_SUFFIX)
            self.pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
            log.info("%s: deleting segment %s due to %s", self.tp, seg.base_offset, reason)
        # the renames must be durable before a checkpoint relies on them: the log start
        # checkpoint has no entry for a log starting at its first segment, so a deleted
        # segment reappearing after a power cut would bring its records back
        fsync_dir(self.dir)

    def replace_segments(
        self, new: LogSegment, old: list[LogSegment], now_ms: int, hook=None, sync: bool = True
    ) -> None:
        """Swap a cleaned segment (files suffixed ``.cleaned``, content fsynced) in for the
        consecutive segments ``old`` it was copied from, as Kafka's replaceSegments: rename it to
        ``.swap`` (from here a crash completes the swap at load), rename the old segments to
        ``.deleted`` (their descriptors stay open for queued sends until file.delete.delay.ms),
        drop the ``.swap`` suffix, and sync the directory (unless ``sync`` is False: the
        background cleaner syncs it on its own thread, off the event loop; until then a power
        cut brings the old segments back, whole). ``hook(stage)`` is a test-only crash point
        after each step."""
        hook = hook or (lambda _stage: None)
        first = self.segments.index(old[0]) if old[0] in self.segments else -1
        if first < 0 or self.segments[first : first + len(old)] != old or old[-1] is self.segments[-1]:
            # retention or a truncation changed the log while it was being cleaned
            raise SegmentsChangedError(f"{self.tp}: the segments cleaned are no longer in the log")
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        hook("swap")
        for seg in old:
            seg.rename_suffix(DELETED_SUFFIX)
            self.pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
        hook("deleted")
        new.change_file_suffixes(SWAP_SUFFIX, "")
        self.segments[first : first + len(old)] = [new]
        self.bases[first : first + len(old)] = [new.base_offset]
        if sync:
            fsync_dir(self.dir)
        hook("done")

    def delete_expired_files(self, now_ms: int, force: bool = False) -> None:
        keep = []
        for due, seg in self.pending_deletes:
            if force or due <= now_ms:
                seg.delete_files()
                log.info("%s: deleted %s", self.tp, seg.log_path)
            else:
                keep.append((due, seg))
        self.pending_deletes = keep

    # ================================================================== flush / close
    def unflushed_segments(self) -> list[LogSegment]:
        """The segments that may hold offsets at or past the recovery point."""
        return self.segments[max(0, bisect_right(self.bases, self.recovery_point) - 1) :]

    def take_dirs_to_sync(self) -> list[str]:
        """The directories whose entries changed since their last sync (this partition's, and
        the log dir's for a partition directory this process has not synced yet), now
        counted as synced: the caller syncs them, or gives them back with
        :meth:`dirs_not_synced`."""
        if not self._dir_dirty:
            return []
        self._dir_dirty = False
        dirs = [self.dir]
        if not self._parent_synced:
            self._parent_synced = True
            dirs.append(os.path.dirname(self.dir))
        return dirs

    def dirs_not_synced(self, dirs: list[str]) -> None:
        """Directories :meth:`take_dirs_to_sync` handed out whose sync failed: next time."""
        if dirs:
            self._dir_dirty = True
            if len(dirs) > 1:
                self._parent_synced = False

    def flush(self, target: int) -> None:
        """fsync every segment holding offsets in [recovery_point, target) and advance the
        recovery point. Segments created since the last flush also need their directory
        entries synced, and a new partition directory its entry in the log dir, or a power
        cut loses them with their fsynced content (Kafka's LocalLog.flush syncs the directory
        after a roll). A ``.txnindex`` created later in a segment needs no more: until a
        roll and its flush move the recovery point past that segment, recovery rescans it."""
        for seg in self.unflushed_segments():
            if seg.base_offset >= target:
                break
            seg.flush()
        for d in self.take_dirs_to_sync():
            fsync_dir(d)
        self.recovery_point = max(self.recovery_point, target)

    def close(self) -> None:
        for seg in self.segments:
            seg.time_index.maybe_append(seg.max_timestamp_so_far, seg.offset_of_max_timestamp, True)
            seg.close()
        self.delete_expired_files(0, force=False)
        for _due, seg in self.pending_deletes:  # their .deleted files go at the next load
            seg.close()

    def close_handles(self) -> None:
        """Close the files without writing anything (a log whose directory was renamed away)."""
        for seg in self.segments:
            seg.close()
        for _due, seg in self.pending_deletes:
            seg.close()

    def delete(self) -> None:
        """Delete the whole log (topic deleted): files of every segment and the directory."""
        for seg in self.segments:
            seg.close()
        self.delete_expired_files(0, force=True)
        for name in os.listdir(self.dir):
            try:
                os.unlink(os.path.join(self.dir, name))
            except IsADirectoryError:
                pass
        os.rmdir(self.dir)
