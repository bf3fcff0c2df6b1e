"""The inter-node channel: asyncio requests from this node to the others.

One persistent connection per destination node (its address comes from a resolver, so a
node that moves is found again), requests pipelined on it and matched to their responses by
correlation id, each with its own timeout. A connection that fails fails every request in
flight on it; the next request reconnects, after a backoff that doubles up to a ceiling while
the destination keeps failing. Failures surface as :class:`ChannelError` (``Disconnected``,
``RequestTimedOut``); the caller decides whether to retry.

A channel given an ``ssl_context`` connects with TLS (asyncio's SSL transport), for a
destination whose listener is SSL (``kesque/server/tls.py`` builds the context from the broker's
``ssl.*`` settings for that listener).

A channel given a ``sasl`` login (:class:`kesque.security.sasl_client.SaslLogin`: the mechanism
of ``sasl.mechanism.inter.broker.protocol`` or ``sasl.mechanism.controller.protocol`` and the
destination listener's JAAS options) authenticates each connection before its first request, for
a destination whose listener is SASL_PLAINTEXT or SASL_SSL: SaslHandshake v1, then
SaslAuthenticate v2 tokens until the mechanism's client completes (a SCRAM server's signature is
verified). When the server gives the session a lifetime (KIP-368), the connection re-authenticates
on the first request after 85-95% of it, as Kafka's client; requests wait meanwhile. A failed
authentication is logged with the server's message and fails the connect like a refused one
(the next attempt waits out the reconnect backoff).

Requests and responses are kio objects, encoded with :mod:`kesque.protocol`. Used for the
raft RPCs, the controller RPCs and the replica fetchers (a channel each). ``kesque.client`` is
the blocking client of the tools; this one runs on the node's event loop and nothing in it is
process-wide.
"""

from __future__ import annotations

import asyncio
import io
import logging
import random
import struct
import sys
import time

from kio.serial import entity_writer

from ..protocol import api as protocol
from ..protocol.api_keys import ApiKeys
from ..protocol.messages import Msg, to_ms
from ..protocol.primitives import skip_tagged_fields
from ..security.sasl_client import SaslClientError

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


class ChannelError(Exception):
    pass


class Disconnected(ChannelError):
    """Not connected to the destination (refused, reset, closed, or unknown address)."""


class RequestTimedOut(ChannelError):
    pass


class AuthenticationFailed(Disconnected):
    """The destination's SASL listener refused this node's login (or its answer did not check)."""


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, body) -> bytes:
    """Size prefix, request header (v1, or v2 for flexible versions) and body."""
    cid = client_id.encode()
    head = _HEADER.pack(api_key, version, correlation_id) + struct.pack(">h", len(cid)) + cid
    if protocol.is_flexible(api_key, version):
        head += b"\x00"
    if isinstance(body, (bytes, bytearray)):
        payload = head + body
    else:
        out = io.BytesIO()
        entity_writer(type(body))(out, body)
        payload = head + out.getvalue()
    return _I32.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes):
    """(correlation id, kio response) of one response frame (size prefix removed)."""
    view = memoryview(frame).toreadonly()
    corr = _I32.unpack_from(view, 0)[0]
    pos = 4
    if api_key != ApiKeys.API_VERSIONS and protocol.is_flexible(api_key, version):
        pos = skip_tagged_fields(view, pos)
    cls = protocol.response_class(api_key, version)
    obj, _ = protocol._reader(cls)(view, pos)
    return corr, obj


READ_BUFFER = 64 * 1024  # the shared read buffer of a connection: small frames are parsed in place
BIG_FRAME = 16 * 1024  # a frame above this gets its own buffer, read into without copies
BIG_ROUND = 64 * 1024  # such a buffer's size is rounded up to this, so that it fits later frames too
SPARES = 3  # big buffers a connection keeps for reuse ...
SPARE_MAX = 16 * 1024 * 1024  # ... up to this size each


