"""A log dir that fills up, on real processes (KIP-112/KIP-858): a small tmpfs is the failing dir.

* In a 3-node cluster (RF 3, acks=all, min.insync.replicas=2) the leader's second log dir
  fills: the dir goes offline, the broker names it in its heartbeats, the controller moves
  leadership to another in-sync replica, and the idempotent producer's every acknowledged
  record is read back once.
* A broker with a single log dir stops with Kafka's message when it fills; once space is
  freed it starts, recovers and serves every acknowledged record.

Both need root to mount a tmpfs (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kesque.testing.broker import Broker  # noqa: E402
from kesque.testing.cluster import Cluster  # noqa: E402

VALUE_SIZE = 2000


@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(name: str, size: str) -> str:
        path = str(tmp_path / name)
        os.makedirs(path)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True, text=True
        )
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs (needs root): {r.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", path], capture_output=True)


def fill(path: str) -> str:
    """Write a file until the file system is full; returns its path (delete it to free space)."""
    filler = os.path.join(path, "filler")
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    return filler


class Tracker:
    """An idempotent acks=all producer that remembers what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.next = 0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 20000,
                "retry.backoff.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def _done(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append(str(err))

    def send(self, n: int) -> None:
        for _ in range(n):
            value = b"%08d" % self.next + b"x" * (VALUE_SIZE - 8)
            self.next += 1
            while True:
                try:
                    self.producer.produce(self.topic, value, partition=0, on_delivery=self._done)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.producer.poll(0)

    def flush(self, timeout: float = 30) -> None:
        self.producer.flush(timeout)


def read_all(bootstrap: str, topic: str, timeout: float = 30) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.time()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                continue
            out.append(m.value())
    finally:
        c.close()
    raise AssertionError(f"read {len(out)} records without reaching the end of {topic}")


