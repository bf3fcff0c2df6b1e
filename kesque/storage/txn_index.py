"""TransactionIndex: the ``.txnindex`` file of a segment (Kafka's TransactionIndex).

One 34-byte entry per aborted transaction whose ABORT marker lies in the segment:
``version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 |
lastStableOffset int64``. ``lastOffset`` is the marker's offset; ``lastStableOffset`` the
partition's LSO right after the abort. A read_committed Fetch collects the entries that
overlap the fetched range so the client can drop the aborted records.

Like Kafka's, the file is created lazily with its first entry, and entries are kept in
memory too (a segment holds few aborted transactions; Kafka also scans the whole file).
The file is opened for each entry written (one per aborted transaction), so an index holds
no descriptor: a broker keeps to one per segment, its log file's.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass

from .index import fsync_path

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._unsynced = False
        if os.path.exists(path):
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            raw = f.read()
        whole = len(raw) // ENTRY_SIZE * ENTRY_SIZE
        if whole != len(raw):
            log.warning("%s: dropping %d bytes of a partial entry", self.path, len(raw) - whole)
        for version, pid, first, last, lso in _ENTRY.iter_unpack(raw[:whole]):
            if version != VERSION:
                log.warning("%s: entry of unknown version %d; ignoring the rest of the index", self.path, version)
                break
            self.entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(raw) or len(self.entries) * ENTRY_SIZE != len(raw):
            self._rewrite()

    def _rewrite(self) -> None:
        self._unsynced = True
        if not self.entries:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        with open(self.path, "wb") as f:
            f.write(b"".join(_ENTRY.pack(VERSION, *_fields(e)) for e in self.entries))

    # ------------------------------------------------------------------ write
    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            # only recovery replays markers below the index's end: keep what is there, fill gaps
            if any(e.last_offset == txn.last_offset for e in self.entries):
                return
            log.warning("%s: adding aborted transaction at %d found missing by recovery", self.path, txn.last_offset)
            self.entries.append(txn)
            self.entries.sort(key=lambda e: e.last_offset)
            self._rewrite()
            return
        self.entries.append(txn)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _ENTRY.pack(VERSION, *_fields(txn)))
        finally:
            os.close(fd)
        self._unsynced = True

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def reset(self) -> None:
        self.entries = []
        self._rewrite()

    def flush(self) -> None:
        if self._unsynced:
            fsync_path(self.path)
            self._unsynced = False

    def close(self) -> None:
        pass  # no descriptor is kept

    def rename(self, new_path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, new_path)
        self.path = new_path

    # ------------------------------------------------------------------ read
    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), and whether the search
        is complete (an entry's LSO reached the upper bound: later segments cannot matter)."""
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return out, True
        return out, False


def _fields(e: AbortedTxn) -> tuple[int, int, int, int]:
    return e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
