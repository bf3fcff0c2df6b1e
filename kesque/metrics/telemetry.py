"""KIP-714 client telemetry: the broker side of GetTelemetrySubscriptions and PushTelemetry
(Kafka's ClientMetricsManager), and the clients' pushed metrics kept for ``/metrics``.

A client asks which metrics to push (GetTelemetrySubscriptions): the broker matches it against
the CLIENT_METRICS subscriptions in the metadata image (:mod:`kesque.config.client_metrics`)
and answers with a client instance id, the union of the matching subscriptions' metric prefixes,
their shortest push interval, the compression types it accepts and a subscription id. The client
then pushes (PushTelemetry) an OpenTelemetry ``MetricsData`` protobuf, possibly compressed, every
interval; the broker checks it as Kafka does (too early: THROTTLING_QUOTA_EXCEEDED; another
subscription id: UNKNOWN_SUBSCRIPTION_ID; a codec it does not know: UNSUPPORTED_COMPRESSION_TYPE;
larger than ``telemetry.max.bytes``: TELEMETRY_TOO_LARGE; a payload that does not decode:
INVALID_RECORD, Kafka's answer when its receiver plugin fails) and keeps the last value of each
series per client instance, which the metrics endpoint shows (docs/metrics.md, "Client
telemetry"). Kafka hands the payload to a ``ClientTelemetryReceiver`` plugin and advertises the
two APIs only when one is configured; kesque's receiver is its own ``/metrics``, so it serves
them when ``metrics.listener`` is set.

Everything here runs on the event loop (the handlers and the endpoint's snapshot); the protobuf
is decoded by opentelemetry-proto's generated classes (upb, in C).
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from crc32c import crc32c as crc32c_of
from google.protobuf.message import DecodeError
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from ..config.client_metrics import (
    ALL_METRICS,
    CLIENT_ID,
    CLIENT_INSTANCE_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
    DEFAULT_INTERVAL_MS,
    ClientMetricsError,
    Subscription,
)
from ..errors import ErrorCode, KafkaError
from ..records.compression import CompressionError, decompress

# the codecs a client may compress its push with, in Kafka's order of preference
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)  # zstd, lz4, gzip, snappy
KNOWN_COMPRESSION_TYPES = frozenset(range(5))  # CompressionType.forId: none, gzip, snappy, lz4, zstd
CACHE_MAX_SIZE = 16384  # client instances kept per broker (Kafka's LRU cache)
CACHE_EXPIRY_MS = 60_000  # an instance silent for max(this, 3 push intervals) is forgotten
ZERO_UUID = uuid.UUID(int=0)
RESERVED_UUIDS = frozenset({ZERO_UUID, uuid.UUID(int=1)})  # Kafka's Uuid.RESERVED


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def _java_uuid_hash(u: uuid.UUID) -> int:
    msb, lsb = u.int >> 64, u.int & ((1 << 64) - 1)
    h = msb ^ lsb
    return ((h >> 32) ^ h) & 0xFFFFFFFF


def subscription_id(metrics: list[str], interval_ms: int, instance: uuid.UUID) -> int:
    """Kafka's computeSubscriptionId: the CRC32C of the metric prefixes (as a Java set prints
    them) and the interval, XORed with the instance id's hash, as a signed int32. kesque lists
    the prefixes sorted, so every broker computes the same id for the same subscriptions."""
    text = "[" + ", ".join(metrics) + "]" + str(interval_ms)
    v = crc32c_of(text.encode()) ^ _java_uuid_hash(instance)
    return v - (1 << 32) if v >= 1 << 31 else v


class ClientInstance:
    """One client instance as the broker knows it (ClientMetricsInstance)."""

    __slots__ = (
        "id",
        "attributes",
        "version",
        "metrics",
        "interval_ms",
        "subscription_id",
        "last_get_ms",
        "last_push_ms",
        "last_seen_ms",
        "terminating",
        "last_error",
    )

    def __init__(self, id_: uuid.UUID, attributes: dict[str, str], version: int, subscriptions):
        self.id = id_
        self.attributes = attributes
        self.version = version
        interval, metrics, everything = DEFAULT_INTERVAL_MS, set(), False
        for sub in subscriptions:
            if sub.matches(attributes):
                everything = everything or ALL_METRICS in sub.metrics
                metrics.update(sub.metrics)
                interval = min(interval, sub.interval_ms)
        self.metrics = [ALL_METRICS] if everything else sorted(metrics)
        self.interval_ms = interval
        self.subscription_id = subscription_id(self.metrics, interval, id_)
        self.last_get_ms = self.last_push_ms = self.last_seen_ms = 0
        self.terminating = False
        self.last_error = ErrorCode.none

    def may_get(self, now_ms: int) -> bool:
        """maybeUpdateGetRequestTimestamp: a push interval since the last get or push."""
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def may_push(self, now_ms: int) -> bool:
        """maybeUpdatePushRequestTimestamp: the first push after a get, or a push interval since
        the last push."""
        ok = self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.interval_ms
        if ok:
            self.last_push_ms = now_ms
        return ok


class ClientTelemetry:
    """The subscriptions (read from ``image.configs`` when the image moved on), the client
    instances (an LRU of CACHE_MAX_SIZE, expired after three push intervals), and each instance's
    pushed series."""

    def __init__(self, image, max_bytes: int, now_ms: Callable[[], int] | None = None):
        self.image = image
        self.max_bytes = max_bytes
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        # instance id -> {(metric name, kind, label items): value}
        self.series: dict[uuid.UUID, dict[tuple, list]] = {}
        self.version = 0
        self._subs: dict[str, dict[str, str]] = {}
        self._parsed: list[Subscription] = []
        self._image_offset = None

    # ------------------------------------------------------------------ subscriptions
    def subscriptions(self) -> list[Subscription]:
        """The CLIENT_METRICS subscriptions of the image; a change bumps the version, so that
        each instance is matched again at its next request (Kafka's subscriptionUpdateVersion)."""
        offset = getattr(self.image, "offset", None)
        if offset != self._image_offset or offset is None:
            self._image_offset = offset
            subs = {name: dict(cfg) for (rtype, name), cfg in self.image.configs.items() if rtype == 16 and cfg}
            if subs != self._subs:
                self._subs = subs
                self._parsed = []
                for name, cfg in sorted(subs.items()):
                    try:
                        self._parsed.append(Subscription(name, cfg))
                    except ClientMetricsError:  # the controller checked it: only a hand-made log has one
                        continue
                self.version += 1
        return self._parsed

    def names(self) -> list[str]:
        self.subscriptions()
        return sorted(self._subs)

    # ------------------------------------------------------------------ instances
    def _instance(self, id_: uuid.UUID, attributes: Callable[[], dict[str, str]], now_ms: int) -> ClientInstance:
        subs = self.subscriptions()
        inst = self.instances.get(id_)
        if inst is None or inst.version < self.version:
            attrs = attributes() if inst is None else inst.attributes
            inst = self.instances[id_] = ClientInstance(id_, attrs, self.version, subs)
        self.instances.move_to_end(id_)
        inst.last_seen_ms = now_ms
        self.expire(now_ms)
        return inst

    def expire(self, now_ms: int) -> None:
        """Forget the instances past CACHE_MAX_SIZE and those silent too long (Kafka's
        expiration timer), with their series."""
        while len(self.instances) > CACHE_MAX_SIZE:
            gone, _ = self.instances.popitem(last=False)
            self.series.pop(gone, None)
        for id_ in [
            i
            for i, inst in self.instances.items()
            if now_ms - inst.last_seen_ms > max(CACHE_EXPIRY_MS, 3 * inst.interval_ms)
        ]:
            del self.instances[id_]
            self.series.pop(id_, None)

    def get_subscriptions(self, requested: uuid.UUID | None, attributes: Callable[[str], dict[str, str]]):
        """GetTelemetrySubscriptions: (the instance, its id) or raises KafkaError
        (THROTTLING_QUOTA_EXCEEDED before the push interval). ``attributes(instance id)``: the
        client's match attributes (asked only for an instance this broker does not know)."""
        now = self.now_ms()
        id_ = requested if requested is not None and requested != ZERO_UUID else self._new_id()
        inst = self._instance(id_, lambda: attributes(kafka_uuid(id_)), now)
        if not inst.may_get(now):
            raise KafkaError(
                ErrorCode.throttling_quota_exceeded,
                f"Request from the client [{kafka_uuid(id_)}] arrived before the next push interval time",
            )
        inst.last_error = ErrorCode.none
        return inst

    def _new_id(self) -> uuid.UUID:
        while True:
            u = uuid.uuid4()
            if u not in self.instances and u not in RESERVED_UUIDS:
                return u

    def push(self, req, attributes: Callable[[str], dict[str, str]]) -> None:
        """PushTelemetry: checked as Kafka's validatePushRequest, then the payload decoded into
        the instance's series. Raises KafkaError with the code the response carries."""
        id_ = req.client_instance_id
        if id_ is None or id_ in RESERVED_UUIDS:
            raise KafkaError(
                ErrorCode.invalid_request, f"Invalid request from the client [{id_}], invalid client instance id"
            )
        now = self.now_ms()
        name = kafka_uuid(id_)
        inst = self._instance(id_, lambda: attributes(name), now)
        try:
            if inst.terminating:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Client [{name}] sent the previous request with state terminating to TRUE, can not accept"
                    "any requests after that",
                )
            if not inst.may_push(now) and not req.terminating:
                raise KafkaError(
                    ErrorCode.throttling_quota_exceeded,
                    f"Request from the client [{name}] arrived before the next push interval time",
                )
            if req.subscription_id != inst.subscription_id:
                raise KafkaError(
                    ErrorCode.unknown_subscription_id, f"Unknown client subscription id for the client [{name}]"
                )
            if req.compression_type not in KNOWN_COMPRESSION_TYPES:
                raise KafkaError(
                    ErrorCode.unsupported_compression_type,
                    f"Unknown compression type [{req.compression_type}] is received in telemetry request from [{name}]",
                )
            if req.metrics is not None and len(req.metrics) > self.max_bytes:
                raise KafkaError(
                    ErrorCode.telemetry_too_large,
                    f"Telemetry request from [{name}] is larger than the maximum allowed size [{self.max_bytes}]",
                )
        except KafkaError as e:
            inst.last_error = e.code
            raise
        finally:
            inst.terminating = bool(req.terminating)
        if req.metrics:
            try:
                self._record(inst, decode(req.compression_type, req.metrics))
            except (DecodeError, CompressionError, ValueError) as e:
                inst.last_error = ErrorCode.invalid_record
                raise KafkaError(ErrorCode.invalid_record, f"client metrics of {name}: {e}") from None
        inst.last_error = ErrorCode.none

    def _record(self, inst: ClientInstance, data: MetricsData) -> None:
        """Each data point into the instance's series: a gauge's last value, a sum added up
        (the broker asks for delta temporality) or replaced (a cumulative one), a histogram's
        count and sum likewise."""
        series = self.series.setdefault(inst.id, {})
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    if kind == "gauge":
                        for p in m.gauge.data_points:
                            series[(m.name, "gauge", _labels(p))] = [_number(p)]
                    elif kind == "sum":
                        delta = m.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
                        k = "counter" if m.sum.is_monotonic else "gauge"
                        for p in m.sum.data_points:
                            key = (m.name, k, _labels(p))
                            old = series.get(key)
                            v = _number(p)
                            series[key] = [old[0] + v] if delta and old is not None else [v]
                    elif kind == "histogram":
                        delta = (
                            m.histogram.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
                        )
                        for p in m.histogram.data_points:
                            key = (m.name, "summary", _labels(p))
                            old = series.get(key)
                            if delta and old is not None:
                                series[key] = [old[0] + p.count, old[1] + p.sum]
                            else:
                                series[key] = [p.count, p.sum]

    def snapshot(self):
        """A copy for the endpoint (on the loop): [(instance attributes, {series key: value})]."""
        self.expire(self.now_ms())
        out = []
        for id_, inst in self.instances.items():
            s = self.series.get(id_)
            if s:
                out.append((dict(inst.attributes), {k: tuple(v) for k, v in s.items()}))
        return out


