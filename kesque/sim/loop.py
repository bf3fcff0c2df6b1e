"""A deterministic asyncio event loop on the simulator's clock, and a simulated network for it.

The real broker (``KesqueServer`` and everything it starts: the raft manager, the controller,
the replica manager and fetchers, the coordinators, the socket server and the inter-node
channels) runs unchanged on :class:`SimLoop`, several nodes in one Python process, as
FoundationDB simulates a whole cluster in one process:

* **Time** is virtual: ``loop.time()`` is the simulated clock, in seconds. When no callback is
  ready the loop does not wait: it jumps to the next timer or the next network delivery,
  whichever is first. A run of a minute of cluster time takes what its callbacks cost.
* **Order** is deterministic: callbacks run in asyncio's order (FIFO, timers by deadline); where
  asyncio allows any order (the I/O events one ``select`` returns) the seed's rng shuffles them.
  Everything random in a run (network delays, faults, and the broker's own uuids and jitter,
  see :func:`deterministic_entropy`) draws from the one seeded rng, so a seed replays the run:
  :attr:`SimNetwork.trace` hashes every delivered byte, and two runs of a seed agree on it.
* **No threads**: ``run_in_executor`` runs its job inline and ``call_soon_threadsafe`` is
  ``call_soon`` (nothing else may run at the same time).
* **Processes**: each node runs in a :class:`Process` (a context variable that every task,
  callback and timer it creates inherits). :meth:`SimNetwork.kill` is ``kill -9``: the process's
  sockets are reset, and none of its callbacks runs again. Files stay as written. The loop holds
  every unfinished task to the end of the run, so that no coroutine of the dead code is collected
  (and its ``finally`` blocks run) in the middle of a run, or of the next one; :meth:`SimLoop.close`
  closes them, each in its own context, while the loop can still take their last callbacks
  (which never run).
* **Network**: :class:`SimSocket` is a non-blocking TCP socket over :class:`SimNetwork`: bytes
  arrive in order after a seeded delay, ``fileno()`` is a simulated descriptor that
  :class:`SimSelector` reports ready. The broker's :class:`~kesque.server.network.SocketServer`
  takes its listening sockets from the loop (``loop.new_socket``), and ``create_connection``
  (the :class:`~kesque.server.channel.Channel`) connects over the same network. Faults:
  :meth:`SimNetwork.cut` resets the connections between two hosts and refuses new ones until
  :meth:`SimNetwork.heal` (iptables REJECT); a killed process's connections are reset.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import errno
import hashlib
import heapq
import random
import selectors
import socket
import uuid
from asyncio import events, selector_events
from collections import deque

PROCESS: contextvars.ContextVar = contextvars.ContextVar("kesque_sim_process", default=None)

FD_BASE = 1 << 20  # simulated descriptors start here (far above any real one)
EPHEMERAL_PORT = 40000


class Deadlock(AssertionError):
    """Nothing is ready, no timer is set and no byte is in flight: the run can never go on."""


class Process:
    """One simulated OS process (a node, or the test's client). ``host`` is its address."""

    def __init__(self, name: str, host: str):
        self.name = name
        self.host = host
        self.alive = True

    def __repr__(self) -> str:
        return f"<Process {self.name}@{self.host}{'' if self.alive else ' dead'}>"


class InlineExecutor(concurrent.futures.Executor):
    """An executor that runs each job at once, on the caller's stack (no thread)."""

    def submit(self, fn, /, *args, **kwargs):
        fut = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the future, as a worker thread would
            fut.set_exception(e)
        return fut


# ====================================================================== the network
class SimSocket:
    """A non-blocking stream socket on the simulated network (the calls asyncio's transports and
    the broker's socket server make)."""

    family = socket.AF_INET
    type = socket.SOCK_STREAM
    proto = socket.IPPROTO_TCP

    def __init__(self, net: SimNetwork, owner: Process | None):
        self.net = net
        self.owner = owner
        self.fd = net.new_fd(self)
        self.local: tuple[str, int] | None = None
        self.remote: tuple[str, int] | None = None
        self.peer: SimSocket | None = None
        self.listening = False
        self.backlog: deque[SimSocket] = deque()
        self.rbuf = bytearray()
        self.eof = False  # the peer closed its side (after the bytes in rbuf)
        self.reset = False  # the connection was reset (cut, or the peer died)
        self.closed = False

    # -- what the loop asks ------------------------------------------------------------------------
    def readable(self) -> bool:
        if self.listening:
            return bool(self.backlog)
        return bool(self.rbuf) or self.eof or self.reset

    def writable(self) -> bool:
        return not self.listening and self.peer is not None

    # -- the socket API ----------------------------------------------------------------------------
    def fileno(self) -> int:
        return -1 if self.closed else self.fd

    def setblocking(self, flag: bool) -> None:
        pass

    def settimeout(self, value) -> None:
        pass

    def gettimeout(self):
        return 0.0

    def setsockopt(self, *args) -> None:
        pass

    def getsockopt(self, *args) -> int:
        return 0

    def bind(self, addr) -> None:
        host, port = addr
        if not port:
            port = self.net.ephemeral_port(host)
        if (host, port) in self.net.listeners:
            raise OSError(errno.EADDRINUSE, f"address already in use: {host}:{port}")
        self.local = (host, port)

    def listen(self, backlog: int = 128) -> None:
        self.listening = True
        self.net.listeners[self.local] = self

    def getsockname(self):
        if self.local is None:
            return ("0.0.0.0", 0)
        return self.local

    def getpeername(self):
        if self.remote is None:
            raise OSError(errno.ENOTCONN, "not connected")
        return self.remote

    def accept(self):
        if not self.backlog:
            raise BlockingIOError(errno.EAGAIN, "no connection to accept")
        sock = self.backlog.popleft()
        return sock, sock.remote

    def recv_into(self, buf, nbytes: int = 0) -> int:
        if self.closed:
            raise OSError(errno.EBADF, "bad file descriptor")
        if self.rbuf:
            view = memoryview(buf)
            n = min(len(view) if not nbytes else min(nbytes, len(view)), len(self.rbuf))
            view[:n] = self.rbuf[:n]
            del self.rbuf[:n]
            return n
        if self.reset:
            raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")
        if self.eof:
            return 0
        raise BlockingIOError(errno.EAGAIN, "no data")

    def recv(self, n: int) -> bytes:
        buf = bytearray(n)
        got = self.recv_into(buf)
        return bytes(buf[:got])

    def send(self, data) -> int:
        if self.closed:
            raise OSError(errno.EBADF, "bad file descriptor")
        if self.reset:
            raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")
        if self.peer is None:
            raise BrokenPipeError(errno.EPIPE, "not connected")
        data = bytes(data)
        if data:
            self.net.transmit(self, data)
        return len(data)

    def sendmsg(self, buffers) -> int:
        return self.send(b"".join(buffers))

    def sendall(self, data) -> None:
        self.send(data)

    def shutdown(self, how) -> None:
        if self.peer is not None and how in (socket.SHUT_WR, socket.SHUT_RDWR):
            self.net.transmit(self, None)

    def close(self) -> None:
        if self.closed:
            return
        if self.listening:
            self.net.listeners.pop(self.local, None)
            for s in self.backlog:
                s.close()
            self.backlog.clear()
        elif self.peer is not None and not self.reset:
            self.net.transmit(self, None)  # FIN, after the bytes already sent
        self.closed = True
        self.rbuf = bytearray()
        self.net.forget(self)

    def abort(self) -> None:
        """The kernel's close of a dead process's socket: the peer sees a reset."""
        if self.closed:
            return
        if self.peer is not None and not self.reset:
            self.net.reset_peer(self)
        self.reset = True
        self.close()

    def __repr__(self) -> str:
        return f"<SimSocket fd={self.fd} {self.local}->{self.remote}>"


class SimNetwork:
    """Hosts, listeners and the bytes in flight between them. Delays are seeded; each direction
    of a connection delivers in order (TCP)."""

    def __init__(self, loop: SimLoop, rng: random.Random, min_delay_ms: float = 0.2, max_delay_ms: float = 3.0):
        self.loop = loop
        self.rng = rng
        self.min_delay = min_delay_ms / 1000.0
        self.max_delay = max_delay_ms / 1000.0
        self.sockets: dict[int, SimSocket] = {}
        self.listeners: dict[tuple[str, int], SimSocket] = {}
        self.cuts: set[frozenset] = set()
        self.slow: dict[frozenset, float] = {}  # host pair -> seconds added to each delivery between them
        self._next_fd = FD_BASE
        self._ports: dict[str, int] = {}
        self._flight: list = []  # (time, seq, dst socket, bytes or None for FIN)
        self._last: dict[int, float] = {}  # src fd -> time of its last delivery (order)
        self._seq = 0
        # descriptors that may be readable (bytes, an end or a connection arrived; kept while they
        # are): select looks at these, not at every socket
        self.stirred: dict[int, None] = {}
        self.delivered = 0
        self.trace = hashlib.sha256()

    # -- descriptors and addresses -----------------------------------------------------------------
    def new_fd(self, sock: SimSocket) -> int:
        self._next_fd += 1
        self.sockets[self._next_fd] = sock
        return self._next_fd

    def forget(self, sock: SimSocket) -> None:
        self.sockets.pop(sock.fd, None)
        self._last.pop(sock.fd, None)
        self.loop.drop_fd(sock.fd)

    def ephemeral_port(self, host: str) -> int:
        port = self._ports.get(host, EPHEMERAL_PORT) + 1
        self._ports[host] = port
        return port

    def delay(self) -> float:
        return self.rng.uniform(self.min_delay, self.max_delay)

    # -- faults ------------------------------------------------------------------------------------
    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.cuts

    def cut(self, a: str, b: str) -> None:
        """No traffic between hosts ``a`` and ``b``: their connections are reset, new ones are
        refused, until :meth:`heal`."""
        self.cuts.add(frozenset((a, b)))
        for s in list(self.sockets.values()):
            if s.peer is not None and not s.reset and {s.local[0], s.remote[0]} == {a, b}:
                s.reset = True
                s.rbuf = bytearray()
                self.stirred[s.fd] = None

    def isolate(self, host: str, others) -> None:
        for o in others:
            if o != host:
                self.cut(host, o)

    def slow_down(self, a: str, b: str, seconds: float) -> None:
        """Every byte between hosts ``a`` and ``b`` takes ``seconds`` more (in order), until :meth:`heal`."""
        self.slow[frozenset((a, b))] = seconds

    def heal(self) -> None:
        self.cuts.clear()
        self.slow.clear()

    def kill(self, proc: Process) -> None:
        """``kill -9``: nothing of ``proc`` runs again; the kernel resets its connections."""
        proc.alive = False
        for s in [s for s in self.sockets.values() if s.owner is proc]:
            s.abort()

    # -- bytes in flight ---------------------------------------------------------------------------
    def transmit(self, src: SimSocket, data: bytes | None) -> None:
        dst = src.peer
        when = self.loop.time() + self.delay()
        if self.slow and dst is not None:
            when += self.slow.get(frozenset((src.local[0], dst.local[0])), 0.0)
        when = max(when, self._last.get(src.fd, 0.0))
        self._last[src.fd] = when
        self._seq += 1
        heapq.heappush(self._flight, (when, self._seq, src, dst, data))

    def reset_peer(self, src: SimSocket) -> None:
        dst = src.peer
        self._seq += 1
        heapq.heappush(self._flight, (self.loop.time() + self.delay(), self._seq, src, dst, RESET))

    def next_delivery(self) -> float | None:
        return self._flight[0][0] if self._flight else None

    def deliver_due(self) -> None:
        now = self.loop.time()
        flight = self._flight
        while flight and flight[0][0] <= now:
            when, _seq, src, dst, data = heapq.heappop(flight)
            if dst.closed or dst.reset:
                continue
            if self.is_cut(src.local[0], dst.local[0]):
                continue
            self.stirred[dst.fd] = None
            if data is RESET:
                dst.reset = True
                dst.rbuf = bytearray()
                continue
            if data is None:
                dst.eof = True
                continue
            dst.rbuf += data
            self.delivered += 1
            self.trace.update(
                b"%.6f %s:%d>%s:%d %d|"
                % (when, src.local[0].encode(), src.local[1], dst.local[0].encode(), dst.local[1], len(data))
            )
            self.trace.update(data)

    async def connect(self, host: str, port: int) -> SimSocket:
        """A connection from the current process to ``host:port`` (one round trip), or
        ConnectionRefusedError (nobody listens, or the hosts are cut apart)."""
        proc = PROCESS.get()
        src_host = proc.host if proc is not None else "127.0.0.1"
        sock = SimSocket(self, proc)
        sock.local = (src_host, self.ephemeral_port(src_host))
        await asyncio.sleep(self.delay())  # SYN
        listener = self.listeners.get((host, port))
        if listener is None or self.is_cut(src_host, host) or (listener.owner is not None and not listener.owner.alive):
            await asyncio.sleep(self.delay())  # RST
            sock.close()
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connection refused: {host}:{port}")
        theirs = SimSocket(self, listener.owner)
        theirs.local, theirs.remote = (host, port), sock.local
        sock.remote = (host, port)
        sock.peer, theirs.peer = theirs, sock
        listener.backlog.append(theirs)
        self.stirred[listener.fd] = None
        await asyncio.sleep(self.delay())  # SYN-ACK
        if sock.reset:
            sock.close()
            raise ConnectionResetError(errno.ECONNRESET, "connection reset during connect")
        return sock


RESET = object()


# ====================================================================== the loop
class SimSelector(selectors.BaseSelector):
    """Readiness of simulated descriptors; ``select`` moves the clock instead of waiting."""

    def __init__(self, loop: SimLoop):
        self.loop = loop
        self._keys: dict[int, selectors.SelectorKey] = {}
        self._writers: dict[int, None] = {}  # registered for EVENT_WRITE

    def register(self, fileobj, events, data=None):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} is already registered")
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        if events & selectors.EVENT_WRITE:
            self._writers[fd] = None
        return key

    def unregister(self, fileobj):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        self._writers.pop(fd, None)
        return self._keys.pop(fd)

    def drop(self, fd: int):
        """The key of a descriptor that closed, if it was registered."""
        self._writers.pop(fd, None)
        return self._keys.pop(fd, None)

    def get_map(self):
        return self._keys

    def close(self) -> None:
        self._keys.clear()

    def select(self, timeout=None):
        loop = self.loop
        net = loop.net
        keys = self._keys
        sockets = net.sockets
        while True:
            net.deliver_due()
            found: dict[int, int] = {}
            stirred = net.stirred
            for fd in list(stirred):
                s = sockets.get(fd)
                if s is None or not s.readable():
                    del stirred[fd]
                    continue
                key = keys.get(fd)
                if key is not None and key.events & selectors.EVENT_READ:
                    found[fd] = selectors.EVENT_READ
            for fd in self._writers:
                s = sockets.get(fd)
                if s is not None and s.writable():
                    found[fd] = found.get(fd, 0) | selectors.EVENT_WRITE
            if found:
                ready = [(keys[fd], mask) for fd, mask in found.items()]
                if len(ready) > 1:
                    loop.rng.shuffle(ready)  # asyncio promises no order among one poll's events
                return ready
            if timeout == 0:
                return []
            target = loop.next_timer() if timeout is not None else None
            arrival = net.next_delivery()
            if arrival is not None and (target is None or arrival < target):
                loop.advance_to(arrival)
                continue
            if target is None:
                raise Deadlock("nothing to run: no callback, no timer, no byte in flight")
            loop.advance_to(target)
            return []


