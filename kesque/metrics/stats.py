"""The counters the request path keeps: plain integers in dicts, incremented on the event loop,
never locked (the endpoint copies them on the loop before it formats them: see
:mod:`kesque.metrics.endpoint`).

Kafka keeps the same facts in Yammer meters and histograms (``BrokerTopicStats``,
``RequestMetrics``); a meter's one-, five- and fifteen-minute rates are what Prometheus computes
from a counter with ``rate()``, so only the counts are kept here. The request time histograms keep
one count per bucket (``TOTAL_TIME_BUCKETS_MS``, Prometheus' ``le`` bounds) and a sum. The request
path only adds its readings to flat lists (``RequestMetrics.pending``, ``BrokerTopicStats.pending``);
they are folded into the counts in bulk, at a scrape's snapshot or when a list is full.
"""

from __future__ import annotations

import dataclasses
import time
from bisect import bisect_left

try:  # the compiled fold of the request time histograms (setup.py builds it where it can)
    from . import _cfold
except ImportError:  # pragma: no cover - no C compiler at install time
    _cfold = None

# the upper bounds (ms) of the request total time histogram's buckets (+Inf follows), and in ns
# (what the request path compares: no float arithmetic per request)
TOTAL_TIME_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
TOTAL_TIME_BUCKETS_NS = tuple(int(ms * 1_000_000) for ms in TOTAL_TIME_BUCKETS_MS)

# Kafka's RequestMetrics histograms that split a request's total time, in kesque's terms:
# RequestQueueTimeMs  from the read that brought the request's last bytes to its handler called
#                     (the requests before it in that read, a throttled connection's wait);
# LocalTimeMs         the handler's own run until it handed the rest to a wait, or, a handler
#                     that answers at once, until its response is queued on the connection
#                     (encoding included: Kafka's handler thread builds the response, then
#                     queues it and ends the local time there);
# RemoteTimeMs        that wait (acks=all replication, a fetch's min bytes, the controller's
#                     answer to a forwarded request, a coordinator's write); 0 for the others;
# ResponseQueueTimeMs after a wait, from its end to the response's bytes queued on the
#                     connection (encoding; the write itself when the connection is idle); 0
#                     for a request answered at once (Kafka's is the wait for a network thread).
PHASES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs")
PHASE_WIDTH = len(TOTAL_TIME_BUCKETS_NS) + 2  # buckets (+Inf last), then the sum
PHASE_SUM = PHASE_WIDTH - 1

# requests the request path notes (RequestMetrics.pending) before they are folded into the
# histograms in bulk: a scrape folds them at once, and so does the request that reaches this many
# (memory stays flat without scrapes)
PENDING_CAP = 1024
PENDING_FIELDS = 8  # RequestMetrics.pending's items per request
PRODUCED_FIELDS = 3  # BrokerTopicStats.pending's items per partition appended
PENDING_ITEMS = PENDING_CAP * PENDING_FIELDS  # RequestMetrics.pending is folded at this length
PRODUCED_ITEMS = PENDING_CAP * PRODUCED_FIELDS  # the Produce path folds its appends at this length

