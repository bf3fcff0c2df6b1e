"""Partition elections and AlterPartition on the active controller (sans-IO).

The replication rules ClusterControl (broker lifecycle) does not have: Kafka's
ReplicationControlManager.alterPartition and the PartitionChangeBuilder's elections with
``unclean.leader.election.enable``. Like ClusterControl it reads the active controller's image
(``image_fn()``, including its own uncommitted proposals) and answers with records to propose as
one batch; the driver applies them to that image before the next call.

- ``alter_partition(req, version=3) -> (records, AlterPartitionResponse)``: STALE_BROKER_EPOCH
  for the whole request when the broker's registration has another epoch; per partition, as
  Kafka validates in this order: UNKNOWN_TOPIC_ID (v>1, else UNKNOWN_TOPIC_OR_PARTITION) /
  UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER for a leader or partition epoch *above* the image's
  (this controller is behind), FENCED_LEADER_EPOCH for an older leader epoch, INVALID_REQUEST
  from a broker that does not lead, INVALID_UPDATE_VERSION for an older partition epoch,
  INVALID_REQUEST for an ISR outside the replicas or without the leader, or with more than the
  leader while it recovers from an unclean election; INELIGIBLE_REPLICA (v>1, else
  OPERATION_NOT_ATTEMPTED) for an ISR member that is unregistered, fenced, shutting down or
  gives another broker epoch. Accepted, it answers with the partition's state after the change
  (a request that changes nothing is answered with the current state, no record); a change that
  moves the leadership (a completed reassignment) is answered NEW_LEADER_ELECTED (v>1, else
  FENCED_LEADER_EPOCH), record kept.
- ``partition_change(topic_id, partition_id, p, acceptable, target_isr=None, election=ONLINE,
  target_leader_recovery_state=None, elr_enabled=False, min_isr=1, unclean_shutdown=()) ->
  dict | None``: Kafka's PartitionChangeBuilder without reassignment: keep the leader if it is in
  the target ISR and acceptable, else the first replica (assignment order) in the target ISR that
  is acceptable; PREFERRED tries the first replica first; UNCLEAN, when no ISR member is
  acceptable, takes the first acceptable replica and sets the ISR to it alone and the leader
  recovery state to RECOVERING (data may be lost). Without ELR the ISR is never emptied (the last
  member stays). With ELR (KIP-966, ``elr_enabled``): while the target ISR is below ``min_isr``
  the members leaving it become eligible leader replicas (not those in ``unclean_shutdown``), the
  ISR may become empty, and an empty ISR elects from the ELR (the one elected becomes the ISR);
  an ISR back at ``min_isr`` clears the ELR; an unclean election clears it too. The ELR is read
  from ``p.elr`` / ``p.last_known_elr`` when the registration has them (the image does not yet)
  and written as ``eligible_leader_replicas`` / ``last_known_elr``. Kafka's recovery from the last
  known leader (balanced unclean recovery) is not here.
- ``elect_unclean_leaders(unclean_enabled) -> records``: Kafka's periodic
  maybeElectUncleanLeaders (``unclean.leader.election.interval.ms``): every leaderless partition
  of a topic with ``unclean_enabled(topic)`` gets an unclean election.
- ``acceptable(image, broker)``: registered, unfenced, not in controlled shutdown (Kafka's
  ``isActive``).

- ``alter_partitions(reqs, version) -> (records, replies)``: a whole AlterPartition request (one
  batch of records, a reply per partition).
- ``elect_leaders(election, {topic: [partition]} | None) -> (records, {topic: [(partition, error
  code, message)]})``: Kafka's electLeaders (ElectLeaders, PREFERRED or UNCLEAN); ``elect_leader``
  for one partition.
- ``balance_partition_leaders() -> records``: Kafka 4's maybeBalancePartitionLeaders
  (``auto.leader.rebalance.enable``): a PREFERRED election wherever the first replica does not lead.
- ``unclean_enabled_in(image, topic, node_id, static_default)``: the topic's effective
  ``unclean.leader.election.enable`` (topic, this controller's broker config, cluster default,
  static config).

Not here yet: ELR in the image (``elr``/``last_known_elr`` in PartitionRegistration and the
records' tagged fields) and in ClusterControl's fencing, unclean-shutdown detection at
registration, reassignment, Kafka's cap of elections per balancing run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ..errors import ErrorCode, KafkaError
from ..metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC, MetadataImage, PartitionRegistration
from ..replication.replica_state import RECOVERED, RECOVERING, AlterPartitionReply
from .partition_change import (  # noqa: F401 (the names this module's users know it by)
    ELR_FEATURE,
    NO_LEADER,
    NO_LEADER_CHANGE,
    ONLINE,
    PREFERRED,
    UNCLEAN,
    acceptable,
    elr_args,
    elr_enabled_in,
    partition_change,
)
from .reassignment import change_partition, default_dir_fn, leader_acceptor

E = ErrorCode


@dataclass(slots=True)
class AlterPartitionRequest:
    """One partition of an AlterPartition request (Kafka's broker_id / broker_epoch and
    PartitionData with new_isr_with_epochs)."""

    broker_id: int
    broker_epoch: int
    topic_id: uuid.UUID
    partition_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: list[tuple[int, int]] = field(default_factory=list)  # (broker id, broker epoch or -1)
    leader_recovery_state: int = RECOVERED
    topic_name: str | None = None  # versions 0-1 name the topic


def _acceptor(image: MetadataImage, p: PartitionRegistration):
    """Who may lead ``p``: active (:func:`acceptable`) with its replica's log dir online."""
    return leader_acceptor(image, p, lambda b: acceptable(image, b))


