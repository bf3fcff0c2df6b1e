"""KIP-858 (JBOD in KRaft): the controller knows the log dir of each replica.

Brokers register their log dirs' directory ids; PartitionRecords / PartitionChangeRecords carry
the directory of each replica (the broker's only dir, or UNASSIGNED until the broker sends
AssignReplicasToDirs); a heartbeat naming a failed dir moves leadership off the replicas in that
dir only. Kafka's ClusterControlManager / ReplicationControlManager / PartitionChangeBuilder."""

from __future__ import annotations

import os
import uuid

import pytest

from kesque.controller import cluster_control as cc
from kesque.controller.controller import NewTopic
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata import records as mr
from kesque.metadata.image import LOST, MIGRATING, UNASSIGNED, Delta, MetadataImage
from kesque.metadata.snapshot import image_records
from test_cluster_control import Controller, through_kio
from test_metadata import Cluster

A, B, C = (uuid.UUID(int=(i + 1) << 64 | 7) for i in range(3))  # three log dirs' directory ids
D1, D2, D3 = (uuid.UUID(int=(i + 10) << 64 | 9) for i in range(3))  # the one dir of brokers 1, 2, 3


def dirs_controller(**per_broker):
    """Brokers 1 and 3 with one dir each, broker 2 with A and B (unless given), all unfenced."""
    h = Controller()
    dirs = {1: [D1], 2: [A, B], 3: [D3], **{int(k[1:]): v for k, v in per_broker.items()}}
    for b, ds in dirs.items():
        h.register(b, log_dirs=ds)
        assert not h.heartbeat(b)[0].is_fenced
    return h


def topic_with_dirs(h, name, *assignments):
    """A topic whose partitions carry directories: [(broker, dir)] per partition."""
    tid = uuid.uuid4()
    h.apply(
        [{"type": "TopicRecord", "name": name, "topic_id": tid}]
        + [
            {
                "type": "PartitionRecord",
                "partition_id": p,
                "topic_id": tid,
                "replicas": [r for r, _ in reps],
                "isr": [r for r, _ in reps],
                "removing_replicas": [],
                "adding_replicas": [],
                "leader": reps[0][0],
                "leader_recovery_state": 0,
                "leader_epoch": 0,
                "partition_epoch": 0,
                "directories": [d for _, d in reps],
            }
            for p, reps in enumerate(assignments)
        ]
    )
    return tid


# -- registration -----------------------------------------------------------------------------------
def test_registration_records_the_log_dirs_and_the_image_keeps_them_sorted():
    h = Controller()
    _epoch, records = h.register(1, log_dirs=[B, A])
    assert records[-1]["log_dirs"] == [B, A]
    assert h.image.brokers[1].log_dirs == [A, B]  # Kafka's BrokerRegistration sorts them
    value = mr.encode(records[-1])
    assert value[:3] == bytes([1, 0, 3])  # RegisterBrokerRecord v3: the one with log_dirs
    assert mr.decode(value)["log_dirs"] == [B, A]


def test_registration_log_dirs_only_from_metadata_version_3_7_iv2():
    h = Controller()
    h.image.features = {"metadata.version": 16}  # 3.7-IV1: no directory assignment
    _epoch, records = h.register(1, log_dirs=[A], features={"metadata.version": (1, 25)})
    assert "log_dirs" not in records[-1] and mr.encode(records[-1])[:3] == bytes([1, 0, 1])
    assert h.image.brokers[1].log_dirs == []


@pytest.mark.parametrize(
    "dirs, message",
    [
        ([A, UNASSIGNED], "Reserved directory ID in request"),
        ([A, A], "Duplicate directory ID in request"),
        ([D1], f"Broker 1 is already registered with directory {D1}"),
    ],
)
def test_registration_with_bad_log_dirs_is_refused(dirs, message):
    h = Controller()
    h.register(1, log_dirs=[D1])
    with pytest.raises(KafkaError) as e:
        h.register(2, log_dirs=dirs)
    assert e.value.code == ErrorCode.invalid_registration and e.value.message == message


def test_broker_registration_carries_log_dirs_from_v2():
    req = cc.RegistrationRequest(1, "c", uuid.uuid4(), features={"metadata.version": (1, 25)}, log_dirs=[A, B])
    for v in (2, 3, 4):
        assert cc.from_kio(through_kio(cc.to_kio(req, v))).log_dirs == [A, B]
    assert cc.from_kio(through_kio(cc.to_kio(req, 1))).log_dirs == []


