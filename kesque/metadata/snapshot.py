"""Metadata snapshots, the application side: what a snapshot holds and when to take one.

``image_records(image)`` gives the records that rebuild a :class:`MetadataImage`: replayed into
an empty image, in order, they give an image equal to ``image`` (its ``offset`` and
``cluster_id`` come from the snapshot id and meta.properties, not from records). The order is
Kafka's snapshot order: features, brokers, topics with their partitions, configs, client quotas,
producer ids, ACLs, SCRAM credentials. Partitions carry their leader and partition epochs, brokers their epoch, fencing
and controlled-shutdown state, so a node loading the snapshot continues exactly where the log
left off. The raft layer (``RaftNode.snapshot(end, values)``) writes them framed by
:func:`kesque.metadata.records.encode`.

``SnapshotPolicy`` is Kafka's SnapshotGenerator rule: fed the size of each batch of records
applied from the log, it says to snapshot once ``metadata.log.max.record.bytes.between.snapshots``
(20 MiB) have been applied since the last snapshot, or, when a batch arrives, once
``metadata.log.max.snapshot.interval.ms`` (1 hour; 0 turns the time rule off) has passed since
it. Loading a snapshot resets both counts.
"""

from __future__ import annotations

import dataclasses

from ..security.scram import ScramCredential, ScramMechanism
from .image import MetadataImage, directories_supported

MAX_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024
MAX_SNAPSHOT_INTERVAL_MS = 3_600_000


def image_records(image: MetadataImage) -> list[dict]:
    out: list[dict] = [
        {"type": "FeatureLevelRecord", "name": n, "feature_level": v} for n, v in sorted(image.features.items())
    ]
    dirs = directories_supported(image)  # KIP-858: written from metadata.version 3.7-IV2
    for b in sorted(image.brokers.values(), key=lambda b: b.id):
        out.append(
            {
                "type": "RegisterBrokerRecord",
                "broker_id": b.id,
                "incarnation_id": b.incarnation_id,
                "broker_epoch": b.epoch,
                "endpoints": [dataclasses.asdict(e) for e in b.endpoints],
                "features": [],
                "rack": b.rack,
                "fenced": b.fenced,
                "in_controlled_shutdown": b.in_controlled_shutdown,
            }
        )
        if dirs:
            out[-1]["log_dirs"] = list(b.log_dirs)
    for t in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        out.append({"type": "TopicRecord", "name": t.name, "topic_id": t.topic_id})
        for pid, p in sorted(t.partitions.items()):
            out.append(
                {
                    "type": "PartitionRecord",
                    "partition_id": pid,
                    "topic_id": t.topic_id,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "removing_replicas": list(p.removing_replicas),
                    "adding_replicas": list(p.adding_replicas),
                    "leader": p.leader,
                    "leader_recovery_state": p.leader_recovery_state,
                    "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch,
                }
            )
            if dirs:
                out[-1]["directories"] = [p.directory(r) for r in p.replicas]
            if p.elr or p.last_known_elr:
                out[-1].update(eligible_leader_replicas=list(p.elr), last_known_elr=list(p.last_known_elr))
    for (rtype, rname), values in sorted(image.configs.items()):
        out += [
            {"type": "ConfigRecord", "resource_type": rtype, "resource_name": rname, "name": k, "value": v}
            for k, v in sorted(values.items())
        ]
    for entity, values in sorted(image.client_quotas.items(), key=lambda kv: repr(kv[0])):  # names may be None
        ent = [{"entity_type": et, "entity_name": en} for et, en in entity]
        out += [
            {"type": "ClientQuotaRecord", "entity": ent, "key": k, "value": v, "remove": False}
            for k, v in sorted(values.items())
        ]
    if image.next_producer_id:
        out.append(
            {
                "type": "ProducerIdsRecord",
                "broker_id": -1,
                "broker_epoch": -1,
                "next_producer_id": image.next_producer_id,
            }
        )
    for acl_id, acl in image.acls.items():
        out.append(acl_record(acl_id, acl))
    for mechanism, users in sorted(image.scram_credentials.items()):
        out += [scram_record(ScramMechanism.for_name(mechanism), user, c) for user, c in sorted(users.items())]
    for link in sorted(image.cluster_links.values(), key=lambda lk: lk.name):
        out.append(link_record(link))
    for m in image.mirror_topics.values():
        out.append(mirror_record(m))
    return out


def link_record(link) -> dict:
    configs = [{"name": k, "value": v} for k, v in sorted(link.configs.items())]
    return {"type": "ClusterLinkRecord", "link_name": link.name, "link_id": link.link_id, "configs": configs}


def mirror_record(m) -> dict:
    return {
        "type": "MirrorTopicRecord",
        "topic_id": m.topic_id,
        "link_id": m.link_id,
        "source_topic": m.source_topic,
        "source_topic_id": m.source_topic_id,
        "state": m.state,
        "max_producer_id": m.max_producer_id,
    }


def scram_record(mechanism: ScramMechanism, user: str, credential: ScramCredential) -> dict:
    """The UserScramCredentialRecord of one user's credential for one mechanism."""
    return {
        "type": "UserScramCredentialRecord",
        "name": user,
        "mechanism": mechanism.type_code,
        "salt": credential.salt,
        "stored_key": credential.stored_key,
        "server_key": credential.server_key,
        "iterations": credential.iterations,
    }


def acl_record(acl_id, acl) -> dict:
    """The AccessControlEntryRecord of one ACL (a StandardAcl) and its id."""
    return {
        "type": "AccessControlEntryRecord",
        "id": acl_id,
        "resource_type": int(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": int(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission_type),
    }


class SnapshotPolicy:
    def __init__(
        self,
        max_bytes: int = MAX_BYTES_BETWEEN_SNAPSHOTS,
        max_interval_ms: int = MAX_SNAPSHOT_INTERVAL_MS,
        now: int = 0,
    ):
        self.max_bytes = max_bytes
        self.max_interval_ms = max_interval_ms
        self.reset(now)

    @classmethod
    def from_config(cls, config, now: int = 0) -> SnapshotPolicy:
        """From a BrokerConfig; a key it does not know keeps Kafka's default."""

        def get(key, default):
            value = config.get(key)
            return default if value is None else value

        return cls(
            get("metadata.log.max.record.bytes.between.snapshots", MAX_BYTES_BETWEEN_SNAPSHOTS),
            get("metadata.log.max.snapshot.interval.ms", MAX_SNAPSHOT_INTERVAL_MS),
            now,
        )

    def reset(self, now: int) -> None:
        """A snapshot was taken or loaded at ``now``."""
        self.bytes_since = 0
        self.last_snapshot_ms = now

    def on_batch(self, nbytes: int, now: int) -> bool:
        """A batch of ``nbytes`` was applied from the log: True to snapshot now (the counts
        then start again, as Kafka's generator resets them when it emits)."""
        self.bytes_since += nbytes
        due = self.bytes_since >= self.max_bytes or (
            self.max_interval_ms != 0 and now - self.last_snapshot_ms >= self.max_interval_ms
        )
        if due:
            self.reset(now)
        return due
