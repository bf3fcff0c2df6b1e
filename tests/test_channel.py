"""The inter-node channel (kesque/server/channel.py) against a node that is down."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kesque.server.channel import Channel, ChannelError
from kesque.testing.kafka import free_port


def test_a_connect_attempt_outliving_its_caller_leaves_no_unread_error():
    """A request whose deadline passes while the reconnect backs off gives up; the connect
    attempt then fails on its own, and its error must be read (else asyncio logs 'Task
    exception was never retrieved' for every such attempt)."""
    unread = []

    async def run():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: unread.append(ctx.get("message")))
        port = free_port()
        ch = Channel(lambda node: ("127.0.0.1", port), client_id="t", reconnect_backoff_ms=300)
        with pytest.raises(ChannelError):
            await ch.send(1, 18, 3, None, timeout_ms=1000)      # refused: backs off 300 ms
        with pytest.raises(ChannelError):
            await ch.send(1, 18, 3, None, timeout_ms=50)        # gives up inside the backoff
        await asyncio.sleep(0.5)                                # the attempt fails meanwhile
        ch.close()
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert unread == []
