"""Checkpoint files in Kafka's text layouts.

Offset checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``)::

    0                 <- version
    2                 <- number of entries
    topic 0 42        <- topic partition offset
    topic 1 17

``leader-epoch-checkpoint`` (per partition)::

    0
    2
    0 0               <- epoch startOffset
    1 57

``partition.metadata``::

    version: 0
    topic_id: <base64 Uuid>

Every write goes to ``<file>.tmp``, is fsynced, then renamed over the old file, as Kafka's
CheckpointFile does, so a crash leaves either the old or the new content.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
import uuid

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class CheckpointError(ValueError):
    pass


def atomic_write(path: str, text: str, fsync: bool = True) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(os.path.dirname(path) or ".")


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return None


def _parse(path: str, fields: int) -> list[list[str]]:
    lines = _read_lines(path)
    if lines is None:
        return []
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != "0":
        raise CheckpointError(f"{path}: unrecognized version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError as e:
        raise CheckpointError(f"{path}: bad count line {lines[1]!r}") from e
    entries = []
    for line in lines[2:]:
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(f"{path}: malformed line {line!r}")
        entries.append(parts)
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


class OffsetCheckpointFile:
    """``topic partition offset`` entries keyed by (topic, partition)."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        out = {}
        for topic, part, off in _parse(self.path, 3):
            out[(topic, int(part))] = int(off)
        return out

    def write(self, offsets: dict[tuple[str, int], int], fsync: bool = True) -> None:
        lines = ["0", str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        atomic_write(self.path, "\n".join(lines) + "\n", fsync)


class LeaderEpochCheckpointFile:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        return [(int(e), int(o)) for e, o in _parse(self.path, 2)]

    def write(self, entries: list[tuple[int, int]], fsync: bool = True) -> None:
        lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
        atomic_write(self.path, "\n".join(lines) + "\n", fsync)


def uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_kafka(s: str) -> uuid.UUID:
    s = s.strip()
    return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))


class PartitionMetadataFile:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> uuid.UUID | None:
        lines = _read_lines(self.path)
        if lines is None:
            return None
        fields = {}
        for line in lines:
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        if fields.get("version") != "0" or "topic_id" not in fields:
            raise CheckpointError(f"{self.path}: malformed partition.metadata")
        return uuid_from_kafka(fields["topic_id"])

    def write(self, topic_id: uuid.UUID) -> None:
        atomic_write(self.path, f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}\n")


def read_properties(path: str) -> dict[str, str] | None:
    lines = _read_lines(path)
    if lines is None:
        return None
    props = {}
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        k, _, v = line.partition("=")
        props[k.strip()] = v.strip()
    return props


def write_properties(path: str, props: dict[str, str]) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", "#" + stamp] + [f"{k}={v}" for k, v in sorted(props.items())]
    atomic_write(path, "\n".join(lines) + "\n")


def write_clean_shutdown(log_dir: str, broker_epoch: int) -> None:
    atomic_write(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE),
                 json.dumps({"version": 0, "brokerEpoch": broker_epoch}))


def consume_clean_shutdown(log_dir: str) -> bool:
    """True when the previous run shut down cleanly; removes the marker either way."""
    path = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
    if os.path.exists(path):
        os.unlink(path)
        return True
    return False
