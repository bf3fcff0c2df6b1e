"""QuorumController against a stand-in raft log: propose, answer at commit; the working image
sees pending proposals, the committed image only committed records; losing leadership fails
what is pending and discards the working image."""

from __future__ import annotations

import asyncio

import pytest

from kesque.clock import ManualClock
from kesque.config.broker import BrokerConfig
from kesque.controller.controller import NewTopic
from kesque.errors import ErrorCode, KafkaError
from kesque.raft import Record, StateChange
from kesque.raft.log import LeaderChange
from kesque.server.drivers.quorum_controller import QuorumController

ENDPOINT = [{"name": "PLAINTEXT", "host": "localhost", "port": 9092, "security_protocol": 0}]


class Raft:
    """The leader's side of the log: appends are pending until ``commit()``."""

    node_id = 1

    def __init__(self):
        self.epoch = 1
        self.leader = True
        self.records: list[Record] = []
        self.committed = 0

    def is_leader(self) -> bool:
        return self.leader

    def append(self, values: list) -> int:
        for v in values:
            self.records.append(Record(len(self.records), self.epoch, v))
        return len(self.records) - 1

    def commit(self, qc: QuorumController) -> None:
        new, self.committed = self.records[self.committed :], len(self.records)
        qc.apply_committed(new)


def run(scenario):
    asyncio.run(scenario())


def started() -> tuple[Raft, QuorumController]:
    raft = Raft()
    qc = QuorumController(BrokerConfig({}), ManualClock(), raft, "cluster")
    raft.append([LeaderChange(1, (1,), (1,))])
    assert not qc.active
    raft.commit(qc)  # our own epoch's LeaderChange: active, and the features are proposed
    assert qc.active and not qc.committed.features
    raft.commit(qc)
    assert qc.committed.features
    return raft, qc


async def committed(raft: Raft, qc: QuorumController, call):
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)
    assert not task.done()  # no answer before the quorum has the records
    raft.commit(qc)
    return await task


def test_an_answer_waits_for_the_commit_and_proposals_validate_against_pending_ones():
    async def scenario():
        raft, qc = started()
        await committed(raft, qc, qc.call("register_broker", 1, ENDPOINT))
        first = asyncio.ensure_future(qc.call("create_topics", [NewTopic("a", 1, 1)]))
        await asyncio.sleep(0)
        assert not first.done() and qc.committed.topic("a") is None
        again = await qc.call("create_topics", [NewTopic("a", 1, 1)])  # refused: nothing to wait for
        assert again[0].error.code == ErrorCode.topic_already_exists
        raft.commit(qc)
        assert (await first)[0].error is None and qc.committed.topic("a") is not None

    run(scenario)


def test_losing_leadership_fails_pending_calls_and_discards_the_working_image():
    async def scenario():
        raft, qc = started()
        await committed(raft, qc, qc.call("register_broker", 1, ENDPOINT))
        pending = asyncio.ensure_future(qc.call("create_topics", [NewTopic("b", 1, 1)]))
        await asyncio.sleep(0)
        raft.leader = False
        qc.on_state_change(StateChange(1, "Leader", "Resigned", 1, 1))
        with pytest.raises(KafkaError) as e:
            await pending
        assert e.value.code == ErrorCode.not_controller
        assert not qc.active and qc.controller.image is qc.committed and qc.committed.topic("b") is None
        with pytest.raises(KafkaError) as e:
            await qc.call("create_topics", [NewTopic("c", 1, 1)])
        assert e.value.code == ErrorCode.not_controller

    run(scenario)


def test_a_commit_past_the_deadline_is_request_timed_out():
    async def scenario():
        _raft, qc = started()
        with pytest.raises(KafkaError) as e:
            await qc.call("register_broker", 1, ENDPOINT, timeout_ms=10)
        assert e.value.code == ErrorCode.request_timed_out

    run(scenario)


def test_an_old_leader_change_does_not_make_a_follower_active():
    raft = Raft()
    qc = QuorumController(BrokerConfig({}), ManualClock(), raft, "cluster")
    raft.leader = False
    raft.append([LeaderChange(1, (1, 2, 3), (1, 2))])
    raft.commit(qc)
    assert not qc.active


