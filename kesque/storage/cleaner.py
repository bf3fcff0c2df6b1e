"""Log compaction of one log (Kafka's Cleaner): keep at least the last record of every key.

One cleaning of a log whose records below ``first_dirty`` are already clean:

1. the *offset map* (key -> latest offset) is built from the dirty section
   [first_dirty, first_uncleanable), stopping when it holds ``max_entries`` keys; records
   of aborted transactions and control batches are not mapped;
2. every segment from the log start up to the map's end is recopied, in groups that fit
   one segment, into ``<base>.log.cleaned`` files, keeping a record only when it is the
   latest of its key (or past the map's end), dropping records of aborted transactions,
   and keeping tombstones and transaction markers by KIP-534's rules: a batch that keeps
   a tombstone (or a marker whose transaction has no data left) gets a *delete horizon*
   (now + delete.retention.ms, in its base timestamp with the delete-horizon attribute);
   a later cleaning past the horizon drops it. A marker is kept while its transaction has
   data in the log (KIP-98's two passes). A batch left empty is kept as a bare header when
   it is the last of an active producer, so idempotence survives a restart;
3. each group's ``.cleaned`` segment is fsynced and swapped in through ``.swap`` by
   :meth:`UnifiedLog.replace_segments`; the load of a log completes or discards an interrupted
   swap (see ``LogLoader._complete_swaps``).

Offsets never change: a batch keeps its base and last offset, records their offset deltas.
The active segment is never cleaned (``first_uncleanable`` is at most its base). Time comes
in as ``now_ms``; the only I/O is the log's files.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from dataclasses import dataclass

from ..records import batch as rb
from ..records import compression
from ..records.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    _cscan,
    _svarint,
    map_keys_py,
    read_end_txn_marker,
    record_spans,
    retain_py,
)
from .segment import CLEANED_SUFFIX, LogSegment
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)

#: bytes per offset-map entry, as Kafka's SkimpyOffsetMap (16-byte MD5 + 8-byte offset)
MAP_ENTRY_BYTES = 24
_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")


class OffsetMap:
    """Latest offset of each key of the dirty section, bounded like Kafka's SkimpyOffsetMap:
    ``memory`` bytes of 24-byte slots (a 128-bit key hash and the offset), filled to
    ``load_factor``. Compiled (``_cscan``): a table the per-record work fills and reads without
    the GIL, so the event loop runs meanwhile; else a dict of keys (same results)."""

    def __init__(self, memory: int, load_factor: float = 0.9, compiled: bool = _cscan is not None):
        slots = max(2, int(memory // MAP_ENTRY_BYTES))
        self.max_entries = max(1, min(slots - 1, int(slots * load_factor)))
        self.table = bytearray(b"\xff" * (slots * MAP_ENTRY_BYTES)) if compiled else None
        self.offsets: dict[bytes, int] = {}
        self.size = 0
        self.latest_offset = -1

    def map_batch(self, payload, count: int, base_offset: int, start: int) -> tuple[int, bool]:
        """Map the keyed records of one batch at or past ``start``: (records, full)."""
        if self.table is not None:
            n, full, self.size = _cscan.map_keys(
                payload, count, base_offset, start, self.table, self.size, self.max_entries
            )
            return n, full
        n, full = map_keys_py(payload, count, base_offset, start, self.offsets, self.max_entries)
        self.size = len(self.offsets)
        return n, full

    def retain(self, payload, count: int, base_offset: int, drop_tombstones: bool) -> tuple[bytes, int, bool]:
        """The records of one batch to keep: (records section, how many, a tombstone among them)."""
        if self.table is not None:
            return _cscan.retain(payload, count, base_offset, self.table, self.latest_offset, drop_tombstones)
        return retain_py(payload, count, base_offset, self.offsets, self.latest_offset, drop_tombstones)

    def __len__(self) -> int:
        return self.size


@dataclass
class CleanStats:
    first_dirty: int = 0
    end_offset: int = 0  # the new first dirty offset (cleaner-offset-checkpoint)
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    map_records: int = 0
    groups: int = 0


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions, and
    which markers may go because no data of their transaction is left."""

    def __init__(self):
        self.aborted: deque[AbortedTxn] = deque()
        self.ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, data seen this pass]
        self.ongoing_committed: set[int] = set()
        self.index_out: list[AbortedTxn] | None = None  # entries the cleaned segment keeps

    def add_aborted(self, txns) -> None:
        known = {(t.producer_id, t.first_offset) for t in self.aborted}
        for t in sorted(txns, key=lambda t: t.first_offset):
            if (t.producer_id, t.first_offset) not in known:
                self.aborted.append(t)

    def _consume_up_to(self, offset: int) -> None:
        while self.aborted and self.aborted[0].first_offset <= offset:
            t = self.aborted.popleft()
            self.ongoing_aborted.setdefault(t.producer_id, [t, False])

    def on_batch(self, h: rb.BatchHeader) -> bool:
        """True when the data batch belongs to an aborted transaction (to be dropped)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        ongoing = self.ongoing_aborted.get(h.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self.ongoing_committed.add(h.producer_id)
        return False

    def on_marker(self, h: rb.BatchHeader, ctype: int | None) -> bool:
        """True when the marker's transaction has no data left in the log (it may go once its
        delete horizon has passed)."""
        self._consume_up_to(h.last_offset)
        if ctype == CONTROL_ABORT:
            ongoing = self.ongoing_aborted.pop(h.producer_id, None)
            if ongoing is not None and ongoing[1]:
                if self.index_out is not None:
                    self.index_out.append(ongoing[0])
                return False
            return True
        if ctype == CONTROL_COMMIT:
            if h.producer_id in self.ongoing_committed:
                self.ongoing_committed.discard(h.producer_id)
                return False
            return True
        return ctype is None and h.records_count == 0  # an emptied control batch can go


# ------------------------------------------------------------------ batches


def delete_horizon(h: rb.BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & rb.DELETE_HORIZON_FLAG else None


def _rebase_timestamps(body, count: int, old_base: int, new_base: int) -> bytes:
    """The records section ``body`` with each timestamp delta re-based from ``old_base`` to
    ``new_base`` (the timestamps themselves do not change). Per record in Python: only batches
    getting their delete horizon, once, come here."""
    out = bytearray()
    mv = memoryview(body)
    for _start, end, body_start, ts_end, ts_delta, _od, _k, _n in record_spans(body, count):
        rec = bytearray(mv[body_start : body_start + 1])
        _svarint(old_base + ts_delta - new_base, rec)
        rec += mv[ts_end:end]
        _svarint(len(rec), out)
        out += rec
    return bytes(out)


def _rebuild(h: rb.BatchHeader, body, count: int, horizon: int | None) -> bytes:
    """A batch of ``count`` records (the records section ``body``, uncompressed) in place of
    ``h``: same offsets, producer fields and compression. With ``horizon`` its base timestamp
    becomes the delete horizon (KIP-534) and the records' timestamp deltas follow."""
    base_ts = h.base_timestamp
    attrs = h.attributes
    if horizon is not None:
        attrs |= rb.DELETE_HORIZON_FLAG
        base_ts = horizon
        body = _rebase_timestamps(body, count, h.base_timestamp, horizon)
    if not count:
        attrs &= ~rb.COMPRESSION_MASK  # Kafka writes an emptied batch's header uncompressed
    elif h.compression:
        body = compression.compress(h.compression, bytes(body))
    out = bytearray(
        _HEADER.pack(
            h.base_offset,
            rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body),
            h.partition_leader_epoch,
            rb.MAGIC_V2,
            0,
            attrs,
            h.last_offset_delta,
            base_ts,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            count,
        )
    )
    out += body
    _U32.pack_into(out, rb.CRC_OFFSET, rb.compute_crc(out, 0, len(out)))
    return bytes(out)


