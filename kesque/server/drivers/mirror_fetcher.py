"""The mirror fetcher: a destination partition leader copies its mirror partitions from the
source cluster of their link (docs/mirror.md; the rules are :mod:`kesque.mirror.partition`'s).

One task per cluster link on each broker that leads mirror partitions of it, with its own
:class:`~kesque.server.channel.Channel` to the source's brokers (the link's ``bootstrap.servers``
first, then the brokers the source's Metadata names). Each round sends one Fetch (v17, as a
consumer: replica id -1, READ_UNCOMMITTED, so the source answers up to its high watermark, with
the aborted transactions' records and the markers in the batches) to each source leader, holding
the mirror partitions it leads, from each one's local log end; the whole batches of an answer are
appended as they came (``Partition.append_mirrored``: the follower's ``append_raw`` on the
leader, offsets, producer ids, sequences, epochs and markers kept). The destination's followers
replicate them as any partition. Leadership moves with the image: ``refresh`` runs after every
metadata change that touches a leadership or a mirror.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from ...config.types import ConfigError
from ...errors import ErrorCode, error_name
from ...metadata.image import MIRROR_ACTIVE, MIRROR_FAILED_OVER, MIRROR_PROMOTED, MIRROR_SYNCED_CONFIGS
from ...mirror import links as link_rules
from ...mirror import offsets as offset_rules
from ...mirror.partition import APPEND, BACKOFF, OUT_OF_RANGE, REFRESH, MirrorPartitionState
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...protocol.replica_fetch import decode_fetch_response, encode_replica_fetch_request
from ...records.batch import iter_batch_positions
from ...security import client_props
from ..channel import Channel, ChannelError
from .replica_fetcher import complete_batches

log = logging.getLogger(__name__)

FETCH_VERSION = 17  # served by Kafka 4.x and kesque alike
METADATA_VERSION = 12
DESCRIBE_CONFIGS_VERSION = 4
TOPIC_CONFIG = 1  # DescribeConfigs' config source of a topic's own override (DYNAMIC_TOPIC_CONFIG)
RESOURCE_TOPIC = 2
LIST_OFFSETS_VERSION = 9
CONSUMER = -1
READ_UNCOMMITTED = 0
EARLIEST, LATEST = -2, -1
LAG_LOG_INTERVAL_S = 60.0  # how often a link's fetcher logs the partitions behind their source
_BOOTSTRAP_BASE = -1000  # the channel's node ids of the bootstrap servers: -1000, -1001, ...


def _cfg(configs: dict, name: str, default: int) -> int:
    try:
        return int(configs.get(name, default))
    except ValueError:
        return default


def source_security(configs: dict[str, str]):
    """(ssl_context, sasl login) of a link's connections to its source, from its client settings
    (``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``, Kafka's client
    names), read by kesque/security/client_props.py as kesque's own tools read theirs. Raises
    ConfigError naming the key that is wrong (a trust store file missing, a mechanism kesque has
    not, a JAAS config that does not parse or has no credentials)."""
    return client_props.ssl_context(configs), client_props.sasl_login(configs)


class SourceCluster:
    """The source cluster of one link, as a consumer sees it: Metadata from any of its brokers,
    Fetch and ListOffsets to a partition's leader. Every connection of the link (the mirror
    fetcher, the consumer-offset copier, a mirror's creation) is made here, with the link's TLS
    and SASL settings. Settings that cannot work (a trust store file gone since the link was
    created) fail every request with the reason, which the mirror partitions then show."""

    def __init__(self, link_name: str, configs: dict[str, str], node_id: int):
        self.link_name = link_name
        self.configs = configs
        self.bootstrap = link_rules.bootstrap_addresses(configs)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.config_error: str | None = None
        try:
            ssl_context, sasl = source_security(configs)
        except ConfigError as e:
            ssl_context, sasl = None, None
            self.config_error = f"cluster link {link_name} settings: {e}"
            log.error("Cluster link %s cannot reach its source: %s", link_name, e)
        self.channel = Channel(
            self.resolve,
            client_id=configs.get("client.id") or f"kesque-mirror-{link_name}-{node_id}",
            request_timeout_ms=_cfg(configs, "request.timeout.ms", 30000),
            connect_timeout_ms=_cfg(configs, "socket.connection.setup.timeout.ms", 10000),
            reconnect_backoff_ms=_cfg(configs, "reconnect.backoff.ms", 50),
            reconnect_backoff_max_ms=_cfg(configs, "reconnect.backoff.max.ms", 1000),
            ssl_context=ssl_context,
            sasl=sasl,
        )

    def resolve(self, node: int):
        if self.config_error is not None:
            return None  # no connection with settings that cannot work
        if node <= _BOOTSTRAP_BASE:
            i = _BOOTSTRAP_BASE - node
            return self.bootstrap[i] if i < len(self.bootstrap) else None
        return self.brokers.get(node)

    def close(self) -> None:
        self.channel.close()

    async def metadata(self, topics: list[str]) -> dict[str, tuple[int, uuid.UUID, dict[int, tuple[int, int]]]]:
        """{topic: (error code, topic id, {partition: (leader, leader epoch)})}, from the first
        source broker that answers (known brokers first, then the bootstrap servers)."""
        m = Msg(ApiKeys.METADATA, METADATA_VERSION, request=True)
        req = m(
            topics=tuple(m("MetadataRequestTopic", topic_id=uuid.UUID(int=0), name=t) for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        nodes = list(self.brokers) + [_BOOTSTRAP_BASE - i for i in range(len(self.bootstrap))]
        last: Exception | None = None
        for node in nodes:
            try:
                resp = await self.channel.send(node, ApiKeys.METADATA, METADATA_VERSION, req)
            except ChannelError as e:
                last = e
                continue
            self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
            return {
                t.name: (
                    int(t.error_code),
                    t.topic_id,
                    {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch)) for p in t.partitions},
                )
                for t in resp.topics
            }
        raise ChannelError(self.config_error or f"no source broker answered Metadata ({last})")

    async def topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """{topic: its own overrides among the synced configs} of the source topics that
        DescribeConfigs answered without an error (asked of any source broker, known ones first)."""
        m = Msg(ApiKeys.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, request=True)
        req = m(
            resources=tuple(
                m(
                    "DescribeConfigsResource",
                    resource_type=RESOURCE_TOPIC,
                    resource_name=t,
                    configuration_keys=MIRROR_SYNCED_CONFIGS,
                )
                for t in topics
            ),
            include_synonyms=False,
            include_documentation=False,
        )
        nodes = list(self.brokers) + [_BOOTSTRAP_BASE - i for i in range(len(self.bootstrap))]
        last: Exception | None = None
        for node in nodes:
            try:
                resp = await self.channel.send(node, ApiKeys.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, req)
            except ChannelError as e:
                last = e
                continue
            return {
                r.resource_name: {
                    c.name: c.value for c in r.configs if int(c.config_source) == TOPIC_CONFIG and c.value is not None
                }
                for r in resp.results
                if not r.error_code
            }
        raise ChannelError(self.config_error or f"no source broker answered DescribeConfigs ({last})")

    async def fetch(self, leader: int, topics: list, configs: dict) -> object:
        body = encode_replica_fetch_request(
            FETCH_VERSION,
            CONSUMER,
            -1,
            _cfg(configs, "fetch.max.wait.ms", 500),
            _cfg(configs, "fetch.min.bytes", 1),
            _cfg(configs, "fetch.max.bytes", 52428800),
            READ_UNCOMMITTED,
            topics,
        )
        return await self.channel.send(leader, ApiKeys.FETCH, FETCH_VERSION, body, decode=decode_fetch_response)

    async def log_range(self, leader: int, topic: str, partition: int) -> tuple[int, int, int]:
        """(error code, log start, log end) of a source partition."""
        out = []
        for ts in (EARLIEST, LATEST):
            m = Msg(ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION, request=True)
            part = m("ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1, timestamp=ts)
            req = m(
                replica_id=CONSUMER,
                isolation_level=READ_UNCOMMITTED,
                topics=(m("ListOffsetsTopic", name=topic, partitions=(part,)),),
            )
            resp = await self.channel.send(leader, ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION, req)
            p = resp.topics[0].partitions[0]
            if p.error_code:
                return int(p.error_code), -1, -1
            out.append(int(p.offset))
        return 0, out[0], out[1]


class _Entry:
    """A mirror partition this broker leads: replaced when the partition is re-added."""

    __slots__ = ("part", "source_topic", "source_topic_id", "state", "ready_at")

    def __init__(self, part, source_topic: str, source_topic_id: uuid.UUID, state: MirrorPartitionState):
        self.part = part
        self.source_topic = source_topic
        self.source_topic_id = source_topic_id
        self.state = state
        self.ready_at = 0.0


class _LinkFetcher:
    def __init__(self, mgr: MirrorFetcherManager, link):
        self.mgr = mgr
        self.link = link
        self.name = f"mirror-fetcher-{mgr.node_id}-{link.name}"
        self.source = SourceCluster(link.name, link.configs, mgr.node_id)
        self.entries: dict[tuple[str, int], _Entry] = {}
        self.leaders: dict[tuple[str, int], int] = {}  # source (topic, partition) -> source leader
        self.stale = True  # the source's leaders must be looked up again
        self.wake = asyncio.Event()
        self.stopped = False
        self.failing = False
        self.task: asyncio.Task | None = None
        self.lag_logged_at = 0.0  # loop time of the last lag line
        self.configs_synced_at = 0.0  # loop time of the last look at the source topics' configs
        self.config_task: asyncio.Task | None = None
        self.configs_sent: dict[str, dict] = {}  # mirror topic -> the last synced configs asked for
        self.refreshed_at = 0.0  # loop time of the last look at the source's metadata

    @property
    def backoff_s(self) -> float:
        return _cfg(self.link.configs, "retry.backoff.ms", 100) / 1000.0

    def start(self, loop) -> None:
        self.task = loop.create_task(self.run(), name=self.name)

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()
        if self.config_task is not None:
            self.config_task.cancel()
        self.source.close()

    async def run(self) -> None:
        while not self.stopped:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug here must not stop mirroring for good
                log.exception("%s: unexpected error; backing off", self.name)
                await asyncio.sleep(self.backoff_s)

    async def round(self) -> None:
        self.wake.clear()
        loop = asyncio.get_running_loop()
        if loop.time() - self.lag_logged_at >= LAG_LOG_INTERVAL_S:
            self.lag_logged_at = loop.time()
            self.log_lag()
        if self.config_task is None and loop.time() - self.configs_synced_at >= link_rules.config_sync_s(
            self.link.configs
        ):
            self.configs_synced_at = loop.time()
            self.config_task = loop.create_task(self.sync_configs(), name=f"{self.name}-configs")
        if loop.time() - self.refreshed_at >= _cfg(self.link.configs, "metadata.max.age.ms", 300000) / 1000.0:
            self.stale = True  # the source's partition counts and leaders, looked at again
        if self.stale and self.entries:
            if not await self.refresh_leaders():
                await self.sleep(self.backoff_s)
                return
        now = loop.time()
        by_leader: dict[int, list[_Entry]] = {}
        for key, e in self.entries.items():
            leader = self.leaders.get((e.source_topic, key[1]), -1)
            if e.ready_at <= now and leader >= 0:
                by_leader.setdefault(leader, []).append(e)
        if not by_leader:
            due = [e.ready_at for e in self.entries.values() if e.ready_at > now]
            await self.sleep(min(due) - now if due else None)
            return
        await asyncio.gather(*(self.fetch_from(leader, es) for leader, es in by_leader.items()))

    async def sleep(self, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except TimeoutError:
            pass

    async def sync_configs(self) -> None:
        """The synced topic configs of the mirror topics whose partition 0 this broker leads (one
        broker per topic), from their source topics, set at the controller where they differ."""
        try:
            # not a link's offsets mirror (of the source's __consumer_offsets): an internal topic's
            # configs are its cluster's own, and that mirror stays compacted as it was created
            first = {
                e.part.topic: e
                for (_t, p), e in list(self.entries.items())
                if p == 0 and not e.source_topic.startswith("__")
            }
            if not first or self.mgr.sync_configs is None:
                return
            try:
                source = await self.source.topic_configs(sorted({e.source_topic for e in first.values()}))
            except ChannelError as exc:
                log.debug("%s: source topic configs not read: %s", self.name, exc)
                return
            for topic, e in sorted(first.items()):
                if e.source_topic not in source:
                    continue
                changes = link_rules.config_changes(source[e.source_topic], self.mgr.image.topic_configs(topic))
                if not changes or self.configs_sent.get(topic) == changes:
                    continue
                try:
                    await self.mgr.sync_configs(topic, changes)
                except Exception as exc:  # noqa: BLE001 - tried again at the next interval
                    log.warning("%s: cannot sync the configs of mirror topic %s: %s", self.name, topic, exc)
                    continue
                self.configs_sent[topic] = changes
                log.info(
                    "Mirror topic %s: topic configs synced from source topic %s: %s",
                    topic,
                    e.source_topic,
                    ", ".join(
                        f"{k}={v}" if v is not None else f"{k} (no override)" for k, v in sorted(changes.items())
                    ),
                )
        finally:
            self.config_task = None

    def log_lag(self) -> None:
        """One INFO line per interval naming the partitions behind their source (offsets and time)
        or failing; nothing while every partition is caught up."""
        now_ms = self.mgr.clock.now_ms()
        behind = []
        for (topic, p), e in sorted(self.entries.items()):
            lag = e.state.lag(e.part.log.log_end_offset, now_ms)
            if lag.lag > 0 or lag.error:
                why = f" ({lag.error})" if lag.error else ""
                behind.append(f"{topic}-{p} {lag.lag} records / {lag.time_lag_ms} ms behind{why}")
        if behind:
            log.info("%s: mirror lag: %s", self.name, "; ".join(behind))

    async def refresh_leaders(self) -> bool:
        topics = sorted({e.source_topic for e in self.entries.values()})
        try:
            md = await self.source.metadata(topics)
        except ChannelError as e:
            self.failed(list(self.entries.values()), str(e))
            return False
        self.refreshed_at = asyncio.get_running_loop().time()
        self.leaders.clear()
        for e in self.entries.values():
            err, _tid, parts = md.get(e.source_topic, (1, None, {}))
            if not err:
                self.mgr.source_partitions(e.part.topic, e.part.topic_id, len(parts))
        for (_topic, p), e in self.entries.items():
            err, topic_id, parts = md.get(e.source_topic, (int(ErrorCode.unknown_topic_or_partition), None, {}))
            if err == 0 and topic_id != e.source_topic_id:
                e.state.on_failure(
                    f"the source topic {e.source_topic} has topic id {topic_id}, not the mirrored "
                    f"{e.source_topic_id} (deleted and recreated?): not fetched"
                )
                continue
            if err:
                e.state.on_failure(f"source Metadata for {e.source_topic}: {error_name(err)}")
                continue
            leader = parts.get(p, (-1, -1))[0]
            if leader >= 0:
                self.leaders[(e.source_topic, p)] = leader
            else:
                e.state.on_failure(f"source partition {e.source_topic}-{p} has no leader")
        self.stale = any(self.leaders.get((e.source_topic, k[1]), -1) < 0 for k, e in self.entries.items())
        return True

    def failed(self, entries: list[_Entry], why: str) -> None:
        if not self.failing and not self.stopped:
            self.failing = True
            log.warning("%s: error fetching from the source of cluster link %s: %s", self.name, self.link.name, why)
        due = asyncio.get_running_loop().time() + self.backoff_s
        for e in entries:
            e.state.on_failure(why)
            e.ready_at = due
        self.stale = True

    async def fetch_from(self, leader: int, entries: list[_Entry]) -> None:
        max_partition = _cfg(self.link.configs, "max.partition.fetch.bytes", 1048576)
        topics: dict = {}
        sent = {}
        for e in entries:
            offset = e.part.log.log_end_offset
            topics.setdefault(e.source_topic_id, []).append((e.part.partition, -1, offset, -1, -1, max_partition))
            sent[(e.source_topic_id, e.part.partition)] = (e, offset)
        try:
            resp = await self.source.fetch(leader, list(topics.items()), self.link.configs)
        except ChannelError as exc:
            self.failed(entries, str(exc))
            return
        if resp.error_code:
            self.failed(entries, f"Fetch error {error_name(int(resp.error_code))}")
            return
        if self.failing:
            self.failing = False
            log.info("%s: fetching from the source of cluster link %s again", self.name, self.link.name)
        now_ms = self.mgr.clock.now_ms()
        for t in resp.responses:
            for p in t.partitions:
                got = sent.get((t.topic_id, p.partition_index))
                if got is None:
                    continue
                e, offset = got
                key = (e.part.topic, e.part.partition)
                if self.entries.get(key) is not e or e.part.log.log_end_offset != offset:
                    continue  # removed, re-added or appended to meanwhile
                await self.apply(e, leader, p, offset, now_ms)

    async def apply(self, e: _Entry, leader: int, p, offset: int, now_ms: int) -> None:
        st = e.state
        buf = None
        restart = -1
        if p.records:
            buf, _first, _epoch = complete_batches(p.records)
            if buf is not None:
                lg = e.part.log
                buf, restart = batches_from(buf, offset, lg.log_start_offset == lg.log_end_offset)
        action = st.on_response(
            int(p.error_code), p.high_watermark, p.log_start_offset, buf is not None, p.last_stable_offset
        )
        if action == APPEND:
            try:
                if restart >= 0:
                    e.part.restart_mirror_at(restart)
                e.part.append_mirrored(buf, now_ms)
            except Exception as exc:  # noqa: BLE001 - the local log refused: this partition only
                log.error("%s: cannot append to %s at offset %d: %s", self.name, e.part.tp, offset, exc)
                st.on_failure(str(exc))
                e.ready_at = asyncio.get_running_loop().time() + self.backoff_s
                return
            self.mgr.on_progress(e.part)
        elif action == REFRESH:
            self.stale = True
            log.info(
                "%s: %s for source partition %s-%d: looking up its leader",
                self.name,
                st.error,
                e.source_topic,
                p.partition_index,
            )
        elif action == BACKOFF:
            log.warning(
                "%s: %s fetching source partition %s-%d", self.name, st.error, e.source_topic, p.partition_index
            )
            e.ready_at = asyncio.get_running_loop().time() + self.backoff_s
        elif action == OUT_OF_RANGE:
            await self.out_of_range(e, leader, offset)
        st.after_append(e.part.log.log_end_offset, now_ms)

    async def out_of_range(self, e: _Entry, leader: int, offset: int) -> None:
        try:
            err, start, end = await self.source.log_range(leader, e.source_topic, e.part.partition)
        except ChannelError as exc:
            self.failed([e], str(exc))
            return
        if err:
            e.state.on_failure(f"source ListOffsets: {error_name(err)}")
            self.stale = True
            return
        restart = e.state.on_out_of_range(offset, start, end)
        if restart is not None and offset == 0:
            log.info("%s: %s starts at the source's log start, offset %d", self.name, e.part.tp, restart)
            e.part.restart_mirror_at(restart)
            self.mgr.on_progress(e.part)
        elif restart is not None:
            log.error(
                "%s: %s: the source's log of %s-%d starts at %d: %d records were deleted there before they "
                "were mirrored (lost); mirroring on from %d",
                self.name,
                e.part.tp,
                e.source_topic,
                e.part.partition,
                start,
                restart - offset,
                restart,
            )
            e.part.restart_mirror_at(restart)
            self.mgr.on_progress(e.part)
        else:
            log.error("%s: %s: %s", self.name, e.part.tp, e.state.error)
            e.ready_at = asyncio.get_running_loop().time() + self.backoff_s


def batches_from(buf: memoryview, offset: int, log_empty: bool) -> tuple[memoryview | None, int]:
    """(the whole batches of a source's answer to append at log end ``offset``, the offset the
    mirror's log must restart at first or -1). A source answers from the batch that holds the
    fetch offset: a batch that starts above it follows offsets a compaction removed (appended as
    it is, as a follower does); one that starts below it holds the offset in its middle, after a
    restart at a source log start inside a batch: an empty log restarts at that batch's base (as
    Kafka's follower after UnexpectedAppendOffsetException), a log with records skips it."""
    for pos, _size in iter_batch_positions(buf):
        base = int.from_bytes(buf[pos : pos + 8], "big", signed=True)
        if base >= offset:
            return buf[pos:], -1
        if log_empty:
            return buf[pos:], base
    return None, -1


class MirrorFetcherManager:
    """The mirror fetchers of one broker: ``refresh()`` (after every image change that moves a
    leadership or a mirror) starts, changes and stops them so that exactly the ACTIVE mirror
    partitions this broker leads are fetched. ``on_progress(part)`` is called after an append
    (the HW and the waiting fetches move as after a produce)."""

    # test-only switch (the simulator's --bug skip_abort_at_failover): a failover leaves the
    # transactions the source left open hanging (no ABORT marker written)
    skip_abort_at_failover = False

    def __init__(
        self, node_id: int, image, replica_manager, clock, on_progress, loop=None, raise_producer_id_floor=None
    ):
        """``raise_producer_id_floor(n)``: the broker's producer ids from ``n`` on only."""
        self.node_id = node_id
        self.image = image
        self.replica_manager = replica_manager
        self.clock = clock
        self.on_progress = on_progress
        self.loop = loop
        self.raise_producer_id_floor = raise_producer_id_floor
        # ``async grow_mirror(topic, partitions)``: the mirror topic to the source's partition count
        self.grow_mirror = None
        # ``async sync_configs(topic, {name: value or None})``: its synced configs, at the controller
        self.sync_configs = None
        # ``async create_offsets_mirror(link name, topic)``: a link's offsets mirror, at the controller
        self.create_offsets_mirror = None
        self._growing: dict[str, int] = {}  # mirror topic -> the partition count asked for
        self._tasks: set[asyncio.Task] = set()
        self.fetchers: dict[uuid.UUID, _LinkFetcher] = {}
        self.states: dict[tuple[str, int], MirrorPartitionState] = {}
        self._scheduled = False
        # consumer-offset copying (kesque.server.drivers.mirror_offsets), set by the server: this
        # broker's group coordinator, ``group_coordinator_of(group) -> (leader, error, message)``
        # (creating __consumer_offsets when missing), a channel to this cluster's brokers and the
        # copier's class (``OffsetSyncer(manager, link)``)
        self.offset_syncer = None
        self.group_coordinator = None
        self.group_coordinator_of = None
        self.destination_channel = None
        self.offset_syncers: dict[uuid.UUID, object] = {}

    def schedule_refresh(self, *_args) -> None:
        """Coalesce the leadership and metadata callbacks of one image change into one refresh."""
        if self._scheduled or not (self.image.mirror_topics or self.fetchers or self.states):
            return  # no mirror topic: nothing to do (a leadership callback comes per partition)
        self._scheduled = True
        (self.loop or asyncio.get_running_loop()).call_soon(self._run_refresh)

    def _run_refresh(self) -> None:
        self._scheduled = False
        self.refresh()

    def _after_failover(self) -> None:
        """The failed-over topics: no producer id at or below the highest mirrored one is handed
        out here, and the partitions this broker leads abort what the source left open."""
        image = self.image
        floor = -1
        for m in image.mirror_topics.values():
            if m.state not in (MIRROR_FAILED_OVER, MIRROR_PROMOTED):
                continue
            floor = max(floor, m.max_producer_id)
            t = image.topics_by_id.get(m.topic_id)
            for p in t.partitions if t is not None else ():
                part = self.replica_manager.partitions.get((t.name, p))
                if part is None or not part.is_leader or part.mirror:
                    continue
                try:
                    self.abort_hanging(part, m.max_producer_id)
                except Exception as exc:  # noqa: BLE001 - retried at the next refresh
                    log.error("%s: cannot abort the transactions left open at failover: %s", part.tp, exc)
        if floor >= 0 and self.raise_producer_id_floor is not None:
            self.raise_producer_id_floor(floor + 1)

    def source_partitions(self, topic: str, topic_id, count: int) -> None:
        """The source topic of mirror ``topic`` has ``count`` partitions: ask for the missing ones
        (once per count)."""
        t = self.image.topics_by_id.get(topic_id)
        if t is None or count <= len(t.partitions) or self._growing.get(topic, 0) >= count or not self.grow_mirror:
            return
        self._growing[topic] = count
        log.info("Mirror topic %s: its source has %d partitions, it %d: adding them", topic, count, len(t.partitions))

        async def grow():
            try:
                await self.grow_mirror(topic, count)
            except Exception as exc:  # noqa: BLE001 - asked again at the next metadata refresh
                self._growing.pop(topic, None)
                log.warning("Mirror topic %s: cannot add partitions up to %d: %s", topic, count, exc)

        task = (self.loop or asyncio.get_running_loop()).create_task(grow())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def wanted(self) -> dict[uuid.UUID, dict[tuple[str, int], tuple]]:
        out: dict[uuid.UUID, dict] = {}
        image = self.image
        for key, part in self.replica_manager.partitions.items():
            m = image.mirror_topics.get(part.topic_id)
            if m is None or m.state != MIRROR_ACTIVE or not part.is_leader:
                continue
            if image.cluster_link_by_id(m.link_id) is None:
                continue
            out.setdefault(m.link_id, {})[key] = (part, m.source_topic, m.source_topic_id)
        return out

    def refresh(self) -> None:
        self._after_failover()
        wanted = self.wanted()
        for link_id in list(self.fetchers):
            f = self.fetchers[link_id]
            link = self.image.cluster_link_by_id(link_id)
            if link_id not in wanted or link is None or link.configs != f.link.configs:
                f.stop()
                del self.fetchers[link_id]
        now_ms = self.clock.now_ms()
        for link_id, parts in wanted.items():
            f = self.fetchers.get(link_id)
            if f is None:
                f = self.fetchers[link_id] = _LinkFetcher(self, self.image.cluster_link_by_id(link_id))
                f.start(self.loop or asyncio.get_running_loop())
            for key in [k for k in f.entries if k not in parts]:
                del f.entries[key]
            for key, (part, source_topic, source_id) in parts.items():
                e = f.entries.get(key)
                if e is None or e.part is not part:
                    st = self.states.get(key)
                    if st is None:
                        st = self.states[key] = MirrorPartitionState(now_ms)
                    f.entries[key] = _Entry(part, source_topic, source_id, st)
                    f.stale = True
            f.wake.set()
        self._refresh_offset_syncers()
        # a paused partition keeps its state (a promotion reads it once the fetcher has stopped)
        for key in [k for k in self.states if not self._mirrored_here(k)]:
            del self.states[key]

    def _refresh_offset_syncers(self) -> None:
        """One consumer-offset copier per link with ``consumer.offset.sync.enable=true`` and a
        topic still mirroring over it (restarted when the link's settings change)."""
        if self.offset_syncer is None:
            return
        image = self.image
        want = {}
        for m in image.mirror_topics.values():
            link = image.cluster_link_by_id(m.link_id)
            if m.mirroring and link is not None and offset_rules.sync_enabled(link.configs):
                want[link.link_id] = link
        for link_id in list(self.offset_syncers):
            s = self.offset_syncers[link_id]
            if link_id not in want or want[link_id].configs != s.link.configs:
                s.stop()
                del self.offset_syncers[link_id]
        for link_id, link in want.items():
            if link_id not in self.offset_syncers:
                try:
                    s = self.offset_syncer(self, link)
                except ValueError as e:
                    log.error("cluster link %s: consumer offsets not copied: %s", link.name, e)
                    continue
                self.offset_syncers[link_id] = s
                s.start(self.loop or asyncio.get_running_loop())

    def local_state(self, topic: str, partition: int) -> dict | None:
        """What a failover needs to know of a partition this broker leads: whether a fetcher still
        copies it, the highest producer id and the latest leader epoch of its log."""
        part = self.replica_manager.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            return None
        lg = part.log
        fetching = any((topic, partition) in f.entries for f in self.fetchers.values())
        st = self.states.get((topic, partition))
        return {
            "log_end_offset": lg.log_end_offset,
            "fetching": fetching,
            "caught_up": st is not None and st.caught_up(lg.log_end_offset),
            "max_producer_id": max(lg.producer_state.producers, default=-1),
            "latest_epoch": lg.leader_epoch_cache.latest_epoch(),
        }

    def abort_hanging(self, part, max_producer_id: int) -> int:
        """A failed-over or promoted partition this broker leads: ABORT markers, written as the leader, for the
        transactions of mirrored producers (ids up to ``max_producer_id``) whose markers never came
        from the source, so that the last stable offset moves on. Returns how many."""
        lg = part.log
        ps = lg.producer_state
        hanging = sorted({pid for pid in ps.ongoing_txns.values() if pid <= max_producer_id})
        if self.skip_abort_at_failover:
            return 0
        now_ms = self.clock.now_ms()
        for pid in hanging:
            entry = ps.producers[pid]
            info = part.append_txn_marker(pid, entry.epoch, False, entry.coordinator_epoch, now_ms)
            self.replica_manager.notify_append(part.topic, part.partition, info.size)
            log.info(
                "%s: aborted the transaction of producer %d (epoch %d) left open by the source at failover",
                part.tp,
                pid,
                entry.epoch,
            )
        return len(hanging)

    def _mirrored_here(self, key: tuple[str, int]) -> bool:
        part = self.replica_manager.partitions.get(key)
        m = None if part is None else self.image.mirror_topics.get(part.topic_id)
        return m is not None and m.mirroring and part.is_leader

    def lag(self, topic: str, partition: int):
        """The lag of a mirror partition this broker fetches (None when it does not)."""
        st = self.states.get((topic, partition))
        part = self.replica_manager.partitions.get((topic, partition))
        if st is None or part is None:
            return None
        return st.lag(part.log.log_end_offset, self.clock.now_ms())

    async def shutdown(self) -> None:
        fetchers = list(self.fetchers.values()) + list(self.offset_syncers.values())
        self.fetchers.clear()
        self.offset_syncers.clear()
        for f in fetchers:
            f.stop()
        for t in list(self._tasks):
            t.cancel()
        tasks = [t for f in fetchers for t in (f.task, getattr(f, "config_task", None)) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
