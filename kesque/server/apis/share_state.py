"""The share coordinator's inter-broker APIs (KIP-932): InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary, sent by share-partition leaders and group coordinators
(kesque/server/drivers/share_persister.py).

Thin: each partition of a request goes to the shard of ``__share_group_state`` that its key
``group:topic id:partition`` maps to (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when this
broker does not have it loaded), and a request that wrote is answered once its writes are
committed, as Kafka's share coordinator answers (a write that fails to commit answers the
coordinator error of that failure). A read with a newer leader epoch than the stored one
records it first, so that writes of an older leader are fenced (FENCED_LEADER_EPOCH).
"""

from __future__ import annotations

from ...coordinator.share.runtime import coordinator_key
from ...coordinator.share.shard import summary
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...share import enabled
from ...share.partition import StateBatch
from .committed import committed

NOT_FOUND = "The share-partition state was not found (never initialized)."


class ShareStateApis:
    @staticmethod
    def apis(config) -> tuple[Api, ...]:
        """Served when share groups are on (group.share.enable)."""
        if not enabled(config):
            return ()
        return (
            Api(ApiKeys.INITIALIZE_SHARE_GROUP_STATE, 0, 0, "initialize"),
            Api(ApiKeys.READ_SHARE_GROUP_STATE, 0, 0, "read"),
            Api(ApiKeys.WRITE_SHARE_GROUP_STATE, 0, 0, "write"),
            Api(ApiKeys.DELETE_SHARE_GROUP_STATE, 0, 0, "delete"),
            Api(ApiKeys.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1, "read_summary"),
        )

    def __init__(self, *, share_coordinator):
        self.sc = share_coordinator  # None when share groups are off (no API is then bound)

    def _each(self, req, op):
        """``{(topic id, partition): (error code, message, result)}`` of ``op(shard, key, p)``."""
        out = {}
        for t in req.topics:
            for p in t.partitions:
                key = (req.group_id, t.topic_id, p.partition)
                try:
                    shard = self.sc.shard_for(coordinator_key(*key))
                    out[(t.topic_id, p.partition)] = (ErrorCode.none, None, op(shard, key, p), shard.partition)
                except KafkaError as e:
                    out[(t.topic_id, p.partition)] = (e.code, e.message, None, None)
        return out

    def _answer(self, m, results: dict, partition_result):
        """The response once the writes of ``results`` are committed (at once when they are)."""
        wrote = {sp for _c, _m, _r, sp in results.values() if sp is not None}
        pending = self.sc.uncommitted(wrote) if wrote else {}

        def build(failed: dict):
            by_topic: dict = {}
            for (tid, p), (code, msg, res, sp) in results.items():
                if not code and failed.get((self.sc.TOPIC, sp)):
                    code, msg, res = failed[(self.sc.TOPIC, sp)], None, None
                by_topic.setdefault(tid, []).append(partition_result(p, code, msg, res))
            return m(
                results=tuple(m(m.result_name, topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items())
            )

        if not pending:
            return build({})

        async def later():
            return build(await committed(self.sc, pending))

        return later()

    # ------------------------------------------------------------------ the five APIs
    def initialize(self, ctx, req):
        m = _Msg(ApiKeys.INITIALIZE_SHARE_GROUP_STATE, "InitializeStateResult")

        def op(shard, key, p):
            self.sc.apply(shard, shard.initialize(key, p.start_offset, -1, p.state_epoch))

        return self._answer(
            m,
            self._each(req, op),
            lambda p, code, msg, _r: m("PartitionResult", partition=p, error_code=code, error_message=msg),
        )

    def read(self, ctx, req):
        m = _Msg(ApiKeys.READ_SHARE_GROUP_STATE, "ReadStateResult")

        def op(shard, key, p):
            s = shard.read(key)
            if s is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, NOT_FOUND)
            if p.leader_epoch > s.leader_epoch:  # the new leader: fence the older ones' writes
                self.sc.apply(shard, shard.write_state(key, s.start_offset, [], p.leader_epoch))
            return s

        def result(p, code, msg, s):
            return m(
                "PartitionResult",
                partition=p,
                error_code=code,
                error_message=msg,
                state_epoch=s.state_epoch if s else 0,
                start_offset=s.start_offset if s else -1,
                state_batches=tuple(
                    m(
                        "StateBatch",
                        first_offset=b.first,
                        last_offset=b.last,
                        delivery_state=b.state,
                        delivery_count=b.delivery_count,
                    )
                    for b in (s.batches if s else ())
                ),
            )

        return self._answer(m, self._each(req, op), result)

    def write(self, ctx, req):
        m = _Msg(ApiKeys.WRITE_SHARE_GROUP_STATE, "WriteStateResult")

        def op(shard, key, p):
            batches = [
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches
            ]
            self.sc.apply(shard, shard.write_state(key, p.start_offset, batches, p.leader_epoch, p.state_epoch))

        return self._answer(
            m,
            self._each(req, op),
            lambda p, code, msg, _r: m("PartitionResult", partition=p, error_code=code, error_message=msg),
        )

    def delete(self, ctx, req):
        m = _Msg(ApiKeys.DELETE_SHARE_GROUP_STATE, "DeleteStateResult")

        def op(shard, key, p):
            self.sc.apply(shard, shard.delete(key))

        return self._answer(
            m,
            self._each(req, op),
            lambda p, code, msg, _r: m("PartitionResult", partition=p, error_code=code, error_message=msg),
        )

    def read_summary(self, ctx, req):
        m = _Msg(ApiKeys.READ_SHARE_GROUP_STATE_SUMMARY, "ReadStateSummaryResult", ctx.api_version)

        def op(shard, key, p):
            s = shard.read(key)
            if s is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, NOT_FOUND)
            return summary(s)

        return self._answer(
            m,
            self._each(req, op),
            lambda p, code, msg, s: m(
                "PartitionResult",
                partition=p,
                error_code=code,
                error_message=msg,
                state_epoch=s.state_epoch if s else 0,
                leader_epoch=s.leader_epoch if s else -1,
                start_offset=s.start_offset if s else -1,
                delivery_complete_count=s.delivery_complete_count if s else -1,
            ),
        )


class _Msg(Msg):
    def __init__(self, api_key: int, result_name: str, version: int = 0):
        super().__init__(api_key, version)
        self.result_name = result_name
