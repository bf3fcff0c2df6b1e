"""The quorum scenarios (those of Kafka's RaftEventSimulationTest, plus a chaos run).

Each scenario is a function of a seed: the seed draws the cluster's shape, the network's faults
and every timing, so ``run(name, seed)`` replays a run exactly. Every phase waits for progress
with a bound of simulated time (:data:`BOUND_MS`): a quorum with a majority up and connected must
elect a leader and commit again within it, or the run fails with a liveness violation.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from ..raft import Knobs
from ..raft.messages import VoteRequest
from ..replication.replica_state import FollowerFetch, LeaderReplication
from .cluster import RaftCluster
from .invariants import Invariants
from .metadata import MetadataCluster
from .network import NetworkFaults
from .real_mirror import REAL_MIRROR_BUG_OWNERS, REAL_MIRROR_SCENARIOS
from .real_scenarios import REAL_BUG_OWNERS, REAL_SCENARIOS
from .real_txn import REAL_TXN_BUG_OWNERS, REAL_TXN_SCENARIOS
from .repl_scenarios import REPLICATION_BUGS, REPLICATION_SCENARIOS
from .scheduler import Scheduler
from .txn_verification import TXN_BUGS, TXN_SCENARIOS
from .txn_verification import bug_switch as txn_bug_switch

BOUND_MS = 15_000  # liveness bound of one phase: 7.5 fetch timeouts (Kafka defaults)
APPEND_EVERY_MS = 20
CREATE_EVERY_MS = 30


@dataclass
class Run:
    scenario: str
    seed: int
    bug: str | None = None
    sim_ms: int = 0
    events: int = 0
    wall_s: float = 0.0
    committed: int = 0
    faults: tuple = ()  # what a real scenario injected (RealCluster.fault_log)

    def replay(self) -> str:
        bug = f" --bug {self.bug}" if self.bug else ""
        return f"python -m kesque.sim --scenario {self.scenario} --seed {self.seed}{bug}"


class Sim:
    """One scenario run: scheduler, cluster, invariants, and the helpers scenarios share."""

    def __init__(
        self,
        seed: int,
        voters: int | None = None,
        observers: int | None = None,
        faults: NetworkFaults | None = None,
        majority_invariant: bool = True,
        knobs: Knobs | None = None,
        torn_tail: bool = False,
        snapshot_every: int = 0,
        metadata: bool = False,
    ):
        self.s = Scheduler(seed)
        rng = self.s.rng
        voters = voters if voters is not None else rng.randint(3, 5)
        observers = observers if observers is not None else rng.randint(0, 2)
        if faults is None:
            faults = NetworkFaults(
                1, rng.randint(2, 20), drop=rng.choice((0, 0.005, 0.02)), duplicate=rng.choice((0, 0.01, 0.05))
            )
        # an fsync takes simulated time: up to 1, 10 or 40 ms (a fast disk, a slow one)
        flush_ms = (0, rng.choice((1, 10, 40)))
        self.c = RaftCluster(
            self.s,
            voters,
            observers,
            faults=faults,
            knobs=knobs,
            torn_tail=torn_tail,
            snapshot_every=snapshot_every,
            flush_ms=flush_ms,
        )
        self.inv = Invariants(self.c, majority=majority_invariant)
        self.meta = None
        if metadata:  # controllers and brokers over the quorum; the client creates topics
            self.meta = MetadataCluster(self.c)
            self.s.every(CREATE_EVERY_MS, CREATE_EVERY_MS // 2, self.meta.client_step)
        else:  # the client appends integers
            self.s.every(APPEND_EVERY_MS, APPEND_EVERY_MS // 2, self.c.append)

    def until(self, cond, what: str, bound: int = BOUND_MS) -> None:
        self.s.run_until(cond, bound, what)

    def elect(self) -> int:
        self.until(self.c.has_consistent_leader, "a leader every running node knows")
        return self.c.leader_id()

    def progress(self, more: int = 10, among=None, everyone: bool = False) -> int:
        c = self.c
        target = c.max_high_watermark() + more
        if everyone:
            self.until(lambda: c.all_reached(target, among), f"every node{_of(among)} reaches HW {target}")
        else:
            self.until(lambda: c.any_reached(target, among), f"a node{_of(among)} reaches HW {target}")
        return target


def _of(among) -> str:
    return "" if among is None else f" of {sorted(among)}"


# -- the scenarios ---------------------------------------------------------------------------------


def initial_election(seed: int, **kw) -> Sim:
    sim = Sim(seed, **kw)
    sim.c.start_all()
    sim.elect()
    sim.progress(10)
    return sim


def leader_failure(seed: int, **kw) -> Sim:
    """The leader stops (gracefully or not); a new one takes over; the old one catches up."""
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    old = sim.elect()
    sim.progress(10)
    if sim.s.rng.random() < 0.5:
        c.shutdown(old)
    else:
        c.kill(old)
    sim.progress(10, everyone=True, among=set(c.ids) - {old})
    c.start(old)
    sim.progress(10, everyone=True)
    return sim


def all_killed(seed: int, **kw) -> Sim:
    """Every node crashes; a bare majority of the voters restarts and carries on."""
    kw.setdefault("voters", Scheduler(seed).rng.randint(1, 5))
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    sim.elect()
    sim.progress(10)
    for i in c.ids:
        c.kill(i)
    back = sorted(c.voters)[: c.majority()]
    for i in back:
        c.start(i)
    sim.progress(10, everyone=True)
    return sim


def leader_partitioned(seed: int, **kw) -> Sim:
    """The leader is cut off; the rest elect a new one and progress; then the partition heals."""
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    old = sim.elect()
    sim.progress(10)
    c.router.isolate(old, c.ids)
    rest = set(c.ids) - {old}
    sim.progress(10, everyone=True, among=rest)
    c.router.heal()
    sim.progress(10, everyone=True)
    return sim


def majority_reachable(seed: int, **kw) -> Sim:
    """Five voters split 2 | 3: the three progress, the two do not; healed, all catch up."""
    kw.setdefault("voters", 5)
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    sim.elect()
    sim.progress(10)
    minority, majority = {0, 1}, {2, 3, 4}
    c.router.partition(minority, majority)
    sim.progress(20, among=majority)
    lo, hi = c.max_high_watermark(minority), c.max_high_watermark(majority)
    if hi <= lo:
        sim.inv.fail(f"the majority's HW {hi} is not above the minority's {lo}")
    c.router.heal()
    sim.progress(10, everyone=True)
    return sim


def back_to_back(seed: int, **kw) -> Sim:
    """The leader is cut off; as soon as another leads, the old one returns and the new is cut off."""
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    first = sim.elect()
    sim.progress(10)
    c.router.isolate(first, c.ids)
    sim.until(lambda: c.leader_id() not in (-1, first), "a second leader")
    second = c.leader_id()
    c.router.heal()
    c.router.isolate(second, c.ids)
    sim.progress(10, among=set(c.ids) - {second})
    c.router.heal()
    sim.progress(10, everyone=True)
    return sim


def stranded_candidate(seed: int, **kw) -> Sim:
    """A voter wins its pre-votes while the leader is cut off, but its real Vote requests are
    lost: it is alone in epoch E + 1 when the leader comes back and the others follow it again in
    E. Pre-votes move nobody to a new epoch, so only the rule that a pre-vote from a *higher*
    epoch moves its receiver there (as every newer epoch does) brings it back."""
    kw.setdefault("voters", 3)
    kw.setdefault("observers", 0)
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    leader = sim.elect()
    sim.progress(10)
    epoch = c.nodes[leader].raft.epoch
    c.router.isolate(leader, c.ids)
    # x: the follower with the longer log, so that the other one grants it a pre-vote
    x, y = sorted(
        (v for v in c.voters if v != leader),
        key=lambda v: (-c.nodes[v].disk.log.last_fetched_epoch(), -c.nodes[v].disk.log.end_offset()),
    )
    c.router.filters.append(
        lambda src, dst, msg: isinstance(msg, VoteRequest) and (src == y or (src == x and not msg.pre_vote))
    )
    sim.until(
        lambda: c.nodes[x].raft.epoch > epoch and c.nodes[x].raft.state.name == "Prospective",
        f"node {x} back to pre-votes in epoch {epoch + 1}",
    )
    c.router.filters = [lambda src, dst, msg: src == x and isinstance(msg, VoteRequest)]
    c.router.reconnect(leader)
    sim.s.run_for(3_000)  # the others settle with the old leader; x is still muted
    c.router.heal()
    sim.progress(10, everyone=True)
    return sim


def disk_loss(seed: int, **kw) -> Sim:
    """A node's disk is replaced. It comes back with a new directory id: no longer the voter the
    quorum knows (KIP-853), it cannot vote and fetches as an observer; no committed record is lost.
    The majority check is off: losing a committed copy is the fault itself."""
    kw.setdefault("majority_invariant", False)
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    sim.elect()
    sim.progress(10)
    victim = sim.s.rng.choice(sorted(c.voters))
    c.kill_and_wipe(victim)
    rest = set(c.ids) - {victim}
    sim.until(lambda: c.has_consistent_leader(rest), "a leader the others agree on")
    c.start(victim)
    sim.progress(10, everyone=True)
    if c.nodes[victim].raft.is_voter:
        sim.inv.fail(f"node {victim} votes again with a new disk")
    return sim


def disk_loss_then_leader_cut(seed: int, **kw) -> Sim:
    """Three voters: F2 lags (cut off), the leader commits with F1 alone; F1's disk is replaced
    and it restarts at once; then the leader is cut off and F2 rejoins. F2 and the empty F1 are
    a majority of node ids, but not of voters: F1 has a new directory id and no vote, so nothing
    committed can be lost; once the leader is back the quorum carries on. With
    ``--bug static_voters`` (no directory ids) F1 votes for F2 and committed records are lost."""
    kw.setdefault("majority_invariant", False)
    kw.setdefault("voters", 3)
    sim = Sim(seed, **kw)
    c = sim.c
    c.start_all()
    leader = sim.elect()
    sim.progress(10)
    f1, f2 = (v for v in sorted(c.voters) if v != leader)
    c.router.isolate(f2, c.ids)
    sim.progress(20, among={leader, f1})
    c.kill_and_wipe(f1)
    c.start(f1)
    c.router.heal()
    c.router.isolate(leader, c.ids)
    sim.s.run_for(5_000)
    c.router.heal()
    sim.progress(10, everyone=True)
    return sim


def chaos(seed: int, **kw) -> Sim:
    """Random crashes (with torn tails), graceful stops, partitions, leader isolation, lost Vote
    requests, drops and duplicates for 20 s; then everything heals and restarts, and the quorum
    must progress within the bound."""
    kw.setdefault("torn_tail", True)
    kw.setdefault("faults", NetworkFaults(1, 30, drop=0.03, duplicate=0.05))
    sim = Sim(seed, **kw)
    c, s = sim.c, sim.s
    rng = s.rng
    c.start_all()
    end = s.now + 20_000
    while s.now < end:
        s.run_for(rng.randint(50, 3000))
        roll = rng.random()
        up = [sn.node_id for sn in c.running()]
        down = [i for i in c.ids if not c.is_running(i)]
        leader = c.leader_id()
        victim = leader if leader >= 0 and rng.random() < 0.7 else (rng.choice(up) if up else -1)
        if len(down) > len(c.voters) // 2 and rng.random() < 0.7:
            c.start(rng.choice(down))  # mostly keep a majority up: more elections, more to check
        elif roll < 0.25 and victim >= 0:
            c.kill(victim)
        elif roll < 0.35 and victim >= 0:
            c.shutdown(victim)
        elif roll < 0.7 and down:
            c.start(rng.choice(down))
        elif roll < 0.82:
            ids = list(c.ids)
            rng.shuffle(ids)
            k = rng.randint(1, len(ids) - 1)
            c.router.partition(set(ids[:k]), set(ids[k:]))
        elif roll < 0.87 and leader >= 0:
            c.router.isolate(leader, c.ids)
        elif roll < 0.92 and up:
            # one node's real Vote requests are lost (its pre-votes pass) until the next heal
            mute = rng.choice(up)
            c.router.filters.append(
                lambda src, dst, msg, mute=mute: src == mute and isinstance(msg, VoteRequest) and not msg.pre_vote
            )
        else:
            c.router.heal()
    c.router.heal()
    c.router.faults = NetworkFaults(1, 10)
    for i in c.ids:
        if not c.is_running(i):
            c.start(i)
    sim.progress(10, everyone=True)
    return sim


def snapshot_catch_up(seed: int, **kw) -> Sim:
    """KIP-630: every node snapshots each ~50 records and drops the log below. A node (voter or
    observer) is down while the leader's log start passes its log end; back, it is told to fetch
    the snapshot, loads it in chunks (FetchSnapshot), and catches up from there."""
    kw.setdefault("snapshot_every", 50)
    sim = Sim(seed, **kw)
    c, s = sim.c, sim.s
    c.start_all()
    leader = sim.elect()
    sim.progress(10)
    victim = s.rng.choice([i for i in c.ids if i != leader])
    if s.rng.random() < 0.5:
        c.shutdown(victim)
    else:
        c.kill(victim)
    behind = c.nodes[victim].disk.log.end_offset()
    others = set(c.ids) - {victim}
    sim.until(
        lambda: all(c.nodes[i].disk.log.log_start_offset() > behind for i in others if c.is_running(i)),
        f"every other node's log start passes node {victim}'s end {behind}",
    )
    installed = c.snapshots_installed
    c.start(victim)
    sim.until(lambda: c.snapshots_installed > installed, f"node {victim} installs a snapshot")
    sim.progress(10, everyone=True)
    return sim


def chaos_snapshots(seed: int, **kw) -> Sim:
    """``chaos`` with every node snapshotting each ~40 records: crashes, torn tails, truncations
    and elections meet log start offsets, FetchSnapshot and snapshots loaded at restart."""
    kw.setdefault("snapshot_every", 40)
    return chaos(seed, **kw)


# -- the metadata layer: controllers, brokers, the broker lifecycle ------------------------------------


def metadata_sim(seed: int, **kw) -> Sim:
    """3-5 controllers (the voters) and 3-4 brokers (the observers), every broker registered and
    unfenced, and a few topics created."""
    kw.setdefault("observers", 3 + seed % 2)
    sim = Sim(seed, metadata=True, **kw)
    sim.c.start_all()
    sim.elect()
    sim.until(sim.meta.all_brokers_unfenced, "every broker registered and unfenced")
    _topics(sim, 5)
    return sim


def _topics(sim: Sim, more: int) -> None:
    meta = sim.meta
    meta.create_topics(more)
    sim.until(lambda: len(meta.acked) >= meta.topics_wanted, f"{meta.topics_wanted} topics acknowledged")


def _converged(sim: Sim) -> None:
    """Every running node applies the same committed offset; then every image must be equal
    and hold every acknowledged topic."""
    meta, c = sim.meta, sim.c
    target = max(sn.app.applied_end for sn in c.running())

    def same():
        ctl = meta.controller()
        ends = {sn.app.applied_end for sn in c.running()}
        return ctl is not None and ctl.ahead == ctl.applied_end and len(ends) == 1 and min(ends) >= target

    sim.until(same, f"every node applies the same offset, at least {target}")
    meta.inv.check_converged()


def _leader_of_most(meta) -> int:
    image = meta.controller().image
    counts = {b: 0 for b in meta.brokers()}
    for t in image.topics_by_id.values():
        for p in t.partitions.values():
            if p.leader in counts:
                counts[p.leader] += 1
    return max(sorted(counts), key=lambda b: counts[b])


def controller_failover(seed: int, **kw) -> Sim:
    """A client keeps creating topics at the active controller while it is killed, stopped or
    cut off (then it goes on proposing records that never commit), twice; each name is retried
    until acknowledged. An acknowledged topic must exist on every node, none may be created
    twice, a controller that lost the lead must hold only committed records, images must agree."""
    sim = metadata_sim(seed, **kw)
    c, meta, rng = sim.c, sim.meta, sim.s.rng
    for _ in range(2):
        meta.create_topics(10)
        sim.s.run_for(rng.randint(0, 300))
        old = c.leader_id()
        how = rng.choice((c.kill, c.shutdown, "isolate"))
        if how == "isolate":
            c.router.isolate(old, c.ids)
        else:
            how(old)
        sim.until(
            lambda: meta.controller() is not None and meta.controller().sn.node_id != old, "a new active controller"
        )
        sim.until(lambda: len(meta.acked) >= meta.topics_wanted, f"{meta.topics_wanted} topics acknowledged")
        if how == "isolate":
            c.router.heal()
        else:
            c.start(old)
    _converged(sim)
    return sim


def broker_killed(seed: int, **kw) -> Sim:
    """The broker leading the most partitions is killed: the controller fences it once its
    session times out (broker.session.timeout.ms), not before, and moves its leaderships in the
    same batch. Restarted (at once, or once fenced), it registers anew, catches up and is unfenced
    (and leads again where it was the last ISR member)."""
    sim = metadata_sim(seed, **kw)
    c, meta, s = sim.c, sim.meta, sim.s
    _topics(sim, 5)
    victim = _leader_of_most(meta)
    killed_at = s.now
    c.kill(victim)
    quick = s.rng.random() < 0.5
    if quick:  # back at once: DUPLICATE_BROKER_REGISTRATION until the old session expires
        c.start(victim)
    sim.until(
        lambda: meta.controller() is not None and meta.controller().image.brokers[victim].fenced,
        f"broker {victim} fenced",
    )
    fenced_at = next((t for t, b in meta.fenced_by_expiry if b == victim and t >= killed_at), None)
    if fenced_at is None:
        sim.inv.fail(f"broker {victim} was fenced, but not by the expiry of its session")
    since = fenced_at - meta.last_heard[victim]
    if since <= meta.lifecycle_config.session_timeout_ms:
        sim.inv.fail(f"broker {victim} fenced {since} ms after its last heartbeat, within its session")
    if not quick:
        c.start(victim)
    # refused while its old session lived, it retries with a backoff that reaches the session
    # timeout (Kafka's): a retry at that cap, and one more if a request is lost, come on top
    bound = BOUND_MS + (2 * meta.lifecycle_config.session_timeout_ms if quick else 0)
    sim.until(lambda: meta.broker(victim).lifecycle.unfenced, f"broker {victim} unfenced again", bound)
    _topics(sim, 3)
    _converged(sim)
    return sim


def broker_controlled_shutdown(seed: int, **kw) -> Sim:
    """The broker leading the most partitions shuts down (controlled.shutdown.enable): the
    controller moves its leaderships; it may stop only once it leads nothing and every active
    broker has seen that. Then it stops, and comes back."""
    sim = metadata_sim(seed, **kw)
    c, meta, s = sim.c, sim.meta, sim.s
    _topics(sim, 5)
    victim = _leader_of_most(meta)
    lc = meta.broker(victim).lifecycle
    lc.begin_controlled_shutdown(s.now)
    c.wake(victim)
    sim.until(lambda: lc.shutdown_finished, f"broker {victim} allowed to shut down")
    if lc.shutdown_reason != "the controller let the broker shut down":
        sim.inv.fail(f"broker {victim} shut down because {lc.shutdown_reason}")
    for b in meta.brokers():
        other = meta.broker(b)
        if b != victim and other.lifecycle.unfenced:
            led = [
                f"{t.name}-{i}"
                for t in other.image.topics_by_id.values()
                for i, p in t.partitions.items()
                if p.leader == victim
            ]
            if led:
                sim.inv.fail(f"broker {victim} left while broker {b} still sees it lead {led}")
    c.shutdown(victim)
    sim.until(
        lambda: meta.controller() is not None and meta.controller().image.brokers[victim].fenced,
        f"broker {victim} fenced",
    )
    s.run_for(s.rng.randint(0, 3000))
    c.start(victim)
    sim.until(lambda: meta.broker(victim).lifecycle.unfenced, f"broker {victim} unfenced again")
    _converged(sim)
    return sim


METADATA_SCENARIOS = (controller_failover, broker_killed, broker_controlled_shutdown)

SCENARIOS = {
    f.__name__: f
    for f in METADATA_SCENARIOS
    + (
        snapshot_catch_up,
        chaos_snapshots,
        initial_election,
        leader_failure,
        all_killed,
        leader_partitioned,
        majority_reachable,
        back_to_back,
        stranded_candidate,
        disk_loss,
        disk_loss_then_leader_cut,
        chaos,
    )
}
SCENARIOS.update(REPLICATION_SCENARIOS)
SCENARIOS.update(TXN_SCENARIOS)
SCENARIOS.update(REAL_SCENARIOS)
SCENARIOS.update(REAL_TXN_SCENARIOS)
SCENARIOS.update(REAL_MIRROR_SCENARIOS)
REAL_BUG_OWNERS = {**REAL_BUG_OWNERS, **REAL_TXN_BUG_OWNERS}
# the mirror scenario's switches (tests/test_sim_real_mirror.py holds the seeds that catch them)
MIRROR_BUG_OWNERS = REAL_MIRROR_BUG_OWNERS
OWNED_BUGS = {**REAL_BUG_OWNERS, **MIRROR_BUG_OWNERS}
BUGS = tuple(Knobs.__dataclass_fields__) + REPLICATION_BUGS + TXN_BUGS + tuple(OWNED_BUGS)


@contextlib.contextmanager
def replication_bug(bug: str | None):
    """Switch on a replication test-only switch (a class attribute) for one run."""
    if bug not in REPLICATION_BUGS + TXN_BUGS + tuple(OWNED_BUGS):
        yield
        return
    if bug in TXN_BUGS:
        owner, bug = txn_bug_switch(bug)
    elif bug in OWNED_BUGS:
        owner = OWNED_BUGS[bug]
    else:
        owner = LeaderReplication if hasattr(LeaderReplication, bug) else FollowerFetch
    setattr(owner, bug, True)
    try:
        yield
    finally:
        setattr(owner, bug, False)


def run(name: str, seed: int, bug: str | None = None) -> Run:
    """Run one scenario; any failure's message ends with the command that replays it.
    ``bug`` names a :class:`~kesque.raft.Knobs` field to switch on (a deliberate bug), or one of
    :data:`~kesque.sim.repl_scenarios.REPLICATION_BUGS` (a test-only switch of the replication logic)."""
    t0 = time.perf_counter()
    result = Run(name, seed, bug)
    kw = {"knobs": Knobs(**{bug: True})} if bug in Knobs.__dataclass_fields__ else {}
    try:
        with replication_bug(bug):
            sim = SCENARIOS[name](seed, **kw)
    except Exception as e:
        e.args = (f"{e.args[0] if e.args else type(e).__name__}\n  replay: {result.replay()}",)
        raise
    result.sim_ms = sim.s.now
    result.events = sim.s.events
    result.committed = sim.inv.committed if hasattr(sim.inv, "committed") else len(sim.inv.ledger)
    result.faults = tuple(getattr(sim, "fault_log", ()))
    result.wall_s = time.perf_counter() - t0
    return result
