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

The share coordinator is reached through the persister (kesque/server/drivers/share_persister.py). When this
broker leads the key's ``__share_group_state`` partition, state is read and written through the
in-process shard synchronously (the answer then waits for the commit, ``_durable`` in the
handlers). Otherwise a share partition is loaded in the background (the fetch that asked gets
nothing this time, and waiting fetches are woken once it is loaded), and its writes go out as
WriteShareGroupState, one in flight per share partition: writes asked for meanwhile are
coalesced into the next one, which carries the whole window as it is when it is sent, so an
older state can never overtake a newer one. Share partitions are dropped when leadership of
their topic partition is lost; a ShareFetch to a broker that does not lead the partition gets
NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field

from ...config.group import effective_group_configs
from ...errors import ErrorCode, KafkaError
from ...metadata.image import RESOURCE_GROUP
from ...records.batch import iter_headers
from ...replication.partition import FETCH_HIGH_WATERMARK, FETCH_TXN_COMMITTED
from ...share.partition import ACCEPT, REJECT, RELEASE, RENEW, SharePartition
from ...share.session import ShareSessionCache
from .share_persister import DefaultStatePersister, LocalPersister

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS = 500


@dataclass
class FetchedPartition:
    error: int = 0
    message: str | None = None
    records: bytes = b""
    acquired: list = field(default_factory=list)
    leader_epoch: int = -1
    pending: asyncio.Future | None = None  # the remote write this answer waits for (None: none)


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
        elif (
            aborted
            and h.is_transactional
            and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted
            )
        ):
            skip.append((h.base_offset, h.last_offset))
    return last, skip


def _through(buf: bytes, last_offset: int) -> bytes:
    """The batches of ``buf`` up to the one holding ``last_offset``: a response carries the
    batches of the acquired records, not everything read (Kafka slices them too)."""
    for pos, h in iter_headers(buf):
        if h.last_offset >= last_offset:
            return buf[: pos + h.size] if pos + h.size < len(buf) else buf
    return buf


