"""KIP-848 consumer groups: ConsumerGroupHeartbeat with server-side assignment.

The coordinator keeps a *group epoch* (bumped when membership, subscriptions or the
subscribed topics' partition counts change), a *target assignment* computed by a server
assignor for an *assignment epoch*, and per member its *member epoch* and current
assignment. Members converge on the target one heartbeat at a time, as Kafka's
CurrentAssignmentBuilder does: partitions to give up are revoked first (the member stays at
its epoch until it stops owning them), then the member moves to the target epoch and gets
the partitions no other member still holds.

Classic-protocol members joining a non-empty consumer group (Kafka's online migration) are
not supported: they get INCONSISTENT_GROUP_PROTOCOL.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from dataclasses import dataclass, field

from ...errors import ErrorCode, KafkaError
from ..runtime import CoordinatorResult, append_and_replay, append_error
from . import records as R
from .assignors import ASSIGNORS
from .requests import ConsumerGroupHeartbeat

log = logging.getLogger(__name__)

# member states (Kafka's MemberState)
MEMBER_STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, MEMBER_UNKNOWN = 0, 1, 2, 127
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Assignment = dict  # {topic_id: set(partitions)}


def _copy(a: Assignment) -> Assignment:
    return {t: set(p) for t, p in a.items() if p}


def _to_records(a: Assignment, epochs: dict | None = None) -> list[dict]:
    """TopicPartitions of a record; with ``epochs`` (a current assignment, KIP-1251) the epoch
    each partition was assigned to the member at, in the order of the partitions."""
    out = []
    for t, p in sorted(a.items(), key=lambda x: str(x[0])):
        if p:
            rec = {"topic_id": t, "partitions": sorted(p)}
            if epochs is not None:
                rec["assignment_epochs"] = [epochs[(t, n)] for n in rec["partitions"]]
            out.append(rec)
    return out


def _from_records(items) -> Assignment:
    return {tp["topic_id"]: set(tp["partitions"]) for tp in items or [] if tp["partitions"]}


def _epochs_from_records(items, member_epoch: int) -> dict:
    """{(topic id, partition): assignment epoch}; a record written before KIP-1251 has none: its
    partitions count as assigned at the member's epoch."""
    out = {}
    for tp in items or []:
        epochs = tp.get("assignment_epochs")
        for i, n in enumerate(tp["partitions"]):
            out[(tp["topic_id"], n)] = epochs[i] if epochs is not None and i < len(epochs) else member_epoch
    return out


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = MEMBER_STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: {(topic id, partition): the member epoch it was assigned at}, for the assigned
    # partitions and those pending revocation; a commit with an older member epoch is accepted
    # for the partitions the member already had at that epoch
    epochs: dict = field(default_factory=dict)

    def metadata_value(self) -> dict:
        return {
            "instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscribed_topic_names": list(self.subscribed_topic_names),
            "subscribed_topic_regex": self.subscribed_topic_regex,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "server_assignor": self.server_assignor,
        }

    def assignment_value(self) -> dict:
        return {
            "member_epoch": self.member_epoch,
            "previous_member_epoch": self.previous_member_epoch,
            "state": self.state,
            "assigned_partitions": _to_records(self.assigned, self.epochs),
            "partitions_pending_revocation": _to_records(self.pending_revocation, self.epochs),
        }


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    subscription_signature: tuple = ()  # (topic id, partitions) of subscribed topics at the group epoch
    # {regex: (topics, metadata offset)}: a regex subscription resolved with an authorizer, only to
    # the topics the resolving member could DESCRIBE (Kafka's ConsumerGroupRegularExpression records)
    resolved_regex: dict[str, tuple[frozenset, int]] = field(default_factory=dict)

    type = "consumer"

    def is_empty(self) -> bool:
        return not self.members

    def scratch(self) -> ConsumerGroup:
        """A copy a heartbeat computes its records on (Kafka computes on the timeline state and
        changes nothing until the records are replayed): the maps are copied, the members shared
        until :meth:`own_member` copies the one that changes."""
        return dataclasses.replace(
            self,
            members=dict(self.members),
            target=dict(self.target),
            static_members=dict(self.static_members),
            resolved_regex=dict(self.resolved_regex),
        )

    def own_member(self, member_id: str) -> ConsumerMember:
        m = self.members[member_id]
        m = self.members[member_id] = dataclasses.replace(
            m,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assigned={t: set(p) for t, p in m.assigned.items()},
            pending_revocation={t: set(p) for t, p in m.pending_revocation.items()},
            epochs=dict(m.epochs),
        )
        return m

    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.assignment_epoch != self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topic_names(self, image=None) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out.update(member_topics(m, image, self.resolved_regex))
        return out

    def is_subscribed_to(self, topic: str, image=None) -> bool:
        """``image`` resolves regex subscriptions; without it only named topics count."""
        return topic in self.subscribed_topic_names(image)

    @staticmethod
    def offset_expiration_base():
        """Offsets of topics the group does not subscribe to expire from their commit."""
        return lambda om: om.commit_timestamp

    def partition_owner_epoch(self, topic_id, partition: int, excluding: str) -> int:
        for mid, m in self.members.items():
            if mid == excluding:
                continue
            if partition in m.assigned.get(topic_id, ()) or partition in m.pending_revocation.get(topic_id, ()):
                return m.member_epoch
        return -1


