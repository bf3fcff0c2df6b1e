"""Formatting a node's storage before its first start (``kafka-storage.sh format``), shared by
the tool (:mod:`kesque.cli.storage`) and the test harness (:mod:`kesque.testing.broker`)."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

from . import checkpoint as ck
from .dirs import LogDirError, format_dirs, read_meta_properties, storage_dirs, verify_meta_properties

if TYPE_CHECKING:
    from ..config import BrokerConfig


def random_uuid() -> str:
    """A cluster id as Kafka's Uuid.randomUuid prints it: never starting with '-' (it would
    read as an option on a command line)."""
    while True:
        cid = ck.uuid_to_kafka(uuid.uuid4())
        if not cid.startswith("-"):
            return cid


def format_storage(
    config: BrokerConfig, cluster_id: str, *, ignore_formatted: bool = False, pre_write=None
) -> list[tuple[str, str]]:
    """``storage format``: meta.properties into each of the node's dirs that has none, after
    checking those that have one (their cluster id must be ``cluster_id``); returns ("data" or
    "metadata", dir) for each dir formatted. Raises LogDirError naming a problem, having written
    nothing. ``pre_write(dir)`` runs in each dir before its meta.properties is written (Kafka's
    Formatter writes the bootstrap file there): when it raises, that dir stays unformatted."""
    dirs = storage_dirs(config)
    metas = read_meta_properties(dirs)
    done = [d for d in dirs if metas[d] is not None]
    if done and not ignore_formatted:
        raise LogDirError(
            f"Log directory {done[0]} is already formatted. Use --ignore-formatted to ignore this "
            "directory and format the others."
        )
    verify_meta_properties(metas, config.node_id if config.node_id >= 0 else 1, cluster_id)
    written = format_dirs(metas, cluster_id, config.node_id if config.node_id >= 0 else 1, pre_write)
    meta_dir = os.path.abspath(config.metadata_log_dir)
    return [("metadata" if d == meta_dir else "data", d) for d in written]
