"""A transactional producer's pipelined first batches while KIP-890 verification is pending,
under the simulator on the real UnifiedLog and ProducerStateManager (kesque.sim.txn_verification,
issue 25): the invariants hold on 100 seeds, catch the bug kesque had (a sequence above the
lowest one still being verified appended first; a transaction version 2 producer's previous
marker ending its next transaction's verification), and a seed replays exactly."""

from __future__ import annotations

import pytest

from kesque.sim import InvariantViolation, run
from kesque.sim.txn_verification import Leader
from sim_seeds import seeds

SCENARIO, TV2 = "txn_pipelined_verification", "txn_tv2_pipelined_add"
SEEDS = 100


@pytest.mark.parametrize("scenario", [SCENARIO, TV2])
def test_the_scenario_holds_on_100_seeds(scenario):
    for seed in seeds(SEEDS):
        r = run(scenario, seed)
        assert r.committed >= 10, r.replay()


@pytest.mark.parametrize(
    "scenario, bug",
    [
        (SCENARIO, "skip_verification_sequence_check"),
        (TV2, "skip_verification_sequence_check"),
        (TV2, "clear_verification_on_any_marker"),
    ],
)
def test_the_invariants_catch_each_bug(scenario, bug):
    caught = []
    for seed in seeds(SEEDS):
        try:
            run(scenario, seed, bug)
        except InvariantViolation as e:
            caught.append(str(e))
    assert caught, f"no invariant caught {bug} in {scenario}"
    assert f"--bug {bug}" in caught[0]


def test_the_sequence_check_alone_keeps_the_log_in_order(monkeypatch):
    """Without the leader keeping a connection's order the producer sees more retriable errors,
    but nothing is appended out of order and no batch next in line is told
    OUT_OF_ORDER_SEQUENCE_NUMBER."""
    monkeypatch.setattr(Leader, "unordered_connection_appends", True)
    for seed in seeds(SEEDS):
        run(SCENARIO, seed)
        run(TV2, seed)


def test_a_seed_replays_exactly():
    a, b = run(SCENARIO, 11), run(SCENARIO, 11)
    assert (a.sim_ms, a.events, a.committed) == (b.sim_ms, b.events, b.committed)
