"""ApiVersions, Metadata, DescribeCluster, FindCoordinator."""

from __future__ import annotations

import logging
import re

from ...controller.controller import INTERNAL_TOPICS, CreatedTopic, NewTopic, supported_features, validate_topic_name
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...protocol.primitives import INT16, INT32
from ...utils import java_string_hash
from ..context import CLUSTER_NAME, AclOperation, ResourceType
from .authz import AUTHZ_MESSAGES

log = logging.getLogger(__name__)

# AclOperation codes reported as "authorized operations" when no authorizer is configured
_TOPIC_OPS = (3, 4, 5, 6, 7, 8, 10, 11)  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
_CLUSTER_OPS = (5, 7, 8, 9, 10, 11, 12, 13, 14)
OMITTED_OPS = -2147483648
# KIP-511: client software name and version must match this
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _bits(ops) -> int:
    v = 0
    for op in ops:
        v |= 1 << op
    return v


def authorized_ops(ctx, ops, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorizedOperations: the bit set of those of ``ops`` the request's principal may
    do on the resource (all of them without an authorizer)."""
    if ctx.authorizer is None:
        return _bits(ops)
    return _bits(op for op in ops if ctx.authorize(AclOperation(op), resource_type, name))


def cluster_ops(ctx) -> int:
    """Kafka's AuthHelper: the cluster's authorized operations, or 0 when the principal may not
    DESCRIBE the cluster (DESCRIBE is implied by ALTER, so its bit tells)."""
    ops = authorized_ops(ctx, _CLUSTER_OPS, ResourceType.CLUSTER, CLUSTER_NAME)
    return ops if ops & (1 << AclOperation.DESCRIBE) else 0


def api_versions_v0_error(apis: dict) -> bytes:
    """Body of the v0 answer to an ApiVersions request of a version we do not know (``apis``:
    the broker's API table)."""
    spec = apis[ApiKeys.API_VERSIONS]
    return (
        INT16.pack(int(ErrorCode.unsupported_version))
        + INT32.pack(1)
        + INT16.pack(ApiKeys.API_VERSIONS)
        + INT16.pack(spec.min_version)
        + INT16.pack(spec.max_version)
    )


class CoreApis:
    APIS = (
        Api(ApiKeys.API_VERSIONS, 0, 4, "api_versions"),
        Api(ApiKeys.METADATA, 0, 13, "metadata"),
        Api(ApiKeys.DESCRIBE_CLUSTER, 0, 2, "describe_cluster"),
        Api(ApiKeys.FIND_COORDINATOR, 0, 6, "find_coordinator"),
    )

    def __init__(
        self,
        *,
        image,
        config,
        node_id: int,
        controllers,
        raft,
        voters: dict,
        controller_listener_names,
        coordinators: CoordinatorLookup,
        api_table,
    ):
        """``api_table()``: the broker listener's API table, for ApiVersions; ``voters``: the
        controller quorum's {id: address} (filled in place when discovered)."""
        self.image = image
        self.config = config
        self.node_id = node_id
        self.controllers = controllers
        self.raft = raft
        self.voters = voters
        self.controller_listener_names = controller_listener_names
        self.coordinators = coordinators
        self.api_table = api_table
        self._api_versions_cache: dict[int, object] = {}

    # ------------------------------------------------------------------ ApiVersions
    def api_versions(self, ctx, req):
        v = ctx.api_version
        if v >= 3:
            name = req.client_software_name
            version = req.client_software_version
            if not _SOFTWARE.match(name or "") or not _SOFTWARE.match(version or ""):
                m = Msg(ApiKeys.API_VERSIONS, v)
                return m(error_code=ErrorCode.invalid_request, api_keys=(), throttle_time=0)
            ctx.connection.client_software = (name, version)  # Kafka's ClientInformation (the request log)
        cached = self._api_versions_cache.get(v)
        if cached is None:
            cached = self._build_api_versions(v)
            self._api_versions_cache[v] = cached
        return cached

    def _build_api_versions(self, v: int):
        m = Msg(ApiKeys.API_VERSIONS, v)
        keys = tuple(
            m("ApiVersion", api_key=k, min_version=spec.min_version, max_version=spec.max_version)
            for k, spec in sorted(self.api_table().items())
            if spec.advertised
        )
        image = self.image
        supported = tuple(
            m("SupportedFeatureKey", name=n, min_version=lo, max_version=hi)
            for n, (lo, hi) in supported_features().items()
        )
        finalized = tuple(
            m("FinalizedFeatureKey", name=n, max_version_level=lvl, min_version_level=lvl)
            for n, lvl in image.features.items()
        )
        return m(
            error_code=ErrorCode.none,
            api_keys=keys,
            throttle_time=0,
            supported_features=supported,
            finalized_features_epoch=max(image.offset, 0) if finalized else -1,
            finalized_features=finalized,
            zk_migration_ready=False,
        )

    # ------------------------------------------------------------------ Metadata
    def _brokers(self, m, listener: str, struct_name: str):
        out = []
        for b in self.image.live_brokers():
            ep = b.endpoint(listener) or b.endpoint()
            if ep is None:
                continue
            out.append(m(struct_name, node_id=b.id, host=ep.host, port=ep.port, rack=b.rack))
        return tuple(out)

    def metadata(self, ctx, req):
        """Topics to auto-create go to the active controller first (the answer waits for the
        commit); a topic created elsewhere and not yet in this broker's image is
        LEADER_NOT_AVAILABLE, as in Kafka, and the client asks again."""
        wanted = self._auto_create_candidates(ctx, req)
        if not wanted:
            return self._metadata(ctx, req, {})
        return self._metadata_after_create(ctx, req, wanted)

    async def _metadata_after_create(self, ctx, req, wanted: list[str]):
        try:
            results = await self.controllers.create_topics([NewTopic(n) for n in wanted])
        except KafkaError as e:
            results = [CreatedTopic(n, error=e) for n in wanted]
        return self._metadata(ctx, req, {r.name: r for r in results})

    def _auto_create_candidates(self, ctx, req) -> list[str]:
        requested = req.topics
        if (
            not requested
            or not getattr(req, "allow_auto_topic_creation", True)
            or not self.config.get("auto.create.topics.enable")
        ):
            return []
        image = self.image
        out = []
        for t in requested:
            name = t.name
            if name is None or name in INTERNAL_TOPICS or image.topic(name) is not None or name in out:
                continue
            try:
                validate_topic_name(name)
            except KafkaError:
                continue
            if ctx.authorizer is not None and not (
                ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name) and _may_create(ctx, name)
            ):
                continue
            out.append(name)
        return out

    def _metadata(self, ctx, req, created: dict):
        v = ctx.api_version
        m = Msg(ApiKeys.METADATA, v)
        image = self.image
        requested = req.topics
        if v == 0 and requested is not None and len(requested) == 0:
            requested = None
        allow_auto = getattr(req, "allow_auto_topic_creation", True)
        include_ops = getattr(req, "include_topic_authorized_operations", False)
        authorizer = ctx.authorizer  # None: everything is allowed
        topics = []
        if requested is None:
            names = [t.name for t in sorted(image.topics_by_id.values(), key=lambda t: t.name)]
            items = [(n, None) for n in names]
        else:
            items = [(t.name, getattr(t, "topic_id", None)) for t in requested]
        for name, topic_id in items:
            t = None
            if name is None and topic_id is not None:
                t = image.topics_by_id.get(topic_id)
                if t is None:
                    topics.append(
                        m(
                            "MetadataResponseTopic",
                            error_code=ErrorCode.unknown_topic_id,
                            name=None,
                            topic_id=topic_id,
                            is_internal=False,
                            partitions=(),
                            topic_authorized_operations=OMITTED_OPS,
                        )
                    )
                    continue
            else:
                t = image.topic(name)
            if authorizer is not None and not ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TOPIC, t.name if t is not None else name
            ):
                # as Kafka: left out of an all-topics answer; asked by id, not told it exists
                if requested is None:
                    continue
                err = ErrorCode.topic_authorization_failed if name is not None else ErrorCode.unknown_topic_id
                topics.append(
                    m(
                        "MetadataResponseTopic",
                        error_code=err,
                        name=name,
                        topic_id=None if name is not None else topic_id,
                        is_internal=name in INTERNAL_TOPICS,
                        partitions=(),
                        topic_authorized_operations=OMITTED_OPS,
                    )
                )
                continue
            if t is None:
                err = self._maybe_auto_create(ctx, name, allow_auto, created)
                t = image.topic(name)
                if t is None:
                    if err == ErrorCode.none:
                        err = ErrorCode.leader_not_available
                    topics.append(
                        m(
                            "MetadataResponseTopic",
                            error_code=err,
                            name=name,
                            topic_id=None,
                            is_internal=name in INTERNAL_TOPICS,
                            partitions=(),
                            topic_authorized_operations=OMITTED_OPS,
                        )
                    )
                    continue
            ops = authorized_ops(ctx, _TOPIC_OPS, ResourceType.TOPIC, t.name) if include_ops else OMITTED_OPS
            topics.append(self._topic_metadata(m, t, ops))
        resp = dict(
            throttle_time=0,
            brokers=self._brokers(m, ctx.listener, "MetadataResponseBroker"),
            cluster_id=image.cluster_id,
            controller_id=self.node_id,
            topics=tuple(topics),
            error_code=ErrorCode.none,
        )
        if getattr(req, "include_cluster_authorized_operations", False):
            resp["cluster_authorized_operations"] = cluster_ops(ctx)
        else:
            resp["cluster_authorized_operations"] = OMITTED_OPS
        return m(**resp)

    def _topic_metadata(self, m, t, ops: int):
        live = {b.id for b in self.image.live_brokers()}
        parts = []
        for idx in sorted(t.partitions):
            p = t.partitions[idx]
            offline = tuple(r for r in p.replicas if r not in live)
            err = ErrorCode.none if p.leader in live else ErrorCode.leader_not_available
            parts.append(
                m(
                    "MetadataResponsePartition",
                    error_code=err,
                    partition_index=idx,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=tuple(p.replicas),
                    isr_nodes=tuple(p.isr),
                    offline_replicas=offline,
                )
            )
        return m(
            "MetadataResponseTopic",
            error_code=ErrorCode.none,
            name=t.name,
            topic_id=t.topic_id,
            is_internal=t.name in INTERNAL_TOPICS,
            partitions=tuple(parts),
            topic_authorized_operations=ops,
        )

    def _maybe_auto_create(self, ctx, name: str, allow_auto: bool, created: dict) -> ErrorCode:
        try:
            validate_topic_name(name)
        except KafkaError:
            return ErrorCode.invalid_topic_exception
        if not (allow_auto and self.config.get("auto.create.topics.enable")) or name in INTERNAL_TOPICS:
            return ErrorCode.unknown_topic_or_partition
        if ctx.authorizer is not None and not _may_create(ctx, name):
            return ErrorCode.topic_authorization_failed
        res = created.get(name)
        if res is None:
            return ErrorCode.leader_not_available
        if res.error is not None and res.error.code != ErrorCode.topic_already_exists:
            log.warning("Auto-creation of topic %s failed: %s", name, res.error)
            return (
                ErrorCode.leader_not_available
                if res.error.code == ErrorCode.invalid_replication_factor
                else res.error.code
            )
        return ErrorCode.none

    # ------------------------------------------------------------------ DescribeCluster
    def describe_cluster(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.DESCRIBE_CLUSTER, v)
        endpoint_type = getattr(req, "endpoint_type", 1)
        # KIP-919: a controller listener answers with the controllers (endpoint type 2) and
        # names the active one; a broker listener with the brokers (type 1)
        on_controller = ctx.listener in self.controller_listener_names
        if on_controller and not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            # ControllerApis: ALTER on the cluster on a controller, first (Kafka's message names
            # its request object; kesque's names the API)
            return m(
                throttle_time=0,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="Request DescribeCluster is not authorized.",
                endpoint_type=1,
                cluster_id="",
                controller_id=-1,
                brokers=(),
                cluster_authorized_operations=OMITTED_OPS,
            )
        expected, role = (2, "controller") if on_controller else (1, "broker")
        if endpoint_type != expected:
            return m(
                throttle_time=0,
                error_code=ErrorCode.unsupported_endpoint_type,
                error_message=f"The endpoint type {endpoint_type} is not supported by this {role}",
                endpoint_type=endpoint_type,
                cluster_id=self.image.cluster_id or "",
                controller_id=-1,
                brokers=(),
                cluster_authorized_operations=OMITTED_OPS,
            )
        if on_controller:
            controllers = tuple(
                m("DescribeClusterBroker", broker_id=vid, host=addr[0], port=addr[1], rack=None, is_fenced=False)
                for vid, addr in sorted(self.voters.items())
                if addr is not None
            )
            ops = cluster_ops(ctx) if req.include_cluster_authorized_operations else OMITTED_OPS
            return m(
                throttle_time=0,
                error_code=ErrorCode.none,
                error_message=None,
                endpoint_type=2,
                cluster_id=self.image.cluster_id or "",
                controller_id=self.raft.leader_id,
                brokers=controllers,
                cluster_authorized_operations=ops,
            )
        brokers = []
        for b in sorted(self.image.brokers.values(), key=lambda b: b.id):
            if b.fenced and not getattr(req, "include_fenced_brokers", False):
                continue
            ep = b.endpoint(ctx.listener) or b.endpoint()
            if ep is None:
                continue
            brokers.append(
                m("DescribeClusterBroker", broker_id=b.id, host=ep.host, port=ep.port, rack=b.rack, is_fenced=b.fenced)
            )
        ops = cluster_ops(ctx) if req.include_cluster_authorized_operations else OMITTED_OPS
        return m(
            throttle_time=0,
            error_code=ErrorCode.none,
            error_message=None,
            endpoint_type=1,
            cluster_id=self.image.cluster_id or "",
            controller_id=self.node_id,
            brokers=tuple(brokers),
            cluster_authorized_operations=ops,
        )

    # ------------------------------------------------------------------ FindCoordinator
    def find_coordinator(self, ctx, req):
        """A key maps to a partition of its internal topic exactly as Kafka maps it; the
        coordinator is that partition's leader. The topic is created on first use (the answer
        waits for the controller to commit it)."""
        key_type = getattr(req, "key_type", 0)
        keys = list(req.coordinator_keys) if ctx.api_version >= 4 else [req.key]
        if ctx.authorizer is not None:
            if key_type == 2 and not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
                # share-state keys: only brokers ask (Kafka's authorizeClusterOperation)
                return self._find_refused(ctx, keys, ErrorCode.cluster_authorization_failed)
            keys = [k for k in keys if _coordinator_key_refused(ctx, key_type, k) is None]
        spec = self.coordinators.internal_topic_to_create(key_type) if any(keys) else None
        if spec is None:
            return self._find_coordinator(ctx, req, None)
        return self._find_after_create(ctx, req, spec)

    def _find_refused(self, ctx, keys, code: ErrorCode):
        """Kafka's error response: every key refused with ``code``."""
        v = ctx.api_version
        m = Msg(ApiKeys.FIND_COORDINATOR, v)
        msg = AUTHZ_MESSAGES[code]
        if v >= 4:
            return m(
                throttle_time=0,
                coordinators=tuple(
                    m("Coordinator", key=k, node_id=-1, host="", port=-1, error_code=code, error_message=msg)
                    for k in keys
                ),
            )
        return m(throttle_time=0, error_code=code, error_message=msg, node_id=-1, host="", port=-1)

    async def _find_after_create(self, ctx, req, spec):
        try:
            res = (await self.controllers.create_topics([spec]))[0]
        except KafkaError as e:
            res = CreatedTopic(spec.name, error=e)
        failed = res.error if res.error is not None and res.error.code != ErrorCode.topic_already_exists else None
        return self._find_coordinator(ctx, req, failed)

    def _find_coordinator(self, ctx, req, failed):
        v = ctx.api_version
        m = Msg(ApiKeys.FIND_COORDINATOR, v)
        key_type = getattr(req, "key_type", 0)
        keys = list(req.coordinator_keys) if v >= 4 else [req.key]
        results = []
        for key in keys:
            refusal = _coordinator_key_refused(ctx, key_type, key) if ctx.authorizer is not None else None
            if refusal is not None:
                node, err, msg = None, refusal, AUTHZ_MESSAGES[refusal] if v < 4 else None
            elif failed is not None and key:
                node, err, msg = None, ErrorCode.coordinator_not_available, str(failed)
            else:
                node, err, msg = self._coordinator_for(key_type, key)
            ep = None
            if node is not None:
                b = self.image.brokers.get(node)
                ep = b.endpoint(ctx.listener) or b.endpoint() if b else None
            if ep is None and err == ErrorCode.none:
                err, msg = ErrorCode.coordinator_not_available, "The coordinator is not available."
            results.append((key, node if ep else -1, ep.host if ep else "", ep.port if ep else -1, err, msg))
        if v >= 4:
            return m(
                throttle_time=0,
                coordinators=tuple(
                    m("Coordinator", key=k, node_id=n, host=h, port=p, error_code=e, error_message=em)
                    for k, n, h, p, e, em in results
                ),
            )
        k, n, h, p, e, em = results[0]
        return m(throttle_time=0, error_code=e, error_message=em, node_id=n, host=h, port=p)

    def _coordinator_for(self, key_type: int, key: str):
        return self.coordinators.coordinator_for(key_type, key)


