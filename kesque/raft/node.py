"""``RaftNode``: one KRaft replica as a sans-IO state machine (Kafka's ``KafkaRaftClient``).

Inputs: :meth:`RaftNode.handle` (a message from a node), :meth:`RaftNode.tick` (the clock's now),
:meth:`RaftNode.append` (leader only), :meth:`RaftNode.resign` (graceful shutdown),
:meth:`RaftNode.flushed` (a flush of the log the node asked for has completed).
Outputs, collected by :meth:`RaftNode.drain`: messages to send, records newly committed (to
apply, in offset order, each once per incarnation), state changes, and whether the log needs a
flush (``Output.flush``).

The node never flushes (fsyncs) its log itself: it asks for it, and the driver runs the flush
where it does not hold anything up (the server: a worker thread; the simulator: after a
simulated delay), one at a time, as ``log.begin_flush()`` / ``job.run()`` /
``log.end_flush(job)`` (see :mod:`kesque.raft.log`), then tells the node with ``flushed``.
Everything the node tells others about its log's end is what is *durable*: the leader counts
its own end in the high watermark only up to ``log.durable_end_offset()``; a voter sends its
next Fetch (whose offset the leader counts) only once its log is durable up to its end.
(Kafka's KafkaRaftClient flushes synchronously on its own raft thread; here the node shares the
event loop with the requests, so the flush is an output and its completion an input.) The
quorum-state store is written synchronously in ``_transition``, before any message that
depends on it is emitted. :meth:`next_deadline` says
when the node wants its next tick. Time is passed in; randomness comes from the ``random.Random``
given in. See :mod:`kesque.raft.state` for the theory of operation and the transition table.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from ..errors import KafkaError, error
from . import messages as m
from .log import ElectionState, LeaderChange, QuorumStateStore, RaftLog, Record, SnapshotId
from .state import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    RESIGNED,
    UNATTACHED,
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    check_transition,
)

NEVER = 1 << 62


@dataclass(slots=True)
class QuorumConfig:
    """Kafka's ``controller.quorum.*`` settings (same defaults), plus the leader's fetch batch."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500
    fetch_max_records: int = 500
    fetch_snapshot_max_bytes: int = 0x7FFFFFFF


@dataclass(slots=True)
class StateChange:
    node_id: int
    old: str | None
    new: str
    epoch: int
    leader_id: int


@dataclass(slots=True)
class Output:
    messages: list = field(default_factory=list)  # (destination id, message)
    committed: list = field(default_factory=list)  # Record, in offset order
    state_changes: list = field(default_factory=list)
    # (SnapshotId, values) fetched from the leader: the application loads it in place of its
    # state, and ``committed`` goes on from the snapshot's end offset
    snapshot: tuple | None = None
    # the log has records that are not durable and the node waits for them to be: flush it up
    # to its end (now, or after the flush in flight), then call ``flushed``
    flush: bool = False


@dataclass(slots=True)
class Knobs:
    """Deliberate bugs, for the tests that prove the simulator catches them. All off normally."""

    grant_vote_to_shorter_log: bool = False
    vote_twice_in_an_epoch: bool = False
    commit_without_own_epoch: bool = False
    count_unflushed_leader_end: bool = False
    # a voter sends its next Fetch (its end offset, counted by the leader) before its flush is done
    report_unflushed_fetch_offset: bool = False
    # not a bug in itself but a weaker protocol: no directory ids, as Kafka's static
    # controller.quorum.voters; a voter whose disk was replaced keeps voting
    static_voters: bool = False


# Kafka's Metrics windows: two samples of 30 s (metrics.num.samples, metrics.sample.window.ms)
COMMIT_LATENCY_WINDOW_MS = 60_000


