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

import test_seeds as seeds
from kesque.records.records import build_batch
from kesque.testing.cluster import Cluster
from wire import Api, WireClient

FAST = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
    "replica.high.watermark.checkpoint.interval.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}


def tool(*args: str, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kesque", *args], capture_output=True, text=True, timeout=timeout, input=input
    )


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    return seeds.wait_for(predicate, timeout, what)


def data_dir(cluster: Cluster, node_id: int) -> str:
    return os.path.join(cluster.data_dir, f"node-{node_id}", "data")


PARTITION_LINE = re.compile(
    r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (-?\d+|none)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)"
)


def describe(cluster: Cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), from ``kafka-topics.sh --describe``."""
    r = tool("topics", "--bootstrap-server", cluster.bootstrap_servers, "--describe", "--topic", topic)
    out = {}
    for m in PARTITION_LINE.finditer(r.stdout):
        leader = -1 if m.group(3) == "none" else int(m.group(3))
        out[int(m.group(2))] = (
            leader,
            [int(x) for x in m.group(4).split(",") if x],
            [int(x) for x in m.group(5).split(",") if x],
        )
    return out


def create(cluster: Cluster, topic: str, rf: int, *configs: str, assignment: str | None = None) -> None:
    args = ["topics", "--bootstrap-server", cluster.bootstrap_servers, "--create", "--topic", topic]
    args += (
        ["--replica-assignment", assignment] if assignment else ["--partitions", "1", "--replication-factor", str(rf)]
    )
    for c in configs:
        args += ["--config", c]
    r = tool(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: len(describe(cluster, topic).get(0, (0, [], []))[2]) == rf, what=f"{topic} ISR of {rf}")


def metadata_isr(cluster: Cluster, node: int, topic: str) -> list[int]:
    """The sorted ISR of partition 0 in ``node``'s Metadata answer (one connection to that node:
    an Admin client may pick a paused broker and hang)."""
    with WireClient(("127.0.0.1", cluster.node(node).port)) as conn:
        t = Api(conn).metadata([topic]).topics[0]
    return sorted(int(b) for b in t.partitions[0].isr_nodes) if t.partitions else []


def leader_of(cluster: Cluster, topic: str) -> int:
    return describe(cluster, topic).get(0, (-2,))[0]


def raw_produce(cluster: Cluster, node: int, topic: str, value: bytes, acks: int = -1, **batch) -> int:
    """The error code of a one-batch Produce v9 sent to ``node``."""
    b = cluster.node(node)
    with WireClient(("127.0.0.1", b.port)) as c:
        return int(Api(c).produce(topic, build_batch([(None, value, ())], **batch), acks=acks).error_code)


def checkpoint_line(cluster: Cluster, node: int, name: str, topic: str) -> str | None:
    text = seeds.read(os.path.join(data_dir(cluster, node), name)) or ""
    return next((line for line in text.splitlines() if line.startswith(topic + " ")), None)


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all", **conf) -> list:
    """Each value's delivery report (error or None), in order."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "message.timeout.ms": 20000,
            "topic.metadata.refresh.interval.ms": 500,
            **conf,
        }
    )
    reports = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, msg: reports.append(err))
    p.flush(30)
    return reports


def consume_all(bootstrap: str, topic: str, idle: float = 3.0, isolation: str = "read_uncommitted") -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
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
        for b in c.nodes.values():  # the last node's controlled shutdown would wait for a lost quorum
            if b.process is not None:
                b.kill()


