"""Records of ``__transaction_state`` in Kafka's key and value layouts.

A record's key is ``int16 key version`` + TransactionLogKey (version 0, the only one: a legacy
string, the transactional id); its value is ``int16 value version`` + TransactionLogValue, or
null: a tombstone, written when an expired transactional id is removed (its state becomes
``Dead``; compaction may then drop the key).

TransactionLogValue (Kafka's transaction-coordinator/src/main/resources/common/message/
TransactionLogValue.json) has two versions:

    0  legacy: int64 ProducerId, int16 ProducerEpoch, int32 TransactionTimeoutMs,
       int8 TransactionStatus, nullable [TransactionPartitions: string Topic, [int32] PartitionIds]
       (int32 array lengths, int16 string lengths), int64 TransactionLastUpdateTimestampMs,
       int64 TransactionStartTimestampMs
    1  the same fields, flexible (compact lengths, a tagged-field section after each struct),
       plus three tagged fields: PreviousProducerId (tag 0, default -1), NextProducerId
       (tag 1, default -1), ClientTransactionVersion (tag 2, int16, default 0)

kesque adds one tagged field of its own to version 1: OngoingTxnProducerEpoch (tag 1000,
int16, default -1), the epoch of the transaction a KIP-939 ``keepPreparedTxn`` kept open
while the producer epoch moved on. Kafka 4.x's TV1 keeps it in memory only, so a coordinator
that restarted between two recoveries would report the wrong epoch and the external
coordinator would abort a transaction it meant to commit; written only when set, it is
skipped by Kafka's readers (unknown tagged fields are ignored) and shown by the dump tool.

Kafka writes the version its ``transaction.version`` feature asks for
(TransactionVersion.transactionLogValueVersion: level 0 -> 0, levels 1 and 2 -> 1); a new Kafka 4
cluster is at level 2, so kesque writes version 1 (WRITE_VERSION). As in Kafka's
TransactionLog.valueToBytes the partitions are grouped by topic, an ``Empty`` transaction
writes a null partition array (and must have no partitions), and the reader ignores the
partitions of an ``Empty`` transaction.

schema.py has no nullable array of structs, so a value is encoded in three runs around that
array: the fixed fields before it, the array (length written here, elements by schema.py), and
the fields after it with the struct's tagged-field section.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from ...protocol import schema
from ...protocol.primitives import ProtocolError, read_uvarint, uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)
# the value version Kafka 4 writes (transaction.version >= 1)
WRITE_VERSION = 1


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, by the id written in TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka gives the state (DescribeTransactions / ListTransactions): ``PrepareCommit``."""
        return "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState:
        for s in cls:
            if s.kafka_name == name:
                return s
        raise ValueError(f"unknown transaction state {name!r}")


# The states a value is written with. Dead is never written as a state: removing an expired
# transactional id writes a tombstone; PrepareEpochFence is a pending state held in memory
# only (InitProducerId on an ongoing transaction then writes PrepareAbort).
PERSISTED_STATES = frozenset(
    {
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.PREPARE_COMMIT,
        TxnState.PREPARE_ABORT,
        TxnState.COMPLETE_COMMIT,
        TxnState.COMPLETE_ABORT,
    }
)


class UnknownRecordType(ValueError):
    pass


@dataclass(kw_only=True)
class TxnLogValue:
    """TransactionLogValue, field for field (snake_case of the schema's names).

    ``transaction_partitions`` maps a topic to its partition ids, in the order they are
    written; the null array of an ``Empty`` transaction reads as ``{}``.
    """

    producer_id: int
    previous_producer_id: int = -1  # v1+, tagged
    next_producer_id: int = -1  # v1+, tagged
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TxnState
    transaction_partitions: dict[str, list[int]] = field(default_factory=dict)
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    client_transaction_version: int = 0  # v1+, tagged
    ongoing_txn_producer_epoch: int = -1  # v1+, tagged, kesque's (tag 1000)


def _F(name: str, typ, tag: int | None = None, default=None) -> tuple:
    return name, typ, tag, default


KEY_FIELDS = [_F("transactional_id", "string")]

