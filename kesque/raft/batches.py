"""Raft records as Kafka RecordBatch v2 bytes: the one codec of the metadata log's segments,
its snapshots (``.checkpoint`` files) and the records of Fetch and FetchSnapshot responses.

A :class:`~kesque.raft.log.Record` whose value is ``bytes`` is an application record (for
kesque a metadata record framed as ``kesque.metadata.records.encode`` frames it). Control
records are *control batches* as Kafka's ``ControlRecordUtils`` writes them: the record key is
``(version int16 0, type int16)`` and the value the control message in the flexible encoding,
at the versions Kafka writes (all 0). Each control record gets a batch of its own, as Kafka's
``BatchAccumulator`` does; the batch's partition leader epoch is the record's epoch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..protocol import schema
from ..records import batch as rb
from ..records.records import build_batch, iter_records
from .log import LeaderChange, Record

LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
_CONTROL_KEY = struct.Struct(">hh")

# the schemas of Kafka's LeaderChangeMessage v0, SnapshotHeaderRecord v0, SnapshotFooterRecord v0
_VOTER = [("voter_id", "int32", None, 0)]
_LEADER_CHANGE = [
    ("version", "int16", None, 0),
    ("leader_id", "int32", None, -1),
    ("voters", _VOTER, None, []),
    ("granting_voters", _VOTER, None, []),
]
SNAPSHOT_HEADER_FIELDS = [("version", "int16", None, 0), ("last_contained_log_timestamp", "int64", None, 0)]
SNAPSHOT_FOOTER_FIELDS = [("version", "int16", None, 0)]


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A control record kesque does not interpret (KRaftVersion, Voters, ...): kept verbatim."""

    type: int
    data: bytes


def control_batch(ctype: int, fields: list, value: dict, *, base_offset: int, epoch: int, timestamp: int) -> bytes:
    body = schema.encode(fields, value, flexible=True)
    return build_batch(
        [(_CONTROL_KEY.pack(0, ctype), body, ())],
        base_offset=base_offset,
        control=True,
        partition_leader_epoch=epoch,
        timestamp=timestamp,
    )


def _control_bytes(value, offset: int, epoch: int, timestamp: int) -> bytes:
    if isinstance(value, LeaderChange):
        return control_batch(
            LEADER_CHANGE,
            _LEADER_CHANGE,
            {
                "leader_id": value.leader_id,
                "voters": [{"voter_id": v} for v in value.voters],
                "granting_voters": [{"voter_id": v} for v in value.granting_voters],
            },
            base_offset=offset,
            epoch=epoch,
            timestamp=timestamp,
        )
    return build_batch(
        [(_CONTROL_KEY.pack(0, value.type), value.data, ())],
        base_offset=offset,
        control=True,
        partition_leader_epoch=epoch,
        timestamp=timestamp,
    )


def is_control(value) -> bool:
    return isinstance(value, (LeaderChange, ControlRecord))


def encode(records: list[Record], timestamp: int) -> bytes:
    """Batches for ``records`` (contiguous offsets): one per control record, one per run of
    application records of the same epoch."""
    out = []
    i, n = 0, len(records)
    while i < n:
        r = records[i]
        if is_control(r.value):
            out.append(_control_bytes(r.value, r.offset, r.epoch, timestamp))
            i += 1
            continue
        j = i
        while j < n and records[j].epoch == r.epoch and not is_control(records[j].value):
            if not isinstance(records[j].value, (bytes, bytearray)):
                raise TypeError(f"a raft record value must be bytes, not {type(records[j].value).__name__}")
            j += 1
        out.append(
            build_batch(
                [(None, bytes(x.value), ()) for x in records[i:j]],
                base_offset=r.offset,
                partition_leader_epoch=r.epoch,
                timestamp=timestamp,
            )
        )
        i = j
    return b"".join(out)


def decode_batch(h: rb.BatchHeader, data) -> list[Record]:
    """The records of one batch (``data`` holds exactly the batch)."""
    epoch = h.partition_leader_epoch
    if not h.is_control:
        out = [Record(r.offset, epoch, r.value) for r in iter_records(data, 0, h)]
        if out:
            out[0] = Record(out[0].offset, epoch, out[0].value, h.size)
        return out
    out = []
    for r in iter_records(data, 0, h):
        ctype = _CONTROL_KEY.unpack_from(r.key)[1] if r.key is not None and len(r.key) >= 4 else -1
        value = r.value or b""
        if ctype == LEADER_CHANGE:
            d = schema.decode(_LEADER_CHANGE, value, 0, flexible=True)
            out.append(
                Record(
                    r.offset,
                    epoch,
                    LeaderChange(
                        d["leader_id"],
                        tuple(v["voter_id"] for v in d["voters"]),
                        tuple(v["voter_id"] for v in d["granting_voters"]),
                    ),
                )
            )
        else:
            out.append(Record(r.offset, epoch, ControlRecord(ctype, bytes(value))))
    return out


def decode(buf) -> list[Record]:
    """Every record of a stream of whole batches (a torn last batch is left out)."""
    mv = memoryview(buf)
    out: list[Record] = []
    for pos, h in rb.iter_headers(mv):
        if pos + h.size > len(mv):
            break
        out.extend(decode_batch(h, mv[pos : pos + h.size]))
    return out