def create_topic(bootstrap: str, topic: str, replicas: list[int] | None = None, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spec = (
        NewTopic(topic, 1, replica_assignment=[replicas], config=config or {})
        if replicas
        else NewTopic(topic, num_partitions=1, replication_factor=1, config=config or {})
    )
    admin.create_topics([spec])[topic].result(30)


def wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def leader_of(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[0].leader


def log_text(b: Broker) -> str:
    with open(b.log_path, errors="replace") as f:
        return f.read()


def test_single_dir_broker_halts_then_recovers_every_acknowledged_record(tmp_path, tmpfs):
    disk = tmpfs("disk", "24m")
    b = Broker(data_dir=str(tmp_path / "node"), config={"log.dirs": disk})
    b.start()
    try:
        create_topic(b.bootstrap_servers, "t")
        p = Tracker(b.bootstrap_servers, "t")
        p.send(300)
        p.flush()
        assert len(p.acked) == 300
        filler = fill(disk)
        # the next appends fail: the broker's only log dir goes offline and it stops
        deadline = time.monotonic() + 60
        while b.process.poll() is None and time.monotonic() < deadline:
            p.send(20)
            p.producer.poll(0.2)
        assert b.process.poll() == 1, "the broker did not stop when its only log dir failed"
        assert f"Shutdown broker because all log dirs in {disk} have failed" in log_text(b)
        acked = list(p.acked)
        os.unlink(filler)  # the fault clears
        b.process = None
        b.start()
        p.flush(30)  # what the producer still retried may land now
        got = read_all(b.bootstrap_servers, "t")
        assert len(got) == len(set(got)), "a record was written twice"
        missing = set(acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged records lost"
        assert "recovering" in log_text(b)
    finally:
        b.stop()


def isr_of(bootstrap: str, topic: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return list(md.topics[topic].partitions[0].isrs)


@pytest.mark.slow
@pytest.mark.parametrize("role", ["leader", "follower"])
def test_cluster_moves_leadership_off_a_failed_log_dir(tmp_path, tmpfs, role):
    """Node 2's replica of t-0 is on the disk that fills. As the leader, its leadership moves to
    an in-sync replica at once; as a follower, it leaves the ISR at once, not after
    replica.lag.time.max.ms: the controller acts on the offline dir its heartbeat names. (As in
    Kafka, the leader's high watermark still waits for a replica that was caught up less than
    replica.lag.time.max.ms ago, ISR or not, so acks=all resume after that time: 10 s here.)
    Node 2's replica of u-0, in its healthy dir, keeps its leadership and its ISR place: node 2
    told the controller the dir of each replica (AssignReplicasToDirs, KIP-858)."""
    cluster = Cluster(nodes=3, data_dir=str(tmp_path / "cluster"), config={"replica.lag.time.max.ms": "10000"})
    disk = tmpfs("disk2", "24m")
    # node 2: its first log dir (where new partitions go first) is the small disk; the
    # metadata log stays on its regular dir
    n2 = cluster.node(2)
    data = n2.config["log.dirs"]
    n2.config.update({"log.dirs": f"{disk},{data}", "metadata.log.dir": data})
    try:
        cluster.start()
        bootstrap = cluster.bootstrap_servers
        replicas = [2, 1, 3] if role == "leader" else [1, 2, 3]
        create_topic(bootstrap, "t", replicas=replicas, config={"min.insync.replicas": "2"})
        wait_until(
            lambda: leader_of(bootstrap, "t") == replicas[0] and len(isr_of(bootstrap, "t")) == 3,
            30,
            "t-0 to be led by its first replica with a full ISR",
        )
        assert os.path.isdir(os.path.join(disk, "t-0"))
        create_topic(bootstrap, "u", replicas=[2, 1, 3])
        wait_until(
            lambda: leader_of(bootstrap, "u") == 2 and len(isr_of(bootstrap, "u")) == 3,
            30,
            "u-0 to be led by node 2 with a full ISR",
        )
        assert os.path.isdir(os.path.join(data, "u-0"))  # the dir holding the fewest logs
        p = Tracker(bootstrap, "t")
        p.send(200)
        p.flush()
        assert len(p.acked) == 200
        fill(disk)
        filled_at = time.monotonic()
        left_isr_after = None
        before = len(p.acked)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (len(p.acked) < before + 300 or left_isr_after is None):
            p.send(20)
            p.producer.poll(0.2)
            if left_isr_after is None and 2 not in isr_of(bootstrap, "t"):
                left_isr_after = time.monotonic() - filled_at
        p.flush(60)
        assert leader_of(bootstrap, "t") in (1, 3), "leadership did not leave the broker with the failed dir"
        assert left_isr_after is not None and 2 not in isr_of(bootstrap, "t")
        # at once, well before replica.lag.time.max.ms (10 s) would have shrunk the ISR
        assert left_isr_after < 5, f"node 2 left the ISR only after {left_isr_after:.1f} s (by lag)"
        # only the failed dir's replicas: u-0 (healthy dir) is still led by node 2, ISR whole
        assert leader_of(bootstrap, "u") == 2 and sorted(isr_of(bootstrap, "u")) == [1, 2, 3]
        # the metadata says so, as Kafka's dump tool prints it: node 2 registered its two dirs,
        # assigned its replicas (UNASSIGNED at creation: it has two) and lost the full one
        meta = os.path.join(cluster.node(1).config["log.dirs"], "__cluster_metadata-0")
        dumped = subprocess.run(
            [
                sys.executable,
                "-m",
                "kesque",
                "dump-log",
                "--cluster-metadata-decoder",
                "--files",
                ",".join(os.path.join(meta, f) for f in sorted(os.listdir(meta)) if f.endswith(".log")),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        payloads = [
            json.loads(line.split(" payload: ", 1)[1]) for line in dumped.stdout.splitlines() if " payload: " in line
        ]
        registered = [
            r["data"]["logDirs"]
            for r in payloads
            if r["type"] == "REGISTER_BROKER_RECORD" and r["data"]["brokerId"] == 2
        ]
        assert registered and len(registered[-1]) == 2
        assigned = [
            r["data"]["directories"]
            for r in payloads
            if r["type"] == "PARTITION_CHANGE_RECORD" and "directories" in r["data"]
        ]
        assert len(assigned) >= 2 and all("AAAAAAAAAAAAAAAAAAAAAQ" not in d for d in assigned)
        changed = [
            r["data"]["logDirs"]
            for r in payloads
            if r["type"] == "BROKER_REGISTRATION_CHANGE_RECORD" and r["data"].get("logDirs")
        ]
        assert len(changed) == 1 and len(changed[0]) == 1 and changed[0][0] in registered[-1]
        assert len(p.acked) >= before + 300, f"only {len(p.acked) - before} records acknowledged after the failure"
        assert n2.process.poll() is None, "node 2 has a healthy dir left: it must keep running"
        text = log_text(n2)
        assert "Stopping serving replicas in dir " + disk in text
        # kesque log-dirs (kafka-log-dirs.sh): the offline dir with KafkaStorageException, the
        # healthy one with its partitions
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "kesque",
                "log-dirs",
                "--describe",
                "--bootstrap-server",
                bootstrap,
                "--broker-list",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        described = json.loads(out.stdout.strip().splitlines()[-1])
        dirs = {d["logDir"]: d for d in described["brokers"][0]["logDirs"]}
        assert dirs[disk] == {
            "partitions": [],
            "error": "org.apache.kafka.common.errors.KafkaStorageException",
            "logDir": disk,
        }
        assert dirs[data]["error"] is None
        got = read_all(bootstrap, "t")
        assert len(got) == len(set(got)), "a record was written twice"
        missing = set(p.acked) - set(got)
        assert not missing, f"{len(missing)} acknowledged records lost"
    finally:
        cluster.close()


def test_a_failed_metadata_log_dir_halts_the_broker(tmp_path, tmpfs):
    """metadata.log.dir on its own disk, which fills: the metadata log takes no more appends and
    the broker stops with Kafka's message; with space back it starts with every committed
    topic and record."""
    meta = tmpfs("meta", "8m")
    b = Broker(data_dir=str(tmp_path / "node"), config={"metadata.log.dir": meta})
    b.start()
    try:
        create_topic(b.bootstrap_servers, "t")
        p = Tracker(b.bootstrap_servers, "t")
        p.send(50)
        p.flush()
        assert len(p.acked) == 50
        filler = fill(meta)
        # metadata records until the metadata log's last page is full and an append fails
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        deadline = time.monotonic() + 30
        round_ = 0
        while b.process.poll() is None and time.monotonic() < deadline:
            futures = admin.create_topics(
                [
                    NewTopic(
                        f"more-{round_}-{i}",
                        num_partitions=1,
                        replication_factor=1,
                        config={"cleanup.policy": "compact", "retention.ms": "1000000"},
                    )
                    for i in range(20)
                ],
                request_timeout=5,
            )
            for f in futures.values():
                try:
                    f.result(10)
                except Exception:  # noqa: BLE001 - the broker stops: these may fail
                    pass
            round_ += 1
        wait_until(lambda: b.process.poll() is not None, 10, "the broker to stop")
        assert b.process.returncode == 1
        assert f"Shutdown broker because the metadata log dir {meta} has failed" in log_text(b)
        os.unlink(filler)
        b.process = None
        b.start()
        got = read_all(b.bootstrap_servers, "t")
        assert got == p.acked
    finally:
        b.stop()


def test_a_broker_with_two_dirs_serves_the_healthy_one(tmp_path, tmpfs):
    """One of two log dirs fills: produce to its partition gets KAFKA_STORAGE_ERROR, the other
    dir's partition is served, `kesque log-dirs` shows the dir offline as Kafka's tool does; with
    space back the dir stays offline, and a SIGKILL and restart serve both with every
    acknowledged record."""
    disk = tmpfs("disk", "8m")
    data = str(tmp_path / "data")
    b = Broker(data_dir=str(tmp_path / "node"), config={"log.dirs": f"{disk},{data}", "metadata.log.dir": data})
    b.start()
    try:
        create_topic(b.bootstrap_servers, "bad")  # the first dir: the small disk
        create_topic(b.bootstrap_servers, "good")  # the other one
        assert os.path.isdir(os.path.join(disk, "bad-0")) and os.path.isdir(os.path.join(data, "good-0"))
        bad, good = Tracker(b.bootstrap_servers, "bad"), Tracker(b.bootstrap_servers, "good")
        for p in (bad, good):
            p.producer = Producer(
                {
                    "bootstrap.servers": b.bootstrap_servers,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": 3000,
                }
            )
            p.send(50)
            p.flush()
            assert len(p.acked) == 50
        filler = fill(disk)
        bad.send(50)
        bad.flush(10)
        assert len(bad.acked) < 100 and bad.failed, "appends to the full dir were acknowledged"
        good.send(50)
        good.flush(10)
        assert len(good.acked) == 100 and not good.failed
        assert b.process.poll() is None
        text = log_text(b)
        assert f"Stopping serving replicas in dir {disk}" in text
        out = subprocess.run(
            [sys.executable, "-m", "kesque", "log-dirs", "--describe", "--bootstrap-server", b.bootstrap_servers],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        dirs = {d["logDir"]: d for d in json.loads(out.stdout.strip().splitlines()[-1])["brokers"][0]["logDirs"]}
        assert dirs[disk] == {
            "partitions": [],
            "error": "org.apache.kafka.common.errors.KafkaStorageException",
            "logDir": disk,
        }
        assert dirs[data]["error"] is None and [p["partition"] for p in dirs[data]["partitions"]] == ["good-0"]
        os.unlink(filler)  # space is back: the dir stays offline until a restart
        acked = len(bad.acked)
        bad.send(20)
        bad.flush(10)
        assert len(bad.acked) == acked, "appended to a log after its failed write"
        b.kill()  # the SIGKILL: recovery cuts only the torn tail
        b.start()
        got_bad, got_good = read_all(b.bootstrap_servers, "bad"), read_all(b.bootstrap_servers, "good")
        assert set(bad.acked) <= set(got_bad) and len(got_bad) == len(set(got_bad))
        assert got_good == good.acked
    finally:
        b.stop()
