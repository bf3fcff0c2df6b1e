"""The sans-IO quota core (kesque/quotas.py): precedence, Kafka's sampled rate and
the throttle-time formula, driven by a clock passed in."""

from __future__ import annotations

import pytest

from kesque import quotas as q
from kesque.errors import ErrorCode, KafkaError
from kesque.quotas import CLIENT_ID, USER, ClientQuotaManager, Rate, entity_key

U, C = "alice", "app"
LEVELS = [  # Kafka's eight levels, most specific first, with the rate tags each measures in
    ({USER: U, CLIENT_ID: C}, (U, C)),
    ({USER: U, CLIENT_ID: None}, (U, C)),
    ({USER: U}, (U, "")),
    ({USER: None, CLIENT_ID: C}, (U, C)),
    ({USER: None, CLIENT_ID: None}, (U, C)),
    ({USER: None}, (U, "")),
    ({CLIENT_ID: C}, ("", C)),
    ({CLIENT_ID: None}, ("", C)),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_most_specific_level_wins(level):
    # a quota at this level and at every less specific one: this level's bound applies
    quotas = {entity_key(e): float(100 + i) for i, (e, _t) in enumerate(LEVELS) if i >= level}
    assert q.resolve(quotas, U, C) == (100.0 + level, LEVELS[level][1])


def test_other_clients_do_not_match_named_levels():
    quotas = {entity_key(e): float(i) + 1 for i, (e, _t) in enumerate(LEVELS)}
    # another user and client id: only the defaults apply (level 5, the most specific default)
    assert q.resolve(quotas, "bob", "other") == (5.0, ("bob", "other"))
    assert q.resolve({entity_key({CLIENT_ID: C}): 1.0}, U, "other") == (None, (U, "other"))


def test_empty_client_id_matches_no_client_level():
    quotas = {entity_key({CLIENT_ID: None}): 1.0, entity_key({USER: None, CLIENT_ID: None}): 2.0}
    assert q.resolve(quotas, q.ANONYMOUS, "")[0] is None
    quotas[entity_key({USER: q.ANONYMOUS})] = 3.0
    assert q.resolve(quotas, q.ANONYMOUS, "") == (3.0, (q.ANONYMOUS, ""))


def test_rate_window_is_at_least_num_minus_one_samples():
    r = Rate(11, 1000)
    r.record(1000.0, 0)
    assert r.window_size(0) == 10_000
    assert r.measure(0) == pytest.approx(100.0)
    r.record(1000.0, 15_500)  # the first sample is older than the 11 s kept: purged
    assert r.measure(15_500) == pytest.approx(100.0)


def test_rate_window_grows_with_elapsed_time_past_the_minimum():
    r = Rate(3, 1000)
    for t in range(0, 2600, 100):
        r.record(10.0, t)
    # samples at 0, 1000, 2000 are live; window is 2.5 s
    assert r.window_size(2500) == 2500
    assert r.measure(2500) == pytest.approx(260 / 2.5)


def test_throttle_time_formula():
    # O over W must wait X with O*W/(W+X) = T
    assert q.throttle_time(200.0, 100.0, 10_000) == 10_000
    assert q.throttle_time(150.0, 100.0, 10_000) == 5_000
    assert q.throttle_time(100.0, 100.0, 10_000) == 0


def test_manager_throttles_past_the_bound_only_the_client_over_it():
    m = ClientQuotaManager(q.PRODUCE, 11, 1)
    m.update({entity_key({CLIENT_ID: C}): 1000.0})
    assert m.record(q.ANONYMOUS, C, 10_000, 0) == 0  # 10 kB over the 10 s minimum window: at the bound
    delay = m.record(q.ANONYMOUS, C, 10_000, 0)
    assert delay == 10_000  # 20 kB over 10 s = 2 kB/s: another 10 s brings it to 1 kB/s
    assert m.record(q.ANONYMOUS, "unlimited", 10**9, 0) == 0
    assert list(m.sensors) == [("", C)]


def test_user_level_quota_is_shared_by_the_users_clients():
    m = ClientQuotaManager(q.PRODUCE, 11, 1)
    m.update({entity_key({USER: q.ANONYMOUS}): 1000.0})
    assert m.record(q.ANONYMOUS, "a", 10_000, 0) == 0
    assert m.record(q.ANONYMOUS, "b", 10_000, 0) > 0  # same rate: (ANONYMOUS, "")
    assert list(m.sensors) == [(q.ANONYMOUS, "")]


def test_request_quota_caps_the_delay_at_one_window():
    m = ClientQuotaManager(q.REQUEST, 11, 1, max_throttle_ms=1000)
    m.update({entity_key({CLIENT_ID: C}): 10.0})
    assert m.record(q.ANONYMOUS, C, 10_000.0, 0) == 1000


def test_no_quota_means_not_enabled_and_nothing_measured():
    qs = q.Quotas()
    qs.update({entity_key({CLIENT_ID: C}): {q.FETCH: 5.0}})
    assert qs.fetch.enabled and not qs.produce.enabled and not qs.request.enabled
    assert qs.produce.record(q.ANONYMOUS, C, 1e9, 0) == 0 and not qs.produce.sensors


def test_changing_a_quota_keeps_the_measured_rate():
    m = ClientQuotaManager(q.PRODUCE, 11, 1)
    m.update({entity_key({CLIENT_ID: C}): 1000.0})
    m.record(q.ANONYMOUS, C, 10_000, 0)
    m.update({entity_key({CLIENT_ID: C}): 500.0})
    assert m.record(q.ANONYMOUS, C, 1, 0) > 0


def test_max_value_in_window():
    m = ClientQuotaManager(q.FETCH, 11, 1)
    m.update({entity_key({CLIENT_ID: None}): 100.0})
    assert m.max_value_in_window(q.ANONYMOUS, C) == 1000.0


def test_report_names_entity_and_forgets_idle_rates():
    m = ClientQuotaManager(q.PRODUCE, 11, 1)
    m.update({entity_key({CLIENT_ID: C}): 1000.0})
    m.record(q.ANONYMOUS, C, 20_000, 0)
    lines = m.report(1)
    assert len(lines) == 1 and "client-id='app'" in lines[0] and "throttled 1 time(s)" in lines[0]
    assert m.report(2) == []  # nothing new
    m.report(q.INACTIVE_SENSOR_EXPIRATION_MS + 1)
    assert not m.sensors


# ------------------------------------------------------------------ validation (Kafka's codes and messages)
@pytest.mark.parametrize(
    "entries,message",
    [
        ([], "Invalid empty client quota entity"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([(USER, "a"), (USER, "b")], "Invalid client quota entity, duplicate entity entry user"),
        ([(CLIENT_ID, "")], "Empty client-id not supported"),
        (
            [(q.IP, "1.2.3.4"), (USER, "u")],
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        ),
    ],
)
def test_bad_entities(entries, message):
    with pytest.raises(KafkaError) as e:
        q.validate_entity(entries)
    assert (e.value.code, e.value.message) == (ErrorCode.invalid_request, message)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("producer_byte_rate", -1.0, "Quota producer_byte_rate must be greater than 0"),
        ("producer_byte_rate", 0.0, "Quota producer_byte_rate must be greater than 0"),
        ("nope", 1.0, "Invalid configuration key nope"),
        ("consumer_byte_rate", 1.5, "consumer_byte_rate cannot be a fractional value."),
        ("producer_byte_rate", 2.0**64, "Proposed value for producer_byte_rate is too large for a LONG."),
    ],
)
def test_bad_values(key, value, message):
    with pytest.raises(KafkaError) as e:
        q.validate_quota_value(q.CLIENT_QUOTA_KEYS, key, value)
    assert (e.value.code, e.value.message) == (ErrorCode.invalid_request, message)


