"""LogLoader: a partition log's recovery when it opens (Kafka's LogLoader).

In order:

1. leftovers of an interrupted cleaning: ``.deleted``, ``.cleaned`` and ``.tmp`` files go, a
   complete ``.swap`` replacement takes the place of the segments it replaces;
2. the segment files are opened (an index without its ``.log`` file is deleted);
3. after a clean shutdown the indexes are loaded (rebuilt if unusable) and the active
   segment's tail is checked; otherwise every segment from the one holding the recovery
   point onward is scanned and CRC-checked, the first corrupt tail truncated and the later
   segments deleted, the leader epochs of the batches scanned recorded;
4. the log start offset is raised to the first segment (an empty log starts at the
   checkpointed start when that is past what survived), the leader epoch cache is cut to
   the log's range;
5. the producer state is rebuilt: the newest snapshot, then the batches after it.

The loader reads and writes files through the ``os`` module and
:class:`~kesque.storage.segment.LogSegment`, as :class:`~kesque.storage.local_log.LocalLog`
does, so a fault-injecting file layer covers it too.

The producer-state replay (:func:`rebuild_producer_state`, :func:`update_producer_state`) is
shared with :class:`~kesque.storage.unified_log.UnifiedLog` (follower appends, truncation), as
Kafka's LogLoader uses UnifiedLog.rebuildProducerState.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass

from ..records import batch as rb
from ..records.records import CONTROL_COMMIT, read_end_txn_marker
from .checkpoint import fsync_dir
from .leader_epoch import LeaderEpochFileCache
from .local_log import SEGMENT_FILE, SEGMENT_FILES, LocalLog, maybe_handle_io_exception
from .producer_state import ProducerStateManager
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)


def _file_offset(name: str) -> int:
    return int(name.split(".", 1)[0])


def _next_offset_of_file(path: str, base: int) -> int:
    """Offset after the last whole batch of a segment file (its base when it has none)."""
    next_offset = base
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size, pos = os.fstat(fd).st_size, 0
        while pos + rb.HEADER_SIZE <= size:
            h = rb.read_header(os.pread(fd, rb.HEADER_SIZE, pos))
            if h.size < rb.HEADER_SIZE or pos + h.size > size:
                break
            next_offset, pos = h.next_offset, pos + h.size
    finally:
        os.close(fd)
    return next_offset


# ====================================================================== producer state replay
def complete_txn(
    ps: ProducerStateManager,
    seg: LogSegment,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    offset: int,
    timestamp: int,
    high_watermark: int,
) -> None:
    """A transaction marker at ``offset`` in ``seg``: close the producer's transaction, and
    list it in the segment's transaction index when it was aborted."""
    completed = ps.append_marker(producer_id, epoch, commit, coordinator_epoch, offset, timestamp)
    if completed is None:
        return
    if completed.aborted:
        seg.txn_index.append(
            AbortedTxn(
                producer_id, completed.first_offset, completed.last_offset, ps.last_stable_offset_after(completed)
            )
        )
    ps.complete_txn(completed, high_watermark)


def update_producer_state(
    ps: ProducerStateManager, seg: LogSegment, h: rb.BatchHeader, data, high_watermark: int
) -> None:
    """Bring the producer state (and, for ABORT markers, the segment's transaction index)
    up to date with a batch already in the log: recovery and follower appends. ``data``: the
    batch's bytes when it is a control batch (None otherwise)."""
    if h.producer_id >= 0:
        if not h.is_control:
            ps.update(
                h.producer_id,
                h.producer_epoch,
                h.last_sequence,
                h.last_offset,
                h.last_offset_delta,
                h.max_timestamp,
                h.is_transactional,
            )
        elif data is not None:
            marker = read_end_txn_marker(memoryview(data), h)
            if marker is not None:
                complete_txn(
                    ps,
                    seg,
                    h.producer_id,
                    h.producer_epoch,
                    marker[0] == CONTROL_COMMIT,
                    marker[1],
                    h.base_offset,
                    h.max_timestamp,
                    high_watermark,
                )
    ps.last_map_offset = max(ps.last_map_offset, h.next_offset)


