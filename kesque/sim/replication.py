"""Partition replication under the simulator: brokers, a controller, producers and a consumer.

The replication logic is the broker's own (:mod:`kesque.replication.replica_state`) and the
controller's own (ClusterControl for registrations, sessions and fencing,
:class:`~kesque.controller.replication_control.ReplicationControl` for AlterPartition and
unclean elections), over the same seeded scheduler and faulty network as the quorum scenarios.

The model:

- **The controller** (node 0) is one reliable node whose metadata log commits at once: the quorum
  behind it is what the Raft scenarios test. Brokers fetch the log (long polls, resent when lost)
  and apply it into their own image, so their view lags and may be cut off.
- **Brokers** (nodes 1..n) register and heartbeat (BrokerLifecycle; sessions of
  ``SESSION_MS``), start their replicas once registered and caught up (as Kafka's BrokerServer),
  lead or follow as their image says, fetch from leaders (long polls of
  ``replica.fetch.wait.max.ms``), check the ISR every ``replica.lag.time.max.ms / 2`` and send
  AlterPartition to the controller (resent until answered).
- **A replica's log** (:class:`MemLog`) is records ``(epoch, value)`` by offset, a leader-epoch
  cache and a high watermark, with a durable/unflushed split: each broker flushes every
  50-400 ms (writing the HW checkpoint too). A *process* kill keeps the page cache (Kafka acks
  before fsync, so losing a leader's page cache is a different fault); a *power loss* drops
  what was not flushed; a disk loss drops everything.
- **Clients**: a producer sends one value per request (each value once, unique, so that a value
  names its record), acks=all or acks=1, to the leader named by a random running broker's image;
  a consumer reads each partition below the HW from its leader.

The invariants are in :mod:`kesque.sim.repl_invariants`, the scenarios in
:mod:`kesque.sim.repl_scenarios` (docs/replication.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ..controller.cluster_control import ClusterControl, HeartbeatReply, LifecycleConfig, RegistrationRequest
from ..controller.replication_control import ELR_FEATURE, AlterPartitionRequest, ReplicationControl
from ..errors import ErrorCode, KafkaError
from ..metadata.image import Delta, Endpoint, MetadataImage
from ..replication.replica_state import (
    BACKOFF,
    FETCHING,
    OUT_OF_RANGE,
    TRUNCATING,
    UNDEFINED,
    FetchPartition,
    FetchPartitionResponse,
    FollowerFetch,
    LeaderReplication,
)
from ..server.lifecycle import RECOVERY, BrokerLifecycle
from ..storage.leader_epoch import LeaderEpochFileCache
from .metadata import CLUSTER_ID, FEATURES, Rpc, RpcReply
from .network import NetworkFaults, Router
from .repl_invariants import ReplicationInvariants
from .scheduler import Scheduler

E = ErrorCode
CONTROLLER = 0
PRODUCER = 1000
CONSUMER = 2000
TOPIC_ID = uuid.UUID(int=14)
TOPIC = "t"

HEARTBEAT_MS = 250
SESSION_MS = 1500
LAG_MS = 1000  # replica.lag.time.max.ms
FETCH_WAIT_MS = 500  # replica.fetch.wait.max.ms
FETCH_BACKOFF_MS = 100  # replica.fetch.backoff.ms
REQUEST_TIMEOUT_MS = 500  # a lost request is resent after this (TCP would retransmit)
PRODUCE_TIMEOUT_MS = 1500  # request.timeout.ms of a produce request
UNCLEAN_INTERVAL_MS = 500  # unclean.leader.election.interval.ms
HOUSEKEEPING_MS = 100
MAX_FETCH_RECORDS = 50


class MemEpochCache(LeaderEpochFileCache):
    """The leader-epoch cache, in memory (written through at each change, as Kafka's checkpoint)."""

    def __init__(self):
        self.tp = ""
        self.entries = []

    def flush(self, fsync: bool = True) -> None:
        pass


class MemLog:
    """A replica's log in the simulator (:class:`~kesque.replication.replica_state.ReplicaLog`)."""

    def __init__(self):
        self.records: list[tuple[int, int]] = []  # (epoch, value) by offset
        self.durable = 0
        self.epochs = MemEpochCache()
        self.high_watermark = 0
        self.hw_checkpoint = 0
        self.log_start_offset = 0
        self.truncated: list[tuple[int, list]] = []  # (offset, records removed) by the follower logic
        self.low = 0  # lowest end since the invariants last looked

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, len(self.records))

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.epochs.assign(epoch, start_offset)

    def update_high_watermark(self, hw: int) -> None:
        self.high_watermark = min(max(hw, self.log_start_offset), len(self.records))

    def truncate_to(self, offset: int) -> None:
        if offset >= len(self.records):
            # an epoch this replica started as leader without writing conflicts with the leader's
            self.epochs.truncate_from_end(len(self.records))
            return
        self.truncated.append((offset, self.records[offset:]))
        self._cut(offset)

    def _cut(self, offset: int) -> None:
        del self.records[offset:]
        self.durable = min(self.durable, offset)
        self.epochs.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.low = min(self.low, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        raise AssertionError("log start offsets are not modelled (no retention in the simulator)")

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        raise AssertionError("log start offsets are not modelled (no retention in the simulator)")

    def append(self, epoch: int, value: int) -> int:
        offset = len(self.records)
        self.records.append((epoch, value))
        if epoch > self.epochs.latest_epoch():
            self.epochs.assign(epoch, offset)
        return offset

    def append_as_follower(self, records: list) -> None:
        for epoch, value in records:
            self.append(epoch, value)

    def flush(self) -> None:
        self.durable = len(self.records)
        self.hw_checkpoint = self.high_watermark

    def power_loss(self, keep: int = 0) -> None:
        """The machine stops: the page cache is gone (a torn tail keeps ``keep`` unflushed records)."""
        self._cut(min(len(self.records), self.durable + keep))
        self.high_watermark = min(self.hw_checkpoint, len(self.records))

    def restart(self) -> None:
        """The process restarts (the page cache survived): the HW is read from its checkpoint."""
        self.high_watermark = min(self.hw_checkpoint, len(self.records))


# -- messages -----------------------------------------------------------------------------------------
@dataclass(slots=True)
class MetaFetch:
    offset: int


@dataclass(slots=True)
class MetaRecords:
    offset: int
    records: list


@dataclass(slots=True)
class ReplicaFetch:
    partition: int
    broker_epoch: int
    token: int
    req: FetchPartition


@dataclass(slots=True)
class ReplicaFetchReply:
    partition: int
    token: int
    resp: FetchPartitionResponse
    leader_start: int = UNDEFINED  # for OFFSET_OUT_OF_RANGE: the ListOffsets round trip, folded in
    leader_end: int = UNDEFINED


@dataclass(slots=True)
class Produce:
    corr: int
    partition: int
    value: int
    acks: int


@dataclass(slots=True)
class ProduceReply:
    corr: int
    error_code: int
    offset: int = UNDEFINED
    leader_epoch: int = UNDEFINED  # instrumentation (not in Kafka's answer): who acknowledged


@dataclass(slots=True)
class ConsumerFetch:
    corr: int
    partition: int
    offset: int


@dataclass(slots=True)
class ConsumerFetchReply:
    corr: int
    partition: int
    error_code: int
    offset: int
    values: list = field(default_factory=list)
    high_watermark: int = UNDEFINED
    leader_epoch: int = UNDEFINED  # instrumentation: who served


# -- the controller ---------------------------------------------------------------------------------------
class SimController:
    def __init__(self, sim: ReplicationSim):
        self.sim = sim
        self.image = MetadataImage()
        self.records: list[dict] = []
        self.control = ClusterControl(
            sim.lifecycle_config, lambda: self.image, CLUSTER_ID, lambda topic: sim.unclean, lambda topic: sim.min_isr
        )
        self.control.activate(0)
        self.repl = ReplicationControl(lambda: self.image, lambda topic: sim.unclean, lambda topic: sim.min_isr)
        self.parked: dict[int, int] = {}  # broker -> offset of its parked MetaFetch
        self.elected: dict[tuple[int, int], int] = {}  # (partition, leader epoch) -> leader
        self.unclean: set[tuple[int, int]] = set()  # (partition, leader epoch) of unclean elections
        self.next_unclean = 0
        features = {**FEATURES, ELR_FEATURE: 1} if sim.elr else FEATURES  # KIP-966 on or off
        self.propose([{"type": "FeatureLevelRecord", "name": k, "feature_level": v} for k, v in features.items()])

    def propose(self, records: list[dict]) -> None:
        if not records:
            return
        d = Delta()
        for rec in records:
            before = None
            if rec["type"] == "PartitionChangeRecord":
                p = self.partition(rec["partition_id"])
                before = (list(p.isr), list(p.elr))
            self.image.replay(rec, d)
            self.records.append(rec)
            if rec["type"] in ("PartitionRecord", "PartitionChangeRecord"):
                self._elected(rec, before)
        for b, offset in list(self.parked.items()):
            self._answer(b, offset)

    def _elected(self, rec: dict, before: tuple[list[int], list[int]] | None) -> None:
        """Who leads each epoch; an election from outside the ISR is unclean, but for one from
        the ELR while the ISR is empty (KIP-966)."""
        pid = rec["partition_id"]
        p = self.image.topics_by_id[TOPIC_ID].partitions[pid]
        isr_before, elr_before = before if before is not None else (None, [])
        if rec["type"] == "PartitionRecord" or rec["leader"] != -2:
            self.elected[(pid, p.leader_epoch)] = p.leader
            from_elr = not isr_before and p.leader in elr_before
            if isr_before is not None and p.leader >= 0 and p.leader not in isr_before and not from_elr:
                if not self.sim.unclean:
                    self.sim.inv.fail(
                        f"partition {pid}: broker {p.leader} elected from outside the ISR "
                        f"{isr_before} with unclean.leader.election.enable=false"
                    )
                self.unclean.add((pid, p.leader_epoch))

    def create_topic(self, partitions: int, rf: int) -> None:
        rng = self.sim.rng
        brokers = sorted(self.sim.brokers)
        recs = [{"type": "TopicRecord", "name": TOPIC, "topic_id": TOPIC_ID}]
        for p in range(partitions):
            start = rng.randrange(len(brokers))
            reps = [brokers[(start + i) % len(brokers)] for i in range(rf)]
            recs.append(
                {
                    "type": "PartitionRecord",
                    "partition_id": p,
                    "topic_id": TOPIC_ID,
                    "replicas": reps,
                    "isr": list(reps),
                    "removing_replicas": [],
                    "adding_replicas": [],
                    "leader": reps[0],
                    "leader_recovery_state": 0,
                    "leader_epoch": 0,
                    "partition_epoch": 0,
                }
            )
        self.propose(recs)

    def partition(self, pid: int):
        t = self.image.topics_by_id.get(TOPIC_ID)
        return t.partitions[pid] if t is not None else None

    # -- messages ---------------------------------------------------------------------------------
    def handle(self, src: int, msg, now: int) -> None:
        if isinstance(msg, MetaFetch):
            self._answer(src, msg.offset)
            return
        body = msg.body
        try:
            if isinstance(body, RegistrationRequest):
                records, answer = self.control.register(body, now, len(self.records))
            elif isinstance(body, AlterPartitionRequest):
                records, answer = self.repl.alter_partition(body)
            else:
                records, answer = self.control.heartbeat(body, now, len(self.records))
        except KafkaError as e:
            self.sim.send(CONTROLLER, src, RpcReply(msg.correlation_id, int(e.code)))
            return
        self.propose(records)
        self.sim.send(CONTROLLER, src, RpcReply(msg.correlation_id, 0, answer))

    def _answer(self, b: int, offset: int) -> None:
        if offset < len(self.records):
            self.parked.pop(b, None)
            self.sim.send(CONTROLLER, b, MetaRecords(offset, self.records[offset:]))
        else:
            self.parked[b] = offset

    def tick(self, now: int) -> None:
        while self.control.next_deadline() <= now:
            records = self.control.expire(now)
            if not records:
                break
            self.propose(records)
        if self.sim.unclean and now >= self.next_unclean:
            self.next_unclean = now + UNCLEAN_INTERVAL_MS
            self.propose(self.repl.elect_unclean_leaders())


# -- a broker -------------------------------------------------------------------------------------------
class BrokerPartition:
    __slots__ = (
        "rep",
        "fetch",
        "token",
        "fetch_deadline",
        "parked",
        "acks",
        "alter",
        "alter_corr",
        "alter_at",
        "next_isr_check",
    )

    def __init__(self, rep: LeaderReplication):
        self.rep = rep
        self.fetch: FollowerFetch | None = None
        self.token = 0
        self.fetch_deadline = -1  # >= 0: a fetch is in flight or due then
        self.parked: list = []  # follower fetches waiting for data: (deadline, src, msg)
        self.acks: list = []  # acks=all produce requests: (required offset, deadline, src, corr, offset)
        self.alter = None  # the AlterPartition proposal in flight
        self.alter_corr = 0
        self.alter_at = 0
        self.next_isr_check = 0


class SimBroker:
    def __init__(self, sim: ReplicationSim, bid: int):
        self.sim = sim
        self.id = bid
        self.logs: dict[int, MemLog] = {}  # the disk: survives restarts
        self.running = False
        self.incarnation = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, now: int) -> None:
        assert not self.running
        self.running = True
        self.incarnation += 1
        for log in self.logs.values():
            log.restart()
        rng = self.sim.rng
        self.image = MetadataImage()
        self.meta_offset = 0
        self.meta_sent = -1
        self.lifecycle = BrokerLifecycle(
            self.id,
            uuid.UUID(int=rng.getrandbits(128)),
            self.sim.lifecycle_config,
            cluster_id=CLUSTER_ID,
            listeners=[Endpoint("PLAINTEXT", f"broker{self.id}", 9092)],
            features={"metadata.version": (1, 25), ELR_FEATURE: (0, 1)},
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            rng=rng,
            now=now,
        )
        self.corr = 0
        self.lifecycle_corr = -1  # the registration/heartbeat in flight
        self.parts: dict[int, BrokerPartition] = {}
        self.next_flush = now + rng.randint(50, 400)
        self._fetch_metadata(now)
        self.sim.s.after(rng.randint(0, HOUSEKEEPING_MS), self._housekeeping, self.incarnation)

    def kill(self, power_loss: bool = False, torn_tail: bool = False) -> None:
        self.running = False
        if power_loss:
            for log in self.logs.values():
                unflushed = log.log_end_offset - log.durable
                log.power_loss(self.sim.rng.randint(0, unflushed) if torn_tail and unflushed else 0)

    def wipe(self) -> None:
        self.logs = {}

    @property
    def active(self) -> bool:
        return self.running and self.lifecycle.caught_up

    def _housekeeping(self, incarnation: int) -> None:
        if not self.running or incarnation != self.incarnation:
            return
        now = self.sim.s.now
        self._lifecycle(now)
        if now - self.meta_sent >= REQUEST_TIMEOUT_MS + FETCH_WAIT_MS:
            self._fetch_metadata(now)
        if now >= self.next_flush:
            for log in self.logs.values():
                log.flush()
            self.next_flush = now + self.sim.rng.randint(50, 400)
        for pid, bp in self.parts.items():
            self._partition_housekeeping(pid, bp, now)
        self.sim.s.after(HOUSEKEEPING_MS, self._housekeeping, incarnation)

    def _partition_housekeeping(self, pid: int, bp: BrokerPartition, now: int) -> None:
        rep, log = bp.rep, self.logs[pid]
        if bp.parked:
            due = [m for m in bp.parked if m[0] <= now]
            if due:
                bp.parked = [m for m in bp.parked if m[0] > now]
                for _, src, msg in due:
                    self._replica_fetch(src, msg, now, may_park=False)
        if bp.acks:
            self._complete_acks(pid, bp, now)
        if rep.is_leader:
            if now >= bp.next_isr_check:
                bp.next_isr_check = now + LAG_MS // 2
                proposal = rep.maybe_shrink_isr(log, now)
                if proposal is not None:
                    self._send_alter(pid, bp, proposal, now)
            if bp.alter is not None and rep.pending is bp.alter and now - bp.alter_at >= REQUEST_TIMEOUT_MS:
                self._send_alter(pid, bp, bp.alter, now)
        elif bp.fetch is not None and 0 <= bp.fetch_deadline <= now:
            self._send_fetch(pid, bp, now)

    def _lifecycle(self, now: int) -> None:
        lc = self.lifecycle
        if lc.state == RECOVERY and not lc.ready_to_unfence:
            lc.set_ready_to_unfence(now)
        req = lc.poll(now)
        if req is not None:
            self.corr += 1
            self.lifecycle_corr = self.corr
            self.sim.send(self.id, CONTROLLER, Rpc(self.corr, req))

    def _fetch_metadata(self, now: int) -> None:
        self.meta_sent = now
        self.sim.send(self.id, CONTROLLER, MetaFetch(self.meta_offset))

    # -- messages --------------------------------------------------------------------------------
    def handle(self, src: int, msg, now: int) -> None:
        if isinstance(msg, MetaRecords):
            self._apply_metadata(msg, now)
        elif isinstance(msg, RpcReply):
            self._rpc_reply(msg, now)
        elif isinstance(msg, ReplicaFetch):
            self._replica_fetch(src, msg, now, may_park=True)
        elif isinstance(msg, ReplicaFetchReply):
            self._replica_fetch_reply(msg, now)
        elif isinstance(msg, Produce):
            self._produce(src, msg, now)
        elif isinstance(msg, ConsumerFetch):
            self._consumer_fetch(src, msg, now)

    def _rpc_reply(self, msg: RpcReply, now: int) -> None:
        for pid, bp in self.parts.items():
            if bp.alter is not None and msg.correlation_id == bp.alter_corr:
                proposal, bp.alter = bp.alter, None
                retry, hw = bp.rep.on_alter_partition_response(
                    proposal, msg.error_code or (msg.body.error_code if msg.body else 0), msg.body, self.logs[pid], now
                )
                if retry:
                    bp.alter, bp.alter_at = proposal, now - REQUEST_TIMEOUT_MS + FETCH_BACKOFF_MS
                if hw:
                    self._on_hw(pid, bp, now)
                return
        if msg.correlation_id != self.lifecycle_corr:
            return
        lc = self.lifecycle
        if not lc.registered:
            lc.on_registration_response(msg.error_code, msg.body if msg.body is not None else -1, now)
        else:
            lc.on_heartbeat_response(msg.body if msg.error_code == 0 else HeartbeatReply(msg.error_code), now)
        self._lifecycle(now)
        self._apply_partitions(now)

    def _apply_metadata(self, msg: MetaRecords, now: int) -> None:
        if msg.offset != self.meta_offset:
            return  # a duplicate or a stale answer
        d = Delta()
        for rec in msg.records:
            self.image.replay(rec, d)
        self.meta_offset += len(msg.records)
        self.lifecycle.on_metadata_offset(self.meta_offset - 1)
        self._fetch_metadata(now)
        self._apply_partitions(now)

    def _broker_epoch_of(self, b: int) -> int | None:
        reg = self.image.brokers.get(b)
        return reg.epoch if reg is not None and not reg.fenced and not reg.in_controlled_shutdown else None

    def _apply_partitions(self, now: int) -> None:
        if not self.active:
            return
        t = self.image.topics_by_id.get(TOPIC_ID)
        if t is None:
            return
        for pid, p in t.partitions.items():
            if self.id in p.replicas:
                self._apply_partition(pid, p, now)

    def _apply_partition(self, pid: int, p, now: int) -> None:
        log = self.logs.setdefault(pid, MemLog())
        bp = self.parts.get(pid)
        if bp is None:
            bp = self.parts[pid] = BrokerPartition(
                LeaderReplication(
                    self.id,
                    min_insync_replicas=self.sim.min_isr,
                    replica_lag_time_max_ms=LAG_MS,
                    broker_epoch_of=self._broker_epoch_of,
                )
            )
        rep = bp.rep
        rep.local_broker_epoch = self.lifecycle.broker_epoch
        if p.leader == self.id:
            if p.partition_epoch < rep.partition_epoch or (rep.is_leader and p.partition_epoch == rep.partition_epoch):
                return
            if rep.make_leader(p.replicas, p.isr, p.leader_epoch, p.partition_epoch, log, now):
                self.sim.inv.on_leader(pid, p.leader_epoch, self.id)
            bp.fetch = None
            bp.alter = None
            self._on_hw(pid, bp, now)
            return
        if p.partition_epoch < rep.partition_epoch or (
            not rep.is_leader and p.partition_epoch == rep.partition_epoch and bp.fetch is not None
        ):
            return
        new_epoch = rep.make_follower(p.leader, p.replicas, p.leader_epoch, p.partition_epoch)
        bp.alter = None
        self._complete_acks(pid, bp, now)  # they fail: not the leader any more
        for _, src, msg in bp.parked:
            self._replica_fetch(src, msg, now, may_park=False)
        bp.parked = []
        if new_epoch or bp.fetch is None or bp.fetch.leader_id != p.leader:
            bp.fetch = FollowerFetch(p.leader, p.leader_epoch, log) if p.leader >= 0 else None
            if bp.fetch is not None:
                self._send_fetch(pid, bp, now)

    # -- follower side ------------------------------------------------------------------------------
    def _send_fetch(self, pid: int, bp: BrokerPartition, now: int) -> None:
        f = bp.fetch
        bp.token += 1
        bp.fetch_deadline = now + FETCH_WAIT_MS + REQUEST_TIMEOUT_MS
        self.sim.send(
            self.id, f.leader_id, ReplicaFetch(pid, self.lifecycle.broker_epoch, bp.token, f.request(self.logs[pid]))
        )

    def _replica_fetch_reply(self, msg: ReplicaFetchReply, now: int) -> None:
        bp = self.parts.get(msg.partition)
        if bp is None or bp.fetch is None or msg.token != bp.token:
            return
        log = self.logs[msg.partition]
        state = bp.fetch.on_response(msg.resp, log, log.append_as_follower)
        if state == OUT_OF_RANGE:
            bp.fetch.on_out_of_range(msg.leader_start, msg.leader_end, log)
            state = FETCHING
        if state in (FETCHING, TRUNCATING):
            self._send_fetch(msg.partition, bp, now)
        elif state == BACKOFF:
            bp.fetch_deadline = now + FETCH_BACKOFF_MS
        else:
            bp.fetch_deadline = -1  # wait for metadata

    # -- leader side ---------------------------------------------------------------------------------
    def _replica_fetch(self, src: int, msg: ReplicaFetch, now: int, may_park: bool) -> None:
        pid, req = msg.partition, msg.req
        bp = self.parts.get(pid)
        log = self.logs.get(pid)
        if bp is None or log is None:
            self.sim.send(
                self.id, src, ReplicaFetchReply(pid, msg.token, FetchPartitionResponse(int(E.not_leader_or_follower)))
            )
            return
        chk = bp.rep.on_follower_fetch(
            src,
            req.fetch_offset,
            req.last_fetched_epoch,
            req.current_leader_epoch,
            req.log_start_offset,
            msg.broker_epoch,
            log,
            now,
        )
        if chk.alter is not None:
            self._send_alter(pid, bp, chk.alter, now)
        if chk.hw_changed:
            self._on_hw(pid, bp, now)
        resp = FetchPartitionResponse(chk.error_code, chk.high_watermark, chk.log_start_offset, chk.diverging_epoch)
        if not chk.error_code and chk.diverging_epoch is None:
            if req.fetch_offset >= log.log_end_offset and may_park:
                bp.parked.append((now + FETCH_WAIT_MS, src, msg))
                return
            recs = log.records[req.fetch_offset : req.fetch_offset + MAX_FETCH_RECORDS]
            if recs:
                resp.records, resp.first_offset, resp.last_epoch = recs, req.fetch_offset, recs[-1][0]
        self.sim.send(self.id, src, ReplicaFetchReply(pid, msg.token, resp, log.log_start_offset, log.log_end_offset))

    def _send_alter(self, pid: int, bp: BrokerPartition, proposal, now: int) -> None:
        self.corr += 1
        bp.alter, bp.alter_corr, bp.alter_at = proposal, self.corr, now
        req = AlterPartitionRequest(
            self.id,
            self.lifecycle.broker_epoch,
            TOPIC_ID,
            pid,
            proposal.leader_epoch,
            proposal.partition_epoch,
            list(proposal.new_isr),
            proposal.leader_recovery_state,
        )
        self.sim.send(self.id, CONTROLLER, Rpc(self.corr, req))

    def _on_hw(self, pid: int, bp: BrokerPartition, now: int) -> None:
        if bp.acks:
            self._complete_acks(pid, bp, now)

    def _complete_acks(self, pid: int, bp: BrokerPartition, now: int) -> None:
        log = self.logs[pid]
        keep = []
        for required, deadline, src, corr, offset in bp.acks:
            done, err = bp.rep.acks_all_status(required, log)
            if done or err:
                self.sim.send(self.id, src, ProduceReply(corr, err, offset, bp.rep.leader_epoch))
            elif now >= deadline:
                self.sim.send(self.id, src, ProduceReply(corr, int(E.request_timed_out), offset))
            else:
                keep.append((required, deadline, src, corr, offset))
        bp.acks = keep

    def _produce(self, src: int, msg: Produce, now: int) -> None:
        bp = self.parts.get(msg.partition)
        err = bp.rep.check_append(msg.acks) if bp is not None else int(E.not_leader_or_follower)
        if err:
            self.sim.send(self.id, src, ProduceReply(msg.corr, err))
            return
        log = self.logs[msg.partition]
        offset = log.append(bp.rep.leader_epoch, msg.value)
        self.sim.inv.on_leader_append(msg.partition, self.id, bp.rep.leader_epoch)
        hw = bp.rep.after_append(log, now)
        if msg.acks == -1:
            bp.acks.append((offset + 1, now + PRODUCE_TIMEOUT_MS, src, msg.corr, offset))
        else:
            self.sim.send(self.id, src, ProduceReply(msg.corr, 0, offset, bp.rep.leader_epoch))
        if hw or msg.acks == -1:
            self._on_hw(msg.partition, bp, now)
        parked, bp.parked = bp.parked, []
        for _, fsrc, fmsg in parked:
            self._replica_fetch(fsrc, fmsg, now, may_park=False)

    def _consumer_fetch(self, src: int, msg: ConsumerFetch, now: int) -> None:
        bp = self.parts.get(msg.partition)
        if bp is None or not bp.rep.is_leader:
            self.sim.send(
                self.id, src, ConsumerFetchReply(msg.corr, msg.partition, int(E.not_leader_or_follower), msg.offset)
            )
            return
        log = self.logs[msg.partition]
        hw = log.high_watermark
        if msg.offset > log.log_end_offset:
            self.sim.send(
                self.id,
                src,
                ConsumerFetchReply(msg.corr, msg.partition, int(E.offset_out_of_range), msg.offset, high_watermark=hw),
            )
            return
        values = [v for _, v in log.records[msg.offset : min(hw, msg.offset + MAX_FETCH_RECORDS)]]
        self.sim.send(
            self.id, src, ConsumerFetchReply(msg.corr, msg.partition, 0, msg.offset, values, hw, bp.rep.leader_epoch)
        )


