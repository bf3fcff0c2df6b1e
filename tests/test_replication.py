"""Partition replication on real kesque processes on loopback (issue 14's tests).

Three combined broker+controller nodes (``kesque.Cluster``) with short quorum, session and
replica timings. The seed walkthroughs (001 §4.1) run with the seeds' own commands through the
``kesque`` tools, against every node's files.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from kesque.testing.cluster import Cluster

FAST = {"controller.quorum.election.timeout.ms": "300", "controller.quorum.fetch.timeout.ms": "600",
        "controller.quorum.request.timeout.ms": "500", "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "3000", "replica.high.watermark.checkpoint.interval.ms": "200",
        "replica.fetch.backoff.ms": "200", "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}


def tool(*args: str, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kesque", *args], capture_output=True, text=True, timeout=timeout,
                          input=input)


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def data_dir(cluster: Cluster, node_id: int) -> str:
    return os.path.join(cluster.data_dir, f"node-{node_id}", "data")


PARTITION_LINE = re.compile(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (-?\d+|none)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)")


def describe(cluster: Cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), from ``kafka-topics.sh --describe``."""
    r = tool("topics", "--bootstrap-server", cluster.bootstrap_servers, "--describe", "--topic", topic)
    out = {}
    for m in PARTITION_LINE.finditer(r.stdout):
        leader = -1 if m.group(3) == "none" else int(m.group(3))
        out[int(m.group(2))] = (leader, [int(x) for x in m.group(4).split(",") if x],
                                [int(x) for x in m.group(5).split(",") if x])
    return out


