"""The group coordinator shard, sans-IO: classic groups, offsets, KIP-848 consumer groups,
server-side assignors, and the property that matters most for failover — the records a shard
writes rebuild, in a fresh shard, everything it holds durably.

Kafka's group coordinator is the reference (GroupMetadataManager, OffsetMetadataManager,
ClassicGroup, CurrentAssignmentBuilder, UniformAssignor, RangeAssignor); tests name the rule
they hold kesque to.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.coordinator.group import assignors
from kesque.coordinator.group import records as R
from kesque.coordinator.group.classic import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE, ClassicGroup
from kesque.coordinator.group.consumer import (
    MEMBER_STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    consumer_group_heartbeat,
)
from kesque.coordinator.group.requests import (
    ConsumerGroupHeartbeat,
    Heartbeat,
    JoinGroup,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetDelete,
    SyncGroup,
    TxnOffsetCommit,
)
from kesque.coordinator.group.shard import GroupConfig, GroupCoordinatorShard
from kesque.coordinator.runtime import CoordinatorResult, append_and_replay
from kesque.errors import ErrorCode, KafkaError

GID = "g"
SESSION = 10_000
REBALANCE = 30_000
PROPERTY = settings(
    max_examples=examples(150),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# ====================================================================== fakes
class ManualClock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def now_ms(self) -> int:
        return self.now


class FakeTimer:
    """Keyed one-shot timers; scheduling a key again replaces it. ``advance(ms)`` moves the
    clock and fires every timer that falls due, in due order (ties: scheduling order),
    including timers scheduled by the callbacks themselves."""

    def __init__(self, clock: ManualClock, after_fire=None):
        self.clock = clock
        self.timers: dict[str, tuple[int, int, object]] = {}
        self.seq = itertools.count()
        self.after_fire = after_fire
        self.fired: list[str] = []

    def schedule(self, key: str, delay_ms: int, fn) -> None:
        self.timers[key] = (self.clock.now + max(delay_ms, 0), next(self.seq), fn)

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)

    def due(self, key: str) -> int | None:
        t = self.timers.get(key)
        return None if t is None else t[0]

    def advance(self, ms: int) -> None:
        end = self.clock.now + ms
        while True:
            ready = [(due, seq, key) for key, (due, seq, _fn) in self.timers.items() if due <= end]
            if not ready:
                break
            due, _seq, key = min(ready)
            _due, _s, fn = self.timers.pop(key)
            self.clock.now = max(self.clock.now, due)
            self.fired.append(key)
            fn()
            if self.after_fire is not None:
                self.after_fire()
        self.clock.now = end


class WriteFailed(Exception):
    pass


class WriteLog:
    """The partition: ``write(records, producer_id, producer_epoch)`` appends, or raises while
    ``fail`` is set."""

    def __init__(self):
        self.records: list[tuple[bytes, bytes | None]] = []
        self.fail = False
        self.calls = 0

    def __call__(self, records, producer_id: int = -1, producer_epoch: int = -1) -> None:
        self.calls += 1
        if self.fail:
            raise WriteFailed("append failed")
        self.records.extend(records)

    def decoded(self, start: int = 0) -> list:
        out = []
        for k, v in self.records[start:]:
            kv, key = R.decode_key(k)
            out.append((kv, key, R.decode_value(kv, v)))
        return out


class FakeImage:
    """The bits of the metadata image the KIP-848 code reads."""

    def __init__(self, topics: dict[str, int] | None = None):
        self.topics_by_name: dict[str, SimpleNamespace] = {}
        for name, n in (topics or {}).items():
            self.set_topic(name, n)

    def set_topic(self, name: str, partitions: int) -> None:
        tid = uuid.uuid5(uuid.NAMESPACE_URL, "kesque-test-topic/" + name)
        self.topics_by_name[name] = SimpleNamespace(
            name=name, topic_id=tid, partitions={p: None for p in range(partitions)}
        )

    def topic(self, name: str):
        return self.topics_by_name.get(name)

    def tid(self, name: str) -> uuid.UUID:
        return self.topics_by_name[name].topic_id


def sub(topics, version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription v0 (the prefix every version shares)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    return out + struct.pack(">i", -1)


class Reply:
    """Collects the responses of a parked request (JoinGroup / SyncGroup)."""

    def __init__(self, on=None):
        self.responses: list[dict] = []
        self.on = on

    def __call__(self, resp: dict) -> None:
        self.responses.append(resp)
        if self.on is not None:
            self.on(resp)

    @property
    def done(self) -> bool:
        return bool(self.responses)

    @property
    def r(self) -> dict:
        assert len(self.responses) == 1, self.responses
        return self.responses[0]


class Env:
    def __init__(self, topics: dict[str, int] | None = None, group_configs: dict | None = None, **cfg):
        self.clock = ManualClock()
        self.timer = FakeTimer(self.clock, after_fire=self._after_step)
        self.log = WriteLog()
        self.image = FakeImage(topics)
        self.config = GroupConfig(**cfg)
        self.group_configs = group_configs or {}  # group id -> its own configs (the GROUP resource)
        self.shard = GroupCoordinatorShard(
            0,
            self.config,
            self.log,
            self.timer,
            self.clock,
            topics=lambda: self.image,
            group_configs=lambda gid: self.group_configs.get(gid, {}),
        )
        self.step_hooks: list = []

    def _after_step(self) -> None:
        for h in self.step_hooks:
            h()

    # ------------------------------------------------------------ classic
    def join(
        self,
        member_id: str = "",
        gid: str = GID,
        *,
        instance=None,
        protocols=None,
        topics=("t",),
        session=SESSION,
        rebalance=REBALANCE,
        require_known=False,
        skip=False,
        client_id="client",
        protocol_type="consumer",
        on=None,
    ) -> Reply:
        reply = Reply(on)
        self.shard.join_group(
            JoinGroup(
                gid,
                member_id,
                protocol_type,
                protocols if protocols is not None else [("range", sub(list(topics)))],
                session,
                rebalance,
                instance,
                client_id,
                "/127.0.0.1",
                require_known_member_id=require_known,
                supports_skip_assignment=skip,
            ),
            reply,
        )
        self._after_step()
        return reply

    def sync(
        self, member_id: str, generation: int, gid: str = GID, *, assignments=None, instance=None, on=None
    ) -> Reply:
        reply = Reply(on)
        self.shard.sync_group(SyncGroup(gid, member_id, generation, instance, assignments=assignments or {}), reply)
        self._after_step()
        return reply

    def heartbeat(self, member_id: str, generation: int, gid: str = GID, instance=None):
        err = self.shard.heartbeat(Heartbeat(gid, member_id, generation, instance))
        self._after_step()
        return err

    def leave(self, members: list, gid: str = GID):
        result = self.shard.leave_group(gid, members)
        self._after_step()
        return result

    def commit(
        self,
        offsets: dict,
        gid: str = GID,
        *,
        member_id="",
        generation=-1,
        instance=None,
        retention_ms=-1,
        api_version=8,
    ) -> dict | ErrorCode:
        """{(topic, partition): error}, or the group-level error the commit was refused with."""
        topics: dict[str, list] = {}
        for (t, p), v in offsets.items():
            off, epoch, meta = v if isinstance(v, tuple) else (v, -1, "")
            topics.setdefault(t, []).append(OffsetCommitPartition(p, off, epoch, meta))
        try:
            result = self.run(
                self.shard.commit_offsets(
                    OffsetCommit(gid, topics, member_id, generation, instance, retention_ms, api_version)
                )
            )
        except KafkaError as e:
            result = e.code
        self._after_step()
        return result

    def run(self, result: CoordinatorResult):
        """What the runtime does with an operation's result: append its records, replay them."""
        return append_and_replay(self.shard, self.log, result)

    def delete_offsets(self, gid: str, topics: dict) -> tuple[ErrorCode, dict]:
        """OffsetDelete: (group-level error, {(topic, partition): error})."""
        try:
            return ErrorCode.none, self.run(self.shard.delete_offsets(OffsetDelete(gid, topics)))
        except KafkaError as e:
            return e.code, {}

    def delete_group(self, gid: str = GID) -> ErrorCode:
        try:
            return self.run(self.shard.delete_group(gid))
        except KafkaError as e:
            return e.code

    def expire_offsets(self) -> int:
        """Offset expiration: how many records it wrote."""
        return self.run(self.shard.expire_offsets())

    def committed(self, gid: str = GID) -> dict:
        err, offs = self.shard.fetch_offsets(gid, None)
        assert err == ErrorCode.none
        return {tp: om.offset for tp, om in offs.items()}

    def group(self, gid: str = GID):
        return self.shard.groups.get(gid)

    def settle(self, replies, step: int | None = None, limit: int = 50) -> None:
        """Advance time until every reply has its answer."""
        step = step or max(self.config.initial_rebalance_delay_ms, 1)
        for _ in range(limit):
            if all(r.done for r in replies):
                return
            self.timer.advance(step)
        raise AssertionError("requests still parked")

    def stable_group(self, n: int, gid: str = GID, instances=None, **kw) -> SimpleNamespace:
        replies = [
            self.join(gid=gid, instance=instances[i] if instances else None, client_id=f"c{i}", **kw) for i in range(n)
        ]
        self.settle(replies)
        resps = [r.r for r in replies]
        assert all(x["error"] == ErrorCode.none for x in resps), resps
        gen, leader = resps[0]["generation_id"], resps[0]["leader"]
        ids = [x["member_id"] for x in resps]
        assignments = {mid: f"assignment-of-{mid}".encode() for mid in ids}
        syncs = {
            leader: self.sync(
                leader, gen, gid, assignments=assignments, instance=instances[ids.index(leader)] if instances else None
            )
        }
        for i, mid in enumerate(ids):
            if mid != leader:
                syncs[mid] = self.sync(mid, gen, gid, instance=instances[i] if instances else None)
        assert self.group(gid).state == STABLE
        return SimpleNamespace(
            ids=ids,
            leader=leader,
            gen=gen,
            joins=resps,
            syncs=syncs,
            assignments=assignments,
            followers=[m for m in ids if m != leader],
        )

    # ------------------------------------------------------------ KIP-848
    def chb(
        self,
        member_id: str,
        epoch: int,
        gid: str = GID,
        *,
        names=None,
        regex=None,
        owned=None,
        instance=None,
        rack=None,
        rebalance=None,
        assignor=None,
        version=1,
        describable=None,
    ) -> dict:
        if epoch == 0:
            owned = {} if owned is None else owned
            rebalance = 60_000 if rebalance is None else rebalance
        req = {
            "group_id": gid,
            "member_id": member_id,
            "member_epoch": epoch,
            "instance_id": instance,
            "rack_id": rack,
            "rebalance_timeout_ms": -1 if rebalance is None else rebalance,
            "subscribed_topic_names": names,
            "subscribed_topic_regex": regex,
            "server_assignor": assignor,
            "topic_partitions": owned,
            "client_id": "client",
            "client_host": "/127.0.0.1",
            "describable": describable,
        }
        resp = consumer_group_heartbeat(self.shard, ConsumerGroupHeartbeat(**req), version)
        self._after_step()
        return resp

    def owned(self, resp: dict) -> dict:
        return {t: set(p) for t, p in (resp["assignment"] or {}).items()}

    # ------------------------------------------------------------ replay
    def replayed(self) -> GroupCoordinatorShard:
        fresh = GroupCoordinatorShard(
            0, self.config, WriteLog(), FakeTimer(ManualClock()), ManualClock(), topics=lambda: self.image
        )
        for k, v in self.log.records:
            fresh.replay(k, v)
        return fresh


def tp_set(a: dict) -> frozenset:
    return frozenset((t, p) for t, ps in (a or {}).items() for p in ps)


# ====================================================================== durable views
def classic_view(g: ClassicGroup) -> tuple:
    members = {
        mid: (
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            bytes(m.metadata(g.protocol_name or "")),
            bytes(m.assignment),
        )
        for mid, m in g.members.items()
    }
    return (
        "classic",
        g.generation_id,
        g.protocol_type if g.members else None,
        g.protocol_name,
        g.leader_id if g.members else None,
        members,
        dict(g.static_members),
    )


