"""The KRaft and controller RPCs: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot (and
Fetch of ``__cluster_metadata``, see fetch.py) go to the raft manager; BrokerRegistration,
AllocateProducerIds, AlterPartition and ElectLeaders to the active controller; DescribeQuorum is
answered by the raft leader.

As in Kafka, the raft and controller RPCs are served on the controller listeners only;
DescribeQuorum and ElectLeaders on every listener (a broker listener sends them on to the active
controller).
"""

from __future__ import annotations

from ...controller import cluster_control
from ...controller.replication_control import ELECTION_TYPES
from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...raft import wire
from ..context import CLUSTER_NAME, NO_RESPONSE, AclOperation, ResourceType
from ..drivers import alter_partition
from .authz import cluster_action_refused


class QuorumApis:
    APIS = (
        *(
            Api(key, wire.VERSIONS[name].start, wire.VERSIONS[name].stop - 1, "raft_rpc", controller_only=True)
            for key, name in (
                (ApiKeys.VOTE, "vote"),
                (ApiKeys.BEGIN_QUORUM_EPOCH, "begin_quorum_epoch"),
                (ApiKeys.END_QUORUM_EPOCH, "end_quorum_epoch"),
                (ApiKeys.FETCH_SNAPSHOT, "fetch_snapshot"),
            )
        ),
        Api(ApiKeys.BROKER_REGISTRATION, 0, 4, "broker_registration", controller_only=True),
        Api(ApiKeys.BROKER_HEARTBEAT, 0, 1, "broker_heartbeat", controller_only=True),
        Api(ApiKeys.ALLOCATE_PRODUCER_IDS, 0, 0, "allocate_producer_ids", controller_only=True),
        Api(ApiKeys.ASSIGN_REPLICAS_TO_DIRS, 0, 0, "assign_replicas_to_dirs", controller_only=True),
        Api(ApiKeys.UNREGISTER_BROKER, 0, 0, "unregister_broker"),  # kafka-cluster.sh unregister: any listener
        Api(ApiKeys.DESCRIBE_QUORUM, 0, 2, "describe_quorum"),
        Api(
            ApiKeys.ALTER_PARTITION,
            alter_partition.VERSIONS.start,
            alter_partition.VERSIONS.stop - 1,
            "alter_partition",
            controller_only=True,
        ),
        Api(ApiKeys.ELECT_LEADERS, 0, 2, "elect_leaders"),
    )

    def __init__(self, *, raft, controllers):
        self.raft = raft  # the RaftManager of __cluster_metadata
        self.controllers = controllers

    async def raft_rpc(self, ctx, req):
        refusal = cluster_action_refused(ctx)  # ControllerApis': the controllers' own RPCs
        if refusal is not None:
            return refusal
        raft = self.raft
        if raft is None:
            return NO_RESPONSE
        resp = await raft.handle_request(ctx.header.api_key, ctx.api_version, req)
        return NO_RESPONSE if resp is None else resp

    # ------------------------------------------------------------------ DescribeQuorum
    def describe_quorum(self, ctx, req):
        # checked where the controller is (Kafka's ControllerApis)
        return self.controllers.dispatch(ctx, req, lambda: self._describe_local(ctx, req))

    def _describe_local(self, ctx, req):
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            m = Msg(ApiKeys.DESCRIBE_QUORUM, ctx.api_version)
            return m(error_code=ErrorCode.cluster_authorization_failed, error_message=None, topics=(), nodes=())
        if not wire.is_metadata_partition(req):
            m = Msg(ApiKeys.DESCRIBE_QUORUM, ctx.api_version)
            return m(error_code=ErrorCode.unknown_topic_or_partition, error_message=None, topics=(), nodes=())
        raft = self.raft
        return wire.describe_quorum_response(raft.describe_quorum(), ctx.api_version)

    # ------------------------------------------------------------------ BrokerRegistration
    def broker_registration(self, ctx, req):
        refusal = cluster_action_refused(ctx)  # ControllerApis': the brokers' own RPC
        if refusal is not None:
            return refusal
        return self.controllers.dispatch(ctx, req, lambda: self._register(ctx, req))

    async def _register(self, ctx, req):
        m = Msg(ApiKeys.BROKER_REGISTRATION, ctx.api_version)
        try:
            epoch = await self.controllers.lifecycle_call("register", cluster_control.from_kio(req))
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, broker_epoch=-1)
        return m(throttle_time=0, error_code=ErrorCode.none, broker_epoch=epoch)

    # ------------------------------------------------------------------ BrokerHeartbeat
    def broker_heartbeat(self, ctx, req):
        refusal = cluster_action_refused(ctx)  # ControllerApis': the brokers' own RPC
        if refusal is not None:
            return refusal
        return self.controllers.dispatch(ctx, req, lambda: self._heartbeat(ctx, req))

    async def _heartbeat(self, ctx, req):
        try:
            reply = await self.controllers.lifecycle_call("heartbeat", cluster_control.from_kio(req))
        except KafkaError as e:
            reply = cluster_control.HeartbeatReply(int(e.code))
        return cluster_control.to_kio(reply, ctx.api_version)

    # ------------------------------------------------------------------ AssignReplicasToDirs
    def assign_replicas_to_dirs(self, ctx, req):
        refusal = cluster_action_refused(ctx)  # ControllerApis': the brokers' own RPC
        if refusal is not None:
            return refusal
        return self.controllers.dispatch(ctx, req, lambda: self._assign(ctx, req))

    async def _assign(self, ctx, req):
        broker_id, broker_epoch, assignments = cluster_control.assign_request_from_kio(req)
        try:
            answer = await self.controllers.lifecycle_call(
                "assign_replicas_to_dirs", broker_id, broker_epoch, assignments
            )
        except KafkaError as e:
            return cluster_control.assign_response_to_kio(int(e.code), {})
        return cluster_control.assign_response_to_kio(0, answer)

    # ------------------------------------------------------------------ UnregisterBroker
    def unregister_broker(self, ctx, req):
        # checked where the controller is (Kafka's ControllerApis)
        return self.controllers.dispatch(ctx, req, lambda: self._unregister(ctx, req))

    async def _unregister(self, ctx, req):
        m = Msg(ApiKeys.UNREGISTER_BROKER, ctx.api_version)
        if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            return m(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, error_message=None)
        try:
            await self.controllers.lifecycle_call("unregister", req.broker_id)
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, error_message=e.message)
        return m(throttle_time=0, error_code=ErrorCode.none, error_message=None)

    # ------------------------------------------------------------------ AllocateProducerIds
    def allocate_producer_ids(self, ctx, req):
        refusal = cluster_action_refused(ctx)  # ControllerApis': the brokers' own RPC
        if refusal is not None:
            return refusal
        return self.controllers.dispatch(ctx, req, lambda: self._allocate(ctx, req))

    async def _allocate(self, ctx, req):
        m = Msg(ApiKeys.ALLOCATE_PRODUCER_IDS, ctx.api_version)
        try:
            start, length = await self.controllers.call("allocate_producer_ids", req.broker_id, req.broker_epoch)
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, producer_id_start=-1, producer_id_len=0)
        return m(throttle_time=0, error_code=ErrorCode.none, producer_id_start=start, producer_id_len=length)

    # ------------------------------------------------------------------ AlterPartition
    def alter_partition(self, ctx, req):
        refusal = cluster_action_refused(ctx)  # ControllerApis': the brokers' own RPC
        if refusal is not None:
            return refusal
        return self.controllers.dispatch(ctx, req, lambda: self._alter_partition(ctx, req))

    async def _alter_partition(self, ctx, req):
        reqs = alter_partition.request_from_kio(req, ctx.api_version)
        try:
            replies = await self.controllers.lifecycle_call("alter_partition", reqs, ctx.api_version)
        except KafkaError as e:
            return alter_partition.response_to_kio(int(e.code), reqs, [], ctx.api_version)
        return alter_partition.response_to_kio(0, reqs, replies, ctx.api_version)

    # ------------------------------------------------------------------ ElectLeaders
    def elect_leaders(self, ctx, req):
        return self.controllers.dispatch(  # checked where the controller is (Kafka's ControllerApis)
            ctx,
            req,
            lambda: self._elect_leaders(
                ctx,
                req,
                None
                if ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
                else KafkaError(ErrorCode.cluster_authorization_failed),
            ),
        )

    async def _elect_leaders(self, ctx, req, refusal: KafkaError | None = None):
        m = Msg(ApiKeys.ELECT_LEADERS, ctx.api_version)
        asked = None if req.topic_partitions is None else {}
        for t in req.topic_partitions or ():
            asked.setdefault(t.topic, []).extend(int(p) for p in t.partitions)
        election = ELECTION_TYPES.get(int(getattr(req, "election_type", 0)))
        try:
            if refusal is not None:
                raise refusal
            if election is None:
                raise KafkaError(ErrorCode.invalid_request, f"Unknown election type {int(req.election_type)}")
            results = (
                {}
                if asked == {}
                else await self.controllers.lifecycle_call(
                    "elect_leaders", election, asked, timeout_ms=_timeout_ms(req)
                )
            )
            error = ErrorCode.none
        except KafkaError as e:  # as Kafka's getErrorResponse: the error for every partition asked
            error = e.code
            results = {
                topic: [(p, int(e.code), e.message or None) for p in ids] for topic, ids in (asked or {}).items()
            }
        return m(
            throttle_time=0,
            error_code=error,
            replica_election_results=tuple(
                m(
                    "ReplicaElectionResult",
                    topic=topic,
                    partition_result=tuple(
                        m("PartitionResult", partition_id=p, error_code=ErrorCode(code), error_message=message)
                        for p, code, message in parts
                    ),
                )
                for topic, parts in results.items()
            ),
        )


def _timeout_ms(req) -> int:
    t = getattr(req, "timeout", None)
    ms = int(t.total_seconds() * 1000) if t is not None else 0
    return ms if ms > 0 else 60000
