"""The broker's way to the active controller (kesque/server/forwarding.py) while the controller
fails over: a request the broker holds for its client reaches the new controller as soon as the
broker knows it, not after the channel's reconnect backoff to the dead one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kesque.server.channel import Channel
from kesque.server.forwarding import ControllerRouter
from kesque.testing.kafka import free_port

ANSWER = object()


class TwoControllers(Channel):
    """Node 1 is a dead controller (a refused port, a long reconnect backoff); node 2 answers."""

    def __init__(self):
        dead = free_port()
        super().__init__(
            lambda node: ("127.0.0.1", dead),
            client_id="t",
            reconnect_backoff_ms=10_000,
            reconnect_backoff_max_ms=10_000,
        )
        self.sent: list[int] = []

    async def send(self, node, api_key, version, body, timeout_ms=None, decode=None):
        self.sent.append(node)
        if node == 2:
            return SimpleNamespace(error_code=0, answer=ANSWER)
        return await super().send(node, api_key, version, body, timeout_ms, decode)


def test_a_forwarded_request_goes_to_the_new_controller_without_waiting_out_the_old_ones_backoff():
    """The first send to dead controller 1 is refused and starts a 10 s reconnect backoff; the
    broker then learns that 2 leads. The request (timeout 5 s) must reach 2: before, the router
    sat in the send to 1 until the request's deadline, so a controller failover took up to a
    backoff (1 s by default) longer than the election."""

    async def run():
        channel = TwoControllers()
        leader = {"id": 1}
        router = ControllerRouter(3, None, lambda: leader["id"], channel, {"CONTROLLER"})
        ctx = SimpleNamespace(listener="PLAINTEXT", header=SimpleNamespace(api_key=19), api_version=7)
        req = SimpleNamespace(timeout=5000)
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, leader.update, {"id": 2})  # the election ends while 1 backs off
        resp = await asyncio.wait_for(router.dispatch(ctx, req, lambda: None), 10)
        channel.close()
        return resp, channel.sent

    resp, sent = asyncio.run(run())
    assert getattr(resp, "answer", None) is ANSWER, resp
    assert sent[0] == 1 and sent[-1] == 2
    assert sent.count(1) == 1, f"sent to the dead controller inside its backoff: {sent}"
