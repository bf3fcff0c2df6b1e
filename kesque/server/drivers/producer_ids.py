"""The producer-id manager's requests (the RPC half of Kafka's RPCProducerIdManager): sends
AllocateProducerIds to the active controller whenever ``coordinator.producer_id
.ProducerIdManager`` asks for a block, in the background, and tells it the answer. At start
:meth:`ProducerIdBlocks.load` awaits the first block, so that the first InitProducerId is
answered at once."""

from __future__ import annotations

from ...coordinator.producer_id import ProducerIdManager


class ProducerIdBlocks:
    def __init__(self, allocate, spawn):
        self._allocate = allocate  # async () -> (first id, block size)
        self._spawn = spawn  # runs a coroutine in the background
        self.manager = ProducerIdManager(lambda: self._spawn(self._fetch()))

    async def load(self) -> None:
        """The first block, awaited (unless one is ready or already on its way)."""
        if self.manager.start_request():
            await self._fetch()

    async def _fetch(self) -> None:
        try:
            start, size = await self._allocate()
        except Exception as e:  # noqa: BLE001 - the next generate() asks again
            self.manager.block_failed(e)
        except BaseException:
            self.manager.request_cancelled()
            raise
        else:
            self.manager.block_arrived(start, size)
