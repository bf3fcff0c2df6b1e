"""GetTelemetrySubscriptions and PushTelemetry (KIP-714), and ListConfigResources (which lists
the client metrics subscriptions among the other config resources, KIP-1142).

The telemetry APIs are served when ``metrics.listener`` is set: Kafka advertises them only with
a ClientTelemetryReceiver configured, and kesque's receiver is its ``/metrics`` endpoint
(:mod:`kesque.metrics.telemetry` does the work).
"""

from __future__ import annotations

from ...config.broker import metrics_listener
from ...errors import ErrorCode, KafkaError
from ...metadata.image import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
)
from ...metrics.telemetry import ACCEPTED_COMPRESSION_TYPES, ZERO_UUID, client_attributes
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...security.acl import AclOperation, ResourceType
from ...utils import java_string_hash
from ..context import CLUSTER_NAME

# ListConfigResources: v0 lists client metrics subscriptions only; v1 (Kafka 4.1) any of these,
# all of them when the request names none
_V0_TYPES = (RESOURCE_CLIENT_METRICS,)
_V1_TYPES = (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP)


def concurrent_hash_map_order(names: list[str]) -> list[str]:
    """The iteration order of a java.util.concurrent.ConcurrentHashMap whose keys were put in
    ``names`` order (Kafka keeps the subscriptions in one): by bin of the table (16, doubled
    once three quarters full), then insertion order."""
    n = 16
    while len(names) >= n - (n >> 2):
        n *= 2

    def bin_of(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (n - 1)

    return [name for _, name in sorted(enumerate(names), key=lambda e: (bin_of(e[1]), e[0]))]


class TelemetryApis:
    @staticmethod
    def apis(config):
        out = [Api(ApiKeys.LIST_CONFIG_RESOURCES, 0, 1, "list_config_resources")]
        if metrics_listener("metrics.listener", config.get("metrics.listener")):
            out += [
                Api(ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0, "get_telemetry_subscriptions"),
                Api(ApiKeys.PUSH_TELEMETRY, 0, 0, "push_telemetry"),
            ]
        return out

    def __init__(self, *, image, telemetry):
        """``telemetry``: the broker's :class:`kesque.metrics.telemetry.ClientTelemetry` (None
        without ``metrics.listener``)."""
        self.image = image
        self.telemetry = telemetry

    @staticmethod
    def _attributes(ctx):
        conn = ctx.connection
        return lambda instance_id: client_attributes(
            instance_id, ctx.client_id, getattr(conn, "client_software", None), getattr(conn, "peer", None)
        )

    def get_telemetry_subscriptions(self, ctx, req):
        m = Msg(ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS, ctx.api_version)
        try:
            inst = self.telemetry.get_subscriptions(req.client_instance_id, self._attributes(ctx))
        except KafkaError as e:  # Kafka's getErrorResponse: the code, every other field its default
            return m(
                throttle_time=0,
                error_code=e.code,
                client_instance_id=ZERO_UUID,
                subscription_id=0,
                accepted_compression_types=(),
                push_interval=0,
                telemetry_max_bytes=0,
                delta_temporality=False,
                requested_metrics=(),
            )
        return m(
            throttle_time=0,
            error_code=ErrorCode.none,
            client_instance_id=inst.id,
            subscription_id=inst.subscription_id,
            accepted_compression_types=ACCEPTED_COMPRESSION_TYPES,
            push_interval=inst.interval_ms,
            telemetry_max_bytes=self.telemetry.max_bytes,
            delta_temporality=True,
            requested_metrics=tuple(inst.metrics),
        )

    def push_telemetry(self, ctx, req):
        m = Msg(ApiKeys.PUSH_TELEMETRY, ctx.api_version)
        try:
            self.telemetry.push(req, self._attributes(ctx))
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code)
        return m(throttle_time=0, error_code=ErrorCode.none)

    def list_config_resources(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.LIST_CONFIG_RESOURCES, v)
        if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
            return m(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, config_resources=())
        supported = _V0_TYPES if v == 0 else _V1_TYPES
        asked = tuple(getattr(req, "resource_types", ()) or ()) or supported
        if any(t not in supported for t in asked):
            return m(throttle_time=0, error_code=ErrorCode.unsupported_version, config_resources=())
        image = self.image
        out: list[tuple[str, int]] = []
        # Kafka's order: groups with configs, subscriptions, broker loggers, brokers, topics
        if RESOURCE_GROUP in asked:
            out += [(name, RESOURCE_GROUP) for (t, name), cfg in image.configs.items() if t == RESOURCE_GROUP and cfg]
        if RESOURCE_CLIENT_METRICS in asked:
            names = [name for (t, name), cfg in image.configs.items() if t == RESOURCE_CLIENT_METRICS and cfg]
            out += [(name, RESOURCE_CLIENT_METRICS) for name in concurrent_hash_map_order(names)]
        brokers = [str(b.id) for b in image.live_brokers()]
        if RESOURCE_BROKER_LOGGER in asked:
            out += [(b, RESOURCE_BROKER_LOGGER) for b in brokers]
        if RESOURCE_BROKER in asked:
            out += [(b, RESOURCE_BROKER) for b in brokers]
        if RESOURCE_TOPIC in asked:
            out += [(t.name, RESOURCE_TOPIC) for t in image.topics_by_id.values()]
        return m(
            throttle_time=0,
            error_code=ErrorCode.none,
            config_resources=tuple(m("ConfigResource", resource_name=n, resource_type=t) for n, t in out),
        )