def merged(p: PartitionRegistration, rec: dict | None) -> AlterPartitionReply:
    """The partition's state once ``rec`` is applied (the image's PartitionChangeRecord replay)."""
    if rec is None:
        return AlterPartitionReply(0, p.leader, list(p.isr), p.leader_epoch, p.partition_epoch, p.leader_recovery_state)
    leader_moves = rec["leader"] != NO_LEADER_CHANGE
    return AlterPartitionReply(
        0,
        rec["leader"] if leader_moves else p.leader,
        list(rec["isr"] if rec["isr"] is not None else p.isr),
        p.leader_epoch + (1 if leader_moves else 0),
        p.partition_epoch + 1,
        rec["leader_recovery_state"] if rec["leader_recovery_state"] != -1 else p.leader_recovery_state,
    )


class ReplicationControl:
    def __init__(self, image_fn, unclean_enabled=lambda topic: False, min_isr=lambda topic: 1):
        self.image_fn = image_fn
        self.unclean_enabled = unclean_enabled
        self.min_isr = min_isr  # topic -> its min.insync.replicas

    def alter_partition(self, req: AlterPartitionRequest, version: int = 3) -> tuple[list[dict], AlterPartitionReply]:
        image = self.image_fn()
        reg = image.brokers.get(req.broker_id)
        if reg is None or reg.epoch != req.broker_epoch:
            raise KafkaError(
                E.stale_broker_epoch,
                f"Expected broker epoch {reg.epoch if reg else -1}, but got broker epoch {req.broker_epoch}",
            )
        t = image.topics_by_id.get(req.topic_id) if version > 1 else image.topics_by_name.get(req.topic_name)
        if t is None:
            return [], AlterPartitionReply(int(E.unknown_topic_id if version > 1 else E.unknown_topic_or_partition))
        p = t.partitions.get(req.partition_id)
        err = self._validate(image, req, p, version)
        if err:
            return [], AlterPartitionReply(err)
        # with reassignment: the ISR that brings the last adding replica in completes it
        rec = change_partition(
            t.topic_id,
            req.partition_id,
            p,
            _acceptor(image, p),
            [b for b, _ in req.new_isr],
            UNCLEAN if self.unclean_enabled(t.name) else ONLINE,
            req.leader_recovery_state,
            **elr_args(image, t.name, p, self.min_isr),
            default_dir=default_dir_fn(image),
        )
        reply = merged(p, rec)
        records = [rec] if rec is not None else []
        if reply.leader != req.broker_id:
            return records, AlterPartitionReply(int(E.new_leader_elected if version > 1 else E.fenced_leader_epoch))
        return records, reply

    @staticmethod
    def _validate(
        image: MetadataImage, req: AlterPartitionRequest, p: PartitionRegistration | None, version: int
    ) -> int:
        if p is None:
            return int(E.unknown_topic_or_partition)
        if req.leader_epoch > p.leader_epoch or req.partition_epoch > p.partition_epoch:
            return int(E.not_controller)
        if req.leader_epoch < p.leader_epoch:
            return int(E.fenced_leader_epoch)
        if req.broker_id != p.leader:
            return int(E.invalid_request)
        if req.partition_epoch < p.partition_epoch:
            return int(E.invalid_update_version)
        isr = [b for b, _ in req.new_isr]
        if len(set(isr)) != len(isr) or not set(isr) <= set(p.replicas) or p.leader not in isr:
            return int(E.invalid_request)
        if req.leader_recovery_state == RECOVERING and len(isr) > 1:
            return int(E.invalid_request)
        if p.leader_recovery_state == RECOVERED and req.leader_recovery_state == RECOVERING:
            return int(E.invalid_request)
        for b, epoch in req.new_isr:
            reg = image.brokers.get(b)
            if reg is None or reg.in_controlled_shutdown or reg.fenced or (epoch != -1 and reg.epoch != epoch):
                return int(E.ineligible_replica if version > 1 else E.operation_not_attempted)
        return 0

    def elect_unclean_leaders(self) -> list[dict]:
        image = self.image_fn()
        out = []
        for t in image.topics_by_id.values():
            if not self.unclean_enabled(t.name):
                continue
            for pid, p in t.partitions.items():
                if p.leader == NO_LEADER:
                    rec = partition_change(
                        t.topic_id,
                        pid,
                        p,
                        _acceptor(image, p),
                        election=UNCLEAN,
                        **elr_args(image, t.name, p, self.min_isr),
                    )
                    if rec is not None:
                        out.append(rec)
        return out

    # -- a whole AlterPartition request, ElectLeaders and the periodic elections ----------------------
    def alter_partitions(self, reqs: list[AlterPartitionRequest], version: int = 3) -> tuple[list[dict], list]:
        """One AlterPartition request (every partition of one broker's request): the records to
        write as one batch and an :class:`AlterPartitionReply` per partition, in order.
        STALE_BROKER_EPOCH (a KafkaError) fails the whole request."""
        records, replies = [], []
        for r in reqs:
            recs, reply = self.alter_partition(r, version)
            records += recs
            replies.append(reply)
        return records, replies

    def elect_leader(self, topic: str, partition_id: int, election: str) -> tuple[dict | None, int, str | None]:
        """Kafka's electLeader for one partition of ElectLeaders: (record or None, error code,
        message)."""
        image = self.image_fn()
        t = image.topics_by_name.get(topic)
        if t is None:
            return None, int(E.unknown_topic_or_partition), f"No such topic as {topic}"
        p = t.partitions.get(partition_id)
        if p is None:
            return None, int(E.unknown_topic_or_partition), f"No such partition as {topic}-{partition_id}"
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if (election == PREFERRED and p.leader == preferred) or (election == UNCLEAN and p.leader != NO_LEADER):
            return None, int(E.election_not_needed), ELECTION_MESSAGES[E.election_not_needed]
        rec = partition_change(
            t.topic_id,
            partition_id,
            p,
            _acceptor(image, p),
            election=election,
            **elr_args(image, topic, p, self.min_isr),
        )
        if rec is None:
            code = E.preferred_leader_not_available if election == PREFERRED else E.eligible_leaders_not_available
            return None, int(code), ELECTION_MESSAGES[code]
        return rec, 0, None

    def elect_leaders(
        self, election: str, partitions: dict[str, list[int]] | None
    ) -> tuple[list[dict], dict[str, list[tuple[int, int, str | None]]]]:
        """Kafka's electLeaders: ``partitions`` None means every partition, and then the
        partitions that already have the wanted leader are left out of the answer. Returns the
        records and {topic: [(partition, error code, message)]}."""
        image = self.image_fn()
        if partitions is None:
            partitions = {name: sorted(t.partitions) for name, t in sorted(image.topics_by_name.items())}
            skip = int(E.election_not_needed)
        else:
            skip = None
        records, results = [], {}
        for topic, ids in partitions.items():
            out = results.setdefault(topic, [])
            for pid in ids:
                rec, code, message = self.elect_leader(topic, pid, election)
                if rec is not None:
                    records.append(rec)
                if code != skip:
                    out.append((pid, code, message))
        return records, results

    def balance_partition_leaders(self) -> list[dict]:
        """Kafka 4's maybeBalancePartitionLeaders (``auto.leader.rebalance.enable``): a preferred
        election for every partition not led by its first replica."""
        image = self.image_fn()
        out = []
        for t in image.topics_by_id.values():
            for pid, p in t.partitions.items():
                if p.replicas and p.leader != p.replicas[0]:
                    rec = partition_change(
                        t.topic_id,
                        pid,
                        p,
                        _acceptor(image, p),
                        election=PREFERRED,
                        **elr_args(image, t.name, p, self.min_isr),
                    )
                    if rec is not None:
                        out.append(rec)
        return out