def member_topics(m: ConsumerMember, image=None, resolved=None) -> set[str]:
    """Topic names a member subscribes to: its names plus, with an image, the topics its
    regex matches in full (internal topics excluded, as Kafka does), or those of the regex's
    resolution in ``resolved`` (the group's, made with an authorizer) that still exist."""
    names = set(m.subscribed_topic_names)
    if m.subscribed_topic_regex and image is not None:
        entry = resolved.get(m.subscribed_topic_regex) if resolved else None
        if entry is not None:
            names.update(t for t in entry[0] if t in image.topics_by_name)
        else:
            names.update(regex_matches(m.subscribed_topic_regex, image))
    return names


def regex_matches(regex: str, image) -> set[str]:
    pattern = re.compile(regex)
    return {t for t in image.topics_by_name if not t.startswith("__") and pattern.fullmatch(t)}


def _resolve_regexes(shard, g: ConsumerGroup, describable) -> list:
    """Kafka 4.4's TopicRegexResolver with an authorizer: each regex of the group's members not
    resolved since the metadata last changed is resolved to the topics it matches that
    ``describable`` (the heartbeating member's authorization) lets through, a
    ConsumerGroupRegularExpression record each; a regex no member holds any more, a tombstone."""
    image = shard.topics() if shard.topics else None
    if image is None:
        return []
    version = getattr(image, "offset", 0)
    used = {m.subscribed_topic_regex for m in g.members.values() if m.subscribed_topic_regex}
    records = []
    for regex in sorted(used):
        entry = g.resolved_regex.get(regex)
        if entry is not None and entry[1] >= version:
            continue
        topics = frozenset(describable(regex_matches(regex, image)))
        g.resolved_regex[regex] = (topics, version)
        value = {"topics": sorted(topics), "version": version, "timestamp": shard.clock.now_ms()}
        records.append((R.regex_key(g.group_id, regex), R.encode_value(R.CONSUMER_GROUP_REGULAR_EXPRESSION, value)))
    for regex in sorted(set(g.resolved_regex) - used):
        del g.resolved_regex[regex]
        records.append((R.regex_key(g.group_id, regex), None))
    return records


