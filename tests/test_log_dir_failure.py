"""A failing log dir (KIP-112), in-process: ENOSPC/EIO at each write point of a log dir
(tests/faultfs.py) takes that dir offline; its partitions answer KAFKA_STORAGE_ERROR, the other
dir goes on serving, nothing is appended after the failed write, and once the fault clears a
reopened LogManager (a restart) has every acknowledged record, once, and no torn batch inside a
segment."""

from __future__ import annotations

import dataclasses
import errno
import os
import time
import uuid

import pytest

from faultfs import POINTS, FaultFS
from kesque.clock import SYSTEM_CLOCK
from kesque.config.broker import SINGLE_NODE, BrokerConfig
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata.image import Delta, MetadataImage
from kesque.records import batch as rb
from kesque.records.records import build_batch, iter_records
from kesque.replication.replica_manager import ReplicaManager
from kesque.storage.log_dir_failure import LogDirFailureChannel
from kesque.storage.log_manager import LogManager

PRODUCER_ID = 7000


class Node:
    """A LogManager and a ReplicaManager over two log dirs, led by node 1 (a lone replica)."""

    def __init__(self, dirs, image=None, segment_bytes=None):
        self.dirs = dirs
        self.channel = LogDirFailureChannel()
        self.lm = LogManager(dirs, SYSTEM_CLOCK, node_id=1, cluster_id=None, dir_failure=self.channel)
        self.lm.prepare_dirs()
        self.image = image or MetadataImage()
        cfg = BrokerConfig({**SINGLE_NODE, "log.dirs": ",".join(dirs), "log.index.interval.bytes": "1"})
        self.rm = ReplicaManager(cfg, self.lm, self.image, SYSTEM_CLOCK)
        self.segment_bytes = segment_bytes
        self.lm.load_logs(self.rm.config_for_loading)
        self.rm.apply_delta(
            Delta(changed_partitions={(t.topic_id, p) for t in self.image.topics_by_id.values() for p in t.partitions})
        )
        self.seq: dict[tuple[str, int], int] = {}

    def create_topic(self, name: str, partitions: int) -> None:
        delta = Delta()
        topic_id = uuid.uuid4()
        self.image.replay({"type": "TopicRecord", "name": name, "topic_id": topic_id}, delta)
        for p in range(partitions):
            self.image.replay(
                {
                    "type": "PartitionRecord",
                    "partition_id": p,
                    "topic_id": topic_id,
                    "replicas": [1],
                    "isr": [1],
                    "removing_replicas": [],
                    "adding_replicas": [],
                    "leader": 1,
                    "leader_recovery_state": 0,
                    "leader_epoch": 0,
                    "partition_epoch": 0,
                },
                delta,
            )
        self.rm.apply_delta(delta)
        self.handle_failures()
        if self.segment_bytes:  # below what segment.bytes accepts: set on the logs directly
            for p in range(partitions):
                lg = self.lm.get_log(name, p)
                if lg is not None:
                    lg.config = dataclasses.replace(lg.config, segment_bytes=self.segment_bytes)

    def handle_failures(self) -> None:
        """What the server's handler does on its loop for each dir the channel took offline."""
        for d in self.channel.take_offline_log_dirs():
            self.rm.handle_log_dir_failure(d)

    def produce(self, topic: str, partition: int, value: bytes):
        """An idempotent acks=1 produce; returns the error code (0: acknowledged)."""
        seq = self.seq.get((topic, partition), 0)
        batch = bytearray(
            build_batch([(None, value, ())], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=seq)
        )
        try:
            self.rm.append(topic, partition, memoryview(batch), 1)
        except KafkaError as e:
            code = int(e.code)
        else:
            self.seq[(topic, partition)] = seq + 1
            code = 0
        self.handle_failures()
        return code

    def fetch_error(self, topic: str, partition: int) -> int:
        try:
            self.rm.get_partition(topic, partition).read(0, 1 << 20, "READ_UNCOMMITTED", True, -1)
        except KafkaError as e:
            return int(e.code)
        return 0

    def dir_of(self, topic: str, partition: int) -> str:
        return self.lm.dir_of(topic, partition)

    def shutdown(self) -> None:
        self.lm.shutdown(0)
        self.lm.release_locks()


