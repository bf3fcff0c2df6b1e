"""The metadata layer under the simulator: controllers, brokers and their images over the quorum.

Every node replays the committed log into a :class:`~kesque.metadata.image.MetadataImage`. The
voters are controllers: the Raft leader, once it has applied every record up to the start of its
epoch (as Kafka's controller claims leadership), activates its
:class:`~kesque.controller.cluster_control.ClusterControl` and answers brokers' registrations and
heartbeats, fences expired sessions and creates topics for the simulated client. It applies its
own proposals to its image at once (Kafka's controller does) and answers each request once its
records are committed; when it loses the lead it rebuilds its image from the committed log. The
observers are brokers: each runs a :class:`~kesque.server.lifecycle.BrokerLifecycle` (a new
incarnation id at every start) against the node it believes leads.

Each metadata record is one Raft record (one offset, as in Kafka); a controller's proposal is
one append, and :class:`MetaRecord` marks the last record of each, so that images are checked
only at batch boundaries (Kafka's loader publishes whole batches).

Invariants (:class:`MetadataInvariants`, after every applied batch on every node):

- no topic is created twice (a TopicRecord for a name the image has);
- no partition is led by a broker that is unregistered, fenced or in controlled shutdown, and a
  leader is in its ISR: a controller that fences a broker (session expiry, controlled shutdown,
  a new incarnation) moves its leaderships in the same batch;
- a running controller that does not lead holds only committed records;
- a broker is unfenced only once it has applied its own RegisterBrokerRecord;
- at the end (``check_converged``): every topic the client was told is created is in every
  node's image with the id it was acknowledged with, all images are equal, and no partition
  is leaderless while a broker of its ISR is unfenced.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..controller.cluster_control import ClusterControl, HeartbeatReply, LifecycleConfig, RegistrationRequest
from ..errors import ErrorCode, KafkaError
from ..metadata.image import Delta, Endpoint, MetadataImage
from ..metadata.snapshot import image_records
from ..raft.log import LeaderChange
from ..raft.state import LeaderState
from ..server.lifecycle import RECOVERY, BrokerLifecycle
from .scheduler import InvariantViolation

FEATURES = {"metadata.version": 25}
CLUSTER_ID = "c1mU1aTIQ0S8Ydmtc2Qb6A"
REQUEST_TIMEOUT_MS = 500  # as the simulated Raft's: a dropped request is retried soon
IDLE_INTERVAL_MS = 500  # metadata.max.idle.interval.ms: the active controller's NoOpRecords


class MetaRecord:
    """One metadata record in the simulated log; ``last`` marks the end of its batch."""

    __slots__ = ("batch", "index", "last", "record")

    def __init__(self, batch: int, index: int, last: bool, record: dict):
        self.batch, self.index, self.last, self.record = batch, index, last, record

    def __eq__(self, other):
        return isinstance(other, MetaRecord) and (self.batch, self.index) == (other.batch, other.index)

    def __hash__(self):
        return hash((self.batch, self.index))

    def __repr__(self):
        return f"MetaRecord({self.batch}.{self.index}, {self.record['type']})"


@dataclass(slots=True)
class Rpc:
    """A broker's request to the controller (RegistrationRequest / HeartbeatRequest)."""

    correlation_id: int
    body: object


@dataclass(slots=True)
class RpcReply:
    correlation_id: int
    error_code: int
    body: object = None  # broker epoch (registration) or HeartbeatReply


