"""Records of ``__share_group_state`` in Kafka's layouts (share-coordinator/src/main/resources).

Key version 0 is a ShareSnapshot (the whole state of one share-partition), key version 1 a
ShareUpdate (state batches laid over the last snapshot). Both keys are (group id, topic id,
partition); values are flexible version 0.
"""

from __future__ import annotations

import struct

from ...protocol import schema

_I16 = struct.Struct(">h")

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

_F = lambda name, typ, tag=None, default=None: (name, typ, tag, default)  # noqa: E731

KEY = [_F("group_id", "string"), _F("topic_id", "uuid"), _F("partition", "int32", default=0)]
_STATE_BATCH = [
    _F("first_offset", "int64", default=0),
    _F("last_offset", "int64", default=0),
    _F("delivery_state", "int8", default=0),
    _F("delivery_count", "int16", default=0),
]
VALUES = {
    SHARE_SNAPSHOT: [
        _F("snapshot_epoch", "uint16", default=0),
        _F("state_epoch", "int32", default=0),
        _F("leader_epoch", "int32", default=-1),
        _F("start_offset", "int64", default=0),
        _F("state_batches", _STATE_BATCH, default=[]),
    ],
    SHARE_UPDATE: [
        _F("snapshot_epoch", "uint16", default=0),
        _F("leader_epoch", "int32", default=-1),
        _F("start_offset", "int64", default=-1),
        _F("state_batches", _STATE_BATCH, default=[]),
    ],
}


def encode_key(version: int, group_id: str, topic_id, partition: int) -> bytes:
    return _I16.pack(version) + schema.encode(
        KEY, {"group_id": group_id, "topic_id": topic_id, "partition": partition}, flexible=False
    )


def encode_value(version: int, value: dict) -> bytes:
    return _I16.pack(0) + schema.encode(VALUES[version], value, True)


def decode_key(data: bytes) -> tuple[int, dict]:
    version = _I16.unpack_from(data, 0)[0]
    if version not in VALUES:
        raise ValueError(f"unknown __share_group_state key version {version}")
    return version, schema.decode(KEY, data, 2, flexible=False)


def decode_value(key_version: int, data: bytes | None) -> dict | None:
    if data is None:
        return None
    if _I16.unpack_from(data, 0)[0] != 0:
        raise ValueError(f"unknown __share_group_state value version for key version {key_version}")
    return schema.decode(VALUES[key_version], data, 2, True)
