"""Time, passed into the sans-IO layers so tests can drive it."""

from __future__ import annotations

import time


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    def __init__(self, start_ms: int = 1_700_000_000_000):
        self._ms = start_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        self._ms += ms
        self._mono += ms / 1000.0


SYSTEM_CLOCK = SystemClock()