# What Kafka writes for a group created by a JoinGroup that has not completed a rebalance
# (GroupCoordinatorRecordHelpers.newEmptyGroupMetadataRecord): no members, generation 0.
NEW_CLASSIC_GROUP = ("classic", 0, None, None, None, {}, {})


def consumer_view(g: ConsumerGroup) -> tuple:
    members = {
        mid: (
            m.instance_id,
            m.rack_id,
            m.client_id,
            m.client_host,
            tuple(m.subscribed_topic_names),
            m.subscribed_topic_regex,
            m.rebalance_timeout_ms,
            m.server_assignor,
            m.member_epoch,
            m.previous_member_epoch,
            m.state,
            tp_set(m.assigned),
            tp_set(m.pending_revocation),
        )
        for mid, m in g.members.items()
    }
    target = {mid: tp_set(a) for mid, a in g.target.items() if tp_set(a)}
    # the subscribed topics' metadata the group epoch was computed with (Kafka persists it, so a
    # reloaded group does not rebalance)
    return (
        "consumer",
        g.group_epoch,
        g.assignment_epoch,
        members,
        target,
        dict(g.static_members),
        tuple(g.subscription_signature),
    )


def offsets_view(shard) -> dict:
    return {
        gid: {
            tp: (o.offset, o.leader_epoch, o.metadata, o.commit_timestamp, o.expire_timestamp) for tp, o in offs.items()
        }
        for gid, offs in shard.offsets.items()
        if offs
    }


class DurableTracker:
    """The state a restarted coordinator must rebuild: a classic group is persisted when it
    completes a rebalance (Stable), changes a static member while Stable, or becomes Empty —
    in between (PreparingRebalance / CompletingRebalance) its durable state is the last such
    point; KIP-848 groups and offsets are persisted on every change."""

    def __init__(self, env: Env):
        self.env = env
        self.snapshots: dict[str, tuple] = {}
        env.step_hooks.append(self.step)

    def step(self) -> None:
        groups = self.env.shard.groups
        for gid in list(self.snapshots):
            if not isinstance(groups.get(gid), ClassicGroup):
                del self.snapshots[gid]
        for gid, g in groups.items():
            if isinstance(g, ClassicGroup) and g.state in (STABLE, EMPTY):
                self.snapshots[gid] = classic_view(g)

    def expected(self) -> dict:
        out = {}
        for gid, g in self.env.shard.groups.items():
            if isinstance(g, ClassicGroup):
                if g.state in (STABLE, EMPTY):
                    out[gid] = classic_view(g)
                else:
                    out[gid] = self.snapshots.get(gid, NEW_CLASSIC_GROUP)
            else:
                out[gid] = consumer_view(g)
        return out


def durable_view(shard) -> dict:
    return {
        gid: classic_view(g) if isinstance(g, ClassicGroup) else consumer_view(g) for gid, g in shard.groups.items()
    }


def normalize_new_groups(view: dict) -> dict:
    # protocol type of a member-less group is not compared (Kafka writes it, kesque may not know it yet)
    return {gid: (v[:2] + (None,) + v[3:]) if v[0] == "classic" and not v[5] else v for gid, v in view.items()}


def assert_replay_equivalent(env: Env, tracker: DurableTracker, replay_shard=None) -> None:
    fresh = replay_shard if replay_shard is not None else env.replayed()
    assert normalize_new_groups(durable_view(fresh)) == normalize_new_groups(tracker.expected())
    assert offsets_view(fresh) == offsets_view(env.shard)


# ====================================================================== classic: joining
def test_first_join_member_id_required_then_join_with_the_id():
    env = Env()
    first = env.join(require_known=True)
    r = first.r
    assert r["error"] == ErrorCode.member_id_required and r["member_id"]
    g = env.group()
    assert g.state == EMPTY and r["member_id"] in g.pending_join_members and not g.members
    # the new group is persisted, empty
    ((kv, key, value),) = env.log.decoded()
    assert kv == R.GROUP_METADATA and key == {"group": GID} and value["members"] == [] and value["generation"] == 0
    second = env.join(r["member_id"], require_known=True)
    assert not second.done and g.state == PREPARING_REBALANCE
    env.timer.advance(env.config.initial_rebalance_delay_ms)
    resp = second.r
    assert resp["error"] == ErrorCode.none and resp["member_id"] == r["member_id"] and resp["generation_id"] == 1
    assert resp["leader"] == r["member_id"] and resp["protocol_name"] == "range"
    assert [m["member_id"] for m in resp["members"]] == [r["member_id"]]
    assert resp["members"][0]["metadata"] == sub(["t"])
    assert g.state == COMPLETING_REBALANCE


def test_pending_member_that_never_rejoins_expires_after_the_session_timeout():
    env = Env()
    mid = env.join(require_known=True, session=7000).r["member_id"]
    g = env.group()
    env.timer.advance(6999)
    assert mid in g.pending_join_members
    env.timer.advance(1)
    assert mid not in g.pending_join_members
    assert env.join(mid, require_known=True).r["error"] == ErrorCode.unknown_member_id


def test_join_validation():
    env = Env()
    assert env.join(gid="").r["error"] == ErrorCode.invalid_group_id
    assert env.join(session=env.config.min_session_timeout_ms - 1).r["error"] == ErrorCode.invalid_session_timeout
    assert env.join(session=env.config.max_session_timeout_ms + 1).r["error"] == ErrorCode.invalid_session_timeout
    # a member id the group does not know, on a group that does not exist
    assert env.join("ghost").r["error"] == ErrorCode.unknown_member_id
    assert env.group() is None
    assert env.join(protocol_type="").r["error"] == ErrorCode.inconsistent_group_protocol
    assert env.join(protocols=[]).r["error"] == ErrorCode.inconsistent_group_protocol


def test_initial_rebalance_delay_is_extended_by_new_members_and_bounded_by_the_rebalance_timeout():
    env = Env(initial_rebalance_delay_ms=3000)
    t0 = env.clock.now
    replies = [env.join(rebalance=10_000)]
    # members keep arriving just before each delay would end
    for at in (1000, 5000, 8000, 9500):
        env.timer.advance(t0 + at - env.clock.now)
        replies.append(env.join(rebalance=10_000))
    assert not any(r.done for r in replies)
    env.timer.advance(t0 + 9999 - env.clock.now)
    assert not any(r.done for r in replies)
    env.timer.advance(1)  # t0 + rebalance timeout: the join phase completes despite the newcomers
    assert all(r.done for r in replies)
    assert env.clock.now == t0 + 10_000
    assert {r.r["generation_id"] for r in replies} == {1}
    assert len(env.group().members) == 5


def test_initial_rebalance_completes_after_one_delay_without_newcomers():
    env = Env(initial_rebalance_delay_ms=3000)
    a = env.join()
    env.timer.advance(2999)
    assert not a.done
    env.timer.advance(1)
    assert a.r["error"] == ErrorCode.none and a.r["generation_id"] == 1


def test_leader_and_protocol_selected_by_votes():
    env = Env()
    a = env.join(protocols=[("range", b"A-range"), ("roundrobin", b"A-rr")], client_id="a")
    b = env.join(protocols=[("roundrobin", b"B-rr"), ("range", b"B-range")], client_id="b")
    c = env.join(protocols=[("roundrobin", b"C-rr"), ("range", b"C-range"), ("sticky", b"")], client_id="c")
    env.settle([a, b, c])
    # candidates are the protocols all members support; each votes for its first candidate
    assert {x.r["protocol_name"] for x in (a, b, c)} == {"roundrobin"}
    leader = a.r["member_id"]  # the first member to join leads
    assert {x.r["leader"] for x in (a, b, c)} == {leader}
    assert {m["member_id"]: m["metadata"] for m in a.r["members"]} == {
        a.r["member_id"]: b"A-rr",
        b.r["member_id"]: b"B-rr",
        c.r["member_id"]: b"C-rr",
    }
    assert b.r["members"] == [] and c.r["members"] == []


def test_protocol_not_supported_by_the_group_is_rejected():
    env = Env()
    env.stable_group(2)
    r = env.join(protocols=[("cooperative-sticky", b"")])
    assert r.r["error"] == ErrorCode.inconsistent_group_protocol
    assert env.join(protocol_type="connect").r["error"] == ErrorCode.inconsistent_group_protocol


def test_leader_sync_propagates_assignments_to_waiting_followers():
    env = Env()
    replies = [env.join(client_id=f"c{i}") for i in range(3)]
    env.settle(replies)
    gen, leader = replies[0].r["generation_id"], replies[0].r["leader"]
    followers = [r.r["member_id"] for r in replies if r.r["member_id"] != leader]
    waiting = [env.sync(f, gen) for f in followers]
    assert not any(w.done for w in waiting)
    assert env.group().state == COMPLETING_REBALANCE
    start = len(env.log.records)
    assignments = {leader: b"L", followers[0]: b"F0"}  # the second follower is given nothing
    lr = env.sync(leader, gen, assignments=assignments)
    assert lr.r == {"error": ErrorCode.none, "assignment": b"L", "protocol_type": "consumer", "protocol_name": "range"}
    assert waiting[0].r["assignment"] == b"F0" and waiting[0].r["error"] == ErrorCode.none
    assert waiting[1].r["assignment"] == b"" and waiting[1].r["error"] == ErrorCode.none
    g = env.group()
    assert g.state == STABLE
    ((kv, _key, value),) = env.log.decoded(start)
    assert kv == R.GROUP_METADATA and value["generation"] == gen and value["leader"] == leader
    assert value["protocol"] == "range" and value["protocol_type"] == "consumer"
    assert {m["member_id"]: m["assignment"] for m in value["members"]} == {
        leader: b"L",
        followers[0]: b"F0",
        followers[1]: b"",
    }
    # a follower that syncs late in Stable gets its assignment at once
    assert env.sync(followers[0], gen).r["assignment"] == b"F0"


def test_sync_errors():
    env = Env()
    sg = env.stable_group(2)
    assert env.sync(sg.leader, sg.gen + 1).r["error"] == ErrorCode.illegal_generation
    assert env.sync("ghost", sg.gen).r["error"] == ErrorCode.unknown_member_id
    assert env.sync(sg.leader, sg.gen, gid="other").r["error"] == ErrorCode.unknown_member_id
    env.join(sg.leader)  # the leader rejoins: PreparingRebalance
    assert env.sync(sg.followers[0], sg.gen).r["error"] == ErrorCode.rebalance_in_progress


def test_heartbeat_errors_and_rebalance_notification():
    env = Env()
    sg = env.stable_group(2)
    assert env.heartbeat(sg.leader, sg.gen) == ErrorCode.none
    assert env.heartbeat("ghost", sg.gen) == ErrorCode.unknown_member_id
    assert env.heartbeat(sg.leader, sg.gen - 1) == ErrorCode.illegal_generation
    assert env.heartbeat(sg.leader, sg.gen, gid="nope") == ErrorCode.unknown_member_id
    env.join(sg.leader)
    assert env.heartbeat(sg.followers[0], sg.gen) == ErrorCode.rebalance_in_progress


def test_leader_rejoin_in_stable_rebalances():
    env = Env()
    sg = env.stable_group(2)
    lead = env.join(sg.leader)
    g = env.group()
    assert g.state == PREPARING_REBALANCE and not lead.done
    fol = env.join(sg.followers[0])  # the follower learns of the rebalance and rejoins
    assert lead.r["generation_id"] == fol.r["generation_id"] == sg.gen + 1
    assert g.state == COMPLETING_REBALANCE


def test_follower_rejoin_with_same_protocols_in_stable_gets_current_generation_without_rebalance():
    env = Env()
    sg = env.stable_group(3)
    writes = len(env.log.records)
    r = env.join(sg.followers[0]).r
    assert r["error"] == ErrorCode.none and r["generation_id"] == sg.gen and r["leader"] == sg.leader
    assert r["members"] == []
    assert env.group().state == STABLE and len(env.log.records) == writes
    assert env.sync(sg.followers[0], sg.gen).r["assignment"] == sg.assignments[sg.followers[0]]


