"""Fetch: sessions, long poll, and zero-copy responses.

The request is decoded with kio (compiled, ~µs); each partition is read as byte ranges of
segment files and the response is encoded by hand with those ranges as FileRegions, which
the connection sends with sendfile. When fewer than ``min_bytes`` are available the request
waits (``server.drivers.delayed.wait_for_bytes``) until ``min_bytes`` arrive or ``max_wait_ms``
passes: a consumer for bytes below the high watermark, a follower for bytes the leader appended.

A follower's Fetch (a replica id >= 0) is served by :meth:`FetchApis._replica_fetch`: each
partition is checked and its follower's position recorded by the leader's Partition
(``read_for_follower``: epochs, diverging epoch, ISR expansion, high watermark), then read up to
the log end. It has no session and is never throttled by client quotas or filtered by isolation.
The leader's replication quota (KIP-73, :mod:`kesque.replication.quota`) answers a partition
with no records while the follower is not in its ISR, the partition is leader-throttled here and
the quota is exceeded; the records sent for leader-throttled partitions are counted in it, and
a waiting fetch does not count the bytes appended to a partition held back.
"""

from __future__ import annotations

import logging

from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.fetch import FetchPartitionResponse, FileRegion, encode_fetch_response
from ...protocol.messages import to_ms
from ...raft.wire import METADATA_TOPIC, METADATA_TOPIC_ID
from ...replication.partition import FETCH_HIGH_WATERMARK, FETCH_TXN_COMMITTED
from ..context import CLUSTER_NAME, NO_RESPONSE, AclOperation, ResourceType
from ..drivers.delayed import wait_for_bytes
from ..fetch_session import FINAL_EPOCH, INITIAL_EPOCH, FetchSessionCache
from .authz import cluster_action_refused, fetch_error_response

log = logging.getLogger(__name__)

MIN_VERSION = 4
MAX_VERSION = 18


class _Item:
    """One partition of a fetch: where to read and what came back."""

    __slots__ = (
        "key",
        "topic",
        "topic_id",
        "partition",
        "fetch_offset",
        "max_bytes",
        "current_epoch",
        "error",
        "result",
        "regions",
    )

    def __init__(self, key, topic, topic_id, partition, fetch_offset, max_bytes, current_epoch):
        self.key = key
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_epoch = current_epoch
        self.error = 0
        self.result = None
        self.regions = None


def _is_metadata_fetch(req) -> bool:
    """A raft replica's Fetch: the one partition __cluster_metadata-0 (by name, or by the
    metadata topic id in v13+)."""
    ts = req.topics
    if len(ts) != 1 or len(ts[0].partitions) != 1 or ts[0].partitions[0].partition != 0:
        return False
    t = ts[0]
    return getattr(t, "topic", None) == METADATA_TOPIC or getattr(t, "topic_id", None) == METADATA_TOPIC_ID


