"""Share-group APIs (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe (the coordinator's
side). Thin: they translate to the coordinator shard owning the group. Served only when
share groups are enabled (see kesque.share.enabled), at the versions librdkafka sends."""

from __future__ import annotations

from ...coordinator.group.share import ShareGroup, share_group_heartbeat
from ...errors import ErrorCode, KafkaError
from ...share import enabled
from .core import OMITTED_OPS
from .kiohelp import Msg

_GROUP_OPS = 0
for _op in (3, 6, 8, 10, 11):  # READ DELETE DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    _GROUP_OPS |= 1 << _op


def _code(name: str | None) -> ErrorCode:
    return ErrorCode.none if name is None else ErrorCode[name]


class ShareGroupApis:
    def __init__(self, server):
        self.server = server

    def register(self) -> None:
        s = self.server
        if not enabled(s.config):
            return
        s.register(76, 1, 1, self.share_group_heartbeat)
        s.register(77, 1, 1, self.share_group_describe)

    @property
    def gc(self):
        return self.server.group_coordinator

    def share_group_heartbeat(self, ctx, req):
        m = Msg(76, ctx.api_version)
        try:
            r = share_group_heartbeat(self.gc.shard_for(req.group_id), {
                "group_id": req.group_id, "member_id": req.member_id, "member_epoch": req.member_epoch,
                "rack_id": req.rack_id,
                "subscribed_topic_names": list(req.subscribed_topic_names)
                if req.subscribed_topic_names is not None else None,
                "client_id": ctx.client_id or "", "client_host": "/" + ctx.client_host})
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, error_message=e.message, member_id=None, member_epoch=-1,
                     heartbeat_interval=0, assignment=None)
        assignment = None
        if r["assignment"] is not None:
            assignment = m("Assignment", topic_partitions=tuple(
                m("TopicPartitions", topic_id=t, partitions=tuple(ps)) for t, ps in r["assignment"].items()))
        return m(throttle_time=0, error_code=_code(r["error"]), error_message=r["message"], member_id=r["member_id"],
                 member_epoch=r["member_epoch"], heartbeat_interval=r["heartbeat_interval_ms"], assignment=assignment)

    def share_group_describe(self, ctx, req):
        m = Msg(77, ctx.api_version)
        image = self.server.image
        ops = _GROUP_OPS if req.include_authorized_operations else OMITTED_OPS

        def assignment(a):
            tps = []
            for tid, ps in a.items():
                t = image.topics_by_id.get(tid)
                tps.append(m("TopicPartitions", topic_id=tid, topic_name=t.name if t else "",
                             partitions=tuple(sorted(ps))))
            return m("Assignment", topic_partitions=tuple(tps))

        def failed(gid, code, msg=None):
            return m("DescribedGroup", error_code=code, error_message=msg, group_id=gid, group_state="",
                     group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(), authorized_operations=ops)

        out = []
        for gid in req.group_ids:
            if not gid:
                out.append(failed(gid, ErrorCode.invalid_group_id))
                continue
            try:
                g = self.gc.shard_for(gid).groups.get(gid)
            except KafkaError as e:
                out.append(failed(gid, e.code))
                continue
            if not isinstance(g, ShareGroup):
                msg = f"Group {gid} not found." if g is None else f"Group {gid} is not a share group."
                out.append(failed(gid, ErrorCode.group_id_not_found, msg))
                continue
            members = tuple(m("Member", member_id=x.member_id, rack_id=x.rack_id, member_epoch=x.member_epoch,
                              client_id=x.client_id, client_host=x.client_host,
                              subscribed_topic_names=tuple(x.subscribed_topic_names),
                              assignment=assignment(x.assigned))
                            for x in g.members.values())
            out.append(m("DescribedGroup", error_code=ErrorCode.none, group_id=gid, group_state=g.state_name(),
                         group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch, assignor_name="simple",
                         members=members, authorized_operations=ops))
        return m(throttle_time=0, groups=tuple(out))
