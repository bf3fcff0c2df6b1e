"""What a client can make the broker hold: memory for frames it never sends, and connections
it never uses (issue 11, item 12).

* a size prefix costs nothing until the frame's bytes arrive, and the bytes of large frames
  being received are bounded by ``queued.max.request.bytes``: connections that need more
  wait with their reads paused (Kafka's memory pool, ``SocketServer``/``NetworkReceive``);
* ``connections.max.idle.ms`` closes connections that send and receive nothing, half a
  frame included (Kafka's ``Selector`` idle expiry).

Every case runs a real broker subprocess. Where the test must know the broker has read what
a client sent, it waits until the client's socket has no unacknowledged bytes and then makes
a few round trips on another connection: each one is a turn of the broker's event loop, in
which it reads what is waiting on every socket.
"""

from __future__ import annotations

import fcntl
import select
import socket
import struct
import termios
import threading
import time

from clientlib import (
    assert_same,
    consume_confluent,
    counts,
    expected_by_partition,
    make_records,
    produce_confluent,
    wait_for_log,
)
from conftest import running_broker
from kesque.protocol.api_keys import ApiKeys
from wire import Api, WireClient, build_batch, consume_all, encode_request

I32 = struct.Struct(">i")
MiB = 1 << 20


# ====================================================================== helpers


def rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def send_and_drain(c: WireClient, data: bytes, timeout: float = 10.0) -> None:
    """Send ``data`` and wait until the broker's kernel acknowledged every byte (SIOCOUTQ)."""
    c.send_raw(data)
    deadline = time.monotonic() + timeout
    while struct.unpack("i", fcntl.ioctl(c.sock, termios.TIOCOUTQ, b"\0\0\0\0"))[0]:
        assert time.monotonic() < deadline, "the broker stopped reading"
        time.sleep(0.005)


def send_in_background(c: WireClient, data: bytes) -> threading.Thread:
    """sendall from a thread: the broker may leave the bytes unread for a while (or for
    good: the send ends quietly when the connection is shut down)."""

    def send():
        try:
            c.send_raw(data)
        except OSError:
            pass

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def barrier(api: Api, turns: int = 5) -> None:
    """Round trips on another connection: the broker's loop has turned and read what waits."""
    for _ in range(turns):
        assert api.api_versions().error_code == 0


def produce_frame(api: Api, topic: str, value: bytes, corr: int) -> bytes:
    """A whole Produce v9 request frame (acks=1) carrying one record."""
    return encode_request(
        ApiKeys.PRODUCE, 9, api.produce_request(topic, build_batch([(None, value, ())]), acks=1), corr
    )


def frame_of_size(api: Api, topic: str, corr: int, size: int) -> bytes:
    """A one-record Produce request frame whose size prefix says exactly ``size``."""
    probe = size - 256  # varints as long as the answer's
    overhead = len(produce_frame(api, topic, value(corr, probe), corr)) - 4 - probe
    frame = produce_frame(api, topic, value(corr, size - overhead), corr)
    assert len(frame) == 4 + size, len(frame)
    return frame


def produced(c: WireClient) -> tuple[int, int]:
    """(correlation id, error code) of the Produce v9 answer on ``c``."""
    corr, resp = c.recv(ApiKeys.PRODUCE, 9, timeout=15)
    return corr, resp.responses[0].partition_responses[0].error_code


def readable(c: WireClient) -> bool:
    return bool(select.select([c.sock], [], [], 0)[0])


def value(tag: int, size: int) -> bytes:
    return bytes([tag]) * size


# ====================================================================== (a) the attack

ATTACKERS = 60
DECLARED = 100_000_000  # just under socket.request.max.bytes (104857600)
RSS_BOUND = 300 * MiB


