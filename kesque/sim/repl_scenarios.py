"""The partition replication scenarios: each a function of a seed (docs/replication.md)."""

from __future__ import annotations

from .network import NetworkFaults
from .replication import CONTROLLER, ReplicationSim
from .scheduler import Scheduler


def _victim_partition(sim: ReplicationSim) -> int:
    return sim.rng.randrange(sim.partitions)


def repl_leader_kill(seed: int, **kw) -> ReplicationSim:
    """The leader of a partition is killed; the controller fences it once its session expires and
    elects another ISR member; on half the seeds that one is killed too, as soon as it leads.
    Both come back (at once, or later)."""
    sim = ReplicationSim(seed)
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 10)
    first = sim.leader(pid)
    sim.brokers[first].kill()
    sim.until(lambda: sim.leader(pid) not in (-1, first), f"a new leader for partition {pid}")
    second = sim.leader(pid)
    if sim.rng.random() < 0.5:
        sim.s.run_for(sim.rng.randint(0, 300))
        sim.brokers[second].kill()
        sim.restart(first)
        sim.until(
            lambda: sim.leader(pid) not in (-1, second) or sim.partition(pid).isr == [second],
            f"a third leader for partition {pid}, or none while its only ISR member is down",
        )
    else:
        sim.progress(pid, 5)
        sim.restart(first)
    sim.converge()
    return sim


def repl_follower_kill(seed: int, **kw) -> ReplicationSim:
    """A follower loses power (its unflushed records, a torn tail on some seeds): it leaves the
    ISR, the others go on (min.insync.replicas 2 of 3); back, it catches up and rejoins."""
    sim = ReplicationSim(seed)
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 10)
    p = sim.partition(pid)
    victim = sim.rng.choice([r for r in p.replicas if r != p.leader])
    sim.brokers[victim].kill(power_loss=True, torn_tail=sim.rng.random() < 0.5)
    sim.progress(pid, 10)
    sim.s.run_for(sim.rng.randint(0, 2000))
    sim.restart(victim)
    sim.converge()
    return sim


def repl_leader_partitioned(seed: int, **kw) -> ReplicationSim:
    """The leader's broker is cut off from the other brokers and the controller (clients still
    reach it: its acks=1 writes are lost, its acks=all writes never complete); the controller
    fences it and elects another; healed, it truncates its divergent tail by epoch."""
    sim = ReplicationSim(seed)
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 10)
    old = sim.leader(pid)
    sim.router.isolate(old, [CONTROLLER] + list(sim.brokers))
    sim.until(
        lambda: sim.leader(pid) not in (-1, old) or sim.partition(pid).isr == [old],
        f"a new leader for partition {pid}, or none while its only ISR member is cut off",
    )
    if sim.leader(pid) != -1:
        sim.progress(pid, 10)
    sim.converge()
    return sim


def repl_disk_loss(seed: int, **kw) -> ReplicationSim:
    """A replica's disk is replaced: it comes back empty as a new incarnation, leaves the ISR at
    its registration and must fetch everything before it rejoins. (Were it the last ISR member
    it could be elected with nothing: Kafka prevents that with directory ids, not modelled: the
    victim is never the only ISR member.)"""
    sim = ReplicationSim(seed)
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 10)
    p = sim.partition(pid)
    victim = sim.rng.choice([r for r in p.replicas] if len(p.isr) > 1 else [r for r in p.replicas if r not in p.isr])
    b = sim.brokers[victim]
    b.kill()
    b.wipe()
    sim.s.run_for(sim.rng.randint(0, 2000))
    sim.restart(victim)
    sim.converge()
    return sim


def _last_isr_member_dies(sim: ReplicationSim) -> tuple[int, int, int]:
    """RF 2, min.insync.replicas 1: the follower is cut off and leaves the ISR, writes go on to
    the leader alone, then the leader (the last ISR member) is killed and the follower returns."""
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 10)
    p = sim.partition(pid)
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)
    sim.router.isolate(follower, list(sim.brokers))
    sim.until(lambda: sim.partition(pid).isr == [leader], f"broker {follower} leaves the ISR of partition {pid}")
    sim.progress(pid, 5)
    sim.brokers[leader].kill()
    sim.router.heal()
    return pid, leader, follower


def repl_unclean_off(seed: int, **kw) -> ReplicationSim:
    """The last ISR member dies: the partition stays offline (no leader, nothing acknowledged)
    until it comes back, and nothing is lost."""
    sim = ReplicationSim(seed, rf=2, min_isr=1, unclean=False)
    pid, leader, follower = _last_isr_member_dies(sim)
    sim.until(lambda: sim.controller.image.brokers[leader].fenced, f"broker {leader} fenced")
    sim.s.run_for(2_000)
    if sim.leader(pid) != -1:
        sim.inv.fail(f"partition {pid} is led by {sim.leader(pid)} though its only ISR member is down")
    sim.restart(leader)
    sim.converge()
    if sim.inv.lost[pid]:
        sim.inv.fail(f"partition {pid} lost {sim.inv.lost[pid]} committed records without an unclean election")
    return sim


