"""MetadataImage: the in-memory state built by replaying metadata records.

The image is the only place brokers, topics, partitions and dynamic configs live; it is
rebuilt from ``__cluster_metadata`` at start. ``replay`` returns a :class:`Delta` naming
what changed, which the broker's publishers (ReplicaManager, config handlers) act on.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from ..security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from ..security.authorizer import StandardAcl
from ..security.scram import ScramCredential, ScramMechanism

log = logging.getLogger(__name__)

# ConfigResource types (as in the Kafka protocol)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32

# KIP-858: the metadata.version (3.7-IV2) from which brokers register their log directories and
# partitions carry the directory of each replica (Kafka's isDirectoryAssignmentSupported)
DIRECTORY_ASSIGNMENT_MV = 17
# Kafka's reserved directory ids (DirectoryId): a replica whose partition predates directory
# assignment, one not yet placed by a broker with several log dirs, one in a dir that is gone
MIGRATING = uuid.UUID(int=0)
UNASSIGNED = uuid.UUID(int=1)
LOST = uuid.UUID(int=2)

# mirror topics (docs/mirror.md): the states of MirrorTopicRecord, with Confluent's names
MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PROMOTED, MIRROR_FAILED_OVER = 0, 1, 2, 3
MIRROR_STATES = {
    MIRROR_ACTIVE: "ACTIVE",
    MIRROR_PAUSED: "PAUSED",
    MIRROR_PROMOTED: "PROMOTED",
    MIRROR_FAILED_OVER: "FAILED_OVER",
}
# the states in which the topic is still a mirror: fetched from the source, read-only to producers
MIRRORING = (MIRROR_ACTIVE, MIRROR_PAUSED)
# the topic configs a mirror topic takes from its source topic (every ``topic.config.sync.ms``)
# and that are read-only at the destination while it mirrors (docs/mirror.md, "Topic configs")
MIRROR_SYNCED_CONFIGS = (
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.compaction.lag.ms",
    "retention.bytes",
    "retention.ms",
)


def reserved_dir(d: uuid.UUID) -> bool:
    """Kafka's DirectoryId.reserved: the first 100 ids are never a real log dir's."""
    return d.int < 100


def directories_supported(image: MetadataImage) -> bool:
    return image.features.get("metadata.version", 0) >= DIRECTORY_ASSIGNMENT_MV


@dataclass
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass
class BrokerRegistration:
    id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: list[Endpoint]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # KIP-858: the directory ids of its online log dirs, sorted (none: it registered none)
    log_dirs: list[uuid.UUID] = field(default_factory=list)

    def has_online_dir(self, d: uuid.UUID) -> bool:
        """Kafka's DirectoryId.isOnline: UNASSIGNED and MIGRATING count as online, LOST not; a
        broker that registered no dirs has every dir online."""
        if d in (UNASSIGNED, MIGRATING):
            return True
        if d == LOST:
            return False
        return not self.log_dirs or d in self.log_dirs

    def default_dir(self) -> uuid.UUID:
        """Kafka's ClusterControlManager.defaultDir: where a new replica on this broker goes."""
        if not self.log_dirs:
            return MIGRATING
        return self.log_dirs[0] if len(self.log_dirs) == 1 else UNASSIGNED

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        for ep in self.endpoints:
            if listener is None or ep.name == listener:
                return ep
        return None


@dataclass
class PartitionRegistration:
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)
    leader_recovery_state: int = 0
    # KIP-966: the eligible leader replicas (left the ISR while it was below min.insync.replicas,
    # cleanly) and the last known ELR (Kafka 4.4 keeps the last known leader there)
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    # KIP-858: the log dir id of each replica (in replicas' order); empty: all MIGRATING (the
    # partition was written before metadata.version 3.7-IV2)
    directories: list[uuid.UUID] = field(default_factory=list)

    def directory(self, replica: int) -> uuid.UUID:
        if not self.directories or replica not in self.replicas:
            return MIGRATING
        return self.directories[self.replicas.index(replica)]


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass
class ClusterLink:
    """A link to a source cluster (ClusterLinkRecord): its client settings, ``bootstrap.servers``
    among them."""

    name: str
    link_id: uuid.UUID
    configs: dict[str, str]


@dataclass
class MirrorTopic:
    """A topic of this cluster that mirrors ``source_topic`` over ``link_id`` (MirrorTopicRecord)."""

    topic_id: uuid.UUID
    link_id: uuid.UUID
    source_topic: str
    source_topic_id: uuid.UUID
    state: int = MIRROR_ACTIVE
    max_producer_id: int = -1

    @property
    def mirroring(self) -> bool:
        return self.state in MIRRORING


