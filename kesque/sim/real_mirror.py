"""``real_mirror``: a mirror topic between two clusters of the real broker under the simulator
(:mod:`kesque.sim.real`; docs/mirror.md).

Two clusters of three combined nodes (brokers 2-4, the KRaft voters too) on one simulated loop:
the source at ``10.0.0.<id>`` and the destination at ``10.0.2.<id>``, each formatted with a cluster
id of its own. The client creates the topic ``out`` (three partitions, replication factor 3) on the
source, then, through the destination's KesqueClusterLinks API (key 10000, the requests of
``kesque cluster-links`` and ``kesque mirrors``), a cluster link to the source and the mirror topic
``out`` of it. On the source, at once: a plain producer (acks 1 or all, drawn by the seed), an
idempotent producer, and the transactional workers of ``real_transactions`` (commits, aborts,
transaction versions 1 and 2). Faults drawn from the seed: a source partition's leader killed and
restarted, a destination partition's leader killed and restarted (the mirror fetcher moves with
the leadership), the network between the clusters cut (all of it, or one destination broker's
links) and healed, and a source partition's log start moved forward with DeleteRecords now and
then (most often while the clusters are cut, so that the mirror loses records).

The invariants, once the network heals and every node is back:

* the destination converges, each replica of a cluster agrees with its leader, and every
  destination partition ends where its source ends;
* each destination partition's log holds, from its log start, the source's batches byte for byte
  at the same offsets: no gap, no duplicate (the source's batches read with the real ``Log``;
  below the source's log start only the destination's own contiguity is checked);
* a mirror restarts its log at a later offset only after the source deleted up to there
  (DeleteRecords), and the records it skipped are counted in its ``lost_records`` exactly: the
  counts of every destination leader's partition state add up to the offsets skipped by every
  restart (never a silent skip);
* read_committed (Fetch v12 with isolation 1 from each cluster's leader, aborted transactions
  filtered as the Java consumer does) reads the same records at the same offsets on both sides;

then a failover at the end: a transaction is left open on every source partition (its timeout
far away), the destination copies it, the mirror is paused and, once no broker fetches it, failed
over with the highest producer id and leader epoch its leaders report (the tool's steps): every
partition's last stable offset reaches its high watermark (the ABORT markers written for the
open transactions), read_committed shows none of their records, and a new idempotent producer of
the destination gets a producer id above every mirrored one and writes to the topic.

``--bug skip_abort_at_failover`` (a failover leaves the source's open transactions hanging) is
caught on every seed, ``--bug uncounted_mirror_loss`` (a mirror skips the records the source
deleted before it copied them without counting them) on the seeds where DeleteRecords outruns
the mirror (seed 1 is the first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field

from ..mirror.partition import MirrorPartitionState
from ..protocol import cluster_links as cl
from ..protocol.api import KESQUE_CLUSTER_LINKS
from ..protocol.api_keys import ApiKeys
from ..protocol.messages import Msg
from ..records.records import build_batch
from ..replication.partition import Partition
from ..server.channel import ChannelError
from ..server.drivers.mirror_fetcher import MirrorFetcherManager
from .loop import Deadlock, deterministic_entropy
from .real import BROKER_PORT, BROKERS, RealCluster, WireClient, quiet_logs
from .real_scenarios import (
    CHECK_EVERY_S,
    CONVERGE_S,
    FULL,
    RETRIABLE,
    STARTUP_S,
    Horizon,
    _summary,
    converged,
    replicas_agree,
    shortened,
)
from .real_txn import (
    IN,
    OUT,
    OUT_PARTITIONS,
    PRODUCE_RETRY,
    WORKERS,
    TxnClient,
    TxnLedger,
    Worker,
    _fetch,
    _produce,
    committed_records,
)
from .real_txn import OVERRIDES as TXN_OVERRIDES
from .scheduler import InvariantViolation, LivenessViolation, SimulationError

DST_SUBNET = "10.0.2"
DST_CLUSTER_ID = "AG1pcnJvci1kZXN0aW5hdA"
LINK = "src"
# the link's client settings, shortened as the brokers' are (real.SIM_CONFIG)
LINK_CONFIGS = {
    "bootstrap.servers": ",".join(f"10.0.0.{b}:{BROKER_PORT}" for b in BROKERS),
    "request.timeout.ms": "3000",
    "socket.connection.setup.timeout.ms": "1000",
    "retry.backoff.ms": "100",
    "metadata.max.age.ms": "5000",
    "fetch.max.wait.ms": "200",
}
HANG_TXN_TIMEOUT_MS = 600_000  # the transactions a failover finds open: the source never aborts them first
MIRRORED_S = 30.0  # the destination holds all the source has, once healed, within this
FAILOVER_S = 15.0
DUPLICATE_SEQUENCE_NUMBER = 46


@dataclass
class MirrorLedger:
    """What the run saw: records acknowledged to the non-transactional producers, the source's
    DeleteRecords, the mirror's log restarts and every partition state a destination leader made."""

    txns: TxnLedger = field(default_factory=TxnLedger)
    acked: int = 0
    deleted_to: dict[int, int] = field(default_factory=dict)  # partition -> highest low watermark
    restarts: list[tuple[str, int, int, int]] = field(default_factory=list)  # (topic, p, log end, offset)
    states: list[MirrorPartitionState] = field(default_factory=list)

    @property
    def committed(self) -> int:
        return self.acked + self.txns.committed


