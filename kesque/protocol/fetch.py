"""Hand-written FetchResponse encoder (hot path).

It produces a list of buffers in which each partition's records appear as a
:class:`FileRegion` — a reference to bytes in a segment file — that the connection sends
with ``os.sendfile`` (or reads with ``os.pread`` when small), so record bytes are never
copied into Python. ``flatten`` resolves regions into bytes for tests and for peers that
need one buffer; the codec is tested byte-for-byte against kio through it.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from .primitives import INT16, INT32, INT64, array_len, compact_string, string, tagged, uvarint

FLEXIBLE_FROM = 12
TOPIC_ID_FROM = 13
_UNSET = (-1, -1)


class FileRegion:
    """``size`` bytes of an open segment file at ``position``."""

    __slots__ = ("handle", "position", "size")

    def __init__(self, handle, position: int, size: int):
        self.handle = handle
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        data = os.pread(self.handle.fd, self.size, self.position)
        if len(data) != self.size:
            raise OSError(f"short read from segment: {len(data)} of {self.size} bytes")
        return data


@dataclass(slots=True)
class FetchPartitionResponse:
    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: list | None = None  # list of bytes / FileRegion; None -> null, [] -> empty
    records_size: int = 0
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)


def encode_fetch_response(
    version: int,
    error_code: int,
    session_id: int,
    topics: list[tuple[str | uuid.UUID, list[FetchPartitionResponse]]],
    throttle_ms: int = 0,
    node_endpoints: list[tuple[int, str, int, str | None]] = (),
) -> list:
    """Returns a list of ``bytes`` and :class:`FileRegion` items (header not included)."""
    flexible = version >= FLEXIBLE_FROM
    s = compact_string if flexible else string
    out: list = []
    cur = bytearray()
    if version >= 1:
        cur += INT32.pack(throttle_ms)
    if version >= 7:
        cur += INT16.pack(error_code)
        cur += INT32.pack(session_id)
    cur += array_len(len(topics), flexible)
    for topic, parts in topics:
        cur += topic.bytes if version >= TOPIC_ID_FROM else s(topic)
        cur += array_len(len(parts), flexible)
        for p in parts:
            cur += INT32.pack(p.index)
            cur += INT16.pack(p.error_code)
            cur += INT64.pack(p.high_watermark)
            cur += INT64.pack(p.last_stable_offset)
            if version >= 5:
                cur += INT64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                cur += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                cur += array_len(len(aborted), flexible)
                for pid, first in aborted:
                    cur += INT64.pack(pid)
                    cur += INT64.pack(first)
                    if flexible:
                        cur += b"\x00"
            if version >= 11:
                cur += INT32.pack(p.preferred_read_replica)
            if p.records is None:
                cur += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                cur += uvarint(p.records_size + 1) if flexible else INT32.pack(p.records_size)
                if p.records_size:
                    out.append(bytes(cur))
                    out.extend(p.records)
                    cur = bytearray()
            if flexible:
                # tagged fields are sent only when they differ from the schema default (-1, -1)
                fields = []
                if p.diverging_epoch is not None and p.diverging_epoch != _UNSET:
                    fields.append((0, INT32.pack(p.diverging_epoch[0]) + INT64.pack(p.diverging_epoch[1]) + b"\x00"))
                if p.current_leader is not None and p.current_leader != _UNSET:
                    fields.append((1, INT32.pack(p.current_leader[0]) + INT32.pack(p.current_leader[1]) + b"\x00"))
                cur += tagged(fields)
        if flexible:
            cur += b"\x00"
    if flexible:
        fields = []
        if version >= 16 and node_endpoints:
            eps = bytearray(array_len(len(node_endpoints), True))
            for node_id, host, port, rack in node_endpoints:
                eps += INT32.pack(node_id) + compact_string(host) + INT32.pack(port) + compact_string(rack) + b"\x00"
            fields.append((0, bytes(eps)))
        cur += tagged(fields)
    out.append(bytes(cur))
    return out


def flatten(items: list) -> bytes:
    return b"".join(x.read() if isinstance(x, FileRegion) else bytes(x) for x in items)


def total_size(items: list) -> int:
    return sum(len(x) for x in items)
