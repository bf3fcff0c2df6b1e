"""Share groups (KIP-932) on a 3-node cluster with real processes and confluent-kafka's
ShareConsumer: the share-partition leader, the share coordinator (the leader of the key's
``__share_group_state`` partition) and the group coordinator on different brokers, talking
with ReadShareGroupState / WriteShareGroupState / ... (issue 16, tests 1 and 3).

The group id is chosen so that the three roles land where each test wants them: the partition
leader is placed with ``--replica-assignment``; the coordinators are found with FindCoordinator
(key type 0 for the group, 2 for ``group:topic id:partition``).
"""

from __future__ import annotations

import time
import uuid

import pytest

from kesque.protocol.api_keys import ApiKeys
from kesque.testing.cluster import Cluster
from test_replication import FAST, create, describe, tool, wait_for
from test_share_groups import (
    Member,
    _acquired,
    _partition_errors,
    _poll_values,
    _share_ack,
    _share_fetch,
    produce,
    set_group_configs,
    share_consumer,
)
from wire import Msg, WireClient

ck = pytest.importorskip("confluent_kafka")

# a 3-node cluster takes ~15 s to start and each test 5-25 s on a loaded machine: `make slow`
pytestmark = pytest.mark.slow

SHARE = {
    **FAST,
    "group.share.enable": "true",
    "offsets.topic.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "group.share.min.record.lock.duration.ms": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(nodes=3, data_dir=str(tmp_path_factory.mktemp("share")), config=SHARE) as c:
        yield c
        for b in c.nodes.values():  # the last node's controlled shutdown would wait for a lost quorum
            if b.process is not None:
                b.kill()


def coordinators(cluster: Cluster, key_type: int, keys: list[str]) -> dict[str, int]:
    """{key: coordinator node} from FindCoordinator v4, asked until every key has one (the
    internal topic is created on first use)."""
    out: dict[str, int] = {}

    def ask():
        with WireClient(cluster.bootstrap_servers.split(",")[0]) as c:
            r = c.request(
                ApiKeys.FIND_COORDINATOR,
                4,
                Msg(ApiKeys.FIND_COORDINATOR, 4)(key_type=key_type, coordinator_keys=tuple(keys)),
            )
        out.update({x.key: x.node_id for x in r.coordinators if x.error_code == 0})
        return len(out) == len(keys)

    wait_for(ask, 60, f"coordinators of key type {key_type}")
    return out


def topic_id(cluster: Cluster, topic: str):
    with WireClient(cluster.bootstrap_servers.split(",")[0]) as c:
        m = Msg(ApiKeys.METADATA, 12)
        r = c.request(
            ApiKeys.METADATA,
            12,
            m(
                topics=(m("MetadataRequestTopic", topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    return r.topics[0].topic_id


def placed_group(cluster: Cluster, topic: str, gc_sc_apart: bool = True):
    """A group id whose group coordinator and share coordinator (for ``topic``-0) are two
    brokers (``gc_sc_apart``), or any; (group, group coordinator, share coordinator)."""
    tid = str(topic_id(cluster, topic))
    from kesque.storage.checkpoint import uuid_to_kafka

    kid = uuid_to_kafka(uuid.UUID(tid))
    cands = [f"sg-{uuid.uuid4().hex[:8]}" for _ in range(40)]
    gcs = coordinators(cluster, 0, cands)
    scs = coordinators(cluster, 2, [f"{g}:{kid}:0" for g in cands])
    for g in cands:
        gc, sc = gcs[g], scs[f"{g}:{kid}:0"]
        if not gc_sc_apart or gc != sc:
            return g, gc, sc
    raise AssertionError(f"no group among {len(cands)} places its coordinators as wanted: {gcs} {scs}")


def new_topic(cluster: Cluster, leader: int) -> str:
    others = [n for n in (1, 2, 3) if n != leader]
    topic = "t-" + uuid.uuid4().hex[:8]
    create(cluster, topic, 3, assignment=f"{leader}:{others[0]}:{others[1]}")
    assert describe(cluster, topic)[0][0] == leader
    return topic


def roles(cluster: Cluster, tmp_path, gc_sc_apart: bool = True):
    """A topic (RF 3) and a group whose partition leader is neither the group's share coordinator
    nor (``gc_sc_apart``: which is then a third broker) its group coordinator; the leader is
    moved there when needed (which brokers lead the internal topics depends on the restarts of
    earlier tests). (topic, group, group coordinator, share coordinator, leader)."""
    topic = new_topic(cluster, leader=1)
    group, gc, sc = placed_group(cluster, topic, gc_sc_apart)
    free = [n for n in (1, 2, 3) if n != sc and (n != gc or not gc_sc_apart)]
    leader = 1 if 1 in free else free[0]
    # the share coordinator's broker last: the leader's successor (the next replica in the ISR)
    # is then a third broker too, which reads the state remotely
    replicas = [leader, next(n for n in (1, 2, 3) if n not in (leader, sc)), sc]
    if replicas != [1, 2, 3]:
        move_leader(cluster, topic, replicas, tmp_path)
    return topic, group, gc, sc, leader


def describe_offsets(cluster: Cluster, node: int, group: str, topic: str) -> list:
    with WireClient(("127.0.0.1", cluster.node(node).port)) as c:
        m = Msg(ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, 1)
        r = c.request(
            ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS,
            1,
            m(
                groups=(
                    m(
                        "DescribeShareGroupOffsetsRequestGroup",
                        group_id=group,
                        topics=(m("DescribeShareGroupOffsetsRequestTopic", topic_name=topic, partitions=(0,)),),
                    ),
                )
            ),
        )
    g = r.groups[0]
    assert g.error_code == 0, g
    return [
        (t.topic_name, p.partition_index, p.start_offset, p.lag, int(p.error_code))
        for t in g.topics
        for p in t.partitions
    ]


def test_three_roles_on_three_brokers(cluster, tmp_path):
    """Test 1 with the group coordinator, the share coordinator and the partition leader on three
    different brokers: three share consumers together get all 3,000 records, each accepted
    once (a late member finds nothing left), and DescribeShareGroupOffsets asked of the group
    coordinator reads the start offset from the share coordinator."""
    topic, group, gc, sc, leader = roles(cluster, tmp_path)
    assert len({leader, gc, sc}) == 3
    set_group_configs(cluster, group, {"share.auto.offset.reset": "earliest"})
    members = [Member(cluster, group, topic) for _ in range(3)]
    for m in members:
        m.start()
    for m in members:
        assert m.polled.wait(60), "a share consumer never completed a poll"
    produce(cluster, topic, 3000)
    wait_for(lambda: sum(len(m.values) for m in members) >= 3000, 90, "3000 deliveries")
    for m in members:
        m.stop.set()
    for m in members:
        m.join(30)
    got = sorted(v for m in members for v in m.values)
    assert not [e for m in members for e in m.errors]
    assert got == list(range(3000)), f"{len(got)} deliveries, {len(set(got))} distinct"
    late = Member(cluster, group, topic)
    late.start()
    assert late.polled.wait(60)
    time.sleep(2.0)  # a record not accepted would come with the next fetches
    late.stop.set()
    late.join(30)
    assert late.values == []
    assert describe_offsets(cluster, gc, group, topic) == [(topic, 0, 3000, 0, 0)]


def _accept_then_hold(cluster: Cluster, group: str, topic: str, n: int):
    """A member that accepts (explicitly, committed) at least 300 records, then holds one
    poll's records without acknowledging them: (consumer, accepted values, held values)."""
    c = share_consumer(
        cluster, group, **{"share.acknowledgement.mode": "explicit", "topic.metadata.refresh.interval.ms": 500}
    )
    c.subscribe([topic])
    accepted: set[int] = set()
    deadline = time.monotonic() + 90
    while len(accepted) < 300 and time.monotonic() < deadline:
        msgs = _poll_values(c, 1)
        for msg in msgs:
            c.acknowledge(msg)
        c.commit_sync()
        accepted |= {int(msg.value()) for msg in msgs}
    held = {int(msg.value()) for msg in _poll_values(c, 1)}
    assert len(accepted) >= 300 and held and not held & accepted
    return c, accepted, held


def _the_rest(cluster: Cluster, group: str, topic: str, n: int, accepted: set) -> None:
    """A new member gets exactly the records not accepted: each once, none accepted before."""
    after = Member(cluster, group, topic)
    after.start()
    wait_for(lambda: len(after.values) >= n - len(accepted), 90, "the unaccepted records")
    time.sleep(1.0)  # a duplicate would come with the next fetches
    after.stop.set()
    after.join(30)
    want = set(range(n)) - accepted
    got = sorted(after.values)
    assert got == sorted(want), (
        f"missing {sorted(want - set(got))[:20]}, accepted again "
        f"{sorted(set(got) & accepted)[:20]}, twice {len(got) - len(set(got))}"
    )


def _restore(cluster: Cluster, node: int, topic: str) -> None:
    cluster.restart(node)
    wait_for(lambda: len(describe(cluster, topic).get(0, (0, [], []))[2]) == 3, 60, f"{topic} ISR of 3 again")


@pytest.mark.parametrize("victim", ["partition leader", "share coordinator"])
def test_sigkill_on_a_cluster_loses_no_acknowledgement(cluster, victim, tmp_path):
    """Test 3 on three brokers: SIGKILL the share-partition leader (its successor reads the
    state from the share coordinator on another broker) or the share coordinator's broker (a
    replica of ``__share_group_state`` takes over) while a member holds records. After the
    failover no accepted record is delivered again and every other one is, once."""
    n = 1000
    topic, group, _gc, sc, leader = roles(cluster, tmp_path, gc_sc_apart=False)
    dead = leader if victim == "partition leader" else sc
    set_group_configs(cluster, group, {"share.auto.offset.reset": "earliest"})
    produce(cluster, topic, n)
    c, accepted, held = _accept_then_hold(cluster, group, topic, n)
    cluster.kill(dead)
    try:
        c.close()
    except ck.KafkaException:
        pass
    try:
        _the_rest(cluster, group, topic, n, accepted)
    finally:
        _restore(cluster, dead, topic)


def accept(cluster: Cluster, group: str, topic: str, count: int) -> set[int]:
    """A member that accepts (explicitly, committed) at least ``count`` records and leaves."""
    c = share_consumer(
        cluster, group, **{"share.acknowledgement.mode": "explicit", "topic.metadata.refresh.interval.ms": 500}
    )
    c.subscribe([topic])
    accepted: set[int] = set()
    deadline = time.monotonic() + 90
    try:
        while len(accepted) < count and time.monotonic() < deadline:
            msgs = _poll_values(c, 1)
            for msg in msgs:
                c.acknowledge(msg)
            c.commit_sync()
            accepted |= {int(msg.value()) for msg in msgs}
    finally:
        c.close()
    assert len(accepted) >= count
    return accepted


def move_leader(cluster: Cluster, topic: str, replicas: list[int], tmp_path) -> None:
    """Reorder the replicas (``reassign-partitions``) and run a preferred election if the first
    replica does not lead yet: it leads, no process restarted."""
    bs = cluster.bootstrap_servers
    plan = tmp_path / f"plan-{replicas[0]}.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"%s","partition":0,"replicas":%s}]}' % (topic, replicas))
    r = tool("reassign-partitions", "--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(plan))
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(
        lambda: (
            "is completed"
            in tool(
                "reassign-partitions", "--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(plan)
            ).stdout
        ),
        60,
        "the reassignment",
    )
    if describe(cluster, topic)[0][0] != replicas[0]:
        r = tool(
            "leader-election",
            "--bootstrap-server",
            bs,
            "--election-type",
            "PREFERRED",
            "--topic",
            topic,
            "--partition",
            "0",
        )
        assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: describe(cluster, topic)[0][0] == replicas[0], 60, f"broker {replicas[0]} leading")


def test_leadership_that_moves_away_and_back_reads_the_share_state_again(cluster, tmp_path):
    """Broker a leads: member A (over the wire) acquires records 0-99 there, accepts 0-49 and
    keeps holding 50-99. Leadership moves to broker b (which reads the state from the share
    coordinator on another broker) and a member accepts records there, 50-99 among them.
    Back on broker a, its old window (still holding A's locks) was dropped with the
    leadership: nothing accepted on either broker is delivered again, everything else is."""
    n = 2000  # a fetch hands out up to 500: the members below leave most records to the last one
    topic, group, _gc, sc, a = roles(cluster, tmp_path, gc_sc_apart=False)
    b = next(n for n in (1, 2, 3) if n not in (a, sc))
    rest = next(n for n in (1, 2, 3) if n not in (a, b))
    set_group_configs(cluster, group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"})
    produce(cluster, topic, n)
    tid = topic_id(cluster, topic)
    with WireClient(("127.0.0.1", cluster.node(a).port)) as c:
        epoch = 0
        while True:  # the first fetch finds the share partition loading (its state is elsewhere)
            r = _share_fetch(c, group, "member-a", epoch, tid, max_wait=500, max_records=100)
            epoch += 1
            if _acquired(r) or epoch > 20:
                break
        assert _acquired(r) == [(0, 99, 1)], r
        r = _share_ack(c, group, "member-a", epoch, tid, [(0, 49, 1)])  # ACCEPT 0-49, 50-99 held
        assert _partition_errors(r) == [(0, 0)], r
    first = set(range(50))
    move_leader(cluster, topic, [b, a, rest], tmp_path)
    second = accept(cluster, group, topic, 50)
    assert not first & second and set(range(50, 100)) <= second and len(first | second) < n
    move_leader(cluster, topic, [a, b, rest], tmp_path)
    _the_rest(cluster, group, topic, n, first | second)


def test_an_offset_reset_answered_by_another_broker_reaches_the_leader(cluster, tmp_path):
    """kafka-share-groups.sh --reset-offsets --to-earliest sent to the cluster for an empty
    group whose partition leader, share coordinator and group coordinator are three brokers:
    the next member gets every record again."""
    n = 200
    topic, group, gc, sc, leader = roles(cluster, tmp_path)
    set_group_configs(cluster, group, {"share.auto.offset.reset": "earliest"})
    produce(cluster, topic, n)
    assert accept(cluster, group, topic, n) == set(range(n))
    wait_for(
        lambda: (
            "Empty"
            in tool(
                "share-groups",
                "--bootstrap-server",
                cluster.bootstrap_servers,
                "--describe",
                "--group",
                group,
                "--state",
            ).stdout
        ),
        60,
        "the group to be empty",
    )
    r = tool(
        "share-groups",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--reset-offsets",
        "--to-earliest",
        "--group",
        group,
        "--topic",
        topic,
        "--execute",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert describe_offsets(cluster, gc, group, topic) == [(topic, 0, 0, n, 0)]
    _the_rest(cluster, group, topic, n, set())


def test_share_state_rpcs_on_the_wire(cluster):
    """The share coordinator's inter-broker APIs: WriteShareGroupState to a broker without the
    key's shard gets NOT_COORDINATOR and writes nothing; at the coordinator it is answered once
    committed, ReadShareGroupState returns it, and a write from an older leader epoch is
    fenced (FENCED_LEADER_EPOCH) and changes nothing."""
    topic = new_topic(cluster, leader=1)
    group, _gc, sc = placed_group(cluster, topic, gc_sc_apart=False)
    other = next(n for n in (1, 2, 3) if n != sc)
    tid = topic_id(cluster, topic)

    def write(node, start, epoch):
        m = Msg(ApiKeys.WRITE_SHARE_GROUP_STATE, 0)
        body = m(
            group_id=group,
            topics=(
                m(
                    "WriteStateData",
                    topic_id=tid,
                    partitions=(
                        m(
                            "PartitionData",
                            partition=0,
                            state_epoch=0,
                            leader_epoch=epoch,
                            start_offset=start,
                            state_batches=(
                                m(
                                    "StateBatch",
                                    first_offset=start,
                                    last_offset=start + 1,
                                    delivery_state=2,
                                    delivery_count=1,
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        )
        with WireClient(("127.0.0.1", cluster.node(node).port)) as c:
            return int(c.request(ApiKeys.WRITE_SHARE_GROUP_STATE, 0, body).results[0].partitions[0].error_code)

    def read(node):
        m = Msg(ApiKeys.READ_SHARE_GROUP_STATE, 0)
        body = m(
            group_id=group,
            topics=(m("ReadStateData", topic_id=tid, partitions=(m("PartitionData", partition=0, leader_epoch=0),)),),
        )
        with WireClient(("127.0.0.1", cluster.node(node).port)) as c:
            p = c.request(ApiKeys.READ_SHARE_GROUP_STATE, 0, body).results[0].partitions[0]
        return (
            int(p.error_code),
            p.start_offset,
            [(b.first_offset, b.last_offset, b.delivery_state) for b in p.state_batches],
        )

    assert write(other, 5, 3) == 16  # NOT_COORDINATOR
    assert read(sc)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION: never written
    assert write(sc, 5, 3) == 0
    assert read(sc) == (0, 5, [(5, 6, 2)])
    assert write(sc, 9, 2) == 74  # FENCED_LEADER_EPOCH
    assert read(sc) == (0, 5, [(5, 6, 2)])


def test_a_share_fetch_to_a_follower_gets_not_leader_or_follower_and_the_leader(cluster):
    """ShareFetch to a broker that holds a replica but does not lead the partition:
    NOT_LEADER_OR_FOLLOWER with the current leader and its epoch (KIP-951), no records."""
    topic = new_topic(cluster, leader=1)
    tid = topic_id(cluster, topic)
    with WireClient(("127.0.0.1", cluster.node(2).port)) as c:
        r = _share_fetch(c, "sg-" + uuid.uuid4().hex[:8], "member-x", 0, tid)
    (p,) = [p for t in r.responses for p in t.partitions]
    assert (int(p.error_code), p.current_leader.leader_id, p.acquired_records) == (6, 1, ())
    assert p.current_leader.leader_epoch == 0
