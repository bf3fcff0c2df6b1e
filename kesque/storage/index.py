"""Sparse segment indexes in Kafka's on-disk layout.

``.index`` (OffsetIndex): 8-byte entries ``relativeOffset:int32, position:int32``.
``.timeindex`` (TimeIndex): 12-byte entries ``timestamp:int64, relativeOffset:int32``.

Both are kept in memory as typed arrays (binary search with :mod:`bisect`, which works
on any sequence and runs in C) and appended to their files entry by entry. Kafka
preallocates and mmaps the active index; we write exact-size files, which is what Kafka
leaves after it trims an index on roll or clean shutdown.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(Exception):
    pass


class _Index:
    entry: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry.size)
        self._fd: int | None = None

    # file handling ------------------------------------------------------
    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _append_bytes(self, data: bytes) -> None:
        os.write(self._open(), data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def _rewrite(self, data: bytes) -> None:
        self.close()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)

    def rename(self, new_path: str) -> None:
        self.close()
        if os.path.exists(self.path):
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
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
        self._rewrite(b"".join(OFFSET_ENTRY.pack(o - self.base_offset, p)
                               for o, p in zip(self.offsets, self.positions)))

    def reset(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")
        self._rewrite(b"")

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
        self._append_bytes(TIME_ENTRY.pack(timestamp, offset - self.base_offset))

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
        self._rewrite(b"".join(TIME_ENTRY.pack(t, o - self.base_offset)
                               for t, o in zip(self.timestamps, self.offsets)))

    def reset(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        self._rewrite(b"")
