"""``real_transactions``: transactions and a consumer group's offsets on the real broker under
the simulator (:mod:`kesque.sim.real`).

Three transactional workers run the consume-transform-produce loop of exactly-once processing
(a Kafka Streams task, seed 003): worker ``i`` reads input partition ``in-i`` (its records are
virtual: record ``n`` is ``i-n``), and each transaction takes the next few input records, writes
each to a random partition of the output topic ``out`` as a transactional batch, commits the
input position with TxnOffsetCommit for group ``g``, and ends with EndTxn, mostly commit, some
abort (after which the worker goes back to its committed position, as an application does).
Each worker speaks one client generation, drawn by the seed: transaction version 1
(AddPartitionsToTxn v3, Produce v11, TxnOffsetCommit v3, EndTxn v4) or version 2 (KIP-890:
partitions added by Produce v12, TxnOffsetCommit v5, EndTxn v5 bumping the epoch). Any failure
inside a transaction (a fatal error, a retriable one that lasts) ends it with InitProducerId,
which fences and aborts it, and the worker reads its committed position again (OffsetFetch with
``require_stable``). Meanwhile brokers are killed and restarted and links cut, as in
``real_acks_all``; at the end some worker leaves its last transaction open, for the
coordinator's timeout to abort.

The invariants, once the network heals and every broker is back:

* no transaction hangs: each output partition's last stable offset reaches its high
  watermark within the transaction timeout and the abort sweep's interval (and the bound of a
  coordinator moving);
* a read_committed read of every output partition (aborted batches filtered with the Fetch
  response's aborted transactions, as the Java consumer does) holds every record of each
  transaction whose commit was acknowledged, none of a transaction that was aborted or never
  asked to commit, all or nothing of one whose commit went unanswered, and no input record
  twice;
* exactly once: the input records in the output are exactly those below the worker's
  committed offset in ``__consumer_offsets``, each once.

``--bug skip_last_marker`` (the coordinator's marker sender reports the last partition of a
marker request written without writing it) is caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from ..protocol.api_keys import ApiKeys
from ..protocol.messages import Msg
from ..records import batch as rb
from ..records.records import build_batch, iter_records
from ..server.channel import ChannelError
from ..server.txn_channels import TxnMarkerSender
from .loop import Deadlock, deterministic_entropy
from .real import BROKERS, RealCluster, quiet_logs
from .real_scenarios import (
    CHECK_EVERY_S,
    CONVERGE_S,
    FULL,
    STARTUP_S,
    Horizon,
    converged,
    fault_schedule,
    replicas_agree,
    shortened,
)
from .scheduler import InvariantViolation, LivenessViolation, SimulationError

IN, OUT, GROUP = "in", "out", "g"
WORKERS = 3
OUT_PARTITIONS = 3
TXN_TIMEOUT_MS = 5000
ABORT_SWEEP_MS = 1000
STEP_DEADLINE_S = 8.0  # a step retried this long ends the transaction
SETTLE_S = CONVERGE_S + (TXN_TIMEOUT_MS + ABORT_SWEEP_MS) / 1000
OVERRIDES = {
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ABORT_SWEEP_MS,
}

# coordinator errors a client retries after finding the coordinator again: REQUEST_TIMED_OUT,
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, NOT_ENOUGH_REPLICAS(_AFTER_APPEND)
# and CONCURRENT_TRANSACTIONS (the previous transaction still writing its markers)
COORD_RETRY = frozenset({7, 14, 15, 16, 19, 20, 51})
# produce errors after which the very same batch is resent to the leader looked up again
PRODUCE_RETRY = frozenset({3, 6, 7, 19, 20, 51, 54, 74, 75, 100})
NETWORK = -2  # the request got no answer (ChannelError): retried as a retriable error
UNSTABLE_OFFSET_COMMIT = 88
DUPLICATE_SEQUENCE_NUMBER = 46


class StepFailed(Exception):
    """A transaction's step failed for good: the worker ends the transaction with InitProducerId."""


