"""Share-group APIs (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe and
DescribeShareGroupOffsets (the coordinator's side), ShareFetch and ShareAcknowledge (the
partition leaders' side, with share sessions).
Thin: they translate to the coordinator shard owning the group and to the
SharePartitionManager. Served only when share groups are enabled (see kesque.share.enabled),
at the versions Kafka 4.4 serves: ShareFetch and ShareAcknowledge v1-2 (v2: the RENEW
acknowledge type, a request that only renews acquisition locks, KIP-1222, and the acquire
mode, KIP-1206)."""

from __future__ import annotations

import asyncio
import inspect
import logging

from ...coordinator.group.requests import ShareGroupHeartbeat
from ...coordinator.group.share import ShareGroup, create_empty_group, share_group_heartbeat
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg, to_ms
from ...share import enabled
from ...share.session import FINAL_EPOCH, INITIAL_EPOCH
from ..context import AclOperation, ResourceType
from ..drivers.share_manager import DEFAULT_MAX_RECORDS, FetchedPartition, SharePartitionManager
from .authz import AUTHZ_MESSAGES, described_groups, refused, share_member_id_invalid
from .committed import when_committed
from .core import OMITTED_OPS, CoordinatorLookup
from .groups import (
    described_assignment,
    described_group_failed,
    group_ops,
    heartbeat_answer,
    heartbeat_failed,
    heartbeat_refused,
    may_read_group,
)

log = logging.getLogger(__name__)

_TOPIC_REFUSED = ErrorCode.topic_authorization_failed, AUTHZ_MESSAGES[ErrorCode.topic_authorization_failed]