class SimLoop(selector_events.BaseSelectorEventLoop):
    """An asyncio event loop on simulated time and the simulated network (see the module doc)."""

    def __init__(self, rng: random.Random, start: float = 0.0):
        self._now = start
        self.rng = rng
        self.net = SimNetwork(self, rng)
        self.iterations = 0
        self.after_iteration = None  # fn() after each iteration (the invariants)
        self.graveyard: list = []  # callbacks of dead processes, never run
        # every task and the context it runs in, held until it is done (pruned) or the loop closes
        self._tasks: dict[asyncio.Task, contextvars.Context] = {}
        self._prune_at = 1024
        self.finished = False  # the run is over: leftovers are not reported
        super().__init__(SimSelector(self))
        self._clock_resolution = 1e-9
        self.set_exception_handler(self._exception)
        self.errors: list[dict] = []

    # -- time --------------------------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t > self._now:
            self._now = t

    def next_timer(self) -> float | None:
        for h in self._scheduled:
            if not h._cancelled:
                return max(h._when, self._now)
        return None

    # -- no self-pipe, no threads -----------------------------------------------------------------
    def _make_self_pipe(self) -> None:
        pass

    def _close_self_pipe(self) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def call_soon_threadsafe(self, callback, *args, context=None):
        return self.call_soon(callback, *args, context=context)

    def run_in_executor(self, executor, func, *args):
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the future, as a worker thread would
            fut.set_exception(e)
        return fut

    def new_socket(self, family=socket.AF_INET, type=socket.SOCK_STREAM, proto=0) -> SimSocket:
        """A socket of the current process on the simulated network (SocketServer's listeners)."""
        return SimSocket(self.net, PROCESS.get())

    async def create_connection(self, protocol_factory, host=None, port=None, **kw):
        sock = await self.net.connect(host, port)
        return await self._create_connection_transport(sock, protocol_factory, None, None)

    def drop_fd(self, fd: int) -> None:
        """A closed socket's descriptor leaves the selector (a real close does too)."""
        key = self._selector.drop(fd) if self._selector is not None else None
        if key is not None:
            reader, writer = key.data
            for h in (reader, writer):
                if h is not None:
                    h.cancel()

    def _exception(self, loop, context: dict) -> None:
        """Errors asyncio reports (a callback that raised, a task's error nobody read) are kept
        and logged; once the run is over, what the dead processes and the ended run leave behind
        (unfinished tasks, failed futures nobody awaits any more) is dropped."""
        if self.finished:
            return
        self.errors.append(context)
        self.default_exception_handler(context)

    # -- one iteration -----------------------------------------------------------------------------
    def _run_once(self) -> None:
        """asyncio's iteration, minus the callbacks of dead processes (kept, never run), plus
        the invariants after it."""
        sched = self._scheduled
        while sched and sched[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(sched)._scheduled = False
        timeout = None
        if self._ready or self._stopping:
            timeout = 0
        elif sched:
            timeout = max(0, sched[0]._when - self._now)
        self._process_events(self._selector.select(timeout))
        end_time = self._now + self._clock_resolution
        while sched:
            handle = sched[0]
            if handle._when >= end_time:
                break
            handle = heapq.heappop(sched)
            handle._scheduled = False
            self._ready.append(handle)
        ready = self._ready
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            proc = handle._context.get(PROCESS)
            if proc is not None and not proc.alive:
                self.graveyard.append(handle)
                continue
            handle._run()
        self.iterations += 1
        if self.after_iteration is not None:
            self.after_iteration()

    def create_task(self, coro, *, name=None, context=None):
        if context is None:
            context = contextvars.copy_context()  # what Task does; kept to close it in
        task = super().create_task(coro, name=name, context=context)
        tasks = self._tasks
        tasks[task] = context
        if len(tasks) > self._prune_at:
            for t in [t for t in tasks if t.done()]:
                del tasks[t]
            self._prune_at = 2 * len(tasks) + 1024
        return task

    def close(self) -> None:
        """The run is over: the unfinished tasks (the dead processes', and those the live ones
        left waiting) are closed now, each coroutine in its own context and with this loop
        current and open, as the garbage collector would close them later without either (their
        ``finally`` blocks then fail on a closed loop or a context variable of another context,
        and print it). Their last callbacks are dropped with the loop."""
        self.finished = True
        pending = [(t, ctx) for t, ctx in self._tasks.items() if not t.done()]
        self._tasks.clear()
        self.graveyard.clear()
        if not self.is_closed() and not self.is_running():
            events._set_running_loop(self)
            try:
                for task, ctx in pending:
                    task._log_destroy_pending = False  # it never finishes
                    with contextlib.suppress(Exception):  # the dead code's last words
                        ctx.run(task.get_coro().close)
            finally:
                events._set_running_loop(None)
        for task in asyncio.all_tasks(self):
            task._log_destroy_pending = False
        super().close()

    def spawn(self, proc: Process | None, coro) -> asyncio.Task:
        """A task of ``proc`` (every callback it leads to runs as that process)."""
        ctx = contextvars.copy_context()
        ctx.run(PROCESS.set, proc)
        return self.create_task(coro, context=ctx)


class SimClock:
    """The broker's clock (``kesque.clock``) on the loop's simulated time."""

    EPOCH_MS = 1_700_000_000_000

    def __init__(self, loop: SimLoop):
        self.loop = loop

    def now_ms(self) -> int:
        return self.EPOCH_MS + int(self.loop.time() * 1000)

    def monotonic(self) -> float:
        return self.loop.time()


@contextlib.contextmanager
def deterministic_entropy(rng: random.Random):
    """For one run: ``uuid.uuid4`` and the ``random`` module draw from the seeded ``rng`` (the
    broker's directory, incarnation and topic ids, fetch session ids, jitter), and are restored
    after. Python's string hashing is seeded per process (``PYTHONHASHSEED``): a set of strings
    iterates alike in two runs of one process, and across processes only with the same hash seed."""
    saved_uuid4 = uuid.uuid4
    saved_state = random.getstate()
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    random.seed(rng.getrandbits(64))
    try:
        yield
    finally:
        uuid.uuid4 = saved_uuid4
        random.setstate(saved_state)
