"""SharePartitionManager: the leader's share partitions and share sessions, wired to the logs.

For each (group, topic id, partition) a member fetches from, the manager keeps a
:class:`~kesque.share.partition.SharePartition` (created at the first fetch, its start offset
from the group's ``share.auto.offset.reset``). A fetch reads the log from the share
partition's next fetch offset, finds the batches it got (their last offset, and which offsets
must never be delivered: control batches, and aborted transactions for groups with
``share.isolation.level=read_committed``), and acquires records in that range for the member.
Every acknowledgement or release is written to the share coordinator (``__share_group_state``)
before it is answered, and a share partition created after a restart starts from that state:
what was acknowledged stays done, what was acquired but not acknowledged is available again
with its delivery count.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from ..config.group import effective_group_configs
from ..coordinator.share.runtime import coordinator_key
from ..errors import ErrorCode, KafkaError
from ..metadata.image import RESOURCE_GROUP
from ..records.batch import iter_headers
from ..replication.partition import FETCH_HIGH_WATERMARK, FETCH_TXN_COMMITTED
from .partition import ACKNOWLEDGED, ARCHIVED, SharePartition
from .session import ShareSessionCache

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS = 500


@dataclass
class FetchedPartition:
    error: int = 0
    message: str | None = None
    records: bytes = b""
    acquired: list = field(default_factory=list)
    leader_epoch: int = -1


def scan_batches(buf: bytes, aborted=None) -> tuple[int, list[tuple[int, int]]]:
    """(last offset of the complete batches in ``buf``, offset ranges never to deliver):
    control batches, and with ``aborted`` (AbortedTxn entries, read_committed) the batches of
    aborted transactions."""
    last = -1
    skip: list[tuple[int, int]] = []
    for _pos, h in iter_headers(buf):
        last = h.last_offset
        if h.is_control:
            skip.append((h.base_offset, h.last_offset))
        elif aborted and h.is_transactional and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted):
            skip.append((h.base_offset, h.last_offset))
    return last, skip


def _through(buf: bytes, last_offset: int) -> bytes:
    """The batches of ``buf`` up to the one holding ``last_offset``: a response carries the
    batches of the acquired records, not everything read (Kafka slices them too)."""
    for pos, h in iter_headers(buf):
        if h.last_offset >= last_offset:
            return buf[:pos + h.size] if pos + h.size < len(buf) else buf
    return buf


FIRST_READ = 64 << 10


def _read(part, offset: int, max_bytes: int, max_records: int, isolation) -> tuple[bytes, int, list]:
    """Read from ``offset`` for a fetch of at most ``max_records``: (bytes, last offset of their
    complete batches, ranges never to deliver). Reads grow from FIRST_READ up to ``max_bytes``
    until they hold ``max_records`` offsets, so a fetch of a few hundred small records does not
    read ``max_bytes`` of the log (most of which it would not hand out)."""
    size = min(max_bytes, FIRST_READ)
    while True:
        res = part.read(offset, size, isolation, True)
        buf = b"".join(os.pread(h.fd, n, pos) for h, pos, n in res.data.regions)
        last, skip = scan_batches(buf, res.aborted_transactions)
        if last - offset + 1 >= max_records or size >= max_bytes or len(buf) < size:
            return buf, last, skip
        size = min(max_bytes, size * 4)


class SharePartitionManager:
    def __init__(self, server):
        self.server = server
        self.partitions: dict[tuple, SharePartition] = {}
        self._uninitialized: set[tuple] = set()  # share partitions whose state is not durable yet
        cfg = server.config
        self.sessions = ShareSessionCache()
        # fetches waiting for records of a share partition: (group, topic id, partition) -> callbacks
        self.waiters: dict[tuple, set] = {}
        self.delivery_count_limit = cfg.get("group.share.delivery.count.limit")
        self.max_record_locks = cfg.get("group.share.partition.max.record.locks")

    # ------------------------------------------------------------------ configs
    def group_configs(self, group_id: str) -> dict:
        stored = self.server.image.configs.get((RESOURCE_GROUP, group_id), {})
        return effective_group_configs(self.server.config, stored)

    def lock_duration_ms(self, group_id: str) -> int:
        return self.group_configs(group_id)["share.record.lock.duration.ms"]

    def now_ms(self) -> int:
        return self.server.clock.now_ms()

    # ------------------------------------------------------------------ partitions
    def _log_partition(self, topic_id, partition: int):
        t = self.server.image.topics_by_id.get(topic_id)
        if t is None:
            raise KafkaError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
        part = self.server.replica_manager.get_partition(t.name, partition)
        if not part.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower, "This server is not the leader for that partition.")
        return part

    def share_partition(self, group_id: str, topic_id, partition: int, part=None) -> SharePartition:
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        cfg = self.group_configs(group_id)
        if sp is None:
            part = part or self._log_partition(topic_id, partition)
            shard = self._state_shard(key, committed=True)  # as Kafka's ReadShareGroupState
            limits = {"delivery_count_limit": self.delivery_count_limit, "max_record_locks": self.max_record_locks}
            state = shard.read(key)
            if state is not None:
                sp = SharePartition.restore(state.start_offset, state.batches, **limits)
            else:  # durable at its first acquisition (see fetch), as Kafka writes it
                lg = part.log
                start = lg.log_start_offset if cfg["share.auto.offset.reset"] == "earliest" else lg.high_watermark
                sp = SharePartition(start, **limits)
                self._uninitialized.add(key)
            self.partitions[key] = sp
        sp.lock_duration_ms = cfg["share.record.lock.duration.ms"]
        return sp

    def _state_shard(self, key: tuple, committed: bool = False):
        """The share coordinator shard keeping ``key``'s state (its topic made on first use);
        ``committed``: its committed state, to read (``CoordinatorRuntime.read_shard``)."""
        from ..server.apis.core import coordinator_for

        ckey = coordinator_key(*key)
        _node, err, msg = coordinator_for(self.server, 2, ckey)
        if err != ErrorCode.none:
            raise KafkaError(err, msg)
        sc = self.server.share_coordinator
        return sc.read_shard(ckey) if committed else sc.shard_for(ckey)

    def _persist(self, key: tuple, sp: SharePartition) -> None:
        part = self._log_partition(key[1], key[2])
        self._state_shard(key).write_state(key, sp.start_offset, sp.state_batches(), part.leader_epoch)

    # ------------------------------------------------------------------ operations
    def acknowledge(self, group_id: str, member_id: str, topic_id, partition: int, batches,
                    now_ms: int) -> KafkaError | None:
        """Apply one partition's acknowledgement batches; the error, if refused (nothing moved)."""
        try:
            self._log_partition(topic_id, partition)
            sp = self.partitions.get((group_id, topic_id, partition))
            if sp is None:
                raise KafkaError(ErrorCode.invalid_record_state, "No records of this partition were acquired.")
            undo = sp.acknowledge(member_id, batches, now_ms)
            try:
                self._persist((group_id, topic_id, partition), sp)
            except KafkaError:
                sp.undo(undo)  # not durable: not done
                raise
        except KafkaError as e:
            return e
        self.notify((group_id, topic_id, partition))
        return None

    def fetch(self, group_id: str, member_id: str, topic_id, partition: int, max_records: int, max_bytes: int,
              now_ms: int) -> FetchedPartition:
        out = FetchedPartition()
        try:
            part = self._log_partition(topic_id, partition)
            out.leader_epoch = part.leader_epoch
            sp = self.share_partition(group_id, topic_id, partition, part)
            lg = part.log
            sp.advance_log_start(lg.log_start_offset)
            offset = sp.next_fetch_offset(now_ms)
            committed = self.group_configs(group_id)["share.isolation.level"] == "read_committed"
            isolation = FETCH_TXN_COMMITTED if committed else FETCH_HIGH_WATERMARK
            if max_records <= 0 or offset >= part.max_offset_for(isolation):
                return out
            key = (group_id, topic_id, partition)
            if key in self._uninitialized:
                # records are about to be handed out: their start offset must survive a restart
                self._state_shard(key).initialize(key, sp.start_offset, part.leader_epoch)
                self._uninitialized.discard(key)
            buf, last, skip = _read(part, offset, max_bytes, max_records, isolation)
            if last < offset:
                return out
            out.acquired = sp.acquire(member_id, last, max_records, now_ms, skip)
            if out.acquired:
                out.records = _through(buf, max(a.last for a in out.acquired))
        except KafkaError as e:
            out.error, out.message = int(e.code), e.message
        return out

    def release(self, group_id: str, member_id: str, partitions, now_ms: int) -> None:
        """The member's session closed: whatever it holds on ``partitions`` goes back."""
        for topic_id, p in partitions:
            sp = self.partitions.get((group_id, topic_id, p))
            if sp is not None and sp.release_member(member_id, now_ms):
                try:
                    self._persist((group_id, topic_id, p), sp)
                except KafkaError as e:
                    log.warning("share state of %s-%s-%d not written: %s", group_id, topic_id, p, e)
                self.notify((group_id, topic_id, p))

    def reset(self, group_id: str, topic_id, partition: int, start_offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts over at ``start_offset``."""
        key = (group_id, topic_id, partition)
        part = self._log_partition(topic_id, partition)
        self._state_shard(key).initialize(key, start_offset, part.leader_epoch)
        self.partitions.pop(key, None)
        self._uninitialized.discard(key)

    def group_states(self, group_id: str) -> dict:
        """{(group, topic id, partition): ShareState} of the group's durable share state."""
        sc = self.server.share_coordinator
        return {k: s for shard in sc.read_shards() for k, s in shard.states.items() if k[0] == group_id}

    def lag(self, topic: str, partition: int, state) -> int:
        """Records below the high watermark not delivery-complete (KIP-1226's share lag), -1 if
        the partition is not here."""
        part = self.server.replica_manager.partitions.get((topic, partition))
        if part is None:
            return -1
        done = sum(b.last - b.first + 1 for b in state.batches
                   if b.state in (ACKNOWLEDGED, ARCHIVED) and b.first >= state.start_offset)
        return max(0, part.log.high_watermark - state.start_offset - done)

    def member_left(self, group_id: str, member_id: str) -> None:
        """The member left the share group (or its session timed out): its share session ends
        and every record it holds here is released."""
        self.sessions.remove_member(group_id, member_id)
        self.release(group_id, member_id, [(t, p) for g, t, p in self.partitions if g == group_id], self.now_ms())

    def expire_sessions(self) -> None:
        """Sessions idle longer than their group's share session timeout: the member is gone."""
        now = self.now_ms()
        idle = self.server.config.get("group.share.session.timeout.ms")
        for s in self.sessions.expired(idle, now):
            self.release(s.key[0], s.key[1], list(s.partitions), now)

    def delete_group(self, group_id: str) -> None:
        """The (empty) share group was deleted: its share partitions and their durable state go
        (Kafka's DeleteShareGroupState)."""
        self.delete_states(lambda key: key[0] == group_id)

    def delete_states(self, wanted) -> None:
        """Drop the share partitions whose (group, topic id, partition) key is ``wanted``, here
        and in ``__share_group_state``."""
        for key in [k for k in self.partitions if wanted(k)]:
            del self.partitions[key]
            self._uninitialized.discard(key)
        for shard in list(self.server.share_coordinator.shards.values()):
            for key in [k for k in shard.states if wanted(k)]:
                shard.delete(key)

    # ------------------------------------------------------------------ waiting fetches
    def watch(self, key: tuple, callback) -> None:
        self.waiters.setdefault(key, set()).add(callback)

    def unwatch(self, key: tuple, callback) -> None:
        s = self.waiters.get(key)
        if s is not None:
            s.discard(callback)
            if not s:
                del self.waiters[key]

    def notify(self, key: tuple) -> None:
        """Records of a share partition were acknowledged or released: the fetches waiting on
        it get the first chance at what became available or fits in the window now, before
        the request that freed them fetches (so members waiting on one partition take turns)."""
        for cb in list(self.waiters.get(key, ())):
            cb()

    def next_lock_deadline(self, group_id: str, partitions) -> int | None:
        deadlines = [d for tp in partitions
                     if (sp := self.partitions.get((group_id, *tp))) is not None
                     and (d := sp.next_lock_deadline()) is not None]
        return min(deadlines) if deadlines else None
