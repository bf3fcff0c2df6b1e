"""TransactionCoordinatorShard: the transactional ids of one ``__transaction_state``
partition and their state machine (Kafka's TransactionCoordinator, TransactionMetadata and
TransactionStateManager for one partition). Sans-IO: operations return the records to
write and the response to give, time comes from ``clock``.

States, as Kafka names them (seed 004)::

    Empty ──AddPartitions──▶ Ongoing ──EndTxn──▶ PrepareCommit ──markers──▶ CompleteCommit
                                 │                PrepareAbort  ──markers──▶ CompleteAbort
                                 └─ timeout / InitProducerId: epoch bump (fence) ─▶ PrepareAbort

An operation is Kafka's CoordinatorRuntime shape (and its TransactionMetadata's
prepareTransitionTo/completeTransitionTo): it reads the state, computes the new metadata (a
modified copy) and returns a :class:`~kesque.coordinator.runtime.CoordinatorResult` with its
record and the response; the state changes only when the record, once written, is replayed
(``replay``), so a failed write changes nothing and nothing is undone by hand. The markers of a
Prepare record are in the response, for the caller to send once it is written. While markers
are being written the transaction is in PrepareCommit or PrepareAbort with ``pending`` set to
the Complete state it will take: requests that would change it get CONCURRENT_TRANSACTIONS and
the client retries, as with Kafka.

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
from ..runtime import CoordinatorRecord, CoordinatorResult
from .records import TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value
from .requests import AddPartitionsToTxn, EndTxn, InitProducerId

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


@dataclass(frozen=True)
class TxnMarkers:
    """The markers a Prepare record asks for, sent once it is written: ``txn`` is the prepared
    transaction as the shard holds it then (a copy: its producer id and epoch, its partitions)."""

    txn: TxnMetadata
    commit: bool


@dataclass
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH
    markers: TxnMarkers | None = None  # the open transaction InitProducerId fenced and aborts


@dataclass
class EndTxnResult:
    """The (producer id, epoch) EndTxn answers: the request's under transaction version 1, those
    the producer goes on with under version 2; ``markers`` when a Prepare record was written."""

    producer_id: int
    producer_epoch: int
    markers: TxnMarkers | None = None


class TransactionCoordinatorShard:
    def __init__(
        self,
        partition: int,
        config: TxnConfig,
        send_markers,
        clock,
        allocate_producer_id,
        coordinator_epoch: int = 0,
    ):
        self.partition = partition
        self.config = config
        # (TxnMetadata, commit: bool) -> None: the markers of transactions loaded in a Prepare
        # state (Kafka's sendTxnMarkers callback of loadTransactionsForTxnTopicPartition); an
        # operation's markers are in its response, sent by the caller once its record is written
        self._send_markers = send_markers
        self.clock = clock
        self._allocate = allocate_producer_id
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMetadata] = {}

    # ================================================================== replay / load
    def replay(self, key: bytes, value: bytes | None, decoded: TxnMetadata | None = None) -> None:
        """The only way a transaction's state changes. ``decoded``: the metadata an operation of
        this shard wrote, what its record holds plus what no record does (the last producer
        epoch, the pending Complete state: Kafka's completeTransitionTo of the transit metadata);
        from the log (load, committed view) the record alone, as Kafka loads it."""
        if decoded is not None:
            self.txns[decoded.transactional_id] = decoded
            return
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

    # ================================================================== records
    @staticmethod
    def _record(new: TxnMetadata) -> CoordinatorRecord:
        """The record of a transition to ``new`` (a modified copy of the current metadata, Kafka's
        TxnTransitMetadata): the shard takes it on when the record is replayed."""
        return CoordinatorRecord(encode_key(new.transactional_id), encode_value(new.to_value()), new)

    def _now(self) -> int:
        return self.clock.now_ms()

    # ================================================================== InitProducerId
    def init_producer_id(self, req: InitProducerId) -> CoordinatorResult:
        """A result whose response is an :class:`InitResult`."""
        txn_id = req.transactional_id
        producer_id, producer_epoch = req.producer_id, req.producer_epoch
        if not txn_id:
            return CoordinatorResult([], InitResult(ErrorCode.invalid_request))
        if req.enable_2pc and not self.config.two_phase_enabled:
            return CoordinatorResult([], InitResult(ErrorCode.transactional_id_authorization_failed))
        timeout_ms = req.transaction_timeout_ms
        if req.enable_2pc:
            timeout_ms = TWO_PHASE_TIMEOUT_MS
        elif not 0 < timeout_ms <= self.config.max_timeout_ms:
            return CoordinatorResult([], InitResult(ErrorCode.invalid_transaction_timeout))
        now = self._now()
        txn = self.txns.get(txn_id)
        if txn is None:
            txn = TxnMetadata(txn_id, self._allocate(), timeout_ms=timeout_ms, last_update_ms=now)
            # Kafka's putTransactionStateIfNotExists: the new id's metadata is cached before its
            # record is written, and kept if the write fails (a retry gets the same producer id);
            # it is in memory only, so a committed view or a new leader does not see it
            self.txns[txn_id] = txn
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        if txn.pending is not None:
            return CoordinatorResult([], InitResult(ErrorCode.concurrent_transactions))
        if expected is not None and not (
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == txn.producer_id
            or (expected[0] == txn.previous_producer_id and epoch_exhausted(expected[1]))
        ):
            return CoordinatorResult([], InitResult(ErrorCode.producer_fenced))
        st = txn.state
        if st in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return CoordinatorResult([], InitResult(ErrorCode.concurrent_transactions))
        if st == TxnState.ONGOING:
            if req.keep_prepared_txn:
                return self._keep_prepared(txn, timeout_ms, now)
            # fence the current producer: abort its transaction with a bumped epoch; the client
            # retries on CONCURRENT_TRANSACTIONS and then gets an epoch bumped once more
            new, markers = self._fence_and_abort(txn)
            return CoordinatorResult(
                [self._record(new)], InitResult(ErrorCode.concurrent_transactions, markers=markers)
            )
        if st not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return CoordinatorResult([], InitResult(ErrorCode.unknown_server_error))
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
                return CoordinatorResult([], InitResult(ErrorCode.producer_fenced))
        new.state = TxnState.EMPTY
        new.timeout_ms = timeout_ms
        new.partitions = set()
        new.start_ms = -1
        new.last_update_ms = now
        new.ongoing_pid_epoch = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        log.info(
            "Initialized transactionalId %s with producerId %d and producer epoch %d on partition "
            "__transaction_state-%d",
            txn_id,
            new.producer_id,
            new.producer_epoch,
            self.partition,
        )
        return CoordinatorResult([self._record(new)], InitResult(ErrorCode.none, new.producer_id, new.producer_epoch))

    def _keep_prepared(self, txn: TxnMetadata, timeout_ms: int, now: int) -> CoordinatorResult:
        """KIP-939: keep the open transaction; fence the old incarnation by bumping the epoch."""
        if txn.producer_epoch >= MAX_EPOCH:
            return CoordinatorResult([], InitResult(ErrorCode.unknown_server_error))
        ongoing = txn.ongoing_pid_epoch if txn.ongoing_pid_epoch[0] >= 0 else (txn.producer_id, txn.producer_epoch)
        new = copy.deepcopy(txn)
        new.producer_epoch = txn.producer_epoch + 1
        new.last_producer_epoch = NO_PRODUCER_EPOCH
        if txn.two_phase or timeout_ms == TWO_PHASE_TIMEOUT_MS:
            new.timeout_ms = TWO_PHASE_TIMEOUT_MS
        new.last_update_ms = now
        new.ongoing_pid_epoch = ongoing
        answer = InitResult(ErrorCode.none, new.producer_id, new.producer_epoch, ongoing[0], ongoing[1])
        return CoordinatorResult([self._record(new)], answer)

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

    def add_partitions(self, req: AddPartitionsToTxn) -> CoordinatorResult:
        """Raises KafkaError with the code every partition of the request gets; nothing to write
        when the ongoing transaction has the partitions already."""
        txn = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        if txn.state == TxnState.ONGOING and req.partitions <= txn.partitions:
            return CoordinatorResult([])
        if txn.state not in (TxnState.EMPTY, TxnState.ONGOING, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            raise KafkaError(ErrorCode.invalid_txn_state)
        now = self._now()
        new = copy.deepcopy(txn)
        if txn.state != TxnState.ONGOING:
            new.start_ms = now
        new.state = TxnState.ONGOING
        new.partitions |= req.partitions
        new.last_update_ms = now
        new.client_transaction_version = req.client_transaction_version
        return CoordinatorResult([self._record(new)])

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
    def end_txn(self, req: EndTxn) -> CoordinatorResult:
        """Raises KafkaError; a result whose response is an :class:`EndTxnResult` (the Prepare
        record is answered once written; its markers follow)."""
        txn_id, producer_id, producer_epoch, commit = (
            req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            req.committed,
        )
        if not txn_id:
            raise KafkaError(ErrorCode.invalid_request)
        if req.tv2:
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
            return self._prepared(self._prepare(txn, commit), commit, (producer_id, producer_epoch))
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if st == done:
            return CoordinatorResult([], EndTxnResult(producer_id, producer_epoch))  # a retry of one that completed
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

    def _end_txn_v2(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool) -> CoordinatorResult:
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
            return self._prepared(self._prepare(txn, commit, tv2=True), commit)
        if st == TxnState.COMPLETE_COMMIT and commit or st == TxnState.COMPLETE_ABORT and not commit:
            if is_retry:
                return CoordinatorResult([], EndTxnResult(txn.producer_id, txn.producer_epoch))
            if commit:
                raise self._invalid_transition(txn, preparing)
            return self._prepared(self._prepare(txn, False, tv2=True, empty=True), False)
        if st == TxnState.COMPLETE_COMMIT or st == TxnState.EMPTY:
            if commit or is_retry:
                raise self._invalid_transition(txn, preparing)
            return self._prepared(self._prepare(txn, False, tv2=True, empty=True), False)
        if st == preparing:
            raise KafkaError(ErrorCode.concurrent_transactions)
        raise self._invalid_transition(txn, preparing)

    def _prepare(
        self, txn: TxnMetadata, commit: bool, bump_epoch: bool = False, tv2: bool = False, empty: bool = False
    ) -> TxnMetadata:
        """The PrepareCommit/PrepareAbort metadata of ``txn``, waiting for its markers
        (``pending``). ``bump_epoch``: the fence of InitProducerId or a timeout; ``tv2``: the
        epoch bump of every TV2 transaction (a new producer id follows an exhausted epoch);
        ``empty``: a TV2 abort of a transaction with no partitions."""
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
        new.pending = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        return new

    def _prepared(self, new: TxnMetadata, commit: bool, answer: tuple[int, int] | None = None) -> CoordinatorResult:
        """The Prepare record of ``new`` and the EndTxn answer: ``answer``, or the (producer id,
        epoch) the producer has once the markers are written."""
        if answer is None:
            answer = (new.next_producer_id, 0) if new.next_producer_id >= 0 else (new.producer_id, new.producer_epoch)
        markers = TxnMarkers(copy.deepcopy(new), commit)
        return CoordinatorResult([self._record(new)], EndTxnResult(*answer, markers))

    def _fence_and_abort(self, txn: TxnMetadata) -> tuple[TxnMetadata, TxnMarkers]:
        """InitProducerId on an open transaction, or its timeout: abort it with a bumped epoch
        (bumped once more for a TV2 transaction, as Kafka's endTransaction after the fence)."""
        if txn.producer_epoch >= MAX_EPOCH:
            raise KafkaError(
                ErrorCode.unknown_server_error,
                "Cannot fence producer with epoch equal to Short.MaxValue since this would overflow",
            )
        new = self._prepare(txn, commit=False, bump_epoch=True, tv2=txn.tv2)
        return new, TxnMarkers(copy.deepcopy(new), False)

    def markers_written(self, txn_id: str, producer_id: int, producer_epoch: int) -> CoordinatorResult:
        """Every partition has its marker: write CompleteCommit/CompleteAbort. The response is
        False when the transaction moved on meanwhile (nothing to do)."""
        txn = self.txns.get(txn_id)
        if txn is None or txn.pending is None or txn.producer_id != producer_id or txn.producer_epoch != producer_epoch:
            return CoordinatorResult([], False)
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
        log.info(
            "Completing %s of transactionalId %s (producerId %d, epoch %d)",
            "commit" if new.state == TxnState.COMPLETE_COMMIT else "abort",
            txn_id,
            producer_id,
            producer_epoch,
        )
        return CoordinatorResult([self._record(new)], True)

    def drop_partitions(self, txn_id: str, partitions: set[tuple[str, int]]) -> None:
        """Partitions that can never take a marker (deleted topics) leave the transaction. In
        memory only, as Kafka's marker channel removes them (TransactionMetadata.removePartition):
        the Complete record that follows has no partitions anyway."""
        txn = self.txns.get(txn_id)
        if txn is not None:
            txn.partitions -= partitions

    # ================================================================== timers
    def timed_out(self) -> list[str]:
        """The open transactions past their timeout (Kafka's timedOutTransactions)."""
        now = self._now()
        return [
            txn.transactional_id
            for txn in self.txns.values()
            if txn.state == TxnState.ONGOING
            and txn.pending is None
            and not txn.two_phase
            and txn.start_ms + txn.timeout_ms < now
        ]

    def abort_timed_out(self, txn_id: str) -> CoordinatorResult:
        """Abort a transaction :meth:`timed_out` named, fencing its producer; the response is the
        :class:`TxnMarkers` to send. Raises KafkaError."""
        new, markers = self._fence_and_abort(self.txns[txn_id])
        return CoordinatorResult([self._record(new)], markers)

    def expire_transactional_ids(self) -> CoordinatorResult:
        """Tombstones for the ids idle for ``transactional.id.expiration.ms``; the response is
        ``{transactional id: producer id}`` of those."""
        now = self._now()
        expired = [
            t
            for t in self.txns.values()
            if t.state in EXPIRABLE and t.pending is None and t.last_update_ms <= now - self.config.id_expiration_ms
        ]
        return CoordinatorResult(
            [(encode_key(t.transactional_id), None) for t in expired],
            {t.transactional_id: t.producer_id for t in expired},
        )
