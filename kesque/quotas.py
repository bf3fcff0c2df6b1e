"""Client quotas, sans-IO: entities, precedence, sampled rates and throttle times.

Kafka's quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599) as its default quota callback
applies them. A quota is set on an *entity*: a user, a client id, or a (user, client id)
pair, where either name may be the default (``None`` here, ``<default>`` in tools). For a
request from ``user`` with ``client_id`` the most specific entity that has a quota of the
type wins, in Kafka's order of eight levels::

    1 /users/<user>/clients/<client-id>     5 /users/<default>/clients/<default>
    2 /users/<user>/clients/<default>       6 /users/<default>
    3 /users/<user>                         7 /clients/<client-id>
    4 /users/<default>/clients/<client-id>  8 /clients/<default>

Without authentication every connection's user is ``ANONYMOUS``. The level also decides
which clients share one measured rate: a quota on a user (levels 3 and 6) is shared by all
of that user's client ids; a client-id level gives each client id its own rate.

Rates are Kafka's ``Rate`` over a ``SampledStat``: ``quota.window.num`` samples of
``quota.window.size.seconds`` each; the window of a rate is the time since its oldest live
sample, but never less than ``num - 1`` whole samples. A request that takes a rate above its
bound ``T`` to ``O`` is delayed by ``(O - T) / T * window`` ms, the time after which the rate
over the longer window falls back to ``T`` (QuotaUtils.throttleTime); request-time quotas cap
the delay at one sample window. Time is passed in (milliseconds); nothing here does I/O.
"""

from __future__ import annotations

import logging
import math

from .errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ANONYMOUS = "ANONYMOUS"

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"
CONNECTION = "connection_creation_rate"

# the quota keys of each kind of entity, with Kafka's declared types (QuotaConfig)
CLIENT_QUOTA_KEYS = {PRODUCE: "LONG", FETCH: "LONG", REQUEST: "DOUBLE", MUTATION: "DOUBLE"}
IP_QUOTA_KEYS = {CONNECTION: "INT"}
_TYPE_MAX = {"SHORT": (32767, "a SHORT"), "INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG")}

INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000  # Kafka's ClientQuotaManager.InactiveSensorExpirationTimeSeconds

Entity = tuple  # sorted ((entity type, name or None for the default), ...)


def entity_key(entries: dict[str, str | None]) -> Entity:
    return tuple(sorted(entries.items()))


