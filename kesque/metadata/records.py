"""Metadata records in KRaft's binary layout.

Each record value in ``__cluster_metadata`` is framed as Kafka's MetadataRecordSerde does:
``frameVersion (uvarint 1) | apiKey (uvarint) | version (uvarint) | message``, where the
message uses the flexible (compact, tagged) encoding of its schema. Only the record types
kesque writes are described here; their field lists follow the schemas in Kafka's
``metadata/src/main/resources/common/metadata``. Records are plain dicts with snake_case
keys plus ``"type"``.
"""

from __future__ import annotations

from ..protocol import schema
from ..protocol.primitives import ProtocolError, read_uvarint, uvarint

# field specs: see kesque/protocol/schema.py
_ENDPOINT = [
    ("name", "string", None, ""),
    ("host", "string", None, ""),
    ("port", "uint16", None, 0),
    ("security_protocol", "int16", None, 0),
]
_FEATURE = [
    ("name", "string", None, ""),
    ("min_supported_version", "int16", None, 0),
    ("max_supported_version", "int16", None, 0),
]

KESQUE_RECORDS_BASE = 10000  # the first kesque-only metadata record type (docs/compatibility.md)

SCHEMAS: dict[str, tuple[int, int, list]] = {
    # name: (api key, version written, fields)
    "RegisterBrokerRecord": (
        0,
        1,
        [
            ("broker_id", "int32", None, 0),
            ("incarnation_id", "uuid", None, None),
            ("broker_epoch", "int64", None, 0),
            ("endpoints", _ENDPOINT, None, []),
            ("features", _FEATURE, None, []),
            ("rack", "nstring", None, None),
            ("fenced", "bool", None, True),
            ("in_controlled_shutdown", "bool", None, False),
        ],
    ),
    "UnregisterBrokerRecord": (1, 0, [("broker_id", "int32", None, 0), ("broker_epoch", "int64", None, 0)]),
    "TopicRecord": (2, 0, [("name", "string", None, ""), ("topic_id", "uuid", None, None)]),
    "PartitionRecord": (
        3,
        0,
        [
            ("partition_id", "int32", None, -1),
            ("topic_id", "uuid", None, None),
            ("replicas", "[int32]", None, []),
            ("isr", "[int32]", None, []),
            ("removing_replicas", "[int32]", None, []),
            ("adding_replicas", "[int32]", None, []),
            ("leader", "int32", None, -1),
            ("leader_recovery_state", "int8", 0, 0),
            ("leader_epoch", "int32", None, -1),
            ("partition_epoch", "int32", None, -1),
        ],
    ),
    "ConfigRecord": (
        4,
        0,
        [
            ("resource_type", "int8", None, 0),
            ("resource_name", "string", None, ""),
            ("name", "string", None, ""),
            ("value", "nstring", None, None),
        ],
    ),
    "PartitionChangeRecord": (
        5,
        0,
        [
            ("partition_id", "int32", None, -1),
            ("topic_id", "uuid", None, None),
            ("isr", "[int32]?", 0, None),
            ("leader", "int32", 1, -2),
            ("replicas", "[int32]?", 2, None),
            ("removing_replicas", "[int32]?", 3, None),
            ("adding_replicas", "[int32]?", 4, None),
            ("leader_recovery_state", "int8", 5, -1),
        ],
    ),
    "FenceBrokerRecord": (7, 0, [("id", "int32", None, 0), ("epoch", "int64", None, 0)]),
    "UnfenceBrokerRecord": (8, 0, [("id", "int32", None, 0), ("epoch", "int64", None, 0)]),
    "RemoveTopicRecord": (9, 0, [("topic_id", "uuid", None, None)]),
    "FeatureLevelRecord": (12, 0, [("name", "string", None, ""), ("feature_level", "int16", None, 0)]),
    "ClientQuotaRecord": (
        14,
        0,
        [
            ("entity", [("entity_type", "string", None, ""), ("entity_name", "nstring", None, None)], None, []),
            ("key", "string", None, ""),
            ("value", "float64", None, 0.0),
            ("remove", "bool", None, False),
        ],
    ),
    "ProducerIdsRecord": (
        15,
        0,
        [("broker_id", "int32", None, 0), ("broker_epoch", "int64", None, -1), ("next_producer_id", "int64", None, 0)],
    ),
    "BrokerRegistrationChangeRecord": (
        17,
        1,
        [
            ("broker_id", "int32", None, 0),
            ("broker_epoch", "int64", None, 0),
            ("fenced", "int8", 0, 0),
            ("in_controlled_shutdown", "int8", 1, 0),
        ],
    ),
    "NoOpRecord": (20, 0, []),
    # written by Kafka's controllers, not by kesque: decoded by dump-log --cluster-metadata-decoder
    "DelegationTokenRecord": (
        10,
        0,
        [
            ("owner", "string", None, ""),
            ("requester", "string", None, ""),
            ("renewers", "[string]", None, []),
            ("issue_timestamp", "int64", None, 0),
            ("max_timestamp", "int64", None, 0),
            ("expiration_timestamp", "int64", None, 0),
            ("token_id", "string", None, ""),
        ],
    ),
    "UserScramCredentialRecord": (
        11,
        0,
        [
            ("name", "string", None, ""),
            ("mechanism", "int8", None, 0),
            ("salt", "bytes", None, b""),
            ("stored_key", "bytes", None, b""),
            ("server_key", "bytes", None, b""),
            ("iterations", "int32", None, 0),
        ],
    ),
    "AccessControlEntryRecord": (
        18,
        0,
        [
            ("id", "uuid", None, None),
            ("resource_type", "int8", None, 0),
            ("resource_name", "string", None, ""),
            ("pattern_type", "int8", None, 0),
            ("principal", "string", None, ""),
            ("host", "string", None, ""),
            ("operation", "int8", None, 0),
            ("permission_type", "int8", None, 0),
        ],
    ),
    "RemoveAccessControlEntryRecord": (19, 0, [("id", "uuid", None, None)]),
    "RemoveUserScramCredentialRecord": (22, 0, [("name", "string", None, ""), ("mechanism", "int8", None, 0)]),
    "BeginTransactionRecord": (23, 0, [("name", "nstring", 0, None)]),
    "EndTransactionRecord": (24, 0, []),
    "AbortTransactionRecord": (25, 0, [("reason", "nstring", 0, None)]),
    "RemoveDelegationTokenRecord": (26, 0, [("token_id", "string", None, "")]),
    "RegisterControllerRecord": (
        27,
        0,
        [
            ("controller_id", "int32", None, 0),
            ("incarnation_id", "uuid", None, None),
            ("zk_migration_ready", "bool", None, False),
            ("endpoints", _ENDPOINT, None, []),
            ("features", _FEATURE, None, []),
        ],
    ),
    "ClearElrRecord": (28, 0, [("topic_name", "string", None, "")]),
    "UnregisterControllerRecord": (29, 0, [("controller_id", "int32", None, 0)]),
    # kesque-only record types (mirror topics, docs/mirror.md), far above Kafka's ids so that a
    # future Kafka record never takes theirs; Kafka's tools decode them as unknown records
    "ClusterLinkRecord": (
        KESQUE_RECORDS_BASE,
        0,
        [
            ("link_name", "string", None, ""),
            ("link_id", "uuid", None, None),
            ("configs", [("name", "string", None, ""), ("value", "nstring", None, None)], None, []),
        ],
    ),
    "RemoveClusterLinkRecord": (KESQUE_RECORDS_BASE + 1, 0, [("link_id", "uuid", None, None)]),
    "MirrorTopicRecord": (
        KESQUE_RECORDS_BASE + 2,
        0,
        [
            ("topic_id", "uuid", None, None),
            ("link_id", "uuid", None, None),
            ("source_topic", "string", None, ""),
            ("source_topic_id", "uuid", None, None),
            ("state", "int8", None, 0),
            # FAILED_OVER: the highest producer id of the mirrored logs (transactions of producers up
            # to it left open are aborted by the partitions' leaders)
            ("max_producer_id", "int64", None, -1),
        ],
    ),
}
BY_KEY = {key: name for name, (key, _v, _f) in SCHEMAS.items()}

