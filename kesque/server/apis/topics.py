"""CreateTopics, DeleteTopics, CreatePartitions, DescribeTopicPartitions."""

from __future__ import annotations

from ...controller.controller import INTERNAL_TOPICS, CreatedTopic, NewTopic
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...security.acl import AclOperation, ResourceType
from ..context import CLUSTER_NAME
from .authz import dispatch_allowed
from .configs import topic_config_entries
from .core import _TOPIC_OPS, OMITTED_OPS, _may_create, authorized_ops


def _timeout_ms(req) -> int:
    """The request's timeout (the controller's deadline for committing the change)."""
    t = getattr(req, "timeout", None)
    ms = int(t.total_seconds() * 1000) if t is not None else 0
    return ms if ms > 0 else 30000


def _failed_topic(m, name: str, code, message: str | None):
    return m(
        "CreatableTopicResult",
        name=name,
        topic_id=None,
        error_code=code,
        error_message=message,
        topic_config_error_code=0,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


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
        return dispatch_allowed(
            self.controllers,
            ctx,
            req,
            "topics",
            "topics",
            lambda: self._create_refused(ctx, req),
            lambda r: self._create_topics(ctx, r),
        )

    @staticmethod
    def _create_refused(ctx, req) -> dict:
        denied = {}
        if ctx.authorizer is not None:  # as Kafka: CREATE on the cluster, or else on each topic
            m = Msg(ApiKeys.CREATE_TOPICS, ctx.api_version)
            denied = {
                i: _failed_topic(m, t.name, ErrorCode.topic_authorization_failed, "Authorization failed.")
                for i, t in enumerate(req.topics)
                if not _may_create(ctx, t.name)
            }
        return denied

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
        quota = self.throttler.mutation_quota(ctx, strict_since=6)
        try:
            results = await self.controllers.call(
                "create_topics", specs, req.validate_only, quota, timeout_ms=_timeout_ms(req)
            )
        except KafkaError as e:
            results = [CreatedTopic(t.name, error=e) for t in specs]
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
                out.append(_failed_topic(m, spec.name, res.error.code, res.error.message))
        return m(throttle_time=0, topics=tuple(out))

    # ------------------------------------------------------------------ DeleteTopics
    def delete_topics(self, ctx, req):
        field = "topics" if ctx.api_version >= 6 else "topic_names"
        return dispatch_allowed(
            self.controllers,
            ctx,
            req,
            field,
            "responses",
            lambda: self._delete_refused(ctx, req, field),
            lambda r: self._delete_topics(ctx, r),
        )

    def _delete_refused(self, ctx, req, field: str) -> dict:
        denied = {}
        if ctx.authorizer is not None and not ctx.authorize(AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME):
            m = Msg(ApiKeys.DELETE_TOPICS, ctx.api_version)
            for i, t in enumerate(getattr(req, field)):
                name, topic_id = (t, None) if field == "topic_names" else (t.name, t.topic_id)
                if name is None:  # by id: the name it has, if any (an unknown id is the controller's to answer)
                    topic = self.image.topics_by_id.get(topic_id)
                    if topic is None:
                        continue
                    name = topic.name
                describable = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
                if describable and ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                    continue
                by_name = field == "topic_names" or t.name is not None
                shown = name if by_name or describable else None  # an id it may not see stays unnamed
                denied[i] = m(
                    "DeletableTopicResult",
                    name=shown,
                    topic_id=topic_id,
                    error_code=ErrorCode.topic_authorization_failed,
                    error_message="Topic authorization failed.",
                )
        return denied

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
        return dispatch_allowed(
            self.controllers,
            ctx,
            req,
            "topics",
            "results",
            lambda: self._partitions_refused(ctx, req),
            lambda r: self._create_partitions(ctx, r),
        )

    @staticmethod
    def _partitions_refused(ctx, req) -> dict:
        denied = {}
        if ctx.authorizer is not None:  # ALTER on each topic, as Kafka's ControllerApis
            m = Msg(ApiKeys.CREATE_PARTITIONS, ctx.api_version)
            denied = {
                i: m(
                    "CreatePartitionsTopicResult",
                    name=t.name,
                    error_code=ErrorCode.topic_authorization_failed,
                    error_message="Topic authorization failed.",
                )
                for i, t in enumerate(req.topics)
                if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name)
            }
        return denied

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
            if ctx.authorizer is not None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                if not req.topics:  # as Kafka: left out of an all-topics answer, refused when named
                    continue
                topics.append(
                    m(
                        "DescribeTopicPartitionsResponseTopic",
                        error_code=ErrorCode.topic_authorization_failed,
                        name=name,
                        topic_id=None,
                        is_internal=False,
                        partitions=(),
                        topic_authorized_operations=OMITTED_OPS,
                    )
                )
                continue
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
                    topic_authorized_operations=authorized_ops(ctx, _TOPIC_OPS, ResourceType.TOPIC, name),
                )
            )
            if next_cursor is not None:
                break
        return m(throttle_time=0, topics=tuple(topics), next_cursor=next_cursor)