# per-topic counters (BrokerTopicStats' meters kesque keeps), by index in a topic's list
BYTES_IN, MESSAGES_IN, BYTES_OUT, BYTES_REJECTED, TOTAL_PRODUCE, FAILED_PRODUCE, TOTAL_FETCH, FAILED_FETCH = range(8)
# Kafka's meter names (kafka.server:type=BrokerTopicMetrics,name=<name>PerSec), in that order
TOPIC_METERS = (
    "BytesIn",
    "MessagesIn",
    "BytesOut",
    "BytesRejected",
    "TotalProduceRequests",
    "FailedProduceRequests",
    "TotalFetchRequests",
    "FailedFetchRequests",
)


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: bytes and messages in, bytes out, produce and fetch requests per
    topic. The all-topics meters are the sums at scrape time plus what deleted topics left behind
    (``retire``). The Produce path lists its appends (``pending``), folded at the snapshot."""

    __slots__ = ("topics", "retired", "replication_bytes_out", "replication_bytes_in", "pending")

    def __init__(self):
        self.topics: dict[str, list[int]] = {}
        # the Produce path's appends not counted yet, PRODUCED_FIELDS items each, flat: topic,
        # bytes, records (``produced``'s arguments; ``fold`` counts them)
        self.pending: list = []
        self.retired = [0] * len(TOPIC_METERS)  # the counts of topics no longer reported
        self.replication_bytes_out = 0
        self.replication_bytes_in = 0  # the records this broker appended as a follower

    def topic(self, name: str) -> list[int]:
        c = self.topics.get(name)
        if c is None:
            c = self.topics[name] = [0] * len(TOPIC_METERS)
        return c

    def produced(self, topic: str, nbytes: int, records: int) -> None:
        """A partition's records appended as leader (ReplicaManager.appendToLocalLog's marks)."""
        c = self.topics.get(topic) or self.topic(topic)
        c[BYTES_IN] += nbytes
        c[MESSAGES_IN] += records
        c[TOTAL_PRODUCE] += 1

    def fold(self) -> None:
        """The pending appends into their topics' counters (one pass per column when they are all
        of one topic, the usual case)."""
        p = self.pending
        if not p:
            return
        topics, sizes, records = p[0::PRODUCED_FIELDS], p[1::PRODUCED_FIELDS], p[2::PRODUCED_FIELDS]
        reset(p)
        n = len(topics)
        if topics.count(topics[0]) == n:
            c = self.topics.get(topics[0]) or self.topic(topics[0])
            c[BYTES_IN] += sum(sizes)
            c[MESSAGES_IN] += sum(records)
            c[TOTAL_PRODUCE] += n
            return
        for topic, nbytes, count in zip(topics, sizes, records):
            self.produced(topic, nbytes, count)

    def produce_failed(self, topic: str, nbytes: int, rejected: bool) -> None:
        """A partition's append refused (``rejected``: its records were invalid: BytesRejected)."""
        c = self.topics.get(topic) or self.topic(topic)
        c[TOTAL_PRODUCE] += 1
        c[FAILED_PRODUCE] += 1
        if rejected:
            c[BYTES_REJECTED] += nbytes

    def fetched(self, topic: str, nbytes: int, failed: bool) -> None:
        """A consumer's fetch of one partition: the bytes its response carries (BytesOut)."""
        c = self.topics.get(topic) or self.topic(topic)
        c[TOTAL_FETCH] += 1
        c[BYTES_OUT] += nbytes
        if failed:
            c[FAILED_FETCH] += 1

    def appended(self) -> int:
        """The partitions appended as leader, all topics (each is a NONE in Produce's errors)."""
        self.fold()
        total = self.retired[TOTAL_PRODUCE] - self.retired[FAILED_PRODUCE]
        for c in self.topics.values():
            total += c[TOTAL_PRODUCE] - c[FAILED_PRODUCE]
        return total

    def retire(self, keep) -> None:
        """Forget the topics not in ``keep`` (deleted ones, as Kafka removes their metrics); their
        counts stay in the all-topics totals."""
        self.fold()
        for name in [t for t in self.topics if t not in keep]:
            for i, n in enumerate(self.topics.pop(name)):
                self.retired[i] += n

    def snapshot(self) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...], int, int]:
        """A copy (taken on the event loop): per topic, the all-topics totals, replication bytes
        out and in."""
        self.fold()
        topics = {t: tuple(c) for t, c in self.topics.items()}
        totals = [*self.retired]
        for c in topics.values():
            for i, n in enumerate(c):
                totals[i] += n
        return topics, tuple(totals), self.replication_bytes_out, self.replication_bytes_in