def decode(compression_type: int, payload: bytes) -> MetricsData:
    """A push's payload: decompressed, then parsed as OTLP ``MetricsData``."""
    raw = bytes(decompress(compression_type, payload)) if compression_type else bytes(payload)
    data = MetricsData()
    data.ParseFromString(raw)
    return data


def _number(p) -> float:
    return p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)


_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def _labels(p) -> tuple:
    """A data point's attributes as Prometheus labels (names sanitised, values as strings)."""
    out = []
    for kv in p.attributes:
        v = kv.value
        which = v.WhichOneof("value")
        out.append((_LABEL.sub("_", kv.key), str(getattr(v, which)) if which else ""))
    return tuple(sorted(out))


def metric_name(otlp_name: str) -> str:
    """An OTLP metric name as a Prometheus one: ``org.apache.kafka.producer.node.request.latency.avg``
    -> ``org_apache_kafka_producer_node_request_latency_avg`` (every character but letters,
    digits and ``_`` becomes ``_``)."""
    name = _LABEL.sub("_", otlp_name)
    return "_" + name if name[:1].isdigit() else name


def client_attributes(instance_id: str, client_id, software, peer) -> dict[str, str]:
    """The match attributes of a client (ClientMetricsInstanceMetadata)."""
    name, version = software or ("unknown", "unknown")
    host, port = (peer or ("", 0))[:2]
    return {
        CLIENT_INSTANCE_ID: instance_id,
        CLIENT_ID: client_id or "",
        CLIENT_SOFTWARE_NAME: name,
        CLIENT_SOFTWARE_VERSION: version,
        CLIENT_SOURCE_ADDRESS: str(host),
        CLIENT_SOURCE_PORT: str(port),
    }


