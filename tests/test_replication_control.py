"""AlterPartition and elections on the controller (kesque/controller/replication_control.py):
Kafka's validation order and error codes, the answer's epochs, unclean elections."""

from __future__ import annotations

import uuid

import pytest

from kesque.controller.replication_control import (
    ONLINE,
    PREFERRED,
    UNCLEAN,
    AlterPartitionRequest,
    ReplicationControl,
    acceptable,
    partition_change,
)
from kesque.errors import ErrorCode as E
from kesque.errors import KafkaError
from kesque.metadata.image import Delta, MetadataImage
from kesque.replication.replica_state import RECOVERED, RECOVERING

TID = uuid.UUID(int=7)


def image(isr=(1, 2, 3), leader=1, fenced=(), shutting_down=(), leader_epoch=4, partition_epoch=9, recovery=0):
    img = MetadataImage()
    d = Delta()
    for b in (1, 2, 3):
        img.replay(
            {
                "type": "RegisterBrokerRecord",
                "broker_id": b,
                "incarnation_id": uuid.UUID(int=b),
                "broker_epoch": 100 + b,
                "endpoints": [],
                "fenced": b in fenced,
                "in_controlled_shutdown": b in shutting_down,
            },
            d,
        )
    img.replay({"type": "TopicRecord", "name": "t", "topic_id": TID}, d)
    img.replay(
        {
            "type": "PartitionRecord",
            "partition_id": 0,
            "topic_id": TID,
            "replicas": [1, 2, 3],
            "isr": list(isr),
            "removing_replicas": [],
            "adding_replicas": [],
            "leader": leader,
            "leader_recovery_state": recovery,
            "leader_epoch": leader_epoch,
            "partition_epoch": partition_epoch,
        },
        d,
    )
    return img


def req(isr=((1, 101), (2, 102)), broker=1, broker_epoch=101, leader_epoch=4, partition_epoch=9, **kw):
    return AlterPartitionRequest(
        broker,
        broker_epoch,
        kw.pop("topic_id", TID),
        kw.pop("partition_id", 0),
        leader_epoch,
        partition_epoch,
        list(isr),
        **kw,
    )


def alter(img, r, version=3, unclean=False):
    return ReplicationControl(lambda: img, lambda t: unclean).alter_partition(r, version)


def test_a_shrink_is_recorded_and_answered_with_the_new_partition_epoch():
    img = image()
    records, reply = alter(img, req())
    assert records == [
        {
            "type": "PartitionChangeRecord",
            "topic_id": TID,
            "partition_id": 0,
            "isr": [1, 2],
            "leader": -2,
            "replicas": None,
            "removing_replicas": None,
            "adding_replicas": None,
            "leader_recovery_state": -1,
        }
    ]
    assert (reply.error_code, reply.leader, reply.isr) == (0, 1, [1, 2])
    assert (reply.leader_epoch, reply.partition_epoch) == (4, 10)
    img.replay(records[0], Delta())
    p = img.topics_by_id[TID].partitions[0]
    assert (p.isr, p.leader_epoch, p.partition_epoch) == ([1, 2], 4, 10)  # no leader epoch bump
    records, reply = alter(img, req(partition_epoch=10))  # the same again: no record
    assert records == [] and reply.partition_epoch == 10


@pytest.mark.parametrize(
    "kw,version,code",
    [
        ({"topic_id": uuid.UUID(int=8)}, 3, E.unknown_topic_id),
        ({"partition_id": 5}, 3, E.unknown_topic_or_partition),
        ({"leader_epoch": 5}, 3, E.not_controller),
        ({"partition_epoch": 10}, 3, E.not_controller),
        ({"leader_epoch": 3}, 3, E.fenced_leader_epoch),
        ({"broker": 2, "broker_epoch": 102}, 3, E.invalid_request),
        ({"partition_epoch": 8}, 3, E.invalid_update_version),
        ({"isr": ((1, 101), (4, -1))}, 3, E.invalid_request),  # not a replica
        ({"isr": ((2, 102),)}, 3, E.invalid_request),  # without the leader
        ({"isr": ((1, 101), (1, 101))}, 3, E.invalid_request),
        ({"isr": ((1, 101), (2, 99))}, 3, E.ineligible_replica),  # another broker epoch
        ({"isr": ((1, 101), (2, 99)), "topic_name": "t"}, 1, E.operation_not_attempted),
        ({"isr": ((1, 101), (3, -1))}, 3, E.ineligible_replica),  # fenced
        ({"isr": ((1, 101), (2, -1)), "leader_recovery_state": RECOVERING}, 3, E.invalid_request),
    ],
)
def test_validation_errors(kw, version, code):
    records, reply = alter(image(fenced=(3,)), req(**kw), version)
    assert records == [] and reply.error_code == code


