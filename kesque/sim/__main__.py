"""``python -m kesque.sim``: run scenarios over seeds; a failure prints its replay command.

``--scenario`` takes a name or a shell pattern (``'real_*'``: the real broker's scenarios);
``--jobs N`` runs the seeds in N processes (forked: each seed's run is the same as alone), and
prints the results in seed order."""

from __future__ import annotations

import argparse
import fnmatch
import multiprocessing
import sys
import time
import traceback

from .scenarios import BUGS, SCENARIOS, run
from .scheduler import SimulationError


def _names(patterns: list[str] | None, parser: argparse.ArgumentParser) -> list[str]:
    if not patterns:
        return sorted(SCENARIOS)
    names: list[str] = []
    for pattern in patterns:
        found = [n for n in sorted(SCENARIOS) if fnmatch.fnmatchcase(n, pattern)]
        if not found:
            parser.error(f"no scenario is named {pattern!r} (choose from {', '.join(sorted(SCENARIOS))})")
        names += [n for n in found if n not in names]
    return names


def _one(job: tuple[str, int, str | None]) -> tuple[str, str, object]:
    """("ok", "", Run) or ("FAIL"/"ERROR", message, None) of one seed."""
    name, seed, bug = job
    try:
        return "ok", "", run(name, seed, bug)
    except SimulationError as e:
        return "FAIL", str(e), None
    except Exception:  # noqa: BLE001 - reported with its traceback, the sweep goes on
        return "ERROR", traceback.format_exc(), None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kesque.sim", description=__doc__)
    p.add_argument(
        "--scenario",
        action="append",
        help="scenario to run, a name or a pattern such as 'real_*' (repeatable; default: all)",
    )
    p.add_argument("--seed", type=int, help="run this one seed")
    p.add_argument("--seeds", type=int, default=100, help="number of seeds per scenario (default 100)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--bug", choices=sorted(BUGS), help="switch on a deliberate bug")
    p.add_argument("-j", "--jobs", type=int, default=1, help="processes running seeds at once (default 1)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every run")
    a = p.parse_args(argv)
    names = _names(a.scenario, p)
    seeds = [a.seed] if a.seed is not None else range(a.first_seed, a.first_seed + a.seeds)
    jobs = [(name, seed, a.bug) for name in names for seed in seeds]
    failed = 0
    t0 = time.perf_counter()
    sim_ms = runs = 0
    pool = multiprocessing.get_context("fork").Pool(a.jobs) if a.jobs > 1 and len(jobs) > 1 else None
    try:
        results = pool.imap(_one, jobs) if pool is not None else map(_one, jobs)
        for (name, seed, _bug), (status, message, r) in zip(jobs, results):
            if status == "FAIL":
                failed += 1
                print(f"FAIL {name} seed {seed}: {message}", flush=True)
                continue
            if status == "ERROR":
                failed += 1
                print(f"ERROR {name} seed {seed}:\n{message}", flush=True)
                continue
            runs += 1
            sim_ms += r.sim_ms
            if a.verbose:
                print(
                    f"ok {name} seed {seed}: {r.sim_ms / 1000:.1f} s simulated, {r.events} events, "
                    f"{r.committed} committed, {r.wall_s:.2f} s",
                    flush=True,
                )
    finally:
        if pool is not None:
            pool.terminate()
    wall = time.perf_counter() - t0
    total = runs + failed
    print(
        f"{total} runs, {failed} failed, {wall:.1f} s wall, {sim_ms / 1000 / wall:.0f} simulated s per "
        f"wall s, {total / wall * 60:.0f} seeds per minute"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