def entity_text(entity: Entity) -> str:
    """Kafka's ClientQuotaEntity.toString, used in error messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def precedence(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """The eight levels for (user, client id), most specific first, each with the metric
    tags (user, client id) of the rate it is measured in."""
    u, c = user, client_id
    return [
        (entity_key({USER: u, CLIENT_ID: c}), (u, c)),
        (entity_key({USER: u, CLIENT_ID: None}), (u, c)),
        (entity_key({USER: u}), (u, "")),
        (entity_key({USER: None, CLIENT_ID: c}), (u, c)),
        (entity_key({USER: None, CLIENT_ID: None}), (u, c)),
        (entity_key({USER: None}), (u, "")),
        (entity_key({CLIENT_ID: c}), ("", c)),
        (entity_key({CLIENT_ID: None}), ("", c)),
    ]


def resolve(quotas: dict[Entity, float], user: str, client_id: str) -> tuple[float | None, tuple[str, str]]:
    """The bound that applies to (user, client id) among ``quotas`` (one quota type) and the
    tags of the rate it is measured in; (None, ...) when no level has a quota. As in Kafka,
    an empty client id matches no level that has a client id, default or not."""
    names = {USER: user, CLIENT_ID: client_id}
    for entity, tags in precedence(user, client_id):
        bound = quotas.get(entity)
        if bound is not None and all(names[t] for t, _n in entity):
            return bound, tags
    return None, (user, client_id)


# ================================================================== validation
def validate_entity(entries: list[tuple[str, str | None]]) -> dict[str, str | None]:
    """ClientQuotaControlManager.validateEntity + configKeysForEntityType: the entity's
    {type: name}, or KafkaError(INVALID_REQUEST)."""
    if not entries:
        raise KafkaError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    out: dict[str, str | None] = {}
    for etype, name in entries:
        if etype in out:
            raise KafkaError(ErrorCode.invalid_request, f"Invalid client quota entity, duplicate entity entry {etype}")
        if etype not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.invalid_request, f"Unhandled client quota entity type: {etype}")
        out[etype] = name
        if name is not None and name == "":
            raise KafkaError(ErrorCode.invalid_request, f"Empty {etype} not supported")
    if IP in out and (USER in out or CLIENT_ID in out):
        raise KafkaError(
            ErrorCode.invalid_request,
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        )
    return out


def quota_keys_for(entity: dict[str, str | None]) -> dict[str, str]:
    return IP_QUOTA_KEYS if IP in entity else CLIENT_QUOTA_KEYS


def validate_quota_value(keys: dict[str, str], key: str, value: float) -> None:
    """ClientQuotaControlManager.validateQuotaKeyValue."""
    ktype = keys.get(key)
    if ktype is None:
        raise KafkaError(ErrorCode.invalid_request, f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN too
        raise KafkaError(ErrorCode.invalid_request, f"Quota {key} must be greater than 0")
    if ktype == "DOUBLE":
        return
    limit, name = _TYPE_MAX[ktype]
    if value > limit:
        raise KafkaError(ErrorCode.invalid_request, f"Proposed value for {key} is too large for {name}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise KafkaError(ErrorCode.invalid_request, f"{key} cannot be a fractional value.")


# ================================================================== rates
class Rate:
    """Kafka's Rate over a WindowedSum: ``num`` samples of ``window_ms``, plus one
    overlapping placeholder. A sample is ``[value, start_ms, last_event_ms, count]``.
    The sum, the oldest start and the time of the next expiry are kept up to date, so a
    record and a measure cost a few operations (the samples are walked about once a window)."""

    __slots__ = ("num", "window_ms", "expire_ms", "samples", "current", "total", "oldest_start", "purge_at")

    def __init__(self, num: int, window_ms: int):
        self.num = num
        self.window_ms = window_ms
        self.expire_ms = num * window_ms
        self.samples: list[list] = []
        self.current = 0
        self.total = 0.0
        self.oldest_start = 0
        self.purge_at = math.inf

    def _refresh(self) -> None:
        samples = self.samples
        self.total = sum(s[0] for s in samples)
        self.oldest_start = min(s[1] for s in samples)
        self.purge_at = min(s[2] for s in samples) + self.expire_ms

    def record(self, value: float, now_ms: int) -> None:
        samples = self.samples
        if not samples:
            samples.append([0.0, now_ms, now_ms, 0])
            self._refresh()
        s = samples[self.current]
        if now_ms - s[1] >= self.window_ms:
            self.current = (self.current + 1) % (self.num + 1)
            if self.current >= len(samples):
                s = [0.0, now_ms, now_ms, 0]
                samples.append(s)
            else:
                s = samples[self.current]
                s[0], s[1], s[2], s[3] = 0.0, now_ms, now_ms, 0
            self._refresh()
        s[0] += value
        s[2] = now_ms
        s[3] += 1
        self.total += value

    def _purge(self, now_ms: int) -> None:
        if now_ms < self.purge_at:
            return
        expire = self.expire_ms
        for s in self.samples:
            if now_ms - s[2] >= expire:
                s[0], s[1], s[2], s[3] = 0.0, now_ms, now_ms, 0
        self._refresh()

    def window_size(self, now_ms: int) -> int:
        """Rate.windowSize: time since the oldest live sample, at least num - 1 windows."""
        if not self.samples:
            self.samples.append([0.0, now_ms, now_ms, 0])
            self._refresh()
        self._purge(now_ms)
        elapsed = now_ms - self.oldest_start
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        window = self.window_size(now_ms)
        return self.total / (window / 1000.0)

    @property
    def last_ms(self) -> int:
        return max((s[2] for s in self.samples), default=0)


class SimpleRate(Rate):
    """Kafka's SimpleRate (the replication quotas' rate): the window is the time since the
    oldest live sample began, but at least one sample window (no padding to ``num - 1``)."""

    __slots__ = ()

    def window_size(self, now_ms: int) -> int:
        if not self.samples:
            self.samples.append([0.0, now_ms, now_ms, 0])
            self._refresh()
        self._purge(now_ms)
        return max(now_ms - self.oldest_start, self.window_ms)


class Sensor:
    """One measured rate (a set of metric tags) and its throttle statistics.

    Records taken on the fast path (within the headroom of the last measure, see
    :meth:`ClientQuotaManager.record`) are only added to ``pending``; :meth:`fold` moves them
    into the rate's current sample before anything reads or moves the samples. The fast path
    never runs past the end of the current sample, so the fold lands where recording each
    value would have."""

    __slots__ = (
        "rate",
        "bound",
        "throttle_ms",
        "throttle_count",
        "throttle_ms_total",
        "throttle_count_total",
        "recorded",
        "fast_until",
        "headroom",
        "pending",
        "pending_ms",
        "pending_n",
    )

    def __init__(self, num: int, window_ms: int):
        self.rate = Rate(num, window_ms)
        self.bound = 0.0
        self.throttle_ms = 0
        self.throttle_count = 0
        # since the sensor was made (the ones above restart at each report): the metrics' counters
        self.throttle_ms_total = 0
        self.throttle_count_total = 0
        self.recorded = 0.0
        # until ``fast_until`` (ms), ``headroom`` more can be recorded without measuring: see
        # ClientQuotaManager.record
        self.fast_until = 0
        self.headroom = 0.0
        self.pending = 0.0  # recorded on the fast path, not yet in the current sample
        self.pending_ms = 0  # the time of the last of them
        self.pending_n = 0

    def fold(self) -> None:
        if self.pending_n:
            rate = self.rate
            s = rate.samples[rate.current]
            s[0] += self.pending
            s[2] = self.pending_ms
            s[3] += self.pending_n
            rate.total += self.pending
            self.recorded += self.pending
            self.pending = 0.0
            self.pending_n = 0


def throttle_time(observed: float, bound: float, window_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay after which ``observed`` over the window (plus
    the delay) falls back to ``bound``."""
    return int(math.floor((observed - bound) / bound * window_ms + 0.5))