# a value, in schema order, split around the nullable struct array
_VALUE_HEAD = [
    _F("producer_id", "int64"),
    _F("producer_epoch", "int16"),
    _F("transaction_timeout_ms", "int32"),
    _F("transaction_status", "int8"),
]
PARTITION_FIELDS = [_F("topic", "string"), _F("partition_ids", "[int32]", default=[])]
_TAGGED_V1 = [
    _F("previous_producer_id", "int64", 0, -1),
    _F("next_producer_id", "int64", 1, -1),
    _F("client_transaction_version", "int16", 2, 0),
    _F("ongoing_txn_producer_epoch", "int16", 1000, -1),
]
_VALUE_TAIL = {
    0: [_F("transaction_last_update_timestamp_ms", "int64"), _F("transaction_start_timestamp_ms", "int64")],
    1: [
        _F("transaction_last_update_timestamp_ms", "int64"),
        _F("transaction_start_timestamp_ms", "int64"),
        *_TAGGED_V1,
    ],
}
# the JSON order of the fields of each version (what Kafka's TransactionLogValueJsonConverter writes)
VALUE_FIELD_ORDER = {
    0: [
        "producer_id",
        "producer_epoch",
        "transaction_timeout_ms",
        "transaction_status",
        "transaction_partitions",
        "transaction_last_update_timestamp_ms",
        "transaction_start_timestamp_ms",
    ],
    1: [
        "producer_id",
        "previous_producer_id",
        "next_producer_id",
        "producer_epoch",
        "transaction_timeout_ms",
        "transaction_status",
        "transaction_partitions",
        "transaction_last_update_timestamp_ms",
        "transaction_start_timestamp_ms",
        "client_transaction_version",
        "ongoing_txn_producer_epoch",
    ],
}
# tagged fields: written (and shown by the dump tool) only when not at their default
TAGGED_DEFAULTS = {name: default for name, _typ, _tag, default in _TAGGED_V1}


def value_version(transaction_version: int) -> int:
    """The value version Kafka writes at a ``transaction.version`` feature level."""
    return 1 if transaction_version >= 1 else 0


# ------------------------------------------------------------------ keys
def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + schema.encode(KEY_FIELDS, {"transactional_id": transactional_id}, flexible=False)


def decode_key(data: bytes) -> str:
    if len(data) < 2:
        raise ProtocolError("Could not read version from key's buffer.")
    version = _I16.unpack_from(data, 0)[0]
    if version != KEY_VERSION:
        raise UnknownRecordType(f"unknown __transaction_state key version {version}")
    tid = schema.decode(KEY_FIELDS, data, 2, flexible=False)["transactional_id"]
    if tid is None:
        raise ProtocolError("non-nullable field transactionalId was serialized as null")
    return tid


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    """The record that removes a transactional id (Kafka writes it when the id expires)."""
    return encode_key(transactional_id), None


