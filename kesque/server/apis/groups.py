"""Group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
OffsetDelete, DescribeGroups, ListGroups, DeleteGroups, ConsumerGroupHeartbeat,
ConsumerGroupDescribe. Thin: they translate to the coordinator shard owning the group, and
answer a request that wrote to the group's partition once the write is committed
(``committed.py``)."""

from __future__ import annotations

import asyncio

from ...coordinator.group.classic import ClassicGroup
from ...coordinator.group.consumer import ConsumerGroup, consumer_group_heartbeat
from ...coordinator.group.requests import (
    ConsumerGroupHeartbeat,
    Heartbeat,
    JoinGroup,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetDelete,
    SyncGroup,
)
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg, to_ms
from ...protocol.offset_commit import encode_offset_commit_response
from ..context import CLUSTER_NAME, AclOperation, ResourceType
from .authz import described_groups, member_refused, refused
from .committed import committed, first_error, when_committed
from .core import OMITTED_OPS, authorized_ops

_GROUP_OPS = (3, 6, 8, 10, 11)  # READ DELETE DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS

_READ, _DESCRIBE, _DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
_GROUP, _TOPIC = ResourceType.GROUP, ResourceType.TOPIC


def group_ops(ctx, group_id: str) -> int:
    """A group's authorized operations, as Kafka's authorizedOperations on the group."""
    return authorized_ops(ctx, _GROUP_OPS, _GROUP, group_id)


def may_read_group(ctx, group_id: str) -> bool:
    """READ on the group: what Kafka asks of a member (JoinGroup, SyncGroup, Heartbeat,
    LeaveGroup, OffsetCommit, the KIP-848 and share heartbeats, ShareFetch/ShareAcknowledge)."""
    return ctx.authorize(_READ, _GROUP, group_id)


def heartbeat_refused(m, ctx, group_id: str, topics, member_id=None) -> object | None:
    """Kafka 4.4's refusal of a ConsumerGroupHeartbeat / ShareGroupHeartbeat
    (authz.member_refused; ``member_id``: a share member's, checked too): an answer holding only
    the error code, as the request's getErrorResponse; None when allowed."""
    code = member_refused(ctx, group_id, topics, member_id)
    if code is None:
        return None
    return m(
        throttle_time=0,
        error_code=code,
        error_message=None,
        member_id=None,
        member_epoch=0,
        heartbeat_interval=0,
        assignment=None,
    )


def heartbeat_failed(m, e: KafkaError):
    """A ConsumerGroupHeartbeat / ShareGroupHeartbeat answer for a refused heartbeat."""
    return m(
        throttle_time=0,
        error_code=e.code,
        error_message=e.message,
        member_id=None,
        member_epoch=-1,
        heartbeat_interval=0,
        assignment=None,
    )


def heartbeat_answer(m, r: dict):
    """A ConsumerGroupHeartbeat / ShareGroupHeartbeat answer from the coordinator's result."""
    assignment = None
    if r["assignment"] is not None:
        assignment = m(
            "Assignment",
            topic_partitions=tuple(
                m("TopicPartitions", topic_id=t, partitions=tuple(ps)) for t, ps in r["assignment"].items()
            ),
        )
    return m(
        throttle_time=0,
        error_code=r["error"],
        error_message=r["message"],
        member_id=r["member_id"],
        member_epoch=r["member_epoch"],
        heartbeat_interval=r["heartbeat_interval_ms"],
        assignment=assignment,
    )


def described_assignment(m, image, a: dict):
    """A ConsumerGroupDescribe / ShareGroupDescribe Assignment of ``a`` {topic id: partitions}:
    a topic no longer in the image is left out, as Kafka's (so its empty name is never
    authorized)."""
    tps = []
    for tid, ps in a.items():
        t = image.topics_by_id.get(tid)
        if t is not None:
            tps.append(m("TopicPartitions", topic_id=tid, topic_name=t.name, partitions=tuple(sorted(ps))))
    return m("Assignment", topic_partitions=tuple(tps))


def described_group_failed(m, gid: str, code, msg=None, ops=OMITTED_OPS, epoch: int = -1):
    """A ConsumerGroupDescribe / ShareGroupDescribe DescribedGroup holding an error only."""
    return m(
        "DescribedGroup",
        error_code=code,
        error_message=msg,
        group_id=gid,
        group_state="",
        group_epoch=epoch,
        assignment_epoch=epoch,
        assignor_name="",
        members=(),
        authorized_operations=ops,
    )


