"""The broker's way to the active controller (kesque/server/forwarding.py) while the controller
fails over: a request the broker holds for its client reaches the new controller as soon as the
broker knows it, not after the channel's reconnect backoff to the dead one."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace

from kesque.protocol.api import RequestHeader, encode_body, request_class, response_class, response_header
from kesque.protocol.api_keys import ApiKeys
from kesque.security.principal import KafkaPrincipal
from kesque.server import envelope
from kesque.server.channel import Channel
from kesque.server.forwarding import ControllerRouter
from kesque.testing.kafka import free_port

ALICE = KafkaPrincipal("User", "alice")


def _create_topics_answer(corr: int) -> bytes:
    resp = response_class(ApiKeys.CREATE_TOPICS, 7)(throttle_time=datetime.timedelta(0), topics=())
    return response_header(corr, ApiKeys.CREATE_TOPICS, 7) + encode_body(resp)


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
        self.envelopes: list = []

    async def send(self, node, api_key, version, body, timeout_ms=None, decode=None):
        self.sent.append(node)
        if node == 2:
            assert api_key == ApiKeys.ENVELOPE and version == 0
            self.envelopes.append(body)
            return envelope.envelope_response(_create_topics_answer(41))
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
        header = RequestHeader(ApiKeys.CREATE_TOPICS, 7, 41, "adminclient-1", 0, True)
        ctx = SimpleNamespace(
            listener="PLAINTEXT", header=header, api_version=7, principal=ALICE, client_host="10.1.2.3", throttle_ms=0
        )
        req = request_class(ApiKeys.CREATE_TOPICS, 7)(
            topics=(), timeout=datetime.timedelta(seconds=5), validate_only=False
        )
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, leader.update, {"id": 2})  # the election ends while 1 backs off
        resp = await asyncio.wait_for(router.dispatch(ctx, req, lambda: None), 10)
        channel.close()
        return resp, channel.sent, channel.envelopes

    resp, sent, envelopes = asyncio.run(run())
    assert type(resp).__name__ == "CreateTopicsResponse" and resp.topics == (), resp
    assert sent[0] == 1 and sent[-1] == 2
    # the client's request went in an Envelope with its header, principal and address
    inner_header, _body = envelope.parse_inner(envelopes[-1].request_data)
    assert (inner_header.api_key, inner_header.correlation_id, inner_header.client_id) == (19, 41, "adminclient-1")
    assert envelope.deserialize_principal(envelopes[-1].request_principal) == ALICE
    assert envelopes[-1].client_host_address == bytes([10, 1, 2, 3])
    assert sent.count(1) == 1, f"sent to the dead controller inside its backoff: {sent}"
