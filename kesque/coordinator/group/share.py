"""KIP-932 share groups in the group coordinator: ShareGroupHeartbeat and the simple assignor.

A share group's members do not own partitions exclusively: the partition leaders hand each
record to one member at a time (kesque/share/partition.py), so the coordinator only decides
which members fetch from which partitions. There is no revocation phase: when the group epoch
moves (a member joins, leaves or changes its subscription, or a subscribed topic changes), the
target assignment is recomputed and every member moves to it at its next heartbeat.

The group lives in ``__consumer_offsets`` as Kafka writes it: ShareGroupMetadata (the group
epoch), ShareGroupMemberMetadata, ShareGroupTargetAssignmentMetadata/Member and
ShareGroupCurrentMemberAssignment, so a reloaded coordinator knows the group, its type and
its members (who must heartbeat again within the session timeout).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from ...errors import ErrorCode, KafkaError
from ..runtime import CoordinatorResult, append_and_replay
from . import records as R
from .requests import ShareGroupHeartbeat

log = logging.getLogger(__name__)

LEAVE_GROUP_MEMBER_EPOCH = -1
PROTOCOL_TYPE = "share"


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: dict = field(default_factory=dict)  # {topic_id: set(partitions)}


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, dict] = field(default_factory=dict)
    subscription_signature: tuple = ()

    type = "share"

    def is_empty(self) -> bool:
        return not self.members

    def state_name(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self, image=None) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def is_subscribed_to(self, topic: str, image=None) -> bool:
        return topic in self.subscribed_topic_names()

    @staticmethod
    def offset_expiration_base():
        return lambda om: om.commit_timestamp


class ShareHeartbeatError(KafkaError):
    """A share-group heartbeat the coordinator refuses, as opposed to a failure to append."""


# ====================================================================== assignor
def simple_assign(subscriptions: dict[str, set], partitions: dict) -> dict[str, dict]:
    """Kafka's SimpleAssignor in spirit: per topic, with at least as many partitions as
    subscribers each partition goes to one member, round robin; with more members than
    partitions, each member gets one partition, so a partition is shared by several members."""
    out: dict[str, dict] = {mid: {} for mid in subscriptions}
    for topic_id in sorted(partitions, key=str):
        members = sorted(mid for mid, topics in subscriptions.items() if topic_id in topics)
        parts = list(range(partitions[topic_id]))
        if not members or not parts:
            continue
        if len(members) <= len(parts):
            for i, p in enumerate(parts):
                out[members[i % len(members)]].setdefault(topic_id, set()).add(p)
        else:
            for i, mid in enumerate(members):
                out[mid].setdefault(topic_id, set()).add(parts[i % len(parts)])
    return out


# ====================================================================== heartbeat
def share_group_heartbeat(shard, req: ShareGroupHeartbeat) -> dict:
    """ShareGroupHeartbeat on ``shard``: the response (error, message, member_id, member_epoch,
    heartbeat_interval_ms and assignment ({topic_id: [partitions]} or None: unchanged))."""
    try:
        _validate(req)
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return _leave(shard, req)
        return _heartbeat(shard, req)
    except ShareHeartbeatError as e:
        return {
            "error": e.code,
            "message": e.message,
            "member_id": None,
            "member_epoch": -1,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }


def _validate(req: ShareGroupHeartbeat) -> None:
    if not req.group_id:
        raise ShareHeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
    if not req.member_id:
        raise ShareHeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
    if req.rack_id == "":
        raise ShareHeartbeatError(ErrorCode.invalid_request, "RackId can't be empty.")
    epoch = req.member_epoch
    if epoch == 0:
        if not req.subscribed_topic_names:
            raise ShareHeartbeatError(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
    elif epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise ShareHeartbeatError(ErrorCode.invalid_request, f"MemberEpoch is invalid: {epoch}")


def _get_group(shard, group_id: str, create: bool) -> ShareGroup:
    """The group an operation computes its records on: a scratch copy of the share group, or a new
    one (in the shard once its records are replayed)."""
    g = shard.groups.get(group_id)
    if g is not None and not isinstance(g, ShareGroup):
        raise ShareHeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
    if g is None:
        if not create:
            raise ShareHeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        if not shard.config.share_enabled:
            raise ShareHeartbeatError(
                ErrorCode.unsupported_version,
                "Share groups are not enabled on this broker "
                "(group.share.enable / group.coordinator.rebalance.protocols).",
            )
        return ShareGroup(group_id)
    return _scratch(g)


def _scratch(g: ShareGroup) -> ShareGroup:
    """A copy to compute records on (the group changes only when they are replayed): the maps
    are copied, members shared until :func:`_own_member` copies the one that changes."""
    return dataclasses.replace(g, members=dict(g.members), target=dict(g.target))


def _own_member(g: ShareGroup, member_id: str) -> ShareMember:
    m = g.members[member_id]
    m = g.members[member_id] = dataclasses.replace(
        m, subscribed_topic_names=list(m.subscribed_topic_names), assigned={t: set(p) for t, p in m.assigned.items()}
    )
    return m


def _apply(shard, scratch: ShareGroup, records: list) -> None:
    """Append ``records`` and replay them (raises if the append fails: nothing changed); the
    subscribed topics' metadata the group epoch was computed with is kept in memory only."""
    append_and_replay(shard, shard.write, CoordinatorResult(records))
    live = shard.groups.get(scratch.group_id)
    if isinstance(live, ShareGroup):
        live.subscription_signature = scratch.subscription_signature


