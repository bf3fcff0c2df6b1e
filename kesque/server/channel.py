"""The inter-node channel: asyncio requests from this node to the others.

One persistent connection per destination node (its address comes from a resolver, so a
node that moves is found again), requests pipelined on it and matched to their responses by
correlation id, each with its own timeout. A connection that fails fails every request in
flight on it; the next request reconnects, after a backoff that doubles up to a ceiling while
the destination keeps failing. Failures surface as :class:`ChannelError` (``Disconnected``,
``RequestTimedOut``); the caller decides whether to retry.

Requests and responses are kio objects, encoded with :mod:`kesque.protocol`. Used for the
raft RPCs, the controller RPCs and the replica fetchers (a channel each). ``kesque.client`` is
the blocking client of the tools; this one runs on the node's event loop and nothing in it is
process-wide.
"""

from __future__ import annotations

import asyncio
import io
import logging
import struct

from kio.serial import entity_writer

from ..protocol import api as protocol
from ..protocol.primitives import ProtocolError, skip_tagged_fields

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


class ChannelError(Exception):
    pass


class Disconnected(ChannelError):
    """Not connected to the destination (refused, reset, closed, or unknown address)."""


class RequestTimedOut(ChannelError):
    pass


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, body) -> bytes:
    """Size prefix, request header (v1, or v2 for flexible versions) and body."""
    cid = client_id.encode()
    head = _HEADER.pack(api_key, version, correlation_id) + struct.pack(">h", len(cid)) + cid
    if protocol.is_flexible(api_key, version):
        head += b"\x00"
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    payload = head + out.getvalue()
    return _I32.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes):
    """(correlation id, kio response) of one response frame (size prefix removed)."""
    view = memoryview(frame).toreadonly()
    corr = _I32.unpack_from(view, 0)[0]
    pos = 4
    if api_key != protocol.API_VERSIONS_KEY and protocol.is_flexible(api_key, version):
        pos = skip_tagged_fields(view, pos)
    cls = protocol.response_class(api_key, version)
    obj, _ = protocol._reader(cls)(view, pos)
    return corr, obj


class _Connection:
    """One TCP connection to one node, with its requests in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self.closed = False
        self.task: asyncio.Task | None = None

    async def read_loop(self) -> None:
        try:
            while True:
                size = _I32.unpack(await self.reader.readexactly(4))[0]
                frame = await self.reader.readexactly(size)
                corr = _I32.unpack_from(frame, 0)[0]
                entry = self.pending.pop(corr, None)
                if entry is None:
                    continue  # the request timed out meanwhile
                fut, api_key, version = entry
                if fut.done():
                    continue
                try:
                    fut.set_result(decode_response(api_key, version, frame)[1])
                except Exception as e:  # noqa: BLE001 - a bad answer fails that request only
                    fut.set_exception(ChannelError(f"cannot decode {protocol.api_name(api_key)} v{version} "
                                                   f"response: {e}"))
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as e:
            self.fail(Disconnected(f"connection lost: {e or type(e).__name__}"))
        except asyncio.CancelledError:
            self.fail(Disconnected("channel closed"))
            raise

    def fail(self, exc: Exception) -> None:
        self.closed = True
        for fut, _k, _v in self.pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self.pending.clear()
        self.writer.close()


class Channel:
    """Requests to other nodes. ``resolve(node_id)`` gives ``(host, port)`` or None."""

    def __init__(self, resolve, *, client_id: str, request_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 10000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000):
        self.resolve = resolve
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.backoff_ms = reconnect_backoff_ms
        self.backoff_max_ms = reconnect_backoff_max_ms
        self._conns: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._failures: dict[int, tuple[int, float]] = {}   # node -> (consecutive failures, retry at)
        self._corr = 0
        self._closed = False

    async def send(self, node: int, api_key: int, version: int, body, timeout_ms: int | None = None):
        """The kio response of ``body`` sent to ``node``; raises :class:`ChannelError`."""
        loop = asyncio.get_running_loop()
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        deadline = loop.time() + timeout
        conn = self._conns.get(node)
        if conn is None or conn.closed:
            try:
                conn = await asyncio.wait_for(self._connection(node), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise RequestTimedOut(f"no connection to node {node} within {round(timeout * 1000)} ms") from None
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        corr = self._corr
        fut = loop.create_future()
        conn.pending[corr] = (fut, api_key, version)
        try:
            conn.writer.write(encode_request(api_key, version, corr, self.client_id, body))
        except (OSError, RuntimeError) as e:
            conn.pending.pop(corr, None)
            conn.fail(Disconnected(str(e)))
            self._forget(node, conn)
            raise Disconnected(f"node {node}: {e}") from None
        try:
            return await asyncio.wait_for(fut, max(deadline - loop.time(), 0.001))
        except asyncio.TimeoutError:
            conn.pending.pop(corr, None)
            raise RequestTimedOut(f"node {node} did not answer {protocol.api_name(api_key)} within "
                                  f"{round(timeout * 1000)} ms") from None
        finally:
            if conn.closed:
                self._forget(node, conn)

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
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                    self.connect_timeout_ms / 1000.0)
        except (OSError, asyncio.TimeoutError) as e:
            delay = min(self.backoff_ms * (2 ** count), self.backoff_max_ms) / 1000.0
            self._failures[node] = (count + 1, loop.time() + delay)
            raise Disconnected(f"cannot connect to node {node} at {host}:{port}: "
                               f"{getattr(e, 'strerror', None) or type(e).__name__}") from None
        self._failures.pop(node, None)
        conn = _Connection(reader, writer)
        conn.task = loop.create_task(conn.read_loop())
        self._conns[node] = conn
        return conn

    def _forget(self, node: int, conn: _Connection) -> None:
        if self._conns.get(node) is conn:
            del self._conns[node]

    def disconnect(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            if conn.task is not None:
                conn.task.cancel()
            conn.fail(Disconnected(f"disconnected from node {node}"))

    def close(self) -> None:
        self._closed = True
        for node in list(self._conns):
            self.disconnect(node)
