"""LogSegment: one ``.log`` file of verbatim RecordBatch v2 bytes plus its indexes.

Files are named by the 20-digit base offset: ``00000000000000000000.log``, ``.index``,
``.timeindex``. Appends go to the page cache with ``os.write`` (Kafka's default: the
kernel flushes, replication provides durability); ``flush()`` fsyncs.
"""

from __future__ import annotations

import logging
import os
import time

from ..records import batch as rb
from ..records.records import iter_records
from .index import CorruptIndexError, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

READ_CHUNK = 8 * 1024 * 1024
SCAN_CHUNK = 16 * 1024  # bytes find_batch reads at once (four times index.interval.bytes)


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


class FileHandle:
    """An fd that outlives the segment's own use of it while sends are queued.

    Fetch responses reference segment bytes by (handle, position, size) and send them with
    sendfile later; the segment closes its handle when deleted, and a closed handle makes
    the sender drop the connection rather than read a reused fd number.
    """

    __slots__ = ("fd", "closed")

    def __init__(self, fd: int):
        self.fd = fd
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


class LogSegmentOffsetOverflowError(Exception):
    """An offset that the segment's indexes cannot hold relative to its base offset (Kafka's
    LogSegmentOffsetOverflowException): the log must roll first."""


_MAX_RELATIVE_OFFSET = 0x7FFFFFFF