def test_declared_sizes_cost_nothing_until_the_bytes_arrive(tmp_path):
    """60 connections each declare a ~100 MB frame and send 1 KB of it: the broker used to
    allocate the declared size (6 GB resident); now its memory stays under 300 MB while a
    confluent-kafka producer and consumer on other connections work normally."""
    topic = "attacked"
    with running_broker(tmp_path / "data") as b:
        with WireClient(b.bootstrap_servers) as c:
            Api(c).create_topic(topic, partitions=3)
        attackers = [WireClient(b.bootstrap_servers) for _ in range(ATTACKERS)]
        try:
            for a in attackers:
                a.send_raw(I32.pack(DECLARED) + b"\x00" * 1024)
            recs = make_records(1000, partitions=3)
            expected = expected_by_partition(recs)
            produce_confluent(b.bootstrap_servers, topic, recs)
            assert_same(consume_confluent(b.bootstrap_servers, topic, counts(expected)), expected)
            mem = rss_bytes(b.process.pid)
            assert mem["VmRSS"] < RSS_BOUND and mem["VmHWM"] < RSS_BOUND, mem
            # the attackers are still connected, their frames pending
            assert not any(readable(a) for a in attackers)
        finally:
            for a in attackers:
                a.close()


# ====================================================================== (b) queued.max.request.bytes

LIMITS = {"socket.request.max.bytes": str(MiB), "queued.max.request.bytes": str(MiB)}


def test_reads_pause_while_the_request_memory_is_used_up_then_resume(tmp_path):
    """A client holds a frame as large as the 1 MiB bound, short of its last bytes: another
    client's 300 KB request waits unread (its connection muted) until that frame is complete;
    then both requests are answered and both records are in the log."""
    topic = "pool"
    with running_broker(tmp_path / "data", LIMITS) as b, WireClient(b.bootstrap_servers) as c:
        api = Api(c)
        api.create_topic(topic)
        big, small = frame_of_size(api, topic, 1, MiB), produce_frame(api, topic, value(2, 300_000), corr=2)
        holder, waiter = WireClient(b.bootstrap_servers), WireClient(b.bootstrap_servers)
        try:
            send_and_drain(holder, big[:-100])
            barrier(api)
            sending = send_in_background(waiter, small)
            wait_for_log(b, "Request memory pool exhausted")
            barrier(api)
            assert not readable(waiter), "the request was read although the pool was used up"
            holder.send_raw(big[-100:])
            assert produced(holder) == (1, 0)
            assert produced(waiter) == (2, 0)
            sending.join()
        finally:
            holder.close()
            waiter.close()
        got = consume_all(b.bootstrap_servers, topic)
        assert [v[:1] for _o, v in got[0]] == [value(1, 1), value(2, 1)]
        assert [len(v) for _o, v in got[0]] == [len(big) - (len(small) - 300_000), 300_000]


def test_the_bound_holds_when_clients_send_most_of_their_frames(tmp_path):
    """30 clients each send 8 MB of a frame declared 8 MiB and stop: the broker reads until
    queued.max.request.bytes (8 MiB) is used up and holds about that, not 240 MB, while
    small requests are still served."""
    limit, clients = 8 * MiB, 30
    config = {"socket.request.max.bytes": str(limit), "queued.max.request.bytes": str(limit)}
    with running_broker(tmp_path / "data", config) as b, WireClient(b.bootstrap_servers) as c:
        api = Api(c)
        api.create_topic("bound")
        before = rss_bytes(b.process.pid)["VmRSS"]
        senders = [WireClient(b.bootstrap_servers) for _ in range(clients)]
        threads = [send_in_background(x, I32.pack(limit) + bytes(limit - 100)) for x in senders]
        try:
            wait_for_log(b, "Request memory pool exhausted")
            barrier(api, 20)
            grown = rss_bytes(b.process.pid)["VmRSS"] - before
            assert grown < 64 * MiB, f"{grown / MiB:.0f} MiB more resident"
            assert api.metadata(["bound"]).topics[0].error_code == 0
        finally:
            for x in senders:
                x.sock.shutdown(socket.SHUT_RDWR)  # wakes its sender thread
                x.close()
            for t in threads:
                t.join()


