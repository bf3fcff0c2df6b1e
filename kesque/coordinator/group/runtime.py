"""GroupCoordinator: runs a GroupCoordinatorShard for every ``__consumer_offsets`` partition
this broker leads (loading, unloading and writing are the shared CoordinatorRuntime's)."""

from __future__ import annotations

import logging

from ...errors import KafkaError
from ...metadata.image import RESOURCE_GROUP
from ..runtime import CoordinatorRuntime, ShardTimer
from .classic import ClassicGroup
from .shard import GroupConfig, GroupCoordinatorShard

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class GroupCoordinator(CoordinatorRuntime):
    TOPIC = OFFSETS_TOPIC
    PARTITIONS_KEY = "offsets.topic.num.partitions"
    NAME = "group coordinator"

    def __init__(self, host):
        super().__init__(host)
        self.config = GroupConfig.from_broker(host.config)

    def new_shard(self, partition: int, leader_epoch: int) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(
            partition,
            self.config,
            lambda recs, pid=-1, epoch=-1: self.write(partition, recs, pid, epoch),
            ShardTimer(self.timer, partition),
            self.host.clock,
            topics=self.host.image,
            group_configs=lambda gid: self.host.image().configs.get((RESOURCE_GROUP, gid), {}),
        )
        return shard

    # ------------------------------------------------------------------ reads
    def read_group(self, group_id: str):
        """The group a describe answers with: the committed one (``read_shard``), except that a
        classic group that exists there is described as it is now, joins in progress included
        (Kafka's describeGroups: ``classicGroup(groupId, committedOffset)`` is the live object;
        a classic group keeps most of its state in memory only)."""
        shard = self.shard_for(group_id)
        view = self.read_shard(group_id)
        g = view.groups.get(group_id)
        if view is not shard and isinstance(g, ClassicGroup):
            live = shard.groups.get(group_id)
            if isinstance(live, ClassicGroup):
                return live
        return g

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, group type) of the committed groups of every
        partition; a classic group's state as it is now (Kafka's listGroups)."""
        out = []
        for p, shard in list(self.shards.items()):
            view = self._read(p, shard)
            if view is None:  # leadership just lost
                continue
            for row in view.list_groups():
                live = shard.groups.get(row[0]) if view is not shard and row[3] == "classic" else None
                if isinstance(live, ClassicGroup):
                    row = (row[0], live.protocol_type or "", live.state, "classic")
                out.append(row)
        return out

    def committed_offsets(self) -> list[tuple[str, str, int, int]]:
        """(group id, topic, partition, offset) of every committed offset of the groups this
        broker coordinates (the metrics endpoint's consumer lag, read at scrape time)."""
        out = []
        for p, shard in list(self.shards.items()):
            view = self._read(p, shard)
            if view is None:
                continue
            for group, offsets in view.offsets.items():
                out.extend((group, topic, partition, om.offset) for (topic, partition), om in offsets.items())
        return out

    # ------------------------------------------------------------------ periodic
    def expire_offsets(self) -> None:
        for shard in list(self.shards.values()):
            try:
                self.apply(shard, shard.expire_offsets())
            except KafkaError as e:
                log.warning("offset expiration on partition %d failed: %s", shard.partition, e)

    def on_txn_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to ``__consumer_offsets-<partition>``: the
        producer's pending offsets there become committed (or are dropped)."""
        shard = self.shards.get(partition)
        if shard is not None:
            shard.replay_end_txn(producer_id, commit)
