"""ClassicGroup: the state of a group using the classic (JoinGroup/SyncGroup) protocol.

States and transitions as Kafka's ClassicGroup:

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> PreparingRebalance ...
    any -> Dead (deleted or unloaded)

Members waiting for a JoinGroup or SyncGroup answer hold a callback (``awaiting_join``,
``awaiting_sync``) that the coordinator calls with the response; nothing here does I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ...errors import ErrorCode
from .protocol import decode_subscription_topics

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

_VALID_PREVIOUS = {
    EMPTY: {PREPARING_REBALANCE},
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
}


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    awaiting_join: object = None  # callable(response dict) while a JoinGroup waits
    awaiting_sync: object = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [n for n, _m in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for n, m in self.protocols:
            if n == protocol:
                return m
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise ValueError("member does not support any candidate protocol")


@dataclass
class ClassicGroup:
    group_id: str
    state: str = EMPTY
    previous_state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_join_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False
    current_state_timestamp: int = -1
    subscribed_topics: set[str] | None = None  # from the members' consumer-protocol subscriptions

    type = "classic"

    # ------------------------------------------------------------------ state
    def transition_to(self, state: str, now_ms: int = -1) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise ValueError(f"Group {self.group_id} cannot go from {self.state} to {state}")
        self.previous_state = self.state
        self.state = state
        if now_ms >= 0:
            self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    def is_empty(self) -> bool:
        return self.state == EMPTY

    # ------------------------------------------------------------------ members
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join() and not self.pending_join_members

    def not_yet_rejoined(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def add(self, member: ClassicMember, on_join) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.pending_join_members.discard(member.member_id)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        member.awaiting_join = on_join

    def remove(self, member_id: str) -> ClassicMember | None:
        m = self.members.pop(member_id, None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        if m is None:
            return None
        if m.group_instance_id is not None and self.static_members.get(m.group_instance_id) == member_id:
            del self.static_members[m.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return m

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's ClassicGroup.validateMember: the error, or NONE when valid."""
        if instance_id is not None:
            existing = self.static_member_id(instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        old = self.members.pop(old_id)
        fenced = {"error": ErrorCode.fenced_instance_id, "member_id": old_id}
        if old.awaiting_join is not None:
            old.awaiting_join(
                dict(
                    fenced,
                    members=[],
                    generation_id=-1,
                    protocol_name=None,
                    protocol_type=None,
                    leader="",
                    skip_assignment=False,
                )
            )
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            old.awaiting_sync({"error": ErrorCode.fenced_instance_id, "assignment": b""})
            old.awaiting_sync = None
        new = ClassicMember(
            new_id,
            instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def undo_static_member_replacement(
        self, instance_id: str, new_id: str, old: ClassicMember, leader_id: str | None
    ) -> None:
        self.members.pop(new_id, None)
        self.members[old.member_id] = old
        self.static_members[instance_id] = old.member_id
        self.leader_id = leader_id

    def generate_member_id(self, client_id: str | None, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id or ''}-{uuid.uuid4()}"

    # ------------------------------------------------------------------ protocols
    def candidate_protocols(self) -> set[str]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in set(m.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return {name for name, c in counts.items() if c == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _m in protocols}
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            v = m.vote(candidates)
            votes[v] = votes.get(v, 0) + 1
        return max(votes.items(), key=lambda kv: kv[1])[0]

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in self.members.values():
            if m.awaiting_join is not None:
                self.leader_id = m.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics of the members' consumer-protocol subscriptions (None: unknown / not consumer)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            parsed = decode_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to(self, topic: str, image=None) -> bool:
        if self.subscribed_topics is None:  # subscriptions unknown: a consumer group may hold it
            return self.protocol_type == "consumer"
        return topic in self.subscribed_topics

    def offset_expiration_base(self):
        """KIP-496 (Kafka's ClassicGroup.offsetExpirationCondition): a function giving the
        timestamp an offset's retention counts from, or None when no offset may expire now."""
        if self.protocol_type is None:  # simple group: retention from the commit
            return lambda om: om.commit_timestamp
        if self.state == EMPTY:  # retention from the moment the group became empty
            ts = self.current_state_timestamp
            return (lambda om: ts) if ts >= 0 else (lambda om: om.commit_timestamp)
        if self.protocol_type == "consumer" and self.subscribed_topics is not None and self.state == STABLE:
            return lambda om: om.commit_timestamp  # offsets of topics no longer subscribed
        return None

    def current_members_for_leader(self) -> list[dict]:
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata(self.protocol_name or ""),
            }
            for m in self.members.values()
        ]

    def assignments(self) -> dict[str, bytes]:
        return {mid: m.assignment for mid, m in self.members.items()}
