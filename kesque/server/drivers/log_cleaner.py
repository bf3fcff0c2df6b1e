"""Which log to clean next and the workers that clean it (Kafka's LogCleanerManager and
LogCleaner).

:class:`CleanerManager` is sans-IO bookkeeping on the event loop: the ``cleaner-offset-checkpoint``
of each log dir (where the dirty section of each compacted log starts), the choice of the
*filthiest* log (the highest dirty ratio above ``min.cleanable.dirty.ratio``, or any log past
``max.compaction.lag.ms``), the logs being cleaned, and the metrics Kafka names.

:class:`LogCleaner` runs the cleanings from ``log.cleaner.threads`` worker threads, each
cleaning in a forked child process (:mod:`.cleaner_process`). The child only reads the log's
finished segments and writes ``.cleaned`` files; what the request path shares — the choice of
the log, its producer state, the swap of the cleaned segments into the log's segment list, the
checkpoint, the I/O throttle — stays in the broker, the swap on the event loop, so a read never
sees a half-changed log.

Processes rather than threads (issue 15: produce p99 while cleaning at most 2x idle), measured
with bench/cleaner_latency.py on the shared 2-core machine (figures in bench/README.md): on a
thread, with the per-record work compiled and the GIL released, the loop still waited for the
cleaner's GIL — 110-250 ms once per cleaning while the 128 MiB offset map was filled, and up to
a switch interval (5 ms) whenever the loop wanted the GIL back from the cleaner's Python between
C calls, worst when the machine was busy and the thread holding the GIL was descheduled. In a
child the cleaner's GIL is its own; what is left is CPU competition, which the child's lower
priority gives to the broker. The cost: a fork per cleaning (the GIL held while the page
tables are copied, ~30 ms at 512 MiB resident) and a message per swap and per 0.1 s of I/O;
the cleaner's MB/s is the same (bench/cleaner.py --child). Without ``os.fork`` the worker
thread cleans itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from dataclasses import dataclass

from ...storage import checkpoint as ck
from ...storage import cleaner_process
from ...storage.checkpoint import fsync_dir
from ...storage.cleaner import (
    Cleaner,
    CleanStats,
    first_dirty_offset,
    first_uncleanable_offset,
    last_batches_of_producers,
)
from ...storage.local_log import SegmentsChangedError

log = logging.getLogger(__name__)


@dataclass
class LogToClean:
    tp: tuple
    log: object
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_now(self) -> bool:
        return self.compaction_delay_ms > 0


def log_to_clean(tp, lg, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The dirty section of ``lg`` and its sizes (segment granularity, as Kafka's)."""
    first_dirty = first_dirty_offset(lg, checkpoint)
    first_uncleanable = max(first_dirty, first_uncleanable_offset(lg, now_ms))
    clean = cleanable = 0
    delay = 0
    segs = lg.segments
    for i, seg in enumerate(segs[:-1]):
        upper = segs[i + 1].base_offset
        if upper <= first_dirty:
            clean += seg.size
        elif seg.base_offset < first_uncleanable:
            if not cleanable:  # max.compaction.lag.ms counts from the first dirty batch's time
                first_ts = seg.rolling_based_timestamp
                until = now_ms - lg.config.max_compaction_lag_ms
                if first_ts is not None and 0 <= first_ts < until:
                    delay = until - first_ts
            cleanable += seg.size
    return LogToClean(tp, lg, first_dirty, first_uncleanable, clean, cleanable, delay)