class ClientQuotaManager:
    """The quotas of one type (a ClientQuotaManager in Kafka) and the rates they measure."""

    def __init__(self, quota_type: str, samples: int, window_seconds: int, max_throttle_ms: int | None = None):
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.max_throttle_ms = max_throttle_ms
        self.quotas: dict[Entity, float] = {}
        self.enabled = False
        self.sensors: dict[tuple[str, str], Sensor] = {}
        self._resolved: dict[tuple[str, str], tuple[float | None, tuple[str, str]]] = {}
        self._sensor_of: dict[tuple[str, str], Sensor] = {}  # (user, client id) -> its rate, when it has a quota

    def update(self, quotas: dict[Entity, float]) -> None:
        """Replace this type's quotas (the rates measured so far are kept, as in Kafka)."""
        if quotas != self.quotas:
            for entity in set(quotas) | set(self.quotas):
                old, new = self.quotas.get(entity), quotas.get(entity)
                if old != new:
                    what = (
                        f"Changing {self.quota_type} quota for {entity_text(entity)} to {new}"
                        if new is not None
                        else f"Removing {self.quota_type} quota for {entity_text(entity)}"
                    )
                    log.info(what)
        self.quotas = dict(quotas)
        self.enabled = bool(quotas)
        self._resolved.clear()
        self._sensor_of.clear()

    def quota(self, user: str, client_id: str) -> tuple[float | None, tuple[str, str]]:
        key = (user, client_id)
        got = self._resolved.get(key)
        if got is None:
            got = self._resolved[key] = resolve(self.quotas, user, client_id)
        return got

    def _sensor(self, tags: tuple[str, str]) -> Sensor:
        s = self.sensors.get(tags)
        if s is None:
            s = self.sensors[tags] = Sensor(self.samples, self.window_ms)
        return s

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client; the throttle time in ms (0: within its quota)."""
        sensor = self._sensor_of.get((user, client_id))
        if sensor is not None and now_ms < sensor.fast_until and value <= sensor.headroom:
            # the common case, without measuring: the rate cannot pass the bound (see below)
            sensor.headroom -= value
            sensor.pending += value
            sensor.pending_ms = now_ms
            sensor.pending_n += 1
            return 0
        return self._record_measured(user, client_id, sensor, value, now_ms)

    def _record_measured(self, user: str, client_id: str, sensor: Sensor | None, value: float, now_ms: int) -> int:
        if sensor is None:
            bound, tags = self.quota(user, client_id)
            if bound is None:
                return 0
            sensor = self._sensor_of[(user, client_id)] = self._sensor(tags)
            sensor.bound = bound
            sensor.fast_until = 0
        sensor.fold()
        bound = sensor.bound
        rate = sensor.rate
        rate.record(value, now_ms)
        sensor.recorded += value
        window = rate.window_size(now_ms)
        observed = rate.total / (window / 1000.0)
        if observed <= bound:
            # Until the current sample ends, a sample expires, or the window's padding drops
            # (window_size steps down at each whole window past the oldest start), no sample
            # moves and the window only grows: the rate stays within the bound while what is
            # recorded meanwhile adds up to at most the headroom measured now.
            elapsed = now_ms - rate.oldest_start
            sensor.fast_until = min(
                rate.samples[rate.current][1] + rate.window_ms,
                rate.purge_at,
                rate.oldest_start + (elapsed // rate.window_ms + 1) * rate.window_ms,
            )
            sensor.headroom = bound * window / 1000.0 - rate.total
            return 0
        sensor.fast_until = 0  # over the bound: measure every record until it is back within
        ms = throttle_time(observed, bound, window)
        if self.max_throttle_ms is not None:
            ms = min(ms, self.max_throttle_ms)
        if ms > 0:
            sensor.throttle_ms += ms
            sensor.throttle_count += 1
            sensor.throttle_ms_total += ms
            sensor.throttle_count_total += 1
            log.debug(
                "Quota %s violated for user=%s client-id=%s: rate %.1f > %s; delay %d ms",
                self.quota_type,
                user,
                client_id,
                observed,
                bound,
                ms,
            )
        return max(ms, 0)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        bound, tags = self.quota(user, client_id)
        if bound is not None:
            sensor = self._sensor(tags)
            sensor.fold()
            sensor.rate.record(-value, now_ms)
            sensor.recorded -= value

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """getMaxValueInQuotaWindow: the most one request may take (fetch max bytes)."""
        bound, _tags = self.quota(user, client_id)
        return math.inf if bound is None else bound * (self.samples - 1) * self.window_ms / 1000

    def rates(self, now_ms: int) -> list[tuple[str, str, float, int, int]]:
        """(user, client id, rate per second, throttle ms so far, throttles so far) of each
        entity measured (the metrics endpoint reads them at scrape time)."""
        out = []
        for (user, client_id), s in list(self.sensors.items()):
            s.fold()
            out.append((user, client_id, s.rate.measure(now_ms), s.throttle_ms_total, s.throttle_count_total))
        return out

    def report(self, now_ms: int) -> list[str]:
        """One line per rate measured since the last report (the broker logs them), and the
        rates idle for an hour forgotten."""
        lines = []
        for tags, s in list(self.sensors.items()):
            s.fold()
            if now_ms - s.rate.last_ms >= INACTIVE_SENSOR_EXPIRATION_MS:
                del self.sensors[tags]
                self._sensor_of.clear()
                continue
            if s.recorded or s.throttle_count:
                lines.append(
                    f"{self.quota_type} user={tags[0]!r} client-id={tags[1]!r}: rate "
                    f"{s.rate.measure(now_ms):.1f}/s (quota {s.bound:g}), "
                    f"throttled {s.throttle_count} time(s) "
                    f"for {s.throttle_ms} ms"
                )
                s.recorded = 0.0
                s.throttle_ms = s.throttle_count = 0
        return lines


# ================================================================== controller mutations (KIP-599)
THROTTLING_QUOTA_EXCEEDED = "The throttling quota has been exceeded."


class TokenBucket:
    """Kafka's TokenBucket stat: full (``burst`` = samples x window x quota) at first,
    refilled at ``quota`` tokens per second, emptied by each mutation (partitions)."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self):
        self.tokens: float | None = None
        self.last_ms = 0

    def measure(self, quota: float, burst: float, now_ms: int) -> float:
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms
        return self.tokens

    def record(self, quota: float, burst: float, permits: float, now_ms: int) -> float:
        self.tokens = min(burst, self.measure(quota, burst, now_ms) - permits)
        return self.tokens


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict/PermissiveControllerMutationQuota).
    ``record(partitions)`` is called per topic; a strict quota (the versions that know
    THROTTLING_QUOTA_EXCEEDED) refuses a topic once the bucket is below zero, a permissive one
    accepts it and only delays the client."""

    def __init__(self, bucket: TokenBucket, bound: float, burst: float, strict: bool, clock):
        self.bucket, self.bound, self.burst, self.strict, self.clock = bucket, bound, burst, strict, clock
        self._throttle_ms = 0
        self._recorded_ms = 0

    def _violated(self, tokens: float, now_ms: int) -> None:
        self._throttle_ms = int(math.floor(-tokens / self.bound * 1000 + 0.5))
        self._recorded_ms = now_ms

    def record(self, permits: float) -> None:
        now = self.clock()
        if self.strict:
            tokens = self.bucket.measure(self.bound, self.burst, now)
            if tokens < 0:
                self._violated(tokens, now)
                raise KafkaError(ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED)
            self.bucket.record(self.bound, self.burst, permits, now)
        else:
            tokens = self.bucket.record(self.bound, self.burst, permits, now)
            if tokens < 0:
                self._violated(tokens, now)

    def throttle_time(self) -> int:
        """The delay recorded, less the time since (the request may have waited)."""
        return max(0, self._throttle_ms - (self.clock() - self._recorded_ms))


class MutationQuotaManager(ClientQuotaManager):
    """controller_mutation_rate: partitions created or deleted per second, as a token bucket."""

    def __init__(self, samples: int, window_seconds: int):
        super().__init__(MUTATION, samples, window_seconds)
        self.buckets: dict[tuple[str, str], TokenBucket] = {}

    def new_quota(self, user: str, client_id: str, strict: bool, clock) -> MutationQuota | None:
        """The request's quota (None: unbounded); ``clock()`` gives milliseconds."""
        bound, tags = self.quota(user, client_id)
        if bound is None:
            return None
        bucket = self.buckets.get(tags)
        if bucket is None:
            bucket = self.buckets[tags] = TokenBucket()
        return MutationQuota(bucket, bound, self.samples * self.window_ms / 1000 * bound, strict, clock)