def rebuild_producer_state(
    local: LocalLog,
    ps: ProducerStateManager,
    log_start_offset: int,
    high_watermark: int,
    replay_from: int | None = None,
) -> None:
    """Newest producer snapshot at or below the log end (and at or below ``replay_from``,
    the first offset whose ``.txnindex`` recovery rebuilds), then replay the batches after it."""
    log_end_offset = local.log_end_offset
    limit = log_end_offset if replay_from is None else min(replay_from, log_end_offset)
    start = ps.load_latest(limit)
    start = max(start, log_start_offset)
    replayed = 0
    i = max(0, bisect_right(local.bases, start) - 1)
    for seg in local.segments[i:]:
        found = seg.find_batch(start)
        if not found:
            continue
        for pos, h in seg.iter_headers(found[0]):
            if h.last_offset >= start:
                update_producer_state(ps, seg, h, seg.pread(pos, h.size) if h.is_control else None, high_watermark)
                replayed += 1
    ps.last_map_offset = log_end_offset
    ps.on_high_watermark(high_watermark)
    if replayed:
        ps.take_snapshot(log_end_offset, sync=False)  # as Kafka's rebuildProducerState
        log.info("%s: rebuilt producer state from offset %d (%d batches replayed)", local.tp, start, replayed)


# ====================================================================== the loader
@dataclass(slots=True)
class LoadedLogOffsets:
    log_start_offset: int
    high_watermark: int