def test_the_order_of_the_checks():
    """An older leader epoch is FENCED_LEADER_EPOCH even from a broker that does not lead, and
    an older partition epoch from a non-leader is INVALID_REQUEST (Kafka checks in this order)."""
    assert alter(image(), req(broker=2, broker_epoch=102, leader_epoch=3))[1].error_code == E.fenced_leader_epoch
    assert alter(image(), req(broker=2, broker_epoch=102, partition_epoch=8))[1].error_code == E.invalid_request


def test_stale_broker_epoch_fails_the_whole_request():
    with pytest.raises(KafkaError) as e:
        alter(image(), req(broker_epoch=100))
    assert e.value.code == E.stale_broker_epoch


def test_shutting_down_broker_cannot_join():
    assert alter(image(shutting_down=(2,)), req())[1].error_code == E.ineligible_replica


def test_an_expansion_after_an_unclean_election_marks_the_leader_recovered():
    img = image(isr=(1,), recovery=RECOVERING)
    records, reply = alter(img, req(isr=((1, 101), (2, 102)), leader_recovery_state=RECOVERED))
    assert records[0]["leader_recovery_state"] == RECOVERED and reply.leader_recovery_state == RECOVERED
    assert alter(image(), req(leader_recovery_state=RECOVERING, isr=((1, 101),)))[1].error_code == E.invalid_request
    assert (
        alter(image(isr=(1,), recovery=RECOVERING), req(leader_recovery_state=RECOVERING))[1].error_code
        == E.invalid_request
    )  # still recovering: the leader alone


# -- elections -------------------------------------------------------------------------------------------
def test_clean_election_only_from_the_isr():
    img = image(isr=(3,), leader=-1, fenced=(3,))
    p = img.topics_by_id[TID].partitions[0]
    assert partition_change(TID, 0, p, lambda b: acceptable(img, b)) is None
    rec = partition_change(TID, 0, p, lambda b: acceptable(img, b), election=UNCLEAN)
    assert (rec["leader"], rec["isr"], rec["leader_recovery_state"]) == (1, [1], RECOVERING)


def test_unclean_election_prefers_the_isr_and_preferred_takes_the_first_replica():
    img = image(isr=(2, 3), leader=-1)
    p = img.topics_by_id[TID].partitions[0]
    rec = partition_change(TID, 0, p, lambda b: acceptable(img, b), election=UNCLEAN)
    assert (rec["leader"], rec["isr"], rec["leader_recovery_state"]) == (2, None, -1)
    img = image(isr=(1, 2, 3), leader=2)
    p = img.topics_by_id[TID].partitions[0]
    assert partition_change(TID, 0, p, lambda b: acceptable(img, b), election=ONLINE) is None
    assert partition_change(TID, 0, p, lambda b: acceptable(img, b), election=PREFERRED)["leader"] == 1


def test_periodic_unclean_elections_follow_the_topic_config():
    img = image(isr=(3,), leader=-1, fenced=(3,))
    assert ReplicationControl(lambda: img).elect_unclean_leaders() == []
    records = ReplicationControl(lambda: img, lambda t: t == "t").elect_unclean_leaders()
    assert [(r["leader"], r["isr"]) for r in records] == [(1, [1])]


# -- KIP-966's eligible leader replicas: Kafka 4.4's PartitionChangeBuilder rules -------------------------------
def registration(isr, leader, elr=(), last_known_elr=(), replicas=(1, 2, 3)):
    from types import SimpleNamespace

    return SimpleNamespace(
        replicas=list(replicas),
        isr=list(isr),
        leader=leader,
        elr=list(elr),
        last_known_elr=list(last_known_elr),
        leader_recovery_state=RECOVERED,
    )


def elr_change(p, target_isr, live=(1, 2, 3), **kw):
    return partition_change(TID, 0, p, lambda b: b in live, target_isr, elr_enabled=True, min_isr=2, **kw)