def repl_unclean_on(seed: int, **kw) -> ReplicationSim:
    """The same with unclean.leader.election.enable: the lagging follower is elected (leader
    recovery state RECOVERING), the partition is back before the old leader, and the records
    committed meanwhile are lost (counted); the old leader truncates to follow."""
    sim = ReplicationSim(seed, rf=2, min_isr=1, unclean=True)
    pid, leader, follower = _last_isr_member_dies(sim)
    sim.until(lambda: sim.leader(pid) == follower, f"broker {follower} elected uncleanly")
    sim.progress(pid, 5)
    sim.restart(leader)
    sim.converge()
    if not sim.inv.lost[pid]:
        sim.inv.fail(f"partition {pid}: the unclean election lost nothing, the scenario did not exercise it")
    return sim


def repl_rejoin_then_leader_cut(seed: int, **kw) -> ReplicationSim:
    """RF 2, min.insync.replicas 1: the follower is down while the leader commits alone; back, it
    rejoins the ISR, and at that moment the leader is cut off: the follower is elected and must
    hold everything committed (a follower joins only once it reaches the HW and the epoch start)."""
    sim = ReplicationSim(seed, rf=2, min_isr=1)
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 5)
    p = sim.partition(pid)
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)
    sim.brokers[follower].kill()
    sim.until(lambda: sim.partition(pid).isr == [leader], f"broker {follower} out of the ISR")
    sim.progress(pid, 20)
    sim.restart(follower)
    sim.until(lambda: follower in sim.partition(pid).isr, f"broker {follower} back in the ISR")
    sim.router.isolate(leader, [CONTROLLER] + list(sim.brokers))
    sim.until(lambda: sim.leader(pid) == follower, f"broker {follower} elected")
    sim.progress(pid, 5)
    sim.converge()
    return sim


def repl_elr(seed: int, **kw) -> ReplicationSim:
    """KIP-966 (ELR on), RF 3, min.insync.replicas 2: one follower is cut off and leaves the ISR
    (at min ISR: not eligible), then the other (below min ISR: it stays eligible, and the HW stops),
    then the leader, the last ISR member, is killed: the ISR is empty and the ELR holds the leader
    and the second follower. Healed, the second follower is elected from the ELR (a clean election)
    and must hold everything committed; the first may not lead. The old leader comes back after
    an unclean shutdown (it leaves the ELR) and catches up."""
    sim = ReplicationSim(seed, rf=3, min_isr=2, elr=True)
    sim.start()
    pid = _victim_partition(sim)
    sim.progress(pid, 10)
    p = sim.partition(pid)
    leader = p.leader
    first, second = sim.rng.sample([r for r in p.replicas if r != leader], 2)
    sim.router.isolate(first, [CONTROLLER] + list(sim.brokers))
    sim.until(lambda: first not in sim.partition(pid).isr, f"broker {first} leaves the ISR of partition {pid}")
    sim.progress(pid, 5)
    sim.router.isolate(second, [CONTROLLER] + list(sim.brokers))
    sim.until(lambda: sim.partition(pid).isr == [leader], f"broker {second} leaves the ISR of partition {pid}")
    sim.s.run_for(sim.rng.randint(0, 1000))  # the leader alone: acks=1 only, nothing commits
    sim.brokers[leader].kill()
    sim.until(
        lambda: sim.leader(pid) == -1 and sim.partition(pid).isr == [], f"partition {pid} leaderless with an empty ISR"
    )
    elr = sorted(sim.partition(pid).elr)
    sim.router.heal()
    # whoever the controller elects is checked by the invariants (it must hold every committed
    # record) before the scenario's own expectations
    sim.until(
        lambda: sim.leader(pid) != -1 and sim.inv._current_leader(pid, sim.partition(pid)) is not None,
        f"a leader for partition {pid}",
    )
    sim.progress(pid, 5)
    if elr != sorted([leader, second]) or sim.leader(pid) != second:
        sim.inv.fail(
            f"partition {pid}: ELR {elr} (not the leader and broker {second}), broker {sim.leader(pid)} elected"
        )
    sim.converge()
    return sim


