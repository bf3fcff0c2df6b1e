"""A seeded discrete-event scheduler on a simulated clock (milliseconds).

Everything random in a run draws from the scheduler's one ``random.Random``, so a seed replays a
run exactly. Invariant checks registered with :meth:`Scheduler.add_invariant` run after every
event; the first violation stops the run with :class:`InvariantViolation`.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable


class SimulationError(AssertionError):
    pass


class InvariantViolation(SimulationError):
    pass


class LivenessViolation(SimulationError):
    pass


class Scheduler:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.events = 0
        self._queue: list = []
        self._seq = 0
        self._invariants: list[Callable[[], None]] = []

    def add_invariant(self, check: Callable[[], None]) -> None:
        self._invariants.append(check)

    def at(self, when: int, fn: Callable, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(when, self.now), self._seq, fn, args))

    def after(self, delay: int, fn: Callable, *args) -> None:
        self.at(self.now + delay, fn, *args)

    def every(self, period: int, jitter: int, fn: Callable) -> None:
        """Call ``fn()`` every ``period`` ± ``jitter`` ms, forever."""

        def run():
            fn()
            self.after(period + self.rng.randint(-jitter, jitter), run)

        self.after(self.rng.randint(0, period), run)

    def step(self) -> None:
        when, _, fn, args = heapq.heappop(self._queue)
        self.now = when
        self.events += 1
        fn(*args)
        for check in self._invariants:
            check()

    def run_for(self, duration: int) -> None:
        end = self.now + duration
        while self._queue and self._queue[0][0] <= end:
            self.step()
        self.now = max(self.now, end)

    def run_until(self, cond: Callable[[], bool], timeout: int, what: str) -> None:
        """Run until ``cond()`` holds; a :class:`LivenessViolation` after ``timeout`` ms."""
        end = self.now + timeout
        while not cond():
            if not self._queue or self._queue[0][0] > end:
                raise LivenessViolation(f"not reached within {timeout} ms of simulated time: {what}")
            self.step()
