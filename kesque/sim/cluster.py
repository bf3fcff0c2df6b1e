"""A KRaft quorum under the simulator: nodes, their disks, the router, and the fault actions.

A node id maps to a :class:`SimNode`: its :class:`~kesque.sim.disk.Disk` (which survives crashes)
and, while it runs, its :class:`~kesque.raft.RaftNode` (rebuilt from the disk at each start).
Voters are nodes ``0 .. voters-1``, observers (brokers) the ones after. The next issue adds
partition replicas to the same cluster: anything that is not Raft goes beside ``SimNode.raft``.

An *application* (``app_factory(cluster, sn)``, built at each start, e.g. the metadata layer of
:mod:`kesque.sim.metadata`) rides on a node beside its Raft: it sees what the node commits and
installs (``on_output``, after the node's state is updated), gets the messages that are not
Raft's (``handle``), and is ticked at its own ``next_deadline``.

Flushes are asynchronous, as the server runs them in a worker thread: when a node asks for one
(``Output.flush``) the cluster begins it at once (``log.begin_flush``: the end it will make
durable is fixed then) and ends it ``flush_ms`` later (a random delay in that range), then
tells the node (``RaftNode.flushed``); one at a time per node, a request meanwhile starts
another when it ends. A crash before the end loses what it would have made durable; a graceful
shutdown waits for its flush.
"""

from __future__ import annotations

import random

from ..errors import KafkaError
from ..raft import Knobs, QuorumConfig, RaftNode
from ..raft import messages as rm
from .disk import Disk
from .network import NetworkFaults, Router
from .scheduler import Scheduler

RAFT_MESSAGES = frozenset(rm.REQUESTS) | {
    rm.VoteResponse,
    rm.BeginQuorumEpochResponse,
    rm.EndQuorumEpochResponse,
    rm.FetchResponse,
    rm.FetchSnapshotResponse,
}


def sim_config() -> QuorumConfig:
    """Kafka's defaults, except a request timeout below the fetch timeout: the simulated network
    drops messages, where TCP would retransmit, and one lost fetch must not start an election;
    and small FetchSnapshot chunks, so that a snapshot takes several."""
    return QuorumConfig(request_timeout_ms=500, fetch_snapshot_max_bytes=256)


class SimNode:
    __slots__ = (
        "node_id",
        "disk",
        "raft",
        "incarnation",
        "timer_at",
        "timer_gen",
        "applied",
        "state",
        "app",
        "flushing",
        "flush_again",
    )

    def __init__(self, node_id: int, disk: Disk):
        self.node_id = node_id
        self.disk = disk
        self.raft: RaftNode | None = None
        self.incarnation = 0
        self.timer_at = -1
        self.timer_gen = 0
        self.applied = 0  # next offset the application expects (checked by the invariants)
        self.state: list = []  # the application: (epoch, value) of every record applied
        self.app = None  # an application beside the Raft node (see the module doc)
        self.flushing = None  # the FlushJob in flight
        self.flush_again = False  # asked for while one was in flight


