"""AlterPartitionReassignments and ListPartitionReassignments.

Both run where the active controller is (a broker listener sends them on, as Kafka's brokers
forward them): AlterPartitionReassignments is answered once its records are committed,
ListPartitionReassignments from the controller's committed image
(kesque/controller/reassignment.py has the rules).
"""

from __future__ import annotations

from ...errors import ErrorCode, KafkaError
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ..context import CLUSTER_NAME, AclOperation, ResourceType
from .topics import _timeout_ms


class ReassignmentApis:
    APIS = (
        Api(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, 0, 1, "alter_partition_reassignments"),
        Api(ApiKeys.LIST_PARTITION_REASSIGNMENTS, 0, 0, "list_partition_reassignments"),
    )

    def __init__(self, *, controllers):
        self.controllers = controllers

    # ------------------------------------------------------------------ AlterPartitionReassignments
    def alter_partition_reassignments(self, ctx, req):
        return self.controllers.dispatch(  # checked where the controller is (Kafka's ControllerApis)
            ctx,
            req,
            lambda: (
                self._alter(ctx, req)
                if ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
                else self._alter_refused(ctx, req)
            ),
        )

    @staticmethod
    def _alter_refused(ctx, req):
        """Kafka's error response (ControllerApis: ALTER on the cluster): the error at the top
        and on every partition."""
        m = Msg(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
        code, msg = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        return m(
            throttle_time=0,
            allow_replication_factor_change=bool(getattr(req, "allow_replication_factor_change", True)),
            error_code=code,
            error_message=msg,
            responses=tuple(
                m(
                    "ReassignableTopicResponse",
                    name=t.name,
                    partitions=tuple(
                        m(
                            "ReassignablePartitionResponse",
                            partition_index=p.partition_index,
                            error_code=code,
                            error_message=msg,
                        )
                        for p in t.partitions
                    ),
                )
                for t in req.topics
            ),
        )

    async def _alter(self, ctx, req):
        m = Msg(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
        topics = [
            (
                t.name,
                [
                    (p.partition_index, None if p.replicas is None else [int(r) for r in p.replicas])
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
        allow = bool(getattr(req, "allow_replication_factor_change", True))
        try:
            results = await self.controllers.call(
                "alter_partition_reassignments", topics, allow, timeout_ms=_timeout_ms(req)
            )
        except KafkaError as e:
            return m(
                throttle_time=0,
                allow_replication_factor_change=allow,
                error_code=e.code,
                error_message=e.message,
                responses=(),
            )
        responses = tuple(
            m(
                "ReassignableTopicResponse",
                name=name,
                partitions=tuple(
                    m(
                        "ReassignablePartitionResponse",
                        partition_index=pid,
                        error_code=err.code if err else ErrorCode.none,
                        error_message=err.message if err else None,
                    )
                    for pid, err in parts
                ),
            )
            for name, parts in results
        )
        return m(
            throttle_time=0,
            allow_replication_factor_change=allow,
            error_code=ErrorCode.none,
            error_message=None,
            responses=responses,
        )

    # ------------------------------------------------------------------ ListPartitionReassignments
    def list_partition_reassignments(self, ctx, req):
        # checked where the controller is (Kafka's ControllerApis)
        return self.controllers.dispatch(ctx, req, lambda: self._checked_list(ctx, req))

    def _checked_list(self, ctx, req):
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            m = Msg(ApiKeys.LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
            return m(
                throttle_time=0,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="Cluster authorization failed.",
                topics=(),
            )
        return self._list(ctx, req)

    async def _list(self, ctx, req):
        m = Msg(ApiKeys.LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
        topics = None if req.topics is None else [(t.name, [int(i) for i in t.partition_indexes]) for t in req.topics]
        try:
            found = await self.controllers.lifecycle_call(
                "list_partition_reassignments", topics, timeout_ms=_timeout_ms(req)
            )
        except KafkaError as e:
            return m(throttle_time=0, error_code=e.code, error_message=e.message, topics=())
        return m(
            throttle_time=0,
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(
                m(
                    "OngoingTopicReassignment",
                    name=name,
                    partitions=tuple(
                        m(
                            "OngoingPartitionReassignment",
                            partition_index=pid,
                            replicas=tuple(replicas),
                            adding_replicas=tuple(adding),
                            removing_replicas=tuple(removing),
                        )
                        for pid, replicas, adding, removing in parts
                    ),
                )
                for name, parts in found
            ),
        )