class GroupApis:
    APIS = (
        Api(ApiKeys.JOIN_GROUP, 0, 9, "join_group"),
        Api(ApiKeys.SYNC_GROUP, 0, 5, "sync_group"),
        Api(ApiKeys.HEARTBEAT, 0, 4, "heartbeat"),
        Api(ApiKeys.LEAVE_GROUP, 0, 5, "leave_group"),
        Api(ApiKeys.OFFSET_COMMIT, 2, 10, "offset_commit"),
        Api(ApiKeys.OFFSET_FETCH, 1, 10, "offset_fetch"),
        Api(ApiKeys.OFFSET_DELETE, 0, 0, "offset_delete"),
        Api(ApiKeys.DESCRIBE_GROUPS, 0, 6, "describe_groups"),
        Api(ApiKeys.LIST_GROUPS, 0, 5, "list_groups"),
        Api(ApiKeys.DELETE_GROUPS, 0, 2, "delete_groups"),
        Api(ApiKeys.CONSUMER_GROUP_HEARTBEAT, 0, 1, "consumer_group_heartbeat"),
        Api(ApiKeys.CONSUMER_GROUP_DESCRIBE, 0, 1, "consumer_group_describe"),
    )

    def __init__(self, *, image, group_coordinator, share_manager, request_metrics=None):
        """``share_manager``: the SharePartitionManager, whose share-partition state goes with a
        deleted share group (None when share groups are off). ``request_metrics``: kesque.metrics'
        counters, for the error codes of the OffsetCommit responses encoded here (None: off)."""
        self.image = image
        self.gc = group_coordinator
        self.share_manager = share_manager
        self.request_metrics = request_metrics

    def _host(self, ctx) -> str:
        return "/" + ctx.client_host

    # ------------------------------------------------------------------ JoinGroup
    def join_group(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.JOIN_GROUP, v)

        def build(r: dict):
            members = tuple(
                m(
                    "JoinGroupResponseMember",
                    member_id=x["member_id"],
                    group_instance_id=x["group_instance_id"],
                    metadata=x["metadata"],
                )
                for x in r.get("members") or []
            )
            return m(
                throttle_time=0,
                error_code=r["error"],
                generation_id=r["generation_id"],
                protocol_type=r["protocol_type"],
                protocol_name=r["protocol_name"] if v >= 7 or r["protocol_name"] else ("" if v < 7 else None),
                leader=r["leader"],
                skip_assignment=r["skip_assignment"],
                member_id=r["member_id"],
                members=members,
            )

        def failed(code: ErrorCode):
            return build(
                {
                    "error": code,
                    "member_id": req.member_id,
                    "generation_id": -1,
                    "protocol_type": None,
                    "protocol_name": None,
                    "leader": "",
                    "skip_assignment": False,
                    "members": [],
                }
            )

        if not may_read_group(ctx, req.group_id):
            return failed(ErrorCode.group_authorization_failed)
        try:
            shard = self.gc.shard_for(req.group_id)
        except KafkaError as e:
            return failed(e.code)
        session = to_ms(req.session_timeout)
        rebalance = to_ms(req.rebalance_timeout) if v >= 1 else session
        fut, reply = self._reply(req.group_id)
        shard.join_group(
            JoinGroup(
                req.group_id,
                req.member_id,
                req.protocol_type,
                [(p.name, p.metadata) for p in req.protocols],
                session,
                rebalance,
                getattr(req, "group_instance_id", None),
                ctx.client_id,
                self._host(ctx),
                require_known_member_id=v >= 4,
                supports_skip_assignment=v >= 9,
            ),
            reply,
        )
        return self._await(fut, build, failed)

    def _reply(self, group_id: str):
        """A future for a shard's answer, and the callback that sets it with the group
        partition's uncommitted writes at the time of the answer."""
        gc = self.gc
        partition = gc.partition_for(group_id)
        fut = asyncio.get_running_loop().create_future()
        return fut, lambda r: fut.done() or fut.set_result((r, gc.uncommitted([partition])))

    async def _await(self, fut, build, failed):
        r, pending = await fut
        code = first_error(await committed(self.gc, pending))
        return failed(code) if code else build(r)

    def _when_committed(self, group_id: str, response, failed):
        return when_committed(self.gc, [self.gc.partition_for(group_id)], response, failed)

    # ------------------------------------------------------------------ SyncGroup
    def sync_group(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.SYNC_GROUP, v)

        def build(r: dict):
            return m(
                throttle_time=0,
                error_code=r["error"],
                protocol_type=r.get("protocol_type"),
                protocol_name=r.get("protocol_name"),
                assignment=r.get("assignment") or b"",
            )

        if not may_read_group(ctx, req.group_id):
            return build({"error": ErrorCode.group_authorization_failed})
        if not req.group_id:
            return build({"error": ErrorCode.invalid_group_id})
        try:
            shard = self.gc.shard_for(req.group_id)
        except KafkaError as e:
            return build({"error": e.code})
        fut, reply = self._reply(req.group_id)
        shard.sync_group(
            SyncGroup(
                req.group_id,
                req.member_id,
                req.generation_id,
                getattr(req, "group_instance_id", None),
                getattr(req, "protocol_type", None),
                getattr(req, "protocol_name", None),
                {a.member_id: a.assignment for a in req.assignments},
            ),
            reply,
        )
        return self._await(fut, build, lambda code: build({"error": code}))

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup
    def heartbeat(self, ctx, req):
        m = Msg(ApiKeys.HEARTBEAT, ctx.api_version)
        if not may_read_group(ctx, req.group_id):
            return m(throttle_time=0, error_code=ErrorCode.group_authorization_failed)
        if not req.group_id:
            return m(throttle_time=0, error_code=ErrorCode.invalid_group_id)
        try:
            code = self.gc.shard_for(req.group_id).heartbeat(
                Heartbeat(req.group_id, req.member_id, req.generation_id, getattr(req, "group_instance_id", None))
            )
        except KafkaError as e:
            code = e.code
        return m(throttle_time=0, error_code=code)

    def leave_group(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.LEAVE_GROUP, v)
        members = [(x.member_id, x.group_instance_id) for x in req.members] if v >= 3 else [(req.member_id, None)]
        if not may_read_group(ctx, req.group_id):
            return m(throttle_time=0, error_code=ErrorCode.group_authorization_failed, members=())
        if not req.group_id:
            return m(throttle_time=0, error_code=ErrorCode.invalid_group_id, members=())
        try:
            err, results = self.gc.shard_for(req.group_id).leave_group(req.group_id, members)
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, members=())
        if v < 3:
            code = err or (results[0][2] if results else ErrorCode.none)
            resp = m(throttle_time=0, error_code=code)
        else:
            resp = m(
                throttle_time=0,
                error_code=err,
                members=tuple(
                    m("MemberResponse", member_id=mid, group_instance_id=iid, error_code=e) for mid, iid, e in results
                ),
            )
        return self._when_committed(req.group_id, resp, lambda code: m(throttle_time=0, error_code=code, members=()))

    # ------------------------------------------------------------------ OffsetCommit
    def offset_commit(self, ctx, req):
        v = ctx.api_version
        image = self.image
        topics: dict[str, list] = {}
        errors: dict[tuple, ErrorCode] = {}
        keys = []  # response order: (topic key, partition, topic name or None)
        # as Kafka: READ on the group, or every partition answers GROUP_AUTHORIZATION_FAILED;
        # then READ on each (known) topic, or its partitions answer TOPIC_AUTHORIZATION_FAILED
        group_refused = not may_read_group(ctx, req.group_id)
        if v >= 10:
            names = [getattr(image.topics_by_id.get(t.topic_id), "name", None) for t in req.topics]
        else:
            names = [t.name for t in req.topics]
        denied = () if group_refused else refused(ctx, _READ, _TOPIC, [n for n in names if n is not None])
        for t, name in zip(req.topics, names):
            if v >= 10:
                ti = image.topics_by_id.get(t.topic_id)
                key = t.topic_id
            else:
                ti = image.topic(t.name)
                key = t.name
            for p in t.partitions:
                keys.append((key, p.partition_index, name))
                if group_refused:
                    errors[(key, p.partition_index)] = ErrorCode.group_authorization_failed
                    continue
                if name in denied:
                    errors[(key, p.partition_index)] = ErrorCode.topic_authorization_failed
                    continue
                if ti is None or p.partition_index not in ti.partitions:
                    errors[(key, p.partition_index)] = (
                        ErrorCode.unknown_topic_id if v >= 10 else ErrorCode.unknown_topic_or_partition
                    )
                    continue
                topics.setdefault(name, []).append(
                    OffsetCommitPartition(
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                )
        group_error = None
        results = {}
        if topics:
            try:
                commit = OffsetCommit(
                    req.group_id,
                    topics,
                    req.member_id,
                    getattr(req, "generation_id_or_member_epoch", -1),
                    getattr(req, "group_instance_id", None),
                    to_ms(req.retention_time) if hasattr(req, "retention_time") else -1,
                    v,
                )
                results = self.gc.run_write(req.group_id, lambda shard: shard.commit_offsets(commit))
            except KafkaError as e:  # the group's refusal, or a failed append
                group_error = e.code

        def respond(group_error):
            by_topic: dict = {}
            for key, part, name in keys:
                code = errors.get((key, part))
                if code is None:
                    code = group_error if group_error is not None else results.get((name, part), ErrorCode.none)
                by_topic.setdefault(key, []).append((part, code))
            if self.request_metrics is not None:
                counts: dict = {}
                for parts in by_topic.values():
                    for _part, code in parts:
                        counts[int(code)] = counts.get(int(code), 0) + 1
                self.request_metrics.errors_of(ApiKeys.OFFSET_COMMIT, counts)
            return encode_offset_commit_response(v, list(by_topic.items()))

        return self._when_committed(req.group_id, respond(group_error), respond)

    # ------------------------------------------------------------------ OffsetFetch
    def offset_fetch(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.OFFSET_FETCH, v)
        if v >= 8:
            groups = []
            for g in req.groups:
                groups.append(
                    self._fetch_group(
                        ctx,
                        m,
                        v,
                        g.group_id,
                        g.topics,
                        getattr(g, "member_id", None),
                        getattr(g, "member_epoch", -1),
                        req.require_stable,
                    )
                )
            return m(throttle_time=0, groups=tuple(groups))
        topics, err = self._fetch_topics(
            ctx, m, v, req.group_id, req.topics, None, -1, stable=getattr(req, "require_stable", False)
        )
        if v == 1 and err != ErrorCode.none:
            # v1 has no top-level error: every partition carries it
            topics = tuple(
                m(
                    "OffsetFetchResponseTopic",
                    name=t.name,
                    partitions=tuple(
                        m(
                            "OffsetFetchResponsePartition",
                            partition_index=p.partition_index,
                            committed_offset=-1,
                            metadata="",
                            error_code=err,
                        )
                        for p in t.partitions
                    ),
                )
                for t in topics
            )
        return m(throttle_time=0, topics=topics, error_code=err)

    def _fetch_group(self, ctx, m, v, group_id, topics, member_id, member_epoch, stable):
        out, err = self._fetch_topics(ctx, m, v, group_id, topics, member_id, member_epoch, grouped=True, stable=stable)
        return m("OffsetFetchResponseGroup", group_id=group_id, topics=out, error_code=err)

    def _fetch_topics(self, ctx, m, v, group_id, topics, member_id, member_epoch, grouped=False, stable=False):
        """``stable`` (require_stable): a partition with a pending transactional commit
        answers UNSTABLE_OFFSET_COMMIT, and the client retries. As Kafka: DESCRIBE on the group,
        or GROUP_AUTHORIZATION_FAILED; a topic asked for that the principal may not DESCRIBE
        answers TOPIC_AUTHORIZATION_FAILED, and all the group's offsets leave such topics out."""
        if not ctx.authorize(_DESCRIBE, _GROUP, group_id):
            return (), ErrorCode.group_authorization_failed
        image = self.image
        by_id = v >= 10
        topic_struct = "OffsetFetchResponseTopics" if grouped else "OffsetFetchResponseTopic"
        part_struct = "OffsetFetchResponsePartitions" if grouped else "OffsetFetchResponsePartition"
        wanted = None
        names = {}
        if topics is not None:
            wanted = []
            for t in topics:
                if by_id:
                    ti = image.topics_by_id.get(t.topic_id)
                    name = ti.name if ti else None
                    names[name] = t.topic_id
                else:
                    name = t.name
                wanted.append((name, list(t.partition_indexes)))
        hidden = ()  # topics asked for that the principal may not describe: answered, not fetched
        if ctx.authorizer is not None and wanted is not None:
            hidden = refused(ctx, _DESCRIBE, _TOPIC, [n for n, _ps in wanted if n is not None])
            if hidden:
                denied = [(n, ps) for n, ps in wanted if n in hidden]
                wanted = [(n, ps) for n, ps in wanted if n not in hidden]
        try:
            shard = self.gc.read_shard(group_id)  # committed offsets only (never one a failover may lose)
            err, offsets = shard.fetch_offsets(group_id, wanted, member_id, member_epoch)
        except KafkaError as e:
            return (), e.code
        if err:
            return (), err
        if ctx.authorizer is not None and topics is None:
            shown = {t for t, _p in offsets}
            invisible = refused(ctx, _DESCRIBE, _TOPIC, shown)
            if invisible:
                offsets = {tp: om for tp, om in offsets.items() if tp[0] not in invisible}
        grouped_offsets: dict = {}
        for (topic, part), om in offsets.items():
            grouped_offsets.setdefault(topic, []).append((part, om))
        out = []
        for topic, parts in grouped_offsets.items():
            pr = []
            for part, om in sorted(parts):
                if stable and shard.has_pending_txn_offset(group_id, (topic, part)):
                    pr.append(
                        m(
                            part_struct,
                            partition_index=part,
                            committed_offset=-1,
                            committed_leader_epoch=-1,
                            metadata="",
                            error_code=ErrorCode.unstable_offset_commit,
                        )
                    )
                    continue
                pr.append(
                    m(
                        part_struct,
                        partition_index=part,
                        committed_offset=om.offset if om else -1,
                        committed_leader_epoch=om.leader_epoch if om else -1,
                        metadata=om.metadata if om else "",
                        error_code=ErrorCode.none,
                    )
                )
            if by_id:
                tid = names.get(topic)
                if tid is None:
                    ti = image.topic(topic)
                    tid = ti.topic_id if ti else None
                out.append(m(topic_struct, topic_id=tid, partitions=tuple(pr)))
            else:
                out.append(m(topic_struct, name=topic, partitions=tuple(pr)))
        if hidden:
            for topic, parts in denied:
                pr = tuple(
                    m(
                        part_struct,
                        partition_index=p,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=ErrorCode.topic_authorization_failed,
                    )
                    for p in parts
                )
                if by_id:
                    out.append(m(topic_struct, topic_id=names.get(topic), partitions=pr))
                else:
                    out.append(m(topic_struct, name=topic, partitions=pr))
        return tuple(out), ErrorCode.none

    # ------------------------------------------------------------------ OffsetDelete
    def offset_delete(self, ctx, req):
        m = Msg(ApiKeys.OFFSET_DELETE, ctx.api_version)
        wanted = {t.name: [p.partition_index for p in t.partitions] for t in req.topics}
        if not ctx.authorize(_DELETE, _GROUP, req.group_id):
            return m(error_code=ErrorCode.group_authorization_failed, throttle_time=0, topics=())
        if not req.group_id:
            return m(error_code=ErrorCode.invalid_group_id, throttle_time=0, topics=())
        # as Kafka: READ on each topic, or its partitions answer TOPIC_AUTHORIZATION_FAILED
        denied = refused(ctx, _READ, _TOPIC, wanted)
        try:
            delete = OffsetDelete(req.group_id, {t: ps for t, ps in wanted.items() if t not in denied})
            results = self.gc.run_write(req.group_id, lambda shard: shard.delete_offsets(delete))
        except KafkaError as e:  # the group's refusal, or a failed append
            return m(error_code=e.code, throttle_time=0, topics=())
        topics = tuple(
            m(
                "OffsetDeleteResponseTopic",
                name=t,
                partitions=tuple(
                    m(
                        "OffsetDeleteResponsePartition",
                        partition_index=p,
                        error_code=ErrorCode.topic_authorization_failed
                        if t in denied
                        else results.get((t, p), ErrorCode.none),
                    )
                    for p in ps
                ),
            )
            for t, ps in wanted.items()
        )
        return self._when_committed(
            req.group_id,
            m(error_code=ErrorCode.none, throttle_time=0, topics=topics),
            lambda code: m(error_code=code, throttle_time=0, topics=()),
        )

    # ------------------------------------------------------------------ admin
    def describe_groups(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.DESCRIBE_GROUPS, v)
        out = []
        include_ops = getattr(req, "include_authorized_operations", False)
        for gid in req.groups:
            if not ctx.authorize(_DESCRIBE, _GROUP, gid):  # as Kafka's DescribeGroupsResponse.groupError
                out.append(
                    m(
                        "DescribedGroup",
                        error_code=ErrorCode.group_authorization_failed,
                        group_id=gid,
                        group_state="",
                        protocol_type="",
                        protocol_data="",
                        members=(),
                        authorized_operations=OMITTED_OPS,
                    )
                )
                continue
            ops = group_ops(ctx, gid) if include_ops else OMITTED_OPS
            try:
                g = self.gc.read_group(gid)
            except KafkaError as e:
                out.append(
                    m(
                        "DescribedGroup",
                        error_code=e.code,
                        group_id=gid,
                        group_state="",
                        protocol_type="",
                        protocol_data="",
                        members=(),
                        authorized_operations=ops,
                    )
                )
                continue
            if not isinstance(g, ClassicGroup):
                msg = f"Group {gid} not found." if g is None else f"Group {gid} is not a classic group."
                if v >= 6:
                    out.append(
                        m(
                            "DescribedGroup",
                            error_code=ErrorCode.group_id_not_found,
                            error_message=msg,
                            group_id=gid,
                            group_state="Dead",
                            protocol_type="",
                            protocol_data="",
                            members=(),
                            authorized_operations=ops,
                        )
                    )
                else:
                    out.append(
                        m(
                            "DescribedGroup",
                            error_code=ErrorCode.none,
                            group_id=gid,
                            group_state="Dead",
                            protocol_type="",
                            protocol_data="",
                            members=(),
                            authorized_operations=ops,
                        )
                    )
                continue
            # as Kafka's group summary: metadata, assignments and the protocol only once Stable
            stable = g.state == "Stable"
            members = tuple(
                m(
                    "DescribedGroupMember",
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    member_metadata=x.metadata(g.protocol_name) if stable else b"",
                    member_assignment=x.assignment if stable else b"",
                )
                for x in g.members.values()
            )
            out.append(
                m(
                    "DescribedGroup",
                    error_code=ErrorCode.none,
                    group_id=gid,
                    group_state=g.state,
                    protocol_type=g.protocol_type or "",
                    protocol_data=(g.protocol_name or "") if stable else "",
                    members=members,
                    authorized_operations=ops,
                )
            )
        return m(throttle_time=0, groups=tuple(out))

    def list_groups(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.LIST_GROUPS, v)
        states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
        out = []
        # as Kafka: every group with DESCRIBE on the cluster, else those it may DESCRIBE
        everything = ctx.authorize(_DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        for gid, ptype, state, gtype in self.gc.list_groups():  # the committed groups
            if states and state.lower() not in states:
                continue
            if types and gtype not in types:
                continue
            if not everything and not ctx.authorize(_DESCRIBE, _GROUP, gid):
                continue
            out.append(m("ListedGroup", group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype))
        return m(throttle_time=0, error_code=ErrorCode.none, groups=tuple(out))

    def delete_groups(self, ctx, req):
        m = Msg(ApiKeys.DELETE_GROUPS, ctx.api_version)
        out = []
        shares = []  # deleted share groups: their share-partition state goes too
        denied = refused(ctx, _DELETE, _GROUP, req.groups_names)
        for gid in req.groups_names:
            if gid in denied:
                out.append((gid, ErrorCode.group_authorization_failed))
                continue
            try:
                shard = self.gc.shard_for(gid)
                share = getattr(shard.groups.get(gid), "type", None) == "share"
                code = self.gc.apply(shard, shard.delete_group(gid))
                if share and code == ErrorCode.none:
                    shares.append(gid)
            except KafkaError as e:
                code = e.code
            out.append((gid, code))
        pending = self.gc.uncommitted({self.gc.partition_for(gid) for gid, code in out if not code})
        if shares:
            return self._share_states_deleted(m, out, pending, shares)
        if not pending:
            return self._deleted(m, out, {})
        return self._deleted_once_committed(m, out, pending)

    async def _share_states_deleted(self, m, out: list, pending: dict, shares: list):
        """Deleted share groups' state goes from their share coordinators (DeleteShareGroupState,
        wherever they are) before the answer; a failure there is the group's error."""
        mgr = self.share_manager
        codes = dict(out)
        for gid in shares:
            try:
                await mgr.delete_states(mgr.group_keys(gid))
            except KafkaError as e:
                codes[gid] = e.code
        out = [(gid, codes[gid]) for gid, _ in out]
        if not pending:
            return self._deleted(m, out, {})
        return await self._deleted_once_committed(m, out, pending)

    def _deleted(self, m, out: list, failed: dict):
        """The DeleteGroups answer; ``failed``: {group partition: error} of writes not committed."""
        return m(
            throttle_time=0,
            results=tuple(
                m(
                    "DeletableGroupResult",
                    group_id=gid,
                    error_code=code or failed.get(self.gc.partition_for(gid)) or ErrorCode.none,
                )
                for gid, code in out
            ),
        )

    async def _deleted_once_committed(self, m, out: list, pending: dict):
        codes = await committed(self.gc, pending)
        return self._deleted(m, out, {p: c for (_t, p), c in codes.items()})

    # ------------------------------------------------------------------ KIP-848
    def consumer_group_heartbeat(self, ctx, req):
        v = ctx.api_version
        m = Msg(ApiKeys.CONSUMER_GROUP_HEARTBEAT, v)
        refusal = heartbeat_refused(m, ctx, req.group_id, req.subscribed_topic_names)
        if refusal is not None:
            return refusal
        owned = None
        if req.topic_partitions is not None:
            owned = {tp.topic_id: set(tp.partitions) for tp in req.topic_partitions}
        try:
            shard = self.gc.shard_for(req.group_id)
            r = consumer_group_heartbeat(
                shard,
                ConsumerGroupHeartbeat(
                    req.group_id,
                    req.member_id,
                    req.member_epoch,
                    req.instance_id,
                    req.rack_id,
                    to_ms(req.rebalance_timeout),
                    list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None,
                    getattr(req, "subscribed_topic_regex", None),
                    req.server_assignor,
                    owned,
                    ctx.client_id or "",
                    self._host(ctx),
                    None
                    if ctx.authorizer is None
                    else lambda names: set(names) - refused(ctx, _DESCRIBE, _TOPIC, names),
                ),
                v,
            )
        except KafkaError as e:
            return heartbeat_failed(m, e)
        return self._when_committed(
            req.group_id, heartbeat_answer(m, r), lambda code: heartbeat_failed(m, KafkaError(code))
        )

    def consumer_group_describe(self, ctx, req):
        m = Msg(ApiKeys.CONSUMER_GROUP_DESCRIBE, ctx.api_version)
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
            if not isinstance(g, ConsumerGroup):
                msg = f"Group {gid} not found." if g is None else f"Group {gid} is not a consumer group."
                return failed(gid, ErrorCode.group_id_not_found, msg, ops=ops)
            assignors = [x.server_assignor for x in g.members.values() if x.server_assignor]
            members = tuple(
                m(
                    "Member",
                    member_id=x.member_id,
                    instance_id=x.instance_id,
                    rack_id=x.rack_id,
                    member_epoch=x.member_epoch,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    subscribed_topic_names=tuple(x.subscribed_topic_names),
                    subscribed_topic_regex=x.subscribed_topic_regex,
                    assignment=assignment(x.assigned),
                    target_assignment=assignment(g.target.get(x.member_id, {})),
                    member_type=1,
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
                assignor_name=assignors[0] if assignors else self.gc.config.consumer_assignors[0],
                members=members,
                authorized_operations=ops,
            )

        def topics_of(g):  # Kafka: the topics of the members' assignments and target assignments
            return {
                tp.topic_name
                for x in g.members
                for a in (x.assignment, x.target_assignment)
                for tp in a.topic_partitions
            }

        def refused(gid, code, msg):  # Kafka's DescribedGroup with its defaults
            return failed(gid, code, msg, epoch=0)

        groups = described_groups(ctx, req.group_ids, describe, refused, topics_of)
        return m(throttle_time=0, groups=tuple(groups))
