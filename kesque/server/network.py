"""Socket server: listeners, connections, framing and ordered responses.

Connections are non-blocking sockets driven by the event loop's ``add_reader`` /
``add_writer`` rather than asyncio transports, for two reasons measured on the data path:

* reads go straight into a per-connection buffer (``recv_into``); a frame that does not
  fit gets its own buffer sized from the length prefix, so a 1 MiB produce request is
  received with no intermediate copies and handed to the log as a writable memoryview;
* responses are lists of buffers written with ``sendmsg`` and :class:`FileRegion` items
  written with ``os.sendfile`` — zero-copy from the page cache to the socket, which an
  asyncio transport cannot do for one item inside a pipelined stream.

Requests are processed in arrival order as soon as they are read; each gets a response
slot, and slots are flushed strictly in order even when a later request (a metadata
call) finishes before an earlier one (a long-poll fetch).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections import deque

from ..protocol.fetch import FileRegion
from ..protocol.primitives import INT32

log = logging.getLogger(__name__)

READ_BUFFER = 64 * 1024
SMALL_REGION = 16 * 1024  # regions below this are pread into the sendmsg batch
IOV_MAX = 512
PAUSE_OUTPUT_BYTES = 32 * 1024 * 1024
PAUSE_PENDING = 128


class Slot:
    __slots__ = ("items", "size")

    def __init__(self):
        self.items: list | None = None
        self.size = 0


class Connection:
    def __init__(self, server, sock: socket.socket, listener: str):
        self.server = server
        self.loop = server.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.listener = listener
        try:
            self.peer = sock.getpeername()
        except OSError:
            self.peer = ("?", 0)
        self.id = f"{sock.getsockname()[0]}:{sock.getsockname()[1]}-{self.peer[0]}:{self.peer[1]}"
        self.closed = False
        self.max_request = server.max_request_size
        self._buf = bytearray(READ_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None  # dedicated buffer for a large frame
        self._big_view: memoryview | None = None
        self._big_pos = 0
        self._slots: deque[Slot] = deque()
        self._out: deque = deque()
        self._out_bytes = 0
        self._head = 0  # bytes of _out[0] already sent
        self._writing = False
        self._reading = True
        self._in_read = False  # responses completed while reading are sent in one batch
        self.loop.add_reader(self.fd, self._on_readable)

    # ================================================================== reading
    def _on_readable(self) -> None:
        if self.closed:
            return
        try:
            if self._big is not None:
                n = self.sock.recv_into(self._big_view[self._big_pos:])
            else:
                if self._end == len(self._buf):
                    self._compact()
                n = self.sock.recv_into(self._view[self._end:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.debug("%s: read error %s", self.id, e)
            self.close()
            return
        if n == 0:
            self.close()
            return
        self._in_read = True
        try:
            if self._big is not None:
                self._big_pos += n
                if self._big_pos == len(self._big):
                    frame = self._big_view
                    self._big = self._big_view = None
                    self._big_pos = 0
                    self._dispatch(frame)
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
            self._buf[0:n] = self._buf[self._start:self._end]
        self._start, self._end = 0, n

    def _parse_frames(self) -> None:
        buf = self._buf
        while not self.closed:
            avail = self._end - self._start
            if avail < 4:
                break
            size = INT32.unpack_from(buf, self._start)[0]
            if size < 0 or size > self.max_request:
                if size < 0:
                    log.warning("%s: closing connection: invalid request size %d", self.id, size)
                else:
                    log.warning("%s: closing connection: request size %d is larger than socket.request.max.bytes %d",
                                self.id, size, self.max_request)
                self.close()
                return
            if avail - 4 >= size:
                begin = self._start + 4
                self._start = begin + size
                self._dispatch(self._view[begin:begin + size])
                continue
            if 4 + size > len(buf):
                # too big for the shared buffer: give it its own and read the rest into it
                self._big = bytearray(size)
                self._big_view = memoryview(self._big)
                have = avail - 4
                self._big[0:have] = buf[self._start + 4:self._end]
                self._big_pos = have
                self._start = self._end = 0
                break
            if self._start + 4 + size > len(buf):
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _dispatch(self, frame: memoryview) -> None:
        try:
            self.server.handle_frame(self, frame)
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
        if self._reading and not self.closed:
            self.loop.remove_reader(self.fd)
            self._reading = False

    def _maybe_resume_reading(self) -> None:
        if (not self._reading and not self.closed and len(self._slots) <= PAUSE_PENDING // 2
                and self._out_bytes < PAUSE_OUTPUT_BYTES // 2 and not self.muted_until):
            self._reading = True
            self.loop.add_reader(self.fd, self._on_readable)

    # client quotas (KIP-219): a throttled connection reads no request until the deadline
    muted_until = 0.0

    def mute_until(self, deadline: float) -> None:
        """Read nothing more until ``deadline`` (loop time); responses already due still go out."""
        if self.closed or deadline <= self.muted_until:
            return
        self.muted_until = deadline
        self._pause_reading()
        self.loop.call_at(deadline, self._unmute, deadline)

    def _unmute(self, deadline: float) -> None:
        if self.muted_until == deadline:
            self.muted_until = 0.0
            self._maybe_resume_reading()

    # ================================================================== writing
    def _flush(self) -> None:
        out = self._out
        sock = self.sock
        try:
            while out:
                first = out[0]
                if isinstance(first, FileRegion):
                    if first.handle.closed:
                        log.info("%s: segment deleted while a fetch response was queued; closing", self.id)
                        self.close()
                        return
                    if first.size - self._head > SMALL_REGION:
                        n = os.sendfile(self.fd, first.handle.fd, first.position + self._head,
                                        first.size - self._head)
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
                        if item.handle.closed or item.size - (self._head if i == 0 else 0) > SMALL_REGION:
                            break
                        item = out[i] = item.read()
                    batch.append(item)
                if self._head:
                    batch[0] = memoryview(batch[0])[self._head:]
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
        self._maybe_resume_reading()

    def _on_writable(self) -> None:
        if not self.closed:
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
        self.server.connection_closed(self)


class SocketServer:
    def __init__(self, loop, handle_frame, max_request_size: int, send_buffer: int = -1, recv_buffer: int = -1):
        self.loop = loop
        self.handle_frame = handle_frame
        self.max_request_size = max_request_size
        self.send_buffer = send_buffer
        self.recv_buffer = recv_buffer
        self.listeners: list[tuple[socket.socket, str]] = []
        self.connections: set[Connection] = set()

    def listen(self, host: str, port: int, name: str = "PLAINTEXT") -> int:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or "0.0.0.0", port))
        sock.listen(1024)
        sock.setblocking(False)
        self.listeners.append((sock, name))
        self.loop.add_reader(sock.fileno(), self._accept, sock, name)
        return sock.getsockname()[1]

    def _accept(self, lsock: socket.socket, name: str) -> None:
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
            self.connections.add(Connection(self, sock, name))

    # connection quotas: admit(sock, addr) -> bool for each accepted socket, release(ip) on close
    admit = None
    release = None

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.release is not None:
            self.release(conn.peer[0])

    def close(self) -> None:
        for sock, _name in self.listeners:
            try:
                self.loop.remove_reader(sock.fileno())
            except Exception:
                pass
            sock.close()
        self.listeners.clear()
        for conn in list(self.connections):
            conn.close()
