"""The bootstrap metadata a node is formatted with (Kafka's BootstrapDirectory): the file
``bootstrap.checkpoint`` in ``metadata.log.dir``, a snapshot-framed record stream (header,
records, footer) of the finalized features and the ``--add-scram`` credentials
(UserScramCredentialRecord). ``kesque storage format`` writes it; the first active controller of
a fresh cluster commits its records as the log's first batch."""

from __future__ import annotations

import contextlib
import os

from ..metadata import records as metadata_records
from ..raft import snapshot as raft_snapshot
from ..raft.log import SnapshotId
from ..storage.checkpoint import fsync_dir

FILE_NAME = "bootstrap.checkpoint"


class BootstrapWriteError(OSError):
    """The bootstrap file could not be written: the message names it and the cause."""

    def __str__(self) -> str:
        return self.strerror


def write(meta_dir: str, records: list[dict], timestamp: int = 0) -> str:
    """Write the file as Kafka's BootstrapDirectory.writeBinaryFile: into ``<file>.tmp`` (synced),
    then renamed over the file; on an I/O error (the write, the sync or the rename) the
    temporary file is removed, any earlier file is left as it was, and BootstrapWriteError
    names the file."""
    path = os.path.join(meta_dir, FILE_NAME)
    tmp = path + ".tmp"
    data = raft_snapshot.encode(SnapshotId(0, 0), [metadata_records.encode(r) for r in records], timestamp)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise BootstrapWriteError(e.errno, f"Error while writing {FILE_NAME} file {path}: {e.strerror or e}") from e
    fsync_dir(meta_dir)
    return path


def read(meta_dir: str) -> list[dict] | None:
    """The bootstrap records, None without a bootstrap file."""
    path = os.path.join(meta_dir, FILE_NAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return [metadata_records.decode(v) for v in raft_snapshot.decode(data)]