class LogSegment:
    def __init__(
        self,
        dir_path: str,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        create: bool = False,
        now_ms: int | None = None,
        file_suffix: str = "",
    ):
        self.dir = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = os.path.join(dir_path, filename_prefix(base_offset))
        self.log_path = prefix + LOG_SUFFIX + file_suffix
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if create else 0)
        self.handle = FileHandle(os.open(self.log_path, flags | os.O_CLOEXEC, 0o644))
        self.size = os.fstat(self.handle.fd).st_size
        self.offset_index = OffsetIndex(prefix + INDEX_SUFFIX + file_suffix, base_offset, max_index_size)
        self.time_index = TimeIndex(prefix + TIME_INDEX_SUFFIX + file_suffix, base_offset, max_index_size)
        self.txn_index = TransactionIndex(prefix + TXN_INDEX_SUFFIX + file_suffix, base_offset)
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp: int | None = None
        self.roll_jitter_ms = 0  # Kafka's per-segment random share of segment.jitter.ms
        self.created_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self.next_offset: int | None = None  # cached end offset, set by append/recover
        if create:
            self.offset_index.reset()
            self.time_index.reset()
            self.txn_index.reset()
        elif self.size >= rb.HEADER_SIZE:
            # Kafka's loadFirstBatchTimestamp: segment.ms counts from the first batch's timestamp
            self.rolling_based_timestamp = rb.read_header(os.pread(self.handle.fd, rb.HEADER_SIZE, 0)).max_timestamp

    @property
    def fd(self) -> int:
        return self.handle.fd

    # ------------------------------------------------------------------ write
    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int, data) -> int:
        """Append verbatim batch bytes; returns the physical position they start at."""
        if not 0 <= largest_offset - self.base_offset <= _MAX_RELATIVE_OFFSET:
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {largest_offset} in segment {self.log_path}"
            )
        position = self.size
        if position == 0:
            self.rolling_based_timestamp = largest_timestamp
        mv = memoryview(data)
        written = 0
        fd = self.handle.fd
        while written < len(mv):
            written += os.pwrite(fd, mv[written:], position + written)
        self.size = position + written
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp = offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += written
        self.next_offset = largest_offset + 1
        return position

    def flush(self) -> None:
        os.fsync(self.handle.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    # ------------------------------------------------------------------ read
    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self.handle.fd, size, position)

    def find_batch(self, target_offset: int, start_position: int = 0):
        """Position of the first batch whose last offset >= target, scanning headers from
        the index entry at or before it. Returns (position, BatchHeader) or None."""
        _off, pos = self.offset_index.lookup(target_offset)
        pos = max(pos, start_position)
        fd = self.handle.fd
        size = self.size
        # the headers between two index entries (index.interval.bytes apart) come in one read,
        # not a pread of 61 bytes each; a header the chunk cuts is read again from its start
        chunk, at = b"", pos
        while pos + rb.HEADER_SIZE <= size:
            i = pos - at
            if i + rb.HEADER_SIZE > len(chunk):
                chunk, at, i = os.pread(fd, min(SCAN_CHUNK, size - pos), pos), pos, 0
                if len(chunk) < rb.HEADER_SIZE:
                    return None
            base, batch_size = rb.offset_and_size(chunk, i)
            if batch_size < rb.HEADER_SIZE:  # a corrupt length would loop forever
                return None
            if base + rb.last_offset_delta(chunk, i) >= target_offset:
                return pos, rb.read_header(chunk, i)
            pos += batch_size
        return None

    def find_position_for_offset(self, target_offset: int) -> int:
        """Physical position where the batch containing ``target_offset`` (or the next one)
        starts; ``size`` if past the end."""
        found = self.find_batch(target_offset)
        return found[0] if found else self.size

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int):
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""

        _ts, offset = self.time_index.lookup(timestamp)
        found = self.find_batch(max(offset, start_offset))
        if not found:
            return None
        pos = found[0]
        fd = self.handle.fd
        while pos + rb.HEADER_SIZE <= self.size:
            h = rb.read_header(os.pread(fd, rb.HEADER_SIZE, pos))
            if h.size < rb.HEADER_SIZE:
                return None
            if h.max_timestamp >= timestamp:  # control batches too, as Kafka's findOffsetByTimestamp
                data = os.pread(fd, h.size, pos)
                for r in iter_records(data, 0, h):
                    if r.timestamp >= timestamp and r.offset >= start_offset:
                        return r.offset, r.timestamp
            pos += h.size
        return None

    def iter_headers(self, start_position: int = 0):
        """Yield (position, BatchHeader) for batches in this segment from a position."""
        pos = start_position
        fd = self.handle.fd
        while pos + rb.HEADER_SIZE <= self.size:
            hdr = os.pread(fd, rb.HEADER_SIZE, pos)
            if len(hdr) < rb.HEADER_SIZE:
                return
            h = rb.read_header(hdr)
            if h.size < rb.HEADER_SIZE:
                return
            yield pos, h
            pos += h.size

    def read_end_offset(self) -> int:
        """Next offset after the last batch (base_offset for an empty segment)."""
        if self.next_offset is not None:
            return self.next_offset
        last = None
        _o, pos = self.offset_index.lookup(1 << 62)
        for _p, h in self.iter_headers(pos):
            last = h
        self.next_offset = last.next_offset if last else self.base_offset
        return self.next_offset

    def largest_timestamp(self) -> int:
        return max(self.max_timestamp_so_far, self.time_index.last_entry()[0])

    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    # ------------------------------------------------------------------ recovery
    def load_indexes(self) -> bool:
        """Load .index/.timeindex; False when they are missing or fail the sanity check."""
        try:
            for idx in (self.offset_index, self.time_index):
                if not os.path.exists(idx.path):
                    log.warning(
                        "Could not find index file %s corresponding to log file %s, recovering "
                        "segment and rebuilding index files",
                        idx.path,
                        self.log_path,
                    )
                    return False
            self.offset_index.load()
            self.time_index.load()
            if self.offset_index.positions and self.offset_index.positions[-1] >= max(self.size, 1):
                raise CorruptIndexError(f"{self.offset_index.path} points past the end of {self.log_path}")
            ts, off = self.time_index.last_entry()
            self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, off
            return True
        except CorruptIndexError as e:
            log.warning("Found a corrupted index file %s, rebuilding it: %s", self.offset_index.path, e)
            return False

    def tail_is_intact(self) -> bool:
        """True when the batches from the last index entry tile the file exactly and the last
        one's CRC holds. Cheap (a few header reads and one CRC), run on segments that a clean
        shutdown says need no recovery: a file shortened or overwritten behind the broker's
        back is caught instead of appended after."""
        _off, pos = self.offset_index.lookup(1 << 62)
        last = None
        for p, h in self.iter_headers(pos):
            if h.magic != rb.MAGIC_V2 or h.size < rb.HEADER_SIZE or p + h.size > self.size:
                return False
            last = (p, h)
            pos = p + h.size
        if pos != self.size:
            return False
        if last is not None:
            p, h = last
            if not rb.is_crc_valid(os.pread(self.handle.fd, h.size, p), 0, h.size):
                return False
        return True

    def recover(self, on_batch=None) -> int:
        """Rebuild indexes by scanning every batch and verifying its CRC; truncate at the
        first invalid batch. Returns the number of bytes truncated. The indexes are built in
        memory and each written once at the end; the segment is left holding no descriptor
        but its log file's."""
        self.offset_index.begin_rebuild()
        self.time_index.begin_rebuild()
        self.max_timestamp_so_far = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        valid = 0
        last_index_entry = 0
        fd = self.handle.fd
        size = self.size
        reason = None
        next_offset = self.base_offset
        while valid < size:
            if valid + rb.HEADER_SIZE > size:
                reason = "truncated batch header"
                break
            head = os.pread(fd, rb.HEADER_SIZE, valid)
            h = rb.read_header(head)
            if h.magic != rb.MAGIC_V2:
                reason = f"unexpected magic {h.magic}"
                break
            if h.size < rb.HEADER_SIZE or valid + h.size > size:
                reason = f"batch of {h.size} bytes runs past the end of the file"
                break
            if h.base_offset < self.base_offset or h.last_offset_delta < 0:
                reason = f"batch offset {h.base_offset} out of range for segment"
                break
            data = os.pread(fd, h.size, valid) if h.size > rb.HEADER_SIZE else head
            if not rb.is_crc_valid(data, 0, h.size):
                reason = f"CRC mismatch in batch at offset {h.base_offset}"
                break
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
            if valid - last_index_entry > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, valid)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
                last_index_entry = valid
            if on_batch is not None:
                on_batch(h, data)
            if valid == 0:
                self.rolling_based_timestamp = h.max_timestamp
            valid += h.size
            next_offset = h.next_offset
        truncated = size - valid
        if truncated > 0:
            log.warning(
                "Found invalid messages in log segment %s at byte offset %d (%s); truncating %d bytes",
                self.log_path,
                valid,
                reason,
                truncated,
            )
            os.ftruncate(fd, valid)
            self.size = valid
        if valid == 0:
            self.rolling_based_timestamp = None
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp, True)
        self.offset_index.end_rebuild()
        self.time_index.end_rebuild()
        self.bytes_since_last_index_entry = valid - last_index_entry
        self.next_offset = next_offset
        self.txn_index.truncate_to(next_offset)  # markers past the valid end are gone
        return truncated

    # ------------------------------------------------------------------ truncate / delete
    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it (callers pass
        batch boundaries, as Kafka's do); returns the bytes removed."""
        found = self.find_batch(offset)
        if not found:
            return 0
        pos = found[0]
        if pos >= self.size:
            return 0
        removed = self.size - pos
        os.ftruncate(self.handle.fd, pos)
        self.size = pos
        self.offset_index.truncate_to_offset(offset)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        self.next_offset = None
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        if pos == 0:  # empty again: the segment.ms clock restarts, as in Kafka's truncateTo
            self.created_ms = int(time.time() * 1000)
            self.rolling_based_timestamp = None
        for _p, hh in self.iter_headers(0):
            if hh.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = hh.max_timestamp
                self.offset_of_max_timestamp = hh.last_offset
        return removed

    def rename_suffix(self, suffix: str) -> None:
        """Rename all files (e.g. to ``.deleted``) keeping the fd open for queued reads."""
        self.change_file_suffixes("", suffix)

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Swap the ``old`` file suffix for ``new`` on every file (``.cleaned`` -> ``.swap`` -> none,
        Kafka's changeFileSuffixes), keeping the descriptor open for queued reads."""

        def renamed(path: str) -> str:
            return (path[: -len(old)] if old and path.endswith(old) else path) + new

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for idx in (self.offset_index, self.time_index, self.txn_index):
            idx.rename(renamed(idx.path))

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.handle.close()

    def delete_files(self) -> None:
        self.close()
        for p in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size})"