class ShareGroupApis:
    @staticmethod
    def apis(config) -> tuple[Api, ...]:
        """Served when share groups are on (group.share.enable)."""
        if not enabled(config):
            return ()
        return (
            Api(ApiKeys.SHARE_GROUP_HEARTBEAT, 1, 1, "share_group_heartbeat"),
            Api(ApiKeys.SHARE_GROUP_DESCRIBE, 1, 1, "share_group_describe"),
            Api(ApiKeys.SHARE_FETCH, 1, 2, "share_fetch"),
            Api(ApiKeys.SHARE_ACKNOWLEDGE, 1, 2, "share_acknowledge"),
            Api(ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, "describe_share_group_offsets"),
            Api(ApiKeys.ALTER_SHARE_GROUP_OFFSETS, 0, 0, "alter_share_group_offsets"),
            Api(ApiKeys.DELETE_SHARE_GROUP_OFFSETS, 0, 0, "delete_share_group_offsets"),
        )

    def __init__(
        self,
        *,
        image,
        config,
        node_id: int,
        replica_manager,
        group_coordinator,
        share_coordinator,
        share_manager: SharePartitionManager | None,
        coordinators: CoordinatorLookup,
        controllers,
    ):
        """``share_coordinator`` and ``share_manager``: None when share groups are off (no API
        is then bound)."""
        self.image = image
        self.config = config
        self.node_id = node_id
        self.replica_manager = replica_manager
        self.gc = group_coordinator
        self.share_coordinator = share_coordinator
        self.manager = share_manager
        self.coordinators = coordinators
        self.controllers = controllers
        self._sessions_checked = 0

    def share_group_heartbeat(self, ctx, req):
        """A share consumer's first call: the share-group state topic is asked of the
        controller before the answer (its ShareFetch needs the topic, and would fail on
        COORDINATOR_NOT_AVAILABLE while it is being created)."""
        spec = self.coordinators.internal_topic_to_create(2)
        if spec is None:
            return self._share_group_heartbeat(ctx, req)
        return self._heartbeat_after_create(ctx, req, spec)

    async def _heartbeat_after_create(self, ctx, req, spec):
        try:
            await self.controllers.create_topics([spec])
        except KafkaError as e:
            log.warning("Creation of internal topic %s failed: %s", spec.name, e)
        return self._share_group_heartbeat(ctx, req)

    def _share_group_heartbeat(self, ctx, req):
        m = Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, ctx.api_version)
        refusal = heartbeat_refused(m, ctx, req.group_id, req.subscribed_topic_names, req.member_id or "")
        if refusal is not None:
            return refusal
        try:
            r = share_group_heartbeat(
                self.gc.shard_for(req.group_id),
                ShareGroupHeartbeat(
                    req.group_id,
                    req.member_id,
                    req.member_epoch,
                    req.rack_id,
                    list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None,
                    ctx.client_id or "",
                    "/" + ctx.client_host,
                ),
            )
        except KafkaError as e:
            return heartbeat_failed(m, e)
        return when_committed(
            self.gc,
            [self.gc.partition_for(req.group_id)],
            heartbeat_answer(m, r),
            lambda code: heartbeat_failed(m, KafkaError(code)),
        )

    def share_group_describe(self, ctx, req):
        m = Msg(ApiKeys.SHARE_GROUP_DESCRIBE, ctx.api_version)
        image = self.image

        def assignment(a):
            return described_assignment(m, image, a)

        def failed(gid, code, msg=None, ops=OMITTED_OPS, epoch=-1):
            return described_group_failed(m, gid, code, msg, ops, epoch)

        def describe(gid):
            ops = group_ops(ctx, gid) if req.include_authorized_operations else OMITTED_OPS
            if not gid:
                return failed(gid, ErrorCode.invalid_group_id, ops=ops)
            try:
                g = self.gc.read_shard(gid).groups.get(gid)
            except KafkaError as e:
                return failed(gid, e.code, ops=ops)
            if not isinstance(g, ShareGroup):
                msg = f"Group {gid} not found." if g is None else f"Group {gid} is not a share group."
                return failed(gid, ErrorCode.group_id_not_found, msg, ops=ops)
            members = tuple(
                m(
                    "Member",
                    member_id=x.member_id,
                    rack_id=x.rack_id,
                    member_epoch=x.member_epoch,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    subscribed_topic_names=tuple(x.subscribed_topic_names),
                    assignment=assignment(x.assigned),
                )
                for x in g.members.values()
            )
            return m(
                "DescribedGroup",
                error_code=ErrorCode.none,
                group_id=gid,
                group_state=g.state_name(),
                group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch,
                assignor_name="simple",
                members=members,
                authorized_operations=ops,
            )

        def topics_of(g):  # Kafka: the topics of the members' assignments
            return {tp.topic_name for x in g.members for tp in x.assignment.topic_partitions}

        def refused_group(gid, code, msg):  # Kafka's DescribedGroup with its defaults
            return failed(gid, code, msg, epoch=0)

        out = described_groups(ctx, req.group_ids, describe, refused_group, topics_of)
        return m(throttle_time=0, groups=tuple(out))

    # ------------------------------------------------------------------ ShareFetch / ShareAcknowledge
    def _expire_sessions(self, now: int) -> None:
        if now - self._sessions_checked >= 1000:
            self._sessions_checked = now
            self.manager.expire_sessions()

    def _unreadable(self, ctx, topic_ids) -> set:
        """The ids of those topics the principal may not READ (Kafka 4.4's ShareFetch and
        ShareAcknowledge: their partitions answer TOPIC_AUTHORIZATION_FAILED; an unknown id is
        left to the share partitions, as Kafka's session leaves it)."""
        if ctx.authorizer is None:
            return set()
        names = {tid: t.name for tid in topic_ids if (t := self.image.topics_by_id.get(tid)) is not None}
        denied = refused(ctx, AclOperation.READ, ResourceType.TOPIC, names.values())
        return {tid for tid, name in names.items() if name in denied}

    def _acks(self, group_id, member_id, topics, now, renew: bool = False, unreadable=()) -> dict:
        """Apply every partition's acknowledgements: {(topic id, partition): KafkaError | None}.
        ``renew``: the request is a v2 one with IsRenewAck, where RENEW is a valid type; the
        acknowledgements of an ``unreadable`` topic are refused, not applied."""
        out = {}
        for t in topics:
            for p in t.partitions:
                if p.acknowledgement_batches and t.topic_id in unreadable:
                    out[(t.topic_id, p.partition_index)] = KafkaError(ErrorCode.topic_authorization_failed)
                elif p.acknowledgement_batches:
                    batches = [
                        (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches
                    ]
                    out[(t.topic_id, p.partition_index)] = self.manager.acknowledge(
                        group_id, member_id, t.topic_id, p.partition_index, batches, now, renew
                    )
        return out

    @staticmethod
    def _renew(ctx, req) -> bool:
        return ctx.api_version >= 2 and bool(getattr(req, "is_renew_ack", False))

    def share_fetch(self, ctx, req):
        m = Msg(ApiKeys.SHARE_FETCH, ctx.api_version)
        mgr = self.manager
        now = mgr.now_ms()
        self._expire_sessions(now)
        gid, mid, epoch = req.group_id, req.member_id, req.share_session_epoch

        def top_error(code, msg=None):
            return m(
                throttle_time=0,
                error_code=code,
                error_message=msg,
                acquisition_lock_timeout=0,
                responses=(),
                node_endpoints=(),
            )

        if not gid:
            return top_error(ErrorCode.invalid_group_id, "The group id must be given.")
        if not may_read_group(ctx, gid):  # (as Kafka 4.4: before the member id is looked at)
            return top_error(ErrorCode.group_authorization_failed)
        if share_member_id_invalid(mid):
            return top_error(ErrorCode.invalid_request)
        renew = self._renew(ctx, req)
        if renew and (req.max_bytes or req.min_bytes or req.max_records or to_ms(req.max_wait)):
            # (KIP-1222: a request that renews acquisition locks fetches nothing; Kafka's answer
            # carries no message)
            return top_error(ErrorCode.invalid_request)
        has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        try:
            if epoch == INITIAL_EPOCH:
                if has_acks:
                    return top_error(ErrorCode.invalid_request, "Acknowledge data present on initial fetch.")
                session, old = mgr.sessions.open(gid, mid, now, getattr(ctx.connection, "id", None))
                if old is not None:
                    mgr.release(gid, mid, list(old.partitions), now)
                mgr.session_opened(gid, [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions])
            else:
                if epoch == FINAL_EPOCH and any(
                    not p.acknowledgement_batches for t in req.topics for p in t.partitions
                ):
                    return top_error(ErrorCode.invalid_request, "Fetch data present on final fetch.")
                session = mgr.sessions.use(gid, mid, epoch, now)
        except KafkaError as e:
            return top_error(e.code)  # (as Kafka: session errors carry no message)
        unreadable = self._unreadable(ctx, [t.topic_id for t in req.topics] + list({k[0] for k in session.partitions}))
        acks = self._acks(gid, mid, req.topics, now, renew, unreadable)
        if epoch == FINAL_EPOCH:
            mgr.release(gid, mid, list(session.partitions), now)
            return self._respond(lambda: self._fetch_response(m, gid, acks, {}), acks, {}, top_error)
        for t in req.topics:
            for p in t.partitions:
                session.partitions[(t.topic_id, p.partition_index)] = None
        for f in req.forgotten_topics_data:
            for p in f.partitions:
                session.partitions.pop((f.topic_id, p), None)
        if renew:  # acknowledgements (renewals among them) only: no records are acquired
            return self._respond(lambda: self._fetch_response(m, gid, acks, {}), acks, {}, top_error)
        fetched = self._fetch_all(gid, mid, session, req, now, unreadable)
        if any(r.acquired or r.error for r in fetched.values()) or to_ms(req.max_wait) <= 0 or not session.partitions:
            return self._respond(lambda: self._fetch_response(m, gid, acks, fetched), acks, fetched, top_error)
        return self._delayed(m, gid, mid, session, req, acks, fetched, top_error)

    def _durable(self, response, failed):
        """``response`` once the share state written for it (acknowledgements, releases, start
        offsets) is committed in ``__share_group_state``."""
        return when_committed(self.share_coordinator, None, response, failed)

    def _respond(self, build, acks: dict, fetched: dict, failed):
        """``build()`` once the writes it depends on are durable: the remote writes (futures in
        ``acks`` and ``fetched``), whose errors become the partitions' errors, then the local
        ones (``_durable``)."""
        futures = [v for v in acks.values() if isinstance(v, asyncio.Future)]
        futures += [r.pending for r in fetched.values() if r.pending is not None]
        if not futures:
            return self._durable(build(), failed)

        async def later():
            await asyncio.wait(futures)
            for k, v in list(acks.items()):
                if isinstance(v, asyncio.Future):
                    acks[k] = v.result()
            for r in fetched.values():
                err = r.pending.result() if r.pending is not None else None
                if err is not None:  # the start offset is not durable: hand nothing out
                    r.error, r.message, r.acquired, r.records = int(err.code), err.message, [], b""
            response = self._durable(build(), failed)
            return await response if inspect.isawaitable(response) else response

        return later()

    def _fetch_all(self, gid, mid, session, req, now, unreadable=()) -> dict:
        remaining = min(req.max_bytes, self.config.get("fetch.max.bytes"))
        max_records = req.max_records if req.max_records > 0 else DEFAULT_MAX_RECORDS
        out = {}
        record_limit = getattr(req, "share_acquire_mode", 0) == 1  # (v1: batch_optimized, as Kafka)
        for topic_id, p in list(session.partitions):
            if topic_id in unreadable:  # in the session still, answered with the error each time
                out[(topic_id, p)] = FetchedPartition(error=int(ErrorCode.topic_authorization_failed))
                continue
            r = out[(topic_id, p)] = self.manager.fetch(
                gid, mid, topic_id, p, max_records, max(remaining, 1), now, record_limit
            )
            remaining -= len(r.records)
            max_records -= sum(a.last - a.first + 1 for a in r.acquired)
            if r.acquired:  # a partition that gave records goes to the back, so none starves
                session.partitions.move_to_end((topic_id, p))
            if max_records <= 0 or remaining <= 0:
                break
        return out

    async def _delayed(self, m, gid, mid, session, req, acks, fetched, failed):
        """Nothing to hand out: wait until an append to one of the partitions, an acknowledgement
        or release on one of its share partitions, or a lock expiry yields records (each tries
        the fetch again at once), or max_wait passes."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        mgr = self.manager
        rm = self.replica_manager
        image = self.image
        keys = [(gid, *tp) for tp in session.partitions]
        tps = {(t.name, p) for _g, tid, p in keys if (t := image.topics_by_id.get(tid)) is not None}

        def retry(*_):
            if fut.done():
                return
            if mgr.sessions.sessions.get((gid, mid)) is not session:
                fut.set_result(fetched)
                return
            try:
                again = self._fetch_all(gid, mid, session, req, mgr.now_ms())
            except Exception:  # runs inside another request's acknowledgement: never fail that one
                log.exception("share fetch of %s in %s failed", mid, gid)
                fut.set_result(fetched)
                return
            if any(r.acquired or r.error for r in again.values()):
                fut.set_result(again)

        def timeout():
            if not fut.done():
                fut.set_result(fetched)

        timers = [loop.call_later(to_ms(req.max_wait) / 1000.0, timeout)]
        deadline = mgr.next_lock_deadline(gid, list(session.partitions))
        if deadline is not None:
            timers.append(loop.call_later(max(0, deadline - mgr.now_ms()) / 1000.0, retry))
        for tp in tps:
            rm.watch(tp, retry)
        for key in keys:
            mgr.watch(key, retry)
        try:
            result = await fut
        finally:
            for t in timers:
                t.cancel()
            for tp in tps:
                rm.unwatch(tp, retry)
            for key in keys:
                mgr.unwatch(key, retry)
        response = self._respond(lambda: self._fetch_response(m, gid, acks, result), acks, result, failed)
        return await response if inspect.isawaitable(response) else response

    def _fetch_response(self, m, gid, acks: dict, fetched: dict):
        by_topic: dict = {}
        for key in list(fetched) + [k for k in acks if k not in fetched]:
            topic_id, p = key
            r = fetched.get(key)
            if r is not None and not (r.acquired or r.error) and key not in acks:
                continue
            ack = acks.get(key)
            by_topic.setdefault(topic_id, []).append(
                m(
                    "PartitionData",
                    partition_index=p,
                    error_code=ErrorCode(r.error) if r is not None else ErrorCode.none,
                    error_message=r.message if r is not None else None,
                    acknowledge_error_code=int(ack.code) if ack is not None else 0,
                    acknowledge_error_message=ack.message if ack is not None else None,
                    current_leader=self._current_leader(m, topic_id, p, r),
                    records=r.records if r is not None else b"",
                    acquired_records=tuple(
                        m("AcquiredRecords", first_offset=a.first, last_offset=a.last, delivery_count=a.delivery_count)
                        for a in (r.acquired if r else ())
                    ),
                )
            )
        responses = tuple(
            m("ShareFetchableTopicResponse", topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        )
        return m(
            throttle_time=0,
            error_code=ErrorCode.none,
            acquisition_lock_timeout=self.manager.lock_duration_ms(gid),
            responses=responses,
            node_endpoints=(),
        )

    def _current_leader(self, m, topic_id, p: int, r):
        """This broker with its epoch, or (NOT_LEADER_OR_FOLLOWER) the leader the image knows,
        so that the client moves (KIP-951)."""
        if r is None or not r.error:
            return m(
                "LeaderIdAndEpoch",
                leader_id=self.node_id if r is not None else -1,
                leader_epoch=r.leader_epoch if r is not None else -1,
            )
        t = self.image.topics_by_id.get(topic_id)
        reg = t.partitions.get(p) if t is not None and r.error == ErrorCode.not_leader_or_follower else None
        return m(
            "LeaderIdAndEpoch",
            leader_id=reg.leader if reg is not None else -1,
            leader_epoch=reg.leader_epoch if reg is not None else -1,
        )

    def share_acknowledge(self, ctx, req):
        m = Msg(ApiKeys.SHARE_ACKNOWLEDGE, ctx.api_version)
        mgr = self.manager
        now = mgr.now_ms()
        gid, mid, epoch = req.group_id, req.member_id, req.share_session_epoch

        def top_error(code, msg=None):
            return m(
                throttle_time=0,
                error_code=code,
                error_message=msg,
                acquisition_lock_timeout=0,
                responses=(),
                node_endpoints=(),
            )

        if not gid:
            return top_error(ErrorCode.invalid_group_id, "The group id must be given.")
        if not may_read_group(ctx, gid):
            return top_error(ErrorCode.group_authorization_failed)
        if share_member_id_invalid(mid):
            return top_error(ErrorCode.invalid_request)
        if epoch == INITIAL_EPOCH:
            return top_error(ErrorCode.invalid_share_session_epoch, "A share acknowledge cannot open a session.")
        try:
            session = mgr.sessions.use(gid, mid or "", epoch, now)
        except KafkaError as e:
            return top_error(e.code)  # (as Kafka: session errors carry no message)
        unreadable = self._unreadable(ctx, [t.topic_id for t in req.topics])
        acks = self._acks(gid, mid, req.topics, now, self._renew(ctx, req), unreadable)
        if epoch == FINAL_EPOCH:
            mgr.release(gid, mid, list(session.partitions), now)

        def build():
            by_topic: dict = {}
            for (topic_id, p), err in acks.items():
                by_topic.setdefault(topic_id, []).append(
                    m(
                        "PartitionData",
                        partition_index=p,
                        error_code=err.code if err is not None else ErrorCode.none,
                        error_message=err.message if err is not None else None,
                        current_leader=m("LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1),
                    )
                )
            return m(
                throttle_time=0,
                error_code=ErrorCode.none,
                acquisition_lock_timeout=mgr.lock_duration_ms(gid),
                responses=tuple(
                    m("ShareAcknowledgeTopicResponse", topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                ),
                node_endpoints=(),
            )

        return self._respond(build, acks, {}, top_error)

    # ------------------------------------------------------------------ DescribeShareGroupOffsets
    async def describe_share_group_offsets(self, ctx, req):
        """Each share-partition's start offset and leader epoch from its share coordinator
        (ReadShareGroupStateSummary, wherever it is), and (v1) its lag: records below the high
        watermark not yet delivery-complete. A partition without share state (nothing handed
        out yet) has start offset -1."""
        m = Msg(ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, ctx.api_version)
        image = self.image
        out = []
        for rg in req.groups:
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, rg.group_id):
                out.append(
                    m(
                        "DescribeShareGroupOffsetsResponseGroup",
                        group_id=rg.group_id,
                        topics=(),
                        error_code=ErrorCode.group_authorization_failed,
                    )
                )
                continue
            try:
                g = self.gc.read_shard(rg.group_id).groups.get(rg.group_id)
            except KafkaError as e:
                out.append(
                    m(
                        "DescribeShareGroupOffsetsResponseGroup",
                        group_id=rg.group_id,
                        topics=(),
                        error_code=e.code,
                        error_message=e.message,
                    )
                )
                continue
            if not isinstance(g, ShareGroup):
                out.append(
                    m(
                        "DescribeShareGroupOffsetsResponseGroup",
                        group_id=rg.group_id,
                        topics=(),
                        error_code=ErrorCode.group_id_not_found,
                        error_message=f"Group {rg.group_id} not found."
                        if g is None
                        else f"Group {rg.group_id} is not a share group.",
                    )
                )
                continue
            if rg.topics is None:
                # as Kafka: every partition of the group's topics (those with share state and those
                # its members subscribe to), -1 for a partition without state yet
                names = {
                    t.name
                    for _g, tid, _p in self.manager.local_state_keys(rg.group_id)
                    if (t := image.topics_by_id.get(tid)) is not None
                }
                names |= {n for n in g.subscribed_topic_names() if image.topic(n) is not None}
                # (as Kafka 4.4: the topics the principal may not DESCRIBE are left out)
                names -= refused(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
                wanted: dict = {n: sorted(image.topic(n).partitions) for n in names}
                hidden: dict = {}
            else:
                denied = refused(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.topic_name for t in rg.topics])
                wanted = {t.topic_name: list(t.partitions) for t in rg.topics if t.topic_name not in denied}
                hidden = {t.topic_name: list(t.partitions) for t in rg.topics if t.topic_name in denied}
            keys = [
                (rg.group_id, t.topic_id, p)
                for name, parts in wanted.items()
                if (t := image.topic(name)) is not None
                for p in parts
            ]
            states = await self.manager.summaries(keys)
            topics = []
            for name, parts in sorted(wanted.items()):
                t = image.topic(name)
                tid = t.topic_id if t is not None else None
                rows = []
                for p in sorted(parts):
                    st = states.get((rg.group_id, tid, p))
                    if isinstance(st, KafkaError):
                        rows.append(
                            m(
                                "DescribeShareGroupOffsetsResponsePartition",
                                partition_index=p,
                                start_offset=-1,
                                leader_epoch=-1,
                                lag=-1,
                                error_code=st.code,
                                error_message=st.message,
                            )
                        )
                    elif st is None:
                        rows.append(
                            m(
                                "DescribeShareGroupOffsetsResponsePartition",
                                partition_index=p,
                                start_offset=-1,
                                leader_epoch=-1,
                                lag=-1,
                                error_code=ErrorCode.none,
                            )
                        )
                    else:
                        rows.append(
                            m(
                                "DescribeShareGroupOffsetsResponsePartition",
                                partition_index=p,
                                start_offset=st.start_offset,
                                leader_epoch=st.leader_epoch,
                                lag=self.manager.lag(name, p, st),
                                error_code=ErrorCode.none,
                            )
                        )
                topics.append(
                    m("DescribeShareGroupOffsetsResponseTopic", topic_name=name, topic_id=tid, partitions=tuple(rows))
                )
            for name, parts in hidden.items():  # after the others, with the zero id, as Kafka 4.4
                rows = [
                    m(
                        "DescribeShareGroupOffsetsResponsePartition",
                        partition_index=p,
                        start_offset=-1,
                        leader_epoch=0,
                        lag=-1,
                        error_code=ErrorCode.topic_authorization_failed,
                        error_message=AUTHZ_MESSAGES[ErrorCode.topic_authorization_failed],
                    )
                    for p in parts
                ]
                topics.append(
                    m("DescribeShareGroupOffsetsResponseTopic", topic_name=name, topic_id=None, partitions=tuple(rows))
                )
            out.append(
                m(
                    "DescribeShareGroupOffsetsResponseGroup",
                    group_id=rg.group_id,
                    topics=tuple(topics),
                    error_code=ErrorCode.none,
                )
            )
        return m(throttle_time=0, groups=tuple(out))

    # ------------------------------------------------------------------ AlterShareGroupOffsets
    async def alter_share_group_offsets(self, ctx, req):
        """Set share-partition start offsets of an empty share group: each partition's state
        starts over at the offset (a new state epoch), so what was in flight is forgotten."""
        m = Msg(ApiKeys.ALTER_SHARE_GROUP_OFFSETS, ctx.api_version)

        def top(code, msg):
            return m(throttle_time=0, error_code=code, error_message=msg, responses=())

        if not may_read_group(ctx, req.group_id):
            return top(ErrorCode.group_authorization_failed, AUTHZ_MESSAGES[ErrorCode.group_authorization_failed])
        denied = refused(ctx, AclOperation.READ, ResourceType.TOPIC, [rt.topic_name for rt in req.topics])
        # (Kafka 4.4: a request whose every topic is refused leaves the group alone, created or not)
        err = (
            None
            if req.topics and denied >= {rt.topic_name for rt in req.topics}
            else self._empty_share_group(req.group_id, create=True)
        )
        if err is not None:
            return top(*err)
        image = self.image
        out = []
        for rt in req.topics:
            t = image.topic(rt.topic_name)
            rows = []
            for rp in rt.partitions:
                code, msg = ErrorCode.none, None
                if rt.topic_name in denied:
                    code, msg = _TOPIC_REFUSED
                elif t is None or rp.partition_index not in t.partitions:
                    code, msg = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
                elif rp.start_offset < 0:
                    code, msg = ErrorCode.invalid_request, f"Invalid start offset {rp.start_offset}."
                else:
                    try:
                        await self.manager.reset(req.group_id, t.topic_id, rp.partition_index, rp.start_offset)
                    except KafkaError as e:
                        code, msg = e.code, e.message
                rows.append(
                    m(
                        "AlterShareGroupOffsetsResponsePartition",
                        partition_index=rp.partition_index,
                        error_code=code,
                        error_message=msg,
                    )
                )
            out.append(
                m(
                    "AlterShareGroupOffsetsResponseTopic",
                    topic_name=rt.topic_name,
                    topic_id=t.topic_id if t is not None else None,
                    partitions=tuple(rows),
                )
            )
        return m(throttle_time=0, error_code=ErrorCode.none, responses=tuple(out))

    def _empty_share_group(self, group_id: str, create: bool = False) -> tuple | None:
        """(error code, message) unless ``group_id`` is a share group without members; with
        ``create``, an unknown id becomes a new empty share group (as Kafka's coordinator does
        for AlterShareGroupOffsets)."""
        if not group_id:
            return ErrorCode.invalid_group_id, "The group id must be given."
        try:
            shard = self.gc.shard_for(group_id)
            g = shard.groups.get(group_id)
            if g is None and create:
                g = create_empty_group(shard, group_id)
        except KafkaError as e:  # a refusal (ShareHeartbeatError) or a failed write
            return e.code, e.message
        if not isinstance(g, ShareGroup):
            return ErrorCode.group_id_not_found, (
                f"Group {group_id} not found." if g is None else f"Group {group_id} is not a share group."
            )
        if not g.is_empty():
            return ErrorCode.non_empty_group, "The group is not empty."
        return None

    # ------------------------------------------------------------------ DeleteShareGroupOffsets
    async def delete_share_group_offsets(self, ctx, req):
        """Forget an empty share group's state for whole topics (their next fetch starts from
        share.auto.offset.reset again)."""
        m = Msg(ApiKeys.DELETE_SHARE_GROUP_OFFSETS, ctx.api_version)
        err = None
        if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
            err = ErrorCode.group_authorization_failed, AUTHZ_MESSAGES[ErrorCode.group_authorization_failed]
        err = err or self._empty_share_group(req.group_id)
        if err is not None:
            return m(throttle_time=0, error_code=err[0], error_message=err[1], responses=())
        denied = refused(ctx, AclOperation.READ, ResourceType.TOPIC, [rt.topic_name for rt in req.topics])
        out = []
        for rt in req.topics:
            t = self.image.topic(rt.topic_name)
            code, msg = ErrorCode.none, None
            if rt.topic_name in denied:
                code, msg = _TOPIC_REFUSED
            elif t is None:
                code, msg = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            else:
                try:
                    await self.manager.delete_states([(req.group_id, t.topic_id, p) for p in sorted(t.partitions)])
                except KafkaError as e:
                    code, msg = e.code, e.message
            out.append(
                m(
                    "DeleteShareGroupOffsetsResponseTopic",
                    topic_name=rt.topic_name,
                    topic_id=t.topic_id if t is not None else None,
                    error_code=code,
                    error_message=msg,
                )
            )
        return m(throttle_time=0, error_code=ErrorCode.none, responses=tuple(out))