@dataclass
class Delta:
    """What one replayed batch of records changed."""

    created_topics: set[uuid.UUID] = field(default_factory=set)
    deleted_topics: dict[uuid.UUID, TopicImage] = field(default_factory=dict)
    changed_partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    changed_configs: set[tuple[int, str]] = field(default_factory=set)
    changed_brokers: set[int] = field(default_factory=set)
    changed_quotas: bool = False
    # ACLs added (id -> the ACL) and removed (id -> None), in replay order
    changed_acls: dict[uuid.UUID, StandardAcl | None] = field(default_factory=dict)
    changed_mirrors: bool = False  # a cluster link or a mirror topic was added, changed or removed

    def merge(self, other: Delta) -> None:
        self.created_topics |= other.created_topics
        self.deleted_topics.update(other.deleted_topics)
        self.changed_partitions |= other.changed_partitions
        self.changed_configs |= other.changed_configs
        self.changed_brokers |= other.changed_brokers
        self.changed_quotas |= other.changed_quotas
        self.changed_mirrors |= other.changed_mirrors
        for acl_id, acl in other.changed_acls.items():
            if acl is None and self.changed_acls.get(acl_id) is not None:
                del self.changed_acls[acl_id]  # added and removed within the merged batches
            else:
                self.changed_acls[acl_id] = acl

    def __bool__(self) -> bool:
        return bool(
            self.created_topics
            or self.deleted_topics
            or self.changed_partitions
            or self.changed_configs
            or self.changed_brokers
            or self.changed_quotas
            or self.changed_acls
            or self.changed_mirrors
        )


def _directories(dirs) -> list[uuid.UUID]:
    """A record's directories as the image keeps them (Kafka's defaultToMigrating: none, or all
    MIGRATING, is kept as none)."""
    if not dirs or all(d == MIGRATING for d in dirs):
        return []
    return list(dirs)