# ====================================================================== replay
def replay_consumer_record(shard, version: int, key: dict, value: dict | None) -> None:
    gid = key["group"]
    g = shard.groups.get(gid)
    if value is None:
        if g is None or not isinstance(g, ConsumerGroup):
            return
        mid = key.get("member_id")
        if version == R.CONSUMER_GROUP_REGULAR_EXPRESSION:
            g.resolved_regex.pop(key["regular_expression"], None)
        elif version == R.CONSUMER_GROUP_MEMBER_METADATA:
            m = g.members.pop(mid, None)
            if m is not None and m.instance_id is not None:
                g.static_members.pop(m.instance_id, None)
        elif version == R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            g.target.pop(mid, None)
        elif version == R.CONSUMER_GROUP_METADATA:
            shard.groups.pop(gid, None)
        return
    if g is None or not isinstance(g, ConsumerGroup):
        g = shard.groups[gid] = ConsumerGroup(gid)
    if version == R.CONSUMER_GROUP_METADATA:
        g.group_epoch = value["epoch"]
    elif version == R.CONSUMER_GROUP_PARTITION_METADATA:
        g.subscription_signature = tuple(
            (str(t["topic_id"]), t["num_partitions"]) for t in sorted(value["topics"], key=lambda t: t["topic_name"])
        )
    elif version == R.CONSUMER_GROUP_MEMBER_METADATA:
        m = g.members.get(key["member_id"]) or ConsumerMember(key["member_id"])
        m.instance_id = value["instance_id"]
        m.rack_id = value["rack_id"]
        m.client_id = value["client_id"]
        m.client_host = value["client_host"]
        m.subscribed_topic_names = list(value["subscribed_topic_names"])
        m.subscribed_topic_regex = value["subscribed_topic_regex"]
        m.rebalance_timeout_ms = value["rebalance_timeout_ms"]
        m.server_assignor = value["server_assignor"]
        g.members[m.member_id] = m
        if m.instance_id is not None:
            g.static_members[m.instance_id] = m.member_id
    elif version == R.CONSUMER_GROUP_REGULAR_EXPRESSION:
        g.resolved_regex[key["regular_expression"]] = (frozenset(value["topics"]), value["version"])
    elif version == R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        g.assignment_epoch = value["assignment_epoch"]
    elif version == R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        g.target[key["member_id"]] = _from_records(value["topic_partitions"])
    elif version == R.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        m = g.members.get(key["member_id"])
        if m is None:
            m = g.members[key["member_id"]] = ConsumerMember(key["member_id"])
        m.member_epoch = value["member_epoch"]
        m.previous_member_epoch = value["previous_member_epoch"]
        m.state = value["state"]
        m.assigned = _from_records(value["assigned_partitions"])
        m.pending_revocation = _from_records(value["partitions_pending_revocation"])
        m.epochs = {
            **_epochs_from_records(value["assigned_partitions"], m.member_epoch),
            **_epochs_from_records(value["partitions_pending_revocation"], m.member_epoch),
        }


def on_consumer_groups_loaded(shard) -> None:
    for g in shard.groups.values():
        if isinstance(g, ConsumerGroup):
            for m in g.members.values():
                _schedule_session_timeout(shard, g, m)


def consumer_group_tombstones(g: ConsumerGroup) -> list:
    recs = []
    for mid in g.members:
        recs += _member_tombstones(g.group_id, mid)
    recs += [(R.regex_key(g.group_id, regex), None) for regex in sorted(g.resolved_regex)]
    recs.append((R.group_key(R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, g.group_id), None))
    recs.append((R.group_key(R.CONSUMER_GROUP_PARTITION_METADATA, g.group_id), None))
    recs.append((R.group_key(R.CONSUMER_GROUP_METADATA, g.group_id), None))
    return recs


