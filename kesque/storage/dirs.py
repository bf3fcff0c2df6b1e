"""A node's storage directories themselves, before any log is opened: the ``.lock`` each one holds,
the ``meta.properties`` that ``kesque storage format`` writes and every start checks, the open-file
limit a node needs for its segments, and :func:`ensure_storage`, the start-up check. Light on
purpose: the CLI and the test harness import it without loading the log machinery
(:mod:`kesque.storage.log_manager`)."""

from __future__ import annotations

import fcntl
import logging
import os
import resource
import uuid

from . import checkpoint as ck

log = logging.getLogger(__name__)


class LogDirError(RuntimeError):
    pass


LOCK_FILE = ".lock"


class DirLock:
    """An exclusive ``flock`` on ``<dir>/.lock``, as Kafka's FileLock holds on every log dir and
    on a separate metadata log dir. The kernel drops it when the process ends, SIGKILL
    included, so a ``.lock`` file left behind never blocks a start; and since a flock belongs
    to an open file description, a second broker in the same process is refused too. The file
    stays after release: deleting it would let a process that opened the old file before the
    delete and one that creates a new file both hold "the" lock."""

    def __init__(self, directory: str):
        self.dir = directory
        self.path = os.path.join(directory, LOCK_FILE)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirError(
                f"Failed to acquire lock on file .lock in {directory}. A kesque instance in another "
                "process or thread is using this directory."
            ) from None
        except OSError:
            os.close(fd)
            raise
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor of the description releases the flock
            self.fd = None


# descriptors beside one per segment: connections, the files opened while working
# (checkpoints, snapshots), the interpreter's own
FD_HEADROOM = 256


def count_segments(dirs) -> int:
    """``.log`` files in the partition directories of ``dirs`` (each holds a descriptor)."""
    total = 0
    for d in dirs:
        try:
            parts = [e.path for e in os.scandir(d) if e.is_dir()]
        except FileNotFoundError:
            continue
        for p in parts:
            with os.scandir(p) as it:
                total += sum(1 for e in it if e.name.endswith(".log"))
    return total


def raise_fd_limit() -> int:
    """Raise the soft open-file limit to the hard one (as the JVM does); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("Raised the open file limit from %d to %d", soft, target)
        except (ValueError, OSError) as e:
            log.warning("Could not raise the open file limit from %d to %d: %s", soft, target, e)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def check_fd_limit(dirs) -> None:
    """Refuse to start when the open-file limit, raised as far as allowed, cannot hold one
    descriptor per segment on disk: recovery would otherwise fail half-way with EMFILE."""
    limit = raise_fd_limit()
    segments = count_segments(dirs)
    needed = segments + FD_HEADROOM
    if limit != resource.RLIM_INFINITY and limit < needed:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        raise LogDirError(
            f"The open file limit ({limit}, hard limit {'unlimited' if hard == resource.RLIM_INFINITY else hard}) is "
            f"too low for the {segments} log segments in {', '.join(dirs)}: at least {needed} file descriptors are "
            f"needed (one per segment and {FD_HEADROOM} for connections and other files). Raise the limit "
            "(ulimit -n, or LimitNOFILE for a systemd service) and start again."
        )


# ---------------------------------------------------------------------- meta.properties
# Every log dir and the metadata log dir hold a meta.properties (version=1, cluster.id,
# node.id, directory.id) that ``kesque storage format`` (kafka-storage.sh format) writes and
# every start checks, as Kafka's MetaPropertiesEnsemble does.


def storage_dirs(config) -> list[str]:
    """The log dirs and the metadata log dir of a node (absolute, each once)."""
    return list(dict.fromkeys(os.path.abspath(d) for d in [*config.log_dirs, config.metadata_log_dir]))


def read_meta_properties(dirs) -> dict[str, dict[str, str] | None]:
    """dir -> its meta.properties (None: the dir has none, or does not exist)."""
    return {d: ck.read_properties(os.path.join(d, ck.META_PROPERTIES)) for d in dirs}


def verify_meta_properties(
    metas: dict[str, dict[str, str] | None],
    node_id: int,
    cluster_id: str | None = None,
    *,
    require_formatted: bool = False,
) -> str | None:
    """Check the dirs agree with each other and with this node (one cluster id, this node's
    id, no directory id twice) and return their cluster id (None: none formatted yet).
    ``require_formatted``: a dir without meta.properties is an error too (every node but a
    lone one must be formatted with ``kesque storage format`` first). Raises LogDirError with
    Kafka's messages; reads only."""
    if require_formatted:
        if not any(metas.values()):
            raise LogDirError(
                "No readable meta.properties files found. Format the storage of this node first: "
                "kesque storage format --cluster-id ID --config FILE"
            )
        for d, props in metas.items():
            if props is None:
                raise LogDirError(
                    f"No `meta.properties` found in {d} (have you run `kesque storage format` to format the directory?)"
                )
    seen: dict[str, str] = {}
    for d, props in metas.items():
        if props is None:
            continue
        path = os.path.join(d, ck.META_PROPERTIES)
        stored = props.get("cluster.id")
        if stored and cluster_id and stored != cluster_id:
            raise LogDirError(f"Invalid cluster.id in: {path}. Expected {cluster_id}, but read {stored}")
        cluster_id = cluster_id or stored
        if props.get("node.id") and int(props["node.id"]) != node_id:
            raise LogDirError(
                f"Stored node id {props['node.id']} doesn't match previous node id {node_id} in "
                f"{path}. If you moved your data, make sure your configured node id matches. If you "
                "intend to create a new node, you should remove all data in your data directories."
            )
        dir_id = props.get("directory.id")
        if dir_id and dir_id in seen:
            raise LogDirError(
                f"Duplicate directory ID {dir_id} found. It was the ID of {seen[dir_id]}, but also of {d}"
            )
        if dir_id:
            seen[dir_id] = d
    return cluster_id