class RaftNode:
    def __init__(
        self,
        node_id: int,
        directory_id: str | None,
        voters: dict[int, str | None],
        log: RaftLog,
        store: QuorumStateStore,
        config: QuorumConfig,
        rng: random.Random,
        now: int,
        knobs: Knobs | None = None,
    ):
        self.node_id = node_id
        self.directory_id = directory_id
        self.voters = dict(voters)
        self.knobs = knobs or Knobs()
        self.is_voter = node_id in voters and self._is_voter_key(node_id, directory_id)
        self.log = log
        self.store = store
        self.config = config
        self.rng = rng
        # this incarnation's: only grows; re-learned after a restart, from the log start offset
        # (the application loads the latest snapshot first: ``log.snapshot_values``)
        self.high_watermark = log.log_start_offset()
        self.applied = self.high_watermark  # next offset to hand to the application
        self.state: EpochState | None = None
        self._out = Output()
        self._corr = 0
        self._inflight: dict[int, tuple[int, int]] = {}  # dest -> (correlation id, expiry)
        self._backoff: dict[int, int] = {}  # dest -> no request before this time
        # resign() was called: the node is stopping. It still answers requests and tells the
        # voters it resigned, but its timers move it no more (a resigned lone voter, whose
        # election deadline is "now", would otherwise elect itself again at the next input)
        self.shutting_down = False
        # commit latency (Kafka's raft-metrics commit-latency-avg / -max): the leader's appends
        # not committed yet, as (epoch, last offset, time), and the latencies of the last window
        self._uncommitted: deque[tuple[int, int, int]] = deque()
        self.commit_latencies: deque[tuple[int, int]] = deque()  # (commit time, ms)
        self._initialize(now)

    # -- public inputs ---------------------------------------------------------------------------
    def handle(self, src: int, msg, now: int) -> Output:
        handler = _HANDLERS[type(msg)]
        handler(self, src, msg, now)
        self._poll(now)
        return self.drain()

    def tick(self, now: int) -> Output:
        for dest, (_, expiry) in list(self._inflight.items()):
            if expiry <= now:
                del self._inflight[dest]
        for dest, t in list(self._backoff.items()):
            if t <= now:
                del self._backoff[dest]
        self._poll(now)
        return self.drain()

    def flushed(self, now: int) -> Output:
        """A flush asked for with ``Output.flush`` completed (``log.end_flush`` was called): the
        leader counts its durable end in the high watermark; a voter may fetch again."""
        st = self.state
        if isinstance(st, LeaderState):
            self._update_replica(st, self.node_id, self._leader_end(), now)
        self._poll(now)
        return self.drain()

    def append(self, values: list, now: int) -> int:
        """Leader only: write ``values`` in this epoch; returns the last offset, else raises
        NOT_LEADER_OR_FOLLOWER. The offset is committed once the high watermark passes it."""
        st = self.state
        if not isinstance(st, LeaderState):
            raise error("not_leader_or_follower", f"node {self.node_id} is not the leader")
        last = self.log.append(st.epoch, values)
        pending = self._uncommitted
        if pending and pending[0][0] != st.epoch:
            pending.clear()  # an earlier leadership's appends: never timed
        pending.append((st.epoch, last, now))
        if self.knobs.count_unflushed_leader_end:
            self._update_replica(st, self.node_id, self.log.end_offset(), now)
        if st.flush_at < 0:
            st.flush_at = now + self.config.append_linger_ms
        return last

    def resign(self, now: int) -> Output:
        """Graceful shutdown: a leader resigns and tells the voters (EndQuorumEpoch); all flush.
        From then on no timer moves the node (``shutting_down``), as Kafka's raft client, which
        polls only its shutdown once it begins: it never stands for election again."""
        self.shutting_down = True
        st = self.state
        if isinstance(st, LeaderState):
            self._flush_leader(st, now)
            ends = sorted(((-o, v) for v, o in st.voter_end.items() if v != self.node_id))
            self._transition(
                ResignedState(
                    RESIGNED,
                    st.epoch,
                    self._election_deadline(now),
                    leader_id=self.node_id,
                    voted_id=st.voted_id,
                    voted_directory_id=st.voted_directory_id,
                    preferred_successors=[v for _, v in ends],
                    unacked=set(self.voters) - {self.node_id},
                ),
                now,
            )
            self._poll(now)
        self._out.flush = True  # the driver flushes before it stops
        return self.drain()

    def snapshot(self, end_offset: int, values: list) -> SnapshotId:
        """The application's state after applying every record below ``end_offset`` (a
        committed, applied offset): written as a snapshot, and the log start moves to it."""
        if end_offset > self.applied:
            raise ValueError(f"snapshot end {end_offset} past the applied offset {self.applied}")
        return self.log.create_snapshot(end_offset, values)

    def next_deadline(self) -> int:
        st = self.state
        d = NEVER if self.shutting_down else st.deadline  # (no timer moves a stopping node)
        for _, expiry in self._inflight.values():
            d = min(d, expiry)
        for t in self._backoff.values():
            d = min(d, t)
        if isinstance(st, LeaderState):
            if st.flush_at >= 0:
                d = min(d, st.flush_at)
            for _, expiry in st.parked.values():
                d = min(d, expiry)
        return d

    def drain(self) -> Output:
        out, self._out = self._out, Output()
        return out

    # -- queries -------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        return self.state.leader_id

    def _is_voter_key(self, node_id: int, directory_id: str | None) -> bool:
        return self.voters.get(node_id, "-") == directory_id or (self.knobs.static_voters and node_id in self.voters)

    def _known_leader(self) -> int:
        """The leader id to put in answers: a resigned leader no longer leads its epoch."""
        st = self.state
        return -1 if st.name == RESIGNED else st.leader_id

    def describe_quorum(self) -> m.DescribeQuorumResponse:
        """DescribeQuorum's answer: the leader's view of each replica's end offset (its own
        log end for itself); other nodes answer NOT_LEADER_OR_FOLLOWER, as Kafka's."""
        st = self.state
        if not isinstance(st, LeaderState):
            return m.DescribeQuorumResponse(m.NOT_LEADER_OR_FOLLOWER, self._known_leader(), st.epoch, -1)
        voters = [
            m.ReplicaState(v, d, self.log.end_offset() if v == self.node_id else st.voter_end.get(v, -1))
            for v, d in sorted(self.voters.items())
        ]
        observers = [m.ReplicaState(o, None, end) for o, end in sorted(st.observer_end.items())]
        return m.DescribeQuorumResponse(m.NONE, self.node_id, st.epoch, st.high_watermark, voters, observers)

    def is_leader(self) -> bool:
        return self.state.name == LEADER

    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    # -- state changes ---------------------------------------------------------------------------
    def _initialize(self, now: int) -> None:
        es = self.store.read() or ElectionState(0)
        log_epoch = self.log.last_fetched_epoch()
        me = self.node_id
        if es.epoch < log_epoch:
            st = UnattachedState(UNATTACHED, log_epoch, self._election_deadline(now))
        elif self.is_voter and es.leader_id == me:
            # never lead this epoch again: unflushed records of it may be lost
            st = ResignedState(
                RESIGNED,
                es.epoch,
                self._election_deadline(now),
                leader_id=me,
                voted_id=es.voted_id,
                voted_directory_id=es.voted_directory_id,
            )
        elif self.is_voter and es.voted_id == me and es.leader_id < 0:
            st = CandidateState(
                CANDIDATE,
                es.epoch,
                self._election_deadline(now),
                voted_id=me,
                voted_directory_id=self.directory_id,
                granted={me},
            )
        elif es.leader_id >= 0 and es.leader_id != me:
            st = FollowerState(
                FOLLOWER,
                es.epoch,
                now + self.config.fetch_timeout_ms,
                leader_id=es.leader_id,
                voted_id=es.voted_id,
                voted_directory_id=es.voted_directory_id,
            )
        else:
            st = UnattachedState(
                UNATTACHED,
                es.epoch,
                self._election_deadline(now),
                voted_id=es.voted_id,
                voted_directory_id=es.voted_directory_id,
            )
        self._transition(st, now)

    def _transition(self, new: EpochState, now: int) -> None:
        """The one place where the node changes state. Durable first, then in memory."""
        old = self.state
        check_transition(old, new, self.is_voter)
        if old is None or new.election() != old.election():
            self.store.write(new.election())
        self.state = new
        self._inflight.clear()
        self._backoff.clear()
        self._out.state_changes.append(StateChange(self.node_id, old and old.name, new.name, new.epoch, new.leader_id))
        if isinstance(new, CandidateState) or isinstance(new, ProspectiveState):
            new.granted.add(self.node_id)
            self._maybe_win(new, now)
        elif isinstance(new, LeaderState):
            self._on_become_leader(new, now)

    def _election_deadline(self, now: int) -> int:
        if not self.is_voter:
            return NEVER  # observers never stand for election
        if len(self.voters) == 1:
            return now  # the only voter: no one to wait for, it elects itself at once (as Kafka's)
        t = self.config.election_timeout_ms
        return now + t + self.rng.randrange(t)

    def _to_unattached(self, epoch: int, now: int, deadline: int | None = None, keep_vote: bool = False) -> None:
        st = self.state
        voted = (st.voted_id, st.voted_directory_id) if keep_vote and epoch == st.epoch else (-1, None)
        self._transition(
            UnattachedState(
                UNATTACHED,
                epoch,
                self._election_deadline(now) if deadline is None else deadline,
                voted_id=voted[0],
                voted_directory_id=voted[1],
            ),
            now,
        )

    def _to_follower(self, epoch: int, leader: int, now: int) -> None:
        st = self.state
        voted = (st.voted_id, st.voted_directory_id) if epoch == st.epoch else (-1, None)
        self._transition(
            FollowerState(
                FOLLOWER,
                epoch,
                now + self.config.fetch_timeout_ms,
                leader_id=leader,
                voted_id=voted[0],
                voted_directory_id=voted[1],
            ),
            now,
        )

    def _to_prospective(self, now: int) -> None:
        st = self.state
        self._transition(
            ProspectiveState(
                PROSPECTIVE,
                st.epoch,
                self._election_deadline(now),
                leader_id=st.leader_id if st.name != RESIGNED else -1,
                voted_id=st.voted_id,
                voted_directory_id=st.voted_directory_id,
            ),
            now,
        )

    def _maybe_win(self, st, now: int) -> None:
        if len(st.granted) < self.majority() or self.shutting_down:
            return
        if isinstance(st, ProspectiveState):
            self._transition(
                CandidateState(
                    CANDIDATE,
                    st.epoch + 1,
                    self._election_deadline(now),
                    voted_id=self.node_id,
                    voted_directory_id=self.directory_id,
                ),
                now,
            )
        elif isinstance(st, CandidateState):
            self._transition(
                LeaderState(
                    LEADER,
                    st.epoch,
                    now + self._check_quorum_ms(),
                    leader_id=self.node_id,
                    voted_id=st.voted_id,
                    voted_directory_id=st.voted_directory_id,
                    granting_voters=set(st.granted),
                ),
                now,
            )

    def _check_quorum_ms(self) -> int:
        return self.config.fetch_timeout_ms * 3 // 2

    def _on_become_leader(self, st: LeaderState, now: int) -> None:
        st.epoch_start_offset = self.log.end_offset()
        st.voter_end = {v: -1 for v in self.voters}
        st.unacked = set(self.voters) - {self.node_id}
        st.fetched = {self.node_id}
        # the LeaderChange control record: the high watermark can only move past an offset of
        # this epoch, so write one at once rather than wait for the application to append
        self.log.append(
            st.epoch, [LeaderChange(self.node_id, tuple(sorted(self.voters)), tuple(sorted(st.granting_voters)))]
        )
        st.flush_at = now

    # -- the poll loop -----------------------------------------------------------------------------
    def _poll(self, now: int) -> None:
        st = self.state
        name = st.name
        if self.shutting_down:
            if name == RESIGNED:
                self._send_end_quorum_epoch(st, now)
            return
        if name == LEADER:
            self._poll_leader(st, now)
        elif name == FOLLOWER:
            if now >= st.deadline:
                if self.is_voter:
                    self._to_prospective(now)
                else:
                    self._to_unattached(st.epoch, now, keep_vote=True)
                return self._poll(now)
            if st.fetching_snapshot is not None:
                self._send_fetch_snapshot(st, now)
            else:
                self._send_fetch(st.leader_id, now)
        elif name == UNATTACHED:
            if self.is_voter:
                if now >= st.deadline:
                    self._to_prospective(now)
                    return self._poll(now)
            else:
                self._poll_observer_unattached(st, now)
        elif name == PROSPECTIVE or name == CANDIDATE:
            if now >= st.deadline:
                self._to_prospective(now)
                return self._poll(now)
            self._send_votes(st, name == PROSPECTIVE, now)
        elif name == RESIGNED:
            if now >= st.deadline:
                self._to_prospective(now)
                return self._poll(now)
            self._send_end_quorum_epoch(st, now)

    def _send_end_quorum_epoch(self, st, now: int) -> None:
        for v in st.unacked:
            if self._can_send(v, now):
                self._send(
                    v,
                    m.EndQuorumEpochRequest(self._next_corr(), self.node_id, st.epoch, list(st.preferred_successors)),
                    now,
                )

    def _poll_leader(self, st: LeaderState, now: int) -> None:
        if st.flush_at >= 0 and now >= st.flush_at:
            self._flush_leader(st, now)
        if now >= st.deadline:
            if len(st.fetched) >= self.majority():
                st.fetched = {self.node_id}
                st.deadline = now + self._check_quorum_ms()
            else:
                self._transition(
                    ResignedState(
                        RESIGNED,
                        st.epoch,
                        self._election_deadline(now),
                        leader_id=self.node_id,
                        voted_id=st.voted_id,
                        voted_directory_id=st.voted_directory_id,
                    ),
                    now,
                )
                return
        for v in st.unacked:
            if self._can_send(v, now):
                self._send(
                    v, m.BeginQuorumEpochRequest(self._next_corr(), self.node_id, st.epoch, v, self.voters[v]), now
                )
        for rid, (req, expiry) in list(st.parked.items()):
            if expiry <= now:
                del st.parked[rid]
                self._answer_fetch(rid, req, st, now)

    def _poll_observer_unattached(self, st: UnattachedState, now: int) -> None:
        # an observer without a leader asks a random voter (its bootstrap servers)
        if not self._inflight and now >= self._backoff.get(-1, 0):
            target = self.rng.choice(sorted(self.voters))
            self._backoff[-1] = now + self.config.retry_backoff_ms * 5
            self._send_fetch(target, now)

    def _flush_leader(self, st: LeaderState, now: int) -> None:
        """The linger is over: ask for a flush (our end counts once it is done, in ``flushed``)
        and answer the parked fetches now, so followers write the new records meanwhile (as
        Kafka's flushLeaderLog lets parked fetches return before its flush)."""
        self._out.flush = True
        st.flush_at = -1
        if self.knobs.count_unflushed_leader_end:
            self._update_replica(st, self.node_id, self._leader_end(), now)
        self._complete_parked(st, now)

    def _leader_end(self) -> int:
        if self.knobs.count_unflushed_leader_end:
            return self.log.end_offset()
        return self.log.durable_end_offset()

    # -- sending --------------------------------------------------------------------------------
    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _can_send(self, dest: int, now: int) -> bool:
        return dest not in self._inflight and self._backoff.get(dest, 0) <= now

    def _send(self, dest: int, msg, now: int) -> None:
        if isinstance(msg, m.REQUESTS):
            self._inflight[dest] = (msg.correlation_id, now + self.config.request_timeout_ms)
        self._out.messages.append((dest, msg))

    def _reply(self, dest: int, msg) -> None:
        self._out.messages.append((dest, msg))

    def _expected(self, src: int, corr: int) -> bool:
        """Is this the response to our request in flight to ``src``? Consumes it if so."""
        f = self._inflight.get(src)
        if f is None or f[0] != corr:
            return False
        del self._inflight[src]
        return True

    def _send_votes(self, st, pre_vote: bool, now: int) -> None:
        last_epoch, end = self.log.last_fetched_epoch(), self.log.end_offset()
        for v, vdir in self.voters.items():
            if v == self.node_id or v in st.granted or v in st.rejected or not self._can_send(v, now):
                continue
            self._send(
                v,
                m.VoteRequest(
                    self._next_corr(), st.epoch, self.node_id, self.directory_id, v, vdir, last_epoch, end, pre_vote
                ),
                now,
            )

    def _send_fetch(self, dest: int, now: int) -> None:
        log = self.log
        if (
            self.is_voter
            and log.durable_end_offset() < log.end_offset()
            and not self.knobs.report_unflushed_fetch_offset
        ):
            # the fetch offset is our end as the leader counts it: durable first (the flush's
            # completion polls again). Observers do not count, and fetch on (as Kafka's).
            self._out.flush = True
            return
        if not self._can_send(dest, now):
            return
        self._send(
            dest,
            m.FetchRequest(
                self._next_corr(),
                self.node_id,
                self.directory_id,
                self.state.epoch,
                self.log.end_offset(),
                self.log.last_fetched_epoch(),
                0,
                self.config.fetch_max_wait_ms,
            ),
            now,
        )

    def _send_fetch_snapshot(self, st: FollowerState, now: int) -> None:
        dest = st.leader_id
        if not self._can_send(dest, now):
            return
        sid = st.fetching_snapshot
        self._send(
            dest,
            m.FetchSnapshotRequest(
                self._next_corr(),
                self.node_id,
                st.epoch,
                sid.end_offset,
                sid.epoch,
                len(st.snapshot_buf),
                self.config.fetch_snapshot_max_bytes,
                self.directory_id,
            ),
            now,
        )

    # -- common response handling ----------------------------------------------------------------
    def _learn(self, epoch: int, leader: int, now: int) -> bool:
        """Kafka's ``maybeHandleCommonResponse``: move to a newer epoch or a newly known leader.
        True when the state changed (the response is then stale)."""
        st = self.state
        if epoch > st.epoch:
            if leader >= 0 and leader != self.node_id:
                self._to_follower(epoch, leader, now)
            else:
                self._to_unattached(epoch, now)
            return True
        if epoch == st.epoch and leader >= 0 and leader != self.node_id and st.name != FOLLOWER:
            if st.leader_id in (-1, leader) or st.name == PROSPECTIVE:
                self._to_follower(epoch, leader, now)
                return True
        return False

    # -- Vote ---------------------------------------------------------------------------------
    def _on_vote_request(self, src: int, r: m.VoteRequest, now: int) -> None:
        def answer(code: int, granted: bool = False) -> None:
            st = self.state
            leader = -1 if (granted and r.pre_vote) else self._known_leader()
            self._reply(src, m.VoteResponse(r.correlation_id, code, leader, st.epoch, granted, r.pre_vote))

        if (
            r.last_offset < 0
            or r.last_offset_epoch < 0
            or r.last_offset_epoch > r.replica_epoch
            or (not r.pre_vote and r.last_offset_epoch == r.replica_epoch)
        ):
            return answer(m.INVALID_REQUEST)
        if r.replica_epoch < self.state.epoch:
            return answer(m.FENCED_LEADER_EPOCH)
        if not self._is_voter_key(r.replica_id, r.replica_directory_id):
            return answer(m.INVALID_REQUEST)  # not a voter: Kafka answers INCONSISTENT_VOTER_SET
        if r.replica_epoch > self.state.epoch:
            # a pre-vote moves nobody, but one from a *newer* epoch comes from a voter that really
            # stood in it: stay behind and that voter is stranded there, answered only with older
            # epochs it ignores (tests/test_sim.py, scenario stranded_candidate)
            self._to_unattached(r.replica_epoch, now)
        if (
            not self.is_voter
            or r.voter_id != self.node_id
            or (r.voter_directory_id != self.directory_id and not self.knobs.static_voters)
        ):
            # KIP-853: a voter that lost its disk has a new directory id and no vote
            return answer(m.INVALID_VOTER_KEY)
        up_to_date = (r.last_offset_epoch, r.last_offset) >= (self.log.last_fetched_epoch(), self.log.end_offset())
        if self.knobs.grant_vote_to_shorter_log:
            up_to_date = True
        granted = self._can_grant_vote(r.replica_id, up_to_date, r.pre_vote)
        st = self.state
        if granted and not r.pre_vote and st.name == UNATTACHED and st.voted_id < 0:
            self._transition(
                UnattachedState(
                    UNATTACHED,
                    st.epoch,
                    self._election_deadline(now),
                    voted_id=r.replica_id,
                    voted_directory_id=r.replica_directory_id,
                ),
                now,
            )
        answer(m.NONE, granted)

    def _can_grant_vote(self, candidate: int, up_to_date: bool, pre_vote: bool) -> bool:
        st = self.state
        name = st.name
        if pre_vote:
            if name == LEADER:
                return False
            if name == FOLLOWER and st.has_fetched:
                return False
            return up_to_date
        if name == UNATTACHED or (name == PROSPECTIVE and st.leader_id < 0):
            if st.voted_id >= 0 and not self.knobs.vote_twice_in_an_epoch:
                return st.voted_id == candidate
            return up_to_date
        return False

    def _on_vote_response(self, src: int, r: m.VoteResponse, now: int) -> None:
        if not self._expected(src, r.correlation_id):
            return
        if self._learn(r.leader_epoch, r.leader_id, now):
            return
        st = self.state
        if r.error_code != m.NONE:
            self._backoff[src] = now + self.config.retry_backoff_ms
            return
        if (
            r.leader_epoch == st.epoch
            and r.pre_vote == (st.name == PROSPECTIVE)
            and (st.name == PROSPECTIVE or st.name == CANDIDATE)
        ):
            (st.granted if r.vote_granted else st.rejected).add(src)
            self._maybe_win(st, now)

    # -- BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------------
    def _on_begin_epoch_request(self, src: int, r: m.BeginQuorumEpochRequest, now: int) -> None:
        st = self.state
        if r.leader_epoch < st.epoch:
            code = m.FENCED_LEADER_EPOCH
        elif r.voter_id != self.node_id or (r.voter_directory_id != self.directory_id and not self.knobs.static_voters):
            code = m.INVALID_VOTER_KEY
        else:
            code = m.NONE
            if not (st.name == FOLLOWER and st.epoch == r.leader_epoch):
                self._to_follower(r.leader_epoch, r.leader_id, now)
        self._reply(src, m.BeginQuorumEpochResponse(r.correlation_id, code, self._known_leader(), self.epoch))

    def _on_begin_epoch_response(self, src: int, r: m.BeginQuorumEpochResponse, now: int) -> None:
        if not self._expected(src, r.correlation_id) or self._learn(r.leader_epoch, r.leader_id, now):
            return
        st = self.state
        if st.name == LEADER and (
            r.error_code == m.INVALID_VOTER_KEY or (r.error_code == m.NONE and r.leader_epoch == st.epoch)
        ):
            st.unacked.discard(src)  # told, or not the voter we know (a replaced disk): stop
        elif r.error_code != m.NONE:
            self._backoff[src] = now + self.config.retry_backoff_ms

    def _on_end_epoch_request(self, src: int, r: m.EndQuorumEpochRequest, now: int) -> None:
        st = self.state
        if r.leader_epoch < st.epoch:
            code = m.FENCED_LEADER_EPOCH
        else:
            code = m.NONE
            if self.is_voter and st.name in (FOLLOWER, UNATTACHED) and st.leader_id in (-1, r.leader_id):
                # the leader resigned: elect a successor now, the preferred ones first
                succ = r.preferred_candidates
                pos = succ.index(self.node_id) if self.node_id in succ else len(succ)
                backoff = (
                    0 if pos == 0 else min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms << pos)
                )
                self._to_unattached(r.leader_epoch, now, deadline=now + backoff, keep_vote=True)
            elif r.leader_epoch > st.epoch:
                self._to_unattached(r.leader_epoch, now)
        self._reply(src, m.EndQuorumEpochResponse(r.correlation_id, code, self._known_leader(), self.epoch))

    def _on_end_epoch_response(self, src: int, r: m.EndQuorumEpochResponse, now: int) -> None:
        if not self._expected(src, r.correlation_id) or self._learn(r.leader_epoch, r.leader_id, now):
            return
        st = self.state
        if st.name == RESIGNED and r.leader_epoch == st.epoch:
            st.unacked.discard(src)

    # -- Fetch ----------------------------------------------------------------------------------
    def _leader_error(self, current_leader_epoch: int) -> int:
        """The error a fetch or snapshot fetch gets for the epoch it names (NONE: we lead it)."""
        st = self.state
        if current_leader_epoch < st.epoch:
            return m.FENCED_LEADER_EPOCH
        if current_leader_epoch > st.epoch:
            return m.UNKNOWN_LEADER_EPOCH
        return m.NONE if st.name == LEADER else m.NOT_LEADER_OR_FOLLOWER

    def _on_fetch_request(self, src: int, r: m.FetchRequest, now: int) -> None:
        st = self.state
        code = self._leader_error(r.current_leader_epoch)
        if code == m.NONE and (r.fetch_offset < 0 or r.last_fetched_epoch < 0 or r.last_fetched_epoch > st.epoch):
            code = m.INVALID_REQUEST
        if code != m.NONE:
            return self._reply(src, m.FetchResponse(r.correlation_id, code, self._known_leader(), st.epoch))
        snap = self._snapshot_for(r)
        if snap is not None:  # KIP-630: what it needs next is only in our snapshot
            st.parked.pop(src, None)
            return self._reply(
                src,
                m.FetchResponse(
                    r.correlation_id,
                    m.NONE,
                    self.node_id,
                    st.epoch,
                    st.high_watermark,
                    snapshot_end_offset=snap.end_offset,
                    snapshot_epoch=snap.epoch,
                    log_start_offset=self.log.log_start_offset(),
                ),
            )
        # validate the fetcher's log against ours (KIP-595's diverging epoch)
        if r.fetch_offset > 0 or r.last_fetched_epoch > 0:
            e, end = self.log.end_offset_for_epoch(r.last_fetched_epoch)
            if e != r.last_fetched_epoch or end < r.fetch_offset:
                st.parked.pop(src, None)
                return self._reply(
                    src,
                    m.FetchResponse(
                        r.correlation_id,
                        m.NONE,
                        self.node_id,
                        st.epoch,
                        st.high_watermark,
                        diverging_epoch=e,
                        diverging_end_offset=end,
                    ),
                )
        self._update_replica(st, src, r.fetch_offset, now, r.replica_directory_id)
        if (
            r.max_wait_ms > 0
            and r.fetch_offset >= self.log.end_offset()
            and self.state is st
            and st.sent_hw.get(src) == st.high_watermark
        ):
            st.parked[src] = (r, now + r.max_wait_ms)  # long poll until there is something new
            return
        self._answer_fetch(src, r, st, now)

    def _snapshot_for(self, r: m.FetchRequest) -> SnapshotId | None:
        """The snapshot a fetcher must load first (Kafka's validateOffsetAndEpoch): its offset is
        below our log start, or at it with another epoch than the snapshot's, or its epoch is
        older than the snapshot's. Otherwise its log is checked against ours by epoch, also
        when it diverges right at our log start: it truncates there, and does not load again
        the snapshot it may already start at."""
        start = self.log.log_start_offset()
        if start == 0:
            return None
        snap = self.log.latest_snapshot()
        if (
            r.fetch_offset < start
            or (r.fetch_offset == start and r.last_fetched_epoch != snap.epoch)
            or r.last_fetched_epoch < snap.epoch
        ):
            return snap
        return None

    def _answer_fetch(self, src: int, r: m.FetchRequest, st: LeaderState, now: int) -> None:
        recs = self.log.read(r.fetch_offset, self.config.fetch_max_records)
        st.sent_hw[src] = st.high_watermark
        self._reply(src, m.FetchResponse(r.correlation_id, m.NONE, self.node_id, st.epoch, st.high_watermark, recs))

    def _complete_parked(self, st: LeaderState, now: int) -> None:
        if st.parked:
            parked, st.parked = st.parked, {}
            for rid, (req, _) in parked.items():
                self._answer_fetch(rid, req, st, now)

    def _update_replica(self, st: LeaderState, rid: int, end: int, now: int, directory_id: str | None = None) -> None:
        if rid == self.node_id or self._is_voter_key(rid, directory_id):
            st.voter_end[rid] = end  # may go back (a truncated follower); the HW never does
            st.fetched.add(rid)
            st.unacked.discard(rid)
            self._maybe_update_hw(st, now)
        else:
            st.observer_end[rid] = end

    def _maybe_update_hw(self, st: LeaderState, now: int) -> None:
        ends = sorted(st.voter_end.values(), reverse=True)
        hw = ends[len(self.voters) // 2]
        if hw <= st.high_watermark:
            return
        if hw <= st.epoch_start_offset and not self.knobs.commit_without_own_epoch:
            return  # Raft's commit rule: only an offset of our own epoch commits
        st.high_watermark = hw
        self._advance_hw(hw)
        pending = self._uncommitted
        while pending and pending[0][1] < hw:
            epoch, _, appended = pending.popleft()
            if epoch == st.epoch:
                self._commit_latency(now, now - appended)
        self._complete_parked(st, now)

    def _commit_latency(self, now: int, ms: int) -> None:
        window = self.commit_latencies
        window.append((now, ms))
        while window and window[0][0] <= now - COMMIT_LATENCY_WINDOW_MS:
            window.popleft()

    def commit_latency(self, now: int) -> tuple[float, float]:
        """(average, maximum) ms from a leader's append to its commit over the last
        COMMIT_LATENCY_WINDOW_MS (Kafka's commit-latency-avg and -max: NaN without commits)."""
        recent = [ms for t, ms in self.commit_latencies if t > now - COMMIT_LATENCY_WINDOW_MS]
        if not recent:
            return float("nan"), float("nan")
        return sum(recent) / len(recent), float(max(recent))

    def _advance_hw(self, hw: int) -> None:
        if hw <= self.high_watermark:
            return
        self.high_watermark = hw
        if hw > self.applied:
            self._out.committed.extend(self.log.read(self.applied, hw - self.applied))
            self.applied = hw

    def _on_fetch_response(self, src: int, r: m.FetchResponse, now: int) -> None:
        if not self._expected(src, r.correlation_id):
            return
        if self._learn(r.leader_epoch, r.leader_id, now):
            return
        st = self.state
        if r.error_code != m.NONE or r.leader_epoch != st.epoch or r.leader_id != src:
            self._backoff[src] = now + self.config.retry_backoff_ms
            return
        if st.name != FOLLOWER:
            return
        st.has_fetched = True
        st.deadline = now + self.config.fetch_timeout_ms
        log = self.log
        if r.diverging_epoch >= 0:
            log.truncate_to(self._truncation_offset(r.diverging_epoch, r.diverging_end_offset))
            return
        if r.snapshot_end_offset >= 0:
            sid = SnapshotId(r.snapshot_end_offset, r.snapshot_epoch)
            if st.fetching_snapshot != sid:
                st.fetching_snapshot, st.snapshot_buf = sid, bytearray()
            return
        recs = r.records
        if recs and recs[0].offset == log.end_offset():
            log.append_as_follower(recs)
            self._out.flush = True  # durable before the next fetch reports it (_send_fetch)
        if r.high_watermark >= 0:
            st.high_watermark = r.high_watermark
            self._advance_hw(min(r.high_watermark, log.end_offset()))

    def _truncation_offset(self, epoch: int, end: int) -> int:
        """As Kafka's ``truncateToEndOffset``: where our log agrees with the leader's."""
        if epoch == 0:
            return min(end, self.log.end_offset())
        local_epoch, local_end = self.log.end_offset_for_epoch(epoch)
        return min(local_end, end) if local_epoch == epoch else local_end

    def _on_fetch_snapshot(self, src: int, r: m.FetchSnapshotRequest, now: int) -> None:
        st = self.state
        code = self._leader_error(r.current_leader_epoch)
        sid = SnapshotId(r.snapshot_end_offset, r.snapshot_epoch)
        data = self.log.snapshot_bytes(sid) if code == m.NONE else None
        if code == m.NONE and data is None:
            code = m.SNAPSHOT_NOT_FOUND
        elif code == m.NONE and not 0 <= r.position <= len(data):
            code = m.POSITION_OUT_OF_RANGE
        if code != m.NONE:
            return self._reply(
                src,
                m.FetchSnapshotResponse(
                    r.correlation_id, code, self._known_leader(), st.epoch, r.snapshot_end_offset, r.snapshot_epoch
                ),
            )
        if self._is_voter_key(src, r.replica_directory_id):
            st.fetched.add(src)  # it is alive and following: check quorum counts it
        chunk = data[r.position : r.position + max(r.max_bytes, 1)]
        self._reply(
            src,
            m.FetchSnapshotResponse(
                r.correlation_id,
                m.NONE,
                self.node_id,
                st.epoch,
                sid.end_offset,
                sid.epoch,
                len(data),
                r.position,
                bytes(chunk),
            ),
        )

    def _on_fetch_snapshot_response(self, src: int, r: m.FetchSnapshotResponse, now: int) -> None:
        if not self._expected(src, r.correlation_id) or self._learn(r.leader_epoch, r.leader_id, now):
            return
        st = self.state
        if st.name != FOLLOWER or r.leader_id != src or st.fetching_snapshot is None:
            return
        sid = st.fetching_snapshot
        if r.error_code != m.NONE or SnapshotId(r.snapshot_end_offset, r.snapshot_epoch) != sid:
            if r.error_code == m.SNAPSHOT_NOT_FOUND or r.error_code == m.POSITION_OUT_OF_RANGE:
                st.fetching_snapshot, st.snapshot_buf = None, bytearray()  # fetch again: a newer one
            else:
                self._backoff[src] = now + self.config.retry_backoff_ms
            return
        st.has_fetched = True
        st.deadline = now + self.config.fetch_timeout_ms
        if r.position != len(st.snapshot_buf):
            return
        st.snapshot_buf += r.unaligned_records
        if len(st.snapshot_buf) < r.size:
            return
        values = self.log.install_snapshot(sid, bytes(st.snapshot_buf))
        st.fetching_snapshot, st.snapshot_buf = None, bytearray()
        self._out.snapshot = (sid, values)
        self._out.committed = [c for c in self._out.committed if c.offset >= sid.end_offset]
        self.applied = max(self.applied, sid.end_offset)
        self.high_watermark = max(self.high_watermark, sid.end_offset)

    def _ignore(self, src: int, r, now: int) -> None:
        pass


_HANDLERS = {
    m.VoteRequest: RaftNode._on_vote_request,
    m.VoteResponse: RaftNode._on_vote_response,
    m.BeginQuorumEpochRequest: RaftNode._on_begin_epoch_request,
    m.BeginQuorumEpochResponse: RaftNode._on_begin_epoch_response,
    m.EndQuorumEpochRequest: RaftNode._on_end_epoch_request,
    m.EndQuorumEpochResponse: RaftNode._on_end_epoch_response,
    m.FetchRequest: RaftNode._on_fetch_request,
    m.FetchResponse: RaftNode._on_fetch_response,
    m.FetchSnapshotRequest: RaftNode._on_fetch_snapshot,
    m.FetchSnapshotResponse: RaftNode._on_fetch_snapshot_response,
}

__all__ = ["RaftNode", "QuorumConfig", "Output", "StateChange", "Knobs", "KafkaError", "Record"]