class LogLoader:
    """Loads ``local_log``'s directory into it (its segments and recovery point) and brings
    ``leader_epoch_cache`` and ``producer_state`` in line with what survived; :meth:`load`
    returns the log start offset and the high watermark to start with."""

    def __init__(
        self,
        local_log: LocalLog,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        *,
        log_start_offset: int,
        had_clean_shutdown: bool,
        now_ms: int,
    ):
        self.local_log = local_log
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.log_start_offset = log_start_offset
        self.high_watermark = 0
        self.had_clean_shutdown = had_clean_shutdown
        self.now_ms = now_ms
        self.tp = local_log.tp

    def load(self) -> LoadedLogOffsets:
        local = self.local_log
        self._complete_swaps()
        for base in self._segment_bases():
            local.add_segment(local.open_segment(base, create=False, now_ms=self.now_ms))
        if not local.segments:
            start = max(self.log_start_offset, 0)
            local.add_segment(local.open_segment(start, create=True, now_ms=self.now_ms))
            local.recovery_point = start
            return LoadedLogOffsets(start, start)

        if self.had_clean_shutdown:
            for seg in local.segments:
                if not seg.load_indexes():
                    log.info("%s: rebuilding indexes of %s", self.tp, seg.log_path)
                    seg.recover()
            active = local.active_segment
            if not active.tail_is_intact():
                log.warning(
                    "%s: the tail of %s is torn or corrupt despite the clean shutdown marker; recovering it",
                    self.tp,
                    os.path.basename(active.log_path),
                )
                active.recover()
            local.recovery_point = local.log_end_offset
            replay_from = local.log_end_offset
        else:
            replay_from = self._recover()
            # as Kafka's LogLoader: only a flush advances the recovery point, so a crash before
            # the next flush scans these segments again; no fsync per partition here (10,000
            # partitions cost minutes of fsyncs)
            local.recovery_point = min(local.recovery_point, local.log_end_offset)
        self.log_start_offset = max(self.log_start_offset, local.segments[0].base_offset)
        if self.log_start_offset > local.log_end_offset:
            # the checkpointed start is past what survived (DeleteRecords or retention above
            # data lost in a crash): start empty there, as Kafka's LogLoader, so offsets below
            # it are never handed out again
            log.warning(
                "%s: deleting all segments because the log end offset %d is smaller than the log start offset %d",
                self.tp,
                local.log_end_offset,
                self.log_start_offset,
            )
            self._truncate_fully_and_start_at(self.log_start_offset)
        log_end_offset = local.log_end_offset
        self.leader_epoch_cache.truncate_from_end(log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), log_end_offset)
        rebuild_producer_state(local, self.producer_state, self.log_start_offset, self.high_watermark, replay_from)
        return LoadedLogOffsets(self.log_start_offset, self.high_watermark)

    def _segment_bases(self) -> list[int]:
        """Base offsets of the segment files, sorted; indexes without a ``.log`` file go."""
        dir_path = self.local_log.dir
        bases = []
        for name in os.listdir(dir_path):
            m = SEGMENT_FILE.match(name)
            if m:
                bases.append(int(m.group(1)))
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                base = name.split(".")[0]
                if not os.path.exists(os.path.join(dir_path, base + LOG_SUFFIX)):
                    log.info("%s: deleting index %s without a log file", self.tp, name)
                    os.unlink(os.path.join(dir_path, name))
        bases.sort()
        return bases

    def _complete_swaps(self) -> None:
        """Leftovers of an interrupted cleaning (Kafka's LogLoader rules): ``.deleted`` and
        ``.cleaned`` files go (a ``.cleaned`` segment was never complete); a ``.swap`` file at or
        past the lowest ``.cleaned`` offset belongs to an unfinished operation and goes too. The
        remaining ``.swap`` segments are complete replacements: the regular segment files whose
        base lies in [lowest swap base, highest swap end) are the ones they replace and are
        deleted, then the ``.swap`` suffixes are dropped."""
        dir_path = self.local_log.dir
        names = sorted(os.listdir(dir_path))
        min_cleaned = min((_file_offset(n) for n in names if n.endswith(CLEANED_SUFFIX)), default=None)
        swaps = []
        for name in names:
            path = os.path.join(dir_path, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                log.info("%s: deleting leftover file %s", self.tp, name)
                os.unlink(path)
            elif name.endswith(SWAP_SUFFIX):
                if min_cleaned is not None and _file_offset(name) >= min_cleaned:
                    log.info("%s: deleting invalid swap file %s (an unfinished cleaning)", self.tp, name)
                    os.unlink(path)
                else:
                    swaps.append(name)
        if not swaps:
            return
        lo, hi = 1 << 63, -1
        for name in swaps:
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                base = _file_offset(name)
                lo = min(lo, base)
                hi = max(hi, _next_offset_of_file(os.path.join(dir_path, name), base))
        for name in os.listdir(dir_path):
            if SEGMENT_FILES.match(name) and lo <= _file_offset(name) < hi:
                log.info("%s: deleting %s, replaced by an interrupted swap", self.tp, name)
                os.unlink(os.path.join(dir_path, name))
        for name in swaps:
            log.info("%s: recovering file %s by renaming from %s files", self.tp, name, SWAP_SUFFIX)
            os.replace(os.path.join(dir_path, name), os.path.join(dir_path, name[: -len(SWAP_SUFFIX)]))
        fsync_dir(dir_path)

    def _recover(self) -> int:
        """Scan segments from the recovery point; truncate the first corrupt tail. Returns the
        base of the first segment scanned: its ``.txnindex`` and the later ones are reset, to be
        rebuilt by the producer-state replay from there (as Kafka's LogSegment.recover does; an
        entry lost in a crash while its ABORT marker survived would expose aborted records)."""
        local = self.local_log
        start_index = max(0, bisect_right(local.bases, local.recovery_point) - 1)
        for seg in local.segments[:start_index]:
            if not seg.load_indexes():
                seg.recover()
        epoch_cache = self.leader_epoch_cache
        epochs_before = list(epoch_cache.entries)

        def on_batch(h: rb.BatchHeader, _data) -> None:
            if h.partition_leader_epoch >= 0 and h.partition_leader_epoch > epoch_cache.latest_epoch():
                epoch_cache.assign(h.partition_leader_epoch, h.base_offset, flush=False)

        i = start_index
        while i < len(local.segments):
            seg = local.segments[i]
            log.info("%s: recovering segment %s", self.tp, os.path.basename(seg.log_path))
            seg.txn_index.reset()
            truncated = seg.recover(on_batch)
            if truncated and i + 1 < len(local.segments):
                for later in local.segments[i + 1 :]:
                    log.warning(
                        "%s: deleting segment %s after corrupt tail of %s",
                        self.tp,
                        os.path.basename(later.log_path),
                        os.path.basename(seg.log_path),
                    )
                    later.delete_files()
                del local.segments[i + 1 :]
                del local.bases[i + 1 :]
                break
            i += 1
        if epoch_cache.entries != epochs_before:
            epoch_cache.flush()
        return local.segments[start_index].base_offset if start_index < len(local.segments) else local.log_end_offset

    @maybe_handle_io_exception("truncating the log")
    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self.local_log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_and_reload(offset, offset)
        self.producer_state.clear(offset)