def _batch_aligned(buf: bytes, offset: int, max_records: int, last: int) -> tuple[int, int]:
    """(last offset, record count) of a batch-optimized acquisition from ``offset``: through the
    end of the batch holding the ``max_records``-th offset (all of what was read if it holds
    fewer)."""
    target = offset + max_records - 1
    if target >= last:
        return last, max_records
    for _pos, h in iter_headers(buf):
        if h.last_offset >= target:
            end = min(h.last_offset, last)
            return end, max(max_records, end - offset + 1)
    return last, max_records


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
    def __init__(
        self,
        *,
        image,
        config,
        replica_manager,
        share_coordinator,
        node_id: int,
        clock,
        spawn,
        coordinator_of,
        channel=None,
    ):
        """``coordinator_of(key)``: (node, error, message) of a share-state key's coordinator;
        ``channel``: to the share coordinators on other brokers; ``spawn(coro)``: a task of the
        broker's."""
        self.image = image
        self.config = config
        self.replica_manager = replica_manager
        self.share_coordinator = share_coordinator
        self.clock = clock
        self.spawn = spawn
        self.partitions: dict[tuple, SharePartition] = {}
        self._uninitialized: set[tuple] = set()  # share partitions whose state is not durable yet
        self._loading: dict[tuple, asyncio.Task] = {}  # share partitions read from a remote coordinator
        self._load_errors: dict[tuple, KafkaError] = {}  # why the last load failed (told to the next fetch)
        self._writers: dict[tuple, list] = {}  # share partitions with a remote write in flight: its waiters
        self.persister = DefaultStatePersister(
            node_id, LocalPersister(share_coordinator), coordinator_of, channel, config
        )
        replica_manager.add_leadership_listener(self.on_leadership)
        cfg = config
        self.sessions = ShareSessionCache()
        # fetches waiting for records of a share partition: (group, topic id, partition) -> callbacks
        self.waiters: dict[tuple, set] = {}
        self.delivery_count_limit = cfg.get("group.share.delivery.count.limit")
        self.max_record_locks = cfg.get("group.share.partition.max.record.locks")
        # records acknowledged per acknowledge type (ShareGroupMetrics RecordAcknowledgementsPerSec),
        # counted per acknowledgement batch
        self.record_acks = dict.fromkeys((ACCEPT, RELEASE, REJECT, RENEW), 0)

    # ------------------------------------------------------------------ configs
    def group_configs(self, group_id: str) -> dict:
        stored = self.image.configs.get((RESOURCE_GROUP, group_id), {})
        return effective_group_configs(self.config, stored)

    def lock_duration_ms(self, group_id: str) -> int:
        return self.group_configs(group_id)["share.record.lock.duration.ms"]

    def now_ms(self) -> int:
        return self.clock.now_ms()

    # ------------------------------------------------------------------ partitions
    def _log_partition(self, topic_id, partition: int):
        t = self.image.topics_by_id.get(topic_id)
        if t is None:
            raise KafkaError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
        part = self.replica_manager.get_partition(t.name, partition)
        if not part.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower, "This server is not the leader for that partition.")
        return part

    def share_partition(self, group_id: str, topic_id, partition: int, part=None) -> SharePartition | None:
        """The share partition, None while it is being loaded from a remote share coordinator."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            part = part or self._log_partition(topic_id, partition)
            err = self._load_errors.pop(key, None)
            if err is not None:
                raise err
            try:
                shard = self.persister.local.caught_up_shard(key)  # as Kafka's ReadShareGroupState
            except KafkaError:
                shard = None  # the coordinator is elsewhere (or not ready here yet)
            if shard is None:  # (or here, with records not yet committed: read once they are)
                self._load(key, part)
                return None
            sp = self._restore(key, shard.read(key), part)
        sp.lock_duration_ms = self.lock_duration_ms(group_id)
        return sp

    def _restore(self, key: tuple, state, part) -> SharePartition:
        limits = {"delivery_count_limit": self.delivery_count_limit, "max_record_locks": self.max_record_locks}
        if state is not None:
            sp = SharePartition.restore(state.start_offset, state.batches, **limits)
            sp.state_epoch = state.state_epoch
        else:  # durable at its first acquisition (see fetch), as Kafka writes it
            lg = part.log
            reset = self.group_configs(key[0])["share.auto.offset.reset"]
            sp = SharePartition(lg.log_start_offset if reset == "earliest" else lg.high_watermark, **limits)
            sp.state_epoch = 0  # the epoch it will be initialized with
            self._uninitialized.add(key)
        self.partitions[key] = sp
        return sp

    def _load(self, key: tuple, part) -> None:
        """Read ``key``'s state from its share coordinator in the background; fetches waiting
        on the share partition are woken when it is here."""
        if key in self._loading:
            return
        epoch = part.leader_epoch

        async def load():
            try:
                state = await self.persister.read(key, epoch)
            except KafkaError as e:
                log.warning("share state of %s-%s-%d not read: %s", *key, e)
                self._load_errors[key] = e
                return
            finally:
                self._loading.pop(key, None)
            if key not in self.partitions and part.is_leader and part.leader_epoch == epoch:
                self._restore(key, state, part)
            self.notify(key)

        self._loading[key] = self._spawn(load())

    def _spawn(self, coro) -> asyncio.Task:
        spawn = getattr(self, "spawn", None)
        return spawn(coro) if spawn is not None else asyncio.ensure_future(coro)

    def on_leadership(self, topic: str, partition: int, is_leader: bool) -> None:
        """Leadership of a topic partition moved: its share partitions here are dropped when it
        is lost, and read again from the share coordinator at the next fetch when it is gained
        (what another leader did meanwhile is only in the coordinator)."""
        t = self.image.topic(topic)
        if t is None:
            return
        for key in [k for k in self.partitions if k[1] == t.topic_id and k[2] == partition]:
            del self.partitions[key]
            self._uninitialized.discard(key)
            self.notify(key)

    def session_opened(self, group_id: str, partitions) -> None:
        """A member opened a share session: share partitions of ``partitions`` that hold no
        acquired records and have no write in flight are read again from the share coordinator
        at their next fetch. The coordinator may have initialized their state again meanwhile
        (AlterShareGroupOffsets, DeleteShareGroupOffsets or DeleteGroups of the empty group,
        answered by another broker), and a window that hands nothing out would never write,
        so a FENCED_STATE_EPOCH would never tell it. With the coordinator on this broker, only
        a share partition whose state epoch moved (or whose state went) is dropped; lock expiries
        are not written (as on one node), so a reread may lower delivery counts of expired
        records."""
        for topic_id, p in partitions:
            key = (group_id, topic_id, p)
            sp = self.partitions.get(key)
            if sp is None or key in self._writers or sp.acquired_count():
                continue
            try:  # a local coordinator answers at once whether the state was initialized again
                state = self.persister.local.shard(key).read(key)
                if key in self._uninitialized:
                    unchanged = state is None
                else:
                    unchanged = state is not None and state.state_epoch == sp.state_epoch
                if unchanged:
                    continue
            except KafkaError:
                pass  # remote: read it again
            del self.partitions[key]
            self._uninitialized.discard(key)

    def _leader_epoch(self, key: tuple) -> int:
        t = self.image.topics_by_id.get(key[1])
        part = self.replica_manager.partitions.get((t.name, key[2])) if t is not None else None
        return part.leader_epoch if part is not None else -1

    def _persist(self, key: tuple, sp: SharePartition, initialize_only: bool = False):
        """Make ``sp``'s state durable in ``__share_group_state``. Through the local shard at
        once (None; raises if refused: the answer waits for the commit), or, when the share
        coordinator is another broker, a remote write: the future of its error (None if done)."""
        if key not in self._writers:
            try:
                shard = self.persister.local.shard(key)
            except KafkaError:
                shard = None
            if shard is not None:
                sc = self.share_coordinator
                epoch = self._leader_epoch(key)
                try:
                    if key in self._uninitialized:
                        sc.apply(shard, shard.initialize(key, sp.start_offset, epoch, sp.state_epoch))
                        self._uninitialized.discard(key)
                    if not initialize_only:
                        sc.apply(
                            shard, shard.write_state(key, sp.start_offset, sp.state_batches(), epoch, sp.state_epoch)
                        )
                except KafkaError as e:
                    self._fenced(key, sp, e)
                    raise
                return None
        fut = asyncio.get_running_loop().create_future()
        waiters = self._writers.get(key)
        if waiters is None:
            waiters = self._writers[key] = []
            self._spawn(self._write_remote(key))
        waiters.append(fut)
        return fut

    def _fenced(self, key: tuple, sp: SharePartition, e: KafkaError) -> None:
        """A write was fenced: a newer leader read the state (FENCED_LEADER_EPOCH) or it was
        initialized again, e.g. by AlterShareGroupOffsets (FENCED_STATE_EPOCH). The share
        partition is dropped, as Kafka's SharePartitionManager drops it; the next fetch here
        reads the state again."""
        if e.code in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch) and self.partitions.get(key) is sp:
            del self.partitions[key]
            self._uninitialized.discard(key)

    async def _write_remote(self, key: tuple) -> None:
        """Send ``key``'s state until no write is asked for any more; each round answers the
        waiters that were there when it started (their state is in what it sends)."""
        try:
            while self._writers.get(key):
                waiters, self._writers[key] = self._writers[key], []
                err = None
                sp = self.partitions.get(key)
                try:
                    if sp is None:
                        raise KafkaError(ErrorCode.not_leader_or_follower, "The share partition is no longer led here.")
                    epoch = self._leader_epoch(key)
                    if key in self._uninitialized:
                        await self.persister.initialize(key, sp.start_offset, epoch, sp.state_epoch)
                        self._uninitialized.discard(key)
                    if self.partitions.get(key) is sp:
                        await self.persister.write(key, sp.start_offset, sp.state_batches(), epoch, sp.state_epoch)
                except KafkaError as e:
                    err = e
                    log.warning("share state of %s-%s-%d not written: %s", *key, e)
                    self._fenced(key, sp, e)
                except Exception as e:  # noqa: BLE001 - never leave a waiting answer hanging
                    log.exception("share state of %s-%s-%d not written", *key)
                    err = KafkaError(ErrorCode.unknown_server_error, str(e))
                for f in waiters:
                    if not f.done():
                        f.set_result(err)
        finally:
            self._writers.pop(key, None)

    # ------------------------------------------------------------------ operations
    def acknowledge(
        self, group_id: str, member_id: str, topic_id, partition: int, batches, now_ms: int, renew: bool = False
    ):
        """Apply one partition's acknowledgement batches; the error, if refused (nothing moved),
        or the future of the remote write making them durable (its error, if it failed: the
        acknowledgement stays applied here and goes out again with the next write)."""
        try:
            self._log_partition(topic_id, partition)
            sp = self.partitions.get((group_id, topic_id, partition))
            if sp is None:
                raise KafkaError(ErrorCode.invalid_record_state, "No records of this partition were acquired.")
            base = sp.start_offset
            undo = sp.acknowledge(member_id, batches, now_ms, renew)
            try:
                pending = self._persist((group_id, topic_id, partition), sp)
            except KafkaError:
                sp.undo(undo)  # not durable: not done
                raise
        except KafkaError as e:
            return e
        self._count_acks(batches, base)
        self.notify((group_id, topic_id, partition))
        return pending

    def _count_acks(self, batches, base: int) -> None:
        """Add applied acknowledgement batches to ``record_acks`` (offsets below ``base``, the
        start offset before them, were already finished with; GAP is not counted, as Kafka)."""
        acks = self.record_acks
        for first, last, types in batches:
            if len(types) == 1:
                if types[0] in acks and last >= base:
                    acks[types[0]] += last - max(first, base) + 1
            else:
                for i, t in enumerate(types):
                    if t in acks and first + i >= base:
                        acks[t] += 1

    def metrics_refs(self) -> tuple[list[tuple], dict[int, int]]:
        """For /metrics, on the event loop: the share partitions here ((group, topic id,
        partition), SharePartition), read a chunk at a time by :meth:`metrics_rows`, and the
        records acknowledged per type."""
        return list(self.partitions.items()), dict(self.record_acks)

    @staticmethod
    def metrics_rows(refs) -> list[tuple]:
        """(group, topic id, partition, start offset, end offset, records per state, lock
        timeouts) per share partition of ``refs`` (one pass over each window)."""
        return [
            (g, tid, p, sp.start_offset, sp.end_offset, sp.state_counts(), sp.lock_timeouts) for (g, tid, p), sp in refs
        ]

    def fetch(
        self,
        group_id: str,
        member_id: str,
        topic_id,
        partition: int,
        max_records: int,
        max_bytes: int,
        now_ms: int,
        record_limit: bool = False,
    ) -> FetchedPartition:
        """Acquire records for ``member_id``: at most ``max_records`` with ``record_limit``
        (ShareAcquireMode record_limit, KIP-1206), else (batch_optimized, Kafka's default and
        ShareFetch v1's) through the end of the log batch holding the last of them, as Kafka's
        batch alignment does: a fetch may hand out more than ``max_records``."""
        out = FetchedPartition()
        try:
            part = self._log_partition(topic_id, partition)
            out.leader_epoch = part.leader_epoch
            sp = self.share_partition(group_id, topic_id, partition, part)
            if sp is None:
                return out  # being loaded: the fetch waits, or the member asks again
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
                out.pending = self._persist(key, sp, initialize_only=True)
            buf, last, skip = _read(part, offset, max_bytes, max_records, isolation)
            if last < offset:
                return out
            if not record_limit:
                last, max_records = _batch_aligned(buf, offset, max_records, last)
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
                    self._persist((group_id, topic_id, p), sp)  # a remote write logs its own failure
                except KafkaError as e:
                    log.warning("share state of %s-%s-%d not written: %s", group_id, topic_id, p, e)
                self.notify((group_id, topic_id, p))

    async def reset(self, group_id: str, topic_id, partition: int, start_offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts over at ``start_offset`` (a new
        state epoch at its share coordinator)."""
        key = (group_id, topic_id, partition)
        await self.persister.initialize(key, start_offset)
        self.partitions.pop(key, None)
        self._uninitialized.discard(key)

    def local_state_keys(self, group_id: str) -> list[tuple]:
        """The group's share-partitions whose state this broker's share coordinator keeps."""
        sc = self.share_coordinator
        return [k for shard in sc.read_shards() for k in shard.states if k[0] == group_id]

    async def summaries(self, keys) -> dict:
        """{key: ShareSummary | None | KafkaError} from the keys' share coordinators."""
        got = await asyncio.gather(*(self.persister.read_summary(k) for k in keys), return_exceptions=True)
        out = {}
        for k, r in zip(keys, got):
            if isinstance(r, BaseException) and not isinstance(r, KafkaError):
                raise r
            out[k] = r
        return out

    def lag(self, topic: str, partition: int, summary) -> int:
        """Records below the high watermark not delivery-complete (KIP-1226's share lag), -1 if
        no replica of the partition is here (its high watermark is not known)."""
        part = self.replica_manager.partitions.get((topic, partition))
        if part is None or summary.delivery_complete_count < 0:
            return -1
        return max(0, part.log.high_watermark - summary.start_offset - summary.delivery_complete_count)

    def connection_closed(self, connection_id: str) -> None:
        """A client connection closed: the share sessions it opened end and what their members
        hold here is released at once (Kafka's ShareSessionCache connection listener). A member
        leaving its share group does not end them: its final acknowledgements may follow."""
        now = self.now_ms()
        for s in self.sessions.connection_closed(connection_id):
            self.release(s.key[0], s.key[1], list(s.partitions), now)

    def expire_sessions(self) -> None:
        """Sessions idle longer than their group's share session timeout: the member is gone."""
        now = self.now_ms()
        idle = self.config.get("group.share.session.timeout.ms")
        for s in self.sessions.expired(idle, now):
            self.release(s.key[0], s.key[1], list(s.partitions), now)

    async def delete_states(self, keys) -> None:
        """Drop these share partitions here and their state in ``__share_group_state``
        (Kafka's DeleteShareGroupState)."""
        keys = list(keys)
        for key in keys:
            self.partitions.pop(key, None)
            self._uninitialized.discard(key)
        for r in await asyncio.gather(*(self.persister.delete(k) for k in keys), return_exceptions=True):
            if isinstance(r, BaseException):
                raise r

    def group_keys(self, group_id: str) -> list[tuple]:
        """Every share-partition a deleted group may have state for: those known here, and every
        partition of every topic (the coordinators answer for those without state at once).
        Kafka keeps the initialized partitions in ShareGroupStatePartitionMetadata; kesque does
        not record them yet."""
        keys = set(self.local_state_keys(group_id)) | {k for k in self.partitions if k[0] == group_id}
        for t in list(self.image.topics_by_id.values()):
            if not t.name.startswith("__"):
                keys |= {(group_id, t.topic_id, p) for p in t.partitions}
        return sorted(keys, key=lambda k: (str(k[1]), k[2]))

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
        deadlines = [
            d
            for tp in partitions
            if (sp := self.partitions.get((group_id, *tp))) is not None and (d := sp.next_lock_deadline()) is not None
        ]
        return min(deadlines) if deadlines else None
