"""Partition: one replica of a topic partition on this broker, leader or follower.

The replication rules are :class:`~kesque.replication.replica_state.LeaderReplication`'s (sans-IO,
simulator-tested); this class applies them to the real :class:`~kesque.storage.unified_log.UnifiedLog` and is
the one owner of the high watermark on a leader: it moves only through
``LeaderReplication.maybe_increment_high_watermark`` (after a leader append, a follower's fetch, an
AlterPartition answer or a leadership change). A follower's high watermark is moved by its
replica fetcher (``FollowerFetch``).

What the partition needs of the broker is the narrow :class:`ReplicaEnv`: the time, the broker
epochs of the image, the replica lag setting, a way to send an AlterPartition proposal, and to
say that the high watermark moved (waiting consumer fetches and acks=all produces are completed
from there: the checks in :mod:`kesque.replication.delayed`, the waiting in
``kesque.server.drivers.delayed``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass

from ..errors import ErrorCode, KafkaError
from ..storage.local_log import FetchData
from ..storage.unified_log import AppendInfo, UnifiedLog
from .replica_state import AlterPartition, FollowerFetchCheck, LeaderReplication, StorageReplicaLog

log = logging.getLogger(__name__)

# FetchIsolation
FETCH_LOG_END = 0
FETCH_HIGH_WATERMARK = 1
FETCH_TXN_COMMITTED = 2


@dataclass(slots=True)
class ReadResult:
    data: FetchData
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted_transactions: list | None = None  # AbortedTxn entries (read_committed)


class ReplicaEnv:
    """What a Partition needs of its broker. This default serves a partition on its own (tests,
    tools): no followers, no controller to tell."""

    replica_lag_time_max_ms = 30_000
    local_broker_epoch = -1

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def broker_epoch_of(self, broker_id: int) -> int | None:
        return -1

    def alter_partition(self, part: Partition, proposal: AlterPartition) -> None:
        pass

    def hw_moved(self, part: Partition, visible_bytes: int) -> None:
        pass

    def isr_updated(self, kind: str, ok: bool) -> None:
        """An ISR change ("expand" or "shrink") the controller accepted, or refused (Kafka's
        AlterPartitionListener: markIsrExpand, markIsrShrink, markFailed)."""


_STANDALONE = ReplicaEnv()


def not_leader(tp: str, node_id: int) -> KafkaError:
    return KafkaError(ErrorCode.not_leader_or_follower, f"Leader not local for partition {tp} on broker {node_id}")


class Partition:
    def __init__(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        log_: UnifiedLog,
        local_id: int,
        env: ReplicaEnv | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log_
        self.local_id = local_id
        self.env = env or _STANDALONE
        self.rlog = StorageReplicaLog(log_)
        self.repl = LeaderReplication(local_id, broker_epoch_of=self.env.broker_epoch_of)
        # (end offset, bytes) of each leader append the high watermark has not passed yet: the
        # bytes a HW move makes visible to waiting consumer fetches
        self._unexposed: deque[tuple[int, int]] = deque()
        # a mirror topic's partition (docs/mirror.md): its log holds the source's batches with the
        # source's leader epochs, so a leader here records no epoch of its own in the log's
        # leader-epoch cache (the cache keeps the source's lineage, which every replica shares)
        self.mirror = False

    @property
    def tp(self) -> str:
        return f"{self.topic}-{self.partition}"

    def replace_log(self, log_: UnifiedLog) -> None:
        """The log moved to another log dir (AlterReplicaLogDirs): same offsets, new files."""
        self.log = log_
        self.rlog.log = log_  # the replica fetcher's entry shares this view

    @property
    def is_leader(self) -> bool:
        return self.repl.is_leader

    leader_id = property(lambda self: self.repl.leader_id)
    leader_epoch = property(lambda self: self.repl.leader_epoch)
    partition_epoch = property(lambda self: self.repl.partition_epoch)
    replicas = property(lambda self: self.repl.replicas)
    isr = property(lambda self: self.repl.isr)

    def _settings(self) -> int:
        """Refresh the settings the rules read (topic configs are dynamic); the time in ms."""
        r = self.repl
        r.min_insync_replicas = self.log.config.min_insync_replicas
        r.replica_lag_time_max_ms = self.env.replica_lag_time_max_ms
        r.local_broker_epoch = self.env.local_broker_epoch
        return self.env.now_ms()

    # ------------------------------------------------------------------ state changes
    def make_leader(self, replicas: list[int], isr: list[int], leader_epoch: int, partition_epoch: int) -> bool:
        now = self._settings()
        hw = self.log.high_watermark
        rlog = _SourceEpochs(self.rlog) if self.mirror else self.rlog
        new_epoch = self.repl.make_leader(replicas, isr, leader_epoch, partition_epoch, rlog, now)
        if new_epoch:
            self._unexposed.clear()
            log.info(
                "%s: became leader at epoch %d, LEO %d, ISR %s",
                self.tp,
                leader_epoch,
                self.log.log_end_offset,
                self.repl.isr,
            )
        self._after_hw(hw)
        return new_epoch

    def make_follower(self, leader_id: int, replicas: list[int], leader_epoch: int, partition_epoch: int) -> bool:
        """Returns whether the leader or leader epoch changed (the fetcher must restart)."""
        before = (self.repl.leader_id, self.repl.leader_epoch)
        self.repl.make_follower(leader_id, replicas, leader_epoch, partition_epoch)
        self._unexposed.clear()
        changed = before != (self.repl.leader_id, self.repl.leader_epoch)
        if changed:
            log.info(
                "%s: follows broker %d at epoch %d, LEO %d", self.tp, leader_id, leader_epoch, self.log.log_end_offset
            )
        return changed

    def maybe_increment_high_watermark(self) -> bool:
        """After the broker appended on its own (coordinators, markers): the HW may move."""
        hw = self.log.high_watermark
        moved = self.repl.maybe_increment_high_watermark(self.rlog, self._settings())
        self._after_hw(hw)
        return moved

    def _after_hw(self, before: int) -> None:
        hw = self.log.high_watermark
        if hw == before:
            return
        visible = 0
        q = self._unexposed
        while q and q[0][0] <= hw:
            visible += q.popleft()[1]
        self.env.hw_moved(self, max(visible, 1))

    def _leader_appended(self, info: AppendInfo) -> None:
        if info.size:
            self._unexposed.append((info.last_offset + 1, info.size))
        self.maybe_increment_high_watermark()

    # ------------------------------------------------------------------ epoch checks
    def check_leader_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        if require_leader and not self.is_leader:
            raise not_leader(self.tp, self.local_id)
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(
                ErrorCode.fenced_leader_epoch,
                f"The leader epoch in the request {current_leader_epoch} is older than the current "
                f"leader epoch {self.leader_epoch} for partition {self.tp}",
            )
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(
                ErrorCode.unknown_leader_epoch,
                f"The leader epoch in the request {current_leader_epoch} is newer than the current "
                f"leader epoch {self.leader_epoch} for partition {self.tp}",
            )

    # ------------------------------------------------------------------ data path
    def append_records_to_leader(
        self,
        buf: memoryview,
        required_acks: int,
        now_ms: int,
        verification_guard=None,
        require_verification: bool = False,
    ) -> AppendInfo:
        self._settings()
        code = self.repl.check_append(required_acks)
        if code == ErrorCode.not_leader_or_follower:
            raise not_leader(self.tp, self.local_id)
        if code:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {self.repl.isr} is insufficient to satisfy the min.isr "
                f"requirement of {self.repl.effective_min_isr()} for partition {self.tp}",
            )
        info = self.log.append_as_leader(buf, self.leader_epoch, now_ms, verification_guard, require_verification)
        self._leader_appended(info)
        return info

    def append_txn_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
    ) -> AppendInfo:
        if not self.is_leader:
            raise not_leader(self.tp, self.local_id)
        info = self.log.append_txn_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, self.leader_epoch, now_ms
        )
        self._leader_appended(info)
        return info

    def append_new_batch(self, batch: bytes, now_ms: int) -> AppendInfo:
        """A batch the broker built (coordinator state) appended as the leader."""
        if not self.is_leader:
            raise not_leader(self.tp, self.local_id)
        info = self.log.append_new_batch(batch, self.leader_epoch, now_ms)
        self._leader_appended(info)
        return info

    def append_mirrored(self, batches: memoryview, now_ms: int) -> AppendInfo:
        """Batches fetched from a mirror topic's source, appended as the leader at their own
        offsets, byte for byte (the follower's append path: producer state, markers and the
        transaction index as the source wrote them)."""
        if not self.is_leader:
            raise not_leader(self.tp, self.local_id)
        info = self.log.append_raw(batches, now_ms)
        self._leader_appended(info)
        return info

    def restart_mirror_at(self, offset: int) -> None:
        """The source deleted the records from the mirror's log end to ``offset`` before they were
        copied: the mirror's log starts again, empty, at ``offset`` (the loss is reported by the
        mirror fetcher)."""
        if not self.is_leader:
            raise not_leader(self.tp, self.local_id)
        hw = self.log.high_watermark
        self.log.truncate_fully_and_start_at(offset)
        self._unexposed.clear()
        self.maybe_increment_high_watermark()
        self._after_hw(hw)

    def acks_all_status(self, required_offset: int) -> tuple[bool, int]:
        """A waiting acks=all request (its last offset + 1): (done, error code)."""
        self._settings()
        return self.repl.acks_all_status(required_offset, self.rlog)

    def max_offset_for(self, isolation: int) -> int:
        if isolation == FETCH_LOG_END:
            return self.log.log_end_offset
        if isolation == FETCH_TXN_COMMITTED:
            return self.log.last_stable_offset
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: int,
        min_one_message: bool,
        current_leader_epoch: int = -1,
        fetch_only_from_leader: bool = True,
    ) -> ReadResult:
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self.log
        lso = lg.last_stable_offset
        data = lg.read(fetch_offset, max_bytes, self.max_offset_for(isolation), min_one_message)
        aborted = None
        if isolation == FETCH_TXN_COMMITTED:
            aborted = lg.collect_aborted_transactions(fetch_offset, data.upper_bound) if data.size else []
        return ReadResult(data, lg.high_watermark, lso, lg.log_start_offset, lg.log_end_offset, aborted)

    # ------------------------------------------------------------------ followers
    def read_for_follower(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        current_leader_epoch: int,
        follower_log_start: int,
        broker_epoch: int,
        max_bytes: int,
        min_one_message: bool,
        held: bool = False,
    ) -> tuple[FollowerFetchCheck, FetchData | None]:
        """A follower's Fetch of this partition: the checks and fetch-state update of
        LeaderReplication (an ISR expansion goes to the controller), then the records from
        ``fetch_offset`` up to the log end, or none when ``held`` back by the leader's
        replication quota. The check carries the HW and log start as they were before this
        fetch moved them, as Kafka answers."""
        now = self._settings()
        hw = self.log.high_watermark
        check = self.repl.on_follower_fetch(
            replica_id,
            fetch_offset,
            last_fetched_epoch,
            current_leader_epoch,
            follower_log_start,
            broker_epoch,
            self.rlog,
            now,
        )
        if check.alter is not None:
            self.env.alter_partition(self, check.alter)
        self._after_hw(hw)
        if check.error_code or check.diverging_epoch is not None:
            return check, None
        if held:
            return check, FetchData()
        return check, self.log.read(fetch_offset, max_bytes, self.log.log_end_offset, min_one_message)

    def maybe_shrink_isr(self) -> None:
        """The ISR-expiration task (every replica.lag.time.max.ms / 2)."""
        proposal = self.repl.maybe_shrink_isr(self.rlog, self._settings())
        if proposal is not None:
            log.info(
                "%s: shrinking ISR from %s to %s (out of sync: %s)",
                self.tp,
                self.repl.isr,
                proposal.isr,
                sorted(proposal.changed),
            )
            self.env.alter_partition(self, proposal)

    def on_alter_partition_response(self, proposal: AlterPartition, error_code: int, reply) -> bool:
        """The controller's answer; True if the same proposal should be sent again."""
        hw = self.log.high_watermark
        # accepted as Kafka's handleAlterPartitionUpdate counts it: the leader epoch still ours and
        # the partition epoch not older (the committed change may have reached the image first)
        accepted = (
            not error_code
            and reply is not None
            and reply.leader_epoch == self.repl.leader_epoch
            and reply.partition_epoch >= self.repl.partition_epoch
        )
        retry, _moved = self.repl.on_alter_partition_response(proposal, error_code, reply, self.rlog, self._settings())
        if accepted:
            self.env.isr_updated(proposal.kind, True)
        if not error_code and self.repl.pending is None and reply is not None:
            log.info("%s: ISR updated to %s (partition epoch %d)", self.tp, self.repl.isr, self.repl.partition_epoch)
        elif error_code:
            self.env.isr_updated(proposal.kind, False)
            log.info(
                "%s: AlterPartition %s to %s failed: %s",
                self.tp,
                proposal.kind,
                proposal.isr,
                ErrorCode(error_code).name if error_code in ErrorCode._value2member_map_ else error_code,
            )
        self._after_hw(hw)
        return retry

    @property
    def is_under_min_isr(self) -> bool:
        self._settings()
        return self.repl.is_under_min_isr


class _SourceEpochs:
    """A mirror partition's log as its leader's rules see it: everything but the epoch record a
    new leader makes (the batches bring the source's epochs, see ``Partition.mirror``)."""

    def __init__(self, rlog):
        self._rlog = rlog

    def __getattr__(self, name):
        return getattr(self._rlog, name)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        pass
