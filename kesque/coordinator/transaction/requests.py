"""The transaction coordinator's typed requests: what an API handler hands a shard operation once
it has read the wire request, in the names of Kafka's request data (InitProducerIdRequestData,
AddPartitionsToTxnRequestData, EndTxnRequestData)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InitProducerId:
    """InitProducerId of a transactional producer. ``producer_id``/``producer_epoch`` -1: a new
    producer (KIP-360: an existing one names its current pair to have its epoch bumped);
    ``enable_2pc`` and ``keep_prepared_txn``: KIP-939."""

    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    enable_2pc: bool = False
    keep_prepared_txn: bool = False


@dataclass(frozen=True)
class AddPartitionsToTxn:
    """AddPartitionsToTxn (not verify_only), or AddOffsetsToTxn's offsets partition.
    ``client_transaction_version`` 2: a partition leader adds the partition for a TV2 producer
    (Kafka's transactionVersionForAddPartitionsToTxn), recorded with the transition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[tuple[str, int]]
    client_transaction_version: int = 0


@dataclass(frozen=True)
class EndTxn:
    """EndTxn. ``tv2``: transaction version 2 rules (EndTxn v5+ with ``transaction.version`` 2
    finalized): the epoch is bumped and the answer names the producer's next pair."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    tv2: bool = False
