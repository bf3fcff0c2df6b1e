"""Partition reassignment on the active controller (sans-IO).

Kafka's ReplicationControlManager.alterPartitionReassignments / listPartitionReassignments,
PartitionReassignmentReplicas, PartitionReassignmentRevert and the reassignment part of
PartitionChangeBuilder, as kesque's controller writes them (records as dicts, read from an
image; the caller proposes the records as one batch).

A reassignment goes through three stages (Kafka 4.4):

1. the start writes a PartitionChangeRecord whose replicas are the target followed by the
   current replicas the target drops (``removing_replicas``, sorted); the target's new ones are
   ``adding_replicas`` (sorted);
2. the followers in ``adding_replicas`` fetch and the leader brings them into the ISR
   (AlterPartition);
3. the change that makes the ISR hold every adding replica (and, when the reassignment shrinks
   the replication factor, every remaining replica) completes it: the removing replicas leave
   the replicas and the ISR, adding/removing are cleared, a leader among them gives way to the
   first remaining ISR replica in the new order, and the leader epoch bumps because a replica
   left. A start whose ISR already qualifies (a reorder, a shrink) completes at once.

A cancel (null replicas) reverts: the replicas lose the adding ones, the ISR too; if that
empties the ISR, the first original replica is taken alone, an unclean election refused
(INVALID_REPLICA_ASSIGNMENT) unless ``unclean.leader.election.enable`` holds for the topic.
A new target while one is in progress starts from the current (widened) replica list, as Kafka.

- ``change_partition(...)``: :func:`kesque.controller.replication_control.partition_change`
  with reassignment: completion, election in the target order, the epoch bump, the assignment
  fields. ``ReplicationControl.alter_partition`` builds its record with it, so the AlterPartition
  that brings the last adding replica in completes the reassignment.
- ``alter_reassignments(image, topics, unclean_enabled, allow_rf_change) -> (records, results)``
- ``list_reassignments(image, topics | None) -> [(topic, [(partition, replicas, adding, removing)])]``
"""

from __future__ import annotations

import dataclasses
import uuid

from ..errors import ErrorCode, KafkaError
from ..metadata.image import UNASSIGNED, MetadataImage, PartitionRegistration, directories_supported
from .partition_change import ONLINE, UNCLEAN, acceptable, partition_change

NO_LEADER_CHANGE = -2
E = ErrorCode


def in_progress(p: PartitionRegistration) -> bool:
    return bool(p.removing_replicas or p.adding_replicas)


