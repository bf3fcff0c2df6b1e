"""Hand-written codec of a follower's Fetch (the replica fetcher's side; hot path).

The replica fetcher sends a Fetch for every batch of appends its leader makes, so the
request's encoding and the answer's decoding are per-request costs on the replication data
path. kio encodes in pure Python (a few µs per nested object, the UUID included) and copies
the records of the answer into a new ``bytes``; this codec does neither:

* :func:`encode_replica_fetch_request`: the request body (v15+: the replica id and broker
  epoch in the ``ReplicaState`` tagged field, topics by id, no session, nothing forgotten), the
  bytes kio writes for the same request (tests/test_replica_fetch_codec.py checks it byte for
  byte against kio for every version it serves);
* :func:`decode_fetch_response`: the answer (v13+: flexible, topics by id) into plain objects with kio's
  field names, each partition's ``records`` a zero-copy ``memoryview`` of the response frame
  (the channel reads a large frame into a buffer of its own, never reused), so the leader's
  batches go from the socket to the follower's segment file without a copy in Python.
  Unknown tagged fields are skipped, as Kafka's readers do.
"""

from __future__ import annotations

import struct
import uuid

from .primitives import INT32, ProtocolError, compact_string, read_uvarint, skip_tagged_fields, uvarint

MIN_VERSION = 15  # ReplicaState (KIP-903) replaced the replica id field in v15
MAX_VERSION = 18

_HEAD = struct.Struct(">iiibii")  # max_wait, min_bytes, max_bytes, isolation, session id, epoch
_PART = struct.Struct(">iiqiqi")  # partition, current epoch, offset, last epoch, log start, max
_REPLICA_STATE = struct.Struct(">iq")
_TOP = struct.Struct(">ihi")  # throttle, error code, session id
_PART_HEAD = struct.Struct(">ihqqq")  # index, error code, HW, LSO, log start
_ABORTED = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")
_SNAPSHOT = struct.Struct(">qi")


def encode_replica_fetch_request(
    version: int,
    replica_id: int,
    replica_epoch: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    topics: list[tuple[uuid.UUID, list[tuple[int, int, int, int, int, int]]]],
    rack_id: str = "",
) -> bytes:
    """The FetchRequest body. ``topics``: (topic id, [(partition, current leader epoch, fetch
    offset, last fetched epoch, log start offset, partition max bytes)])."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"replica Fetch v{version} is not encoded here")
    out = [_HEAD.pack(max_wait_ms, min_bytes, max_bytes, isolation_level, 0, -1), uvarint(len(topics) + 1)]
    for topic_id, parts in topics:
        out.append(topic_id.bytes)
        out.append(uvarint(len(parts) + 1))
        for p in parts:
            out.append(_PART.pack(*p))
            out.append(b"\x00")  # no tagged fields (no directory id, no HW)
        out.append(b"\x00")
    out.append(b"\x01")  # forgotten_topics_data: empty
    out.append(compact_string(rack_id))
    state = _REPLICA_STATE.pack(replica_id, replica_epoch) + b"\x00"
    out.append(b"\x01\x01" + uvarint(len(state)) + state)  # one tagged field: 1, ReplicaState
    return b"".join(out)


class EpochEndOffset:
    __slots__ = ("epoch", "end_offset")

    def __init__(self, epoch: int, end_offset: int):
        self.epoch, self.end_offset = epoch, end_offset


class LeaderIdAndEpoch:
    __slots__ = ("leader_id", "leader_epoch")

    def __init__(self, leader_id: int, leader_epoch: int):
        self.leader_id, self.leader_epoch = leader_id, leader_epoch


class SnapshotId:
    __slots__ = ("end_offset", "epoch")

    def __init__(self, end_offset: int, epoch: int):
        self.end_offset, self.epoch = end_offset, epoch


class PartitionData:
    __slots__ = (
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "preferred_read_replica",
        "records",
        "diverging_epoch",
        "current_leader",
        "snapshot_id",
    )


class FetchableTopicResponse:
    __slots__ = ("topic_id", "partitions")

    def __init__(self, topic_id: uuid.UUID, partitions: list):
        self.topic_id, self.partitions = topic_id, partitions


class FetchResponse:
    __slots__ = ("throttle_time", "error_code", "session_id", "responses")

    def __init__(self, throttle_time: int, error_code: int, session_id: int, responses: list):
        self.throttle_time, self.error_code, self.session_id, self.responses = (
            throttle_time,
            error_code,
            session_id,
            responses,
        )


def _need(buf, end: int) -> None:
    if end > len(buf):
        raise ProtocolError("truncated Fetch response")


def _partition(buf: memoryview, pos: int) -> tuple[PartitionData, int]:
    _need(buf, pos + _PART_HEAD.size)
    p = PartitionData()
    p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset = (
        _PART_HEAD.unpack_from(buf, pos)
    )
    pos += _PART_HEAD.size
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        p.aborted_transactions = None
    else:
        aborted = []
        for _ in range(n - 1):
            _need(buf, pos + 16)
            aborted.append(_ABORTED.unpack_from(buf, pos))
            pos = skip_tagged_fields(buf, pos + 16)
        p.aborted_transactions = aborted
    _need(buf, pos + 4)
    p.preferred_read_replica = INT32.unpack_from(buf, pos)[0]
    n, pos = read_uvarint(buf, pos + 4)
    if n == 0:
        p.records = None
    else:
        end = pos + n - 1
        _need(buf, end)
        p.records = buf[pos:end]
        pos = end
    p.diverging_epoch = p.current_leader = p.snapshot_id = None
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        _need(buf, end)
        if tag == 0:
            _need(buf, pos + 12)
            p.diverging_epoch = EpochEndOffset(*_EPOCH_END.unpack_from(buf, pos))
        elif tag == 1:
            _need(buf, pos + 8)
            p.current_leader = LeaderIdAndEpoch(*_LEADER.unpack_from(buf, pos))
        elif tag == 2:
            _need(buf, pos + 12)
            p.snapshot_id = SnapshotId(*_SNAPSHOT.unpack_from(buf, pos))
        pos = end
    return p, pos


def decode_fetch_response(api_key: int, version: int, frame) -> tuple[int, FetchResponse]:
    """(correlation id, response) of a Fetch response frame (size prefix removed; v13+: flexible,
    topics by id). The
    signature of ``channel.decode_response``, for ``Channel.send(..., decode=...)``."""
    if version < 13:
        raise ValueError(f"Fetch v{version} responses are not decoded here")
    buf = memoryview(frame)
    _need(buf, 4)
    corr = INT32.unpack_from(buf, 0)[0]
    pos = skip_tagged_fields(buf, 4)  # response header v1
    _need(buf, pos + 10)
    throttle, error_code, session_id = _TOP.unpack_from(buf, pos)
    n, pos = read_uvarint(buf, pos + 10)
    topics = []
    for _ in range(max(n - 1, 0)):
        _need(buf, pos + 16)
        topic_id = uuid.UUID(bytes=bytes(buf[pos : pos + 16]))
        m, pos = read_uvarint(buf, pos + 16)
        parts = []
        for _ in range(max(m - 1, 0)):
            p, pos = _partition(buf, pos)
            parts.append(p)
        pos = skip_tagged_fields(buf, pos)
        topics.append(FetchableTopicResponse(topic_id, parts))
    pos = skip_tagged_fields(buf, pos)  # node_endpoints (tag 0) is not needed by a follower
    if pos != len(buf):
        raise ProtocolError(f"{len(buf) - pos} bytes after the Fetch response")
    return corr, FetchResponse(throttle, error_code, session_id, topics)
