"""DescribeLogDirs and AlterReplicaLogDirs (moves between this broker's log dirs:
:mod:`kesque.server.drivers.alter_log_dirs`)."""

from __future__ import annotations

import shutil

from ...errors import ErrorCode
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ..context import CLUSTER_NAME, AclOperation, ResourceType

# the longest topic-N.<32 hex>-future directory name a file system takes (Kafka's KAFKA-4893 check)
MAX_DIR_NAME = 255


class LogDirApis:
    APIS = (
        Api(ApiKeys.ALTER_REPLICA_LOG_DIRS, 1, 2, "alter_replica_log_dirs"),
        Api(ApiKeys.DESCRIBE_LOG_DIRS, 1, 5, "describe_log_dirs"),
    )

    def __init__(self, *, log_manager, mover):
        self.log_manager = log_manager
        self.mover = mover  # the LogDirMover

    def alter_replica_log_dirs(self, ctx, req):
        m = Msg(ApiKeys.ALTER_REPLICA_LOG_DIRS, ctx.api_version)
        wanted: dict[tuple[str, int], str] = {}
        for d in req.dirs:
            for t in d.topics:
                for p in t.partitions:
                    wanted[(t.name, p)] = d.path
        by_topic: dict[str, list] = {}
        # as Kafka: ALTER on the cluster, or every partition is refused
        allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
        for (topic, partition), path in wanted.items():
            if not allowed:
                code = ErrorCode.cluster_authorization_failed
            elif len(f"{topic}-{partition}.{'0' * 32}-future") > MAX_DIR_NAME:
                code = ErrorCode.invalid_topic_exception
            else:
                code = self.mover.alter(topic, partition, path)
            by_topic.setdefault(topic, []).append(
                m("AlterReplicaLogDirPartitionResult", partition_index=partition, error_code=code)
            )
        return m(
            throttle_time=0,
            results=tuple(
                m("AlterReplicaLogDirTopicResult", topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
        )

    def describe_log_dirs(self, ctx, req):
        m = Msg(ApiKeys.DESCRIBE_LOG_DIRS, ctx.api_version)
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return m(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results=())
        lm = self.log_manager
        wanted = None
        if req.topics is not None:
            wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
        logs = [(tp, lg, False) for tp, lg in lm.logs.items()] + [(tp, lg, True) for tp, lg in lm.future_logs.items()]
        results = []
        for d in lm.log_dirs:
            if not lm.is_log_dir_online(d):
                # as Kafka's describeLogDirs: an offline dir is KAFKA_STORAGE_ERROR, nothing else
                results.append(
                    m(
                        "DescribeLogDirsResult",
                        error_code=ErrorCode.kafka_storage_error,
                        log_dir=d,
                        topics=(),
                        total_bytes=-1,
                        usable_bytes=-1,
                        is_cordoned=False,
                    )
                )
                continue
            by_topic: dict[str, list] = {}
            for (topic, partition), lg, future in sorted(logs, key=lambda x: (x[0], x[2])):
                if lg.parent_dir != d or (wanted is not None and (topic, partition) not in wanted):
                    continue
                by_topic.setdefault(topic, []).append(
                    m(
                        "DescribeLogDirsPartition",
                        partition_index=partition,
                        partition_size=lg.size_in_bytes(),
                        offset_lag=self.mover.offset_lag(topic, partition, future),
                        is_future_key=future,
                    )
                )
            try:
                usage = shutil.disk_usage(d)
                total, free = usage.total, usage.free
            except OSError:
                total = free = -1
            topics = tuple(m("DescribeLogDirsTopic", name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
            results.append(
                m(
                    "DescribeLogDirsResult",
                    error_code=ErrorCode.none,
                    log_dir=d,
                    topics=topics,
                    total_bytes=total,
                    usable_bytes=free,
                    is_cordoned=False,
                )
            )
        return m(throttle_time=0, error_code=ErrorCode.none, results=tuple(results))