@dataclass
class Txn:
    worker: int
    attempt: int
    lo: int  # input records [lo, hi)
    hi: int
    tv2: bool
    state: str = "open"  # open -> commit? -> committed, or aborted
    values: dict[bytes, int] = field(default_factory=dict)  # value -> output partition


class TxnLedger:
    """What the workers were told, by transaction attempt."""

    def __init__(self):
        self.txns: dict[int, Txn] = {}
        self.attempts = 0

    def begin(self, worker: int, lo: int, hi: int, tv2: bool) -> Txn:
        self.attempts += 1
        txn = self.txns[self.attempts] = Txn(worker, self.attempts, lo, hi, tv2)
        return txn

    @property
    def committed(self) -> int:
        """Records of acknowledged commits (the figure a run reports)."""
        return sum(len(t.values) for t in self.txns.values() if t.state == "committed")


def value_of(worker: int, n: int, attempt: int) -> bytes:
    return b"%d-%d-%d" % (worker, n, attempt)


def parse_value(v: bytes) -> tuple[int, int, int]:
    w, n, a = v.split(b"-")
    return int(w), int(n), int(a)


class TxnClient:
    """The protocol calls of one transactional worker, over the cluster's WireClient channel."""

    def __init__(self, sim: RealCluster):
        self.sim = sim
        self.coords: dict[tuple[int, str], int] = {}

    async def call(self, node: int, api: int, version: int, build, timeout_ms: int | None = None):
        m = Msg(api, version, request=True)
        return await self.sim.client.channel.send(node, api, version, build(m), timeout_ms=timeout_ms)

    async def find(self, key_type: int, key: str) -> int | None:
        node = self.coords.get((key_type, key))
        if node is not None:
            return node
        for b in self.sim.rng.sample(BROKERS, len(BROKERS)):
            try:
                resp = await self.call(
                    b,
                    ApiKeys.FIND_COORDINATOR,
                    4,
                    lambda m: m(key_type=key_type, coordinator_keys=(key,)),
                )
            except ChannelError:
                continue
            c = resp.coordinators[0]
            if int(c.error_code) == 0:
                self.coords[(key_type, key)] = int(c.node_id)
                return int(c.node_id)
        return None

    async def coordinator(self, key_type: int, key: str, api: int, version: int, build, error_of):
        """Send to the coordinator of ``key``, finding it again and retrying the retriable errors
        for :data:`STEP_DEADLINE_S`: ``(error code, response)`` of the last answer."""
        loop = self.sim.loop
        deadline = loop.time() + STEP_DEADLINE_S
        while True:
            code, resp = NETWORK, None
            node = await self.find(key_type, key)
            if node is not None:
                try:
                    resp = await self.call(node, api, version, build)
                    code = error_of(resp)
                except ChannelError:
                    code = NETWORK
            if code not in COORD_RETRY and code != NETWORK:
                return code, resp
            if code != 51:
                self.coords.pop((key_type, key), None)
            if loop.time() >= deadline:
                return code, resp
            await asyncio.sleep(self.sim.rng.uniform(0.02, 0.2))

    async def leader(self, topic: str, partition: int) -> int:
        for b in self.sim.rng.sample(BROKERS, len(BROKERS)):
            try:
                md = await self.sim.client.metadata(b, topic)
            except ChannelError:
                continue
            leader = md.get(partition, (-1, []))[0]
            if leader >= 0:
                return leader
        return -1


def _first_error(codes) -> int:
    codes = [int(c) for c in codes if int(c)]
    return min(codes) if codes else 0