def repl_seed_4_1_5(seed: int, **kw) -> ReplicationSim:
    """Seed 001 §4.1.5 on two brokers, RF 2, min.insync.replicas 1: the follower fetches
    message2 and crashes before a fetch answer tells it HW 2; it restarts, rejoins the ISR, and
    the leader dies. The follower leads, and message2 must still be at offset 1: a restarted
    follower fetches from its log end with its last epoch, never truncating to its HW first."""
    sim = ReplicationSim(
        seed,
        brokers=2,
        partitions=1,
        rf=2,
        min_isr=1,  # no drops: the timing is the point
        faults=NetworkFaults(1, Scheduler(seed).rng.randint(2, 15)),
    )
    clients = sim.clients
    clients.producing = False
    sim.start()
    leader = sim.leader(0)
    follower = next(r for r in sim.partition(0).replicas if r != leader)

    def produced(value: int) -> bool:
        return value in [v for _, v in sim.brokers[leader].logs[0].records]

    values = []
    for i in (1, 2):
        value = 0
        while not value:
            sim.s.run_for(10)
            value = clients.send_one(0, -1)
        values.append(value)
        sim.until(lambda: produced(value), f"message{i} appended", 2_000)
    flog = sim.brokers[follower].logs[0]
    sim.until(lambda: flog.log_end_offset == 2 and flog.high_watermark < 2, "the follower holds message2, not HW 2")
    sim.brokers[follower].kill()
    sim.until(lambda: follower not in sim.partition(0).isr, f"broker {follower} out of the ISR")
    sim.restart(follower)
    sim.until(lambda: follower in sim.partition(0).isr, f"broker {follower} back in the ISR")
    sim.brokers[leader].kill()
    sim.until(
        lambda: sim.leader(0) == follower and sim.inv._current_leader(0, sim.partition(0)) is not None,
        f"broker {follower} leads",
    )
    if [v for _, v in flog.records[:2]] != values:
        sim.inv.fail(f"the new leader holds {flog.records[:2]}, not message1 and message2 {values}")
    clients.producing = True
    sim.progress(0, 10)
    sim.converge()
    return sim


def _only_full_copy(sim: ReplicationSim, bid: int) -> bool:
    """Would a power loss of ``bid`` leave a partition without a running ISR member that holds
    every committed record and reaches the controller? (Kafka acknowledges before fsync: it counts
    on one in-sync copy surviving.)"""
    blocked = sim.router.blocked
    for pid in range(sim.partitions):
        committed = len(sim.inv.ledger[pid])
        others = [
            r
            for r in sim.partition(pid).isr
            if r != bid
            and sim.brokers[r].running
            and pid in sim.brokers[r].logs
            and sim.brokers[r].logs[pid].log_end_offset >= committed
            and (r, CONTROLLER) not in blocked
            and (CONTROLLER, r) not in blocked
        ]
        if not others:
            return True
    return False


def repl_chaos(seed: int, **kw) -> ReplicationSim:
    """12 s of random faults, several at once, over a network that loses 2 % of the messages:
    process kills, power losses (only while another running ISR member that reaches the
    controller holds every committed record: losing the last in-sync page cache loses committed
    records in Kafka too, short of KIP-966's unclean-shutdown handling), restarts, a broker cut
    off, the brokers split in two, heals; unclean elections on a third of the seeds. Then
    everything heals and restarts and the replicas must converge."""
    rng = Scheduler(seed).rng
    sim = ReplicationSim(
        seed,
        partitions=rng.randint(1, 3),
        unclean=rng.random() < 0.33,
        faults=NetworkFaults(1, 20, drop=0.02, duplicate=0.02),
    )
    sim.start()
    s, rng = sim.s, sim.rng
    end = s.now + 12_000
    ids = sorted(sim.brokers)
    while s.now < end:
        s.run_for(rng.randint(100, 2000))
        up = [b for b in ids if sim.brokers[b].running]
        down = [b for b in ids if not sim.brokers[b].running]
        roll = rng.random()
        if roll < 0.2 and len(up) > 1:
            sim.brokers[rng.choice(up)].kill()
        elif roll < 0.3 and up:
            victim = rng.choice(up)
            if not _only_full_copy(sim, victim):
                sim.brokers[victim].kill(power_loss=True, torn_tail=rng.random() < 0.5)
                # no other fault, not even a lost message, until the controller fenced it (out of
                # the ISRs): elected while the others are cut off, it would lead without what it
                # lost (KIP-966's ELR and unclean-shutdown rules, not modelled, exist for this)
                faults, sim.router.faults = sim.router.faults, NetworkFaults(1, 20)
                sim.until(lambda: sim.controller.image.brokers[victim].fenced, f"broker {victim} fenced")
                sim.router.faults = faults
        elif roll < 0.6 and down:
            sim.restart(rng.choice(down))
        elif roll < 0.7:
            sim.router.isolate(rng.choice(ids), [CONTROLLER] + ids)
        elif roll < 0.8:
            shuffled = ids[:]
            rng.shuffle(shuffled)
            k = rng.randint(1, len(ids) - 1)
            sim.router.partition(set(shuffled[:k]) | {CONTROLLER}, set(shuffled[k:]))
        else:
            sim.router.heal()
    sim.converge()
    return sim


REPLICATION_SCENARIOS = {
    f.__name__: f
    for f in (
        repl_leader_kill,
        repl_follower_kill,
        repl_leader_partitioned,
        repl_disk_loss,
        repl_unclean_off,
        repl_unclean_on,
        repl_rejoin_then_leader_cut,
        repl_elr,
        repl_seed_4_1_5,
        repl_chaos,
    )
}

REPLICATION_BUGS = ("truncate_to_high_watermark", "hw_ignores_min_isr")
