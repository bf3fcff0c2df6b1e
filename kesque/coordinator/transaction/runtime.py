"""TransactionCoordinator: runs a TransactionCoordinatorShard for every
``__transaction_state`` partition this broker leads, and decides how a transaction's markers
complete it (Kafka's TransactionCoordinator and the decisions of its
TransactionMarkerChannelManager). Sans-IO: the writing and waiting is the driver's,
kesque.server.drivers.txn_markers.

Once a transaction's PrepareCommit/PrepareAbort record is committed (the high watermark of its
``__transaction_state`` partition passed it: a coordinator that fails over before that never
sends markers), a marker goes to the leader of each of its partitions from the metadata image
(:meth:`TransactionCoordinator.marker_destinations`), through the driver's sender
(:class:`~kesque.server.txn_channels.TxnMarkerSender`: appended directly when this broker leads
the partition, else sent with WriteTxnMarkers, batched per broker); a marker counts once
committed on its partition. A partition whose leader is unavailable is retried, a partition
whose topic was deleted leaves the transaction (as Kafka's marker channel does:
:meth:`TransactionCoordinator.marker_results`). When every partition has its marker, the shard
writes CompleteCommit/CompleteAbort.
"""

from __future__ import annotations

import logging

from ...errors import ErrorCode, KafkaError
from ..runtime import CoordinatorRuntime
from .requests import AddPartitionsToTxn, EndTxn, InitProducerId
from .shard import EndTxnResult, InitResult, TransactionCoordinatorShard, TxnConfig, TxnMarkers, TxnMetadata

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_VERSION_FEATURE = "transaction.version"

# errors after which a marker is sent again (TransactionMarkerRequestCompletionHandler), also
# when the request did not reach the leader (NETWORK_EXCEPTION, REQUEST_TIMED_OUT)
_RETRY = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.network_exception,
    }
)
# the coordinator itself is stale: stop (the new coordinator completes the transaction)
_FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
# produce-path verification errors as a producer must see them (ReplicaManager, KIP-890)
_VERIFY_RETRIABLE = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


