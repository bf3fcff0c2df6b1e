"""Sparse segment indexes in Kafka's on-disk layout.

``.index`` (OffsetIndex): 8-byte entries ``relativeOffset:int32, position:int32``.
``.timeindex`` (TimeIndex): 12-byte entries ``timestamp:int64, relativeOffset:int32``.

Both are kept in memory as typed arrays (binary search with :mod:`bisect`, which works
on any sequence and runs in C). No index holds a file descriptor: as Kafka does, an index
that is appended to (the active segment's) has its file preallocated to
``segment.index.bytes`` and mapped, and the descriptor is closed once mapped; entries are
stored into the mapping, and closing the index (roll, clean shutdown) unmaps it and trims
the file to its entries, the exact-size file Kafka leaves too. A crash can leave a
preallocated zero tail, which loading stops at (and recovery rebuilds the active
segment's indexes anyway). Recovery builds an index in memory and writes the file once.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import struct
from array import array

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(Exception):
    pass


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4  # Linux


class FileMap:
    """A shared writable mapping of a file that keeps no descriptor: the descriptor is
    closed once the file is mapped, as Kafka's indexes do. (Python's mmap keeps a duplicate
    of it for its lifetime before 3.13's ``trackfd=False``, which would cost a descriptor per
    index.) Only ``write`` touches the memory, and never after ``close``."""

    __slots__ = ("addr", "size")

    def __init__(self, path: str, size: int, touch: int = -1):
        """``touch``: write zeros over the page holding this position first; the first
        store into a page of a fresh (sparse) mapping otherwise costs a journaled file-time
        update inside the page fault, milliseconds on a busy ext4."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, size)
            if 0 <= touch < size:
                end = min(size, (touch // mmap.PAGESIZE + 1) * mmap.PAGESIZE)
                _pwrite_all(fd, bytes(end - touch), touch)
            addr = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        finally:
            os.close(fd)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {path}: {os.strerror(err)}")
        self.addr: int | None = addr
        self.size = size

    def write(self, pos: int, data: bytes) -> None:
        if self.addr is None or pos < 0 or pos + len(data) > self.size:
            raise ValueError(f"write of {len(data)} bytes at {pos} outside a mapping of {self.size}")
        ctypes.memmove(self.addr + pos, data, len(data))

    def flush(self) -> None:
        if self.addr is not None and _libc.msync(self.addr, self.size, _MS_SYNC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def close(self) -> None:
        if self.addr is not None:
            _libc.munmap(self.addr, self.size)
            self.addr = None


def _pwrite_all(fd: int, data: bytes, pos: int) -> None:
    mv = memoryview(data)
    written = 0
    while written < len(mv):
        written += os.pwrite(fd, mv[written:], pos + written)


def _zero_stale_entries(fd: int, start: int, size: int, entry_size: int) -> None:
    """Zero the entries from ``start`` up to the first all-zero one (a preallocated file's
    tail, or the end): what a rewrite with fewer entries leaves behind."""
    chunk_len = entry_size  # usually the first entry is already zero
    pos = start
    while pos < size:
        chunk = os.pread(fd, min(chunk_len, size - pos), pos)
        chunk_len = entry_size * 4096
        if not chunk:
            return
        stale = len(chunk.rstrip(b"\0"))
        if stale:
            _pwrite_all(fd, bytes(stale), pos)
        if stale < len(chunk) and not chunk[-entry_size:].strip(b"\0"):
            return
        pos += len(chunk)


def fsync_path(path: str) -> None:
    """fsync a file that no descriptor is kept for (a missing file has nothing to sync)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Index:
    entry: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry.size)
        self._mm: FileMap | None = None  # the preallocated file, while entries are appended
        self._untrimmed = False  # the file is longer than its entries (zeros after them)
        self._rebuilding = False  # recovery: entries kept in memory, the file written at the end
        self._unsynced = False  # rewritten since the last flush
        self._allocated = 0  # the mapped file's bytes below this are allocated (not holes)

    # file handling ------------------------------------------------------
    def _map(self, entries: int) -> FileMap:
        """Map the file with room for ``entries`` entries (the file keeps those it has)."""
        self._unmap()
        # the page the entry being appended goes to (nothing of the file is after it)
        self._mm = FileMap(self.path, entries * self.entry.size, touch=(len(self) - 1) * self.entry.size)
        self._untrimmed = True
        return self._mm

    def _append_bytes(self, data: bytes, final: bool = False) -> None:
        """Store the entry just added to the in-memory arrays at its place in the file.
        ``final``: the index is closed next (roll, shutdown), so an unmapped file is written
        directly rather than mapped for one entry."""
        if self._rebuilding:
            return
        pos = (len(self) - 1) * self.entry.size
        mm = self._mm
        if mm is None and final:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                _pwrite_all(fd, data, pos)
            finally:
                os.close(fd)
            self._unsynced = True
            return
        if mm is None or pos + len(data) > mm.size:
            # one more than the maximum: the final time index entry written at roll
            mm = self._map(max(self.max_entries + 1, 2 * len(self)))
            self._allocated = min(mm.size, (pos // mmap.PAGESIZE + 1) * mmap.PAGESIZE)  # _map touched it
        end = pos + len(data)
        if end > self._allocated:
            self._allocate(pos, end, mm.size)
        mm.write(pos, data)

    def _allocate(self, pos: int, end: int, size: int) -> None:
        """Write zeros over the pages that ``[pos, end)`` reaches first, with a plain write: on a
        full file system (tmpfs, a quota) the first store into a hole of a shared mapping is a
        SIGBUS that kills the process, where a write is an ENOSPC the log dir handles."""
        upto = min(size, ((end - 1) // mmap.PAGESIZE + 1) * mmap.PAGESIZE)
        fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            _pwrite_all(fd, bytes(upto - pos), pos)
        finally:
            os.close(fd)
        self._allocated = upto

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
            self._unsynced = True  # what was stored into the mapping is flushed by path now

    def close(self) -> None:
        """Unmap and trim the file to its entries (roll, shutdown): the exact-size file."""
        self._unmap()
        if self._untrimmed:
            self._untrimmed = False
            try:
                os.truncate(self.path, self.file_size())
            except FileNotFoundError:
                pass

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()
        elif self._unsynced:
            fsync_path(self.path)
        self._unsynced = False

    def _rewrite(self, data: bytes) -> None:
        """Write the entries over the file's start and zero the stale ones after them, in
        place (as Kafka rewrites its mapped indexes): no temporary file and rename, and no
        shrinking (which makes ext4 write the file's dirty pages back first) — each would
        cost recovery milliseconds per index. ``close`` trims the zeros. An index is derived
        data: a torn one fails the sanity check and is rebuilt."""
        self._unmap()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _pwrite_all(fd, data, 0)
            size = os.fstat(fd).st_size
            if size > len(data) and not data:
                os.ftruncate(fd, 0)  # a zero first entry would read as an entry
            elif size > len(data):
                self._untrimmed = True
                _zero_stale_entries(fd, len(data), size, self.entry.size)
        finally:
            os.close(fd)
        self._unsynced = True

    def _entries_bytes(self) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    def begin_rebuild(self) -> None:
        """Forget the entries; until end_rebuild, appends only fill the in-memory arrays."""
        self._unmap()
        self._clear()
        self._rebuilding = True

    def end_rebuild(self) -> None:
        self._rebuilding = False
        self._rewrite(self._entries_bytes())

    def _clear(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def reset(self) -> None:
        self._clear()
        self._rewrite(b"")

    def rename(self, new_path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, new_path)  # a mapping follows the file
        self.path = new_path

    def delete(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def __len__(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def file_size(self) -> int:
        return len(self) * self.entry.size


class OffsetIndex(_Index):
    entry = OFFSET_ENTRY

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024):
        super().__init__(path, base_offset, max_index_size)
        self.offsets = array("q")  # absolute offsets
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def load(self) -> None:
        """Read the file; raises CorruptIndexError when it fails Kafka's sanity check."""
        self.offsets = array("q")
        self.positions = array("q")
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) % 8:
            raise CorruptIndexError(f"index file {self.path} has size {len(data)}, not a multiple of 8")
        last_off = -1
        last_pos = -1
        for rel, pos in OFFSET_ENTRY.iter_unpack(data):
            if rel == 0 and pos == 0 and last_off >= 0:
                break  # preallocated zero tail (a file Kafka left unclean)
            off = self.base_offset + rel
            if rel < 0 or off <= last_off or pos < last_pos or pos < 0:
                raise CorruptIndexError(f"index file {self.path} has out-of-order entry ({off}, {pos})")
            self.offsets.append(off)
            self.positions.append(pos)
            last_off, last_pos = off, pos
        self._untrimmed = len(data) > self.file_size()

    def append(self, offset: int, position: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            return
        self.offsets.append(offset)
        self.positions.append(position)
        self._append_bytes(OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, target: int) -> tuple[int, int]:
        """Largest entry with offset <= target, or (base_offset, 0)."""
        i = bisect.bisect_right(self.offsets, target) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries with offset >= ``offset``."""
        i = bisect.bisect_left(self.offsets, offset)
        self.truncate_entries(i)

    def truncate_to_position(self, position: int) -> None:
        i = bisect.bisect_left(self.positions, position)
        self.truncate_entries(i)

    def truncate_entries(self, n: int) -> None:
        if n >= len(self.offsets):
            return
        del self.offsets[n:]
        del self.positions[n:]
        self._rewrite(self._entries_bytes())

    def _entries_bytes(self) -> bytes:
        base = self.base_offset
        return b"".join(OFFSET_ENTRY.pack(o - base, p) for o, p in zip(self.offsets, self.positions))

    def _clear(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")

    def last_offset(self) -> int:
        return self.offsets[-1] if self.offsets else self.base_offset


class TimeIndex(_Index):
    entry = TIME_ENTRY

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024):
        super().__init__(path, base_offset, max_index_size)
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    def load(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) % 12:
            raise CorruptIndexError(f"time index file {self.path} has size {len(data)}, not a multiple of 12")
        last_ts = None
        last_off = -1
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            if ts == 0 and rel == 0 and last_ts is not None:
                break
            off = self.base_offset + rel
            if rel < 0 or (last_ts is not None and (ts < last_ts or off < last_off)):
                raise CorruptIndexError(f"time index file {self.path} has out-of-order entry ({ts}, {off})")
            self.timestamps.append(ts)
            self.offsets.append(off)
            last_ts, last_off = ts, off
        self._untrimmed = len(data) > self.file_size()

    def last_entry(self) -> tuple[int, int]:
        if not self.timestamps:
            return -1, self.base_offset
        return self.timestamps[-1], self.offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if not skip_full_check and self.is_full():
            return
        if self.timestamps and (timestamp <= self.timestamps[-1] or offset < self.offsets[-1]):
            return
        if timestamp < 0:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        # skip_full_check is the closing entry (roll, shutdown, end of recovery)
        self._append_bytes(TIME_ENTRY.pack(timestamp, offset - self.base_offset), final=skip_full_check)

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target_ts, or (-1, base_offset)."""
        i = bisect.bisect_right(self.timestamps, target_ts) - 1
        if i < 0:
            return -1, self.base_offset
        return self.timestamps[i], self.offsets[i]

    def truncate_to_offset(self, offset: int) -> None:
        n = len(self.offsets)
        while n > 0 and self.offsets[n - 1] >= offset:
            n -= 1
        if n == len(self.offsets):
            return
        del self.timestamps[n:]
        del self.offsets[n:]
        self._rewrite(self._entries_bytes())

    def _entries_bytes(self) -> bytes:
        base = self.base_offset
        return b"".join(TIME_ENTRY.pack(t, o - base) for t, o in zip(self.timestamps, self.offsets))

    def _clear(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