class MetadataApp:
    """What every node runs beside its Raft: the image of the committed log."""

    def __init__(self, meta: MetadataCluster, sn):
        self.meta = meta
        self.sn = sn
        self.image = MetadataImage()
        self.applied_end = 0  # the next offset to apply

    def on_output(self, out, now: int) -> None:
        if out.committed:
            self.apply_committed(out.committed, now)

    def apply_committed(self, records, now: int) -> None:
        self.applied_end = records[-1].offset + 1
        delta = Delta()
        for rec in records:
            v = rec.value
            if isinstance(v, MetaRecord):
                self.replay(v.record, rec.offset, delta)
                if not v.last:
                    continue
            elif not isinstance(v, LeaderChange):
                continue
            self.image.offset = rec.offset
            self.meta.inv.check_batch(self, delta)
            self.on_batch(now)
            delta = Delta()

    def replay(self, rec: dict, offset: int, delta: Delta) -> None:
        if rec["type"] == "TopicRecord" and rec["name"] in self.image.topics_by_name:
            self.meta.inv.fail(f"node {self.sn.node_id}: topic {rec['name']} created twice (offset {offset})")
        self.image.replay(rec, delta)
        self.image.offset = offset

    def on_batch(self, now: int) -> None:
        pass

    def handle(self, src: int, msg, now: int) -> None:
        pass

    def tick(self, now: int) -> None:
        pass

    def next_deadline(self) -> int:
        return 1 << 62


