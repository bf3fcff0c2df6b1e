"""GroupCoordinator: runs a GroupCoordinatorShard for every ``__consumer_offsets`` partition
this broker leads (Kafka's CoordinatorRuntime, one event loop instead of threads).

When the ReplicaManager makes this broker the leader of a partition, its shard is built by
replaying the partition; when leadership moves away the shard is unloaded. Writes become
batches appended to the partition as its leader; timers run on the server's event loop.
"""

from __future__ import annotations

import logging
import time

from ...errors import ErrorCode, KafkaError
from ...records.records import build_batch, iter_records
from ...utils import java_string_hash
from .shard import GroupConfig, GroupCoordinatorShard

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class LoopTimer:
    """Keyed one-shot timers on an asyncio loop; scheduling a key again replaces it."""

    def __init__(self, loop):
        self.loop = loop
        self.handles: dict[str, object] = {}

    def schedule(self, key: str, delay_ms: int, fn) -> None:
        self.cancel(key)
        self.handles[key] = self.loop.call_later(max(delay_ms, 0) / 1000.0, self._fire, key, fn)

    def cancel(self, key: str) -> None:
        h = self.handles.pop(key, None)
        if h is not None:
            h.cancel()

    def cancel_prefixed(self, prefix: str) -> None:
        for key in [k for k in self.handles if k.startswith(prefix)]:
            self.cancel(key)

    def _fire(self, key: str, fn) -> None:
        self.handles.pop(key, None)
        try:
            fn()
        except Exception:
            log.exception("group coordinator timer %s failed", key)


class _ShardTimer:
    """A shard's view of the shared timer: keys are prefixed with the partition."""

    def __init__(self, timer: LoopTimer, partition: int):
        self.timer = timer
        self.prefix = f"{partition}/"

    def schedule(self, key: str, delay_ms: int, fn) -> None:
        self.timer.schedule(self.prefix + key, delay_ms, fn)

    def cancel(self, key: str) -> None:
        self.timer.cancel(self.prefix + key)


class GroupCoordinator:
    def __init__(self, server):
        self.server = server
        self.config = GroupConfig.from_broker(server.config)
        self.timer = LoopTimer(server.loop)
        self.shards: dict[int, GroupCoordinatorShard] = {}
        self.load_seconds: dict[int, float] = {}

    # ------------------------------------------------------------------ placement
    def partition_for(self, group_id: str) -> int:
        t = self.server.image.topic(OFFSETS_TOPIC)
        n = len(t.partitions) if t is not None else self.server.config.get("offsets.topic.num.partitions")
        return (java_string_hash(group_id) & 0x7FFFFFFF) % n

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        p = self.partition_for(group_id)
        shard = self.shards.get(p)
        if shard is None:
            part = self.server.replica_manager.partitions.get((OFFSETS_TOPIC, p))
            if part is not None and part.is_leader:
                raise KafkaError(ErrorCode.coordinator_load_in_progress,
                                 "The coordinator is loading and hence can't process requests.")
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        return shard

    # ------------------------------------------------------------------ leadership
    def on_leadership(self, topic: str, partition: int, is_leader: bool) -> None:
        if topic != OFFSETS_TOPIC:
            return
        if is_leader and partition not in self.shards:
            self._load(partition)
        elif not is_leader and partition in self.shards:
            self._unload(partition)

    def _load(self, partition: int) -> None:
        t0 = time.monotonic()
        part = self.server.replica_manager.partitions[(OFFSETS_TOPIC, partition)]
        shard = GroupCoordinatorShard(partition, self.config, lambda recs: self._write(partition, recs),
                                      _ShardTimer(self.timer, partition), self.server.clock,
                                      topics=lambda: self.server.image)
        n = 0
        lg = part.log
        for h, data in lg.read_batches(lg.log_start_offset):
            if h.is_control:
                continue
            for r in iter_records(data, 0, h):
                if r.key is None:
                    continue
                try:
                    shard.replay(r.key, r.value)
                    n += 1
                except Exception as e:  # a record this version does not understand is skipped
                    log.warning("%s-%d: skipping record at offset %d: %s", OFFSETS_TOPIC, partition, r.offset, e)
        shard.on_loaded()
        self.shards[partition] = shard
        self.load_seconds[partition] = time.monotonic() - t0
        if n:
            log.info("Loaded group coordinator state of %s-%d: %d records, %d groups in %.0f ms", OFFSETS_TOPIC,
                     partition, n, len(shard.groups), self.load_seconds[partition] * 1000)

    def _unload(self, partition: int) -> None:
        shard = self.shards.pop(partition)
        shard.on_unloaded()
        self.timer.cancel_prefixed(f"{partition}/")
        log.info("Unloaded group coordinator state of %s-%d", OFFSETS_TOPIC, partition)

    # ------------------------------------------------------------------ writes
    def _write(self, partition: int, records: list) -> None:
        if not records:
            return
        rm = self.server.replica_manager
        part = rm.partitions.get((OFFSETS_TOPIC, partition))
        if part is None or not part.is_leader:
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        now = self.server.clock.now_ms()
        batch = build_batch([(k, v, ()) for k, v in records], timestamp=now)
        info = part.log.append_new_batch(batch, part.leader_epoch, now)
        part.maybe_increment_high_watermark()
        rm.notify_append(OFFSETS_TOPIC, partition, info.size)

    # ------------------------------------------------------------------ periodic
    def expire_offsets(self) -> None:
        for shard in list(self.shards.values()):
            try:
                shard.expire_offsets()
            except KafkaError as e:
                log.warning("offset expiration on partition %d failed: %s", shard.partition, e)

    def shutdown(self) -> None:
        for p in list(self.shards):
            self._unload(p)
