"""Metadata records in KRaft's binary layout.

Each record value in ``__cluster_metadata`` is framed as Kafka's MetadataRecordSerde does:
``frameVersion (uvarint 1) | apiKey (uvarint) | version (uvarint) | message``, where the
message uses the flexible (compact, tagged) encoding of its schema. Only the record types
kesque writes are described here; their field lists follow the schemas in Kafka's
``metadata/src/main/resources/common/metadata``. Records are plain dicts with snake_case
keys plus ``"type"``.
"""

from __future__ import annotations

import struct
import uuid

from ..protocol.primitives import ProtocolError, read_uvarint, uvarint

# field spec: (name, type, tag or None, default)
#   types: int8 int16 uint16 int32 int64 bool uuid string nstring [int32] [uuid] or a nested spec list
_ENDPOINT = [("name", "string", None, ""), ("host", "string", None, ""), ("port", "uint16", None, 0),
             ("security_protocol", "int16", None, 0)]
_FEATURE = [("name", "string", None, ""), ("min_supported_version", "int16", None, 0),
            ("max_supported_version", "int16", None, 0)]

SCHEMAS: dict[str, tuple[int, int, list]] = {
    # name: (api key, version written, fields)
    "RegisterBrokerRecord": (0, 1, [
        ("broker_id", "int32", None, 0), ("incarnation_id", "uuid", None, None), ("broker_epoch", "int64", None, 0),
        ("endpoints", _ENDPOINT, None, []), ("features", _FEATURE, None, []), ("rack", "nstring", None, None),
        ("fenced", "bool", None, True), ("in_controlled_shutdown", "bool", None, False)]),
    "UnregisterBrokerRecord": (1, 0, [("broker_id", "int32", None, 0), ("broker_epoch", "int64", None, 0)]),
    "TopicRecord": (2, 0, [("name", "string", None, ""), ("topic_id", "uuid", None, None)]),
    "PartitionRecord": (3, 0, [
        ("partition_id", "int32", None, -1), ("topic_id", "uuid", None, None), ("replicas", "[int32]", None, []),
        ("isr", "[int32]", None, []), ("removing_replicas", "[int32]", None, []),
        ("adding_replicas", "[int32]", None, []), ("leader", "int32", None, -1),
        ("leader_recovery_state", "int8", 0, 0), ("leader_epoch", "int32", None, -1),
        ("partition_epoch", "int32", None, -1)]),
    "ConfigRecord": (4, 0, [("resource_type", "int8", None, 0), ("resource_name", "string", None, ""),
                            ("name", "string", None, ""), ("value", "nstring", None, None)]),
    "PartitionChangeRecord": (5, 0, [
        ("partition_id", "int32", None, -1), ("topic_id", "uuid", None, None), ("isr", "[int32]?", 0, None),
        ("leader", "int32", 1, -2), ("replicas", "[int32]?", 2, None), ("removing_replicas", "[int32]?", 3, None),
        ("adding_replicas", "[int32]?", 4, None), ("leader_recovery_state", "int8", 5, -1)]),
    "FenceBrokerRecord": (7, 0, [("id", "int32", None, 0), ("epoch", "int64", None, 0)]),
    "UnfenceBrokerRecord": (8, 0, [("id", "int32", None, 0), ("epoch", "int64", None, 0)]),
    "RemoveTopicRecord": (9, 0, [("topic_id", "uuid", None, None)]),
    "FeatureLevelRecord": (12, 0, [("name", "string", None, ""), ("feature_level", "int16", None, 0)]),
    "ProducerIdsRecord": (15, 0, [("broker_id", "int32", None, 0), ("broker_epoch", "int64", None, -1),
                                  ("next_producer_id", "int64", None, 0)]),
    "BrokerRegistrationChangeRecord": (17, 1, [
        ("broker_id", "int32", None, 0), ("broker_epoch", "int64", None, 0), ("fenced", "int8", 0, 0),
        ("in_controlled_shutdown", "int8", 1, 0)]),
    "NoOpRecord": (20, 0, []),
}
BY_KEY = {key: name for name, (key, _v, _f) in SCHEMAS.items()}

_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "uint16": struct.Struct(">H"),
          "int32": struct.Struct(">i"), "int64": struct.Struct(">q")}
_I32 = _FIXED["int32"]
ZERO_UUID = uuid.UUID(int=0)


