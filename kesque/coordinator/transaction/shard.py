"""TransactionCoordinatorShard: the transactional ids of one ``__transaction_state``
partition and their state machine (Kafka's TransactionCoordinator, TransactionMetadata and
TransactionStateManager for one partition). Sans-IO: records go out through ``write``,
markers through ``send_markers``, time comes from ``clock``.

States, as Kafka names them (seed 004)::

    Empty ──AddPartitions──▶ Ongoing ──EndTxn──▶ PrepareCommit ──markers──▶ CompleteCommit
                                 │                PrepareAbort  ──markers──▶ CompleteAbort
                                 └─ timeout / InitProducerId: epoch bump (fence) ─▶ PrepareAbort

Every change is written before it is applied (``_transit``): the new metadata is a copy, its
record goes to the log, and only then does the copy replace the old one; a failed write
changes nothing. While markers are being written the transaction is in PrepareCommit or
PrepareAbort with ``pending`` set to the Complete state it will take: requests that would
change it get CONCURRENT_TRANSACTIONS and the client retries, as with Kafka.

Transaction version 2 (KIP-890 part 2) where the caller says the client uses it (EndTxn v5+,
AddPartitionsToTxn v4+ sent by a partition leader, with ``transaction.version`` 2 finalized):
every EndTxn bumps the producer epoch in its Prepare record (the markers carry the bumped
epoch, so a zombie of the old epoch is fenced on every partition), and when the epoch is
exhausted a new producer id is allocated (``next_producer_id``) that the Complete record
switches to; the answer names the (producer id, epoch) the client goes on with. An abort of a
transaction with no partitions (Empty or Complete: a TV2 client cannot know whether a leader
added one) writes PrepareAbort/CompleteAbort with a bumped epoch. A retry of an EndTxn that
already bumped is recognised by the epoch (one less than the current, or the previous producer
id at the last epoch) and answered with the current producer id and epoch. Version 1 keeps
Kafka's older rules (no bump per transaction). KIP-939 (two-phase commit): a producer that
enables 2PC gets transactions that never time out; InitProducerId with ``keep_prepared_txn``
bumps the epoch (fencing the old incarnation) but keeps the open transaction, answering its producer id and epoch so the
new incarnation can decide to commit or abort it.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field

from ...errors import ErrorCode, KafkaError
from .records import TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767
TWO_PHASE_TIMEOUT_MS = 2**31 - 1  # KIP-939: a 2PC transaction's timeout is Integer.MAX_VALUE

EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


@dataclass
class TxnConfig:
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    two_phase_enabled: bool = False

    @classmethod
    def from_broker(cls, cfg) -> TxnConfig:
        return cls(
            cfg.get("transaction.max.timeout.ms"),
            cfg.get("transactional.id.expiration.ms"),
            cfg.get("transaction.two.phase.commit.enable"),
        )


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None  # the Complete state markers are being written for
    # KIP-939: (producer id, epoch) of the transaction kept open by keep_prepared_txn
    ongoing_pid_epoch: tuple[int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    # KIP-890 part 2: the transaction version of the client's last transition (2: an epoch bump
    # per transaction), and the producer id an exhausted epoch moves to once the markers are written
    client_transaction_version: int = 0
    next_producer_id: int = NO_PRODUCER_ID

    @property
    def tv2(self) -> bool:
        return self.client_transaction_version >= 2

    @property
    def two_phase(self) -> bool:
        return self.timeout_ms == TWO_PHASE_TIMEOUT_MS

    def to_value(self) -> TxnLogValue:
        parts: dict[str, list[int]] = {}
        for t, p in sorted(self.partitions):
            parts.setdefault(t, []).append(p)
        return TxnLogValue(
            producer_id=self.producer_id,
            previous_producer_id=self.previous_producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.timeout_ms,
            transaction_status=self.state,
            transaction_partitions=parts,
            transaction_last_update_timestamp_ms=self.last_update_ms,
            transaction_start_timestamp_ms=self.start_ms,
            ongoing_txn_producer_epoch=self.ongoing_pid_epoch[1],
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )

    @classmethod
    def from_value(cls, txn_id: str, v: TxnLogValue) -> TxnMetadata:
        ongoing = (
            (v.producer_id, v.ongoing_txn_producer_epoch)
            if v.ongoing_txn_producer_epoch >= 0
            else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        )
        return cls(
            txn_id,
            v.producer_id,
            v.producer_epoch,
            NO_PRODUCER_EPOCH,
            v.previous_producer_id,
            v.transaction_timeout_ms,
            TxnState(v.transaction_status),
            {(t, p) for t, ps in v.transaction_partitions.items() for p in ps},
            v.transaction_start_timestamp_ms,
            v.transaction_last_update_timestamp_ms,
            ongoing_pid_epoch=ongoing,
            client_transaction_version=v.client_transaction_version,
            next_producer_id=v.next_producer_id,
        )


@dataclass
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinatorShard:
    def __init__(
        self,
        partition: int,
        config: TxnConfig,
        write,
        send_markers,
        clock,
        allocate_producer_id,
        coordinator_epoch: int = 0,
    ):
        self.partition = partition
        self.config = config
        self._write = write  # (list of (key, value)) -> None; raises KafkaError
        self._send_markers = send_markers  # (TxnMetadata, commit: bool) -> None
        self.clock = clock
        self._allocate = allocate_producer_id
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMetadata] = {}

    # ================================================================== replay / load
    def replay(self, key: bytes, value: bytes | None) -> None:
        txn_id = decode_key(key)
        v = decode_value(value)
        if v is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = TxnMetadata.from_value(txn_id, v)

    def on_loaded(self) -> None:
        """Transactions loaded in a Prepare state get their markers (re)sent, as Kafka's
        loadTransactionsForTxnTopicPartition does."""
        for txn in self.txns.values():
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                commit = txn.state == TxnState.PREPARE_COMMIT
                txn.pending = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                self._send_markers(copy.deepcopy(txn), commit)

    # ================================================================== writes
    def _transit(self, new: TxnMetadata) -> TxnMetadata:
        """Write ``new`` (a modified copy) and make it current once written."""
        self._write([(encode_key(new.transactional_id), encode_value(new.to_value()))])
        self.txns[new.transactional_id] = new
        return new

    def _now(self) -> int:
        return self.clock.now_ms()

    # ================================================================== InitProducerId
    def init_producer_id(
        self,
        txn_id: str,
        timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        enable_2pc: bool = False,
        keep_prepared_txn: bool = False,
    ) -> InitResult:
        if not txn_id:
            return InitResult(ErrorCode.invalid_request)
        if enable_2pc and not self.config.two_phase_enabled:
            return InitResult(ErrorCode.transactional_id_authorization_failed)
        if enable_2pc:
            timeout_ms = TWO_PHASE_TIMEOUT_MS
        elif not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        now = self._now()
        txn = self.txns.get(txn_id)
        if txn is None:
            txn = TxnMetadata(txn_id, self._allocate(), timeout_ms=timeout_ms, last_update_ms=now)
            self.txns[txn_id] = txn  # like putTransactionStateIfNotExists: kept even if the write fails
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        if txn.pending is not None:
            return InitResult(ErrorCode.concurrent_transactions)
        if expected is not None and not (
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == txn.producer_id
            or (expected[0] == txn.previous_producer_id and epoch_exhausted(expected[1]))
        ):
            return InitResult(ErrorCode.producer_fenced)
        st = txn.state
        if st in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return InitResult(ErrorCode.concurrent_transactions)
        if st == TxnState.ONGOING:
            if keep_prepared_txn:
                return self._keep_prepared(txn, timeout_ms, now)
            # fence the current producer: abort its transaction with a bumped epoch; the client
            # retries on CONCURRENT_TRANSACTIONS and then gets an epoch bumped once more
            self._fence_and_abort(txn)
            return InitResult(ErrorCode.concurrent_transactions)
        if st not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return InitResult(ErrorCode.unknown_server_error)
        new = copy.deepcopy(txn)
        if epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
            new.previous_producer_id = txn.producer_id
            new.producer_id = self._allocate()
            new.last_producer_epoch = txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            new.producer_epoch = 0
        else:
            bumped = txn.producer_epoch + 1
            if expected is None:
                new.producer_epoch, new.last_producer_epoch = bumped, NO_PRODUCER_EPOCH
            elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
                new.producer_epoch, new.last_producer_epoch = bumped, txn.producer_epoch
            elif expected[1] == txn.last_producer_epoch:
                pass  # a retry of a bump that succeeded: answer the current epoch
            else:
                return InitResult(ErrorCode.producer_fenced)
        new.state = TxnState.EMPTY
        new.timeout_ms = timeout_ms
        new.partitions = set()
        new.start_ms = -1
        new.last_update_ms = now
        new.ongoing_pid_epoch = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        self._transit(new)
        log.info(
            "Initialized transactionalId %s with producerId %d and producer epoch %d on partition "
            "__transaction_state-%d",
            txn_id,
            new.producer_id,
            new.producer_epoch,
            self.partition,
        )
        return InitResult(ErrorCode.none, new.producer_id, new.producer_epoch)

    def _keep_prepared(self, txn: TxnMetadata, timeout_ms: int, now: int) -> InitResult:
        """KIP-939: keep the open transaction; fence the old incarnation by bumping the epoch."""
        if txn.producer_epoch >= MAX_EPOCH:
            return InitResult(ErrorCode.unknown_server_error)
        ongoing = txn.ongoing_pid_epoch if txn.ongoing_pid_epoch[0] >= 0 else (txn.producer_id, txn.producer_epoch)
        new = copy.deepcopy(txn)
        new.producer_epoch = txn.producer_epoch + 1
        new.last_producer_epoch = NO_PRODUCER_EPOCH
        if txn.two_phase or timeout_ms == TWO_PHASE_TIMEOUT_MS:
            new.timeout_ms = TWO_PHASE_TIMEOUT_MS
        new.last_update_ms = now
        new.ongoing_pid_epoch = ongoing
        self._transit(new)
        return InitResult(ErrorCode.none, new.producer_id, new.producer_epoch, ongoing[0], ongoing[1])

    # ================================================================== AddPartitions
    def _check_producer(self, txn_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        if not txn_id:
            raise KafkaError(ErrorCode.invalid_request)
        txn = self.txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping,
                f"The producer id {producer_id} does not match transactional id {txn_id}",
            )
        if txn.producer_epoch != producer_epoch:
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"Producer epoch {producer_epoch} of {txn_id} is fenced by epoch {txn.producer_epoch}",
            )
        if txn.pending is not None or txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise KafkaError(ErrorCode.concurrent_transactions)
        return txn

    def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[tuple[str, int]],
        client_transaction_version: int = 0,
    ) -> None:
        """Raises KafkaError with the code every partition of the request gets.
        ``client_transaction_version``: 2 when a partition leader adds the partition for a TV2
        producer (AddPartitionsToTxn v4+ without verify_only, as Kafka's
        transactionVersionForAddPartitionsToTxn), recorded with the transition."""
        txn = self._check_producer(txn_id, producer_id, producer_epoch)
        if txn.state == TxnState.ONGOING and partitions <= txn.partitions:
            return
        if txn.state not in (TxnState.EMPTY, TxnState.ONGOING, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            raise KafkaError(ErrorCode.invalid_txn_state)
        now = self._now()
        new = copy.deepcopy(txn)
        if txn.state != TxnState.ONGOING:
            new.start_ms = now
        new.state = TxnState.ONGOING
        new.partitions |= partitions
        new.last_update_ms = now
        new.client_transaction_version = client_transaction_version
        self._transit(new)

    def verify_partitions(
        self, txn_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 verification (AddPartitionsToTxn v4+ verify_only, and the produce path):
        every partition must already be in the ongoing transaction."""
        if not txn_id:
            return {tp: ErrorCode.invalid_request for tp in partitions}
        txn = self.txns.get(txn_id)
        err = None
        if txn is None or txn.producer_id != producer_id:
            err = ErrorCode.invalid_producer_id_mapping
        elif txn.producer_epoch != producer_epoch:
            err = ErrorCode.producer_fenced
        elif txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            err = ErrorCode.concurrent_transactions
        if err is not None:
            return {tp: err for tp in partitions}
        return {tp: ErrorCode.none if tp in txn.partitions else ErrorCode.transaction_abortable for tp in partitions}

    # ================================================================== EndTxn
    def end_txn(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool, tv2: bool = False
    ) -> tuple[int, int]:
        """Raises KafkaError; returns once the Prepare record is written (markers follow), with
        the (producer id, epoch) the answer names: the request's under transaction version 1,
        those the producer goes on with under version 2 (``tv2``: EndTxn v5+ with
        ``transaction.version`` 2 finalized)."""
        if not txn_id:
            raise KafkaError(ErrorCode.invalid_request)
        if tv2:
            return self._end_txn_v2(txn_id, producer_id, producer_epoch, commit)
        txn = self.txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping)
        if producer_epoch != txn.producer_epoch:
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"Producer epoch {producer_epoch} of {txn_id} is fenced by epoch {txn.producer_epoch}",
            )
        if txn.pending is not None:
            raise KafkaError(ErrorCode.concurrent_transactions)
        st = txn.state
        if st == TxnState.ONGOING:
            self._prepare(txn, commit)
            return producer_id, producer_epoch
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if st == done:
            return producer_id, producer_epoch  # a retry of an EndTxn that completed
        if st == preparing:
            raise KafkaError(ErrorCode.concurrent_transactions)
        raise self._invalid_transition(txn, preparing)

    @staticmethod
    def _invalid_transition(txn: TxnMetadata, preparing: TxnState) -> KafkaError:
        return KafkaError(
            ErrorCode.invalid_txn_state,
            f"TransactionalId {txn.transactional_id} is in state {txn.state.kafka_name}, which cannot "
            f"transition to {preparing.kafka_name}",
        )

    def _end_txn_v2(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool) -> tuple[int, int]:
        """Kafka 4.4's TransactionCoordinator.endTransaction for TV2 clients."""
        txn = self.txns.get(txn_id)
        if txn is None:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping)
        # a retry of an EndTxn whose epoch bump (or producer id rotation) was already written
        retry_on_overflow = (
            txn.previous_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1 and txn.producer_epoch == 0
        )
        retry_on_bump = txn.producer_epoch == producer_epoch + 1
        is_retry = retry_on_bump or retry_on_overflow
        st = txn.state
        if st in (TxnState.ONGOING, TxnState.EMPTY):
            valid_epoch = producer_epoch == txn.producer_epoch
        elif st in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        else:  # Complete*: a retry, or an abort of a transaction with no partitions
            valid_epoch = is_retry or producer_epoch == txn.producer_epoch
        if txn.pending is not None:
            raise KafkaError(ErrorCode.concurrent_transactions)
        if txn.producer_id != producer_id and not retry_on_overflow:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping)
        if not valid_epoch:
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"Producer epoch {producer_epoch} of {txn_id} is fenced by epoch {txn.producer_epoch}",
            )
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if st == TxnState.ONGOING:
            return self._prepare(txn, commit, tv2=True)
        if st == TxnState.COMPLETE_COMMIT and commit or st == TxnState.COMPLETE_ABORT and not commit:
            if is_retry:
                return txn.producer_id, txn.producer_epoch
            if commit:
                raise self._invalid_transition(txn, preparing)
            return self._prepare(txn, False, tv2=True, empty=True)
        if st == TxnState.COMPLETE_COMMIT or st == TxnState.EMPTY:
            if commit or is_retry:
                raise self._invalid_transition(txn, preparing)
            return self._prepare(txn, False, tv2=True, empty=True)
        if st == preparing:
            raise KafkaError(ErrorCode.concurrent_transactions)
        raise self._invalid_transition(txn, preparing)

    def _prepare(
        self, txn: TxnMetadata, commit: bool, bump_epoch: bool = False, tv2: bool = False, empty: bool = False
    ) -> tuple[int, int]:
        """Write PrepareCommit/PrepareAbort and queue the markers; the (producer id, epoch) the
        producer has once they are written. ``bump_epoch``: the fence of InitProducerId or a
        timeout; ``tv2``: the epoch bump of every TV2 transaction (a new producer id follows an
        exhausted epoch); ``empty``: a TV2 abort of a transaction with no partitions."""
        new = copy.deepcopy(txn)
        if bump_epoch:
            new.producer_epoch = txn.producer_epoch + 1
            new.last_producer_epoch = NO_PRODUCER_EPOCH
        if tv2:
            if epoch_exhausted(txn.producer_epoch) and not bump_epoch:
                new.next_producer_id = self._allocate()
            if not (new.producer_epoch == MAX_EPOCH and not commit):
                new.last_producer_epoch = new.producer_epoch
                new.producer_epoch += 1
            new.client_transaction_version = 2
            if empty:
                new.start_ms = self._now()
        new.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        new.last_update_ms = self._now()
        new.ongoing_pid_epoch = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        self._transit(new)
        new.pending = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        self._send_markers(copy.deepcopy(new), commit)
        if tv2 and new.next_producer_id >= 0:
            return new.next_producer_id, 0
        return new.producer_id, new.producer_epoch

    def _fence_and_abort(self, txn: TxnMetadata) -> None:
        """InitProducerId on an open transaction, or its timeout: abort it with a bumped epoch
        (bumped once more for a TV2 transaction, as Kafka's endTransaction after the fence)."""
        if txn.producer_epoch >= MAX_EPOCH:
            raise KafkaError(
                ErrorCode.unknown_server_error,
                "Cannot fence producer with epoch equal to Short.MaxValue since this would overflow",
            )
        self._prepare(txn, commit=False, bump_epoch=True, tv2=txn.tv2)

    def markers_written(self, txn_id: str, producer_id: int, producer_epoch: int) -> bool:
        """Every partition has its marker: write CompleteCommit/CompleteAbort. Returns False
        when the transaction moved on meanwhile (nothing to do)."""
        txn = self.txns.get(txn_id)
        if txn is None or txn.pending is None or txn.producer_id != producer_id or txn.producer_epoch != producer_epoch:
            return False
        new = copy.deepcopy(txn)
        new.state = txn.pending
        new.pending = None
        new.partitions = set()
        new.last_update_ms = self._now()
        if txn.tv2 and txn.next_producer_id >= 0:
            # the epoch was exhausted: the producer goes on with the new producer id at epoch 0
            new.previous_producer_id = txn.producer_id
            new.producer_id = txn.next_producer_id
            new.last_producer_epoch = txn.producer_epoch
            new.producer_epoch = 0
        new.next_producer_id = NO_PRODUCER_ID
        self._transit(new)
        log.info(
            "Completed %s of transactionalId %s (producerId %d, epoch %d)",
            "commit" if new.state == TxnState.COMPLETE_COMMIT else "abort",
            txn_id,
            producer_id,
            producer_epoch,
        )
        return True

    def drop_partitions(self, txn_id: str, partitions: set[tuple[str, int]]) -> None:
        """Partitions that can never take a marker (deleted topics) leave the transaction."""
        txn = self.txns.get(txn_id)
        if txn is not None:
            txn.partitions -= partitions

    # ================================================================== timers
    def abort_timed_out(self) -> list[str]:
        now = self._now()
        aborted = []
        for txn in list(self.txns.values()):
            if (
                txn.state == TxnState.ONGOING
                and txn.pending is None
                and not txn.two_phase
                and txn.start_ms + txn.timeout_ms < now
            ):
                try:
                    self._fence_and_abort(txn)
                    aborted.append(txn.transactional_id)
                    log.info(
                        "Aborting transactionalId %s (producerId %d): transaction timed out after %d ms",
                        txn.transactional_id,
                        txn.producer_id,
                        txn.timeout_ms,
                    )
                except KafkaError as e:
                    log.warning("Could not abort timed out transaction %s: %s", txn.transactional_id, e)
        return aborted

    def expire_transactional_ids(self) -> list[str]:
        now = self._now()
        expired = [
            t
            for t in self.txns.values()
            if t.state in EXPIRABLE and t.pending is None and t.last_update_ms <= now - self.config.id_expiration_ms
        ]
        if not expired:
            return []
        self._write([(encode_key(t.transactional_id), None) for t in expired])
        for t in expired:
            del self.txns[t.transactional_id]
            log.info("Expired transactionalId %s (producerId %d)", t.transactional_id, t.producer_id)
        return [t.transactional_id for t in expired]
