"""One cleaning in a forked child process, so that the broker's event loop never waits for the
cleaner's GIL.

On a worker thread, :func:`run_in_child` forks: the child is a snapshot of the broker holding the
log's segment descriptors, and runs :meth:`Cleaner.clean` on it alone (the offset map is its
memory, its Python work is its GIL). It reads the finished segments and writes the ``.cleaned``
files as a thread would; what the broker owns stays in the broker, which the child asks over a
socket pair:

- ``("io", nbytes)`` every :data:`IO_REPORT_S` of work: the broker's Throttler answers how long
  to pause (log.cleaner.io.max.bytes.per.second stays one bound across all workers, and dynamic);
- ``("swap", base, old_bases, next_offset)`` when a group's ``.cleaned`` segment is complete and
  fsynced: the broker opens it and swaps it in on the event loop (``swap``), then answers None;
- ``("done", stats)`` or ``("error", exception)`` last, then the child exits with ``os._exit``
  (no finaliser of the snapshot runs).

The child drops what it must not hold: every descriptor but its segments', the socket and
0-2 is pointed at /dev/null (a client's socket closed by the broker must close; the numbers stay
taken, so a stray finaliser never closes a file the child opened), the broker's signal handlers
are reset, the cyclic GC is off, it runs at a lower priority (:data:`CHILD_NICENESS`), and it
dies with the worker thread that forked it (PR_SET_PDEATHSIG). The broker kills it (SIGKILL)
to stop a cleaning and removes its ``.cleaned`` files. Test-only stage hooks run in the child
as they would on the thread.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import socket
import time
from multiprocessing.connection import Connection

from .cleaner import Cleaner, CleanStats
from .local_log import SegmentsChangedError
from .segment import CLEANED_SUFFIX, LogSegment

#: how often the child reports its I/O to the broker's throttler (seconds of work)
IO_REPORT_S = 0.1
#: the child's scheduling priority below the broker's: on a busy machine the request path gets
#: the CPU first (the cleaner is background work; unloaded, it still has a core of its own)
CHILD_NICENESS = 10
_PR_SET_PDEATHSIG = 1


class CleanerDied(Exception):
    """The child ended without an answer (killed, or out of memory)."""


class Child:
    """The broker's side of one forked cleaning."""

    def __init__(self, pid: int, conn: Connection):
        self.pid = pid
        self.conn = conn
        self.alive = True

    def kill(self) -> None:
        if self.alive:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def reap(self) -> None:
        self.conn.close()
        if self.alive:
            self.alive = False
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by a waitpid(-1) elsewhere
                pass


def fork_cleaner(
    cleaner: Cleaner, lg, first_dirty: int, first_uncleanable: int, now_ms: int, last_of_producer: dict
) -> Child:
    """Fork a child cleaning ``lg`` with ``cleaner`` (its map size and hook; throttle and swap are
    replaced by requests to the broker)."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            ours.close()
            code = _child(
                cleaner, Connection(theirs.detach()), lg, first_dirty, first_uncleanable, now_ms, last_of_producer
            )
        finally:
            os._exit(code)
    theirs.close()
    return Child(pid, Connection(ours.detach()))


def serve(child: Child, lg, now_ms: int, pause_for, swap) -> CleanStats | None:
    """Answer the child until it is done (on the worker thread that forked it): its result, or
    its exception raised here. ``pause_for(nbytes)`` is the throttler, ``swap(lg, new, old,
    now_ms)`` swaps a cleaned segment in on the event loop."""
    conn = child.conn
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError) as e:
            raise CleanerDied(f"the cleaner process of {lg.tp} died") from e
        kind = msg[0]
        if kind == "io":
            conn.send(pause_for(msg[1]))
        elif kind == "swap":
            _swap_cleaned(lg, *msg[1:], now_ms=now_ms, swap=swap)
            conn.send(None)
        elif kind == "done":
            return msg[1]
        else:
            raise msg[1]


def remove_cleaned_files(lg) -> None:
    """What a killed child left (its ``.cleaned`` segment, never swapped in)."""
    for name in os.listdir(lg.dir):
        if name.endswith(CLEANED_SUFFIX):
            try:
                os.unlink(os.path.join(lg.dir, name))
            except FileNotFoundError:
                pass


def _swap_cleaned(lg, base: int, old_bases: list[int], next_offset: int, now_ms: int, swap) -> None:
    """Open the child's complete ``.cleaned`` segment as the load opens a segment and swap it in
    for the segments ``old_bases`` (SegmentsChangedError when they are gone)."""
    by_base = {seg.base_offset: seg for seg in list(lg.segments)}
    old = [by_base.get(b) for b in old_bases]
    if None in old:
        raise SegmentsChangedError(f"{lg.tp}: the segments cleaned are no longer in the log")
    cfg = lg.config
    new = LogSegment(
        lg.dir,
        base,
        index_interval_bytes=cfg.index_interval_bytes,
        max_index_size=cfg.segment_index_bytes,
        now_ms=now_ms,
        file_suffix=CLEANED_SUFFIX,
    )
    try:
        if not new.load_indexes():
            new.recover()
        new.next_offset = next_offset
        swap(lg, new, old, now_ms)
    except BaseException:
        if new.log_path.endswith(CLEANED_SUFFIX):  # refused before the swap began
            new.delete_files()
        raise


# ------------------------------------------------------------------ in the child


def _child(
    cleaner: Cleaner,
    conn: Connection,
    lg,
    first_dirty: int,
    first_uncleanable: int,
    now_ms: int,
    last_of_producer: dict,
) -> int:
    gc.disable()
    os.nice(CHILD_NICENESS)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    _drop_descriptors({conn.fileno(), *(seg.fd for seg in lg.segments)})
    cleaner.throttle = _ReportIO(conn)
    cleaner.swap = lambda _lg, new, old, _now, _hook: _ask_swap(conn, new, old)
    try:
        stats = cleaner.clean(lg, first_dirty, first_uncleanable, now_ms, last_of_producer)
    except BaseException as e:  # noqa: BLE001 - handed to the broker
        try:
            conn.send(("error", e))
        except Exception:  # noqa: BLE001 - not picklable
            conn.send(("error", RuntimeError(repr(e))))
        return 1
    conn.send(("done", stats))
    return 0


def _drop_descriptors(keep: set[int]) -> None:
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd > 2 and fd not in keep and fd != null:
            try:
                os.dup2(null, fd)
            except OSError:
                pass  # the listing's own descriptor


class _ReportIO:
    """The child's throttle: report the bytes done to the broker now and then; sleep its answer."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.nbytes = 0
        self.since = time.monotonic()

    def __call__(self, nbytes: int) -> None:
        self.nbytes += nbytes
        if time.monotonic() - self.since >= IO_REPORT_S:
            self.conn.send(("io", self.nbytes))
            time.sleep(self.conn.recv())
            self.nbytes, self.since = 0, time.monotonic()


def _ask_swap(conn: Connection, new: LogSegment, old: list[LogSegment]) -> None:
    conn.send(("swap", new.base_offset, [seg.base_offset for seg in old], new.next_offset))
    conn.recv()
    new.close()