def test_seed_001_three_replicas(cluster):
    """§4.1.1 on three brokers: peter-test01 with RF 3 has Replicas and Isr 1,2,3; "test message1"
    lands in every broker's segment, and every broker's replication-offset-checkpoint reads
    ``peter-test01 0 1`` (the followers learn the high watermark from the leader)."""
    create(cluster, "peter-test01", 3)
    leader, replicas, isr = describe(cluster, "peter-test01")[0]
    assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] and leader == replicas[0]
    r = tool(
        "console-producer",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--topic",
        "peter-test01",
        input="test message1\n",
    )
    assert r.returncode == 0, r.stderr
    for node in (1, 2, 3):
        d = data_dir(cluster, node)
        wait_for(
            lambda: "peter-test01 0 1\n" in (seeds.read(os.path.join(d, "replication-offset-checkpoint")) or ""),
            what=f"node {node}'s high watermark checkpoint",
        )
        r = tool(
            "dump-log", "--print-data-log", "--files", os.path.join(d, "peter-test01-0", "00000000000000000000.log")
        )
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
        return seeds.read(os.path.join(data_dir(cluster, node), f"{topic}-0", "leader-epoch-checkpoint"))

    assert epochs(leader) == "0\n1\n0 0\n"
    assert produce(cluster.bootstrap_servers, topic, [b"message1"]) == [None]
    assert epochs(leader) == "0\n1\n0 0\n"
    cluster.node(leader).stop()
    wait_for(lambda: describe(cluster, topic).get(0, (0,))[0] == follower, what="the follower elected")
    wait_for(
        lambda: epochs(follower) == "0\n2\n0 0\n1 1\n", what=f"epoch 1 in the new leader's file ({epochs(follower)!r})"
    )
    cluster.restart(leader)
    wait_for(lambda: sorted(describe(cluster, topic)[0][2]) == sorted(replicas), what="the old leader back in the ISR")

    log_file = os.path.join(data_dir(cluster, leader), f"{topic}-0", "00000000000000000000.log")
    assert b"message1" in open(log_file, "rb").read()  # nothing truncated
    assert produce(cluster.bootstrap_servers, topic, [b"message2"]) == [None]
    wait_for(lambda: epochs(leader) == epochs(follower), what=f"the old leader's file ({epochs(leader)!r})")
    assert consume_all(cluster.bootstrap_servers, topic, idle=2) == [b"message1", b"message2"]


def test_acks_1_above_the_high_watermark_is_never_served(tmp_path):
    """§4.1.3: with both followers paused (inside replica.lag.time.max.ms, and inside their broker
    sessions), an acks=1 write stays above the high watermark: no consumer sees it; the leader is
    killed and the new leader does not have it, so no consumer ever saw a record that was then
    lost. (Own cluster: a pause longer than the 3 s sessions of the others would fence the
    followers, and an ISR of the dead leader alone stays offline, as in Kafka.)"""
    with Cluster(nodes=3, data_dir=str(tmp_path), config={**FAST, "broker.session.timeout.ms": "8000"}) as c:
        try:
            topic = "seed-413"
            create(c, topic, 3, assignment="3:1:2")
            assert produce(c.bootstrap_servers, topic, [b"committed"]) == [None]
            wait_for(lambda: consume_all(c.bootstrap_servers, topic, idle=1) == [b"committed"], what="committed")
            leader, followers = 3, [1, 2]
            for f in followers:
                c.node(f).process.send_signal(signal.SIGSTOP)
            time.sleep(1)  # the followers' fetches already waiting at the leader end (replica.fetch.wait.max.ms)
            try:
                leader_bs = c.node(leader).bootstrap_servers
                assert produce(leader_bs, topic, [b"uncommitted"], acks="1") == [None]
                assert consume_all(leader_bs, topic, idle=1.5) == [b"committed"]
                c.kill(leader)
            finally:
                for f in followers:
                    c.node(f).process.send_signal(signal.SIGCONT)
            others = ",".join(c.node(f).bootstrap_servers for f in followers)
            wait_for(lambda: describe_via(others, topic) in followers, what="a follower elected")
            assert consume_all(others, topic, idle=2) == [b"committed"]
            c.restart(leader)
            wait_for(lambda: len(describe(c, topic)[0][2]) == 3, what="the old leader back in the ISR")
            assert consume_all(c.bootstrap_servers, topic, idle=2) == [b"committed"]
        finally:
            for b in c.nodes.values():
                if b.process is not None:
                    b.kill()


