"""One partition's replication state, leader side and follower side, as sans-IO logic.

Kafka's rules (Partition.scala, Replica.scala, AbstractFetcherThread, KIP-101/279/320/497/966)
without sockets, threads or clocks: every method is given the time (``now``, ms) and the
replica's log, and answers with what to send (an :class:`AlterPartition` proposal) or what the
caller must tell the client (an error code). The log is reached only through the small
:class:`ReplicaLog` interface, so that the real broker passes its
:class:`~kesque.storage.unified_log.UnifiedLog` (through :class:`StorageReplicaLog`) and the simulator its
in-memory log (:class:`kesque.sim.replication.MemLog`): both run this same code.

**Leader side** (:class:`LeaderReplication`, one per partition replica, kept across roles as
Kafka's Partition keeps its epochs):

- ``make_leader(replicas, isr, leader_epoch, partition_epoch, log, now) -> bool`` (new leader
  epoch?) and ``make_follower(leader, replicas, leader_epoch, partition_epoch) -> bool`` apply the
  metadata image. A state older than the partition epoch already known (it may be learned first
  from an AlterPartition answer) is skipped. A new leader epoch is assigned at the log end offset
  in the leader-epoch cache (``log.assign_epoch``), and the followers' fetch states are reset
  (Kafka's resetReplicaState: an ISR member counts as caught up now, another at time 0).
- ``check_append(required_acks)`` before appending a produce request: NOT_LEADER_OR_FOLLOWER, or
  NOT_ENOUGH_REPLICAS for acks=all while the committed ISR is below
  ``min(min.insync.replicas, replication factor)``; then ``after_append(log, now)`` (the HW may
  move when the ISR is the leader alone).
- ``acks_all_status(required_offset, log) -> (done, error_code)``: Kafka's
  checkEnoughReplicasReachOffset for a waiting acks=all request (its last offset + 1): done once
  the HW reaches it, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is then below
  min.insync.replicas; NOT_LEADER_OR_FOLLOWER once no longer leader. A request still waiting
  when ``request.timeout.ms`` runs out is answered REQUEST_TIMED_OUT by the caller.
- ``on_follower_fetch(replica_id, fetch_offset, last_fetched_epoch, current_leader_epoch,
  follower_log_start, broker_epoch, log, now) -> FollowerFetchCheck``: the checks of a follower
  Fetch before reading (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER as
  Kafka, OFFSET_OUT_OF_RANGE, the diverging epoch of KIP-320), then the follower's fetch state
  (its log end offset is its fetch offset; ``last_caught_up_time`` as Kafka's Replica), an ISR
  expansion if it caught up (``alter`` to send) and the HW. Unless there is an error or a
  diverging epoch, the caller then reads the log from ``fetch_offset`` (up to the log end:
  follower fetches are not bounded by the HW) and answers with the HW and log start *as they were
  before this fetch moved them* (the check's ``high_watermark`` and ``log_start_offset``): a
  follower learns a HW one fetch later, as in Kafka.
- ``maybe_shrink_isr(log, now) -> AlterPartition | None``: call every
  ``replica.lag.time.max.ms / 2`` (Kafka's isr-expiration task): ISR members that have not been
  caught up for ``replica.lag.time.max.ms`` leave.
- ``on_alter_partition_response(proposal, error_code, reply, log, now) -> (retry, hw_changed)``:
  the controller's answer (``reply``: an :class:`AlterPartitionReply`, None on an error).

  Kafka's in-flight rules: one proposal at a time (no shrink or expand while one is pending); an
  expansion counts the new member at once in the *maximal* ISR (the HW waits for it, and acks=all
  too), a shrink does not count until committed (the HW keeps waiting for the leaving members);
  the answer is ignored once the state was replaced by newer metadata; a success with another
  leader epoch or an older partition epoch is ignored; INELIGIBLE_REPLICA and
  OPERATION_NOT_ATTEMPTED go back to the last committed state; FENCED_LEADER_EPOCH,
  INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_*, INVALID_REQUEST, NEW_LEADER_ELECTED stay pending until
  new metadata; anything else is retried.
- The high watermark has one owner: ``maybe_increment_high_watermark(log, now)`` (called by the
  methods above) moves it to the lowest log end offset among the maximal ISR and the caught-up,
  ISR-eligible followers (Kafka's shouldWaitForReplicaToJoinIsr), and only while the committed
  ISR has at least min.insync.replicas members (KIP-966); it never goes back on the leader.

Eligibility comes from the metadata image: ``broker_epoch_of(broker_id)`` returns the broker
epoch of a registered, unfenced broker not in controlled shutdown, else None (the default
accepts everyone with epoch -1, i.e. unchecked). A follower may join the ISR only if eligible and
its fetch carried that broker epoch (or -1); a fetch with an older epoch than the registered one
is refused with NOT_LEADER_OR_FOLLOWER.

**Follower side** (:class:`FollowerFetch`, Kafka's PartitionFetchState, one per partition in a
replica fetcher, rebuilt whenever the leader or the leader epoch changes):

- built from the log: it fetches from the log end offset with ``last_fetched_epoch`` = the
  latest epoch of its leader-epoch cache (KIP-320), never truncating to its HW first;
- ``request() -> FetchPartition`` (the fields of one partition in a follower Fetch);
- ``on_response(resp, log, append) -> str``: with a diverging epoch, truncates as Kafka's
  getOffsetTruncationState (to the end of the largest common epoch, possibly in several round
  trips), else appends the records through ``append(records)`` (the caller's
  ``append_as_follower``: offsets and epochs kept), then learns the HW (``min(leader HW, LEO)``)
  and the log start. Errors: FENCED_LEADER_EPOCH waits for new metadata, UNKNOWN_LEADER_EPOCH /
  NOT_LEADER_OR_FOLLOWER back off (``replica.fetch.backoff.ms``) and retry, OFFSET_OUT_OF_RANGE
  needs the leader's log start and end (ListOffsets), given to ``on_out_of_range``.
- ``on_offsets_for_leader_epoch(epoch, end_offset, log)``: the same truncation for a follower
  that asks OffsetForLeaderEpoch (a leader that does not send diverging epochs).
- ``lag`` / ``in_sync``: Kafka's PartitionFetchState lag, the leader's HW less the fetch
  offset after an answer that brought records (or the first answer, or ListOffsets after
  OFFSET_OUT_OF_RANGE); None (not in sync) in a fresh state. Replication quotas never hold back
  a partition in sync (:mod:`kesque.replication.quota`).

``FollowerFetch.truncate_to_high_watermark`` is a test-only switch restoring the pre-KIP-101
rule (truncate to the HW on becoming a follower, fetch without an epoch): the simulator's
invariants must catch it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ErrorCode
from ..utils import hash_set_order

UNDEFINED = -1
RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState

OK = 0
E = ErrorCode


class ReplicaLog(Protocol):
    """What the replication logic needs of a replica's log."""

    log_start_offset: int
    high_watermark: int

    @property
    def log_end_offset(self) -> int: ...

    def latest_epoch(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's endOffsetForEpoch: (largest epoch <= ``epoch``, its end offset), or
        (UNDEFINED, UNDEFINED) if ``epoch`` is above every epoch known."""

    def assign_epoch(self, epoch: int, start_offset: int) -> None: ...

    def update_high_watermark(self, hw: int) -> None:
        """Set the HW, bounded by [log start, log end] (it may go back on a follower)."""

    def truncate_to(self, offset: int) -> None:
        """Remove offsets >= ``offset``; past the end, still drop the leader-epoch entries that
        start at the log end (an epoch begun as leader without a write)."""

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def maybe_increment_log_start_offset(self, offset: int) -> None: ...


class StorageReplicaLog:
    """:class:`ReplicaLog` over a :class:`kesque.storage.unified_log.UnifiedLog`."""

    def __init__(self, log):
        self.log = log

    log_start_offset = property(lambda self: self.log.log_start_offset)
    high_watermark = property(lambda self: self.log.high_watermark)
    log_end_offset = property(lambda self: self.log.log_end_offset)

    def latest_epoch(self) -> int:
        return self.log.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        # on an empty log the entry is cheap to lose (recovery rebuilds epochs from batches)
        self.log.assign_leader_epoch(epoch, start_offset, fsync=start_offset > 0)

    def update_high_watermark(self, hw: int) -> None:
        self.log.update_high_watermark(hw)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        self.log.maybe_increment_log_start_offset(offset)


# -- leader side ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class FollowerState:
    """The leader's view of one follower (Kafka's ReplicaState)."""

    log_start_offset: int = UNDEFINED
    log_end_offset: int = UNDEFINED
    last_fetch_leader_leo: int = UNDEFINED
    last_fetch_time: int = 0
    last_caught_up_time: int = 0
    broker_epoch: int | None = None

    def is_caught_up(self, leader_leo: int, now: int, max_lag_ms: int) -> bool:
        return leader_leo == self.log_end_offset or now - self.last_caught_up_time <= max_lag_ms


@dataclass(frozen=True, slots=True)
class AlterPartition:
    """An ISR change the leader proposes (Kafka's PendingExpandIsr / PendingShrinkIsr with the
    LeaderAndIsr it sends)."""

    kind: str  # "expand" or "shrink"
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1)
    changed: frozenset[int]  # the member added, or those removed
    committed_isr: tuple[int, ...]  # the state to go back to
    leader_recovery_state: int = RECOVERED

    @property
    def isr(self) -> list[int]:
        return [b for b, _ in self.new_isr]


@dataclass(slots=True)
class AlterPartitionReply:
    """One partition's AlterPartition answer (error 0: the state the controller holds now)."""

    error_code: int = 0
    leader: int = UNDEFINED
    isr: list[int] = field(default_factory=list)
    leader_epoch: int = UNDEFINED
    partition_epoch: int = UNDEFINED
    leader_recovery_state: int = RECOVERED


