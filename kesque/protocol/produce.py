"""Hand-written Produce codec (hot path).

The request decoder hands out each partition's records as a memoryview slice of the
request frame — no copy, no kio dataclasses — so the log can patch offsets in place and
write the bytes straight to the segment. The response encoder writes the few fields the
answer needs. Both are property-tested byte-for-byte against kio (tests/test_codecs.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .primitives import (INT16, INT32, INT64, ProtocolError, array_len, compact_string, read_array_len,
                         read_bytes_view, read_compact_string, read_int16, read_int32, read_string, read_uuid,
                         skip_tagged_fields, string, tagged)

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
    flexible = version >= FLEXIBLE_FROM
    read_str = read_compact_string if flexible else read_string
    pos = 0
    txn_id = None
    if version >= 3:
        txn_id, pos = read_str(body, pos)
    acks, pos = read_int16(body, pos)
    timeout, pos = read_int32(body, pos)
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
            index, pos = read_int32(body, pos)
            records, pos = read_bytes_view(body, pos, flexible)
            if flexible:
                pos = skip_tagged_fields(body, pos)
            parts.append(ProducePartition(index, records))
        if flexible:
            pos = skip_tagged_fields(body, pos)
        topics.append(ProduceTopic(name, topic_id, parts))
    if flexible:
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


def encode_produce_response(version: int, topics: list[tuple[str | uuid.UUID, list[PartitionResponse]]],
                            throttle_ms: int = 0, node_endpoints: list[tuple[int, str, int, str | None]] = ()) -> bytes:
    """``topics`` pairs a topic name (or topic id for v13+) with its partition responses."""
    flexible = version >= FLEXIBLE_FROM
    s = compact_string if flexible else string
    out = [array_len(len(topics), flexible)]
    for topic, parts in topics:
        out.append(topic.bytes if version >= TOPIC_ID_FROM else s(topic))
        out.append(array_len(len(parts), flexible))
        for p in parts:
            out.append(INT32.pack(p.index))
            out.append(INT16.pack(p.error_code))
            out.append(INT64.pack(p.base_offset))
            if version >= 2:
                out.append(INT64.pack(p.log_append_time))
            if version >= 5:
                out.append(INT64.pack(p.log_start_offset))
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
