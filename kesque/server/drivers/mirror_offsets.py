"""Consumer-offset copying over a cluster link (docs/mirror.md, "Consumer offsets"; the rules are
:mod:`kesque.mirror.offsets`').

One task per link with ``consumer.offset.sync.enable=true`` on each broker, for the chosen groups
whose coordinator at the destination is this broker. Every ``consumer.offset.sync.ms`` it reads
the source's groups (ListGroups), their committed offsets (OffsetFetch v8, require_stable) for
the topics mirrored over the link, then the source's high watermarks of every mirrored partition
(ListOffsets, read_uncommitted); it applies the offsets through this broker's group coordinator
(an OffsetCommit of a simple committer: no member, no generation) once the destination's last
stable offset of every mirrored partition has reached those high watermarks (the transactional
rule), and only to groups with no member at the destination.
"""

from __future__ import annotations

import asyncio
import logging

from ...coordinator.group.requests import OffsetCommit, OffsetCommitPartition
from ...errors import ErrorCode, KafkaError, error_name
from ...mirror import offsets as rules
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ..channel import Channel, ChannelError
from .mirror_fetcher import CONSUMER, LATEST, READ_UNCOMMITTED, SourceCluster

log = logging.getLogger(__name__)

LIST_GROUPS_VERSION = 4
FIND_COORDINATOR_VERSION = 4
OFFSET_FETCH_VERSION = 8
LIST_OFFSETS_VERSION = 9
READ_COMMITTED = 1


async def _list_offsets(channel: Channel, node: int, parts: list[tuple[str, int]], isolation: int) -> dict:
    """{(topic, partition): offset} of LATEST at ``node`` (HW read_uncommitted, LSO read_committed)."""
    m = Msg(ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION, request=True)
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    req = m(
        replica_id=CONSUMER,
        isolation_level=isolation,
        topics=tuple(
            m(
                "ListOffsetsTopic",
                name=t,
                partitions=tuple(
                    m("ListOffsetsPartition", partition_index=p, current_leader_epoch=-1, timestamp=LATEST) for p in ps
                ),
            )
            for t, ps in by_topic.items()
        ),
    )
    resp = await channel.send(node, ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION, req)
    return {
        (t.name, int(p.partition_index)): int(p.offset) for t in resp.topics for p in t.partitions if not p.error_code
    }