# -- assignment ---------------------------------------------------------------------------------------
def test_created_partitions_get_the_only_dir_of_a_broker_or_unassigned(tmp_path):
    c = Cluster(tmp_path, brokers=())
    try:
        for b, dirs in ((1, [D1]), (2, [A, B]), (3, [D3])):
            c.controller.commit(
                [
                    {
                        "type": "RegisterBrokerRecord",
                        "broker_id": b,
                        "incarnation_id": uuid.uuid4(),
                        "broker_epoch": 100 + b,
                        "endpoints": [],
                        "features": [],
                        "rack": None,
                        "fenced": False,
                        "in_controlled_shutdown": False,
                        "log_dirs": dirs,
                    }
                ]
            )
        [created] = c.controller.create_topics([NewTopic("t", assignments={0: [1, 2, 3], 1: [3, 1, 2]})])
        assert created.error is None
        t = c.image.topic("t")
        assert t.partitions[0].directories == [D1, UNASSIGNED, D3]
        assert t.partitions[1].directories == [D3, D1, UNASSIGNED]
        c.restart()  # from the log: PartitionRecord v2 keeps them
        t = c.image.topic("t")
        assert [t.partitions[p].directories for p in (0, 1)] == [[D1, UNASSIGNED, D3], [D3, D1, UNASSIGNED]]
        assert c.image.brokers[2].log_dirs == [A, B]
    finally:
        c.close()


def test_partition_records_without_directories_still_load_as_migrating():
    tid = uuid.uuid4()
    rec = {
        "type": "PartitionRecord",
        "partition_id": 0,
        "topic_id": tid,
        "replicas": [1, 2],
        "isr": [1, 2],
        "removing_replicas": [],
        "adding_replicas": [],
        "leader": 1,
        "leader_recovery_state": 0,
        "leader_epoch": 0,
        "partition_epoch": 0,
    }
    value = mr.encode(rec)
    assert value[:3] == bytes([1, 3, 0])  # version 0: no directories field
    image, d = MetadataImage(), Delta()
    image.replay({"type": "TopicRecord", "name": "t", "topic_id": tid}, d)
    image.replay(mr.decode(value), d)
    p = image.topic("t").partitions[0]
    assert p.directories == [] and p.directory(1) == p.directory(2) == MIGRATING
    # a change record with directories (v1) sets them; one without keeps them
    change = {"type": "PartitionChangeRecord", "topic_id": tid, "partition_id": 0, "directories": [A, D2]}
    assert mr.encode(change)[:3] == bytes([1, 5, 1])
    image.replay(mr.decode(mr.encode(change)), d)
    assert p.directories == [A, D2]
    image.replay(
        mr.decode(mr.encode({"type": "PartitionChangeRecord", "topic_id": tid, "partition_id": 0, "isr": [1]})), d
    )
    assert p.directories == [A, D2] and p.partition_epoch == 2


def test_a_reassignment_keeps_the_directories_of_kept_replicas_and_gives_new_ones_the_default():
    from kesque.controller.reassignment import alter_reassignments

    h = dirs_controller()
    topic_with_dirs(h, "t", [(1, D1), (3, D3)])
    records, _results = alter_reassignments(h.image, [("t", [(0, [2, 3])])])
    rec = records[0]
    assert rec["replicas"] == [2, 3, 1] and rec["directories"] == [UNASSIGNED, D3, D1]
    h.apply(records)
    assert h.part("t").directory(2) == UNASSIGNED
    # below metadata.version 3.7-IV2 no directories are written
    h2 = dirs_controller()
    topic_with_dirs(h2, "t", [(1, D1), (3, D3)])
    h2.image.features = {"metadata.version": 16}
    records, _results = alter_reassignments(h2.image, [("t", [(0, [2, 3])])])
    assert "directories" not in records[0]


