"""GroupCoordinatorShard: the groups and committed offsets of one ``__consumer_offsets``
partition (Kafka's GroupMetadataManager + OffsetMetadataManager for one partition).

Sans-IO. The runtime hands in:

* ``write(records)`` — durably append ``[(key, value|None), ...]`` to the partition; raises
  on failure. Every state change below is written before it is acknowledged;
* ``timer`` — ``schedule(key, delay_ms, fn)`` / ``cancel(key)`` (a key scheduled again
  replaces the earlier timer, as Kafka's coordinator timer does);
* ``clock`` — ``now_ms()``.

Requests that wait (JoinGroup, SyncGroup) pass a callback that receives the response dict.
State is rebuilt at load by :meth:`replay` of every record of the partition, so moving the
partition to another broker (replication) moves the groups with it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...errors import ErrorCode, KafkaError
from ...share import enabled as share_groups_enabled
from ..runtime import CoordinatorResult, append_and_replay, append_error
from . import records as R
from .classic import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, ClassicGroup, ClassicMember
from .consumer import (
    classic_heartbeat_to_consumer_group,
    classic_join_to_consumer_group,
    classic_leave_to_consumer_group,
    classic_sync_to_consumer_group,
    consumer_group_tombstones,
    on_consumer_groups_loaded,
    replay_consumer_record,
    validate_consumer_group_commit,
    validate_consumer_group_fetch,
)
from .requests import Heartbeat, JoinGroup, OffsetCommit, OffsetDelete, SyncGroup, TxnOffsetCommit
from .share import on_share_groups_loaded, replay_share_record, share_group_tombstones

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's classic new-member join timeout


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2147483647
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    consumer_min_session_timeout_ms: int = 45000
    consumer_max_session_timeout_ms: int = 60000
    consumer_min_heartbeat_interval_ms: int = 5000
    consumer_max_heartbeat_interval_ms: int = 15000
    consumer_max_size: int = 2147483647
    consumer_assignors: tuple = ("uniform", "range")
    share_enabled: bool = False
    share_session_timeout_ms: int = 45000
    share_heartbeat_interval_ms: int = 5000
    share_max_size: int = 200

    @classmethod
    def from_broker(cls, cfg) -> GroupConfig:
        return cls(
            min_session_timeout_ms=cfg.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=cfg.get("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=cfg.get("group.initial.rebalance.delay.ms"),
            max_size=cfg.get("group.max.size"),
            offsets_retention_ms=cfg.get("offsets.retention.minutes") * 60_000,
            offset_metadata_max_bytes=cfg.get("offset.metadata.max.bytes"),
            consumer_heartbeat_interval_ms=cfg.get("group.consumer.heartbeat.interval.ms"),
            consumer_session_timeout_ms=cfg.get("group.consumer.session.timeout.ms"),
            consumer_min_session_timeout_ms=cfg.get("group.consumer.min.session.timeout.ms"),
            consumer_max_session_timeout_ms=cfg.get("group.consumer.max.session.timeout.ms"),
            consumer_min_heartbeat_interval_ms=cfg.get("group.consumer.min.heartbeat.interval.ms"),
            consumer_max_heartbeat_interval_ms=cfg.get("group.consumer.max.heartbeat.interval.ms"),
            consumer_max_size=cfg.get("group.consumer.max.size"),
            consumer_assignors=tuple(
                a.split(".")[-1].replace("Assignor", "").lower() for a in cfg.get("group.consumer.assignors")
            ),
            share_enabled=share_groups_enabled(cfg),
            share_session_timeout_ms=cfg.get("group.share.session.timeout.ms"),
            share_heartbeat_interval_ms=cfg.get("group.share.heartbeat.interval.ms"),
            share_max_size=cfg.get("group.share.max.size"),
        )


def _join_error(member_id: str, error: ErrorCode) -> dict:
    return {
        "error": error,
        "member_id": member_id,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "members": [],
    }


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: GroupConfig, write, timer, clock, topics=None, group_configs=None):
        self.partition = partition
        self.config = config
        self.write = write
        self.timer = timer
        self.clock = clock
        self.topics = topics  # callable() -> MetadataImage-like (topic lookups for KIP-848)
        # callable(group_id) -> {name: value} of the group's own configs (GROUP resource)
        self.group_configs = group_configs
        self.groups: dict[str, object] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # transactional offset commits waiting for their transaction's marker:
        # producer id -> group -> {(topic, partition): OffsetAndMetadata}
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}

    def consumer_session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else group.consumer.session.timeout.ms."""
        return self._group_config(group_id, "consumer.session.timeout.ms", self.config.consumer_session_timeout_ms)

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else group.consumer.heartbeat.interval.ms."""
        return self._group_config(
            group_id, "consumer.heartbeat.interval.ms", self.config.consumer_heartbeat_interval_ms
        )

    def share_session_timeout_ms(self, group_id: str) -> int:
        return self._group_config(group_id, "share.session.timeout.ms", self.config.share_session_timeout_ms)

    def share_heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_config(group_id, "share.heartbeat.interval.ms", self.config.share_heartbeat_interval_ms)

    def _group_config(self, group_id: str, name: str, default: int) -> int:
        own = self.group_configs(group_id) if self.group_configs is not None else {}
        return int(own[name]) if name in own else default

    # ================================================================== loading
    def replay(self, key: bytes, value: bytes | None, decoded: tuple | None = None) -> None:
        """Apply one record of the partition; ``decoded`` (version, key, value) as ``R.decode_key``
        and ``R.decode_value`` give them, when the writer has it (a CoordinatorRecord)."""
        version, k, v = decoded if decoded is not None else self._decode(key, value)
        if version in (0, R.OFFSET_COMMIT):
            self._replay_offset(k, v)
        elif version == R.GROUP_METADATA:
            self._replay_group_metadata(k["group"], v)
        elif version in R.SHARE_GROUP_RECORDS:
            replay_share_record(self, version, k, v)
        else:
            replay_consumer_record(self, version, k, v)

    @staticmethod
    def _decode(key: bytes, value: bytes | None) -> tuple:
        version, k = R.decode_key(key)
        return version, k, R.decode_value(version, value)

    def replay_transactional(
        self, producer_id: int, key: bytes, value: bytes | None, decoded: tuple | None = None
    ) -> None:
        """A record of a transactional batch: an offset commit pending until its marker."""
        version, k, v = decoded if decoded is not None else self._decode(key, value)
        if version in (0, R.OFFSET_COMMIT) and v is not None:
            self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(k["group"], {})[
                (k["topic"], k["partition"])
            ] = OffsetAndMetadata(
                v["offset"],
                v.get("leader_epoch", -1),
                v.get("metadata", ""),
                v.get("commit_timestamp", -1),
                v.get("expire_timestamp", -1),
            )
            self._ensure_group(k["group"], v.get("commit_timestamp", -1))
        else:
            self.replay(key, value, (version, k, v))

    def replay_end_txn(self, producer_id: int, commit: bool) -> None:
        """A COMMIT marker makes the producer's pending offsets the committed ones; ABORT drops them."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending or not commit:
            return
        for group, offsets in pending.items():
            self.offsets.setdefault(group, {}).update(offsets)
            if group not in self.groups:
                self.groups[group] = ClassicGroup(group)

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in groups.get(group_id, ()) for groups in self.pending_txn_offsets.values())

    def _replay_offset(self, k: dict, v: dict | None) -> None:
        group, tp = k["group"], (k["topic"], k["partition"])
        if v is None:
            offsets = self.offsets.get(group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[group]
            return
        self.offsets.setdefault(group, {})[tp] = OffsetAndMetadata(
            v["offset"],
            v.get("leader_epoch", -1),
            v.get("metadata", ""),
            v.get("commit_timestamp", -1),
            v.get("expire_timestamp", -1),
        )
        self._ensure_group(group, v.get("commit_timestamp", -1))

    def _ensure_group(self, group_id: str, now: int) -> None:
        """A group an offset commit names exists from then on: standalone committers get an Empty
        classic group (Kafka's getOrMaybeCreateClassicGroup in OffsetMetadataManager.replay),
        created when the commit was."""
        if group_id not in self.groups:
            self.groups[group_id] = ClassicGroup(group_id, current_state_timestamp=now)

    def _replay_group_metadata(self, group_id: str, v: dict | None) -> None:
        if v is None:
            self.groups.pop(group_id, None)
            return
        g = ClassicGroup(
            group_id,
            generation_id=v["generation"],
            protocol_type=v["protocol_type"] or None,
            protocol_name=v["protocol"],
            leader_id=v["leader"],
            current_state_timestamp=v.get("current_state_timestamp", -1),
        )
        for m in v["members"]:
            member = ClassicMember(
                m["member_id"],
                m.get("group_instance_id"),
                m["client_id"],
                m["client_host"],
                m.get("rebalance_timeout", -1),
                m["session_timeout"],
                v["protocol_type"],
                [(v["protocol"] or "", m["subscription"])],
                m["assignment"],
            )
            g.members[member.member_id] = member
            if member.group_instance_id is not None:
                g.static_members[member.group_instance_id] = member.member_id
        g.state = STABLE if g.members else EMPTY
        g.subscribed_topics = g.compute_subscribed_topics()
        self.groups[group_id] = g

    def on_loaded(self) -> None:
        """After the replay: members of loaded classic groups must heartbeat again."""
        for g in self.groups.values():
            if isinstance(g, ClassicGroup):
                for m in g.members.values():
                    self._reschedule_heartbeat(g, m)
        on_consumer_groups_loaded(self)
        on_share_groups_loaded(self)

    def on_unloaded(self) -> None:
        """The partition moved away: waiting members learn the coordinator moved."""
        for g in self.groups.values():
            if isinstance(g, ClassicGroup):
                for m in g.members.values():
                    if m.awaiting_join is not None:
                        m.awaiting_join(_join_error(m.member_id, ErrorCode.not_coordinator))
                        m.awaiting_join = None
                    if m.awaiting_sync is not None:
                        m.awaiting_sync({"error": ErrorCode.not_coordinator, "assignment": b""})
                        m.awaiting_sync = None
                    self.timer.cancel(self._hb_key(g.group_id, m.member_id))
                g.state = DEAD
        self.groups.clear()
        self.offsets.clear()
        self.pending_txn_offsets.clear()

    # ================================================================== records
    def _group_record(self, g: ClassicGroup, assignments: dict[str, bytes] | None) -> tuple[bytes, bytes]:
        members = []
        for m in g.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout_ms,
                    "session_timeout": m.session_timeout_ms,
                    "subscription": m.metadata(g.protocol_name or ""),
                    "assignment": (assignments or {}).get(m.member_id, b""),
                }
            )
        value = {
            "protocol_type": g.protocol_type or "",
            "generation": g.generation_id,
            "protocol": g.protocol_name,
            "leader": g.leader_id if g.members else None,
            "current_state_timestamp": self.clock.now_ms(),
            "members": members,
        }
        return R.group_key(R.GROUP_METADATA, g.group_id), R.encode_value(R.GROUP_METADATA, value)

    def _empty_group_record(self, g: ClassicGroup) -> tuple[bytes, bytes]:
        value = {
            "protocol_type": "",
            "generation": 0,
            "protocol": None,
            "leader": None,
            "current_state_timestamp": g.current_state_timestamp,
            "members": [],
        }
        return R.group_key(R.GROUP_METADATA, g.group_id), R.encode_value(R.GROUP_METADATA, value)

    def _group_tombstones(self, group_id: str, offsets: bool = True) -> list:
        recs = (
            [R.offset_tombstone(group_id, t, p) for (t, p) in sorted(self.offsets.get(group_id, {}))] if offsets else []
        )
        g = self.groups.get(group_id)
        if isinstance(g, ClassicGroup):
            recs.append((R.group_key(R.GROUP_METADATA, group_id), None))
        elif getattr(g, "type", None) == "share":
            recs.extend(share_group_tombstones(g))
        elif g is not None:
            recs.extend(consumer_group_tombstones(g))
        return recs

    # ================================================================== timers
    @staticmethod
    def _hb_key(group_id: str, member_id: str) -> str:
        return f"heartbeat-{group_id}-{member_id}"

    @staticmethod
    def _join_key(group_id: str) -> str:
        return f"join-{group_id}"

    @staticmethod
    def _sync_key(group_id: str) -> str:
        return f"sync-{group_id}"

    def _reschedule_heartbeat(self, g: ClassicGroup, m: ClassicMember, timeout_ms: int | None = None) -> None:
        gid, mid = g.group_id, m.member_id
        self.timer.schedule(
            self._hb_key(gid, mid),
            m.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(gid, mid),
        )

    # ================================================================== JoinGroup
    def classic_group(self, group_id: str, create: bool) -> ClassicGroup | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = self.groups[group_id] = ClassicGroup(group_id, current_state_timestamp=self.clock.now_ms())
        return g if isinstance(g, ClassicGroup) else None

    def join_group(self, req: JoinGroup, respond) -> None:
        """JoinGroup: ``respond(dict)`` is called now or when the rebalance completes. A classic
        group's state lives in memory and changes here; its records are written but not replayed
        (Kafka's CoordinatorResult with replayRecords false), so a failed write is answered by
        hand, as Kafka's appendFuture handlers do."""
        group_id, member_id = req.group_id, req.member_id
        cfg = self.config
        if not group_id:
            respond(_join_error(member_id, ErrorCode.invalid_group_id))
            return
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            respond(_join_error(member_id, ErrorCode.invalid_session_timeout))
            return
        existing = self.groups.get(group_id)
        if existing is not None and not isinstance(existing, ClassicGroup):
            if not existing.is_empty():
                classic_join_to_consumer_group(self, existing, req, respond)
                return
            # an empty consumer group becomes a classic group (Kafka's downgrade of empty groups)
            append_and_replay(self, self.write, CoordinatorResult(consumer_group_tombstones(existing)))
        is_new_group = group_id not in self.groups
        unknown = member_id == ""
        g = self.classic_group(group_id, create=unknown)
        if g is None:
            respond(_join_error(member_id, ErrorCode.unknown_member_id))
            return
        if not self._accept_joining_member(g, member_id):
            g.remove(member_id)
            respond(_join_error("", ErrorCode.group_max_size_reached))
            return
        wrote = self._join_new_member(g, req, respond) if unknown else self._join_existing_member(g, req, respond)
        if is_new_group and not wrote:
            # commit the new group to the log (Kafka's empty group record: no members yet)
            self.write([self._empty_group_record(g)])

    def _accept_joining_member(self, g: ClassicGroup, member_id: str) -> bool:
        if g.state in (EMPTY, DEAD):
            return True
        if g.state == PREPARING_REBALANCE:
            m = g.members.get(member_id)
            return (m is not None and m.awaiting_join is not None) or g.num_awaiting_join() < self.config.max_size
        return member_id in g.members or len(g.members) < self.config.max_size

    def _join_new_member(self, g: ClassicGroup, req: JoinGroup, respond) -> bool:
        if g.state == DEAD:
            respond(_join_error("", ErrorCode.coordinator_not_available))
            return False
        if not g.supports_protocols(req.protocol_type, req.protocols):
            respond(_join_error("", ErrorCode.inconsistent_group_protocol))
            return False
        instance_id = req.group_instance_id
        new_id = g.generate_member_id(req.client_id, instance_id)
        if instance_id is not None:
            existing = g.static_member_id(instance_id)
            if existing is not None:
                return self._update_static_member(g, req, existing, new_id, respond)
            return self._add_member_and_rebalance(g, req, new_id, respond)
        if req.require_known_member_id:
            g.pending_join_members.add(new_id)
            gid = g.group_id
            self.timer.schedule(
                self._hb_key(gid, new_id), req.session_timeout_ms, lambda: self._expire_heartbeat(gid, new_id)
            )
            respond(_join_error(new_id, ErrorCode.member_id_required))
            return False
        return self._add_member_and_rebalance(g, req, new_id, respond)

    def _join_existing_member(self, g: ClassicGroup, req: JoinGroup, respond) -> bool:
        member_id = req.member_id
        if g.state == DEAD:
            respond(_join_error(member_id, ErrorCode.coordinator_not_available))
            return False
        if not g.supports_protocols(req.protocol_type, req.protocols):
            respond(_join_error(member_id, ErrorCode.inconsistent_group_protocol))
            return False
        if g.is_pending_member(member_id):
            return self._add_member_and_rebalance(g, req, member_id, respond)
        err = g.validate_member(member_id, req.group_instance_id)
        if err:
            respond(_join_error(member_id, err))
            return False
        m = g.members[member_id]
        if g.state == PREPARING_REBALANCE:
            return self._update_member_and_rebalance(g, m, req, respond)
        if g.state == COMPLETING_REBALANCE:
            if m.matches(req.protocols):
                respond(self._join_response(g, m, g.is_leader(member_id)))
                return False
            return self._update_member_and_rebalance(g, m, req, respond)
        if g.state == STABLE:
            if g.is_leader(member_id) or not m.matches(req.protocols):
                return self._update_member_and_rebalance(g, m, req, respond)
            respond(self._join_response(g, m, False))
            return False
        respond(_join_error(member_id, ErrorCode.unknown_member_id))
        return False

    def _join_response(self, g: ClassicGroup, m: ClassicMember, with_members: bool, skip: bool = False) -> dict:
        return {
            "error": ErrorCode.none,
            "member_id": m.member_id,
            "generation_id": g.generation_id,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol_name,
            "leader": g.leader_id or "",
            "skip_assignment": skip,
            "members": g.current_members_for_leader() if with_members else [],
        }

    def _update_member_and_rebalance(self, g, m, req, respond) -> bool:
        m.protocols = [(n, bytes(md)) for n, md in req.protocols]
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.session_timeout_ms = req.session_timeout_ms
        m.awaiting_join = respond
        return self._maybe_prepare_rebalance_or_complete_join(g, f"member {m.member_id} rejoining")

    def _add_member_and_rebalance(self, g: ClassicGroup, req: JoinGroup, member_id: str, respond) -> bool:
        m = ClassicMember(
            member_id,
            req.group_instance_id,
            req.client_id or "",
            req.client_host or "",
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            [(n, bytes(md)) for n, md in req.protocols],
            is_new=True,
        )
        if g.state == PREPARING_REBALANCE and g.previous_state == EMPTY:
            g.new_member_added = True
        g.add(m, respond)
        self._reschedule_heartbeat(g, m, NEW_MEMBER_JOIN_TIMEOUT_MS)
        return self._maybe_prepare_rebalance_or_complete_join(g, f"adding new member {member_id}")

    def _update_static_member(self, g: ClassicGroup, req: JoinGroup, old_id: str, new_id: str, respond) -> bool:
        """KIP-345: a restarted static member takes over its old member id's place — in a
        Stable group with an unchanged protocol, without a rebalance."""
        current_leader = g.leader_id
        old = g.members[old_id]
        m = g.replace_static_member(req.group_instance_id, old_id, new_id)
        self._reschedule_heartbeat(g, m)
        self.timer.cancel(self._hb_key(g.group_id, old_id))
        m.protocols = [(n, bytes(md)) for n, md in req.protocols]
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.session_timeout_ms = req.session_timeout_ms
        if g.state == STABLE:
            if g.select_protocol() == g.protocol_name:
                try:
                    self.write([self._group_record(g, g.assignments())])
                except Exception as e:
                    # not durable: the old member keeps its place (the replacement is undone)
                    log.warning(
                        "Failed to persist the replacement of static member %s of group %s: %s",
                        req.group_instance_id,
                        g.group_id,
                        e,
                    )
                    g.undo_static_member_replacement(req.group_instance_id, new_id, old, current_leader)
                    self.timer.cancel(self._hb_key(g.group_id, new_id))
                    self._reschedule_heartbeat(g, old)
                    respond(_join_error("", append_error(e)))
                    return True
                is_leader = g.is_leader(new_id)
                if req.supports_skip_assignment:
                    respond(self._join_response(g, m, is_leader, skip=is_leader))
                else:
                    # before SkipAssignment (v9) the answer names the leader the group had
                    # before the replacement: a restarted static leader must not act as a
                    # leader without the member list (Kafka does the same)
                    respond(dict(self._join_response(g, m, False), leader=current_leader or ""))
                return True
            m.awaiting_join = respond
            return self._maybe_prepare_rebalance_or_complete_join(g, f"static member {new_id} changed protocols")
        m.awaiting_join = respond
        if g.state == COMPLETING_REBALANCE:
            return self._prepare_rebalance(g, f"updating metadata for static member {new_id}")
        return self._maybe_complete_join_phase(g)

    # ================================================================== rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, g: ClassicGroup, reason: str) -> bool:
        if g.can_rebalance():
            return self._prepare_rebalance(g, reason)
        return self._maybe_complete_join_phase(g)

    def _maybe_complete_join_phase(self, g: ClassicGroup) -> bool:
        if g.state != PREPARING_REBALANCE or g.previous_state == EMPTY or not g.has_all_members_joined():
            return False
        return self._complete_join(g)

    def _prepare_rebalance(self, g: ClassicGroup, reason: str) -> bool:
        if g.state == COMPLETING_REBALANCE:
            self._propagate_assignment(g, ErrorCode.rebalance_in_progress, reset=True)
        g.pending_sync_members.clear()
        self.timer.cancel(self._sync_key(g.group_id))
        initial = g.state == EMPTY
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(self._rebalance_timeout(g) - delay, 0)
            gid = g.group_id
            self.timer.schedule(
                self._join_key(gid), delay, lambda: self._try_complete_initial_rebalance(gid, delay, remaining)
            )
        g.transition_to(PREPARING_REBALANCE, self.clock.now_ms())
        log.info(
            "Preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
            g.group_id,
            g.state,
            g.generation_id,
            reason,
        )
        if initial:
            return False
        if g.has_all_members_joined():
            return self._complete_join(g)
        gid = g.group_id
        self.timer.schedule(self._join_key(gid), self._rebalance_timeout(g), lambda: self._complete_join_by_id(gid))
        return False

    @staticmethod
    def _rebalance_timeout(g: ClassicGroup) -> int:
        return max((m.rebalance_timeout_ms for m in g.members.values()), default=0)

    def _try_complete_initial_rebalance(self, group_id: str, delay: int, remaining: int) -> None:
        g = self.classic_group(group_id, False)
        if g is None:
            return
        if g.new_member_added and remaining != 0:
            g.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self.timer.schedule(
                self._join_key(group_id),
                new_delay,
                lambda: self._try_complete_initial_rebalance(group_id, new_delay, new_remaining),
            )
        else:
            self._complete_join(g)

    def _complete_join_by_id(self, group_id: str) -> None:
        g = self.classic_group(group_id, False)
        if g is not None:
            self._complete_join(g)

    def _complete_join(self, g: ClassicGroup) -> bool:
        """End of the join phase: drop dynamic members that did not rejoin, open the next
        generation and answer every waiting JoinGroup."""
        self.timer.cancel(self._join_key(g.group_id))
        for m in [m for m in g.not_yet_rejoined() if not m.is_static]:
            g.remove(m.member_id)
            self.timer.cancel(self._hb_key(g.group_id, m.member_id))
        if g.state == DEAD:
            return False
        if not g.maybe_elect_new_joined_leader() and g.members:
            gid = g.group_id
            self.timer.schedule(self._join_key(gid), self._rebalance_timeout(g), lambda: self._complete_join_by_id(gid))
            return False
        g.init_next_generation(self.clock.now_ms())
        if g.state == EMPTY:
            self.write([self._group_record(g, {})])
            return True
        log.info("Stabilized group %s generation %d with %d members", g.group_id, g.generation_id, len(g.members))
        for m in g.members.values():
            respond = m.awaiting_join
            m.awaiting_join = None
            if respond is not None:
                respond(self._join_response(g, m, g.is_leader(m.member_id)))
            self._reschedule_heartbeat(g, m)
            m.is_new = False
            g.pending_sync_members.add(m.member_id)
        gid, gen = g.group_id, g.generation_id
        self.timer.schedule(
            self._sync_key(gid), self._rebalance_timeout(g), lambda: self._expire_pending_sync(gid, gen)
        )
        return False

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        g = self.classic_group(group_id, False)
        if g is None or g.generation_id != generation or g.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if g.pending_sync_members:
            for mid in list(g.pending_sync_members):
                g.remove(mid)
                self.timer.cancel(self._hb_key(group_id, mid))
            self._prepare_rebalance(g, "pending sync request expiration")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        g = self.classic_group(group_id, False)
        if g is None or g.state == DEAD:
            return
        if g.is_pending_member(member_id):
            g.remove(member_id)
            if g.state == PREPARING_REBALANCE and g.has_all_members_joined():
                self._complete_join(g)
            return
        m = g.members.get(member_id)
        if m is None:
            return
        log.info("Member %s in group %s has failed, removing it from the group", member_id, group_id)
        self._remove_member_and_update(g, m, f"removing member {member_id} on heartbeat expiration")

    def _remove_member_and_update(self, g: ClassicGroup, m: ClassicMember, reason: str) -> None:
        if m.awaiting_join is not None:
            m.awaiting_join(_join_error("", ErrorCode.unknown_member_id))
            m.awaiting_join = None
        g.remove(m.member_id)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(g, reason)
        elif g.state == PREPARING_REBALANCE and g.has_all_members_joined():
            self._complete_join(g)

    def _propagate_assignment(self, g: ClassicGroup, error: ErrorCode, reset: bool = False) -> None:
        if reset:
            for m in g.members.values():
                m.assignment = b""
        for m in g.members.values():
            if m.awaiting_sync is not None:
                respond = m.awaiting_sync
                m.awaiting_sync = None
                respond(
                    {
                        "error": error,
                        "assignment": m.assignment,
                        "protocol_type": g.protocol_type if not error else None,
                        "protocol_name": g.protocol_name if not error else None,
                    }
                )
                self._reschedule_heartbeat(g, m)

    # ================================================================== SyncGroup
    def sync_group(self, req: SyncGroup, respond) -> None:
        """SyncGroup: ``respond(dict)`` is called now or when the leader's assignment is stored."""
        g = self.groups.get(req.group_id)
        if g is None or g.is_empty():
            respond({"error": ErrorCode.unknown_member_id, "assignment": b""})
            return
        if not isinstance(g, ClassicGroup):
            classic_sync_to_consumer_group(self, g, req, respond)
            return
        member_id = req.member_id
        err = self._validate_sync(g, req)
        if err:
            respond({"error": err, "assignment": b""})
        elif g.state == PREPARING_REBALANCE:
            respond({"error": ErrorCode.rebalance_in_progress, "assignment": b""})
        elif g.state == COMPLETING_REBALANCE:
            g.members[member_id].awaiting_sync = respond
            self._remove_pending_sync(g, member_id)
            if g.is_leader(member_id):
                assignment = dict(req.assignments or {})
                for mid in g.members:
                    assignment.setdefault(mid, b"")
                try:
                    self.write([self._group_record(g, assignment)])
                except Exception as e:
                    # the assignment is not durable: every waiting member learns why and the
                    # group rebalances (Kafka resets and propagates the error)
                    log.warning(
                        "Failed to persist the assignment of group %s generation %d: %s", g.group_id, g.generation_id, e
                    )
                    if g.state == COMPLETING_REBALANCE and req.generation_id == g.generation_id:
                        self._propagate_assignment(g, append_error(e), reset=True)
                        self._maybe_prepare_rebalance_or_complete_join(
                            g, f"error {append_error(e)} when storing group assignment during SyncGroup"
                        )
                    return
                if g.state == COMPLETING_REBALANCE and req.generation_id == g.generation_id:
                    for mid, m in g.members.items():
                        m.assignment = assignment.get(mid, b"")
                    self._propagate_assignment(g, ErrorCode.none)
                    g.transition_to(STABLE, self.clock.now_ms())
        elif g.state == STABLE:
            self._remove_pending_sync(g, member_id)
            m = g.members[member_id]
            respond(
                {
                    "error": ErrorCode.none,
                    "assignment": m.assignment,
                    "protocol_type": g.protocol_type,
                    "protocol_name": g.protocol_name,
                }
            )

    @staticmethod
    def _validate_generation(g: ClassicGroup, req: SyncGroup | Heartbeat) -> ErrorCode:
        """SyncGroup's and Heartbeat's first checks: a live group, a known member (static
        members by instance id), the current generation."""
        if g.state == DEAD:
            return ErrorCode.coordinator_not_available
        err = g.validate_member(req.member_id, req.group_instance_id)
        if err:
            return err
        if req.generation_id != g.generation_id:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def _validate_sync(self, g: ClassicGroup, req: SyncGroup) -> ErrorCode:
        err = self._validate_generation(g, req)
        if err:
            return err
        if (req.protocol_type is not None and g.protocol_type is not None and req.protocol_type != g.protocol_type) or (
            req.protocol_name is not None and g.protocol_name is not None and req.protocol_name != g.protocol_name
        ):
            return ErrorCode.inconsistent_group_protocol
        return ErrorCode.none

    def _remove_pending_sync(self, g: ClassicGroup, member_id: str) -> None:
        g.pending_sync_members.discard(member_id)
        if g.state in (DEAD, EMPTY, PREPARING_REBALANCE) or not g.pending_sync_members:
            self.timer.cancel(self._sync_key(g.group_id))

    # ================================================================== Heartbeat / LeaveGroup
    def heartbeat(self, req: Heartbeat) -> ErrorCode:
        g = self.groups.get(req.group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if not isinstance(g, ClassicGroup):
            return classic_heartbeat_to_consumer_group(self, g, req)
        err = self._validate_generation(g, req)
        if err:
            return err
        if g.state == EMPTY:
            return ErrorCode.unknown_member_id
        self._reschedule_heartbeat(g, g.members[req.member_id])
        if g.state == PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list]:
        """``members``: (member_id, group_instance_id). Returns (top-level error, per-member errors)."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id, []
        if not isinstance(g, ClassicGroup):
            return classic_leave_to_consumer_group(self, g, members)
        if g.state == DEAD:
            return ErrorCode.coordinator_not_available, []
        results = []
        left = []
        for member_id, instance_id in members:
            if member_id == "":
                static_id = g.static_member_id(instance_id)
                if static_id is not None:
                    self._remove_current_member(g, static_id)
                    results.append((member_id, instance_id, ErrorCode.none))
                    left.append(static_id)
                else:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
            elif g.is_pending_member(member_id):
                g.remove(member_id)
                self.timer.cancel(self._hb_key(group_id, member_id))
                results.append((member_id, instance_id, ErrorCode.none))
                left.append(member_id)
            else:
                err = g.validate_member(member_id, instance_id)
                if err:
                    results.append((member_id, instance_id, err))
                else:
                    self._remove_current_member(g, member_id)
                    results.append((member_id, instance_id, ErrorCode.none))
                    left.append(member_id)
        if left:
            if g.state in (STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(g, f"explicit LeaveGroup for {left}")
            elif g.state == PREPARING_REBALANCE:
                self._maybe_complete_join_phase(g)
        return ErrorCode.none, results

    def _remove_current_member(self, g: ClassicGroup, member_id: str) -> None:
        m = g.members[member_id]
        self.timer.cancel(self._hb_key(g.group_id, member_id))
        if m.awaiting_join is not None:
            m.awaiting_join(_join_error("", ErrorCode.unknown_member_id))
            m.awaiting_join = None
        g.remove(member_id)

    # ================================================================== offsets
    # Write operations (Kafka's OffsetMetadataManager): each reads the state and returns the
    # records to append with the response; the runtime appends them and replays them here.
    def commit_offsets(self, req: OffsetCommit) -> CoordinatorResult:
        """OffsetCommit. The response: {(topic, partition): error}; a group-level error is
        raised (KafkaError), with nothing to write."""
        group_id = req.group_id
        g = self.groups.get(group_id)
        generation = req.generation_id
        err = ErrorCode.none
        if g is None:
            # generation < 0: a simple (admin / manual-assignment) committer, which creates an
            # Empty group that accepts it whatever its member id; otherwise the group is gone
            if generation >= 0:
                err = ErrorCode.group_id_not_found if req.api_version >= 9 else ErrorCode.illegal_generation
        elif _is_share(g):
            err = ErrorCode.group_id_not_found  # Kafka's ShareGroup.validateOffsetCommit
        elif isinstance(g, ClassicGroup):
            err = self._validate_classic_commit(g, req.member_id, req.group_instance_id, generation)
            if not err and g.state in (STABLE, PREPARING_REBALANCE) and req.member_id in g.members:
                self._reschedule_heartbeat(g, g.members[req.member_id])  # a commit keeps the session
        else:
            err = validate_consumer_group_commit(
                g,
                req.member_id,
                generation,
                req.api_version,
                [(t, p.partition) for t, ps in req.topics.items() for p in ps],
                self._image(),
            )
        if err:
            raise KafkaError(err)
        now = self.clock.now_ms()
        expire = now + req.retention_ms if req.retention_ms >= 0 else -1
        results, records = self._offset_records(group_id, req.topics, now, expire)
        return CoordinatorResult(records, results)

    def _offset_records(self, group_id: str, topics: dict, now: int, expire: int) -> tuple[dict, list]:
        """(per-partition error, records to write) of a commit."""
        results, records = {}, []
        for topic, parts in topics.items():
            for partition, offset, epoch, metadata in parts:
                metadata = metadata or ""
                if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                    results[(topic, partition)] = ErrorCode.offset_metadata_too_large
                    continue
                records.append(R.offset_commit(group_id, topic, partition, offset, epoch, metadata, now, expire))
                results[(topic, partition)] = ErrorCode.none
        return results, records

    @staticmethod
    def _validate_classic_commit(
        g: ClassicGroup, member_id: str, instance_id: str | None, generation: int, transactional: bool = False
    ) -> ErrorCode:
        if g.state == DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and g.state == EMPTY:
            return ErrorCode.none
        if generation >= 0 or member_id or instance_id is not None:
            err = g.validate_member(member_id, instance_id)
            if err:
                return err
            if generation != g.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and g.state != EMPTY:
            # TxnOffsetCommit v0-2 carry no member: the group is not checked (KIP-447 adds it)
            return ErrorCode.unknown_member_id
        if not transactional and g.state == COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def commit_txn_offsets(self, req: TxnOffsetCommit) -> CoordinatorResult:
        """TxnOffsetCommit. The offsets are written in a transactional batch of the producer and
        stay pending (invisible to OffsetFetch) until the transaction's marker lands here. The
        group metadata is checked as KIP-447 says, so a zombie that lost its partitions in a
        rebalance cannot commit (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID).
        The response and errors as :meth:`commit_offsets`."""
        group_id = req.group_id
        g = self.groups.get(group_id)
        generation = req.generation_id
        err = ErrorCode.none
        if g is None:
            if generation >= 0:
                err = ErrorCode.illegal_generation
        elif _is_share(g):
            err = ErrorCode.group_id_not_found
        elif isinstance(g, ClassicGroup):
            err = self._validate_classic_commit(g, req.member_id, req.group_instance_id, generation, transactional=True)
        else:
            if not (generation == -1 and not req.member_id and req.group_instance_id is None):
                err = validate_consumer_group_commit(
                    g,
                    req.member_id,
                    generation,
                    9,
                    [(t, p.partition) for t, ps in req.topics.items() for p in ps],
                    self._image(),
                )
                if err == ErrorCode.stale_member_epoch:
                    err = ErrorCode.illegal_generation
        if err:
            raise KafkaError(err)
        results, records = self._offset_records(group_id, req.topics, self.clock.now_ms(), -1)
        return CoordinatorResult(records, results, req.producer_id, req.producer_epoch)

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict]:
        """Committed offsets of a group: {(topic, partition): OffsetAndMetadata | None}."""
        g = self.groups.get(group_id)
        if _is_share(g):
            return ErrorCode.group_id_not_found, {}  # Kafka's ShareGroup.validateOffsetFetch
        if g is not None and not isinstance(g, ClassicGroup) and member_id is not None:
            err = validate_consumer_group_fetch(g, member_id, member_epoch)
            if err:
                return err, {}
        committed = self.offsets.get(group_id, {})
        if topics is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {(t, p): committed.get((t, p)) for t, parts in topics for p in parts}

    def delete_offsets(self, req: OffsetDelete) -> CoordinatorResult:
        """OffsetDelete. The response: {(topic, partition): error}; a group-level error is raised."""
        group_id = req.group_id
        g = self.groups.get(group_id)
        if g is None or _is_share(g):
            raise KafkaError(ErrorCode.group_id_not_found)
        if isinstance(g, ClassicGroup):
            if g.state == DEAD:
                raise KafkaError(ErrorCode.group_id_not_found)
            if g.state in (STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE) and g.protocol_type != "consumer":
                raise KafkaError(ErrorCode.non_empty_group)
        results = {}
        records = []
        committed = self.offsets.get(group_id, {})
        image = self._image()
        for topic, parts in req.topics.items():
            subscribed = g.is_subscribed_to(topic, image) and not g.is_empty()
            for p in parts:
                if subscribed:
                    results[(topic, p)] = ErrorCode.group_subscribed_to_topic
                else:
                    results[(topic, p)] = ErrorCode.none
                    if (topic, p) in committed:
                        records.append(R.offset_tombstone(group_id, topic, p))
        return CoordinatorResult(records, results)

    def _image(self):
        return self.topics() if self.topics is not None else None

    def expire_offsets(self) -> CoordinatorResult:
        """KIP-496 offset expiration (Kafka's OffsetMetadataManager.cleanupExpiredOffsets): offsets
        of topics a group does not subscribe to expire ``offsets.retention.minutes`` after the
        base the group's state gives (see ``offset_expiration_base``); a group left without
        offsets and without members goes too. The response: how many records were written."""
        now = self.clock.now_ms()
        retention = self.config.offsets_retention_ms
        image = self._image()
        records = []
        for group_id in list(self.groups.keys() | self.offsets.keys()):
            g = self.groups.get(group_id)
            committed = self.offsets.get(group_id, {})
            base = g.offset_expiration_base() if g is not None else (lambda om: om.commit_timestamp)
            if committed and base is None:
                continue
            drop = []
            for tp, om in committed.items():
                if g is not None and g.is_subscribed_to(tp[0], image):
                    continue
                if om.expire_timestamp >= 0:
                    expired = now >= om.expire_timestamp
                else:
                    expired = now - base(om) >= retention
                if expired:
                    drop.append(tp)
            records.extend(R.offset_tombstone(group_id, *tp) for tp in drop)
            if len(drop) == len(committed) and g is not None and g.is_empty():
                records.extend(self._group_tombstones(group_id, offsets=False))
        return CoordinatorResult(records, len(records))

    # ================================================================== admin
    def delete_group(self, group_id: str) -> CoordinatorResult:
        """DeleteGroups for one group: its offsets and the group go (tombstones); GROUP_ID_NOT_FOUND
        or NON_EMPTY_GROUP is raised."""
        g = self.groups.get(group_id)
        if g is None:
            raise KafkaError(ErrorCode.group_id_not_found)
        if not g.is_empty():
            raise KafkaError(ErrorCode.non_empty_group)
        return CoordinatorResult(self._group_tombstones(group_id), ErrorCode.none)

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type)."""
        out = []
        for gid, g in self.groups.items():
            if isinstance(g, ClassicGroup):
                out.append((gid, g.protocol_type or "", g.state, "classic"))
            elif g.type == "share":
                out.append((gid, "share", g.state_name(), "share"))
            else:
                out.append((gid, "consumer", g.state_name(), "consumer"))
        return out


def _is_share(g) -> bool:
    """Share groups have no committed offsets: offset requests on one get GROUP_ID_NOT_FOUND."""
    return getattr(g, "type", None) == "share"
