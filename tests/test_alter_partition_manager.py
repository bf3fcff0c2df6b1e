"""The broker's AlterPartition client (kesque/server/drivers/alter_partition.py): Kafka's
DefaultAlterPartitionManager rules (one item per partition, one request in flight, every pending
item in the next request, per-partition callbacks, top-level errors for each) and the RPC's wire
form, through ControllerRouter to a remote controller."""

from __future__ import annotations

import asyncio
import io
import uuid

from kio.serial import entity_reader, entity_writer

from kesque.controller.replication_control import AlterPartitionRequest
from kesque.errors import ErrorCode as E
from kesque.errors import KafkaError
from kesque.replication.replica_state import AlterPartition, AlterPartitionReply
from kesque.server.drivers import alter_partition as ap
from kesque.server.forwarding import ControllerRouter

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def proposal(isr=((1, 10), (2, 20)), partition_epoch=3):
    return AlterPartition("shrink", 1, 5, partition_epoch, tuple(isr), frozenset({3}), (1, 2, 3))


class Router:
    """Answers each request when the test releases it; records what was asked."""

    def __init__(self):
        self.requests: list[list[AlterPartitionRequest]] = []
        self.gates: list[asyncio.Future] = []

    async def alter_partition(self, broker_id, broker_epoch, reqs, timeout_ms):
        self.requests.append(reqs)
        gate = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        return await gate


def ok(r: AlterPartitionRequest) -> AlterPartitionReply:
    return AlterPartitionReply(0, r.broker_id, [b for b, _ in r.new_isr], r.leader_epoch, r.partition_epoch + 1)


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_one_request_in_flight_and_every_pending_item_in_the_next():
    async def scenario():
        router = Router()
        m = ap.AlterPartitionManager(router, 1, lambda: 10)
        got = []
        m.submit(T1, "a", 0, proposal(), lambda code, reply: got.append(("a0", code, reply)))
        await settle()
        m.submit(T1, "a", 1, proposal(), lambda code, reply: got.append(("a1", code, reply)))
        m.submit(T2, "b", 0, proposal(), lambda code, reply: got.append(("b0", code, reply)))
        assert not m.submit(T1, "a", 0, proposal(), lambda code, reply: got.append(("again", code, reply)))
        await settle()
        assert [[(r.topic_id, r.partition_id) for r in reqs] for reqs in router.requests] == [[(T1, 0)]]
        assert got == [("again", E.operation_not_attempted, None)]
        router.gates[0].set_result([ok(r) for r in router.requests[0]])
        await settle()
        assert got[1][:2] == ("a0", 0) and got[1][2].partition_epoch == 4
        assert [(r.topic_id, r.partition_id) for r in router.requests[1]] == [(T1, 1), (T2, 0)]
        r = router.requests[1][0]
        assert (r.broker_id, r.broker_epoch, r.leader_epoch, r.partition_epoch, r.new_isr, r.topic_name) == (
            1,
            10,
            5,
            3,
            [(1, 10), (2, 20)],
            "a",
        )
        router.gates[1].set_result([AlterPartitionReply(int(E.fenced_leader_epoch)), None])  # b0 left out
        await settle()
        assert got[2] == ("a1", E.fenced_leader_epoch, None) and len(got) == 3
        await asyncio.sleep(0.1)  # the left-out partition is sent again
        assert [(r.topic_id, r.partition_id) for r in router.requests[2]] == [(T2, 0)]
        m.close()

    asyncio.run(scenario())


def test_a_top_level_error_is_each_partitions_answer():
    class Failing(Router):
        async def alter_partition(self, broker_id, broker_epoch, reqs, timeout_ms):
            self.requests.append(reqs)
            raise KafkaError(E.stale_broker_epoch)

    async def scenario():
        m = ap.AlterPartitionManager(Failing(), 1, lambda: 10)
        got = []
        m.submit(T1, "a", 0, proposal(), lambda code, reply: got.append((code, reply)))
        m.submit(T1, "a", 1, proposal(), lambda code, reply: got.append((code, reply)))
        await settle()
        assert got == [(E.stale_broker_epoch, None)] * 2 and not m.pending

    asyncio.run(scenario())


def through_kio(obj):
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return entity_reader(type(obj))(buf.getvalue(), 0)[0]


def test_the_router_sends_it_to_the_active_controller_and_reads_the_answer():
    """A broker whose local controller is not active: the RPC (v3, through kio's encoding) to
    the leader, resent after NOT_CONTROLLER; the controller's side decodes and answers it."""
    reqs = [
        AlterPartitionRequest(1, 10, T1, 0, 5, 3, [(1, 10), (2, 20)]),
        AlterPartitionRequest(1, 10, T2, 4, 5, 3, [(1, 10)]),
    ]

    class Channel:
        calls = 0

        def backing_off(self, node):
            return False

        async def send(self, node, api_key, version, body, timeout_ms=None):
            Channel.calls += 1
            assert (node, api_key, version) == (2, 56, 3)
            if Channel.calls == 1:
                return ap.response_to_kio(int(E.not_controller), [], [], 3)
            got = ap.request_from_kio(through_kio(body), 3)
            assert got == [
                AlterPartitionRequest(1, 10, T1, 0, 5, 3, [(1, 10), (2, 20)]),
                AlterPartitionRequest(1, 10, T2, 4, 5, 3, [(1, 10)]),
            ]
            return through_kio(ap.response_to_kio(0, got, [ok(got[0]), AlterPartitionReply(int(E.invalid_request))], 3))

    router = ControllerRouter(1, None, lambda: 2, Channel(), set())
    replies = asyncio.run(router.alter_partition(1, 10, reqs))
    assert Channel.calls == 2
    assert replies[0] == AlterPartitionReply(0, 1, [1, 2], 5, 4)
    assert replies[1].error_code == E.invalid_request


def test_version_2_carries_the_isr_without_broker_epochs():
    req = AlterPartitionRequest(1, 10, T1, 0, 5, 3, [(1, 10), (2, 20)])
    assert ap.request_from_kio(through_kio(ap.request_to_kio(1, 10, [req], 2)), 2)[0].new_isr == [(1, -1), (2, -1)]


def test_the_sender_hands_the_answer_to_the_partition_and_resubmits_on_retry():
    class Part:
        topic_id, topic, partition = T1, "a", 3

        def __init__(self):
            self.answers = []

        def on_alter_partition_response(self, proposal, code, reply):
            self.answers.append(code)
            return code == E.not_controller  # retried once

    async def scenario():
        router = Router()
        part = Part()
        ap.AlterPartitionManager(router, 1, lambda: 10).sender()(part, proposal())
        await settle()
        router.gates[0].set_result([AlterPartitionReply(int(E.not_controller))])
        await settle()
        assert [(r.topic_id, r.partition_id, r.topic_name) for r in router.requests[1]] == [(T1, 3, "a")]
        router.gates[1].set_result([ok(router.requests[1][0])])
        await settle()
        assert part.answers == [E.not_controller, 0]

    asyncio.run(scenario())
