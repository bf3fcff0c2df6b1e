"""``seeds(n)``: the seeds of a simulator sweep, with only the first ones measured by coverage.

``make test`` runs under coverage (pyproject.toml), whose tracer makes the simulator's pure-Python
event loop about four times slower; the seeds after the first few run the same code again and add
no coverage. So a sweep measures seeds 0..MEASURED-1 (or its own ``measured``: none for a sweep
whose scenario other tests run measured) and pauses coverage for the rest (resumed when the loop
ends, breaks or raises). Without coverage this is ``range(n)``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from kesque.sim import SimulationError, run

MEASURED = 10


def seeds(n: int, start: int = 0, measured: int = MEASURED) -> Iterator[int]:
    cov = sys.modules["coverage"].Coverage.current() if "coverage" in sys.modules else None
    paused = False
    try:
        for seed in range(start, n):
            if cov is not None and not paused and seed - start >= measured:
                cov.stop()
                paused = True
            yield seed
    finally:
        if paused:
            cov.start()


@contextlib.contextmanager
def unmeasured():
    """Coverage paused for the block: a run of code that another run measured (a replay)."""
    cov = sys.modules["coverage"].Coverage.current() if "coverage" in sys.modules else None
    if cov is None:
        yield
        return
    cov.stop()
    try:
        yield
    finally:
        cov.start()


def sweep(name: str, n: int, least: int, measured: int = 0, start: int = 0) -> int:
    """Run seeds start..n-1 of the simulator's scenario ``name`` (coverage measuring the first
    ``measured``); fails with every failing seed's message, each ending with its replay command,
    and with the seeds that acknowledged fewer than ``least`` records. Returns the runs' total."""
    failed: list[str] = []
    committed = 0
    for seed in seeds(n, start=start, measured=measured):
        try:
            r = run(name, seed)
        except SimulationError as e:
            failed.append(f"{name} seed {seed}: {e}")
            continue
        committed += r.committed
        if r.committed < least:
            failed.append(f"{name} seed {seed} acknowledged only {r.committed} records: {r.replay()}")
    assert not failed, "\n".join(failed)
    return committed
