"""The replica fetcher: a follower pulls its partitions from their leaders (Kafka's
ReplicaFetcherManager, AbstractFetcherThread and RemoteLeaderEndPoint, on the event loop).

One fetcher per (source broker, fetcher index): an asyncio task with its own
:class:`~kesque.server.channel.Channel`, so that the long polls of two fetchers never wait for
each other. A partition goes to index ``abs(31 * topic.hashCode() + partition) %
num.replica.fetchers`` as Kafka's getFetcherId.

Each round sends one Fetch (v18: the replica id and broker epoch travel in ``replica_state``,
topics by id, no fetch session, READ_UNCOMMITTED) holding the partitions whose
:class:`~kesque.replication.replica_state.FollowerFetch` is FETCHING or TRUNCATING, and hands
each partition's answer to ``FollowerFetch.on_response``: the sans-IO rules decide whether to
append, truncate, back off or wait. Records are appended as they came (``UnifiedLog.append_raw``:
offsets and leader epochs kept), whole batches only. The fetcher's own work is per partition and
per batch header, never per record. The request is encoded and the answer decoded by hand
(:mod:`kesque.protocol.replica_fetch`, checked byte for byte against kio): the records are views
of the answer's frame, which the channel read into a buffer of its own, so the leader's bytes
reach the segment file without a copy in Python.

- Replication quota (KIP-73, :mod:`kesque.replication.quota`): a FETCHING partition is left out
  of the request while its replica is not in sync (``FollowerFetch.in_sync``), it is
  follower-throttled on this broker and the follower quota is exceeded; when that leaves nothing
  to send, the fetcher waits ``replica.fetch.backoff.ms`` (or until partitions change). The bytes
  received for follower-throttled partitions are counted in the quota.
- BACKOFF: the partition is not sent again for ``replica.fetch.backoff.ms``.
- WAIT_FOR_METADATA (FENCED_LEADER_EPOCH): not sent again until ``add_partitions`` names it.
- OUT_OF_RANGE: ListOffsets to the leader (EARLIEST and LATEST, as a replica: the leader answers
  its log end offset), then ``FollowerFetch.on_out_of_range``.
- A connection error, a timeout or a top-level error backs off every partition of the request
  (logged at WARNING once per failure streak); an exception of the local log (an out-of-order
  append, a disk error) backs off that partition only, logged at ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from ...errors import ErrorCode, error_name
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...protocol.replica_fetch import decode_fetch_response, encode_replica_fetch_request
from ...records.batch import iter_batch_positions
from ...replication.replica_state import (
    BACKOFF,
    FETCHING,
    OUT_OF_RANGE,
    TRUNCATING,
    UNDEFINED,
    WAIT_FOR_METADATA,
    FetchPartitionResponse,
    FollowerFetch,
)
from ...utils import java_string_hash
from ..channel import Channel, ChannelError

log = logging.getLogger(__name__)

FETCH_VERSION = 18  # the highest Fetch version kio and kesque's handler both serve (>= 15)
LIST_OFFSETS_VERSION = 11
EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED = 0
_SENDABLE = (FETCHING, TRUNCATING)
_PARTITION_LEADER_EPOCH = struct.Struct(">i")  # at byte 12 of a batch header


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's getFetcherId: ``Utils.abs(31 * topic.hashCode + partition) % numFetchers`` in
    Java's 32-bit arithmetic."""
    h = (31 * java_string_hash(topic) + partition) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= (1 << 31) else h
    return (0 if h == -(1 << 31) else abs(h)) % num_fetchers


def complete_batches(records) -> tuple[memoryview | None, int, int]:
    """(the whole batches of a fetched buffer, first offset, partition leader epoch of the last
    batch): a trailing partial batch (cut by the fetch size) is dropped."""
    mv = memoryview(records)
    first = last_pos = -1
    end = 0
    for pos, size in iter_batch_positions(mv):
        if first < 0:
            first = struct.unpack_from(">q", mv, pos)[0]
        last_pos, end = pos, pos + size
    if end == 0:
        return None, UNDEFINED, UNDEFINED
    return mv[:end], first, _PARTITION_LEADER_EPOCH.unpack_from(mv, last_pos + 12)[0]


