"""The simulated network: every message goes through :meth:`Router.send`.

Faults: a random delay per message (so messages between two nodes are reordered), drops,
duplicates, partitions (a set of blocked directed links), and filters that drop chosen messages
(e.g. only the Vote requests of one node). A message is dropped if its link is
blocked when it is sent or when it would be delivered (the connection broke while in flight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class NetworkFaults:
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    drop: float = 0.0
    duplicate: float = 0.0


class Router:
    def __init__(self, scheduler, deliver: Callable[[int, int, object], None], faults: NetworkFaults | None = None):
        self.scheduler = scheduler
        self.rng = scheduler.rng
        self.deliver = deliver  # deliver(src, dst, message)
        self.faults = faults or NetworkFaults()
        self.blocked: set[tuple[int, int]] = set()
        self.filters: list[Callable[[int, int, object], bool]] = []  # drop when one says True
        self.sent = 0
        self.dropped = 0

    def send(self, src: int, dst: int, msg) -> None:
        self.sent += 1
        f = self.faults
        if (
            (src, dst) in self.blocked
            or (f.drop and self.rng.random() < f.drop)
            or any(drop(src, dst, msg) for drop in self.filters)
        ):
            self.dropped += 1
            return
        copies = 2 if f.duplicate and self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            self.scheduler.after(self.rng.randint(f.min_delay_ms, f.max_delay_ms), self._arrive, src, dst, msg)

    def _arrive(self, src: int, dst: int, msg) -> None:
        if (src, dst) in self.blocked:
            self.dropped += 1
            return
        self.deliver(src, dst, msg)

    # -- partitions ---------------------------------------------------------------------------------
    def partition(self, *groups) -> None:
        """Only nodes of the same group talk to each other (nodes in no group talk to everyone)."""
        self.heal()
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        self.blocked.add((x, y))
                        self.blocked.add((y, x))

    def isolate(self, node: int, others) -> None:
        for o in others:
            if o != node:
                self.blocked.add((node, o))
                self.blocked.add((o, node))

    def reconnect(self, node: int) -> None:
        self.blocked = {(a, b) for a, b in self.blocked if node not in (a, b)}

    def heal(self) -> None:
        self.blocked = set()
        self.filters = []
