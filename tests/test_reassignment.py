"""Partition reassignment on the controller (kesque/controller/reassignment.py): Kafka's start,
completion, cancel and list rules, their errors, and completion by AlterPartition."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kesque.config.broker import BrokerConfig
from kesque.controller.controller import Controller, NewTopic
from kesque.controller.reassignment import alter_reassignments, list_reassignments
from kesque.controller.replication_control import AlterPartitionRequest, ReplicationControl
from kesque.errors import ErrorCode as E
from kesque.metadata import records as mr
from kesque.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC, Delta, MetadataImage
from test_quorum_controller import ENDPOINT, committed, started

TID = uuid.UUID(int=7)
BROKERS = (1, 2, 3, 4, 5)


def image(replicas=(1, 2, 3), isr=None, leader=None, adding=(), removing=()):
    img = MetadataImage()
    d = Delta()
    for b in BROKERS:
        img.replay(
            {
                "type": "RegisterBrokerRecord",
                "broker_id": b,
                "incarnation_id": uuid.UUID(int=b),
                "broker_epoch": 100 + b,
                "endpoints": [],
                "fenced": False,
            },
            d,
        )
    img.replay({"type": "TopicRecord", "name": "t", "topic_id": TID}, d)
    img.replay(
        {
            "type": "PartitionRecord",
            "partition_id": 0,
            "topic_id": TID,
            "replicas": list(replicas),
            "isr": list(isr if isr is not None else replicas),
            "removing_replicas": list(removing),
            "adding_replicas": list(adding),
            "leader": leader if leader is not None else replicas[0],
            "leader_recovery_state": 0,
            "leader_epoch": 4,
            "partition_epoch": 9,
        },
        d,
    )
    return img


def part(img):
    return img.topics_by_id[TID].partitions[0]


def reassign(img, target, unclean=False, allow_rf_change=True, apply=True):
    """One partition's reassignment: (records, error or None); the records replayed."""
    records, results = alter_reassignments(img, [("t", [(0, target)])], lambda t: unclean, allow_rf_change)
    for rec in records if apply else ():
        img.replay(rec, Delta())
    return records, results[0][1][0][1]


def change(**fields):
    rec = {
        "type": "PartitionChangeRecord",
        "topic_id": TID,
        "partition_id": 0,
        "isr": None,
        "leader": -2,
        "replicas": None,
        "removing_replicas": None,
        "adding_replicas": None,
        "leader_recovery_state": -1,
    }
    rec.update(fields)
    return rec


def expand(img, isr, version=3):
    """The leader's AlterPartition to ``isr``: (records, reply), records replayed."""
    p = part(img)
    req = AlterPartitionRequest(
        p.leader, 100 + p.leader, TID, 0, p.leader_epoch, p.partition_epoch, [(b, -1) for b in isr], topic_name="t"
    )
    records, reply = ReplicationControl(lambda: img).alter_partition(req, version)
    for rec in records:
        img.replay(rec, Delta())
    return records, reply


# ------------------------------------------------------------------ start


def test_a_start_widens_the_replicas_with_adding_and_removing():
    img = image()
    records, err = reassign(img, [2, 3, 4])
    assert err is None
    assert records == [change(replicas=[2, 3, 4, 1], removing_replicas=[1], adding_replicas=[4])]
    p = part(img)
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 4, 10, [1, 2, 3])  # no epoch bump
    assert list_reassignments(img) == [("t", [(0, [2, 3, 4, 1], [4], [1])])]


def test_removing_and_adding_are_sorted_and_the_removed_follow_the_target():
    img = image(replicas=(3, 1, 2))
    records, _ = reassign(img, [5, 4, 2])
    assert records == [change(replicas=[5, 4, 2, 1, 3], removing_replicas=[1, 3], adding_replicas=[4, 5])]


def test_a_reorder_completes_at_once_without_a_leader_change():
    img = image()
    records, err = reassign(img, [3, 2, 1])
    assert err is None and records == [change(replicas=[3, 2, 1])]
    assert (part(img).leader, part(img).leader_epoch) == (1, 4)
    assert list_reassignments(img) == []


def test_a_shrink_with_the_isr_complete_finishes_at_once_and_bumps_the_leader_epoch():
    img = image()
    records, _ = reassign(img, [1, 2])
    assert records == [change(replicas=[1, 2], isr=[1, 2], leader=1)]
    assert (part(img).replicas, part(img).leader_epoch, part(img).removing_replicas) == ([1, 2], 5, [])


def test_a_shrink_that_drops_the_leader_elects_the_first_remaining_isr_replica():
    img = image()
    records, _ = reassign(img, [3, 2])
    assert records == [change(replicas=[3, 2], isr=[2, 3], leader=3)]


def test_a_reassignment_to_the_current_replicas_writes_nothing():
    img = image()
    records, err = reassign(img, [1, 2, 3])
    assert err is None and records == []


