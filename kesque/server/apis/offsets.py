"""ListOffsets, DeleteRecords, OffsetForLeaderEpoch. As Kafka checks them: DESCRIBE on each
topic for ListOffsets, DELETE for DeleteRecords, and for OffsetForLeaderEpoch CLUSTER_ACTION on
the cluster (a follower's) or else DESCRIBE on each topic (a consumer's, KIP-320); a topic
refused answers TOPIC_AUTHORIZATION_FAILED on each of its partitions."""

from __future__ import annotations

from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...records.records import iter_records
from ..context import CLUSTER_NAME, AclOperation, ResourceType
from .authz import refused

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


class OffsetApis:
    APIS = (
        Api(ApiKeys.LIST_OFFSETS, 1, 11, "list_offsets"),
        Api(ApiKeys.DELETE_RECORDS, 0, 2, "delete_records"),
        Api(ApiKeys.OFFSET_FOR_LEADER_EPOCH, 2, 4, "offset_for_leader_epoch"),
    )

    def __init__(self, *, replica_manager):
        self.replica_manager = replica_manager

    # ------------------------------------------------------------------ ListOffsets
    def list_offsets(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.LIST_OFFSETS, v)
        committed = getattr(req, "isolation_level", 0) == 1
        topics = []
        seen = set()
        denied = refused(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in req.topics])
        for t in req.topics:
            parts = []
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if t.name in denied:
                    parts.append(
                        m(
                            "ListOffsetsPartitionResponse",
                            partition_index=p.partition_index,
                            error_code=ErrorCode.topic_authorization_failed,
                            timestamp=-1,
                            offset=-1,
                            leader_epoch=-1,
                        )
                    )
                    continue
                if key in seen:
                    parts.append(
                        m(
                            "ListOffsetsPartitionResponse",
                            partition_index=p.partition_index,
                            error_code=ErrorCode.invalid_request,
                            timestamp=-1,
                            offset=-1,
                            leader_epoch=-1,
                        )
                    )
                    continue
                seen.add(key)
                try:
                    ts, off, epoch = self._offset_for(
                        t.name,
                        p.partition_index,
                        p.timestamp,
                        getattr(p, "current_leader_epoch", -1),
                        committed,
                        req.replica_id,
                    )
                    err = ErrorCode.none
                except KafkaError as e:
                    ts, off, epoch, err = -1, -1, -1, e.code
                parts.append(
                    m(
                        "ListOffsetsPartitionResponse",
                        partition_index=p.partition_index,
                        error_code=err,
                        timestamp=ts,
                        offset=off,
                        leader_epoch=epoch,
                    )
                )
            topics.append(m("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
        return m(throttle_time=0, topics=tuple(topics))

    def _offset_for(
        self, topic: str, partition: int, timestamp: int, current_epoch: int, committed: bool, replica_id: int
    ) -> tuple[int, int, int]:
        part = self.replica_manager.get_partition(topic, partition)
        part.check_leader_epoch(current_epoch, require_leader=replica_id != DEBUGGING_REPLICA_ID)
        lg = part.log
        cache = lg.leader_epoch_cache
        # a consumer sees up to the HW (LSO for read_committed); a follower (replica id >= 0: it
        # asks the leader's log end after OFFSET_OUT_OF_RANGE) and the debugging id -2 see the
        # log end, as Kafka's (isolation only for CONSUMER_REPLICA_ID)
        if replica_id != CONSUMER_REPLICA_ID:
            max_offset = lg.log_end_offset
        else:
            max_offset = part.last_stable_offset if committed else lg.high_watermark
        # KIP-207: a new leader whose high watermark has not yet reached the log end it took over
        # with cannot tell a client where the partition ends (a follower's high watermark lags the
        # old leader's): OFFSET_NOT_AVAILABLE, which clients retry, rather than an end offset below
        # records the old leader already served (Kafka's Partition.fetchOffsetForTimestamp). A
        # consumer told so too early took records it had read as past the end.
        epoch_start = part.repl.leader_epoch_start_offset
        lagging = replica_id < 0 and part.is_leader and epoch_start > lg.high_watermark
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            off = lg.log_start_offset
            return -1, off, cache.epoch_for_offset(off)
        if timestamp == LATEST:
            if lagging:
                raise self._offset_not_available(part, epoch_start, lg.high_watermark)
            return (
                -1,
                max_offset,
                cache.epoch_for_offset(max_offset) if max_offset > lg.log_start_offset else cache.latest_epoch(),
            )
        if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            return -1, -1, -1
        if timestamp == MAX_TIMESTAMP:
            best = lg.max_timestamp_offset(max_offset)
            if best is None:
                if lagging:
                    raise self._offset_not_available(part, epoch_start, lg.high_watermark)
                return -1, -1, -1
            last_offset, max_ts = best
            off = self._exact_max_ts_offset(lg, last_offset, max_ts)
            return max_ts, off, cache.epoch_for_offset(off)
        if timestamp < 0:
            raise KafkaError(ErrorCode.invalid_request, f"Invalid timestamp {timestamp}")
        found = lg.fetch_offset_by_timestamp(timestamp, max_offset)
        if found is None:
            if lagging:
                raise self._offset_not_available(part, epoch_start, lg.high_watermark)
            return -1, -1, -1
        off, ts, epoch = found
        return ts, off, epoch

    @staticmethod
    def _offset_not_available(part, epoch_start: int, hw: int) -> KafkaError:
        return KafkaError(
            ErrorCode.offset_not_available,
            f"Failed to fetch offsets for partition {part.tp} with leader epoch {part.leader_epoch} as "
            f"this partition's high watermark ({hw}) is lagging behind the start offset from the "
            f"beginning of this epoch ({epoch_start}).",
        )

    @staticmethod
    def _exact_max_ts_offset(lg, last_offset: int, max_ts: int) -> int:
        """The first record in the batch ending at ``last_offset`` whose timestamp is max_ts."""
        for h, data in lg.read_batches(last_offset, last_offset + 1):
            for r in iter_records(data, 0, h):
                if r.timestamp == max_ts:
                    return r.offset
        return last_offset

    # ------------------------------------------------------------------ DeleteRecords
    def delete_records(self, ctx, req):
        m = Msg(ApiKeys.DELETE_RECORDS, ctx.api_version)
        rm = self.replica_manager
        topics = []
        denied = refused(ctx, AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in req.topics])
        for t in req.topics:
            parts = []
            for p in t.partitions:
                try:
                    if t.name in denied:
                        raise KafkaError(ErrorCode.topic_authorization_failed)
                    low = rm.delete_records(t.name, p.partition_index, p.offset)
                    err = ErrorCode.none
                except KafkaError as e:
                    low, err = -1, e.code
                parts.append(
                    m(
                        "DeleteRecordsPartitionResult",
                        partition_index=p.partition_index,
                        low_watermark=low,
                        error_code=err,
                    )
                )
            topics.append(m("DeleteRecordsTopicResult", name=t.name, partitions=tuple(parts)))
        return m(throttle_time=0, topics=tuple(topics))

    # ------------------------------------------------------------------ OffsetForLeaderEpoch
    def offset_for_leader_epoch(self, ctx, req):
        m = Msg(ApiKeys.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
        rm = self.replica_manager
        topics = []
        denied = ()
        if ctx.authorizer is not None and not ctx.authorize(
            AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            denied = refused(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.topic for t in req.topics])
        for t in req.topics:
            parts = []
            for p in t.partitions:
                try:
                    if t.topic in denied:
                        raise KafkaError(ErrorCode.topic_authorization_failed)
                    part = rm.get_partition(t.topic, p.partition)
                    part.check_leader_epoch(p.current_leader_epoch, require_leader=getattr(req, "replica_id", -1) != -2)
                    epoch, end = part.log.leader_epoch_cache.end_offset_for(p.leader_epoch, part.log.log_end_offset)
                    err = ErrorCode.none
                except KafkaError as e:
                    epoch, end, err = -1, -1, e.code
                parts.append(
                    m("EpochEndOffset", error_code=err, partition=p.partition, leader_epoch=epoch, end_offset=end)
                )
            topics.append(m("OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts)))
        return m(throttle_time=0, topics=tuple(topics))