def _payload(data, h: rb.BatchHeader):
    mv = memoryview(data)[rb.HEADER_SIZE : h.size]
    return compression.decompress(h.compression, mv) if h.compression else mv


# ------------------------------------------------------------------ the cleaner


class Cleaner:
    """Cleans one log at a time. ``hook(stage)`` is a test-only crash point called with
    ``"copy"`` (after each batch written to a ``.cleaned`` file), ``"cleaned"`` (a group's
    ``.cleaned`` segment complete and fsynced) and the stages of UnifiedLog.replace_segments."""

    def __init__(self, map_memory: int = 128 * 1024 * 1024, hook=None, throttle=None, swap=None):
        self.map_memory = map_memory
        self.hook = hook or (lambda _stage: None)
        self.throttle = throttle or (lambda _nbytes: None)  # log.cleaner.io.max.bytes.per.second
        # how a cleaned segment replaces its group: in place here; a background cleaner runs
        # UnifiedLog.replace_segments on the event loop that owns the log
        self.swap = swap or (lambda lg, new, old, now_ms, hook: lg.replace_segments(new, old, now_ms, hook))

    # ---------------------------------------------------------------- offset map
    def build_offset_map(self, lg, start: int, end: int, omap: OffsetMap, stats: CleanStats) -> int:
        """Map the keys of [start, end); returns the end of the mapped range (the map's end)."""
        txn = _TxnTracker()
        txn.add_aborted(lg.collect_aborted_transactions(start, end))
        mapped_end = start
        for seg in list(lg.segments):
            if seg.base_offset >= end:
                break
            found = seg.find_batch(start)
            if found is None:
                continue
            for pos, h in seg.iter_headers(found[0]):
                if h.base_offset >= end:
                    return mapped_end
                data = seg.pread(pos, h.size)
                self.throttle(h.size)
                stats.bytes_read += h.size
                if h.is_control:
                    marker = read_end_txn_marker(data, h) if h.records_count else None
                    txn.on_marker(h, marker[0] if marker else None)
                elif not txn.on_batch(h) and h.records_count:
                    n, full = omap.map_batch(_payload(data, h), h.records_count, h.base_offset, start)
                    stats.map_records += n
                    if full:  # clean up to here; keys mapped from this batch only remove older records
                        if mapped_end == start:
                            raise ValueError(
                                f"{h.records_count} records in the first dirty batch of {lg.tp} "
                                f"(offset {h.base_offset}) but the offset map can fit only {omap.max_entries}. "
                                "You can increase log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads"
                            )
                        return mapped_end
                mapped_end = h.next_offset
                omap.latest_offset = max(omap.latest_offset, h.last_offset)
        return mapped_end

    # ---------------------------------------------------------------- one log
    def clean(
        self, lg, first_dirty: int, first_uncleanable: int, now_ms: int, last_of_producer: dict | None = None
    ) -> CleanStats | None:
        """Clean ``lg`` with dirty section [first_dirty, first_uncleanable); None when there is
        nothing to clean. ``first_uncleanable`` must be at most the active segment's base.
        ``last_of_producer`` (producer id -> offset of its last data batch) is read from the
        log's producer state when not given (a background cleaner takes it on the loop)."""
        first_uncleanable = min(first_uncleanable, lg.active_segment.base_offset)
        stats = CleanStats(first_dirty=first_dirty)
        if first_dirty >= first_uncleanable:
            return None
        omap = OffsetMap(self.map_memory)
        end = self.build_offset_map(lg, first_dirty, first_uncleanable, omap, stats)
        if end <= first_dirty:
            return None
        stats.end_offset = end
        txn = _TxnTracker()
        if last_of_producer is None:
            last_of_producer = last_batches_of_producers(lg)
        cfg = lg.config
        segments = list(lg.segments)  # the event loop may roll or delete meanwhile: one view
        for group, upper in self.group_segments(segments, end, cfg.segment_bytes):
            txn.add_aborted(lg.collect_aborted_transactions(group[0].base_offset, upper))
            self.clean_segments(lg, group, omap, txn, last_of_producer, now_ms, cfg.delete_retention_ms, stats)
            stats.groups += 1
        log.info(
            "%s: cleaned offsets %d to %d: %d records read, %d kept, %d bytes read, %d written",
            lg.tp,
            first_dirty,
            end,
            stats.records_read,
            stats.records_written,
            stats.bytes_read,
            stats.bytes_written,
        )
        return stats

    @staticmethod
    def group_segments(segments: list[LogSegment], end: int, segment_bytes: int) -> list[tuple[list, int]]:
        """Consecutive segments below ``end`` (never the last, active one) in groups whose sizes
        add up to one segment.bytes and whose offsets fit one segment's relative index entries,
        each with the base offset of the segment after it."""
        groups: list[tuple[list, int]] = []
        i, n = 0, len(segments) - 1
        while i < n and segments[i].base_offset < end:
            group, size = [segments[i]], segments[i].size
            i += 1
            while i < n and segments[i].base_offset < end:
                after = segments[i + 1].base_offset
                if size + segments[i].size > segment_bytes or after - 1 - group[0].base_offset > 0x7FFFFFFF:
                    break
                group.append(segments[i])
                size += segments[i].size
                i += 1
            groups.append((group, segments[i].base_offset))
        return groups

    def clean_segments(
        self,
        lg,
        group: list[LogSegment],
        omap: OffsetMap,
        txn: _TxnTracker,
        last_of_producer: dict,
        now_ms: int,
        delete_retention_ms: int,
        stats: CleanStats,
    ) -> None:
        base = group[0].base_offset
        stale = os.path.join(lg.dir, f"{base:020d}")
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            try:
                os.unlink(stale + suffix + CLEANED_SUFFIX)
            except FileNotFoundError:
                pass
        cleaned = LogSegment(
            lg.dir,
            base,
            index_interval_bytes=lg.config.index_interval_bytes,
            max_index_size=lg.config.segment_index_bytes,
            create=True,
            now_ms=now_ms,
            file_suffix=CLEANED_SUFFIX,
        )
        txn.index_out = []
        try:
            for seg in group:
                for pos, h in seg.iter_headers(0):
                    data = seg.pread(pos, h.size)
                    self.throttle(h.size)
                    stats.bytes_read += h.size
                    stats.records_read += h.records_count
                    out = self._filter_batch(h, data, omap, txn, last_of_producer, now_ms, delete_retention_ms)
                    if out is None:
                        continue
                    oh = rb.read_header(out)
                    cleaned.append(oh.last_offset, oh.max_timestamp, oh.last_offset, out)
                    stats.bytes_written += len(out)
                    stats.records_written += oh.records_count
                    self.hook("copy")
            for entry in txn.index_out:
                cleaned.txn_index.append(entry)
            cleaned.time_index.maybe_append(cleaned.max_timestamp_so_far, cleaned.offset_of_max_timestamp, True)
            cleaned.flush()
            cleaned.offset_index.close()
            cleaned.time_index.close()
        except Exception:  # a crash (test hooks raise BaseException) leaves the .cleaned files to the load
            cleaned.delete_files()
            raise
        finally:
            txn.index_out = None
        self.hook("cleaned")
        try:
            self.swap(lg, cleaned, group, now_ms, self.hook)
        except Exception:
            if cleaned.log_path.endswith(CLEANED_SUFFIX):  # refused before the swap began
                cleaned.delete_files()
            raise

    def _filter_batch(
        self,
        h: rb.BatchHeader,
        data: bytes,
        omap: OffsetMap,
        txn: _TxnTracker,
        last_of_producer: dict,
        now_ms: int,
        delete_retention_ms: int,
    ) -> bytes | None:
        """The batch to write for ``h`` (itself, rebuilt, or a bare header), or None to drop it."""
        horizon = delete_horizon(h)
        if h.is_control:
            marker = read_end_txn_marker(data, h) if h.records_count else None
            can_discard = txn.on_marker(h, marker[0] if marker else None)
            if not can_discard:
                return data
            if h.records_count == 0 or (horizon is not None and horizon <= now_ms):
                return None
            if horizon is not None:
                return data
            return _rebuild(h, _payload(data, h), h.records_count, now_ms + delete_retention_ms)
        if txn.on_batch(h):  # aborted: all of it goes
            return self._empty_or_none(h, last_of_producer)
        if h.records_count == 0:
            return self._empty_or_none(h, last_of_producer)
        # a record stays when past the map's end or the latest of its key; a tombstone also
        # only until its batch's delete horizon has passed
        body, kept, tombstones = omap.retain(
            _payload(data, h), h.records_count, h.base_offset, horizon is not None and now_ms >= horizon
        )
        if not kept:
            return self._empty_or_none(h, last_of_producer)
        new_horizon = now_ms + delete_retention_ms if tombstones and horizon is None else None
        if kept == h.records_count and new_horizon is None:
            return data
        return _rebuild(h, body, kept, new_horizon)

    @staticmethod
    def _empty_or_none(h: rb.BatchHeader, last_of_producer: dict) -> bytes | None:
        """A batch whose records all went: its bare header when it is the last batch of an
        active producer (its sequence numbers must survive), else nothing."""
        if h.producer_id >= 0 and last_of_producer.get(h.producer_id) == h.last_offset:
            return _rebuild(h, b"", 0, None)
        return None


# ------------------------------------------------------------------ the cleanable range


def last_batches_of_producers(lg) -> dict[int, int]:
    """Producer id -> last offset of its last data batch (that batch is kept, even emptied)."""
    return {pid: e.batches[-1].last_offset for pid, e in lg.producer_state.producers.items() if e.batches}


def first_dirty_offset(lg, checkpoint: int | None) -> int:
    """Where cleaning resumes: the cleaner-offset-checkpoint entry, or the log start when it
    has none or the entry is outside the log (truncation, retention past it)."""
    if checkpoint is None or not lg.log_start_offset <= checkpoint <= lg.log_end_offset:
        return lg.log_start_offset
    return checkpoint


def first_uncleanable_offset(lg, now_ms: int) -> int:
    """Kafka's firstUncleanableDirtyOffset: never past the last stable offset nor into the
    active segment, nor into the first segment holding a record newer than
    min.compaction.lag.ms."""
    bounds = [lg.last_stable_offset, lg.active_segment.base_offset]
    lag = lg.config.min_compaction_lag_ms
    if lag > 0:
        for seg in lg.segments[:-1]:
            if seg.largest_timestamp() > now_ms - lag:
                bounds.append(seg.base_offset)
                break
    return min(bounds)