def test_a_new_target_while_one_is_in_progress_starts_from_the_widened_replicas():
    img = image(replicas=(1, 2))
    reassign(img, [3, 4])
    assert part(img).replicas == [3, 4, 1, 2]
    records, _ = reassign(img, [5, 4])
    assert records == [change(replicas=[5, 4, 1, 2, 3], removing_replicas=[1, 2, 3], adding_replicas=[5])]


@pytest.mark.parametrize(
    "target,code,message",
    [
        ([], E.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."),
        (
            [1, 2, 9],
            E.invalid_replica_assignment,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
        (
            [2, 1, 2],
            E.invalid_replica_assignment,
            "The manual partition assignment includes the broker 2 more than once.",
        ),
        (
            [9, 1, 1],
            E.invalid_replica_assignment,
            "The manual partition assignment includes the broker 1 more than once.",
        ),
    ],
)
def test_invalid_targets(target, code, message):
    img = image()
    records, err = reassign(img, target)
    assert records == [] and (err.code, err.message) == (code, message)


def test_unknown_topic_and_partition_are_per_partition_errors_beside_accepted_ones():
    img = image()
    records, results = alter_reassignments(img, [("t", [(0, [2, 3, 4]), (7, [1])]), ("nope", [(0, [1])])])
    assert len(records) == 1
    assert [(pid, err and (err.code, err.message)) for _t, parts in results for pid, err in parts] == [
        (0, None),
        (7, (E.unknown_topic_or_partition, "Unable to find partition t:7.")),
        (0, (E.unknown_topic_or_partition, "Unable to find a topic named nope.")),
    ]


def test_a_replication_factor_change_is_refused_when_not_allowed():
    img = image()
    records, err = reassign(img, [1, 2], allow_rf_change=False)
    assert records == [] and (err.code, err.message) == (
        E.invalid_replication_factor,
        "The replication factor is changed from 3 to 2",
    )
    assert reassign(img, [2, 3, 4], allow_rf_change=False)[1] is None
    # in progress, the replication factor is the target's (replicas + adding - removing)
    err = reassign(img, [2, 3, 4, 5], allow_rf_change=False)[1]
    assert err.message == "The replication factor is changed from 3 to 4"


# ------------------------------------------------------------------ completion by AlterPartition


def test_the_expansion_that_brings_the_last_adding_replica_in_completes_and_moves_the_leader():
    img = image()
    reassign(img, [2, 3, 4])
    records, reply = expand(img, [1, 2, 3, 4])
    assert records == [change(replicas=[2, 3, 4], isr=[2, 3, 4], leader=2, removing_replicas=[], adding_replicas=[])]
    assert reply.error_code == E.new_leader_elected
    p = part(img)
    assert (p.leader, p.leader_epoch, p.replicas, p.adding_replicas, p.removing_replicas) == (2, 5, [2, 3, 4], [], [])
    assert list_reassignments(img) == []


def test_before_version_2_the_moved_leader_is_told_fenced_leader_epoch():
    img = image()
    reassign(img, [2, 3, 4])
    records, reply = expand(img, [1, 2, 3, 4], version=1)
    assert records and reply.error_code == E.fenced_leader_epoch


def test_a_completion_that_keeps_the_leader_answers_with_the_bumped_leader_epoch():
    img = image()
    reassign(img, [1, 2, 4])
    records, reply = expand(img, [1, 2, 3, 4])
    assert records == [change(replicas=[1, 2, 4], isr=[1, 2, 4], leader=1, removing_replicas=[], adding_replicas=[])]
    assert (reply.error_code, reply.leader, reply.isr, reply.leader_epoch) == (0, 1, [1, 2, 4], 5)


def test_an_expansion_short_of_an_adding_replica_only_changes_the_isr():
    img = image()
    reassign(img, [1, 4, 5])
    records, reply = expand(img, [1, 2, 3, 4])
    assert records == [change(isr=[1, 2, 3, 4])]
    assert reply.error_code == 0 and part(img).adding_replicas == [4, 5]


def test_a_kept_replica_outside_the_isr_does_not_hold_up_a_same_size_move():
    # Kafka 4.4: only the adding replicas must be in the ISR unless the replica count shrinks
    img = image()
    reassign(img, [1, 2, 4])
    records, _ = expand(img, [1, 3, 4])
    assert records[0]["replicas"] == [1, 2, 4] and records[0]["isr"] == [1, 4]


def test_a_shrinking_move_waits_for_every_remaining_replica():
    img = image(isr=(1, 3))
    reassign(img, [1, 2])
    assert part(img).removing_replicas == [3]
    records, _ = expand(img, [1, 3])
    assert records == []
    records, _ = expand(img, [1, 2, 3])
    assert records == [change(replicas=[1, 2], isr=[1, 2], leader=1, removing_replicas=[])]


# ------------------------------------------------------------------ cancel


def test_cancelling_nothing_is_no_reassignment_in_progress():
    img = image()
    records, err = reassign(img, None)
    assert records == [] and err.code == E.no_reassignment_in_progress


def test_a_cancel_reverts_to_the_original_replicas_and_drops_the_adding_from_the_isr():
    img = image()
    reassign(img, [2, 4, 5])
    expand(img, [1, 2, 3, 4])  # 5 has not caught up
    records, err = reassign(img, None)
    assert err is None
    # the replicas keep their order in the widened list (Kafka's revert does not restore 1, 2, 3)
    assert records == [change(replicas=[2, 1, 3], isr=[1, 2, 3], leader=1, removing_replicas=[], adding_replicas=[])]
    assert list_reassignments(img) == []


def test_a_cancel_that_needs_an_unclean_election_is_refused_unless_enabled():
    img = image(replicas=(2, 1), isr=(2,), leader=2, adding=(2,), removing=(1,))
    records, err = reassign(img, None)
    assert records == [] and (err.code, err.message) == (
        E.invalid_replica_assignment,
        "Unable to revert partition assignment for t:0 because it would require an unclean leader election.",
    )
    records, err = reassign(img, None, unclean=True)
    assert err is None
    # the revert's ISR holds the new leader, so Kafka's election itself is clean: not RECOVERING
    assert records == [change(replicas=[1], isr=[1], leader=1, removing_replicas=[], adding_replicas=[])]


def test_an_unclean_revert_elects_only_among_the_original_replicas():
    img = image(replicas=(2, 1), isr=(2,), leader=2, adding=(2,), removing=(1,))
    img.replay({"type": "FenceBrokerRecord", "id": 1, "epoch": 101}, Delta())
    records, err = reassign(img, None, unclean=True)
    # 2 is acceptable but no longer a replica: the partition is left without a leader
    assert err is None and records == [
        change(replicas=[1], isr=[1], leader=-1, removing_replicas=[], adding_replicas=[])
    ]


# ------------------------------------------------------------------ list and the image


def test_list_filters_by_topic_and_partition_and_skips_unknown_topics():
    img = image()
    reassign(img, [2, 3, 4])
    assert list_reassignments(img, [("t", [0, 1]), ("nope", [0])]) == [("t", [(0, [2, 3, 4, 1], [4], [1])])]
    assert list_reassignments(img, [("t", [1])]) == []


def test_adding_and_removing_survive_the_record_encoding_and_the_image_replay():
    img = image()
    records, _ = reassign(img, [2, 3, 4], apply=False)
    fresh = image()
    for rec in records:
        fresh.replay(mr.decode(mr.encode(rec)), Delta())
    assert (part(fresh).adding_replicas, part(fresh).removing_replicas) == ([4], [1])
    back = MetadataImage()
    d = Delta()
    for rec in (
        {"type": "TopicRecord", "name": "t", "topic_id": TID},
        {
            "type": "PartitionRecord",
            "partition_id": 0,
            "topic_id": TID,
            "replicas": [2, 3, 4, 1],
            "isr": [1, 2, 3],
            "removing_replicas": [1],
            "adding_replicas": [4],
            "leader": 1,
            "leader_recovery_state": 0,
            "leader_epoch": 0,
            "partition_epoch": 0,
        },
    ):
        back.replay(mr.decode(mr.encode(rec)), d)
    assert (part(back).adding_replicas, part(back).removing_replicas) == ([4], [1])


# ------------------------------------------------------------------ through the QuorumController


def test_the_quorum_controller_answers_once_committed_and_lists_from_the_committed_image():
    async def scenario():
        raft, qc = started()
        for b in (1, 2, 3, 4):
            await committed(raft, qc, qc.call("register_broker", b, ENDPOINT))
        await committed(raft, qc, qc.call("create_topics", [NewTopic("t", assignments={0: [1, 2, 3]})]))
        task = asyncio.ensure_future(qc.call("alter_partition_reassignments", [("t", [(0, [2, 3, 4])])]))
        await asyncio.sleep(0)
        assert not task.done() and await qc.list_partition_reassignments(None) == []
        raft.commit(qc)
        assert (await task) == [("t", [(0, None)])]
        assert await qc.list_partition_reassignments(None) == [("t", [(0, [2, 3, 4, 1], [4], [1])])]

    asyncio.run(scenario())


def test_a_cancel_reads_unclean_election_from_the_topic_then_the_cluster_default():
    img = image()
    c = Controller(BrokerConfig({}), img, None, None, lambda delta: None)
    assert not c.unclean_enabled("t")
    for rtype, name, value, expected in ((RESOURCE_BROKER, "", "true", True), (RESOURCE_TOPIC, "t", "false", False)):
        img.replay(
            {
                "type": "ConfigRecord",
                "resource_type": rtype,
                "resource_name": name,
                "name": "unclean.leader.election.enable",
                "value": value,
            },
            Delta(),
        )
        assert c.unclean_enabled("t") is expected
