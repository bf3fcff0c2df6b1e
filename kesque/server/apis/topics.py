"""CreateTopics, DeleteTopics, CreatePartitions, DescribeTopicPartitions."""

from __future__ import annotations

from ...controller.controller import INTERNAL_TOPICS, CreatedTopic, NewTopic
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from .configs import topic_config_entries
from .core import _TOPIC_OPS, OMITTED_OPS, _bits, _may_create


def _timeout_ms(req) -> int:
    """The request's timeout (the controller's deadline for committing the change)."""
    t = getattr(req, "timeout", None)
    ms = int(t.total_seconds() * 1000) if t is not None else 0
    return ms if ms > 0 else 30000


class TopicApis:
    APIS = (
        Api(ApiKeys.CREATE_TOPICS, 2, 7, "create_topics"),
        Api(ApiKeys.DELETE_TOPICS, 1, 6, "delete_topics"),
        Api(ApiKeys.CREATE_PARTITIONS, 0, 3, "create_partitions"),
        Api(ApiKeys.DESCRIBE_TOPIC_PARTITIONS, 0, 0, "describe_topic_partitions"),
    )

    def __init__(self, *, image, config, controllers, throttler):
        self.image = image
        self.config = config
        self.controllers = controllers
        self.throttler = throttler

    # ------------------------------------------------------------------ CreateTopics
    def create_topics(self, ctx, req):
        return self.controllers.dispatch(ctx, req, lambda: self._create_topics(ctx, req))

    async def _create_topics(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.CREATE_TOPICS, v)
        specs = []
        for t in req.topics:
            specs.append(
                NewTopic(
                    t.name,
                    t.num_partitions,
                    t.replication_factor,
                    {a.partition_index: list(a.broker_ids) for a in t.assignments},
                    {c.name: c.value for c in t.configs},
                )
            )
        denied = {}
        if ctx.authorizer is not None:  # as Kafka: CREATE on the cluster, or else on each topic
            denied = {
                t.name: CreatedTopic(
                    t.name, error=KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
                )
                for t in specs
                if not _may_create(ctx, t.name)
            }
        allowed = [t for t in specs if t.name not in denied]
        quota = self.throttler.mutation_quota(ctx, strict_since=6)
        try:
            results = (
                await self.controllers.call(
                    "create_topics", allowed, req.validate_only, quota, timeout_ms=_timeout_ms(req)
                )
                if allowed or not denied
                else []
            )
        except KafkaError as e:
            results = [CreatedTopic(t.name, error=e) for t in allowed]
        if denied:
            done = iter(results)
            results = [denied[t.name] if t.name in denied else next(done) for t in specs]
        self.throttler.charge_mutations(ctx, quota)
        out = []
        for spec, res in zip(specs, results):
            if res.error is None:
                entries = topic_config_entries(
                    self.config,
                    self.image,
                    spec.name,
                    overrides={k: v for k, v in spec.configs.items() if v is not None},
                )
                configs = tuple(
                    m(
                        "CreatableTopicConfigs",
                        name=e.name,
                        value=e.value,
                        read_only=e.read_only,
                        config_source=e.source,
                        is_sensitive=e.sensitive,
                    )
                    for e in entries
                )
                out.append(
                    m(
                        "CreatableTopicResult",
                        name=spec.name,
                        topic_id=res.topic_id,
                        error_code=ErrorCode.none,
                        error_message=None,
                        topic_config_error_code=0,
                        num_partitions=res.num_partitions,
                        replication_factor=res.replication_factor,
                        configs=configs,
                    )
                )
            else:
                out.append(
                    m(
                        "CreatableTopicResult",
                        name=spec.name,
                        topic_id=None,
                        error_code=res.error.code,
                        error_message=res.error.message,
                        topic_config_error_code=0,
                        num_partitions=-1,
                        replication_factor=-1,
                        configs=None,
                    )
                )
        return m(throttle_time=0, topics=tuple(out))

    # ------------------------------------------------------------------ DeleteTopics
    def delete_topics(self, ctx, req):
        return self.controllers.dispatch(ctx, req, lambda: self._delete_topics(ctx, req))

    async def _delete_topics(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.DELETE_TOPICS, v)
        if v >= 6:
            names = [t.name for t in req.topics]
            ids = [t.topic_id if t.name is None else None for t in req.topics]
        else:
            names = list(req.topic_names)
            ids = [None] * len(names)
        quota = self.throttler.mutation_quota(ctx, strict_since=5)
        try:
            results = await self.controllers.call("delete_topics", names, ids, quota, timeout_ms=_timeout_ms(req))
        except KafkaError as e:
            results = [(name, topic_id, e) for name, topic_id in zip(names, ids)]
        self.throttler.charge_mutations(ctx, quota)
        out = []
        for name, topic_id, err in results:
            out.append(
                m(
                    "DeletableTopicResult",
                    name=name,
                    topic_id=topic_id,
                    error_code=err.code if err else ErrorCode.none,
                    error_message=err.message if err else None,
                )
            )
        return m(throttle_time=0, responses=tuple(out))

    # ------------------------------------------------------------------ CreatePartitions
    def create_partitions(self, ctx, req):
        return self.controllers.dispatch(ctx, req, lambda: self._create_partitions(ctx, req))

    async def _create_partitions(self, ctx, req):
        m = Msg(ApiKeys.CREATE_PARTITIONS, ctx.api_version)
        out = []
        seen = set()
        quota = self.throttler.mutation_quota(ctx, strict_since=3)
        for t in req.topics:
            try:
                if t.name in seen:
                    raise KafkaError(ErrorCode.invalid_request, "Duplicate topic in request.")
                seen.add(t.name)
                assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
                await self.controllers.call(
                    "create_partitions",
                    t.name,
                    t.count,
                    assignments,
                    req.validate_only,
                    quota,
                    timeout_ms=_timeout_ms(req),
                )
                out.append(m("CreatePartitionsTopicResult", name=t.name, error_code=ErrorCode.none, error_message=None))
            except KafkaError as e:
                out.append(m("CreatePartitionsTopicResult", name=t.name, error_code=e.code, error_message=e.message))
        self.throttler.charge_mutations(ctx, quota)
        return m(throttle_time=0, results=tuple(out))

    # ------------------------------------------------------------------ DescribeTopicPartitions
    def describe_topic_partitions(self, ctx, req):
        m = Msg(ApiKeys.DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
        image = self.image
        live = {b.id for b in image.live_brokers()}
        if req.topics:
            names = sorted({t.name for t in req.topics})
        else:
            names = sorted(image.topics_by_name)
        cursor = req.cursor
        if cursor is not None:
            names = [n for n in names if n >= cursor.topic_name]
        budget = max(1, req.response_partition_limit)
        topics = []
        next_cursor = None
        for name in names:
            t = image.topic(name)
            if t is None:
                topics.append(
                    m(
                        "DescribeTopicPartitionsResponseTopic",
                        error_code=ErrorCode.unknown_topic_or_partition,
                        name=name,
                        topic_id=None,
                        is_internal=False,
                        partitions=(),
                        topic_authorized_operations=OMITTED_OPS,
                    )
                )
                continue
            start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            parts = []
            for idx in sorted(t.partitions):
                if idx < start:
                    continue
                if budget == 0:
                    next_cursor = m("Cursor", topic_name=name, partition_index=idx)
                    break
                p = t.partitions[idx]
                parts.append(
                    m(
                        "DescribeTopicPartitionsResponsePartition",
                        error_code=ErrorCode.none,
                        partition_index=idx,
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        replica_nodes=tuple(p.replicas),
                        isr_nodes=tuple(p.isr),
                        eligible_leader_replicas=tuple(p.elr),
                        last_known_elr=tuple(p.last_known_elr),
                        offline_replicas=tuple(r for r in p.replicas if r not in live),
                    )
                )
                budget -= 1
            topics.append(
                m(
                    "DescribeTopicPartitionsResponseTopic",
                    error_code=ErrorCode.none,
                    name=name,
                    topic_id=t.topic_id,
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=tuple(parts),
                    topic_authorized_operations=_bits(_TOPIC_OPS),
                )
            )
            if next_cursor is not None:
                break
        return m(throttle_time=0, topics=tuple(topics), next_cursor=next_cursor)
