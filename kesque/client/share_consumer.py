"""A share consumer (KIP-932) for the tools, as Kafka's KafkaShareConsumer behaves.

Membership: ShareGroupHeartbeat to the group coordinator with a member id made here (a
random Uuid, as the Java client does); the assignment names topic ids, which Metadata maps
to names and leaders. Records: ShareFetch to each partition leader in a share session
(epoch 0 opens it, then 1, 2, ...), and only the records inside the response's acquired
ranges are handed out, each with its delivery count. Acknowledgements ride on the next
ShareFetch to the same leader; :meth:`ShareConsumer.commit_sync` and :meth:`close` send them
with ShareAcknowledge (close with epoch -1, which ends the session and releases whatever
this member still holds there), then the member leaves the group (epoch -1).

``acknowledgement_mode`` is ``share.acknowledgement.mode``: ``implicit`` accepts every record
of a poll at the next poll, commit or close; ``explicit`` wants :meth:`acknowledge` for each
record of a poll before the next poll (IllegalStateException in Java, ValueError here).
Offsets of an acquired range without a record to hand out (control records, aborted
transactional records) are acknowledged as gaps.

Blocking and single-threaded: heartbeats go out from :meth:`ShareConsumer.poll` (Kafka's client
has a background thread), so a caller must poll within ``share.session.timeout.ms`` (45 s) to
stay in the group; fetches wait at most until the next heartbeat is due.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass

from ..errors import ErrorCode, KafkaError
from ..protocol.api_keys import ApiKeys
from ..records import batch as rb
from ..records.records import iter_records
from .cluster import COORDINATOR_RETRIABLE, Cluster
from .consumer import Message
from .wire import WireError, make

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
ACK_TYPES = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_SESSION_LOST = {ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch}
_REJOIN = {ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch}
_STALE_LEADER = {3, 5, 6, 74, 75, 100}  # metadata is stale: refresh and retry


@dataclass(slots=True)
class ShareMessage(Message):
    delivery_count: int = 1
    topic_id: object = None


def random_member_id() -> str:
    """A Uuid as Kafka's clients print it (base64url, no padding), never starting with ``-``
    (Kafka's Uuid.randomUuid draws again: such an id would read as an option on a command line)."""
    while True:
        mid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not mid.startswith("-"):
            return mid


def ack_batches(acks: dict[int, int]) -> list[tuple[int, int, list[int]]]:
    """{offset: type} as acknowledgement batches: runs of consecutive offsets, each with one
    type when the whole run has it, else one type per offset."""
    out: list[tuple[int, int, list[int]]] = []
    run: list[int] = []
    for off in sorted(acks):
        if run and off != run[-1] + 1:
            out.append(_batch(run, acks))
            run = []
        run.append(off)
    if run:
        out.append(_batch(run, acks))
    return out


def _batch(run: list[int], acks: dict[int, int]) -> tuple[int, int, list[int]]:
    types = [acks[o] for o in run]
    return run[0], run[-1], types[:1] if len(set(types)) == 1 else types


class _Session:
    """The share session with one leader: the epoch to send next and its partitions."""

    def __init__(self):
        self.epoch = INITIAL_EPOCH
        self.partitions: set[tuple] = set()  # (topic id, partition)

    def next(self) -> None:
        self.epoch = 1 if self.epoch >= 2**31 - 1 else self.epoch + 1


class ShareConsumer(Cluster):
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        *,
        client_id: str = "console-share-consumer",
        acknowledgement_mode: str = "implicit",
        max_wait_ms: int = 500,
        max_records: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        timeout: float = 30.0,
        rack_id: str | None = None,
        client_props: dict | None = None,
    ):
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(f"Invalid value {acknowledgement_mode} for configuration share.acknowledgement.mode")
        super().__init__(bootstrap, client_id=client_id, timeout=timeout, client_props=client_props)
        self.group_id = group_id
        self.explicit = acknowledgement_mode == "explicit"
        self.max_wait_ms, self.max_records = max_wait_ms, max_records
        self.fetch_min_bytes, self.fetch_max_bytes = fetch_min_bytes, fetch_max_bytes
        self.rack_id = rack_id
        self.member_id = random_member_id()
        self.member_epoch = 0
        self.subscription: list[str] = []
        self.assignment: dict[tuple, str] = {}  # (topic id, partition) -> topic name
        self.acquisition_lock_timeout_ms = -1
        self._coordinator: int | None = None
        self._next_heartbeat = 0.0
        self._heartbeat_interval = 0.0
        self._names: dict = {}  # topic id -> name
        self._leaders: dict[tuple, int] = {}  # (topic id, partition) -> leader node
        self._sessions: dict[int, _Session] = {}
        self._delivered: dict[tuple, dict[int, int | None]] = {}  # tp -> {offset: ack type or None}
        self._pending: dict[tuple, dict[int, int]] = {}  # acknowledgements not sent yet
        self._buffer: list[ShareMessage] = []
        self.ack_errors: dict[tuple[str, int], int] = {}  # what the last acknowledgements got back

    # ------------------------------------------------------------------ membership
    def subscribe(self, topics: list[str]) -> None:
        self.subscription = list(topics)
        self._next_heartbeat = 0.0

    def _heartbeat(self, leaving: bool = False) -> None:
        if self._coordinator is None:
            self._coordinator = self.find_coordinator(self.group_id, 0)

        def build(mod, v):
            return make(
                mod.request.ShareGroupHeartbeatRequest,
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=FINAL_EPOCH if leaving else self.member_epoch,
                rack_id=self.rack_id,
                subscribed_topic_names=None if leaving else tuple(self.subscription),
            )

        try:
            resp = self._conn(self._coordinator).request(ApiKeys.SHARE_GROUP_HEARTBEAT, build)
        except (OSError, WireError):
            self._drop(self._coordinator)
            self._coordinator = None
            raise
        code = ErrorCode(int(resp.error_code))
        if code in COORDINATOR_RETRIABLE:
            self._coordinator = None
            self._next_heartbeat = time.monotonic() + 0.1
            return
        if code in _REJOIN and not leaving:
            self.member_epoch = 0
            self._next_heartbeat = 0.0
            return
        if code != ErrorCode.none:
            raise KafkaError(code, resp.error_message)
        if leaving:
            return
        self.member_epoch = int(resp.member_epoch)
        self._heartbeat_interval = resp.heartbeat_interval.total_seconds()
        self._next_heartbeat = time.monotonic() + self._heartbeat_interval
        if resp.assignment is not None:
            self._assign({(tp.topic_id, int(p)) for tp in resp.assignment.topic_partitions for p in tp.partitions})

    def _assign(self, tps: set[tuple]) -> None:
        if any(tid not in self._names for tid, _p in tps):
            self._refresh_metadata()
        self.assignment = {tp: self._names[tp[0]] for tp in tps if tp[0] in self._names}

    def _refresh_metadata(self) -> None:
        md = self.metadata(sorted(self.subscription))
        for name, info in md.items():
            if info["error"] == 0 and info.get("topic_id") is not None:
                self._names[info["topic_id"]] = name
                for p, (leader, _epoch) in info["partitions"].items():
                    self._leaders[(info["topic_id"], p)] = leader

    # ------------------------------------------------------------------ acknowledgements
    def acknowledge(self, msg: ShareMessage, ack_type: int | str = ACCEPT) -> None:
        """Explicit mode: accept (1), release (2) or reject (3) one record of the last poll."""
        if not self.explicit:
            raise ValueError("acknowledge() needs share.acknowledgement.mode=explicit")
        ack_type = ACK_TYPES.get(ack_type, ack_type) if isinstance(ack_type, str) else ack_type
        tp = self._tp_of(msg)
        delivered = self._delivered.get(tp, {})
        if msg.offset not in delivered:
            raise ValueError(f"record {msg.topic}-{msg.partition}@{msg.offset} was not delivered by the last poll")
        delivered[msg.offset] = ack_type

    def _tp_of(self, msg: Message) -> tuple:
        if getattr(msg, "topic_id", None) is not None:
            return msg.topic_id, msg.partition
        for tp, name in self.assignment.items():
            if name == msg.topic and tp[1] == msg.partition:
                return tp
        for tp in self._delivered:
            if self._names.get(tp[0]) == msg.topic and tp[1] == msg.partition:
                return tp
        raise ValueError(f"no delivered records of {msg.topic}-{msg.partition}")

    def _settle_delivered(self) -> None:
        """The records of the last poll become pending acknowledgements (implicit: accepted)."""
        for tp, delivered in self._delivered.items():
            missing = [o for o, t in delivered.items() if t is None]
            if missing and self.explicit:
                raise ValueError(
                    f"All records must be acknowledged in explicit acknowledgement mode: "
                    f"{len(missing)} of {self._names.get(tp[0])}-{tp[1]} were not"
                )
            pending = self._pending.setdefault(tp, {})
            for o, t in delivered.items():
                pending[o] = ACCEPT if t is None else t
        self._delivered = {}

    def _take_acks(self, tps) -> dict[tuple, list]:
        out = {}
        for tp in tps:
            acks = self._pending.pop(tp, None)
            if acks:
                out[tp] = ack_batches(acks)
        return out

    # ------------------------------------------------------------------ polling
    def poll(self, timeout: float) -> list[ShareMessage]:
        """Records acquired within ``timeout`` seconds (possibly none); the previous poll's are
        acknowledged with this one's fetches."""
        self._settle_delivered()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if time.monotonic() >= self._next_heartbeat:
                    self._heartbeat()
                remaining = deadline - time.monotonic()
                wait_ms = int(max(0, min(self.max_wait_ms, remaining * 1000, self._until_heartbeat() * 1000)))
                msgs = self._fetch_once(wait_ms)
            except (OSError, WireError):
                self._lose_connections()
                msgs = []
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if msgs or time.monotonic() >= deadline:
                for m in msgs:
                    self._delivered.setdefault(self._tp_of(m), {})[m.offset] = None
                return msgs

    def _until_heartbeat(self) -> float:
        return max(0.0, self._next_heartbeat - time.monotonic())

    def _lose_connections(self) -> None:
        for node in list(self._conns):
            self._drop(node)
        self._sessions.clear()
        self._coordinator = None
        self._leaders.clear()

    def _by_leader(self) -> dict[int, list[tuple]]:
        wanted = set(self.assignment) | set(self._pending)
        if any(tp not in self._leaders for tp in wanted):
            self._refresh_metadata()
        out: dict[int, list[tuple]] = {}
        for tp in wanted:
            leader = self._leaders.get(tp, -1)
            if leader >= 0:
                out.setdefault(leader, []).append(tp)
        for node in self._sessions:
            out.setdefault(node, [])
        return out

    def _fetch_once(self, wait_ms: int) -> list[ShareMessage]:
        by_leader = self._by_leader()
        if not by_leader:
            time.sleep(wait_ms / 1000.0)
            return []
        many = len(by_leader) > 1
        out: list[ShareMessage] = []
        for leader, tps in by_leader.items():
            out += self._fetch_from(leader, tps, 0 if many else wait_ms)
        if many and not out:
            time.sleep(min(wait_ms, 100) / 1000.0)
        return out

    def _fetch_from(self, leader: int, tps: list[tuple], wait_ms: int) -> list[ShareMessage]:
        session = self._sessions.setdefault(leader, _Session())
        assigned = [tp for tp in tps if tp in self.assignment]
        acks = self._take_acks(tps)
        forgotten = [tp for tp in session.partitions if tp not in self.assignment]
        send = sorted(
            set(tp for tp in assigned if tp not in session.partitions or session.epoch == INITIAL_EPOCH) | set(acks),
            key=str,
        )
        if session.epoch == INITIAL_EPOCH and acks:
            # acknowledgements cannot open a session: send them with ShareAcknowledge later
            for tp, batches in acks.items():
                self._requeue(tp, batches)
            acks = {}
            send = [tp for tp in send if tp in self.assignment]
        if not send and not forgotten and session.epoch == INITIAL_EPOCH:
            return []

        def build(mod, v):
            rq = mod.request
            topics: dict = {}
            for tp in send:
                topics.setdefault(tp[0], []).append(
                    make(
                        rq.FetchPartition,
                        partition_index=tp[1],
                        acknowledgement_batches=tuple(
                            make(rq.AcknowledgementBatch, first_offset=f, last_offset=la, acknowledge_types=tuple(t))
                            for f, la, t in acks.get(tp, ())
                        ),
                    )
                )
            gone: dict = {}
            for tid, p in forgotten:
                gone.setdefault(tid, []).append(p)
            return make(
                rq.ShareFetchRequest,
                group_id=self.group_id,
                member_id=self.member_id,
                share_session_epoch=session.epoch,
                max_wait=wait_ms,
                min_bytes=self.fetch_min_bytes,
                max_bytes=self.fetch_max_bytes,
                max_records=self.max_records,
                batch_size=self.max_records,
                topics=tuple(make(rq.FetchTopic, topic_id=tid, partitions=tuple(ps)) for tid, ps in topics.items()),
                forgotten_topics_data=tuple(
                    make(rq.ForgottenTopic, topic_id=tid, partitions=tuple(ps)) for tid, ps in gone.items()
                ),
            )

        resp = self._conn(leader).request(ApiKeys.SHARE_FETCH, build)
        code = ErrorCode(int(resp.error_code))
        if code in _SESSION_LOST:
            self._sessions.pop(leader, None)
            self._record_ack_errors(acks, int(code))
            return []
        if code != ErrorCode.none:
            raise KafkaError(code, resp.error_message)
        session.next()
        session.partitions.update(send)
        session.partitions.difference_update(forgotten)
        self.acquisition_lock_timeout_ms = resp.acquisition_lock_timeout.total_seconds() * 1000
        out: list[ShareMessage] = []
        for t in resp.responses:
            for p in t.partitions:
                tp = (t.topic_id, int(p.partition_index))
                if tp in acks:
                    self._record_ack_errors({tp: acks[tp]}, int(p.acknowledge_error_code))
                pcode = int(p.error_code)
                if pcode in _STALE_LEADER:
                    self._leaders.pop(tp, None)
                    continue
                if pcode:
                    raise KafkaError(pcode, p.error_message)
                if p.acquired_records and tp in self.assignment:
                    out += self._decode(tp, bytes(p.records or b""), p.acquired_records)
        return out

    def _requeue(self, tp: tuple, batches: list) -> None:
        pending = self._pending.setdefault(tp, {})
        for first, last, types in batches:
            for i, off in enumerate(range(first, last + 1)):
                pending[off] = types[0] if len(types) == 1 else types[i]

    def _record_ack_errors(self, acks: dict, code: int) -> None:
        for tp in acks:
            self.ack_errors[(self._names.get(tp[0], ""), tp[1])] = code

    def _decode(self, tp: tuple, data: bytes, acquired) -> list[ShareMessage]:
        ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count)) for a in acquired]
        count = {}
        for first, last, dc in ranges:
            for off in range(first, last + 1):
                count[off] = dc
        topic = self.assignment[tp]
        first, last = min(count, default=0), max(count, default=-1)
        out: list[ShareMessage] = []
        for pos, h in rb.iter_headers(data):
            if h.base_offset > last:
                break
            if h.magic != rb.MAGIC_V2 or h.is_control or h.last_offset < first:
                continue
            ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
            for r in iter_records(data, pos, h):
                if r.offset > last:
                    break
                dc = count.pop(r.offset, None)
                if dc is not None:
                    out.append(
                        ShareMessage(
                            topic,
                            tp[1],
                            r.offset,
                            r.timestamp,
                            ts_type,
                            r.key,
                            r.value,
                            r.headers,
                            h.partition_leader_epoch,
                            dc,
                            tp[0],
                        )
                    )
        if count:  # acquired offsets without a record to hand out
            pending = self._pending.setdefault(tp, {})
            for off in count:
                pending[off] = GAP
        return out

    # ------------------------------------------------------------------ commit / close
    def commit_sync(self) -> dict[tuple[str, int], int]:
        """Send every acknowledgement now (ShareAcknowledge); {(topic, partition): error code}."""
        self._settle_delivered()
        return self._acknowledge_all(final=False)

    def _acknowledge_all(self, final: bool) -> dict[tuple[str, int], int]:
        by_leader: dict[int, list[tuple]] = {}
        for tp in self._pending:
            by_leader.setdefault(self._leaders.get(tp, -1), []).append(tp)
        if final:
            for node in self._sessions:
                by_leader.setdefault(node, [])
        results: dict[tuple[str, int], int] = {}
        for leader, tps in by_leader.items():
            session = self._sessions.get(leader)
            if leader < 0 or session is None or session.epoch == INITIAL_EPOCH:
                for tp in tps:  # no session there: the records go back when their locks expire
                    self._pending.pop(tp, None)
                    results[(self._names.get(tp[0], ""), tp[1])] = int(ErrorCode.share_session_not_found)
                continue
            acks = self._take_acks(tps)
            epoch = FINAL_EPOCH if final else session.epoch

            def build(mod, v, acks=acks, epoch=epoch):
                rq = mod.request
                topics: dict = {}
                for (tid, p), batches in acks.items():
                    topics.setdefault(tid, []).append(
                        make(
                            rq.AcknowledgePartition,
                            partition_index=p,
                            acknowledgement_batches=tuple(
                                make(
                                    rq.AcknowledgementBatch, first_offset=f, last_offset=la, acknowledge_types=tuple(t)
                                )
                                for f, la, t in batches
                            ),
                        )
                    )
                return make(
                    rq.ShareAcknowledgeRequest,
                    group_id=self.group_id,
                    member_id=self.member_id,
                    share_session_epoch=epoch,
                    topics=tuple(
                        make(rq.AcknowledgeTopic, topic_id=tid, partitions=tuple(ps)) for tid, ps in topics.items()
                    ),
                )

            resp = self._conn(leader).request(ApiKeys.SHARE_ACKNOWLEDGE, build)
            code = int(resp.error_code)
            if final or code:
                self._sessions.pop(leader, None)
            else:
                session.next()
            for tp in acks:
                results[(self._names.get(tp[0], ""), tp[1])] = code
            for t in resp.responses:
                for p in t.partitions:
                    results[(self._names.get(t.topic_id, ""), int(p.partition_index))] = int(p.error_code)
        self.ack_errors.update(results)
        return results

    def close(self) -> None:
        """Acknowledge what is pending (implicit: the last poll's records are accepted), end the
        share sessions and leave the group. On the same connections: a share session ends with
        the connection that opened it (Kafka's too), which would take the final acknowledgements
        with it; a poll cut short by a signal has its answer read first."""
        for node, conn in list(self._conns.items()):
            if not conn.settle():
                self._drop(node)
        try:
            if not self.explicit:
                self._settle_delivered()
            else:  # explicit: what was not acknowledged goes back at once
                for delivered in self._delivered.values():
                    for o, t in delivered.items():
                        delivered[o] = RELEASE if t is None else t
                self._settle_delivered()
            self._acknowledge_all(final=True)
            if self.member_epoch > 0 and self._coordinator is not None:
                self._heartbeat(leaving=True)
        except (OSError, WireError, KafkaError):
            pass
        finally:
            super().close()