def _coordinator_key_refused(ctx, key_type: int, key: str) -> ErrorCode | None:
    """As Kafka's FindCoordinator: DESCRIBE on the group, or on the transactional id."""
    if key_type == 0 and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == 1 and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed
    return None


def _may_create(ctx, topic: str) -> bool:
    """CREATE on the cluster, or else on the topic (Kafka's CreateTopics and auto-creation)."""
    return ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or ctx.authorize(
        AclOperation.CREATE, ResourceType.TOPIC, topic
    )


class CoordinatorLookup:
    """Where the coordinator of a group (key type 0), transactional id (1) or share-group state
    key (2) is: its internal topic's partition leader, and the internal topic created on first
    use. ``spawn(coro)`` runs a background creation; ``share_groups``: whether this broker runs
    a share coordinator."""

    def __init__(self, image, config, controllers, spawn, share_groups: bool):
        self.image = image
        self.config = config
        self.controllers = controllers
        self.spawn = spawn
        self.share_groups = share_groups

    def _internal_topic(self, key_type: int):
        """(topic, partitions key, replication factor key) of a coordinator key type, or None."""
        if key_type == 0:
            return "__consumer_offsets", "offsets.topic.num.partitions", "offsets.topic.replication.factor"
        if key_type == 1:
            return (
                "__transaction_state",
                "transaction.state.log.num.partitions",
                "transaction.state.log.replication.factor",
            )
        if key_type == 2 and self.share_groups:
            return (
                "__share_group_state",
                "share.coordinator.state.topic.num.partitions",
                "share.coordinator.state.topic.replication.factor",
            )
        return None

    def internal_topic_to_create(self, key_type: int) -> NewTopic | None:
        """The internal topic of ``key_type`` when it is missing and the live brokers can host it."""
        names = self._internal_topic(key_type)
        if names is None or self.image.topic(names[0]) is not None:
            return None
        topic, parts_key, rf_key = names
        cfg = self.config
        rf = cfg.get(rf_key)
        if len(self.image.live_brokers()) < rf:
            return None
        segment_key = (
            "offsets.topic.segment.bytes",
            "transaction.state.log.segment.bytes",
            "share.coordinator.state.topic.segment.bytes",
        )[key_type]
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(cfg.get(segment_key)),
        }
        if key_type == 1:
            configs["min.insync.replicas"] = str(cfg.get("transaction.state.log.min.isr"))
        elif key_type == 2:
            configs["min.insync.replicas"] = str(cfg.get("share.coordinator.state.topic.min.isr"))
        return NewTopic(topic, cfg.get(parts_key), rf, configs=configs)

    def coordinator_for(self, key_type: int, key: str):
        """(leader node or None, error code, message) of ``key``'s coordinator. A missing
        internal topic is asked of the controller and the answer is COORDINATOR_NOT_AVAILABLE
        until this broker's image has it."""
        names = self._internal_topic(key_type)
        if names is None:
            return None, ErrorCode.invalid_request, f"Unknown coordinator type {key_type}"
        if not key:
            return None, ErrorCode.invalid_request, "Coordinator key must not be empty"
        topic, _parts_key, rf_key = names
        t = self.image.topic(topic)
        if t is None:
            rf = self.config.get(rf_key)
            live = len(self.image.live_brokers())
            if live < rf:
                # as Kafka's broker did, an ERROR naming the setting: the clients only retry
                msg = (
                    f"Number of alive brokers '{live}' does not meet the required replication factor '{rf}' "
                    f"for the {topic} topic (configured via '{rf_key}')."
                )
                log.error(
                    "%s This error can be ignored if the cluster is starting up and not all brokers are up yet.", msg
                )
                return None, ErrorCode.coordinator_not_available, msg
            spec = self.internal_topic_to_create(key_type)
            if spec is not None:
                self.spawn(self._create_quietly(spec))
            return None, ErrorCode.coordinator_not_available, "The coordinator is not available."
        partition = (java_string_hash(key) & 0x7FFFFFFF) % len(t.partitions)
        leader = t.partitions[partition].leader
        return leader, ErrorCode.none, None

    async def _create_quietly(self, spec: NewTopic) -> None:
        try:
            res = (await self.controllers.create_topics([spec]))[0]
            if res.error is not None and res.error.code != ErrorCode.topic_already_exists:
                log.warning("Creation of internal topic %s failed: %s", spec.name, res.error)
        except KafkaError as e:
            log.warning("Creation of internal topic %s failed: %s", spec.name, e)