class OffsetSyncer:
    def __init__(self, mgr, link):
        self.mgr = mgr
        self.link = link
        self.name = f"mirror-offsets-{mgr.node_id}-{link.name}"
        self.filters = rules.parse_group_filters(link.configs.get(rules.GROUP_FILTERS))
        self.interval_s = rules.sync_interval_ms(link.configs) / 1000.0
        self.source = SourceCluster(link.name, link.configs, mgr.node_id)
        self.offsets_topic = rules.offsets_mirror_topic(link.name)
        self.pending: rules.OffsetCopy | None = None
        self.commit_meta: dict[tuple[str, tuple[str, int]], tuple[int, str]] = {}  # leader epoch, metadata
        self.said: dict[str, str] = {}  # group (or "") -> the last reason logged, once per change
        self.rounds = 0  # completed copies (tests, describe)
        self.task: asyncio.Task | None = None
        self.stopped = False

    def start(self, loop) -> None:
        self.task = loop.create_task(self.run(), name=self.name)

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()
        self.source.close()

    def say(self, key: str, level: int, msg: str, *args) -> None:
        text = msg % args
        if self.said.get(key) != text:
            self.said[key] = text
            log.log(level, "%s: %s", self.name, text)

    async def run(self) -> None:
        while not self.stopped:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except ChannelError as e:
                self.say("", logging.WARNING, "cannot copy consumer offsets from the source: %s", e)
            except Exception:  # noqa: BLE001 - a bug here must not stop the copying for good
                log.exception("%s: unexpected error copying consumer offsets", self.name)
            # the offsets mirror is looked for again soon while missing (the source has no
            # __consumer_offsets before its first group), not only at the next copy
            missing = self.mgr.image.topic(self.offsets_topic) is None and bool(self.mirrored())
            await asyncio.sleep(min(self.interval_s, 1.0) if missing else self.interval_s)

    def mirrored(self) -> dict[tuple[str, int], tuple[str, int]]:
        """{source (topic, partition): destination (topic, partition)} of the link's mirror topics
        still mirroring (ACTIVE or PAUSED), but its offsets mirror (no group commits offsets of
        it; its transactions are the groups', not data a copy must wait for)."""
        image = self.mgr.image
        out = {}
        for m in image.mirror_topics.values():
            t = image.topics_by_id.get(m.topic_id)
            if m.link_id != self.link.link_id or not m.mirroring or t is None or t.name == self.offsets_topic:
                continue
            for p in t.partitions:
                out[(m.source_topic, p)] = (t.name, p)
        return out

    def coordinates(self, group: str) -> bool:
        leader, err, _msg = self.mgr.group_coordinator_of(group)
        return not err and leader == self.mgr.node_id

    async def round(self) -> None:
        mirrored = self.mirrored()
        if not mirrored:
            return
        await self.ensure_offsets_mirror()
        if self.pending is None:
            self.pending = await self.read_source(mirrored)
            if self.pending is None:
                return
        lso, log_end = await self.destination_offsets(list(mirrored.values()))
        # what stopped mirroring while this round waited (failed over, promoted) is left out
        self.pending = self.pending.restricted(set(self.mirrored().values()))
        waiting = self.pending.waiting_on(lso)
        if waiting:
            if not self.pending.waited:  # once per copy, not at every look
                self.pending.waited = True
                t, p, got, hw = waiting[0]
                log.info(
                    "%s: consumer offsets wait for the mirror: %d partition(s) below the source's high "
                    "watermark read after the offsets (%s-%d: last stable offset %d, source %d)",
                    self.name,
                    len(waiting),
                    t,
                    p,
                    got,
                    hw,
                )
            return
        for group in sorted(self.pending.offsets):
            self.apply(group, self.pending.to_apply(group, log_end))
        self.pending = None
        self.rounds += 1

    async def ensure_offsets_mirror(self) -> None:
        """The link's offsets mirror (the source's ``__consumer_offsets``, mirrored byte for byte,
        markers included) is what a failover replays to apply the offsets of the last transactions
        whose output the destination holds (docs/mirror.md, "Exactly once across a failover"):
        created when missing, by the copier that finds it so (the others are told it exists)."""
        if self.mgr.image.topic(self.offsets_topic) is not None or self.mgr.create_offsets_mirror is None:
            return
        try:
            await self.mgr.create_offsets_mirror(self.link.name, self.offsets_topic)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists:
                # e.g. the source has no __consumer_offsets yet (no group committed there): next round
                self.say("offsets-mirror", logging.INFO, "offsets mirror %s not created yet: %s", self.offsets_topic, e)
            return
        log.info("%s: created %s, the mirror of the source's __consumer_offsets", self.name, self.offsets_topic)

    async def read_source(self, mirrored: dict) -> rules.OffsetCopy | None:
        """The chosen groups' committed offsets at the source (t0), then its high watermarks (t1)."""
        source_topics = sorted({t for t, _p in mirrored})
        md = await self.source.metadata(source_topics)
        groups = set()
        for node in list(self.source.brokers):
            m = Msg(ApiKeys.LIST_GROUPS, LIST_GROUPS_VERSION, request=True)
            resp = await self.source.channel.send(node, ApiKeys.LIST_GROUPS, LIST_GROUPS_VERSION, m(states_filter=()))
            if not resp.error_code:
                groups.update(g.group_id for g in resp.groups if g.protocol_type in ("consumer", ""))
        groups = sorted(g for g in groups if rules.chosen(g, self.filters) and self.coordinates(g))
        if not groups:
            return None
        offsets: dict[str, dict[tuple[str, int], int]] = {}
        self.commit_meta = {}
        for node, gs in (await self.source_coordinators(groups)).items():
            m = Msg(ApiKeys.OFFSET_FETCH, OFFSET_FETCH_VERSION, request=True)
            asked = tuple(m("OffsetFetchRequestGroup", group_id=g, topics=None) for g in gs)
            req = m(groups=asked, require_stable=True)
            resp = await self.source.channel.send(node, ApiKeys.OFFSET_FETCH, OFFSET_FETCH_VERSION, req)
            for g in resp.groups:
                errs = [int(g.error_code)] + [int(p.error_code) for t in g.topics for p in t.partitions]
                if any(errs):
                    # UNSTABLE_OFFSET_COMMIT: a transaction holding its offsets is still open there
                    self.say(g.group_id, logging.INFO, "group %s not copied this time: the source answered %s",
                             g.group_id, error_name(next(e for e in errs if e)))  # fmt: skip
                    continue
                got = {}
                for t in g.topics:
                    for p in t.partitions:
                        dest = mirrored.get((t.name, int(p.partition_index)))
                        if dest is not None and int(p.committed_offset) >= 0:
                            got[dest] = int(p.committed_offset)
                            self.commit_meta[(g.group_id, dest)] = (int(p.committed_leader_epoch), p.metadata or "")
                if got:
                    offsets[g.group_id] = got
        if not offsets:
            return None
        # t1: the source's high watermarks of every mirrored partition, after the offsets were read
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, p in mirrored:
            leader = md.get(topic, (1, None, {}))[2].get(p, (-1, -1))[0]
            if leader < 0:
                raise ChannelError(f"source partition {topic}-{p} has no leader")
            by_leader.setdefault(leader, []).append((topic, p))
        hw = {}
        for leader, parts in by_leader.items():
            got = await _list_offsets(self.source.channel, leader, parts, READ_UNCOMMITTED)
            for tp in parts:
                if tp not in got:
                    raise ChannelError(f"no high watermark of source partition {tp[0]}-{tp[1]}")
                hw[mirrored[tp]] = got[tp]
        return rules.OffsetCopy(offsets, hw)

    async def source_coordinators(self, groups: list[str]) -> dict[int, list[str]]:
        m = Msg(ApiKeys.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request=True)
        req = m(key_type=0, coordinator_keys=tuple(groups))
        resp = await self.source.channel.send(
            next(iter(self.source.brokers)), ApiKeys.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, req
        )
        out: dict[int, list[str]] = {}
        for c in resp.coordinators:
            if c.error_code:
                self.say(c.key, logging.INFO, "group %s: source coordinator: %s", c.key, error_name(int(c.error_code)))
                continue
            self.source.brokers.setdefault(int(c.node_id), (c.host, int(c.port)))
            out.setdefault(int(c.node_id), []).append(c.key)
        return out

    async def destination_offsets(self, parts: list[tuple[str, int]]) -> tuple[dict, dict]:
        """({(topic, partition): last stable offset}, {...: log end}) at the destination: from
        this broker's own leaders, else the leader's ListOffsets (read_committed)."""
        lso, log_end, remote = {}, {}, {}
        image = self.mgr.image
        for tp in parts:
            part = self.mgr.replica_manager.partitions.get(tp)
            if part is not None and part.is_leader:
                lso[tp] = part.log.last_stable_offset
                log_end[tp] = part.log.log_end_offset
                continue
            t = image.topic(tp[0])
            leader = t.partitions[tp[1]].leader if t is not None and tp[1] in t.partitions else -1
            if leader >= 0:
                remote.setdefault(leader, []).append(tp)
        for leader, tps in remote.items():
            got = await _list_offsets(self.mgr.destination_channel(), leader, tps, READ_COMMITTED)
            lso.update(got)
            log_end.update(got)  # the LSO is below the log end: a bound that holds
        return lso, log_end

    def apply(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        gc = self.mgr.group_coordinator
        try:
            g = gc.read_group(group)
            members = len(getattr(g, "members", None) or ())
            if members:
                self.say(group, logging.INFO, "group %s not copied: it has %d member(s) here (active)", group, members)
                return
            have = {tp: om.offset for tp, om in gc.read_shard(group).offsets.get(group, {}).items()}
            todo = {tp: o for tp, o in offsets.items() if have.get(tp) != o}
            if not todo:
                return
            topics: dict[str, list[OffsetCommitPartition]] = {}
            for (t, p), o in sorted(todo.items()):
                epoch, meta = self.commit_meta.get((group, (t, p)), (-1, ""))
                topics.setdefault(t, []).append(OffsetCommitPartition(p, o, epoch, meta))
            gc.run_write(group, lambda shard: shard.commit_offsets(OffsetCommit(group, topics)))
        except KafkaError as e:
            self.say(group, logging.INFO, "group %s not copied: %s", group, e)
            return
        self.say(group, logging.INFO, "group %s: copied %d offset(s) from the source", group, len(todo))