# -- the clients ----------------------------------------------------------------------------------------
class Clients:
    """A producer (one value per request; acks=all or acks=1) and a consumer of every partition."""

    def __init__(self, sim: ReplicationSim, acks_all_share: float):
        self.sim = sim
        self.acks_all_share = acks_all_share
        self.producing = True
        self.next_value = 0
        self.corr = 0
        self.pending: dict[int, tuple] = {}  # corr -> (partition, value, acks, sent)
        self.positions = {p: 0 for p in range(sim.partitions)}
        self.acked = {1: 0, -1: 0}
        self.served = 0

    def leader_of(self, pid: int) -> int:
        """The leader as a random running broker's image says (it may be stale)."""
        up = [b for b in self.sim.brokers.values() if b.running]
        if not up:
            return -1
        t = self.sim.rng.choice(up).image.topics_by_id.get(TOPIC_ID)
        return t.partitions[pid].leader if t is not None and pid in t.partitions else -1

    def produce(self) -> None:
        sim = self.sim
        now = sim.s.now
        self.pending = {c: v for c, v in self.pending.items() if now - v[3] < 2 * PRODUCE_TIMEOUT_MS}
        if self.producing:
            self.send_one(sim.rng.randrange(sim.partitions), -1 if sim.rng.random() < self.acks_all_share else 1)

    def send_one(self, pid: int, acks: int) -> int:
        """Produce the next value to ``pid``'s leader; returns the value (0: no leader known)."""
        leader = self.leader_of(pid)
        if leader < 0:
            return 0
        self.corr += 1
        self.next_value += 1
        self.pending[self.corr] = (pid, self.next_value, acks, self.sim.s.now)
        self.sim.send(PRODUCER, leader, Produce(self.corr, pid, self.next_value, acks))
        return self.next_value

    def consume(self) -> None:
        sim = self.sim
        for pid in range(sim.partitions):
            leader = self.leader_of(pid)
            if leader >= 0:
                self.corr += 1
                sim.send(CONSUMER, leader, ConsumerFetch(self.corr, pid, self.positions[pid]))

    def handle(self, dst: int, msg, now: int) -> None:
        if isinstance(msg, ProduceReply):
            sent = self.pending.pop(msg.corr, None)
            if sent is not None and msg.error_code == 0:
                pid, value, acks, _ = sent
                self.acked[acks] += 1
                if acks == -1:
                    self.sim.inv.promise(pid, msg.offset, value, "acknowledged with acks=all", msg.leader_epoch)
        elif isinstance(msg, ConsumerFetchReply):
            pid = msg.partition
            if msg.offset != self.positions[pid]:
                return
            if msg.error_code == E.offset_out_of_range:
                self.positions[pid] = msg.high_watermark  # auto.offset.reset=latest
                return
            for i, v in enumerate(msg.values):
                self.sim.inv.promise(pid, msg.offset + i, v, "served to a consumer", msg.leader_epoch)
            self.served += len(msg.values)
            self.positions[pid] += len(msg.values)


