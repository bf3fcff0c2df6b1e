"""The inter-node channel (kesque/server/channel.py) against a node that is down."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kesque.protocol.api_keys import ApiKeys
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
            await ch.send(1, ApiKeys.API_VERSIONS, 3, None, timeout_ms=1000)  # refused: backs off 300 ms
        with pytest.raises(ChannelError):
            await ch.send(1, ApiKeys.API_VERSIONS, 3, None, timeout_ms=50)  # gives up inside the backoff
        await asyncio.sleep(0.5)  # the attempt fails meanwhile
        ch.close()
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert unread == []


# ---------------------------------------------------------------- framing of the answers
def _serve(answer):
    """A server whose connection handler is ``answer(requests, writer)``: called once with the
    (correlation id, api key) of the first ``n`` requests read (n = answer.n)."""

    async def handle(reader, writer):
        reqs = []
        try:
            while len(reqs) < answer.n:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                reqs.append((int.from_bytes(frame[4:8], "big", signed=True), int.from_bytes(frame[0:2], "big")))
            await answer(reqs, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return handle


def _frame(corr: int, body: bytes) -> bytes:
    payload = corr.to_bytes(4, "big") + body
    return len(payload).to_bytes(4, "big") + payload


def _raw(_api_key, _version, frame):
    """The body as a view of the frame: a decoder may keep views of its frame (the follower's
    Fetch decoder keeps the records), so a frame must never be a view of a reused buffer."""
    return None, memoryview(frame)[4:]


def _run_against(answer, bodies_by_request, client_timeout_ms=60_000):
    """Send one request per body (pipelined); the server answers through ``answer``. The
    timeout is generous: a one-byte-chunked answer of 600 KB takes seconds on a loaded machine
    under coverage, and the test is about framing, not time."""

    async def run():
        server = await asyncio.start_server(_serve(answer), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ch = Channel(lambda node: ("127.0.0.1", port), client_id="t")
        try:
            return await asyncio.gather(
                *(
                    ch.send(1, ApiKeys.API_VERSIONS, 3, b"", timeout_ms=client_timeout_ms, decode=_raw)
                    for _ in bodies_by_request
                ),
                return_exceptions=True,
            )
        finally:
            ch.close()
            server.close()

    return asyncio.run(run())


@pytest.mark.parametrize("chunk", [1, 3, 4096, 1 << 20])
def test_pipelined_answers_in_any_order_and_any_chunking_reach_their_requests(chunk):
    """Small frames (parsed in the shared buffer), frames larger than the buffer and frames
    above BIG_FRAME (read into their own buffer), answered in reverse order, the stream cut
    into pieces of ``chunk`` bytes: every request gets its own answer, byte for byte."""
    from kesque.server import channel as ch_mod

    sizes = [0, 5, ch_mod.BIG_FRAME - 4, ch_mod.BIG_FRAME + 1, 3, ch_mod.READ_BUFFER + 17, 200_000, 1]
    sizes += [997] * 150  # small frames filling the shared buffer with a partial one at its end
    bodies = [bytes((i * 7 + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]

    async def answer(reqs, writer):
        stream = b"".join(_frame(corr, bodies[i]) for i, (corr, _k) in reversed(list(enumerate(reqs))))
        for pos in range(0, len(stream), chunk):
            writer.write(stream[pos : pos + chunk])
            if chunk < 4096 and pos % (chunk * 64) == 0:
                await writer.drain()
                await asyncio.sleep(0)
        await writer.drain()
        await asyncio.sleep(0.2)

    answer.n = len(bodies)
    got = _run_against(answer, bodies)
    assert [g if isinstance(g, Exception) else len(g) for g in got] == sizes
    assert [bytes(g) for g in got] == bodies


@pytest.mark.parametrize("cut", [2, 6, 100, 20_000])
def test_a_connection_closed_inside_an_answer_fails_the_requests_in_flight(cut):
    """The peer closes after ``cut`` bytes of the first answer: every request in flight fails
    at once with Disconnected (not by its own timeout)."""
    from kesque.server.channel import Disconnected

    async def answer(reqs, writer):
        writer.write(_frame(reqs[0][0], b"x" * 50_000)[:cut])
        await writer.drain()

    answer.n = 2
    got = _run_against(answer, [b"", b""], client_timeout_ms=20_000)
    assert all(isinstance(g, Disconnected) for g in got), got


def test_an_invalid_answer_size_fails_the_connection():
    async def answer(reqs, writer):
        writer.write((2).to_bytes(4, "big") + b"ab")
        await writer.drain()
        await asyncio.sleep(0.5)

    answer.n = 1
    got = _run_against(answer, [b""])
    assert isinstance(got[0], ChannelError) and "invalid response size" in str(got[0])


def test_a_kio_answer_is_decoded_from_a_big_frame():
    """Without ``decode``, the answer is a kio object, also when its frame went to its own buffer."""
    import uuid

    from kesque.protocol.fetch import FetchPartitionResponse, encode_fetch_response, flatten

    tid = uuid.uuid4()
    records = b"r" * 100_000
    body = b"\x00" + flatten(
        encode_fetch_response(18, 0, 0, [(tid, [FetchPartitionResponse(3, 0, 7, 7, 0, [records], len(records))])])
    )

    async def answer(reqs, writer):
        writer.write(_frame(reqs[0][0], body))
        await writer.drain()
        await asyncio.sleep(0.2)

    answer.n = 1

    async def run():
        server = await asyncio.start_server(_serve(answer), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ch = Channel(lambda node: ("127.0.0.1", port), client_id="t")
        try:
            return await ch.send(1, ApiKeys.FETCH, 18, b"", timeout_ms=5000)
        finally:
            ch.close()
            server.close()

    resp = asyncio.run(run())
    p = resp.responses[0].partitions[0]
    assert resp.responses[0].topic_id == tid and p.partition_index == 3 and p.high_watermark == 7
    assert bytes(p.records) == records


def test_a_big_answer_buffer_is_reused_only_once_nothing_refers_to_it():
    """Answers read one after another into big buffers: one nobody refers to any more is read
    into again (no new zero-filled buffer per answer), one whose view is still held is not, and
    a held answer keeps its bytes while later ones arrive."""
    from kesque.server import channel as ch_mod

    size = 300_000
    bodies = [bytes([i]) * size for i in range(12)]

    async def handle(reader, writer):
        try:
            for body in bodies:
                n = int.from_bytes(await reader.readexactly(4), "big")
                req = await reader.readexactly(n)
                writer.write(_frame(int.from_bytes(req[4:8], "big", signed=True), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def run():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ch = Channel(lambda node: ("127.0.0.1", port), client_id="t")
        held, ids = [], []
        try:
            for i in range(len(bodies)):
                got = await ch.send(1, ApiKeys.API_VERSIONS, 3, b"", timeout_ms=5000, decode=_raw)
                assert bytes(got[:3]) == bodies[i][:3]
                ids.append(id(got.obj))
                if i % 4 == 3:  # kept, as a follower keeping records would
                    held.append((i, got))
                del got
            return held, ids
        finally:
            ch.close()
            server.close()

    held, ids = asyncio.run(run())
    assert all(bytes(v) == bodies[i] for i, v in held)  # never overwritten
    for j, _v in held:  # no later answer in a held one's buffer
        assert ids[j] not in ids[j + 1 :], (j, ids)
    assert len(set(ids)) <= len(held) + ch_mod.SPARES, ids  # the others were read into again
