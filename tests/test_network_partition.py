"""A partition leader cut off from the other nodes while its clients still reach it (issue 25,
section 4), on kesque and on Kafka 4.4 cut off the same way (``make chaos``).

Every node runs under a group id of its own, and iptables drops the loopback packets a node's
process sends to another node's ports: the leader and the rest of the cluster cannot talk (both
directions: each side's requests to the other are dropped), while the test's clients reach every
node. During the cut the test asks the old leader directly what it answers, as a client that still
reaches it would be answered:

- Metadata: still itself as the leader, with the ISR it had (it has heard of no change);
- Produce acks=all: REQUEST_TIMED_OUT after the request's timeout (its followers never fetch, and
  its ISR cannot shrink without the controller);
- Produce acks=1: success (written to the stale leader only, and truncated away once it rejoins:
  acks=1 promises no more).

kesque answers as Kafka does. A confluent-kafka producer (acks=all, idempotent) writes all along:
no poll() call blocks, and every record it was told is written is read back once the cut heals.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.testing.cluster import Cluster
from kesque.testing.kafka import KafkaCluster, unavailable
from wire import Msg, WireClient

pytestmark = pytest.mark.slow

GID = 61000
TIMED_OUT = 7
CONFIG = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
}


def firewall_reason() -> str | None:
    if os.geteuid() != 0:
        return "the partition needs root (iptables, per-node group ids)"
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    r = subprocess.run(["iptables", "-L", "OUTPUT", "-n"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"iptables cannot be used here: {r.stderr.strip()}"


class Cut:
    """Drop the loopback packets between one node's process and the others' ports."""

    def __init__(self, ports: dict[int, list[int]], node: int):
        self.rules = [
            [
                "OUTPUT",
                "-o",
                "lo",
                "-p",
                "tcp",
                "-m",
                "owner",
                "--gid-owner",
                str(GID + a),
                "--dport",
                str(port),
                "-j",
                "DROP",
            ]
            for other in ports
            if other != node
            for a, b in ((node, other), (other, node))
            for port in ports[b]
        ]

    def __enter__(self) -> Cut:
        for r in self.rules:
            subprocess.run(["iptables", "-A", *r], check=True)
        return self

    def __exit__(self, *exc) -> None:
        for r in self.rules:
            subprocess.run(["iptables", "-D", *r], check=False)


def old_leader_answers(address: tuple[str, int], topic: str) -> dict:
    out = {}
    with WireClient(address, timeout=30) as w:
        m = Msg(ApiKeys.METADATA, 12)
        r = w.request(
            ApiKeys.METADATA,
            12,
            m(
                topics=(m("MetadataRequestTopic", name=topic, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        p = r.topics[0].partitions[0]
        out["metadata"] = (int(p.error_code), p.leader_id, sorted(p.isr_nodes))
        for acks in (-1, 1):
            m = Msg(ApiKeys.PRODUCE, 11)
            r = w.request(
                ApiKeys.PRODUCE,
                11,
                m(
                    acks=acks,
                    timeout=3000,
                    topic_data=(
                        m(
                            "TopicProduceData",
                            name=topic,
                            partition_data=(
                                m("PartitionProduceData", index=0, records=build_batch([(None, b"probe", ())])),
                            ),
                        ),
                    ),
                ),
                timeout=30,
            )
            out[f"acks={acks}"] = int(r.responses[0].partition_responses[0].error_code)
    return out


def run_partition(bootstrap: str, ports: dict[int, list[int]], address_of) -> dict:
    topic = "cut"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        if md.leader >= 0 and len(md.isrs) == 3:
            break
        assert time.monotonic() < deadline, "no leader with a full ISR"
        time.sleep(0.2)
    leader = md.leader
    acked, lock = [], threading.Lock()

    def delivered(err, msg):
        if err is None:
            with lock:
                acked.append(msg.value().decode())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 20000,
        }
    )
    longest_poll, answers, i = 0.0, None, 0

    def write_for(seconds: float) -> None:
        nonlocal longest_poll, i
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                p.produce(topic, value=f"v{i}".encode(), on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            t0 = time.monotonic()
            p.poll(0.05)
            longest_poll = max(longest_poll, time.monotonic() - t0)
            time.sleep(0.01)

    write_for(3)
    with Cut(ports, leader):
        write_for(8)  # the controller fences the old leader; the others elect a new one
        answers = old_leader_answers(address_of(leader), topic)
        write_for(10)
    write_for(10)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cut-check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while not set(acked) <= set(seen) and time.monotonic() < deadline:
        seen += [m.value().decode() for m in c.consume(1000, 0.5) if m.error() is None and m.value() != b"probe"]
    c.close()
    return {
        "leader": leader,
        "answers": answers,
        "longest_poll": longest_poll,
        "acked": len(acked),
        "lost": sorted(set(acked) - set(seen)),
        "duplicated": len(seen) - len(set(seen)),
    }


def check(result: dict) -> None:
    assert result["acked"] > 100, result
    assert result["lost"] == [], f"acknowledged records lost: {result['lost'][:10]}"
    assert result["duplicated"] == 0, result
    assert result["longest_poll"] < 5, f"poll() blocked {result['longest_poll']:.1f} s"
    assert result["answers"]["metadata"] == (0, result["leader"], [1, 2, 3]), result["answers"]
    assert result["answers"]["acks=-1"] == TIMED_OUT, result["answers"]
    assert result["answers"]["acks=1"] == 0, result["answers"]


def test_a_cut_off_leader_answers_as_kafkas_and_loses_nothing():
    reason = firewall_reason()
    if reason:
        pytest.skip(reason)
    c = Cluster(nodes=3, config=CONFIG)
    for node_id, node in c.nodes.items():
        node.gid = GID + node_id
    ports = {s.node_id: [s.port, s.controller_port] for s in c.specs}
    with c:
        kesque = run_partition(c.bootstrap_servers, ports, lambda n: ("127.0.0.1", c.node(n).port))
    check(kesque)
    if unavailable():
        pytest.skip(f"kesque checked; no Kafka to compare with: {unavailable()}")
    k = KafkaCluster(size=3, config=CONFIG)
    for node in k.nodes:
        node.gid = GID + node.node_id
    ports = {n.node_id: [n.port, n.controller_port] for n in k.nodes}
    k.start()
    try:
        kafka = run_partition(
            k.bootstrap_servers, ports, lambda n: ("127.0.0.1", next(x.port for x in k.nodes if x.node_id == n))
        )
    finally:
        k.stop()
    check(kafka)
    assert shape(kesque["answers"]) == shape(kafka["answers"])


def shape(answers: dict) -> tuple:
    """What the old leader answered, without which node it was."""
    return answers["metadata"][0], answers["metadata"][2], answers["acks=-1"], answers["acks=1"]
