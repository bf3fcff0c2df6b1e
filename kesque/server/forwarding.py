"""ControllerRouter: how the broker side of a node reaches the active controller.

Admin requests that change metadata (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, AlterClientQuotas, AlterPartitionReassignments, and
ListPartitionReassignments, which Kafka's brokers forward too) run where the active controller is:
in-process when the local controller is active, otherwise the client's request is sent over the
channel to the active controller's listener in Kafka's Envelope, with the client's principal and
address (:mod:`kesque.server.envelope`: the controller checks it as the client's), and the answer
in the EnvelopeResponse returned (resent to
the new leader on NOT_CONTROLLER, until the request's timeout; then REQUEST_TIMED_OUT, as
Kafka's forwarding manager answers). A request that arrives on a controller listener is never
forwarded: a controller that is not active answers NOT_CONTROLLER, as Kafka's ControllerApis.

The broker's own calls (internal topic creation, broker registration, producer id blocks, ISR
changes) go the same way, as CreateTopics, BrokerRegistration, AllocateProducerIds and
AlterPartition RPCs.

Narrow collaborators: ``quorum`` (the local QuorumController or None on a broker-only node),
``leader_id()`` (the raft leader as this node knows it), the channel, and this node's id.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import logging

from ..controller import cluster_control as cc
from ..controller.cluster_control import HeartbeatReply, RegistrationReply, from_kio, to_kio
from ..controller.controller import FEATURE_MIN, CreatedTopic
from ..errors import ErrorCode, KafkaError, error_name
from ..protocol.api import api_name, request_class
from ..protocol.api_keys import ApiKeys
from . import envelope
from .channel import ChannelError
from .context import CloseConnection
from .drivers import alter_partition as ap
from .drivers.quorum_controller import not_controller

log = logging.getLogger(__name__)

NOT_CONTROLLER = int(ErrorCode.not_controller)
RETRY_BACKOFF_S = 0.05
DEFAULT_TIMEOUT_MS = 30000

# set while a handler runs its local path with an error every controller call raises
_forced: contextvars.ContextVar[KafkaError | None] = contextvars.ContextVar(
    "kesque_forced_controller_error", default=None
)


def has_error(obj, code: int) -> bool:
    """Does a kio response carry ``code`` in any error_code field (any depth)?"""
    if isinstance(obj, tuple):
        return any(has_error(x, code) for x in obj)
    if not dataclasses.is_dataclass(obj):
        return False
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.name == "error_code" and int(v) == code:
            return True
        if isinstance(v, tuple) or dataclasses.is_dataclass(v):
            if has_error(v, code):
                return True
    return False


def timed_out(what: str, timeout_ms: int) -> KafkaError:
    return KafkaError(ErrorCode.request_timed_out, f"{what} did not reach an active controller within {timeout_ms} ms.")


class ControllerRouter:
    def __init__(self, node_id: int, quorum, leader_id, channel, controller_listeners: set[str]):
        self.node_id = node_id
        self.quorum = quorum
        self.leader_id = leader_id
        self.channel = channel
        self.controller_listeners = controller_listeners

    def local_active(self) -> bool:
        return self.quorum is not None and self.quorum.active

    # ------------------------------------------------------------------ client requests
    async def dispatch(self, ctx, req, local):
        """Answer ``req`` where the active controller is. ``local()``: the handler's own path,
        whose controller calls go through :meth:`call`."""
        timeout = getattr(req, "timeout", None)
        timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else 0
        if timeout_ms <= 0:
            timeout_ms = DEFAULT_TIMEOUT_MS
        if ctx.listener in self.controller_listeners:
            return await self._local(local, None if self.local_active() else _not_controller())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        while True:
            resp = None
            if self.local_active():
                resp = await self._local(local, None)
            else:
                leader = self.leader_id()
                if self._reachable(leader):
                    try:
                        wrapped = await self.channel.send(
                            leader,
                            ApiKeys.ENVELOPE,
                            envelope.ENVELOPE_VERSION,
                            envelope.envelope_request(ctx.header, req, ctx.principal, ctx.client_host),
                            timeout_ms=max(int((deadline - loop.time()) * 1000), 1),
                        )
                        resp = await self._unwrap(ctx, wrapped, local)
                    except ChannelError as e:
                        log.debug("forwarding %s to controller %d failed: %s", type(req).__name__, leader, e)
            if resp is not None and not has_error(resp, NOT_CONTROLLER):
                return resp
            if loop.time() >= deadline:
                return resp if resp is not None else await self._local(local, timed_out(type(req).__name__, timeout_ms))
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _unwrap(self, ctx, wrapped, local):
        """The client's response in an EnvelopeResponse, as Kafka's ForwardingManager reads it:
        UNSUPPORTED_VERSION closes the client's connection (it reconnects and asks the versions
        again); another envelope error (the controller refused this broker's Envelope) is
        UNKNOWN_SERVER_ERROR to the client, not the envelope's own error."""
        code = int(wrapped.error_code)
        if code == int(ErrorCode.unsupported_version):
            raise CloseConnection(f"the controller refused the forwarded {api_name(ctx.header.api_key)} as unsupported")
        if code or wrapped.response_data is None:
            log.warning(
                "forwarded %s failed with %s in the envelope response",
                api_name(ctx.header.api_key),
                error_name(code),
            )
            return await self._local(local, KafkaError(ErrorCode.unknown_server_error))
        resp = envelope.inner_response(ctx.header.api_key, ctx.api_version, wrapped.response_data)
        # the controller's throttle time (controller mutation quota, by the client's principal
        # and client id): the client's connection is muted for it here, as Kafka's
        # sendForwardedResponse does
        throttle = getattr(resp, "throttle_time", None)
        if throttle is not None:
            ctx.throttle_ms = max(ctx.throttle_ms, int(throttle.total_seconds() * 1000))
        return resp

    def _reachable(self, leader: int) -> bool:
        """Send to ``leader`` now? Not when it is unknown or this node, and not while the channel
        backs off reconnecting to it: the send would wait out the backoff (up to a second) with
        the old controller in hand, while a new one is elected meanwhile; the loop asks
        ``leader_id()`` again every RETRY_BACKOFF_S instead."""
        return leader >= 0 and leader != self.node_id and not self.channel.backing_off(leader)

    @staticmethod
    async def _local(local, error: KafkaError | None):
        token = _forced.set(error)
        try:
            result = local()
            if asyncio.iscoroutine(result):
                result = await result
            return result
        finally:
            _forced.reset(token)

    async def call(self, method: str, *args, timeout_ms: int = DEFAULT_TIMEOUT_MS, **kwargs):
        """``Controller.<method>`` on the local active controller, answered once committed."""
        forced = _forced.get()
        if forced is not None:
            raise forced
        if self.quorum is None:
            raise _not_controller()
        return await self.quorum.call(method, *args, timeout_ms=timeout_ms, **kwargs)

    async def lifecycle_call(self, method: str, *args, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        """``QuorumController.<method>`` (``register``, ``heartbeat``, ``unregister``,
        ``alter_partition``, ``elect_leaders``,
        ``list_partition_reassignments``) on the local active controller."""
        forced = _forced.get()
        if forced is not None:
            raise forced
        if self.quorum is None:
            raise _not_controller()
        return await getattr(self.quorum, method)(*args, timeout_ms=timeout_ms)

    # ------------------------------------------------------------------ the broker's own calls
    async def _rpc(
        self, method: str, args: tuple, api_key: int, version: int, body, timeout_ms: int, retry: bool = True
    ):
        """Local call when the local controller is active (``Controller.<method>``, or
        ``QuorumController.<method>`` for a ``quorum.`` name), else the RPC to the leader;
        retried on NOT_CONTROLLER and unreachable leaders until ``timeout_ms`` (once without
        ``retry``). Returns the local result or the kio response."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        while True:
            if self.local_active():
                try:
                    if method.startswith("quorum."):
                        return await getattr(self.quorum, method[7:])(*args, timeout_ms=timeout_ms)
                    return await self.quorum.call(method, *args, timeout_ms=timeout_ms)
                except KafkaError as e:
                    if e.code != ErrorCode.not_controller or not retry:
                        raise
            else:
                leader = self.leader_id()
                if self._reachable(leader):
                    try:
                        resp = await self.channel.send(
                            leader, api_key, version, body, timeout_ms=max(int((deadline - loop.time()) * 1000), 1)
                        )
                        if not has_error(resp, NOT_CONTROLLER) or not retry:
                            return resp
                    except ChannelError as e:
                        log.debug("%s to controller %d failed: %s", method, leader, e)
                        if not retry:
                            raise KafkaError(ErrorCode.network_exception, str(e)) from None
            if not retry:
                raise _not_controller()
            if loop.time() >= deadline:
                raise timed_out(method, timeout_ms)
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def create_topics(self, topics: list, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list:
        """CreatedTopic per NewTopic (internal topics, auto-creation)."""

        cls = request_class(ApiKeys.CREATE_TOPICS, 7)
        mod = __import__(cls.__module__, fromlist=["x"])
        body = cls(
            topics=tuple(
                mod.CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    assignments=tuple(
                        mod.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                        for p, b in sorted(t.assignments.items())
                    ),
                    configs=tuple(mod.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()),
                )
                for t in topics
            ),
            timeout=_ms(timeout_ms),
            validate_only=False,
        )
        result = await self._rpc("create_topics", (topics,), ApiKeys.CREATE_TOPICS, 7, body, timeout_ms)
        if isinstance(result, list):
            return result
        return [
            CreatedTopic(
                r.name,
                r.topic_id,
                KafkaError(r.error_code, r.error_message or "") if r.error_code else None,
                r.num_partitions,
                r.replication_factor,
            )
            for r in result.topics
        ]

    async def register_broker(
        self,
        node_id: int,
        endpoints: list[dict],
        cluster_id: str,
        incarnation_id,
        features: dict,
        rack: str | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> int:
        """BrokerRegistration: this broker's epoch."""
        cls = request_class(ApiKeys.BROKER_REGISTRATION, 4)
        mod = __import__(cls.__module__, fromlist=["x"])
        body = cls(
            broker_id=node_id,
            cluster_id=cluster_id or "",
            incarnation_id=incarnation_id,
            listeners=tuple(
                mod.Listener(name=e["name"], host=e["host"], port=e["port"], security_protocol=e["security_protocol"])
                for e in endpoints
            ),
            features=tuple(
                mod.Feature(name=k, min_supported_version=FEATURE_MIN.get(k, 1), max_supported_version=v)
                for k, v in features.items()
            ),
            rack=rack,
        )
        result = await self._rpc(
            "register_broker", (node_id, endpoints, rack), ApiKeys.BROKER_REGISTRATION, 4, body, timeout_ms
        )
        if isinstance(result, int):
            return result
        if result.error_code:
            raise KafkaError(result.error_code, f"broker registration refused: {result.error_code}")
        return result.broker_epoch

    async def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> tuple[int, int]:
        cls = request_class(ApiKeys.ALLOCATE_PRODUCER_IDS, 0)
        body = cls(broker_id=broker_id, broker_epoch=broker_epoch)
        result = await self._rpc(
            "allocate_producer_ids", (broker_id, broker_epoch), ApiKeys.ALLOCATE_PRODUCER_IDS, 0, body, timeout_ms
        )
        if isinstance(result, tuple):
            return result
        if result.error_code:
            raise KafkaError(result.error_code, "producer id block refused")
        return result.producer_id_start, result.producer_id_len

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, reqs: list, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> list:
        """AlterPartition (the broker's ISR changes, :mod:`kesque.server.drivers.alter_partition`):
        an AlterPartitionReply per request partition (None: left out of the answer); a top-level
        error (STALE_BROKER_EPOCH, REQUEST_TIMED_OUT, ...) raised as a KafkaError."""

        body = ap.request_to_kio(broker_id, broker_epoch, reqs, ap.LATEST)
        result = await self._rpc(
            "quorum.alter_partition", (reqs, ap.LATEST), ApiKeys.ALTER_PARTITION, ap.LATEST, body, timeout_ms
        )
        return result if isinstance(result, list) else ap.response_from_kio(result, reqs)

    # ------------------------------------------------------------------ broker lifecycle RPCs
    async def broker_registration(self, req, timeout_ms: int):
        """One BrokerRegistration attempt (BrokerLifecycle retries): the reply."""

        try:
            result = await self._rpc(
                "quorum.register", (req,), ApiKeys.BROKER_REGISTRATION, 4, to_kio(req, 4), timeout_ms, retry=False
            )
        except KafkaError as e:
            return RegistrationReply(int(e.code), -1)
        return RegistrationReply(0, result) if isinstance(result, int) else from_kio(result)

    async def assign_replicas_to_dirs(
        self, broker_id: int, broker_epoch: int, assignments: dict, timeout_ms: int
    ) -> tuple[int, dict]:
        """One AssignReplicasToDirs attempt (the AssignmentsManager retries): (error code,
        {dir id: {topic id: [(partition, error code)]}})."""

        try:
            result = await self._rpc(
                "quorum.assign_replicas_to_dirs",
                (broker_id, broker_epoch, assignments),
                ApiKeys.ASSIGN_REPLICAS_TO_DIRS,
                cc.ASSIGN_VERSION,
                cc.assign_request_to_kio(broker_id, broker_epoch, assignments),
                timeout_ms,
                retry=False,
            )
        except KafkaError as e:
            return int(e.code), {}
        return (0, result) if isinstance(result, dict) else cc.assign_response_from_kio(result)

    async def broker_heartbeat(self, req, timeout_ms: int):
        """One BrokerHeartbeat attempt: the reply."""
        try:
            result = await self._rpc(
                "quorum.heartbeat", (req,), ApiKeys.BROKER_HEARTBEAT, 1, to_kio(req, 1), timeout_ms, retry=False
            )
        except KafkaError as e:
            return HeartbeatReply(int(e.code))
        return result if isinstance(result, HeartbeatReply) else from_kio(result)


def _not_controller() -> KafkaError:
    return not_controller()


def _ms(value: int):
    return datetime.timedelta(milliseconds=value)