def target_assignment(current: list[int], target: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(replicas, removing, adding) of a reassignment from ``current`` to ``target``."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return list(target) + removing, removing, adding


def completed(
    replicas: list[int], removing: list[int], adding: list[int], target_isr: list[int]
) -> tuple[list[int], list[int]] | None:
    """(replicas, isr) once the reassignment is complete with ``target_isr``, else None
    (Kafka 4.4's maybeCompleteReassignment)."""
    if not removing and not adding:
        return None
    isr, new_replicas = list(target_isr), list(replicas)
    if removing:
        isr = [r for r in target_isr if r not in removing]
        new_replicas = [r for r in replicas if r not in removing]
        if not isr or not new_replicas:
            return None
    if not set(adding) <= set(isr):
        return None
    if len(adding) < len(removing) and not set(new_replicas) <= set(isr):
        return None
    return new_replicas, isr


def revert(p: PartitionRegistration) -> tuple[list[int], list[int], bool]:
    """(replicas, isr, unclean) after cancelling ``p``'s reassignment (PartitionReassignmentRevert)."""
    replicas = [r for r in p.replicas if r not in p.adding_replicas]
    isr = [r for r in p.isr if r not in p.adding_replicas]
    if isr:
        return replicas, isr, False
    if not replicas:
        raise KafkaError(
            E.invalid_replica_assignment, "Invalid replica assignment: addingReplicas contains all replicas."
        )
    return replicas, [replicas[0]], True


def validate_manual_assignment(image: MetadataImage, replicas: list[int], rf: int | None = None) -> None:
    """Kafka's validateManualPartitionAssignment: not empty; in id order, each registered
    (fenced ones too) and given once; ``rf`` replicas when given."""
    if not replicas:
        raise KafkaError(
            E.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."
        )
    previous = None
    for r in sorted(replicas):
        if r not in image.brokers:
            raise KafkaError(
                E.invalid_replica_assignment,
                f"The manual partition assignment includes broker {r}, but no such broker is registered.",
            )
        if r == previous:
            raise KafkaError(
                E.invalid_replica_assignment, f"The manual partition assignment includes the broker {r} more than once."
            )
        previous = r
    if rf is not None and len(replicas) != rf:
        raise KafkaError(
            E.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
            f"this is not consistent with previous partitions, which have {rf} replica(s).",
        )


def change_partition(
    topic_id: uuid.UUID,
    partition_id: int,
    p: PartitionRegistration,
    acceptable_fn,
    target_isr: list[int] | None = None,
    election: str | None = None,
    target_leader_recovery_state: int | None = None,
    *,
    replicas: list[int] | None = None,
    removing: list[int] | None = None,
    adding: list[int] | None = None,
    elr_enabled: bool = False,
    min_isr: int = 1,
    default_dir=None,
) -> dict | None:
    """Kafka's PartitionChangeBuilder.build with reassignment; ``replicas`` / ``removing`` /
    ``adding`` None keep the partition's. ``default_dir`` (:func:`default_dir_fn`; None before
    metadata.version 3.7-IV2): a replica keeps its directory, a new one gets its broker's
    default, written as ``directories`` when they change (Kafka's setAssignmentChanges)."""
    replicas = list(p.replicas if replicas is None else replicas)
    removing = list(p.removing_replicas if removing is None else removing)
    adding = list(p.adding_replicas if adding is None else adding)
    isr = list(p.isr if target_isr is None else target_isr)
    done = completed(replicas, removing, adding, isr)
    if done is not None:
        (replicas, isr), removing, adding = done, [], []
    # the election runs in the target order (the first replica leads a preferred election)
    view = dataclasses.replace(p, replicas=replicas)
    rec = partition_change(
        topic_id,
        partition_id,
        view,
        acceptable_fn,
        isr,
        election or ONLINE,
        target_leader_recovery_state,
        elr_enabled=elr_enabled,
        min_isr=min_isr,
        bump_leader_epoch=not set(p.replicas) <= set(replicas),
    ) or _unchanged(topic_id, partition_id)
    if replicas and default_dir is not None:
        dirs = [p.directory(r) if r in p.replicas else default_dir(r) for r in replicas]
        if dirs != [p.directory(r) for r in p.replicas]:
            rec["directories"] = dirs
    if replicas and replicas != list(p.replicas):
        rec["replicas"] = replicas
    if removing != list(p.removing_replicas):
        rec["removing_replicas"] = removing
    if adding != list(p.adding_replicas):
        rec["adding_replicas"] = adding
    return None if rec == _unchanged(topic_id, partition_id) else rec


def default_dir_fn(image: MetadataImage):
    """KIP-858: broker id -> the directory a new replica on it is assigned (Kafka's
    defaultDir: its only log dir, UNASSIGNED with several or when it is not registered,
    MIGRATING when it registered none); None before metadata.version 3.7-IV2."""
    if not directories_supported(image):
        return None

    def default_dir(b: int):
        reg = image.brokers.get(b)
        return UNASSIGNED if reg is None else reg.default_dir()

    return default_dir


def leader_acceptor(image: MetadataImage, p: PartitionRegistration, active):
    """Kafka's LeaderAcceptor: ``active(broker)`` and the replica's directory online on it (a
    replica in a failed log dir may not lead)."""

    def ok(b: int) -> bool:
        if not active(b):
            return False
        reg = image.brokers.get(b)
        return reg is None or reg.has_online_dir(p.directory(b))

    return ok


def _unchanged(topic_id: uuid.UUID, partition_id: int) -> dict:
    return {
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


def _start(
    image: MetadataImage,
    topic_id: uuid.UUID,
    pid: int,
    p: PartitionRegistration,
    target: list[int],
    allow_rf_change: bool,
    acceptable_fn,
) -> dict | None:
    validate_manual_assignment(image, target)
    if not allow_rf_change:
        current_rf = (
            len((set(p.replicas) | set(p.adding_replicas)) - set(p.removing_replicas))
            if in_progress(p)
            else len(p.replicas)
        )
        if len(target) != current_rf:
            raise KafkaError(
                E.invalid_replication_factor, f"The replication factor is changed from {current_rf} to {len(target)}"
            )
    replicas, removing, adding = target_assignment(p.replicas, target)
    return change_partition(
        topic_id,
        pid,
        p,
        leader_acceptor(image, p, acceptable_fn),
        replicas=replicas,
        removing=removing or None,
        adding=adding or None,
        default_dir=default_dir_fn(image),
    )


def _cancel(
    image: MetadataImage,
    topic_id: uuid.UUID,
    name: str,
    pid: int,
    p: PartitionRegistration,
    unclean: bool,
    acceptable_fn,
) -> dict | None:
    if not in_progress(p):
        raise KafkaError(E.no_reassignment_in_progress)
    replicas, isr, needs_unclean = revert(p)
    if needs_unclean and not unclean:
        raise KafkaError(
            E.invalid_replica_assignment,
            f"Unable to revert partition assignment for {name}:{pid} "
            "because it would require an unclean leader election.",
        )
    return change_partition(
        topic_id,
        pid,
        p,
        leader_acceptor(image, p, acceptable_fn),
        isr,
        UNCLEAN if unclean else ONLINE,
        replicas=replicas,
        removing=[],
        adding=[],
        default_dir=default_dir_fn(image),
    )


def alter_reassignments(
    image: MetadataImage,
    topics: list[tuple[str, list[tuple[int, list[int] | None]]]],
    unclean_enabled=lambda topic: False,
    allow_rf_change: bool = True,
):
    """AlterPartitionReassignments: ``topics`` is [(name, [(partition, target replicas or
    None to cancel)])]. Returns (records, [(name, [(partition, KafkaError | None)])]); the
    records go in one batch (Kafka's atomic result)."""
    records: list[dict] = []
    results = []
    for name, partitions in topics:
        out = []
        for pid, target in partitions:
            try:
                t = image.topic(name)
                if t is None:
                    raise KafkaError(E.unknown_topic_or_partition, f"Unable to find a topic named {name}.")
                p = t.partitions.get(pid)
                if p is None:
                    raise KafkaError(E.unknown_topic_or_partition, f"Unable to find partition {name}:{pid}.")
                ok = lambda b: acceptable(image, b)  # noqa: E731
                rec = (
                    _cancel(image, t.topic_id, name, pid, p, unclean_enabled(name), ok)
                    if target is None
                    else _start(image, t.topic_id, pid, p, list(target), allow_rf_change, ok)
                )
                if rec is not None:
                    records.append(rec)
                out.append((pid, None))
            except KafkaError as e:
                out.append((pid, e))
        results.append((name, out))
    return records, results


def list_reassignments(image: MetadataImage, topics: list[tuple[str, list[int]]] | None = None):
    """ListPartitionReassignments: [(topic, [(partition, replicas, adding, removing)])] of the
    partitions being reassigned, among ``topics`` ([(name, partitions)]) or all of them;
    topics without one are left out."""
    if topics is None:
        topics = [(name, sorted(t.partitions)) for name, t in sorted(image.topics_by_name.items())]
    out = []
    for name, pids in topics:
        t = image.topic(name)
        if t is None:
            continue
        parts = [
            (pid, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for pid in pids
            if (p := t.partitions.get(pid)) is not None and in_progress(p)
        ]
        if parts:
            out.append((name, parts))
    return out
