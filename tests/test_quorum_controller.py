"""QuorumController against a stand-in raft log: propose, answer at commit; the working image
sees pending proposals, the committed image only committed records; losing leadership fails
what is pending and discards the working image."""

from __future__ import annotations

import asyncio

import pytest

from kesque.clock import ManualClock
from kesque.config.broker import BrokerConfig
from kesque.controller.controller import NewTopic
from kesque.controller.quorum import QuorumController
from kesque.errors import ErrorCode, KafkaError
from kesque.raft import Record, StateChange
from kesque.raft.log import LeaderChange

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
        new, self.committed = self.records[self.committed:], len(self.records)
        qc.apply_committed(new)


def run(scenario):
    asyncio.run(scenario())


def started() -> tuple[Raft, QuorumController]:
    raft = Raft()
    qc = QuorumController(BrokerConfig({}), ManualClock(), raft, "cluster")
    raft.append([LeaderChange(1, (1,), (1,))])
    assert not qc.active
    raft.commit(qc)        # our own epoch's LeaderChange: active, and the features are proposed
    assert qc.active and not qc.committed.features
    raft.commit(qc)
    assert qc.committed.features
    return raft, qc


async def committed(raft: Raft, qc: QuorumController, call):
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)
    assert not task.done()          # no answer before the quorum has the records
    raft.commit(qc)
    return await task


def test_an_answer_waits_for_the_commit_and_proposals_validate_against_pending_ones():
    async def scenario():
        raft, qc = started()
        await committed(raft, qc, qc.call("register_broker", 1, ENDPOINT))
        first = asyncio.ensure_future(qc.call("create_topics", [NewTopic("a", 1, 1)]))
        await asyncio.sleep(0)
        assert not first.done() and qc.committed.topic("a") is None
        again = await qc.call("create_topics", [NewTopic("a", 1, 1)])   # refused: nothing to wait for
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
