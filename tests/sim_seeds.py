"""``seeds(n)``: the seeds of a simulator sweep, with only the first ones measured by coverage.

``make test`` runs under coverage (pyproject.toml), whose tracer makes the simulator's pure-Python
event loop about four times slower; the seeds after the first few run the same code again and add
no coverage. So a sweep measures seeds 0..MEASURED-1 and pauses coverage for the rest (resumed
when the loop ends, breaks or raises). Without coverage this is ``range(n)``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

MEASURED = 10


def seeds(n: int, start: int = 0) -> Iterator[int]:
    cov = sys.modules["coverage"].Coverage.current() if "coverage" in sys.modules else None
    paused = False
    try:
        for seed in range(start, n):
            if cov is not None and not paused and seed - start >= MEASURED:
                cov.stop()
                paused = True
            yield seed
    finally:
        if paused:
            cov.start()
