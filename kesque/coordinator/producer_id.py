"""ProducerIdManager: hands out producer ids from blocks the controller allocates.

Each block is recorded in the metadata log (ProducerIdsRecord) before any id from it is
used, so ids never repeat across restarts or brokers.
"""

from __future__ import annotations


class ProducerIdManager:
    def __init__(self, allocate):
        self._allocate = allocate  # () -> (first id, block size)
        self._next = 0
        self._end = 0

    def generate(self) -> int:
        if self._next >= self._end:
            start, size = self._allocate()
            self._next, self._end = start, start + size
        pid = self._next
        self._next += 1
        return pid
