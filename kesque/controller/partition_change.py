"""Kafka's PartitionChangeBuilder without reassignment: the partition change record an ISR
change or a leader election writes (:func:`partition_change`), who may lead (:func:`acceptable`)
and the KIP-966 ELR fields. Both the replication control and the reassignment code build on it
(reassignment.change_partition adds the replica-set changes), so it imports neither."""

from __future__ import annotations

import uuid

from ..metadata.image import MetadataImage, PartitionRegistration
from ..replication.replica_state import RECOVERING
from ..utils import hash_set_order

NO_LEADER = -1
NO_LEADER_CHANGE = -2
PREFERRED, ONLINE, UNCLEAN = "PREFERRED", "ONLINE", "UNCLEAN"


def acceptable(image: MetadataImage, broker: int) -> bool:
    reg = image.brokers.get(broker)
    return reg is not None and not reg.fenced and not reg.in_controlled_shutdown


def partition_change(
    topic_id: uuid.UUID,
    partition_id: int,
    p: PartitionRegistration,
    acceptable_fn,
    target_isr: list[int] | None = None,
    election: str = ONLINE,
    target_leader_recovery_state: int | None = None,
    elr_enabled: bool = False,
    min_isr: int = 1,
    unclean_shutdown: tuple[int, ...] = (),
    bump_leader_epoch: bool = False,
) -> dict | None:
    """Kafka 4.4's PartitionChangeBuilder.build (the reassignment part is
    :func:`~kesque.controller.reassignment.change_partition`'s). Its steps, in Kafka's order:
    the target ELR, the election, the leader epoch bump of a reassignment, the ELR fields, the
    ISR, the last known leader."""
    isr = list(p.isr) if target_isr is None else list(target_isr)
    old_elr, old_lkelr = list(p.elr), list(p.last_known_elr)
    elr = _target_elr(p, isr, old_elr, min_isr, unclean_shutdown) if elr_enabled else old_elr
    rec = {
        "type": "PartitionChangeRecord",
        "topic_id": topic_id,
        "partition_id": partition_id,
        "isr": None,
        "leader": NO_LEADER_CHANGE,
        "replicas": None,
        "removing_replicas": None,
        "adding_replicas": None,
        "leader_recovery_state": -1,
    }

    def valid(r: int) -> bool:  # Kafka's isValidNewLeader: in the ISR, or in the ELR when the ISR is empty
        return (r in isr or (not isr and r in elr)) and acceptable_fn(r)

    def last_known_leader() -> int:
        """Kafka's canElectLastKnownLeader (balanced recovery, on in 4.4 with ELR): with the ISR
        and the ELR empty, the last known leader may lead again, as an unclean election."""
        if elr_enabled and not isr and not elr and len(old_lkelr) == 1 and acceptable_fn(old_lkelr[0]):
            return old_lkelr[0]
        return NO_LEADER

    # the election (Kafka's electPreferredLeader / electAnyLeader)
    leader, unclean = NO_LEADER, False
    if election == PREFERRED and p.replicas and valid(p.replicas[0]):
        leader = p.replicas[0]
    elif valid(p.leader):
        leader = p.leader
    else:
        leader = next((r for r in p.replicas if valid(r)), NO_LEADER)
        if leader == NO_LEADER and last_known_leader() != NO_LEADER:
            leader, unclean = last_known_leader(), True
        elif leader == NO_LEADER and election == UNCLEAN:
            leader = next((r for r in p.replicas if acceptable_fn(r)), NO_LEADER)
            unclean = leader != NO_LEADER
    if leader != p.leader:
        if leader in elr:  # elected from the ELR: it is the ISR now
            isr, elr = [leader], [r for r in elr if r != leader]
        rec["leader"] = leader
        if unclean:
            rec["isr"] = [leader]
            if p.leader_recovery_state != RECOVERING:
                rec["leader_recovery_state"] = RECOVERING
    if bump_leader_epoch and rec["leader"] == NO_LEADER_CHANGE:
        rec["leader"] = p.leader  # a replica leaves the assignment: the leader epoch bumps
    # the ELR fields (Kafka's maybeUpdateRecordElr): cleared by an unclean election or with ELR off
    if rec["isr"] is not None or not elr_enabled:
        elr = []
    if elr != old_elr:
        rec["eligible_leader_replicas"] = elr
    # with ELR the ISR may become empty
    if rec["isr"] is None and (isr or elr_enabled) and isr != list(p.isr):
        rec["isr"] = isr
    # the last known leader (Kafka's maybeUpdateLastKnownLeader): kept in the last known ELR from
    # the moment the partition loses its leader, cleared once it has one again
    if elr_enabled:
        if rec["leader"] == NO_LEADER and not old_lkelr:
            rec["last_known_elr"] = [p.leader]
        elif rec["leader"] >= 0 and old_lkelr:
            rec["last_known_elr"] = []
    if (
        target_leader_recovery_state is not None
        and target_leader_recovery_state != p.leader_recovery_state
        and rec["leader_recovery_state"] == -1
    ):
        rec["leader_recovery_state"] = target_leader_recovery_state
    if (
        rec["leader"] == NO_LEADER_CHANGE
        and rec["isr"] is None
        and rec["leader_recovery_state"] == -1
        and "eligible_leader_replicas" not in rec
        and "last_known_elr" not in rec
    ):
        return None
    return rec


def _target_elr(p, isr: list[int], elr: list[int], min_isr: int, unclean_shutdown) -> list[int]:
    """Kafka's maybePopulateTargetElr: an ISR at ``min_isr`` or above has no ELR; below it, the
    ELR is the current ELR and ISR that are not in the target ISR, less the replicas that shut
    down uncleanly, in the order of Kafka's HashSet."""
    if len(isr) >= min_isr:
        return []
    return [r for r in hash_set_order(elr + list(p.isr)) if r not in isr and r not in unclean_shutdown]


def elr_enabled_in(image: MetadataImage) -> bool:
    """KIP-966 is on when the finalized ``eligible.leader.replicas.version`` is at least 1 (Kafka
    4.4's FeatureControlManager.isElrFeatureEnabled; a new Kafka 4.4 cluster is formatted with 1)."""
    return image.features.get(ELR_FEATURE, 0) >= 1


ELR_FEATURE = "eligible.leader.replicas.version"


def elr_args(image: MetadataImage, topic: str, p: PartitionRegistration, min_isr_fn) -> dict:
    """The ELR keywords of :func:`partition_change` for one partition: ELR on or off, and the
    topic's effective min ISR, Kafka's getTopicEffectiveMinIsr: min(min.insync.replicas, RF)."""
    return {"elr_enabled": elr_enabled_in(image), "min_isr": min(int(min_isr_fn(topic)), len(p.replicas) or 1)}
