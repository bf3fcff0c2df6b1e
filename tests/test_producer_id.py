"""The producer-id manager (a sans-IO state machine: a current block, one ready after it, one
request on its way) and its driver (kesque.server.drivers.producer_ids), as Kafka's
RPCProducerIdManager: the first block is awaited at start, the next one is asked for once 90%
of the current one is used, and an id asked for while no block is there answers
COORDINATOR_LOAD_IN_PROGRESS."""

from __future__ import annotations

import asyncio

import pytest

from kesque.coordinator.producer_id import ProducerIdManager
from kesque.errors import ErrorCode, KafkaError
from kesque.server.drivers.producer_ids import ProducerIdBlocks


def test_the_manager_asks_for_the_next_block_at_90_percent_and_once():
    asked = []
    m = ProducerIdManager(lambda: asked.append(1))
    with pytest.raises(KafkaError) as e:
        m.generate()
    assert e.value.code == ErrorCode.coordinator_load_in_progress
    assert asked == [1]
    with pytest.raises(KafkaError):
        m.generate()
    assert asked == [1]  # one request on its way at a time
    m.block_arrived(1000, 20)
    assert [m.generate() for _ in range(17)] == list(range(1000, 1017))
    assert asked == [1]
    assert m.generate() == 1017  # 2 left = 10% of the block: the next one is asked for
    assert asked == [1, 1]
    m.block_failed(RuntimeError("no controller"))
    assert m.generate() == 1018
    assert asked == [1, 1, 1]  # failed: asked again by the next id
    m.block_arrived(5000, 20)
    assert m.generate() == 1019
    assert asked == [1, 1, 1]  # a block is ready
    assert m.generate() == 5000


def test_the_driver_awaits_the_first_block_and_fetches_the_next_in_the_background():
    async def main():
        calls = []
        tasks = []

        async def allocate():
            calls.append(len(calls))
            if len(calls) == 2:
                raise RuntimeError("controller moved")
            return 100 * len(calls), 10

        def spawn(coro):
            tasks.append(asyncio.get_running_loop().create_task(coro))

        blocks = ProducerIdBlocks(allocate, spawn)
        await blocks.load()
        await blocks.load()
        assert len(calls) == 1  # a block is ready: load asks nothing
        m = blocks.manager
        assert m.generate() == 100  # the first InitProducerId is answered at once
        assert [m.generate() for _ in range(8)] == list(range(101, 109))
        assert len(tasks) == 1  # 1 left: the next block is asked for in the background
        await tasks[0]
        assert m.generate() == 109
        with pytest.raises(KafkaError):  # that request failed: no block, and it asks again
            m.generate()
        await tasks[1]
        assert m.generate() == 300

    asyncio.run(main())
