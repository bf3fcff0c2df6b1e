"""The group coordinator's typed requests: what an API handler hands a shard operation once it
has resolved the wire request (topic ids to names, unknown partitions answered already), in the
names of Kafka's request data (OffsetCommitRequestData, TxnOffsetCommitRequestData,
OffsetDeleteRequestData)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


class OffsetCommitPartition(NamedTuple):
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True)
class OffsetCommit:
    """OffsetCommit: ``generation_id`` is the member epoch for a KIP-848 group; -1 (with any
    member id) is a simple committer's; ``retention_ms`` -1 is the broker's retention."""

    group_id: str
    topics: dict[str, list[OffsetCommitPartition]]
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None
    retention_ms: int = -1
    api_version: int = 9


@dataclass(frozen=True)
class TxnOffsetCommit:
    """TxnOffsetCommit: the offsets go in a transactional batch of the producer. v0-2 carry no
    member (generation -1, member id "")."""

    group_id: str
    producer_id: int
    producer_epoch: int
    topics: dict[str, list[OffsetCommitPartition]]
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True)
class OffsetDelete:
    group_id: str
    topics: dict[str, list[int]]


@dataclass(frozen=True)
class ConsumerGroupHeartbeat:
    """ConsumerGroupHeartbeat (KIP-848). ``None`` fields are unchanged since the member's last
    heartbeat; ``topic_partitions`` is what the member owns, {topic id: set of partitions}."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: dict | None = None
    client_id: str = ""
    client_host: str = ""
    # with an authorizer: names -> those the member may DESCRIBE (a regex resolves to them only)
    describable: Callable[[set[str]], set[str]] | None = None


@dataclass(frozen=True)
class JoinGroup:
    """JoinGroup. ``protocols``: [(name, metadata)]; ``client_host`` as Kafka prints it ("/host");
    ``require_known_member_id`` (v4+) and ``supports_skip_assignment`` (v9+) come from the version."""

    group_id: str
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False
    supports_skip_assignment: bool = False


@dataclass(frozen=True)
class SyncGroup:
    """SyncGroup: ``assignments`` {member id: assignment} (the leader's), empty from followers."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: dict[str, bytes] | None = None


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat of a classic group member."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class ShareGroupHeartbeat:
    """ShareGroupHeartbeat (KIP-932): ``subscribed_topic_names`` None is unchanged."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""
