"""QuorumController: the controller of a KRaft quorum — propose, answer once committed.

:class:`~kesque.controller.controller.Controller` keeps the rules (validation, placement, the
records each change writes); this class gives it its commit seam and its images:

- the **committed image**: every committed record of ``__cluster_metadata`` replayed, on every
  controller (standbys too), fed by the raft manager's ``on_commit``;
- the **working image**, on the active controller only: a copy of the committed image with
  every proposal applied at once, so that concurrent requests validate against the changes
  still waiting for the quorum (a second CreateTopics of the same name is refused before the
  first has committed). Losing leadership discards it.

The active controller is the raft leader once the LeaderChange of its own epoch is committed
and applied (everything committed before it is then in the committed image). ``call`` runs a
Controller method on the working image: its records are appended to the raft log, and the
call returns when they are committed, REQUEST_TIMED_OUT past the deadline, NOT_CONTROLLER if
leadership is lost first or this controller is not active. Nothing here reaches the broker: the
broker's image is fed by the same committed records, through its own listener.

Replication (docs/replication.md): ``alter_partition`` and ``elect_leaders`` run
:class:`~kesque.controller.replication_control.ReplicationControl` on the working image and answer
once committed; the active controller of a cluster runs the unclean elections every
``unclean.leader.election.interval.ms`` (and at a config change) and the preferred ones every
``leader.imbalance.check.interval.seconds`` with ``auto.leader.rebalance.enable``.
"""

from __future__ import annotations

import asyncio
import copy
import logging

from ...controller import reassignment
from ...controller.cluster_control import ClusterControl, HeartbeatReply, HeartbeatRequest, RegistrationRequest
from ...controller.controller import Controller
from ...controller.replication_control import ReplicationControl, min_isr_in, unclean_enabled_in
from ...errors import ErrorCode, KafkaError
from ...metadata import records as mr
from ...metadata.image import Delta, MetadataImage
from ...raft.log import LeaderChange
from .. import bootstrap

log = logging.getLogger(__name__)


def not_controller() -> KafkaError:
    return KafkaError(ErrorCode.not_controller, "This is not the correct controller for this cluster.")