@dataclass(slots=True)
class FollowerFetchCheck:
    error_code: int = OK
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    alter: AlterPartition | None = None
    hw_changed: bool = False
    high_watermark: int = UNDEFINED  # as before the read
    log_start_offset: int = UNDEFINED
    log_end_offset: int = UNDEFINED


# errors after which a pending AlterPartition goes back to the committed state / stays pending
_REVERT = {int(E.operation_not_attempted), int(E.ineligible_replica)}
_WAIT_FOR_METADATA = {
    int(E.unknown_topic_or_partition),
    int(E.unknown_topic_id),
    int(E.fenced_leader_epoch),
    int(E.invalid_update_version),
    int(E.invalid_request),
    int(E.new_leader_elected),
}


class LeaderReplication:
    # test-only switch (the simulator's --bug hw_ignores_min_isr): the HW also advances while the
    # ISR is below min.insync.replicas, the rule KIP-966's ELR elections depend on
    hw_ignores_min_isr = False
    # test-only switch (the simulator's --bug acks_all_before_isr): an acks=all produce is answered
    # once the leader has the records, before the ISR has them (acks=1 passed off as acks=all)
    acks_all_before_isr = False

    def __init__(
        self,
        local_id: int,
        *,
        min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = 30_000,
        broker_epoch_of: Callable[[int], int | None] | None = None,
        local_broker_epoch: int = -1,
    ):
        self.local_id = local_id
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.broker_epoch_of = broker_epoch_of or (lambda b: -1)
        self.local_broker_epoch = local_broker_epoch
        self.leader_id = UNDEFINED
        self.leader_epoch = UNDEFINED
        self.partition_epoch = UNDEFINED
        self.leader_epoch_start_offset = UNDEFINED
        self.replicas: list[int] = []
        self.isr: list[int] = []  # committed
        self.pending: AlterPartition | None = None  # in flight
        self.followers: dict[int, FollowerState] = {}

    # -- roles ------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def maximal_isr(self) -> list[int]:
        p = self.pending
        if p is not None and p.kind == "expand":
            return self.isr + [b for b in p.changed if b not in self.isr]
        return self.isr

    def effective_min_isr(self) -> int:
        return min(self.min_insync_replicas, max(len(self.replicas), 1))

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr()

    def make_leader(
        self, replicas: list[int], isr: list[int], leader_epoch: int, partition_epoch: int, log: ReplicaLog, now: int
    ) -> bool:
        if partition_epoch < self.partition_epoch:
            return False
        was_leader = self.is_leader
        new_epoch = leader_epoch > self.leader_epoch
        self._assign(replicas, isr, leader=True)
        if new_epoch:
            start = log.log_end_offset
            log.assign_epoch(leader_epoch, start)
            for b, st in self.followers.items():
                in_sync = b in isr
                caught_up = now if in_sync else 0
                if not was_leader:
                    self.followers[b] = FollowerState(last_caught_up_time=caught_up)
                else:
                    st.last_fetch_leader_leo = start
                    st.last_fetch_time = now if in_sync else 0
                    st.last_caught_up_time = caught_up
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = start
        self.partition_epoch = partition_epoch
        self.leader_id = self.local_id
        self.maybe_increment_high_watermark(log, now)
        return new_epoch

    def make_follower(self, leader_id: int, replicas: list[int], leader_epoch: int, partition_epoch: int) -> bool:
        """Returns whether the leader epoch is new (the fetcher must restart)."""
        if partition_epoch < self.partition_epoch:
            return False
        new_epoch = leader_epoch > self.leader_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = UNDEFINED
        self.partition_epoch = partition_epoch
        self._assign(replicas, [], leader=False)
        return new_epoch

    def _assign(self, replicas: list[int], isr: list[int], leader: bool) -> None:
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.pending = None
        if leader:
            followers = [r for r in replicas if r != self.local_id]
            self.followers = {b: self.followers.get(b) or FollowerState() for b in followers}
        else:
            self.followers = {}

    # -- produce ------------------------------------------------------------------------------------
    def check_append(self, required_acks: int) -> int:
        if not self.is_leader:
            return int(E.not_leader_or_follower)
        if required_acks == -1 and len(self.isr) < self.effective_min_isr():
            return int(E.not_enough_replicas)
        return OK

    def after_append(self, log: ReplicaLog, now: int) -> bool:
        return self.maybe_increment_high_watermark(log, now)

    def acks_all_status(self, required_offset: int, log: ReplicaLog) -> tuple[bool, int]:
        if not self.is_leader:
            return False, int(E.not_leader_or_follower)
        if log.high_watermark >= required_offset or (
            self.acks_all_before_isr and log.log_end_offset >= required_offset
        ):
            if self.effective_min_isr() <= len(self.maximal_isr):
                return True, OK
            return True, int(E.not_enough_replicas_after_append)
        return False, OK

    # -- the high watermark ------------------------------------------------------------------------------
    def maybe_increment_high_watermark(self, log: ReplicaLog, now: int) -> bool:
        if not self.is_leader or (self.is_under_min_isr and not self.hw_ignores_min_isr):
            return False
        leo = log.log_end_offset
        new_hw = leo
        maximal = self.maximal_isr
        lag = self.replica_lag_time_max_ms
        for b, st in self.followers.items():
            if st.log_end_offset < new_hw and (
                b in maximal or (st.is_caught_up(leo, now, lag) and self._isr_eligible(b, st))
            ):
                new_hw = st.log_end_offset
        if new_hw > log.high_watermark:
            log.update_high_watermark(new_hw)
            return True
        return False

    def _isr_eligible(self, b: int, st: FollowerState) -> bool:
        cached = self.broker_epoch_of(b)
        return st.broker_epoch is not None and cached is not None and st.broker_epoch in (-1, cached)

    # -- follower fetches ----------------------------------------------------------------------------
    def check_leader_epoch(self, current_leader_epoch: int) -> int:
        if not self.is_leader:
            return int(E.not_leader_or_follower)
        if current_leader_epoch < 0:
            return OK
        if current_leader_epoch < self.leader_epoch:
            return int(E.fenced_leader_epoch)
        if current_leader_epoch > self.leader_epoch:
            return int(E.unknown_leader_epoch)
        return OK

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        current_leader_epoch: int,
        follower_log_start: int,
        broker_epoch: int,
        log: ReplicaLog,
        now: int,
    ) -> FollowerFetchCheck:
        out = FollowerFetchCheck(self.check_leader_epoch(current_leader_epoch))
        if out.error_code:
            return out
        st = self.followers.get(replica_id)
        if st is None:
            out.error_code = int(E.unknown_leader_epoch if current_leader_epoch >= 0 else E.not_leader_or_follower)
            return out
        out.high_watermark, out.log_start_offset = log.high_watermark, log.log_start_offset
        out.log_end_offset = leo = log.log_end_offset
        if last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch == UNDEFINED or end == UNDEFINED or fetch_offset < out.log_start_offset:
                out.error_code = int(E.offset_out_of_range)
                return out
            if epoch < last_fetched_epoch or end < fetch_offset:
                out.diverging_epoch = (epoch, end)
                return out
        if fetch_offset < out.log_start_offset or fetch_offset > leo:
            out.error_code = int(E.offset_out_of_range)
            return out
        cached = self.broker_epoch_of(replica_id)
        if broker_epoch != -1 and cached is not None and cached > broker_epoch:
            out.error_code = int(E.not_leader_or_follower)
            return out
        before = st.log_end_offset
        self._update_fetch_state(st, fetch_offset, follower_log_start, now, leo, broker_epoch)
        out.alter = self._maybe_expand_isr(replica_id, st, log)
        if before != st.log_end_offset:
            out.hw_changed = self.maybe_increment_high_watermark(log, now)
        return out

    @staticmethod
    def _update_fetch_state(
        st: FollowerState, fetch_offset: int, log_start: int, now: int, leader_leo: int, broker_epoch: int
    ) -> None:
        if fetch_offset >= leader_leo:
            st.last_caught_up_time = max(st.last_caught_up_time, now)
        elif fetch_offset >= st.last_fetch_leader_leo:
            st.last_caught_up_time = max(st.last_caught_up_time, st.last_fetch_time)
        st.log_start_offset = log_start
        st.log_end_offset = fetch_offset
        st.last_fetch_leader_leo = max(leader_leo, st.last_fetch_leader_leo)
        st.last_fetch_time = now
        st.broker_epoch = broker_epoch

    # -- ISR changes ---------------------------------------------------------------------------------
    def _maybe_expand_isr(self, b: int, st: FollowerState, log: ReplicaLog) -> AlterPartition | None:
        """A follower joins once its log end reaches the HW and the start of this leader epoch
        (so that it holds everything committed, also what the HW does not cover yet)."""
        if self.pending is not None or b in self.isr or not self._isr_eligible(b, st):
            return None
        if st.log_end_offset < log.high_watermark or st.log_end_offset < self.leader_epoch_start_offset:
            return None
        return self._propose("expand", self.isr + [b], frozenset([b]))

    def maybe_shrink_isr(self, log: ReplicaLog, now: int) -> AlterPartition | None:
        if not self.is_leader or self.pending is not None:
            return None
        leo = log.log_end_offset
        out = frozenset(
            b
            for b in self.isr
            if b != self.local_id
            and (b not in self.followers or not self.followers[b].is_caught_up(leo, now, self.replica_lag_time_max_ms))
        )
        if not out:
            return None
        return self._propose("shrink", [b for b in self.isr if b not in out], out)

    def _propose(self, kind: str, isr: list[int], changed: frozenset[int]) -> AlterPartition:
        def epoch(b: int) -> int:
            if b == self.local_id:
                return self.local_broker_epoch
            st = self.followers.get(b)
            return -1 if st is None or st.broker_epoch is None else st.broker_epoch

        # Kafka's leader builds the new ISR as a Scala HashSet (isr + follower, isr diff out of sync):
        # it is sent in that set's order, ascending for small broker ids
        self.pending = AlterPartition(
            kind,
            self.local_id,
            self.leader_epoch,
            self.partition_epoch,
            tuple((b, epoch(b)) for b in hash_set_order(isr)),
            changed,
            tuple(self.isr),
        )
        return self.pending

    def on_alter_partition_response(
        self, proposal: AlterPartition, error_code: int, reply: AlterPartitionReply | None, log: ReplicaLog, now: int
    ) -> tuple[bool, bool]:
        """(retry the same proposal?, did the HW move?)."""
        if self.pending is not proposal:
            return False, False  # newer metadata replaced the state: the answer is stale
        if error_code:
            if error_code in _REVERT:
                self.pending = None
            return error_code not in _REVERT and error_code not in _WAIT_FOR_METADATA, False
        if reply.leader_epoch != self.leader_epoch or reply.partition_epoch < self.partition_epoch:
            return False, False
        self.isr = list(reply.isr)
        self.partition_epoch = reply.partition_epoch
        self.pending = None
        return False, self.maybe_increment_high_watermark(log, now)


