"""ProducerIdManager: hands out producer ids from blocks the active controller allocates.

Each block is recorded in the metadata log (ProducerIdsRecord) by the controller
(AllocateProducerIds) before any id from it is used, so ids never repeat across restarts or
brokers. As Kafka's RPCProducerIdManager, the next block is requested ahead, once 90% of the
current one is used; a request that finds no block answers COORDINATOR_LOAD_IN_PROGRESS
(retriable) while one is on its way.

The manager is a sans-IO state machine: a current block, at most one block ready after it, and
at most one request on its way. It asks for a block with ``request_block()`` and is told the
answer with :meth:`ProducerIdManager.block_arrived` or :meth:`ProducerIdManager.block_failed`;
the driver that sends the request and awaits it is kesque.server.drivers.producer_ids.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class ProducerIdManager:
    def __init__(self, request_block: Callable[[], None]):
        self._request_block = request_block  # sends the request for a block (its answer comes back later)
        self._next = 0
        self._end = 0
        self._low = 0  # prefetch when fewer ids than this are left
        self._ready: tuple[int, int] | None = None
        self._fetching = False

    def start_request(self) -> bool:
        """Mark a block request on its way, unless a block is ready or one is already on its
        way: True when the caller is to send it."""
        if self._fetching or self._ready is not None:
            return False
        self._fetching = True
        return True

    def prefetch(self) -> None:
        """Ask for the next block unless one is ready or on its way."""
        if self.start_request():
            self._request_block()

    def block_arrived(self, start: int, size: int) -> None:
        self._ready = (start, size)
        self._fetching = False

    def block_failed(self, error: BaseException) -> None:
        """The request failed: the next :meth:`generate` that needs a block asks again."""
        log.warning("Could not allocate a block of producer ids: %s", error)
        self._fetching = False

    def request_cancelled(self) -> None:
        """The request was given up (the broker stops): nothing is on its way any more."""
        self._fetching = False

    def raise_floor(self, floor: int) -> None:
        """No id below ``floor`` is handed out from now on (a failed-over mirror topic's logs use
        the source's producer ids up to it, docs/mirror.md): the blocks already here skip them."""
        if self._next < floor:
            self._next = min(floor, self._end)
        if self._ready is not None and self._ready[0] < floor:
            start, size = self._ready
            end = start + size
            self._ready = (floor, end - floor) if floor < end else None

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
