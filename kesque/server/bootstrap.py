"""The bootstrap metadata a node is formatted with (Kafka's BootstrapDirectory): the file
``bootstrap.checkpoint`` in ``metadata.log.dir``, a snapshot-framed record stream (header,
records, footer) of the finalized features and the ``--add-scram`` credentials
(UserScramCredentialRecord). ``kesque storage format`` writes it; the first active controller of
a fresh cluster commits its records as the log's first batch."""

from __future__ import annotations

import os

from ..metadata import records as metadata_records
from ..raft import snapshot as raft_snapshot
from ..raft.log import SnapshotId
from ..storage.checkpoint import fsync_dir

FILE_NAME = "bootstrap.checkpoint"


def write(meta_dir: str, records: list[dict], timestamp: int = 0) -> str:
    path = os.path.join(meta_dir, FILE_NAME)
    data = raft_snapshot.encode(SnapshotId(0, 0), [metadata_records.encode(r) for r in records], timestamp)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
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