def values_in(part_dir: str) -> list[bytes]:
    """Every record value in the partition directory's segments, in order; asserts that each
    segment is whole batches with valid CRCs up to its end."""
    out = []
    for name in sorted(os.listdir(part_dir)):
        if not name.endswith(".log"):
            continue
        data = open(os.path.join(part_dir, name), "rb").read()
        pos = 0
        while pos < len(data):
            h = rb.read_header(data, pos)
            assert pos + h.size <= len(data), f"torn batch at byte {pos} of {name}"
            assert rb.is_crc_valid(data, pos, h.size), f"corrupt batch at byte {pos} of {name}"
            out.extend(bytes(r.value) for r in iter_records(data, pos, h))
            pos += h.size
    return out


def torn_only_at_tail(part_dir: str) -> str | None:
    """On disk before recovery: a partial batch may only be the last bytes of the last
    non-empty segment (never inside the log, with batches after it). Returns the segment whose
    tail is torn, if any."""
    segs = [n for n in sorted(os.listdir(part_dir)) if n.endswith(".log")]
    torn_at = None
    for name in segs:
        data = open(os.path.join(part_dir, name), "rb").read()
        if data and torn_at is not None:
            pytest.fail(f"batches in {name} after the torn batch in {torn_at}")
        pos = 0
        while pos + rb.HEADER_SIZE <= len(data):
            h = rb.read_header(data, pos)
            if pos + h.size > len(data):
                break
            pos += h.size
        if pos != len(data):
            torn_at = name
    return torn_at


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "bad"), str(tmp_path / "good")]


def _trigger(node: Node, point: str, fs: FaultFS) -> list[int]:
    """Arm the fault on the bad dir and run what reaches it; returns the produce codes to a-0."""
    codes = []
    if point in ("checkpoint", "fsync"):  # a checkpoint's file is fsynced before its rename
        fs.arm(point, errno.EIO if point == "fsync" else errno.ENOSPC)
        lm = node.lm
        lm.write_checkpoints(lm.high_watermark_checkpoints() + lm.recovery_point_checkpoints())
        node.handle_failures()
    elif point == "partition-metadata":
        fs.arm(point)
        node.create_topic("b", 2)
    else:
        fs.arm(point, errno.EIO if point == "index-append" else errno.ENOSPC, skip={"segment-append": 2}.get(point, 0))
    for i in range(6):
        codes.append(node.produce("a", 0, b"late-%d" % i))
    return codes


