"""The connector's options, named and checked as Spark's Kafka connector names and checks
them (``KafkaSourceProvider``), so a pipeline moves between the two by changing
``format("kafka")`` to ``format("kesque")``.

Every check fails fast, on the driver, with a message naming the option.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

EARLIEST = -2
LATEST = -1

# Spark's connector refuses these Kafka options: the connector owns what they control
_REJECTED_SOURCE = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
    "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured "
    "Streaming manages which offsets are consumed internally, rather than relying on the "
    "kafkaConsumer. This will ensure that no data is missed when new topics/partitions are "
    "dynamically subscribed. Note that 'startingOffsets' only applies when a new Streaming "
    "query is started, and that resuming will always pick up from where the query left off.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported, as keys are always deserialized as "
    "byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
    "deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported, as values are always deserialized "
    "as byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
    "deserialize the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported, as Structured Streaming does not "
    "commit any offset to Kafka.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported as it could break the query's "
    "semantics.",
}
_REJECTED_SINK = {
    "key.serializer": "Kafka option 'key.serializer' is not supported, as keys are always serialized with "
    "ByteArraySerializer. Use DataFrame operations to explicitly serialize the keys into either "
    "strings or byte arrays.",
    "value.serializer": "Kafka option 'value.serializer' is not supported, as values are always serialized with "
    "ByteArraySerializer. Use DataFrame operations to explicitly serialize the values into "
    "either strings or byte arrays.",
    "interceptor.classes": _REJECTED_SOURCE["interceptor.classes"],
}


class OptionError(ValueError):
    """A bad option: the message names it."""


def _get(options, name: str, default=None):
    """Spark hands options over case-insensitively; accept any case here too."""
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return default


def _bool(options, name: str, default: bool) -> bool:
    v = _get(options, name)
    if v is None:
        return default
    s = str(v).strip().lower()
    if s not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got {v!r}")
    return s == "true"


def _int(options, name: str, default: int | None, minimum: int = 0) -> int | None:
    v = _get(options, name)
    if v is None:
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {v!r}") from None
    if n < minimum:
        raise OptionError(f"option '{name}' must be >= {minimum}, got {n}")
    return n


_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60000, "min": 60000, "h": 3600000, "d": 86400000}


def duration_ms(name: str, text: str) -> int:
    """Spark's time strings (``15m``, ``30s``, ``500ms``; a bare number is milliseconds)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise OptionError(f"option '{name}' must be a duration such as 15m, 30s or 500ms, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2) or "ms"]


def kafka_params(options) -> dict[str, str]:
    """The ``kafka.``-prefixed options, prefix removed, keys lower-cased."""
    return {k[6:].lower(): str(v) for k, v in options.items() if k.lower().startswith("kafka.")}


def _check_rejected(params: dict, table: dict) -> None:
    for key, message in table.items():
        if key in params:
            raise OptionError(message)
    proto = params.get("security.protocol", "PLAINTEXT").upper()
    if proto != "PLAINTEXT":
        raise OptionError(f"option 'kafka.security.protocol' = {proto}: kesque's client speaks PLAINTEXT only")


# kafka.* options handed to kesque's consumer / producer (Kafka config name -> keyword)
CONSUMER_PARAMS = {
    "client.id": ("client_id", str),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("partition_max_bytes", int),
    "fetch.max.wait.ms": ("max_wait_ms", int),
}
PRODUCER_PARAMS = {
    "client.id": ("client_id", str),
    "batch.size": ("batch_size", int),
    "request.timeout.ms": ("request_timeout_ms", int),
}


def client_kwargs(params: dict, table: dict, **defaults) -> dict:
    """Keyword arguments for a kesque client from the ``kafka.`` options it understands;
    the others (Java-client tuning that has no counterpart here) are ignored."""
    out = dict(defaults)
    for key, (kw, typ) in table.items():
        if key in params:
            try:
                out[kw] = typ(params[key])
            except ValueError:
                raise OptionError(f"option 'kafka.{key}' must be a number, got {params[key]!r}") from None
    return out


