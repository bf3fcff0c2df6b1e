"""Client quotas on the request path (KIP-13, KIP-124, KIP-219, KIP-599): what a request is
charged against its principal's and client id's quotas, and the throttle time its response
carries. Kafka spreads this over ClientQuotaManager, ClientRequestQuotaManager and the
handlers' ``throttle`` helpers; here one object, built by the server and handed to the
handlers that charge (Produce, Fetch, the topic mutations) and to the dispatcher."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import time

from ..quotas import Quotas


@functools.cache
def _has_throttle_field(cls) -> bool:
    return dataclasses.is_dataclass(cls) and any(f.name == "throttle_time" for f in dataclasses.fields(cls))


class Throttler:
    """The broker's client quotas (``quotas``) and the clock they are measured with."""

    def __init__(self, quotas: Quotas, monotonic):
        self.quotas = quotas
        self._monotonic = monotonic  # read on every produce and fetch under a quota

    def now_ms(self) -> int:
        return int(self._monotonic() * 1000)

    def throttle(self, ctx, manager, value: float) -> int:
        """Record ``value`` (bytes) against the client's ``manager`` quota, and the request's
        time against its request quota; the request's throttle time (the larger delay), also
        kept in ``ctx`` for the dispatcher to mute the connection. For handlers that encode
        their own response (Produce, Fetch); call only when a quota is configured.

        This runs for every produce and fetch while any quota is set, so it takes the
        managers' fast path (:meth:`ClientQuotaManager.record`: a value within the headroom of
        the last measure is only added up) inline, with one clock read and one sensor key;
        bench/quotas.py measures what accounting costs against no quota."""
        now = int(self._monotonic() * 1000)
        user = ctx.principal.name
        key = (user, ctx.header.client_id or "")
        ms = 0
        if manager.enabled:
            s = manager._sensor_of.get(key)
            if s is not None and now < s.fast_until and value <= s.headroom:
                s.headroom -= value
                s.pending += value
                s.pending_ms = now
                s.pending_n += 1  # noqa: E702
            else:
                ms = manager.record(user, key[1], value, now)
        if ctx.start_ns and not ctx.recorded:  # request_percentage: the handler's time so far
            ctx.recorded = True
            v = (ctx.busy_ns + (time.perf_counter_ns() - ctx.step_ns if ctx.step_ns else 0)) * 1e-7
            request = self.quotas.request
            s = request._sensor_of.get(key)
            if s is not None and now < s.fast_until and v <= s.headroom:
                s.headroom -= v
                s.pending += v
                s.pending_ms = now
                s.pending_n += 1  # noqa: E702
            else:
                ms = max(ms, request.record(user, key[1], v, now))
        if ms > ctx.throttle_ms:
            ctx.throttle_ms = ms
        return ctx.throttle_ms

    def unrecord(self, ctx, manager, value: float) -> None:
        """Take back ``value`` recorded by :meth:`throttle` (a throttled fetch answers empty)."""
        manager.unrecord(ctx.principal.name, ctx.client_id or "", value, self.now_ms())

    def mutation_quota(self, ctx, strict_since: int):
        """The request's controller_mutation_rate quota (KIP-599), None when it has none:
        strict (THROTTLING_QUOTA_EXCEEDED per topic) from ``strict_since``, else permissive."""
        m = self.quotas.mutation
        if not m.enabled:
            return None
        return m.new_quota(ctx.principal.name, ctx.client_id or "", ctx.api_version >= strict_since, self.now_ms)

    @staticmethod
    def charge_mutations(ctx, quota) -> None:
        """The mutation quota's delay becomes the request's throttle time (if larger)."""
        if quota is not None:
            ctx.throttle_ms = max(ctx.throttle_ms, quota.throttle_time())

    def record_request_time(self, ctx, now_ms: int) -> int:
        """request_percentage: the handler's time for this request, as a percentage of a second."""
        if ctx.recorded or not ctx.start_ns:
            return 0
        ctx.recorded = True
        busy = ctx.busy_ns + (time.perf_counter_ns() - ctx.step_ns if ctx.step_ns else 0)
        percent = busy * 1e-7
        return self.quotas.request.record(ctx.principal.name, ctx.client_id or "", percent, now_ms)

    def throttled(self, ctx, result):
        """The response with the request's throttle time in it (versions that have the field)."""
        if ctx.start_ns and not ctx.recorded:
            ctx.throttle_ms = max(ctx.throttle_ms, self.record_request_time(ctx, self.now_ms()))
        if ctx.throttle_ms and _has_throttle_field(type(result)):
            result = dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=ctx.throttle_ms))
        return result
