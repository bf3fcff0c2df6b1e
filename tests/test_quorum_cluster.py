"""Three kesque processes that agree on metadata through KRaft (real processes on loopback).

Each node is broker and controller (``controller.quorum.voters`` names the three controller
listeners); short quorum timeouts keep elections within a second. The nodes are started
together: none finishes its start before a quorum has elected a leader.

The controller failover, the minority that commits nothing and the fence of a killed broker
run on the same layout under the simulator (tests/test_sim_quorum.py).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port, random_cluster_id
from wire import Api, Msg, WireClient

NOT_CONTROLLER = 41
FAST_QUORUM = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
}


class Nodes:
    """``n`` combined nodes of one cluster (one cluster id, one voter set)."""

    def __init__(self, n: int = 3, extra: dict | None = None, brokers_only: int = 0, bootstrap: bool = False):
        """``n`` combined nodes (ids 1..n), then ``brokers_only`` broker-only nodes (given the
        voters, or with ``bootstrap`` only controller.quorum.bootstrap.servers)."""
        self.cluster_id = random_cluster_id()
        ports = [(free_port(), free_port()) for _ in range(n)]
        self.controller_ports = [c for _p, c in ports]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_p, c) in enumerate(ports))
        self.brokers = []
        common = {
            "cluster.id": self.cluster_id,
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "offsets.topic.replication.factor": "3",
            **FAST_QUORUM,
            **(extra or {}),
        }
        for i, (p, c) in enumerate(ports):
            config = {
                "node.id": str(i + 1),
                "listeners": f"PLAINTEXT://127.0.0.1:{p},CONTROLLER://127.0.0.1:{c}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p}",
                **common,
            }
            self.brokers.append(Broker(port=p, config=config))
        for i in range(brokers_only):
            p = free_port()
            config = {
                "node.id": str(n + i + 1),
                "process.roles": "broker",
                "listeners": f"PLAINTEXT://127.0.0.1:{p}",
                **common,
            }
            if bootstrap:
                del config["controller.quorum.voters"]
                config["controller.quorum.bootstrap.servers"] = ",".join(f"127.0.0.1:{c}" for _p, c in ports)
            self.brokers.append(Broker(port=p, config=config))

    def start(self, which=None, timeout: float = 60.0) -> Nodes:
        """Start the given nodes (all by default) at the same time; wait for every one."""
        todo = self.brokers if which is None else [self.brokers[i] for i in which]
        errors = []

        def run(b):
            try:
                b.start(timeout)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(b,)) for b in todo]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return self

    def close(self) -> None:
        for b in self.brokers:
            if b.process is not None:
                b.process.kill()
                b.process.wait()
                b.process = None
            b.close()

    def api(self, i: int) -> tuple[WireClient, Api]:
        c = WireClient(("127.0.0.1", self.brokers[i].port))
        return c, Api(c)

    def leader(self, among=None, timeout: float = 20.0) -> int:
        """The node id of the raft leader (the active controller), as DescribeQuorum tells."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in among if among is not None else range(len(self.brokers)):
                try:
                    with WireClient(("127.0.0.1", self.brokers[i].port), timeout=3) as c:
                        p = describe_quorum(c).topics[0].partitions[0]
                        if p.error_code == 0 and p.leader_id > 0:
                            return p.leader_id
                except OSError:
                    continue
            time.sleep(0.1)
        raise AssertionError("no leader elected")


def describe_quorum(c: WireClient, version: int = 2):
    m = Msg(ApiKeys.DESCRIBE_QUORUM, version)
    return c.request(
        ApiKeys.DESCRIBE_QUORUM,
        version,
        m(
            topics=(
                m("TopicData", topic_name="__cluster_metadata", partitions=(m("PartitionData", partition_index=0),)),
            )
        ),
    )


def create(api: Api, name: str, partitions: int = 3, rf: int = 3, timeout_ms: int = 10000):
    m = Msg(ApiKeys.CREATE_TOPICS, 7)
    topic = m("CreatableTopic", name=name, num_partitions=partitions, replication_factor=rf, assignments=(), configs=())
    return api.c.request(
        ApiKeys.CREATE_TOPICS,
        7,
        m(topics=(topic,), timeout=timeout_ms, validate_only=False),
        timeout=timeout_ms / 1000 + 10,
    ).topics[0]


def placement(api: Api, name: str, timeout: float = 10.0):
    """{partition: (leader, replicas)} once the broker knows the topic."""
    deadline = time.monotonic() + timeout
    while True:
        t = api.metadata([name]).topics[0]
        if t.error_code == 0 and t.partitions:
            return {p.partition_index: (p.leader_id, tuple(p.replica_nodes)) for p in t.partitions}
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} not in this broker's metadata: error {t.error_code}")
        time.sleep(0.1)


@pytest.fixture
def nodes():
    n = Nodes(3)
    try:
        yield n.start()
    finally:
        n.close()