@pytest.mark.parametrize("point", POINTS)
def test_write_fault_takes_the_dir_offline_and_loses_nothing(point, dirs, monkeypatch):
    fs = FaultFS(dirs[0]).install(monkeypatch)
    # a-0 in the bad dir, a-1 in the good one; segments of two batches, so that rolls happen
    node = Node(dirs, segment_bytes=200)
    node.create_topic("a", 2)
    assert node.dir_of("a", 0) == os.path.abspath(dirs[0]) and node.dir_of("a", 1) == os.path.abspath(dirs[1])
    acked = {0: [], 1: []}
    for i in range(3):
        for p in (0, 1):
            value = b"early-%d-%d" % (p, i)
            assert node.produce("a", p, value) == 0
            acked[p].append(value)

    codes = _trigger(node, point, fs)
    assert fs.hits >= 1, f"the fault at {point} was never reached"
    acked[0] += [b"late-%d" % i for i, c in enumerate(codes) if c == 0]
    failed = [c for c in codes if c]
    # the dir is offline from the first failure on: every later produce to it is refused
    assert failed and set(failed) == {ErrorCode.kafka_storage_error}
    assert codes == sorted(codes, key=bool), "a produce succeeded after a failed one"
    assert not node.lm.is_log_dir_online(os.path.abspath(dirs[0]))
    assert ("a", 0) in node.rm.offline_partitions
    assert node.fetch_error("a", 0) == ErrorCode.kafka_storage_error
    # the good dir goes on serving, reads and writes
    for i in range(3):
        assert node.produce("a", 1, b"after-%d" % i) == 0
        acked[1].append(b"after-%d" % i)
    assert node.fetch_error("a", 1) == 0
    if point == "partition-metadata":
        # the topic created while the dir failed: the partition the bad dir got is offline, the
        # rest of the metadata delta was still applied (b-1 in the good dir is served)
        assert node.rm.offline_partitions == {("a", 0), ("b", 0)} or ("b", 0) in node.rm.offline_partitions
        assert node.dir_of("b", 1) == os.path.abspath(dirs[1])
        assert node.produce("b", 1, b"b-value") == 0

    torn = torn_only_at_tail(os.path.join(dirs[0], "a-0"))
    assert (torn is not None) == (point == "segment-append")  # the fault layer writes half a batch there
    node.shutdown()
    assert not os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown")), "a failed dir must be recovered"
    assert not fs.late_writes, f"written in the failed dir after its first failure: {fs.late_writes}"
    fs.clear()

    # the fault cleared: a restart recovers the dir; every acknowledged record is there, once
    again = Node(dirs, image=node.image)
    got0 = values_in(os.path.join(dirs[0], "a-0"))
    got1 = values_in(os.path.join(dirs[1], "a-1"))
    assert got0[: len(acked[0])] == acked[0] and len(set(got0)) == len(got0)
    assert set(got0) - set(acked[0]) <= {b"late-%d" % i for i in range(6)}  # written, never acknowledged
    assert got1 == acked[1]
    # and it serves the partition again; an idempotent retry of an unacknowledged batch is not doubled
    assert again.fetch_error("a", 0) == 0
    again.seq[("a", 0)] = node.seq.get(("a", 0), 0)
    retry = b"late-%d" % codes.index(ErrorCode.kafka_storage_error)  # the producer retries what failed
    assert again.produce("a", 0, retry) == 0
    assert again.produce("a", 0, b"restarted") == 0
    values = values_in(os.path.join(dirs[0], "a-0"))
    assert values[-1] == b"restarted" and values.count(retry) == 1 and len(set(values)) == len(values)
    again.shutdown()


def test_read_error_takes_the_dir_offline(dirs, monkeypatch):
    node = Node(dirs)
    node.create_topic("a", 2)
    assert node.produce("a", 0, b"x") == 0
    real = os.pread

    def pread(fd, n, pos):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(os.path.abspath(dirs[0]) + os.sep):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, n, pos)

    monkeypatch.setattr(os, "pread", pread)
    # the read reaches the disk through the segment's index lookup: the dir goes offline
    lg = node.lm.get_log("a", 0)
    with pytest.raises(KafkaError) as e:
        lg.read(0, 1 << 20, lg.log_end_offset, True)
    assert e.value.code == ErrorCode.kafka_storage_error
    node.handle_failures()
    assert node.fetch_error("a", 0) == ErrorCode.kafka_storage_error
    assert node.produce("a", 1, b"y") == 0
    monkeypatch.setattr(os, "pread", real)
    node.shutdown()


def test_not_an_io_error_keeps_its_handling(dirs):
    node = Node(dirs)
    node.create_topic("a", 1)
    with pytest.raises(KafkaError) as e:
        node.rm.append("a", 0, memoryview(bytearray(b"\0" * 70)), 1)  # not a valid batch
    assert e.value.code != ErrorCode.kafka_storage_error
    assert node.lm.is_log_dir_online(os.path.abspath(dirs[0])) and not node.channel.offline_dirs
    assert node.produce("a", 0, b"fine") == 0
    node.shutdown()