@contextlib.contextmanager
def _watched(ledger: MirrorLedger):
    """Record every mirror partition state made and every log restart of a mirror (the real
    methods run unchanged)."""
    init, restart = MirrorPartitionState.__init__, Partition.restart_mirror_at

    def state_init(st, now_ms):
        init(st, now_ms)
        ledger.states.append(st)

    def restart_at(part, offset):
        end = part.log.log_end_offset
        restart(part, offset)
        ledger.restarts.append((part.topic, part.partition, end, offset))

    MirrorPartitionState.__init__, Partition.restart_mirror_at = state_init, restart_at
    try:
        yield
    finally:
        MirrorPartitionState.__init__, Partition.restart_mirror_at = init, restart


class MirrorRun:
    def __init__(self, seed: int, horizon: Horizon):
        self.src = RealCluster(seed, TXN_OVERRIDES, controllers="combined")
        self.dst = RealCluster(
            seed, TXN_OVERRIDES, controllers="combined", subnet=DST_SUBNET, cluster_id=DST_CLUSTER_ID, shared=self.src
        )
        self.horizon = horizon
        self.rng = self.src.rng
        self.loop = self.src.loop
        self.ledger = MirrorLedger()

    # -- requests ----------------------------------------------------------------------------------
    async def links(self, req: dict, timeout_s: float = 10.0) -> dict:
        """One KesqueClusterLinks request to a destination broker, retried on another while
        unanswered or NOT_CONTROLLER-like errors last; the decoded answer."""
        deadline = self.loop.time() + timeout_s
        body = cl.encode_request(req)
        while True:
            for b in self.rng.sample(BROKERS, len(BROKERS)):
                try:
                    resp = await self.dst.client.channel.send(
                        b, KESQUE_CLUSTER_LINKS, cl.VERSION, body, decode=cl.decode_response
                    )
                except ChannelError:
                    continue
                if resp["error_code"] in (0, 36):  # none, or the topic/link made by a retry that went unanswered
                    return resp
                if resp["error_code"] not in RETRIABLE | {41, 15}:
                    return resp
            if self.loop.time() >= deadline:
                raise LivenessViolation(f"KesqueClusterLinks {req['operation']} unanswered for {timeout_s} s")
            await asyncio.sleep(0.2)

    async def call(self, sim: RealCluster, node: int, api: int, version: int, build, timeout_ms: int = 3000):
        return await sim.client.channel.send(
            node, api, version, build(Msg(api, version, request=True)), timeout_ms=timeout_ms
        )

    def leader(self, sim: RealCluster, p: int) -> int:
        view = sim.controller_view(OUT, p)
        return -1 if view is None else view[0]

    # -- the source's producers --------------------------------------------------------------------
    async def producer(self, idempotent: bool, stop: asyncio.Event) -> None:
        """Plain (acks drawn by the seed) or idempotent records to random partitions of ``out``."""
        sim, rng = self.src, self.rng
        acks = -1 if idempotent or rng.random() < 0.5 else 1
        pid, epoch, seq = -1, -1, {}
        n = 0
        while not stop.is_set():
            if idempotent and pid < 0:
                pid, epoch, _code = await self.init_producer_id(sim)
                seq = {}
                if pid < 0:
                    await asyncio.sleep(0.1)
                    continue
            p = rng.randrange(OUT_PARTITIONS)
            values = [b"%s-%d-%d" % (b"i" if idempotent else b"p", n, i) for i in range(rng.randint(1, 3))]
            n += 1
            batch = build_batch(
                [(None, v, ()) for v in values],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq.get(p, 0) if idempotent else -1,
                timestamp=sim.clock.now_ms(),
            )
            deadline = self.loop.time() + 5.0
            while not stop.is_set():
                leader = self.leader(sim, p)
                code = -2
                if leader >= 0:
                    try:
                        code, _base = await sim.client.produce(leader, OUT, p, batch, acks=acks)
                    except ChannelError:
                        code = -2
                if code in (0, DUPLICATE_SEQUENCE_NUMBER):
                    self.ledger.acked += len(values)
                    seq[p] = seq.get(p, 0) + len(values)
                    break
                if (code not in PRODUCE_RETRY and code != -2) or self.loop.time() >= deadline:
                    pid = -1  # a fatal error (or one that lasts): a new producer id
                    break
                await asyncio.sleep(rng.uniform(0.02, 0.1))
            await asyncio.sleep(rng.uniform(0.0, self.horizon.pace_s or 0.02))

    async def init_producer_id(
        self, sim: RealCluster, txn_id: str | None = None, timeout_ms: int = 60000, within_s: float = 0.0
    ) -> tuple[int, int, int]:
        """(producer id, epoch, error) of InitProducerId to the brokers in turn, tried again for
        ``within_s`` seconds while they fail."""
        deadline = self.loop.time() + within_s
        code = -2
        while True:
            for b in self.rng.sample(BROKERS, len(BROKERS)):
                try:
                    resp = await self.call(
                        sim,
                        b,
                        ApiKeys.INIT_PRODUCER_ID,
                        4,
                        lambda m: m(
                            transactional_id=txn_id, transaction_timeout=timeout_ms, producer_id=-1, producer_epoch=-1
                        ),
                    )
                except ChannelError:
                    continue
                code = int(resp.error_code)
                if code == 0:
                    return int(resp.producer_id), int(resp.producer_epoch), 0
            if self.loop.time() >= deadline:
                return -1, -1, code
            await asyncio.sleep(0.2)

    # -- faults ------------------------------------------------------------------------------------
    async def delete_records(self, p: int, offset: int) -> None:
        """DeleteRecords on the source's leader of ``out-p`` up to ``offset`` (-1: its HW)."""
        leader = self.leader(self.src, p)
        if leader < 0:
            return

        def build(m):
            part = m("DeleteRecordsPartition", partition_index=p, offset=offset)
            return m(topics=(m("DeleteRecordsTopic", name=OUT, partitions=(part,)),), timeout=2000)

        try:
            resp = await self.call(self.src, leader, ApiKeys.DELETE_RECORDS, 2, build)
        except ChannelError:
            return
        r = resp.topics[0].partitions[0]
        if int(r.error_code) == 0:
            low = int(r.low_watermark)
            self.ledger.deleted_to[p] = max(self.ledger.deleted_to.get(p, 0), low)
            self.src.fault_log.append(f"delete {OUT}-{p} below {low}")

    async def faults(self) -> None:
        rng, net = self.rng, self.loop.net
        src_hosts = [self.src.host(b) for b in BROKERS]
        dst_hosts = [self.dst.host(b) for b in BROKERS]
        pending: list[asyncio.Task] = []

        async def later(delay: float, fn, *args):
            await asyncio.sleep(delay)
            fn(*args)

        def restart(sim: RealCluster, b: int) -> None:
            if not sim.nodes[b].alive:
                sim.nodes[b].start()

        for _ in range(self.horizon.faults):
            await asyncio.sleep(rng.uniform(0.2, 2.0))
            roll = rng.random()
            p = rng.randrange(OUT_PARTITIONS)
            if roll < 0.5:
                sim, side = (self.src, "source") if roll < 0.25 else (self.dst, "destination")
                victim = self.leader(sim, p)
                if victim < 0 or not sim.nodes[victim].alive:
                    victim = rng.choice(BROKERS)
                if sim.nodes[victim].alive:
                    sim.nodes[victim].kill()
                    sim.fault_log.append(f"kill {side} {victim} (leader of {OUT}-{p})")
                    pending.append(asyncio.ensure_future(later(rng.uniform(0.2, 4.0), restart, sim, victim)))
            elif roll < 0.7:  # the clusters' links slowed (beyond the link's request timeout, at times)
                extra = rng.uniform(0.2, 4.0)
                for d in dst_hosts:
                    for s in src_hosts:
                        net.slow_down(d, s, extra)
                self.src.fault_log.append(f"slow the links between the clusters by {extra:.2f} s")
                pending.append(asyncio.ensure_future(later(rng.uniform(0.5, 5.0), net.heal)))
            elif roll < 0.9:
                cut_off = dst_hosts if rng.random() < 0.6 else [rng.choice(dst_hosts)]
                for d in cut_off:
                    for s in src_hosts:
                        net.cut(d, s)
                self.src.fault_log.append(f"cut {cut_off} from the source")
                pending.append(asyncio.ensure_future(later(rng.uniform(0.5, 5.0), net.heal)))
                if rng.random() < 0.6:
                    await asyncio.sleep(rng.uniform(0.1, 0.5))
                    await self.delete_records(p, -1)
            else:
                hw = (
                    self.src.partition_state(self.leader(self.src, p), OUT, p) if self.leader(self.src, p) > 0 else None
                )
                if hw is not None:
                    lg = hw.log
                    await self.delete_records(p, rng.randint(lg.log_start_offset, lg.high_watermark))
        await asyncio.gather(*pending)

    # -- reading back ------------------------------------------------------------------------------
    async def read_committed(self, sim: RealCluster, p: int) -> tuple[int, int, int, list[tuple[int, bytes]]]:
        """(log start, high watermark, last stable offset, [(offset, value)]) of ``out-p`` read
        with isolation read_committed from its leader, from its log start (aborted batches
        dropped as the Java consumer drops them)."""
        leader = self.leader(sim, p)
        part = sim.partition_state(leader, OUT, p)
        if part is None:
            raise InvariantViolation(f"{OUT}-{p} has no live leader to read")
        start = offset = part.log.log_start_offset
        out: list[tuple[int, bytes]] = []
        while True:
            resp = await self.call(sim, leader, ApiKeys.FETCH, 12, lambda m: _fetch(m, p, offset))
            fp = resp.responses[0].partitions[0]
            if int(fp.error_code):
                raise InvariantViolation(
                    f"read_committed fetch of {OUT}-{p} at {offset} on {sim.subnet} failed: error {fp.error_code}"
                )
            hw, lso = int(fp.high_watermark), int(fp.last_stable_offset)
            last, records = committed_records(fp, offset)
            out.extend(records)
            if last < offset or last + 1 >= lso:
                return start, hw, lso, out
            offset = last + 1

    def batches(self, sim: RealCluster, p: int) -> tuple[int, int, list[tuple[int, int, bytes]]]:
        """(log start, log end, [(base, last, bytes)]) of the leader's log of ``out-p``."""
        lg = sim.partition_state(self.leader(sim, p), OUT, p).log
        out = [(h.base_offset, h.last_offset, bytes(d)) for h, d in lg.read_batches(lg.log_start_offset)]
        return lg.log_start_offset, lg.log_end_offset, out

    def caught_up(self) -> bool:
        for p in range(OUT_PARTITIONS):
            s = self.src.partition_state(self.leader(self.src, p), OUT, p) if self.leader(self.src, p) > 0 else None
            d = self.dst.partition_state(self.leader(self.dst, p), OUT, p) if self.leader(self.dst, p) > 0 else None
            if s is None or d is None or d.log.log_end_offset != s.log.log_end_offset:
                return False
            if d.log.high_watermark != d.log.log_end_offset:
                return False
        return True

    def check_copies(self) -> None:
        """Every destination partition holds the source's batches byte for byte, contiguous from
        its log start, and ends where the source ends."""
        for p in range(OUT_PARTITIONS):
            s_start, s_end, s_batches = self.batches(self.src, p)
            d_start, d_end, d_batches = self.batches(self.dst, p)
            if d_end != s_end:
                raise InvariantViolation(f"{OUT}-{p} ends at {d_end} at the destination, at {s_end} at the source")
            source = {b: (last, data) for b, last, data in s_batches}
            expect = d_batches[0][0] if d_batches else d_end
            if d_batches and d_batches[0][0] > d_start:
                raise InvariantViolation(
                    f"{OUT}-{p}: the destination's log starts at {d_start}, its first batch at {expect}"
                )
            for base, last, data in d_batches:
                if base != expect:
                    what = "a gap" if base > expect else "a duplicate"
                    raise InvariantViolation(
                        f"{OUT}-{p}: {what} at the destination: batch at {base}, expected {expect}"
                    )
                expect = last + 1
                if base >= s_start or base in source:
                    if source.get(base) != (last, data):
                        raise InvariantViolation(
                            f"{OUT}-{p}: the destination's batch at {base} (to {last}) differs from the source's"
                        )
            if expect != d_end:
                raise InvariantViolation(f"{OUT}-{p}: the destination's batches end at {expect}, its log at {d_end}")

    def mirror_agrees(self) -> None:
        """During the run: below both leaders' high watermarks, from the later log start, the
        destination leader's batches are the source leader's (base, last offset, CRC)."""
        for p in range(OUT_PARTITIONS):
            views = []
            for sim in (self.src, self.dst):
                leader = self.leader(sim, p)
                part = sim.partition_state(leader, OUT, p) if leader > 0 else None
                if part is None or not part.is_leader:
                    break
                lg = part.log
                hw = lg.high_watermark
                views.append((hw, lg.log_start_offset, _summary(sim, leader, (OUT, p), lg, hw)))
            else:
                (hs, ls, ss), (hd, ld, sd) = views
                h, lo = min(hs, hd), max(ls, ld)
                cs = [x for x in ss if lo <= x[0] and x[1] < h]
                cd = [x for x in sd if lo <= x[0] and x[1] < h]
                if cs != cd:
                    diff = next((x, y) for x, y in zip(cs + [None], cd + [None]) if x != y)
                    raise InvariantViolation(
                        f"{OUT}-{p}: the destination's leader disagrees with the source's below offset {h} "
                        f"(first differing batch (base, last, crc): source {diff[0]}, destination {diff[1]})"
                    )

    def check_losses(self) -> None:
        """A mirror restarts later only where the source deleted, and counts what it skipped. Where
        the source deleted: the highest low watermark DeleteRecords answered, or the log start of a
        source replica now (a deletion whose answer was lost)."""
        skipped = 0
        for topic, p, end, offset in self.ledger.restarts:
            starts = [self.src.partition_state(b, OUT, p) for b in BROKERS]
            deleted = max([self.ledger.deleted_to.get(p, 0)] + [x.log.log_start_offset for x in starts if x])
            if offset > deleted:
                raise InvariantViolation(
                    f"{topic}-{p}: the mirror restarted at {offset}, above the source's deletions (up to "
                    f"{deleted}): records skipped that the source never deleted"
                )
            if end > 0 and offset > end:
                skipped += offset - end
        counted = sum(st.lost_records for st in self.ledger.states)
        if counted != skipped:
            raise InvariantViolation(
                f"the mirror's restarts skipped {skipped} records, its partitions' lost_records count {counted} "
                f"(restarts (topic, partition, log end, restart offset): {self.ledger.restarts})"
            )

    # -- the failover --------------------------------------------------------------------------------
    async def leave_open(self) -> list[int]:
        """A transaction left open on every source partition: producer ids."""
        pid, epoch = -1, -1
        deadline = self.loop.time() + 10.0
        while pid < 0:
            client = TxnClient(self.src)
            code, resp = await client.coordinator(
                1,
                "hang",
                ApiKeys.INIT_PRODUCER_ID,
                4,
                lambda m: m(
                    transactional_id="hang", transaction_timeout=HANG_TXN_TIMEOUT_MS, producer_id=-1, producer_epoch=-1
                ),
                lambda r: int(r.error_code),
            )
            if code == 0:
                pid, epoch = int(resp.producer_id), int(resp.producer_epoch)
            elif self.loop.time() >= deadline:
                raise LivenessViolation(f"InitProducerId of the transaction left open: error {code}")
            else:
                await asyncio.sleep(0.2)
        code, _ = await client.coordinator(
            1,
            "hang",
            ApiKeys.ADD_PARTITIONS_TO_TXN,
            3,
            lambda m: m(
                v3_and_below_transactional_id="hang",
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=(m("AddPartitionsToTxnTopic", name=OUT, partitions=tuple(range(OUT_PARTITIONS))),),
            ),
            lambda r: max(
                int(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition
            ),
        )
        if code:
            raise LivenessViolation(f"AddPartitionsToTxn of the transaction left open: error {code}")
        for p in range(OUT_PARTITIONS):
            batch = build_batch(
                [(None, b"hang-%d" % p, ())],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=0,
                transactional=True,
                timestamp=self.src.clock.now_ms(),
            )
            resp = await self.call(
                self.src,
                self.leader(self.src, p),
                ApiKeys.PRODUCE,
                11,
                lambda m: _produce(m, "hang", p, batch),
            )
            code = int(resp.responses[0].partition_responses[0].error_code)
            if code:
                raise LivenessViolation(f"the open transaction's produce to {OUT}-{p}: error {code}")
        return [pid]

    async def failover(self) -> None:
        await self.leave_open()
        await self.dst.until(self.caught_up, MIRRORED_S, "the transaction left open copied to the destination")
        resp = await self.links({"operation": cl.ALTER_MIRRORS, "mirror_op": "pause", "topics": [OUT]})
        if resp["error_code"]:
            raise InvariantViolation(f"pause: {resp['error_message']}")

        def described():
            return [
                n.server.mirror_fetchers.local_state(OUT, p)
                for n in self.dst.nodes.values()
                for p in range(OUT_PARTITIONS)
                if n.ready
            ]

        # no broker copies the topic any more (the describe's ``fetching``), read as the tool reads it
        await self.dst.until(
            lambda: not any(s and s["fetching"] for s in described()), FAILOVER_S, f"{OUT} paused everywhere"
        )
        states = [s for s in described() if s]
        resp = await self.links(
            {
                "operation": cl.ALTER_MIRRORS,
                "mirror_op": "failover",
                "topics": [OUT],
                "max_producer_id": max(s["max_producer_id"] for s in states),
                "max_epoch": max(s["latest_epoch"] for s in states),
            }
        )
        m = resp["mirrors"][0]
        if resp["error_code"] or m["error_code"]:
            raise InvariantViolation(f"failover: {resp['error_message'] or m['error_message']}")
        mirrored_max = max(s["max_producer_id"] for s in states)

        async def settled() -> bool:
            for p in range(OUT_PARTITIONS):
                _start, hw, lso, values = await self.read_committed(self.dst, p)
                if lso != hw:
                    return False
            return True

        deadline = self.loop.time() + FAILOVER_S
        while not await settled():
            if self.loop.time() >= deadline:
                raise LivenessViolation(
                    f"a transaction left open at the source hangs after the failover: the destination's last "
                    f"stable offset of {OUT} stays below its high watermark for {FAILOVER_S} s"
                )
            await asyncio.sleep(0.2)
        for p in range(OUT_PARTITIONS):
            *_x, values = await self.read_committed(self.dst, p)
            shown = [v for _o, v in values if v.startswith(b"hang-")]
            if shown:
                raise InvariantViolation(f"{OUT}-{p} shows {shown} of the transaction left open to read_committed")
        pid, _epoch, code = await self.init_producer_id(self.dst, within_s=FAILOVER_S)
        if code:
            raise LivenessViolation(f"InitProducerId at the destination after the failover: error {code}")
        if pid <= mirrored_max:
            raise InvariantViolation(
                f"a new producer of the destination got id {pid}, not above the mirrored ids (up to {mirrored_max})"
            )
        for p in range(OUT_PARTITIONS):
            code, _base = await self.dst.client.produce(
                self.leader(self.dst, p), OUT, p, build_batch([(None, b"after", ())], timestamp=self.dst.clock.now_ms())
            )
            if code:
                raise InvariantViolation(f"a produce to {OUT}-{p} after the failover failed: error {code}")

    # -- the run -----------------------------------------------------------------------------------
    async def scenario(self) -> None:
        src, dst = self.src, self.dst
        dst.client = WireClient(dst)
        every = list(src.nodes.values()) + list(dst.nodes.values())
        await src.until(lambda: all(n.ready for n in every), STARTUP_S, "every node of both clusters started")
        for topic, partitions in ((IN, WORKERS), (OUT, OUT_PARTITIONS)):
            code = await src.client.create_topic(BROKERS[0], topic, partitions, 3, {"min.insync.replicas": "2"})
            if code:
                raise InvariantViolation(f"CreateTopics {topic} answered error {code}")
        await src.until(lambda: converged(src, OUT, OUT_PARTITIONS), STARTUP_S, f"{OUT} created with a full ISR")
        link = [{"name": k, "value": v} for k, v in sorted(LINK_CONFIGS.items())]
        resp = await self.links({"operation": cl.CREATE_LINK, "link_name": LINK, "configs": link}, STARTUP_S)
        if resp["error_code"]:
            raise InvariantViolation(f"create the cluster link: {resp['error_message']}")
        create = {
            "operation": cl.CREATE_MIRROR,
            "link_name": LINK,
            "topics": [OUT],
            "source_topic": OUT,
            "replication_factor": 3,
        }
        deadline = self.loop.time() + STARTUP_S
        resp = await self.links(create, STARTUP_S)
        # a broker that has not yet applied the link's record answers that it does not exist
        # (seed 6): the tool's user tries again
        while "does not exist" in (resp["error_message"] or "") and self.loop.time() < deadline:
            await asyncio.sleep(0.2)
            resp = await self.links(create, STARTUP_S)
        if resp["error_code"]:
            raise InvariantViolation(f"create the mirror topic: {resp['error_message']}")
        await dst.until(
            lambda: converged(dst, OUT, OUT_PARTITIONS), STARTUP_S, f"the mirror {OUT} created with a full ISR"
        )

        stop = asyncio.Event()
        workers = [
            Worker(src, self.ledger.txns, i, self.rng.random() < 0.5, self.horizon.pace_s) for i in range(WORKERS)
        ]
        tasks = [asyncio.ensure_future(w.run(stop)) for w in workers]
        tasks += [asyncio.ensure_future(self.producer(idem, stop)) for idem in (False, True)]

        async def checker():
            while not stop.is_set():
                replicas_agree(src, topic=OUT, partitions=OUT_PARTITIONS)
                replicas_agree(dst, topic=OUT, partitions=OUT_PARTITIONS)
                self.mirror_agrees()
                await asyncio.sleep(CHECK_EVERY_S)

        tasks.append(asyncio.ensure_future(checker()))
        try:
            await asyncio.sleep(self.rng.uniform(1.0, 3.0))
            await self.faults()
            await asyncio.sleep(self.rng.uniform(0.0, 1.0))
        finally:
            stop.set()
        await asyncio.gather(*tasks)
        self.loop.net.heal()
        for sim in (src, dst):
            for node in sim.nodes.values():
                if not node.alive:
                    node.start()
        for sim in (src, dst):
            await sim.until(
                lambda s=sim: converged(s, OUT, OUT_PARTITIONS), CONVERGE_S, f"{OUT} on {sim.subnet} converged"
            )
        # the workers' last transactions time out at the source, their markers are copied
        await src.until(self._source_stable, CONVERGE_S, "every source transaction ended")
        await dst.until(self.caught_up, MIRRORED_S, "the destination holds all the source has")
        for sim in (src, dst):
            replicas_agree(sim, end=True, topic=OUT, partitions=OUT_PARTITIONS)
        self.check_copies()
        self.check_losses()
        for p in range(OUT_PARTITIONS):
            s_start, *_s, s_values = await self.read_committed(src, p)
            d_start, *_d, d_values = await self.read_committed(dst, p)
            lo = max(s_start, d_start)
            s_values = [x for x in s_values if x[0] >= lo]
            d_values = [x for x in d_values if x[0] >= lo]
            if s_values != d_values:
                diff = next((a, b) for a, b in zip(s_values + [None], d_values + [None]) if a != b)
                raise InvariantViolation(
                    f"read_committed of {OUT}-{p} from {lo} differs: source {diff[0]}, destination {diff[1]}"
                )
        await self.failover()

    def _source_stable(self) -> bool:
        for p in range(OUT_PARTITIONS):
            part = self.src.partition_state(self.leader(self.src, p), OUT, p)
            if part is None or part.log.last_stable_offset != part.log.high_watermark:
                return False
        return True


def real_mirror(seed: int, horizon: Horizon = FULL, **kw) -> RealCluster:
    """A mirror topic copied through kills, cuts and DeleteRecords, then failed over (module doc)."""
    t0 = time.perf_counter()
    run = MirrorRun(seed, horizon)
    sim = run.src
    sim.inv = run.ledger
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(deterministic_entropy(sim.rng))
            # the fetcher logs a loss at ERROR (DeleteRecords ahead of it): a run prints nothing
            stack.enter_context(quiet_logs(logging.CRITICAL))
            stack.enter_context(_watched(run.ledger))
            run.src.start_all()
            run.dst.start_all()
            try:
                sim.run(run.scenario())
            except Deadlock as e:
                raise LivenessViolation(str(e)) from None
            failures = run.src.failures + run.dst.failures
            if failures:
                raise InvariantViolation("; ".join(failures))
    except SimulationError as e:
        if e.args and isinstance(e.args[0], str):
            e.args = (e.args[0].replace(run.dst.root + os.sep, "dst/"), *e.args[1:])
        sim.stamp(e)
        raise
    finally:
        run.dst.close()
        run.src.close()
    sim.wall_s = time.perf_counter() - t0
    return sim


# the sweeps of make test: half the faults, producers and workers that think between requests
MIRROR_SHORT = Horizon(faults=3, pace_s=0.5)
REAL_MIRROR_SCENARIOS = {f.__name__: f for f in (real_mirror, shortened(real_mirror, MIRROR_SHORT))}
REAL_MIRROR_BUG_OWNERS = {"skip_abort_at_failover": MirrorFetcherManager, "uncounted_mirror_loss": MirrorPartitionState}