def create_empty_group(shard, group_id: str) -> ShareGroup:
    """An empty share group made by AlterShareGroupOffsets on an unknown id (Kafka's tool resets
    a new group's start offsets before any member joins); its metadata record makes it durable."""
    g = _get_group(shard, group_id, create=True)
    _apply(shard, g, [_metadata_record(g)])
    return shard.groups[group_id]


def _heartbeat(shard, req: ShareGroupHeartbeat) -> dict:
    epoch = req.member_epoch
    g = _get_group(shard, req.group_id, create=epoch == 0)
    member_id = req.member_id
    member = g.members.get(member_id)
    records: list = []
    bump = False
    if epoch == 0:
        if member is None:
            if len(g.members) >= shard.config.share_max_size:
                raise ShareHeartbeatError(
                    ErrorCode.group_max_size_reached,
                    f"The share group has reached its maximum capacity of {shard.config.share_max_size} members.",
                )
            member = g.members[member_id] = ShareMember(member_id)
            bump = True
        else:
            member = _own_member(g, member_id)
        member.member_epoch, member.assigned = 0, {}
    else:
        if member is None:
            raise ShareHeartbeatError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {g.group_id}."
            )
        if epoch != member.member_epoch:
            raise ShareHeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The share group member has a member epoch ({epoch}) "
                f"other than the one known by the group coordinator ({member.member_epoch}).",
            )
        member = _own_member(g, member_id)
    changed = epoch == 0
    for attr in ("rack_id", "client_id", "client_host"):
        val = getattr(req, attr)
        if val is not None and getattr(member, attr) != val:
            setattr(member, attr, val)
            changed = True
    if req.subscribed_topic_names is not None:
        names = sorted(set(req.subscribed_topic_names))
        if names != member.subscribed_topic_names:
            member.subscribed_topic_names = names
            changed = bump = True
    if changed:
        records.append(_member_record(g, member))
    signature = _signature(shard, g)
    if signature != g.subscription_signature:
        g.subscription_signature = signature
        bump = True
    if bump:
        g.group_epoch += 1
        records.append(_metadata_record(g))
    if g.assignment_epoch < g.group_epoch:
        records += _compute_target(shard, g)
    before = (member.member_epoch, _copy(member.assigned))
    if member.member_epoch != g.assignment_epoch:
        member.previous_member_epoch, member.member_epoch = member.member_epoch, g.assignment_epoch
        member.assigned = _copy(g.target.get(member_id, {}))
    if (member.member_epoch, member.assigned) != before or epoch == 0:
        records.append(_current_assignment_record(g, member))
    _apply(shard, g, records)  # the group changes here (raises if the append fails)
    _schedule_session_timeout(shard, g, member)
    send = epoch == 0 or before[1] != member.assigned
    return {
        "error": ErrorCode.none,
        "message": None,
        "member_id": member_id,
        "member_epoch": member.member_epoch,
        "heartbeat_interval_ms": shard.share_heartbeat_interval_ms(g.group_id),
        "assignment": {t: sorted(p) for t, p in member.assigned.items()} if send else None,
    }


