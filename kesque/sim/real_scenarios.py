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
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from ..replication.replica_state import LeaderReplication
from ..server.channel import ChannelError
from .loop import Deadlock, deterministic_entropy
from .real import BROKERS, CONTROLLER, RealCluster, batch_summary, host_of, new_batch, quiet_logs, read_values
from .scheduler import InvariantViolation, LivenessViolation

TOPIC = "t"
PARTITIONS = 3
FAULTS = 6
STARTUP_S = 30.0
CONVERGE_S = 60.0
CHECK_EVERY_S = 0.1
RETRIABLE = {3, 6, 7, 19, 20, 54, 74, 75}  # unknown partition, not leader, timed out, not enough replicas ...


class AckLedger:
    """What the client was told: (partition, offset) -> value of each acknowledged record."""

    def __init__(self):
        self.acked: dict[tuple[int, int], bytes] = {}
        self.sent = 0

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
    """Live replicas agree below their high watermarks; at the end (``end``) on everything."""
    for p in range(partitions):
        views = []
        for b in BROKERS:
            part = sim.partition_state(b, topic, p)
            if part is not None:
                lg = part.log
                upto = lg.log_end_offset if end else lg.high_watermark
                views.append((b, upto, batch_summary(lg, upto) if end else _summary(sim, b, (topic, p), lg, upto)))
        for i, (a, ha, sa) in enumerate(views):
            for b, hb, sb in views[i + 1 :]:
                h = min(ha, hb)
                ca = [x for x in sa if x[1] < h]  # (each list holds whole batches below its own end)
                cb = [x for x in sb if x[1] < h]
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


async def _producer(sim: RealCluster, ledger: AckLedger, p: int, stop: asyncio.Event) -> None:
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
    """Every node up, and every partition of ``topic`` led, its ISR full, every replica at the end."""
    if not all(n.ready for n in sim.nodes.values()):
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


async def fault_schedule(sim: RealCluster, power_loss: bool) -> None:
    """FAULTS faults; with ``power_loss`` one kill (at most) is also a power loss, taken only while
    every other broker runs (Kafka acknowledges before fsync: the other ISR members hold what
    the victim loses)."""
    rng = sim.rng
    net = sim.loop.net
    pending: list[asyncio.Task] = []

    async def later(delay: float, fn, *args):
        await asyncio.sleep(delay)
        fn(*args)

    def restart(b: int) -> None:
        if not sim.nodes[b].alive:
            sim.nodes[b].start()

    for _ in range(FAULTS):
        await asyncio.sleep(rng.uniform(0.2, 2.0))
        roll = rng.random()
        victim = rng.choice(BROKERS)
        if roll < 0.45:
            if sim.nodes[victim].alive:
                lose = (
                    power_loss
                    and not sim.fs.cuts
                    and all(sim.nodes[b].alive for b in BROKERS)
                    and not net.cuts
                    and rng.random() < 0.7
                )
                sim.nodes[victim].kill(power_loss=lose)
                # back at once or later: before the controller fenced its old incarnation too
                pending.append(asyncio.ensure_future(later(rng.uniform(0.2, 4.0), restart, victim)))
        elif roll < 0.8:  # cut off from the controller and the other brokers, not from the client
            net.isolate(host_of(victim), [host_of(n) for n in (CONTROLLER, *BROKERS)])
            pending.append(asyncio.ensure_future(later(rng.uniform(0.5, 5.0), net.heal)))
        else:
            other = rng.choice([n for n in (CONTROLLER, *BROKERS) if n != victim])
            net.cut(host_of(victim), host_of(other))
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


async def _scenario(sim: RealCluster, ledger: AckLedger, power_loss: bool = False) -> None:
    await sim.until(lambda: all(n.ready for n in sim.nodes.values()), STARTUP_S, "every node started")
    code = await sim.client.create_topic(BROKERS[0], TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    if code:
        raise InvariantViolation(f"CreateTopics answered error {code}")
    await sim.until(lambda: converged(sim), STARTUP_S, f"{TOPIC} created with a full ISR")
    stop = asyncio.Event()
    workers = [asyncio.ensure_future(_producer(sim, ledger, p, stop)) for p in range(PARTITIONS)]
    workers.append(asyncio.ensure_future(_checker(sim, stop)))
    try:
        await fault_schedule(sim, power_loss)
        await asyncio.sleep(sim.rng.uniform(0.0, 1.0))
    finally:
        stop.set()
    await asyncio.gather(*workers)
    sim.loop.net.heal()
    for b in BROKERS:
        if not sim.nodes[b].alive:
            sim.nodes[b].start()
    await sim.until(
        lambda: converged(sim), CONVERGE_S, "every partition led, its ISR full and every replica at the leader's end"
    )
    replicas_agree(sim, end=True)
    await _read_back(sim, ledger)


def _run(seed: int, power_loss: bool = False) -> RealCluster:
    t0 = time.perf_counter()
    sim = RealCluster(seed)
    sim.inv = ledger = AckLedger()
    try:
        with deterministic_entropy(sim.rng), quiet_logs():
            sim.start_all()
            with sim.fs.patched() if power_loss else contextlib.nullcontext():
                try:
                    sim.run(_scenario(sim, ledger, power_loss))
                except Deadlock as e:
                    raise LivenessViolation(str(e)) from None
            if sim.failures:
                raise InvariantViolation("; ".join(sim.failures))
    finally:
        sim.close()
    sim.wall_s = time.perf_counter() - t0
    return sim


def real_acks_all(seed: int, **kw) -> RealCluster:
    """acks=all records through broker kills, restarts and network cuts (see the module doc)."""
    return _run(seed)


def real_power_loss(seed: int, **kw) -> RealCluster:
    """real_acks_all, and one of the kills (on most seeds) is a power loss: the victim's disk
    keeps only what it fsynced (:class:`~kesque.sim.powerloss.PowerLossFS`)."""
    return _run(seed, power_loss=True)


REAL_SCENARIOS = {f.__name__: f for f in (real_acks_all, real_power_loss)}
REAL_BUG_OWNERS = {"acks_all_before_isr": LeaderReplication}