def test_good_values():
    q.validate_quota_value(q.CLIENT_QUOTA_KEYS, "request_percentage", 12.5)
    q.validate_quota_value(q.IP_QUOTA_KEYS, "connection_creation_rate", 10.0)


# ------------------------------------------------------------------ controller mutations (KIP-599)
def mutation_quota(strict: bool, clock: list[int], rate: float = 2.0):
    m = q.MutationQuotaManager(11, 1)
    m.update({entity_key({CLIENT_ID: C}): rate})
    return m, lambda: m.new_quota(q.ANONYMOUS, C, strict, lambda: clock[0])


def test_strict_mutation_quota_refuses_once_the_bucket_is_empty():
    clock = [0]
    _m, new = mutation_quota(True, clock)
    quota = new()
    quota.record(30)  # a full bucket (11 s x 2/s = 22) takes a request that overdraws it
    assert quota.throttle_time() == 0
    with pytest.raises(KafkaError) as e:
        new().record(1)
    assert (e.value.code, e.value.message) == (
        ErrorCode.throttling_quota_exceeded,
        "The throttling quota has been exceeded.",
    )
    clock[0] = 4000  # refilled at 2/s: back to 0 tokens
    new().record(1)


def test_permissive_mutation_quota_accepts_and_delays():
    clock = [0]
    _m, new = mutation_quota(False, clock)
    quota = new()
    quota.record(30)
    assert quota.throttle_time() == 4000  # 8 tokens short at 2/s
    clock[0] = 1000
    assert quota.throttle_time() == 3000  # less the time since it was recorded


