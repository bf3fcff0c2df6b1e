"""Partition replication under the deterministic simulator (kesque/sim/replication.py): every
replication scenario on 100 seeds with its invariants after every event, and proof that the
invariants catch deliberate bugs. A failure's message ends with its replay command, e.g.
``python -m kesque.sim --scenario repl_leader_kill --seed 17``."""

from __future__ import annotations

import pytest

from kesque.controller import cluster_control
from kesque.replication.replica_state import LeaderReplication
from kesque.sim import InvariantViolation, run
from kesque.sim.__main__ import main
from kesque.sim.repl_scenarios import REPLICATION_SCENARIOS
from sim_seeds import seeds

SEEDS = 100


@pytest.mark.parametrize("scenario", sorted(REPLICATION_SCENARIOS))
def test_replication_scenario_holds_on_100_seeds(scenario):
    for seed in seeds(SEEDS):
        r = run(scenario, seed)
        assert r.committed >= 10, f"{scenario} seed {seed} committed only {r.committed}: {r.replay()}"


def first_violation(bug=None, scenarios=("repl_leader_kill", "repl_leader_partitioned", "repl_unclean_off")):
    for seed in seeds(SEEDS):
        for scenario in scenarios:
            try:
                run(scenario, seed, bug)
            except InvariantViolation as e:
                return str(e)
    return None


def test_truncating_to_the_high_watermark_is_caught():
    """Seed 001 §4.1.5: the follower that crashed after fetching message2, before learning HW 2,
    truncates it when it restarts if it truncates to its HW instead of by epoch. Caught on the
    scenario's first seed, and by the leader-change scenarios (a follower of a new leader does
    the same); the replay command names the switch and fails again."""
    e = first_violation("truncate_to_high_watermark", ("repl_seed_4_1_5",))
    assert "seed 0 --bug truncate_to_high_watermark" in e and "truncated committed offset" in e
    e = first_violation("truncate_to_high_watermark")
    assert e is not None and "truncated committed offset" in e
    cmd = e.rsplit("replay: ", 1)[1]
    assert main(cmd.split()[3:]) == 1


def test_a_replication_seed_replays_exactly():
    a, b = run("repl_leader_partitioned", 3), run("repl_leader_partitioned", 3)
    assert (a.sim_ms, a.events, a.committed) == (b.sim_ms, b.events, b.committed)


def test_acks_all_answered_before_the_hw_is_caught(monkeypatch):
    monkeypatch.setattr(LeaderReplication, "acks_all_status", lambda self, required, log: (True, 0))
    assert "acknowledged with acks=all" in first_violation()


def test_a_hw_that_ignores_the_followers_is_caught(monkeypatch):
    def hw_is_log_end(self, log, now):
        if self.is_leader and log.log_end_offset > log.high_watermark:
            log.update_high_watermark(log.log_end_offset)
            return True
        return False

    monkeypatch.setattr(LeaderReplication, "maybe_increment_high_watermark", hw_is_log_end)
    assert "are lost" in first_violation()


def test_a_leader_that_never_reports_a_diverging_epoch_is_caught(monkeypatch):
    """The follower then appends the new leader's records after its own divergent tail."""
    check = LeaderReplication.on_follower_fetch
    monkeypatch.setattr(
        LeaderReplication, "on_follower_fetch", lambda self, r, offset, last_epoch, *a: check(self, r, offset, -1, *a)
    )
    assert "in the ISR of partition" in first_violation()


def test_a_follower_joining_the_isr_before_it_caught_up_is_caught(monkeypatch):
    """Elected right after it rejoined, a follower that joined below the HW lacks committed records."""

    def expand_at_once(self, b, st, log):
        if self.pending is None and b not in self.isr and self._isr_eligible(b, st):
            return self._propose("expand", self.isr + [b], frozenset([b]))
        return None

    monkeypatch.setattr(LeaderReplication, "_maybe_expand_isr", expand_at_once)
    assert "are lost" in first_violation(scenarios=("repl_rejoin_then_leader_cut",))


def test_an_election_outside_the_isr_is_caught(monkeypatch):
    """The controller moving leadership to any live replica (an unclean election while
    unclean.leader.election.enable is false) loses committed records."""
    change = cluster_control.partition_change

    def any_live_replica(tid, pid, p, acceptable, target_isr=None, *args, **kw):
        rec = change(tid, pid, p, acceptable, target_isr, *args, **kw)
        gone = [r for r in p.isr if target_isr is not None and r not in target_isr]
        live = [r for r in p.replicas if r not in gone and acceptable(r)]
        if rec is not None and p.leader in gone and live:
            rec["leader"], rec["isr"] = live[-1], [live[-1]]
        return rec

    monkeypatch.setattr(cluster_control, "partition_change", any_live_replica)
    assert "elected from outside the ISR" in first_violation()


def test_a_hw_that_advances_below_min_isr_is_caught_by_an_elr_election():
    """KIP-966: the leader alone (ISR below min.insync.replicas) must not commit; with the HW rule
    broken (test-only switch) the follower elected from the ELR lacks what was committed."""
    e = first_violation("hw_ignores_min_isr", ("repl_elr",))
    assert e is not None and "are lost" in e and "--bug hw_ignores_min_isr" in e


def test_an_elr_that_keeps_members_who_left_at_min_isr_is_caught(monkeypatch):
    """A broken ELR rule: every member leaving the ISR stays eligible, also the follower that left
    while the ISR was still at min.insync.replicas (it misses what was committed after)."""
    from kesque.controller import partition_change as pc

    monkeypatch.setattr(
        pc,
        "_target_elr",
        lambda p, isr, elr, min_isr, unclean: [
            r for r in dict.fromkeys(elr + list(p.isr) + list(p.replicas)) if r not in isr and r not in unclean
        ],
    )
    e = first_violation(scenarios=("repl_elr",))
    assert e is not None and "are lost" in e, e
