"""The event loop as the scheduler the sans-IO cores take (the coordinators' timers,
``coordinator.runtime.KeyedTimer``): ``after(delay_ms, fn, *args)`` is the loop's
``call_later``, whose handle cancels. The simulator's loop is an asyncio loop on simulated time,
so it drives these timers as it drives the rest of the server."""

from __future__ import annotations


class LoopScheduler:
    __slots__ = ("loop",)

    def __init__(self, loop):
        self.loop = loop

    def after(self, delay_ms: int, fn, *args):
        return self.loop.call_later(delay_ms / 1000.0, fn, *args)
