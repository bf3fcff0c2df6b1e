"""Records of ``__consumer_offsets`` in Kafka's key and value layouts.

A record's key is ``int16 key version`` + a key struct; its value is ``int16 value
version`` + a value struct, or null (a tombstone: the key's state is deleted and compaction
may drop it). Key versions name the record type, as in Kafka's group coordinator:

    0/1 OffsetCommit        2 GroupMetadata (classic group)
    3 ConsumerGroupMetadata 4 ConsumerGroupPartitionMetadata 5 ConsumerGroupMemberMetadata
    6 ConsumerGroupTargetAssignmentMetadata  7 ConsumerGroupTargetAssignmentMember
    8 ConsumerGroupCurrentMemberAssignment
    10 ShareGroupMemberMetadata  11 ShareGroupMetadata  12 ShareGroupTargetAssignmentMetadata
    13 ShareGroupTargetAssignmentMember  14 ShareGroupCurrentMemberAssignment
    16 ConsumerGroupRegularExpression (a regex subscription's resolved topics)

Field lists follow the JSON schemas in Kafka's group-coordinator/src/main/resources; values
are written at the versions Kafka 4 writes (OffsetCommitValue v3, GroupMetadataValue v3,
consumer-group values v0 flexible), so Kafka's ``--offsets-decoder`` could read them.
"""

from __future__ import annotations

import struct

from ...protocol import schema
from ..runtime import CoordinatorRecord

_I16 = struct.Struct(">h")

OFFSET_COMMIT = 1
GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_RECORDS = range(10, 15)
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

_F = lambda name, typ, tag=None, default=None: (name, typ, tag, default)  # noqa: E731

_GROUP_KEY = [_F("group", "string")]
_GROUP_MEMBER_KEY = [_F("group", "string"), _F("member_id", "string")]
KEYS = {
    0: [_F("group", "string"), _F("topic", "string"), _F("partition", "int32", default=0)],
    1: [_F("group", "string"), _F("topic", "string"), _F("partition", "int32", default=0)],
    2: _GROUP_KEY,
    3: _GROUP_KEY,
    4: _GROUP_KEY,
    5: _GROUP_MEMBER_KEY,
    6: _GROUP_KEY,
    7: _GROUP_MEMBER_KEY,
    8: _GROUP_MEMBER_KEY,
    10: _GROUP_MEMBER_KEY,
    11: _GROUP_KEY,
    12: _GROUP_KEY,
    13: _GROUP_MEMBER_KEY,
    14: _GROUP_MEMBER_KEY,
    16: [_F("group", "string"), _F("regular_expression", "string")],
}

_MEMBER_METADATA = {
    v: [
        _F("member_id", "string"),
        *([_F("group_instance_id", "nstring")] if v >= 3 else []),
        _F("client_id", "string"),
        _F("client_host", "string"),
        *([_F("rebalance_timeout", "int32", default=-1)] if v >= 1 else []),
        _F("session_timeout", "int32", default=0),
        _F("subscription", "bytes", default=b""),
        _F("assignment", "bytes", default=b""),
    ]
    for v in range(5)
}
_TOPIC_PARTITIONS = [_F("topic_id", "uuid"), _F("partitions", "[int32]", default=[])]
# a current assignment's TopicPartitions (Kafka 4.4, KIP-1251): the epoch each partition was
# assigned to the member at, as tagged field 0, of the same length as the partitions
_ASSIGNED_TOPIC_PARTITIONS = [*_TOPIC_PARTITIONS, _F("assignment_epochs", "[int32]?", 0)]
_CLASSIC_PROTOCOL = [_F("name", "string"), _F("metadata", "bytes", default=b"")]