class Worker:
    """One transactional id running the consume-transform-produce loop (see the module doc)."""

    def __init__(self, sim: RealCluster, ledger: TxnLedger, i: int, tv2: bool, pace_s: float = 0.0):
        self.sim, self.ledger, self.i, self.tv2 = sim, ledger, i, tv2
        self.pace_s = pace_s
        self.rng = sim.rng
        self.txn_id = f"tx-{i}"
        self.client = TxnClient(sim)
        self.pid, self.epoch = -1, -1
        self.seq: dict[int, int] = {}
        self.position: int | None = None
        self.leaders: dict[int, int] = {}
        self.transactions = 0

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.position is None:
                await self._init()
                continue
            try:
                await self._transaction(stop)
            except StepFailed:
                self.position = None  # InitProducerId aborts it; the position is read again

    async def _init(self) -> None:
        code, resp = await self.client.coordinator(
            1,
            self.txn_id,
            ApiKeys.INIT_PRODUCER_ID,
            5 if self.tv2 else 4,
            lambda m: m(
                transactional_id=self.txn_id, transaction_timeout=TXN_TIMEOUT_MS, producer_id=-1, producer_epoch=-1
            ),
            lambda r: int(r.error_code),
        )
        if code:
            await asyncio.sleep(0.1)
            return
        self.pid, self.epoch, self.seq = int(resp.producer_id), int(resp.producer_epoch), {}
        self.position = await self._committed_position()

    async def _committed_position(self) -> int | None:
        def error_of(r):
            g = r.groups[0]
            return int(g.error_code) or _first_error(p.error_code for t in g.topics for p in t.partitions)

        deadline = self.sim.loop.time() + STEP_DEADLINE_S
        while True:
            code, resp = await self.client.coordinator(
                0, GROUP, ApiKeys.OFFSET_FETCH, 8, lambda m: self._offset_fetch(m), error_of
            )
            if code == 0:
                p = resp.groups[0].topics[0].partitions[0]
                return max(0, int(p.committed_offset))
            if code != UNSTABLE_OFFSET_COMMIT or self.sim.loop.time() >= deadline:
                return None
            await asyncio.sleep(0.1)

    def _offset_fetch(self, m):
        topic = m("OffsetFetchRequestTopics", name=IN, partition_indexes=(self.i,))
        return m(groups=(m("OffsetFetchRequestGroup", group_id=GROUP, topics=(topic,)),), require_stable=True)

    async def _transaction(self, stop: asyncio.Event) -> None:
        rng = self.rng
        lo = self.position
        hi = lo + rng.randint(1, 4)
        txn = self.ledger.begin(self.i, lo, hi, self.tv2)
        batches: dict[int, list[bytes]] = {}
        for n in range(lo, hi):
            v = value_of(self.i, n, txn.attempt)
            p = rng.randrange(OUT_PARTITIONS)
            txn.values[v] = p
            batches.setdefault(p, []).append(v)
        if not self.tv2:
            await self._add_partitions(sorted(batches))
        await asyncio.gather(*(self._produce(p, vs) for p, vs in sorted(batches.items())))
        await self._commit_offset(hi)
        if stop.is_set() and rng.random() < 0.5:
            return  # left open: the coordinator aborts it once it times out
        commit = rng.random() < 0.8
        await self._end(txn, commit)
        self.position = hi if commit else lo
        self.transactions += 1
        if self.pace_s:
            await asyncio.sleep(rng.uniform(0.0, self.pace_s))

    # -- the steps ---------------------------------------------------------------------------------
    async def _add_partitions(self, partitions: list[int]) -> None:
        def build(m):
            return m(
                v3_and_below_transactional_id=self.txn_id,
                v3_and_below_producer_id=self.pid,
                v3_and_below_producer_epoch=self.epoch,
                v3_and_below_topics=(m("AddPartitionsToTxnTopic", name=OUT, partitions=tuple(partitions)),),
            )

        def error_of(r):
            results = r.results_by_topic_v3_and_below
            codes = {int(p.partition_error_code) for t in results for p in t.results_by_partition}
            codes.discard(0)
            fatal = codes - COORD_RETRY
            return min(fatal) if fatal else min(codes) if codes else 0

        code, _ = await self.client.coordinator(1, self.txn_id, ApiKeys.ADD_PARTITIONS_TO_TXN, 3, build, error_of)
        if code:
            raise StepFailed(f"AddPartitionsToTxn: {code}")

    async def _produce(self, p: int, values: list[bytes]) -> None:
        sim = self.sim
        seq = self.seq.get(p, 0)
        batch = build_batch(
            [(None, v, ()) for v in values],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=seq,
            transactional=True,
            timestamp=sim.clock.now_ms(),
        )
        deadline = sim.loop.time() + STEP_DEADLINE_S
        while True:
            leader = self.leaders.get(p, -1)
            if leader < 0:
                leader = self.leaders[p] = await self.client.leader(OUT, p)
            code = NETWORK
            if leader >= 0:
                try:
                    resp = await self.client.call(
                        leader,
                        ApiKeys.PRODUCE,
                        12 if self.tv2 else 11,
                        lambda m: _produce(m, self.txn_id, p, batch),
                        timeout_ms=3000,
                    )
                    code = int(resp.responses[0].partition_responses[0].error_code)
                except ChannelError:
                    code = NETWORK
            if code in (0, DUPLICATE_SEQUENCE_NUMBER):
                self.seq[p] = seq + len(values)
                return
            if (code not in PRODUCE_RETRY and code != NETWORK) or sim.loop.time() >= deadline:
                raise StepFailed(f"Produce to {OUT}-{p}: {code}")
            if code != 51:
                self.leaders[p] = -1
            await asyncio.sleep(self.rng.uniform(0.02, 0.1))

    async def _commit_offset(self, offset: int) -> None:
        code, _ = await self.client.coordinator(
            1,
            self.txn_id,
            ApiKeys.ADD_OFFSETS_TO_TXN,
            4 if self.tv2 else 3,
            lambda m: m(transactional_id=self.txn_id, producer_id=self.pid, producer_epoch=self.epoch, group_id=GROUP),
            lambda r: int(r.error_code),
        )
        if code:
            raise StepFailed(f"AddOffsetsToTxn: {code}")

        def build(m):
            part = m(
                "TxnOffsetCommitRequestPartition",
                partition_index=self.i,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
            return m(
                transactional_id=self.txn_id,
                group_id=GROUP,
                producer_id=self.pid,
                producer_epoch=self.epoch,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=(m("TxnOffsetCommitRequestTopic", name=IN, partitions=(part,)),),
            )

        code, _ = await self.client.coordinator(
            0,
            GROUP,
            ApiKeys.TXN_OFFSET_COMMIT,
            5 if self.tv2 else 3,
            build,
            lambda r: _first_error(p.error_code for t in r.topics for p in t.partitions),
        )
        if code:
            raise StepFailed(f"TxnOffsetCommit: {code}")

    async def _end(self, txn: Txn, commit: bool) -> None:
        if commit:
            txn.state = "commit?"  # from the first send on, the outcome is unknown until answered
        code, resp = await self.client.coordinator(
            1,
            self.txn_id,
            ApiKeys.END_TXN,
            5 if self.tv2 else 4,
            lambda m: m(
                transactional_id=self.txn_id, producer_id=self.pid, producer_epoch=self.epoch, committed=commit
            ),
            lambda r: int(r.error_code),
        )
        if code:
            raise StepFailed(f"EndTxn: {code}")
        txn.state = "committed" if commit else "aborted"
        if self.tv2:  # KIP-890 part 2: each transaction ends with an epoch bump
            pid, epoch = int(resp.producer_id), int(resp.producer_epoch)
            if (pid, epoch) != (self.pid, self.epoch):
                self.pid, self.epoch, self.seq = pid, epoch, {}


# -- reading back ----------------------------------------------------------------------------------
async def read_committed(sim: RealCluster, client: TxnClient, p: int) -> tuple[int, int, list[bytes]]:
    """(high watermark, last stable offset, values) of ``out-p`` read with isolation read_committed
    from its leader: the batches of aborted transactions are dropped as the Java consumer drops
    them (the response's aborted transactions, ended by the producer's ABORT marker)."""
    leader = sim.controller_view(OUT, p)[0]
    values: list[bytes] = []
    offset, hw, lso = 0, 0, 0
    while True:
        resp = await client.call(leader, ApiKeys.FETCH, 12, lambda m: _fetch(m, p, offset))
        part = resp.responses[0].partitions[0]
        if int(part.error_code):
            raise InvariantViolation(f"read_committed fetch of {OUT}-{p} at {offset} failed: error {part.error_code}")
        hw, lso = int(part.high_watermark), int(part.last_stable_offset)
        last, records = committed_records(part, offset)
        values.extend(v for _o, v in records)
        if last < offset or last + 1 >= lso:
            return hw, lso, values
        offset = last + 1


def committed_records(part, offset: int) -> tuple[int, list[tuple[int, bytes]]]:
    """(the last offset of the answer, its records a read_committed consumer keeps as (offset,
    value)) of one fetched partition asked at ``offset``: the batches of the answer's aborted
    transactions dropped until their producer's ABORT marker, control batches skipped."""
    data = bytes(part.records or b"")
    aborted = sorted((int(a.first_offset), int(a.producer_id)) for a in part.aborted_transactions or ())
    ongoing: set[int] = set()
    last = offset - 1
    out: list[tuple[int, bytes]] = []
    for pos, h in rb.iter_headers(data):
        while aborted and aborted[0][0] <= h.last_offset:
            ongoing.add(aborted.pop(0)[1])
        last = h.last_offset
        if h.is_control:
            for r in iter_records(data, pos, h):
                if r.key[2:4] == b"\x00\x00":  # ABORT
                    ongoing.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in ongoing:
            continue
        out.extend((r.offset, r.value) for r in iter_records(data, pos, h))
    return last, out


def _produce(m, txn_id: str, p: int, batch: bytes):
    """A transactional ProduceRequest of one batch to ``out-p``, acks=all."""
    return m(
        transactional_id=txn_id,
        acks=-1,
        timeout=2000,
        topic_data=(
            m("TopicProduceData", name=OUT, partition_data=(m("PartitionProduceData", index=p, records=batch),)),
        ),
    )


def _fetch(m, p: int, offset: int):
    part = m(
        "FetchPartition",
        partition=p,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return m(
        cluster_id=None,
        replica_id=-1,
        max_wait=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=(),
        rack_id="",
        topics=(m("FetchTopic", topic=OUT, partitions=(part,)),),
    )


async def _settled(sim: RealCluster, client: TxnClient) -> dict[int, list[bytes]]:
    """Every output partition's read_committed values once its LSO reached its HW."""
    deadline = sim.loop.time() + SETTLE_S
    out: dict[int, list[bytes]] = {}
    for p in range(OUT_PARTITIONS):
        while True:
            try:
                hw, lso, values = await read_committed(sim, client, p)
            except ChannelError:
                hw, lso, values = 1, 0, []
            if lso == hw:
                out[p] = values
                break
            if sim.loop.time() >= deadline:
                raise LivenessViolation(
                    f"a transaction hangs: {OUT}-{p}'s last stable offset stays at {lso} below its high "
                    f"watermark {hw} for {SETTLE_S} s of simulated time after the cluster healed"
                )
            await asyncio.sleep(0.2)
    return out


def check_exactly_once(ledger: TxnLedger, read: dict[int, list[bytes]], positions: dict[int, int]) -> None:
    seen: dict[tuple[int, int], bytes] = {}
    present: dict[int, set[bytes]] = {}
    for p, values in read.items():
        for v in values:
            w, n, a = parse_value(v)
            txn = ledger.txns.get(a)
            if txn is None or txn.values.get(v) != p:
                raise InvariantViolation(f"{OUT}-{p} holds {v!r}, which no transaction wrote there")
            if txn.state in ("open", "aborted"):
                how = "aborted" if txn.state == "aborted" else "never committed"
                raise InvariantViolation(f"{OUT}-{p} shows {v!r} of transaction {a} ({how}) to read_committed")
            if (w, n) in seen:
                raise InvariantViolation(f"input record {w}-{n} is in the output twice: {seen[(w, n)]!r} and {v!r}")
            seen[(w, n)] = v
            present.setdefault(a, set()).add(v)
    for a, txn in ledger.txns.items():
        got = present.get(a, set())
        if txn.state == "committed" and got != set(txn.values):
            missing = sorted(set(txn.values) - got)
            raise InvariantViolation(f"transaction {a} was committed, but read_committed lacks {missing}")
        if txn.state == "commit?" and got and got != set(txn.values):
            raise InvariantViolation(
                f"transaction {a} is half visible: {sorted(got)} of {sorted(txn.values)} (its commit went unanswered)"
            )
    for w in range(WORKERS):
        have = sorted(n for (x, n) in seen if x == w)
        if have != list(range(positions[w])):
            extra = sorted(set(have) - set(range(positions[w])))
            lost = sorted(set(range(positions[w])) - set(have))
            raise InvariantViolation(
                f"exactly once broken for input {IN}-{w}: committed offset {positions[w]} in {GROUP}, but the "
                f"output lacks input records {lost[:10]} and holds ones at or above it {extra[:10]}"
            )


# -- the scenario ----------------------------------------------------------------------------------
async def _scenario(sim: RealCluster, ledger: TxnLedger, horizon: Horizon) -> None:
    await sim.until(lambda: all(n.ready for n in sim.nodes.values()), STARTUP_S, "every node started")
    for topic, partitions in ((IN, WORKERS), (OUT, OUT_PARTITIONS)):
        code = await sim.client.create_topic(BROKERS[0], topic, partitions, 3, {"min.insync.replicas": "2"})
        if code:
            raise InvariantViolation(f"CreateTopics {topic} answered error {code}")
    await sim.until(lambda: converged(sim, OUT, OUT_PARTITIONS), STARTUP_S, f"{OUT} created with a full ISR")
    stop = asyncio.Event()
    workers = [Worker(sim, ledger, i, sim.rng.random() < 0.5, horizon.pace_s) for i in range(WORKERS)]
    tasks = [asyncio.ensure_future(w.run(stop)) for w in workers]

    async def checker():
        while not stop.is_set():
            replicas_agree(sim, topic=OUT, partitions=OUT_PARTITIONS)
            await asyncio.sleep(CHECK_EVERY_S)

    tasks.append(asyncio.ensure_future(checker()))
    try:
        await asyncio.sleep(sim.rng.uniform(1.0, 3.0))  # the coordinators' topics are created
        await fault_schedule(sim, False, faults=horizon.faults)
        await asyncio.sleep(sim.rng.uniform(0.0, 1.0))
    finally:
        stop.set()
    await asyncio.gather(*tasks)
    sim.loop.net.heal()
    for b in BROKERS:
        if not sim.nodes[b].alive:
            sim.nodes[b].start()
    await sim.until(lambda: converged(sim, OUT, OUT_PARTITIONS), CONVERGE_S, f"every {OUT} partition led, ISR full")
    replicas_agree(sim, end=True, topic=OUT, partitions=OUT_PARTITIONS)
    client = TxnClient(sim)
    read = await _settled(sim, client)
    positions = {}
    for w in workers:
        w.position = None
        pos = await w._committed_position()
        if pos is None:
            raise LivenessViolation(f"the committed offset of {IN}-{w.i} stays unstable (or unreadable) once healed")
        positions[w.i] = pos
    check_exactly_once(ledger, read, positions)
    sim.transactions = sum(w.transactions for w in workers)


def real_transactions(seed: int, horizon: Horizon = FULL, **kw) -> RealCluster:
    """Exactly-once consume-transform-produce through broker kills, restarts and cuts (module doc)."""
    t0 = time.perf_counter()
    sim = RealCluster(seed, OVERRIDES)
    sim.inv = ledger = TxnLedger()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(deterministic_entropy(sim.rng))
            stack.enter_context(quiet_logs())
            sim.start_all()
            try:
                sim.run(_scenario(sim, ledger, horizon))
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


# the transactions' sweep: half the faults, and workers that wait up to a second between two
# transactions: a seed's CPU halves (1.5 s to 0.66 s; half the faults alone saved nothing: a
# seed's cost is its transactions' replication over 12 partitions, and the settling at the end)
TXN_SHORT = Horizon(faults=3, pace_s=1.0)
REAL_TXN_SCENARIOS = {f.__name__: f for f in (real_transactions, shortened(real_transactions, TXN_SHORT))}
REAL_TXN_BUG_OWNERS = {"skip_last_marker": TxnMarkerSender}
