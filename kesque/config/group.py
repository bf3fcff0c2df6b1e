"""Group-level configs (Kafka 4.0's GroupConfig, plus 4.1's ``share.isolation.level``): set with
IncrementalAlterConfigs on a GROUP resource, kept as ConfigRecords in the metadata log, and each
defaulting to its broker key.

``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` are honoured by the
KIP-848 coordinator; the ``share.*`` keys by the share-group coordinator and the leaders'
share partitions (kesque/share).
"""

from __future__ import annotations

from typing import Any

from .types import ConfigError, ConfigKey, at_least, one_of

_K = ConfigKey

GROUP_CONFIGS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _K("consumer.session.timeout.ms", "INT", 45000, "", at_least(1), ("group.consumer.session.timeout.ms",)),
        _K("consumer.heartbeat.interval.ms", "INT", 5000, "", at_least(1), ("group.consumer.heartbeat.interval.ms",)),
        _K("share.session.timeout.ms", "INT", 45000, "", at_least(1), ("group.share.session.timeout.ms",)),
        _K("share.heartbeat.interval.ms", "INT", 5000, "", at_least(1), ("group.share.heartbeat.interval.ms",)),
        _K("share.record.lock.duration.ms", "INT", 30000, "", at_least(1000), ("group.share.record.lock.duration.ms",)),
        _K("share.auto.offset.reset", "STRING", "latest", "", one_of("latest", "earliest")),
        _K("share.isolation.level", "STRING", "read_uncommitted", "", one_of("read_committed", "read_uncommitted")),
    ]
}

# (group key, broker key of its lower bound, broker key of its upper bound)
_BOUNDS = (
    (
        "consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    ("consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    (
        "share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
)
# (session key, heartbeat key): the session must be longer than the heartbeat interval
_LONGER = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)


def group_default(broker, name: str) -> Any:
    """The value a group gets for a key it does not set: its broker key's current value."""
    key = GROUP_CONFIGS[name]
    return broker.get(key.synonyms[0]) if key.synonyms else key.default


def effective_group_configs(broker, stored: dict[str, str]) -> dict[str, Any]:
    """Every group key's value for a group whose own settings are ``stored``."""
    out = {}
    for name, key in GROUP_CONFIGS.items():
        out[name] = key.parse(stored[name]) if name in stored else group_default(broker, name)
    return out


def validate_group_configs(configs: dict[str, str | None], broker) -> dict[str, Any]:
    """The whole set a group would have (Kafka's GroupConfig.validate): names, values, and
    the bounds the broker's group.* keys put on them. Raises ConfigError naming the key."""
    null = [k for k, v in configs.items() if v is None]
    if null:
        raise ConfigError(null[0], f"Null value not supported for group configs: {','.join(null)}")
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise ConfigError(name, f"Unknown group config name: {name}")
    values = effective_group_configs(broker, configs)
    for name, low, high in _BOUNDS:
        if values[name] < broker.get(low):
            raise ConfigError(name, f"{name} must be greater than or equal to {low}")
        if values[name] > broker.get(high):
            raise ConfigError(name, f"{name} must be less than or equal to {high}")
    for session, heartbeat in _LONGER:
        if values[session] <= values[heartbeat]:
            raise ConfigError(session, f"{session} must be greater than {heartbeat}")
    return values
