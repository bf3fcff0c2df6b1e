"""Log: one partition's segments, its offsets and its recovery (Kafka's UnifiedLog,
LocalLog and LogLoader in one place).

Offsets a reader of Kafka will recognise:

* ``log_start_offset`` — first offset still readable (moved by retention, DeleteRecords);
* ``log_end_offset`` (LEO) — next offset to be assigned;
* ``high_watermark`` — first offset not yet replicated to the whole ISR; consumers read
  below it. Kept here as in UnifiedLog; the Partition (replication layer) moves it;
* ``last_stable_offset`` (LSO) — the high watermark, or the first offset of the oldest
  transaction still open (or whose marker is not yet below the HW) if that is lower;
  read_committed consumers read below it and drop aborted transactions, which the
  segments' ``.txnindex`` files list;
* ``recovery_point`` — everything below it is fsynced; after an unclean shutdown,
  segments from the one holding it onward are scanned and CRC-checked.

The class is sans-IO apart from file access: time comes in as ``now_ms`` arguments.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import uuid
from bisect import bisect_right
from dataclasses import dataclass, field

from ..config.topic import LogConfig
from ..errors import ErrorCode, KafkaError
from ..records import batch as rb
from ..records.records import CONTROL_COMMIT, build_end_txn_marker, read_end_txn_marker
from .checkpoint import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, PartitionMetadataFile, fsync_dir
from .leader_epoch import LeaderEpochFileCache
from .log_dir_failure import KafkaStorageError, LogDirFailureChannel, offline_error
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
from .validator import validate_batch

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_SEGMENT_FILES = re.compile(r"^\d{20}\.(log|index|timeindex|txnindex)$")
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"  # a replica being moved into this log dir (AlterReplicaLogDirs)


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


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``topic-3`` -> ("topic", 3); None for other names (incl. ``…-delete`` dirs)."""
    if name.endswith(DELETE_DIR_SUFFIX) or "." in name.rsplit("-", 1)[-1]:
        return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def _io(what: str):
    """A Log operation that touches the disk, as Kafka's maybeHandleIOException: refused once
    this log (or its log dir) has failed; an ``OSError`` fails the log and its dir (the
    channel's handler takes the dir offline) and reaches the caller as KAFKA_STORAGE_ERROR.
    Nothing is written to a log after a failed write: a partial batch stays the last bytes of
    its segment, which recovery truncates at the next start."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            if self.io_error is not None or (self.dir_failure is not None
                                             and self.dir_failure.has_offline_log_dir(self.log_dir)):
                raise offline_error(self.log_dir)
            try:
                return fn(self, *args, **kwargs)
            except OSError as e:
                raise self._failed(f"Error while {what} for {self.tp} in dir {self.log_dir}", e) from e
        return wrapper
    return deco


class SegmentsChangedError(Exception):
    """Segments a cleaning copied left the log before the swap (retention, truncation)."""


@dataclass(slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless LogAppendTime
    log_start_offset: int
    num_records: int
    size: int
    duplicate: bool = False


@dataclass(slots=True)
class FetchData:
    """Bytes to send for one partition: ``(handle, position, size)`` regions of segments."""

    regions: list = field(default_factory=list)
    size: int = 0
    first_offset: int = -1
    upper_bound: int = -1  # end of the range read: segment end, capped by the fetch's max offset (LSO)


class Log:
    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig, *,
                 topic_id: uuid.UUID | None = None, recovery_point: int = 0, log_start_offset: int = 0,
                 had_clean_shutdown: bool = False, now_ms: int = 0,
                 dir_failure: LogDirFailureChannel | None = None):
        self.dir = dir_path
        self.log_dir = os.path.dirname(os.path.abspath(dir_path))  # the log dir holding it
        # the broker's LogDirFailureChannel (None: a log on its own); io_error: the first
        # failed disk operation of this log (it takes no more writes in this process)
        self.dir_failure = dir_failure
        self.io_error: str | None = None
        self.topic = topic
        self.partition = partition
        self.tp = f"{topic}-{partition}"
        self.config = config
        self.topic_id = topic_id
        os.makedirs(dir_path, exist_ok=True)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.high_watermark = 0
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        self.leader_epoch_cache = LeaderEpochFileCache(os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT), self.tp)
        self.producer_state = ProducerStateManager(dir_path, self.tp)
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._hw_position: tuple[int, int] | None = None  # (segment base, position)
        # directory entries to fsync at the next flush (files created since the last one), and
        # whether this process has synced the partition directory's own entry in the log dir
        self._dir_dirty = True
        self._parent_synced = False
        self._load(had_clean_shutdown, now_ms)
        if topic_id is not None:
            self._write_partition_metadata(topic_id)

    def _failed(self, msg: str, e: OSError) -> KafkaStorageError:
        if self.io_error is None:
            self.io_error = f"{msg}: {e}"
        if self.dir_failure is not None:
            self.dir_failure.maybe_add_offline_log_dir(self.log_dir, msg, e)
        else:
            log.error("%s: %s", msg, e)
        return KafkaStorageError(f"{msg}: {e}")

    @property
    def offline(self) -> bool:
        return self.io_error is not None or (self.dir_failure is not None
                                             and self.dir_failure.has_offline_log_dir(self.log_dir))

    # ================================================================== loading
    @_io("writing the partition metadata file")
    def _write_partition_metadata(self, topic_id: uuid.UUID) -> None:
        f = PartitionMetadataFile(os.path.join(self.dir, PARTITION_METADATA))
        try:
            existing = f.read()
        except Exception:
            existing = None
        if existing != topic_id:
            # a new, empty log loses nothing if this file is lost in a crash (it is rewritten
            # at the next start), so creating 50 partitions does not cost 100 fsyncs
            f.write(topic_id, fsync=self.log_end_offset > 0)

    def _load(self, had_clean_shutdown: bool, now_ms: int) -> None:
        self._complete_swaps()
        bases = []
        for name in os.listdir(self.dir):
            m = _SEGMENT_FILE.match(name)
            if m:
                bases.append(int(m.group(1)))
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                base = name.split(".")[0]
                if not os.path.exists(os.path.join(self.dir, base + LOG_SUFFIX)):
                    log.info("%s: deleting index %s without a log file", self.tp, name)
                    os.unlink(os.path.join(self.dir, name))
        bases.sort()
        for base in bases:
            self._add_segment(self._open_segment(base, create=False, now_ms=now_ms))
        if not self.segments:
            start = max(self.log_start_offset, 0)
            self._add_segment(self._open_segment(start, create=True, now_ms=now_ms))
            self.recovery_point = start
            self.log_start_offset = start
            self.high_watermark = start
            return

        if had_clean_shutdown:
            for seg in self.segments:
                if not seg.load_indexes():
                    log.info("%s: rebuilding indexes of %s", self.tp, seg.log_path)
                    seg.recover()
            active = self.active_segment
            if not active.tail_is_intact():
                log.warning("%s: the tail of %s is torn or corrupt despite the clean shutdown marker; recovering it",
                            self.tp, os.path.basename(active.log_path))
                active.recover()
            self.recovery_point = self.log_end_offset
            replay_from = self.log_end_offset
        else:
            replay_from = self._recover(now_ms)
            # as Kafka's LogLoader: only a flush advances the recovery point, so a crash before
            # the next flush scans these segments again; no fsync per partition here (10,000
            # partitions cost minutes of fsyncs)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            # the checkpointed start is past what survived (DeleteRecords or retention above
            # data lost in a crash): start empty there, as Kafka's LogLoader, so offsets below
            # it are never handed out again
            log.warning("%s: deleting all segments because the log end offset %d is smaller than the log start "
                        "offset %d", self.tp, self.log_end_offset, self.log_start_offset)
            self.truncate_fully_and_start_at(self.log_start_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), self.log_end_offset)
        self._rebuild_producer_state(replay_from)

    def _complete_swaps(self) -> None:
        """Leftovers of an interrupted cleaning (Kafka's LogLoader rules): ``.deleted`` and
        ``.cleaned`` files go (a ``.cleaned`` segment was never complete); a ``.swap`` file at or
        past the lowest ``.cleaned`` offset belongs to an unfinished operation and goes too. The
        remaining ``.swap`` segments are complete replacements: the regular segment files whose
        base lies in [lowest swap base, highest swap end) are the ones they replace and are
        deleted, then the ``.swap`` suffixes are dropped."""
        names = sorted(os.listdir(self.dir))
        min_cleaned = min((_file_offset(n) for n in names if n.endswith(CLEANED_SUFFIX)), default=None)
        swaps = []
        for name in names:
            path = os.path.join(self.dir, name)
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
                hi = max(hi, _next_offset_of_file(os.path.join(self.dir, name), base))
        for name in os.listdir(self.dir):
            if _SEGMENT_FILES.match(name) and lo <= _file_offset(name) < hi:
                log.info("%s: deleting %s, replaced by an interrupted swap", self.tp, name)
                os.unlink(os.path.join(self.dir, name))
        for name in swaps:
            log.info("%s: recovering file %s by renaming from %s files", self.tp, name, SWAP_SUFFIX)
            os.replace(os.path.join(self.dir, name), os.path.join(self.dir, name[: -len(SWAP_SUFFIX)]))
        fsync_dir(self.dir)

    def _rebuild_producer_state(self, replay_from: int | None = None) -> None:
        """Newest producer snapshot at or below the log end (and at or below ``replay_from``,
        the first offset whose ``.txnindex`` recovery rebuilds), then replay the batches after it."""
        ps = self.producer_state
        limit = self.log_end_offset if replay_from is None else min(replay_from, self.log_end_offset)
        start = ps.load_latest(limit)
        start = max(start, self.log_start_offset)
        replayed = 0
        i = max(0, bisect_right(self._bases, start) - 1)
        for seg in self.segments[i:]:
            found = seg.find_batch(start)
            if not found:
                continue
            for pos, h in seg.iter_headers(found[0]):
                if h.last_offset >= start:
                    self._replay_batch(seg, h, seg.pread(pos, h.size) if h.is_control else None)
                    replayed += 1
        ps.last_map_offset = self.log_end_offset
        ps.on_high_watermark(self.high_watermark)
        if replayed:
            ps.take_snapshot(self.log_end_offset, sync=False)  # as Kafka's rebuildProducerState
            log.info("%s: rebuilt producer state from offset %d (%d batches replayed)", self.tp, start, replayed)

    def _replay_batch(self, seg: LogSegment, h: rb.BatchHeader, data) -> None:
        """Bring the producer state (and, for ABORT markers, the segment's transaction index)
        up to date with a batch already in the log: recovery and follower appends."""
        ps = self.producer_state
        if h.producer_id >= 0:
            if not h.is_control:
                ps.update(h.producer_id, h.producer_epoch, h.last_sequence, h.last_offset, h.last_offset_delta,
                          h.max_timestamp, h.is_transactional)
            elif data is not None:
                marker = read_end_txn_marker(memoryview(data), h)
                if marker is not None:
                    self._complete_txn(seg, h.producer_id, h.producer_epoch, marker[0] == CONTROL_COMMIT, marker[1],
                                       h.base_offset, h.max_timestamp)
        ps.last_map_offset = max(ps.last_map_offset, h.next_offset)

    def _complete_txn(self, seg: LogSegment, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                      offset: int, timestamp: int) -> None:
        ps = self.producer_state
        completed = ps.append_marker(producer_id, epoch, commit, coordinator_epoch, offset, timestamp)
        if completed is None:
            return
        if completed.aborted:
            seg.txn_index.append(AbortedTxn(producer_id, completed.first_offset, completed.last_offset,
                                            ps.last_stable_offset_after(completed)))
        ps.complete_txn(completed, self.high_watermark)

    def _recover(self, now_ms: int) -> int:
        """Scan segments from the recovery point; truncate the first corrupt tail. Returns the
        base of the first segment scanned: its ``.txnindex`` and the later ones are reset, to be
        rebuilt by the producer-state replay from there (as Kafka's LogSegment.recover does; an
        entry lost in a crash while its ABORT marker survived would expose aborted records)."""
        start_index = max(0, bisect_right(self._bases, self.recovery_point) - 1)
        for seg in self.segments[:start_index]:
            if not seg.load_indexes():
                seg.recover()
        epoch_cache = self.leader_epoch_cache
        epochs_before = list(epoch_cache.entries)

        def on_batch(h: rb.BatchHeader, _data) -> None:
            if h.partition_leader_epoch >= 0 and h.partition_leader_epoch > epoch_cache.latest_epoch():
                epoch_cache.assign(h.partition_leader_epoch, h.base_offset, flush=False)

        i = start_index
        while i < len(self.segments):
            seg = self.segments[i]
            log.info("%s: recovering segment %s", self.tp, os.path.basename(seg.log_path))
            seg.txn_index.reset()
            truncated = seg.recover(on_batch)
            if truncated and i + 1 < len(self.segments):
                for later in self.segments[i + 1:]:
                    log.warning("%s: deleting segment %s after corrupt tail of %s", self.tp,
                                os.path.basename(later.log_path), os.path.basename(seg.log_path))
                    later.delete_files()
                del self.segments[i + 1:]
                del self._bases[i + 1:]
                break
            i += 1
        if epoch_cache.entries != epochs_before:
            epoch_cache.flush()
        return self.segments[start_index].base_offset if start_index < len(self.segments) else self.log_end_offset

    def _open_segment(self, base: int, create: bool, now_ms: int) -> LogSegment:
        seg = LogSegment(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                         max_index_size=self.config.segment_index_bytes, create=create, now_ms=now_ms)
        self._dir_dirty |= create
        jitter = self.config.segment_jitter_ms
        seg.roll_jitter_ms = random.randrange(min(jitter, self.config.segment_ms)) if jitter > 0 else 0
        return seg

    def _add_segment(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    @_io("assigning a leader epoch")
    def assign_leader_epoch(self, epoch: int, start_offset: int, fsync: bool = True) -> None:
        self.leader_epoch_cache.assign(epoch, start_offset, fsync=fsync)

    # ================================================================== offsets
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def parent_dir(self) -> str:
        """The log dir holding this partition's directory."""
        return os.path.dirname(self.dir)

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.read_end_offset()

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch()

    def update_high_watermark(self, hw: int) -> None:
        hw = min(max(hw, self.log_start_offset), self.log_end_offset)
        if hw != self.high_watermark:
            self.high_watermark = hw
            self._hw_position = None
            self.producer_state.on_high_watermark(hw)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None or first_unstable >= self.high_watermark:
            return self.high_watermark
        return max(first_unstable, self.log_start_offset)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the segment holding
        ``fetch_offset`` onward. An entry lives in the segment of its ABORT marker, which may lie
        past ``upper_bound`` (a transaction spanning a roll), so the search goes on through later
        segments until an entry's LSO reaches the bound, as Kafka's collectAbortedTransactions."""
        out: list[AbortedTxn] = []
        i = max(0, bisect_right(self._bases, fetch_offset) - 1)
        for seg in self.segments[i:]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    def _position_of(self, offset: int) -> tuple[int, int]:
        """(segment index, position) of the batch starting at ``offset`` (a batch boundary)."""
        if offset >= self.log_end_offset:
            return len(self.segments) - 1, self.active_segment.size
        i = max(0, bisect_right(self._bases, offset) - 1)
        while i < len(self.segments):
            found = self.segments[i].find_batch(offset)
            if found:
                return i, found[0]
            i += 1
        return len(self.segments) - 1, self.active_segment.size

    # ================================================================== append
    def maybe_start_transaction_verification(self, producer_id: int, sequence: int, epoch: int, now_ms: int,
                                             supports_epoch_bump: bool = False):
        """The guard of the producer's pending KIP-890 verification here, started or continued
        (None when its transaction of this epoch is already open: nothing to verify)."""
        ps = self.producer_state
        if self._has_ongoing_transaction(producer_id, epoch):
            return None
        return ps.maybe_create_verification_state(producer_id, sequence, epoch, now_ms, supports_epoch_bump).guard

    def _has_ongoing_transaction(self, producer_id: int, epoch: int) -> bool:
        ps = self.producer_state
        return ps.ongoing_txn_of(producer_id) >= 0 and ps.producers[producer_id].epoch == epoch

    @_io("appending records")
    def append_as_leader(self, buf: memoryview, leader_epoch: int, now_ms: int, verification_guard=None,
                         require_verification: bool = False) -> AppendInfo:
        """Validate one produced batch, check the producer's sequence, assign offsets, append.
        With ``require_verification`` (transaction.partition.verification.enable), a batch that
        would open its producer's transaction here must bring the guard of the verification the
        partition is still waiting on (Kafka's batchMissingRequiredVerification)."""
        v = validate_batch(buf, self.config, now_ms, self.tp)
        h = v.header
        if h.producer_id >= 0:
            ps = self.producer_state
            dup = ps.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                           self.log_end_offset, h.is_transactional,
                           lambda: require_verification and h.is_transactional and not h.is_control
                           and not self._has_ongoing_transaction(h.producer_id, h.producer_epoch)
                           and (verification_guard is None or ps.verification_guard(h.producer_id)
                                is not verification_guard))
            if dup is not None:
                log.debug("%s: duplicate batch from producer %d (seq %d-%d) acknowledged at offset %d", self.tp,
                          h.producer_id, h.base_sequence, h.last_sequence, dup.first_offset)
                return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, -1, self.log_start_offset,
                                  0, 0, duplicate=True)
        info = self._append_validated(v.data, h, leader_epoch, now_ms)
        if h.producer_id >= 0:
            self.producer_state.update(h.producer_id, h.producer_epoch, h.last_sequence, info.last_offset,
                                       h.last_offset_delta, h.max_timestamp, h.is_transactional)
        return info

    @_io("appending a transaction marker")
    def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                          leader_epoch: int, now_ms: int) -> AppendInfo:
        """Write a COMMIT/ABORT marker for a producer as the leader (WriteTxnMarkers): closes
        its open transaction here, indexes it if aborted, and may move the LSO."""
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch, self.log_end_offset)
        batch = build_end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, timestamp=now_ms)
        info = self.append_new_batch(batch, leader_epoch, now_ms)
        self._complete_txn(self.active_segment, producer_id, producer_epoch, commit, coordinator_epoch,
                           info.first_offset, now_ms)
        return info

    def _append_validated(self, data: memoryview, h: rb.BatchHeader, leader_epoch: int, now_ms: int) -> AppendInfo:
        size = h.size
        self._maybe_roll(size, h.max_timestamp, now_ms, self.log_end_offset + h.last_offset_delta)
        base = self.log_end_offset
        rb.patch_offset_and_epoch(data, 0, base, leader_epoch)
        last = base + h.last_offset_delta
        self.active_segment.append(last, h.max_timestamp, last, data[:size])
        if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch():
            self.leader_epoch_cache.assign(leader_epoch, base)
        self.unflushed_messages += h.records_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()
            self.last_flush_ms = now_ms
        return AppendInfo(base, last, h.max_timestamp, h.max_timestamp if h.is_log_append_time else -1,
                          self.log_start_offset, h.records_count, size)

    @_io("appending records")
    def append_raw(self, data: bytes | memoryview, now_ms: int) -> AppendInfo:
        """Append already-offset batches verbatim (replication follower, internal writes that
        assigned their own offsets). Batches must start at the log end offset."""
        mv = memoryview(data)
        first = last = -1
        count = 0
        max_ts = -1
        for pos, h in rb.iter_headers(mv):
            if h.base_offset < self.log_end_offset:
                raise KafkaError(ErrorCode.unknown_server_error,
                                 f"{self.tp}: out of order append at {h.base_offset}, LEO {self.log_end_offset}")
            self._maybe_roll(h.size, h.max_timestamp, now_ms, h.last_offset, h.base_offset)
            self.active_segment.append(h.last_offset, h.max_timestamp, h.last_offset, mv[pos:pos + h.size])
            self._replay_batch(self.active_segment, h, mv[pos:pos + h.size] if h.is_control else None)
            if h.partition_leader_epoch > self.leader_epoch_cache.latest_epoch():
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            if first < 0:
                first = h.base_offset
            last = h.last_offset
            count += h.records_count
            max_ts = max(max_ts, h.max_timestamp)
        self.unflushed_messages += count
        return AppendInfo(first, last, max_ts, -1, self.log_start_offset, count, len(mv))

    @_io("appending records")
    def append_new_batch(self, batch: bytes, leader_epoch: int, now_ms: int) -> AppendInfo:
        """Append a batch the broker built itself (offsets assigned here, no validation)."""
        mv = memoryview(bytearray(batch))
        h = rb.read_header(mv)
        info = self._append_validated(mv, h, leader_epoch, now_ms)
        if h.producer_id >= 0 and not h.is_control:  # a coordinator's transactional write
            self.producer_state.update(h.producer_id, h.producer_epoch, h.last_sequence, info.last_offset,
                                       h.last_offset_delta, h.max_timestamp, h.is_transactional)
        return info

    # ================================================================== roll
    def _maybe_roll(self, incoming: int, max_ts: int, now_ms: int, last_offset: int | None = None,
                    first_offset: int | None = None) -> None:
        """Kafka's LogSegment.shouldRoll: size, segment.ms (measured with message timestamps
        from the segment's first batch, wall clock only for a segment without timestamps),
        a full index, or an offset the index cannot hold relative to the segment base."""
        seg = self.active_segment
        cfg = self.config
        if seg.size == 0:
            return
        reason = None
        if seg.size > cfg.segment_bytes - incoming:
            reason = f"size {seg.size} + {incoming} > segment.bytes {cfg.segment_bytes}"
        elif seg.offset_index.is_full() or seg.time_index.is_full():
            reason = "index full"
        elif last_offset is not None and last_offset - seg.base_offset > 0x7FFFFFFF:
            reason = f"offset {last_offset} cannot be relative to base {seg.base_offset}"
        else:
            first_ts = seg.rolling_based_timestamp
            waited = max_ts - first_ts if first_ts is not None and first_ts >= 0 else now_ms - seg.created_ms
            if waited > cfg.segment_ms - seg.roll_jitter_ms:
                reason = f"segment.ms {cfg.segment_ms} elapsed"
        if reason:
            self.roll(now_ms, reason, first_offset)

    @_io("rolling log segment")
    def roll(self, now_ms: int, reason: str = "requested", next_offset: int | None = None) -> LogSegment:
        # a follower's next batch may start past the log end (compaction gaps): start there
        new_base = max(self.log_end_offset, next_offset or 0)
        old = self.active_segment
        if old.size == 0 and old.base_offset == new_base:
            return old
        # trim the finished segment's indexes: already exact-size; record the final time entry
        old.time_index.maybe_append(old.max_timestamp_so_far, old.offset_of_max_timestamp, True)
        old.offset_index.close()
        old.time_index.close()
        seg = self._open_segment(new_base, create=True, now_ms=now_ms)
        self._add_segment(seg)
        self.producer_state.take_snapshot(new_base, sync=False)
        log.info("%s: rolled new log segment at offset %d (%s)", self.tp, new_base, reason)
        return seg

    # ================================================================== read
    @_io("reading")
    def read(self, start_offset: int, max_bytes: int, max_offset: int, min_one_message: bool) -> FetchData:
        """Bytes from ``start_offset`` up to ``max_offset`` (exclusive: HW, LEO or LSO)."""
        leo = self.log_end_offset
        if start_offset < self.log_start_offset or start_offset > leo:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"Received request for offset {start_offset} for partition {self.tp}, but we only "
                             f"have log segments in the range {self.log_start_offset} to {leo}.")
        if start_offset >= max_offset:
            return FetchData(first_offset=start_offset)
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        max_seg, max_pos = self._max_position(max_offset)
        while i < len(self.segments) and i <= max_seg:
            seg = self.segments[i]
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
                upper = self._bases[i + 1] if i + 1 < len(self.segments) else self.log_end_offset
                return FetchData([(seg.handle, pos, size)], size, h.base_offset, min(upper, max_offset))
            i += 1
        return FetchData(first_offset=start_offset)

    def _max_position(self, max_offset: int) -> tuple[int, int]:
        if max_offset >= self.log_end_offset:
            return len(self.segments) - 1, self.active_segment.size
        if max_offset == self.high_watermark:
            if self._hw_position is None:
                i, pos = self._position_of(max_offset)
                self._hw_position = (self.segments[i].base_offset, pos)
            base, pos = self._hw_position
            i = bisect_right(self._bases, base) - 1
            if 0 <= i < len(self.segments) and self.segments[i].base_offset == base:
                return i, pos
        return self._position_of(max_offset)

    def read_batches(self, start_offset: int, max_offset: int | None = None, max_bytes: int = 1 << 62):
        """Yield (BatchHeader, bytes) of whole batches from start_offset (tools, replay)."""
        end = self.log_end_offset if max_offset is None else max_offset
        i = max(0, bisect_right(self._bases, start_offset) - 1)
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

    # ================================================================== offsets by time
    def fetch_offset_by_timestamp(self, timestamp: int, max_offset: int | None = None):
        """(offset, timestamp, leader_epoch) of the first record with timestamp >= target."""
        for seg in self.segments:
            if seg.largest_timestamp() < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                off, ts = found
                if max_offset is not None and off >= max_offset:
                    return None
                return off, ts, self.leader_epoch_cache.epoch_for_offset(off)
        return None

    def max_timestamp_offset(self, max_offset: int | None = None):
        """(offset, timestamp) of the batch holding the largest timestamp (ListOffsets -3)."""
        best = None
        for seg in self.segments:
            for _p, h in seg.iter_headers(0):
                if max_offset is not None and h.base_offset >= max_offset:
                    break
                if h.is_control:
                    continue
                if best is None or h.max_timestamp > best[1]:
                    best = (h.last_offset, h.max_timestamp)
        return best

    # ================================================================== retention
    def _deletable(self, predicate) -> list[LogSegment]:
        out = []
        n = len(self.segments)
        for i, seg in enumerate(self.segments):
            is_last = i == n - 1
            upper = self.segments[i + 1].base_offset if not is_last else self.log_end_offset
            if is_last and seg.size == 0:
                break
            if self.high_watermark < upper:
                break
            if not predicate(seg, upper):
                break
            out.append(seg)
        return out

    @_io("deleting segments")
    def delete_old_segments(self, now_ms: int) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments deleted."""
        deleted = 0
        cfg = self.config
        if cfg.delete:
            if cfg.retention_ms >= 0:
                deleted += self._delete_segments(
                    self._deletable(lambda s, _u: now_ms - s.largest_timestamp() > cfg.retention_ms
                                    if s.largest_timestamp() >= 0 else now_ms - s.last_modified_ms() > cfg.retention_ms),
                    now_ms, f"retention time {cfg.retention_ms}ms breach")
            if cfg.retention_bytes >= 0:
                diff = [self.size_in_bytes() - cfg.retention_bytes]

                def over(seg, _u):
                    if diff[0] - seg.size >= 0:
                        diff[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_segments(self._deletable(over), now_ms,
                                                 f"retention size in bytes {cfg.retention_bytes} breach")
        deleted += self._delete_segments(
            self._deletable(lambda s, upper: s is not self.active_segment and upper <= self.log_start_offset),
            now_ms, f"log start offset {self.log_start_offset} breach")
        return deleted

    def _delete_segments(self, segs: list[LogSegment], now_ms: int, reason: str) -> int:
        if not segs:
            return 0
        if len(segs) == len(self.segments):
            self.roll(now_ms, "all segments deleted by retention")
        for seg in segs:
            self.segments.remove(seg)
            self._bases.remove(seg.base_offset)
            seg.rename_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
            log.info("%s: deleting segment %s due to %s", self.tp, seg.base_offset, reason)
        # the renames must be durable before a checkpoint relies on them: the log start
        # checkpoint has no entry for a log starting at its first segment, so a deleted
        # segment reappearing after a power cut would bring its records back
        fsync_dir(self.dir)
        new_start = self.segments[0].base_offset
        self.producer_state.delete_snapshots_below(new_start)
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        self._hw_position = None
        return len(segs)

    @_io("replacing segments")
    def replace_segments(self, new: LogSegment, old: list[LogSegment], now_ms: int, hook=None,
                         sync: bool = True) -> None:
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
        if first < 0 or self.segments[first:first + len(old)] != old or old[-1] is self.active_segment:
            # retention or a truncation changed the log while it was being cleaned
            raise SegmentsChangedError(f"{self.tp}: the segments cleaned are no longer in the log")
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        hook("swap")
        for seg in old:
            seg.rename_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
        hook("deleted")
        new.change_file_suffixes(SWAP_SUFFIX, "")
        self.segments[first:first + len(old)] = [new]
        self._bases[first:first + len(old)] = [new.base_offset]
        if sync:
            fsync_dir(self.dir)
        self._hw_position = None
        hook("done")

    def delete_expired_files(self, now_ms: int, force: bool = False) -> None:
        keep = []
        for due, seg in self._pending_deletes:
            if force or due <= now_ms:
                seg.delete_files()
                log.info("%s: deleted %s", self.tp, seg.log_path)
            else:
                keep.append((due, seg))
        self._pending_deletes = keep

    @_io("moving the log start offset")
    def maybe_increment_log_start_offset(self, new_start: int) -> int:
        """DeleteRecords: move the log start offset (never past the high watermark)."""
        if new_start > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"Cannot increment the log start offset to {new_start} of partition {self.tp} "
                             f"since it is larger than the high watermark {self.high_watermark}")
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.recovery_point = max(self.recovery_point, new_start)
        return self.log_start_offset

    # ================================================================== truncation
    @_io("truncating the log")
    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (replication divergence). Past the end it
        still drops leader-epoch entries that start at the log end: an epoch this replica began
        as leader without writing must not survive into a follower's divergence check (Kafka)."""
        if offset >= self.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return
        log.info("%s: truncating to offset %d (log end offset %d)", self.tp, offset, self.log_end_offset)
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            seg.delete_files()
        if self.active_segment.base_offset >= offset and len(self.segments) == 1:
            self.truncate_fully_and_start_at(offset)
            return
        self.active_segment.truncate_to(offset)
        self.leader_epoch_cache.truncate_from_end(offset)
        self.recovery_point = min(self.recovery_point, offset)
        self.high_watermark = min(self.high_watermark, offset)
        self._hw_position = None
        self._rebuild_producer_state()

    @_io("truncating the log")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete_files()
        self.segments = []
        self._bases = []
        self._add_segment(self._open_segment(offset, create=True, now_ms=0))
        self.log_start_offset = offset
        self.recovery_point = offset
        self.high_watermark = offset
        self._hw_position = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_and_reload(offset, offset)
        self.producer_state.clear(offset)

    # ================================================================== flush / close
    @_io("flushing the log")
    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery_point, up_to) and advance the
        recovery point. Segments created since the last flush also need their directory
        entries synced, and a new partition directory its entry in the log dir, or a power
        cut loses them with their fsynced content (Kafka's LocalLog.flush syncs the directory
        after a roll). A ``.txnindex`` created later in a segment needs no more: until a
        roll and its flush move the recovery point past that segment, recovery rescans it."""
        target = self.log_end_offset if up_to is None else up_to
        n = len(self.segments)
        for i, seg in enumerate(self.segments):
            if seg.base_offset >= target:
                break
            if i + 1 == n or self._bases[i + 1] > self.recovery_point:
                seg.flush()
        if self._dir_dirty:
            self._dir_dirty = False
            fsync_dir(self.dir)
            if not self._parent_synced:
                self._parent_synced = True
                fsync_dir(os.path.dirname(self.dir))
        self.recovery_point = max(self.recovery_point, target)
        self.unflushed_messages = 0

    @_io("closing the log")
    def close(self) -> None:
        self.producer_state.take_snapshot(self.log_end_offset)
        for seg in self.segments:
            seg.time_index.maybe_append(seg.max_timestamp_so_far, seg.offset_of_max_timestamp, True)
            seg.close()
        self.delete_expired_files(0, force=False)
        for _due, seg in self._pending_deletes:  # their .deleted files go at the next load
            seg.close()

    def close_handles(self) -> None:
        """Close the files without writing anything (a log whose directory was renamed away)."""
        for seg in self.segments:
            seg.close()
        for _due, seg in self._pending_deletes:
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