def parse_partition_json(name: str, text: str, *, allowed_special: tuple[int, ...]) -> dict[tuple[str, int], int]:
    """``{"topicA":{"0":23,"1":-1}}`` as {(topic, partition): offset or timestamp}."""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    ok = isinstance(obj, dict) and all(isinstance(v, dict) for v in obj.values())
    out: dict[tuple[str, int], int] = {}
    if ok:
        for topic, parts in obj.items():
            for p, off in parts.items():
                try:
                    pi = int(p)
                except ValueError:
                    ok = False
                    break
                if not isinstance(off, int) or isinstance(off, bool):
                    ok = False
                    break
                out[(topic, pi)] = off
    if not ok:
        raise OptionError(
            f'option \'{name}\': expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {text}'
        )
    for tp, off in out.items():
        if off < 0 and off not in allowed_special:
            raise OptionError(
                f"option '{name}': offset {off} for {tp[0]}-{tp[1]} is not allowed here "
                f"(allowed special values: {', '.join(map(str, allowed_special)) or 'none'})"
            )
    return out


@dataclass
class Bound:
    """Where a read starts or ends: a kind ("earliest", "latest", "offsets", "timestamp",
    "timestamps") and its value."""

    kind: str
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int = -1

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
            "timestamp": self.timestamp,
        }


def _bound(
    options, prefix: str, default: str, *, allow_earliest: bool, allow_latest: bool, json_special: tuple[int, ...]
) -> Bound:
    ts = _get(options, f"{prefix}Timestamp")
    by_ts = _get(options, f"{prefix}OffsetsByTimestamp")
    offs = _get(options, f"{prefix}Offsets")
    if ts is not None:
        try:
            return Bound("timestamp", timestamp=int(ts))
        except ValueError:
            raise OptionError(f"option '{prefix}Timestamp' must be a timestamp in milliseconds, got {ts!r}") from None
    if by_ts is not None:
        return Bound("timestamps", parse_partition_json(f"{prefix}OffsetsByTimestamp", by_ts, allowed_special=()))
    text = (offs if offs is not None else default).strip()
    if text.lower() == "earliest":
        if not allow_earliest:
            raise OptionError(f"option '{prefix}Offsets': earliest offset is not allowed here")
        return Bound("earliest")
    if text.lower() == "latest":
        if not allow_latest:
            raise OptionError(f"option '{prefix}Offsets': latest offset is not allowed for a batch query's start")
        return Bound("latest")
    return Bound("offsets", parse_partition_json(f"{prefix}Offsets", text, allowed_special=json_special))


@dataclass
class SourceOptions:
    bootstrap: str
    strategy: str  # subscribe | subscribePattern | assign
    topics: list[str] = field(default_factory=list)
    pattern: str | None = None
    assign: dict[str, list[int]] = field(default_factory=dict)
    starting: Bound = field(default_factory=lambda: Bound("latest"))
    ending: Bound = field(default_factory=lambda: Bound("latest"))
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    isolation_level: int = 0
    timestamp_strategy: str = "error"
    poll_timeout_ms: int = 120000
    api_timeout_ms: int = 60000
    params: dict[str, str] = field(default_factory=dict)


def _bootstrap(params: dict) -> str:
    bs = params.get("bootstrap.servers")
    if not bs:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    return bs