def test_below_min_isr_the_leaving_members_stay_eligible_and_the_isr_may_empty():
    rec = elr_change(registration([1, 2], 1), [1], live=(1,))
    assert (rec["isr"], rec["eligible_leader_replicas"], rec["leader"]) == ([1], [2], -2)
    rec = elr_change(registration([1], 1, elr=[2]), [], live=())
    # the order of Kafka's HashSet (ascending for small ids), not the order the members left in
    assert (rec["isr"], rec["eligible_leader_replicas"], rec["leader"]) == ([], [1, 2], -1)


def test_an_empty_isr_elects_from_the_elr_and_an_unclean_shutdown_is_not_eligible():
    rec = elr_change(registration([], -1, elr=[2, 1]), [], live=(2,))
    assert (rec["leader"], rec["isr"], rec["eligible_leader_replicas"]) == (2, [2], [1])
    rec = elr_change(registration([1], 1), [], live=(), unclean_shutdown=(1,))
    assert rec["isr"] == [] and "eligible_leader_replicas" not in rec and rec["last_known_elr"] == [1]


def test_the_elr_clears_once_the_isr_is_back_at_min_isr_or_after_an_unclean_election():
    rec = elr_change(registration([2], 2, elr=[1]), [2, 3])
    assert (rec["isr"], rec["eligible_leader_replicas"]) == ([2, 3], [])
    rec = elr_change(registration([], -1, elr=[1]), [], live=(3,), election=UNCLEAN)
    assert (rec["leader"], rec["isr"], rec["eligible_leader_replicas"]) == (3, [3], [])


def test_without_elr_the_last_isr_member_stays():
    p = registration([1], 1, replicas=(1, 2, 3))
    rec = partition_change(TID, 0, p, lambda b: b in (2, 3), [])
    assert (rec["leader"], rec["isr"]) == (-1, None)


# -- ElectLeaders, preferred-leader balancing, the effective unclean config --------------------------------
def two_partitions(leader0=2, isr0=(1, 2, 3), fenced=(), leader1=1):
    img = image(isr=isr0, leader=leader0, fenced=fenced)
    img.replay(
        {
            "type": "PartitionRecord",
            "partition_id": 1,
            "topic_id": TID,
            "replicas": [1, 2, 3],
            "isr": [1, 2, 3],
            "removing_replicas": [],
            "adding_replicas": [],
            "leader": leader1,
            "leader_recovery_state": 0,
            "leader_epoch": 0,
            "partition_epoch": 0,
        },
        Delta(),
    )
    return img


def test_elect_leaders_preferred_answers_per_partition_as_kafka():
    img = two_partitions()
    records, results = ReplicationControl(lambda: img).elect_leaders(PREFERRED, {"t": [0, 1, 7], "nope": [0]})
    assert [(r["partition_id"], r["leader"]) for r in records] == [(0, 1)]
    assert results["t"] == [
        (0, 0, None),
        (1, E.election_not_needed, "Leader election not needed for topic partition."),
        (7, E.unknown_topic_or_partition, "No such partition as t-7"),
    ]
    assert results["nope"] == [(0, E.unknown_topic_or_partition, "No such topic as nope")]


def test_a_preferred_replica_out_of_the_isr_or_fenced_is_not_available():
    for img in (two_partitions(isr0=(2, 3)), two_partitions(fenced=(1,))):
        records, results = ReplicationControl(lambda: img).elect_leaders(PREFERRED, {"t": [0]})
        assert records == [] and results["t"][0][1] == E.preferred_leader_not_available


def test_all_partitions_leave_out_those_already_led_by_the_wanted_leader():
    img = two_partitions()
    records, results = ReplicationControl(lambda: img).elect_leaders(PREFERRED, None)
    assert results == {"t": [(0, 0, None)]} and len(records) == 1


def test_elect_leaders_unclean_only_for_leaderless_partitions():
    img = two_partitions(leader0=-1, isr0=(3,), fenced=(3,))
    records, results = ReplicationControl(lambda: img).elect_leaders(UNCLEAN, {"t": [0, 1]})
    assert [(r["leader"], r["isr"], r["leader_recovery_state"]) for r in records] == [(1, [1], RECOVERING)]
    assert [code for _p, code, _m in results["t"]] == [0, E.election_not_needed]
    img = image(isr=(3,), leader=-1, fenced=(1, 2, 3))
    assert (
        ReplicationControl(lambda: img).elect_leaders(UNCLEAN, {"t": [0]})[1]["t"][0][1]
        == E.eligible_leaders_not_available
    )


