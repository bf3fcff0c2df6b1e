"""A group-less consumer for the console and perf tools: Metadata, ListOffsets and Fetch
over :mod:`.wire`, record batches decoded with :mod:`kesque.records`.

Why not confluent-kafka's Consumer? librdkafka insists on a ``group.id`` and, once it has
one, looks the group coordinator up even for a consumer that only uses ``assign()`` —
which makes the broker create ``__consumer_offsets``. Kafka's console consumer with
``--partition`` (and every consumer here without ``--group``) reads with no group at all,
so this reader talks to the partition leaders directly and never touches group APIs.

read_committed is honoured as Kafka's fetcher does it: the broker returns data up to the
last stable offset plus the aborted transactions of the range; batches of an aborted
transaction are dropped until its ABORT marker, and control batches are never returned.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

from ..protocol.api_keys import ApiKeys
from ..records import batch as rb
from ..records.records import iter_records
from .cluster import Cluster
from .wire import WireError, make

EARLIEST = -2
LATEST = -1

_CTRL_KEY = struct.Struct(">hh")


@dataclass(slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: str  # "CreateTime" | "LogAppendTime"
    key: bytes | None
    value: bytes | None
    headers: list = field(default_factory=list)
    leader_epoch: int = -1


class FetchError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class _PartitionState:
    topic: str
    partition: int
    position: int
    leader: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1


class WireConsumer(Cluster):
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "console-consumer",
        isolation_level: int = 0,
        auto_offset_reset: str = "latest",
        max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        partition_max_bytes: int = 1048576,
        timeout: float = 30.0,
        client_props: dict | None = None,
    ):
        super().__init__(bootstrap, client_id=client_id, timeout=timeout, client_props=client_props)
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self.max_wait_ms = max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.assignment: dict[tuple[str, int], _PartitionState] = {}
        self._buffer: list[Message] = []
        self._need_metadata = True

    def _refresh_leaders(self) -> None:
        topics = sorted({t for t, _p in self.assignment})
        if not topics:
            self._need_metadata = False
            return
        md = self.metadata(topics)
        for (t, p), st in self.assignment.items():
            info = md.get(t, {}).get("partitions", {}).get(p)
            if info is not None:
                st.leader, st.leader_epoch = info
        self._need_metadata = False

    # ------------------------------------------------------------------ offsets
    def list_offsets(self, tps: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets at the partition leaders; -1 offsets where none matched."""
        if self._need_metadata or any(tp not in self.assignment for tp in tps):
            md = self.metadata(sorted({t for t, _ in tps}))
        else:
            md = None
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for t, p in tps:
            if md is not None:
                leader = md.get(t, {}).get("partitions", {}).get(p, (-1, -1))[0]
            else:
                leader = self.assignment[(t, p)].leader
            by_leader.setdefault(leader, []).append((t, p))
        out: dict[tuple[str, int], int] = {}
        for leader, group in by_leader.items():
            if leader < 0:
                raise FetchError(
                    5, "There is no leader for this topic-partition as we are in the middle of a leadership election."
                )

            def build(mod, v, group=group):
                rq = mod.request
                topics: dict[str, list] = {}
                for t, p in group:
                    topics.setdefault(t, []).append(
                        make(rq.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                    )
                return make(
                    rq.ListOffsetsRequest,
                    replica_id=-1,
                    isolation_level=self.isolation_level,
                    topics=tuple(make(rq.ListOffsetsTopic, name=t, partitions=tuple(ps)) for t, ps in topics.items()),
                    timeout=30000,
                )

            resp = self._conn(leader).request(ApiKeys.LIST_OFFSETS, build)
            for t in resp.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code:
                        raise FetchError(code, p.error_code.name)
                    out[(t.name, int(p.partition_index))] = int(p.offset)
        return out

    # ------------------------------------------------------------------ assignment
    def assign(self, positions: dict[tuple[str, int], int]) -> None:
        """Positions may be offsets or EARLIEST / LATEST (resolved with ListOffsets now)."""
        for tp, pos in positions.items():
            self.assignment[tp] = _PartitionState(tp[0], tp[1], pos)
        self._need_metadata = True
        self._refresh_leaders()
        for kind in (EARLIEST, LATEST):
            tps = [tp for tp, st in self.assignment.items() if st.position == kind]
            if tps:
                for tp, off in self.list_offsets(tps, kind).items():
                    self.assignment[tp].position = off

    def _reset(self, st: _PartitionState) -> None:
        kind = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        if self.auto_offset_reset not in ("earliest", "latest"):
            raise FetchError(
                1,
                f"Fetch position FetchPosition{{offset={st.position}}} is out of range for "
                f"partition {st.topic}-{st.partition}",
            )
        st.position = self.list_offsets([(st.topic, st.partition)], kind)[(st.topic, st.partition)]

    # ------------------------------------------------------------------ fetching
    def poll(self, timeout: float) -> list[Message]:
        """Records fetched within ``timeout`` seconds (possibly none)."""
        if self._buffer:
            out, self._buffer = self._buffer, []
            return out
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if not self.assignment:
                time.sleep(max(0.0, min(remaining, 0.1)))
                if time.monotonic() >= deadline:
                    return []
                continue
            try:
                if self._need_metadata:
                    self._refresh_leaders()
                wait_ms = int(max(0, min(self.max_wait_ms, remaining * 1000)))
                msgs = self._fetch_once(wait_ms)
            except (OSError, WireError):
                for node in list(self._conns):
                    self._drop(node)
                self._need_metadata = True
                msgs = []
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if msgs or time.monotonic() >= deadline:
                return msgs

    def drain(self, timeout: float = 1.0) -> list:
        """Everything :meth:`poll` returns until a poll of ``timeout`` seconds comes back empty."""
        out: list = []
        while msgs := self.poll(timeout):
            out += msgs
        return out

    def _fetch_once(self, wait_ms: int) -> list[Message]:
        by_leader: dict[int, list[_PartitionState]] = {}
        for st in self.assignment.values():
            by_leader.setdefault(st.leader, []).append(st)
        if -1 in by_leader:
            self._need_metadata = True
            by_leader.pop(-1)
            if not by_leader:
                time.sleep(wait_ms / 1000.0)
                return []
        out: list[Message] = []
        many = len(by_leader) > 1
        for leader, states in by_leader.items():
            out += self._fetch_from(leader, states, 0 if many else wait_ms)
        if many and not out:
            time.sleep(min(wait_ms, 100) / 1000.0)
        return out

    def _fetch_from(self, leader: int, states: list[_PartitionState], wait_ms: int) -> list[Message]:
        def build(mod, v):
            rq = mod.request
            topics: dict[str, list] = {}
            for st in states:
                topics.setdefault(st.topic, []).append(
                    make(
                        rq.FetchPartition,
                        partition=st.partition,
                        current_leader_epoch=-1,
                        fetch_offset=st.position,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=self.partition_max_bytes,
                    )
                )
            return make(
                rq.FetchRequest,
                cluster_id=None,
                replica_id=-1,
                max_wait=wait_ms,
                min_bytes=self.fetch_min_bytes,
                max_bytes=self.fetch_max_bytes,
                isolation_level=self.isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=tuple(make(rq.FetchTopic, topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
                forgotten_topics_data=(),
                rack_id="",
            )

        resp = self._conn(leader).request(ApiKeys.FETCH, build, max_version=12)
        out: list[Message] = []
        by_tp = {(st.topic, st.partition): st for st in states}
        for t in resp.responses:
            for p in t.partitions:
                st = by_tp.get((t.topic, int(p.partition_index)))
                if st is None:
                    continue
                code = int(p.error_code)
                if code == 1:  # OFFSET_OUT_OF_RANGE
                    self._reset(st)
                    continue
                if code in (3, 5, 6, 74, 75, 100):  # metadata is stale: refresh and retry
                    self._need_metadata = True
                    continue
                if code:
                    raise FetchError(code, p.error_code.name)
                st.high_watermark = int(p.high_watermark)
                st.log_start_offset = int(p.log_start_offset)
                data = p.records
                if data:
                    aborted = sorted(
                        ((int(a.first_offset), int(a.producer_id)) for a in (p.aborted_transactions or ())),
                        reverse=True,
                    )
                    out += self._decode(st, bytes(data), aborted)
        return out

    def _visible_batches(self, st: _PartitionState, data: bytes, aborted: list[tuple[int, int]]):
        """The data batches of a fetched partition a consumer at this isolation level
        returns, as (position, header); advances ``st.position`` past each batch read,
        returned or skipped (control batches, aborted transactions, old formats)."""
        aborting: set[int] = set()
        committed = self.isolation_level == 1
        for pos, h in rb.iter_headers(data):
            if h.magic != rb.MAGIC_V2:
                st.position = max(st.position, h.next_offset)
                continue
            if h.last_offset < st.position:
                continue
            if committed:
                while aborted and aborted[-1][0] <= h.last_offset:
                    aborting.add(aborted.pop()[1])
            if h.is_control:
                if committed and h.producer_id in aborting:
                    for r in iter_records(data, pos, h):
                        if r.key is not None and len(r.key) >= 4 and _CTRL_KEY.unpack_from(r.key)[1] == 0:
                            aborting.discard(h.producer_id)
                st.position = h.next_offset
                continue
            if committed and h.is_transactional and h.producer_id in aborting:
                st.position = h.next_offset
                continue
            yield pos, h
            st.position = h.next_offset

    def _decode(self, st: _PartitionState, data: bytes, aborted: list[tuple[int, int]]) -> list:
        """What :meth:`poll` returns for one fetched partition: :class:`Message` objects
        (a subclass may return other things, e.g. column chunks)."""
        out: list[Message] = []
        for pos, h in self._visible_batches(st, data, aborted):
            ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
            start = st.position
            for r in iter_records(data, pos, h):
                if r.offset < start:
                    continue
                out.append(
                    Message(
                        st.topic,
                        st.partition,
                        r.offset,
                        r.timestamp,
                        ts_type,
                        r.key,
                        r.value,
                        r.headers,
                        h.partition_leader_epoch,
                    )
                )
        return out