class _Entry:
    """One partition on a fetcher: replaced (never reused) when the partition is re-added, so
    that an answer to a request sent before is recognised as stale."""

    __slots__ = ("part", "rlog", "fetch", "ready_at", "sent_offset")

    def __init__(self, part, leader_id: int, leader_epoch: int):
        self.part = part
        self.rlog = part.rlog  # the partition's: it follows a move between log dirs (Partition.replace_log)
        self.fetch = FollowerFetch(leader_id, leader_epoch, self.rlog)
        self.ready_at = 0.0  # loop time before which a backed-off partition waits
        self.sent_offset = -1  # the fetch offset of the request in flight


class _Fetcher:
    def __init__(self, mgr: ReplicaFetcherManager, leader: int, index: int):
        self.mgr = mgr
        self.leader = leader
        self.index = index
        self.name = f"replica-fetcher-{mgr.node_id}-{leader}-{index}"
        self.channel = Channel(
            mgr.resolve,
            client_id=self.name,
            request_timeout_ms=mgr.config.get("replica.socket.timeout.ms"),
            ssl_context=mgr.ssl_context,
            sasl=mgr.sasl,
        )
        self.entries: dict[tuple[str, int], _Entry] = {}  # in request order (rotated)
        self.wake = asyncio.Event()
        self.failing = False
        self.stopped = False
        self.task: asyncio.Task | None = None

    def start(self, loop) -> None:
        self.task = loop.create_task(self.run(), name=self.name)

    def stop(self) -> None:
        self.stopped = True  # a cancel can be lost in wait_for: the loop checks this
        if self.task is not None:
            self.task.cancel()
        self.channel.close()

    # -- the loop ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while not self.stopped:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug here must not stop replication for good
                log.exception("%s: unexpected error; backing off", self.name)
                await asyncio.sleep(self.backoff_s)

    @property
    def backoff_s(self) -> float:
        return self.mgr.config.get("replica.fetch.backoff.ms") / 1000.0

    async def round(self) -> None:
        self.wake.clear()
        now = asyncio.get_running_loop().time()
        for key, e in list(self.entries.items()):
            if e.fetch.state == OUT_OF_RANGE and e.ready_at <= now:
                await self.handle_out_of_range(key, e)
        now = asyncio.get_running_loop().time()
        quota = self.mgr.quota
        throttling = quota is not None and bool(quota.throttled)
        now_ms = self.mgr.quota_now_ms() if throttling else 0
        ready = []
        held = False
        for e in self.entries.values():
            if e.fetch.state == BACKOFF and e.ready_at <= now:
                e.fetch.state = FETCHING
            if e.fetch.state in _SENDABLE:
                if (
                    throttling
                    and e.fetch.state == FETCHING
                    and quota.should_throttle(e.part.topic, e.part.partition, e.fetch.in_sync, now_ms)
                ):
                    held = True  # Kafka's shouldFollowerThrottle: not in this request
                    continue
                ready.append(e)
        if not ready:
            await self.sleep(now, self.backoff_s if held else None)
            return
        try:
            resp = await self.channel.send(
                self.leader, ApiKeys.FETCH, FETCH_VERSION, self.fetch_request(ready), decode=decode_fetch_response
            )
        except ChannelError as exc:
            self.failed(ready, str(exc))
            return
        if resp.error_code:
            self.failed(ready, f"Fetch error {error_name(int(resp.error_code))}")
            return
        if self.failing:
            self.failing = False
            log.info("%s: fetching from broker %d again", self.name, self.leader)
        self.process(ready, resp)

    async def sleep(self, now: float, at_most: float | None = None) -> None:
        """Until add_partitions wakes the fetcher, the first backed-off partition is due, or
        ``at_most`` seconds passed."""
        due = [e.ready_at for e in self.entries.values() if e.fetch.state in (BACKOFF, OUT_OF_RANGE)]
        if at_most is not None:
            due.append(now + at_most)
        timeout = min(due) - now if due else None
        if timeout is not None and timeout <= 0:
            await asyncio.sleep(0)  # wait_for(..., 0) would not yield to the loop
            return
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except TimeoutError:
            pass

    def failed(self, sent: list[_Entry], why: str) -> None:
        if not self.failing and not self.stopped:
            self.failing = True
            log.warning(
                "%s: error fetching from broker %d: %s (retrying every %d ms)",
                self.name,
                self.leader,
                why,
                self.mgr.config.get("replica.fetch.backoff.ms"),
            )
        self.back_off(sent)

    def back_off(self, entries) -> None:
        due = asyncio.get_running_loop().time() + self.backoff_s
        for e in entries:
            if e.fetch.state in _SENDABLE:
                e.fetch.state = BACKOFF
            e.ready_at = due

    # -- Fetch ----------------------------------------------------------------------------------------------
    def fetch_request(self, ready: list[_Entry]) -> bytes:
        """The Fetch body, encoded by hand (kesque.protocol.replica_fetch, the bytes kio writes)."""
        cfg = self.mgr.config
        max_bytes = cfg.get("replica.fetch.max.bytes")
        topics: dict = {}
        for e in ready:
            r = e.fetch.request(e.rlog)
            e.sent_offset = r.fetch_offset
            topics.setdefault(e.part.topic_id, []).append(
                (
                    e.part.partition,
                    r.current_leader_epoch,
                    r.fetch_offset,
                    r.last_fetched_epoch,
                    r.log_start_offset,
                    max_bytes,
                )
            )
        return encode_replica_fetch_request(
            FETCH_VERSION,
            self.mgr.node_id,
            self.mgr.broker_epoch(),
            cfg.get("replica.fetch.wait.max.ms"),
            cfg.get("replica.fetch.min.bytes"),
            cfg.get("replica.fetch.response.max.bytes"),
            READ_UNCOMMITTED,
            list(topics.items()),
        )

    def process(self, sent: list[_Entry], resp) -> None:
        by_id = {(e.part.topic_id, e.part.partition): e for e in sent}
        now_ms = self.mgr.clock.now_ms()
        rotate = []
        for t in resp.responses:
            for p in t.partitions:
                e = by_id.get((t.topic_id, p.partition_index))
                key = None if e is None else (e.part.topic, e.part.partition)
                if e is None or self.entries.get(key) is not e:
                    continue  # not asked, or removed / re-added meanwhile
                if self.apply(e, p, now_ms):
                    rotate.append(key)
        for key in rotate:  # as a fetch session does: those that got data go last
            self.entries[key] = self.entries.pop(key)

    def apply(self, e: _Entry, p, now_ms: int) -> bool:
        """One partition's answer; returns whether records came."""
        resp = FetchPartitionResponse(
            int(p.error_code), p.high_watermark, p.log_start_offset, request_offset=e.sent_offset
        )
        de = p.diverging_epoch
        if de is not None and de.epoch >= 0:
            resp.diverging_epoch = (de.epoch, de.end_offset)
        if p.records:
            buf, resp.first_offset, resp.last_epoch = complete_batches(p.records)
            if buf is not None:
                resp.records = [buf]
        lg = e.part.log
        before = (lg.log_end_offset, lg.high_watermark, lg.log_start_offset)
        try:
            state = e.fetch.on_response(resp, e.rlog, lambda recs: lg.append_raw(recs[0], now_ms))
        except Exception as exc:  # noqa: BLE001 - the local log failed: this partition only
            log.error(
                "%s: error processing data for partition %s at offset %d: %s",
                self.name,
                e.part.tp,
                e.fetch.fetch_offset,
                exc,
            )
            self.restart_from_log(e)
            state = BACKOFF
        if resp.error_code:
            log.debug(
                "%s: %s for %s at offset %d", self.name, error_name(resp.error_code), e.part.tp, e.fetch.fetch_offset
            )
        if state == BACKOFF:
            self.back_off([e])
        elif resp.error_code and state == WAIT_FOR_METADATA:
            log.info(
                "%s: partition %s is fenced at leader epoch %d; waiting for new metadata",
                self.name,
                e.part.tp,
                e.fetch.leader_epoch,
            )
        if lg.log_end_offset < before[0]:
            log.info(
                "%s: truncated %s to offset %d (diverging epoch %s from the leader)",
                self.name,
                e.part.tp,
                lg.log_end_offset,
                resp.diverging_epoch,
            )
        elif lg.log_end_offset > before[0]:
            if self.mgr.quota is not None:
                # as Kafka's processPartitionData: what came for a throttled partition, in sync or not
                self.mgr.quota.record_if_throttled(
                    e.part.topic, e.part.partition, len(p.records), self.mgr.quota_now_ms()
                )
            if self.mgr.topic_stats is not None:  # ReplicationBytesInPerSec: the records appended
                self.mgr.topic_stats.replication_bytes_in += len(p.records)
        self.progress(e, before)
        return bool(resp.records)

    def restart_from_log(self, e: _Entry) -> None:
        """After a partial append or truncation, fetch again from what the log holds now."""
        try:
            e.fetch = FollowerFetch(e.fetch.leader_id, e.fetch.leader_epoch, e.rlog)
        except Exception as exc:  # noqa: BLE001
            log.error("%s: cannot read the log of %s: %s", self.name, e.part.tp, exc)
        e.fetch.state = BACKOFF

    def progress(self, e: _Entry, before: tuple[int, int, int]) -> None:
        lg = e.part.log
        if before != (lg.log_end_offset, lg.high_watermark, lg.log_start_offset):
            try:
                self.mgr.on_progress(e.part)
            except Exception:  # noqa: BLE001
                log.exception("%s: on_progress failed for %s", self.name, e.part.tp)

    # -- OFFSET_OUT_OF_RANGE ------------------------------------------------------------------------------
    async def handle_out_of_range(self, key, e: _Entry) -> None:
        """Kafka's fetchOffsetAndTruncate: the leader's log start and end, as a replica sees them."""
        if self.entries.get(key) is not e:
            return
        try:
            start = await self.list_offset(e, EARLIEST)
            end = await self.list_offset(e, LATEST)
        except ChannelError as exc:
            self.failed([e], str(exc))
            return
        if self.entries.get(key) is not e:
            return
        err = start[0] or end[0]
        if err:
            if err == ErrorCode.fenced_leader_epoch:
                e.fetch.state = WAIT_FOR_METADATA
            else:
                log.info("%s: ListOffsets for %s: %s", self.name, e.part.tp, error_name(err))
                e.fetch.state = BACKOFF
                self.back_off([e])
            return
        lg = e.part.log
        before = (lg.log_end_offset, lg.high_watermark, lg.log_start_offset)
        try:
            e.fetch.on_out_of_range(start[1], end[1], e.rlog)
            log.info(
                "%s: %s was out of range; leader log start %d, end %d: fetching from %d",
                self.name,
                e.part.tp,
                start[1],
                end[1],
                e.fetch.fetch_offset,
            )
        except Exception as exc:  # noqa: BLE001
            log.error("%s: cannot truncate %s: %s", self.name, e.part.tp, exc)
            self.restart_from_log(e)
            self.back_off([e])
        self.progress(e, before)

    async def list_offset(self, e: _Entry, timestamp: int) -> tuple[int, int]:
        """(error code, offset) of one ListOffsets lookup sent as replica ``node_id``."""
        m = Msg(ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION, request=True)
        part = m(
            "ListOffsetsPartition",
            partition_index=e.part.partition,
            current_leader_epoch=e.fetch.leader_epoch,
            timestamp=timestamp,
        )
        req = m(
            replica_id=self.mgr.node_id,
            isolation_level=READ_UNCOMMITTED,
            timeout=0,
            topics=(m("ListOffsetsTopic", name=e.part.topic, partitions=(part,)),),
        )
        resp = await self.channel.send(self.leader, ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION, req)
        for t in resp.topics:
            for p in t.partitions:
                if t.name == e.part.topic and p.partition_index == e.part.partition:
                    return int(p.error_code), p.offset
        return int(ErrorCode.unknown_server_error), UNDEFINED