class CleanerManager:
    """Checkpoints, the choice of the filthiest log, the logs in progress, the metrics."""

    def __init__(self):
        self.checkpoints: dict[tuple, int] = {}
        self.in_progress: set[tuple] = set()
        self.uncleanable: set[tuple] = set()
        # Kafka's metric names
        self.max_clean_time_secs = 0.0
        self.max_compaction_delay_secs = 0.0
        self.cleaner_recopy_percent = 0
        self._written_dirs: set[str] = set()  # dirs whose checkpoint file has held entries

    def load_checkpoints(self, log_dirs) -> None:
        """Read each dir's checkpoint; a missing one is created empty, as Kafka's
        OffsetCheckpointFile does, and stays empty until a log of that dir is cleaned."""
        for d in log_dirs:
            path = os.path.join(d, ck.CLEANER_CHECKPOINT)
            if not os.path.exists(path):
                open(path, "ab").close()
                continue
            try:
                found = ck.OffsetCheckpointFile(path).read()
            except ck.CheckpointError as e:
                log.warning("Ignoring corrupt checkpoint %s in %s: %s", ck.CLEANER_CHECKPOINT, d, e)
                continue
            self.checkpoints.update(found)
            if found:
                self._written_dirs.add(d)

    def grab_filthiest(self, logs: dict, now_ms: int) -> LogToClean | None:
        """The compacted log to clean next (marked in progress), or None."""
        candidates = []
        for tp, lg in logs.items():
            if not lg.config.compact or tp in self.in_progress or tp in self.uncleanable:
                continue
            candidates.append(log_to_clean(tp, lg, self.checkpoints.get(tp), now_ms))
        self.max_compaction_delay_secs = max((c.compaction_delay_ms for c in candidates), default=0) / 1000
        ready = [
            c
            for c in candidates
            if (c.needs_now and c.cleanable_bytes > 0) or c.ratio > c.log.config.min_cleanable_dirty_ratio
        ]
        if not ready:
            return None
        best = max(ready, key=lambda c: (c.needs_now, c.ratio))
        self.in_progress.add(best.tp)
        return best

    def done(self, job: LogToClean, stats: CleanStats | None, seconds: float) -> None:
        self.in_progress.discard(job.tp)
        if stats is None:
            return
        self.checkpoints[job.tp] = stats.end_offset
        self.max_clean_time_secs = max(self.max_clean_time_secs, seconds)
        self.cleaner_recopy_percent = int(100 * stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0

    def failed(self, job: LogToClean) -> None:
        self.in_progress.discard(job.tp)
        self.uncleanable.add(job.tp)

    def checkpoint_jobs(self, log_manager) -> list[tuple[str, dict]]:
        """Checkpoint writes for the dirs with something to say (a dir never cleaned keeps its
        empty file, as in Kafka)."""
        out = []
        for d, entries in log_manager._by_dir(lambda _lg: None).items():
            kept = {tp: self.checkpoints[tp] for tp in entries if tp in self.checkpoints}
            if kept or d in self._written_dirs:
                self._written_dirs.add(d)
                out.append((os.path.join(d, ck.CLEANER_CHECKPOINT), kept))
        return out

    def metrics(self) -> str:
        return (
            f"uncleanable-partitions-count={len(self.uncleanable)}, max-clean-time-secs="
            f"{self.max_clean_time_secs:.3f}, max-compaction-delay-secs={self.max_compaction_delay_secs:.3f}, "
            f"cleaner-recopy-percent={self.cleaner_recopy_percent}"
        )


class Throttler:
    """log.cleaner.io.max.bytes.per.second across all workers (Kafka's Throttler): after
    every ``check_s`` of work, sleep long enough to bring the rate back under the bound."""

    def __init__(self, rate, check_s: float = 0.3, clock=time.monotonic, sleep=time.sleep):
        self.rate = rate  # callable -> bytes per second (dynamic)
        self.check_s = check_s
        self.clock, self.sleep = clock, sleep
        self.lock = threading.Lock()
        self.start = clock()
        self.count = 0

    def maybe_throttle(self, nbytes: int) -> None:
        self.sleep(self.pause_for(nbytes))  # also yields the GIL to the event loop between batches

    def pause_for(self, nbytes: int) -> float:
        """Count ``nbytes`` of work; how long to sleep to keep under the rate."""
        pause = 0.0
        with self.lock:
            self.count += nbytes
            now = self.clock()
            elapsed = now - self.start
            if elapsed >= self.check_s:
                rate = self.rate()
                desired = self.count / rate if rate > 0 else 0.0
                pause = max(0.0, desired - elapsed)
                self.start, self.count = now + pause, 0
        return pause


class CleanerStopped(Exception):
    pass


class LogCleaner:
    """The background cleaner of a broker: picks logs on the event loop, cleans them on
    worker threads, swaps the result in on the loop, writes the checkpoint in the background."""

    def __init__(self, config, log_manager, clock, loop, write_in_background):
        self.config = config
        self.log_manager = log_manager
        self.clock = clock
        self.loop = loop
        self.write_in_background = write_in_background
        self.manager = CleanerManager()
        self.manager.load_checkpoints(log_manager.log_dirs)
        self.threads = max(1, config.get("log.cleaner.threads"))
        self.executor = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix="kesque-cleaner")
        self.throttler = Throttler(lambda: self.config.get("log.cleaner.io.max.bytes.per.second"))
        self.stopping = False
        self.running: set[concurrent.futures.Future] = set()
        self.hook = None  # test-only crash point (Cleaner's stages)
        self.in_child = hasattr(os, "fork")  # each cleaning in a forked process (cleaner_process)
        self.children: set[cleaner_process.Child] = set()
        self.children_lock = threading.Lock()

    # ---------------------------------------------------------------- on the event loop
    def kick(self) -> None:
        """Start cleanings while workers are free and logs need cleaning."""
        while not self.stopping and len(self.running) < self.threads:
            job = self.manager.grab_filthiest(self.log_manager.logs, self.clock.now_ms())
            if job is None:
                return
            producers = last_batches_of_producers(job.log)
            started = time.monotonic()
            fut = self.executor.submit(self._clean, job, producers)
            self.running.add(fut)
            fut.add_done_callback(
                lambda f, job=job, started=started: self.loop.call_soon_threadsafe(self._finished, job, f, started)
            )

    def _finished(self, job: LogToClean, fut, started: float) -> None:
        self.running.discard(fut)
        exc = fut.exception()
        if exc is None:
            stats = fut.result()
            self.manager.done(job, stats, time.monotonic() - started)
            if stats is not None:
                self.write_in_background(self.manager.checkpoint_jobs(self.log_manager))
                log.info("Log cleaner finished %s-%d: %s", job.tp[0], job.tp[1], self.manager.metrics())
        elif (
            isinstance(exc, (CleanerStopped, SegmentsChangedError))
            or self.stopping
            or self.log_manager.logs.get(job.tp) is not job.log
        ):
            self.manager.in_progress.discard(job.tp)  # stopped, or retention/deletion won the race
        else:
            log.error("Log cleaner failed on %s-%d, marking it uncleanable: %r", job.tp[0], job.tp[1], exc)
            self.manager.failed(job)
        self.kick()

    async def stop(self) -> None:
        """Abort cleanings in progress (their ``.cleaned`` files go) and wait for the workers."""
        self.stopping = True
        with self.children_lock:
            for child in self.children:
                child.kill()
        while self.running:
            await asyncio.wait([asyncio.wrap_future(f) for f in list(self.running)])
            await asyncio.sleep(0)  # let the done callbacks run
        self.executor.shutdown(wait=True)

    # ---------------------------------------------------------------- on a worker thread
    def _clean(self, job: LogToClean, producers: dict) -> CleanStats | None:
        cfg = self.config
        cleaner = Cleaner(
            map_memory=max(1, cfg.get("log.cleaner.dedupe.buffer.size") // self.threads),
            throttle=self._throttle,
            swap=self._swap_on_loop,
            hook=self.hook,
        )
        now_ms = self.clock.now_ms()
        if not self.in_child:
            return cleaner.clean(job.log, job.first_dirty, job.first_uncleanable, now_ms, producers)
        return self._clean_in_child(cleaner, job, producers, now_ms)

    def _clean_in_child(self, cleaner: Cleaner, job: LogToClean, producers: dict, now_ms: int) -> CleanStats | None:
        """Fork the cleaning, answer the child until it is done; a child that did not finish
        (stopped, failed) is killed and its ``.cleaned`` files removed."""
        with self.children_lock:
            if self.stopping:
                raise CleanerStopped
            child = cleaner_process.fork_cleaner(
                cleaner, job.log, job.first_dirty, job.first_uncleanable, now_ms, producers
            )
            self.children.add(child)
        answered = False
        try:
            stats = cleaner_process.serve(
                child,
                job.log,
                now_ms,
                self._pause_for,
                lambda lg, new, old, now: self._swap_on_loop(lg, new, old, now, self.hook),
            )
            answered = True
            return stats
        except cleaner_process.CleanerDied:
            if self.stopping:
                raise CleanerStopped from None
            raise
        finally:
            if not answered:
                child.kill()
            with self.children_lock:
                self.children.discard(child)
            child.reap()
            if not answered:
                cleaner_process.remove_cleaned_files(job.log)

    def _pause_for(self, nbytes: int) -> float:
        if self.stopping:
            raise CleanerStopped
        return self.throttler.pause_for(nbytes)

    def _throttle(self, nbytes: int) -> None:
        if self.stopping:
            raise CleanerStopped
        self.throttler.maybe_throttle(nbytes)

    def _swap_on_loop(self, lg, new, old, now_ms, hook) -> None:
        done: concurrent.futures.Future = concurrent.futures.Future()

        def swap():
            try:
                if self.stopping:
                    raise CleanerStopped
                lg.replace_segments(new, old, now_ms, hook, sync=False)
                done.set_result(None)
            except BaseException as e:  # noqa: BLE001 - handed to the worker
                done.set_exception(e)

        self.loop.call_soon_threadsafe(swap)
        done.result()
        fsync_dir(lg.dir)  # here, not on the event loop