def test_three_nodes_agree_on_a_topic_created_through_any_of_them(nodes):
    """CreateTopics with replication factor 3 sent to a follower's broker listener reaches
    the active controller; every broker's image has the same placement, leaders spread."""
    leader = nodes.leader()
    via = next(i for i in range(3) if i + 1 != leader)  # a node whose controller is a standby
    c, api = nodes.api(via)
    with c:
        r = create(api, "spread")
        assert (r.error_code, r.num_partitions, r.replication_factor) == (0, 3, 3), r
        seen = placement(api, "spread")
    for i in range(3):
        c, api = nodes.api(i)
        with c:
            assert placement(api, "spread") == seen
            brokers = {b.node_id for b in api.metadata(None).brokers}
            assert brokers == {1, 2, 3}
    assert {leader for leader, _r in seen.values()} == {1, 2, 3}
    assert all(sorted(r) == [1, 2, 3] for _l, r in seen.values())
    # a replica that does not lead refuses produce (NOT_LEADER_OR_FOLLOWER); the leader takes it
    part, (lead, _r) = next((p, lr) for p, lr in seen.items() if lr[0] != via + 1)
    c, api = nodes.api(via)
    with c:
        r = api.produce("spread", build_batch([(None, b"x", ())]), partition=part, version=10)
        assert r.error_code == 6 and r.current_leader.leader_id == lead  # KIP-951: where to go
    c, api = nodes.api(lead - 1)
    with c:
        assert api.produce("spread", build_batch([(None, b"x", ())]), partition=part).error_code == 0


def test_a_second_create_of_the_same_name_is_refused_by_whichever_node(nodes):
    c, api = nodes.api(0)
    with c:
        assert create(api, "once").error_code == 0
    c, api = nodes.api(2)
    with c:
        assert create(api, "once").error_code == 36  # TOPIC_ALREADY_EXISTS


def test_a_standby_controller_answers_not_controller(nodes):
    """On its controller listener a standby answers NOT_CONTROLLER (as Kafka's ControllerApis);
    the active one creates the topic. Vote is not served on a broker listener."""
    leader = nodes.leader()
    standby = next(i for i in range(3) if i + 1 != leader)
    with WireClient(("127.0.0.1", nodes.controller_ports[standby])) as c:
        assert create(Api(c), "direct").error_code == NOT_CONTROLLER
    with WireClient(("127.0.0.1", nodes.controller_ports[leader - 1])) as c:
        assert create(Api(c), "direct").error_code == 0
    c, api = nodes.api(standby)
    with c:
        assert 52 not in {k.api_key for k in api.api_versions().api_keys}


@pytest.mark.parametrize("bootstrap", [False, True], ids=["voters", "bootstrap-servers"])
def test_a_broker_only_node_follows_the_log_as_an_observer(bootstrap):
    """A broker-only node (process.roles=broker) fetches the metadata log as an observer: it
    registers through the active controller, hosts replicas, and its admin requests reach
    the controller; it never votes (DescribeQuorum lists it as an observer). Given only
    controller.quorum.bootstrap.servers, it learns the voters from them."""
    n = Nodes(3, brokers_only=1, bootstrap=bootstrap)
    try:
        n.start()
        c, api = n.api(3)
        with c:
            r = create(api, "four", partitions=4, rf=2)
            assert r.error_code == 0, r
            seen = placement(api, "four")
            assert {b.node_id for b in api.metadata(None).brokers} == {1, 2, 3, 4}
            assert 4 in {leader for leader, _r in seen.values()}
            q = describe_quorum(c).topics[0].partitions[0]
            assert sorted(v.replica_id for v in q.current_voters) == [1, 2, 3]
            assert [o.replica_id for o in q.observers] == [4]
        c, api = n.api(0)
        with c:
            assert placement(api, "four") == seen
    finally:
        n.close()


def test_broker_only_nodes_join_a_lone_combined_voter():
    """One combined node, the only voter, with a CONTROLLER listener, and two broker-only
    nodes that name it in controller.quorum.voters (Kafka's smallest multi-broker layout):
    they register with it, host replicas of an RF 3 topic and all three are in its ISR.
    Before, a lone voter kept its controller in process and never opened that listener."""
    n = Nodes(1, brokers_only=2)
    try:
        n.start()
        c, api = n.api(2)
        with c:
            r = create(api, "spread", partitions=3, rf=3)
            assert r.error_code == 0, r
            assert {b.node_id for b in api.metadata(None).brokers} == {1, 2, 3}
            deadline = time.monotonic() + 20
            while True:
                parts = api.metadata(["spread"]).topics[0].partitions  # empty until this broker has the topic
                if (
                    len(parts) == 3 and all(sorted(p.isr_nodes) == [1, 2, 3] for p in parts)
                ) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert [sorted(p.isr_nodes) for p in parts] == [[1, 2, 3]] * 3
            q = describe_quorum(c).topics[0].partitions[0]
            assert [v.replica_id for v in q.current_voters] == [1]
            assert sorted(o.replica_id for o in q.observers) == [2, 3]
    finally:
        n.close()