class MetadataImage:
    def __init__(self):
        self.cluster_id: str | None = None
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.topics_by_name: dict[str, TopicImage] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        # client quotas: {entity (sorted (type, name or None) pairs): {quota key: value}}
        self.client_quotas: dict[tuple, dict[str, float]] = {}
        self.features: dict[str, int] = {}
        # Kafka's AclsImage: the ACLs by id (AccessControlEntryRecord), and the id of each ACL
        # (the controller's existingAcls: the same ACL is never stored twice)
        self.acls: dict[uuid.UUID, StandardAcl] = {}
        self.acl_ids: dict[StandardAcl, uuid.UUID] = {}
        # Kafka's ScramImage: {mechanism name: {user: credential}} (UserScramCredentialRecord)
        self.scram_credentials: dict[str, dict[str, ScramCredential]] = {}
        self.next_producer_id = 0
        # mirror topics: the cluster links by name, the mirror topics by their topic id
        self.cluster_links: dict[str, ClusterLink] = {}
        self.mirror_topics: dict[uuid.UUID, MirrorTopic] = {}
        self.offset = -1  # last applied metadata log offset

    # ------------------------------------------------------------------ queries
    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs.get((RESOURCE_TOPIC, name), {})

    def cluster_link_by_id(self, link_id: uuid.UUID) -> ClusterLink | None:
        return next((lk for lk in self.cluster_links.values() if lk.link_id == link_id), None)

    def mirror_of(self, name: str) -> MirrorTopic | None:
        """The mirror state of topic ``name``, None when it is no mirror topic."""
        t = self.topics_by_name.get(name)
        return None if t is None else self.mirror_topics.get(t.topic_id)

    def live_brokers(self) -> list[BrokerRegistration]:
        return [b for b in sorted(self.brokers.values(), key=lambda b: b.id) if not b.fenced]

    # ------------------------------------------------------------------ replay
    def replay(self, rec: dict, delta: Delta) -> None:
        kind = rec["type"]
        fn = getattr(self, "_replay_" + kind, None)
        if fn is not None:
            fn(rec, delta)

    def _replay_RegisterBrokerRecord(self, rec, delta):
        eps = [Endpoint(e["name"], e["host"], e["port"], e["security_protocol"]) for e in rec["endpoints"]]
        self.brokers[rec["broker_id"]] = BrokerRegistration(
            rec["broker_id"],
            rec["incarnation_id"],
            rec["broker_epoch"],
            eps,
            rec.get("rack"),
            rec.get("fenced", True),
            rec.get("in_controlled_shutdown", False),
            sorted(rec.get("log_dirs") or []),
        )
        delta.changed_brokers.add(rec["broker_id"])

    def _replay_UnregisterBrokerRecord(self, rec, delta):
        self.brokers.pop(rec["broker_id"], None)
        delta.changed_brokers.add(rec["broker_id"])

    def _replay_FenceBrokerRecord(self, rec, delta):
        b = self.brokers.get(rec["id"])
        if b:
            b.fenced = True
            delta.changed_brokers.add(b.id)

    def _replay_UnfenceBrokerRecord(self, rec, delta):
        b = self.brokers.get(rec["id"])
        if b:
            b.fenced = False
            delta.changed_brokers.add(b.id)

    def _replay_BrokerRegistrationChangeRecord(self, rec, delta):
        b = self.brokers.get(rec["broker_id"])
        if b:
            if rec.get("fenced", 0) == 1:
                b.fenced = True
            elif rec.get("fenced", 0) == -1:
                b.fenced = False
            if rec.get("in_controlled_shutdown", 0) == 1:
                b.in_controlled_shutdown = True
            if rec.get("log_dirs"):  # as Kafka: an empty list changes nothing
                b.log_dirs = sorted(rec["log_dirs"])
            delta.changed_brokers.add(b.id)

    def _replay_TopicRecord(self, rec, delta):
        t = TopicImage(rec["name"], rec["topic_id"])
        self.topics_by_id[t.topic_id] = t
        self.topics_by_name[t.name] = t
        delta.created_topics.add(t.topic_id)

    def _replay_PartitionRecord(self, rec, delta):
        t = self.topics_by_id.get(rec["topic_id"])
        if t is None:
            return
        t.partitions[rec["partition_id"]] = PartitionRegistration(
            list(rec["replicas"]),
            list(rec["isr"]),
            rec["leader"],
            rec["leader_epoch"],
            rec["partition_epoch"],
            list(rec["removing_replicas"] or []),
            list(rec["adding_replicas"] or []),
            rec["leader_recovery_state"],
            list(rec.get("eligible_leader_replicas") or []),
            list(rec.get("last_known_elr") or []),
            _directories(rec.get("directories")),
        )
        delta.changed_partitions.add((t.topic_id, rec["partition_id"]))

    def _replay_PartitionChangeRecord(self, rec, delta):
        t = self.topics_by_id.get(rec["topic_id"])
        if t is None:
            return
        p = t.partitions.get(rec["partition_id"])
        if p is None:
            return
        if rec.get("isr") is not None:
            p.isr = list(rec["isr"])
        if rec.get("directories") is not None:
            p.directories = _directories(rec["directories"])
        elif rec.get("replicas") is not None and p.directories:
            # replicas changed without directories (not written so by a controller with
            # directory assignment): each replica keeps its directory, a new one is MIGRATING
            p.directories = _directories([p.directory(r) for r in rec["replicas"]])
        if rec.get("replicas") is not None:
            p.replicas = list(rec["replicas"])
        if rec.get("removing_replicas") is not None:
            p.removing_replicas = list(rec["removing_replicas"])
        if rec.get("adding_replicas") is not None:
            p.adding_replicas = list(rec["adding_replicas"])
        if rec.get("leader_recovery_state", -1) != -1:
            p.leader_recovery_state = rec["leader_recovery_state"]
        if rec.get("eligible_leader_replicas") is not None:
            p.elr = list(rec["eligible_leader_replicas"])
        if rec.get("last_known_elr") is not None:
            p.last_known_elr = list(rec["last_known_elr"])
        if rec.get("leader", -2) != -2:
            p.leader = rec["leader"]
            p.leader_epoch += 1
        p.partition_epoch += 1
        delta.changed_partitions.add((t.topic_id, rec["partition_id"]))

    def _replay_ClearElrRecord(self, rec, delta):
        """KIP-966: min.insync.replicas changed: the ELR and last known ELR of the topic's
        partitions (an empty name: of every topic) are cleared; each partition that had one gets a
        partition epoch, as Kafka merges an ELR-clearing PartitionChangeRecord into it."""
        name = rec.get("topic_name") or ""
        topics = [self.topics_by_name.get(name)] if name else list(self.topics_by_id.values())
        for t in topics:
            if t is None:
                continue
            for pid, p in t.partitions.items():
                if p.elr or p.last_known_elr:
                    p.elr, p.last_known_elr = [], []
                    p.partition_epoch += 1
                    delta.changed_partitions.add((t.topic_id, pid))

    def _replay_RemoveTopicRecord(self, rec, delta):
        t = self.topics_by_id.pop(rec["topic_id"], None)
        if t is not None:
            self.topics_by_name.pop(t.name, None)
            self.configs.pop((RESOURCE_TOPIC, t.name), None)
            if self.mirror_topics.pop(t.topic_id, None) is not None:
                delta.changed_mirrors = True
            delta.deleted_topics[t.topic_id] = t
            delta.created_topics.discard(t.topic_id)

    def _replay_ConfigRecord(self, rec, delta):
        key = (rec["resource_type"], rec["resource_name"])
        if rec["value"] is None:
            self.configs.get(key, {}).pop(rec["name"], None)
        else:
            self.configs.setdefault(key, {})[rec["name"]] = rec["value"]
        delta.changed_configs.add(key)

    def _replay_ClientQuotaRecord(self, rec, delta):
        entity = tuple(sorted((e["entity_type"], e["entity_name"]) for e in rec["entity"]))
        if rec["remove"]:
            values = self.client_quotas.get(entity, {})
            values.pop(rec["key"], None)
            if not values:
                self.client_quotas.pop(entity, None)
        else:
            self.client_quotas.setdefault(entity, {})[rec["key"]] = rec["value"]
        delta.changed_quotas = True

    def _replay_AccessControlEntryRecord(self, rec, delta):
        acl = StandardAcl(
            ResourceType.from_code(rec["resource_type"]),
            rec["resource_name"],
            PatternType.from_code(rec["pattern_type"]),
            rec["principal"],
            rec["host"],
            AclOperation.from_code(rec["operation"]),
            AclPermissionType.from_code(rec["permission_type"]),
        )
        self.acls[rec["id"]] = acl
        self.acl_ids[acl] = rec["id"]
        delta.changed_acls[rec["id"]] = acl

    def _replay_RemoveAccessControlEntryRecord(self, rec, delta):
        acl = self.acls.pop(rec["id"], None)
        if acl is None:
            # Kafka's AclsDelta fails the record (a metadata fault the broker counts and goes
            # on from); nothing changes
            log.error("Unable to replay RemoveAccessControlEntryRecord: no ACL with ID %s found", rec["id"])
            return
        self.acl_ids.pop(acl, None)
        if delta.changed_acls.get(rec["id"]) is not None:
            del delta.changed_acls[rec["id"]]  # added and removed within this batch
        else:
            delta.changed_acls[rec["id"]] = None

    def _replay_UserScramCredentialRecord(self, rec, delta):
        mechanism = ScramMechanism.from_type(rec["mechanism"])
        if mechanism is None:
            log.error("Unable to replay UserScramCredentialRecord: unknown mechanism %d", rec["mechanism"])
            return
        self.scram_credentials.setdefault(mechanism.mechanism_name, {})[rec["name"]] = ScramCredential(
            bytes(rec["salt"]), bytes(rec["stored_key"]), bytes(rec["server_key"]), rec["iterations"]
        )

    def _replay_RemoveUserScramCredentialRecord(self, rec, delta):
        mechanism = ScramMechanism.from_type(rec["mechanism"])
        users = self.scram_credentials.get(mechanism.mechanism_name, {}) if mechanism else {}
        users.pop(rec["name"], None)
        if mechanism is not None and not users:
            self.scram_credentials.pop(mechanism.mechanism_name, None)

    def _replay_FeatureLevelRecord(self, rec, delta):
        self.features[rec["name"]] = rec["feature_level"]

    def _replay_ClusterLinkRecord(self, rec, delta):
        configs = {c["name"]: c["value"] for c in rec["configs"] if c["value"] is not None}
        self.cluster_links[rec["link_name"]] = ClusterLink(rec["link_name"], rec["link_id"], configs)
        delta.changed_mirrors = True

    def _replay_RemoveClusterLinkRecord(self, rec, delta):
        link = self.cluster_link_by_id(rec["link_id"])
        if link is not None:
            del self.cluster_links[link.name]
            delta.changed_mirrors = True

    def _replay_MirrorTopicRecord(self, rec, delta):
        self.mirror_topics[rec["topic_id"]] = MirrorTopic(
            rec["topic_id"],
            rec["link_id"],
            rec["source_topic"],
            rec["source_topic_id"],
            rec["state"],
            rec.get("max_producer_id", -1),
        )
        delta.changed_mirrors = True

    def _replay_ProducerIdsRecord(self, rec, delta):
        self.next_producer_id = rec["next_producer_id"]
