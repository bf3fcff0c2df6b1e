"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Values, sources and synonyms follow Kafka: a topic config that is not overridden shows
the broker's effective default with source DEFAULT_CONFIG, STATIC_BROKER_CONFIG or a
dynamic broker source; synonyms list every layer that sets it, highest priority first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.broker import (
    BROKER_CONFIGS,
    CLIENT_METRICS_CONFIG,
    DEFAULT_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    GROUP_CONFIG,
    KAFKA_INTERNAL_BROKER_KEYS,
    STATIC_BROKER_CONFIG,
    is_dynamic,
    key_type,
)
from ...config.client_metrics import CLIENT_METRICS_CONFIGS, CLIENT_METRICS_DOCS, split_list
from ...config.group import GROUP_CONFIGS, effective_group_configs
from ...config.topic import TOPIC_CONFIGS
from ...config.types import CONFIG_TYPE_CODES, render
from ...errors import ErrorCode, KafkaError
from ...metadata.image import RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...security.acl import AclOperation
from .authz import config_resource_error, dispatch_allowed

# the StandardAuthorizer's own settings: read from the broker's properties but not in Kafka's
# broker ConfigDef, so Kafka's DescribeConfigs of a broker does not list them
_AUTHORIZER_KEYS = frozenset({"super.users", "allow.everyone.if.no.acl.found"})


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)
    type: str = "STRING"
    doc: str | None = None


def topic_config_entries(
    cfg, image, topic: str, overrides: dict[str, str] | None = None, keys=None
) -> list[ConfigEntry]:
    stored = image.topic_configs(topic) if overrides is None else overrides
    out = []
    for name in sorted(TOPIC_CONFIGS):
        if keys is not None and name not in keys:
            continue
        key = TOPIC_CONFIGS[name]
        default, source, synonyms = cfg.topic_default(name) if key.synonyms else (key.default, DEFAULT_CONFIG, [])
        if not key.synonyms:
            synonyms = []
        if name in stored:
            value = stored[name]
            synonyms = [(name, value, DYNAMIC_TOPIC_CONFIG)] + synonyms
            source = DYNAMIC_TOPIC_CONFIG
        else:
            value = render(default)
            if not synonyms and key.default is not None:
                synonyms = [(name, render(key.default), DEFAULT_CONFIG)]
        out.append(ConfigEntry(name, value, source, False, key.type == "PASSWORD", synonyms, key.type, key.doc or None))
    return out


def _broker_entry(cfg, name: str, layers) -> ConfigEntry:
    """One broker key as DescribeConfigs shows it; ``layers`` are the synonyms it lists."""
    ktype = key_type(name)
    sensitive = ktype == "PASSWORD"
    key = BROKER_CONFIGS.get(name)
    synonyms = [(n, None if sensitive else v, src) for n, v, src in layers]
    source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
    value = None if sensitive else (synonyms[0][1] if synonyms else render(key.default if key else None))
    return ConfigEntry(
        name, value, source, not is_dynamic(name), sensitive, synonyms, ktype, (key.doc if key else "") or None
    )


def broker_config_entries(cfg, resource_name: str, keys=None) -> list[ConfigEntry]:
    if resource_name == "":
        # the cluster-wide dynamic defaults only
        names = sorted(cfg.dynamic_default)
        layers = {n: [(n, render(cfg.dynamic_default[n]), DYNAMIC_DEFAULT_BROKER_CONFIG)] for n in names}
    else:
        # kesque's keys, the Kafka keys of its file it does not use, and every dynamic key
        # set on this broker or the cluster (Kafka's whole dynamic set and custom keys)
        names = sorted(set(BROKER_CONFIGS) | set(cfg.unused) | set(cfg.dynamic_broker) | set(cfg.dynamic_default))
        if keys is None:  # Kafka defines these as internal: described only when asked by name
            names = [n for n in names if n not in KAFKA_INTERNAL_BROKER_KEYS and n not in _AUTHORIZER_KEYS]
        layers = {n: cfg.synonym_entries(n) for n in names}
        for n in cfg.unused:
            layers[n] = [e for e in layers[n] if e[2] != STATIC_BROKER_CONFIG] + [
                (n, cfg.raw.get(n), STATIC_BROKER_CONFIG)
            ]
    return [_broker_entry(cfg, n, layers[n]) for n in names if keys is None or n in keys]


