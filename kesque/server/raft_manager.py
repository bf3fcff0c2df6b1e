"""RaftManager: one :class:`~kesque.raft.RaftNode` of ``__cluster_metadata-0`` on the event loop.

The node is sans-IO; this driver gives it the rest (Kafka's ``KafkaRaftManager``):

- its files: ``FileRaftLog`` and ``FileQuorumStateStore`` in the metadata log dir;
- its clock: a timer at ``node.next_deadline()``, re-armed after every input;
- its network: requests it emits go out through the :class:`~kesque.server.channel.Channel`
  (the voters' controller listeners, from ``controller.quorum.voters``) and their responses
  come back into ``node.handle``; requests from other nodes (Vote, BeginQuorumEpoch,
  EndQuorumEpoch, Fetch and FetchSnapshot of ``__cluster_metadata``) are handed to the node
  and answered when the node emits the response (a Fetch waits: long poll);
- its outputs: committed records, snapshots to load and state changes go to the listeners
  (the controller's image and the broker's image), in offset order;
- its disk: when the node asks for a flush (``Output.flush``), the fsync runs in a worker thread
  of its own (``raft-flush-N``) while the loop goes on serving requests and appending; the end
  offset is noted on the loop when the flush begins and the log is durable up to that end once
  it completes (``FileRaftLog.begin_flush`` / ``end_flush``), then the node is told
  (``RaftNode.flushed``). One flush at a time; a request meanwhile starts the next one when it
  ends. Only the ``quorum-state`` file is still written (and fsynced) on the loop: rarely (once
  per election state change), and a vote must be durable before its answer goes out.

A voter elects itself at once when it is the only voter (a single-node cluster starts as
fast as before). A node that is not in the voters is an observer: it fetches from the leader
and never votes. Nothing here is process-wide: several managers may run in one process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import random
import time

from ..clock import SYSTEM_CLOCK
from ..config.types import ConfigError
from ..errors import KafkaError, error
from ..protocol.api import request_class
from ..protocol.api_keys import ApiKeys
from ..raft import QuorumConfig, RaftNode, wire
from ..raft import messages as m
from ..raft.file_log import FileQuorumStateStore, FileRaftLog
from ..raft.node import NEVER
from ..raft.state import RESIGNED
from .channel import Channel, ChannelError

log = logging.getLogger(__name__)

# api name -> (api key, version this node sends); the versions Kafka 4.4 sends between controllers
SEND = {
    "vote": (52, 2),
    "begin_quorum_epoch": (53, 1),
    "end_quorum_epoch": (54, 1),
    "fetch": (1, 17),
    "fetch_snapshot": (59, 1),
}
RAFT_APIS = {52: "vote", 53: "begin_quorum_epoch", 54: "end_quorum_epoch", 59: "fetch_snapshot"}

# controller.quorum.* (Kafka's names and defaults) -> QuorumConfig field
QUORUM_KEYS = {
    "controller.quorum.election.timeout.ms": ("election_timeout_ms", 1000),
    "controller.quorum.fetch.timeout.ms": ("fetch_timeout_ms", 2000),
    "controller.quorum.election.backoff.max.ms": ("election_backoff_max_ms", 1000),
    "controller.quorum.request.timeout.ms": ("request_timeout_ms", 2000),
    "controller.quorum.retry.backoff.ms": ("retry_backoff_ms", 20),
    "controller.quorum.append.linger.ms": ("append_linger_ms", 25),
}


def quorum_config(config, lone_voter: bool = False) -> QuorumConfig:
    """The node's QuorumConfig from the ``controller.quorum.*`` settings of ``config``. A lone
    voter has no followers to batch appends for: unless the linger is set, it flushes each
    commit at once (as kesque's single node always has) rather than after Kafka's 25 ms."""
    qc = QuorumConfig()
    raw = getattr(config, "raw", {}) or {}
    for key, (attr, default) in QUORUM_KEYS.items():
        if lone_voter and attr == "append_linger_ms":
            default = 0
        static = getattr(config, "static", None)
        value = static[key] if static is not None and key in static else raw.get(key, default)
        try:
            setattr(qc, attr, int(value))
        except (TypeError, ValueError):
            raise ConfigError(key, f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
    # a parked Fetch must be answered before its sender gives up on it (Kafka waits 500 ms,
    # with a 2 s request timeout): shorter request timeouts shorten the long poll; and before
    # the follower's fetch timeout, or an idle quorum's follower that waited the whole long
    # poll (500 ms) against a 500 ms fetch timeout goes prospective and elections churn
    qc.fetch_max_wait_ms = max(min(qc.fetch_max_wait_ms, qc.request_timeout_ms // 2, qc.fetch_timeout_ms // 2), 1)
    return qc


INCONSISTENT_CLUSTER_ID = 104
_RESPONSE = {
    m.VoteRequest: m.VoteResponse,
    m.BeginQuorumEpochRequest: m.BeginQuorumEpochResponse,
    m.EndQuorumEpochRequest: m.EndQuorumEpochResponse,
    m.FetchRequest: m.FetchResponse,
    m.FetchSnapshotRequest: m.FetchSnapshotResponse,
}


def _refusal(msg, code: int):
    """The error response to a raft request (no leader, no epoch)."""
    cls = _RESPONSE[type(msg)]
    if cls is m.VoteResponse:
        return cls(msg.correlation_id, code, -1, -1, False, msg.pre_vote)
    return cls(msg.correlation_id, code, -1, -1)


def _source(msg) -> int:
    """The node a raft request comes from."""
    if isinstance(msg, (m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest)):
        return msg.leader_id
    return msg.replica_id


async def discover_voters(
    servers: list[tuple[str, int]],
    controller_listeners: set[str],
    node_id: int,
    log_every_s: float = 10.0,
    ssl_context=None,
    sasl=None,
) -> dict[int, tuple[str, int]]:
    """The voters and their controller endpoints, asked of the bootstrap servers with
    DescribeQuorum v2 (every voter answers with the nodes it knows), retried until one answers."""

    channel = Channel(
        lambda i: servers[i] if 0 <= i < len(servers) else None,
        client_id=f"raft-bootstrap-{node_id}",
        request_timeout_ms=2000,
        ssl_context=ssl_context,
        sasl=sasl,
    )
    cls = request_class(ApiKeys.DESCRIBE_QUORUM, 2)
    mod = __import__(cls.__module__, fromlist=["x"])
    body = cls(
        topics=(mod.TopicData(topic_name=wire.METADATA_TOPIC, partitions=(mod.PartitionData(partition_index=0),)),)
    )
    loop = asyncio.get_running_loop()
    next_log = loop.time() + log_every_s
    try:
        while True:
            for i in range(len(servers)):
                try:
                    resp = await channel.send(i, ApiKeys.DESCRIBE_QUORUM, 2, body)
                except ChannelError:
                    continue
                found = {}
                for n in resp.nodes:
                    eps = [x for x in n.listeners if x.name.upper() in controller_listeners] or list(n.listeners)
                    if eps:
                        found[n.node_id] = (eps[0].host, eps[0].port)
                if found:
                    return found
            if loop.time() >= next_log:
                next_log = loop.time() + log_every_s
                log.info(
                    "Waiting for the controllers at %s to describe the quorum",
                    ", ".join(f"{h}:{p}" for h, p in servers),
                )
            await asyncio.sleep(0.2)
    finally:
        channel.close()


class RaftManager:
    def __init__(
        self,
        node_id: int,
        voters: dict[int, tuple[str, int] | None],
        metadata_dir: str,
        qconfig: QuorumConfig,
        channel,
        cluster_id: str | None,
        endpoints: tuple = (),
        seed: int | None = None,
        clock=SYSTEM_CLOCK,
    ):
        self.node_id = node_id
        self.voters = dict(voters)
        self.metadata_dir = metadata_dir
        self.qconfig = qconfig
        self.channel = channel
        self.cluster_id = cluster_id
        self.endpoints = tuple(endpoints)  # (listener, host, port) announced as leader
        self.rng = random.Random(seed)
        self.clock = clock  # the records' and the RPCs' timestamps (the raft timers run on loop.time())
        self.node: RaftNode | None = None
        self.log: FileRaftLog | None = None
        self.dir_failure = None  # the broker's LogDirFailureChannel (set by the server)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._commit_listeners = []  # fn(list[Record])
        self._snapshot_listeners = []  # fn(list of values, snapshot end offset)
        self._state_listeners = []  # fn(StateChange)
        self._pending: dict[tuple[int, int], asyncio.Future] = {}  # (src, our corr) -> its answer
        self._latest: dict[tuple[int, type], tuple[int, int]] = {}  # (src, request type) -> key
        self._corr = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = -1
        self._tasks: set[asyncio.Task] = set()
        self._caught_up: asyncio.Event | None = None
        self.closed = False
        # set when close() begins: nothing more is appended (the log is about to close)
        self.closing = False
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._flush: asyncio.Future | None = None  # the flush in flight (its worker-thread half)
        self._flush_again = False
        self._pending_snapshot: tuple[int, list] | None = None  # (end offset, values) to write once durable
        self.flushes = 0
        # test-only: while the file this names exists, a flush holds in its worker thread (and
        # says so by creating "<file>.held"); tests/test_raft_flush.py proves the loop goes on
        self._test_flush_hold = os.environ.get("KESQUE_TEST_RAFT_FLUSH_HOLD") or None
        # bench-only (bench/raft_flush.py): a slow disk (each flush sleeps this long first), and
        # the fsync on the event loop as before, to compare
        self._test_flush_delay = int(os.environ.get("KESQUE_TEST_RAFT_FLUSH_DELAY_MS") or 0) / 1000.0
        self._test_flush_on_loop = os.environ.get("KESQUE_TEST_RAFT_FLUSH_ON_LOOP") == "1"

    # ------------------------------------------------------------------ listeners
    def on_commit(self, fn) -> None:
        self._commit_listeners.append(fn)

    def on_snapshot(self, fn) -> None:
        self._snapshot_listeners.append(fn)

    def on_state_change(self, fn) -> None:
        self._state_listeners.append(fn)

    # ------------------------------------------------------------------ lifecycle
    def _now(self) -> int:
        return int(self.loop.time() * 1000)

    def now_ms(self) -> int:
        """The raft node's clock (the event loop's, in ms): its commit latency window's."""
        return self._now()

    def _io_error(self, msg: str, e: OSError) -> None:
        if self.dir_failure is not None:
            self.dir_failure.maybe_add_offline_log_dir(os.path.abspath(self.metadata_dir), msg, e)

    def start(self) -> None:
        """Open the files and start the node; the latest snapshot is loaded first. A lone
        voter elects itself here, so its committed records are applied before this returns."""
        self.loop = asyncio.get_running_loop()
        self._caught_up = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"raft-flush-{self.node_id}")
        self.log = FileRaftLog(self.metadata_dir, clock=self.clock.now_ms)
        # a disk error in the metadata log takes the metadata log dir offline: the broker halts
        # (Kafka's "Shutdown broker because the metadata log dir DIR has failed"); until then
        # the log takes no more appends
        self.log.log.dir_failure = self.dir_failure
        latest = self.log.latest_snapshot()
        if latest is not None:
            values = self.log.snapshot_values(latest)
            for fn in self._snapshot_listeners:
                fn(values, latest.end_offset)
        # quorum-state beside the segments, in __cluster_metadata-0, as Kafka's KafkaRaftManager
        store = FileQuorumStateStore(self.log.path)
        self.node = RaftNode(
            self.node_id, None, {v: None for v in self.voters}, self.log, store, self.qconfig, self.rng, self._now()
        )
        self._run(self.node.tick)

    async def wait_caught_up(self, log_every_s: float = 10.0) -> None:
        """Until a leader is known and everything up to its high watermark is applied (logged
        every ``log_every_s`` while it lasts: a quorum without a majority never gets there)."""
        while True:
            try:
                await asyncio.wait_for(self._caught_up.wait(), log_every_s)
                return
            except TimeoutError:
                node = self.node
                log.info(
                    "Waiting for the metadata quorum: leader %s, epoch %d, high watermark %d, applied %d (voters %s)",
                    self.leader_id if self.leader_id >= 0 else "unknown",
                    node.epoch,
                    node.high_watermark,
                    node.applied,
                    ", ".join(map(str, sorted(self.voters))),
                )

    async def close(self, graceful: bool = True) -> None:
        """Resign (EndQuorumEpoch to the voters, briefly awaited) and close the log. The node
        is shutting down from then on (``RaftNode.resign``): it never stands for election
        again, so no new leader's controller writes to the log this closes."""
        if self.closed or self.node is None:
            return
        self.closing = True
        if graceful:
            try:
                self._process(self.node.resign(self._now()))
                if self._tasks:
                    await asyncio.wait(list(self._tasks), timeout=0.2)
            except Exception as e:
                log.exception("raft resign failed")
                if isinstance(e, OSError):
                    self._io_error("Error while writing the quorum state", e)
        if self._flush is not None and graceful:
            await asyncio.wait([self._flush])  # its fsync, then the log's close flushes the rest
        self.closed = True
        self._cancel_timer()
        for task in list(self._tasks):
            task.cancel()
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()
        try:
            self.log.close()
        except (OSError, KafkaError) as e:  # the metadata log dir failed: nothing more is written
            log.error("Closing the metadata log %s failed: %s", self.log.path, e)
            self.log.log.close_handles()
        self._executor.shutdown(wait=False)

    # ------------------------------------------------------------------ queries
    @property
    def leader_id(self) -> int:
        st = self.node.state
        return -1 if st.name == RESIGNED else st.leader_id

    @property
    def epoch(self) -> int:
        return self.node.epoch

    def snapshot(self, end_offset: int, values: list) -> None:
        """Write the application's state after every record below ``end_offset`` as a
        snapshot; the log start moves to it (the segments below go). A follower applies what
        the leader's majority holds, maybe before its own copy is flushed: then the snapshot
        is written once the flush completes (a newer one replaces it meanwhile)."""
        if end_offset > self.log.durable_end_offset():
            self._pending_snapshot = (end_offset, values)
            self._start_flush()
            return
        self._pending_snapshot = None
        sid = self.node.snapshot(end_offset, values)
        log.info("Wrote metadata snapshot %d-%d (%d records)", sid.end_offset, sid.epoch, len(values))

    def end_offset(self) -> int:
        """The offset the next appended record will get (the leader's log end)."""
        return self.node.log.end_offset()

    def is_leader(self) -> bool:
        return self.node is not None and self.node.is_leader()

    def describe_quorum(self) -> m.DescribeQuorumResponse:
        r = self.node.describe_quorum()
        r.nodes = [
            (v, [(name, host, port) for name, host, port in self._voter_endpoints(v)]) for v in sorted(self.voters)
        ]
        return r

    def _voter_endpoints(self, v: int):
        addr = self.voters.get(v)
        if v == self.node_id and self.endpoints:
            return list(self.endpoints)
        return [("CONTROLLER", addr[0], addr[1])] if addr else []

    # ------------------------------------------------------------------ inputs
    def append(self, values: list) -> int:
        """Leader only: append ``values`` (one batch); the last offset. Raises
        NOT_LEADER_OR_FOLLOWER elsewhere, and once close() has begun (the log is closing)."""
        if self.closing:
            raise error("not_leader_or_follower", f"raft node {self.node_id} is shutting down")
        offset = self.node.append(values, self._now())
        self._reschedule()
        return offset

    async def handle_request(self, api_key: int, version: int, request):
        """A raft request from another node: its kio response once the node answers, or None
        (no answer within the request timeout: the caller closes nothing, sends nothing)."""
        if self.node is None or self.closed:
            return None
        self._corr += 1
        msg = wire.from_wire(request, self._corr)
        src = _source(msg)
        theirs = getattr(request, "cluster_id", None)
        if theirs and self.cluster_id and theirs != self.cluster_id:
            # as Kafka's raft client: another cluster's node gets an error, never an answer
            log.error(
                "Refusing a %s from node %d of cluster %s (this is cluster %s): INCONSISTENT_CLUSTER_ID",
                type(msg).__name__,
                src,
                theirs,
                self.cluster_id,
            )
            return wire.to_wire(_refusal(msg, INCONSISTENT_CLUSTER_ID), version, cluster_id=self.cluster_id)
        fut = self.loop.create_future()
        key = (src, self._corr)
        self._pending[key] = fut
        # one request of a kind per sender: a newer one replaces it in the node (a parked Fetch),
        # so the older one will never be answered; drop it rather than hold up its connection
        older = self._latest.get((src, type(msg)))
        self._latest[(src, type(msg))] = key
        if older is not None:
            self._drop(older)
        self._run(lambda now: self.node.handle(src, msg, now))
        try:
            resp = await asyncio.wait_for(fut, (self.qconfig.request_timeout_ms + 500) / 1000.0)
        except (TimeoutError, asyncio.CancelledError):
            self._pending.pop(key, None)
            return None
        if resp is None:
            return None
        return wire.to_wire(
            resp, version, cluster_id=self.cluster_id, endpoints=self.endpoints, timestamp=self.clock.now_ms()
        )

    # ------------------------------------------------------------------ the loop
    def _run(self, step) -> None:
        if self.closed:
            return
        try:
            out = step(self._now())
        except Exception as e:
            log.exception("raft node %d failed to process an input", self.node_id)
            if isinstance(e, OSError):  # quorum-state, a snapshot: the metadata log dir failed
                self._io_error("Error while writing the metadata log", e)
            out = self.node.drain()
        self._process(out)

    def _process(self, out) -> None:
        for dest, msg in out.messages:
            if isinstance(msg, m.REQUESTS):
                task = self.loop.create_task(self._send(dest, msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                fut = self._pending.pop((dest, msg.correlation_id), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        if out.state_changes:
            # a node that changes state drops the fetches it parked: they get no answer
            for key in [k for k, f in self._pending.items() if not f.done()]:
                self._drop(key)
        for change in out.state_changes:
            log.info(
                "Raft node %d: %s -> %s in epoch %d (leader %d)",
                self.node_id,
                change.old,
                change.new,
                change.epoch,
                change.leader_id,
            )
            for fn in self._state_listeners:
                try:
                    fn(change)
                except Exception:
                    log.exception("raft state listener failed")
        if out.snapshot is not None:
            sid, values = out.snapshot
            log.info("Loading the metadata snapshot %d-%d fetched from the leader", sid.end_offset, sid.epoch)
            for fn in self._snapshot_listeners:
                fn(values, sid.end_offset)
        if out.committed:
            for fn in self._commit_listeners:
                try:
                    fn(out.committed)
                except Exception:
                    log.exception("applying committed metadata records failed")
        if out.flush:
            self._start_flush()
        node = self.node
        if (
            not self._caught_up.is_set()
            and self.leader_id >= 0
            and node.high_watermark > 0
            and node.applied >= node.high_watermark
        ):
            self._caught_up.set()
        self._reschedule()

    # ------------------------------------------------------------------ the disk
    def _start_flush(self) -> None:
        """Begin a flush of the log up to its end now, or once the one in flight is done."""
        if self.closed:
            return
        if self._flush is not None:
            self._flush_again = True
            return
        job = self.log.begin_flush()
        self.flushes += 1
        if self._test_flush_on_loop:
            self._flush = self.loop.create_future()
            try:
                self._flush.set_result(self._run_flush(job))
            except Exception as e:  # noqa: BLE001 - handed to _flush_done as the thread's would be
                self._flush.set_exception(e)
        else:
            self._flush = self.loop.run_in_executor(self._executor, self._run_flush, job)
        self._flush.add_done_callback(functools.partial(self._flush_done, job))

    def _run_flush(self, job) -> None:
        """In the worker thread: the fsyncs (nothing else of the log is touched here)."""
        hold = self._test_flush_hold
        if hold and os.path.exists(hold):
            with open(hold + ".held", "w"):
                pass
            while os.path.exists(hold):
                time.sleep(0.01)
        if self._test_flush_delay:
            time.sleep(self._test_flush_delay)
        job.run()

    def _flush_done(self, job, fut: asyncio.Future) -> None:
        """On the loop: the log is durable up to the job's end (or the cut of a truncation made
        meanwhile); tell the node, and start the flush asked for in between."""
        self._flush = None
        error = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        if self.closed:
            job.close()
            return
        if error is not None:
            if isinstance(error, OSError):  # an fsync that failed cannot be retried (Kafka halts)
                self._io_error(f"Error while flushing the metadata log {self.log.path}", error)
            self.log.end_flush(job, ok=False)
            log.error("Flushing the metadata log %s failed (retrying in 1 s): %s", self.log.path, error)
            self._flush_again = False
            self.loop.call_later(1.0, self._start_flush)
            return
        durable = self.log.end_flush(job)
        again, self._flush_again = self._flush_again, False
        self._run(self.node.flushed)
        pending = self._pending_snapshot
        if pending is not None and pending[0] <= durable:
            self._pending_snapshot = None
            if pending[0] > self.log.log_start_offset():  # (else a newer one was installed meanwhile)
                try:
                    self.snapshot(*pending)
                except Exception:
                    log.exception("metadata snapshot at %d failed", pending[0])
        if again and self._flush is None:  # (the node's answer may have started one already)
            self._start_flush()

    def _drop(self, key: tuple[int, int]) -> None:
        fut = self._pending.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = -1

    def _reschedule(self) -> None:
        if self.closed:
            return
        d = self.node.next_deadline()
        if d == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = d
        if d >= NEVER:
            return
        self._timer = self.loop.call_at(d / 1000.0, self._on_timer)

    def _on_timer(self) -> None:
        at = self._timer_at
        self._timer = None
        self._timer_at = -1
        self._run(lambda now: self.node.tick(max(now, at)))

    async def _send(self, dest: int, msg) -> None:
        api, _kind = wire.API[type(msg)]
        key, version = SEND[api]
        body = wire.to_wire(
            msg, version, cluster_id=self.cluster_id, endpoints=self.endpoints, timestamp=self.clock.now_ms()
        )
        timeout = self.qconfig.request_timeout_ms
        if isinstance(msg, m.FetchRequest):
            timeout += msg.max_wait_ms
        try:
            resp = await self.channel.send(dest, key, version, body, timeout_ms=timeout)
        except ChannelError as e:
            log.debug("raft %s to node %d failed: %s", api, dest, e)
            return
        try:
            answer = wire.from_wire(resp, msg.correlation_id, pre_vote=getattr(msg, "pre_vote", False))
        except Exception as e:  # noqa: BLE001 - a malformed answer is a lost one
            log.warning("raft %s response from node %d unreadable: %s", api, dest, e)
            return
        self._run(lambda now: self.node.handle(dest, answer, now))