# the record types whose KIP-966 fields (eligible_leader_replicas, last_known_elr) exist from version 2
ELR_RECORDS = ("PartitionRecord", "PartitionChangeRecord")
# KIP-858: the field naming log directories of each record type that has one, and the version
# that has it (the lowest Kafka writes at metadata.version 3.7-IV2)
_DIR_FIELD = {
    "PartitionRecord": "directories",
    "PartitionChangeRecord": "directories",
    "RegisterBrokerRecord": "log_dirs",
    "BrokerRegistrationChangeRecord": "log_dirs",
}
_DIR_VERSION = {
    "PartitionRecord": 1,
    "PartitionChangeRecord": 1,
    "RegisterBrokerRecord": 3,
    "BrokerRegistrationChangeRecord": 2,
}


def encode(rec: dict) -> bytes:
    api_key, version, fields = SCHEMAS[rec["type"]]
    if rec["type"] in ELR_RECORDS and (
        rec.get("eligible_leader_replicas") is not None or rec.get("last_known_elr") is not None
    ):
        # the ELR fields are tagged fields of version 2: a record that carries them is written at
        # version 2 (a PartitionRecord then has its directories: none known, as a broker that
        # registered no log directories)
        version = 2
        fields = fields_for(rec["type"], version)
        if rec["type"] == "PartitionRecord" and rec.get("directories") is None:
            rec = {**rec, "directories": []}
    elif rec.get(_DIR_FIELD.get(rec["type"], "")) is not None:
        # KIP-858 (metadata.version 3.7-IV2+): the records that carry log directories are written
        # at the version that has them, as Kafka's controller writes them from that version on
        version = _DIR_VERSION[rec["type"]]
        fields = fields_for(rec["type"], version)
    return uvarint(1) + uvarint(api_key) + uvarint(version) + schema.encode(fields, rec, flexible=True)


