"""Simulator speed: simulated seconds per wall-clock second and seeds per minute, per scenario.

    .venv/bin/python bench/sim_speed.py                      # every scenario, 50 seeds each
    .venv/bin/python bench/sim_speed.py --seeds 200 --scenario controller_failover

Each scenario runs over the same seeds (from 10000, beyond the ones ``make test`` uses) in this
process, invariants on, as ``make test`` runs them. The limit beside the figures is the bare
scheduler: events per second of a queue of no-op events (heap push and pop, no node, no
invariant), measured in the same run; ``event cost`` is the scenario's wall time per event over
that limit's, i.e. how many bare events one simulated event costs. A benchmark, not a test: it
exits 0 whatever the figures; a failing seed is reported and counted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kesque.sim import SCENARIOS, SimulationError, run  # noqa: E402
from kesque.sim.scheduler import Scheduler  # noqa: E402

FIRST_SEED = 10_000


def bare_events_per_second(n: int = 200_000) -> float:
    """The scheduler alone: ``n`` no-op events, best of 3."""
    best = 0.0
    for _ in range(3):
        s = Scheduler(0)

        def noop():
            pass

        for i in range(n):
            s.at(i % 1000, noop)
        t0 = time.perf_counter()
        while s._queue:
            s.step()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def measure(name: str, seeds: int) -> dict:
    sim_ms = events = failed = 0
    t0 = time.perf_counter()
    for seed in range(FIRST_SEED, FIRST_SEED + seeds):
        try:
            r = run(name, seed)
        except SimulationError as e:
            failed += 1
            print(f"  FAIL {name} seed {seed}: {str(e).splitlines()[0]}", file=sys.stderr)
            continue
        sim_ms += r.sim_ms
        events += r.events
    wall = time.perf_counter() - t0
    return {
        "scenario": name,
        "seeds": seeds,
        "failed": failed,
        "wall_s": wall,
        "sim_s": sim_ms / 1000,
        "events": events,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=50, help="seeds per scenario (default 50)")
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="repeatable; default all")
    a = p.parse_args(argv)
    bare = bare_events_per_second()
    print(f"limit: bare scheduler {bare:,.0f} events/s ({1e6 / bare:.2f} us per event)")
    head = f"{'scenario':28} {'seeds':>5} {'sim s/wall s':>12} {'seeds/min':>10} {'us/event':>9} {'event cost':>10}"
    print(head)
    print("-" * len(head))
    rows = [measure(n, a.seeds) for n in (a.scenario or sorted(SCENARIOS))]
    total = {
        "scenario": "all",
        "seeds": sum(r["seeds"] for r in rows),
        "failed": sum(r["failed"] for r in rows),
        **{k: sum(r[k] for r in rows) for k in ("wall_s", "sim_s", "events")},
    }
    for r in rows + [total]:
        us = r["wall_s"] / max(1, r["events"]) * 1e6
        print(
            f"{r['scenario']:28} {r['seeds']:>5} {r['sim_s'] / r['wall_s']:>12.0f} "
            f"{r['seeds'] / r['wall_s'] * 60:>10.0f} {us:>9.1f} {us * bare / 1e6:>9.0f}x"
            + (f"  ({r['failed']} failed)" if r["failed"] else "")
        )
    print(f"load average {os.getloadavg()[0]:.2f} (above 0: other work shared the cores; figures provisional)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