def _signature(shard, g: ShareGroup) -> tuple:
    image = shard.topics() if shard.topics else None
    if image is None:
        return ()
    sig = []
    for name in sorted(g.subscribed_topic_names()):
        t = image.topic(name)
        if t is not None:
            sig.append((str(t.topic_id), len(t.partitions)))
    return tuple(sig)


def _compute_target(shard, g: ShareGroup) -> list:
    image = shard.topics() if shard.topics else None
    partitions: dict = {}
    subs: dict[str, set] = {}
    for mid, m in g.members.items():
        subs[mid] = set()
        for name in m.subscribed_topic_names:
            t = image.topic(name) if image is not None else None
            if t is not None:
                subs[mid].add(t.topic_id)
                partitions[t.topic_id] = len(t.partitions)
    records = []
    for mid, a in simple_assign(subs, partitions).items():
        if g.target.get(mid, {}) != a:
            g.target[mid] = a
            records.append(_target_record(g, mid))
    g.assignment_epoch = g.group_epoch
    records.append(
        (
            R.group_key(R.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, g.group_id),
            R.encode_value(R.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": g.group_epoch}),
        )
    )
    return records


# ====================================================================== leave / session timeout
def _leave(shard, req: ShareGroupHeartbeat) -> dict:
    g = shard.groups.get(req.group_id)
    if not isinstance(g, ShareGroup):
        raise ShareHeartbeatError(ErrorCode.group_id_not_found, f"Group {req.group_id} not found.")
    if req.member_id not in g.members:
        raise ShareHeartbeatError(
            ErrorCode.unknown_member_id, f"Member {req.member_id} is not a member of group {g.group_id}."
        )
    remove_member(shard, g, req.member_id, "member left the group")
    return {
        "error": ErrorCode.none,
        "message": None,
        "member_id": req.member_id,
        "member_epoch": LEAVE_GROUP_MEMBER_EPOCH,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def remove_member(shard, g: ShareGroup, member_id: str, reason: str) -> None:
    if member_id not in g.members:
        return
    g = _scratch(g)
    del g.members[member_id]
    g.target.pop(member_id, None)
    g.group_epoch += 1
    g.subscription_signature = _signature(shard, g)
    # the target assignment follows at once (as Kafka's coordinator does): the assignment epoch
    # catches up with the group epoch even when no member is left to heartbeat
    records = _member_tombstones(g.group_id, member_id) + [_metadata_record(g)] + _compute_target(shard, g)
    _apply(shard, g, records)  # a failed append leaves the member in place
    log.info("Removing member %s from share group %s: %s", member_id, g.group_id, reason)
    shard.timer.cancel(_session_key(g.group_id, member_id))
    # (as Kafka's: the partition leaders are not told; the member's share sessions end with
    # their final epoch or their connection, and its records go back then or at lock expiry)


def _session_key(group_id: str, member_id: str) -> str:
    return f"share-session-{group_id}-{member_id}"


def _schedule_session_timeout(shard, g: ShareGroup, m: ShareMember) -> None:
    gid, mid = g.group_id, m.member_id

    def expire():
        group = shard.groups.get(gid)
        if isinstance(group, ShareGroup) and mid in group.members:
            remove_member(shard, group, mid, "session timeout expired")

    shard.timer.schedule(_session_key(gid, mid), shard.share_session_timeout_ms(gid), expire)


# ====================================================================== records
def _copy(a: dict) -> dict:
    return {t: set(p) for t, p in a.items() if p}


def _to_records(a: dict) -> list[dict]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(a.items(), key=lambda x: str(x[0])) if p]


def _from_records(items) -> dict:
    return {tp["topic_id"]: set(tp["partitions"]) for tp in items or [] if tp["partitions"]}


def _metadata_record(g: ShareGroup):
    return (
        R.group_key(R.SHARE_GROUP_METADATA, g.group_id),
        R.encode_value(R.SHARE_GROUP_METADATA, {"epoch": g.group_epoch}),
    )


def _member_record(g: ShareGroup, m: ShareMember):
    return (
        R.group_key(R.SHARE_GROUP_MEMBER_METADATA, g.group_id, m.member_id),
        R.encode_value(
            R.SHARE_GROUP_MEMBER_METADATA,
            {
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
            },
        ),
    )


def _target_record(g: ShareGroup, member_id: str):
    return (
        R.group_key(R.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, g.group_id, member_id),
        R.encode_value(
            R.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, {"topic_partitions": _to_records(g.target.get(member_id, {}))}
        ),
    )


def _current_assignment_record(g: ShareGroup, m: ShareMember):
    return (
        R.group_key(R.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id),
        R.encode_value(
            R.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
            {
                "member_epoch": m.member_epoch,
                "previous_member_epoch": m.previous_member_epoch,
                "state": 0,
                "assigned_partitions": _to_records(m.assigned),
            },
        ),
    )


def _member_tombstones(group_id: str, member_id: str) -> list:
    return [
        (R.group_key(v, group_id, member_id), None)
        for v in (
            R.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
            R.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
            R.SHARE_GROUP_MEMBER_METADATA,
        )
    ]


def share_group_tombstones(g: ShareGroup) -> list:
    recs = []
    for mid in g.members:
        recs += _member_tombstones(g.group_id, mid)
    recs.append((R.group_key(R.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, g.group_id), None))
    recs.append((R.group_key(R.SHARE_GROUP_METADATA, g.group_id), None))
    return recs


def replay_share_record(shard, version: int, key: dict, value: dict | None) -> None:
    gid = key["group"]
    g = shard.groups.get(gid)
    if value is None:
        if not isinstance(g, ShareGroup):
            return
        mid = key.get("member_id")
        if version == R.SHARE_GROUP_MEMBER_METADATA:
            g.members.pop(mid, None)
        elif version == R.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            g.target.pop(mid, None)
        elif version == R.SHARE_GROUP_METADATA:
            shard.groups.pop(gid, None)
        return
    if not isinstance(g, ShareGroup):
        g = shard.groups[gid] = ShareGroup(gid)
    if version == R.SHARE_GROUP_METADATA:
        g.group_epoch = value["epoch"]
    elif version == R.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        g.assignment_epoch = value["assignment_epoch"]
    elif version == R.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        g.target[key["member_id"]] = _from_records(value["topic_partitions"])
    else:
        m = g.members.get(key["member_id"]) or g.members.setdefault(key["member_id"], ShareMember(key["member_id"]))
        if version == R.SHARE_GROUP_MEMBER_METADATA:
            m.rack_id, m.client_id, m.client_host = value["rack_id"], value["client_id"], value["client_host"]
            m.subscribed_topic_names = list(value["subscribed_topic_names"])
        else:
            m.member_epoch, m.previous_member_epoch = value["member_epoch"], value["previous_member_epoch"]
            m.assigned = _from_records(value["assigned_partitions"])


def on_share_groups_loaded(shard) -> None:
    for g in shard.groups.values():
        if isinstance(g, ShareGroup):
            for m in g.members.values():
                _schedule_session_timeout(shard, g, m)
