"""Client metrics subscriptions (KIP-714): the CLIENT_METRICS config resource (type 16), a named
subscription whose keys are Kafka's ClientMetricsConfigs: ``metrics`` (metric name prefixes,
``*`` for all), ``interval.ms`` (the push interval, 100 ms to one hour, default five minutes)
and ``match`` (``selector=regex`` entries on the client's instance id, client id, software name
and version, source address and port). Set with IncrementalAlterConfigs
(``kesque client-metrics``, ``kafka-configs.sh --entity-type client-metrics``) and kept as
ConfigRecords in the metadata log, as Kafka keeps them.
"""

from __future__ import annotations

import re


class ClientMetricsError(ValueError):
    """A subscription Kafka refuses: ``code`` names the error its answer carries
    (``invalid_request`` or ``invalid_config``, as ClientMetricsConfigs throws them)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000

# the selectors a ``match`` entry may name (ClientMetricsConfigs.ALLOWED_MATCH_PARAMS)
CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
MATCH_SELECTORS = frozenset(
    {
        CLIENT_INSTANCE_ID,
        CLIENT_ID,
        CLIENT_SOFTWARE_NAME,
        CLIENT_SOFTWARE_VERSION,
        CLIENT_SOURCE_ADDRESS,
        CLIENT_SOURCE_PORT,
    }
)
# the keys, their ConfigDef types and defaults as DescribeConfigs shows them
CLIENT_METRICS_CONFIGS = {METRICS: ("LIST", ""), INTERVAL_MS: ("INT", str(DEFAULT_INTERVAL_MS)), MATCH: ("LIST", "")}
CLIENT_METRICS_DOCS = {
    METRICS: "Telemetry metric name prefix list",
    INTERVAL_MS: "Metrics push interval in milliseconds",
    MATCH: "Client match criteria",
}


def split_list(value: str | None) -> list[str]:
    """A ConfigDef LIST: comma-separated, each item trimmed, empty items dropped."""
    return [x.strip() for x in (value or "").split(",") if x.strip()]


def parse_match(patterns: list[str]) -> dict[str, re.Pattern]:
    """``selector=regex`` entries -> {selector: compiled regex} (ClientMetricsConfigs.parseMatchingPatterns:
    exactly one ``=``, a known selector, a regex that compiles; else INVALID_CONFIG)."""
    out = {}
    for pattern in patterns:
        parts = pattern.split("=")
        if len(parts) != 2 or parts[0].strip() not in MATCH_SELECTORS:
            raise ClientMetricsError("invalid_config", f"Illegal client matching pattern: {pattern}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise ClientMetricsError("invalid_config", f"Illegal client matching pattern: {pattern}") from None
    return out


def parse_interval(value: str | None) -> int:
    try:
        return int((value or "").strip())
    except ValueError:
        raise ClientMetricsError(
            "invalid_config",
            f"Invalid value {value} for configuration {INTERVAL_MS}: Not a number of type INT",
        ) from None


def validate_client_metrics(name: str, configs: dict[str, str | None]) -> None:
    """A subscription's whole set of keys, as ClientMetricsConfigs.validate checks it (the
    controller runs it before writing the ConfigRecords). Raises ClientMetricsError."""
    if not name:
        raise ClientMetricsError("invalid_request", "Subscription name can't be empty")
    for key in configs:
        if key not in CLIENT_METRICS_CONFIGS:
            raise ClientMetricsError("invalid_request", f"Unknown client metrics configuration: {key}")
    if configs.get(INTERVAL_MS) is not None:
        interval = parse_interval(configs[INTERVAL_MS])
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise ClientMetricsError(
                "invalid_request",
                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 and 3600000 (1 hour)",
            )
    if configs.get(MATCH) is not None:
        parse_match(split_list(configs[MATCH]))


class Subscription:
    """One named subscription, parsed."""

    __slots__ = ("name", "metrics", "interval_ms", "match")

    def __init__(self, name: str, configs: dict[str, str]):
        self.name = name
        self.metrics = split_list(configs.get(METRICS))
        self.interval_ms = parse_interval(configs[INTERVAL_MS]) if configs.get(INTERVAL_MS) else DEFAULT_INTERVAL_MS
        self.match = parse_match(split_list(configs.get(MATCH)))

    def matches(self, attributes: dict[str, str]) -> bool:
        """Every selector's regex matches the client's whole value (Java's ``Matcher.matches``);
        a subscription without ``match`` takes every client."""
        for selector, regex in self.match.items():
            value = attributes.get(selector)
            if value is None or regex.fullmatch(value) is None:
                return False
        return True