def _member_tombstones(group_id: str, member_id: str) -> list:
    return [
        (R.group_key(R.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
        (R.group_key(R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
        (R.group_key(R.CONSUMER_GROUP_MEMBER_METADATA, group_id, member_id), None),
    ]


# ====================================================================== heartbeat
class HeartbeatError(KafkaError):
    """A heartbeat the coordinator refuses (Kafka's ApiException thrown by the operation), as
    opposed to a failure to append its records."""


def _validate_request(req: ConsumerGroupHeartbeat, version: int) -> None:
    if not req.group_id:
        raise HeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
    epoch = req.member_epoch
    if req.instance_id == "":
        raise HeartbeatError(ErrorCode.invalid_request, "InstanceId can't be empty.")
    if req.rack_id == "":
        raise HeartbeatError(ErrorCode.invalid_request, "RackId can't be empty.")
    if epoch == 0:
        if version >= 1 and not req.member_id:
            raise HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
        if req.rebalance_timeout_ms == -1:
            raise HeartbeatError(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise HeartbeatError(ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and not req.subscribed_topic_regex:
            raise HeartbeatError(
                ErrorCode.invalid_request, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch > 0 or epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
        if not req.member_id:
            raise HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id is None:
            raise HeartbeatError(ErrorCode.invalid_request, "InstanceId can't be null.")
    else:
        raise HeartbeatError(ErrorCode.invalid_request, f"MemberEpoch is invalid: {epoch}")


def consumer_group_heartbeat(shard, req: ConsumerGroupHeartbeat, version: int) -> dict:
    """ConsumerGroupHeartbeat on ``shard``: the response (error, message, member_id,
    member_epoch, heartbeat_interval_ms, assignment {topic id: [partitions]} or None when
    unchanged). The heartbeat computes its records without changing the group; they are
    appended and replayed (``shard.apply``), so a failed append leaves the group as it was."""
    try:
        _validate_request(req, version)
        assignor = req.server_assignor
        if assignor is not None and assignor not in shard.config.consumer_assignors:
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {assignor} is not supported. "
                f"Supported assignors: {', '.join(shard.config.consumer_assignors)}.",
            )
        regex = req.subscribed_topic_regex
        if regex:
            try:
                re.compile(regex)
            except re.error as e:
                raise HeartbeatError(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.",
                ) from None
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return _leave(shard, req)
        return _heartbeat(shard, req, version)
    except HeartbeatError as e:
        return _error_response(e.code, e.message)
    except Exception as e:  # the group's records failed to append (nothing was replayed)
        log.warning("ConsumerGroupHeartbeat of member %s of group %s failed: %s", req.member_id, req.group_id, e)
        return _error_response(append_error(e), None)


def _error_response(error: ErrorCode, message: str | None) -> dict:
    return {
        "error": error,
        "message": message,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def _get_group(shard, group_id: str, create: bool) -> ConsumerGroup:
    """The group a heartbeat computes on: a scratch copy of the consumer group, or a new one."""
    g = shard.groups.get(group_id)
    if getattr(g, "type", None) == "share":
        raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
    if g is None or getattr(g, "type", None) == "classic":
        if g is not None:
            if not g.is_empty():
                raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
            # an empty classic group is replaced by a consumer group (its tombstone is a write of its own)
            append_and_replay(shard, shard.write, CoordinatorResult([(R.group_key(R.GROUP_METADATA, group_id), None)]))
        if not create:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        return ConsumerGroup(group_id)
    return g.scratch()


def _heartbeat(shard, req: ConsumerGroupHeartbeat, version: int) -> dict:
    cfg = shard.config
    epoch = req.member_epoch
    owned = req.topic_partitions
    g = _get_group(shard, req.group_id, create=epoch == 0)
    records: list = []
    bump = False
    replaced = None
    instance_id = req.instance_id
    if epoch == 0:
        member_id = req.member_id or str(uuid.uuid4()).replace("-", "")[:22]
        if instance_id is not None and instance_id in g.static_members:
            old_id = g.static_members[instance_id]
            old = g.members[old_id]
            if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {old_id} with instance id {instance_id} is not released.",
                )
            # KIP-848 static rejoin: the new member id takes over the old one's epoch and
            # assignment, so the group does not rebalance
            member = ConsumerMember(
                member_id,
                instance_id,
                old.rack_id,
                old.client_id,
                old.client_host,
                list(old.subscribed_topic_names),
                old.subscribed_topic_regex,
                old.rebalance_timeout_ms,
                old.server_assignor,
                member_epoch=0,
                previous_member_epoch=0,
                state=old.state,
                assigned=_copy(old.assigned),
                pending_revocation=_copy(old.pending_revocation),
                epochs=dict(old.epochs),
            )
            records += _member_tombstones(g.group_id, old_id)
            g.members.pop(old_id, None)
            if old_id in g.target:
                g.target[member_id] = g.target.pop(old_id)
                records.append(_target_record(g, member_id))
            replaced = old_id
        elif member_id in g.members:
            member = g.own_member(member_id)  # a rejoin with epoch 0: same id, starts over
            member.member_epoch = 0
            member.assigned, member.pending_revocation, member.epochs = {}, {}, {}
        else:
            if len(g.members) >= cfg.consumer_max_size:
                raise HeartbeatError(
                    ErrorCode.group_max_size_reached,
                    f"The consumer group has reached its maximum capacity of {cfg.consumer_max_size} members.",
                )
            member = ConsumerMember(member_id, instance_id)
            bump = True
        g.members[member.member_id] = member
        if instance_id is not None:
            g.static_members[instance_id] = member.member_id
    else:
        if instance_id is not None:
            _static_member(g, req.member_id, instance_id)
        if req.member_id not in g.members:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Member {req.member_id} is not a member of group {g.group_id}."
            )
        member = g.own_member(req.member_id)
        if epoch > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member "
                f"epoch ({epoch}) than the one known by the group coordinator "
                f"({member.member_epoch}).",
            )
        if epoch < member.member_epoch:
            if epoch != member.previous_member_epoch or owned is None or not _subset(owned, member.assigned):
                raise HeartbeatError(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch "
                    f"({epoch}) than the one known by the group coordinator "
                    f"({member.member_epoch}).",
                )
    # subscription changes
    changed = False
    for attr in ("rack_id", "client_id", "client_host", "server_assignor"):
        val = getattr(req, attr)
        if val is not None and getattr(member, attr) != val:
            setattr(member, attr, val)
            changed = True
    if req.subscribed_topic_names is not None:
        names = sorted(set(req.subscribed_topic_names))
        if names != member.subscribed_topic_names:
            member.subscribed_topic_names = names
            changed = bump = True
    if req.subscribed_topic_regex is not None:  # "" clears the regex, None keeps it
        regex = req.subscribed_topic_regex or None
        if regex != member.subscribed_topic_regex:
            member.subscribed_topic_regex = regex
            changed = bump = True
    if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms != member.rebalance_timeout_ms:
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        changed = True
    if changed or epoch == 0:
        records.append(_member_metadata_record(g, member))
    if req.describable is not None:  # with an authorizer: regexes resolve to what may be described
        records += _resolve_regexes(shard, g, req.describable)
    signature = _subscription_signature(shard, g)
    if signature != g.subscription_signature:
        g.subscription_signature = signature
        records.append(_partition_metadata_record(shard, g))
        bump = True
    if bump:
        g.group_epoch += 1
        records.append(
            (
                R.group_key(R.CONSUMER_GROUP_METADATA, g.group_id),
                R.encode_value(R.CONSUMER_GROUP_METADATA, {"epoch": g.group_epoch}),
            )
        )
    if g.assignment_epoch < g.group_epoch:
        records += _compute_target_assignment(shard, g)
    before = (
        member.member_epoch,
        member.previous_member_epoch,
        member.state,
        _copy(member.assigned),
        _copy(member.pending_revocation),
    )
    _reconcile(g, member, owned)
    after = (
        member.member_epoch,
        member.previous_member_epoch,
        member.state,
        member.assigned,
        member.pending_revocation,
    )
    if after != before or epoch == 0:
        records.append(_current_assignment_record(g, member))
    # the group changes here, by replaying the records once appended (raises if the append fails)
    append_and_replay(shard, shard.write, CoordinatorResult(records))
    if replaced is not None:
        shard.timer.cancel(_session_key(g.group_id, replaced))
        shard.timer.cancel(_rebalance_key(g.group_id, replaced))
    _schedule_session_timeout(shard, g, member)
    if after != before:  # the rebalance timeout runs from the moment a revocation is asked
        if member.state == UNREVOKED_PARTITIONS:
            _schedule_rebalance_timeout(shard, g, member)
        else:
            shard.timer.cancel(_rebalance_key(g.group_id, member.member_id))
    # Kafka's rule: the assignment goes with a full request (a join, or what a client sends after
    # any error, its answer maybe lost: every non-optional field set) or when it changed
    full = (
        req.rebalance_timeout_ms != -1
        and owned is not None
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
    )
    send_assignment = epoch == 0 or full or before[3] != member.assigned
    return {
        "error": ErrorCode.none,
        "message": None,
        "member_id": member.member_id,
        "member_epoch": member.member_epoch,
        "heartbeat_interval_ms": shard.consumer_heartbeat_interval_ms(g.group_id),
        "assignment": {t: sorted(p) for t, p in member.assigned.items()} if send_assignment else None,
    }


def _normalize(a) -> dict:
    return {t: set(p) for t, p in (a or {}).items() if p}


def _subset(owned: dict, assigned: Assignment) -> bool:
    return all(set(p) <= assigned.get(t, set()) for t, p in owned.items())


def _subscription_signature(shard, g: ConsumerGroup) -> tuple:
    image = shard.topics() if shard.topics else None
    if image is None:
        return ()
    sig = []
    for name in sorted(g.subscribed_topic_names(image)):
        t = image.topic(name)
        if t is not None:
            sig.append((str(t.topic_id), len(t.partitions)))
    return tuple(sig)


def _partition_metadata_record(shard, g: ConsumerGroup):
    """Kafka's ConsumerGroupPartitionMetadata record: the subscribed topics' metadata the
    group epoch was computed with, so a reloaded group does not bump its epoch again."""
    image = shard.topics() if shard.topics else None
    topics = []
    for name in sorted(g.subscribed_topic_names(image)) if image is not None else []:
        t = image.topic(name)
        if t is not None:
            topics.append(
                {
                    "topic_id": t.topic_id,
                    "topic_name": name,
                    "num_partitions": len(t.partitions),
                    "partition_metadata": [],
                }
            )
    return (
        R.group_key(R.CONSUMER_GROUP_PARTITION_METADATA, g.group_id),
        R.encode_value(R.CONSUMER_GROUP_PARTITION_METADATA, {"topics": topics}),
    )


def _compute_target_assignment(shard, g: ConsumerGroup) -> list:
    image = shard.topics()
    topics: dict[uuid.UUID, int] = {}
    subs: dict[str, set] = {}
    for mid, m in g.members.items():
        ids = set()
        for name in member_topics(m, image, g.resolved_regex):
            t = image.topic(name)
            if t is not None:
                ids.add(t.topic_id)
                topics[t.topic_id] = len(t.partitions)
        subs[mid] = ids
    preferred = [m.server_assignor for m in g.members.values() if m.server_assignor]
    name = preferred[0] if preferred else shard.config.consumer_assignors[0]
    new_target = ASSIGNORS[name](subs, topics, g.target, {mid: m.instance_id for mid, m in g.members.items()})
    records = []
    for mid, a in new_target.items():
        if _normalize(g.target.get(mid)) != _normalize(a):
            g.target[mid] = a
            records.append(_target_record(g, mid))
    g.assignment_epoch = g.group_epoch
    records.append(
        (
            R.group_key(R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, g.group_id),
            R.encode_value(R.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": g.assignment_epoch}),
        )
    )
    return records


def _reconcile(g: ConsumerGroup, m: ConsumerMember, owned: dict | None) -> None:
    """Kafka's CurrentAssignmentBuilder.build for one member."""
    target = g.target.get(m.member_id, {})

    def owns_revoked(pending: Assignment) -> bool:
        if owned is None:
            return True
        return any(set(p) & pending.get(t, set()) for t, p in owned.items())

    def next_assignment(epoch: int) -> None:
        new_assigned: Assignment = {}
        revoke: Assignment = {}
        pending_assign: Assignment = {}
        unreleased = False
        for t in set(target) | set(m.assigned):
            tgt = target.get(t, set())
            cur = m.assigned.get(t, set())
            keep = cur & tgt
            if keep:
                new_assigned[t] = set(keep)
            if cur - keep:
                revoke[t] = cur - keep
            want = tgt - keep
            free = {p for p in want if g.partition_owner_epoch(t, p, m.member_id) == -1}
            if free != want:
                unreleased = True
            if free:
                pending_assign[t] = free
        # a partition the member keeps (or is asked to revoke) keeps the epoch it was assigned at
        kept = {(t, p): m.epochs.get((t, p), m.member_epoch) for t, ps in new_assigned.items() for p in ps}
        if revoke and owns_revoked(revoke):
            m.state = UNREVOKED_PARTITIONS
            _set_epoch(m, epoch)
            m.epochs = {
                **kept,
                **{(t, p): m.epochs.get((t, p), m.member_epoch) for t, ps in revoke.items() for p in ps},
            }
            m.assigned, m.pending_revocation = new_assigned, revoke
            return
        for t, ps in pending_assign.items():
            new_assigned.setdefault(t, set()).update(ps)
        m.state = UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE
        _set_epoch(m, g.assignment_epoch)
        # newly assigned partitions: at the target assignment epoch, as Kafka's CurrentAssignmentBuilder
        m.epochs = {**kept, **{(t, p): g.assignment_epoch for t, ps in pending_assign.items() for p in ps}}
        m.assigned, m.pending_revocation = new_assigned, {}

    if m.state == MEMBER_STABLE:
        if m.member_epoch != g.assignment_epoch:
            next_assignment(m.member_epoch)
    elif m.state == UNREVOKED_PARTITIONS:
        if not owns_revoked(m.pending_revocation):
            next_assignment(m.member_epoch + 1)
    elif m.state == UNRELEASED_PARTITIONS:
        next_assignment(m.member_epoch)
    else:
        next_assignment(g.assignment_epoch)


def _set_epoch(m: ConsumerMember, epoch: int) -> None:
    """Every reconciliation step: the epoch the member had becomes its previous epoch."""
    m.previous_member_epoch = m.member_epoch
    m.member_epoch = epoch


def _member_metadata_record(g: ConsumerGroup, m: ConsumerMember):
    return (
        R.group_key(R.CONSUMER_GROUP_MEMBER_METADATA, g.group_id, m.member_id),
        R.encode_value(R.CONSUMER_GROUP_MEMBER_METADATA, m.metadata_value()),
    )


def _target_record(g: ConsumerGroup, member_id: str):
    return (
        R.group_key(R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, g.group_id, member_id),
        R.encode_value(
            R.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, {"topic_partitions": _to_records(g.target.get(member_id, {}))}
        ),
    )


def _current_assignment_record(g: ConsumerGroup, m: ConsumerMember):
    return (
        R.group_key(R.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id),
        R.encode_value(R.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, m.assignment_value()),
    )


# ====================================================================== leave / timeouts
def _leave(shard, req: ConsumerGroupHeartbeat) -> dict:
    g = shard.groups.get(req.group_id)
    if g is None or not isinstance(g, ConsumerGroup):
        raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {req.group_id} not found.")
    member_id = req.member_id
    epoch = req.member_epoch
    instance_id = req.instance_id
    m = _static_member(g, member_id, instance_id) if instance_id is not None else g.members.get(member_id)
    if m is None:
        raise HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {g.group_id}.")
    if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        # a static member going away temporarily keeps its assignment until its session
        # expires, but gives up what it was asked to revoke
        left = dataclasses.replace(
            m,
            member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            pending_revocation={},
            epochs={k: e for k, e in m.epochs.items() if k[1] in m.assigned.get(k[0], ())},
        )
        append_and_replay(shard, shard.write, CoordinatorResult([_current_assignment_record(g, left)]))
        shard.timer.cancel(_rebalance_key(g.group_id, m.member_id))
        _schedule_session_timeout(shard, g, m)
    else:
        remove_member(shard, g, member_id, "member left the group")
    return {
        "error": ErrorCode.none,
        "message": None,
        "member_id": member_id,
        "member_epoch": epoch,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def _static_member(g: ConsumerGroup, member_id: str, instance_id: str) -> ConsumerMember:
    """The member holding ``instance_id``, which must be ``member_id`` (Kafka's
    throwIfStaticMemberIsUnknown / throwIfInstanceIdIsFenced)."""
    owner = g.static_members.get(instance_id)
    if owner is None:
        raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if owner != member_id:
        raise HeartbeatError(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance_id} was fenced by member {owner}.",
        )
    return g.members[owner]


def remove_member(shard, g: ConsumerGroup, member_id: str, reason: str) -> None:
    m = g.members.get(member_id)
    if m is None:
        return
    records = _member_tombstones(g.group_id, member_id)
    records.append(
        (
            R.group_key(R.CONSUMER_GROUP_METADATA, g.group_id),
            R.encode_value(R.CONSUMER_GROUP_METADATA, {"epoch": g.group_epoch + 1}),
        )
    )
    # replayed, the tombstones take the member, its static id and its target away, the
    # metadata record bumps the group epoch; a failed append leaves the member in place
    append_and_replay(shard, shard.write, CoordinatorResult(records))
    log.info("Removing member %s from consumer group %s: %s", member_id, g.group_id, reason)
    shard.timer.cancel(_session_key(g.group_id, member_id))
    shard.timer.cancel(_rebalance_key(g.group_id, member_id))


def _session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def _rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def _schedule_session_timeout(shard, g: ConsumerGroup, m: ConsumerMember) -> None:
    gid, mid = g.group_id, m.member_id

    def expire():
        group = shard.groups.get(gid)
        if isinstance(group, ConsumerGroup) and mid in group.members:
            remove_member(shard, group, mid, "session timeout expired")

    shard.timer.schedule(_session_key(gid, mid), shard.consumer_session_timeout_ms(gid), expire)


def _schedule_rebalance_timeout(shard, g: ConsumerGroup, m: ConsumerMember) -> None:
    gid, mid, epoch = g.group_id, m.member_id, m.member_epoch

    def expire():
        group = shard.groups.get(gid)
        member = group.members.get(mid) if isinstance(group, ConsumerGroup) else None
        if member is not None and member.state == UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            remove_member(shard, group, mid, "did not revoke partitions within the rebalance timeout")

    timeout = m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else 300000
    shard.timer.schedule(_rebalance_key(gid, mid), timeout, expire)


# ====================================================================== offsets and classic requests
def validate_consumer_group_commit(
    g: ConsumerGroup, member_id: str, epoch: int, api_version: int, partitions=(), image=None
) -> ErrorCode:
    """An offset commit to a KIP-848 group: ``epoch`` is the member epoch the commit carries,
    ``partitions`` the (topic name, partition) it commits. As Kafka 4.4 (KIP-1251): the member's
    current epoch passes; a newer one is stale; an older one passes for partitions the member
    was assigned at that epoch or before (and still has, or is revoking), so a commit sent
    just before the member learns of its next epoch is not refused; else the whole commit is
    stale."""
    if epoch < 0 and g.is_empty():  # admin clients and standalone consumers (Kafka: whatever the member id)
        return ErrorCode.none
    m = g.members.get(member_id)
    if m is None:
        return ErrorCode.unknown_member_id
    if api_version < 9:
        return ErrorCode.illegal_generation if epoch != m.member_epoch else ErrorCode.none
    if epoch == m.member_epoch:
        return ErrorCode.none
    if epoch > m.member_epoch:
        return ErrorCode.stale_member_epoch
    for name, p in partitions:
        t = image.topic(name) if image is not None else None
        assigned_at = m.epochs.get((t.topic_id, p)) if t is not None else None
        if assigned_at is None or epoch < assigned_at:
            return ErrorCode.stale_member_epoch
    return ErrorCode.none


def validate_consumer_group_fetch(g: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode:
    if member_id == "" and member_epoch < 0:
        return ErrorCode.none
    m = g.members.get(member_id)
    if m is None:
        return ErrorCode.unknown_member_id
    if member_epoch != m.member_epoch:
        return ErrorCode.stale_member_epoch
    return ErrorCode.none


def classic_join_to_consumer_group(shard, g, req, respond) -> None:
    respond(
        {
            "error": ErrorCode.inconsistent_group_protocol,
            "member_id": req.member_id,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "skip_assignment": False,
            "members": [],
        }
    )


def classic_sync_to_consumer_group(shard, g, req, respond) -> None:
    respond({"error": ErrorCode.unknown_member_id, "assignment": b""})


def classic_heartbeat_to_consumer_group(shard, g, req) -> ErrorCode:
    return ErrorCode.unknown_member_id


def classic_leave_to_consumer_group(shard, g, members) -> tuple[ErrorCode, list]:
    return ErrorCode.none, [(mid, iid, ErrorCode.unknown_member_id) for mid, iid in members]
