"""Moving a replica between this broker's log dirs (AlterReplicaLogDirs, KIP-113).

Kafka copies with a ReplicaAlterLogDirsThread that fetches from the current log into a *future*
log in the destination dir (``topic-N.<id>-future``) and, once the future log has caught up,
replaces the current log with it under the partition's lock. kesque does the same with one
asyncio task per moving partition:

1. ``alter(topic, partition, dir)`` checks the dir and the replica (Kafka's errors:
   LOG_DIR_NOT_FOUND for a dir not in ``log.dirs``, REPLICA_NOT_AVAILABLE for a partition not
   hosted here, whose dir is remembered for when it is created), and starts the copy. Asking
   for the dir a replica is already in cancels its move; asking for another dir restarts it.
2. The task copies whole batches, verbatim (offsets, epochs, producer state and the
   leader-epoch cache rebuilt as a follower's are), ``replica.fetch.max.bytes`` at a time,
   from the future log's end up to the current log's end, yielding to the event loop between
   chunks. It follows the current log: a log start that moved (retention, DeleteRecords) is
   moved on the copy, and a truncation of the current log (the replica became a follower and
   diverged) is found as a follower finds it, by the leader-epoch cache: the copy is cut where
   its last epoch ends in the current log.
3. When the copy ends where the current log ends, the swap runs without an await
   (:meth:`LogManager.replace_current_with_future`), so nothing is appended in between, and the
   partition reads and appends the new log from then on.

The copies are bounded by ``replica.alter.log.dirs.io.max.bytes.per.second`` (the broker's
alter-log-dirs replication quota, :mod:`kesque.replication.quota`): while the bytes copied
exceed it, no chunk is copied and the move waits ``replica.fetch.backoff.ms`` before it looks
again (Kafka's ReplicaAlterLogDirsThread builds no fetch while its quota is exceeded); every
chunk copied counts in it. The swap is never held back: it copies nothing.

A restart loads a future log and its move goes on from where the copy ended. Cleaning of
the current log goes on meanwhile: its result is dropped if the log was replaced first.
"""

from __future__ import annotations

import asyncio
import logging
import os

from ...errors import ErrorCode

log = logging.getLogger(__name__)