class QuorumController:
    """``raft``: the narrow interface of the raft manager this controller proposes through:
    ``append(values) -> last offset``, ``end_offset()``, ``is_leader()``, ``epoch``, ``node_id``.
    ``lifecycle``: brokers register fenced, heartbeat, and are fenced when their session expires
    (:class:`ClusterControl`); without it (a lone node) a registration is unfenced at once."""

    def __init__(self, config, clock, raft, cluster_id: str | None, lifecycle: bool = False):
        self.raft = raft
        self.clock = clock
        self.lifecycle = lifecycle
        self.committed = MetadataImage()
        self.committed.cluster_id = cluster_id
        # the Controller's commit seam: its ``log.append`` is our raft append (``append``); it
        # replays what it proposes into its image, the working image
        self.controller = Controller(config, self.committed, self, clock, lambda _delta: None)
        self.active_epoch = -1
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._proposed = -1
        self._static_unclean = bool(getattr(config, "static", {}).get("unclean.leader.election.enable", False))
        self._static_min_isr = int(getattr(config, "static", {}).get("min.insync.replicas", 1) or 1)
        self.cluster = ClusterControl(
            config, lambda: self.controller.image, cluster_id, self.unclean_enabled, self.min_isr
        )
        self.replication = ReplicationControl(lambda: self.controller.image, self.unclean_enabled, self.min_isr)
        self._written_end = -1
        # the records `storage format` left for a fresh cluster's first batch (--add-scram)
        meta_dir = getattr(config, "metadata_log_dir", None)
        self._bootstrap_records = bootstrap.read(meta_dir) if meta_dir else None
        # the active controller's periodic elections (Kafka's maybeElectUncleanLeaders and
        # maybeBalancePartitionLeaders): {name: (interval ms, task)}, and their timers
        rebalance = config.get("auto.leader.rebalance.enable")
        self._periodic_tasks = {
            "unclean": (config.get("unclean.leader.election.interval.ms") or 0, self._unclean_elections),
            "balance": (
                (config.get("leader.imbalance.check.interval.seconds") or 0) * 1000 if rebalance else 0,
                self.replication.balance_partition_leaders,
            ),
        }
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._expiry: asyncio.TimerHandle | None = None
        # KIP-835: the active controller of a cluster appends a NoOpRecord every
        # metadata.max.idle.interval.ms, so that the log (and the high watermark every broker
        # learns) moves even when nothing changes
        self.idle_interval_ms = config.get("metadata.max.idle.interval.ms") if lifecycle else 0
        self._noop: asyncio.TimerHandle | None = None
        self.shut_down = False  # shutdown(): never active again (its timers would write to a closed log)

    def _now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> bool:
        return self.active_epoch >= 0

    def load_snapshot(self, values: list, end_offset: int) -> None:
        self.committed = self._fresh()
        self.committed.offset = end_offset - 1
        delta = Delta()
        for v in values:
            if isinstance(v, (bytes, bytearray)):
                self.committed.replay(mr.decode(v), delta)
        if not self.active:
            self.controller.image = self.committed

    def _fresh(self) -> MetadataImage:
        image = MetadataImage()
        image.cluster_id = self.committed.cluster_id
        return image

    def apply_committed(self, records: list) -> None:
        """Committed records, in offset order: replayed into the committed image; our own
        epoch's LeaderChange makes this controller active; waiters up to them answered."""
        delta = Delta()
        for rec in records:
            if isinstance(rec.value, (bytes, bytearray)):
                record = mr.decode(rec.value)
                self.committed.replay(record, delta)
                self.cluster.replay(record, rec.offset)
            elif isinstance(rec.value, LeaderChange):
                if (
                    rec.value.leader_id == self.raft.node_id
                    and self.raft.is_leader()
                    and rec.epoch == self.raft.epoch
                    and not self.active
                ):
                    self._activate(rec.epoch)
            self.committed.offset = rec.offset
        if records:
            self._complete(records[-1].offset)

    def on_state_change(self, change) -> None:
        if self.active and (change.new != "Leader" or change.epoch != self.active_epoch):
            self._deactivate()

    def shutdown(self) -> None:
        """The node is stopping, before its raft manager resigns and closes the metadata log:
        no longer active (its timers cancelled, its waiters answered NOT_CONTROLLER), and never
        active again, whatever the raft node does meanwhile."""
        self.shut_down = True
        if self.active:
            self._deactivate()

    def _activate(self, epoch: int) -> None:
        if self.shut_down:
            return
        self.active_epoch = epoch
        self.controller.image = copy.deepcopy(self.committed)
        log.info(
            "Controller %d is active in epoch %d (metadata offset %d)", self.raft.node_id, epoch, self.committed.offset
        )
        try:
            self.controller.bootstrap(self._bootstrap_records)
        except KafkaError as e:
            log.warning("could not record the finalized features: %s", e)
        self.cluster.activate(self._now_ms())
        self._schedule_expiry()
        self._schedule_noop()
        for name in self._periodic_tasks:
            self._schedule_periodic(name)

    def _deactivate(self) -> None:
        log.info("Controller %d is no longer active (epoch %d)", self.raft.node_id, self.active_epoch)
        self.active_epoch = -1
        self._written_end = -1  # what it proposed may be truncated by the next leader
        self.controller.image = self.committed
        self.cluster.deactivate()
        for timer in (self._expiry, self._noop):
            if timer is not None:
                timer.cancel()
        self._expiry = self._noop = None
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        waiters, self._waiters = self._waiters, []
        for _offset, fut in waiters:
            if not fut.done():
                fut.set_exception(not_controller())

    # ------------------------------------------------------------------ propose
    def append(self, records: list[dict]) -> int:
        """The Controller's commit seam: append to the raft log (one batch); the last offset.
        The Controller then replays the records into its image, the working image."""
        if not self.active:
            raise not_controller()
        try:
            offset = self.raft.append([mr.encode(r) for r in records])
        except KafkaError:
            raise not_controller() from None
        self._proposed = max(self._proposed, offset)
        self._written_end = max(self._written_end, offset)
        return offset

    async def call(self, method: str, *args, timeout_ms: int = 30000, **kwargs):
        """Run ``Controller.<method>`` on the working image; its result once its records are
        committed. Raises NOT_CONTROLLER (not active, or leadership lost before the commit) or
        REQUEST_TIMED_OUT."""
        if not self.active:
            raise not_controller()
        self._proposed = -1
        result = getattr(self.controller, method)(*args, **kwargs)
        offset, self._proposed = self._proposed, -1
        if method in ("incremental_alter_configs", "alter_configs") and offset >= 0:
            self._run_periodic("unclean")  # turning unclean election on elects at once (docs/replication.md)
        await self._committed(offset, timeout_ms)
        return result

    async def _committed(self, offset: int, timeout_ms: int) -> None:
        if offset < 0 or offset <= self.committed.offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_ms / 1000.0)
        except TimeoutError:
            raise KafkaError(
                ErrorCode.request_timed_out, f"The controller did not commit the change within {timeout_ms} ms."
            ) from None

    def _write(self, records: list[dict]) -> int:
        """Propose ``records`` (one batch) and apply them to the working image; the last offset."""
        self._proposed = -1
        self.controller.commit(records)
        offset, self._proposed = self._proposed, -1
        return offset

    async def list_partition_reassignments(self, topics, timeout_ms: int = 30000) -> list:
        """ListPartitionReassignments, read from the committed image as Kafka's controller
        reads at its last committed offset (``reassignment.list_reassignments``)."""
        if not self.active:
            raise not_controller()
        return reassignment.list_reassignments(self.committed, topics)

    # ------------------------------------------------------------------ broker lifecycle
    async def register(self, req: RegistrationRequest, timeout_ms: int = 30000) -> int:
        """BrokerRegistration: the broker's epoch once its registration is committed."""
        if not self.active:
            raise not_controller()
        if not self.lifecycle:
            return await self.call(
                "register_broker", req.broker_id, [_endpoint(e) for e in req.listeners], req.rack, timeout_ms=timeout_ms
            )
        records, epoch = self.cluster.register(req, self._now_ms(), self.raft.end_offset())
        await self._committed(self._write(records), timeout_ms)
        return epoch

    async def heartbeat(self, req: HeartbeatRequest, timeout_ms: int = 30000) -> HeartbeatReply:
        """BrokerHeartbeat: the reply once the records it caused (fence, unfence, controlled
        shutdown) are committed."""
        if not self.active:
            raise not_controller()
        records, reply = self.cluster.heartbeat(req, self._now_ms(), self.raft.end_offset())
        offset = self._write(records)
        self._schedule_expiry()
        await self._committed(offset, timeout_ms)
        return reply

    async def assign_replicas_to_dirs(
        self, broker_id: int, broker_epoch: int, assignments: dict, timeout_ms: int = 30000
    ) -> dict:
        """AssignReplicasToDirs (KIP-858): the per-partition answer once the directory changes
        (and the ISR changes of replicas assigned to an offline dir) are committed."""
        if not self.active:
            raise not_controller()
        records, answer = self.cluster.assign_replicas_to_dirs(broker_id, broker_epoch, assignments)
        await self._committed(self._written(records), timeout_ms)
        return answer

    async def unregister(self, broker_id: int, timeout_ms: int = 30000) -> None:
        """UnregisterBroker: answered once the broker's registration is gone (committed)."""
        if not self.active:
            raise not_controller()
        if not self.lifecycle and broker_id == self.raft.node_id:
            raise KafkaError(
                ErrorCode.invalid_request,
                "A single kesque node cannot unregister its own broker: "
                "without heartbeats it would never register again",
            )
        records = self.cluster.unregister(broker_id)
        await self._committed(self._write(records), timeout_ms)

    def _schedule_expiry(self) -> None:
        """Fence the brokers whose session ran out, one batch per broker, at the deadline."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if not self.active or not self.lifecycle:
            return
        deadline = self.cluster.next_deadline()
        if deadline >= (1 << 62):
            return
        delay = max(deadline - self._now_ms(), 0) / 1000.0
        self._expiry = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        if not self.active:
            return
        try:
            records = self.cluster.expire(self._now_ms())
            if records:
                log.info("Fencing broker %s: its session expired", records[-1].get("broker_id"))
                self._write(records)
        except KafkaError as e:
            log.warning("session expiry failed: %s", e)
        self._schedule_expiry()

    def _schedule_noop(self) -> None:
        if self.active and self.idle_interval_ms > 0:
            self._noop = asyncio.get_running_loop().call_later(self.idle_interval_ms / 1000.0, self._write_noop)

    def _write_noop(self) -> None:
        self._noop = None
        if not self.active:
            return
        try:
            self._write([{"type": "NoOpRecord"}])
        except KafkaError as e:
            log.debug("no NoOpRecord written: %s", e)
        self._schedule_noop()

    # ------------------------------------------------------------------ replication
    def min_isr(self, topic: str) -> int:
        """The topic's min.insync.replicas, from the working image."""
        return min_isr_in(self.controller.image, topic, self.raft.node_id, self._static_min_isr)

    def unclean_enabled(self, topic: str) -> bool:
        """The topic's effective unclean.leader.election.enable, from the working image."""
        return unclean_enabled_in(self.controller.image, topic, self.raft.node_id, self._static_unclean)

    async def alter_partition(self, reqs: list, version: int = 3, timeout_ms: int = 30000) -> list:
        """AlterPartition (one broker's request): an AlterPartitionReply per partition once the
        PartitionChangeRecords (one batch) are committed. STALE_BROKER_EPOCH / NOT_CONTROLLER
        fail the whole request."""
        if not self.active:
            raise not_controller()
        records, replies = self.replication.alter_partitions(reqs, version)
        await self._committed(self._written(records), timeout_ms)
        return replies

    async def elect_leaders(
        self, election: str, partitions: dict[str, list[int]] | None, timeout_ms: int = 30000
    ) -> dict:
        """ElectLeaders (PREFERRED or UNCLEAN; ``partitions`` None: all): {topic: [(partition,
        error code, message)]} once the elections are committed."""
        if not self.active:
            raise not_controller()
        records, results = self.replication.elect_leaders(election, partitions)
        await self._committed(self._written(records), timeout_ms)
        return results

    def _written(self, records: list[dict]) -> int:
        """Write ``records``; the offset to wait for. Without records, the last one written: an
        answer read from the working image waits until what it saw is committed (as Kafka)."""
        offset = self._write(records)
        return offset if offset >= 0 else self._written_end

    def _unclean_elections(self) -> list[dict]:
        records = self.replication.elect_unclean_leaders()
        names = {t.topic_id: t.name for t in self.controller.image.topics_by_id.values()}
        for r in records:
            log.error(
                "Triggering unclean leader election for offline partition %s-%d.",
                names.get(r["topic_id"]),
                r["partition_id"],
            )
        return records

    def _schedule_periodic(self, name: str) -> None:
        interval_ms = self._periodic_tasks[name][0]
        if self.active and self.lifecycle and interval_ms > 0:
            self._timers[name] = asyncio.get_running_loop().call_later(interval_ms / 1000.0, self._periodic, name)

    def _periodic(self, name: str) -> None:
        self._timers.pop(name, None)
        self._run_periodic(name)
        self._schedule_periodic(name)

    def _run_periodic(self, name: str) -> None:
        if not self.active:
            return
        try:
            records = self._periodic_tasks[name][1]()
            if records:
                self._write(records)
        except KafkaError as e:
            log.warning("%s elections failed: %s", name, e)

    def _complete(self, offset: int) -> None:
        if not self._waiters:
            return
        keep = []
        for at, fut in self._waiters:
            if at <= offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((at, fut))
        self._waiters = keep


def _endpoint(e) -> dict:
    return {"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