def test_no_mutation_quota_for_other_clients():
    m, _new = mutation_quota(True, [0])
    assert m.new_quota(q.ANONYMOUS, "other", True, lambda: 0) is None


# ------------------------------------------------------------------ connections
def test_connections_per_ip_are_counted_and_released():
    cq = q.ConnectionQuotas()
    assert cq.admit("10.0.0.1", 2, 0)[0] and cq.admit("10.0.0.1", 2, 0)[0]
    assert cq.admit("10.0.0.1", 2, 0) == (False, 0, "Too many connections from 10.0.0.1 (maximum = 2)")
    assert cq.admit("10.0.0.2", 2, 0)[0]  # per IP
    cq.release("10.0.0.1")
    assert cq.admit("10.0.0.1", 2, 0)[0]


def test_connection_creation_rate_per_ip_with_default():
    cq = q.ConnectionQuotas(2, 1)  # the rate is over at least one 1 s sample
    cq.update({entity_key({q.IP: None}): {q.CONNECTION: 2.0}, entity_key({q.IP: "10.0.0.9"}): {q.CONNECTION: 100.0}})
    big = 2**31 - 1
    assert cq.admit("10.0.0.1", big, 0)[0] and cq.admit("10.0.0.1", big, 0)[0]
    ok, delay, reason = cq.admit("10.0.0.1", big, 0)
    assert not ok and 0 < delay <= 1000 and reason == "Connection rate from 10.0.0.1 exceeds its quota of 2/s"
    assert cq.counts["10.0.0.1"] == 2  # the refused one is not counted (nor in the rate)
    assert all(cq.admit("10.0.0.9", big, 0)[0] for _ in range(50))  # its own, higher quota
    assert cq.admit("10.0.0.1", big, 2500)[0]  # later, within the rate again


def test_parse_ip_overrides():
    assert q.parse_ip_overrides("127.0.0.1:5, host.example:7,bad:x,:3") == {"127.0.0.1": 5, "host.example": 7}


class _PlainRate:
    """Kafka's Rate/SampledStat written plainly (every measure walks the samples)."""

    def __init__(self, num, window_ms):
        self.num, self.window_ms, self.samples, self.current = num, window_ms, [], 0

    def record(self, value, now):
        if not self.samples:
            self.samples.append([0.0, now, now])
        s = self.samples[self.current]
        if now - s[1] >= self.window_ms:
            self.current = (self.current + 1) % (self.num + 1)
            if self.current >= len(self.samples):
                self.samples.append([0.0, now, now])
            else:
                self.samples[self.current][:] = [0.0, now, now]
            s = self.samples[self.current]
        s[0] += value
        s[2] = now

    def measure(self, now):
        if not self.samples:
            self.samples.append([0.0, now, now])
        for s in self.samples:
            if now - s[2] >= self.num * self.window_ms:
                s[:] = [0.0, now, now]
        elapsed = now - min(s[1] for s in self.samples)
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return sum(s[0] for s in self.samples) / (max(elapsed, 1) / 1000)


def test_incremental_rate_equals_kafkas_plain_algorithm():
    import random

    rnd = random.Random(7)
    fast, plain, now = Rate(3, 1000), _PlainRate(3, 1000), 0
    for _ in range(20_000):
        now += rnd.choice([0, 1, 5, 50, 300, 1200, 4000])
        if rnd.random() < 0.7:
            v = rnd.random() * 100
            fast.record(v, now)
            plain.record(v, now)
        assert fast.measure(now) == pytest.approx(plain.measure(now), rel=1e-9, abs=1e-9)


def test_request_time_of_a_delayed_answer_counts_its_steps_not_its_waits(monkeypatch):
    import asyncio

    from kesque.server import server
    from kesque.server.context import RequestContext

    clock = [10**9]
    monkeypatch.setattr(server.time, "perf_counter_ns", lambda: clock[0])

    async def main():
        fut = asyncio.get_running_loop().create_future()

        async def handler():
            clock[0] += 10  # working
            await fut  # waiting (a long poll)
            clock[0] += 5
            return "answer"

        ctx = RequestContext(None, None, "PLAINTEXT")
        task = asyncio.ensure_future(server._timed(handler(), ctx))
        await asyncio.sleep(0)
        clock[0] += 1000  # time passes while the handler waits
        fut.set_result(None)
        assert await task == "answer"
        return ctx.busy_ns

    assert asyncio.run(main()) == 15