def test_balancing_elects_the_preferred_replica_only_where_it_is_an_acceptable_isr_member():
    records = ReplicationControl(lambda: two_partitions()).balance_partition_leaders()
    assert [(r["partition_id"], r["leader"]) for r in records] == [(0, 1)]
    assert ReplicationControl(lambda: two_partitions(isr0=(2, 3))).balance_partition_leaders() == []
    assert ReplicationControl(lambda: two_partitions(fenced=(1,))).balance_partition_leaders() == []


def test_the_effective_unclean_config_topic_then_this_controller_then_the_cluster_default():
    from kesque.controller.replication_control import unclean_enabled_in
    from kesque.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC

    img = image()
    assert not unclean_enabled_in(img, "t", 1, False) and unclean_enabled_in(img, "t", 1, True)
    img.configs[(RESOURCE_BROKER, "")] = {"unclean.leader.election.enable": "true"}
    assert unclean_enabled_in(img, "t", 1, False)
    img.configs[(RESOURCE_BROKER, "1")] = {"unclean.leader.election.enable": "false"}
    assert not unclean_enabled_in(img, "t", 1, False) and unclean_enabled_in(img, "t", 2, False)
    img.configs[(RESOURCE_TOPIC, "t")] = {"unclean.leader.election.enable": "true"}
    assert unclean_enabled_in(img, "t", 1, False)


def test_alter_partitions_answers_each_partition_and_writes_one_batch():
    img = two_partitions(leader0=1)
    records, replies = ReplicationControl(lambda: img).alter_partitions(
        [req(), req(partition_id=1, leader_epoch=0, partition_epoch=0), req(partition_id=1, partition_epoch=0)]
    )
    assert len(records) == 2 and [r.error_code for r in replies] == [0, 0, E.not_controller]


def test_the_last_known_leader_is_recorded_when_the_partition_loses_its_leader_and_cleared_after():
    rec = elr_change(registration([1], 1), [], live=())
    assert (rec["leader"], rec["isr"], rec["eligible_leader_replicas"], rec["last_known_elr"]) == (-1, [], [1], [1])
    rec = elr_change(registration([], -1, elr=[1], last_known_elr=[1]), [], live=(1,))
    assert (rec["leader"], rec["isr"], rec["eligible_leader_replicas"], rec["last_known_elr"]) == (1, [1], [], [])
    assert "leader_recovery_state" not in rec or rec["leader_recovery_state"] == -1  # a clean election


def test_balanced_recovery_elects_the_last_known_leader_uncleanly_with_an_empty_isr_and_elr():
    p = registration([], -1, last_known_elr=[2])
    rec = elr_change(p, [], live=(1, 2, 3))
    assert (rec["leader"], rec["isr"], rec["leader_recovery_state"], rec["last_known_elr"]) == (2, [2], RECOVERING, [])
    assert elr_change(p, [], live=(1, 3)) is None  # not alive: nobody
    assert partition_change(TID, 0, p, lambda b: True, []) is None  # ELR off: no such election


def test_kafka_hash_set_order():
    from kesque.utils import hash_set_order

    assert hash_set_order([3, 2]) == [2, 3] and hash_set_order([4, 1, 4]) == [1, 4]
    assert hash_set_order([17, 2]) == [17, 2]  # 17 lands in bucket 1 of 16


def test_a_change_of_min_insync_replicas_clears_the_elr():
    from kesque.controller.replication_control import clear_elr_records

    img = image()
    cfg = [
        {"type": "ConfigRecord", "resource_type": 2, "resource_name": "t", "name": "min.insync.replicas", "value": "2"},
        {"type": "ConfigRecord", "resource_type": 4, "resource_name": "", "name": "min.insync.replicas", "value": "2"},
        {"type": "ConfigRecord", "resource_type": 2, "resource_name": "t", "name": "retention.ms", "value": "1"},
    ]
    assert clear_elr_records(img, cfg) == []  # ELR off
    img.features["eligible.leader.replicas.version"] = 1
    clear = clear_elr_records(img, cfg)
    assert clear == [{"type": "ClearElrRecord", "topic_name": "t"}, {"type": "ClearElrRecord", "topic_name": ""}]
    p = img.topics_by_id[TID].partitions[0]
    p.elr, p.last_known_elr, epoch = [2], [3], p.partition_epoch
    d = Delta()
    img.replay(clear[0], d)
    assert (p.elr, p.last_known_elr, p.partition_epoch, d.changed_partitions) == ([], [], epoch + 1, {(TID, 0)})