def _enc_value(typ, value, out: list) -> None:
    if isinstance(typ, list):
        value = value or []
        out.append(uvarint(len(value) + 1))
        for item in value:
            _enc_struct(typ, item, out)
        return
    if typ in _FIXED:
        out.append(_FIXED[typ].pack(value))
    elif typ == "bool":
        out.append(b"\x01" if value else b"\x00")
    elif typ == "uuid":
        out.append((value or ZERO_UUID).bytes)
    elif typ in ("string", "nstring"):
        if value is None:
            out.append(b"\x00")
        else:
            b = value.encode()
            out.append(uvarint(len(b) + 1))
            out.append(b)
    elif typ in ("[int32]", "[int32]?"):
        if value is None:
            out.append(b"\x00")
        else:
            out.append(uvarint(len(value) + 1))
            out.extend(_I32.pack(v) for v in value)
    elif typ == "[uuid]":
        out.append(uvarint(len(value) + 1))
        out.extend(u.bytes for u in value)
    else:  # pragma: no cover - schema typo
        raise ValueError(f"unknown type {typ}")


def _enc_struct(fields, rec: dict, out: list) -> None:
    tagged = []
    for name, typ, tag, default in fields:
        value = rec.get(name, default)
        if tag is None:
            _enc_value(typ, value, out)
        elif value != default:
            part: list = []
            _enc_value(typ, value, part)
            tagged.append((tag, b"".join(part)))
    out.append(uvarint(len(tagged)))
    for tag, data in sorted(tagged):
        out.append(uvarint(tag))
        out.append(uvarint(len(data)))
        out.append(data)


def encode(rec: dict) -> bytes:
    api_key, version, fields = SCHEMAS[rec["type"]]
    out = [uvarint(1), uvarint(api_key), uvarint(version)]
    _enc_struct(fields, rec, out)
    return b"".join(out)


def _need(buf, pos: int, n: int) -> None:
    if n < 0 or pos + n > len(buf):
        raise ProtocolError("truncated metadata record")


def _dec_value(typ, buf, pos):
    if isinstance(typ, list):
        n, pos = read_uvarint(buf, pos)
        items = []
        for _ in range(max(n - 1, 0)):
            item, pos = _dec_struct(typ, buf, pos)
            items.append(item)
        return items, pos
    if typ in _FIXED:
        s = _FIXED[typ]
        _need(buf, pos, s.size)
        return s.unpack_from(buf, pos)[0], pos + s.size
    if typ == "bool":
        _need(buf, pos, 1)
        return buf[pos] != 0, pos + 1
    if typ == "uuid":
        _need(buf, pos, 16)
        return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16
    if typ in ("string", "nstring"):
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        _need(buf, pos, n - 1)
        try:
            return bytes(buf[pos:pos + n - 1]).decode(), pos + n - 1
        except UnicodeDecodeError as e:
            raise ProtocolError("metadata record string is not UTF-8") from e
    if typ in ("[int32]", "[int32]?"):
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        _need(buf, pos, 4 * (n - 1))
        vals = [_I32.unpack_from(buf, pos + 4 * i)[0] for i in range(n - 1)]
        return vals, pos + 4 * (n - 1)
    if typ == "[uuid]":
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        _need(buf, pos, 16 * (n - 1))
        return [uuid.UUID(bytes=bytes(buf[pos + 16 * i:pos + 16 * i + 16])) for i in range(n - 1)], pos + 16 * (n - 1)
    raise ValueError(f"unknown type {typ}")  # pragma: no cover


def _dec_struct(fields, buf, pos):
    rec = {}
    by_tag = {}
    for name, typ, tag, default in fields:
        if tag is None:
            rec[name], pos = _dec_value(typ, buf, pos)
        else:
            rec[name] = default
            by_tag[tag] = (name, typ)
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        _need(buf, pos, size)
        if tag in by_tag:  # unknown tags (newer versions) are skipped
            name, typ = by_tag[tag]
            rec[name], _ = _dec_value(typ, buf[:pos + size], pos)
        pos += size
    return rec, pos


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
    rec, _ = _dec_struct(fields_for(name, version), value, pos)
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
    elif name == "PartitionRecord" and version >= 1:
        fields = fields + [("directories", "[uuid]", None, [])]
        if version >= 2:
            fields = fields + [("eligible_leader_replicas", "[int32]?", 1, None),
                               ("last_known_elr", "[int32]?", 2, None)]
    return fields