def decode(value: bytes) -> dict:
    """Decode one record value; unknown record types come back as ``{"type": "Unknown…"}``."""
    frame, pos = read_uvarint(value, 0)
    if frame != 1:
        raise ProtocolError(f"Could not deserialize metadata record due to unknown frame version {frame}")
    api_key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    name = BY_KEY.get(api_key)
    if name is None:
        return {"type": f"UnknownRecord{api_key}", "version": version}
    rec = schema.decode(fields_for(name, version), value, pos, flexible=True)
    rec["type"] = name
    return rec


def fields_for(name: str, version: int) -> list:
    """The fields of a record type at ``version``: the written version's list adjusted where
    other versions add or drop untagged fields (so other writers' records decode too)."""
    _k, written, fields = SCHEMAS[name]
    if version == written:
        return fields
    if name == "RegisterBrokerRecord":
        if version < 1:
            fields = [f for f in fields if f[0] != "in_controlled_shutdown"]
        if version >= 2:
            fields = fields[:1] + [("is_migrating_zk_broker", "bool", None, False)] + fields[1:]
        if version >= 3:
            fields = fields + [("log_dirs", "[uuid]", 0, [])]
        if version >= 4:
            fields = fields + [("cordoned_log_dirs", "[uuid]", 1, None)]
    elif name == "PartitionRecord" and version >= 1:
        fields = fields + [("directories", "[uuid]", None, [])]
        if version >= 2:
            fields = fields + [
                ("eligible_leader_replicas", "[int32]?", 1, None),
                ("last_known_elr", "[int32]?", 2, None),
            ]
    elif name == "PartitionChangeRecord" and version >= 1:
        fields = fields + [("directories", "[uuid]", 8, None)]
        if version >= 2:
            fields = fields + [
                ("eligible_leader_replicas", "[int32]?", 6, None),
                ("last_known_elr", "[int32]?", 7, None),
            ]
    elif name == "BrokerRegistrationChangeRecord":
        if version < 1:
            fields = [f for f in fields if f[0] != "in_controlled_shutdown"]
        if version >= 2:
            fields = fields + [("log_dirs", "[uuid]", 2, [])]
        if version >= 3:
            fields = fields + [("cordoned_log_dirs", "[uuid]", 3, None)]
    return fields
