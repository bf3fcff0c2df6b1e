"""Share groups in the group coordinator shard (sans-IO): ShareGroupHeartbeat, the simple
assignor, session timeouts, group-type conflicts, and replay of the records it writes."""

from __future__ import annotations

import pytest

from kesque.coordinator.group.consumer import consumer_group_heartbeat
from kesque.coordinator.group.requests import ConsumerGroupHeartbeat, ShareGroupHeartbeat
from kesque.coordinator.group.shard import GroupCoordinatorShard
from kesque.coordinator.group.share import ShareGroup, share_group_heartbeat, simple_assign
from kesque.errors import ErrorCode
from test_group_coordinator import Env, FakeTimer, WriteFailed

GID = "sg"


def env(**kw) -> Env:
    kw.setdefault("share_enabled", True)
    return Env({"t": 1, "u": 4}, **kw)


def hb(e: Env, member: str, epoch: int, topics=("t",), gid: str = GID) -> dict:
    return share_group_heartbeat(
        e.shard, ShareGroupHeartbeat(gid, member, epoch, None, list(topics) if topics is not None else None, "c", "/h")
    )


def parts(e: Env, r: dict, topic: str = "t") -> list[int]:
    return r["assignment"].get(e.image.tid(topic), [])


# ---------------------------------------------------------------------------- assignor


def test_simple_assignor_shares_one_partition_among_all_members():
    assert simple_assign({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 1}) == {m: {"t": {0}} for m in "abc"}


def test_simple_assignor_spreads_partitions_when_there_are_enough():
    out = simple_assign({"a": {"u"}, "b": {"u"}}, {"u": 4})
    assert out == {"a": {"u": {0, 2}}, "b": {"u": {1, 3}}}
    assert simple_assign({"a": {"u"}, "b": {"t"}}, {"u": 2, "t": 1}) == {"a": {"u": {0, 1}}, "b": {"t": {0}}}


# ---------------------------------------------------------------------------- heartbeat


def test_three_members_all_get_the_single_partition_at_once():
    e = env()
    rs = [hb(e, m, 0) for m in ("m1", "m2", "m3")]
    assert [r["error"] for r in rs] == [ErrorCode.none] * 3
    assert [r["member_epoch"] for r in rs] == [1, 2, 3]
    assert all(parts(e, r) == [0] for r in rs)
    # the first two catch up with the group epoch at their next heartbeat, no revocation phase
    r = hb(e, "m1", 1, topics=None)
    assert (r["member_epoch"], r["assignment"]) == (3, None)
    g = e.shard.groups[GID]
    assert isinstance(g, ShareGroup) and g.state_name() == "Stable"
    assert e.shard.list_groups() == [(GID, "share", "Stable", "share")]


def test_heartbeat_interval_comes_from_the_group_config():
    e = env()
    e.group_configs[GID] = {"share.heartbeat.interval.ms": 7000}
    assert hb(e, "m1", 0)["heartbeat_interval_ms"] == 7000


@pytest.mark.parametrize(
    "member, epoch, topics, error",
    [
        ("", 0, ("t",), ErrorCode.invalid_request),
        ("m1", 0, (), ErrorCode.invalid_request),
        ("m1", 0, None, ErrorCode.invalid_request),
        ("m1", -2, ("t",), ErrorCode.invalid_request),
        ("nobody", 1, ("t",), ErrorCode.unknown_member_id),
        ("m1", 5, ("t",), ErrorCode.fenced_member_epoch),
        ("m1", 0, ("t",), ErrorCode.none),
    ],
)
def test_bad_heartbeats_change_nothing(member, epoch, topics, error):
    e = env()
    hb(e, "m1", 0)
    records, epoch_before = len(e.log.records), e.shard.groups[GID].group_epoch
    r = hb(e, member, epoch, topics)
    assert r["error"] == error
    if error:
        assert len(e.log.records) == records and e.shard.groups[GID].group_epoch == epoch_before


def test_share_group_id_is_not_a_consumer_group_and_back():
    e = env()
    hb(e, "m1", 0)
    r = consumer_group_heartbeat(
        e.shard,
        ConsumerGroupHeartbeat(
            GID, "c1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], topic_partitions={}
        ),
        1,
    )
    assert (r["error"], r["message"]) == (ErrorCode.group_id_not_found, f"Group {GID} is not a consumer group.")
    consumer_group_heartbeat(
        e.shard,
        ConsumerGroupHeartbeat(
            "cg", "c1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], topic_partitions={}
        ),
        1,
    )
    r = hb(e, "m1", 0, gid="cg")
    assert (r["error"], r["message"]) == (ErrorCode.group_id_not_found, "Group cg is not a share group.")


def test_share_groups_disabled():
    e = env(share_enabled=False)
    assert hb(e, "m1", 0)["error"] == ErrorCode.unsupported_version
    assert GID not in e.shard.groups


