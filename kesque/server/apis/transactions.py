"""Producer ids and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
WriteTxnMarkers and TxnOffsetCommit — translations between the wire and the transaction
coordinator (coordinator/transaction/) or the group coordinator (transactional offsets).

A producer without a transactional id gets a fresh producer id at epoch 0 on every
InitProducerId, as Kafka's coordinator does. A request that wrote to ``__transaction_state`` (or
``__consumer_offsets``) is answered once the write is committed (``committed.py``); the
markers of WriteTxnMarkers once committed on their partitions (acks=all, as Kafka appends them).
Error codes old clients do not know are mapped as KafkaApis maps them (PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH before the version that introduced it; TRANSACTION_ABORTABLE becomes
INVALID_TXN_STATE).
"""

from __future__ import annotations

import datetime
import inspect
import re

from ...controller.controller import INTERNAL_TOPICS
from ...coordinator.group.requests import OffsetCommitPartition, TxnOffsetCommit
from ...coordinator.group.runtime import OFFSETS_TOPIC
from ...coordinator.runtime import coordinator_error
from ...coordinator.transaction.records import TxnState
from ...coordinator.transaction.requests import AddPartitionsToTxn, EndTxn, InitProducerId
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import EPOCH as _EPOCH
from ...protocol.messages import Msg, to_ms
from ..context import CLUSTER_NAME, AclOperation, ResourceType
from ..txn_channels import append_marker, markers_committed
from .authz import refused
from .committed import when_committed

_WRITE, _READ, _DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
_TXN, _TOPIC, _GROUP, _CLUSTER = (
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
)


def _may_write_txn(ctx, txn_id) -> bool:
    return ctx.authorize(_WRITE, _TXN, txn_id)


def _inter_broker(ctx) -> bool:
    """CLUSTER_ACTION on the cluster: what a broker's own requests need (Kafka's
    authorizeClusterOperation)."""
    return ctx.authorize(AclOperation.CLUSTER_ACTION, _CLUSTER, CLUSTER_NAME)


