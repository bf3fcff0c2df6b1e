"""Partition: one replica of a topic partition and its leader-side state.

Holds the leader epoch, the ISR and the replicas from the metadata image, and moves the
high watermark. On one node the ISR is just this broker, so the high watermark follows the
log end offset as soon as a batch is appended; the cluster issue adds follower fetch
states and ISR shrink/expand here, keeping the same interface.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from ..errors import ErrorCode, KafkaError
from ..storage.log import AppendInfo, FetchData, Log

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


class Partition:
    def __init__(self, topic: str, partition: int, topic_id: uuid.UUID, log_: Log, local_id: int):
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log_
        self.local_id = local_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []

    @property
    def tp(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    # ------------------------------------------------------------------ state changes
    def make_leader(self, replicas: list[int], isr: list[int], leader_epoch: int, partition_epoch: int) -> bool:
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.replicas, self.isr = list(replicas), list(isr)
        self.leader_id = self.local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        if new_epoch:
            # Kafka records the epoch's start offset as soon as the replica becomes leader
            leo = self.log.log_end_offset
            # on an empty log the entry is cheap to lose (recovery rebuilds epochs from batches)
            self.log.leader_epoch_cache.assign(leader_epoch, leo, fsync=leo > 0)
            log.info("%s: became leader at epoch %d, LEO %d", self.tp, leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return new_epoch

    def make_follower(self, leader_id: int, replicas: list[int], isr: list[int], leader_epoch: int,
                      partition_epoch: int) -> bool:
        changed = leader_epoch != self.leader_epoch or leader_id != self.leader_id
        self.replicas, self.isr = list(replicas), list(isr)
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        return changed

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest LEO among ISR members (only this broker on one node)."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    # ------------------------------------------------------------------ epoch checks
    def check_leader_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        if require_leader and not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"Leader not local for partition {self.tp} on broker {self.local_id}")
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch,
                             f"The leader epoch in the request {current_leader_epoch} is older than the current "
                             f"leader epoch {self.leader_epoch} for partition {self.tp}")
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.unknown_leader_epoch,
                             f"The leader epoch in the request {current_leader_epoch} is newer than the current "
                             f"leader epoch {self.leader_epoch} for partition {self.tp}")

    # ------------------------------------------------------------------ data path
    def append_records_to_leader(self, buf: memoryview, required_acks: int, now_ms: int) -> AppendInfo:
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"Leader not local for partition {self.tp} on broker {self.local_id}")
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(ErrorCode.not_enough_replicas,
                             f"The size of the current ISR {self.isr} is insufficient to satisfy the min.isr "
                             f"requirement of {min_isr} for partition {self.tp}")
        info = self.log.append_as_leader(buf, self.leader_epoch, now_ms)
        self.maybe_increment_high_watermark()
        return info

    def max_offset_for(self, isolation: int) -> int:
        if isolation == FETCH_LOG_END:
            return self.log.log_end_offset
        if isolation == FETCH_TXN_COMMITTED:
            return self.log.last_stable_offset
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def read(self, fetch_offset: int, max_bytes: int, isolation: int, min_one_message: bool,
             current_leader_epoch: int = -1, fetch_only_from_leader: bool = True) -> ReadResult:
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self.log
        lso = lg.last_stable_offset
        data = lg.read(fetch_offset, max_bytes, self.max_offset_for(isolation), min_one_message)
        aborted = None
        if isolation == FETCH_TXN_COMMITTED:
            aborted = lg.collect_aborted_transactions(fetch_offset, data.upper_bound) if data.size else []
        return ReadResult(data, lg.high_watermark, lso, lg.log_start_offset, lg.log_end_offset, aborted)
