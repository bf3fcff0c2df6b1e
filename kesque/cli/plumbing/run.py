"""How a tool runs and ends: its exit status (:class:`ToolExit`, :func:`run_tool`), the signals
that stop it (:func:`stop_signals`: 130 / 143 as a JVM) and a flushed exit (:func:`exit_flushed`)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading

from ...client.wire import AuthenticationError, Unreachable
from .errors import error_line


class ToolExit(SystemExit):
    """Raised to stop a tool with a status code (message already printed)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: the tool stops cleanly and exits ``128 + signal`` (130, 143),
    as a JVM ends on those signals once its shutdown hooks have run."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.status = 128 + int(signum)


def interrupted_status(exc: KeyboardInterrupt) -> int:
    return getattr(exc, "status", 128 + signal.SIGINT)


STOP_GRACE_SECONDS = 30.0


def _stop_overdue(signum: int) -> None:
    print(
        f"Still running {STOP_GRACE_SECONDS:g} s after signal {signum}: exiting without the rest of the "
        "clean-up. Where it was:",
        file=sys.stderr,
    )
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(128 + signum)


@contextlib.contextmanager
def stop_signals():
    """SIGINT and SIGTERM raise :class:`Interrupted` while the block runs, even when the tool was
    started with them ignored (a background job of a non-interactive shell, ``nohup``, some CI
    runners). Only the first one does: a second signal does not break the clean-up it started.
    A clean-up that blocks (a client library waiting on a broker that no longer answers) is cut
    short ``STOP_GRACE_SECONDS`` after the signal, with the stacks printed, so a signal always
    ends the tool. The previous handlers come back afterwards."""
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            watchdog = threading.Timer(STOP_GRACE_SECONDS, _stop_overdue, (signum,))
            watchdog.daemon = True
            watchdog.start()
            raise Interrupted(signum)

    saved = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def exit_flushed(code: int) -> None:
    """A console script's end: stdout flushed (a closed pipe is not an error), then ``code``."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    sys.exit(code)


def run_tool(fn, *args) -> int:
    """A tool's exit status: ``fn(*args)``'s, a ToolExit's code, 130 / 143 on SIGINT / SIGTERM
    (see :func:`stop_signals`), 1 when no bootstrap server could be reached (the message names
    them) or the TLS handshake or SASL login failed (Kafka's exception and message), or when the
    reader of stdout went away (a closed pipe: say nothing more)."""
    try:
        with stop_signals():
            return fn(*args)
    except ToolExit as e:
        return e.code
    except KeyboardInterrupt as e:
        return interrupted_status(e)
    except (Unreachable, AuthenticationError) as e:
        sys.stdout.flush()
        print(error_line(e), file=sys.stderr)
        return 1
    except BrokenPipeError:
        try:
            sys.stdout = None  # type: ignore[assignment]
        except Exception:
            pass
        return 1