# -- a failed log dir ---------------------------------------------------------------------------------
def test_a_failed_dir_moves_leadership_and_isr_off_its_replicas_only():
    h = dirs_controller()
    topic_with_dirs(
        h,
        "t",
        [(2, A), (1, D1), (3, D3)],  # 0: led from the failed dir
        [(1, D1), (2, A), (3, D3)],  # 1: followed from the failed dir
        [(2, B), (1, D1), (3, D3)],  # 2: led from the healthy dir
        [(1, D1), (2, UNASSIGNED)],  # 3: not yet placed by broker 2
        [(2, A)],
    )  # 4: its only replica in the failed dir
    _reply, records = h.heartbeat(2, offline_log_dirs=[A])
    p = [h.part("t", i) for i in range(5)]
    assert (p[0].leader, p[0].isr) == (1, [1, 3])
    assert (p[1].leader, p[1].isr) == (1, [1, 3])
    assert (p[2].leader, p[2].isr) == (2, [2, 1, 3])  # untouched: its dir is healthy
    assert (p[3].leader, p[3].isr) == (1, [1, 2])  # UNASSIGNED: left alone, as Kafka
    assert (p[4].leader, p[4].isr) == (-1, [2])  # no other replica: offline
    change = records[-1]
    assert change["type"] == "BrokerRegistrationChangeRecord" and change["log_dirs"] == [B]
    assert mr.encode(change)[:3] == bytes([1, 17, 2])
    assert h.image.brokers[2].log_dirs == [B] and not h.image.brokers[2].fenced
    # the heartbeats keep naming it: nothing more
    assert h.heartbeat(2, offline_log_dirs=[A])[1] == []


def test_a_replica_in_a_failed_dir_is_not_elected():
    h = dirs_controller()
    topic_with_dirs(h, "t", [(1, D1), (2, A)])
    h.heartbeat(2, offline_log_dirs=[A])
    assert (h.part("t").leader, h.part("t").isr) == (1, [1])
    # an unclean election (the only other replica is gone) does not pick the failed dir's replica
    h.c.unclean_enabled = lambda topic: True
    h.heartbeat(1, want_fence=True)
    assert h.part("t").leader == -1


def test_a_broker_that_registered_no_dirs_keeps_the_conservative_handling():
    h = Controller()
    for b in (1, 2, 3):
        h.unfenced_broker(b)
    topic_with_dirs(h, "t", [(2, A), (1, D1), (3, D3)], [(2, B), (1, D1), (3, D3)])
    _reply, records = h.heartbeat(2, offline_log_dirs=[A])
    assert [h.part("t", i).isr for i in (0, 1)] == [[1, 3], [1, 3]]
    assert all(r["type"] == "PartitionChangeRecord" for r in records)


# -- AssignReplicasToDirs -------------------------------------------------------------------------------
def test_assign_replicas_to_dirs_sets_the_directory_of_the_broker_replica():
    h = dirs_controller()
    tid = topic_with_dirs(h, "t", [(1, D1), (2, UNASSIGNED), (3, D3)], [(2, UNASSIGNED), (1, D1)])
    epoch = h.image.brokers[2].epoch
    unknown = uuid.uuid4()
    records, answer = h.c.assign_replicas_to_dirs(2, epoch, {A: {tid: [0, 7], unknown: [0]}, B: {tid: [1]}})
    h.apply(records)
    assert answer == {
        A: {
            tid: [(0, 0), (7, int(ErrorCode.unknown_topic_or_partition))],
            unknown: [(0, int(ErrorCode.unknown_topic_id))],
        },
        B: {tid: [(1, 0)]},
    }
    assert h.part("t", 0).directories == [D1, A, D3] and h.part("t", 1).directories == [B, D1]
    assert all(r["type"] == "PartitionChangeRecord" and r["isr"] is None and r["leader"] == -2 for r in records)
    assert (h.part("t", 0).leader_epoch, h.part("t", 0).partition_epoch) == (0, 1)
    # the same again: nothing to write
    assert h.c.assign_replicas_to_dirs(2, epoch, {A: {tid: [0]}})[0] == []
    # not its replica; another epoch; before metadata.version 3.7-IV2
    assert h.c.assign_replicas_to_dirs(3, h.image.brokers[3].epoch, {D3: {tid: [1]}})[1] == {
        D3: {tid: [(1, int(ErrorCode.not_leader_or_follower))]}
    }
    with pytest.raises(KafkaError) as e:
        h.c.assign_replicas_to_dirs(2, epoch + 1, {A: {tid: [0]}})
    assert e.value.code == ErrorCode.stale_broker_epoch
    h.image.features = {"metadata.version": 16}
    with pytest.raises(KafkaError) as e:
        h.c.assign_replicas_to_dirs(2, epoch, {A: {tid: [0]}})
    assert e.value.code == ErrorCode.unsupported_version


def test_then_a_failed_dir_moves_the_assigned_replicas_off():
    h = dirs_controller()
    tid = topic_with_dirs(h, "t", [(2, UNASSIGNED), (1, D1)], [(2, UNASSIGNED), (3, D3)])
    h.apply(h.c.assign_replicas_to_dirs(2, h.image.brokers[2].epoch, {A: {tid: [0]}, B: {tid: [1]}})[0])
    h.heartbeat(2, offline_log_dirs=[A])
    assert (h.part("t", 0).leader, h.part("t", 0).isr) == (1, [1])
    assert (h.part("t", 1).leader, h.part("t", 1).isr) == (2, [2, 3])