def test_leave_and_session_timeout_reassign_the_partitions():
    e = env()
    hb(e, "a", 0, topics=("u",))
    r = hb(e, "b", 0, topics=("u",))
    assert parts(e, r, "u") == [1, 3]
    r = hb(e, "a", 1, topics=None)
    assert (r["member_epoch"], parts(e, r, "u")) == (2, [0, 2])
    r = share_group_heartbeat(e.shard, ShareGroupHeartbeat(GID, "b", -1))
    assert (r["error"], r["member_epoch"]) == (ErrorCode.none, -1)
    r = hb(e, "a", 2, topics=None)
    assert (r["member_epoch"], parts(e, r, "u")) == (3, [0, 1, 2, 3])
    e.timer.advance(e.config.share_session_timeout_ms)
    assert e.shard.groups[GID].is_empty() and e.shard.groups[GID].state_name() == "Empty"


def test_a_member_leaving_moves_the_target_assignment_at_once():
    """The assignment epoch catches up with the group epoch when a member goes, even when no
    member is left to heartbeat (Kafka's `--describe --state --verbose` shows them equal)."""
    e = env()
    hb(e, "a", 0, topics=("u",))
    hb(e, "b", 0, topics=("u",))
    share_group_heartbeat(e.shard, ShareGroupHeartbeat(GID, "b", -1))
    g = e.shard.groups[GID]
    assert (g.group_epoch, g.assignment_epoch, g.target["a"]) == (3, 3, {e.image.tid("u"): {0, 1, 2, 3}})
    e.timer.advance(e.config.share_session_timeout_ms)
    g = e.shard.groups[GID]
    assert (g.state_name(), g.group_epoch, g.assignment_epoch, g.target) == ("Empty", 4, 4, {})


def test_a_failed_leave_leaves_the_member():
    e = env()
    hb(e, "a", 0)
    e.log.fail = True
    with pytest.raises(WriteFailed):
        share_group_heartbeat(e.shard, ShareGroupHeartbeat(GID, "a", -1))
    e.log.fail = False
    g = e.shard.groups[GID]
    assert list(g.members) == ["a"] and (g.group_epoch, g.assignment_epoch) == (1, 1)


def test_failed_write_leaves_no_trace():
    e = env()
    hb(e, "a", 0)
    e.log.fail = True
    with pytest.raises(WriteFailed):
        hb(e, "b", 0)
    with pytest.raises(WriteFailed):  # a member's own change: its subscription, its epoch, the group's
        hb(e, "a", 1, topics=("t", "u"))
    e.log.fail = False
    g = e.shard.groups[GID]
    assert list(g.members) == ["a"] and g.group_epoch == 1
    a = g.members["a"]
    assert (a.subscribed_topic_names, a.member_epoch, g.assignment_epoch) == (["t"], 1, 1)


def test_replay_rebuilds_the_group():
    e = env()
    hb(e, "a", 0)
    hb(e, "b", 0, topics=("t", "u"))
    share_group_heartbeat(e.shard, ShareGroupHeartbeat(GID, "a", -1))
    fresh = GroupCoordinatorShard(0, e.config, e.log, FakeTimer(e.clock), e.clock, topics=lambda: e.image)
    for k, v in e.log.records:
        fresh.replay(k, v)
    fresh.on_loaded()
    assert fresh.timer.due(f"share-session-{GID}-b") is not None  # b must heartbeat again
    old, new = e.shard.groups[GID], fresh.groups[GID]
    assert (new.group_epoch, new.assignment_epoch, new.target) == (old.group_epoch, old.assignment_epoch, old.target)
    assert new.members == old.members
    assert e.delete_group(GID) == ErrorCode.non_empty_group
    e.timer.advance(e.config.share_session_timeout_ms)
    assert e.delete_group(GID) == ErrorCode.none
    fresh = GroupCoordinatorShard(0, e.config, e.log, FakeTimer(e.clock), e.clock, topics=lambda: e.image)
    for k, v in e.log.records:
        fresh.replay(k, v)
    assert GID not in fresh.groups


def test_stale_member_epoch_is_fenced():
    """Share members have no previous-epoch grace: any epoch but the current one is fenced."""
    e = env()
    hb(e, "m1", 0)
    hb(e, "m2", 0)
    assert hb(e, "m1", 1, topics=None)["member_epoch"] == 2
    r = hb(e, "m1", 1, topics=None)
    assert r["error"] == ErrorCode.fenced_member_epoch and e.shard.groups[GID].members["m1"].member_epoch == 2


def test_offset_requests_on_a_share_group_find_no_group():
    """Kafka's ShareGroup.validateOffsetCommit / validateOffsetFetch / validateOffsetDelete."""
    e = env()
    hb(e, "m1", 0)
    records = len(e.log.records)
    assert e.commit({("t", 0): 5}, gid=GID, api_version=9) == ErrorCode.group_id_not_found
    assert e.shard.fetch_offsets(GID, None) == (ErrorCode.group_id_not_found, {})
    assert e.delete_offsets(GID, {"t": [0]}) == (ErrorCode.group_id_not_found, {})
    assert len(e.log.records) == records