# the client attributes each pushed series carries as labels
LABELED_ATTRIBUTES = (CLIENT_INSTANCE_ID, CLIENT_ID, CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION)


def client_families(rows):
    """The pushed series of ``ClientTelemetry.snapshot()`` as prometheus-client families, one
    per metric name (in the HTTP thread)."""
    fams: dict[str, Metric] = {}
    for attrs, series in rows:
        base = {k: attrs.get(k, "") for k in LABELED_ATTRIBUTES}
        for (otlp, kind, labels), value in sorted(series.items()):
            name = metric_name(otlp)
            if kind == "counter" and name.endswith("_total"):
                name = name[: -len("_total")]  # the sample takes the suffix back
            fam = fams.get(name)
            if fam is None:
                fam = fams[name] = Metric(name, f"KIP-714 client metric {otlp}", kind)
            elif fam.type != kind:
                continue  # a client pushing one name as two kinds: the first kept
            lab = {**base, **dict(labels)}
            if kind == "counter":
                fam.samples.append(Sample(name + "_total", lab, value[0]))
            elif kind == "summary":
                fam.samples.append(Sample(name + "_count", lab, value[0]))
                fam.samples.append(Sample(name + "_sum", lab, value[1]))
            else:
                fam.samples.append(Sample(name, lab, value[0]))
    return list(fams.values())
