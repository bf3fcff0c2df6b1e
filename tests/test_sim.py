"""The KRaft quorum under the deterministic simulator: every scenario on 100 seeds, invariants
checked after every event, and proof that the invariants catch deliberate bugs.

A failure's message ends with the one command that replays it, e.g.
``python -m kesque.sim --scenario chaos --seed 17``. ``make sim SEEDS=N`` runs more seeds."""

from __future__ import annotations

import pytest

from kesque.sim import SCENARIOS, InvariantViolation, SimulationError, run
from kesque.sim.__main__ import main
from kesque.sim.repl_scenarios import REPLICATION_SCENARIOS
from sim_seeds import seeds

SEEDS = 100
REAL = {s for s in SCENARIOS if s.startswith("real_")}  # the real broker's: test_sim_real, seconds a seed


# the replication scenarios: test_sim_replication; the real broker's: test_sim_real (seconds a seed)
@pytest.mark.parametrize("scenario", sorted(set(SCENARIOS) - set(REPLICATION_SCENARIOS) - REAL))
def test_scenario_holds_on_100_seeds(scenario):
    for seed in seeds(SEEDS):
        r = run(scenario, seed)
        assert r.committed >= 10, f"{scenario} seed {seed} committed only {r.committed}: {r.replay()}"


def first_violation(bug, scenarios=("leader_partitioned", "majority_reachable", "chaos")):
    for seed in seeds(SEEDS):
        for scenario in scenarios:
            try:
                run(scenario, seed, bug)
            except InvariantViolation as e:
                return e
    return None


@pytest.mark.parametrize(
    "bug",
    [
        "grant_vote_to_shorter_log",
        "vote_twice_in_an_epoch",
        "commit_without_own_epoch",
        "count_unflushed_leader_end",
        "report_unflushed_fetch_offset",
    ],
)
def test_invariants_catch_a_deliberate_bug(bug):
    e = first_violation(bug)
    assert e is not None, f"no invariant caught {bug} in {SEEDS} seeds"
    assert f"--bug {bug}" in str(e)  # the replay command names the bug


def test_a_seed_replays_exactly():
    a, b = run("chaos", 7), run("chaos", 7)
    assert (a.sim_ms, a.events, a.committed) == (b.sim_ms, b.events, b.committed)
    assert run("chaos", 8).events != a.events


def test_cli_prints_the_replay_command_of_a_failing_seed(capsys):
    e = first_violation("grant_vote_to_shorter_log")
    cmd = str(e).rsplit("replay: ", 1)[1]
    argv = cmd.split()[3:]  # after "python -m kesque.sim"
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert f"replay: {cmd}" in out and "1 runs, 1 failed" in out
    assert main(["--scenario", "initial_election", "--seeds", "2"]) == 0


def test_cli_runs_the_scenarios_a_pattern_names_in_processes_and_prints_them_in_seed_order(capsys):
    assert main(["--scenario", "initial_*", "--scenario", "leader_failure", "--seeds", "3", "-j", "2", "-v"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        f"ok {name} seed {seed}" for name in ("initial_election", "leader_failure") for seed in range(3)
    ]
    assert lines[-1].startswith("6 runs, 0 failed")


def test_liveness_failure_is_reported_with_its_bound():
    from kesque.sim.scenarios import Sim

    sim = Sim(1, voters=3, observers=0)
    sim.c.start(0)  # one voter of three: no majority
    with pytest.raises(SimulationError, match="not reached within"):
        sim.elect()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(set(SCENARIOS) - REAL))
def test_scenario_holds_on_2000_seeds(scenario):
    for seed in range(SEEDS, 2000):
        run(scenario, seed)


def test_replaced_disk_without_directory_ids_loses_committed_records():
    """Why kesque keeps KIP-853's directory ids: with a static voter set (Kafka's
    controller.quorum.voters), a voter back with an empty disk votes, and committed data is lost."""
    for seed in range(10):
        run("disk_loss_then_leader_cut", seed)
        with pytest.raises(InvariantViolation):
            run("disk_loss_then_leader_cut", seed, "static_voters")


def test_a_restarted_node_schedules_its_own_timer():
    """Seed 3335 restarts a node whose first deadline is the time its previous incarnation's
    (void) timer was set for: the simulator skipped the new timer and the node never ticked."""
    run("chaos", 3335)


# -- the metadata layer (controllers, brokers, the broker lifecycle) ------------------------------------
def test_a_metadata_seed_replays_exactly():
    a, b = run("controller_failover", 5), run("controller_failover", 5)
    assert (a.sim_ms, a.events, a.committed) == (b.sim_ms, b.events, b.committed)


def first_metadata_violation(scenario, seeds=20):
    for seed in range(seeds):
        try:
            run(scenario, seed)
        except InvariantViolation as e:
            return str(e)
    return None


def test_invariants_catch_a_fence_that_leaves_leaderships(monkeypatch):
    from kesque.controller.cluster_control import ClusterControl

    monkeypatch.setattr(ClusterControl, "_move_off", lambda self, image, b: [])
    assert "which is fenced" in first_metadata_violation("broker_killed")


def test_invariants_catch_a_controlled_shutdown_granted_too_early(monkeypatch):
    from kesque.controller.cluster_control import ClusterControl

    monkeypatch.setattr(ClusterControl, "lowest_active_offset", lambda self: 1 << 62)
    assert "still sees it lead" in first_metadata_violation("broker_controlled_shutdown")