# the request metric names Kafka gives a Fetch besides "Fetch" (RequestMetrics'
# CONSUMER_FETCH_METRIC_NAME, FOLLOW_FETCH_METRIC_NAME), keyed below the API keys
FETCH_CONSUMER, FETCH_FOLLOWER = -1, -2
PRODUCE, FETCH = 0, 1
METRIC_NAMES = {FETCH_CONSUMER: "FetchConsumer", FETCH_FOLLOWER: "FetchFollower"}


class RequestMetrics:
    """Kafka's RequestMetrics: requests per API and version, errors per API and code, and the
    total time per API (from the frame's arrival to its response queued on the connection) as a
    histogram. Keyed by API key (and FETCH_CONSUMER / FETCH_FOLLOWER, which a Fetch counts in
    too, as Kafka's); the names are looked up at scrape time.

    One list per (API, version) holds the time buckets' counts and, last, the sum of the times (ns);
    a request's count is the sum of its buckets, and an API's histogram the sum over its versions,
    both made at scrape time.

    The request path does not bisect: it adds its clock readings to ``pending`` (``note``'s
    order), and ``fold`` turns them into bucket counts and sums in bulk (compiled: a few ns a
    request), when a scrape takes its snapshot or when ``PENDING_CAP`` requests wait. ``record``
    and ``record_phases`` count one request at once."""

    __slots__ = ("by_version", "errors", "produce_none", "phases", "throttles", "pending", "topic_stats")

    def __init__(self, topic_stats: BrokerTopicStats | None = None):
        self.by_version: dict[tuple[int, int], list] = {}
        # per API: the four phase histograms (PHASES), each its buckets and its sum (ns), end to end
        self.phases: dict[int, list] = {}
        self.errors: dict[tuple[int, int], int] = {}
        # ErrorsPerSec{request=Produce,error=NONE} is the partitions appended (``topic_stats``:
        # TotalProduceRequests less FailedProduceRequests) plus this, less one for each acks=all
        # append waiting for its answer (counted in ``errors`` once it has it)
        self.topic_stats = topic_stats
        self.produce_none = 0
        # per API: ThrottleTimeMs of the throttled requests only (buckets by ms, then the sum in
        # ms); the unthrottled ones, Kafka's 0 ms, are the API's requests less these (at scrape time)
        self.throttles: dict[int, list] = {}
        # answered requests not folded yet, PENDING_FIELDS items each, flat (no tuple per
        # request to allocate and track): api key, version, follower, then in perf_counter_ns the
        # connection's last read (0: none), the frame parsed, the handler handed the rest to a
        # wait (0: it answered at once: local time ends with the response queued), the wait
        # ended (0: none), the response queued
        self.pending: list = []

    def note(self, api_key, version, follower, read_ns, recv_ns, local_ns, remote_ns, end_ns) -> None:
        """One request's clock readings (``pending``'s fields; the request path adds them with the
        module's ``note``, which reads ``end_ns`` itself)."""
        if extend(
            self.pending, PENDING_ITEMS, api_key, version, follower, read_ns, recv_ns, local_ns, remote_ns, end_ns
        ):
            self.fold()

    def fold(self) -> None:
        """The pending requests into the histograms: one pass over the list (``_fold``)."""
        p = self.pending
        if p:
            _fold(p, TOTAL_TIME_BUCKETS_NS, self.by_version, self.phases, FETCH, FETCH_CONSUMER, FETCH_FOLLOWER)
            reset(p)

    def record(self, api_key: int, version: int, total_ns: int, follower: bool = False) -> None:
        kv = (api_key, version)
        b = self.by_version.get(kv)
        if b is None:
            b = self.by_version[kv] = [0] * (len(TOTAL_TIME_BUCKETS_NS) + 2)
        b[bisect_left(TOTAL_TIME_BUCKETS_NS, total_ns)] += 1
        b[-1] += total_ns
        if api_key == FETCH:
            self.record(FETCH_FOLLOWER if follower else FETCH_CONSUMER, version, total_ns)

    def record_phases(
        self, api_key: int, queue_ns: int, local_ns: int, remote_ns: int, response_ns: int, follower: bool = False
    ) -> None:
        """The request's time split as Kafka's RequestChannel splits it (``PHASES``): one bisect
        and two additions each (a Fetch's also as FetchConsumer or FetchFollower)."""
        b = self.phases.get(api_key)
        if b is None:
            b = self.phases[api_key] = [0] * (PHASE_WIDTH * len(PHASES))
        bounds = TOTAL_TIME_BUCKETS_NS
        b[bisect_left(bounds, queue_ns)] += 1
        b[PHASE_SUM] += queue_ns
        b[PHASE_WIDTH + bisect_left(bounds, local_ns)] += 1
        b[PHASE_WIDTH + PHASE_SUM] += local_ns
        b[2 * PHASE_WIDTH + bisect_left(bounds, remote_ns)] += 1
        b[2 * PHASE_WIDTH + PHASE_SUM] += remote_ns
        b[3 * PHASE_WIDTH + bisect_left(bounds, response_ns)] += 1
        b[3 * PHASE_WIDTH + PHASE_SUM] += response_ns
        if api_key == FETCH:
            self.record_phases(
                FETCH_FOLLOWER if follower else FETCH_CONSUMER, queue_ns, local_ns, remote_ns, response_ns
            )

    def record_throttle(self, api_key: int, ms: int, follower: bool = False) -> None:
        """A response throttled ``ms`` (> 0) milliseconds: one bisect and two additions, only for
        throttled requests."""
        b = self.throttles.get(api_key)
        if b is None:
            b = self.throttles[api_key] = [0] * PHASE_WIDTH
        b[bisect_left(TOTAL_TIME_BUCKETS_MS, ms)] += 1
        b[PHASE_SUM] += ms
        if api_key == FETCH:
            self.record_throttle(FETCH_FOLLOWER if follower else FETCH_CONSUMER, ms)

    def error(self, api_key: int, code: int, count: int = 1) -> None:
        key = (api_key, code)
        e = self.errors
        e[key] = e.get(key, 0) + count

    def errors_of(self, api_key: int, counts: dict[int, int]) -> None:
        for code, n in counts.items():
            self.error(api_key, code, n)

    def snapshot(self):
        """(requests per (API, version), errors per (API, code), per API: the bucket counts and
        the sum of the times, per (API, phase) the same, and per API ThrottleTimeMs' bucket
        counts and sum, its first bucket holding the unthrottled requests), the pending requests
        folded in first."""
        self.fold()
        requests, hist = {}, {}
        for (key, version), b in list(self.by_version.items()):
            counts = b[:-1]
            requests[(key, version)] = sum(counts)
            h = hist.get(key)
            if h is None:
                hist[key] = [counts, b[-1]]
            else:
                h[0] = [x + y for x, y in zip(h[0], counts)]
                h[1] += b[-1]
        sums_ms = {k: h[1] / 1e6 for k, h in hist.items()}
        errors = dict(self.errors)
        none = self.produce_none + (self.topic_stats.appended() if self.topic_stats is not None else 0)
        if none:
            errors[(PRODUCE, 0)] = errors.get((PRODUCE, 0), 0) + none
        phases = {}
        for key, b in list(self.phases.items()):
            for i, name in enumerate(PHASES):
                seg = b[i * PHASE_WIDTH : (i + 1) * PHASE_WIDTH]
                phases[(key, name)] = (seg[:PHASE_SUM], seg[PHASE_SUM] / 1e6)
        throttles = {}
        for key, h in hist.items():
            b = self.throttles.get(key)
            counts = b[:PHASE_SUM] if b is not None else [0] * (PHASE_WIDTH - 1)
            counts[0] += sum(h[0]) - sum(counts)  # the unthrottled: 0 ms, in the first bucket
            throttles[key] = (counts, b[PHASE_SUM] if b is not None else 0)
        return requests, errors, {k: h[0] for k, h in hist.items()}, sums_ms, phases, throttles