# -- replication: AlterPartition, ElectLeaders and the periodic elections ---------------------------------
def cluster(config=None):
    """An active lifecycle controller whose image holds brokers 1-3 (3 fenced) and topic t:
    partition 0 led by 2 (replicas 1,2,3), partition 1 leaderless with ISR [3]."""
    import uuid

    raft = Raft()
    qc = QuorumController(BrokerConfig(config or {}), ManualClock(), raft, "cluster", lifecycle=True)
    raft.append([LeaderChange(1, (1,), (1,))])
    raft.commit(qc)
    tid = uuid.UUID(int=5)
    qc._write(
        [
            {
                "type": "RegisterBrokerRecord",
                "broker_id": b,
                "incarnation_id": uuid.UUID(int=b),
                "broker_epoch": b,
                "endpoints": [],
                "fenced": b == 3,
                "in_controlled_shutdown": False,
            }
            for b in (1, 2, 3)
        ]
        + [{"type": "TopicRecord", "name": "t", "topic_id": tid}]
        + [
            {
                "type": "PartitionRecord",
                "partition_id": p,
                "topic_id": tid,
                "replicas": [1, 2, 3],
                "isr": isr,
                "removing_replicas": [],
                "adding_replicas": [],
                "leader": leader,
                "leader_recovery_state": 0,
                "leader_epoch": 0,
                "partition_epoch": 0,
            }
            for p, leader, isr in ((0, 2, [1, 2, 3]), (1, -1, [3]))
        ]
    )
    raft.commit(qc)
    return raft, qc, tid


def test_alter_partition_is_answered_once_committed_and_a_stale_broker_epoch_fails_it_all():
    from kesque.controller.replication_control import AlterPartitionRequest

    async def scenario():
        raft, qc, tid = cluster()
        shrink = AlterPartitionRequest(2, 2, tid, 0, 0, 0, [(1, 1), (2, 2)])
        replies = await committed(raft, qc, qc.alter_partition([shrink]))
        assert (replies[0].error_code, replies[0].isr, replies[0].partition_epoch) == (0, [1, 2], 1)
        assert qc.committed.topic("t").partitions[0].isr == [1, 2]
        with pytest.raises(KafkaError) as e:
            await qc.alter_partition([AlterPartitionRequest(2, 7, tid, 0, 0, 1, [(2, 2)])])
        assert e.value.code == ErrorCode.stale_broker_epoch

    run(scenario)


def test_elect_leaders_waits_for_the_commit():
    async def scenario():
        raft, qc, _tid = cluster()
        results = await committed(raft, qc, qc.elect_leaders("PREFERRED", {"t": [0]}))
        assert results == {"t": [(0, 0, None)]} and qc.committed.topic("t").partitions[0].leader == 1

    run(scenario)


def test_the_periodic_elections_run_on_the_active_controller_only():
    async def scenario():
        raft, qc, _tid = cluster(
            {"unclean.leader.election.enable": "true", "unclean.leader.election.interval.ms": "10"}
        )
        assert set(qc._timers) == {"unclean", "balance"}
        assert qc.committed.topic("t").partitions[1].leader == -1
        for _ in range(100):  # the unclean task's timer fires
            await asyncio.sleep(0.01)
            if qc.controller.image.topic("t").partitions[1].leader != -1:
                break
        assert qc.controller.image.topic("t").partitions[1].leader == 1
        qc._run_periodic("balance")  # leader.imbalance.check.interval.seconds' task
        assert qc.controller.image.topic("t").partitions[0].leader == 1
        raft.leader = False
        qc.on_state_change(StateChange(1, "Leader", "Resigned", 1, 1))
        assert qc._timers == {}

    run(scenario)


def test_turning_unclean_election_on_elects_at_once():
    from kesque.metadata.image import RESOURCE_TOPIC

    async def scenario():
        raft, qc, _tid = cluster()
        assert qc.controller.image.topic("t").partitions[1].leader == -1
        await committed(
            raft,
            qc,
            qc.call(
                "incremental_alter_configs", RESOURCE_TOPIC, "t", [("unclean.leader.election.enable", 0, "true")], False
            ),
        )
        assert qc.committed.topic("t").partitions[1].leader == 1

    run(scenario)


def test_auto_leader_rebalance_off_schedules_no_balancing():
    async def scenario():
        _raft, qc, _tid = cluster({"auto.leader.rebalance.enable": "false"})
        assert set(qc._timers) == {"unclean"}

    run(scenario)


def test_shutdown_stops_the_timers_and_no_later_leader_change_reactivates():
    """The server stops its controller before the raft manager resigns and closes the metadata
    log: its NoOp, session-expiry and election timers go, and a LeaderChange committed meanwhile
    (a raft node electing itself again) does not make it active: nothing writes afterwards."""

    async def scenario():
        raft, qc, _tid = cluster({"metadata.max.idle.interval.ms": "10"})
        assert qc._noop is not None and qc._timers
        qc.shutdown()
        assert not qc.active and qc._noop is None and qc._expiry is None and qc._timers == {}
        end = len(raft.records)
        raft.epoch = 2
        raft.append([LeaderChange(1, (1,), (1,))])
        raft.commit(qc)
        assert not qc.active
        await asyncio.sleep(0.05)  # a NoOp timer, had one been left, would have fired
        assert len(raft.records) == end + 1

    run(scenario)
