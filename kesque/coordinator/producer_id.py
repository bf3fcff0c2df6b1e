"""ProducerIdManager: hands out producer ids from blocks the active controller allocates.

Each block is recorded in the metadata log (ProducerIdsRecord) by the controller
(AllocateProducerIds) before any id from it is used, so ids never repeat across restarts or
brokers. As Kafka's RPCProducerIdManager, the next block is requested ahead, once 90% of the
current one is used; a request that finds no block answers COORDINATOR_LOAD_IN_PROGRESS
(retriable) while one is on its way.
"""

from __future__ import annotations

import logging

from ..errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class ProducerIdManager:
    def __init__(self, allocate, spawn):
        self._allocate = allocate  # async () -> (first id, block size)
        self._spawn = spawn  # runs a coroutine in the background
        self._next = 0
        self._end = 0
        self._low = 0  # prefetch when fewer ids than this are left
        self._ready: tuple[int, int] | None = None
        self._fetching = False

    def prefetch(self) -> None:
        """Ask for the next block unless one is ready or on its way."""
        if self._fetching or self._ready is not None:
            return
        self._fetching = True
        self._spawn(self._fetch())

    async def load(self) -> None:
        """The first block, awaited (at start: the first InitProducerId is answered at once)."""
        if self._ready is None and not self._fetching:
            self._fetching = True
            await self._fetch()

    async def _fetch(self) -> None:
        try:
            self._ready = await self._allocate()
        except Exception as e:  # noqa: BLE001 - the next generate() asks again
            log.warning("Could not allocate a block of producer ids: %s", e)
        finally:
            self._fetching = False

    def generate(self) -> int:
        if self._next >= self._end:
            if self._ready is None:
                self.prefetch()
                raise KafkaError(
                    ErrorCode.coordinator_load_in_progress, "Producer ID block is not yet available, retrying."
                )
            start, size = self._ready
            self._ready = None
            self._next, self._end, self._low = start, start + size, max(size // 10, 1)
        pid = self._next
        self._next += 1
        if self._end - self._next <= self._low:
            self.prefetch()
        return pid