def describe_via(bootstrap: str, topic: str, isr: bool = False):
    """The leader (or the sorted ISR) as the brokers at ``bootstrap`` describe it."""
    r = tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    m = PARTITION_LINE.search(r.stdout)
    if isr:
        return sorted(int(x) for x in m.group(5).split(",") if x) if m else None
    if m is None:
        return -2
    return -1 if m.group(3) == "none" else int(m.group(3))


@pytest.mark.slow  # about 22 s (a 5 s fetch wait, two session expiries): make slow
def test_seed_415_the_follower_keeps_message2_it_had_not_seen_committed(tmp_path):
    """§4.1.5 deterministically (RF 2, min.insync.replicas 1): the follower fetches message2 and is
    killed before it learns high watermark 2 (its fetch that moved the leader's HW waits out
    replica.fetch.wait.max.ms of 5 s at the leader); it restarts with HW 1 and rejoins without
    truncating (KIP-101: by leader epoch, not to its HW); then the leader dies and the follower,
    now leader, still has message2. With the pre-KIP-101 rule it would be gone."""
    config = {**FAST, "replica.fetch.wait.max.ms": "5000", "replica.lag.time.max.ms": "10000"}
    with Cluster(nodes=3, data_dir=str(tmp_path), config=config) as c:
        try:
            topic = "seed-415"
            create(c, topic, 2, assignment="1:2")
            assert produce(c.bootstrap_servers, topic, [b"message1"]) == [None]
            wait_for(
                lambda: checkpoint_line(c, 2, "replication-offset-checkpoint", topic) == f"{topic} 0 1",
                what="the follower's HW 1",
            )
            assert produce(c.bootstrap_servers, topic, [b"message2"]) == [None]  # committed: both have it
            c.kill(2)  # before the leader's answer with HW 2 (5 s away)
            assert checkpoint_line(c, 2, "replication-offset-checkpoint", topic) == f"{topic} 0 1"
            start = len(open(c.node(2).log_path).read())
            c.restart(2)
            wait_for(lambda: sorted(describe(c, topic)[0][2]) == [1, 2], what="the follower back in the ISR")
            # it truncated nothing (to its HW 1, the pre-KIP-101 rule would have, and fetched message2 again)
            assert f"{topic}-0: truncating" not in open(c.node(2).log_path).read()[start:]
            c.kill(1)
            wait_for(lambda: leader_of(c, topic) == 2, what="the follower elected")
            assert consume_all(c.bootstrap_servers, topic, idle=2) == [b"message1", b"message2"]
        finally:
            for b in c.nodes.values():
                if b.process is not None:
                    b.kill()


