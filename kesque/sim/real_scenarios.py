"""Scenarios of the real broker under the simulator (:mod:`kesque.sim.real`).

``real_acks_all``: a client produces acks=all records to a topic of three partitions,
replication factor 3 and ``min.insync.replicas=2``, while the simulator kills brokers (``kill
-9``: a restart later, on the same files), cuts a broker off from the controller and the other
brokers (the client still reaches it: a leader cut off keeps taking produce requests), and cuts
single links. Then the network heals, every broker comes back, and the cluster must converge
(every partition led, its ISR full, every replica at the leader's end). The invariants:

* an acknowledged offset is never acknowledged again with another record (checked at each
  acknowledgement);
* live replicas agree below their high watermarks (checked every 100 ms of simulated time and
  at the end);
* once healed, every acknowledged record is read back at its offset from the leader, with a
  Fetch through the wire.

``--bug acks_all_before_isr`` (the leader answers acks=all once it has the records) is caught.

``real_controller_quorum``: the same with a quorum of three controllers (nodes 1, 5, 6), the faults
falling on them (the active one among them) as often as on the brokers; converged also means one
active controller.

Each scenario has a ``_short`` twin (:func:`shortened`, :data:`SHORT`): three faults instead of
six and producers that think between records, a third of the CPU, for the seed sweeps of
``make test`` (tests/test_sim_real_sweep*.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from dataclasses import dataclass

from ..replication.replica_state import RECOVERING, LeaderReplication
from ..server.channel import ChannelError
from ..storage.local_log import LocalLog
from .faultfs import FaultFS
from .loop import Deadlock, deterministic_entropy
from .real import BROKERS, RealCluster, batch_summary, host_of, new_batch, quiet_logs, read_values
from .scheduler import InvariantViolation, LivenessViolation, SimulationError

TOPIC = "t"
PARTITIONS = 3
FAULTS = 6
STARTUP_S = 30.0
CONVERGE_S = 60.0
CHECK_EVERY_S = 0.1
DISK_S = 20.0  # a failed dir's fault reached, and its partitions moved off, within this
PROBE_AFTER_S = 5.0  # then the client writes to a partition whose ISR still holds the failed replica
# unknown partition, not leader, timed out, not enough replicas, storage error ...
RETRIABLE = {3, 6, 7, 19, 20, 54, 56, 74, 75}


@dataclass(frozen=True)
class Horizon:
    """How much of a run one seed takes: the faults the schedule injects, and a client's think
    time between two records (or transactions), drawn from ``uniform(0, pace_s)``; 0: none, each
    client sends its next request as soon as the last is answered."""

    faults: int = FAULTS
    pace_s: float = 0.0


FULL = Horizon()
# the seed sweeps of ``make test`` (the ``*_short`` scenarios): half the faults, and producers
# that wait up to 50 ms after each acknowledgement, which cuts a seed's CPU about 3-4 times (a
# seed's cost follows the records acknowledged: about 0.7 ms of CPU each); the kinds of fault,
# their timing and the invariants are those of the full runs, which ``make sim`` sweeps too
SHORT = Horizon(faults=3, pace_s=0.05)


class AckLedger:
    """What the client was told: (partition, offset) -> value of each acknowledged record."""

    def __init__(self):
        self.acked: dict[tuple[int, int], bytes] = {}
        self.sent = 0
        self.forgotten = 0  # acknowledged records an unclean election may have lost (see forget)

    @property
    def committed(self) -> int:
        return len(self.acked)

    def ack(self, partition: int, offset: int, value: bytes) -> None:
        old = self.acked.get((partition, offset))
        if old is not None and old != value:
            raise InvariantViolation(
                f"{TOPIC}-{partition} offset {offset} acknowledged twice: {old!r}, then {value!r} "
                "(an acknowledged record was lost)"
            )
        self.acked[(partition, offset)] = value

    def forget(self, partition: int) -> None:
        """The partition's leader was elected uncleanly: what it acknowledged before is no longer
        promised (Kafka's guarantee holds while an in-sync replica keeps the record)."""
        mine = [k for k in self.acked if k[0] == partition]
        for k in mine:
            del self.acked[k]
        self.forgotten += len(mine)


def unclean_elections(sim: RealCluster, ledger: AckLedger):
    """An invariant hook: a leader elected uncleanly (leader_recovery_state RECOVERING) that lost
    power in this run may lack acknowledged records, and Kafka 4.4 elects one without
    unclean.leader.election.enable: with ELR on, when the ISR and the ELR are empty (the other
    replicas were taken out of both as they registered after a kill -9, which Kafka cannot tell
    from a power loss) the last known leader is elected (PartitionChangeBuilder's
    canElectLastKnownLeader, "balanced recovery"). The ledger forgets that partition's
    acknowledgements from then on; the election is written in the fault log."""
    seen: set[tuple[int, int]] = set()

    def check() -> None:
        if not sim.power_lost:
            return
        active = sim.active_controllers()
        t = active[0].server.controller.image.topic(TOPIC) if active else None
        if t is None:
            return
        for p, reg in t.partitions.items():
            key = (p, reg.leader_epoch)
            if reg.leader_recovery_state == RECOVERING and reg.leader in sim.power_lost and key not in seen:
                seen.add(key)
                ledger.forget(p)
                sim.__dict__.setdefault("unclean_partitions", set()).add((TOPIC, p))
                sim.fault_log.append(f"last known leader {reg.leader} of {TOPIC}-{p} elected after its power loss")

    return check


def _summary(sim: RealCluster, b: int, tp: tuple[str, int], lg, upto: int) -> list:
    """batch_summary(lg, upto), read on from where the last check of this log stopped (the
    batches below a high watermark do not change; a log that shrank is read again)."""
    cache = sim.__dict__.setdefault("summaries", {})
    held = cache.get((b, tp))
    if held is None or held[0] is not lg or held[1] > lg.log_end_offset or held[1] > upto:
        held = (lg, 0, [])
    _lg, done, batches = held
    batches = batches + batch_summary(lg, upto, done)
    cache[(b, tp)] = (lg, batches[-1][1] + 1 if batches else 0, batches)
    return batches


def replicas_agree(sim: RealCluster, end: bool = False, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    """Live replicas agree below their high watermarks; at the end (``end``) on everything. A
    partition led uncleanly (:func:`unclean_elections`) is checked at the end only: until they
    truncate to the new leader, replicas that were out of the ISR hold a high watermark of the old
    history. Two replicas are compared from the later of their log starts (a follower learns a
    log start moved by DeleteRecords, or by a mirror's restart, from its next fetch)."""
    unclean = sim.__dict__.get("unclean_partitions", ())
    for p in range(partitions):
        if not end and (topic, p) in unclean:
            continue
        views = []
        for b in BROKERS:
            part = sim.partition_state(b, topic, p)
            if part is not None:
                lg = part.log
                upto = lg.log_end_offset if end else lg.high_watermark
                summary = batch_summary(lg, upto) if end else _summary(sim, b, (topic, p), lg, upto)
                views.append((b, upto, lg.log_start_offset, summary))
        for i, (a, ha, la, sa) in enumerate(views):
            for b, hb, lb, sb in views[i + 1 :]:
                h, lo = min(ha, hb), max(la, lb)
                ca = [x for x in sa if lo <= x[0] and x[1] < h]  # (each list holds whole batches below its own end)
                cb = [x for x in sb if lo <= x[0] and x[1] < h]
                if ca != cb:
                    diff = next((x, y) for x, y in zip(ca + [None], cb + [None]) if x != y)
                    raise InvariantViolation(
                        f"{topic}-{p}: brokers {a} and {b} disagree below offset {h} "
                        f"(first differing batch (base, last, crc): {diff[0]} vs {diff[1]})"
                    )


async def _metadata(sim: RealCluster, rng) -> dict:
    for b in rng.sample(BROKERS, len(BROKERS)):
        try:
            md = await sim.client.metadata(b, TOPIC)
        except ChannelError:
            continue
        if len(md) == PARTITIONS:
            return md
    return {}


async def _producer(sim: RealCluster, ledger: AckLedger, p: int, stop: asyncio.Event, pace_s: float = 0.0) -> None:
    rng = sim.rng
    leader = -1
    seq = 0
    while not stop.is_set():
        if leader < 0:
            md = await _metadata(sim, rng)
            leader = md.get(p, (-1, []))[0]
            if leader < 0:
                await asyncio.sleep(0.1)
                continue
        value = b"p%d-%d" % (p, seq)
        seq += 1
        ledger.sent += 1
        try:
            code, base = await sim.client.produce(leader, TOPIC, p, new_batch(value, sim.clock.now_ms()))
        except ChannelError:
            leader = -1
            await asyncio.sleep(0.05)
            continue
        if code == 0:
            ledger.ack(p, base, value)
            if pace_s:
                await asyncio.sleep(rng.uniform(0.0, pace_s))
        else:
            if code not in RETRIABLE:
                raise InvariantViolation(f"produce to {TOPIC}-{p} failed with error {code}")
            leader = -1
            await asyncio.sleep(0.05)


async def _checker(sim: RealCluster, stop: asyncio.Event) -> None:
    while not stop.is_set():
        replicas_agree(sim)
        await asyncio.sleep(CHECK_EVERY_S)


def converged(sim: RealCluster, topic: str = TOPIC, partitions: int = PARTITIONS) -> bool:
    """Every node up, one active controller, and every partition of ``topic`` led, its ISR full,
    every replica at the end."""
    if not all(n.ready for n in sim.nodes.values()) or len(sim.active_controllers()) != 1:
        return False
    for p in range(partitions):
        view = sim.controller_view(topic, p)
        if view is None or view[0] not in BROKERS or sorted(view[1]) != sorted(BROKERS):
            return False
        parts = [sim.partition_state(b, topic, p) for b in BROKERS]
        if any(x is None for x in parts) or not parts[BROKERS.index(view[0])].is_leader:
            return False
        ends = {x.log.log_end_offset for x in parts}
        if len(ends) != 1 or any(x.log.high_watermark != x.log.log_end_offset for x in parts):
            return False
    return True


def _victim(sim: RealCluster, rng) -> int:
    """A broker; with a quorum of controllers, a controller as often (half of those the active
    one, when there is one)."""
    if len(sim.controllers) == 1:
        return rng.choice(BROKERS)
    if rng.random() < 0.5:
        return rng.choice(BROKERS)
    active = sim.active_controllers()
    if active and rng.random() < 0.5:
        return active[0].node_id
    return rng.choice(sim.controllers)


async def fault_schedule(sim: RealCluster, power_loss: bool, spare=(), faults: int = FAULTS) -> None:
    """``faults`` faults; with ``power_loss`` one kill (at most) is also a power loss, taken only while
    every other broker runs (Kafka acknowledges before fsync: the other ISR members hold what
    the victim loses). The brokers of ``spare`` are cut off, never killed. With a quorum of
    controllers, controllers are killed, isolated and cut off too (power losses stay with the
    brokers)."""
    rng = sim.rng
    net = sim.loop.net
    pending: list[asyncio.Task] = []
    everyone = [host_of(n) for n in sim.nodes]

    async def later(delay: float, fn, *args):
        await asyncio.sleep(delay)
        fn(*args)

    def restart(b: int) -> None:
        if not sim.nodes[b].alive:
            sim.nodes[b].start()

    for _ in range(faults):
        await asyncio.sleep(rng.uniform(0.2, 2.0))
        roll = rng.random()
        victim = _victim(sim, rng)
        active = [n.node_id for n in sim.active_controllers()]
        what = f"{victim}{' (the active controller)' if victim in active[:1] else ''}"
        if roll < 0.45:
            if sim.nodes[victim].alive and victim not in spare:
                lose = (
                    power_loss
                    and victim in BROKERS
                    and not sim.fs.cuts
                    and all(sim.nodes[b].alive for b in BROKERS)
                    and not net.cuts
                    and rng.random() < 0.7
                )
                sim.nodes[victim].kill(power_loss=lose)
                sim.fault_log.append(f"{'power loss' if lose else 'kill'} {what}")
                # back at once or later: before the controller fenced its old incarnation too
                pending.append(asyncio.ensure_future(later(rng.uniform(0.2, 4.0), restart, victim)))
        elif roll < 0.8:  # cut off from the controllers and the brokers, not from the client
            net.isolate(host_of(victim), everyone)
            sim.fault_log.append(f"isolate {what}")
            pending.append(asyncio.ensure_future(later(rng.uniform(0.5, 5.0), net.heal)))
        else:
            other = rng.choice([n for n in sim.nodes if n != victim])
            net.cut(host_of(victim), host_of(other))
            sim.fault_log.append(f"cut {what} from {other}")
            pending.append(asyncio.ensure_future(later(rng.uniform(0.5, 5.0), net.heal)))
    await asyncio.gather(*pending)


async def _read_back(sim: RealCluster, ledger: AckLedger) -> None:
    for p in range(PARTITIONS):
        leader = sim.controller_view(TOPIC, p)[0]
        values: dict[int, bytes] = {}
        offset, hw = 0, 1
        while offset < hw:
            code, hw, data = await sim.client.fetch(leader, TOPIC, p, offset)
            if code:
                raise InvariantViolation(f"fetch of {TOPIC}-{p} at {offset} from leader {leader} failed: error {code}")
            got = read_values(data)
            if not got:
                break
            values.update(got)
            offset = max(got) + 1
        for (q, off), value in sorted(ledger.acked.items()):
            if q == p and values.get(off) != value:
                raise InvariantViolation(
                    f"{TOPIC}-{p}: acknowledged record {value!r} at offset {off} reads back as "
                    f"{values.get(off)!r} from leader {leader} (high watermark {hw})"
                )


class DiskFault:
    """One broker's log dir fails mid-run (``--`` :class:`~kesque.sim.faultfs.FaultFS`): armed at
    a random time on a dir holding a replica of the topic, at a write point the run reaches."""

    POINTS = ("segment-append", "checkpoint", "fsync")

    def __init__(self, sim: RealCluster):
        self.sim = sim
        self.victim = sim.rng.choice(BROKERS)
        self.fs: FaultFS | None = None
        self.point = sim.rng.choice(self.POINTS)
        self.err = errno.EIO if self.point == "fsync" else sim.rng.choice((errno.ENOSPC, errno.EIO))
        self.dir: str | None = None
        self.partitions: list[int] = []  # the topic's replicas of the victim in that dir

    async def arm(self) -> None:
        sim = self.sim
        await asyncio.sleep(sim.rng.uniform(0.5, 4.0))
        node = sim.nodes[self.victim]
        by_dir: dict[str, list[int]] = {}
        for p in range(PARTITIONS):
            part = sim.partition_state(self.victim, TOPIC, p)
            if part is not None:
                by_dir.setdefault(part.log.parent_dir, []).append(p)
        if not by_dir:
            return
        self.dir = sim.rng.choice(sorted(by_dir))
        self.partitions = by_dir[self.dir]
        self.metadata_dir = self.dir == os.path.abspath(node.log_dirs[0])
        self.fs.root = self.dir
        self.fs.arm(self.point, self.err)

    def check(self) -> None:
        """Nothing is written in the failed dir after its first failure (Kafka's dir goes offline)."""
        if self.fs is not None and self.fs.late_writes:
            raise InvariantViolation(
                f"broker {self.victim} wrote {self.fs.late_writes[0]} after its log dir {self.dir} failed "
                f"({self.point}, {errno.errorcode[self.err]})"
            )

    def moved_off(self) -> bool:
        """The controller took the failed dir's replicas out of leadership and ISR (or the broker
        halted: its metadata log dir failed). A partition whose last ISR member was that replica
        stays offline with it in its ISR (Kafka keeps the last member), until the disk returns."""
        if self.sim.nodes[self.victim].halted:
            return True
        for p in self.partitions:
            view = self.sim.controller_view(TOPIC, p)
            if view is None or view[0] == self.victim:
                return False
            if self.victim in view[1] and (view[0] != -1 or view[1] != [self.victim]):
                return False
        return True


async def _until_moved_off(sim: RealCluster, ledger: AckLedger, disk: DiskFault) -> None:
    """Wait for :meth:`DiskFault.moved_off`; after PROBE_AFTER_S, the client writes a record a
    second to each of the dir's partitions whose ISR still holds the victim. A follower's fetch
    sent before its dir failed can reach the leader after the controller took the replica out of
    the ISR: the leader finds it caught up and adds it back, as Kafka's Partition does (the
    controller checks fenced, shutting down and the broker epoch, not the directory; seed 84 of
    real_disk_failure_short). The broker names the dir in every heartbeat, but the controller acts
    on a dir once, and a leader keeps a follower at its log end in the ISR (Kafka's
    Replica.isCaughtUp): only a write makes the replica lag, and leave the ISR after
    replica.lag.time.max.ms, as in Kafka."""
    what = f"partitions {disk.partitions} moved off broker {disk.victim}, whose log dir {disk.dir} failed"
    deadline = sim.loop.time() + DISK_S
    probe_at = sim.loop.time() + PROBE_AFTER_S
    while not disk.moved_off():
        now = sim.loop.time()
        if now >= deadline:
            raise LivenessViolation(f"not reached within {DISK_S} s of simulated time: {what}")
        if now >= probe_at:
            probe_at = now + 1.0
            for p in disk.partitions:
                view = sim.controller_view(TOPIC, p)
                if view is None or disk.victim not in view[1] or view[0] in (-1, disk.victim):
                    continue
                value = b"probe%d-%d" % (p, int(now * 1000))
                sim.fault_log.append(f"probe {TOPIC}-{p}: broker {disk.victim} back in its ISR")
                try:
                    code, base = await sim.client.produce(view[0], TOPIC, p, new_batch(value, sim.clock.now_ms()))
                except ChannelError:
                    continue
                if code == 0:
                    ledger.ack(p, base, value)
        await asyncio.sleep(0.05)


async def _scenario(
    sim: RealCluster, ledger: AckLedger, power_loss: bool, disk: DiskFault | None, horizon: Horizon
) -> None:
    await sim.until(lambda: all(n.ready for n in sim.nodes.values()), STARTUP_S, "every node started")
    code = await sim.client.create_topic(BROKERS[0], TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    if code:
        raise InvariantViolation(f"CreateTopics answered error {code}")
    await sim.until(lambda: converged(sim), STARTUP_S, f"{TOPIC} created with a full ISR")
    stop = asyncio.Event()
    workers = [asyncio.ensure_future(_producer(sim, ledger, p, stop, horizon.pace_s)) for p in range(PARTITIONS)]
    workers.append(asyncio.ensure_future(_checker(sim, stop)))
    armed = asyncio.ensure_future(disk.arm()) if disk is not None else None
    if armed is not None:
        workers.append(armed)
    try:
        await fault_schedule(sim, power_loss, (disk.victim,) if disk is not None else (), horizon.faults)
        await asyncio.sleep(sim.rng.uniform(0.0, 1.0))
        if armed is not None:
            # the producers write on until the armed fault is reached: a segment append needs
            # records (a short fault schedule ended before the fault was armed, seed 47)
            await armed
            if disk.dir is not None:
                await sim.until(
                    lambda: disk.fs.hits > 0, DISK_S, f"the fault armed at {disk.point} in {disk.dir} is reached"
                )
    finally:
        stop.set()
    await asyncio.gather(*workers)
    sim.loop.net.heal()
    if disk is not None and disk.dir is not None:
        await sim.until(lambda: disk.fs.hits > 0, DISK_S, f"the fault armed at {disk.point} in {disk.dir} is reached")
        await _until_moved_off(sim, ledger, disk)
        disk.fs.clear()  # the disk is replaced (or space freed); the broker restarts on it
        sim.nodes[disk.victim].kill()
    for node in sim.nodes.values():
        if not node.alive:
            node.start()
    await sim.until(
        lambda: converged(sim), CONVERGE_S, "every partition led, its ISR full and every replica at the leader's end"
    )
    replicas_agree(sim, end=True)
    await _read_back(sim, ledger)


def _run(
    seed: int, power_loss: bool = False, disk: bool = False, controllers: int = 1, horizon: Horizon = FULL
) -> RealCluster:
    t0 = time.perf_counter()
    sim = RealCluster(seed, dirs_per_node=2 if disk else 1, controllers=controllers)
    sim.inv = ledger = AckLedger()
    sim.invariants.append(unclean_elections(sim, ledger))
    fault = DiskFault(sim) if disk else None
    try:
        with deterministic_entropy(sim.rng), quiet_logs():
            sim.start_all()
            if fault is not None:
                fault.fs = FaultFS(sim.root)  # armed on one dir later
                sim.invariants.append(fault.check)
            with contextlib.ExitStack() as stack:
                if power_loss:
                    stack.enter_context(sim.fs.patched())
                if fault is not None:
                    stack.enter_context(fault.fs.patched())
                try:
                    sim.run(_scenario(sim, ledger, power_loss, fault, horizon))
                except Deadlock as e:
                    raise LivenessViolation(str(e)) from None
            if sim.failures:
                raise InvariantViolation("; ".join(sim.failures))
    except SimulationError as e:
        sim.stamp(e)
        raise
    finally:
        sim.close()
    sim.wall_s = time.perf_counter() - t0
    return sim


def real_acks_all(seed: int, horizon: Horizon = FULL, **kw) -> RealCluster:
    """acks=all records through broker kills, restarts and network cuts (see the module doc)."""
    return _run(seed, horizon=horizon)


def real_power_loss(seed: int, horizon: Horizon = FULL, **kw) -> RealCluster:
    """real_acks_all, and one of the kills (on most seeds) is a power loss: the victim's disk
    keeps only what it fsynced (:class:`~kesque.sim.powerloss.PowerLossFS`)."""
    return _run(seed, power_loss=True, horizon=horizon)


def real_disk_failure(seed: int, horizon: Horizon = FULL, **kw) -> RealCluster:
    """real_acks_all on brokers with two log dirs, and one dir of one broker fails mid-run
    (ENOSPC or EIO at a segment append, a checkpoint or an fsync): the dir goes offline, nothing
    is written there after, the controller moves its partitions' leaderships and ISR off it (the
    metadata log's dir halts the broker), no acknowledged record is lost; then the disk is
    replaced and the broker restarts on it. ``--bug keep_writing_after_io_error`` (the log takes
    an I/O error as transient and stays online) is caught."""
    return _run(seed, disk=True, horizon=horizon)


def real_controller_quorum(seed: int, horizon: Horizon = FULL, **kw) -> RealCluster:
    """real_acks_all with a separate quorum of three KRaft controllers (nodes 1, 5, 6), and the
    faults fall on the controllers as often as on the brokers: the active controller, or any,
    killed and restarted, isolated, cut from one node. Once healed there is one active
    controller, and the rest converges as in real_acks_all."""
    return _run(seed, controllers=3, horizon=horizon)


def shortened(scenario, horizon: Horizon = SHORT):
    """``scenario`` on ``horizon``: the ``<name>_short`` scenario of the seed sweeps."""

    def short(seed: int, **kw) -> RealCluster:
        return scenario(seed, horizon=horizon, **kw)

    short.__name__ = f"{scenario.__name__}_short"
    short.__doc__ = f"{scenario.__name__} on a shorter horizon ({horizon}): the seed sweeps of make test."
    return short


REAL_SCENARIOS = {
    f.__name__: f
    for full in (real_acks_all, real_power_loss, real_disk_failure, real_controller_quorum)
    for f in (full, shortened(full))
}
REAL_BUG_OWNERS = {"acks_all_before_isr": LeaderReplication, "keep_writing_after_io_error": LocalLog}