def test_unmeasured_records_within_the_headroom_throttle_exactly_as_measured_ones():
    """ClientQuotaManager.record skips measuring while the recorded values stay within the
    headroom of the last measure; every throttle decision must be the one a measure gives."""
    import random

    rnd = random.Random(11)
    for samples in (2, 3, 11):
        fast, slow = ClientQuotaManager("Produce", samples, 1), ClientQuotaManager("Produce", samples, 1)
        for m in (fast, slow):
            m.update({entity_key({CLIENT_ID: "c"}): 1000.0})
        now, skipped = 0, 0
        for _ in range(20_000):
            now += rnd.choice([0, 0, 1, 3, 40, 300, 999, 1000, 1001, 2500])
            v = rnd.random() * rnd.choice([1, 10, 400])
            sensor = fast._sensor_of.get(("", "c"))
            skipped += sensor is not None and now < sensor.fast_until and v <= sensor.headroom
            assert fast.record("", "c", v, now) == slow.record("", "c", v, now)
            slow._sensor_of[("", "c")].fast_until = 0  # always measured
        assert skipped > 1000  # the unmeasured path was taken


def _fast_and_always_measured(samples: int, bound: float) -> tuple[ClientQuotaManager, ClientQuotaManager]:
    fast, slow = ClientQuotaManager("Produce", samples, 1), ClientQuotaManager("Produce", samples, 1)
    for m in (fast, slow):
        m.update({entity_key({CLIENT_ID: "c"}): bound})
    return fast, slow


def test_values_added_up_on_the_fast_path_reach_the_rate_before_it_is_read():
    """Fast-path records wait in Sensor.pending; the report (and an unrecord) fold them into
    the current sample first, so what it prints is what recording each one would give."""
    import random

    rnd = random.Random(5)
    fast, slow = _fast_and_always_measured(3, 1000.0)
    now = 0
    for i in range(5_000):
        now += rnd.choice([0, 0, 1, 3, 40, 300, 1001])
        v = rnd.random() * rnd.choice([1, 10, 400])
        fast.record("", "c", v, now)
        slow.record("", "c", v, now)
        slow._sensor_of[("", "c")].fast_until = 0
        if i % 97 == 0:
            fast.unrecord("", "c", v / 2, now)
            slow.unrecord("", "c", v / 2, now)
        if i % 250 == 0:
            assert fast.report(now) == slow.report(now)
    assert fast.report(now) == slow.report(now) != []


def test_the_servers_inline_fast_path_throttles_exactly_as_the_managers():
    """Throttler.throttle takes ClientQuotaManager.record's fast path inline (every produce
    and fetch under a quota): its decisions must be those of always-measured managers."""
    import random
    import types

    from kesque.server import server
    from kesque.server.context import RequestContext
    from kesque.server.throttling import Throttler

    rnd = random.Random(3)
    clock = [0.0]
    busy = [1]  # 0 would mean "no request-time quota" (ctx.start_ns)
    for samples in (2, 11):
        fast, slow = q.Quotas(samples, 1), q.Quotas(samples, 1)
        for qs in (fast, slow):
            qs.update({entity_key({CLIENT_ID: "c"}): {q.PRODUCE: 300.0, q.REQUEST: 0.08}})
        throttle = Throttler(fast, lambda: clock[0]).throttle
        header = types.SimpleNamespace(client_id="c")
        orig = server.time.perf_counter_ns
        server.time.perf_counter_ns = lambda: busy[0]
        try:
            fast_taken, throttled = 0, [0, 0]
            for _ in range(20_000):
                clock[0] += rnd.choice([0, 0, 0.001, 0.003, 0.04, 0.3, 0.999, 1.0, 1.001])
                now = int(clock[0] * 1000)
                v = rnd.random() * rnd.choice([1, 10, 400])
                ctx = RequestContext(header, None, "PLAINTEXT")
                ctx.start_ns = ctx.step_ns = busy[0]
                busy[0] += rnd.choice([10_000, 100_000, 2_000_000])
                s = fast.produce._sensor_of.get((q.ANONYMOUS, "c"))
                fast_taken += s is not None and now < s.fast_until and v <= s.headroom
                by_bytes = slow.produce.record(q.ANONYMOUS, "c", v, now)
                by_time = slow.request.record(q.ANONYMOUS, "c", (busy[0] - ctx.start_ns) * 1e-7, now)
                throttled[0] += by_bytes > 0
                throttled[1] += by_time > 0
                want = max(by_bytes, by_time)
                for m in (slow.produce, slow.request):
                    m._sensor_of[(q.ANONYMOUS, "c")].fast_until = 0
                # the fast path adds values up before they reach the sample: the sums may differ
                # in the last bit, and a delay rounded to the ms by 1
                assert abs(throttle(ctx, fast.produce, v) - want) <= 1
        finally:
            server.time.perf_counter_ns = orig
        assert fast_taken > 1000 and min(throttled) > 500, (fast_taken, throttled)
