"""Socket server: listeners, connections, framing and ordered responses.

Connections are non-blocking sockets driven by the event loop's ``add_reader`` /
``add_writer`` rather than asyncio transports, for two reasons measured on the data path:

* reads go straight into a per-connection buffer (``recv_into``); a frame that does not
  fit gets its own buffer, which grows (x8) as the frame's bytes arrive up to the size
  the length prefix declares, and is handed to the log as a writable memoryview;
* responses are lists of buffers written with ``sendmsg`` and :class:`FileRegion` items
  written with ``os.sendfile`` — zero-copy from the page cache to the socket, which an
  asyncio transport cannot do for one item inside a pipelined stream.

Requests are processed in arrival order as soon as they are read; each gets a response
slot, and slots are flushed strictly in order even when a later request (a metadata
call) finishes before an earlier one (a long-poll fetch).

The sockets are the OS's, or, when the event loop simulates the network (``kesque.sim.loop``),
the loop's: a listening socket comes from ``loop.new_socket`` when the loop has one, and a
connection whose socket is not an OS socket (no descriptor to ``sendfile`` to) writes its file
regions as bytes read with ``pread``.

An SSL listener's connections are :class:`TlsConnection`: the same framing, buffers and limits,
with an ``ssl.SSLObject`` decrypting into them and encrypting the responses (file regions read
with ``pread``: no ``sendfile`` under TLS). A PLAINTEXT connection runs none of that code.

Memory a client can make the broker hold is bounded. A size prefix costs nothing until its
bytes arrive; the buffers of large frames come from a :class:`MemoryPool` sized by
``queued.max.request.bytes``, and while it is used up the connections that need more wait
with their reads paused (Kafka's memory pool). Connections idle for
``connections.max.idle.ms`` are closed (:meth:`SocketServer.expire_idle`).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import ssl
import sys
import time
from collections import deque

from ..protocol.fetch import FileRegion
from ..protocol.primitives import INT32
from .context import ANONYMOUS, PLAINTEXT, KafkaPrincipal

_clock = time.perf_counter_ns  # the request metrics' clock (Connection.read_ns)
log = logging.getLogger(__name__)

READ_BUFFER = 64 * 1024
SMALL_REGION = 16 * 1024  # regions below this are pread into the sendmsg batch
IOV_MAX = 512
PAUSE_OUTPUT_BYTES = 32 * 1024 * 1024
PAUSE_PENDING = 128
FRAME_FIRST = 256 * 1024  # a large frame's first buffer (capped at its declared size) ...
FRAME_GROWTH = 8  # ... multiplied by this each time it fills up (a 1 MiB produce: two buffers)
FRAME_ROUND = 64 * 1024  # a frame's final buffer is rounded up to this, to be reused for others
# Buffers kept for reuse (per kind: first buffers, final buffers up to SPARE_MAX bytes). A
# frame's memory freed and allocated again made glibc trim its heap and fault every page in
# again: a third more broker CPU per produced byte.
SPARES = 8
SPARE_MAX = 4 * 1024 * 1024


class FrameBuffer(bytearray):
    """A large frame's final buffer, handed to the request's handler. Its bytes return to the
    pool when the connection sees the handler kept no reference, or else when it is freed."""

    __slots__ = ("pool",)

    def __del__(self):
        if self.pool is not None:
            self.pool.release(len(self))


class MemoryPool:
    """``queued.max.request.bytes``: the bytes of large request frames being received or
    still referenced by a request in progress (the per-connection read buffers are a fixed
    cost and are not counted).

    Buffers are reused (a few of each kind are kept; a frame's final buffer is rounded up to
    FRAME_ROUND so that it fits other frames of about its size); a final buffer comes back
    when its handler returns without keeping a view of it, or when it is freed.

    Like Kafka's pool (non-strict) a buffer is granted while anything is left, so usage can
    pass the bound by one allocation; a connection refused a buffer stops reading and waits
    in line. When the bound is reached and every byte of it belongs to frames whose
    connections are waiting, nothing would ever free — so one connection with a partial
    frame (the first refused) is exempt and may finish its frame. A client that stops
    sending half-way through holds its bytes until ``connections.max.idle.ms`` closes it.
    """

    def __init__(self, loop, limit: int):
        self.loop = loop
        self.limit = limit if limit > 0 else None
        self.used = 0
        self.waiting: deque[Connection] = deque()
        self.exempt: Connection | None = None
        self._wake_pending = False
        self._exhausted = False  # logged once per episode
        self._firsts: list[bytearray] = []  # spare FRAME_FIRST buffers
        self._finals: list[FrameBuffer] = []  # spare final buffers

    def take(self, conn: Connection, size: int, final: bool, holding: bool) -> bytearray | None:
        """A buffer of at least ``size`` bytes for ``conn``'s large frame (``final``: for the
        whole frame), or None: ``conn`` must wait (it is queued). ``holding``: conn already
        has part of the frame in a pool buffer."""
        if self.limit is not None and self.used >= self.limit and conn is not self.exempt:
            if not holding or self.exempt is not None:
                self._wait(conn)
                return None
            self.exempt = conn
        if final:
            buf = self._final(size)
        elif size == FRAME_FIRST and self._firsts:
            buf = self._firsts.pop()
        else:
            buf = bytearray(size)
        self.used += len(buf)
        return buf

    def _final(self, size: int) -> FrameBuffer:
        for i, buf in enumerate(self._finals):
            if size <= len(buf) <= size + size // 8 + FRAME_ROUND:
                del self._finals[i]
                break
        else:
            buf = FrameBuffer(-(-size // FRAME_ROUND) * FRAME_ROUND)
        buf.pool = self
        return buf

    def give_back(self, buf: bytearray) -> None:
        """A buffer nobody references any more: its bytes are free, the buffer may be reused."""
        if type(buf) is FrameBuffer:
            buf.pool = None  # released here, not again when it is freed
            spares = self._finals if len(buf) <= SPARE_MAX else None
        else:
            spares = self._firsts if len(buf) == FRAME_FIRST else None
        if spares is not None and len(spares) < SPARES:
            spares.append(buf)
        self.release(len(buf))

    def _wait(self, conn: Connection) -> None:
        if not self._exhausted:
            self._exhausted = True
            log.info(
                "Request memory pool exhausted (%d bytes in use, queued.max.request.bytes=%d): "
                "pausing reads of connections that need more",
                self.used,
                self.limit,
            )
        log.debug("%s: waiting for request memory", conn.id)
        self.waiting.append(conn)

    def release(self, size: int) -> None:
        self.used -= size
        if self.waiting and not self._wake_pending:
            self._wake_pending = True
            self.loop.call_soon(self._wake)

    def frame_done(self, conn: Connection) -> None:
        """``conn`` finished (or dropped) its frame: it no longer needs the exemption."""
        if self.exempt is conn:
            self.exempt = None

    def forget(self, conn: Connection) -> None:
        self.frame_done(conn)
        if conn in self.waiting:
            self.waiting.remove(conn)
            self._exhausted = bool(self.waiting)

    def _wake(self) -> None:
        """Let waiting connections retry, in arrival order, while memory is left; when none
        is left and no connection is exempt, the first waiter holding a partial frame."""
        self._wake_pending = False
        while self.waiting:
            if self.limit is None or self.used < self.limit:
                conn = self.waiting.popleft()
            elif self.exempt is None:
                conn = next((c for c in self.waiting if c.holds_frame), None)
                if conn is None:
                    break
                self.waiting.remove(conn)
            else:
                break
            conn.memory_available()
        if not self.waiting:
            self._exhausted = False


class Slot:
    __slots__ = ("items", "size")

    def __init__(self):
        self.items: list | None = None
        self.size = 0


class Connection:
    # request metrics (kesque/metrics/): when set, each read notes its time (read_ns), where a
    # request's queue time starts
    timed = False
    read_ns = 0

    def __init__(
        self,
        loop,
        sock: socket.socket,
        listener: str,
        *,
        handle_frame,
        on_closed,
        max_request: int,
        pool: MemoryPool,
        security_protocol: str = PLAINTEXT,
        principal: KafkaPrincipal = ANONYMOUS,
    ):
        """``handle_frame(conn, frame)`` for each request; ``on_closed(conn)`` once closed. The
        listener's ``security_protocol`` and the authenticated ``principal`` go into every
        request's context (PLAINTEXT: ``User:ANONYMOUS``)."""
        self.loop = loop
        self.handle_frame = handle_frame
        self.on_closed = on_closed
        self.sock = sock
        self.fd = sock.fileno()
        # regions above this go out with os.sendfile; a simulated socket has no descriptor for it
        self.sendfile_above = SMALL_REGION if isinstance(sock, socket.socket) else sys.maxsize
        self.listener = listener
        self.security_protocol = security_protocol
        self.principal = principal
        self.client_software: tuple[str, str] | None = None  # from ApiVersions v3+ (the request log)
        try:
            self.peer = sock.getpeername()
        except OSError:
            self.peer = ("?", 0)
        self.id = f"{sock.getsockname()[0]}:{sock.getsockname()[1]}-{self.peer[0]}:{self.peer[1]}"
        self.closed = False
        self.max_request = max_request
        self.pool: MemoryPool = pool
        self._buf = bytearray(READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None  # dedicated, growing buffer for a large frame
        self._big_view: memoryview | None = None  # all of it
        self._big_pos = 0  # bytes received
        self._big_cap = 0  # bytes it can receive before growing (or the frame is complete)
        self._big_size = 0  # the large frame's declared size
        self._slots: deque[Slot] = deque()
        self._out: deque = deque()
        self._out_bytes = 0
        self._head = 0  # bytes of _out[0] already sent
        self._writing = False
        self._reading = True
        self._paused = False  # too many responses pending (back-pressure)
        self._needs_memory = False  # queued in the memory pool
        self._in_read = False  # responses completed while reading are sent in one batch
        self.active = False  # bytes read or written since the last idle check
        self.idle_since = self.loop.time()
        self.loop.add_reader(self.fd, self._on_readable)

    # ================================================================== reading
    def _on_readable(self) -> None:
        if self.closed:
            return
        try:
            if self._big is not None:
                n = self.sock.recv_into(self._big_view[self._big_pos : self._big_cap])
            else:
                if self._end == len(self._buf):
                    self._compact()
                n = self.sock.recv_into(self._view[self._end :])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("%s: read error %s", self.id, e)
            self.close()
            return
        if n == 0:
            self.close()
            return
        if self.timed:
            self.read_ns = _clock()
        self.active = True
        self._in_read = True
        try:
            if self._big is not None:
                self._big_pos += n
                if self._big_pos == self._big_cap:
                    if self._big_pos == self._big_size:
                        self._dispatch_big()
                    else:
                        self._grow_big()
            else:
                self._end += n
                self._parse_frames()
        finally:
            self._in_read = False
        if self._out and not self._writing and not self.closed:
            self._flush()

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start:
            self._buf[0:n] = self._buf[self._start : self._end]
        self._start, self._end = 0, n

    # the limit max_request is (a SASL connection's is sasl.server.max.receive.size until it is authenticated)
    max_request_key = "socket.request.max.bytes"

    def _parse_frames(self) -> None:
        buf = self._buf
        while not self.closed and not self.muted_until:  # a throttled connection's next request waits
            avail = self._end - self._start
            if avail < 4:
                break
            size = INT32.unpack_from(buf, self._start)[0]
            if size < 0 or size > self.max_request:
                if size < 0:
                    log.warning("%s: closing connection: invalid request size %d", self.id, size)
                else:
                    log.warning(
                        "%s: closing connection: request size %d is larger than %s %d%s",
                        self.id,
                        size,
                        self.max_request_key,
                        self.max_request,
                        # a TLS record header (handshake, version 3.x) where a size should be
                        " (a TLS handshake: an SSL client on a PLAINTEXT listener?)"
                        if buf[self._start] == 0x16
                        else "",
                    )
                self.close()
                return
            if avail - 4 >= size:
                begin = self._start + 4
                self._start = begin + size
                self._dispatch(self._view[begin : begin + size])
                continue
            if 4 + size > len(buf):
                # too big for the shared buffer: give it its own and read the rest into it
                have = avail - 4
                self._big_size = size
                if self._set_big(min(size, max(FRAME_FIRST, have)), self._view[self._start + 4 : self._end], have):
                    self._start = self._end = 0
                break
            if self._start + 4 + size > len(buf):
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _set_big(self, capacity: int, data: memoryview, n: int) -> bool:
        """Receive the large frame into a pool buffer for ``capacity`` bytes that starts with
        ``data`` (``n`` bytes). False when the pool has none: reading pauses until it has."""
        new = self.pool.take(self, capacity, capacity == self._big_size, self._big is not None)
        if new is None:
            self._needs_memory = True
            self._update_reader()
            return False
        view = memoryview(new)
        view[:n] = data
        self._drop_big()
        self._big, self._big_view, self._big_pos, self._big_cap = new, view, n, capacity
        return True

    def _drop_big(self) -> None:
        """Give the buffer of a frame not handed to a handler back to the pool."""
        big = self._big
        if big is not None:
            self._big_view.release()
            self._big = self._big_view = None
            self.pool.give_back(big)

    def _grow_big(self) -> None:
        self._set_big(min(self._big_size, self._big_cap * FRAME_GROWTH), self._big_view[: self._big_pos], self._big_pos)

    def _dispatch_big(self) -> None:
        buf, whole = self._big, self._big_view
        frame = whole[: self._big_size]
        self._big = self._big_view = None
        self._big_pos = self._big_cap = self._big_size = 0
        self.pool.frame_done(self)
        held = sys.getrefcount(buf)  # ours and the views' (they share one reference)
        self._dispatch(frame)
        try:
            frame.release()
            whole.release()
        except BufferError:  # exported by something still running: freed (and released) later
            return
        if sys.getrefcount(buf) < held:  # the views' reference went: the handler kept no view
            self.pool.give_back(buf)

    @property
    def holds_frame(self) -> bool:
        return self._big is not None

    def memory_available(self) -> None:
        """The pool has memory again: retry what was refused, then read on."""
        if self.closed:
            return
        self._needs_memory = False
        self.active = True  # the wait was the broker's, not the client's
        self._in_read = True
        try:
            if self._big is not None:
                self._grow_big()
            else:
                self._parse_frames()
        finally:
            self._in_read = False
        if not self.closed:
            self._update_reader()
            if self._out and not self._writing:
                self._flush()

    def _dispatch(self, frame: memoryview) -> None:
        try:
            self.handle_frame(self, frame)
        except Exception:  # a handler bug must not take the broker down
            log.exception("%s: unexpected error handling a request; closing connection", self.id)
            self.close()

    # ================================================================== responses
    def new_slot(self) -> Slot:
        slot = Slot()
        self._slots.append(slot)
        if len(self._slots) > PAUSE_PENDING:
            self._pause_reading()
        return slot

    def complete(self, slot: Slot, items: list) -> None:
        if self.closed:
            return
        slot.items = items
        while self._slots and self._slots[0].items is not None:
            s = self._slots.popleft()
            for it in s.items:
                n = len(it)
                if n:  # an empty buffer would never be popped by _flush and would wedge the queue
                    self._out.append(it)
                    self._out_bytes += n
        if not self._writing and not self._in_read:
            self._flush()
        self._maybe_resume_reading()

    def drop_slot(self, slot: Slot) -> None:
        """Request that gets no response (acks=0 produce)."""
        slot.items = []
        self.complete(slot, [])

    def _pause_reading(self) -> None:
        self._paused = True
        self._update_reader()

    def _maybe_resume_reading(self) -> None:
        if (
            self._paused
            and not self.closed
            and len(self._slots) <= PAUSE_PENDING // 2
            and self._out_bytes < PAUSE_OUTPUT_BYTES // 2
        ):
            self._paused = False
            self._update_reader()

    def _update_reader(self) -> None:
        """Read while neither back-pressure, the memory pool nor a quota holds this connection back."""
        want = not (self.closed or self._paused or self._needs_memory or self.muted_until or self._closing)
        if want and not self._reading:
            self.loop.add_reader(self.fd, self._on_readable)
        elif self._reading and not want:
            self.loop.remove_reader(self.fd)
        self._reading = want

    @property
    def busy(self) -> bool:
        """A request is in progress, or the broker holds this connection back: not idle."""
        return bool(self._slots) or self._needs_memory or bool(self.muted_until)

    # client quotas (KIP-219): a throttled connection reads no request until the deadline
    muted_until = 0.0
    # a failed authentication: nothing more is read; the connection closes once its answer is written
    _closing = False
    _close_when_flushed = False

    def close_after(self, delay: float, items: list | None = None) -> None:
        """Kafka's delayed close on a failed authentication (connection.failed.authentication.delay.ms):
        read nothing more; after ``delay`` seconds send ``items`` (a framed response, if any) and
        close once everything is written."""
        if self.closed or self._closing:
            return
        self._closing = True
        self._update_reader()
        self.loop.call_later(delay, self._close_with, items)

    def _close_with(self, items: list | None) -> None:
        if self.closed:
            return
        self._close_when_flushed = True
        if items:
            self.complete(self.new_slot(), items)  # flushed: closes once written
        if not self.closed and not self._out and not self._slots:
            self.close()

    def mute_until(self, deadline: float) -> None:
        """Read nothing more until ``deadline`` (loop time); responses already due still go out."""
        if self.closed or deadline <= self.muted_until:
            return
        self.muted_until = deadline
        self._update_reader()
        self.loop.call_at(deadline, self._unmute, deadline)

    def _unmute(self, deadline: float) -> None:
        if self.muted_until == deadline:
            self.muted_until = 0.0
            if self._big is None and self._end > self._start:
                self._parse_frames()  # requests that arrived with or behind the throttled one
            self._update_reader()

    # ================================================================== writing
    def _flush(self) -> None:
        out = self._out
        sock = self.sock
        sendfile_above = self.sendfile_above
        try:
            while out:
                first = out[0]
                if isinstance(first, FileRegion):
                    if first.handle.closed:
                        log.info("%s: segment deleted while a fetch response was queued; closing", self.id)
                        self.close()
                        return
                    if first.size - self._head > sendfile_above:
                        n = os.sendfile(self.fd, first.handle.fd, first.position + self._head, first.size - self._head)
                        if n == 0:
                            log.warning("%s: segment shrank under a queued fetch response; closing", self.id)
                            self.close()
                            return
                        self._head += n
                        self._out_bytes -= n
                        if self._head >= first.size:
                            out.popleft()
                            self._head = 0
                        continue
                # gather byte buffers (small regions are read in) for one sendmsg call
                batch = []
                for i in range(min(len(out), IOV_MAX)):
                    item = out[i]
                    if isinstance(item, FileRegion):
                        if item.handle.closed or item.size - (self._head if i == 0 else 0) > sendfile_above:
                            break
                        item = out[i] = item.read()
                    batch.append(item)
                if self._head:
                    batch[0] = memoryview(batch[0])[self._head :]
                n = sock.sendmsg(batch)
                self._out_bytes -= n
                while n > 0:
                    remaining = len(out[0]) - self._head
                    if n >= remaining:
                        n -= remaining
                        out.popleft()
                        self._head = 0
                    else:
                        self._head += n
                        n = 0
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                log.debug("%s: write error %s", self.id, e)
                self.close()
                return
        if out and not self._writing and not self.closed:
            self._writing = True
            self.loop.add_writer(self.fd, self._on_writable)
        elif not out and self._writing:
            self._writing = False
            self.loop.remove_writer(self.fd)
        if self._close_when_flushed and not out and not self._slots:
            self.close()
            return
        self._maybe_resume_reading()

    def _on_writable(self) -> None:
        if not self.closed:
            self.active = True
            self._flush()

    # ================================================================== close
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self._reading:
                self.loop.remove_reader(self.fd)
            if self._writing:
                self.loop.remove_writer(self.fd)
        except Exception:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self._out.clear()
        self._slots.clear()
        self._drop_big()
        self.pool.forget(self)
        self.on_closed(self)


def _anonymous(der: bytes | None) -> KafkaPrincipal:
    return ANONYMOUS


TLS_CHUNK = 256 * 1024  # plaintext encrypted per round of a TLS connection's writes (file regions: pread this much)
TLS_SMALL = 16 * 1024  # consecutive buffers below this are joined before encryption (one TLS record, not many)


class TlsConnection(Connection):
    """A connection of an SSL listener: Kafka's SslTransportLayer on the same framing.

    The socket's bytes go through an ``ssl.SSLObject`` over two ``ssl.MemoryBIO`` (sans-IO
    TLS): what arrives is written to the incoming BIO and decrypted straight into the frame
    buffers (``SSLObject.read`` into the shared buffer or a large frame's own buffer, as
    ``recv_into`` does for PLAINTEXT), so back-pressure, the memory pool, quotas and the frame
    limits work unchanged. Responses are encrypted ``TLS_CHUNK`` at a time, and the next chunk
    only once the ciphertext of the last is on the socket, so a connection holds at most one
    chunk of ciphertext. A file region is read with ``pread`` and encrypted: under TLS there is
    no ``sendfile`` (the kernel would send the file's bytes in clear), as in Kafka.

    Until its handshake completes a connection reads and writes handshake records only; it
    counts as idle (``connections.max.idle.ms`` closes a client that never finishes it). A
    failed handshake (a PLAINTEXT client, a certificate that is not trusted, a protocol or
    cipher mismatch) sends OpenSSL's alert and closes this connection only. TLS renegotiation
    is refused (the context's ``OP_NO_RENEGOTIATION``). Closing sends ``close_notify``; a peer's
    ``close_notify`` closes.

    ``principal_of(der)``: the principal of the client certificate (DER, None without one),
    applied once the handshake completes; ``ssl.principal.mapping.rules`` belongs there.
    """

    def __init__(self, loop, sock, listener, *, context: ssl.SSLContext, principal_of, **kw):
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._principal_of = principal_of
        self._handshaken = False
        self._cipher: memoryview | None = None  # ciphertext not yet on the socket
        self._raw = bytearray(READ_BUFFER)
        self._raw_view = memoryview(self._raw)
        self._drain_pending = False
        super().__init__(loop, sock, listener, **kw)
        self.sendfile_above = sys.maxsize

    # ================================================================== reading
    def _on_readable(self) -> None:
        if self.closed:
            return
        try:
            n = self.sock.recv_into(self._raw_view)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("%s: read error %s", self.id, e)
            self.close()
            return
        if n == 0:
            self.close()
            return
        self._incoming.write(self._raw_view[:n])
        if self._handshaken:
            if self.timed:
                self.read_ns = _clock()
            self.active = True
            self._decrypt()
        else:
            self._handshake()

    def _handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()  # this side's handshake records
            return
        except ssl.SSLError as e:
            # Kafka: "Failed authentication with /<ip> (channelId=...) (SSL handshake failed)"
            log.info(
                "Failed authentication with %s (channelId=%s) (SSL handshake failed: %s)", self.peer[0], self.id, e
            )
            self._flush()  # the alert, if it fits
            self._closing_sent = True
            self.close()
            return
        try:
            principal = self._principal_of(self._tls.getpeercert(binary_form=True))
        except Exception as e:  # noqa: BLE001 - ssl.principal.mapping.rules maps no name, or a bad certificate
            log.info("Failed authentication with %s (channelId=%s) (%s)", self.peer[0], self.id, e)
            self._closing_sent = True
            self.close()
            return
        self._handshaken = True
        self.principal = principal
        log.debug("%s: TLS %s %s, principal %s", self.id, self._tls.version(), self._tls.cipher()[0], self.principal)
        self.active = True
        self._decrypt()  # requests sent with the handshake's last flight

    def _decrypt(self) -> None:
        """Decrypt what has arrived into the frame buffers while this connection may read."""
        tls = self._tls
        self._in_read = True
        try:
            while not (self.closed or self._paused or self._needs_memory or self.muted_until or self._closing):
                if self._big is not None:
                    target = self._big_view[self._big_pos : self._big_cap]
                else:
                    if self._end == len(self._buf):
                        self._compact()
                    target = self._view[self._end :]
                try:
                    n = tls.read(len(target), target)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:  # the client's close_notify
                    self.close()
                    return
                except ssl.SSLError as e:
                    log.info("%s: closing connection: TLS error %s", self.id, e)
                    self.close()
                    return
                if not n:
                    # CPython's SSLObject.read answers a close_notify with 0 bytes (not
                    # SSLZeroReturnError, once only the peer has shut down): the client closed, as
                    # Kafka's SslTransportLayer reads -1. Kept open, a client waiting for our
                    # close_notify (asyncio's SSL shutdown, aiokafka's stop) waited 30 s.
                    if len(target):
                        self.close()
                        return
                    break
                if self._big is not None:
                    self._big_pos += n
                    if self._big_pos == self._big_cap:
                        if self._big_pos == self._big_size:
                            self._dispatch_big()
                        else:
                            self._grow_big()
                else:
                    self._end += n
                    self._parse_frames()
        finally:
            self._in_read = False
        if not self.closed and (self._out or self._outgoing.pending) and not self._writing:
            self._flush()

    def _update_reader(self) -> None:
        """As a PLAINTEXT connection's, and once reading may go on, what is already decrypted
        or received (held back while it could not read) is taken up without waiting for the
        socket."""
        super()._update_reader()
        if (
            self._reading
            and self._handshaken
            and not self._drain_pending
            and (self._incoming.pending or self._tls.pending())
        ):
            self._drain_pending = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_pending = False
        if not self.closed:
            self._decrypt()

    # ================================================================== writing
    def _flush(self) -> None:
        out = self._out
        try:
            while True:
                if self._cipher is not None:
                    n = self.sock.send(self._cipher)
                    if n < len(self._cipher):
                        self._cipher = self._cipher[n:]
                        break
                    self._cipher = None
                if self._outgoing.pending:
                    self._cipher = memoryview(self._outgoing.read())
                    continue
                if not out or not self._handshaken:
                    break
                if not self._encrypt():
                    return  # closed
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                log.debug("%s: write error %s", self.id, e)
                self.close()
                return
        if self.closed:
            return
        more = self._cipher is not None or (out and self._handshaken)
        if more and not self._writing:
            self._writing = True
            self.loop.add_writer(self.fd, self._on_writable)
        elif not more and self._writing:
            self._writing = False
            self.loop.remove_writer(self.fd)
        if self._close_when_flushed and not more and not self._slots:
            self.close()
            return
        self._maybe_resume_reading()

    def _encrypt(self) -> bool:
        """Encrypt up to TLS_CHUNK bytes of the queued responses into the outgoing BIO (False:
        the connection was closed)."""
        out = self._out
        budget = TLS_CHUNK
        parts: list = []
        while out and budget > 0:
            item = out[0]
            if isinstance(item, FileRegion):
                if item.handle.closed:
                    log.info("%s: segment deleted while a fetch response was queued; closing", self.id)
                    self.close()
                    return False
                want = min(item.size - self._head, budget)
                data = os.pread(item.handle.fd, want, item.position + self._head)
                if not data:
                    log.warning("%s: segment shrank under a queued fetch response; closing", self.id)
                    self.close()
                    return False
                size = item.size
            else:
                size = len(item)
                data = item if not self._head and size <= budget else memoryview(item)[self._head : self._head + budget]
            n = len(data)
            parts.append(data)
            budget -= n
            self._out_bytes -= n
            self._head += n
            if self._head >= size:
                out.popleft()
                self._head = 0
        tls = self._tls
        if len(parts) == 1:
            tls.write(parts[0])
        else:  # small buffers joined (one record for many small responses), large ones as they are
            small: list = []
            for p in parts:
                if len(p) < TLS_SMALL:
                    small.append(p)
                    continue
                if small:
                    tls.write(b"".join(small))
                    small = []
                tls.write(p)
            if small:
                tls.write(b"".join(small))
        return True

    # ================================================================== close
    _closing_sent = False

    def close(self) -> None:
        """Send close_notify (as much as the socket takes now), then close."""
        if self.closed:
            return
        if self._handshaken and not self._closing_sent:
            self._closing_sent = True
            try:
                self._tls.unwrap()
            except ssl.SSLError:
                pass  # SSLWantReadError: our close_notify is written, the peer's is not awaited
            try:
                pending = (bytes(self._cipher) if self._cipher is not None else b"") + self._outgoing.read()
                if pending:
                    self.sock.send(pending)
            except OSError:
                pass
        super().close()


class SocketServer:
    def __init__(
        self,
        loop,
        handle_frame,
        max_request_size: int,
        send_buffer: int = -1,
        recv_buffer: int = -1,
        queued_max_bytes: int = -1,
        max_idle_ms: int = -1,
    ):
        self.loop = loop
        self.handle_frame = handle_frame
        self.max_request_size = max_request_size
        self.pool = MemoryPool(loop, queued_max_bytes)
        self.max_idle = max_idle_ms / 1000.0
        self.send_buffer = send_buffer
        self.recv_buffer = recv_buffer
        self.listeners: list[tuple[socket.socket, str]] = []
        self._not_serving: list[tuple[socket.socket, str, str]] = []  # bound, accepting from start_serving()
        self.connections: set[Connection] = set()
        self.closed_listeners: list = []  # fn(conn) once a connection has closed
        # listening sockets: the OS's, or those of a loop that simulates the network
        self.new_socket = getattr(loop, "new_socket", socket.socket)
        # the SSL listeners' contexts, and the principal of a client certificate (DER bytes, None
        # without one) on each
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._principals: dict = {}

    def listen(
        self,
        host: str,
        port: int,
        name: str = PLAINTEXT,
        security_protocol: str = PLAINTEXT,
        serve: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        principal_of=None,
    ) -> int:
        """Bind and listen; accept connections at once, or (``serve=False``) only from
        :meth:`start_serving` on, as Kafka's broker binds its listeners early (its endpoints go
        into its registration) and enables request processing once the controller has
        registered it and it has caught up (connections wait in the backlog meanwhile).
        With an ``ssl_context`` the listener's connections speak TLS (:class:`TlsConnection`), and
        ``principal_of(der)`` gives the principal of a client certificate (None: ANONYMOUS)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = self.new_socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or "0.0.0.0", port))
        sock.listen(1024)
        sock.setblocking(False)
        self.listeners.append((sock, name))
        if ssl_context is not None:
            self._contexts[name] = ssl_context
            self._principals[name] = principal_of or _anonymous
        if serve:
            self.loop.add_reader(sock.fileno(), self._accept, sock, name, security_protocol)
        else:
            self._not_serving.append((sock, name, security_protocol))
        return sock.getsockname()[1]

    def set_context(self, name: str, ssl_context: ssl.SSLContext) -> None:
        """The TLS listener ``name``'s connections accepted from now on use ``ssl_context`` (a key
        store altered dynamically); those open keep theirs."""
        if name not in self._contexts:
            raise ValueError(f"listener {name} is not a TLS listener")
        self._contexts[name] = ssl_context

    def start_serving(self) -> None:
        """Accept on the listeners bound with ``serve=False``."""
        for sock, name, security_protocol in self._not_serving:
            self.loop.add_reader(sock.fileno(), self._accept, sock, name, security_protocol)
        self._not_serving.clear()

    def _accept(self, lsock: socket.socket, name: str, security_protocol: str = PLAINTEXT) -> None:
        for _ in range(64):
            try:
                sock, _addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("accept failed: %s", e)
                return
            sock.setblocking(False)
            if self.admit is not None and not self.admit(sock, _addr):
                continue  # connection quotas: refused (admit closes it)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            if self.recv_buffer > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer)
            context = self._contexts.get(name)
            if context is None:
                conn = Connection(
                    self.loop,
                    sock,
                    name,
                    handle_frame=self.handle_frame,
                    on_closed=self.connection_closed,
                    max_request=self.max_request_size,
                    pool=self.pool,
                    security_protocol=security_protocol,
                )
            else:
                conn = TlsConnection(
                    self.loop,
                    sock,
                    name,
                    context=context,
                    principal_of=self._principals[name],
                    handle_frame=self.handle_frame,
                    on_closed=self.connection_closed,
                    max_request=self.max_request_size,
                    pool=self.pool,
                    security_protocol=security_protocol,
                )
            self.connections.add(conn)
            if self.on_accept is not None:
                self.on_accept(conn)

    # connection quotas: admit(sock, addr) -> bool for each accepted socket, release(ip) on close
    admit = None
    release = None
    # on_accept(conn) for each new connection (a SASL listener's authentication starts there)
    on_accept = None

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.release is not None:
            self.release(conn.peer[0])
        for fn in self.closed_listeners:
            try:
                fn(conn)
            except Exception:
                log.exception("%s: a connection-closed listener failed", conn.id)

    def expire_idle(self) -> None:
        """Close connections that neither sent nor received a byte for ``connections.max.idle.ms``
        (a half-received frame does not count; a request in progress, or reads paused by the
        broker, does). Called periodically; a connection is closed within one period of expiry."""
        if self.max_idle < 0:
            return
        now = self.loop.time()
        for conn in list(self.connections):
            if conn.active or conn.busy:
                conn.active = False
                conn.idle_since = now
            elif now - conn.idle_since >= self.max_idle:
                log.debug(
                    "%s: closing connection idle for more than connections.max.idle.ms=%d",
                    conn.id,
                    self.max_idle * 1000,
                )
                conn.close()

    def close(self) -> None:
        self._not_serving.clear()
        for sock, _name in self.listeners:
            try:
                self.loop.remove_reader(sock.fileno())
            except Exception:
                pass
            sock.close()
        self.listeners.clear()
        for conn in list(self.connections):
            conn.close()
