"""CoordinatorRuntime: what the group and transaction coordinators share (Kafka's
CoordinatorRuntime and the loading halves of its state managers, on one event loop).

A coordinator keeps its state in an internal compacted topic. Each key (a group id, a
transactional id) maps to one partition exactly as Kafka maps it, and the leader of that
partition runs a *shard* holding the state of its keys. When the ReplicaManager makes this
broker the leader of a partition, the shard is built by replaying the partition; when
leadership moves away the shard is unloaded. A shard's writes become batches appended to
the partition as its leader; its timers run on the host's scheduler (the server's event loop).

A write is applied to the shard's state at once, but answered only once committed (as Kafka's
CoordinatorRuntime waits for the high watermark): the runtime remembers the end offset of each
partition's last write, and the API handler that made it waits (``server.drivers.delayed
.wait_for_acks``) until the high watermark passes it. A partition whose leadership is lost
meanwhile is unloaded, and the waiting request answers NOT_COORDINATOR; the next leader replays
only what its log holds.

Reads never show what a failover could lose (Kafka's CoordinatorRuntime answers a read at the
partition's last committed offset, from timeline data structures). A read asks
:meth:`CoordinatorRuntime.read_shard`: when everything the partition holds is committed (high
watermark = log end, the usual case) that is the shard itself, at no cost; otherwise it is the
partition's *committed view*, a second, read-only shard built by replaying the log only up to the
high watermark, exactly what a new leader would load, and kept up to date lazily (each read
replays what was committed since the last one). Reads answer at once: they never wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ErrorCode, KafkaError
from ..records.records import CONTROL_COMMIT, build_batch, iter_records, read_end_txn_marker
from ..utils import java_string_hash

log = logging.getLogger(__name__)


# append failures as a coordinator answers them (Kafka's CoordinatorOperationExceptionHelper and
# TransactionStateManager): retry (COORDINATOR_NOT_AVAILABLE) or look the coordinator up again
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


def coordinator_error(code: int) -> ErrorCode:
    """The error a coordinator answers for a write that failed (to append or to commit) with ``code``."""
    code = ErrorCode(code)
    return _APPEND_ERRORS.get(code, code)


def append_error(exc: BaseException) -> ErrorCode:
    """The error a coordinator answers for a write that raised ``exc`` (Kafka's
    appendGroupMetadataErrorToResponseError); a failure without a Kafka code is a storage error."""
    return coordinator_error(exc.code if isinstance(exc, KafkaError) else ErrorCode.kafka_storage_error)


class CoordinatorRecord(tuple):
    """A record as an operation writes it: ``(key, value)`` bytes to append, and ``decoded``, what
    the shard's replay decodes them to (Kafka's CoordinatorRecord holds the messages and
    serializes them to append), so a record just written is replayed without decoding it."""

    def __new__(cls, key: bytes, value: bytes | None, decoded: tuple):
        record = tuple.__new__(cls, (key, value))
        record.decoded = decoded
        return record


@dataclass(frozen=True)
class CoordinatorResult:
    """What a write operation of a shard produces (Kafka's CoordinatorResult): the records to
    append to the shard's partition and the response to give once they are committed. The
    operation only reads the shard's state; the state changes when the runtime replays the
    records it appended (:func:`append_and_replay`), so an append that fails leaves nothing to
    undo. A producer id makes the batch part of that producer's transaction."""

    records: list
    response: Any = None
    producer_id: int = -1
    producer_epoch: int = -1


def append_and_replay(shard, write, result: CoordinatorResult):
    """The write path of every operation (Kafka's CoordinatorRuntime): append ``result``'s
    records with ``write(records, producer_id, producer_epoch)`` (raises on failure, and then the
    shard is as it was), replay them into the shard (the way its state changes, as at load), and
    give back the response."""
    if result.records:
        write(result.records, result.producer_id, result.producer_epoch)
        for record in result.records:
            decoded = getattr(record, "decoded", None)
            args = (*record, decoded) if decoded is not None else record
            if result.producer_id >= 0:
                shard.replay_transactional(result.producer_id, *args)
            else:
                shard.replay(*args)
    return result.response


class KeyedTimer:
    """Keyed one-shot timers (Kafka's CoordinatorTimer); scheduling a key again replaces it.
    They run on the host's ``scheduler``: ``after(delay_ms, fn, *args)`` calls ``fn(*args)``
    once ``delay_ms`` have passed and returns a handle whose ``cancel()`` stops it (the server
    binds it to the event loop, kesque.server.drivers.timers; tests and the simulator to their
    own time)."""

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.handles: dict[str, object] = {}

    def schedule(self, key: str, delay_ms: int, fn) -> None:
        self.cancel(key)
        self.handles[key] = self.scheduler.after(max(delay_ms, 0), self._fire, key, fn)

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
            log.exception("coordinator timer %s failed", key)


class ShardTimer:
    """A shard's view of the shared timer: keys are prefixed with the partition."""

    def __init__(self, timer: KeyedTimer, partition: int):
        self.timer = timer
        self.prefix = f"{partition}/"

    def schedule(self, key: str, delay_ms: int, fn) -> None:
        self.timer.schedule(self.prefix + key, delay_ms, fn)

    def cancel(self, key: str) -> None:
        self.timer.cancel(self.prefix + key)


@dataclass(frozen=True)
class CoordinatorHost:
    """What a coordinator needs from the node it runs on, and nothing more: the scheduler its
    timers run on (see :class:`KeyedTimer`), the clock, the broker config, the replica manager
    (its partitions' leadership and logs) and the current metadata image (a getter: the node
    replaces its image when it loads a metadata snapshot)."""

    scheduler: Any
    clock: Any
    config: Any
    replica_manager: Any
    image: Callable[[], Any]


class _ReadOnly:
    def __call__(self, *args, **kwargs):
        raise KafkaError(ErrorCode.unknown_server_error, "a coordinator's committed view is read-only")

    def __getattr__(self, name):
        return self


_READ_ONLY = _ReadOnly()


@dataclass
class CommittedView:
    """A partition's state at its high watermark: a read-only shard fed by replaying the log
    up to ``position`` (the high watermark when last read)."""

    shard: Any
    position: int
    used_ms: int = 0


class CoordinatorRuntime:
    TOPIC = ""
    PARTITIONS_KEY = ""  # broker config with the topic's partition count
    WRITE_TIMEOUT_KEY = "offsets.commit.timeout.ms"  # how long a write may wait to be committed
    # appended with acks=-1, as Kafka's transaction log: refused below min.insync.replicas
    # (the group and share coordinators append with acks=1 and wait for the HW all the same)
    ACKS_ALL_AT_APPEND = False
    NAME = "coordinator"

    def __init__(self, host: CoordinatorHost):
        self.host = host
        self.timer = KeyedTimer(host.scheduler)
        self.shards: dict = {}
        self.load_seconds: dict[int, float] = {}
        # partition -> end offset (last offset + 1) of its last write the HW may not have passed yet
        self.write_ends: dict[int, int] = {}
        # partition -> the committed view reads use while the partition holds uncommitted records
        self.views: dict[int, CommittedView] = {}

    # ------------------------------------------------------------------ placement
    def partition_for(self, key: str) -> int:
        t = self.host.image().topic(self.TOPIC)
        n = len(t.partitions) if t is not None else self.host.config.get(self.PARTITIONS_KEY)
        return (java_string_hash(key) & 0x7FFFFFFF) % n

    def shard_for(self, key: str):
        p = self.partition_for(key)
        shard = self.shards.get(p)
        if shard is None:
            part = self.host.replica_manager.partitions.get((self.TOPIC, p))
            if part is not None and part.is_leader:
                raise KafkaError(
                    ErrorCode.coordinator_load_in_progress,
                    "The coordinator is loading and hence can't process requests.",
                )
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        return shard

    # ------------------------------------------------------------------ leadership
    def on_leadership(self, topic: str, partition: int, is_leader: bool) -> None:
        if topic != self.TOPIC:
            return
        if is_leader and partition not in self.shards:
            self._load(partition)
        elif not is_leader and partition in self.shards:
            self._unload(partition)

    def new_shard(self, partition: int, leader_epoch: int):
        raise NotImplementedError

    def _load(self, partition: int) -> None:
        t0 = time.monotonic()
        part = self.host.replica_manager.partitions[(self.TOPIC, partition)]
        shard = self.new_shard(partition, part.leader_epoch)
        lg = part.log
        _end, n = self._replay(shard, lg, lg.log_start_offset)
        self.shards[partition] = shard
        # what was replayed may be above the high watermark (written by the previous leader, not
        # yet committed): answers, and the markers of loaded Prepare transactions, wait for it
        self.write_ends[partition] = lg.log_end_offset
        shard.on_loaded()
        self.load_seconds[partition] = time.monotonic() - t0
        if n:
            log.info(
                "Loaded %s state of %s-%d: %d records in %.0f ms",
                self.NAME,
                self.TOPIC,
                partition,
                n,
                self.load_seconds[partition] * 1000,
            )

    def _replay(self, shard, lg, start: int, end: int | None = None) -> tuple[int, int]:
        """Replay the whole batches of ``lg`` from ``start`` that end below ``end`` (default:
        the log end) into ``shard``: (the offset after the last one replayed, records replayed)."""
        n = 0
        position = start
        for h, data in lg.read_batches(start):
            if end is not None and h.last_offset >= end:
                break
            position = h.last_offset + 1
            if h.is_control:
                marker = read_end_txn_marker(memoryview(data), h)
                if marker is not None and hasattr(shard, "replay_end_txn"):
                    shard.replay_end_txn(h.producer_id, marker[0] == CONTROL_COMMIT)
                continue
            pid = h.producer_id if h.is_transactional else -1
            for r in iter_records(data, 0, h):
                if r.key is None:
                    continue
                try:
                    if pid >= 0:
                        shard.replay_transactional(pid, r.key, r.value)
                    else:
                        shard.replay(r.key, r.value)
                    n += 1
                except Exception as e:  # a record this version does not understand is skipped
                    log.warning("%s-%d: skipping record at offset %d: %s", self.TOPIC, shard.partition, r.offset, e)
        return position, n

    def _unload(self, partition: int) -> None:
        shard = self.shards.pop(partition)
        self.views.pop(partition, None)
        self.write_ends.pop(partition, None)  # whoever waits on it is told NOT_LEADER_OR_FOLLOWER
        if hasattr(shard, "on_unloaded"):
            shard.on_unloaded()
        self.timer.cancel_prefixed(f"{partition}/")
        log.info("Unloaded %s state of %s-%d", self.NAME, self.TOPIC, partition)

    # ------------------------------------------------------------------ reads
    def read_shard(self, key: str):
        """The state a read of ``key`` answers from: nothing a failover could lose (see the
        module header). NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as :meth:`shard_for`."""
        shard = self.shard_for(key)
        view = self._read(shard.partition, shard)
        if view is None:
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        return view

    def read_shards(self) -> list:
        """The committed state of every partition this coordinator leads (list operations)."""
        return [v for p, shard in list(self.shards.items()) if (v := self._read(p, shard)) is not None]

    def _read(self, partition: int, shard):
        """``shard`` or the partition's committed view; None if the leadership is gone (the
        shard is about to be unloaded)."""
        part = self.host.replica_manager.partitions.get((self.TOPIC, partition))
        if part is None or not part.is_leader:
            return None
        lg = part.log
        hw = lg.high_watermark
        if hw >= lg.log_end_offset:
            return shard  # nothing uncommitted: the shard's state is the committed state
        view = self.views.get(partition)
        now = self.host.clock.now_ms()
        # a view left behind for longer than the cleaner keeps tombstones may never see a
        # delete that was compacted away meanwhile: it is built again
        stale_ms = self.host.config.get("log.cleaner.delete.retention.ms") // 2
        if view is None or view.position < lg.log_start_offset or now - view.used_ms > stale_ms:
            view = self.views[partition] = CommittedView(
                self._read_only(self.new_shard(partition, part.leader_epoch)), lg.log_start_offset
            )
        if view.position < hw:
            view.position, _n = self._replay(view.shard, lg, view.position, hw)
        view.used_ms = now
        return view.shard

    @staticmethod
    def _read_only(shard):
        """A shard for a committed view: replay only, nothing it does may write or schedule."""
        for name in ("write", "_write", "_send_markers", "timer"):
            if hasattr(shard, name):
                setattr(shard, name, _READ_ONLY)
        return shard

    # ------------------------------------------------------------------ writes
    def run_write(self, key: str, op):
        """Run a write operation on the shard owning ``key`` (Kafka's scheduleWriteOperation):
        ``op(shard)`` reads the shard and returns a :class:`CoordinatorResult`, whose records are
        appended and replayed; the response is returned (the caller answers it once
        :meth:`uncommitted` says the records are committed). NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS as :meth:`shard_for`; the operation's refusal, or a failed
        append, is raised."""
        shard = self.shard_for(key)
        return self.apply(shard, op(shard))

    def apply(self, shard, result: CoordinatorResult):
        p = shard.partition
        return append_and_replay(shard, lambda records, pid, epoch: self.write(p, records, pid, epoch), result)

    def write(self, partition: int, records: list, producer_id: int = -1, producer_epoch: int = -1) -> None:
        """Append records as the partition's leader; a producer id makes the batch part of
        that producer's transaction (transactional offset commits)."""
        if not records:
            return
        rm = self.host.replica_manager
        part = rm.partitions.get((self.TOPIC, partition))
        if part is None or not part.is_leader:
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        if self.ACKS_ALL_AT_APPEND and part.is_under_min_isr:
            raise KafkaError(
                coordinator_error(ErrorCode.not_enough_replicas),
                f"The ISR {part.isr} of {part.tp} is below its min.insync.replicas",
            )
        if producer_id >= 0:
            entry = part.log.producer_state.producers.get(producer_id)
            if entry is not None and producer_epoch < entry.epoch:
                raise KafkaError(
                    ErrorCode.invalid_producer_epoch,
                    f"Producer epoch {producer_epoch} is older than {entry.epoch} in {part.tp}",
                )
        now = self.host.clock.now_ms()
        batch = build_batch(
            [(k, v, ()) for k, v in records],
            timestamp=now,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=producer_id >= 0,
        )
        info = part.append_new_batch(batch, now)
        self.write_ends[partition] = info.last_offset + 1
        rm.notify_append(self.TOPIC, partition, info.size)

    def uncommitted(self, partitions=None) -> dict[tuple[str, int], int]:
        """``{(topic, partition): end offset}`` of the writes to ``partitions`` (default: all)
        that the high watermark has not passed yet: what an answer must wait for."""
        parts = self.host.replica_manager.partitions
        out = {}
        for p in list(self.write_ends if partitions is None else partitions):
            end = self.write_ends.get(p)
            if end is None:
                continue
            part = parts.get((self.TOPIC, p))
            if part is not None and part.is_leader and part.log.high_watermark >= end:
                del self.write_ends[p]
            else:
                out[(self.TOPIC, p)] = end
        return out

    def write_timeout_ms(self) -> int:
        return self.host.config.get(self.WRITE_TIMEOUT_KEY)

    def shutdown(self) -> None:
        for p in list(self.shards):
            self._unload(p)
