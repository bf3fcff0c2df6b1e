"""Topic-level configs (Kafka's LogConfig) and their broker synonyms."""

from __future__ import annotations

from dataclasses import dataclass

from .types import LONG_MAX, ConfigError, ConfigKey, at_least, between, one_of, throttled_replica_list

_K = ConfigKey

_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _K(
            "cleanup.policy",
            "LIST",
            ["delete"],
            "delete or compact (or both)",
            one_of("compact", "delete"),
            ("log.cleanup.policy",),
        ),
        _K(
            "compression.type",
            "STRING",
            "producer",
            "final compression of the topic's batches",
            one_of(*_COMPRESSION),
            ("compression.type",),
        ),
        _K("compression.gzip.level", "INT", -1, "", between(-1, 9), ("compression.gzip.level",)),
        _K("compression.lz4.level", "INT", 9, "", between(1, 17), ("compression.lz4.level",)),
        _K("compression.zstd.level", "INT", 3, "", between(-131072, 22), ("compression.zstd.level",)),
        _K("delete.retention.ms", "LONG", 86400000, "", at_least(0), ("log.cleaner.delete.retention.ms",)),
        _K("file.delete.delay.ms", "LONG", 60000, "", at_least(0), ("log.segment.delete.delay.ms",)),
        _K("flush.messages", "LONG", LONG_MAX, "", at_least(1), ("log.flush.interval.messages",)),
        _K("flush.ms", "LONG", LONG_MAX, "", at_least(0), ("log.flush.interval.ms",)),
        _K(
            "follower.replication.throttled.replicas",
            "LIST",
            [],
            "",
            throttled_replica_list,
            parse_as="LIST_KEEPING_EMPTY",
        ),
        _K("index.interval.bytes", "INT", 4096, "", at_least(0), ("log.index.interval.bytes",)),
        _K(
            "leader.replication.throttled.replicas",
            "LIST",
            [],
            "",
            throttled_replica_list,
            parse_as="LIST_KEEPING_EMPTY",
        ),
        _K("local.retention.bytes", "LONG", -2, "", at_least(-2), ("log.local.retention.bytes",)),
        _K("local.retention.ms", "LONG", -2, "", at_least(-2), ("log.local.retention.ms",)),
        _K("max.compaction.lag.ms", "LONG", LONG_MAX, "", at_least(1), ("log.cleaner.max.compaction.lag.ms",)),
        _K("max.message.bytes", "INT", 1048588, "", at_least(0), ("message.max.bytes",)),
        _K("message.timestamp.after.max.ms", "LONG", 3600000, "", at_least(0), ("log.message.timestamp.after.max.ms",)),
        _K(
            "message.timestamp.before.max.ms",
            "LONG",
            LONG_MAX,
            "",
            at_least(0),
            ("log.message.timestamp.before.max.ms",),
        ),
        _K(
            "message.timestamp.type",
            "STRING",
            "CreateTime",
            "",
            one_of("CreateTime", "LogAppendTime"),
            ("log.message.timestamp.type",),
        ),
        _K("min.cleanable.dirty.ratio", "DOUBLE", 0.5, "", between(0, 1), ("log.cleaner.min.cleanable.ratio",)),
        _K("min.compaction.lag.ms", "LONG", 0, "", at_least(0), ("log.cleaner.min.compaction.lag.ms",)),
        _K("min.insync.replicas", "INT", 1, "", at_least(1), ("min.insync.replicas",)),
        _K("preallocate", "BOOLEAN", False, "", None, ("log.preallocate",)),
        _K("remote.log.copy.disable", "BOOLEAN", False, ""),
        _K("remote.log.delete.on.disable", "BOOLEAN", False, ""),
        _K("remote.storage.enable", "BOOLEAN", False, ""),
        _K("retention.bytes", "LONG", -1, "", None, ("log.retention.bytes",)),
        _K(
            "retention.ms",
            "LONG",
            604800000,
            "",
            at_least(-1),
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        ),
        _K("segment.bytes", "INT", 1073741824, "", at_least(1048576), ("log.segment.bytes",)),
        _K("segment.index.bytes", "INT", 10485760, "", at_least(4), ("log.index.size.max.bytes",)),
        _K("segment.jitter.ms", "LONG", 0, "", at_least(0), ("log.roll.jitter.ms", "log.roll.jitter.hours")),
        _K("segment.ms", "LONG", 604800000, "", at_least(1), ("log.roll.ms", "log.roll.hours")),
        _K("unclean.leader.election.enable", "BOOLEAN", False, "", None, ("unclean.leader.election.enable",)),
    ]
}

# broker unit conversions for synonyms expressed in other units
SYNONYM_SCALE = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}


def validate_topic_configs(configs: dict[str, str]) -> dict:
    """Parse topic config overrides; raises ConfigError naming the first bad key."""
    out = {}
    for name, value in configs.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ConfigError(name, f"Unknown topic config name: {name}")
        if value is None:
            raise ConfigError(name, f"Null value not supported for topic configs: {name}")
        out[name] = key.parse(value)
    # cross-field rule Kafka enforces
    ret_bytes = out.get("retention.bytes")
    local_bytes = out.get("local.retention.bytes")
    if ret_bytes is not None and local_bytes is not None and ret_bytes >= 0 and local_bytes > ret_bytes:
        raise ConfigError("local.retention.bytes", "local.retention.bytes must not exceed retention.bytes")
    return out


@dataclass
class LogConfig:
    """Effective configuration of one topic's logs (overrides over broker defaults)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    cleanup_policy: tuple = ("delete",)
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5

    @classmethod
    def from_values(cls, values: dict) -> LogConfig:
        kwargs = {}
        for name, value in values.items():
            attr = name.replace(".", "_")
            if attr in cls.__dataclass_fields__:
                kwargs[attr] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