@pytest.mark.slow  # about 35 s of fencing and elections (make slow)
def test_min_isr_and_unclean_election(tmp_path):
    """Issue 14 test 6 on one controller and four brokers (2-5; 5 answers the describes): with two of three replicas
    dead, acks=all gets NOT_ENOUGH_REPLICAS; with unclean election off a partition whose ISR is
    all dead stays offline when a lagging replica returns, and comes back when its ISR member
    does; turned on, the lagging replica leads and an idempotent producer's next batch gets
    OUT_OF_ORDER_SEQUENCE_NUMBER (seed 003 scenario 02)."""
    with Cluster(nodes=4, controllers=1, data_dir=str(tmp_path), config=FAST) as c:
        witness = c.node(5).bootstrap_servers

        def leader(topic):
            return describe_via(witness, topic)

        def isr(topic):
            return describe_via(witness, topic, isr=True)

        try:
            create(c, "strict", 3, "min.insync.replicas=2", assignment="2:3:4")
            create(c, "off", 2, assignment="2:3")
            idem = {"producer_id": 4242, "producer_epoch": 0}
            assert raw_produce(c, 2, "strict", b"seq0", base_sequence=0, **idem) == 0  # on every replica
            c.kill(3)
            c.kill(4)
            wait_for(lambda: isr("strict") == [2] and isr("off") == [2], what="the dead replicas out of the ISRs")
            assert raw_produce(c, 2, "strict", b"v") == 19  # NOT_ENOUGH_REPLICAS
            for seq in (1, 2, 3):  # on 2 alone
                assert raw_produce(c, 2, "strict", b"seq%d" % seq, acks=1, base_sequence=seq, **idem) == 0
            assert raw_produce(c, 2, "off", b"kept", acks=1) == 0
            c.kill(2)
            wait_for(lambda: leader("strict") == -1 and leader("off") == -1, what="both offline")
            c.restart(3)  # lagging, not in the ISR: no leader (unclean off)
            time.sleep(2)
            assert leader("strict") == -1 and leader("off") == -1
            r = tool(
                "configs",
                "--bootstrap-server",
                c.bootstrap_servers,
                "--alter",
                "--entity-type",
                "topics",
                "--entity-name",
                "strict",
                "--add-config",
                "unclean.leader.election.enable=true",
            )
            assert r.returncode == 0, r.stdout + r.stderr
            wait_for(lambda: leader("strict") == 3, what="the unclean election of 3")
            # 3 knows the producer up to sequence 0 and expects 1: the producer's next is 4
            assert raw_produce(c, 3, "strict", b"seq4", acks=1, base_sequence=4, **idem) == 45  # OUT_OF_ORDER
            assert leader("off") == -1
            c.restart(2)  # the ISR member of "off" returns
            wait_for(lambda: leader("off") == 2, what="off back with its ISR member")
            assert consume_all(c.bootstrap_servers, "off", idle=2) == [b"kept"]
            # 2 follows 3 on "strict" now and drops the batch the unclean election lost
            wait_for(lambda: isr("strict") == [2, 3], what="2 back in strict's ISR")
            assert consume_all(c.bootstrap_servers, "strict", idle=2) == [b"seq0"]
        finally:
            for b in c.nodes.values():
                if b.process is not None:
                    b.kill()


def test_a_paused_follower_leaves_the_isr_and_returns(tmp_path):
    """Issue 14 test 7: a SIGSTOPped follower leaves the ISR once it has not caught up for
    replica.lag.time.max.ms (before its broker session would expire); acks=all writes with
    min.insync.replicas 2 go on meanwhile (held only until the shrink); after SIGCONT it catches
    up and is back in the ISR, holding every record."""
    from confluent_kafka import Producer

    config = {**FAST, "replica.lag.time.max.ms": "1500", "broker.session.timeout.ms": "20000"}
    with Cluster(nodes=3, data_dir=str(tmp_path), config=config) as c:
        try:
            topic = "lagging"
            create(c, topic, 3, "min.insync.replicas=2", assignment="1:2:3")
            p = Producer(
                {"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 0, "message.timeout.ms": 20000}
            )
            reports, sent = [], []

            def send(n: int) -> None:
                for _ in range(n):
                    sent.append(b"%d" % len(sent))
                    p.produce(topic, sent[-1], partition=0, on_delivery=lambda err, msg: reports.append(err))
                    p.poll(0.1)

            send(5)
            c.node(3).process.send_signal(signal.SIGSTOP)
            try:
                while metadata_isr(c, 1, topic) != [1, 2]:  # the writes leave 3 behind
                    send(2)
                    assert len(sent) < 400, "3 never left the ISR"
                send(5)
            finally:
                c.node(3).process.send_signal(signal.SIGCONT)
            while sorted(describe(c, topic)[0][2]) != [1, 2, 3]:
                send(2)
                assert len(sent) < 800, "3 never came back"
            p.flush(30)
            assert reports == [None] * len(sent)
            assert consume_all(c.bootstrap_servers, topic, idle=2) == sent
            log = os.path.join(data_dir(c, 3), f"{topic}-0", "00000000000000000000.log")
            wait_for(lambda: sent[-1] in open(log, "rb").read(), what="3 holding every record")
        finally:
            for b in c.nodes.values():
                if b.process is not None:
                    b.kill()