class ControllerApp(MetadataApp):
    """A voter: a standby controller, or the active one while its Raft node leads."""

    def __init__(self, meta, sn):
        super().__init__(meta, sn)
        self.control = ClusterControl(meta.lifecycle_config, lambda: self.image, CLUSTER_ID)
        self.active_epoch = -1
        self.ahead = 0  # while active: the image holds the proposals below this offset
        self.waiting: list = []  # (offset, callback): answered once the offset is committed
        self.last_proposal = 0

    # -- committed records and activation ----------------------------------------------------------
    @property
    def committed_end(self) -> int:
        return self.applied_end

    def apply_committed(self, records, now: int) -> None:
        if self.active_epoch >= 0:
            # its own proposals, already in the image; nothing else can commit in its epoch
            self.applied_end = records[-1].offset + 1
            if records[-1].offset >= self.ahead:
                self.meta.inv.fail(
                    f"controller {self.sn.node_id}: committed offset {records[-1].offset} it did not propose"
                )
        else:
            super().apply_committed(records, now)
        self._answer_committed()

    def _answer_committed(self) -> None:
        done = [cb for off, cb in self.waiting if off < self.applied_end]
        if done:
            self.waiting = [(off, cb) for off, cb in self.waiting if off >= self.applied_end]
            for cb in done:
                cb()

    def replay(self, rec, offset, delta) -> None:
        super().replay(rec, offset, delta)
        self.control.replay(rec, offset)

    def on_output(self, out, now: int) -> None:
        st = self.sn.raft.state
        if self.active_epoch >= 0 and (not isinstance(st, LeaderState) or st.epoch != self.active_epoch):
            self._renounce()
        super().on_output(out, now)
        self._claim(now)

    def _claim(self, now: int) -> None:
        st = self.sn.raft.state
        if self.active_epoch < 0 and isinstance(st, LeaderState) and self.committed_end > st.epoch_start_offset:
            self.active_epoch = st.epoch
            self.ahead = self.committed_end
            self.last_proposal = now
            self.control.activate(now)
            self.meta.activations += 1
            if not self.image.features:  # a new cluster: Kafka's bootstrap records
                self.propose(
                    [{"type": "FeatureLevelRecord", "name": k, "feature_level": v} for k, v in FEATURES.items()], now
                )

    def _renounce(self) -> None:
        self.control.deactivate()
        self.active_epoch = -1
        self.waiting = []
        if self.ahead > self.committed_end:  # uncommitted proposals in the image: rebuild it
            self.image = MetadataImage()
            delta = Delta()
            for offset, (_, v) in enumerate(self.sn.state[: self.committed_end]):
                if isinstance(v, MetaRecord):
                    self.replay(v.record, offset, delta)
            self.image.offset = self.committed_end - 1
        self.meta.inv.check_committed_image(self)

    @property
    def active(self) -> bool:
        return self.active_epoch >= 0

    # -- proposing ---------------------------------------------------------------------------------------
    def propose(self, records: list[dict], now: int, on_commit=None) -> None:
        """Append ``records`` as one batch, apply them to the image; ``on_commit()`` once committed
        (for no records: once everything written so far is)."""
        r = self.sn.raft
        if records:
            bid = self.meta.next_batch_id()
            first = r.log.end_offset()
            r.append([MetaRecord(bid, i, i == len(records) - 1, rec) for i, rec in enumerate(records)], now)
            delta = Delta()
            for i, rec in enumerate(records):
                self.replay(rec, first + i, delta)
            self.meta.inv.check_batch(self, delta)
        self.ahead = r.log.end_offset()
        self.last_proposal = now
        if on_commit is not None:
            self.waiting.append((self.ahead - 1, on_commit))
            self._answer_committed()

    # -- the brokers' RPCs --------------------------------------------------------------------------
    def handle(self, src: int, msg, now: int) -> None:
        if not isinstance(msg, Rpc):
            return
        if not self.active or not self.sn.raft.is_leader():
            self._reply(src, msg, int(ErrorCode.not_controller))
            return
        next_offset = self.sn.raft.log.end_offset()
        try:
            if isinstance(msg.body, RegistrationRequest):
                records, answer = self.control.register(msg.body, now, next_offset)
            else:
                records, answer = self.control.heartbeat(msg.body, now, next_offset)
        except KafkaError as e:
            self._reply(src, msg, int(e.code))
            return
        if not isinstance(msg.body, RegistrationRequest):
            self.meta.last_heard[src] = now  # a heartbeat the session counts
        self.meta.inv.check_unfenced_caught_up(self, records)
        self.propose(records, now, lambda: self._reply(src, msg, 0, answer))

    def _reply(self, dst: int, msg: Rpc, error_code: int, body=None) -> None:
        self.meta.cluster.router.send(self.sn.node_id, dst, RpcReply(msg.correlation_id, error_code, body))

    def tick(self, now: int) -> None:
        if not self.active or not self.sn.raft.is_leader():
            return
        while self.control.next_deadline() <= now:
            records = self.control.expire(now)
            if not records:
                break
            self.meta.fenced_by_expiry.append((now, records[-1]["broker_id"]))
            self.propose(records, now)
        if now - self.last_proposal >= IDLE_INTERVAL_MS:
            self.propose([{"type": "NoOpRecord"}], now)

    def next_deadline(self) -> int:
        if not self.active:
            return 1 << 62
        return min(self.control.next_deadline(), self.last_proposal + IDLE_INTERVAL_MS)

    # -- the simulated client's CreateTopics -------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, rf: int, now: int, on_created) -> str:
        """'not enough brokers', or 'proposed': ``on_created(topic_id)`` once committed. A topic
        that exists is answered too, once everything proposed so far is committed (as Kafka
        answers TOPIC_ALREADY_EXISTS: the image may hold the topic only as a proposal)."""
        image = self.image
        t = image.topic(name)
        if t is not None:
            self.propose([], now, lambda: on_created(t.topic_id))
            return "proposed"
        live = [b.id for b in image.live_brokers() if not b.in_controlled_shutdown]
        if len(live) < rf:
            return "not enough brokers"
        rng = self.meta.rng
        tid = uuid.UUID(int=rng.getrandbits(128))
        records = [{"type": "TopicRecord", "name": name, "topic_id": tid}]
        for p in range(partitions):
            start = rng.randrange(len(live))
            reps = [live[(start + i) % len(live)] for i in range(rf)]
            records.append(
                {
                    "type": "PartitionRecord",
                    "partition_id": p,
                    "topic_id": tid,
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
        self.propose(records, now, lambda: on_created(tid))
        return "proposed"


class BrokerApp(MetadataApp):
    """An observer: a broker's image and lifecycle."""

    def __init__(self, meta, sn):
        super().__init__(meta, sn)
        rng = meta.rng
        self.lifecycle = BrokerLifecycle(
            sn.node_id,
            uuid.UUID(int=rng.getrandbits(128)),
            meta.lifecycle_config,
            cluster_id=CLUSTER_ID,
            listeners=[Endpoint("PLAINTEXT", f"broker{sn.node_id}", 9092)],
            features={"metadata.version": (1, 25)},
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            rng=rng,
            now=meta.cluster.scheduler.now,
        )
        self.correlation = 0

    def on_batch(self, now: int) -> None:
        self.lifecycle.on_metadata_offset(self.image.offset)

    def tick(self, now: int) -> None:
        lc = self.lifecycle
        if lc.state == RECOVERY and not lc.ready_to_unfence:
            lc.set_ready_to_unfence(now)
        req = lc.poll(now)
        if req is None:
            return
        leader = self.sn.raft.leader_id
        if leader < 0:
            lc.on_request_failed(now)  # no controller known
            return
        self.correlation += 1
        self.meta.cluster.router.send(self.sn.node_id, leader, Rpc(self.correlation, req))

    def handle(self, src: int, msg, now: int) -> None:
        if not isinstance(msg, RpcReply) or msg.correlation_id != self.correlation:
            return
        lc = self.lifecycle
        if not lc.registered:
            lc.on_registration_response(msg.error_code, msg.body if msg.body is not None else -1, now)
        else:
            lc.on_heartbeat_response(msg.body if msg.error_code == 0 else HeartbeatReply(msg.error_code), now)
        self.tick(now)

    def next_deadline(self) -> int:
        return self.lifecycle.next_deadline()


class MetadataInvariants:
    def __init__(self, meta: MetadataCluster):
        self.meta = meta

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"t={self.meta.cluster.scheduler.now}ms: {what}")

    def check_batch(self, app: MetadataApp, delta: Delta) -> None:
        image = app.image
        for tid, pid in delta.changed_partitions:
            t = image.topics_by_id.get(tid)
            p = t.partitions.get(pid) if t is not None else None
            if p is not None:
                self._check_leader(app, t.name, pid, p)
        for b in delta.changed_brokers:
            reg = image.brokers.get(b)
            if reg is None or reg.fenced or reg.in_controlled_shutdown:
                for t in image.topics_by_id.values():
                    for pid, p in t.partitions.items():
                        if p.leader == b:
                            self._check_leader(app, t.name, pid, p)

    def _check_leader(self, app, topic: str, pid: int, p) -> None:
        if p.leader < 0:
            return
        reg = app.image.brokers.get(p.leader)
        why = (
            "is not registered"
            if reg is None
            else "is fenced"
            if reg.fenced
            else "is in controlled shutdown"
            if reg.in_controlled_shutdown
            else "is not in the ISR"
            if p.leader not in p.isr
            else None
        )
        if why:
            self.fail(
                f"node {app.sn.node_id} at offset {app.image.offset}: {topic}-{pid} is led by broker "
                f"{p.leader}, which {why}"
            )

    def check_unfenced_caught_up(self, ctl: ControllerApp, records: list[dict]) -> None:
        """A broker is unfenced only once it has applied its own registration."""
        for rec in records:
            if rec["type"] == "BrokerRegistrationChangeRecord" and rec["fenced"] == -1:
                b = rec["broker_id"]
                broker = self.meta.broker(b)
                reg = ctl.control.registration_offsets[b]
                if broker is None or broker.image.offset < reg:
                    self.fail(f"broker {b} unfenced before it applied its registration at offset {reg}")

    def check_committed_image(self, app: ControllerApp) -> None:
        """A controller that stopped leading holds the committed log's image, nothing more."""
        fresh = MetadataImage()
        d = Delta()
        for _, v in app.sn.state[: app.committed_end]:
            if isinstance(v, MetaRecord):
                fresh.replay(v.record, d)
        if image_records(fresh) != image_records(app.image):
            self.fail(f"controller {app.sn.node_id} kept uncommitted records in its image after losing the lead")

    def check_converged(self) -> None:
        apps = [sn.app for sn in self.meta.cluster.running()]
        for name, tid in self.meta.acked.items():
            for app in apps:
                t = app.image.topic(name)
                if t is None or t.topic_id != tid:
                    self.fail(f"node {app.sn.node_id} lacks acknowledged topic {name} ({tid})")
        image = apps[0].image
        active = {b for b, r in image.brokers.items() if not r.fenced and not r.in_controlled_shutdown}
        for t in image.topics_by_id.values():
            for pid, p in t.partitions.items():
                if p.leader < 0 and active & set(p.isr):
                    self.fail(
                        f"{t.name}-{pid} has no leader though ISR member(s) {sorted(active & set(p.isr))} are unfenced"
                    )
        want = image_records(image)
        for app in apps[1:]:
            if image_records(app.image) != want:
                self.fail(
                    f"nodes {apps[0].sn.node_id} and {app.sn.node_id} hold different images at "
                    f"offsets {apps[0].image.offset} / {app.image.offset}"
                )


class MetadataCluster:
    """The metadata layer of a :class:`~kesque.sim.cluster.RaftCluster`, and its client."""

    def __init__(self, cluster, lifecycle_config: LifecycleConfig | None = None):
        self.cluster = cluster
        self.rng = cluster.rng
        self.lifecycle_config = lifecycle_config or LifecycleConfig()
        self.inv = MetadataInvariants(self)
        self._batch = 0
        self.activations = 0
        self.acked: dict[str, uuid.UUID] = {}  # topics the client was told are created
        self.fenced_by_expiry: list = []  # (time, broker id)
        self.last_heard: dict[int, int] = {}  # broker id -> when an active controller last heard it
        self.creating: tuple | None = None  # (name, give up at)
        self.topics_wanted = 0
        cluster.app_factory = self._app

    def _app(self, cluster, sn):
        return ControllerApp(self, sn) if sn.node_id in cluster.voters else BrokerApp(self, sn)

    def next_batch_id(self) -> int:
        self._batch += 1
        return self._batch

    # -- queries ------------------------------------------------------------------------------------
    def controller(self) -> ControllerApp | None:
        """The active controller (of the highest epoch), if any."""
        best = None
        for sn in self.cluster.running():
            a = sn.app
            if isinstance(a, ControllerApp) and a.active and (best is None or a.active_epoch > best.active_epoch):
                best = a
        return best

    def brokers(self) -> list[int]:
        return sorted(self.cluster.observers)

    def broker(self, node_id: int) -> BrokerApp | None:
        return self.cluster.nodes[node_id].app

    def all_brokers_unfenced(self) -> bool:
        return all(self.cluster.is_running(b) and self.broker(b).lifecycle.unfenced for b in self.brokers())

    def committed_image(self) -> MetadataImage | None:
        """The image of the committed log: a standby controller's that has applied the most."""
        best = None
        for sn in self.cluster.running():
            a = sn.app
            if isinstance(a, ControllerApp) and not a.active and (best is None or a.committed_end > best.committed_end):
                best = a
        return best.image if best else None

    # -- the client: CreateTopics at the active controller ------------------------------------------------
    def create_topics(self, count: int) -> None:
        """Ask for ``count`` more topics, one at a time: each name until it is acknowledged."""
        self.topics_wanted += count

    def client_step(self) -> None:
        now = self.cluster.scheduler.now
        if len(self.acked) >= self.topics_wanted:
            return
        name = f"topic-{len(self.acked)}"
        if self.creating is not None and self.creating[0] == name and now < self.creating[1]:
            return  # in flight
        ctl = self.controller()
        if ctl is None:
            return
        rf = self.rng.randint(1, 3)
        result = ctl.create_topic(
            name, self.rng.randint(1, 3), rf, now, lambda tid, name=name: self._created(name, tid)
        )
        if result == "proposed":
            self.creating = (name, now + 2000)

    def _created(self, name: str, tid: uuid.UUID) -> None:
        self.acked.setdefault(name, tid)
        if self.acked[name] != tid:
            self.inv.fail(f"topic {name} acknowledged twice with different ids")