class RaftCluster:
    def __init__(
        self,
        scheduler: Scheduler,
        voters: int,
        observers: int = 0,
        config: QuorumConfig | None = None,
        faults: NetworkFaults | None = None,
        knobs: Knobs | None = None,
        torn_tail: bool = False,
        snapshot_every: int = 0,
        app_factory=None,
        flush_ms: tuple[int, int] = (0, 0),
    ):
        self.scheduler = scheduler
        self.rng = scheduler.rng
        self.config = config or sim_config()
        self.knobs = knobs or Knobs()
        self.torn_tail = torn_tail
        self.flush_ms = flush_ms
        self.flushes = 0
        self.router = Router(scheduler, self._deliver, faults)
        self.nodes = {i: SimNode(i, Disk(self._new_directory_id())) for i in range(voters + observers)}
        self.voters = {i: self.nodes[i].disk.directory_id for i in range(voters)}
        self.observers = set(range(voters, voters + observers))
        self.on_commit = []  # callbacks (node id, [Record]) for the invariants
        self.on_snapshot = []  # callbacks (node, SnapshotId, values, installed) likewise
        self.snapshot_every = snapshot_every  # records applied past the log start: snapshot
        self.snapshots_installed = 0
        self.app_factory = app_factory
        self.next_value = 0
        self.appended = 0

    def _new_directory_id(self) -> str:
        return "%032x" % self.rng.getrandbits(128)

    # -- who is who ---------------------------------------------------------------------------------
    @property
    def ids(self) -> list[int]:
        return list(self.nodes)

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def running(self):
        return [sn for sn in self.nodes.values() if sn.raft is not None]

    def is_running(self, node_id: int) -> bool:
        return self.nodes[node_id].raft is not None

    def leader(self) -> RaftNode | None:
        """The running leader of the highest epoch, if any."""
        best = None
        for sn in self.nodes.values():
            r = sn.raft
            if r is not None and r.is_leader() and (best is None or r.epoch > best.epoch):
                best = r
        return best

    def leader_id(self) -> int:
        r = self.leader()
        return -1 if r is None else r.node_id

    def has_consistent_leader(self, among=None) -> bool:
        """All running nodes (of ``among``) agree on one leader and epoch, and it runs."""
        seen = {(sn.raft.epoch, sn.raft.leader_id) for sn in self.running() if among is None or sn.node_id in among}
        if len(seen) != 1:
            return False
        ((_, leader),) = seen
        return leader >= 0 and self.is_running(leader)

    def high_watermarks(self, among=None) -> list[int]:
        return [sn.raft.high_watermark for sn in self.running() if among is None or sn.node_id in among]

    def max_high_watermark(self, among=None) -> int:
        return max(self.high_watermarks(among), default=0)

    def any_reached(self, hw: int, among=None) -> bool:
        return self.max_high_watermark(among) >= hw

    def all_reached(self, hw: int, among=None) -> bool:
        hws = self.high_watermarks(among)
        return bool(hws) and min(hws) >= hw

    # -- node lifecycle -----------------------------------------------------------------------------
    def start(self, node_id: int) -> None:
        sn = self.nodes[node_id]
        assert sn.raft is None, f"node {node_id} already runs"
        sn.incarnation += 1
        log = sn.disk.log
        sn.applied = log.log_start_offset()  # the application loads the latest snapshot
        snap = log.latest_snapshot()
        sn.state = list(log.snapshot_values(snap)) if snap else []
        sn.raft = RaftNode(
            node_id,
            sn.disk.directory_id,
            self.voters,
            sn.disk.log,
            sn.disk.store,
            self.config,
            random.Random(self.rng.getrandbits(64)),
            self.scheduler.now,
            self.knobs,
        )
        sn.app = self.app_factory(self, sn) if self.app_factory else None
        self._process(sn, sn.raft.tick(self.scheduler.now))

    def start_all(self) -> None:
        for i in self.nodes:
            self.start(i)

    def kill(self, node_id: int) -> None:
        """Crash: the process stops, unflushed writes are lost (a torn tail may keep some)."""
        sn = self.nodes[node_id]
        self._stop(sn)
        sn.disk.crash(self.rng, self.torn_tail)

    def shutdown(self, node_id: int) -> None:
        """Graceful: a leader resigns (EndQuorumEpoch), everything is flushed, then the stop."""
        sn = self.nodes[node_id]
        self._process(sn, sn.raft.resign(self.scheduler.now))
        if sn.flushing is not None:  # the one in flight completes first
            sn.disk.log.end_flush(sn.flushing)
        sn.disk.log.flush()
        self._stop(sn)

    def _stop(self, sn: SimNode) -> None:
        sn.raft = None
        sn.app = None
        sn.flushing = None  # a flush in flight never completes
        sn.flush_again = False
        sn.timer_gen += 1  # its pending tick is void
        sn.timer_at = -1  # and the next incarnation schedules its own, whatever its time

    def kill_and_wipe(self, node_id: int) -> None:
        """The node's disk is replaced: it restarts empty, with a new directory id."""
        self.kill(node_id)
        self.nodes[node_id].disk.wipe(self._new_directory_id())

    # -- the client ---------------------------------------------------------------------------------
    def append(self) -> None:
        """Append the next integer at the current leader, as Kafka's SequentialAppendAction."""
        r = self.leader()
        if r is None:
            return
        try:
            r.append([self.next_value], self.scheduler.now)
        except KafkaError:
            return
        self.next_value += 1
        self.appended += 1
        self._reschedule(self.nodes[r.node_id])

    def wake(self, node_id: int) -> None:
        """Something outside changed the node's application (a scenario's action): tick it now."""
        sn = self.nodes[node_id]
        if sn.raft is not None:
            sn.timer_at = -1
            sn.timer_gen += 1
            self.scheduler.at(self.scheduler.now, self._tick, sn, sn.timer_gen)

    # -- plumbing -----------------------------------------------------------------------------------
    def _deliver(self, src: int, dst: int, msg) -> None:
        sn = self.nodes[dst]
        if sn.raft is None:
            return
        if type(msg) in RAFT_MESSAGES:
            self._process(sn, sn.raft.handle(src, msg, self.scheduler.now))
        elif sn.app is not None:
            sn.app.handle(src, msg, self.scheduler.now)
            self._reschedule(sn)

    def _tick(self, sn: SimNode, gen: int) -> None:
        if gen != sn.timer_gen or sn.raft is None:
            return
        sn.timer_at = -1
        self._process(sn, sn.raft.tick(self.scheduler.now))
        if sn.app is not None and sn.raft is not None:
            sn.app.tick(self.scheduler.now)
            self._reschedule(sn)

    def _process(self, sn: SimNode, out) -> None:
        send = self.router.send
        for dst, msg in out.messages:
            send(sn.node_id, dst, msg)
        if out.snapshot is not None:
            sid, values = out.snapshot
            self.snapshots_installed += 1
            for cb in self.on_snapshot:
                cb(sn, sid, values, True)
            sn.state = list(values)
        if out.committed:
            for cb in self.on_commit:
                cb(sn, out.committed)
            sn.state.extend((r.epoch, r.value) for r in out.committed)
            if self.snapshot_every and sn.raft is not None:
                self._maybe_snapshot(sn)
        if sn.app is not None:
            sn.app.on_output(out, self.scheduler.now)
        if out.flush and sn.raft is not None:
            self._begin_flush(sn)
        if sn.raft is not None:
            self._reschedule(sn)

    def _begin_flush(self, sn: SimNode) -> None:
        if sn.flushing is not None:
            sn.flush_again = True
            return
        job = sn.flushing = sn.disk.log.begin_flush()
        self.flushes += 1
        lo, hi = self.flush_ms
        self.scheduler.after(self.rng.randint(lo, hi), self._end_flush, sn, sn.incarnation, job)

    def _end_flush(self, sn: SimNode, incarnation: int, job) -> None:
        if sn.incarnation != incarnation or sn.flushing is not job or sn.raft is None:
            return  # the node crashed meanwhile: this flush never completed
        sn.flushing = None
        sn.disk.log.end_flush(job)
        again, sn.flush_again = sn.flush_again, False
        self._process(sn, sn.raft.flushed(self.scheduler.now))
        if again and sn.raft is not None and sn.flushing is None:
            self._begin_flush(sn)

    def _maybe_snapshot(self, sn: SimNode) -> None:
        log = sn.disk.log
        end = min(sn.applied, log.durable_end_offset())
        if end - log.log_start_offset() >= self.snapshot_every:
            values = sn.state[:end]
            sid = sn.raft.snapshot(end, values)
            for cb in self.on_snapshot:
                cb(sn, sid, values, False)

    def _reschedule(self, sn: SimNode) -> None:
        d = sn.raft.next_deadline()
        if sn.app is not None:
            d = min(d, sn.app.next_deadline())
        if d != sn.timer_at:
            sn.timer_at = d
            sn.timer_gen += 1
            if d < (1 << 61):
                self.scheduler.at(d, self._tick, sn, sn.timer_gen)
