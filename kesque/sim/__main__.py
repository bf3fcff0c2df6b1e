"""``python -m kesque.sim``: run scenarios over seeds; a failure prints its replay command."""

from __future__ import annotations

import argparse
import sys
import time
import traceback

from .scenarios import BUGS, SCENARIOS, run
from .scheduler import SimulationError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kesque.sim", description=__doc__)
    p.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="scenario to run (repeatable; default: all)"
    )
    p.add_argument("--seed", type=int, help="run this one seed")
    p.add_argument("--seeds", type=int, default=100, help="number of seeds per scenario (default 100)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--bug", choices=sorted(BUGS), help="switch on a deliberate bug")
    p.add_argument("-v", "--verbose", action="store_true", help="print every run")
    a = p.parse_args(argv)
    names = a.scenario or sorted(SCENARIOS)
    seeds = [a.seed] if a.seed is not None else range(a.first_seed, a.first_seed + a.seeds)
    failed = 0
    t0 = time.perf_counter()
    sim_ms = runs = 0
    for name in names:
        for seed in seeds:
            try:
                r = run(name, seed, a.bug)
            except SimulationError as e:
                failed += 1
                print(f"FAIL {name} seed {seed}: {e}", flush=True)
                continue
            except Exception:
                failed += 1
                print(f"ERROR {name} seed {seed}:\n{traceback.format_exc()}", flush=True)
                continue
            runs += 1
            sim_ms += r.sim_ms
            if a.verbose:
                print(
                    f"ok {name} seed {seed}: {r.sim_ms / 1000:.1f} s simulated, {r.events} events, "
                    f"{r.committed} committed, {r.wall_s:.2f} s",
                    flush=True,
                )
    wall = time.perf_counter() - t0
    total = runs + failed
    print(
        f"{total} runs, {failed} failed, {wall:.1f} s wall, {sim_ms / 1000 / wall:.0f} simulated s per "
        f"wall s, {total / wall * 60:.0f} seeds per minute"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