def test_a_replica_assigned_to_an_offline_dir_leaves_the_isr():
    h = dirs_controller()
    tid = topic_with_dirs(h, "t", [(2, UNASSIGNED), (1, D1)])
    h.heartbeat(2, offline_log_dirs=[A])  # A goes offline first
    assert h.part("t").leader == 2
    records, answer = h.c.assign_replicas_to_dirs(2, h.image.brokers[2].epoch, {A: {tid: [0]}})
    h.apply(records)
    assert answer == {A: {tid: [(0, 0)]}} and len(records) == 1
    p = h.part("t")
    assert (p.leader, p.isr, p.directories) == (1, [1], [A, D1])


def test_assign_replicas_to_dirs_through_the_wire():
    tid = uuid.uuid4()
    req = cc.assign_request_to_kio(2, 17, {A: {tid: [0, 1]}, B: {tid: [2]}})
    assert cc.assign_request_from_kio(through_kio(req)) == (2, 17, {A: {tid: [0, 1]}, B: {tid: [2]}})
    resp = cc.assign_response_to_kio(0, {A: {tid: [(0, 0), (1, 6)]}})
    assert cc.assign_response_from_kio(through_kio(resp)) == (0, {A: {tid: [(0, 0), (1, 6)]}})


# -- snapshots ----------------------------------------------------------------------------------------
def test_a_snapshot_keeps_log_dirs_and_directories():
    h = dirs_controller()
    topic_with_dirs(h, "t", [(1, D1), (2, UNASSIGNED)], [(2, LOST), (3, D3)])
    image, d = MetadataImage(), Delta()
    for rec in image_records(h.image):
        image.replay(mr.decode(mr.encode(rec)), d)
    assert image.brokers[2].log_dirs == [A, B]
    assert [image.topic("t").partitions[i].directories for i in (0, 1)] == [[D1, UNASSIGNED], [LOST, D3]]


# -- the broker's side ------------------------------------------------------------------------------
def test_a_new_log_goes_to_the_dir_the_metadata_assigned(tmp_path):
    from kesque.clock import SYSTEM_CLOCK
    from kesque.config.topic import LogConfig
    from kesque.storage.log_manager import LogManager

    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    lm = LogManager(dirs, SYSTEM_CLOCK, node_id=1, cluster_id=None)
    lm.prepare_dirs()
    try:
        target = lm.directory_ids[os.path.abspath(dirs[1])]
        assert lm.get_or_create_log("t", 0, LogConfig(), None, target_dir_id=target).log_dir == os.path.abspath(dirs[1])
        # UNASSIGNED (or a dir not here): the emptiest dir, as before
        assert lm.get_or_create_log("t", 1, LogConfig(), None, target_dir_id=UNASSIGNED).log_dir == os.path.abspath(
            dirs[0]
        )
    finally:
        lm.shutdown(-1)


def test_the_assignments_manager_batches_drops_and_retries():
    from kesque.server.assignments import AssignmentsManager

    h = dirs_controller()
    tid = topic_with_dirs(h, "t", [(2, UNASSIGNED), (1, D1)], [(1, D1), (2, UNASSIGNED)], [(1, D1)])
    m = AssignmentsManager(2, None, lambda: h.image.brokers[2].epoch, lambda: h.image)
    m.assign(tid, 0, A)
    m.assign(tid, 1, A)
    m.assign(tid, 1, B)  # a later one replaces it
    m.assign(tid, 2, A)  # not a replica here: dropped
    m.assign(uuid.uuid4(), 0, A)  # no such topic: dropped
    sent = m.batch()
    assert sent == {A: {tid: [0]}, B: {tid: [1]}}
    records, answer = h.c.assign_replicas_to_dirs(2, h.image.brokers[2].epoch, sent)
    h.apply(records)
    answer[B][tid] = [(1, int(ErrorCode.unknown_topic_or_partition))]  # one failed: it is retried
    assert not m.on_answer(sent, 0, answer) and m.pending == {(tid, 1): B} and m.backoff_s() == 0.1
    assert not m.on_answer(sent, int(ErrorCode.not_controller), {}) and m.backoff_s() == 0.2
    # already in the metadata: nothing left to send
    h.apply(h.c.assign_replicas_to_dirs(2, h.image.brokers[2].epoch, {B: {tid: [1]}})[0])
    assert m.batch() == {} and m.pending == {}