def group_config_entries(cfg, image, group: str, keys=None) -> list[ConfigEntry]:
    """Kafka's GROUP resource: every group key, the group's own value (GROUP_CONFIG) or its
    broker key's (DEFAULT_CONFIG)."""
    stored = image.configs.get((RESOURCE_GROUP, group), {})
    values = effective_group_configs(cfg, stored)
    out = []
    for name in sorted(GROUP_CONFIGS):
        if keys is not None and name not in keys:
            continue
        key = GROUP_CONFIGS[name]
        source = GROUP_CONFIG if name in stored else DEFAULT_CONFIG
        value = render(values[name])
        out.append(ConfigEntry(name, value, source, False, False, [(name, value, source)], key.type, key.doc or None))
    return out


def client_metrics_config_entries(image, name: str, keys=None) -> list[ConfigEntry]:
    """Kafka's CLIENT_METRICS resource: its three keys, the subscription's own value
    (CLIENT_METRICS_CONFIG, with itself as synonym) or the default (DEFAULT_CONFIG, no synonym)."""
    stored = image.configs.get((RESOURCE_CLIENT_METRICS, name), {})
    out = []
    for key in sorted(CLIENT_METRICS_CONFIGS):
        if keys is not None and key not in keys:
            continue
        ktype, default = CLIENT_METRICS_CONFIGS[key]
        if key in stored:
            raw = stored[key]
            value = ",".join(split_list(raw)) if ktype == "LIST" else str(int(raw.strip()))
            source, synonyms = CLIENT_METRICS_CONFIG, [(key, value, CLIENT_METRICS_CONFIG)]
        else:
            value, source, synonyms = default, DEFAULT_CONFIG, []
        out.append(ConfigEntry(key, value, source, False, False, synonyms, ktype, CLIENT_METRICS_DOCS[key]))
    return out


