"""ShareCoordinator: runs a ShareCoordinatorShard for every ``__share_group_state`` partition
this broker leads. A share-partition's key is ``group:topic id:partition`` and maps to a
partition as Kafka's SharePartitionKey does."""

from __future__ import annotations

from ...storage.checkpoint import uuid_to_kafka
from ..runtime import CoordinatorRuntime
from .shard import ShareCoordinatorShard

SHARE_STATE_TOPIC = "__share_group_state"


def coordinator_key(group_id: str, topic_id, partition: int) -> str:
    return f"{group_id}:{uuid_to_kafka(topic_id)}:{partition}"


class ShareCoordinator(CoordinatorRuntime):
    TOPIC = SHARE_STATE_TOPIC
    PARTITIONS_KEY = "share.coordinator.state.topic.num.partitions"
    WRITE_TIMEOUT_KEY = "share.coordinator.write.timeout.ms"
    NAME = "share coordinator"

    def new_shard(self, partition: int, leader_epoch: int) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(
            partition,
            self.host.config.get("share.coordinator.snapshot.update.records.per.snapshot"),
        )

    def shard_for_partition(self, group_id: str, topic_id, partition: int) -> ShareCoordinatorShard:
        return self.shard_for(coordinator_key(group_id, topic_id, partition))