def source_options(options, streaming: bool) -> SourceOptions:
    params = kafka_params(options)
    _check_rejected(params, _REJECTED_SOURCE)
    given = [n for n in ("subscribe", "subscribePattern", "assign") if _get(options, n) is not None]
    if len(given) != 1:
        raise OptionError(
            "One of the following options must be specified for Kafka source: subscribe, "
            f"subscribePattern, assign (exactly one; got {', '.join(given) or 'none'}). See the docs "
            "for more details."
        )
    o = SourceOptions(bootstrap=_bootstrap(params), strategy=given[0], params=params)
    value = str(_get(options, given[0]))
    if o.strategy == "subscribe":
        o.topics = [t.strip() for t in value.split(",") if t.strip()]
        if not o.topics:
            raise OptionError(
                f"No topics to subscribe to as specified topics are empty: option 'subscribe' = {value!r}"
            )
    elif o.strategy == "subscribePattern":
        if not value.strip():
            raise OptionError(
                f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is {value!r}"
            )
        try:
            re.compile(value)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {e}") from None
        o.pattern = value
    else:
        try:
            obj = json.loads(value)
        except ValueError:
            obj = None
        if not (
            isinstance(obj, dict)
            and obj
            and all(isinstance(v, list) and all(isinstance(p, int) for p in v) for v in obj.values())
        ):
            raise OptionError(f'option \'assign\': expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {value}')
        o.assign = {t: sorted(set(ps)) for t, ps in obj.items()}
    o.starting = _bound(
        options,
        "starting",
        "latest" if streaming else "earliest",
        allow_earliest=True,
        allow_latest=streaming,
        json_special=(EARLIEST, LATEST) if streaming else (EARLIEST,),
    )
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(options, name) is not None:
                raise OptionError(f"option '{name}' is for batch queries only; it is not allowed in a streaming query")
    else:
        o.ending = _bound(options, "ending", "latest", allow_earliest=False, allow_latest=True, json_special=(LATEST,))
    o.max_offsets_per_trigger = _int(options, "maxOffsetsPerTrigger", None, 1)
    o.min_offsets_per_trigger = _int(options, "minOffsetsPerTrigger", None, 1)
    if (
        o.min_offsets_per_trigger
        and o.max_offsets_per_trigger
        and o.min_offsets_per_trigger > o.max_offsets_per_trigger
    ):
        raise OptionError(
            f"value of minOffsetPerTrigger({o.min_offsets_per_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({o.max_offsets_per_trigger})."
        )
    delay = _get(options, "maxTriggerDelay")
    if delay is not None:
        o.max_trigger_delay_ms = duration_ms("maxTriggerDelay", str(delay))
    o.min_partitions = _int(options, "minPartitions", None, 1)
    o.max_records_per_partition = _int(options, "maxRecordsPerPartition", None, 1)
    # accepted as Spark's connector accepts them; kesque's reader joins no group and its driver
    # retries offset requests until kafka.default.api.timeout.ms
    for name in ("fetchOffset.numRetries", "fetchOffset.retryIntervalMs"):
        _int(options, name, None, 0)
    o.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
    o.include_headers = _bool(options, "includeHeaders", False)
    iso = params.get("isolation.level", "read_uncommitted")
    if iso not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, got {iso!r}")
    o.isolation_level = 1 if iso == "read_committed" else 0
    strategy = str(_get(options, "startingOffsetsByTimestampStrategy", "error")).lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")
    o.timestamp_strategy = strategy
    o.poll_timeout_ms = _int(options, "kafkaConsumer.pollTimeoutMs", 120000, 1)
    o.api_timeout_ms = int(params.get("default.api.timeout.ms", 60000))
    client_kwargs(params, CONSUMER_PARAMS)  # numbers must be numbers
    return o


@dataclass
class SinkOptions:
    bootstrap: str
    topic: str | None
    exactly_once: bool
    transactional_id_prefix: str
    sink_log_topic: str
    api_timeout_ms: int
    params: dict[str, str]


def sink_options(options) -> SinkOptions:
    params = kafka_params(options)
    _check_rejected(params, _REJECTED_SINK)
    topic = _get(options, "topic")
    guarantee = str(_get(options, "deliveryGuarantee", "exactly-once")).lower()
    if guarantee not in ("exactly-once", "at-least-once"):
        raise OptionError(f"option 'deliveryGuarantee' must be 'exactly-once' or 'at-least-once', got {guarantee!r}")
    if params.get("compression.type", "none") not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise OptionError(
            f"option 'kafka.compression.type' must be one of none, gzip, snappy, lz4, zstd, got "
            f"{params['compression.type']!r}"
        )
    client_kwargs(params, PRODUCER_PARAMS)  # numbers must be numbers
    prefix = _get(options, "transactionalIdPrefix") or f"kesque-spark-{topic or 'sink'}"
    if "." in prefix:
        raise OptionError(f"option 'transactionalIdPrefix' must not contain '.', got {prefix!r}")
    return SinkOptions(
        bootstrap=_bootstrap(params),
        topic=topic,
        exactly_once=guarantee == "exactly-once",
        transactional_id_prefix=prefix,
        sink_log_topic=_get(options, "sinkLogTopic", "_kesque_spark_sink_log"),
        api_timeout_ms=int(params.get("default.api.timeout.ms", 60000)),
        params=params,
    )