class TransactionCoordinator(CoordinatorRuntime):
    TOPIC = TRANSACTION_STATE_TOPIC
    PARTITIONS_KEY = "transaction.state.log.num.partitions"
    NAME = "transaction coordinator"
    ACKS_ALL_AT_APPEND = True

    def __init__(self, host, producer_ids, markers=None):
        super().__init__(host)
        self.config = TxnConfig.from_broker(host.config)
        self.producer_ids = producer_ids
        self.verification_enabled = host.config.get("transaction.partition.verification.enable")
        # the marker writer (kesque.server.drivers.txn_markers.TxnMarkerChannelManager, the
        # server sets it): ``add(partition, txn, commit, pending)`` completes the transaction
        # through the methods below, ``close()`` stops it
        self.markers = markers

    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` (0 when the cluster never finalized it: a data
        dir formatted before kesque knew the feature keeps today's rules)."""
        return self.host.image().features.get(TRANSACTION_VERSION_FEATURE, 0)

    def tv2(self, request_is_tv2: bool) -> bool:
        """KIP-890 part 2 rules for a request: the version a TV2 client sends (EndTxn v5+,
        Produce v12+, TxnOffsetCommit v5+, AddPartitionsToTxn v4+ from a leader), on a cluster
        that finalized ``transaction.version`` 2 (Kafka goes by the request version alone; kesque
        also asks the feature so that a cluster at version 1 keeps version 1's rules whatever a
        client sends)."""
        return request_is_tv2 and self.transaction_version() >= 2

    def new_shard(self, partition: int, leader_epoch: int) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(
            partition,
            self.config,
            lambda txn, commit: self._queue_markers(partition, txn, commit),
            self.host.clock,
            self.producer_ids.generate,
            leader_epoch,
        )

    # ------------------------------------------------------------------ write operations
    def init_producer_id(self, req: InitProducerId) -> InitResult:
        """Raises KafkaError (NOT_COORDINATOR, a failed write, ...); the markers of a transaction
        it fenced are queued once its PrepareAbort is written."""
        shard = self.shard_for(req.transactional_id)
        res = self.apply(shard, shard.init_producer_id(req))
        self._send(shard, res.markers)
        return res

    def add_partitions(self, req: AddPartitionsToTxn) -> None:
        self.run_write(req.transactional_id, lambda shard: shard.add_partitions(req))

    def end_txn(self, req: EndTxn) -> EndTxnResult:
        shard = self.shard_for(req.transactional_id)
        res = self.apply(shard, shard.end_txn(req))
        self._send(shard, res.markers)
        return res

    def _send(self, shard, markers: TxnMarkers | None) -> None:
        if markers is not None:
            self._queue_markers(shard.partition, markers.txn, markers.commit)

    def write_timeout_ms(self, txn_id: str | None = None) -> int:
        """A transaction's write may wait its transaction timeout (Kafka's TransactionStateManager)."""
        shard = self.shards.get(self.partition_for(txn_id)) if txn_id else None
        txn = shard.txns.get(txn_id) if shard is not None else None
        return (
            min(txn.timeout_ms, self.config.max_timeout_ms)
            if txn is not None
            else self.host.config.get("request.timeout.ms")
        )

    # ------------------------------------------------------------------ markers
    def _queue_markers(self, partition: int, txn: TxnMetadata, commit: bool) -> None:
        pending = self.uncommitted([partition])  # the Prepare record just written (none when loaded)
        self.markers.add(partition, txn, commit, pending)

    def awaiting_markers(self, partition: int, txn: TxnMetadata):
        """The shard, while it still holds this transaction waiting for its markers."""
        shard = self.shards.get(partition)
        current = shard.txns.get(txn.transactional_id) if shard is not None else None
        if (
            current is None
            or current.pending is None
            or current.producer_id != txn.producer_id
            or current.producer_epoch != txn.producer_epoch
        ):
            return None  # unloaded, or the transaction moved on
        return shard

    def prepare_uncommitted(self, partition: int, txn: TxnMetadata, pending: dict) -> dict | None:
        """The writes of ``pending`` (the Prepare record) the high watermark has not passed yet,
        ``{}`` once it has, or None when the markers are not to be written by this broker (its
        leadership is gone, or the transaction no longer waits for them)."""
        if self.awaiting_markers(partition, txn) is None:
            return None
        rm = self.host.replica_manager
        parts = {tp: rm.partitions.get(tp) for tp in pending}
        if any(part is None or not part.is_leader for part in parts.values()):
            return None
        return {tp: end for tp, end in pending.items() if parts[tp].log.high_watermark < end}

    def marker_destinations(self, shard, txn: TxnMetadata, remaining: set) -> tuple[dict[int, list], set]:
        """One round of markers: ``{leader: [tp]}`` from the metadata image, and the partitions
        whose leader is unavailable (retried); a partition that no longer exists leaves the
        transaction."""
        image = self.host.image()
        by_leader: dict[int, list] = {}
        retry = set()
        for topic, p in sorted(remaining):
            t = image.topic(topic)
            reg = t.partitions.get(p) if t is not None else None
            if reg is None:
                self._drop(shard, txn, topic, p, "the partition no longer exists")
            elif reg.leader < 0:
                retry.add((topic, p))
            else:
                by_leader.setdefault(reg.leader, []).append((topic, p))
        return by_leader, retry

    def marker_results(self, partition: int, shard, txn: TxnMetadata, results: list, retry: set) -> set | None:
        """The leaders' answers of one round (a ``{tp: error}`` each): the partitions to retry
        (with ``retry``), or None to stop (a newer coordinator or producer epoch exists, or the
        transaction no longer waits for its markers)."""
        if self.awaiting_markers(partition, txn) is None:
            return None
        image = self.host.image()
        for codes in results:
            for (topic, p), code in codes.items():
                if code == ErrorCode.none:
                    continue
                t = image.topic(topic)
                if t is None or p not in t.partitions:
                    self._drop(shard, txn, topic, p, "the partition no longer exists")
                elif code in _FENCED:
                    log.warning(
                        "Stopping markers of transaction %s: %s (a newer coordinator or producer epoch exists)",
                        txn.transactional_id,
                        ErrorCode(code).name,
                    )
                    return None
                elif code in _RETRY:
                    retry.add((topic, p))
                else:
                    self._drop(shard, txn, topic, p, f"its marker failed with {ErrorCode(code).name}")
        return retry

    def markers_written(self, partition: int, txn: TxnMetadata) -> bool:
        """Every marker is written: the shard writes CompleteCommit/CompleteAbort. False when
        that failed (to be retried); True once done, or when the transaction no longer waits."""
        shard = self.awaiting_markers(partition, txn)
        if shard is None:
            return True
        try:
            self.apply(shard, shard.markers_written(txn.transactional_id, txn.producer_id, txn.producer_epoch))
            return True
        except KafkaError as e:
            log.warning("Could not complete transaction %s: %s; retrying", txn.transactional_id, e)
            return False

    @staticmethod
    def _drop(shard, txn: TxnMetadata, topic: str, p: int, why: str) -> None:
        log.info("Dropping %s-%d from transaction %s: %s", topic, p, txn.transactional_id, why)
        shard.drop_partitions(txn.transactional_id, {(topic, p)})

    def shutdown(self) -> None:
        if self.markers is not None:
            self.markers.close()
        super().shutdown()

    # ------------------------------------------------------------------ KIP-890 verification
    def verify(
        self, txn_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        try:
            shard = self.shard_for(txn_id)
        except KafkaError as e:
            return {tp: e.code for tp in partitions}
        return shard.verify_partitions(txn_id, producer_id, producer_epoch, partitions)

    def verify_produce(
        self,
        txn_id: str | None,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        supports_abortable: bool,
    ) -> tuple[ErrorCode, str | None]:
        """Before the first transactional batch of a transaction is appended to a partition,
        check with the coordinator that the partition was added (KIP-890 part 1). Errors come
        back as ReplicaManager maps them for producers."""
        if not txn_id:
            return ErrorCode.invalid_txn_state, "Transactional batches need a transactional id"
        err = self.verify(txn_id, producer_id, producer_epoch, [(topic, partition)])[(topic, partition)]
        return self.verification_error(err, supports_abortable)

    @staticmethod
    def verification_error(
        err: ErrorCode, supports_abortable: bool, supports_epoch_bump: bool = False
    ) -> tuple[ErrorCode, str | None]:
        """A coordinator's verification answer as the produce path maps it (ReplicaManager).
        ``supports_epoch_bump``: a transaction version 2 producer's add, which is told
        CONCURRENT_TRANSACTIONS as it is (common while its previous transaction completes)."""
        if err == ErrorCode.none or (err == ErrorCode.concurrent_transactions and supports_epoch_bump):
            return err, None
        if err == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch, "The producer was fenced by a newer epoch"
        if err == ErrorCode.transaction_abortable:
            if supports_abortable:
                return err, "Partition was not added to the transaction"
            return ErrorCode.invalid_txn_state, "Partition was not added to the transaction"
        if err in _VERIFY_RETRIABLE:
            return (
                ErrorCode.not_enough_replicas,
                f"Unable to verify the partition has been added to the transaction. Underlying error: {err.name}",
            )
        return err, None

    # ------------------------------------------------------------------ periodic
    def abort_timed_out(self) -> None:
        for shard in list(self.shards.values()):
            for txn_id in shard.timed_out():
                try:
                    markers = self.apply(shard, shard.abort_timed_out(txn_id))
                except KafkaError as e:
                    log.warning("Could not abort timed out transaction %s: %s", txn_id, e)
                    continue
                log.info(
                    "Aborting transactionalId %s (producerId %d): transaction timed out after %d ms",
                    txn_id,
                    markers.txn.producer_id,
                    markers.txn.timeout_ms,
                )
                self._send(shard, markers)

    def expire_transactional_ids(self) -> None:
        for shard in list(self.shards.values()):
            try:
                expired = self.apply(shard, shard.expire_transactional_ids())
            except KafkaError as e:
                log.warning("transactional id expiration on partition %d failed: %s", shard.partition, e)
                continue
            for txn_id, producer_id in expired.items():
                log.info("Expired transactionalId %s (producerId %d)", txn_id, producer_id)
