"""Consumer-group requests a coordinator must refuse, over the raw wire (tests/wire.py).

Each test drives a real broker with hand-built kio requests: unknown members, stale
generations and epochs, mismatched protocols, requests in the wrong rebalance phase, fenced
static members, out-of-range session timeouts, empty group ids, oversized offset metadata,
deleting live groups or the offsets of consumed topics. Every refusal must carry Kafka's
error code (kio's ``ErrorCode``), and afterwards the group must be exactly as it was
(DescribeGroups / ConsumerGroupDescribe) with its good member still heartbeating and
committing.

``ClassicMember`` is a classic-protocol member on its own connection (JoinGroup blocks until
the rebalance completes, so members that join together need connections of their own);
``test_groups.py`` uses it too.
"""

from __future__ import annotations

import io
import time
import uuid

import pytest
from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from kesque.protocol.api_keys import ApiKeys
from kesque.testing.broker import Broker
from wire import Api, Msg, WireClient

E = ErrorCode
BROKER_CONFIG = {
    "group.min.session.timeout.ms": 1000,
    "group.max.session.timeout.ms": 60000,
    "group.consumer.session.timeout.ms": 10000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
}
SESSION_MS = 10000  # the good members never expire during a test


# ============================================================================ consumer protocol
def subscription(topics) -> bytes:
    buf = io.BytesIO()
    entity_writer(subscription_v0.ConsumerProtocolSubscription)(
        buf, subscription_v0.ConsumerProtocolSubscription(topics=tuple(topics), user_data=None)
    )
    return b"\x00\x00" + buf.getvalue()


def assignment(parts: dict[str, list[int]]) -> bytes:
    buf = io.BytesIO()
    tps = tuple(assignment_v0.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in sorted(parts.items()))
    entity_writer(assignment_v0.ConsumerProtocolAssignment)(
        buf, assignment_v0.ConsumerProtocolAssignment(assigned_partitions=tps, user_data=None)
    )
    return b"\x00\x00" + buf.getvalue()


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    obj, _ = entity_reader(assignment_v0.ConsumerProtocolAssignment)(memoryview(bytes(data[2:])).toreadonly(), 0)
    return {tp.topic: list(tp.partitions) for tp in obj.assigned_partitions}


# ============================================================================ coordinator
def find_coordinator(bs: str, group: str, timeout: float = 15.0) -> None:
    """FindCoordinator (creating ``__consumer_offsets`` on first use) until the group's
    coordinator answers, as clients do before their first group request."""
    deadline = time.monotonic() + timeout
    with WireClient(bs) as c:
        while True:
            r = c.request(ApiKeys.FIND_COORDINATOR, 3, Msg(ApiKeys.FIND_COORDINATOR, 3)(key=group, key_type=0))
            if r.error_code == E.none:
                d = c.request(
                    ApiKeys.DESCRIBE_GROUPS,
                    5,
                    Msg(ApiKeys.DESCRIBE_GROUPS, 5)(groups=(group,), include_authorized_operations=False),
                ).groups[0]
                if d.error_code not in (E.not_coordinator, E.coordinator_load_in_progress, E.coordinator_not_available):
                    return
            assert time.monotonic() < deadline, f"no coordinator for {group!r}: {r}"
            time.sleep(0.05)


