"""Snapshots of the metadata log (KIP-630) in Kafka's layout.

A snapshot of every record below offset N, the last of them in epoch E, is the file
``<N as 20 digits>-<E as 10 digits>.checkpoint`` in the partition directory beside the
segments. Its content is a RecordBatch v2 stream, as Kafka's ``RecordsSnapshotWriter`` writes
it: a SnapshotHeader control batch, the application's records in batches (offsets counted from
0 inside the snapshot, partition leader epoch E), and a SnapshotFooter control batch. It is
written as ``…checkpoint.part``, fsynced, then renamed (and the directory fsynced): a crash
leaves a ``.part`` file, deleted at the next open, and never a torn ``.checkpoint``.
FetchSnapshot carries the file's bytes verbatim (``unaligned_records``).
"""

from __future__ import annotations

import os
import re

from ..records import batch as rb
from ..records.records import build_batch
from ..storage.checkpoint import fsync_dir
from . import batches
from .log import SnapshotId

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = SUFFIX + ".part"
DELETE_SUFFIX = SUFFIX + ".deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
BATCH_RECORDS = 1000


def file_name(sid: SnapshotId) -> str:
    return f"{sid.end_offset:020d}-{sid.epoch:010d}{SUFFIX}"


def list_snapshots(path: str) -> set[SnapshotId]:
    """The complete snapshots in ``path``; partial and deleted ones are removed, as Kafka's
    ``KafkaMetadataLog`` does at start."""
    out = set()
    for name in os.listdir(path):
        if name.endswith(PARTIAL_SUFFIX) or name.endswith(DELETE_SUFFIX):
            os.unlink(os.path.join(path, name))
            continue
        m = _NAME.match(name)
        if m:
            out.add(SnapshotId(int(m.group(1)), int(m.group(2))))
    return out


def encode(sid: SnapshotId, values: list, timestamp: int) -> bytes:
    """Header, the values (``bytes`` each) as records from offset 0, footer."""
    out = [
        batches.control_batch(
            batches.SNAPSHOT_HEADER,
            batches.SNAPSHOT_HEADER_FIELDS,
            {"last_contained_log_timestamp": timestamp},
            base_offset=0,
            epoch=sid.epoch,
            timestamp=timestamp,
        )
    ]
    offset = 1
    for i in range(0, len(values), BATCH_RECORDS):
        chunk = values[i : i + BATCH_RECORDS]
        out.append(
            build_batch(
                [(None, bytes(v), ()) for v in chunk],
                base_offset=offset,
                partition_leader_epoch=sid.epoch,
                timestamp=timestamp,
            )
        )
        offset += len(chunk)
    out.append(
        batches.control_batch(
            batches.SNAPSHOT_FOOTER,
            batches.SNAPSHOT_FOOTER_FIELDS,
            {},
            base_offset=offset,
            epoch=sid.epoch,
            timestamp=timestamp,
        )
    )
    return b"".join(out)


def decode(data: bytes) -> list:
    """The application's values of a snapshot; raises ValueError unless it is whole (a header
    first, a footer last, every batch's CRC valid)."""
    mv = memoryview(data)
    recs, end = [], 0
    for pos, h in rb.iter_headers(mv):
        if not rb.is_crc_valid(mv, pos, h.size):
            raise ValueError(f"snapshot batch at byte {pos} fails its CRC")
        recs.extend(batches.decode_batch(h, mv[pos : pos + h.size]))
        end = pos + h.size
    if end != len(mv) or len(recs) < 2:
        raise ValueError("snapshot is torn: it does not end with a whole batch")
    head, foot = recs[0].value, recs[-1].value
    if not (
        isinstance(head, batches.ControlRecord)
        and head.type == batches.SNAPSHOT_HEADER
        and isinstance(foot, batches.ControlRecord)
        and foot.type == batches.SNAPSHOT_FOOTER
    ):
        raise ValueError("snapshot lacks its SnapshotHeader or SnapshotFooter record")
    return [r.value for r in recs[1:-1] if not batches.is_control(r.value)]


def write(path: str, sid: SnapshotId, data: bytes) -> None:
    final = os.path.join(path, file_name(sid))
    part = final + ".part"
    with open(part, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, final)
    fsync_dir(path)


def read(path: str, sid: SnapshotId) -> bytes:
    with open(os.path.join(path, file_name(sid)), "rb") as f:
        return f.read()


def delete(path: str, sid: SnapshotId) -> None:
    try:
        os.unlink(os.path.join(path, file_name(sid)))
    except FileNotFoundError:
        pass