# ================================================================== connections (KIP-612, max.connections.per.ip)
def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,ip:count`` (hosts as given; an
    entry whose count is not a number is left out)."""
    out = {}
    for item in (text or "").split(","):
        host, _, count = item.strip().rpartition(":")
        if host.strip() and count.strip().isdigit():
            out[host.strip()] = int(count)
    return out


class ConnectionQuotas:
    """Kafka's ConnectionQuotas for one broker: the number of connections per IP
    (``max.connections.per.ip`` and its overrides) and the rate of new connections per IP
    (``connection_creation_rate`` quotas on ip entities: /ips/<ip>, else /ips/<default>).
    ``admit`` answers (accepted, delay ms, reason); a refused connection is closed (by Kafka
    after the delay when the rate was exceeded, at once when the count was)."""

    def __init__(self, samples: int = 11, window_seconds: int = 1):
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.counts: dict[str, int] = {}
        self.rate_quotas: dict[str | None, float] = {}
        self.rates: dict[str, Rate] = {}

    def update(self, client_quotas: dict[Entity, dict[str, float]]) -> None:
        self.rate_quotas = {
            dict(e)[IP]: v[CONNECTION]
            for e, v in client_quotas.items()
            if CONNECTION in v and len(e) == 1 and e[0][0] == IP
        }
        for ip in [ip for ip in self.rates if self._rate_bound(ip) is None]:
            del self.rates[ip]

    def _rate_bound(self, ip: str) -> float | None:
        bound = self.rate_quotas.get(ip)
        return self.rate_quotas.get(None) if bound is None else bound

    def admit(self, ip: str, limit: int, now_ms: int) -> tuple[bool, int, str]:
        """``limit``: this IP's max.connections.per.ip (override or default)."""
        n = self.counts.get(ip, 0)
        if n >= limit:
            return False, 0, f"Too many connections from {ip} (maximum = {limit})"
        bound = self._rate_bound(ip)
        if bound is not None:
            rate = self.rates.get(ip)
            if rate is None:
                rate = self.rates[ip] = Rate(self.samples, self.window_ms)
            rate.record(1.0, now_ms)
            observed = rate.measure(now_ms)
            if observed > bound:
                rate.record(-1.0, now_ms)  # the connection is closed: it does not count
                delay = min(throttle_time(observed, bound, rate.window_size(now_ms)), self.window_ms)
                return False, delay, f"Connection rate from {ip} exceeds its quota of {bound:g}/s"
        self.counts[ip] = n + 1
        return True, 0, ""

    def release(self, ip: str) -> None:
        n = self.counts.get(ip, 0) - 1
        if n > 0:
            self.counts[ip] = n
        else:
            self.counts.pop(ip, None)


