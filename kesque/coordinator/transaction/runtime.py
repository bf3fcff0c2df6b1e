"""TransactionCoordinator: runs a TransactionCoordinatorShard for every
``__transaction_state`` partition this broker leads, and writes the transactions' markers
(Kafka's TransactionCoordinator + TransactionMarkerChannelManager).

Markers are written by the leader of each partition of a transaction. On one node every
leader is local, so the coordinator appends them through the ReplicaManager; a partition
whose leader is unavailable is retried, a partition whose topic was deleted leaves the
transaction (as Kafka's marker channel does). When every partition has its marker, the shard
writes CompleteCommit/CompleteAbort.
"""

from __future__ import annotations

import logging

from ...errors import ErrorCode, KafkaError
from ..runtime import CoordinatorRuntime
from .shard import TransactionCoordinatorShard, TxnConfig, TxnMetadata

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
MARKER_RETRY_MS = 100

# errors after which a marker is sent again (TransactionMarkerRequestCompletionHandler)
_RETRY = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
                    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error})
# the coordinator itself is stale: stop (the new coordinator completes the transaction)
_FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
# produce-path verification errors as a producer must see them (ReplicaManager, KIP-890)
_VERIFY_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                               ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                               ErrorCode.not_coordinator})


class TransactionCoordinator(CoordinatorRuntime):
    TOPIC = TRANSACTION_STATE_TOPIC
    PARTITIONS_KEY = "transaction.state.log.num.partitions"
    NAME = "transaction coordinator"

    def __init__(self, host, producer_ids):
        super().__init__(host)
        self.config = TxnConfig.from_broker(host.config)
        self.producer_ids = producer_ids
        self.verification_enabled = host.config.get("transaction.partition.verification.enable")

    def new_shard(self, partition: int, leader_epoch: int) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(partition, self.config, lambda recs: self.write(partition, recs),
                                           lambda txn, commit: self._queue_markers(partition, txn, commit),
                                           self.host.clock, self.producer_ids.generate, leader_epoch)

    # ------------------------------------------------------------------ markers
    def _queue_markers(self, partition: int, txn: TxnMetadata, commit: bool) -> None:
        self.host.loop.call_soon(self._write_markers, partition, txn, commit, set(txn.partitions))

    def _write_markers(self, partition: int, txn: TxnMetadata, commit: bool, remaining: set) -> None:
        shard = self.shards.get(partition)
        current = shard.txns.get(txn.transactional_id) if shard is not None else None
        if current is None or current.pending is None or current.producer_id != txn.producer_id or \
                current.producer_epoch != txn.producer_epoch:
            return  # unloaded, or the transaction moved on
        rm = self.host.replica_manager
        retry = set()
        for topic, p in sorted(remaining):
            try:
                rm.append_txn_marker(topic, p, txn.producer_id, txn.producer_epoch, commit, shard.coordinator_epoch)
            except KafkaError as e:
                t = self.host.image().topic(topic)
                if t is None or p not in t.partitions:
                    log.info("Dropping %s-%d from transaction %s: the partition no longer exists", topic, p,
                             txn.transactional_id)
                    shard.drop_partitions(txn.transactional_id, {(topic, p)})
                elif e.code in _FENCED:
                    log.warning("Stopping markers of transaction %s: %s (a newer coordinator or producer epoch "
                                "exists)", txn.transactional_id, e)
                    return
                elif e.code in _RETRY:
                    retry.add((topic, p))
                else:
                    log.error("Marker for %s-%d of transaction %s failed with %s; removing the partition",
                              topic, p, txn.transactional_id, e)
                    shard.drop_partitions(txn.transactional_id, {(topic, p)})
            except OSError as e:
                log.error("Marker for %s-%d of transaction %s failed: %s; retrying", topic, p, txn.transactional_id, e)
                retry.add((topic, p))
        if retry:
            self.timer.schedule(f"{partition}/markers/{txn.transactional_id}", MARKER_RETRY_MS,
                                lambda: self._write_markers(partition, txn, commit, retry))
            return
        try:
            shard.markers_written(txn.transactional_id, txn.producer_id, txn.producer_epoch)
        except KafkaError as e:
            log.warning("Could not complete transaction %s: %s; retrying", txn.transactional_id, e)
            self.timer.schedule(f"{partition}/markers/{txn.transactional_id}", MARKER_RETRY_MS,
                                lambda: self._write_markers(partition, txn, commit, set()))

    # ------------------------------------------------------------------ KIP-890 verification
    def verify(self, txn_id: str, producer_id: int, producer_epoch: int,
               partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        try:
            shard = self.shard_for(txn_id)
        except KafkaError as e:
            return {tp: e.code for tp in partitions}
        return shard.verify_partitions(txn_id, producer_id, producer_epoch, partitions)

    def verify_produce(self, txn_id: str | None, producer_id: int, producer_epoch: int, topic: str, partition: int,
                       supports_abortable: bool) -> tuple[ErrorCode, str | None]:
        """Before the first transactional batch of a transaction is appended to a partition,
        check with the coordinator that the partition was added (KIP-890 part 1). Errors come
        back as ReplicaManager maps them for producers."""
        if not txn_id:
            return ErrorCode.invalid_txn_state, "Transactional batches need a transactional id"
        err = self.verify(txn_id, producer_id, producer_epoch, [(topic, partition)])[(topic, partition)]
        if err == ErrorCode.none:
            return err, None
        if err == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch, "The producer was fenced by a newer epoch"
        if err == ErrorCode.transaction_abortable:
            if supports_abortable:
                return err, "Partition was not added to the transaction"
            return ErrorCode.invalid_txn_state, "Partition was not added to the transaction"
        if err in _VERIFY_RETRIABLE:
            return ErrorCode.not_enough_replicas, \
                f"Unable to verify the partition has been added to the transaction. Underlying error: {err.name}"
        return err, None

    # ------------------------------------------------------------------ periodic
    def abort_timed_out(self) -> None:
        for shard in list(self.shards.values()):
            shard.abort_timed_out()

    def expire_transactional_ids(self) -> None:
        for shard in list(self.shards.values()):
            try:
                shard.expire_transactional_ids()
            except KafkaError as e:
                log.warning("transactional id expiration on partition %d failed: %s", shard.partition, e)
