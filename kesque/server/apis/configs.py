"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Values, sources and synonyms follow Kafka: a topic config that is not overridden shows
the broker's effective default with source DEFAULT_CONFIG, STATIC_BROKER_CONFIG or a
dynamic broker source; synonyms list every layer that sets it, highest priority first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.broker import (BROKER_CONFIGS, DEFAULT_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG,
                              STATIC_BROKER_CONFIG)
from ...config.topic import TOPIC_CONFIGS
from ...config.types import CONFIG_TYPE_CODES, render
from ...errors import ErrorCode, KafkaError
from ...metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC
from .kiohelp import Msg


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


def topic_config_entries(server, topic: str, overrides: dict[str, str] | None = None,
                         keys=None) -> list[ConfigEntry]:
    cfg = server.config
    stored = server.image.topic_configs(topic) if overrides is None else overrides
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


def broker_config_entries(server, resource_name: str, keys=None) -> list[ConfigEntry]:
    cfg = server.config
    out = []
    if resource_name == "":
        # the cluster-wide dynamic defaults only
        for name, value in sorted(cfg.dynamic_default.items()):
            if keys is not None and name not in keys:
                continue
            key = BROKER_CONFIGS[name]
            out.append(ConfigEntry(name, render(value), DYNAMIC_DEFAULT_BROKER_CONFIG, False, key.type == "PASSWORD",
                                   [(name, render(value), DYNAMIC_DEFAULT_BROKER_CONFIG)], key.type, key.doc or None))
        return out
    for name in sorted(BROKER_CONFIGS):
        if keys is not None and name not in keys:
            continue
        key = BROKER_CONFIGS[name]
        value = cfg.get(name)
        sensitive = key.type == "PASSWORD"
        synonyms = cfg.synonym_entries(name)
        out.append(ConfigEntry(name, None if sensitive else render(value), cfg.source(name), not key.dynamic,
                               sensitive, synonyms, key.type, key.doc or None))
    for name in sorted(cfg.unused):
        if keys is not None and name not in keys:
            continue
        out.append(ConfigEntry(name, cfg.raw.get(name), STATIC_BROKER_CONFIG, True, False,
                               [(name, cfg.raw.get(name), STATIC_BROKER_CONFIG)]))
    return out


class ConfigApis:
    def __init__(self, server):
        self.server = server

    def register(self) -> None:
        s = self.server
        s.register(32, 1, 4, self.describe_configs)
        s.register(33, 0, 2, self.alter_configs)
        s.register(44, 0, 1, self.incremental_alter_configs)

    def describe_configs(self, ctx, req):
        s = self.server
        v = ctx.api_version
        m = Msg(32, v)
        results = []
        for r in req.resources:
            keys = set(r.configuration_keys) if r.configuration_keys else None
            try:
                if r.resource_type == RESOURCE_TOPIC:
                    if s.image.topic(r.resource_name) is None:
                        raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                         f"Topic {r.resource_name} does not exist.")
                    entries = topic_config_entries(s, r.resource_name, keys=keys)
                elif r.resource_type == RESOURCE_BROKER:
                    if r.resource_name not in ("", str(s.node_id)):
                        raise KafkaError(ErrorCode.invalid_request,
                                         f"Unexpected broker id, expected {s.node_id} or empty string, but received "
                                         f"{r.resource_name}")
                    entries = broker_config_entries(s, r.resource_name, keys)
                else:
                    raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}")
                configs = []
                for e in entries:
                    syn = tuple(m("DescribeConfigsSynonym", name=n, value=val, source=src)
                                for n, val, src in e.synonyms) if req.include_synonyms else ()
                    configs.append(m("DescribeConfigsResourceResult", name=e.name, value=e.value,
                                     read_only=e.read_only, config_source=e.source, is_sensitive=e.sensitive,
                                     is_default=e.source == DEFAULT_CONFIG, synonyms=syn,
                                     config_type=CONFIG_TYPE_CODES.get(e.type, 0),
                                     documentation=e.doc if getattr(req, "include_documentation", False) else None))
                results.append(m("DescribeConfigsResult", error_code=ErrorCode.none, error_message=None,
                                 resource_type=r.resource_type, resource_name=r.resource_name,
                                 configs=tuple(configs)))
            except KafkaError as e:
                results.append(m("DescribeConfigsResult", error_code=e.code, error_message=e.message,
                                 resource_type=r.resource_type, resource_name=r.resource_name, configs=()))
        return m(throttle_time=0, results=tuple(results))

    def _alter(self, ctx, req, api_key: int, incremental: bool):
        m = Msg(api_key, ctx.api_version)
        out = []
        for r in req.resources:
            try:
                if incremental:
                    ops = [(c.name, c.config_operation, c.value) for c in r.configs]
                    self.server.controller.incremental_alter_configs(r.resource_type, r.resource_name, ops,
                                                                     req.validate_only)
                else:
                    self.server.controller.alter_configs(r.resource_type, r.resource_name,
                                                         {c.name: c.value for c in r.configs}, req.validate_only)
                out.append(m("AlterConfigsResourceResponse", error_code=ErrorCode.none, error_message=None,
                             resource_type=r.resource_type, resource_name=r.resource_name))
            except KafkaError as e:
                out.append(m("AlterConfigsResourceResponse", error_code=e.code, error_message=e.message,
                             resource_type=r.resource_type, resource_name=r.resource_name))
        return m(throttle_time=0, responses=tuple(out))

    def alter_configs(self, ctx, req):
        return self._alter(ctx, req, 33, incremental=False)

    def incremental_alter_configs(self, ctx, req):
        return self._alter(ctx, req, 44, incremental=True)
