"""LogManager: every partition log in the broker's log dirs, their checkpoints and the
periodic work Kafka's LogManager schedules (retention, flush, checkpoint writes).

At start each log dir is checked for ``meta.properties`` (written on first start, as
``kafka-storage format`` would), its checkpoints are read, the clean-shutdown marker is
consumed, and every ``topic-N`` directory is loaded — recovering from the recovery point
when the previous run did not shut down cleanly.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid

from ..config.topic import LogConfig
from . import checkpoint as ck
from .dirs import DirLock, format_dirs, read_meta_properties, verify_meta_properties
from .local_log import DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, parse_partition_dir
from .log_dir_failure import KafkaStorageError, LogDirFailureChannel, maybe_handle_io_error
from .unified_log import UnifiedLog

log = logging.getLogger(__name__)


class LogManager:
    def __init__(
        self,
        log_dirs: list[str],
        clock,
        *,
        node_id: int,
        cluster_id: str | None,
        skip_dirs: tuple[str, ...] = ("__cluster_metadata-0",),
        dir_failure: LogDirFailureChannel | None = None,
    ):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        # KIP-112: an I/O error in a log dir takes it offline (its logs are closed and dropped,
        # nothing is written there again in this process); the others go on
        self.dir_failure = dir_failure if dir_failure is not None else LogDirFailureChannel()
        self.live_log_dirs: list[str] = list(self.log_dirs)
        self.clock = clock
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.skip_dirs = skip_dirs
        self.logs: dict[tuple[str, int], UnifiedLog] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self.had_clean_shutdown: dict[str, bool] = {}
        self.directory_ids: dict[str, uuid.UUID] = {}
        self._pending_dir_deletes: list[tuple[int, str]] = []
        # moves between log dirs (AlterReplicaLogDirs, KIP-113): the future log of a partition
        # being copied into another dir, and the dir asked for a partition not created yet
        self.future_logs: dict[tuple[str, int], UnifiedLog] = {}
        self.preferred_dirs: dict[tuple[str, int], str] = {}
        self._closing_later: list[tuple[int, UnifiedLog]] = []  # replaced logs, closed after file.delete.delay.ms
        self._formatted: set[str] = set()  # dirs formatted by this start (nothing to recover)
        self.locks: list[DirLock] = []

    def lock_dirs(self) -> None:
        """Lock every log dir before anything in it is read or written (Kafka's lockLogDirs);
        raises LogDirError naming the first dir another broker holds."""
        try:
            for d in self.log_dirs:
                if not os.path.isdir(d):
                    log.info("Log directory %s not found, creating it.", d)
                    os.makedirs(d, exist_ok=True)
                    ck.fsync_dir(os.path.dirname(d))  # as Kafka: its entry must outlive a power cut
                self.locks.append(DirLock(d))
        except BaseException:
            self.release_locks()
            raise

    def release_locks(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []

    # ------------------------------------------------------------------ startup
    def prepare_dirs(self) -> str:
        """Create/verify meta.properties in each dir; returns the cluster id."""
        if not self.locks:
            self.lock_dirs()
        metas = read_meta_properties(self.log_dirs)  # lock_dirs created the missing ones
        cluster_id = verify_meta_properties(metas, self.node_id, self.cluster_id)
        for d, props in metas.items():
            if props and props.get("directory.id"):
                self.directory_ids[d] = ck.uuid_from_kafka(props["directory.id"])
        cluster_id = cluster_id or ck.uuid_to_kafka(uuid.uuid4())
        for d, dir_id in format_dirs(metas, cluster_id, self.node_id).items():
            self.directory_ids[d] = dir_id
            log.info("Formatted log dir %s for cluster %s", d, cluster_id)
            self._formatted.add(d)
        self.cluster_id = cluster_id
        return cluster_id

    def load_logs(self, config_for) -> None:
        """Load every partition directory. ``config_for(topic) -> (LogConfig, topic_id|None)``."""
        for d in self.log_dirs:
            clean = ck.consume_clean_shutdown(d)
            self.had_clean_shutdown[d] = clean
            if d in self._formatted:
                state = "new log dir"
            elif clean:
                state = "clean shutdown: skipping recovery"
            else:
                state = "no clean shutdown marker: recovering"
            log.info("Loading logs from %s (%s)", d, state)
            recovery = self._read_checkpoint(d, ck.RECOVERY_POINT_CHECKPOINT)
            starts = self._read_checkpoint(d, ck.LOG_START_CHECKPOINT)
            hws = self._read_checkpoint(d, ck.REPLICATION_CHECKPOINT)
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path) or name in self.skip_dirs:
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    log.info("Deleting leftover directory %s of a deleted topic", name)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                future = name.endswith(FUTURE_DIR_SUFFIX)
                tp = parse_partition_dir(name.rsplit(".", 1)[0] if future else name)
                if tp is None:
                    continue
                cfg, topic_id = config_for(tp[0])
                lg = UnifiedLog(
                    path,
                    tp[0],
                    tp[1],
                    cfg,
                    topic_id=topic_id,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0),
                    had_clean_shutdown=clean and not future,
                    now_ms=self.clock.now_ms(),
                    dir_failure=self.dir_failure,
                )
                if future:
                    # a move between log dirs that a restart interrupted: it goes on (the mover
                    # copies from where this copy ends), as Kafka resumes its future replicas
                    log.info("Loaded future log %s: its move to %s resumes", name, d)
                    self.future_logs[tp] = lg
                    self.preferred_dirs[tp] = d
                    continue
                lg.update_high_watermark(hws.get(tp, 0))
                if tp in self.logs:
                    lg = self._keep_one_copy(tp, lg, d)
                self.logs[tp] = lg
                self._dir_of[tp] = lg.parent_dir
        for tp in [tp for tp in self.future_logs if tp not in self.logs]:
            # the current log is gone (a crash after the future one was renamed but before the
            # the future dir was renamed cannot leave this: the future is renamed first)
            log.warning("Deleting future log %s: no current log of %s-%d", self.future_logs[tp].dir, *tp)
            self.future_logs.pop(tp).delete()

    def _keep_one_copy(self, tp: tuple[str, int], lg: UnifiedLog, d: str) -> UnifiedLog:
        """Two current logs of one partition: a crash between the two renames of a move
        between log dirs (the copy renamed into place, the source not yet renamed for
        deletion). Kafka refuses to start; both copies were identical when the move swapped
        them, so the one that recovered more is kept and the other deleted."""
        other = self.logs[tp]
        keep, drop = (lg, other) if lg.log_end_offset > other.log_end_offset else (other, lg)
        log.warning(
            "Duplicate log directories for %s-%d in %s and %s (a move between log directories was "
            "interrupted): keeping %s (log end offset %d), deleting %s (log end offset %d)",
            tp[0],
            tp[1],
            other.dir,
            lg.dir,
            keep.dir,
            keep.log_end_offset,
            drop.dir,
            drop.log_end_offset,
        )
        drop.delete()
        return keep

    @staticmethod
    def _read_checkpoint(d: str, name: str) -> dict:
        try:
            return ck.OffsetCheckpointFile(os.path.join(d, name)).read()
        except ck.CheckpointError as e:
            log.warning("Ignoring corrupt checkpoint %s: %s", name, e)
            return {}

    # ------------------------------------------------------------------ logs
    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID, target_dir_id: uuid.UUID | None = None
    ) -> UnifiedLog:
        tp = (topic, partition)
        lg = self.logs.get(tp)
        if lg is not None:
            if lg.topic_id != topic_id:
                lg.topic_id = topic_id
                lg._write_partition_metadata(topic_id)
            return lg
        d = self._pick_dir(tp, target_dir_id)
        lg = maybe_handle_io_error(
            self.dir_failure,
            d,
            lambda: f"Error while creating log for {topic}-{partition} in dir {d}",
            lambda: UnifiedLog(
                os.path.join(d, f"{topic}-{partition}"),
                topic,
                partition,
                config,
                topic_id=topic_id,
                had_clean_shutdown=True,
                now_ms=self.clock.now_ms(),
                dir_failure=self.dir_failure,
            ),
        )
        self.logs[tp] = lg
        self._dir_of[tp] = d
        log.info("Created log for partition %s-%d in %s", topic, partition, d)
        return lg

    def _pick_dir(self, tp: tuple[str, int] | None = None, target_dir_id: uuid.UUID | None = None) -> str:
        preferred = self.preferred_dirs.pop(tp, None) if tp is not None else None
        # a dir the channel has is offline already, even before the handler has run
        live = [d for d in self.live_log_dirs if not self.dir_failure.has_offline_log_dir(d)]
        if preferred is not None and preferred in live:
            return preferred  # asked for by AlterReplicaLogDirs before the replica was created here
        # the dir the metadata assigned it (KIP-858, Kafka's targetLogDirectoryId), when live
        target = next(
            (d for d in live if target_dir_id is not None and self.directory_ids.get(d) == target_dir_id), None
        )
        if target is not None:
            return target
        if not live:
            raise KafkaStorageError("No log directories available. Tried " + ", ".join(self.log_dirs))
        counts = {d: 0 for d in live}
        for d in self._dir_of.values():
            counts[d] = counts.get(d, 0) + 1
        return min(live, key=lambda d: counts[d])

    def dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    def delete_log(self, topic: str, partition: int) -> None:
        """Topic deleted: rename to ``topic-N.<id>-delete`` and remove after file.delete.delay.ms."""
        tp = (topic, partition)
        self.delete_future_log(topic, partition)
        self.preferred_dirs.pop(tp, None)
        lg = self.logs.pop(tp, None)
        d = self._dir_of.pop(tp, None)
        if lg is None or d is None:
            return
        for seg in lg.segments:
            seg.close()
        target = os.path.join(d, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")

        def rename() -> None:
            lg.delete_expired_files(0, force=True)
            os.replace(lg.dir, target)

        maybe_handle_io_error(
            self.dir_failure, d, lambda: f"Error while deleting log for {topic}-{partition} in dir {d}", rename
        )
        self._pending_dir_deletes.append((self.clock.now_ms() + lg.config.file_delete_delay_ms, target))
        log.info("Log for partition %s-%d is renamed to %s and is scheduled for deletion", topic, partition, target)

    # ------------------------------------------------------------------ moves between log dirs
    def create_future_log(
        self, topic: str, partition: int, dest: str, config: LogConfig, topic_id: uuid.UUID | None, start_offset: int
    ) -> UnifiedLog:
        """An empty copy of the partition in ``dest``, named ``topic-N.<id>-future`` until it
        has caught up and replaces the current log (:meth:`replace_current_with_future`)."""
        path = os.path.join(dest, f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        lg = maybe_handle_io_error(
            self.dir_failure,
            dest,
            lambda: f"Error while creating log for {topic}-{partition} in dir {dest}",
            lambda: UnifiedLog(
                path,
                topic,
                partition,
                config,
                topic_id=topic_id,
                log_start_offset=start_offset,
                had_clean_shutdown=True,
                now_ms=self.clock.now_ms(),
                dir_failure=self.dir_failure,
            ),
        )
        self.future_logs[(topic, partition)] = lg
        log.info("Created future log %s for partition %s-%d", path, topic, partition)
        return lg

    def delete_future_log(self, topic: str, partition: int) -> None:
        lg = self.future_logs.pop((topic, partition), None)
        if lg is not None:
            lg.close()
            shutil.rmtree(lg.dir, ignore_errors=True)
            log.info("Deleted future log %s", lg.dir)

    def replace_current_with_future(self, topic: str, partition: int, crash_hook=None) -> UnifiedLog:
        """The move's last step, with no await inside (nothing appends meanwhile): the caught-up
        future log is flushed, closed and renamed to ``topic-N`` in its dir, then reopened in
        place; the source directory is renamed ``…-delete`` and removed after
        file.delete.delay.ms (fetches may still be sending from its files); both dirs'
        checkpoints are written. A crash between the renames leaves two copies, which the next
        start resolves (:meth:`_keep_one_copy`). Returns the new current log."""
        tp = (topic, partition)
        source, future = self.logs[tp], self.future_logs.pop(tp)
        hw, start = source.high_watermark, source.log_start_offset
        future.flush()
        future.close()
        dest = future.parent_dir
        final = os.path.join(dest, f"{topic}-{partition}")
        os.replace(future.dir, final)
        ck.fsync_dir(dest)
        if crash_hook is not None:
            crash_hook("renamed-future")
        lg = UnifiedLog(
            final,
            topic,
            partition,
            source.config,
            topic_id=source.topic_id,
            recovery_point=future.log_end_offset,
            log_start_offset=max(start, future.log_start_offset),
            had_clean_shutdown=True,
            now_ms=self.clock.now_ms(),
            dir_failure=self.dir_failure,
        )
        lg.update_high_watermark(hw)
        src_dir = source.parent_dir
        target = os.path.join(src_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.replace(source.dir, target)
        ck.fsync_dir(src_dir)
        self.logs[tp] = lg
        self._dir_of[tp] = dest
        now = self.clock.now_ms()
        self._closing_later.append((now + source.config.file_delete_delay_ms, source))
        self._pending_dir_deletes.append((now + source.config.file_delete_delay_ms, target))
        for d in {src_dir, dest}:
            self.write_checkpoints(
                [
                    (p, e)
                    for p, e in self.recovery_point_checkpoints() + self.log_start_checkpoints()
                    if os.path.dirname(p) == d
                ]
            )
        log.info("The current replica of %s-%d is replaced with the future replica in %s", topic, partition, dest)
        return lg

    # ------------------------------------------------------------------ log dir failure
    @staticmethod
    def _swallow(fn) -> bool:
        try:
            fn()
            return True
        except KafkaStorageError:
            return False  # the channel logged it and has the dir

    def is_log_dir_online(self, d: str) -> bool:
        return d in self.live_log_dirs

    def handle_log_dir_failure(self, d: str) -> list[tuple[str, int]]:
        """Kafka's LogManager.handleLogDirFailure: the dir leaves the live dirs; its logs (and
        future logs) are closed without writing anything and forgotten. Returns the partitions
        whose current log was there. The caller halts when no live dir is left."""
        log.warning("Stopping serving logs in dir %s", d)
        if d in self.live_log_dirs:
            self.live_log_dirs.remove(d)
        offline = [tp for tp, lg in self.logs.items() if lg.log_dir == d]
        for tp in offline:
            self.logs.pop(tp).close_handles()
            self._dir_of.pop(tp, None)
        offline_future = [tp for tp, lg in self.future_logs.items() if lg.log_dir == d]
        for tp in offline_future:
            self.future_logs.pop(tp).close_handles()
        for lock in [lk for lk in self.locks if lk.dir == d]:
            lock.release()
            self.locks.remove(lock)
        log.warning(
            "Logs for partitions %s are offline and logs for future partitions %s are offline due to "
            "failure on log directory %s",
            ",".join(f"{t}-{p}" for t, p in offline),
            ",".join(f"{t}-{p}" for t, p in offline_future),
            d,
        )
        return offline

    # ------------------------------------------------------------------ periodic work
    def cleanup_logs(self) -> int:
        """Retention check (every log.retention.check.interval.ms)."""
        now = self.clock.now_ms()
        total = 0
        for lg in list(self.logs.values()):
            try:
                total += lg.delete_old_segments(now)
            except KafkaStorageError:
                pass  # its dir is offline (the channel has it)
        return total

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """Forget idle producers (producer.id.expiration.ms); open transactions are kept."""
        now = self.clock.now_ms()
        total = 0
        for lg in list(self.logs.values()):
            lg.producer_state.expiration_ms = expiration_ms
            total += lg.producer_state.remove_expired(now)
        return total

    def delete_expired(self) -> None:
        now = self.clock.now_ms()
        for lg in list(self.logs.values()):
            lg.delete_expired_files(now)
        while self._closing_later and self._closing_later[0][0] <= now:
            self._closing_later.pop(0)[1].close_handles()  # its directory is deleted below, once due
        keep = []
        for due, path in self._pending_dir_deletes:
            if due <= now:
                shutil.rmtree(path, ignore_errors=True)
            else:
                keep.append((due, path))
        self._pending_dir_deletes = keep

    def flush_dirty_logs(self) -> None:
        """flush.ms: fsync logs not flushed for longer than their flush.ms."""
        now = self.clock.now_ms()
        for lg in list(self.logs.values()):
            if lg.config.flush_ms < (1 << 62) and now - lg.last_flush_ms >= lg.config.flush_ms:
                try:
                    lg.flush()
                except KafkaStorageError:
                    continue  # its dir is offline (the channel has it)
                lg.last_flush_ms = now

    def _by_dir(self, value) -> dict[str, dict]:
        """Checkpoint entries of the live log dirs (an offline dir's files are left alone)."""
        out: dict[str, dict] = {d: {} for d in self.live_log_dirs}
        for tp, lg in self.logs.items():
            entries = out.get(self._dir_of[tp])
            if entries is not None:
                entries[tp] = value(lg)
        return out

    # Checkpoint writes are split in two: the entries are taken on the caller's thread (a
    # consistent view of the logs) and the files written by ``write_checkpoints``, which the
    # server runs on its I/O thread so an fsync never stalls the event loop.
    def recovery_point_checkpoints(self) -> list[tuple[str, dict]]:
        return [
            (os.path.join(d, ck.RECOVERY_POINT_CHECKPOINT), e)
            for d, e in self._by_dir(lambda lg: lg.recovery_point).items()
        ]

    def log_start_checkpoints(self) -> list[tuple[str, dict]]:
        out = []
        for d, entries in self._by_dir(lambda lg: lg.log_start_offset).items():
            # as Kafka: only logs whose start is inside their first segment need an entry
            entries = {tp: off for tp, off in entries.items() if off > self.logs[tp].segments[0].base_offset}
            out.append((os.path.join(d, ck.LOG_START_CHECKPOINT), entries))
        return out

    def high_watermark_checkpoints(self) -> list[tuple[str, dict]]:
        return [
            (os.path.join(d, ck.REPLICATION_CHECKPOINT), e)
            for d, e in self._by_dir(lambda lg: lg.high_watermark).items()
        ]

    def write_checkpoints(self, jobs: list[tuple[str, dict]], fsync: bool = True) -> None:
        """Write checkpoint files (any thread). A failed write takes its log dir offline (as
        Kafka's checkpoint writers) and the other files are still written."""
        for path, entries in jobs:
            d = os.path.dirname(path)
            try:
                maybe_handle_io_error(
                    self.dir_failure,
                    d,
                    lambda: f"Error while writing to checkpoint file {path}",
                    ck.OffsetCheckpointFile(path).write,
                    entries,
                    fsync,
                )
            except KafkaStorageError:
                pass  # logged by the channel, whose handler takes the dir offline

    def checkpoint_recovery_points(self, fsync: bool = True) -> None:
        self.write_checkpoints(self.recovery_point_checkpoints(), fsync)

    def checkpoint_log_start_offsets(self, fsync: bool = True) -> None:
        self.write_checkpoints(self.log_start_checkpoints(), fsync)

    def checkpoint_high_watermarks(self, fsync: bool = True) -> None:
        self.write_checkpoints(self.high_watermark_checkpoints(), fsync)

    def shutdown(self, broker_epoch: int) -> None:
        """Clean shutdown: flush, checkpoint, close, and leave the clean-shutdown marker, in
        the live log dirs only: a dir that failed (now or during the shutdown) gets no marker,
        so the next start recovers it (a partial write is truncated there)."""
        for lg in self.logs.values():
            self._swallow(lg.flush)
        self.checkpoint_high_watermarks()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for lg in self.logs.values():
            if lg.offline:
                lg.close_handles()
            else:
                self._swallow(lg.close)
        for lg in self.future_logs.values():  # a move between log dirs resumes at the next start
            if self._swallow(lg.flush):
                self._swallow(lg.close)
            else:
                lg.close_handles()
        for _due, lg in self._closing_later:
            lg.close_handles()
        for d in self.log_dirs:
            if d in self.live_log_dirs and not self.dir_failure.has_offline_log_dir(d):
                self._swallow(
                    lambda d=d: maybe_handle_io_error(
                        self.dir_failure,
                        d,
                        f"Error while writing the clean shutdown marker in dir {d}",
                        ck.write_clean_shutdown,
                        d,
                        broker_epoch,
                    )
                )
        log.info("Shutdown complete: logs flushed, checkpoints written, clean shutdown marker left")