class FetchApis:
    APIS = (Api(ApiKeys.FETCH, MIN_VERSION, MAX_VERSION, "fetch"),)

    def __init__(
        self,
        *,
        image,
        replica_manager,
        config,
        raft,
        controller_listener_names,
        clock,
        throttler,
        topic_stats=None,
        request_metrics=None,
    ):
        """``raft``: the RaftManager that answers the controllers' Fetch of the metadata log on
        the controller listeners (``controller_listener_names``). ``topic_stats``,
        ``request_metrics``: kesque.metrics' counters (None: metrics off)."""
        self.image = image
        self.replica_manager = replica_manager
        self.config = config
        self.raft = raft
        self.controller_listener_names = controller_listener_names
        self.clock = clock
        self.throttler = throttler
        self._throttle = throttler.throttle
        self._fetch_quota = throttler.quotas.fetch
        self.sessions = FetchSessionCache(config.get("max.incremental.fetch.session.cache.slots"))
        self.topic_stats = topic_stats
        self.request_metrics = request_metrics

    async def _raft_fetch(self, ctx, req):
        resp = await self.raft.handle_request(ApiKeys.FETCH, ctx.api_version, req)
        return NO_RESPONSE if resp is None else resp

    # ------------------------------------------------------------------ request -> partitions
    def fetch(self, ctx, req):
        v = ctx.api_version
        replica_id = getattr(req, "replica_id", -1)
        rs = getattr(req, "replica_state", None)
        if rs is not None and v >= 15:
            replica_id = rs.replica_id
        ctx.follower = replica_id >= 0
        if self.raft is not None and ctx.listener in self.controller_listener_names:
            # ControllerApis.handleFetch: every Fetch on a controller listener needs CLUSTER_ACTION,
            # a consumer's too (kesque's broker answers the ones that pass and are not raft's)
            if cluster_action_refused(ctx) is not None:
                return fetch_error_response(v, req, ErrorCode.cluster_authorization_failed)
            if replica_id >= 0 and _is_metadata_fetch(req):
                return self._raft_fetch(ctx, req)
        if replica_id >= 0:
            if ctx.authorizer is not None and not ctx.authorize(
                AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
            ):
                return self._follower_denied(v, req)
            # never throttled by client quotas: ahead of the quota checks
            return self._replica_fetch(v, req, replica_id, getattr(rs, "replica_epoch", -1) if rs is not None else -1)
        image = self.image
        now = self.clock.monotonic()
        session_id = getattr(req, "session_id", 0)
        epoch = getattr(req, "session_epoch", FINAL_EPOCH)
        uses_ids = v >= 13

        def resolve(ft):
            if uses_ids:
                t = image.topics_by_id.get(ft.topic_id)
                return (ft.topic_id, t.name if t else None)
            return (ft.topic, ft.topic)

        session = None
        incremental = False
        if epoch == FINAL_EPOCH:
            if session_id:
                self.sessions.remove(session_id)
        elif epoch == INITIAL_EPOCH:
            if session_id:
                self.sessions.remove(session_id)
            session = self.sessions.new_session(uses_ids, now)
        else:
            session = self.sessions.get(session_id, now)
            if session is None:
                return self._error_response(v, ErrorCode.fetch_session_id_not_found, 0)
            if session.epoch != epoch:
                return self._error_response(v, ErrorCode.invalid_fetch_session_epoch, session_id)
            incremental = True

        items: list[_Item] = []
        if session is not None:
            for ft in req.topics:
                key_topic, _name = resolve(ft)
                for fp in ft.partitions:
                    session.update(
                        (key_topic, fp.partition),
                        fp.fetch_offset,
                        fp.partition_max_bytes,
                        getattr(fp, "log_start_offset", -1),
                        getattr(fp, "current_leader_epoch", -1),
                        getattr(fp, "last_fetched_epoch", -1),
                    )
            for fg in getattr(req, "forgotten_topics_data", ()) or ():
                key_topic = fg.topic_id if uses_ids else fg.topic
                for p in fg.partitions:
                    session.forget((key_topic, p))
            session.epoch = epoch + 1 if epoch > 0 else 1
            for (key_topic, p), cp in session.partitions.items():
                if uses_ids:
                    t = image.topics_by_id.get(key_topic)
                    name = t.name if t else None
                else:
                    name = key_topic
                items.append(
                    _Item(
                        (key_topic, p),
                        name,
                        key_topic if uses_ids else None,
                        p,
                        cp.fetch_offset,
                        cp.max_bytes,
                        cp.current_leader_epoch,
                    )
                )
        else:
            for ft in req.topics:
                key_topic, name = resolve(ft)
                for fp in ft.partitions:
                    items.append(
                        _Item(
                            (key_topic, fp.partition),
                            name,
                            key_topic if uses_ids else None,
                            fp.partition,
                            fp.fetch_offset,
                            fp.partition_max_bytes,
                            getattr(fp, "current_leader_epoch", -1),
                        )
                    )

        isolation = FETCH_TXN_COMMITTED if getattr(req, "isolation_level", 0) == 1 else FETCH_HIGH_WATERMARK
        max_bytes = min(getattr(req, "max_bytes", 2**31 - 1), self.config.get("fetch.max.bytes"))
        min_bytes = req.min_bytes
        max_wait = to_ms(req.max_wait)
        fetch_quota = self._fetch_quota
        if fetch_quota.enabled:  # never more than the client's quota allows in one window
            max_bytes = int(min(max_bytes, fetch_quota.max_value_in_window(ctx.principal.name, ctx.client_id or "")))
        readable = items if ctx.authorizer is None else self._authorized(ctx, items)
        total, must_answer = self._read_all(readable, isolation, max_bytes)
        if max_wait <= 0 or not readable or total >= min_bytes or must_answer:
            return self._answer(ctx, v, items, session, incremental, isolation, total)
        return self._delayed(
            ctx, v, items, readable, session, incremental, isolation, max_bytes, min_bytes - total, max_wait
        )

    @staticmethod
    def _authorized(ctx, items: list[_Item]) -> list[_Item]:
        """The items whose topic the principal may READ; the others answer TOPIC_AUTHORIZATION_FAILED
        (an unknown topic id stays UNKNOWN_TOPIC_ID), as Kafka's handleFetchRequest."""
        allowed = {}
        out = []
        for it in items:
            ok = it.topic is None or allowed.get(it.topic)
            if ok is None:
                ok = allowed[it.topic] = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, it.topic)
            if ok:
                out.append(it)
            else:
                it.error = int(ErrorCode.topic_authorization_failed)
                it.result = None
        return out

    # ------------------------------------------------------------------ reading
    def _read_all(self, items: list[_Item], isolation: int, max_bytes: int) -> tuple[int, bool]:
        rm = self.replica_manager
        remaining = max_bytes
        min_one = True
        total = 0
        errors = False
        for it in items:
            it.error = 0
            it.result = None
            it.regions = None
            try:
                if it.topic is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, "unknown topic id")
                part = rm.get_partition(it.topic, it.partition)
                res = part.read(it.fetch_offset, min(it.max_bytes, remaining), isolation, min_one, it.current_epoch)
            except KafkaError as e:
                it.error = int(e.code)
                errors = True
                continue
            it.result = res
            size = res.data.size
            if size:
                min_one = False
                remaining = max(0, remaining - size)
                total += size
        return total, errors

    async def _delayed(self, ctx, v, items, readable, session, incremental, isolation, max_bytes, needed, max_wait_ms):
        rm = self.replica_manager
        await wait_for_bytes(
            rm, {(it.topic, it.partition) for it in readable if it.topic is not None}, needed, max_wait_ms
        )
        total, _errors = self._read_all(readable, isolation, max_bytes)
        return self._answer(ctx, v, items, session, incremental, isolation, total)

    # ------------------------------------------------------------------ followers
    @staticmethod
    def _follower_denied(v, req):
        """A replica without CLUSTER_ACTION: every partition TOPIC_AUTHORIZATION_FAILED, as Kafka."""
        code = int(ErrorCode.topic_authorization_failed)
        return encode_fetch_response(
            v,
            0,
            0,
            [
                (
                    ft.topic_id if v >= 13 else ft.topic,
                    [FetchPartitionResponse(fp.partition, code, -1, -1, -1, [], 0) for fp in ft.partitions],
                )
                for ft in req.topics
            ],
        )

    def _replica_fetch(self, v, req, replica_id: int, broker_epoch: int):
        image = self.image
        items = []
        for ft in req.topics:
            if v >= 13:
                t = image.topics_by_id.get(ft.topic_id)
                name, key = (t.name if t else None), ft.topic_id
            else:
                name = key = ft.topic
            for fp in ft.partitions:
                items.append((key, name, fp))
        max_bytes = min(req.max_bytes, self.config.get("replica.fetch.response.max.bytes"))
        out, total, must_answer, throttled = self._read_for_followers(items, replica_id, broker_epoch, max_bytes)
        max_wait = to_ms(req.max_wait)
        if max_wait <= 0 or total >= req.min_bytes or must_answer or not items:
            return self._follower_response(v, out, throttled)
        return self._replica_delayed(v, items, replica_id, broker_epoch, max_bytes, req.min_bytes - total, max_wait)

    async def _replica_delayed(self, v, items, replica_id, broker_epoch, max_bytes, needed, max_wait_ms):
        rm = self.replica_manager
        tps = {(name, fp.partition) for _key, name, fp in items if name is not None}
        quota = rm.quotas.leader
        held = None
        if quota.throttled:  # as Kafka's DelayedFetch: the bytes of a partition held back do not count

            def held(tp) -> bool:
                part = rm.partitions.get(tp)
                return part is not None and quota.holds(tp[0], tp[1], replica_id in part.isr, rm.now_ms())

        await wait_for_bytes(rm, tps, needed, max_wait_ms, replica=True, skip=held)
        out, _total, _must, throttled = self._read_for_followers(items, replica_id, broker_epoch, max_bytes)
        return self._follower_response(v, out, throttled)

    def _read_for_followers(self, items, replica_id: int, broker_epoch: int, max_bytes: int):
        """Per partition (topic key, FetchPartitionResponse); the bytes read; whether to answer
        at once (an error or a diverging epoch); the bytes of leader-throttled partitions."""
        rm = self.replica_manager
        quota = rm.quotas.leader
        throttling = bool(quota.throttled)
        now_ms = rm.now_ms() if throttling else 0
        out = []
        total = 0
        throttled = 0
        must = False
        min_one = True
        for key, name, fp in items:
            pr = None
            try:
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, "unknown topic id")
                part = rm.get_partition(name, fp.partition)
                held = throttling and quota.should_throttle(name, fp.partition, replica_id in part.isr, now_ms)
                check, data = part.read_for_follower(
                    replica_id,
                    fp.fetch_offset,
                    getattr(fp, "last_fetched_epoch", -1),
                    fp.current_leader_epoch,
                    fp.log_start_offset,
                    broker_epoch,
                    min(fp.partition_max_bytes, max(max_bytes - total, 0)),
                    min_one,
                    held,
                )
            except KafkaError as e:
                pr = FetchPartitionResponse(fp.partition, int(e.code), -1, -1, -1, [], 0)
                must = True
            else:
                if check.error_code:
                    pr = FetchPartitionResponse(fp.partition, check.error_code, -1, -1, -1, [], 0)
                    must = True
                elif data is None:  # KIP-320: where the follower's log diverges
                    pr = FetchPartitionResponse(
                        fp.partition,
                        0,
                        check.high_watermark,
                        check.high_watermark,
                        check.log_start_offset,
                        [],
                        0,
                        diverging_epoch=check.diverging_epoch,
                    )
                    must = True
                else:
                    regions = [FileRegion(h, pos, size) for h, pos, size in data.regions]
                    pr = FetchPartitionResponse(
                        fp.partition,
                        0,
                        check.high_watermark,
                        check.high_watermark,
                        check.log_start_offset,
                        regions,
                        data.size,
                    )
                    if data.size:
                        min_one = False
                        total += data.size
                        if throttling and quota.is_throttled(name, fp.partition):
                            throttled += data.size
            out.append((key, pr))
        return out, total, must, throttled

    def _follower_response(self, v, out, throttled: int):
        """The answer; the records of leader-throttled partitions count in the leader's
        replication quota, in sync or not (Kafka counts them as the response is sent)."""
        if throttled:
            rm = self.replica_manager
            rm.quotas.leader.record(throttled, rm.now_ms())
        by_topic: dict = {}
        for key, pr in out:
            by_topic.setdefault(key, []).append(pr)
        if self.topic_stats is not None:
            self.topic_stats.replication_bytes_out += sum(pr.records_size for _key, pr in out)
        if self.request_metrics is not None:
            self._count_errors(0, [pr for _key, pr in out])
        return encode_fetch_response(v, 0, 0, list(by_topic.items()))

    def _count_errors(self, top: int, parts) -> None:
        """Kafka's FetchResponse.errorCounts: the top-level error and each partition's."""
        counts = {top: 1}
        for pr in parts:
            counts[pr.error_code] = counts.get(pr.error_code, 0) + 1
        self.request_metrics.errors_of(ApiKeys.FETCH, counts)

    def _answer(self, ctx, v, items, session, incremental: bool, isolation: int, total: int):
        """The response, unless the client is over its fetch or request quota: then, as
        Kafka does, an empty response carrying the throttle time (the bytes read are not
        counted against the quota, as they are not sent)."""
        fetch_quota = self._fetch_quota
        if fetch_quota.enabled or ctx.start_ns:
            if self._throttle(ctx, fetch_quota, total):
                self.throttler.unrecord(ctx, fetch_quota, total)
                if session is not None and not incremental:  # a full fetch opens no session when throttled
                    self.sessions.remove(session.id)
                    session = None
                if self.request_metrics is not None:
                    self._count_errors(0, ())
                return encode_fetch_response(v, 0, session.id if session is not None else 0, [], ctx.throttle_ms)
        return self._respond(v, items, session, incremental, isolation)

    # ------------------------------------------------------------------ response
    def _respond(self, v, items: list[_Item], session, incremental: bool, isolation: int):
        by_topic: dict = {}
        order = []
        stats = self.topic_stats
        for it in items:
            res = it.result
            if res is not None:
                data = res.data
                regions = [FileRegion(h, pos, size) for h, pos, size in data.regions]
                pr = FetchPartitionResponse(
                    it.partition,
                    0,
                    res.high_watermark,
                    res.last_stable_offset,
                    res.log_start_offset,
                    regions,
                    data.size,
                    aborted_transactions=None
                    if res.aborted_transactions is None
                    else [(t.producer_id, t.first_offset) for t in res.aborted_transactions],
                )
            else:
                pr = FetchPartitionResponse(it.partition, it.error, -1, -1, -1, [], 0)
                if it.error == ErrorCode.not_leader_or_follower and v >= 12 and it.topic is not None:
                    reg = self.replica_manager.image_partition(it.topic, it.partition)
                    if reg is not None:
                        pr.current_leader = (reg.leader, reg.leader_epoch)
            if incremental:
                cp = session.partitions.get(it.key)
                if cp is None or not cp.must_respond(
                    pr.records_size > 0, pr.error_code, pr.high_watermark, pr.last_stable_offset, pr.log_start_offset
                ):
                    continue
                if pr.records_size > 0:
                    session.rotate(it.key)
            elif session is not None:
                cp = session.partitions.get(it.key)
                if cp is not None:
                    cp.must_respond(
                        pr.records_size > 0,
                        pr.error_code,
                        pr.high_watermark,
                        pr.last_stable_offset,
                        pr.log_start_offset,
                    )
            if stats is not None and it.topic is not None:
                stats.fetched(it.topic, pr.records_size, pr.error_code != 0)
            topic_key = it.topic_id if v >= 13 else it.topic
            if topic_key not in by_topic:
                by_topic[topic_key] = []
                order.append(topic_key)
            by_topic[topic_key].append(pr)
        topics = [(k, by_topic[k]) for k in order]
        if self.request_metrics is not None:
            self._count_errors(0, [pr for k in order for pr in by_topic[k]])
        return encode_fetch_response(v, 0, session.id if session is not None else 0, topics)

    def _error_response(self, v, code, session_id):
        if self.request_metrics is not None:
            self._count_errors(int(code), ())
        return encode_fetch_response(v, int(code), session_id, [])