def _fold_python(pending: list, bounds, by_version: dict, phases: dict, fetch, consumer, follower) -> None:
    """The compiled ``_cfold.fold``'s reference and fallback: the requests' clock readings in
    ``pending`` (RequestMetrics.pending's layout) into ``by_version`` ((API, version): the total
    time's bucket counts, +Inf last, then the sum) and ``phases`` (API: four such, queue, local,
    remote, response), a Fetch's also under ``consumer`` or ``follower``."""
    w = len(bounds) + 2
    s = w - 1
    it = iter(pending)
    for api, version, is_follower, rd, rc, lo, rm, en in zip(it, it, it, it, it, it, it, it):
        lo = lo or en
        mid = rm or lo
        durations = (rc - rd if rd and rc > rd else 0, lo - rc, mid - lo, en - mid)
        total = en - rc
        for key in (api, follower if is_follower else consumer) if api == fetch else (api,):
            b = by_version.get((key, version))
            if b is None:
                b = by_version[(key, version)] = [0] * w
            b[bisect_left(bounds, total)] += 1
            b[s] += total
            b = phases.get(key)
            if b is None:
                b = phases[key] = [0] * (4 * w)
            for i, d in enumerate(durations):
                b[i * w + bisect_left(bounds, d)] += 1
                b[i * w + s] += d


