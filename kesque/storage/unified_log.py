"""UnifiedLog: one partition's log as the rest of the broker sees it (Kafka's UnifiedLog).

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

The pieces, as Kafka splits them: :class:`~kesque.storage.local_log.LocalLog` holds the
segment files of the partition directory, :class:`~kesque.storage.log_loader.LogLoader`
recovers them when the log opens, and this class keeps the offsets above, the producer state
and the leader epoch cache, validates appends and assigns their offsets, and decides about
rolls, retention and truncation. Every operation that reaches the disk is guarded by
:func:`~kesque.storage.local_log.maybe_handle_io_exception` (KIP-112).

The class is sans-IO apart from file access: time comes in as ``now_ms`` arguments.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from ..config.topic import LogConfig
from ..errors import ErrorCode, KafkaError
from ..records import batch as rb
from ..records.records import build_end_txn_marker
from .checkpoint import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, PartitionMetadataFile
from .leader_epoch import LeaderEpochFileCache
from .local_log import FetchData, LocalLog, maybe_handle_io_exception
from .log_dir_failure import LogDirFailureChannel
from .log_loader import LogLoader, complete_txn, rebuild_producer_state, update_producer_state
from .producer_state import ProducerStateManager
from .segment import LogSegment
from .txn_index import AbortedTxn
from .validator import validate_batch

log = logging.getLogger(__name__)

_io = maybe_handle_io_exception


class LogFlushStats:
    """Kafka's LogFlushStats (``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs``): the
    time of each flush that had records to sync, as counts per bucket of ``BUCKETS_MS`` (and one
    past the last) and their sum, for the metrics endpoint. Flushes run on the event loop and in
    the checkpoint thread: a lock (never on the request path)."""

    BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)

    def __init__(self):
        self.buckets = [0] * (len(self.BUCKETS_MS) + 1)
        self.sum_ms = 0.0
        self._lock = threading.Lock()

    def record(self, ms: float) -> None:
        with self._lock:
            self.buckets[bisect_left(self.BUCKETS_MS, ms)] += 1  # le: the first bound >= ms
            self.sum_ms += ms

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self.buckets), self.sum_ms


LOG_FLUSH_STATS = LogFlushStats()  # one per process, as Kafka's


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


class UnifiedLog:
    def __init__(
        self,
        dir_path: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        now_ms: int = 0,
        dir_failure: LogDirFailureChannel | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.tp = f"{topic}-{partition}"
        self._config = config
        self.topic_id = topic_id
        self.local_log = local = LocalLog(
            dir_path, config, self.tp, recovery_point=recovery_point, dir_failure=dir_failure
        )
        self.dir = dir_path
        self.log_dir = local.log_dir  # the log dir holding it
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        self.leader_epoch_cache = LeaderEpochFileCache(os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT), self.tp)
        self.producer_state = ProducerStateManager(dir_path, self.tp)
        self._hw_position: tuple[int, int] | None = None  # (segment base, position)
        loaded = LogLoader(
            local,
            self.leader_epoch_cache,
            self.producer_state,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            now_ms=now_ms,
        ).load()
        self.log_start_offset = loaded.log_start_offset
        self.high_watermark = loaded.high_watermark
        if topic_id is not None:
            self._write_partition_metadata(topic_id)

    # ================================================================== state of the pieces
    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """Dynamic topic configs: the new settings apply to the next append, roll and deletion."""
        self._config = config
        self.local_log.config = config

    @property
    def dir_failure(self) -> LogDirFailureChannel | None:
        """The broker's LogDirFailureChannel (None: a log on its own, or one whose owner handles
        its errors until it sets this, as the metadata log's RaftManager does)."""
        return self.local_log.dir_failure

    @dir_failure.setter
    def dir_failure(self, channel: LogDirFailureChannel | None) -> None:
        self.local_log.dir_failure = channel

    @property
    def io_error(self) -> str | None:
        """The first failed disk operation of this log (it takes no more writes in this process)."""
        return self.local_log.io_error

    @property
    def offline(self) -> bool:
        return self.local_log.offline

    @property
    def segments(self) -> list[LogSegment]:
        return self.local_log.segments

    @property
    def active_segment(self) -> LogSegment:
        return self.local_log.segments[-1]

    @property
    def recovery_point(self) -> int:
        return self.local_log.recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        self.local_log.recovery_point = offset

    @property
    def parent_dir(self) -> str:
        """The log dir holding this partition's directory."""
        return os.path.dirname(self.dir)

    @property
    def log_end_offset(self) -> int:
        return self.local_log.segments[-1].read_end_offset()

    def size_in_bytes(self) -> int:
        return self.local_log.size_in_bytes()

    # ================================================================== partition metadata, epochs
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

    @_io("assigning a leader epoch")
    def assign_leader_epoch(self, epoch: int, start_offset: int, fsync: bool = True) -> None:
        self.leader_epoch_cache.assign(epoch, start_offset, fsync=fsync)

    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch()

    # ================================================================== offsets
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
        """Aborted transactions overlapping [fetch_offset, upper_bound) (read_committed fetches)."""
        return self.local_log.collect_aborted_transactions(fetch_offset, upper_bound)

    # ================================================================== append
    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int, supports_epoch_bump: bool = False
    ):
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
    def append_as_leader(
        self,
        buf: memoryview,
        leader_epoch: int,
        now_ms: int,
        verification_guard=None,
        require_verification: bool = False,
    ) -> AppendInfo:
        """Validate one produced batch, check the producer's sequence, assign offsets, append.
        With ``require_verification`` (transaction.partition.verification.enable), a batch that
        would open its producer's transaction here must bring the guard of the verification the
        partition is still waiting on (Kafka's batchMissingRequiredVerification)."""
        v = validate_batch(buf, self._config, now_ms, self.tp)
        h = v.header
        if h.producer_id >= 0:
            ps = self.producer_state
            dup = ps.check(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.last_sequence,
                self.log_end_offset,
                h.is_transactional,
                lambda: (
                    require_verification
                    and h.is_transactional
                    and not h.is_control
                    and not self._has_ongoing_transaction(h.producer_id, h.producer_epoch)
                    and (verification_guard is None or ps.verification_guard(h.producer_id) is not verification_guard)
                ),
            )
            if dup is not None:
                log.debug(
                    "%s: duplicate batch from producer %d (seq %d-%d) acknowledged at offset %d",
                    self.tp,
                    h.producer_id,
                    h.base_sequence,
                    h.last_sequence,
                    dup.first_offset,
                )
                return AppendInfo(
                    dup.first_offset, dup.last_offset, dup.timestamp, -1, self.log_start_offset, 0, 0, duplicate=True
                )
        info = self._append_validated(v.data, h, leader_epoch, now_ms)
        if h.producer_id >= 0:
            self.producer_state.update(
                h.producer_id,
                h.producer_epoch,
                h.last_sequence,
                info.last_offset,
                h.last_offset_delta,
                h.max_timestamp,
                h.is_transactional,
            )
        return info

    @_io("appending a transaction marker")
    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        leader_epoch: int,
        now_ms: int,
    ) -> AppendInfo:
        """Write a COMMIT/ABORT marker for a producer as the leader (WriteTxnMarkers): closes
        its open transaction here, indexes it if aborted, and may move the LSO."""
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch, self.log_end_offset)
        batch = build_end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, timestamp=now_ms)
        info = self.append_new_batch(batch, leader_epoch, now_ms)
        complete_txn(
            self.producer_state,
            self.local_log.segments[-1],
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            info.first_offset,
            now_ms,
            self.high_watermark,
        )
        return info

    def _append_validated(self, data: memoryview, h: rb.BatchHeader, leader_epoch: int, now_ms: int) -> AppendInfo:
        size = h.size
        self._maybe_roll(size, h.max_timestamp, now_ms, self.log_end_offset + h.last_offset_delta)
        base = self.log_end_offset
        rb.patch_offset_and_epoch(data, 0, base, leader_epoch)
        last = base + h.last_offset_delta
        self.local_log.append(last, h.max_timestamp, last, data[:size])
        if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch():
            self.leader_epoch_cache.assign(leader_epoch, base)
        self.unflushed_messages += h.records_count
        if self.unflushed_messages >= self._config.flush_messages:
            self.flush()
            self.last_flush_ms = now_ms
        return AppendInfo(
            base,
            last,
            h.max_timestamp,
            h.max_timestamp if h.is_log_append_time else -1,
            self.log_start_offset,
            h.records_count,
            size,
        )

    @_io("appending records")
    def append_raw(self, data: bytes | memoryview, now_ms: int) -> AppendInfo:
        """Append already-offset batches verbatim (replication follower, internal writes that
        assigned their own offsets). Batches must start at the log end offset."""
        mv = memoryview(data)
        local = self.local_log
        first = last = -1
        count = 0
        max_ts = -1
        for pos, h in rb.iter_headers(mv):
            if h.base_offset < self.log_end_offset:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"{self.tp}: out of order append at {h.base_offset}, LEO {self.log_end_offset}",
                )
            self._maybe_roll(h.size, h.max_timestamp, now_ms, h.last_offset, h.base_offset)
            local.append(h.last_offset, h.max_timestamp, h.last_offset, mv[pos : pos + h.size])
            update_producer_state(
                self.producer_state,
                local.segments[-1],
                h,
                mv[pos : pos + h.size] if h.is_control else None,
                self.high_watermark,
            )
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
            self.producer_state.update(
                h.producer_id,
                h.producer_epoch,
                h.last_sequence,
                info.last_offset,
                h.last_offset_delta,
                h.max_timestamp,
                h.is_transactional,
            )
        return info

    # ================================================================== roll
    def _maybe_roll(
        self, incoming: int, max_ts: int, now_ms: int, last_offset: int | None = None, first_offset: int | None = None
    ) -> None:
        """Kafka's LogSegment.shouldRoll: size, segment.ms (measured with message timestamps
        from the segment's first batch, wall clock only for a segment without timestamps),
        a full index, or an offset the index cannot hold relative to the segment base."""
        seg = self.local_log.segments[-1]
        cfg = self._config
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
        seg = self.local_log.roll(now_ms, reason, next_offset)
        if seg is None:
            return self.local_log.segments[-1]
        self.producer_state.take_snapshot(seg.base_offset, sync=False)
        return seg

    # ================================================================== read
    @_io("reading")
    def read(self, start_offset: int, max_bytes: int, max_offset: int, min_one_message: bool) -> FetchData:
        """Bytes from ``start_offset`` up to ``max_offset`` (exclusive: HW, LEO or LSO)."""
        leo = self.log_end_offset
        if start_offset < self.log_start_offset or start_offset > leo:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"Received request for offset {start_offset} for partition {self.tp}, but we only "
                f"have log segments in the range {self.log_start_offset} to {leo}.",
            )
        if start_offset >= max_offset:
            return FetchData(first_offset=start_offset)
        max_seg, max_pos = self._max_position(max_offset)
        return self.local_log.read(start_offset, max_bytes, max_offset, min_one_message, max_seg, max_pos)

    def _max_position(self, max_offset: int) -> tuple[int, int]:
        """(segment index, position) where a read up to ``max_offset`` stops; the high
        watermark's position is kept until the high watermark or the segments change."""
        local = self.local_log
        if max_offset >= self.log_end_offset:
            return len(local.segments) - 1, local.segments[-1].size
        if max_offset == self.high_watermark:
            if self._hw_position is None:
                i, pos = local.position_of(max_offset)
                self._hw_position = (local.segments[i].base_offset, pos)
            base, pos = self._hw_position
            i = bisect_right(local.bases, base) - 1
            if 0 <= i < len(local.segments) and local.segments[i].base_offset == base:
                return i, pos
        return local.position_of(max_offset)

    def read_batches(self, start_offset: int, max_offset: int | None = None, max_bytes: int = 1 << 62):
        """Yield (BatchHeader, bytes) of whole batches from start_offset (tools, replay)."""
        end = self.log_end_offset if max_offset is None else max_offset
        return self.local_log.read_batches(start_offset, end, max_bytes)

    # ================================================================== offsets by time
    def fetch_offset_by_timestamp(self, timestamp: int, max_offset: int | None = None):
        """(offset, timestamp, leader_epoch) of the first record with timestamp >= target."""
        for seg in self.local_log.segments:
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
        for seg in self.local_log.segments:
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
        segments = self.local_log.segments
        n = len(segments)
        for i, seg in enumerate(segments):
            is_last = i == n - 1
            upper = segments[i + 1].base_offset if not is_last else self.log_end_offset
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
        cfg = self._config
        if cfg.delete:
            if cfg.retention_ms >= 0:
                deleted += self._delete_segments(
                    self._deletable(
                        lambda s, _u: (
                            now_ms - s.largest_timestamp() > cfg.retention_ms
                            if s.largest_timestamp() >= 0
                            else now_ms - s.last_modified_ms() > cfg.retention_ms
                        )
                    ),
                    now_ms,
                    f"retention time {cfg.retention_ms}ms breach",
                )
            if cfg.retention_bytes >= 0:
                diff = [self.size_in_bytes() - cfg.retention_bytes]

                def over(seg, _u):
                    if diff[0] - seg.size >= 0:
                        diff[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_segments(
                    self._deletable(over), now_ms, f"retention size in bytes {cfg.retention_bytes} breach"
                )
        deleted += self._delete_segments(
            self._deletable(lambda s, upper: s is not self.active_segment and upper <= self.log_start_offset),
            now_ms,
            f"log start offset {self.log_start_offset} breach",
        )
        return deleted

    def _delete_segments(self, segs: list[LogSegment], now_ms: int, reason: str) -> int:
        if not segs:
            return 0
        local = self.local_log
        if len(segs) == len(local.segments):
            self.roll(now_ms, "all segments deleted by retention")
        local.remove_and_delete_segments(segs, now_ms, reason)
        new_start = local.segments[0].base_offset
        self.producer_state.delete_snapshots_below(new_start)
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
        local.recovery_point = max(local.recovery_point, self.log_start_offset)
        self._hw_position = None
        return len(segs)

    @_io("replacing segments")
    def replace_segments(
        self, new: LogSegment, old: list[LogSegment], now_ms: int, hook=None, sync: bool = True
    ) -> None:
        """Swap a cleaned segment in for the segments ``old`` it was copied from
        (:meth:`LocalLog.replace_segments <kesque.storage.local_log.LocalLog.replace_segments>`);
        SegmentsChangedError when they are no longer in the log."""
        self._hw_position = None
        self.local_log.replace_segments(new, old, now_ms, hook, sync)

    def delete_expired_files(self, now_ms: int, force: bool = False) -> None:
        self.local_log.delete_expired_files(now_ms, force)

    @_io("moving the log start offset")
    def maybe_increment_log_start_offset(self, new_start: int) -> int:
        """DeleteRecords: move the log start offset (never past the high watermark)."""
        if new_start > self.high_watermark:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"Cannot increment the log start offset to {new_start} of partition {self.tp} "
                f"since it is larger than the high watermark {self.high_watermark}",
            )
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.local_log.recovery_point = max(self.local_log.recovery_point, new_start)
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
        local = self.local_log
        if not local.truncate_to(offset):
            self.truncate_fully_and_start_at(offset)
            return
        self.leader_epoch_cache.truncate_from_end(offset)
        local.recovery_point = min(local.recovery_point, offset)
        self.high_watermark = min(self.high_watermark, offset)
        self._hw_position = None
        rebuild_producer_state(local, self.producer_state, self.log_start_offset, self.high_watermark)

    @_io("truncating the log")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.local_log.truncate_fully_and_start_at(offset)
        self.log_start_offset = offset
        self.high_watermark = offset
        self._hw_position = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_and_reload(offset, offset)
        self.producer_state.clear(offset)

    # ================================================================== flush / close
    @_io("flushing the log")
    def flush(self, up_to: int | None = None) -> None:
        """fsync the log up to ``up_to`` (the log end by default) and advance the recovery
        point (:meth:`LocalLog.flush <kesque.storage.local_log.LocalLog.flush>`)."""
        target = self.log_end_offset if up_to is None else up_to
        if target > self.local_log.recovery_point:
            t0 = time.perf_counter()
            self.local_log.flush(target)
            LOG_FLUSH_STATS.record((time.perf_counter() - t0) * 1000)
        else:
            self.local_log.flush(target)
        self.unflushed_messages = 0

    @_io("closing the log")
    def close(self) -> None:
        self.producer_state.take_snapshot(self.log_end_offset)
        self.local_log.close()

    def close_handles(self) -> None:
        """Close the files without writing anything (a log whose directory was renamed away)."""
        self.local_log.close_handles()

    def delete(self) -> None:
        """Delete the whole log (topic deleted): files of every segment and the directory."""
        self.local_log.delete()