def _ms_time(ms: int) -> datetime.datetime:
    """A timestamp field as kio writes it; -1 (none) stays -1 on the wire."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _fenced(code: ErrorCode, version: int, since: int) -> ErrorCode:
    return ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced and version < since else code


def _topic_results(m, errors: dict) -> tuple:
    """AddPartitionsToTxn's per-topic results of ``{(topic, partition): error}``."""
    by_topic: dict = {}
    for (topic, p), code in errors.items():
        by_topic.setdefault(topic, []).append(
            m("AddPartitionsToTxnPartitionResult", partition_index=p, partition_error_code=code)
        )
    return tuple(
        m("AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(rs)) for t, rs in by_topic.items()
    )


class TransactionApis:
    APIS = (
        Api(ApiKeys.INIT_PRODUCER_ID, 0, 6, "init_producer_id"),
        Api(ApiKeys.ADD_PARTITIONS_TO_TXN, 0, 5, "add_partitions_to_txn"),
        Api(ApiKeys.ADD_OFFSETS_TO_TXN, 0, 4, "add_offsets_to_txn"),
        Api(ApiKeys.END_TXN, 0, 5, "end_txn"),
        Api(ApiKeys.WRITE_TXN_MARKERS, 1, 2, "write_txn_markers"),
        Api(ApiKeys.TXN_OFFSET_COMMIT, 0, 5, "txn_offset_commit"),
        Api(ApiKeys.DESCRIBE_PRODUCERS, 0, 0, "describe_producers"),
        Api(ApiKeys.DESCRIBE_TRANSACTIONS, 0, 0, "describe_transactions"),
        Api(ApiKeys.LIST_TRANSACTIONS, 0, 2, "list_transactions"),
    )

    def __init__(
        self,
        *,
        image,
        config,
        replica_manager,
        txn_coordinator,
        group_coordinator,
        producer_ids,
        txn_verifier,
        clock,
    ):
        self.image = image
        self.config = config
        self.replica_manager = replica_manager
        self.tc = txn_coordinator
        self.group_coordinator = group_coordinator
        self.producer_ids = producer_ids
        self.txn_verifier = txn_verifier
        self.clock = clock

    def _when_committed(self, txn_ids, response, failed):
        """``response`` once the transaction records of ``txn_ids`` are committed."""
        tc = self.tc
        txn_ids = [t for t in txn_ids if t]
        return when_committed(
            tc,
            {tc.partition_for(t) for t in txn_ids},
            response,
            failed,
            tc.write_timeout_ms(txn_ids[0]) if txn_ids else None,
        )

    # ------------------------------------------------------------------ InitProducerId
    def init_producer_id(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.INIT_PRODUCER_ID, v)
        if ctx.authorizer is not None:
            code = self._init_refused(ctx, req)
            if code is not None:
                return m(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1)
        if req.transactional_id is None:
            try:
                pid = self.producer_ids.generate()
            except KafkaError as e:
                return m(throttle_time=0, error_code=e.code, producer_id=-1, producer_epoch=-1)
            return m(throttle_time=0, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0)
        if not req.transactional_id:
            return m(throttle_time=0, error_code=ErrorCode.invalid_request, producer_id=-1, producer_epoch=-1)
        try:
            res = self.tc.init_producer_id(
                InitProducerId(
                    req.transactional_id,
                    to_ms(req.transaction_timeout),
                    getattr(req, "producer_id", -1),
                    getattr(req, "producer_epoch", -1),
                    getattr(req, "enable2_pc", False),
                    getattr(req, "keep_prepared_txn", False),
                )
            )
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, producer_id=-1, producer_epoch=-1)
        return self._when_committed(
            [req.transactional_id],
            m(
                throttle_time=0,
                error_code=_fenced(res.error, v, 4),
                producer_id=res.producer_id,
                producer_epoch=res.producer_epoch,
                ongoing_txn_producer_id=res.ongoing_producer_id,
                ongoing_txn_producer_epoch=res.ongoing_producer_epoch,
            ),
            lambda code: m(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1),
        )

    @staticmethod
    def _init_refused(ctx, req) -> ErrorCode | None:
        """As Kafka: WRITE on the transactional id (and TWO_PHASE_COMMIT on it for a KIP-939
        producer); without one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic."""
        txn_id = req.transactional_id
        if txn_id is not None:
            if not _may_write_txn(ctx, txn_id) or (
                getattr(req, "enable2_pc", False) and not ctx.authorize(AclOperation.TWO_PHASE_COMMIT, _TXN, txn_id)
            ):
                return ErrorCode.transactional_id_authorization_failed
        elif not ctx.authorize(AclOperation.IDEMPOTENT_WRITE, _CLUSTER, CLUSTER_NAME) and not (
            ctx.authorize_by_resource_type(_WRITE, _TOPIC)
        ):
            return ErrorCode.cluster_authorization_failed
        return None

    # ------------------------------------------------------------------ AddPartitionsToTxn
    def add_partitions_to_txn(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.ADD_PARTITIONS_TO_TXN, v)
        if v >= 4 and not _inter_broker(ctx):  # only brokers send these versions
            return m(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
        if v <= 3:
            txns = [
                (
                    req.v3_and_below_transactional_id,
                    req.v3_and_below_producer_id,
                    req.v3_and_below_producer_epoch,
                    req.v3_and_below_topics,
                    False,
                )
            ]
        else:
            txns = [
                (t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only) for t in req.transactions
            ]
        # v4+ without verify_only comes from a partition leader adding a TV2 producer's partition
        tv = 2 if self.tc.tv2(v >= 4) else 0
        errors = [self._add_partitions(ctx, v, *t, tv) for t in txns]

        def respond(failed=None):
            """``failed``: the error of every partition whose addition was not committed."""
            results = [
                _topic_results(m, {tp: failed for tp in errs} if failed and not t[4] else errs)
                for t, errs in zip(txns, errors)
            ]
            if v <= 3:
                return m(throttle_time=0, results_by_topic_v3_and_below=results[0])
            return m(
                throttle_time=0,
                error_code=ErrorCode.none,
                results_by_transaction=tuple(
                    m("AddPartitionsToTxnResult", transactional_id=t[0], topic_results=r) for t, r in zip(txns, results)
                ),
            )

        return self._when_committed([t[0] for t in txns if not t[4]], respond(), respond)

    def _add_partitions(self, ctx, v, txn_id, producer_id, producer_epoch, topics, verify_only, tv: int = 0) -> dict:
        wanted = [(t.name, p) for t in topics for p in t.partitions]
        denied: set = set()
        if v <= 3:
            # a client's: WRITE on the transactional id, and on each topic (never an internal one)
            if not _may_write_txn(ctx, txn_id):
                return {tp: ErrorCode.transactional_id_authorization_failed for tp in wanted}
            names = {t for t, _p in wanted}
            denied = {t for t in names if t in INTERNAL_TOPICS} | refused(ctx, _WRITE, _TOPIC, names - INTERNAL_TOPICS)
        image = self.image
        errors: dict = {}
        missing = {tp for tp in wanted if image.topic(tp[0]) is None or tp[1] not in image.topic(tp[0]).partitions}
        if missing or denied:
            # any failed partition fails the whole request; the others are not attempted
            errors = {
                tp: ErrorCode.topic_authorization_failed
                if tp[0] in denied
                else ErrorCode.unknown_topic_or_partition
                if tp in missing
                else ErrorCode.operation_not_attempted
                for tp in wanted
            }
        elif verify_only:
            errors = self.tc.verify(txn_id, producer_id, producer_epoch, wanted)
        else:
            try:
                self.tc.add_partitions(AddPartitionsToTxn(txn_id, producer_id, producer_epoch, frozenset(wanted), tv))
                code = ErrorCode.none
            except KafkaError as e:
                code = e.code
            errors = {tp: _fenced(code, v, 2) for tp in wanted}
        return errors

    # ------------------------------------------------------------------ AddOffsetsToTxn
    def add_offsets_to_txn(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.ADD_OFFSETS_TO_TXN, v)
        if not _may_write_txn(ctx, req.transactional_id):
            return m(throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed)
        if not ctx.authorize(_READ, _GROUP, req.group_id):
            return m(throttle_time=0, error_code=ErrorCode.group_authorization_failed)
        if not req.group_id:
            return m(throttle_time=0, error_code=ErrorCode.invalid_group_id)
        tp = (OFFSETS_TOPIC, self.group_coordinator.partition_for(req.group_id))
        try:
            self.tc.add_partitions(
                AddPartitionsToTxn(req.transactional_id, req.producer_id, req.producer_epoch, frozenset({tp}))
            )
            code = ErrorCode.none
        except KafkaError as e:
            code = e.code
        return self._when_committed(
            [req.transactional_id],
            m(throttle_time=0, error_code=_fenced(code, v, 2)),
            lambda failed: m(throttle_time=0, error_code=failed),
        )

    # ------------------------------------------------------------------ EndTxn
    def end_txn(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.END_TXN, v)
        pid, epoch = -1, -1
        if not _may_write_txn(ctx, req.transactional_id):
            return m(
                throttle_time=0,
                error_code=ErrorCode.transactional_id_authorization_failed,
                producer_id=-1,
                producer_epoch=-1,
            )
        try:
            # v5+ of a TV2 client: the epoch is bumped and the answer names the producer id and
            # epoch of its next transaction (KIP-890 part 2)
            res = self.tc.end_txn(
                EndTxn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed, self.tc.tv2(v >= 5))
            )
            pid, epoch = res.producer_id, res.producer_epoch
            code = ErrorCode.none
        except KafkaError as e:
            code = e.code
        return self._when_committed(
            [req.transactional_id],
            m(throttle_time=0, error_code=_fenced(code, v, 2), producer_id=pid, producer_epoch=epoch),
            lambda failed: m(throttle_time=0, error_code=failed, producer_id=-1, producer_epoch=-1),
        )

    # ------------------------------------------------------------------ WriteTxnMarkers
    def write_txn_markers(self, ctx, req):
        """Markers a (remote) transaction coordinator asks this broker, as partition leader, to
        write; each is answered once committed (acks=all)."""
        rm = self.replica_manager
        codes: dict = {}  # (marker index, topic, partition) -> error of the append
        written: dict = {}  # (topic, partition) -> the offset the HW must reach
        if ctx.authorizer is not None and not (
            ctx.authorize(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME) or _inter_broker(ctx)
        ):  # as Kafka: ALTER or CLUSTER_ACTION on the cluster, or every partition is refused
            refusal = ErrorCode.cluster_authorization_failed
            codes = {
                (i, t.name, p): refusal
                for i, mk in enumerate(req.markers)
                for t in mk.topics
                for p in t.partition_indexes
            }
            return self._markers_response(ctx, req, codes, {})
        for i, mk in enumerate(req.markers):
            for t in mk.topics:
                for p in t.partition_indexes:
                    try:
                        end = append_marker(
                            rm,
                            t.name,
                            p,
                            mk.producer_id,
                            mk.producer_epoch,
                            mk.transaction_result,
                            mk.coordinator_epoch,
                        )
                        written[(t.name, p)] = max(end, written.get((t.name, p), 0))
                        codes[(i, t.name, p)] = ErrorCode.none
                    except KafkaError as e:
                        codes[(i, t.name, p)] = e.code
        if any(rm.partitions[tp].log.high_watermark < end for tp, end in written.items()):
            return self._markers_answer(ctx, req, codes, written)
        return self._markers_response(ctx, req, codes, {})

    async def _markers_answer(self, ctx, req, codes: dict, written: dict):
        acked = await markers_committed(self.replica_manager, written, self.config.get("request.timeout.ms"))
        return self._markers_response(ctx, req, codes, acked)

    @staticmethod
    def _markers_response(ctx, req, codes: dict, acked: dict):
        m = Msg(ApiKeys.WRITE_TXN_MARKERS, ctx.api_version)
        return m(
            markers=tuple(
                m(
                    "WritableTxnMarkerResult",
                    producer_id=mk.producer_id,
                    topics=tuple(
                        m(
                            "WritableTxnMarkerTopicResult",
                            name=t.name,
                            partitions=tuple(
                                m(
                                    "WritableTxnMarkerPartitionResult",
                                    partition_index=p,
                                    error_code=codes[(i, t.name, p)] or acked.get((t.name, p), ErrorCode.none),
                                )
                                for p in t.partition_indexes
                            ),
                        )
                        for t in mk.topics
                    ),
                )
                for i, mk in enumerate(req.markers)
            )
        )

    # ------------------------------------------------------------------ TxnOffsetCommit
    def txn_offset_commit(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.TXN_OFFSET_COMMIT, v)
        wanted = {
            t.name: [
                OffsetCommitPartition(
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                )
                for p in t.partitions
            ]
            for t in req.topics
        }

        def respond(codes: dict):
            return m(
                throttle_time=0,
                topics=tuple(
                    m(
                        "TxnOffsetCommitResponseTopic",
                        name=t,
                        partitions=tuple(
                            m("TxnOffsetCommitResponsePartition", partition_index=p[0], error_code=codes[(t, p[0])])
                            for p in parts
                        ),
                    )
                    for t, parts in wanted.items()
                ),
            )

        def all_(code):
            return respond({(t, p[0]): code for t, parts in wanted.items() for p in parts})

        if not _may_write_txn(ctx, req.transactional_id):
            return all_(ErrorCode.transactional_id_authorization_failed)
        if not ctx.authorize(_READ, _GROUP, req.group_id):
            return all_(ErrorCode.group_authorization_failed)
        # as Kafka: READ on each topic, or its partitions answer TOPIC_AUTHORIZATION_FAILED; with
        # no known partition left the coordinator is not asked
        denied = refused(ctx, _READ, _TOPIC, wanted)
        if denied:
            image = self.image
            known = {
                t: ps
                for t, ps in wanted.items()
                if t not in denied and (ti := image.topic(t)) is not None and any(p[0] in ti.partitions for p in ps)
            }
            if not known:
                return respond(
                    {
                        (t, p[0]): ErrorCode.topic_authorization_failed
                        if t in denied
                        else ErrorCode.unknown_topic_or_partition
                        for t, parts in wanted.items()
                        for p in parts
                    }
                )
        if not req.group_id:
            return all_(ErrorCode.invalid_group_id)
        gc = self.group_coordinator
        try:
            gc.shard_for(req.group_id)
        except KafkaError as e:
            return all_(e.code)

        def commit():
            return self._commit_txn_offsets(req, v, wanted, respond, all_, denied)

        if not self.tc.verification_enabled and not self.tc.tv2(v >= 5):
            return commit()
        # KIP-890: the group's partition must be in the producer's transaction (asked of its
        # coordinator, wherever it lives)
        tp = (OFFSETS_TOPIC, gc.partition_for(req.group_id))
        # v5+ of a TV2 client: the partition is added here, the client sends no AddOffsetsToTxn
        add = self.tc.tv2(v >= 5)
        verdict = self.txn_verifier.verify(
            req.transactional_id, req.producer_id, req.producer_epoch, [tp], v >= 5, add, produce=False
        )
        if isinstance(verdict, dict):
            return self._after_verification(verdict[tp], commit, all_)
        return self._verified_later(verdict, tp, commit, all_)

    @staticmethod
    def _after_verification(verdict: tuple, commit, all_):
        code, _msg = verdict
        if code != ErrorCode.none:
            return all_(ErrorCode.coordinator_not_available if code == ErrorCode.not_enough_replicas else code)
        return commit()

    async def _verified_later(self, verdict, tp, commit, all_):
        res = self._after_verification((await verdict)[tp], commit, all_)
        return await res if inspect.isawaitable(res) else res

    def _commit_txn_offsets(self, req, v, wanted: dict, respond, all_, denied=()):
        image = self.image
        gc = self.group_coordinator
        try:
            shard = gc.shard_for(req.group_id)
        except KafkaError as e:
            return all_(e.code)
        codes = {}
        known = {}
        for t, parts in wanted.items():
            ti = image.topic(t)
            for p in parts:
                if t in denied:
                    codes[(t, p[0])] = ErrorCode.topic_authorization_failed
                elif ti is None or p[0] not in ti.partitions:
                    codes[(t, p[0])] = ErrorCode.unknown_topic_or_partition
                else:
                    known.setdefault(t, []).append(p)
        if known:
            try:
                commit = TxnOffsetCommit(
                    req.group_id,
                    req.producer_id,
                    req.producer_epoch,
                    known,
                    getattr(req, "member_id", ""),
                    getattr(req, "generation_id", -1),
                    getattr(req, "group_instance_id", None),
                )
                res = gc.apply(shard, shard.commit_txn_offsets(commit))
            except KafkaError as e:
                return all_(
                    _fenced(ErrorCode.producer_fenced, v, 3)
                    if e.code == ErrorCode.invalid_producer_epoch
                    else coordinator_error(e.code)
                )  # a failed append, or the group's refusal
            codes.update(res)
        return when_committed(gc, [gc.partition_for(req.group_id)], respond(codes), all_)

    # ------------------------------------------------------------------ admin
    def describe_producers(self, ctx, req):
        """The active producers of partitions this broker leads (Kafka's ProducerStateManager view)."""
        m = Msg(ApiKeys.DESCRIBE_PRODUCERS, ctx.api_version)
        rm = self.replica_manager
        topics = []
        denied = refused(ctx, _READ, _TOPIC, [t.name for t in req.topics])
        for t in req.topics:
            parts = []
            for p in t.partition_indexes:
                part = rm.partitions.get((t.name, p))
                if t.name in denied:  # as Kafka: READ on the topic, before whether it exists
                    code, msg, active = ErrorCode.topic_authorization_failed, None, ()
                elif part is None:
                    code, msg, active = ErrorCode.unknown_topic_or_partition, None, ()
                elif not part.is_leader:
                    code, msg, active = ErrorCode.not_leader_or_follower, None, ()
                else:
                    code, msg = ErrorCode.none, None
                    active = tuple(
                        m(
                            "ProducerState",
                            producer_id=e.producer_id,
                            producer_epoch=e.epoch,
                            last_sequence=e.last_seq,
                            last_timestamp=e.last_timestamp,
                            coordinator_epoch=e.coordinator_epoch,
                            current_txn_start_offset=e.current_txn_first_offset,
                        )
                        for e in part.log.producer_state.producers.values()
                    )
                parts.append(
                    m(
                        "PartitionResponse",
                        partition_index=p,
                        error_code=code,
                        error_message=msg,
                        active_producers=active,
                    )
                )
            topics.append(m("TopicResponse", name=t.name, partitions=tuple(parts)))
        return m(throttle_time=0, topics=tuple(topics))

    def describe_transactions(self, ctx, req):
        m = Msg(ApiKeys.DESCRIBE_TRANSACTIONS, ctx.api_version)
        out = []
        for txn_id in req.transactional_ids:
            code, txn = ErrorCode.none, None
            if not ctx.authorize(_DESCRIBE, _TXN, txn_id):
                code = ErrorCode.transactional_id_authorization_failed
            elif not txn_id:
                code = ErrorCode.invalid_request
            else:
                try:
                    txn = self.tc.read_shard(txn_id).txns.get(txn_id)  # its committed state
                    if txn is None or txn.state == TxnState.DEAD:
                        code = ErrorCode.transactional_id_not_found
                except KafkaError as e:
                    code = e.code
            if code == ErrorCode.transactional_id_authorization_failed:  # Kafka's zero fields
                out.append(
                    m(
                        "TransactionState",
                        error_code=code,
                        transactional_id=txn_id,
                        transaction_state="",
                        transaction_timeout=0,
                        transaction_start_time=_ms_time(0),
                        producer_id=0,
                        producer_epoch=0,
                        topics=(),
                    )
                )
                continue
            if txn is None or code != ErrorCode.none:
                out.append(
                    m(
                        "TransactionState",
                        error_code=code,
                        transactional_id=txn_id,
                        transaction_state="",
                        transaction_timeout=0,
                        transaction_start_time=_ms_time(-1),
                        producer_id=-1,
                        producer_epoch=-1,
                        topics=(),
                    )
                )
                continue
            by_topic: dict = {}
            hidden = refused(ctx, _DESCRIBE, _TOPIC, {t for t, _p in txn.partitions})  # as Kafka: left out
            for t, p in sorted(txn.partitions):
                if t not in hidden:
                    by_topic.setdefault(t, []).append(p)
            out.append(
                m(
                    "TransactionState",
                    error_code=code,
                    transactional_id=txn_id,
                    transaction_state=txn.state.kafka_name,
                    transaction_timeout=txn.timeout_ms,
                    transaction_start_time=_ms_time(txn.start_ms),
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    topics=tuple(m("TopicData", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                )
            )
        return m(throttle_time=0, transaction_states=tuple(out))

    def list_transactions(self, ctx, req):
        m = Msg(ApiKeys.LIST_TRANSACTIONS, ctx.api_version)
        names = {s.kafka_name for s in TxnState}
        states = set(req.state_filters)
        unknown = tuple(s for s in req.state_filters if s not in names)
        pids = set(req.producer_id_filters)
        duration = getattr(req, "duration_filter", -1)
        pattern = getattr(req, "transactional_id_pattern", None)
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            return m(
                throttle_time=0,
                error_code=ErrorCode.invalid_regular_expression,
                unknown_state_filters=(),
                transaction_states=(),
            )
        now = self.clock.now_ms()
        out = []
        for shard in self.tc.read_shards():  # committed states only
            for txn_id, txn in shard.txns.items():
                if states and txn.state.kafka_name not in states:
                    continue
                if pids and txn.producer_id not in pids:
                    continue
                if duration >= 0 and now - txn.start_ms <= duration:
                    continue
                if regex is not None and not regex.fullmatch(txn_id):
                    continue
                if not ctx.authorize(_DESCRIBE, _TXN, txn_id):  # as Kafka: only those it may describe
                    continue
                out.append(
                    m(
                        "TransactionState",
                        transactional_id=txn_id,
                        producer_id=txn.producer_id,
                        transaction_state=txn.state.kafka_name,
                    )
                )
        return m(
            throttle_time=0, error_code=ErrorCode.none, unknown_state_filters=unknown, transaction_states=tuple(out)
        )