def test_frames_that_all_wait_for_memory_still_complete(tmp_path):
    """Four frames started together fill the 1 MiB bound with their first buffers; each
    then needs more while none is left. Nothing would ever free — so one of them is let
    through (the pool's exemption), and all four complete."""
    topic = "pool-exempt"
    with running_broker(tmp_path / "data", LIMITS) as b, WireClient(b.bootstrap_servers) as c:
        api = Api(c)
        api.create_topic(topic)
        frames = [produce_frame(api, topic, value(t, 1_000_000), corr=t) for t in range(1, 5)]
        clients = [WireClient(b.bootstrap_servers) for _ in frames]
        try:
            for c4, f in zip(clients, frames):
                send_and_drain(c4, f[:100_000])
            barrier(api)
            senders = [send_in_background(c4, f[100_000:]) for c4, f in zip(clients, frames)]
            assert [produced(c4) for c4 in clients] == [(t, 0) for t in range(1, 5)]
            for t in senders:
                t.join()
        finally:
            for c4 in clients:
                c4.close()
        got = consume_all(b.bootstrap_servers, topic)
        assert sorted(v for _o, v in got[0]) == [value(t, 1_000_000) for t in range(1, 5)]


# ====================================================================== (c) connections.max.idle.ms


def test_idle_connections_are_closed_active_ones_are_not(tmp_path):
    """connections.max.idle.ms=2000: a silent connection and one that sent half a frame are
    closed; one sending a request every 0.25 s, and one waiting 4 s on a long-poll fetch (a
    request in progress is not idleness), stay open."""
    with (
        running_broker(tmp_path / "data", {"connections.max.idle.ms": "2000"}) as b,
        WireClient(b.bootstrap_servers) as active,
        WireClient(b.bootstrap_servers) as polling,
        WireClient(b.bootstrap_servers) as silent,
        WireClient(b.bootstrap_servers) as half,
    ):
        api = Api(active)
        api.create_topic("idle")
        half.send_raw(I32.pack(100) + b"\x00" * 50)
        fetch = Api(polling).fetch_request("idle", 0, max_wait=4000, min_bytes=1)
        corr = polling.send(ApiKeys.FETCH, 12, fetch)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.5:
            assert api.api_versions().error_code == 0
            time.sleep(0.25)
        got, resp = polling.recv(ApiKeys.FETCH, 12)
        assert got == corr and resp.error_code == 0
        assert silent.is_closed(timeout=20)
        assert half.is_closed(timeout=20)
        assert api.api_versions().error_code == 0
        assert Api(polling).api_versions().error_code == 0


# ====================================================================== buffer reuse (in process)


def test_a_frame_its_handler_keeps_is_never_reused():
    """The buffers of large frames are reused, except one a handler still holds a view of
    (an async handler does): its bytes stay intact, and every byte returns to the pool."""
    import asyncio
    import socket

    from kesque.server.network import SocketServer

    loop = asyncio.new_event_loop()
    frames, kept, done = [bytes([i]) * (MiB + 100) for i in range(12)], [], loop.create_future()

    def handle(conn, frame):
        if frame[0] % 2:
            kept.append(frame[1:])  # a slice outlives the handler, as an awaiting handler's would
        if frame[0] == len(frames) - 1:
            done.set_result(None)

    server = SocketServer(loop, handle, 2 * MiB, queued_max_bytes=64 * MiB)
    port = server.listen("127.0.0.1", 0)
    sender = threading.Thread(
        target=lambda: socket.create_connection(("127.0.0.1", port)).sendall(
            b"".join(I32.pack(len(f)) + f for f in frames)
        ),
        daemon=True,
    )
    sender.start()
    try:
        loop.run_until_complete(asyncio.wait_for(done, 30))
        assert [bytes(v) for v in kept] == [f[1:] for f in frames if f[0] % 2]
        assert server.pool.used == sum(len(v.obj) for v in kept)  # the kept ones only
        kept.clear()
        assert server.pool.used == 0
    finally:
        sender.join()
        server.close()
        loop.close()
