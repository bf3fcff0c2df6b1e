"""The controller side of replication on real processes: AlterPartition over the controller
listener, ElectLeaders through ``kesque leader-election`` (and Kafka's own tool when it is here),
and unclean elections once a topic allows them. Partition data is not needed: leadership is read
from Metadata."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import oracle
from kesque.errors import ErrorCode as E
from kesque.protocol.api_keys import ApiKeys
from kesque.testing import kafka as K
from oracle import pair as pair  # the fixture (the redundant alias: a re-export, not an unused import)
from test_quorum_cluster import Nodes, wait_until
from wire import Msg, WireClient


def tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kesque", "leader-election", *args], capture_output=True, text=True, timeout=120
    )


def create(c: WireClient, name: str, replicas: list[int], configs: dict | None = None):
    m = Msg(ApiKeys.CREATE_TOPICS, 7)
    topic = m(
        "CreatableTopic",
        name=name,
        num_partitions=-1,
        replication_factor=-1,
        assignments=(m("CreatableReplicaAssignment", partition_index=0, broker_ids=tuple(replicas)),),
        configs=tuple(m("CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items()),
    )
    r = c.request(ApiKeys.CREATE_TOPICS, 7, m(topics=(topic,), timeout=10000, validate_only=False), timeout=20).topics[
        0
    ]
    assert r.error_code == 0, r
    return r.topic_id


def partition(c: WireClient, name: str):
    m = Msg(ApiKeys.METADATA, 12)
    resp = c.request(
        ApiKeys.METADATA,
        12,
        m(
            topics=(m("MetadataRequestTopic", topic_id=None, name=name),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    parts = resp.topics[0].partitions
    return parts[0] if parts else None


def leader_is(c: WireClient, name: str, leader: int) -> bool:
    p = partition(c, name)
    return p is not None and p.leader_id == leader


def broker_epoch(nodes: Nodes, i: int) -> int:
    with open(nodes.brokers[i].log_path, errors="replace") as f:
        return int(re.findall(r"Registered with the controller: broker epoch (\d+)", f.read())[-1])


def alter_partition(
    port: int,
    broker: int,
    epoch: int,
    topic_id,
    isr: list[tuple[int, int]],
    leader_epoch: int = 0,
    partition_epoch: int = 0,
):
    m = Msg(ApiKeys.ALTER_PARTITION, 3)
    part = m(
        "PartitionData",
        partition_index=0,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        leader_recovery_state=0,
        new_isr_with_epochs=tuple(m("BrokerState", broker_id=b, broker_epoch=e) for b, e in isr),
    )
    with WireClient(("127.0.0.1", port)) as c:
        return c.request(
            ApiKeys.ALTER_PARTITION,
            3,
            m(broker_id=broker, broker_epoch=epoch, topics=(m("TopicData", topic_id=topic_id, partitions=(part,)),)),
        )


@pytest.fixture(scope="module")
def nodes():
    n = Nodes(3)
    try:
        yield n.start()
    finally:
        n.close()


def test_alter_partition_over_the_wire_and_preferred_elections(nodes, tmp_path):
    active = nodes.leader()
    x, y = (b for b in (1, 2, 3) if b != active)  # x: the preferred replica, never the controller
    standby = y
    with WireClient(("127.0.0.1", nodes.brokers[active - 1].port)) as c:
        tid = create(c, "pe", [x, y, active])
        wait_until(lambda: leader_is(c, "pe", x), what="x leads pe")
        ex, ey = broker_epoch(nodes, x - 1), broker_epoch(nodes, y - 1)
        port = nodes.controller_ports[active - 1]

        # AlterPartition: top-level errors, then a shrink answered with the new partition epoch
        assert alter_partition(port, x, ex + 1000, tid, [(x, ex)]).error_code == E.stale_broker_epoch
        assert (
            alter_partition(nodes.controller_ports[standby - 1], x, ex, tid, [(x, ex)]).error_code == E.not_controller
        )
        resp = alter_partition(port, x, ex, tid, [(x, ex), (y, ey)])
        assert resp.error_code == 0
        p = resp.topics[0].partitions[0]
        assert (p.error_code, p.leader_id, sorted(p.isr), p.leader_epoch, p.partition_epoch) == (
            0,
            x,
            sorted([x, y]),
            0,
            1,
        )
        assert (
            alter_partition(port, x, ex, tid, [(x, ex), (y, ey)]).topics[0].partitions[0].error_code
            == E.invalid_update_version
        )  # the shrink is the controller's state now

        # the preferred replica shut down: leadership moves, and it cannot be elected back
        nodes.brokers[x - 1].stop()
        wait_until(lambda: leader_is(c, "pe", y), what="y leads pe")
        bs = f"127.0.0.1:{nodes.brokers[y - 1].port}"  # a broker that sends it on to the controller
        r = tool("--bootstrap-server", bs, "--election-type", "preferred", "--topic", "pe", "--partition", "0")
        assert (r.returncode, r.stdout) == (
            1,
            "Error completing leader election (PREFERRED) for partition: pe-0: "
            "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: "
            "The preferred leader was not available.\n",
        ), r.stderr
        assert r.stderr == "1 replica(s) could not be elected\n"

        # back, and in the ISR again (the leader's AlterPartition): a preferred election moves it back
        nodes.start([x - 1])
        ey = broker_epoch(nodes, y - 1)
        ex = broker_epoch(nodes, x - 1)
        if x not in partition(c, "pe").isr_nodes:
            isr = [(b, broker_epoch(nodes, b - 1)) for b in partition(c, "pe").isr_nodes] + [(x, ex)]
            resp = alter_partition(
                port,
                y,
                ey,
                tid,
                isr,
                leader_epoch=partition(c, "pe").leader_epoch,
                partition_epoch=_partition_epoch(port, y, ey, tid, c),
            )
            # INVALID_UPDATE_VERSION: the leader's own AlterPartition took x back in first
            assert resp.topics[0].partitions[0].error_code in (0, E.invalid_update_version), resp
        wait_until(lambda: x in partition(c, "pe").isr_nodes, what="x back in the ISR")
        spec = tmp_path / "election.json"
        spec.write_text(json.dumps({"partitions": [{"topic": "pe", "partition": 0}]}))
        r = tool("--bootstrap-server", bs, "--election-type", "PREFERRED", "--path-to-json-file", str(spec))
        assert (r.returncode, r.stdout) == (
            0,
            "Successfully completed leader election (PREFERRED) for partitions pe-0\n",
        ), r.stderr
        assert leader_is(c, "pe", x)
        again = ["--bootstrap-server", bs, "--election-type", "PREFERRED", "--topic", "pe", "--partition", "0"]
        r = tool(*again)
        assert (r.returncode, r.stdout) == (0, "Valid replica already elected for partitions pe-0\n")
        for version in (0, 2):  # over the wire, through a broker that forwards it
            m = Msg(ApiKeys.ELECT_LEADERS, version)
            with WireClient(("127.0.0.1", nodes.brokers[y - 1].port)) as fwd:
                kind = {"election_type": 0} if version else {}
                resp = fwd.request(
                    ApiKeys.ELECT_LEADERS,
                    version,
                    m(**kind, timeout=10000, topic_partitions=(m("TopicPartitions", topic="pe", partitions=(0, 9)),)),
                )
            assert [(p.partition_id, p.error_code) for p in resp.replica_election_results[0].partition_result] == [
                (0, E.election_not_needed),
                (9, E.unknown_topic_or_partition),
            ]
        if K.unavailable() is None:  # Kafka's AdminClient and tool against kesque
            j = K.run_tool("kafka-leader-election.sh", *again)
            assert (j.returncode, j.stdout) == (r.returncode, r.stdout), j.stderr


def _partition_epoch(port: int, leader: int, epoch: int, tid, c: WireClient) -> int:
    """The partition epoch the controller holds, found with no-op AlterPartitions (the current ISR
    again): older epochs are INVALID_UPDATE_VERSION, the right one is answered with the state."""
    p = partition(c, "pe")
    isr = [(b, -1) for b in p.isr_nodes]
    for guess in range(50):
        r = alter_partition(port, leader, epoch, tid, isr, leader_epoch=p.leader_epoch, partition_epoch=guess)
        part = r.topics[0].partitions[0]
        if part.error_code == 0:
            return part.partition_epoch
    raise AssertionError("no partition epoch found")


def test_unclean_election_when_the_topic_allows_it():
    """A broker-only replica outside the ISR: its topic allows unclean election, so it leads once
    the ISR is dead and it is back (Kafka elects UNCLEAN on unfencing); a topic that does not stays
    offline until the config is turned on, which elects at once."""
    n = Nodes(3, brokers_only=1)
    try:
        n.start()
        active = n.leader()
        x = next(b for b in (1, 2, 3) if b != active)
        with WireClient(("127.0.0.1", n.brokers[active - 1].port)) as c:
            create(c, "u", [x, 4], {"unclean.leader.election.enable": "true"})
            create(c, "clean", [x, 4])
            wait_until(lambda: leader_is(c, "u", x) and leader_is(c, "clean", x), what="x leads")
            n.brokers[3].kill()
            wait_until(lambda: list(partition(c, "u").isr_nodes) == [x], what="4 leaves the ISR")
            n.brokers[x - 1].kill()
            wait_until(lambda: leader_is(c, "u", -1), what="u offline")
            n.start([3])
            wait_until(lambda: leader_is(c, "u", 4), what="an unclean election of 4")
            assert list(partition(c, "u").isr_nodes) == [4]
            # ELR (KIP-966, on as in Kafka 4.4): the last ISR member leaves the ISR, which is empty, for the ELR
            assert leader_is(c, "clean", -1) and list(partition(c, "clean").isr_nodes) == []
            bs = f"127.0.0.1:{n.brokers[active - 1].port}"
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kesque",
                    "configs",
                    "--bootstrap-server",
                    bs,
                    "--alter",
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    "clean",
                    "--add-config",
                    "unclean.leader.election.enable=true",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            wait_until(lambda: leader_is(c, "clean", 4), timeout=5, what="the election the config change triggers")
    finally:
        n.close()


@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_the_same_output_as_kafkas_tool(pair):
    """kafka-leader-election.sh and kesque's, each against its own single broker: the same stdout,
    exit status and first stderr line (Kafka's tool adds a Java stack trace)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    for b in pair.values():
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("one", 2, 1)])["one"].result()
    for args in (
        ["--election-type", "PREFERRED", "--topic", "one", "--partition", "1"],
        ["--election-type", "unclean", "--topic", "one", "--partition", "0"],
        ["--election-type", "PREFERRED", "--all-topic-partitions"],
        ["--election-type", "PREFERRED", "--topic", "none", "--partition", "0"],
        ["--election-type", "PREFERRED"],
        [],
        ["--help"],
    ):
        out = {}
        for kind, b in pair.items():
            full = ["--bootstrap-server", b.bootstrap_servers, *args] if args and args != ["--help"] else args
            r = K.run_tool("kafka-leader-election.sh", *full) if kind == "kafka" else tool(*full)
            lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("[")]
            options = [ln.split()[0] for ln in lines if ln.startswith("--")]  # the help's option rows
            out[kind] = (r.returncode, r.stdout, lines[:1] if r.returncode else lines, options)
        assert out["kesque"] == out["kafka"], args