@pytest.mark.parametrize("point", ["segment-append", "index-append", "roll", "producer-snapshot"])
def test_no_append_after_a_failed_write_even_once_space_is_back(point, tmp_path, monkeypatch):
    """The issue's loss: space freed after a partial write, later appends went into new segments
    after the torn batch, and recovery after a SIGKILL cut everything from the torn batch on.
    Now the UnifiedLog refuses every append after a failed write (before any handler ran), so the
    partial batch can only be the tail of the last segment, which recovery truncates."""
    from kesque.config.topic import LogConfig
    from kesque.storage.unified_log import UnifiedLog

    root = tmp_path / "d"
    fs = FaultFS(str(root)).install(monkeypatch)
    cfg = dataclasses.replace(LogConfig(), segment_bytes=200, index_interval_bytes=1)
    lg = UnifiedLog(str(root / "t-0"), "t", 0, cfg)
    acked = []

    def append(value: bytes) -> int:
        batch = bytearray(
            build_batch([(None, value, ())], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=len(acked))
        )
        try:
            lg.append_as_leader(memoryview(batch), 0, int(time.time() * 1000))
        except KafkaError as e:
            return int(e.code)
        acked.append(value)
        return 0

    for i in range(3):
        assert append(b"v%d" % i) == 0
    fs.arm(point, skip=1 if point == "segment-append" else 0)
    codes = [append(b"w%d" % i) for i in range(4)]
    assert fs.hits >= 1 and ErrorCode.kafka_storage_error in codes
    first = codes.index(ErrorCode.kafka_storage_error)
    fs.clear()  # the space is back
    assert all(c == ErrorCode.kafka_storage_error for c in codes[first:])
    assert append(b"after") == ErrorCode.kafka_storage_error, "appended after a failed write"
    assert (torn_only_at_tail(str(root / "t-0")) is not None) == (point == "segment-append")
    lg.close_handles()  # SIGKILL: nothing more is written
    again = UnifiedLog(str(root / "t-0"), "t", 0, cfg)  # no clean shutdown: recovery
    values = values_in(str(root / "t-0"))
    assert values[: len(acked)] == acked and set(values) - set(acked) <= {b"w%d" % first}
    again.close()


def test_controller_moves_leadership_and_isr_off_an_offline_dir():
    """Kafka's handleDirectoriesOffline, as kesque can do it without replica directories: the
    first heartbeat naming a dir takes the broker out of every ISR another replica remains in."""
    from test_cluster_control import Controller

    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    h.topic("t", [2, 1, 3], [1, 2, 3], [2])
    dir_id = uuid.uuid4()
    _reply, records = h.heartbeat(2, offline_log_dirs=[dir_id])
    led, followed, alone = (h.part("t", i) for i in range(3))
    assert (led.leader, led.isr) == (1, [1, 3])  # led: an in-sync replica leads
    assert (followed.leader, followed.isr) == (1, [1, 3])  # followed: out of the ISR at once
    assert (alone.leader, alone.isr) == (2, [2])  # its ISR alone: no one else could lead
    assert not h.image.brokers[2].fenced
    # the same dir again: nothing more (its healthy replicas may rejoin the ISR meanwhile)
    assert h.heartbeat(2, offline_log_dirs=[dir_id])[1] == []
    # through the wire (BrokerHeartbeat v1 carries offline_log_dirs; v0 has none)
    from kesque.controller import cluster_control as cc
    from test_cluster_control import through_kio

    req = cc.HeartbeatRequest(2, 10, 5, offline_log_dirs=[dir_id])
    assert cc.from_kio(through_kio(cc.to_kio(req, 1))) == req
    assert cc.from_kio(through_kio(cc.to_kio(req, 0))).offline_log_dirs == []


def test_a_topic_deletion_that_fails_on_one_dir_still_deletes_the_rest(dirs, monkeypatch):
    node = Node(dirs)
    node.create_topic("a", 2)
    node.create_topic("c", 1)  # c-0: back in the bad dir (it holds the fewest)
    bad = os.path.abspath(dirs[0])
    assert node.dir_of("a", 0) == bad and node.dir_of("a", 1) != bad and node.dir_of("c", 0) == bad
    real = os.replace

    def replace(src, dst, **kw):
        if os.path.abspath(src).startswith(bad + os.sep) and "-delete" in str(dst):
            raise OSError(errno.EIO, "Input/output error", src)
        return real(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    delta = Delta()
    node.image.replay({"type": "RemoveTopicRecord", "topic_id": node.image.topic("a").topic_id}, delta)
    node.rm.apply_delta(delta)
    node.handle_failures()
    monkeypatch.setattr(os, "replace", real)
    assert not os.path.exists(os.path.join(dirs[1], "a-1")), "the good dir's log was not deleted"
    assert not node.lm.is_log_dir_online(bad)
    assert node.fetch_error("c", 0) == ErrorCode.kafka_storage_error
    node.shutdown()
