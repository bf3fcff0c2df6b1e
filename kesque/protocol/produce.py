"""Hand-written Produce codec (hot path).

The request decoder hands out each partition's records as a memoryview slice of the
request frame — no copy, no kio dataclasses — so the log can patch offsets in place and
write the bytes straight to the segment. The response encoder writes the few fields the
answer needs. Both are property-tested byte-for-byte against kio (tests/test_codecs.py).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from .primitives import (
    I16_I32,
    INT32,
    ProtocolError,
    array_len,
    compact_string,
    read_array_len,
    read_bytes_view,
    read_compact_string,
    read_string,
    read_uuid,
    skip_tagged_fields,
    string,
    tagged,
)

FLEXIBLE_FROM = 9
TOPIC_ID_FROM = 13


@dataclass(slots=True)
class ProducePartition:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    """Decode without copying records. One-byte varints and empty tagged-field sections —
    nearly all of them in practice — are read inline; the helpers handle the rest."""
    flexible = version >= FLEXIBLE_FROM
    read_str = read_compact_string if flexible else read_string
    n = len(body)
    pos = 0
    txn_id = None
    if version >= 3:
        if flexible and pos < n and body[pos] == 0:
            pos += 1  # null transactional id
        else:
            txn_id, pos = read_str(body, pos)
    if pos + 6 > n:
        raise ProtocolError("truncated produce request")
    acks, timeout = I16_I32.unpack_from(body, pos)
    pos += 6
    ntopics, pos = read_array_len(body, pos, flexible)
    if ntopics < 0:
        raise ProtocolError("null topic array")
    topics = []
    for _ in range(ntopics):
        name = topic_id = None
        if version >= TOPIC_ID_FROM:
            topic_id, pos = read_uuid(body, pos)
        else:
            name, pos = read_str(body, pos)
            if name is None:
                raise ProtocolError("null topic name")
        nparts, pos = read_array_len(body, pos, flexible)
        if nparts < 0:
            raise ProtocolError("null partition array")
        parts = []
        for _ in range(nparts):
            if pos + 4 > n:
                raise ProtocolError("truncated int32")
            index = INT32.unpack_from(body, pos)[0]
            records, pos = read_bytes_view(body, pos + 4, flexible)
            if flexible:
                if pos < n and body[pos] == 0:
                    pos += 1
                else:
                    pos = skip_tagged_fields(body, pos)
            parts.append(ProducePartition(index, records))
        if flexible:
            if pos < n and body[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(body, pos)
        topics.append(ProduceTopic(name, topic_id, parts))
    if flexible and not (pos < n and body[pos] == 0):
        pos = skip_tagged_fields(body, pos)
    return ProduceRequest(txn_id, acks, timeout, topics)


@dataclass(slots=True)
class PartitionResponse:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: list[tuple[int, str | None]] | None = None
    leader_id: int = -1  # current_leader (v10+, only sent with NOT_LEADER_OR_FOLLOWER)
    leader_epoch: int = -1


# index, error code, base offset [, log append time [, log start offset]] by version
_PARTITION_FIXED = {
    0: struct.Struct(">ihq"),
    1: struct.Struct(">ihq"),
    2: struct.Struct(">ihqq"),
    3: struct.Struct(">ihqq"),
    4: struct.Struct(">ihqq"),
    5: struct.Struct(">ihqqq"),
}


def encode_produce_response(
    version: int,
    topics: list[tuple[str | uuid.UUID, list[PartitionResponse]]],
    throttle_ms: int = 0,
    node_endpoints: list[tuple[int, str, int, str | None]] = (),
) -> bytes:
    """``topics`` pairs a topic name (or topic id for v13+) with its partition responses."""
    flexible = version >= FLEXIBLE_FROM
    s = compact_string if flexible else string
    out = [array_len(len(topics), flexible)]
    for topic, parts in topics:
        out.append(topic.bytes if version >= TOPIC_ID_FROM else s(topic))
        out.append(array_len(len(parts), flexible))
        fixed = _PARTITION_FIXED[min(version, 5)]
        for p in parts:
            if version >= 5:
                out.append(fixed.pack(p.index, p.error_code, p.base_offset, p.log_append_time, p.log_start_offset))
            elif version >= 2:
                out.append(fixed.pack(p.index, p.error_code, p.base_offset, p.log_append_time))
            else:
                out.append(fixed.pack(p.index, p.error_code, p.base_offset))
            if (
                version >= 8
                and not p.record_errors
                and p.error_message is None
                and (version < 10 or (p.leader_id == -1 and p.leader_epoch == -1))
            ):
                # the usual answer: no record errors, no message, no tagged fields
                out.append(b"\x01\x00\x00" if flexible else b"\x00\x00\x00\x00\xff\xff")
                continue
            if version >= 8:
                errs = p.record_errors or []
                out.append(array_len(len(errs), flexible))
                for idx, msg in errs:
                    out.append(INT32.pack(idx))
                    out.append(s(msg))
                    if flexible:
                        out.append(b"\x00")
                out.append(s(p.error_message))
            if flexible:
                fields = []
                if version >= 10 and (p.leader_id != -1 or p.leader_epoch != -1):
                    fields.append((0, INT32.pack(p.leader_id) + INT32.pack(p.leader_epoch) + b"\x00"))
                out.append(tagged(fields))
        if flexible:
            out.append(b"\x00")
    if version >= 1:
        out.append(INT32.pack(throttle_ms))
    if flexible:
        fields = []
        if version >= 10 and node_endpoints:
            eps = [array_len(len(node_endpoints), True)]
            for node_id, host, port, rack in node_endpoints:
                eps += [INT32.pack(node_id), compact_string(host), INT32.pack(port), compact_string(rack), b"\x00"]
            fields.append((0, b"".join(eps)))
        out.append(tagged(fields))
    return b"".join(out)