def test_follower_rejoin_with_new_protocol_metadata_rebalances():
    env = Env()
    sg = env.stable_group(2)
    r = env.join(sg.followers[0], topics=("t", "u"))
    assert not r.done and env.group().state == PREPARING_REBALANCE
    env.join(sg.leader)
    assert r.r["generation_id"] == sg.gen + 1


def test_heartbeat_expiry_removes_the_member_and_rebalances():
    env = Env()
    sg = env.stable_group(2)
    dead = sg.followers[0]
    for _ in range(5):  # the leader keeps heartbeating, the follower is silent
        env.timer.advance(SESSION // 2)
        env.heartbeat(sg.leader, sg.gen)
    g = env.group()
    assert dead not in g.members
    assert g.state == PREPARING_REBALANCE
    assert env.heartbeat(sg.leader, sg.gen) == ErrorCode.rebalance_in_progress
    r = env.join(sg.leader)
    assert r.r["generation_id"] == sg.gen + 1 and [m["member_id"] for m in r.r["members"]] == [sg.leader]


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped():
    env = Env()
    sg = env.stable_group(3, rebalance=20_000)
    lead = env.join(sg.leader, rebalance=20_000)
    t0 = env.clock.now
    for _ in range(6):  # everybody heartbeats, only the leader rejoined
        env.timer.advance(3000)
        for m in sg.ids:
            env.heartbeat(m, sg.gen)
    assert not lead.done
    env.timer.advance(t0 + 20_000 - env.clock.now)
    assert lead.r["generation_id"] == sg.gen + 1
    assert list(env.group().members) == [sg.leader]


def test_static_members_that_do_not_rejoin_stay_in_the_group():
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    lead = env.join(sg.leader, instance="i0" if sg.ids[0] == sg.leader else "i1")
    for _ in range(REBALANCE // 5000):  # both heartbeat; only the leader rejoined
        env.timer.advance(5000)
        for i, m in enumerate(sg.ids):
            env.heartbeat(m, sg.gen, instance=f"i{i}")
    assert lead.r["error"] == ErrorCode.none
    assert set(env.group().members) == set(sg.ids)  # KIP-345: static members are kept


def test_pending_sync_expiry_removes_members_that_did_not_sync():
    env = Env()
    replies = [env.join(client_id=f"c{i}", rebalance=15_000) for i in range(3)]
    env.settle(replies)
    gen, leader = replies[0].r["generation_id"], replies[0].r["leader"]
    ids = [r.r["member_id"] for r in replies]
    lazy = ids[2] if ids[2] != leader else ids[1]
    env.sync(leader, gen, assignments={m: b"x" for m in ids})
    for m in ids:
        if m not in (leader, lazy):
            env.sync(m, gen)
    g = env.group()
    assert g.state == STABLE and lazy in g.pending_sync_members
    for _ in range(5):
        env.timer.advance(3000)
        for m in ids:
            env.heartbeat(m, gen)
    assert lazy not in g.members
    assert g.state == PREPARING_REBALANCE


def test_leave_group_batched_by_member_id_and_instance_id():
    env = Env()
    sg = env.stable_group(4, instances=[None, None, "i2", "i3"])
    ids = sg.ids
    err, results = env.shard.leave_group(
        GID, [(ids[1], None), ("", "i2"), ("ghost", None), ("", "nobody"), (ids[0], "i3")]
    )
    assert err == ErrorCode.none
    assert results == [
        (ids[1], None, ErrorCode.none),
        ("", "i2", ErrorCode.none),
        ("ghost", None, ErrorCode.unknown_member_id),
        ("", "nobody", ErrorCode.unknown_member_id),
        (ids[0], "i3", ErrorCode.fenced_instance_id),
    ]
    g = env.group()
    assert set(g.members) == {ids[0], ids[3]} and "i2" not in g.static_members
    assert g.state == PREPARING_REBALANCE
    assert env.shard.leave_group("nope", [(ids[0], None)])[0] == ErrorCode.unknown_member_id


def test_last_members_leaving_make_the_group_empty_and_persist_it():
    env = Env()
    sg = env.stable_group(2)
    start = len(env.log.records)
    env.shard.leave_group(GID, [(m, None) for m in sg.ids])
    g = env.group()
    assert g.state == EMPTY and g.generation_id == sg.gen + 1 and g.protocol_name is None
    ((kv, _k, value),) = env.log.decoded(start)
    assert kv == R.GROUP_METADATA and value["members"] == [] and value["generation"] == sg.gen + 1
    assert value["protocol"] is None and value["leader"] is None


def test_leave_of_a_member_waiting_in_join_answers_it():
    env = Env()
    sg = env.stable_group(2)
    waiting = env.join(sg.leader)
    env.shard.leave_group(GID, [(sg.leader, None)])
    assert waiting.r["error"] == ErrorCode.unknown_member_id


def test_static_member_replacement_in_stable_fences_the_old_id_without_rebalance():
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    old = sg.followers[0]
    inst = "i0" if sg.ids[0] == old else "i1"
    start = len(env.log.records)
    r = env.join(instance=inst).r
    new = r["member_id"]
    assert r["error"] == ErrorCode.none and new != old and r["generation_id"] == sg.gen
    g = env.group()
    assert g.state == STABLE and g.generation_id == sg.gen
    assert g.static_members[inst] == new and old not in g.members
    assert g.members[new].assignment == sg.assignments[old]  # the replacement keeps the assignment
    # the replacement is persisted at once
    ((kv, _k, value),) = env.log.decoded(start)
    assert kv == R.GROUP_METADATA and value["generation"] == sg.gen
    assert {m["member_id"] for m in value["members"]} == {new, sg.leader}
    # the old member id is fenced everywhere
    assert env.heartbeat(old, sg.gen, instance=inst) == ErrorCode.fenced_instance_id
    assert env.sync(old, sg.gen, instance=inst).r["error"] == ErrorCode.fenced_instance_id
    assert env.join(old, instance=inst).r["error"] == ErrorCode.fenced_instance_id
    assert env.commit({("t", 0): 1}, member_id=old, generation=sg.gen, instance=inst) == ErrorCode.fenced_instance_id
    assert env.shard.leave_group(GID, [(old, inst)])[1] == [(old, inst, ErrorCode.fenced_instance_id)]
    assert env.heartbeat(new, sg.gen, instance=inst) == ErrorCode.none
    assert env.sync(new, sg.gen, instance=inst).r["assignment"] == sg.assignments[old]


def test_static_member_replacement_answers_the_old_members_parked_join():
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    parked = env.join(sg.leader, instance="i0" if sg.ids[0] == sg.leader else "i1")
    assert not parked.done
    env.join(instance="i0" if sg.ids[0] == sg.leader else "i1")
    assert parked.r["error"] == ErrorCode.fenced_instance_id


def test_static_leader_rejoin_skips_assignment_when_supported():
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    inst = "i0" if sg.ids[0] == sg.leader else "i1"
    r = env.join(instance=inst, skip=True).r
    assert r["error"] == ErrorCode.none and r["skip_assignment"] is True
    assert r["leader"] == r["member_id"] != sg.leader
    assert {m["member_id"] for m in r["members"]} == {r["member_id"], sg.followers[0]}
    assert env.group().state == STABLE and env.group().generation_id == sg.gen


def test_static_leader_rejoin_without_skip_assignment_is_not_told_it_leads():
    """Before SkipAssignment (JoinGroup < v9) the answer names the leader the group had before
    the replacement, so a restarted static leader acts as a follower (Kafka's
    updateStaticMemberThenRebalanceOrCompleteJoin answers with currentLeader)."""
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    inst = "i0" if sg.ids[0] == sg.leader else "i1"
    r = env.join(instance=inst, skip=False).r
    assert r["error"] == ErrorCode.none and r["skip_assignment"] is False
    assert r["leader"] == sg.leader != r["member_id"]


def test_static_member_rejoin_keeping_the_selected_protocol_does_not_rebalance():
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    r = env.join(instance="i1", protocols=[("roundrobin", sub(["t"])), ("range", sub(["t"]))])
    g = env.group()
    # candidates stay {range}: the selected protocol does not change, no rebalance
    assert r.r["error"] == ErrorCode.none and g.state == STABLE
    r2 = env.join(instance="i1", protocols=[("range", sub(["t", "u"]))])
    assert r2.r["error"] == ErrorCode.none and g.state == STABLE  # new metadata alone: no rebalance either
    assert g.generation_id == sg.gen
    assert g.members[r2.r["member_id"]].metadata("range") == sub(["t", "u"])


def test_static_member_rejoin_changing_the_selected_protocol_rebalances():
    env = Env()
    rr, rg = ("roundrobin", sub(["t"])), ("range", sub(["t"]))
    replies = [
        env.join(instance="i0", protocols=[rr, rg]),
        env.join(instance="i1", protocols=[rg, rr]),
        env.join(instance="i2", protocols=[rg, rr]),
    ]
    env.settle(replies)
    assert {x.r["protocol_name"] for x in replies} == {"range"}  # 2 votes to 1
    gen, leader = replies[0].r["generation_id"], replies[0].r["leader"]
    env.sync(leader, gen)
    for i, x in enumerate(replies):
        if x.r["member_id"] != leader:
            env.sync(x.r["member_id"], gen, instance=f"i{i}")
    g = env.group()
    assert g.state == STABLE
    r = env.join(instance="i2", protocols=[rr, rg])  # now roundrobin would win 2 to 1
    assert not r.done and g.state == PREPARING_REBALANCE


def test_group_max_size():
    env = Env(max_size=2)
    replies = [env.join(client_id=f"c{i}") for i in range(3)]
    assert replies[2].r["error"] == ErrorCode.group_max_size_reached
    env.settle(replies[:2])
    gen = replies[0].r["generation_id"]
    env.sync(replies[0].r["leader"], gen)
    for r in replies[:2]:
        if r.r["member_id"] != replies[0].r["leader"]:
            env.sync(r.r["member_id"], gen)
    assert env.group().state == STABLE
    assert env.join().r["error"] == ErrorCode.group_max_size_reached
    assert len(env.group().members) == 2
    # existing members may still rejoin
    assert not env.join(replies[0].r["leader"]).done


def test_new_group_is_persisted_without_members():
    env = Env()
    env.join(instance="i0")  # a static member (or a JoinGroup < v4) creating the group
    ((kv, _k, value),) = env.log.decoded()
    assert kv == R.GROUP_METADATA
    assert value["members"] == [] and value["leader"] is None and value["generation"] == 0


def test_classic_group_reload_then_rejoin():
    env = Env()
    sg = env.stable_group(2)
    fresh = env.replayed()
    g = fresh.groups[GID]
    assert g.state == STABLE and g.generation_id == sg.gen and g.leader_id == sg.leader
    assert {m: x.assignment for m, x in g.members.items()} == sg.assignments
    # the loaded group serves the members: heartbeats, syncs, and expiry after on_loaded
    clock = ManualClock(env.clock.now)
    timer = FakeTimer(clock)
    fresh.timer, fresh.clock = timer, clock
    fresh.on_loaded()
    timer.advance(SESSION // 2)
    assert fresh.heartbeat(Heartbeat(GID, sg.leader, sg.gen)) == ErrorCode.none
    timer.advance(SESSION // 2)  # the silent follower expires
    assert list(fresh.groups[GID].members) == [sg.leader]
    assert fresh.groups[GID].state == PREPARING_REBALANCE


# ====================================================================== offsets
def test_simple_consumer_commits_to_an_empty_group():
    env = Env()
    assert env.commit({("t", 0): (10, 3, "meta"), ("t", 1): 20}) == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    g = env.group()
    assert isinstance(g, ClassicGroup) and g.state == EMPTY
    err, offs = env.shard.fetch_offsets(GID, [("t", [0, 1, 2])])
    assert err == ErrorCode.none and offs[("t", 2)] is None
    assert (offs[("t", 0)].offset, offs[("t", 0)].leader_epoch, offs[("t", 0)].metadata) == (10, 3, "meta")
    assert offs[("t", 0)].commit_timestamp == env.clock.now
    kinds = [kv for kv, _k, _v in env.log.decoded()]
    assert kinds == [R.OFFSET_COMMIT, R.OFFSET_COMMIT]
    assert env.log.decoded()[0][2]["_version"] == 3


def test_commit_with_retention_writes_v1_and_expires_at_the_expire_timestamp():
    env = Env()
    env.commit({("t", 0): 1}, retention_ms=5000)
    ((_kv, _k, v),) = env.log.decoded()
    assert v["_version"] == 1 and v["expire_timestamp"] == env.clock.now + 5000
    env.timer.advance(4999)
    env.expire_offsets()
    assert env.committed() == {("t", 0): 1}
    env.timer.advance(1)
    env.expire_offsets()
    assert env.committed() == {}


def test_commit_validation_for_classic_groups():
    env = Env()
    sg = env.stable_group(2, instances=[None, "i1"])
    ok = {("t", 0): ErrorCode.none}
    m0 = sg.ids[0]
    assert env.commit({("t", 0): 5}, member_id=m0, generation=sg.gen) == ok
    assert env.commit({("t", 0): 5}, member_id=m0, generation=sg.gen + 1) == ErrorCode.illegal_generation
    assert env.commit({("t", 0): 5}, member_id="ghost", generation=sg.gen) == ErrorCode.unknown_member_id
    # an admin / simple-consumer commit (generation -1, no member id) only to Empty groups
    assert env.commit({("t", 0): 5}) == ErrorCode.unknown_member_id
    assert (
        env.commit({("t", 0): 5}, member_id=sg.ids[1], generation=sg.gen, instance="wrong")
        == ErrorCode.unknown_member_id
    )
    # PreparingRebalance: members with the current generation may still commit
    env.join(sg.leader)
    assert env.group().state == PREPARING_REBALANCE
    assert env.commit({("t", 0): 6}, member_id=m0, generation=sg.gen) == ok
    # CompletingRebalance: REBALANCE_IN_PROGRESS for the new generation
    for m in sg.ids:
        if m != sg.leader:
            env.join(m, instance="i1" if m == sg.ids[1] else None)
    g = env.group()
    assert g.state == COMPLETING_REBALANCE
    assert env.commit({("t", 0): 7}, member_id=m0, generation=g.generation_id) == ErrorCode.rebalance_in_progress
    assert env.committed() == {("t", 0): 6}


def test_commit_to_a_missing_group_with_a_generation():
    env = Env()
    assert env.commit({("t", 0): 1}, member_id="m", generation=3, api_version=8) == ErrorCode.illegal_generation
    assert env.group() is None and env.log.records == []


def test_commit_v9_to_a_missing_group_is_group_id_not_found():
    env = Env()
    assert env.commit({("t", 0): 1}, member_id="m", generation=3, api_version=9) == ErrorCode.group_id_not_found


def test_commit_generation_minus_one_with_member_id_to_a_missing_group_is_accepted():
    env = Env()
    assert env.commit({("t", 0): 1}, member_id="some-consumer", generation=-1) == {("t", 0): ErrorCode.none}


def test_offset_metadata_size_limit_is_per_partition():
    env = Env(offset_metadata_max_bytes=10)
    res = env.commit({("t", 0): (1, -1, "x" * 10), ("t", 1): (2, -1, "x" * 11), ("t", 2): (3, -1, "é" * 6)})
    assert res == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.offset_metadata_too_large,
        ("t", 2): ErrorCode.offset_metadata_too_large,
    }
    assert env.committed() == {("t", 0): 1}


def test_commit_keeps_the_last_offset_and_round_trips_leader_epoch_and_metadata():
    env = Env()
    env.commit({("t", 0): (1, 5, "a")})
    env.timer.advance(10)
    env.commit({("t", 0): (2, 6, "b")})
    fresh = env.replayed()
    om = fresh.offsets[GID][("t", 0)]
    assert (om.offset, om.leader_epoch, om.metadata, om.commit_timestamp) == (2, 6, "b", env.clock.now)


def test_offset_commit_from_a_member_keeps_its_session_alive():
    env = Env()
    sg = env.stable_group(2)
    m = sg.followers[0]
    for _ in range(6):
        env.timer.advance(SESSION // 2)
        env.heartbeat(sg.leader, sg.gen)
        assert env.commit({("t", 0): 1}, member_id=m, generation=sg.gen) == {("t", 0): ErrorCode.none}
    assert m in env.group().members


def test_fetch_offsets_all_and_by_partition():
    env = Env()
    env.commit({("a", 0): 1, ("b", 3): 4})
    assert env.committed() == {("a", 0): 1, ("b", 3): 4}
    err, offs = env.shard.fetch_offsets(GID, [("a", [0, 1])])
    assert err == ErrorCode.none and offs[("a", 0)].offset == 1 and offs[("a", 1)] is None
    assert env.shard.fetch_offsets("nobody", None) == (ErrorCode.none, {})


def test_delete_group():
    env = Env()
    sg = env.stable_group(1)
    env.commit({("t", 0): 1}, member_id=sg.leader, generation=sg.gen)
    assert env.delete_group(GID) == ErrorCode.non_empty_group
    assert env.delete_group("nope") == ErrorCode.group_id_not_found
    env.shard.leave_group(GID, [(sg.leader, None)])
    start = len(env.log.records)
    assert env.delete_group(GID) == ErrorCode.none
    assert env.group() is None and env.shard.offsets.get(GID) is None
    recs = env.log.decoded(start)
    assert [(kv, v) for kv, _k, v in recs] == [(R.OFFSET_COMMIT, None), (R.GROUP_METADATA, None)]
    fresh = env.replayed()
    assert GID not in fresh.groups and GID not in fresh.offsets


def test_delete_group_in_every_non_empty_state():
    env = Env()
    replies = [env.join()]
    assert env.group().state == PREPARING_REBALANCE
    assert env.delete_group(GID) == ErrorCode.non_empty_group
    env.settle(replies)
    assert env.group().state == COMPLETING_REBALANCE
    assert env.delete_group(GID) == ErrorCode.non_empty_group


def test_offset_delete():
    env = Env()
    sg = env.stable_group(2, topics=("t",))
    env.commit({("t", 0): 1, ("u", 0): 2, ("u", 1): 3}, member_id=sg.leader, generation=sg.gen)
    err, res = env.delete_offsets(GID, {"t": [0], "u": [0, 7]})
    assert err == ErrorCode.none
    assert res == {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none, ("u", 7): ErrorCode.none}
    assert env.committed() == {("t", 0): 1, ("u", 1): 3}
    assert env.log.decoded()[-1][1:] == ({"group": GID, "topic": "u", "partition": 0}, None)
    assert env.delete_offsets("nope", {"t": [0]}) == (ErrorCode.group_id_not_found, {})
    # once the group is empty, its offsets of any topic can go
    env.shard.leave_group(GID, [(m, None) for m in sg.ids])
    assert env.delete_offsets(GID, {"t": [0]}) == (ErrorCode.none, {("t", 0): ErrorCode.none})
    assert env.committed() == {("u", 1): 3}


def test_offset_delete_on_a_non_consumer_group_with_members_is_non_empty_group():
    env = Env()
    env.stable_group(1, protocol_type="connect", protocols=[("default", b"x")])
    assert env.delete_offsets(GID, {"t": [0]}) == (ErrorCode.non_empty_group, {})


def test_offset_delete_when_subscriptions_are_unknown_keeps_offsets():
    env = Env()
    sg = env.stable_group(1, protocols=[("range", b"not a subscription")])
    env.commit({("t", 0): 1}, member_id=sg.leader, generation=sg.gen)
    assert env.delete_offsets(GID, {"t": [0]}) == (ErrorCode.none, {("t", 0): ErrorCode.group_subscribed_to_topic})


def test_offsets_of_an_empty_group_expire_retention_after_it_became_empty():
    retention = 60_000
    env = Env(offsets_retention_ms=retention)
    sg = env.stable_group(1)
    env.commit({("t", 0): 1}, member_id=sg.leader, generation=sg.gen)
    for _ in range(2 * retention // 5000):  # committed long ago, but the group still has a member
        env.timer.advance(5000)
        env.heartbeat(sg.leader, sg.gen)
    env.expire_offsets()
    assert env.committed() == {("t", 0): 1}
    env.shard.leave_group(GID, [(sg.leader, None)])
    env.timer.advance(retention - 1)
    assert env.expire_offsets() == 0
    assert env.committed() == {("t", 0): 1}
    env.timer.advance(1)
    env.expire_offsets()
    # every offset expired and the group is empty: the group goes too
    assert env.group() is None
    fresh = env.replayed()
    assert GID not in fresh.groups and GID not in fresh.offsets


def test_offsets_of_a_simple_group_expire_retention_after_their_commit():
    env = Env(offsets_retention_ms=1000)
    env.commit({("t", 0): 1})
    env.timer.advance(500)
    env.commit({("t", 1): 2})
    env.timer.advance(500)
    env.expire_offsets()
    assert env.committed() == {("t", 1): 2}
    env.timer.advance(500)
    env.expire_offsets()
    assert env.group() is None


def test_offsets_of_unsubscribed_topics_expire_in_a_stable_group():
    env = Env(offsets_retention_ms=1000)
    sg = env.stable_group(1, topics=("t",))
    env.commit({("t", 0): 1, ("old", 0): 2}, member_id=sg.leader, generation=sg.gen)
    env.timer.advance(500)
    env.heartbeat(sg.leader, sg.gen)
    env.timer.advance(500)
    env.heartbeat(sg.leader, sg.gen)
    env.expire_offsets()
    assert env.committed() == {("t", 0): 1}


def test_list_groups():
    env = Env(topics={"t": 2})
    env.stable_group(1)
    env.commit({("t", 0): 1}, gid="simple")
    env.chb("m1", 0, gid="kip848", names=["t"])
    assert sorted(env.shard.list_groups()) == [
        ("g", "consumer", "Stable", "classic"),
        ("kip848", "consumer", "Stable", "consumer"),
        ("simple", "", "Empty", "classic"),
    ]


# ====================================================================== write failures
def test_failed_offset_commit_changes_nothing():
    env = Env()
    env.commit({("t", 0): 1})
    env.log.fail = True
    with pytest.raises(WriteFailed):
        env.commit({("t", 0): 2, ("t", 1): 3})
    assert env.committed() == {("t", 0): 1}


def test_an_offset_operation_only_reads_the_state_and_its_records_change_it_when_replayed():
    """Kafka's CoordinatorRuntime shape: an operation returns records and a response; nothing
    changes until the runtime has appended the records and replayed them into the shard."""
    env = Env()
    result = env.shard.commit_offsets(OffsetCommit(GID, {"t": [OffsetCommitPartition(0, 7)]}))
    assert result.response == {("t", 0): ErrorCode.none} and len(result.records) == 1
    assert env.group() is None and env.shard.offsets == {} and env.log.records == []
    env.run(result)
    assert env.committed() == {("t", 0): 7} and isinstance(env.group(), ClassicGroup)
    assert env.log.records == result.records
    deleted = env.shard.delete_offsets(OffsetDelete(GID, {"t": [0, 1]}))
    assert deleted.response == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    assert env.committed() == {("t", 0): 7}
    deletion = env.shard.delete_group(GID)
    assert env.group() is not None
    env.run(deleted)
    env.run(deletion)
    assert env.group() is None and env.committed() == {}


def test_a_transactional_offset_commit_is_pending_once_replayed_and_committed_by_its_marker():
    env = Env()
    result = env.shard.commit_txn_offsets(TxnOffsetCommit(GID, 42, 3, {"t": [OffsetCommitPartition(0, 9)]}))
    assert (result.producer_id, result.producer_epoch, result.response) == (42, 3, {("t", 0): ErrorCode.none})
    assert env.shard.pending_txn_offsets == {}
    env.run(result)
    assert env.shard.has_pending_txn_offset(GID, ("t", 0)) and env.committed() == {}
    env.shard.replay_end_txn(42, True)
    assert env.committed() == {("t", 0): 9} and not env.shard.has_pending_txn_offset(GID, ("t", 0))


@pytest.mark.parametrize("expire", [-1, 5000])
def test_an_offset_record_carries_exactly_what_replay_would_decode(expire):
    """A record just written is replayed from the form it was built from (no decode): that form
    must be what decoding its bytes gives, for both value versions Kafka writes (v3; v1 when an
    expire timestamp is asked for, which has no leader epoch)."""
    record = R.offset_commit("g", "t", 3, 42, 7, "meta", 1234, expire)
    key, value = record
    version, k = R.decode_key(key)
    assert record.decoded == (version, k, R.decode_value(version, value))


def test_failed_delete_group_changes_nothing():
    env = Env()
    env.commit({("t", 0): 1})
    env.log.fail = True
    with pytest.raises(WriteFailed):
        env.delete_group(GID)
    assert env.group() is not None and env.committed() == {("t", 0): 1}


def test_failed_static_member_replacement_keeps_the_old_member():
    env = Env()
    sg = env.stable_group(2, instances=["i0", "i1"])
    before = classic_view(env.group())
    env.log.fail = True
    r = Reply()
    env.shard.join_group(
        JoinGroup(GID, "", "consumer", [("range", sub(["t"]))], SESSION, REBALANCE, "i1", "c", "/h"), r
    )
    # the joiner is told why (a storage failure: NOT_COORDINATOR, as Kafka's
    # appendGroupMetadataErrorToResponseError), and is not given the member's place
    assert r.done and r.r["error"] == ErrorCode.not_coordinator and r.r["member_id"] == ""
    assert classic_view(env.group()) == before
    assert env.heartbeat(sg.ids[1], sg.gen, instance="i1") == ErrorCode.none


def test_failed_leader_sync_answers_the_waiting_members_and_rebalances():
    env = Env()
    replies = [env.join(client_id=f"c{i}") for i in range(2)]
    env.settle(replies)
    gen, leader = replies[0].r["generation_id"], replies[0].r["leader"]
    follower = next(r.r["member_id"] for r in replies if r.r["member_id"] != leader)
    waiting = env.sync(follower, gen)
    env.log.fail = True
    lr = Reply()
    env.shard.sync_group(SyncGroup(GID, leader, gen, assignments={}), lr)
    # the leader and the waiting follower are both told why, with no assignment
    for reply in (lr, waiting):
        assert reply.done and reply.r["error"] == ErrorCode.not_coordinator and reply.r["assignment"] == b""
    assert env.group().state == PREPARING_REBALANCE


def test_failed_consumer_group_join_leaves_no_trace():
    env = Env(topics={"t": 2})
    env.log.fail = True
    r = env.chb("m1", 0, names=["t"])
    # the member is told why (NOT_COORDINATOR for a storage failure, as Kafka's
    # handleOperationException), with no member epoch nor assignment
    assert (r["error"], r["member_epoch"], r["assignment"]) == (ErrorCode.not_coordinator, -1, None)
    assert env.group() is None


def test_failed_consumer_heartbeats_leave_the_group_as_it_was():
    """A heartbeat changes the group only by replaying the records it appended: one whose append
    fails (a join, a subscription change, a static or a dynamic leave, a session expiry) leaves
    the group exactly as it was, and the same heartbeat succeeds once the log takes it."""
    env = Env(topics={"t": 4, "u": 2})
    a = env.chb("A", 0, names=["t"])
    b = env.chb("B", 0, names=["t"], instance="ib")
    env.chb("A", a["member_epoch"], owned=env.owned(a))
    before = consumer_view(env.group())
    env.log.fail = True
    attempts = [
        lambda: env.chb("C", 0, names=["t", "u"]),
        lambda: env.chb("A", a["member_epoch"], names=["t", "u"], owned=env.owned(a)),
        lambda: env.chb("B", -2, instance="ib"),
        lambda: env.chb("A", -1),
    ]
    for attempt in attempts:
        r = attempt()
        assert (r["error"], r["member_epoch"]) == (ErrorCode.not_coordinator, -1)
        assert consumer_view(env.group()) == before
    with pytest.raises(WriteFailed):
        env.timer.advance(env.config.consumer_session_timeout_ms)  # B's session expires: its removal fails
    assert consumer_view(env.group()) == before
    env.log.fail = False
    r = env.chb("C", 0, names=["t", "u"])
    assert r["error"] == ErrorCode.none and "C" in env.group().members and env.group().group_epoch > before[1]
    assert b["error"] == ErrorCode.none


# ====================================================================== KIP-848
def test_consumer_heartbeat_request_validation():
    env = Env(topics={"t": 1})
    t = env.image.tid("t")
    cases = [  # (member id, epoch, other fields, error)
        ("m", 0, {"gid": "", "names": ["t"]}, ErrorCode.invalid_request),
        ("m", 0, {"names": ["t"], "instance": ""}, ErrorCode.invalid_request),
        ("m", 0, {"names": ["t"], "rack": ""}, ErrorCode.invalid_request),
        ("m", 0, {"names": ["t"], "rebalance": -1}, ErrorCode.invalid_request),
        ("m", 0, {"names": ["t"], "owned": {t: {0}}}, ErrorCode.invalid_request),
        ("m", 0, {}, ErrorCode.invalid_request),  # neither topic names nor a regex
        ("", 0, {"names": ["t"]}, ErrorCode.invalid_request),  # v1: the client picks its member id
        ("", 3, {}, ErrorCode.invalid_request),
        ("", -1, {}, ErrorCode.invalid_request),
        ("m", -2, {}, ErrorCode.invalid_request),  # a static leave without an instance id
        ("m", -3, {}, ErrorCode.invalid_request),
        ("m", 0, {"names": ["t"], "assignor": "sticky"}, ErrorCode.unsupported_assignor),
        ("m", 0, {"regex": "t["}, ErrorCode.invalid_regular_expression),
        ("m", 5, {"names": ["t"]}, ErrorCode.group_id_not_found),
    ]
    for member_id, epoch, kw, err in cases:
        r = env.chb(member_id, epoch, **kw)
        assert r["error"] == err, (member_id, epoch, kw, r)
    assert env.log.records == [] and env.shard.groups == {}
    # v0: the coordinator generates the member id
    r = env.chb("", 0, names=["t"], version=0)
    assert r["error"] == ErrorCode.none and r["member_id"]
    # owned partitions must be an empty list (not null) when joining
    req = ConsumerGroupHeartbeat(
        "x", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], topic_partitions=None
    )
    assert consumer_group_heartbeat(env.shard, req, 1)["error"] == ErrorCode.invalid_request


def test_first_member_gets_the_whole_target_assignment():
    env = Env(topics={"t": 3, "u": 2})
    t, u = env.image.tid("t"), env.image.tid("u")
    r = env.chb("m1", 0, names=["t", "u"])
    assert r["error"] == ErrorCode.none and r["member_epoch"] == 1
    assert env.owned(r) == {t: {0, 1, 2}, u: {0, 1}}
    assert r["heartbeat_interval_ms"] == env.config.consumer_heartbeat_interval_ms
    g = env.group()
    assert g.group_epoch == g.assignment_epoch == 1 and g.state_name() == "Stable"
    m = g.members["m1"]
    assert m.state == MEMBER_STABLE and m.member_epoch == 1 and m.subscribed_topic_names == ["t", "u"]
    # an unchanged heartbeat writes nothing and sends no assignment
    writes = len(env.log.records)
    r2 = env.chb("m1", 1, owned=env.owned(r))
    assert r2["error"] == ErrorCode.none and r2["member_epoch"] == 1 and r2["assignment"] is None
    assert len(env.log.records) == writes


def test_revocation_before_assignment():
    env = Env(topics={"t": 4})
    t = env.image.tid("t")
    a = env.chb("A", 0, names=["t"])
    assert env.owned(a) == {t: {0, 1, 2, 3}}
    b = env.chb("B", 0, names=["t"])
    g = env.group()
    assert g.group_epoch == 2 and b["member_epoch"] == 2
    assert tp_set(g.target["A"]) | tp_set(g.target["B"]) == tp_set({t: {0, 1, 2, 3}})
    b_target = g.target["B"][t]
    assert len(b_target) == 2 and tp_set(g.target["A"]).isdisjoint(tp_set(g.target["B"]))
    # B may not have the partitions A still owns
    assert env.owned(b) == {} and g.members["B"].state == UNRELEASED_PARTITIONS
    # A is asked to revoke: it stays at epoch 1 until it no longer reports them
    a2 = env.chb("A", 1, owned={t: {0, 1, 2, 3}})
    assert a2["member_epoch"] == 1 and env.owned(a2) == {t: {0, 1, 2, 3} - b_target}
    ma = g.members["A"]
    assert ma.state == UNREVOKED_PARTITIONS and ma.pending_revocation == {t: b_target}
    a3 = env.chb("A", 1, owned={t: {0, 1, 2, 3}})  # still owns them: no progress
    assert a3["member_epoch"] == 1 and ma.state == UNREVOKED_PARTITIONS
    b2 = env.chb("B", 2, owned={})
    assert not env.owned(b2)
    assert g.members["B"].assigned == {}
    # A releases: it moves to epoch 2, Stable
    a4 = env.chb("A", 1, owned={t: {0, 1, 2, 3} - b_target})
    assert a4["member_epoch"] == 2 and ma.state == MEMBER_STABLE and ma.pending_revocation == {}
    # now B gets them
    b3 = env.chb("B", 2, owned={})
    assert env.owned(b3) == {t: b_target} and g.members["B"].state == MEMBER_STABLE
    assert g.state_name() == "Stable"


def test_member_epoch_fencing():
    env = Env(topics={"t": 2})
    t = env.image.tid("t")
    env.chb("A", 0, names=["t"])
    env.chb("B", 0, names=["t"])
    g = env.group()
    a = env.chb("A", 1, owned={t: {0, 1}})  # asked to revoke one partition
    kept = env.owned(a)
    assert len(kept[t]) == 1
    a = env.chb("A", 1, owned=kept)  # revoked: moves to the group epoch
    m = g.members["A"]
    assert a["member_epoch"] == m.member_epoch == 2 and m.previous_member_epoch == 1
    # a greater epoch is always fenced
    assert env.chb("A", 3, owned=kept)["error"] == ErrorCode.fenced_member_epoch
    # the previous epoch is accepted when the owned partitions are a subset of the assignment
    # (the response carrying the bump may have been lost) ...
    assert env.chb("A", 1, owned=kept)["error"] == ErrorCode.none
    # ... but not with partitions outside the assignment, nor without owned partitions
    assert env.chb("A", 1, owned={t: {0, 1}})["error"] == ErrorCode.fenced_member_epoch
    assert env.chb("A", 1, owned=None)["error"] == ErrorCode.fenced_member_epoch
    assert env.chb("B", 7, owned={})["error"] == ErrorCode.fenced_member_epoch
    assert env.chb("nobody", 1, owned={})["error"] == ErrorCode.unknown_member_id
    # errors write nothing
    writes = len(env.log.records)
    env.chb("A", 9, owned={})
    assert len(env.log.records) == writes


def test_previous_epoch_is_the_epoch_before_the_last_reconciliation():
    env = Env(topics={"t": 6})
    t = env.image.tid("t")
    a = env.chb("A", 0, names=["t"])
    env.chb("B", 0, names=["t"])
    a = env.chb("A", 1, owned=env.owned(a))  # revoke for B
    a = env.chb("A", 1, owned=env.owned(a))  # -> epoch 2, previous 1
    g = env.group()
    assert g.members["A"].member_epoch == 2 and g.members["A"].previous_member_epoch == 1
    env.chb("C", 0, names=["t"])  # epoch 3: A must revoke again
    a = env.chb("A", 2, owned={t: set(g.members["A"].assigned[t])})
    m = g.members["A"]
    assert m.state == UNREVOKED_PARTITIONS and m.member_epoch == 2
    assert m.previous_member_epoch == 2
    # a heartbeat from epoch 1 is now stale
    assert env.chb("A", 1, owned={t: set(m.assigned[t])})["error"] == ErrorCode.fenced_member_epoch


def test_leave_bumps_the_epoch_and_writes_tombstones():
    env = Env(topics={"t": 2})
    env.chb("A", 0, names=["t"])
    env.chb("B", 0, names=["t"])
    g = env.group()
    epoch = g.group_epoch
    start = len(env.log.records)
    r = env.chb("B", -1)
    assert r["error"] == ErrorCode.none and r["member_epoch"] == -1
    assert "B" not in g.members and "B" not in g.target and g.group_epoch == epoch + 1
    recs = [(kv, k.get("member_id"), v) for kv, k, v in env.log.decoded(start)]
    assert (R.CONSUMER_GROUP_MEMBER_METADATA, "B", None) in recs
    assert (R.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "B", None) in recs
    assert (R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, "B", None) in recs
    assert env.chb("B", -1)["error"] == ErrorCode.unknown_member_id
    # A gets everything on its next heartbeat
    a = env.chb("A", g.members["A"].member_epoch, owned={})
    assert tp_set(g.target["A"]) == tp_set({env.image.tid("t"): {0, 1}})
    assert a["error"] == ErrorCode.none


def test_static_leave_then_rejoin_takes_over_the_assignment_without_a_rebalance():
    env = Env(topics={"t": 4})
    t = env.image.tid("t")
    env.chb("A", 0, names=["t"], instance="ia")
    b = env.chb("B", 0, names=["t"], instance="ib")
    a = env.chb("A", 1, owned={t: {0, 1, 2, 3}}, instance="ia")
    a = env.chb("A", 1, owned=env.owned(a), instance="ia")
    b = env.chb("B", 2, owned={}, instance="ib")
    g = env.group()
    assert g.state_name() == "Stable"
    a_parts = g.members["A"].assigned
    epoch = g.group_epoch
    r = env.chb("A", -2, instance="ia")
    assert r["error"] == ErrorCode.none and r["member_epoch"] == -2
    assert g.members["A"].member_epoch == -2 and g.group_epoch == epoch  # kept, no bump
    # its partitions are not handed to B meanwhile
    assert env.chb("B", 2, owned=env.owned(b) or {}, instance="ib")["error"] == ErrorCode.none
    assert tp_set(g.members["B"].assigned).isdisjoint(tp_set(a_parts))
    # the restarted instance comes back with a new member id
    r = env.chb("A2", 0, names=["t"], instance="ia")
    assert r["error"] == ErrorCode.none and env.owned(r) == a_parts
    assert g.group_epoch == epoch and "A" not in g.members and g.static_members["ia"] == "A2"
    assert tp_set(g.target["A2"]) == tp_set(a_parts) and "A" not in g.target
    fresh = env.replayed()
    assert consumer_view(fresh.groups[GID]) == consumer_view(g)


def test_unreleased_instance_id():
    env = Env(topics={"t": 1})
    env.chb("A", 0, names=["t"], instance="i")
    r = env.chb("A2", 0, names=["t"], instance="i")
    assert r["error"] == ErrorCode.unreleased_instance_id
    assert set(env.group().members) == {"A"}


def test_heartbeat_of_a_replaced_static_member_is_fenced_instance_id():
    env = Env(topics={"t": 1})
    env.chb("A", 0, names=["t"], instance="i")
    env.chb("A", -2, instance="i")
    env.chb("A2", 0, names=["t"], instance="i")
    assert env.chb("A", 1, owned={}, instance="i")["error"] == ErrorCode.fenced_instance_id


def test_static_leave_releases_partitions_pending_revocation():
    env = Env(topics={"t": 2})
    t = env.image.tid("t")
    env.chb("A", 0, names=["t"], instance="ia")
    env.chb("B", 0, names=["t"])
    env.chb("A", 1, owned={t: {0, 1}}, instance="ia")  # A must revoke one partition
    g = env.group()
    assert g.members["A"].state == UNREVOKED_PARTITIONS
    pending = g.members["A"].pending_revocation
    env.chb("A", -2, instance="ia")
    b = env.chb("B", 2, owned={})
    assert env.owned(b) == pending


def test_session_timeout_removes_the_member():
    env = Env(topics={"t": 2}, consumer_session_timeout_ms=45_000)
    env.chb("A", 0, names=["t"])
    env.chb("B", 0, names=["t"])
    g = env.group()
    epoch = g.group_epoch
    for _ in range(10):  # A heartbeats, B is silent
        env.timer.advance(10_000)
        env.chb("A", g.members["A"].member_epoch, owned={t: set(p) for t, p in g.members["A"].assigned.items()})
    assert "B" not in g.members and g.group_epoch > epoch
    assert tp_set(g.members["A"].assigned) == tp_set({env.image.tid("t"): {0, 1}})


def test_a_groups_own_session_timeout_and_heartbeat_interval_win_over_the_brokers():
    own = {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "7000"}
    env = Env(
        topics={"t": 1},
        group_configs={GID: own},
        consumer_session_timeout_ms=45_000,
        consumer_heartbeat_interval_ms=5000,
    )
    assert env.chb("A", 0, names=["t"])["heartbeat_interval_ms"] == 7000
    assert env.chb("B", 0, "other", names=["t"])["heartbeat_interval_ms"] == 5000  # the broker's
    env.timer.advance(45_000)
    assert "B" not in env.shard.groups["other"].members  # group.consumer.session.timeout.ms
    assert "A" in env.group().members
    env.timer.advance(5_000)
    assert "A" not in env.group().members  # the group's consumer.session.timeout.ms


def test_member_that_never_revokes_is_fenced_after_its_rebalance_timeout():
    env = Env(topics={"t": 2}, consumer_session_timeout_ms=45_000)
    t = env.image.tid("t")
    env.chb("A", 0, names=["t"], rebalance=20_000)
    env.chb("B", 0, names=["t"], rebalance=20_000)
    env.chb("A", 1, owned={t: {0, 1}})
    g = env.group()
    assert g.members["A"].state == UNREVOKED_PARTITIONS
    for _ in range(6):  # 30 s of heartbeats that still claim the revoked partition
        env.timer.advance(5000)
        if "A" in g.members:
            env.chb("A", 1, owned={t: {0, 1}})
        env.chb("B", g.members["B"].member_epoch, owned={})
    assert "A" not in g.members


def test_member_that_never_revokes_and_is_silent_is_fenced_after_its_rebalance_timeout():
    env = Env(topics={"t": 2}, consumer_session_timeout_ms=45_000)
    t = env.image.tid("t")
    env.chb("A", 0, names=["t"], rebalance=20_000)
    env.chb("B", 0, names=["t"], rebalance=20_000)
    env.chb("A", 1, owned={t: {0, 1}})
    g = env.group()
    assert g.members["A"].state == UNREVOKED_PARTITIONS
    env.timer.advance(20_000)
    assert "A" not in g.members


def test_consumer_group_max_size():
    env = Env(topics={"t": 1}, consumer_max_size=1)
    env.chb("A", 0, names=["t"])
    assert env.chb("B", 0, names=["t"])["error"] == ErrorCode.group_max_size_reached
    assert env.chb("A", 1, owned={env.image.tid("t"): {0}})["error"] == ErrorCode.none


def test_regex_subscription():
    env = Env(topics={"orders-1": 1, "orders-2": 1, "payments": 1, "__internal": 1})
    r = env.chb("A", 0, regex="orders-.*")
    assert r["error"] == ErrorCode.none
    assert env.owned(r) == {env.image.tid("orders-1"): {0}, env.image.tid("orders-2"): {0}}
    epoch = env.group().group_epoch
    env.image.set_topic("orders-3", 2)  # a new matching topic bumps the epoch on the next heartbeat
    r = env.chb("A", r["member_epoch"], owned=env.owned(r))
    assert env.group().group_epoch == epoch + 1
    assert env.image.tid("orders-3") in env.owned(r)
    # the regex is persisted
    fresh = env.replayed()
    assert fresh.groups[GID].members["A"].subscribed_topic_regex == "orders-.*"


def test_a_regex_resolves_with_an_authorizer_to_the_topics_the_member_may_describe():
    """Kafka 4.4's TopicRegexResolver: with an authorizer (the handler's ``describable``), a regex
    resolves to the matching topics the heartbeating member may DESCRIBE, kept as a
    ConsumerGroupRegularExpression record (replayed at load, a tombstone with the group) and
    resolved again once the metadata (the ACLs among it) has changed."""
    env = Env(topics={"orders-1": 1, "orders-2": 1, "payments": 1})
    env.image.offset = 10
    allowed = {"orders-1", "payments"}

    def describable(names):
        return set(names) & allowed

    r = env.chb("A", 0, regex="orders-.*", describable=describable)
    assert env.owned(r) == {env.image.tid("orders-1"): {0}}
    assert env.group().resolved_regex == {"orders-.*": (frozenset({"orders-1"}), 10)}
    assert R.decode_key(R.regex_key(GID, "orders-.*")) == (16, {"group": GID, "regular_expression": "orders-.*"})
    written = [R.decode_value(16, v) for k, v in env.log.records if k == R.regex_key(GID, "orders-.*")]
    assert [(w["topics"], w["version"]) for w in written] == [(["orders-1"], 10)]
    assert env.replayed().groups[GID].resolved_regex == env.group().resolved_regex
    # the same metadata: not resolved again, whatever the next member may describe
    allowed.add("orders-2")
    owned = env.owned(r)
    r = env.chb("A", r["member_epoch"], owned=owned, describable=describable)
    assert r["assignment"] is None and env.group().members["A"].assigned == owned
    # the metadata moved on (an ACL record): resolved again at the next heartbeat
    env.image.offset = 11
    r = env.chb("A", r["member_epoch"], owned=owned, describable=describable)
    assert env.owned(r) == {env.image.tid("orders-1"): {0}, env.image.tid("orders-2"): {0}}
    # the group deleted: its regex record goes with it
    env.chb("A", -1)
    assert R.regex_key(GID, "orders-.*") in {k for k, v in env.shard._group_tombstones(GID) if v is None}


def test_subscription_change_and_partition_growth_bump_the_group_epoch():
    env = Env(topics={"t": 1, "u": 1})
    r = env.chb("A", 0, names=["t"])
    g = env.group()
    assert g.group_epoch == 1
    r = env.chb("A", 1, owned=env.owned(r), names=["t", "u"])
    assert g.group_epoch == 2 and env.image.tid("u") in env.owned(r)
    env.image.set_topic("t", 3)
    r = env.chb("A", 2, owned=env.owned(r))
    assert g.group_epoch == 3 and env.owned(r)[env.image.tid("t")] == {0, 1, 2}


def test_no_rebalance_after_the_coordinator_reloads_a_consumer_group():
    """Kafka persists the subscription metadata the group epoch was computed with
    (ConsumerGroupPartitionMetadataValue), so a heartbeat after a failover finds it unchanged."""
    env = Env(topics={"t": 2})
    r = env.chb("A", 0, names=["t"])
    epoch = env.group().group_epoch
    fresh = env.replayed()
    fresh.on_loaded()
    env.shard = fresh
    r = env.chb("A", r["member_epoch"], owned=env.owned(r))
    assert r["error"] == ErrorCode.none and env.group().group_epoch == epoch


def test_consumer_group_commit_and_fetch_validation():
    env = Env(topics={"t": 1})
    r = env.chb("A", 0, names=["t"])
    epoch = r["member_epoch"]
    assert env.commit({("t", 0): 1}, member_id="A", generation=epoch, api_version=9) == {("t", 0): ErrorCode.none}
    assert env.commit({("t", 0): 1}, member_id="A", generation=epoch + 1, api_version=9) == ErrorCode.stale_member_epoch
    assert env.commit({("t", 0): 1}, member_id="B", generation=epoch, api_version=9) == ErrorCode.unknown_member_id
    assert env.commit({("t", 0): 1}) == ErrorCode.unknown_member_id
    assert env.shard.fetch_offsets(GID, None, "A", epoch)[0] == ErrorCode.none
    assert env.shard.fetch_offsets(GID, None, "A", epoch - 1)[0] == ErrorCode.stale_member_epoch
    assert env.shard.fetch_offsets(GID, None, "B", epoch)[0] == ErrorCode.unknown_member_id
    assert env.shard.fetch_offsets(GID, None, "", -1)[0] == ErrorCode.none


def test_a_commit_at_the_previous_member_epoch_is_accepted_for_partitions_the_member_had_then():
    """KIP-1251 (Kafka 4.4): a member commits with the epoch it knows while the coordinator has
    moved it on (the heartbeat answer with its next epoch still in flight). The partitions it had
    at that epoch may be committed; one assigned at a later epoch may not, nor a newer epoch.
    Refusing the first is what ended a Java consumer's thread (CommitFailedException) in
    test_oracle_java_clients' group scenario, leaving the group unbalanced ([2, 4])."""
    env = Env(topics={"t": 4})
    t = env.image.tid("t")
    a = env.chb("A", 0, names=["t"])  # A: epoch 1, all four partitions
    env.chb("B", 0, names=["t"])  # group epoch 2: A must give two to B
    a = env.chb("A", 1, owned=env.owned(a))  # A asked to revoke, still at epoch 1
    kept = env.owned(a)
    a = env.chb("A", 1, owned=kept)  # revoked: A moves to epoch 2
    assert a["member_epoch"] == 2
    m = env.group().members["A"]
    assert all(m.epochs[(t, p)] == 1 for p in kept[t])  # assigned at epoch 1, kept since
    mine = sorted(kept[t])
    assert env.commit({("t", p): 5 for p in mine}, member_id="A", generation=1, api_version=9) == {
        ("t", p): ErrorCode.none for p in mine
    }
    assert env.commit({("t", mine[0]): 6}, member_id="A", generation=3, api_version=9) == ErrorCode.stale_member_epoch
    # B's partitions were assigned to B at epoch 2: an epoch-1 commit of B's is refused whole
    b = env.chb("B", 2, owned={})
    theirs = sorted(env.owned(b)[t])
    assert all(env.group().members["B"].epochs[(t, p)] == 2 for p in theirs)
    assert env.commit({("t", theirs[0]): 1}, member_id="B", generation=1, api_version=9) == ErrorCode.stale_member_epoch
    # the epochs survive a reload (the record's AssignmentEpochs, tag 0)
    again = env.replayed().groups[GID].members
    assert again["A"].epochs == m.epochs and again["B"].epochs == env.group().members["B"].epochs


def test_a_full_heartbeat_gets_the_assignment_even_when_unchanged():
    """Kafka sends the assignment with every full request (what a client sends after an error,
    the answer to its last heartbeat maybe lost), not only when it changed."""
    env = Env(topics={"t": 2})
    a = env.chb("A", 0, names=["t"])
    owned = env.owned(a)
    assert env.chb("A", 1, owned=owned)["assignment"] is None  # nothing new
    full = env.chb("A", 1, owned=owned, names=["t"], rebalance=60_000)
    assert env.owned(full) == owned


def test_offset_delete_on_a_consumer_group():
    env = Env(topics={"t": 1, "u": 1})
    env.chb("A", 0, names=["t"])
    env.commit({("t", 0): 1, ("u", 0): 2}, member_id="A", generation=1, api_version=9)
    assert env.delete_offsets(GID, {"t": [0], "u": [0]}) == (
        ErrorCode.none,
        {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none},
    )


def test_offset_delete_respects_regex_subscriptions():
    env = Env(topics={"orders": 1})
    env.chb("A", 0, regex="ord.*")
    env.commit({("orders", 0): 1}, member_id="A", generation=1, api_version=9)
    assert env.delete_offsets(GID, {"orders": [0]}) == (
        ErrorCode.none,
        {("orders", 0): ErrorCode.group_subscribed_to_topic},
    )


def test_empty_groups_change_protocol():
    env = Env(topics={"t": 1})
    env.commit({("t", 0): 1})  # a simple (empty classic) group
    r = env.chb("A", 0, names=["t"])
    assert r["error"] == ErrorCode.none and isinstance(env.group(), ConsumerGroup)
    assert env.join().r["error"] == ErrorCode.inconsistent_group_protocol  # non-empty consumer group
    env.chb("A", -1)
    j = env.join()  # an empty consumer group becomes a classic group
    assert isinstance(env.group(), ClassicGroup) and not j.done
    assert env.chb("B", 0, names=["t"])["error"] == ErrorCode.group_id_not_found  # non-empty classic group
    fresh = env.replayed()
    assert isinstance(fresh.groups[GID], ClassicGroup) and env.committed() == {("t", 0): 1}
    assert offsets_view(fresh) == offsets_view(env.shard)


def test_range_assignor_orders_static_members_by_instance_id():
    env = Env(topics={"t": 2}, consumer_assignors=("range", "uniform"))
    t = env.image.tid("t")
    env.chb("zzz", 0, names=["t"], instance="a", assignor="range")
    env.chb("aaa", 0, names=["t"], instance="b", assignor="range")
    g = env.group()
    assert g.target["zzz"] == {t: {0}} and g.target["aaa"] == {t: {1}}


# ====================================================================== assignors
TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


def _check_complete(result, members, topics):
    owners: dict = {}
    for m, a in result.items():
        assert m in members
        for t, ps in a.items():
            for p in ps:
                assert t in members[m], "assigned a topic the member does not subscribe to"
                assert 0 <= p < topics[t]
                assert (t, p) not in owners, "partition assigned twice"
                owners[(t, p)] = m
    subscribed = {t for s in members.values() for t in s}
    expected = {(t, p) for t in subscribed if t in topics for p in range(topics[t])}
    assert set(owners) == expected
    return owners


@st.composite
def membership_histories(draw, homogeneous: bool):
    """A sequence of (members, topics) states: members come and go, subscriptions and
    partition counts change."""
    n_topics = draw(st.integers(1, 3))
    topics = {TOPIC_IDS[i]: draw(st.integers(0, 12)) for i in range(n_topics)}
    steps = []
    names = [f"m{i}" for i in range(8)]
    members: dict = {}
    common = set(TOPIC_IDS[:n_topics])
    for _ in range(draw(st.integers(1, 6))):
        change = draw(st.sampled_from(["add", "add", "remove", "grow", "resub"]))
        if change == "add" or not members:
            free = [n for n in names if n not in members]
            if free:
                m = draw(st.sampled_from(free))
                members[m] = (
                    set(common)
                    if homogeneous
                    else set(draw(st.sets(st.sampled_from(sorted(topics, key=str)), min_size=1)))
                )
        elif change == "remove":
            del members[draw(st.sampled_from(sorted(members)))]
        elif change == "grow":
            t = draw(st.sampled_from(sorted(topics, key=str)))
            topics[t] = topics[t] + draw(st.integers(1, 4))
        elif not homogeneous:
            m = draw(st.sampled_from(sorted(members)))
            members[m] = set(draw(st.sets(st.sampled_from(sorted(topics, key=str)), min_size=1)))
        steps.append(({m: set(s) for m, s in members.items()}, dict(topics)))
    return steps


def _moved(prev, new, members):
    """Partitions whose previous owner is still a member (and subscribed) but lost them."""
    prev_owner = {(t, p): m for m, a in prev.items() for t, ps in a.items() for p in ps}
    new_owner = {(t, p): m for m, a in new.items() for t, ps in a.items() for p in ps}
    return sum(
        1
        for tp, m in prev_owner.items()
        if m in members and tp in new_owner and tp[0] in members[m] and new_owner[tp] != m
    )


@PROPERTY
@given(membership_histories(homogeneous=False))
def test_uniform_assigns_every_subscribed_partition_exactly_once(history):
    current: dict = {}
    for members, topics in history:
        current = assignors.uniform(members, topics, current)
        _check_complete(current, members, topics)


@PROPERTY
@given(membership_histories(homogeneous=False))
def test_range_assigns_every_subscribed_partition_exactly_once(history):
    for members, topics in history:
        _check_complete(assignors.range_(members, topics, {}), members, topics)


def test_uniform_balance_when_a_member_joins_a_group_at_its_ceiling():
    t = TOPIC_IDS[0]
    members = {"a": {t}, "b": {t}, "c": {t}}
    current = {"a": {t: {0, 1}}, "b": {t: {2, 3}}}
    result = assignors.uniform(members, {t: 4}, current)
    assert sorted(len(result[m].get(t, ())) for m in members) == [1, 1, 2]


@PROPERTY
@given(membership_histories(homogeneous=True))
def test_uniform_homogeneous_is_balanced(history):
    current: dict = {}
    for members, topics in history:
        current = assignors.uniform(members, topics, current)
        _check_complete(current, members, topics)
        sizes = [sum(len(ps) for ps in current[m].values()) for m in members]
        assert not sizes or max(sizes) - min(sizes) <= 1, sizes


@PROPERTY
@given(membership_histories(homogeneous=True))
def test_uniform_homogeneous_moves_partitions_only_when_needed(history):
    """A member that stays keeps its partitions up to its fair share: the number of
    partitions taken from surviving owners is at most what balance forces."""
    current: dict = {}
    for members, topics in history:
        new = assignors.uniform(members, topics, current)
        if not members:
            current = new
            continue
        total = sum(n for t, n in topics.items())
        n = len(members)
        floor, extra = divmod(total, n)
        kept_before = {
            m: sum(1 for t, ps in current.get(m, {}).items() for p in ps if p < topics.get(t, 0)) for m in members
        }
        over = [m for m in members if kept_before[m] > floor]
        forced = sum(kept_before[m] - floor for m in over) - min(extra, len(over))
        assert _moved(current, new, members) <= max(forced, 0)
        current = new


def test_range_assignor_ranges():
    t, u = TOPIC_IDS[0], TOPIC_IDS[1]
    members = {"b": {t, u}, "a": {t, u}, "c": {t}}
    result = assignors.range_(members, {t: 7, u: 3}, {})
    # per topic, contiguous ranges in member order; the first members take the remainder
    assert result["a"][t] == {0, 1, 2} and result["b"][t] == {3, 4} and result["c"][t] == {5, 6}
    assert result["a"][u] == {0, 1} and result["b"][u] == {2} and u not in result["c"]
    assert assignors.range_({}, {t: 3}, {}) == {}
    result = assignors.range_({"a": {t}, "b": {t}, "c": {t}}, {t: 2}, {})
    assert result["a"][t] == {0} and result["b"][t] == {1} and t not in result["c"]


@PROPERTY
@given(membership_histories(homogeneous=False))
def test_range_per_topic_ranges_are_contiguous_and_balanced(history):
    for members, topics in history:
        result = assignors.range_(members, topics, {})
        for t, n in topics.items():
            subs = sorted(m for m, s in members.items() if t in s)
            if not subs:
                continue
            parts = [sorted(result[m].get(t, ())) for m in subs]
            flat = [p for ps in parts for p in ps]
            assert flat == list(range(n))
            sizes = [len(ps) for ps in parts]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


# ====================================================================== replay equivalence
GROUPS = ["g1", "g2"]
TOPICS = {"t": 3, "u": 2}
PROTOCOL_SETS = [
    [("range", sub(["t"]))],
    [("range", sub(["t", "u"])), ("roundrobin", sub(["t", "u"]))],
    [("roundrobin", sub(["u"]))],
]


class ClassicClient:
    """A classic consumer: join -> sync -> heartbeat, rejoining when told to."""

    def __init__(self, idx: int, gid: str, instance: str | None):
        self.idx, self.gid, self.instance = idx, gid, instance
        self.protocols = PROTOCOL_SETS[idx % 2]
        self.reset()

    def reset(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self.members: list[str] = []
        self.synced = False
        self.rejoin = True
        self.parked = None  # the Reply of a JoinGroup/SyncGroup still waiting

    def on_join(self, r: dict) -> None:
        if r["error"] == ErrorCode.none:
            self.member_id, self.generation = r["member_id"], r["generation_id"]
            self.leader = r["leader"] == r["member_id"] and not r["skip_assignment"]
            self.members = [m["member_id"] for m in r["members"]]
            self.synced, self.rejoin = False, False
        elif r["error"] == ErrorCode.member_id_required:
            self.member_id = r["member_id"]
        else:
            self.on_error(r["error"])

    def on_sync(self, r: dict) -> None:
        if r["error"] == ErrorCode.none:
            self.synced = True
        else:
            self.on_error(r["error"])

    def on_error(self, err: ErrorCode) -> None:
        if err in (
            ErrorCode.unknown_member_id,
            ErrorCode.fenced_instance_id,
            ErrorCode.group_max_size_reached,
            ErrorCode.coordinator_not_available,
        ):
            instance = self.instance
            self.reset()
            self.instance = instance
        elif err in (
            ErrorCode.rebalance_in_progress,
            ErrorCode.illegal_generation,
            ErrorCode.inconsistent_group_protocol,
        ):
            self.rejoin = True


class ConsumerClient:
    """A KIP-848 consumer: heartbeats carry what it owns; it adopts a new assignment only
    when it reconciles (its revocation/assignment callbacks have run)."""

    def __init__(self, idx: int, gid: str, instance: str | None):
        self.idx, self.gid, self.instance = idx, gid, instance
        self.incarnation = 0
        self.member_id = f"cm{idx}-0"
        self.names = ["t"] if idx % 2 else ["t", "u"]
        self.reset()

    def reset(self, new_incarnation: bool = False) -> None:
        self.epoch: int | None = None  # None: not in the group
        self.owned: dict = {}
        self.latest: dict = {}
        if new_incarnation:
            self.incarnation += 1
            self.member_id = f"cm{self.idx}-{self.incarnation}"


N_CLASSIC, N_CONSUMER = 6, 4
ci = st.integers(0, N_CLASSIC - 1)
ki = st.integers(0, N_CONSUMER - 1)
STEPS = st.one_of(
    st.tuples(st.just("step"), ci),
    st.tuples(st.just("step_group"), st.sampled_from(GROUPS)),
    st.tuples(st.just("step_all")),
    st.tuples(st.just("step_all")),
    st.tuples(st.just("advance"), st.sampled_from([500, 1000, 3000])),
    st.tuples(st.just("cstep"), ki),
    st.tuples(st.just("cstep_all")),
)
OPS = st.one_of(
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    STEPS,
    st.tuples(st.just("restart"), ci, st.booleans()),
    st.tuples(st.just("change_protocols"), ci, st.integers(0, len(PROTOCOL_SETS) - 1)),
    st.tuples(st.just("leave"), st.sets(ci, min_size=1, max_size=3), st.booleans()),
    st.tuples(
        st.just("commit"),
        st.integers(-1, N_CLASSIC - 1),
        st.sampled_from(["t", "u", "x"]),
        st.integers(0, 2),
        st.integers(0, 100),
        st.booleans(),
    ),
    st.tuples(st.just("offset_delete"), st.sampled_from(GROUPS + ["c1"]), st.sampled_from(["t", "u", "x"])),
    st.tuples(st.just("delete_group"), st.sampled_from(GROUPS + ["c1"])),
    st.tuples(st.just("expire")),
    st.tuples(st.just("advance"), st.sampled_from([100, 1000, 3000, 3000, 6000, 12_000, 40_000, 8 * 24 * 3600 * 1000])),
    st.tuples(st.just("cstep"), ki),
    st.tuples(st.just("cstep_all")),
    st.tuples(st.just("creconcile"), ki),
    st.tuples(st.just("cstale"), ki, st.sampled_from([-1, 1, 5])),
    st.tuples(st.just("cleave"), ki, st.booleans()),
    st.tuples(st.just("csubscribe"), ki, st.sampled_from([("t",), ("u",), ("t", "u")])),
    st.tuples(st.just("grow_topic"), st.sampled_from(["t", "u"])),
)
OP_LISTS = st.lists(OPS, min_size=30, max_size=80)


class Simulation:
    def __init__(self, precreate: bool):
        self.env = Env(
            topics=dict(TOPICS), offsets_retention_ms=7 * 24 * 3600 * 1000, consumer_session_timeout_ms=45_000
        )
        self.tracker = DurableTracker(self.env)
        self.precreate = precreate
        self.classic = [ClassicClient(i, GROUPS[i % 2], f"inst{i}" if i >= 4 else None) for i in range(N_CLASSIC)]
        self.consumers = [ConsumerClient(i, "c1", f"cinst{i}" if i >= 2 else None) for i in range(N_CONSUMER)]
        self.replay_shard = GroupCoordinatorShard(
            0, self.env.config, WriteLog(), FakeTimer(ManualClock()), ManualClock(), topics=lambda: self.env.image
        )
        self.replayed_upto = 0
        self.ensure_groups()
        self.tracker.step()

    def ensure_groups(self) -> None:
        if not self.precreate:
            return
        for gid in GROUPS:
            if gid not in self.env.shard.groups:
                self.env.commit({("x", 0): 0}, gid=gid)

    # ------------------------------------------------------------ classic ops
    def op_step(self, i):
        c = self.classic[i]
        if c.parked is not None and not c.parked.done:
            return
        if c.rejoin or not c.member_id:
            c.parked = self.env.join(
                c.member_id,
                gid=c.gid,
                instance=c.instance,
                protocols=c.protocols,
                require_known=c.instance is None and c.idx != 0,
                skip=c.idx % 2 == 0,
                client_id=f"client{i}",
                session=20_000,
                rebalance=25_000,
                on=c.on_join,
            )
        elif not c.synced:
            assignments = {m: f"{m}@{c.generation}".encode() for m in c.members} if c.leader else {}
            c.parked = self.env.sync(
                c.member_id, c.generation, gid=c.gid, instance=c.instance, assignments=assignments, on=c.on_sync
            )
        else:
            c.on_error(self.env.heartbeat(c.member_id, c.generation, gid=c.gid, instance=c.instance))

    def op_step_group(self, gid):
        for c in self.classic:
            if c.gid == gid:
                self.op_step(c.idx)

    def op_step_all(self):
        for c in self.classic:
            self.op_step(c.idx)

    def op_restart(self, i, forget):
        """The process restarts: a static member keeps its instance id; a dynamic one may
        come back with its old member id or a new one."""
        c = self.classic[i]
        member_id = c.member_id
        c.reset()
        if not forget and c.instance is None:
            c.member_id = member_id

    def op_change_protocols(self, i, proto):
        c = self.classic[i]
        c.protocols = PROTOCOL_SETS[proto]
        c.rejoin = True

    def op_leave(self, idxs, by_instance):
        by_group: dict[str, list] = {}
        for i in sorted(idxs):
            c = self.classic[i]
            if by_instance and c.instance is not None:
                by_group.setdefault(c.gid, []).append(("", c.instance))
            elif c.member_id:
                by_group.setdefault(c.gid, []).append((c.member_id, c.instance))
        for gid, members in by_group.items():
            self.env.leave(members, gid)
        for i in idxs:
            self.classic[i].on_error(ErrorCode.unknown_member_id)

    def op_commit(self, i, topic, partition, offset, large):
        meta = "x" * (self.env.config.offset_metadata_max_bytes + 1) if large and offset % 4 == 0 else f"m{offset}"
        if i < 0:
            self.env.commit({(topic, partition): (offset, offset % 3, meta)}, gid=GROUPS[offset % 2])
            return
        c = self.classic[i]
        self.env.commit(
            {(topic, partition): (offset, -1, meta)},
            gid=c.gid,
            member_id=c.member_id,
            generation=c.generation,
            instance=c.instance,
            retention_ms=60_000 if large else -1,
        )

    def op_offset_delete(self, gid, topic):
        self.env.delete_offsets(gid, {topic: [0, 1]})

    def op_delete_group(self, gid):
        self.env.delete_group(gid)

    def op_expire(self):
        self.env.expire_offsets()

    def op_advance(self, ms):
        self.env.timer.advance(ms)

    # ------------------------------------------------------------ KIP-848 ops
    def op_cstep(self, i):
        c = self.consumers[i]
        if c.epoch is None:
            r = self.env.chb(c.member_id, 0, gid=c.gid, names=list(c.names), instance=c.instance)
        else:
            r = self.env.chb(
                c.member_id,
                c.epoch,
                gid=c.gid,
                owned={t: set(p) for t, p in c.owned.items()},
                instance=c.instance,
                names=list(c.names),
            )
        if r["error"] == ErrorCode.none:
            c.epoch = r["member_epoch"]
            if r["assignment"] is not None:
                c.latest = {t: set(p) for t, p in r["assignment"].items()}
        elif r["error"] in (
            ErrorCode.fenced_member_epoch,
            ErrorCode.unknown_member_id,
            ErrorCode.group_id_not_found,
            ErrorCode.unreleased_instance_id,
            ErrorCode.fenced_instance_id,
            ErrorCode.group_max_size_reached,
        ):
            c.reset()

    def op_cstep_all(self):
        for c in self.consumers:
            self.op_cstep(c.idx)
            self.op_creconcile(c.idx)

    def op_creconcile(self, i):
        c = self.consumers[i]
        if c.epoch is not None:
            c.owned = {t: set(p) for t, p in c.latest.items()}

    def op_cstale(self, i, delta):
        c = self.consumers[i]
        if c.epoch is not None:
            self.env.chb(c.member_id, max(c.epoch + delta, 1), gid=c.gid, owned=dict(c.owned), instance=c.instance)

    def op_cleave(self, i, static):
        c = self.consumers[i]
        if c.epoch is None:
            return
        if static and c.instance is not None:
            self.env.chb(c.member_id, -2, gid=c.gid, instance=c.instance)
            c.reset(new_incarnation=True)
        else:
            self.env.chb(c.member_id, -1, gid=c.gid, instance=c.instance)
            c.reset()

    def op_csubscribe(self, i, names):
        self.consumers[i].names = list(names)

    def op_grow_topic(self, name):
        t = self.env.image.topic(name)
        self.env.image.set_topic(name, len(t.partitions) + 1)

    # ------------------------------------------------------------ checks
    def run(self, ops) -> None:
        for op in ops:
            getattr(self, "op_" + op[0])(*op[1:])
            self.ensure_groups()
            self.tracker.step()
            self.check_invariants()
            self.check_replay()

    def check_invariants(self) -> None:
        for g in self.env.shard.groups.values():
            if isinstance(g, ConsumerGroup):
                owner: dict = {}
                for mid, m in g.members.items():
                    for tp in tp_set(m.assigned) | tp_set(m.pending_revocation):
                        assert tp not in owner, f"{tp} owned by {owner.get(tp)} and {mid}"
                        owner[tp] = mid
                assert set(g.target) <= set(g.members)
                assert set(g.static_members.values()) <= set(g.members)
            else:
                assert set(g.static_members.values()) <= set(g.members)
                if g.members:
                    assert g.leader_id in g.members
                if g.state == STABLE:
                    assert g.protocol_name is not None

    def check_replay(self) -> None:
        for k, v in self.env.log.records[self.replayed_upto :]:
            self.replay_shard.replay(k, v)
        self.replayed_upto = len(self.env.log.records)
        assert_replay_equivalent(self.env, self.tracker, self.replay_shard)


@PROPERTY
@given(OP_LISTS)
def test_replay_rebuilds_the_durable_state(ops):
    """Groups exist (as simple groups, created by a commit) before members join them."""
    Simulation(precreate=True).run(ops)


@settings(PROPERTY, max_examples=examples(50), phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(OP_LISTS)
def test_replay_rebuilds_the_durable_state_of_groups_created_by_join(ops):
    Simulation(precreate=False).run(ops)