def create(cluster: Cluster, topic: str, rf: int, *configs: str) -> None:
    args = ["topics", "--bootstrap-server", cluster.bootstrap_servers, "--create", "--topic", topic,
            "--partitions", "1", "--replication-factor", str(rf)]
    for c in configs:
        args += ["--config", c]
    r = tool(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: len(describe(cluster, topic).get(0, (0, [], []))[2]) == rf, what=f"{topic} ISR of {rf}")


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all", **conf) -> list:
    """Each value's delivery report (error or None), in order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 20000,
                  "topic.metadata.refresh.interval.ms": 500, **conf})
    reports = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, msg: reports.append(err))
    p.flush(30)
    return reports


def consume_all(bootstrap: str, topic: str, idle: float = 3.0, isolation: str = "read_uncommitted") -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "topic.metadata.refresh.interval.ms": 500})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.append(m.value())
            last = time.monotonic()
    finally:
        c.close()
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=str(tmp_path_factory.mktemp("repl")), config=FAST) as c:
        yield c
        for b in c.nodes.values():   # the last node's controlled shutdown would wait for a lost quorum
            if b.process is not None:
                b.kill()


def test_seed_001_three_replicas(cluster):
    """§4.1.1 on three brokers: peter-test01 with RF 3 has Replicas and Isr 1,2,3; "test message1"
    lands in every broker's segment, and every broker's replication-offset-checkpoint reads
    ``peter-test01 0 1`` (the followers learn the high watermark from the leader)."""
    create(cluster, "peter-test01", 3)
    leader, replicas, isr = describe(cluster, "peter-test01")[0]
    assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] and leader == replicas[0]
    r = tool("console-producer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "peter-test01",
             input="test message1\n")
    assert r.returncode == 0, r.stderr
    for node in (1, 2, 3):
        d = data_dir(cluster, node)
        wait_for(lambda: "peter-test01 0 1\n" in (read(os.path.join(d, "replication-offset-checkpoint")) or ""),
                 what=f"node {node}'s high watermark checkpoint")
        r = tool("dump-log", "--print-data-log", "--files", os.path.join(d, "peter-test01-0", "00000000000000000000.log"))
        assert r.returncode == 0, r.stderr
        assert "payload: test message1" in r.stdout and "partitionLeaderEpoch: 0" in r.stdout, (node, r.stdout)


def test_seed_leader_epoch_walkthrough(cluster):
    """§4.1.5's leader-epoch files: ``0 / 1 / 0 0`` on the leader, unchanged by a message; after
    the leader stops, the new leader's reads ``0 / 2 / 0 0 / 1 1``; the old leader comes back,
    truncates nothing, rejoins the ISR, and once it has fetched in epoch 1 its file matches."""
    topic = "peter-test02"
    create(cluster, topic, 2)
    leader, replicas, _isr = describe(cluster, topic)[0]
    follower = next(r for r in replicas if r != leader)

    def epochs(node):
        return read(os.path.join(data_dir(cluster, node), f"{topic}-0", "leader-epoch-checkpoint"))

    assert epochs(leader) == "0\n1\n0 0\n"
    assert produce(cluster.bootstrap_servers, topic, [b"message1"]) == [None]
    assert epochs(leader) == "0\n1\n0 0\n"
    cluster.node(leader).stop()
    wait_for(lambda: describe(cluster, topic).get(0, (0,))[0] == follower, what="the follower elected")
    wait_for(lambda: epochs(follower) == "0\n2\n0 0\n1 1\n", what=f"epoch 1 in the new leader's file ({epochs(follower)!r})")
    cluster.restart(leader)
    wait_for(lambda: sorted(describe(cluster, topic)[0][2]) == sorted(replicas), what="the old leader back in the ISR")

    log_file = os.path.join(data_dir(cluster, leader), f"{topic}-0", "00000000000000000000.log")
    assert b"message1" in open(log_file, "rb").read()   # nothing truncated
    assert produce(cluster.bootstrap_servers, topic, [b"message2"]) == [None]
    wait_for(lambda: epochs(leader) == epochs(follower), what=f"the old leader's file ({epochs(leader)!r})")
    assert consume_all(cluster.bootstrap_servers, topic, idle=2) == [b"message1", b"message2"]


def test_acks_1_above_the_high_watermark_is_never_served(cluster):
    """§4.1.3: with both followers paused (inside replica.lag.time.max.ms), an acks=1 write stays
    above the high watermark: no consumer sees it; the leader is killed and the new leader does
    not have it, so no consumer ever saw a record that was then lost."""
    topic = "seed-413"
    create(cluster, topic, 3)
    assert produce(cluster.bootstrap_servers, topic, [b"committed"]) == [None]
    wait_for(lambda: consume_all(cluster.bootstrap_servers, topic, idle=1) == [b"committed"], what="committed")
    leader, replicas, _ = describe(cluster, topic)[0]
    followers = [r for r in replicas if r != leader]
    for f in followers:
        cluster.node(f).process.send_signal(signal.SIGSTOP)
    time.sleep(1.5)   # the followers' fetches already waiting at the leader end (replica.fetch.wait.max.ms)
    try:
        leader_bs = cluster.node(leader).bootstrap_servers
        assert produce(leader_bs, topic, [b"uncommitted"], acks="1") == [None]
        assert consume_all(leader_bs, topic, idle=2) == [b"committed"]
        cluster.kill(leader)
    finally:
        for f in followers:
            cluster.node(f).process.send_signal(signal.SIGCONT)
    others = ",".join(cluster.node(f).bootstrap_servers for f in followers)
    wait_for(lambda: describe_via(others, topic) in followers, what="a follower elected")
    assert consume_all(others, topic, idle=2) == [b"committed"]
    cluster.restart(leader)
    wait_for(lambda: len(describe(cluster, topic)[0][2]) == 3, what="the old leader back in the ISR")
    assert consume_all(cluster.bootstrap_servers, topic, idle=2) == [b"committed"]


def describe_via(bootstrap: str, topic: str) -> int:
    r = tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    m = PARTITION_LINE.search(r.stdout)
    return -2 if m is None or m.group(3) == "none" else int(m.group(3))