class LogDirMover:
    def __init__(
        self, log_manager, replica_manager, chunk_bytes: int, spawn, crash_hook=None, quota=None, backoff_ms: int = 1000
    ):
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.chunk_bytes = max(chunk_bytes, 1)
        self.spawn = spawn
        self.crash_hook = crash_hook  # tests: called with the step name at each crash point
        # the alter-log-dirs replication quota (is_exceeded, record, held: a ReplicationQuota)
        self.quota = quota
        self.backoff_s = backoff_ms / 1000
        self.tasks: dict[tuple[str, int], asyncio.Task] = {}
        self.moved = 0  # moves completed (tests, metrics)

    # ------------------------------------------------------------------ requests
    def alter(self, topic: str, partition: int, dest: str) -> ErrorCode:
        """One partition of an AlterReplicaLogDirs request; its error code."""
        lm = self.log_manager
        dest = os.path.abspath(dest) if dest else dest
        if dest not in lm.log_dirs:
            log.warning(
                "Unable to alter log dirs for %s-%d: log dir %s is not found in the config", topic, partition, dest
            )
            return ErrorCode.log_dir_not_found
        tp = (topic, partition)
        if not lm.is_log_dir_online(dest) or tp in getattr(self.replica_manager, "offline_partitions", ()):
            # as Kafka: "Log directory DIR is offline" / "Partition TP is offline"
            log.warning(
                "Unable to alter log dirs for %s-%d: %s",
                topic,
                partition,
                f"Log directory {dest} is offline"
                if not lm.is_log_dir_online(dest)
                else f"Partition {topic}-{partition} is offline",
            )
            return ErrorCode.kafka_storage_error
        future = lm.future_logs.get(tp)
        if future is not None and future.parent_dir != dest:
            self.cancel(topic, partition)  # another destination: that copy is dropped, a new one starts
        part = self.replica_manager.partitions.get(tp)
        current = lm.get_log(topic, partition)
        if part is None or current is None:
            lm.preferred_dirs[tp] = dest  # used when this broker creates the replica
            log.warning(
                "Unable to alter log dirs for %s-%d: the replica is not available on this broker", topic, partition
            )
            return ErrorCode.replica_not_available
        if lm.dir_of(topic, partition) == dest:
            self.cancel(topic, partition)
            return ErrorCode.none
        if tp not in lm.future_logs:
            first = current.segments[0].base_offset
            lm.create_future_log(topic, partition, dest, current.config, current.topic_id, first)
        self.start(topic, partition)
        return ErrorCode.none

    def start(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        task = self.tasks.get(tp)
        if task is None or task.done():
            self.tasks[tp] = self.spawn(self._move(topic, partition))

    def resume(self) -> None:
        """Moves a restart interrupted (future logs loaded from disk)."""
        for topic, partition in list(self.log_manager.future_logs):
            self.start(topic, partition)

    def cancel(self, topic: str, partition: int) -> None:
        task = self.tasks.pop((topic, partition), None)
        if task is not None:
            task.cancel()
        if (topic, partition) in self.log_manager.future_logs:
            log.info("Cancelling the move of %s-%d between log dirs", topic, partition)
            self.log_manager.delete_future_log(topic, partition)

    def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()

    # ------------------------------------------------------------------ the copy
    def step(self, topic: str, partition: int) -> str:
        """Copy one chunk, or swap once caught up. Returns "copied", "swapped", "waiting" (the
        replica is not hosted here yet), "held" (the quota is exceeded: nothing copied) or
        "dropped" (its future log went away)."""
        lm = self.log_manager
        tp = (topic, partition)
        future = lm.future_logs.get(tp)
        if future is None:
            return "dropped"
        part = self.replica_manager.partitions.get(tp)
        current = lm.get_log(topic, partition)
        if part is None or current is None or part.log is not current:
            return "waiting"  # not hosted yet after a restart (a replica deleted here takes its future log along)
        self._follow(current, future)
        end = current.log_end_offset
        if future.log_end_offset >= end:
            lm.replace_current_with_future(topic, partition, self.crash_hook)
            part.replace_log(lm.get_log(topic, partition))
            self.replica_manager.maybe_update_assignment(part)  # KIP-858: the controller learns the new dir
            self.moved += 1
            return "swapped"
        quota = self.quota
        now_ms = int(lm.clock.monotonic() * 1000)
        if quota is not None and quota.is_exceeded(now_ms):
            quota.held += 1
            return "held"
        chunk = bytearray()
        for _h, data in current.read_batches(future.log_end_offset, end, self.chunk_bytes):
            chunk += data  # whole batches from the copy's end (a compacted gap is skipped over)
            if len(chunk) >= self.chunk_bytes:
                break
        if not chunk:
            raise RuntimeError(f"nothing to copy at offset {future.log_end_offset} below the log end {end}")
        future.append_raw(chunk, lm.clock.now_ms())
        if quota is not None:
            quota.record(len(chunk), now_ms)
        return "copied"

    @staticmethod
    def _follow(current, future) -> None:
        """Keep the copy a prefix of the current log: cut what the current log no longer has
        (by leader epoch, as a follower finds its divergence) and move its start with the
        current log's."""
        if future.log_end_offset > current.log_end_offset:
            future.truncate_to(current.log_end_offset)
        epoch = future.latest_epoch()
        if epoch >= 0 and future.log_end_offset > future.log_start_offset:
            _epoch, end = current.leader_epoch_cache.end_offset_for(epoch, current.log_end_offset)
            if end < future.log_end_offset:
                future.truncate_to(max(end, 0))
        first = current.segments[0].base_offset
        if future.log_end_offset < first:
            future.truncate_fully_and_start_at(first)
        if current.log_start_offset > future.log_start_offset:
            future.log_start_offset = min(current.log_start_offset, future.log_end_offset)
            future.leader_epoch_cache.truncate_from_start(future.log_start_offset)

    async def _move(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        try:
            while True:
                state = self.step(topic, partition)
                if state in ("swapped", "dropped"):
                    return
                await asyncio.sleep(0.5 if state == "waiting" else self.backoff_s if state == "held" else 0)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("The move of %s-%d between log dirs failed; it is retried in 5 s", topic, partition)
            await asyncio.sleep(5)
            if self.tasks.get(tp) is asyncio.current_task():
                self.tasks[tp] = self.spawn(self._move(topic, partition))
        finally:
            if self.tasks.get(tp) is asyncio.current_task():
                del self.tasks[tp]

    # ------------------------------------------------------------------ DescribeLogDirs
    def offset_lag(self, topic: str, partition: int, future: bool) -> int:
        """Kafka's getLogEndOffsetLag: a future log's distance to the current log's end; for the
        current log max(HW - LEO, 0)."""
        current = self.log_manager.get_log(topic, partition)
        if current is None:
            return -1
        if future:
            f = self.log_manager.future_logs.get((topic, partition))
            return current.log_end_offset - f.log_end_offset if f is not None else -1
        return max(current.high_watermark - current.log_end_offset, 0)