class Quotas:
    """All client quota managers of a broker, fed from the metadata image."""

    def __init__(
        self,
        samples: int = 11,
        window_seconds: int = 1,
        controller_samples: int = 11,
        controller_window_seconds: int = 1,
    ):
        self.produce = ClientQuotaManager(PRODUCE, samples, window_seconds)
        self.fetch = ClientQuotaManager(FETCH, samples, window_seconds)
        self.request = ClientQuotaManager(REQUEST, samples, window_seconds, max_throttle_ms=window_seconds * 1000)
        self.mutation = MutationQuotaManager(controller_samples, controller_window_seconds)
        self.managers = (self.produce, self.fetch, self.request, self.mutation)
        self.connections = ConnectionQuotas(samples, window_seconds)

    @classmethod
    def from_config(cls, config) -> Quotas:
        return cls(
            config.get("quota.window.num"),
            config.get("quota.window.size.seconds"),
            config.get("controller.quota.window.num"),
            config.get("controller.quota.window.size.seconds"),
        )

    def update(self, client_quotas: dict[Entity, dict[str, float]]) -> None:
        for m in self.managers:
            m.update({e: q[m.quota_type] for e, q in client_quotas.items() if m.quota_type in q})
        self.connections.update(client_quotas)

    def report(self, now_ms: int) -> list[str]:
        return [line for m in self.managers for line in m.report(now_ms)]