# -- the simulation ---------------------------------------------------------------------------------------
class ReplicationSim:
    def __init__(
        self,
        seed: int,
        *,
        brokers: int | None = None,
        partitions: int | None = None,
        rf: int | None = None,
        min_isr: int | None = None,
        unclean: bool = False,
        elr: bool = False,
        faults: NetworkFaults | None = None,
        acks_all_share: float = 0.8,
        produce_every: int = 40,
    ):
        self.s = Scheduler(seed)
        rng = self.rng = self.s.rng
        self.partitions = partitions if partitions is not None else rng.randint(1, 2)
        n = brokers if brokers is not None else rng.randint(3, 4)
        self.rf = rf if rf is not None else 3
        self.min_isr = min_isr if min_isr is not None else 2
        self.unclean = unclean
        self.elr = elr  # eligible.leader.replicas.version 1 (KIP-966)
        if faults is None:
            # delays (so reordering) and duplicates, no losses: a lost heartbeat or two may fence
            # a broker (BrokerLifecycle backs off), a second fault these scenarios do not intend;
            # repl_chaos loses messages
            faults = NetworkFaults(1, rng.randint(2, 15), duplicate=rng.choice((0, 0.01)))
        self.router = Router(self.s, self._deliver, faults)
        self.lifecycle_config = LifecycleConfig(heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS)
        self.brokers = {b: SimBroker(self, b) for b in range(1, n + 1)}
        self.controller = SimController(self)
        self.clients = Clients(self, acks_all_share)
        self.inv = ReplicationInvariants(self)
        self.s.add_invariant(self.inv.check)
        self.s.every(HOUSEKEEPING_MS, 10, lambda: self.controller.tick(self.s.now))
        self.s.every(produce_every, produce_every // 2, self.clients.produce)
        self.s.every(100, 50, self.clients.consume)

    def send(self, src: int, dst: int, msg) -> None:
        self.router.send(src, dst, msg)

    def _deliver(self, src: int, dst: int, msg) -> None:
        now = self.s.now
        if dst == CONTROLLER:
            self.controller.handle(src, msg, now)
        elif dst in (PRODUCER, CONSUMER):
            self.clients.handle(dst, msg, now)
        else:
            b = self.brokers[dst]
            if b.running:
                b.handle(src, msg, now)

    # -- helpers for scenarios ------------------------------------------------------------------------
    def until(self, cond, what: str, bound: int = 15_000) -> None:
        self.s.run_until(cond, bound, what)

    def start(self) -> None:
        for b in self.brokers.values():
            b.start(self.s.now)
        self.until(lambda: all(b.lifecycle.unfenced for b in self.brokers.values()), "every broker unfenced")
        self.controller.create_topic(self.partitions, min(self.rf, len(self.brokers)))
        self.until(lambda: all(self.healthy(p) for p in range(self.partitions)), "every partition fully in sync")

    def partition(self, pid: int):
        return self.controller.partition(pid)

    def leader(self, pid: int) -> int:
        return self.partition(pid).leader

    def healthy(self, pid: int) -> bool:
        """A leader acting on its election, and every replica in the ISR."""
        p = self.partition(pid)
        return self.inv._current_leader(pid, p) is not None and sorted(p.isr) == sorted(p.replicas)

    def progress(self, pid: int, more: int = 5, bound: int = 15_000) -> None:
        target = len(self.inv.ledger[pid]) + more
        self.until(lambda: len(self.inv.ledger[pid]) >= target, f"partition {pid} commits up to {target}", bound)

    def restart(self, bid: int) -> None:
        if not self.brokers[bid].running:
            self.brokers[bid].start(self.s.now)

    def converge(self) -> None:
        """Heal, restart everyone, stop producing; then every replica must hold the same history."""
        self.router.heal()
        self.router.faults = NetworkFaults(1, 5)
        for b in self.brokers:
            self.restart(b)
        for pid in range(self.partitions):
            self.progress(pid, 3, bound=30_000)
        self.clients.producing = False

        def same() -> bool:
            for pid in range(self.partitions):
                if not self.healthy(pid):
                    return False
                leader = self.brokers[self.leader(pid)].logs[pid]
                if leader.high_watermark != leader.log_end_offset:
                    return False
                if any(b.logs[pid].records != leader.records for b in self.brokers.values() if pid in b.logs):
                    return False
            return True

        self.until(same, "every replica holds the leader's log, all of it committed", 30_000)
        self.inv.check()
        self.inv.check_converged()