class _Connection(asyncio.BufferedProtocol):
    """One TCP connection to one node, with its requests in flight.

    A buffered protocol, as the server's connections (``network.py``): the socket is read into a
    shared buffer, and a frame larger than ``BIG_FRAME`` (a follower's Fetch answer) is read
    straight into a buffer of its own size, so its bytes are copied once by the kernel and not
    again in Python (an ``asyncio.StreamReader`` copies each chunk into its buffer and then the
    frame out of it, and wakes the reading task on every chunk). Each complete frame completes
    its request's future from the protocol callback."""

    def __init__(self):
        self.pending: dict[int, tuple[asyncio.Future, int, int, object]] = {}
        self.closed = False
        self.transport: asyncio.Transport | None = None
        # SASL: the loop time after which the next request re-authenticates first (KIP-368), and
        # the re-authentication under way (other requests wait for it)
        self.reauth_at: float | None = None
        self.reauth: asyncio.Future | None = None
        self._buf = bytearray(READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        self._big: bytearray | None = None  # the frame being read into its own buffer
        self._big_view: memoryview | None = None
        self._big_pos = 0
        self._big_size = 0
        # Big buffers handed out before: one is reused once no decoded answer refers to it. A
        # fresh buffer per answer was zero-filled and its pages faulted in again each time
        # (glibc gives freed multi-MB blocks back to the kernel): a follower paid more CPU for
        # that than for reading the socket.
        self._spares: list[bytearray] = []

    # -- asyncio.BufferedProtocol -----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big_view[self._big_pos : self._big_size]
        if self._end == len(self._buf):  # only a partial frame's head is left: move it to the front
            n = self._end - self._start
            self._buf[0:n] = self._buf[self._start : self._end]
            self._start, self._end = 0, n
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_pos += nbytes
            if self._big_pos == self._big_size:
                frame = self._big_view[: self._big_size]
                self._big = self._big_view = None
                self._frame(frame)
            return
        self._end += nbytes
        buf = self._buf
        while not self.closed:
            avail = self._end - self._start
            if avail < 4:
                break
            size = _I32.unpack_from(buf, self._start)[0]
            if size < 4:  # not even a correlation id
                self.fail(Disconnected(f"connection lost: invalid response size {size}"))
                return
            begin = self._start + 4
            if avail - 4 >= size:
                self._start = begin + size
                self._frame(bytes(self._view[begin : begin + size]))  # the shared buffer is reused
                continue
            if size > BIG_FRAME or 4 + size > len(buf):
                have = avail - 4
                self._big = self._take(size)
                self._big_view = memoryview(self._big)
                self._big_size = size
                self._big_view[:have] = self._view[begin : self._end]
                self._big_pos = have
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes: a spare nobody refers to any more, or a new one."""
        spares = self._spares
        for buf in spares:
            # free: referred to by the list, ``buf`` and getrefcount's argument only (no view of
            # it, e.g. a decoded answer's records, is alive)
            if size <= len(buf) <= size + size // 4 + BIG_ROUND and sys.getrefcount(buf) == 3:
                return buf  # stays listed: it is reused again when free
        buf = bytearray(-(-size // BIG_ROUND) * BIG_ROUND)
        if len(buf) <= SPARE_MAX:
            if len(spares) >= SPARES:
                spares.pop(0)
            spares.append(buf)
        return buf

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc) -> None:
        self.fail(Disconnected(f"connection lost: {exc or 'closed by the peer'}"))

    # -- frames -----------------------------------------------------------------------------------------
    def _frame(self, frame) -> None:
        corr = _I32.unpack_from(frame, 0)[0]
        entry = self.pending.pop(corr, None)
        if entry is None:
            return  # the request timed out meanwhile
        fut, api_key, version, decode = entry
        if fut.done():
            return
        try:
            fut.set_result((decode or decode_response)(api_key, version, frame)[1])
        except Exception as e:  # noqa: BLE001 - a bad answer fails that request only
            fut.set_exception(ChannelError(f"cannot decode {protocol.api_name(api_key)} v{version} response: {e}"))

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        self.transport.write(data)

    def fail(self, exc: Exception) -> None:
        self.closed = True
        pending = list(self.pending.values())
        self.pending.clear()
        for fut, _k, _v, _d in pending:
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


class Channel:
    """Requests to other nodes. ``resolve(node_id)`` gives ``(host, port)`` or None."""

    def __init__(
        self,
        resolve,
        *,
        client_id: str,
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        ssl_context=None,
        sasl=None,
    ):
        self.resolve = resolve
        # TLS to the destination's SSL listener (its host name checked when the context says so)
        self.ssl_context = ssl_context
        # SASL to the destination's SASL listener: a SaslLogin (mechanism and credentials)
        self.sasl = sasl
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.backoff_ms = reconnect_backoff_ms
        self.backoff_max_ms = reconnect_backoff_max_ms
        self._conns: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._failures: dict[int, tuple[int, float]] = {}  # node -> (consecutive failures, retry at)
        self._corr = 0
        self._closed = False

    async def send(self, node: int, api_key: int, version: int, body, timeout_ms: int | None = None, decode=None):
        """The kio response of ``body`` sent to ``node``; raises :class:`ChannelError`.
        ``body`` may also be the request body already encoded (bytes, after the header);
        ``decode(api_key, version, frame) -> (correlation id, response)`` replaces the kio
        decoding of the answer (a hand-written decoder of a hot response)."""
        loop = asyncio.get_running_loop()
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        deadline = loop.time() + timeout
        conn = self._conns.get(node)
        if conn is None or conn.closed:
            try:
                conn = await asyncio.wait_for(self._connection(node), max(deadline - loop.time(), 0.001))
            except TimeoutError:
                raise RequestTimedOut(f"no connection to node {node} within {round(timeout * 1000)} ms") from None
        if conn.reauth_at is not None or conn.reauth is not None:
            conn = await self._reauthenticated(node, conn, deadline)
        return await self._exchange(node, conn, api_key, version, body, deadline, timeout, decode)

    async def _exchange(self, node, conn, api_key, version, body, deadline, timeout, decode=None):
        loop = asyncio.get_running_loop()
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        corr = self._corr
        fut = loop.create_future()
        conn.pending[corr] = (fut, api_key, version, decode)
        try:
            conn.write(encode_request(api_key, version, corr, self.client_id, body))
        except (OSError, RuntimeError) as e:
            conn.pending.pop(corr, None)
            conn.fail(Disconnected(str(e)))
            self._forget(node, conn)
            raise Disconnected(f"node {node}: {e}") from None
        try:
            return await asyncio.wait_for(fut, max(deadline - loop.time(), 0.001))
        except TimeoutError:
            conn.pending.pop(corr, None)
            raise RequestTimedOut(
                f"node {node} did not answer {protocol.api_name(api_key)} within {round(timeout * 1000)} ms"
            ) from None
        finally:
            if conn.closed:
                self._forget(node, conn)

    def backing_off(self, node: int) -> bool:
        """Is ``node`` unconnected and inside its reconnect backoff? A send to it would wait out the
        backoff first; a caller whose destination may change meanwhile (the active controller)
        asks again later instead, as Kafka's NetworkClient treats such a node as not ready."""
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return False
        _count, retry_at = self._failures.get(node, (0, 0.0))
        return retry_at > asyncio.get_running_loop().time()

    async def _connection(self, node: int) -> _Connection:
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return conn
        waiting = self._connecting.get(node)
        if waiting is None:
            waiting = asyncio.ensure_future(self._connect(node))
            self._connecting[node] = waiting
            waiting.add_done_callback(lambda f: self._connected(node, f))
        return await asyncio.shield(waiting)

    def _connected(self, node: int, f: asyncio.Future) -> None:
        """The connect attempt ended. Its error is read here: the caller that started it may
        have given up (its deadline passed in the reconnect backoff), and an error nobody reads
        is logged by asyncio as 'Task exception was never retrieved'."""
        self._connecting.pop(node, None)
        if not f.cancelled():
            f.exception()

    async def _connect(self, node: int) -> _Connection:
        if self._closed:
            raise Disconnected("channel closed")
        loop = asyncio.get_running_loop()
        count, retry_at = self._failures.get(node, (0, 0.0))
        if retry_at > loop.time():
            await asyncio.sleep(retry_at - loop.time())
        addr = self.resolve(node)
        if addr is None:
            raise Disconnected(f"no address known for node {node}")
        host, port = addr
        try:
            _transport, conn = await asyncio.wait_for(
                loop.create_connection(_Connection, host, port, ssl=self.ssl_context), self.connect_timeout_ms / 1000.0
            )
        except (TimeoutError, OSError) as e:
            delay = min(self.backoff_ms * (2**count), self.backoff_max_ms) / 1000.0
            self._failures[node] = (count + 1, loop.time() + delay)
            raise Disconnected(
                f"cannot connect to node {node} at {host}:{port}: {getattr(e, 'strerror', None) or type(e).__name__}"
            ) from None
        if self.sasl is not None:
            try:
                await self._authenticate(node, conn)
            except ChannelError as e:
                conn.fail(e)
                delay = min(self.backoff_ms * (2**count), self.backoff_max_ms) / 1000.0
                self._failures[node] = (count + 1, loop.time() + delay)
                if isinstance(e, AuthenticationFailed):
                    # Kafka's NetworkClient: "Connection to node <id> (<host>/<ip>:<port>) failed
                    # authentication due to: <the server's message>"
                    log.error("Connection to node %d (%s:%d) failed authentication due to: %s", node, host, port, e)
                raise
        self._failures.pop(node, None)
        if self._closed:
            conn.fail(Disconnected("channel closed"))
            raise Disconnected("channel closed")
        self._conns[node] = conn
        return conn

    async def _authenticate(self, node: int, conn: _Connection) -> None:
        """SaslHandshake v1 and SaslAuthenticate v2 on a new (or expiring) connection; sets when
        it re-authenticates next. Raises AuthenticationFailed (the server's message, or the
        client's on an answer that does not check), or the exchange's ChannelError."""
        loop = asyncio.get_running_loop()
        timeout = self.request_timeout_ms / 1000.0
        deadline = loop.time() + timeout
        mechanism = self.sasl.mechanism
        conn.reauth_at = None

        async def exchange(api_key, version, **fields):
            body = Msg(api_key, version, request=True)(**fields)
            return await self._exchange(node, conn, api_key, version, body, deadline, timeout)

        handshake = await exchange(ApiKeys.SASL_HANDSHAKE, 1, mechanism=mechanism)
        if handshake.error_code:
            raise AuthenticationFailed(
                f"Unexpected handshake request with client mechanism {mechanism}, enabled mechanisms are "
                f"[{', '.join(handshake.mechanisms)}]"
            )
        client = self.sasl.new_client(int(time.time() * 1000))
        try:
            token = client.evaluate(None)
            while True:
                answer = await exchange(ApiKeys.SASL_AUTHENTICATE, 2, auth_bytes=token)
                if answer.error_code:
                    raise AuthenticationFailed(answer.error_message or f"error code {answer.error_code}")
                token = client.evaluate(bytes(answer.auth_bytes))
                if client.complete:
                    break
                if token is None:
                    raise AuthenticationFailed(f"{mechanism} exchange ended without completing")
        except SaslClientError as e:
            raise AuthenticationFailed(str(e)) from None
        lifetime = to_ms(answer.session_lifetime)
        if lifetime > 0:  # Kafka's client re-authenticates after 85-95% of the session
            conn.reauth_at = loop.time() + lifetime * (0.85 + 0.1 * random.random()) / 1000.0  # noqa: S311

    async def _reauthenticated(self, node: int, conn: _Connection, deadline: float) -> _Connection:
        """``conn`` once its session is renewed: the first request past the re-authentication
        time starts it, and every request waits for it (none may go out in between)."""
        loop = asyncio.get_running_loop()
        if conn.reauth is None and conn.reauth_at is not None and loop.time() >= conn.reauth_at:
            conn.reauth = asyncio.ensure_future(self._authenticate(node, conn))
            conn.reauth.add_done_callback(lambda f: self._reauthenticated_done(node, conn, f))
        while conn.reauth is not None:
            try:
                await asyncio.wait_for(asyncio.shield(conn.reauth), max(deadline - loop.time(), 0.001))
            except TimeoutError:
                raise RequestTimedOut(f"node {node} did not complete re-authentication in time") from None
            except ChannelError as e:
                raise Disconnected(f"node {node}: re-authentication failed: {e}") from None
        return conn

    def _reauthenticated_done(self, node: int, conn: _Connection, f: asyncio.Future) -> None:
        conn.reauth = None
        e = None if f.cancelled() else f.exception()
        if e is not None or f.cancelled():
            if isinstance(e, AuthenticationFailed):
                log.error("Re-authentication with node %d failed due to: %s", node, e)
            conn.fail(e if isinstance(e, ChannelError) else Disconnected("re-authentication cancelled"))
            self._forget(node, conn)

    def _forget(self, node: int, conn: _Connection) -> None:
        if self._conns.get(node) is conn:
            del self._conns[node]

    def disconnect(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.fail(Disconnected(f"disconnected from node {node}"))

    def close(self) -> None:
        self._closed = True
        for node in list(self._conns):
            self.disconnect(node)