class ConfigApis:
    APIS = (
        Api(ApiKeys.DESCRIBE_CONFIGS, 1, 4, "describe_configs"),
        Api(ApiKeys.ALTER_CONFIGS, 0, 2, "alter_configs"),
        Api(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 0, 1, "incremental_alter_configs"),
    )

    def __init__(self, *, image, config, node_id: int, controllers, validate_broker=None):
        """``validate_broker(updates)``: checks, on this broker, a change of its own BROKER
        resource (``{name: value, or None to delete}``) before the controller gets it, as
        Kafka's broker validates its reconfigurations (a new key store); raises KafkaError."""
        self.image = image
        self.config = config
        self.node_id = node_id
        self.controllers = controllers
        self.validate_broker = validate_broker

    def describe_configs(self, ctx, req):
        cfg, image, node_id = self.config, self.image, self.node_id
        v = ctx.api_version
        m = Msg(ApiKeys.DESCRIBE_CONFIGS, v)
        results = []
        for r in req.resources:
            keys = set(r.configuration_keys) if r.configuration_keys else None
            try:
                if ctx.authorizer is not None:
                    denied = config_resource_error(ctx, r.resource_type, r.resource_name, AclOperation.DESCRIBE_CONFIGS)
                    if denied is not None:
                        raise KafkaError(denied, None)
                if r.resource_type == RESOURCE_TOPIC:
                    if image.topic(r.resource_name) is None:
                        raise KafkaError(
                            ErrorCode.unknown_topic_or_partition, f"Topic {r.resource_name} does not exist."
                        )
                    entries = topic_config_entries(cfg, image, r.resource_name, keys=keys)
                elif r.resource_type == RESOURCE_BROKER:
                    if r.resource_name not in ("", str(node_id)):
                        raise KafkaError(
                            ErrorCode.invalid_request,
                            f"Unexpected broker id, expected {node_id} or empty string, but received {r.resource_name}",
                        )
                    entries = broker_config_entries(cfg, r.resource_name, keys)
                elif r.resource_type == RESOURCE_GROUP:
                    if not r.resource_name:
                        raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty")
                    entries = group_config_entries(cfg, image, r.resource_name, keys)
                elif r.resource_type == RESOURCE_CLIENT_METRICS:
                    if not r.resource_name:
                        raise KafkaError(
                            ErrorCode.invalid_request, "Client metrics subscription name must not be empty"
                        )
                    entries = client_metrics_config_entries(image, r.resource_name, keys)
                else:
                    raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}")
                configs = []
                for e in entries:
                    syn = (
                        tuple(m("DescribeConfigsSynonym", name=n, value=val, source=src) for n, val, src in e.synonyms)
                        if req.include_synonyms
                        else ()
                    )
                    configs.append(
                        m(
                            "DescribeConfigsResourceResult",
                            name=e.name,
                            value=e.value,
                            read_only=e.read_only,
                            config_source=e.source,
                            is_sensitive=e.sensitive,
                            synonyms=syn,
                            config_type=CONFIG_TYPE_CODES.get(e.type, 0),
                            documentation=e.doc if getattr(req, "include_documentation", False) else None,
                        )
                    )
                results.append(
                    m(
                        "DescribeConfigsResult",
                        error_code=ErrorCode.none,
                        # Kafka 4.4 answers a client metrics resource with an empty message
                        error_message="" if r.resource_type == RESOURCE_CLIENT_METRICS else None,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        configs=tuple(configs),
                    )
                )
            except KafkaError as e:
                results.append(
                    m(
                        "DescribeConfigsResult",
                        error_code=e.code,
                        error_message=e.message,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        configs=(),
                    )
                )
        return m(throttle_time=0, results=tuple(results))

    def _alter(self, ctx, req, api_key: int, incremental: bool):
        return dispatch_allowed(
            self.controllers,
            ctx,
            req,
            "resources",
            "responses",
            lambda: self._alter_refused(ctx, req, api_key),
            lambda sub: self._alter_here(ctx, sub, api_key, incremental),
        )

    @staticmethod
    def _alter_refused(ctx, req, api_key: int) -> dict:
        denied = {}
        if ctx.authorizer is not None:  # ALTER_CONFIGS on each resource (see authz.py)
            m = Msg(api_key, ctx.api_version)
            for i, r in enumerate(req.resources):
                error = config_resource_error(ctx, r.resource_type, r.resource_name, AclOperation.ALTER_CONFIGS)
                if error is not None:
                    denied[i] = m(
                        "AlterConfigsResourceResponse",
                        error_code=error,
                        error_message=None,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
        return denied

    async def _alter_here(self, ctx, req, api_key: int, incremental: bool):
        m = Msg(api_key, ctx.api_version)
        out = []
        for r in req.resources:
            try:
                if (
                    self.validate_broker is not None
                    and r.resource_type == RESOURCE_BROKER
                    and r.resource_name == str(self.node_id)
                ):
                    # SET (0) and DELETE (1); APPEND and SUBTRACT apply to lists only
                    self.validate_broker(
                        {c.name: (None if incremental and c.config_operation == 1 else c.value) for c in r.configs}
                    )
                if incremental:
                    ops = [(c.name, c.config_operation, c.value) for c in r.configs]
                    await self.controllers.call(
                        "incremental_alter_configs", r.resource_type, r.resource_name, ops, req.validate_only
                    )
                else:
                    await self.controllers.call(
                        "alter_configs",
                        r.resource_type,
                        r.resource_name,
                        {c.name: c.value for c in r.configs},
                        req.validate_only,
                    )
                out.append(
                    m(
                        "AlterConfigsResourceResponse",
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
            except KafkaError as e:
                out.append(
                    m(
                        "AlterConfigsResourceResponse",
                        error_code=e.code,
                        error_message=e.message,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
        return m(throttle_time=0, responses=tuple(out))

    def alter_configs(self, ctx, req):
        return self._alter(ctx, req, ApiKeys.ALTER_CONFIGS, incremental=False)

    def incremental_alter_configs(self, ctx, req):
        return self._alter(ctx, req, ApiKeys.INCREMENTAL_ALTER_CONFIGS, incremental=True)