# ============================================================================ a classic member
class ClassicMember:
    """A classic-protocol group member speaking JoinGroup/SyncGroup/Heartbeat/OffsetCommit."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics=(),
        instance_id: str | None = None,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = SESSION_MS,
        client_id: str = "kesque-test",
    ):
        if group:
            find_coordinator(bootstrap, group)
        self.c = WireClient(bootstrap, timeout=30, client_id=client_id)
        self.group, self.topics, self.instance_id = group, list(topics), instance_id
        self.session_ms, self.rebalance_ms = session_ms, rebalance_ms
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list = []
        self._pending = None

    def close(self) -> None:
        self.c.close()

    # -- JoinGroup
    def join_request(self, version: int = 5, **kw):
        m = Msg(ApiKeys.JOIN_GROUP, version)
        protocols = kw.pop("protocols", None)
        if protocols is None:
            protocols = [("range", subscription(self.topics))]
        fields = {
            "group_id": self.group,
            "session_timeout": self.session_ms,
            "rebalance_timeout": self.rebalance_ms,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": tuple(m("JoinGroupRequestProtocol", name=n, metadata=md) for n, md in protocols),
            "reason": None,
        }
        fields.update(kw)
        return m.loose(**fields)

    def send_join(self, version: int = 5, **kw) -> None:
        self._pending = (version, self.c.send(ApiKeys.JOIN_GROUP, version, self.join_request(version, **kw)))

    def recv_join(self, timeout: float | None = None):
        version, corr = self._pending
        self._pending = None
        got, r = self.c.recv(ApiKeys.JOIN_GROUP, version, timeout)
        assert got == corr
        if r.error_code == E.none:
            self.member_id, self.generation, self.leader = r.member_id, r.generation_id, r.leader
            self.members = list(r.members)
        return r

    def require_member_id(self, version: int = 5) -> None:
        """The first JoinGroup round of v4+: MEMBER_ID_REQUIRED hands out the member id."""
        self.send_join(version)
        r = self.recv_join()
        assert r.error_code == E.member_id_required, r
        self.member_id = r.member_id

    def join(self, version: int = 5, **kw):
        """One JoinGroup; with v4+ and no member id, the MEMBER_ID_REQUIRED round first."""
        self.send_join(version, **kw)
        r = self.recv_join()
        if r.error_code == E.member_id_required and "member_id" not in kw:
            self.member_id = r.member_id
            self.send_join(version, **kw)
            r = self.recv_join()
        return r

    # -- SyncGroup / Heartbeat / LeaveGroup
    def sync_request(self, assignments: dict[str, bytes] | None = None, version: int = 5, **kw):
        m = Msg(ApiKeys.SYNC_GROUP, version)
        fields = {
            "group_id": self.group,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": tuple(
                m("SyncGroupRequestAssignment", member_id=k, assignment=v) for k, v in (assignments or {}).items()
            ),
        }
        fields.update(kw)
        return m.loose(**fields)

    def send_sync(self, assignments=None, version: int = 5, **kw) -> None:
        self._pending = (
            version,
            self.c.send(ApiKeys.SYNC_GROUP, version, self.sync_request(assignments, version, **kw)),
        )

    def recv_sync(self, timeout: float | None = None):
        version, corr = self._pending
        self._pending = None
        got, r = self.c.recv(ApiKeys.SYNC_GROUP, version, timeout)
        assert got == corr
        return r

    def sync(self, assignments=None, version: int = 5, **kw):
        self.send_sync(assignments, version, **kw)
        return self.recv_sync()

    def heartbeat(self, version: int = 4, **kw) -> int:
        fields = {
            "group_id": self.group,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
        }
        fields.update(kw)
        return self.c.request(ApiKeys.HEARTBEAT, version, Msg(ApiKeys.HEARTBEAT, version).loose(**fields)).error_code

    def leave(self, version: int = 5, **kw):
        m = Msg(ApiKeys.LEAVE_GROUP, version)
        ident = {"member_id": self.member_id, "group_instance_id": self.instance_id, "reason": None}
        ident.update({k: kw.pop(k) for k in list(kw) if k in ident})
        if version < 3:  # one member, by id, at the top level
            fields = {"group_id": self.group, "member_id": ident["member_id"]}
        else:
            fields = {"group_id": self.group, "members": (m.loose("MemberIdentity", **ident),)}
        fields.update(kw)
        return self.c.request(ApiKeys.LEAVE_GROUP, version, m(**fields))

    # -- offsets
    def commit(self, offsets: dict[tuple[str, int], tuple], version: int = 8, **kw):
        """{(topic, partition): error code} of an OffsetCommit at this member's generation;
        ``offsets`` values are (offset, metadata) or (offset, metadata, leader epoch)."""
        m = Msg(ApiKeys.OFFSET_COMMIT, version)
        by_topic: dict[str, list] = {}
        for (t, p), (off, meta, *epoch) in offsets.items():
            by_topic.setdefault(t, []).append(
                m.loose(
                    "OffsetCommitRequestPartition",
                    partition_index=p,
                    committed_offset=off,
                    committed_leader_epoch=epoch[0] if epoch else -1,
                    committed_metadata=meta,
                )
            )
        fields = {
            "group_id": self.group,
            "generation_id_or_member_epoch": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "retention_time": -1,
            "topics": tuple(m("OffsetCommitRequestTopic", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        }
        fields.update(kw)
        r = self.c.request(ApiKeys.OFFSET_COMMIT, version, m.loose(**fields))
        return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


# ============================================================================ group-level requests
def describe_groups(bs: str, group: str, version: int = 5):
    with WireClient(bs) as c:
        return c.request(
            ApiKeys.DESCRIBE_GROUPS,
            version,
            Msg(ApiKeys.DESCRIBE_GROUPS, version).loose(groups=(group,), include_authorized_operations=False),
        ).groups[0]


def group_snapshot(bs: str, group: str):
    g = describe_groups(bs, group)
    assert g.error_code == E.none, g
    return (
        g.group_state,
        g.protocol_type,
        g.protocol_data,
        sorted((m.member_id, m.group_instance_id, bytes(m.member_assignment)) for m in g.members),
    )


def fetch_offsets(bs: str, group: str, topic: str, partitions, version: int = 8, with_epoch: bool = False):
    """(group error, {partition: (offset, metadata, error)}), or with the committed leader
    epoch: (offset, metadata, leader epoch, error)."""
    m = Msg(ApiKeys.OFFSET_FETCH, version)
    req = m(
        groups=(
            m(
                "OffsetFetchRequestGroup",
                group_id=group,
                topics=(m("OffsetFetchRequestTopics", name=topic, partition_indexes=tuple(partitions)),),
            ),
        ),
        require_stable=False,
    )
    with WireClient(bs) as c:
        g = c.request(ApiKeys.OFFSET_FETCH, version, req).groups[0]
    if with_epoch:
        return g.error_code, {
            p.partition_index: (p.committed_offset, p.metadata, p.committed_leader_epoch, p.error_code)
            for t in g.topics
            for p in t.partitions
        }
    return g.error_code, {
        p.partition_index: (p.committed_offset, p.metadata, p.error_code) for t in g.topics for p in t.partitions
    }


def delete_groups(bs: str, *groups: str) -> dict[str, int]:
    with WireClient(bs) as c:
        r = c.request(ApiKeys.DELETE_GROUPS, 2, Msg(ApiKeys.DELETE_GROUPS, 2)(groups_names=tuple(groups)))
    return {x.group_id: x.error_code for x in r.results}


def offset_delete(bs: str, group: str, topic: str, partitions):
    m = Msg(ApiKeys.OFFSET_DELETE, 0)
    req = m(
        group_id=group,
        topics=(
            m(
                "OffsetDeleteRequestTopic",
                name=topic,
                partitions=tuple(m("OffsetDeleteRequestPartition", partition_index=p) for p in partitions),
            ),
        ),
    )
    with WireClient(bs) as c:
        r = c.request(ApiKeys.OFFSET_DELETE, 0, req)
    return r.error_code, {p.partition_index: p.error_code for t in r.topics for p in t.partitions}


def cg_heartbeat(c: WireClient, group: str, member_id: str, epoch: int, version: int = 1, **kw):
    m = Msg(ApiKeys.CONSUMER_GROUP_HEARTBEAT, version)
    fields = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout": -1,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }
    fields.update(kw)
    if isinstance(fields["topic_partitions"], dict):
        fields["topic_partitions"] = tuple(
            m("TopicPartitions", topic_id=t, partitions=tuple(ps)) for t, ps in fields["topic_partitions"].items()
        )
    return c.request(ApiKeys.CONSUMER_GROUP_HEARTBEAT, version, m.loose(**fields))


def cg_describe(bs: str, group: str):
    with WireClient(bs) as c:
        return c.request(
            ApiKeys.CONSUMER_GROUP_DESCRIBE,
            0,
            Msg(ApiKeys.CONSUMER_GROUP_DESCRIBE, 0)(group_ids=(group,), include_authorized_operations=False),
        ).groups[0]


def cg_snapshot(bs: str, group: str):
    g = cg_describe(bs, group)
    assert g.error_code == E.none, g
    return (
        g.group_state,
        g.group_epoch,
        g.assignment_epoch,
        sorted(
            (
                m.member_id,
                m.member_epoch,
                tuple(sorted((str(tp.topic_id), tuple(tp.partitions)) for tp in m.assignment.topic_partitions)),
            )
            for m in g.members
        ),
    )


# ============================================================================ fixtures
@pytest.fixture(scope="module")
def gsrv(tmp_path_factory):
    b = Broker(data_dir=str(tmp_path_factory.mktemp("kesque-groups-bad") / "data"), config=BROKER_CONFIG)
    b.start()
    find_coordinator(b.bootstrap_servers, "warm-up")
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic(gsrv):
    name = "t-" + uuid.uuid4().hex[:10]
    with WireClient(gsrv.bootstrap_servers) as c:
        Api(c).create_topic(name, 2)
    return name


class StableGroup:
    """A group with one good member owning both partitions of ``topic``, Stable, offsets committed."""

    def __init__(self, bs: str, topic: str):
        self.bs, self.topic = bs, topic
        self.group = "g-" + uuid.uuid4().hex[:10]
        self.m = ClassicMember(bs, self.group, [topic])
        r = self.m.join()
        assert r.error_code == E.none, r
        assert self.m.leader == self.m.member_id
        r = self.m.sync({self.m.member_id: assignment({topic: [0, 1]})})
        assert r.error_code == E.none, r
        assert self.m.commit({(topic, 0): (5, "good-0"), (topic, 1): (7, "good-1")}) == {
            (topic, 0): E.none,
            (topic, 1): E.none,
        }
        self.before = group_snapshot(bs, self.group)
        assert self.before[0] == "Stable"
        self.offsets = {0: 5, 1: 7}

    def member(self, **kw) -> ClassicMember:
        return ClassicMember(self.bs, self.group, [self.topic], **kw)

    def assert_intact(self) -> None:
        """Same state, members and assignments as before; the good member heartbeats and
        commits; committed offsets are the last good ones."""
        assert group_snapshot(self.bs, self.group) == self.before
        assert self.m.heartbeat() == E.none
        err, offs = fetch_offsets(self.bs, self.group, self.topic, [0, 1])
        assert err == E.none and {p: o for p, (o, _m, _e) in offs.items()} == self.offsets, offs
        self.offsets = {0: self.offsets[0] + 1, 1: self.offsets[1] + 1}
        assert self.m.commit({(self.topic, p): (o, "good") for p, o in self.offsets.items()}) == {
            (self.topic, 0): E.none,
            (self.topic, 1): E.none,
        }
        assert group_snapshot(self.bs, self.group) == self.before

    def close(self) -> None:
        self.m.close()


@pytest.fixture
def stable(gsrv, topic):
    g = StableGroup(gsrv.bootstrap_servers, topic)
    try:
        yield g
    finally:
        g.close()


# ============================================================================ classic protocol
def test_unknown_member_id(gsrv, stable):
    bogus = stable.member()
    bogus.member_id, bogus.generation = "not-a-member", stable.m.generation
    try:
        assert bogus.join().error_code == E.unknown_member_id
        assert bogus.sync().error_code == E.unknown_member_id
        assert bogus.heartbeat() == E.unknown_member_id
        assert bogus.commit({(stable.topic, 0): (99, None)}) == {(stable.topic, 0): E.unknown_member_id}
        leave = bogus.leave()
        assert leave.error_code == E.none and [x.error_code for x in leave.members] == [E.unknown_member_id]
        # a member id of no group at all
        nobody = ClassicMember(gsrv.bootstrap_servers, "no-such-group-" + uuid.uuid4().hex[:6], [stable.topic])
        nobody.member_id, nobody.generation = "not-a-member", 1
        assert nobody.join().error_code == E.unknown_member_id
        assert nobody.sync().error_code == E.unknown_member_id
        assert nobody.heartbeat() == E.unknown_member_id
        nobody.close()
    finally:
        bogus.close()
    stable.assert_intact()


def test_wrong_generation(gsrv, stable):
    m = stable.m
    for gen in (m.generation + 1, m.generation - 1, 1000):
        assert m.sync(generation_id=gen).error_code == E.illegal_generation
        assert m.heartbeat(generation_id=gen) == E.illegal_generation
        assert m.commit({(stable.topic, 0): (99, None)}, generation_id_or_member_epoch=gen) == {
            (stable.topic, 0): E.illegal_generation
        }
    stable.assert_intact()


def test_join_with_another_protocol_type_or_no_common_protocol(gsrv, stable):
    other = stable.member()
    try:
        assert other.join(protocol_type="connect").error_code == E.inconsistent_group_protocol
        assert other.join(protocols=[("no-such-assignor", b"")]).error_code == E.inconsistent_group_protocol
        # the good member itself, rejoining with another protocol type
        m = stable.m
        r = m.join(protocol_type="connect", member_id=m.member_id)
        assert r.error_code == E.inconsistent_group_protocol
    finally:
        other.close()
    stable.assert_intact()


def test_rebalance_phases_refuse_heartbeats_syncs_and_commits(gsrv, stable):
    """PreparingRebalance: Heartbeat and SyncGroup get REBALANCE_IN_PROGRESS; commits at the
    current generation are still accepted (Kafka). CompletingRebalance: OffsetCommit gets
    REBALANCE_IN_PROGRESS, Heartbeat is fine. The group then completes the rebalance."""
    bs, m, topic = stable.bs, stable.m, stable.topic
    n = stable.member(client_id="second")
    try:
        n.require_member_id()
        n.send_join()  # blocks until m rejoins
        _wait_state(bs, stable.group, "PreparingRebalance")
        assert m.heartbeat() == E.rebalance_in_progress
        assert m.sync().error_code == E.rebalance_in_progress
        assert m.commit({(topic, 0): (20, "prep")}) == {(topic, 0): E.none}
        gen = m.generation
        m.send_join(member_id=m.member_id)
        rn, rm = n.recv_join(), m.recv_join()
        assert rn.error_code == rm.error_code == E.none
        assert m.generation == n.generation == gen + 1
        assert m.leader == m.member_id and len(m.members) == 2
        assert describe_groups(bs, stable.group).group_state == "CompletingRebalance"
        assert m.commit({(topic, 0): (21, "completing")}) == {(topic, 0): E.rebalance_in_progress}
        assert n.commit({(topic, 1): (21, "completing")}) == {(topic, 1): E.rebalance_in_progress}
        assert m.heartbeat() == E.none and n.heartbeat() == E.none
        # a stale generation is still refused in CompletingRebalance
        assert m.commit({(topic, 0): (21, None)}, generation_id_or_member_epoch=gen) == {
            (topic, 0): E.illegal_generation
        }
        n.send_sync()
        r = m.sync({m.member_id: assignment({topic: [0]}), n.member_id: assignment({topic: [1]})})
        assert r.error_code == E.none and decode_assignment(r.assignment) == {topic: [0]}
        r = n.recv_sync()
        assert r.error_code == E.none and decode_assignment(r.assignment) == {topic: [1]}
        assert describe_groups(bs, stable.group).group_state == "Stable"
        assert m.commit({(topic, 0): (22, None)}) == {(topic, 0): E.none}
        assert n.commit({(topic, 1): (22, None)}) == {(topic, 1): E.none}
        err, offs = fetch_offsets(bs, stable.group, topic, [0, 1])
        assert err == E.none and {p: o for p, (o, _m, _e) in offs.items()} == {0: 22, 1: 22}
        assert m.heartbeat() == E.none and n.heartbeat() == E.none
    finally:
        n.close()


def _wait_state(bs, group, state, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = describe_groups(bs, group).group_state
        if got == state:
            return
        assert time.monotonic() < deadline, f"group {group} in {got}, not {state}"
        time.sleep(0.05)


def test_fenced_static_member(gsrv, topic):
    """KIP-345: a JoinGroup with a known group.instance.id and no member id replaces the
    static member; the old member id then gets FENCED_INSTANCE_ID everywhere."""
    bs = gsrv.bootstrap_servers
    group = "static-" + uuid.uuid4().hex[:8]
    old = ClassicMember(bs, group, [topic], instance_id="inst-1")
    new = ClassicMember(bs, group, [topic], instance_id="inst-1")
    try:
        assert old.join().error_code == E.none
        assert old.sync({old.member_id: assignment({topic: [0, 1]})}).error_code == E.none
        assert old.commit({(topic, 0): (3, "old")}) == {(topic, 0): E.none}
        gen = old.generation
        before = group_snapshot(bs, group)
        r = new.join()
        assert r.error_code == E.none, r
        assert new.member_id != old.member_id and new.generation == gen  # no rebalance
        r = new.sync()
        assert r.error_code == E.none and decode_assignment(r.assignment) == {topic: [0, 1]}
        assert old.heartbeat() == E.fenced_instance_id
        assert old.commit({(topic, 0): (4, "old")}) == {(topic, 0): E.fenced_instance_id}
        assert old.sync().error_code == E.fenced_instance_id
        assert old.join(member_id=old.member_id).error_code == E.fenced_instance_id
        leave = old.leave()
        assert [x.error_code for x in leave.members] == [E.fenced_instance_id]
        # an unknown member id under a known instance id is fenced too; an unknown instance id is unknown
        assert old.heartbeat(member_id="someone-else") == E.fenced_instance_id
        assert old.heartbeat(group_instance_id="inst-unknown") == E.unknown_member_id
        # the group: same state and generation, the new member in the old one's place
        after = group_snapshot(bs, group)
        assert after[:3] == before[:3]
        assert after[3] == [(new.member_id, "inst-1", before[3][0][2])]
        assert new.heartbeat() == E.none
        assert new.commit({(topic, 0): (5, "new")}) == {(topic, 0): E.none}
        assert fetch_offsets(bs, group, topic, [0])[1][0][:2] == (5, "new")
    finally:
        old.close()
        new.close()


def test_static_leader_replaced_sees_old_leader_in_pre_v9_join(gsrv, topic):
    """A restarted static leader (JoinGroup < v9, no SkipAssignment) is answered with the
    leader id the group had before the replacement, so it does not act as a leader of a
    group it has no member list for (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin);
    with v9 it is the leader and told to skip the assignment."""
    bs = gsrv.bootstrap_servers
    group = "static-leader-" + uuid.uuid4().hex[:8]
    leader = ClassicMember(bs, group, [topic], instance_id="lead")
    try:
        assert leader.join().error_code == E.none
        assert leader.sync({leader.member_id: assignment({topic: [0, 1]})}).error_code == E.none
        old_id, gen = leader.member_id, leader.generation
        again = ClassicMember(bs, group, [topic], instance_id="lead")
        r = again.join(version=5)
        assert r.error_code == E.none and r.generation_id == gen
        assert r.member_id != old_id
        assert r.leader == old_id, f"leader {r.leader!r}: the replaced member was told it leads"
        assert r.members == ()
        r = again.sync()
        assert r.error_code == E.none and decode_assignment(r.assignment) == {topic: [0, 1]}
        third = ClassicMember(bs, group, [topic], instance_id="lead")
        r = third.join(version=9)
        assert r.error_code == E.none and r.generation_id == gen
        assert r.leader == r.member_id and r.skip_assignment
        assert [x.member_id for x in r.members] == [r.member_id]
        assert again.heartbeat() == E.fenced_instance_id
        assert third.heartbeat() == E.none
        assert group_snapshot(bs, group)[0] == "Stable"
        for x in (again, third):
            x.close()
    finally:
        leader.close()


@pytest.mark.parametrize("session_ms", [999, 60001, 0, -1])
def test_session_timeout_out_of_bounds(gsrv, stable, session_ms):
    other = stable.member(session_ms=session_ms)
    try:
        r = other.join()
        assert r.error_code == E.invalid_session_timeout
        # the good member too, when it rejoins with one
        r = stable.m.join(member_id=stable.m.member_id, session_timeout=session_ms)
        assert r.error_code == E.invalid_session_timeout
    finally:
        other.close()
    stable.assert_intact()


def test_session_timeout_bounds_are_inclusive(gsrv, topic):
    for session_ms in (1000, 60000):
        m = ClassicMember(gsrv.bootstrap_servers, "bounds-" + uuid.uuid4().hex[:8], [topic], session_ms=session_ms)
        try:
            assert m.join().error_code == E.none
        finally:
            m.close()


def test_empty_group_id(gsrv, stable):
    """Kafka refuses the empty group id with INVALID_GROUP_ID in JoinGroup, SyncGroup,
    Heartbeat, LeaveGroup, OffsetDelete and ConsumerGroupDescribe, and with INVALID_REQUEST
    in ConsumerGroupHeartbeat (DescribeGroups, DeleteGroups, OffsetFetch and OffsetCommit
    accept it, for compatibility)."""
    bs = gsrv.bootstrap_servers
    m = ClassicMember(bs, "", [stable.topic])
    try:
        assert m.join().error_code == E.invalid_group_id
        assert m.join(version=9).error_code == E.invalid_group_id
        m.member_id, m.generation = "someone", 1
        assert m.sync().error_code == E.invalid_group_id
        assert m.heartbeat() == E.invalid_group_id
        assert m.leave().error_code == E.invalid_group_id
        assert m.leave(version=0).error_code == E.invalid_group_id
        assert offset_delete(bs, "", stable.topic, [0])[0] == E.invalid_group_id
        assert cg_describe(bs, "").error_code == E.invalid_group_id
        with WireClient(bs) as c:
            r = cg_heartbeat(
                c,
                "",
                uuid.uuid4().hex,
                0,
                rebalance_timeout=10000,
                subscribed_topic_names=(stable.topic,),
                topic_partitions={},
            )
            assert r.error_code == E.invalid_request
    finally:
        m.close()
    stable.assert_intact()


@pytest.mark.parametrize("version", [4, 5, 9])
def test_member_id_required_then_join(gsrv, stable, version):
    """JoinGroup v4+ without a member id: MEMBER_ID_REQUIRED with the id to use, then a
    JoinGroup with it succeeds (and rebalances the Stable group)."""
    n = stable.member(client_id="newcomer")
    m = stable.m
    try:
        n.send_join(version=version)
        r = n.recv_join()
        assert r.error_code == E.member_id_required and r.member_id.startswith("newcomer-"), r
        assert r.generation_id == -1
        assert group_snapshot(stable.bs, stable.group) == stable.before  # a pending member changes nothing
        n.member_id = r.member_id
        n.send_join(version=version)
        _wait_state(stable.bs, stable.group, "PreparingRebalance")
        assert m.heartbeat() == E.rebalance_in_progress
        m.send_join(member_id=m.member_id)
        rn, rm = n.recv_join(), m.recv_join()
        assert rn.error_code == rm.error_code == E.none
        assert rn.member_id == r.member_id and n.generation == m.generation
        n.send_sync()
        assert (
            m.sync(
                {m.member_id: assignment({stable.topic: [0]}), n.member_id: assignment({stable.topic: [1]})}
            ).error_code
            == E.none
        )
        assert decode_assignment(n.recv_sync().assignment) == {stable.topic: [1]}
        assert describe_groups(stable.bs, stable.group).group_state == "Stable"
    finally:
        n.close()


def test_join_v3_without_member_id_joins_at_once(gsrv, topic):
    m = ClassicMember(gsrv.bootstrap_servers, "v3-" + uuid.uuid4().hex[:8], [topic])
    try:
        r = m.join(version=3)
        assert r.error_code == E.none and r.member_id and r.generation_id == 1
    finally:
        m.close()


def test_offset_metadata_too_large(gsrv, stable):
    """A partition whose metadata exceeds offset.metadata.max.bytes (4096) gets
    OFFSET_METADATA_TOO_LARGE; the other partitions of the request are committed."""
    t = stable.topic
    r = stable.m.commit({(t, 0): (50, "x" * 4097), (t, 1): (51, "y" * 4096)})
    assert r == {(t, 0): E.offset_metadata_too_large, (t, 1): E.none}
    _err, offs = fetch_offsets(stable.bs, stable.group, t, [0, 1])
    assert offs[0][:2] == (stable.offsets[0], "good-0") and offs[1][:2] == (51, "y" * 4096)
    stable.offsets[1] = 51
    stable.assert_intact()


def test_delete_groups_of_a_live_group(gsrv, stable):
    bs, group = stable.bs, stable.group
    missing = "missing-" + uuid.uuid4().hex[:6]
    assert delete_groups(bs, group, missing) == {group: E.non_empty_group, missing: E.group_id_not_found}
    stable.assert_intact()
    # once the member has left the group is Empty and can be deleted, offsets and all
    leave = stable.m.leave()
    assert leave.error_code == E.none and [x.error_code for x in leave.members] == [E.none]
    assert describe_groups(bs, group).group_state == "Empty"
    assert delete_groups(bs, group) == {group: E.none}
    err, offs = fetch_offsets(bs, group, stable.topic, [0, 1])
    assert err == E.none and {p: o for p, (o, _m, _e) in offs.items()} == {0: -1, 1: -1}
    assert describe_groups(bs, group).group_state == "Dead"
    assert delete_groups(bs, group) == {group: E.group_id_not_found}


def test_offset_delete_of_a_subscribed_topic(gsrv, stable):
    """OffsetDelete refuses the partitions of a topic the group consumes; offsets of other
    topics go (here: a topic the member committed without subscribing to it)."""
    bs, group, t = stable.bs, stable.group, stable.topic
    other = "other-" + uuid.uuid4().hex[:8]
    with WireClient(bs) as c:
        Api(c).create_topic(other, 1)
    assert stable.m.commit({(other, 0): (9, "side")}) == {(other, 0): E.none}
    err, parts = offset_delete(bs, group, t, [0, 1])
    assert err == E.none and parts == {0: E.group_subscribed_to_topic, 1: E.group_subscribed_to_topic}
    err, parts = offset_delete(bs, group, other, [0])
    assert err == E.none and parts == {0: E.none}
    assert fetch_offsets(bs, group, other, [0])[1][0][0] == -1
    missing = "missing-" + uuid.uuid4().hex[:6]
    assert offset_delete(bs, missing, t, [0])[0] == E.group_id_not_found
    stable.assert_intact()


# ============================================================================ KIP-848
class Kip848Member:
    def __init__(self, bs: str, group: str, topic: str):
        find_coordinator(bs, group)
        self.c = WireClient(bs, timeout=30)
        self.group, self.topic = group, topic
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0
        self.owned: dict = {}

    def join(self):
        r = cg_heartbeat(
            self.c,
            self.group,
            self.member_id,
            0,
            rebalance_timeout=10000,
            subscribed_topic_names=(self.topic,),
            topic_partitions={},
        )
        assert r.error_code == E.none, r
        self._update(r)
        return r

    def _update(self, r):
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.owned = {tp.topic_id: tuple(tp.partitions) for tp in r.assignment.topic_partitions}

    def heartbeat(self, **kw):
        fields = {"topic_partitions": self.owned}
        fields.update(kw)
        r = cg_heartbeat(self.c, self.group, self.member_id, self.epoch, **fields)
        if r.error_code == E.none:
            self._update(r)
        return r

    def close(self):
        self.c.close()


@pytest.fixture
def kip848(gsrv, topic):
    bs = gsrv.bootstrap_servers
    m = Kip848Member(bs, "cg-" + uuid.uuid4().hex[:10], topic)
    try:
        m.join()
        deadline = time.monotonic() + 10
        while sum(len(p) for p in m.owned.values()) < 2:  # the assignment comes with a heartbeat
            assert time.monotonic() < deadline, m.owned
            m.heartbeat()
        assert m.epoch >= 1
        assert cg_snapshot(bs, m.group)[0] == "Stable"
        yield m
    finally:
        m.close()


def _kip848_intact(bs: str, m: Kip848Member, before) -> None:
    assert cg_snapshot(bs, m.group) == before
    r = m.heartbeat()
    assert r.error_code == E.none and r.member_epoch == before[1]


def test_kip848_unknown_member_and_wrong_epoch(gsrv, kip848):
    bs, m = gsrv.bootstrap_servers, kip848
    before = cg_snapshot(bs, m.group)
    with WireClient(bs) as c:
        r = cg_heartbeat(c, m.group, "not-a-member", m.epoch, topic_partitions={})
        assert r.error_code == E.unknown_member_id, r
        r = cg_heartbeat(c, m.group, "not-a-member", -1)  # leaving as an unknown member
        assert r.error_code == E.unknown_member_id, r
        r = cg_heartbeat(c, "no-such-cg-" + uuid.uuid4().hex[:6], "not-a-member", 3, topic_partitions={})
        assert r.error_code in (E.unknown_member_id, E.group_id_not_found), r
    for epoch in (m.epoch + 1, m.epoch + 100):
        r = cg_heartbeat(m.c, m.group, m.member_id, epoch, topic_partitions=m.owned)
        assert r.error_code == E.fenced_member_epoch, r
    # OffsetCommit / OffsetFetch with a wrong member epoch
    cm = ClassicMember(bs, m.group, [m.topic])
    cm.member_id, cm.generation = m.member_id, m.epoch + 1
    assert cm.commit({(m.topic, 0): (1, None)}, version=9) == {(m.topic, 0): E.stale_member_epoch}
    cm.member_id = "not-a-member"
    assert cm.commit({(m.topic, 0): (1, None)}, version=9) == {(m.topic, 0): E.unknown_member_id}
    cm.member_id, cm.generation = m.member_id, m.epoch
    assert cm.commit({(m.topic, 0): (1, None)}, version=9) == {(m.topic, 0): E.none}
    cm.close()
    _kip848_intact(bs, m, before)


def test_kip848_commits_without_membership(gsrv, kip848):
    """Epoch -1 commits (admin clients, standalone consumers): refused while the group has
    members, accepted once it is empty, whatever the member id (ConsumerGroup.validateOffsetCommit)."""
    bs, m = gsrv.bootstrap_servers, kip848
    cm = ClassicMember(bs, m.group, [m.topic])
    try:
        for member_id in ("", "gone-member"):
            assert cm.commit(
                {(m.topic, 0): (1, None)}, version=9, member_id=member_id, generation_id_or_member_epoch=-1
            ) == {(m.topic, 0): E.unknown_member_id}
        r = cg_heartbeat(m.c, m.group, m.member_id, -1)
        assert r.error_code == E.none and r.member_epoch == -1, r
        assert cg_snapshot(bs, m.group)[0] == "Empty"
        for i, member_id in enumerate(("", "gone-member")):
            assert cm.commit(
                {(m.topic, 0): (10 + i, None)}, version=9, member_id=member_id, generation_id_or_member_epoch=-1
            ) == {(m.topic, 0): E.none}
        assert fetch_offsets(bs, m.group, m.topic, [0])[1][0][0] == 11
    finally:
        cm.close()


def test_kip848_unsupported_assignor(gsrv, kip848):
    bs, m = gsrv.bootstrap_servers, kip848
    before = cg_snapshot(bs, m.group)
    with WireClient(bs) as c:
        r = cg_heartbeat(
            c,
            m.group,
            uuid.uuid4().hex[:22],
            0,
            rebalance_timeout=10000,
            subscribed_topic_names=(m.topic,),
            topic_partitions={},
            server_assignor="no-such-assignor",
        )
        assert r.error_code == E.unsupported_assignor, r
    r = m.heartbeat(server_assignor="no-such-assignor")
    assert r.error_code == E.unsupported_assignor, r
    _kip848_intact(bs, m, before)


@pytest.mark.parametrize(
    "bad",
    [
        {"rebalance_timeout": -1},
        {"topic_partitions": None},
        {"topic_partitions": "owned"},
        {"subscribed_topic_names": None},
        {"member_epoch": -3},
        {"member_id": ""},
        {"instance_id": ""},
        {"rack_id": ""},
    ],
    ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()),
)
def test_kip848_invalid_first_heartbeat(gsrv, kip848, bad):
    bs, m = gsrv.bootstrap_servers, kip848
    before = cg_snapshot(bs, m.group)
    fields = {
        "member_id": uuid.uuid4().hex[:22],
        "member_epoch": 0,
        "rebalance_timeout": 10000,
        "subscribed_topic_names": (m.topic,),
        "topic_partitions": {},
    }
    fields.update(bad)
    if fields["topic_partitions"] == "owned":
        fields["topic_partitions"] = m.owned
    with WireClient(bs) as c:
        r = cg_heartbeat(c, m.group, fields.pop("member_id"), fields.pop("member_epoch"), **fields)
    assert r.error_code == E.invalid_request, r
    assert r.error_message
    _kip848_intact(bs, m, before)


def test_kip848_group_admin_refusals(gsrv, kip848):
    """A live KIP-848 group: DeleteGroups gets NON_EMPTY_GROUP, OffsetDelete of its topic
    GROUP_SUBSCRIBED_TO_TOPIC."""
    bs, m = gsrv.bootstrap_servers, kip848
    before = cg_snapshot(bs, m.group)
    assert delete_groups(bs, m.group) == {m.group: E.non_empty_group}
    err, parts = offset_delete(bs, m.group, m.topic, [0])
    assert err == E.none and parts == {0: E.group_subscribed_to_topic}
    _kip848_intact(bs, m, before)
