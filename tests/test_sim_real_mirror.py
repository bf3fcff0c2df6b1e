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
from sim_seeds import seeds, sweep, unmeasured

SEEDS = 2
SWEEP = int(os.environ.get("KESQUE_SIM_SWEEP", "100"))
FULL = max(SWEEP // 5, 1)
# each switch and the first seed of the short scenario that catches it
MIRROR_BUGS = {"skip_abort_at_failover": 0, "uncounted_mirror_loss": 2}
BUG_SEEDS = 10


def test_a_mirror_stays_byte_for_byte_through_faults_and_fails_over():
    # coverage measures the first seed only: the others run the same code again
    assert sweep("real_mirror_short", SEEDS, least=20, measured=1) > 0


def test_every_mirror_bug_switch_has_a_seed_that_catches_it():
    assert set(MIRROR_BUGS) == set(MIRROR_BUG_OWNERS)


@pytest.mark.parametrize("bug", sorted(MIRROR_BUGS))
def test_a_broken_mirror_rule_is_caught(bug):
    """The scenario is not blind: each switch fails its seed (the first of the default range that
    did when the switch was written; ``make mirror`` looks for one among BUG_SEEDS), and the
    message ends with the replay command."""
    seed = MIRROR_BUGS[bug]
    with pytest.raises(SimulationError) as e, unmeasured():  # the code the sweep's first seed measured
        run("real_mirror_short", seed, bug)
    replay = f"python -m kesque.sim --scenario real_mirror_short --seed {seed} --bug {bug}"
    assert str(e.value).endswith(f"of simulated time]\n  replay: {replay}"), str(e.value)


@pytest.mark.mirror
@pytest.mark.timeout(max(600, 12 * (SWEEP + 3 * FULL)))
def test_the_mirror_sweep():
    assert sweep("real_mirror_short", SWEEP, least=20) > 0
    assert sweep("real_mirror", FULL, least=20) > 0


@pytest.mark.mirror
@pytest.mark.parametrize("bug", sorted(MIRROR_BUGS))
def test_a_caught_mirror_bug_replays_alone(bug):
    """A seed among BUG_SEEDS fails, and its replay command, run alone in a fresh process, fails
    the same way at the same simulated time."""
    found = None
    for seed in seeds(BUG_SEEDS, measured=0):
        try:
            run("real_mirror_short", seed, bug)
        except SimulationError as e:
            found = seed, str(e)
            break
    assert found is not None, f"no invariant caught {bug} in {BUG_SEEDS} seeds of real_mirror_short"
    seed, message = found
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