ELECTION_TYPES = {0: PREFERRED, 1: UNCLEAN}  # ElectLeaders' election_type
ELECTION_MESSAGES = {
    E.election_not_needed: "Leader election not needed for topic partition.",
    E.preferred_leader_not_available: "The preferred leader was not available.",
    E.eligible_leaders_not_available: "Eligible topic partition leaders are not available.",
}
UNCLEAN_KEY = "unclean.leader.election.enable"


def unclean_enabled_in(image: MetadataImage, topic: str, node_id: int, static_default: bool) -> bool:
    """A topic's effective ``unclean.leader.election.enable`` as the controller resolves it: the
    topic's config, else this controller's broker config, else the cluster default, else the
    static config."""

    for resource in ((RESOURCE_TOPIC, topic), (RESOURCE_BROKER, str(node_id)), (RESOURCE_BROKER, "")):
        value = image.configs.get(resource, {}).get(UNCLEAN_KEY)
        if value is not None:
            return str(value).strip().lower() == "true"
    return bool(static_default)


MIN_ISR_KEY = "min.insync.replicas"


def min_isr_in(image: MetadataImage, topic: str, node_id: int, static_default: int) -> int:
    """A topic's ``min.insync.replicas`` as the controller resolves it (the same order as
    :func:`unclean_enabled_in`)."""

    for resource in ((RESOURCE_TOPIC, topic), (RESOURCE_BROKER, str(node_id)), (RESOURCE_BROKER, "")):
        value = image.configs.get(resource, {}).get(MIN_ISR_KEY)
        if value is not None:
            try:
                return max(int(value), 1)
            except ValueError:
                break
    return max(int(static_default or 1), 1)


def clear_elr_records(image: MetadataImage, config_records: list[dict]) -> list[dict]:
    """Kafka's createClearElrRecordsAsNeeded: with ELR on, every change of min.insync.replicas
    clears the ELR it was computed against, a topic's with a ClearElrRecord naming it, a broker's
    or the cluster default's with one naming no topic (all of them)."""
    if not elr_enabled_in(image):
        return []
    return [
        {"type": "ClearElrRecord", "topic_name": r["resource_name"] if r["resource_type"] == RESOURCE_TOPIC else ""}
        for r in config_records
        if r["type"] == "ConfigRecord" and r["name"] == MIN_ISR_KEY
    ]
