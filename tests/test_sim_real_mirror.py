"""The mirror topic between two clusters of the real broker under the simulator
(kesque/sim/real_mirror.py): a source and a destination of three combined nodes each on one
simulated loop, a cluster link and a mirror topic made through the KesqueClusterLinks API,
plain, idempotent and transactional producers at the source, leaders killed on both sides, the
clusters cut apart, DeleteRecords outrunning the mirror, then a failover over transactions left
open. A failing seed's message ends with its replay command, e.g.
``python -m kesque.sim --scenario real_mirror_short --seed 7``.

The default suite runs SEEDS short seeds (about 1.5-2 s of CPU each unmeasured) and the bug
switches; the ``mirror`` marker (``make mirror``) runs SWEEP short seeds and FULL full ones."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kesque.sim import SimulationError, run
from kesque.sim.scenarios import MIRROR_BUG_OWNERS
from sim_seeds import seeds, sweep

SEEDS = 2
SWEEP = int(os.environ.get("KESQUE_SIM_SWEEP", "100"))
FULL = max(SWEEP // 5, 1)
# each switch and the first seed of the short scenario that must catch it (of seeds 0..BUG_SEEDS-1)
MIRROR_BUGS = {"skip_abort_at_failover": 0, "uncounted_mirror_loss": 1}
BUG_SEEDS = 10


def test_a_mirror_stays_byte_for_byte_through_faults_and_fails_over():
    # coverage measures the first seed only: the others run the same code again
    assert sweep("real_mirror_short", SEEDS, least=20, measured=1) > 0


def test_every_mirror_bug_switch_has_a_seed_that_catches_it():
    assert set(MIRROR_BUGS) == set(MIRROR_BUG_OWNERS)


def _caught(bug: str, n: int) -> tuple[int, str] | None:
    for seed in seeds(n, measured=0):
        try:
            run("real_mirror_short", seed, bug)
        except SimulationError as e:
            return seed, str(e)
    return None


@pytest.mark.parametrize("bug", sorted(MIRROR_BUGS))
def test_a_broken_mirror_rule_is_caught(bug):
    """The scenario is not blind: each switch fails a seed of the default range (the first that
    did when the switch was written: a later seed means an invariant got weaker)."""
    found = _caught(bug, MIRROR_BUGS[bug] + 1)
    assert found is not None, f"no invariant caught {bug} in seeds 0..{MIRROR_BUGS[bug]} of real_mirror_short"
    seed, message = found
    replay = f"python -m kesque.sim --scenario real_mirror_short --seed {seed} --bug {bug}"
    assert message.endswith(f"of simulated time]\n  replay: {replay}"), message


@pytest.mark.mirror
@pytest.mark.timeout(max(600, 12 * (SWEEP + 3 * FULL)))
def test_the_mirror_sweep():
    assert sweep("real_mirror_short", SWEEP, least=20) > 0
    assert sweep("real_mirror", FULL, least=20) > 0


@pytest.mark.mirror
@pytest.mark.parametrize("bug", sorted(MIRROR_BUGS))
def test_a_caught_mirror_bug_replays_alone(bug):
    """The failing seed's replay command, run alone in a fresh process, fails the same way at the
    same simulated time."""
    seed, message = _caught(bug, BUG_SEEDS)
    replay = f"python -m kesque.sim --scenario real_mirror_short --seed {seed} --bug {bug}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE")}
    alone = subprocess.run(
        [sys.executable, *replay.split()[1:]], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert alone.returncode == 1 and f"FAIL real_mirror_short seed {seed}: {message}" in alone.stdout, (
        message,
        alone.stdout,
        alone.stderr[-2000:],
    )