def _note_python(pending: list, cap: int, *items) -> bool:
    """The compiled ``_cfold.note``'s fallback: ``items`` and the time (perf_counter_ns) added to
    ``pending``; whether it holds ``cap`` items or more."""
    pending += items
    pending.append(time.perf_counter_ns())
    return len(pending) >= cap


def _extend_python(pending: list, cap: int, *items) -> bool:
    """The compiled ``_cfold.extend``'s fallback: ``items`` added to ``pending``; whether it holds
    ``cap`` items or more."""
    pending += items
    return len(pending) >= cap


def _same_clock() -> bool:
    """Does the compiled ``note`` read perf_counter_ns' clock (CLOCK_MONOTONIC on Linux)? Its
    readings are subtracted from the request path's own."""
    before = time.perf_counter_ns()
    t = _cfold.now()
    return before <= t <= time.perf_counter_ns()


_fold = _fold_python if _cfold is None else _cfold.fold
# the request path's additions to the pending lists (RequestMetrics.pending, BrokerTopicStats.pending)
# (a module built before note, extend and reset existed still folds: `pip install -e .` rebuilds it)
_compiled_note = _cfold is not None and hasattr(_cfold, "note") and _same_clock()
note, extend = (_cfold.note, _cfold.extend) if _compiled_note else (_note_python, _extend_python)
# a pending list emptied after its fold (the compiled one keeps the list's room for the next batch)
reset = getattr(_cfold, "reset", list.clear)


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """A kio message class's fields worth walking: (name, is the error code)."""
    f = _FIELDS.get(cls)
    if f is None:
        f = _FIELDS[cls] = tuple(
            (fd.name, fd.name == "error_code") for fd in dataclasses.fields(cls) if not fd.name.startswith("_")
        )
    return f


def error_counts(obj, out: dict[int, int]) -> None:
    """Every ``error_code`` of a kio response, top level and nested (Kafka's
    ``AbstractResponse.errorCounts``: a response's error per partition, topic or group), added to
    ``out`` (code -> count)."""
    for name, is_code in _fields(type(obj)):
        v = getattr(obj, name)
        if is_code:
            code = int(v)
            out[code] = out.get(code, 0) + 1
        elif isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
            for item in v:
                error_counts(item, out)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            error_counts(v, out)