def format_dirs(
    metas: dict[str, dict[str, str] | None], cluster_id: str, node_id: int, pre_write=None
) -> dict[str, uuid.UUID]:
    """Write meta.properties (a new directory id each) into the dirs that have none, creating
    them, ``pre_write(dir)`` first when given; returns those dirs and their directory ids."""
    formatted = {}
    for d, props in metas.items():
        if props is not None:
            continue
        if not os.path.isdir(d):
            os.makedirs(d)
            ck.fsync_dir(os.path.dirname(d))  # its entry must outlive a power cut, as the file's
        if pre_write is not None:
            pre_write(d)
        formatted[d] = dir_id = uuid.uuid4()
        ck.write_properties(
            os.path.join(d, ck.META_PROPERTIES),
            {
                "cluster.id": cluster_id,
                "directory.id": ck.uuid_to_kafka(dir_id),
                "node.id": str(node_id),
                "version": "1",
            },
        )
    return formatted


def ensure_storage(config) -> str | None:
    """The start-up check of a node's storage, before anything else is read or written: the
    dirs must agree (cluster id, node id); a node other than a lone combined one must have been
    formatted (``kesque storage format``), and a lone one formats what is missing, the metadata
    log dir included. Raises LogDirError naming the problem, having written nothing."""
    dirs = storage_dirs(config)
    node_id = config.node_id if config.node_id >= 0 else 1
    metas = read_meta_properties(dirs)
    cluster_id = verify_meta_properties(
        metas, node_id, config.get("cluster.id"), require_formatted=not config.lone_node
    )
    if all(metas.values()):
        return cluster_id
    locks = []
    try:
        for d in dirs:
            if not os.path.isdir(d):
                log.info("Log directory %s not found, creating it.", d)
                os.makedirs(d)
                ck.fsync_dir(os.path.dirname(d))
            locks.append(DirLock(d))
        metas = read_meta_properties(dirs)  # another process may have formatted them meanwhile
        cluster_id = verify_meta_properties(metas, node_id, cluster_id) or ck.uuid_to_kafka(uuid.uuid4())
        for d in format_dirs(metas, cluster_id, node_id):
            log.info("Formatted %s for cluster %s", d, cluster_id)
    finally:
        for lock in locks:
            lock.release()
    return cluster_id
