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

``partition.metadata`` (no newline after the id, as Kafka writes it)::

    version: 0
    topic_id: <base64 Uuid>

Every write goes to ``<file>.tmp``, is fsynced, then renamed over the old file, as Kafka's
CheckpointFile does, so a crash leaves either the old or the new content.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import time
import uuid

from ..config.broker import parse_properties

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
        fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
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
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return None


_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_WHITESPACE = re.compile(r"\s+")


def _java_int(path: str, text: str, bits: int) -> int:
    """Integer.parseInt / Long.parseLong: digits with an optional sign, nothing else."""
    if not _JAVA_INT.fullmatch(text):
        raise CheckpointError(f"Malformed line in checkpoint file [{path}]: {text}")
    v = int(text)
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise CheckpointError(f"Malformed line in checkpoint file [{path}]: {text}")
    return v


def _java_split(pattern: re.Pattern, line: str) -> list[str]:
    """String.split(regex): trailing empty strings are dropped, leading ones kept."""
    parts = pattern.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _parse(path: str, fields: int) -> list[list[str]]:
    """Kafka's CheckpointFile read: a missing or empty file (or one with only a version
    line) has no entries; otherwise version 0, a count, then exactly that many entries of
    ``fields`` whitespace-separated values."""
    lines = _read_lines(path)
    if not lines:
        return []
    version = _java_int(path, lines[0], 32)
    if version != 0:
        raise CheckpointError(f"Unrecognised version:{version}, expected version: 0 in checkpoint file at: {path}")
    if len(lines) < 2:
        return []
    count = _java_int(path, lines[1], 32)
    entries = []
    for line in lines[2:]:
        parts = _java_split(_WHITESPACE, line)
        if len(parts) != fields:
            raise CheckpointError(f"Malformed line in checkpoint file [{path}]: {line}")
        entries.append(parts)
    if len(entries) != count:
        raise CheckpointError(
            f"Expected [{count}] entries in checkpoint file [{path}], but found only [{len(entries)}]"
        )
    return entries


class OffsetCheckpointFile:
    """``topic partition offset`` entries keyed by (topic, partition)."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        out = {}
        for topic, part, off in _parse(self.path, 3):
            out[(topic, _java_int(self.path, part, 32))] = _java_int(self.path, off, 64)
        return out

    def write(self, offsets: dict[tuple[str, int], int], fsync: bool = True) -> None:
        lines = ["0", str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        atomic_write(self.path, "\n".join(lines) + "\n", fsync)


class LeaderEpochCheckpointFile:
    def __init__(self, path: str):
        self.path = path
        # created empty if absent, as Kafka's CheckpointFile: a follower that has fetched nothing
        # yet has an empty leader-epoch-checkpoint, as every partition directory has one
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            pass

    def read(self) -> list[tuple[int, int]]:
        return [(_java_int(self.path, e, 32), _java_int(self.path, o, 64)) for e, o in _parse(self.path, 2)]

    def write(self, entries: list[tuple[int, int]], fsync: bool = True) -> None:
        lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
        atomic_write(self.path, "\n".join(lines) + "\n", fsync)


def uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_kafka(s: str) -> uuid.UUID:
    """Kafka's Uuid.fromString: at most 24 URL-safe base64 characters decoding to 16 bytes;
    raises ValueError otherwise."""
    s = s.strip()
    if len(s) > 24 or not _URL_BASE64.fullmatch(s):
        raise ValueError(f"Input string `{s}` is not a base64 encoded UUID")
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except binascii.Error as e:
        raise ValueError(f"Input string `{s}` is not a base64 encoded UUID") from e
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{s}` decoded as {len(raw)} bytes, which is not equal to the expected "
            "16 bytes of a base64-encoded UUID"
        )
    return uuid.UUID(bytes=raw)


_URL_BASE64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_PARTITION_METADATA_SEP = re.compile(r":\s+")


class PartitionMetadataFile:
    """``partition.metadata``: ``version: 0\ntopic_id: <Uuid>`` (no trailing newline), read
    as Kafka's PartitionMetadataReadBuffer does (any version >= 0, a non-zero topic id)."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> uuid.UUID | None:
        lines = _read_lines(self.path)
        if lines is None:
            return None
        line = lines[0] if lines else ""
        version = _java_split(_PARTITION_METADATA_SEP, line)
        if len(version) != 2:
            raise CheckpointError(f"Malformed line in checkpoint file [{self.path}]: {line}")
        if _java_int(self.path, version[1], 32) < 0:
            raise CheckpointError(f"Unrecognized version of partition metadata file ({self.path}): {version[1]}")
        line = lines[1] if len(lines) > 1 else ""
        topic_id = _java_split(_PARTITION_METADATA_SEP, line)
        if len(topic_id) != 2:
            raise CheckpointError(f"Malformed line in checkpoint file [{self.path}]: {line}")
        try:
            tid = uuid_from_kafka(topic_id[1])
        except ValueError as e:
            raise CheckpointError(f"Malformed line in checkpoint file [{self.path}]: {line}") from e
        if tid.int == 0:
            raise CheckpointError(f"Invalid topic ID in partition metadata file ({self.path})")
        return tid

    def write(self, topic_id: uuid.UUID, fsync: bool = True) -> None:
        atomic_write(self.path, f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}", fsync)


def read_properties(path: str) -> dict[str, str] | None:
    """A Java .properties file (``meta.properties``), or None when it does not exist."""
    lines = _read_lines(path)
    if lines is None:
        return None
    return parse_properties("\n".join(lines))


def write_properties(path: str, props: dict[str, str]) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", "#" + stamp] + [f"{k}={v}" for k, v in sorted(props.items())]
    atomic_write(path, "\n".join(lines) + "\n")


def write_clean_shutdown(log_dir: str, broker_epoch: int) -> None:
    atomic_write(
        os.path.join(log_dir, CLEAN_SHUTDOWN_FILE),
        json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")),
    )


def consume_clean_shutdown(log_dir: str) -> bool:
    """True when the previous run shut down cleanly; removes the marker either way, durably:
    a marker brought back by a power cut would make the next start skip recovery of a log
    written since."""
    path = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
    if os.path.exists(path):
        os.unlink(path)
        fsync_dir(log_dir)
        return True
    return False