# (key version) -> {value version: (fields, flexible)}
VALUES = {
    OFFSET_COMMIT: {
        v: (
            [
                _F("offset", "int64", default=-1),
                *([_F("leader_epoch", "int32", default=-1)] if v >= 3 else []),
                _F("metadata", "string", default=""),
                _F("commit_timestamp", "int64", default=-1),
                *([_F("expire_timestamp", "int64", default=-1)] if v == 1 else []),
            ],
            v >= 4,
        )
        for v in range(5)
    },
    GROUP_METADATA: {
        v: (
            [
                _F("protocol_type", "string", default=""),
                _F("generation", "int32", default=0),
                _F("protocol", "nstring"),
                _F("leader", "nstring"),
                *([_F("current_state_timestamp", "int64", default=-1)] if v >= 2 else []),
                _F("members", _MEMBER_METADATA[v], default=[]),
            ],
            v >= 4,
        )
        for v in range(5)
    },
    CONSUMER_GROUP_METADATA: {0: ([_F("epoch", "int32", default=0)], True)},
    CONSUMER_GROUP_PARTITION_METADATA: {
        0: (
            [
                _F(
                    "topics",
                    [
                        _F("topic_id", "uuid"),
                        _F("topic_name", "string"),
                        _F("num_partitions", "int32", default=0),
                        _F(
                            "partition_metadata",
                            [_F("partition", "int32", default=0), _F("racks", "[string]", default=[])],
                            default=[],
                        ),
                    ],
                    default=[],
                )
            ],
            True,
        )
    },
    CONSUMER_GROUP_MEMBER_METADATA: {
        0: (
            [
                _F("instance_id", "nstring"),
                _F("rack_id", "nstring"),
                _F("client_id", "string", default=""),
                _F("client_host", "string", default=""),
                _F("subscribed_topic_names", "[string]", default=[]),
                _F("subscribed_topic_regex", "nstring"),
                _F("rebalance_timeout_ms", "int32", default=-1),
                _F("server_assignor", "nstring"),
                _F(
                    "classic_member_metadata",
                    (
                        "nstruct",
                        [
                            _F("session_timeout_ms", "int32", default=0),
                            _F("supported_protocols", _CLASSIC_PROTOCOL, default=[]),
                        ],
                    ),
                    0,
                ),
            ],
            True,
        )
    },
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: {0: ([_F("assignment_epoch", "int32", default=0)], True)},
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: {0: ([_F("topic_partitions", _TOPIC_PARTITIONS, default=[])], True)},
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: {
        0: (
            [
                _F("member_epoch", "int32", default=0),
                _F("previous_member_epoch", "int32", default=0),
                _F("state", "int8", default=0),
                _F("assigned_partitions", _ASSIGNED_TOPIC_PARTITIONS, default=[]),
                _F("partitions_pending_revocation", _ASSIGNED_TOPIC_PARTITIONS, default=[]),
            ],
            True,
        )
    },
    SHARE_GROUP_MEMBER_METADATA: {
        0: (
            [
                _F("rack_id", "nstring"),
                _F("client_id", "string", default=""),
                _F("client_host", "string", default=""),
                _F("subscribed_topic_names", "[string]", default=[]),
            ],
            True,
        )
    },
    SHARE_GROUP_METADATA: {0: ([_F("epoch", "int32", default=0)], True)},
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: {0: ([_F("assignment_epoch", "int32", default=0)], True)},
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: {0: ([_F("topic_partitions", _TOPIC_PARTITIONS, default=[])], True)},
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: {
        0: (
            [
                _F("member_epoch", "int32", default=0),
                _F("previous_member_epoch", "int32", default=0),
                _F("state", "int8", default=0),
                _F("assigned_partitions", _TOPIC_PARTITIONS, default=[]),
            ],
            True,
        )
    },
}
VALUES[0] = VALUES[OFFSET_COMMIT]

# the value version Kafka 4 writes for each record type
VALUES[CONSUMER_GROUP_REGULAR_EXPRESSION] = {
    0: (
        [_F("topics", "[string]", default=[]), _F("version", "int64", default=0), _F("timestamp", "int64", default=0)],
        True,
    )
}
WRITE_VERSION = {
    OFFSET_COMMIT: 3,
    GROUP_METADATA: 3,
    **{k: 0 for k in (*range(3, 9), *SHARE_GROUP_RECORDS, CONSUMER_GROUP_REGULAR_EXPRESSION)},
}


class UnknownRecordType(ValueError):
    pass


def encode_key(key_version: int, key: dict) -> bytes:
    return _I16.pack(key_version) + schema.encode(KEYS[key_version], key, flexible=False)


def encode_value(key_version: int, value: dict | None, value_version: int | None = None) -> bytes | None:
    if value is None:
        return None
    version = WRITE_VERSION[key_version] if value_version is None else value_version
    fields, flexible = VALUES[key_version][version]
    return _I16.pack(version) + schema.encode(fields, value, flexible)


def decode_key(data: bytes) -> tuple[int, dict]:
    version = _I16.unpack_from(data, 0)[0]
    fields = KEYS.get(version)
    if fields is None:
        raise UnknownRecordType(f"unknown __consumer_offsets key version {version}")
    return version, schema.decode(fields, data, 2, flexible=False)


def decode_value(key_version: int, data: bytes | None) -> dict | None:
    if data is None:
        return None
    version = _I16.unpack_from(data, 0)[0]
    by_version = VALUES.get(key_version, {})
    if version not in by_version:
        raise UnknownRecordType(f"unknown value version {version} for key version {key_version}")
    fields, flexible = by_version[version]
    value = schema.decode(fields, data, 2, flexible)
    value["_version"] = version
    return value


def offset_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_ts: int,
    expire_ts: int = -1,
) -> CoordinatorRecord:
    """The record of a committed offset, with what it decodes to (``decode_key``, ``decode_value``)."""
    key = {"group": group, "topic": topic, "partition": partition}
    if expire_ts >= 0:  # Kafka writes v1 only when an explicit expire timestamp was asked for (no leader epoch)
        value = {"offset": offset, "metadata": metadata, "commit_timestamp": commit_ts, "expire_timestamp": expire_ts}
        data = encode_value(OFFSET_COMMIT, value, 1)
    else:
        value = {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata, "commit_timestamp": commit_ts}
        data = encode_value(OFFSET_COMMIT, value)
    return CoordinatorRecord(
        encode_key(OFFSET_COMMIT, key), data, (OFFSET_COMMIT, key, {**value, "_version": _I16.unpack_from(data, 0)[0]})
    )


def offset_tombstone(group: str, topic: str, partition: int) -> tuple[bytes, None]:
    return encode_key(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition}), None


def regex_key(group: str, regex: str) -> bytes:
    """The key of a ConsumerGroupRegularExpression record."""
    return encode_key(CONSUMER_GROUP_REGULAR_EXPRESSION, {"group": group, "regular_expression": regex})


def group_key(key_version: int, group: str, member_id: str | None = None) -> bytes:
    key = {"group": group}
    if member_id is not None:
        key["member_id"] = member_id
    return encode_key(key_version, key)