class ReplicaFetcherManager:
    """The fetchers of one broker. ``resolve(broker_id) -> (host, port) | None`` is a broker's
    inter-broker listener; ``broker_epoch()`` this broker's epoch; ``on_progress(part)`` is called
    on the loop after an answer appended to, truncated, or moved the HW or log start of ``part``;
    ``quota`` the follower replication quota (``throttled``, ``should_throttle``,
    ``record_if_throttled``: :class:`~kesque.replication.quota.ReplicationQuota`), None for none."""

    def __init__(
        self,
        node_id: int,
        config,
        clock,
        resolve,
        broker_epoch,
        on_progress,
        loop=None,
        quota=None,
        ssl_context=None,
        sasl=None,
        topic_stats=None,
    ):
        """``topic_stats``: kesque.metrics' BrokerTopicStats (None: metrics off)."""
        self.node_id = node_id
        self.config = config
        self.clock = clock
        self.resolve = resolve
        self.broker_epoch = broker_epoch
        self.on_progress = on_progress
        self.loop = loop
        self.quota = quota
        self.ssl_context = ssl_context  # the inter-broker listener's client TLS, when it is SSL
        self.sasl = sasl  # its SASL login, when it is SASL_PLAINTEXT or SASL_SSL
        self.topic_stats = topic_stats
        self.fetchers: dict[tuple[int, int], _Fetcher] = {}
        self.where: dict[tuple[str, int], _Fetcher] = {}

    def quota_now_ms(self) -> int:
        """The time the replication quota measures in (monotonic, as the leader's)."""
        return int(self.clock.monotonic() * 1000)

    def add_partitions(self, parts: dict) -> None:
        """``{part: (leader_id, leader_epoch)}``: (re)start each from its log end, following
        ``leader_id``, with a fresh FollowerFetch."""
        n = self.config.get("num.replica.fetchers")
        for part, (leader_id, leader_epoch) in parts.items():
            key = (part.topic, part.partition)
            self._detach(key)
            f = self._fetcher(leader_id, fetcher_id(part.topic, part.partition, n))
            f.entries[key] = _Entry(part, leader_id, leader_epoch)
            self.where[key] = f
            f.wake.set()

    def remove_partitions(self, parts) -> None:
        for part in parts:
            self._detach((part.topic, part.partition))

    def leader_of(self, part) -> int | None:
        f = self.where.get((part.topic, part.partition))
        return None if f is None else f.leader

    async def shutdown(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self.where.clear()
        for f in fetchers:
            f.stop()
        await asyncio.gather(*(f.task for f in fetchers if f.task is not None), return_exceptions=True)

    def _fetcher(self, leader_id: int, index: int) -> _Fetcher:
        f = self.fetchers.get((leader_id, index))
        if f is None:
            f = self.fetchers[(leader_id, index)] = _Fetcher(self, leader_id, index)
            f.start(self.loop or asyncio.get_running_loop())
        return f

    def _detach(self, key) -> None:
        f = self.where.pop(key, None)
        if f is None:
            return
        f.entries.pop(key, None)
        if not f.entries:  # Kafka's shutdownIdleFetcherThreads
            del self.fetchers[(f.leader, f.index)]
            f.stop()