def test_a_node_of_another_cluster_is_refused(nodes):
    """A Vote carrying another cluster id gets INCONSISTENT_CLUSTER_ID, as Kafka answers."""
    m = Msg(ApiKeys.VOTE, 2)
    part = m(
        "PartitionData",
        partition_index=0,
        replica_epoch=99,
        replica_id=7,
        replica_directory_id=None,
        voter_directory_id=None,
        last_offset_epoch=99,
        last_offset=999,
        pre_vote=False,
    )
    req = m(
        cluster_id="another-cluster-id",
        voter_id=1,
        topics=(m("TopicData", topic_name="__cluster_metadata", partitions=(part,)),),
    )
    with WireClient(("127.0.0.1", nodes.controller_ports[0])) as c:
        p = c.request(ApiKeys.VOTE, 2, req).topics[0].partitions[0]
    assert (p.error_code, p.vote_granted) == (104, False)
    assert nodes.leader() in (1, 2, 3)


def leaders(api: Api, name: str) -> set[int]:
    return {leader for leader, _r in placement(api, name).values()}


def live_brokers(api: Api) -> set[int]:
    return {b.node_id for b in api.metadata(None).brokers}


def wait_until(check, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("which", ["standby", "active controller"])
def test_sigterm_moves_leadership_before_the_broker_exits(which):
    """Controlled shutdown: SIGTERM of a broker has the controller move its leaderships off it
    before it exits (the session timeout is long: only the controlled shutdown can do it). The
    active controller's node then resigns: another controller takes over at once."""
    n = Nodes(3, extra={"broker.session.timeout.ms": "60000"})
    try:
        n.start()
        leader = n.leader()
        x = leader - 1 if which == "active controller" else next(i for i in range(3) if i + 1 != leader)
        other = next(i for i in range(3) if i != x)
        c, api = n.api(other)
        with c:
            assert create(api, "moving").error_code == 0
            assert x + 1 in leaders(api, "moving")
            n.brokers[x].stop()
            assert x + 1 not in leaders(api, "moving")
            assert live_brokers(api) == {1, 2, 3} - {x + 1}
            assert create(api, "after", rf=2).error_code == 0
        assert (
            "Controlled shutdown finished: the controller let the broker shut down"
            in open(n.brokers[x].log_path).read()
        )
    finally:
        n.close()


def test_a_node_down_past_a_snapshot_catches_up_through_fetch_snapshot():
    """With metadata.log.max.record.bytes.between.snapshots small, the nodes write snapshots
    (.checkpoint) and their log starts move past them; a node that was down meanwhile is
    answered with the snapshot id and loads it through FetchSnapshot, then follows the log."""
    n = Nodes(3, extra={"metadata.log.max.record.bytes.between.snapshots": "1500"})
    try:
        n.start()
        leader = n.leader()
        x = next(i for i in range(3) if i + 1 != leader)
        n.brokers[x].kill()
        c, api = n.api(leader - 1)
        with c:
            for i in range(12):
                assert create(api, f"snap-{i}", rf=2).error_code == 0
        meta = os.path.join(n.brokers[leader - 1].data_dir, "__cluster_metadata-0")
        assert [f for f in os.listdir(meta) if f.endswith(".checkpoint")]
        n.start([x])
        c, api = n.api(x)
        with c:
            for i in range(12):
                placement(api, f"snap-{i}")
        assert "Loading the metadata snapshot" in open(n.brokers[x].log_path).read()
    finally:
        n.close()


def test_a_second_broker_with_the_same_id_is_refused_by_the_controller():
    """Two brokers with one node.id: the controller refuses the second registration while the
    first one's session lives (DUPLICATE_BROKER_REGISTRATION); the second stops after
    initial.broker.registration.timeout.ms, its log naming the error, and the first serves on."""
    n = Nodes(3, brokers_only=1, extra={"initial.broker.registration.timeout.ms": "3000"})
    try:
        n.start()
        first = n.brokers[3]
        p = free_port()
        twin = Broker(
            port=p,
            config={
                **first.config,
                "listeners": f"PLAINTEXT://127.0.0.1:{p}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{p}",
            },
        )
        try:
            with pytest.raises(RuntimeError, match="exited during start"):
                twin.start(30)
            text = open(twin.log_path).read()
            assert (
                "Unable to register broker 4 because the controller returned error "
                "DUPLICATE_BROKER_REGISTRATION" in text
            ), text[-2000:]
            assert (
                "unable to register with the controller quorum (the controller's last answer: "
                "DUPLICATE_BROKER_REGISTRATION)" in text
            )
        finally:
            twin.close()
        c, api = n.api(3)
        with c:
            assert create(api, "still-here", partitions=1, rf=1).error_code == 0
    finally:
        n.close()


def test_the_active_controller_writes_noop_records_while_idle(nodes):
    """KIP-835: with nothing to change, the active controller still appends a NoOpRecord every
    metadata.max.idle.interval.ms (500 ms), so the metadata high watermark keeps moving."""
    c, _api = nodes.api(0)
    with c:
        start = describe_quorum(c).topics[0].partitions[0].high_watermark
        deadline = time.monotonic() + 30
        while describe_quorum(c).topics[0].partitions[0].high_watermark < start + 3:
            assert time.monotonic() < deadline, "the metadata log stood still"
            time.sleep(0.2)
