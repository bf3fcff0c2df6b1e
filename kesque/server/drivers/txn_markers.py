"""The transaction coordinator's marker writer (the asyncio half of Kafka's
TransactionMarkerChannelManager): for each transaction the coordinator hands it
(``coordinator.transaction.runtime.TransactionCoordinator``'s ``markers.add``), a task waits
until the Prepare record is committed, writes the markers round by round through the sender
(``server.txn_channels.TxnMarkerSender``) until every partition has its marker, retrying every
``MARKER_RETRY_MS``, and then has the shard write CompleteCommit/CompleteAbort. Which partitions
go where, and what an answer means, the coordinator decides."""

from __future__ import annotations

import asyncio
import logging

from ...errors import ErrorCode
from .delayed import wait_for_acks

log = logging.getLogger(__name__)

MARKER_RETRY_MS = 100


class TxnMarkerChannelManager:
    def __init__(self, coordinator, sender):
        self.tc = coordinator
        self.sender = sender  # write(node, producer id, epoch, commit, coordinator epoch, tps) -> {tp: error}
        self._tasks: set[asyncio.Task] = set()

    def add(self, partition: int, txn, commit: bool, pending: dict) -> None:
        """Complete ``txn`` with its markers, once ``pending`` (the Prepare record: ``{tp: end
        offset}``) is committed."""
        task = asyncio.get_running_loop().create_task(self._complete(partition, txn, commit, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, partition: int, txn, commit: bool, pending: dict) -> None:
        tc = self.tc
        try:
            if not await self._prepare_committed(partition, txn, pending):
                return
            remaining = set(txn.partitions)
            while remaining:
                shard = tc.awaiting_markers(partition, txn)
                if shard is None:
                    return
                remaining = await self._write_markers(partition, shard, txn, commit, remaining)
                if remaining is None:
                    return
                if remaining:
                    await asyncio.sleep(MARKER_RETRY_MS / 1000)
            while not tc.markers_written(partition, txn):
                await asyncio.sleep(MARKER_RETRY_MS / 1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("markers of transaction %s failed", txn.transactional_id)

    async def _prepare_committed(self, partition: int, txn, pending: dict) -> bool:
        """Wait until the high watermark passed the Prepare record, for as long as this broker
        leads and the transaction waits for its markers."""
        tc = self.tc
        while True:
            left = tc.prepare_uncommitted(partition, txn, pending)
            if left is None:
                return False
            if not left:
                return True
            codes = await wait_for_acks(tc.host.replica_manager, left, tc.write_timeout_ms())
            if any(codes.values()):
                log.info(
                    "The %s record of transaction %s is not committed yet (%s); waiting",
                    txn.state.kafka_name,
                    txn.transactional_id,
                    ErrorCode(next(iter(codes.values()))).name,
                )

    async def _write_markers(self, partition: int, shard, txn, commit: bool, remaining: set):
        """One round of markers: the partitions to retry, or None to stop."""
        by_leader, retry = self.tc.marker_destinations(shard, txn, remaining)
        results = await asyncio.gather(
            *(
                self.sender.write(node, txn.producer_id, txn.producer_epoch, commit, shard.coordinator_epoch, tps)
                for node, tps in by_leader.items()
            )
        )
        return self.tc.marker_results(partition, shard, txn, results, retry)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