# ------------------------------------------------------------------ values, field dicts
def encode_value_fields(fields: dict, version: int = WRITE_VERSION) -> bytes:
    """A TransactionLogValue from a dict of its fields (``transaction_partitions``: a list of
    ``{"topic", "partition_ids"}`` or None), written as Kafka's generated code writes it."""
    if version not in VALUE_VERSIONS:
        raise UnknownRecordType(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    if not flexible:
        for name, default in TAGGED_DEFAULTS.items():
            if fields.get(name, default) != default:
                # Kafka's generated writer: UnsupportedVersionException
                raise ValueError(f"Attempted to write a non-default {name} at version {version}")
    out: list = [_I16.pack(version)]
    schema.encode_struct(_VALUE_HEAD, fields, out, flexible=False)  # fixed-width: same bytes either way
    parts = fields.get("transaction_partitions")
    if parts is None:
        out.append(uvarint(0) if flexible else _I32.pack(-1))
    else:
        out.append(uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
        for p in parts:
            schema.encode_struct(PARTITION_FIELDS, p, out, flexible)
    schema.encode_struct(_VALUE_TAIL[version], fields, out, flexible)
    return b"".join(out)


def decode_value_fields(data: bytes) -> dict:
    """A TransactionLogValue as a dict of its fields, exactly as written (a null partition
    array is None), plus ``_version``. Tagged fields absent from the bytes (or from version 0)
    read as their defaults."""
    if len(data) < 2:
        raise ProtocolError("Could not read version from value's buffer.")
    version = _I16.unpack_from(data, 0)[0]
    if version not in VALUE_VERSIONS:
        raise UnknownRecordType(f"Can't read version {version} of TransactionLogValue")
    flexible = version >= 1
    value, pos = schema.decode_struct(_VALUE_HEAD, data, 2, flexible=False)
    if flexible:
        n, pos = read_uvarint(data, pos)
        n -= 1
    else:
        if pos + 4 > len(data):
            raise ProtocolError("truncated record")
        n = _I32.unpack_from(data, pos)[0]
        pos += 4
    if n < 0:
        parts = None
    else:
        parts = []
        for _ in range(n):
            p, pos = schema.decode_struct(PARTITION_FIELDS, data, pos, flexible)
            if p["topic"] is None:
                raise ProtocolError("non-nullable field topic was serialized as null")
            if p["partition_ids"] is None:
                raise ProtocolError("non-nullable field partitionIds was serialized as null")
            parts.append(p)
    value["transaction_partitions"] = parts
    tail, pos = schema.decode_struct(_VALUE_TAIL[version], data, pos, flexible)
    value.update(tail)
    for name, default in TAGGED_DEFAULTS.items():
        value.setdefault(name, default)
    value["_version"] = version
    return value


# ------------------------------------------------------------------ values, TxnLogValue
def encode_value(value: TxnLogValue | None, version: int = WRITE_VERSION) -> bytes | None:
    """TransactionLog.valueToBytes: None (a tombstone) stays None."""
    if value is None:
        return None
    state = TxnState(value.transaction_status)
    if state == TxnState.EMPTY:
        if any(value.transaction_partitions.values()):
            raise ValueError(
                f"Transaction is not expected to have any partitions since its state is {state.kafka_name}: {value}"
            )
        parts = None
    else:
        parts = [{"topic": t, "partition_ids": list(ids)} for t, ids in value.transaction_partitions.items()]
    fields = {
        "producer_id": value.producer_id,
        "previous_producer_id": value.previous_producer_id,
        "next_producer_id": value.next_producer_id,
        "producer_epoch": value.producer_epoch,
        "transaction_timeout_ms": value.transaction_timeout_ms,
        "transaction_status": int(state),
        "transaction_partitions": parts,
        "transaction_last_update_timestamp_ms": value.transaction_last_update_timestamp_ms,
        "transaction_start_timestamp_ms": value.transaction_start_timestamp_ms,
        "client_transaction_version": value.client_transaction_version,
        "ongoing_txn_producer_epoch": value.ongoing_txn_producer_epoch,
    }
    return encode_value_fields(fields, version)


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """TransactionLog.readTxnRecordValue: None for a tombstone. An unknown state id is an
    error, as in Kafka; the partitions of an ``Empty`` transaction are ignored."""
    if data is None:
        return None
    f = decode_value_fields(data)
    try:
        state = TxnState(f["transaction_status"])
    except ValueError:
        raise ProtocolError(
            f"Unknown transaction state id {f['transaction_status']} from the transaction status message"
        ) from None
    partitions: dict[str, list[int]] = {}
    if state != TxnState.EMPTY:
        for p in f["transaction_partitions"] or []:
            ids = partitions.setdefault(p["topic"], [])
            for i in p["partition_ids"]:
                if i not in ids:  # Kafka collects them in a set
                    ids.append(i)
    return TxnLogValue(
        producer_id=f["producer_id"],
        previous_producer_id=f["previous_producer_id"],
        next_producer_id=f["next_producer_id"],
        producer_epoch=f["producer_epoch"],
        transaction_timeout_ms=f["transaction_timeout_ms"],
        transaction_status=state,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=f["transaction_last_update_timestamp_ms"],
        transaction_start_timestamp_ms=f["transaction_start_timestamp_ms"],
        client_transaction_version=f["client_transaction_version"],
        ongoing_txn_producer_epoch=f["ongoing_txn_producer_epoch"],
    )