# -- follower side -------------------------------------------------------------------------------------
@dataclass(slots=True)
class FetchPartition:
    """One partition of a follower's Fetch request."""

    fetch_offset: int
    last_fetched_epoch: int  # -1: none (no divergence check)
    current_leader_epoch: int
    log_start_offset: int


@dataclass(slots=True)
class FetchPartitionResponse:
    error_code: int = OK
    high_watermark: int = UNDEFINED
    log_start_offset: int = UNDEFINED
    diverging_epoch: tuple[int, int] | None = None
    records: list = field(default_factory=list)  # opaque to this module: given to append()
    first_offset: int = UNDEFINED  # of the records (-1: none)
    last_epoch: int = UNDEFINED  # the epoch of the last record batch
    request_offset: int = UNDEFINED  # the fetch offset asked (-1: not known)


FETCHING, TRUNCATING, WAIT_FOR_METADATA, BACKOFF, OUT_OF_RANGE = (
    "fetching",
    "truncating",
    "wait_for_metadata",
    "backoff",
    "out_of_range",
)


class FollowerFetch:
    truncate_to_high_watermark = False  # test-only: the pre-KIP-101 rule (see the module doc)

    def __init__(self, leader_id: int, leader_epoch: int, log: ReplicaLog):
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        if self.truncate_to_high_watermark:
            log.truncate_to(log.high_watermark)
            self.last_fetched_epoch = UNDEFINED
        else:
            self.last_fetched_epoch = log.latest_epoch()
        self.fetch_offset = log.log_end_offset
        self.state = FETCHING
        # Kafka's PartitionFetchState.lag: the leader's HW less the fetch offset, learned from an
        # answer with records (or the first answer), None until then; in sync once it is 0
        self.lag: int | None = None

    @property
    def in_sync(self) -> bool:
        """Kafka's isReplicaInSync, the follower's own view (replication quotas never hold
        back a replica in sync)."""
        return self.lag is not None and self.lag <= 0

    def request(self, log: ReplicaLog) -> FetchPartition:
        epoch = UNDEFINED if self.truncate_to_high_watermark else self.last_fetched_epoch
        return FetchPartition(self.fetch_offset, epoch, self.leader_epoch, log.log_start_offset)

    def on_response(self, resp: FetchPartitionResponse, log: ReplicaLog, append: Callable[[list], None]) -> str:
        """Apply a fetch response; returns the state: FETCHING (fetch again), BACKOFF,
        WAIT_FOR_METADATA or OUT_OF_RANGE (call ``on_out_of_range`` with the leader's offsets)."""
        err = resp.error_code
        if err == E.fenced_leader_epoch:
            self.state = WAIT_FOR_METADATA
        elif err in (E.unknown_leader_epoch, E.not_leader_or_follower):
            self.state = BACKOFF
        elif err == E.offset_out_of_range:
            self.state = OUT_OF_RANGE
        elif err:
            self.state = BACKOFF
        elif resp.diverging_epoch is not None:
            self.truncate_to_epoch_end(*resp.diverging_epoch, log)
        else:
            appended = False
            restart = self._starts_in_a_batch(resp, log)
            if restart:
                log.truncate_fully_and_start_at(resp.first_offset)
                self.fetch_offset = log.log_end_offset
            if resp.records and (restart or self._answers_this_fetch(resp)) and self.fetch_offset == log.log_end_offset:
                append(resp.records)
                self.last_fetched_epoch = resp.last_epoch
                appended = True
            elif resp.records:
                return self.state  # a stale answer (a fetch from before a truncation)
            self.fetch_offset = log.log_end_offset
            if appended or self.lag is None:
                self.lag = max(0, resp.high_watermark - self.fetch_offset)
            log.update_high_watermark(min(resp.high_watermark, log.log_end_offset))
            if log.log_start_offset < resp.log_start_offset <= log.high_watermark:
                log.maybe_increment_log_start_offset(resp.log_start_offset)
            self.state = FETCHING
        return self.state

    def _starts_in_a_batch(self, resp: FetchPartitionResponse, log: ReplicaLog) -> bool:
        """An empty log asked at its start, and the answer's first batch holds that offset from a
        base below it: the leader's log start is inside a batch (DeleteRecords there, or a mirror
        restarted at its source's). Kafka's follower, on UnexpectedAppendOffsetException with an
        empty log, starts its log again at the batch's base and appends; an answer taken as stale
        here asked the same offset forever."""
        return (
            bool(resp.records)
            and 0 <= resp.first_offset < self.fetch_offset
            and resp.request_offset == self.fetch_offset == log.log_end_offset == log.log_start_offset
        )

    def _answers_this_fetch(self, resp: FetchPartitionResponse) -> bool:
        """Records for the current fetch offset: asked at it (the first batch may start later,
        past offsets a compacted leader removed), or, when the request is not known, starting at it."""
        if resp.request_offset == UNDEFINED:
            return resp.first_offset == self.fetch_offset
        return resp.request_offset == self.fetch_offset <= resp.first_offset

    def truncate_to_epoch_end(self, leader_epoch: int, leader_end: int, log: ReplicaLog) -> None:
        """Kafka's getOffsetTruncationState for the leader's (epoch, end offset)."""
        leo = log.log_end_offset
        if leader_end == UNDEFINED:
            offset, done = self.fetch_offset, True
        else:
            epoch, end = log.end_offset_for_epoch(leader_epoch)
            if epoch == UNDEFINED:
                offset, done = min(leader_end, leo), True
            elif epoch != leader_epoch:
                offset, done = min(end, leo), False  # ask again, from the epoch below
            else:
                offset, done = min(end, leader_end, leo), True
        log.truncate_to(offset)
        self.fetch_offset = log.log_end_offset
        self.last_fetched_epoch = log.latest_epoch()
        self.state = FETCHING if done else TRUNCATING

    on_offsets_for_leader_epoch = truncate_to_epoch_end

    def on_out_of_range(self, leader_start: int, leader_end: int, log: ReplicaLog) -> None:
        """Kafka's fetchOffsetAndTruncate: the leader is behind (unclean election): truncate to its
        end; or the follower is below the leader's log start: start over there."""
        leo = log.log_end_offset
        if leader_end < leo:
            log.truncate_to(leader_end)
        elif leader_start > leo:
            log.truncate_fully_and_start_at(leader_start)
        self.fetch_offset = log.log_end_offset
        self.lag = max(0, leader_end - self.fetch_offset)
        self.last_fetched_epoch = log.latest_epoch()
        self.state = FETCHING
