"""The consumer-group figures (issue 4): rebalance time of a 10-member group (classic and
KIP-848), synchronous offset-commit rate, and the group coordinator's load time and memory
for 10,000 groups. Each function drives one already-running broker and returns a dict of
measurements; nothing here asserts on timing. See bench/README.md, "Consumer groups".
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
import re
import statistics
import struct
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from figures import rss_mib
from kio.index import load_request_schema

import wire
from kesque.protocol.api_keys import ApiKeys
from kesque.protocol.primitives import read_uvarint as _uvarint
from kesque.protocol.primitives import skip_tagged_fields as _skip_tags

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32Q = struct.Struct(">iq")

# ================================================================== raw pipelined requests


def _schema_module(api_key: int, version: int):
    req = load_request_schema(api_key, version)
    return req, __import__(req.__module__, fromlist=["_"])


def pipelined(bootstrap: str, frames, window: int, on_response, sock=None) -> float:
    """Send ``frames`` (an iterable of encoded requests) keeping ``window`` in flight on one
    connection; ``on_response(i, frame)`` gets the i-th response (header included, size
    prefix stripped). Returns the seconds from the first send to the last answer."""
    own = sock is None
    sock = sock or wire.connect(bootstrap)
    reader = wire.FrameReader(sock, 1 << 20)
    it = iter(frames)
    sent = got = 0
    t0 = time.perf_counter()
    try:
        exhausted = False
        while True:
            while not exhausted and sent - got < window:
                f = next(it, None)
                if f is None:
                    exhausted = True
                    break
                sock.sendall(f)
                sent += 1
            if got == sent:
                break
            on_response(got, reader.frame())
            got += 1
    finally:
        if own:
            sock.close()
    return time.perf_counter() - t0


def _body(api_key: int, version: int, frame):
    flexible = wire.response_body_offset(version >= _FLEXIBLE[api_key], frame)
    return wire.decode_response(api_key, version, frame[flexible:])


_FLEXIBLE = {8: 8, 9: 6, 10: 3}
COMMIT_V, FETCH_V, FIND_V = 9, 9, 4


def offset_commit_request(
    group: str, topic: str, offsets: dict[int, int], correlation_id: int = 0, generation: int = -1, member_id: str = ""
) -> bytes:
    """OffsetCommit v9 (topic names). generation -1 and an empty member id: a standalone
    commit, as a consumer using assign() makes (no group membership)."""
    req, mod = _schema_module(ApiKeys.OFFSET_COMMIT, COMMIT_V)
    body = req(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=(
            mod.OffsetCommitRequestTopic(
                name=topic,
                partitions=tuple(
                    mod.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=""
                    )
                    for p, o in sorted(offsets.items())
                ),
            ),
        ),
    )
    return wire.encode_request(body, correlation_id)


def offset_fetch_request(groups: list[str], topic: str, partitions: list[int], correlation_id: int = 0) -> bytes:
    """OffsetFetch v9: many groups in one request (KIP-709), each asking for ``partitions``."""
    req, mod = _schema_module(ApiKeys.OFFSET_FETCH, FETCH_V)
    body = req(
        groups=tuple(
            mod.OffsetFetchRequestGroup(
                group_id=g,
                member_id=None,
                member_epoch=-1,
                topics=(mod.OffsetFetchRequestTopics(name=topic, partition_indexes=tuple(partitions)),),
            )
            for g in groups
        ),
        require_stable=False,
    )
    return wire.encode_request(body, correlation_id)


def find_coordinator_request(groups: list[str], correlation_id: int = 0) -> bytes:
    """FindCoordinator v4: many group keys in one request (KIP-699)."""
    req, _ = _schema_module(ApiKeys.FIND_COORDINATOR, FIND_V)
    return wire.encode_request(req(key_type=0, coordinator_keys=tuple(groups)), correlation_id)


def commit_errors(frame) -> list[int]:
    r = _body(ApiKeys.OFFSET_COMMIT, COMMIT_V, frame)
    return [int(p.error_code) for t in r.topics for p in t.partitions]


# ================================================================== 1. rebalance time


def _member(idx: int, conf: dict, topic: str, cooperative: bool, cmds, events) -> None:
    """One group member: a confluent-kafka Consumer that reports every assignment change
    (time.time(), the partitions it owns afterwards) on ``events``. Runs as a thread or as a
    process. The rebalance callbacks run inside poll(); a blocked poll() wakes up for them,
    so the timestamps are when the application learned of the change."""
    owned: set[int] = set()

    def report(kind: str, t: float | None = None) -> None:
        events.put((kind, idx, t if t is not None else time.time(), tuple(sorted(owned))))

    def on_assign(_c, parts):
        if not cooperative:
            owned.clear()
        owned.update(p.partition for p in parts)
        report("assign")

    def on_revoke(_c, parts):
        if cooperative:
            owned.difference_update(p.partition for p in parts)
        else:
            owned.clear()
        report("revoke")

    try:
        c = Consumer(conf)
        c.list_topics(topic, timeout=30)  # connected, metadata known: not part of the figure
        report("ready")
        if cmds.get() != "subscribe":
            c.close()
            return
        t = time.time()
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        report("subscribed", t)
        while True:
            c.poll(0.02)
            try:
                cmd = cmds.get_nowait()
            except queue.Empty:
                continue
            if cmd == "check":
                report("assignment:" + ",".join(str(p.partition) for p in c.assignment()))
                continue
            report("leaving" if cmd == "leave" else "stopping")
            c.close()
            report("closed")
            return
    except Exception as e:  # reported, the controller gives up on this run
        events.put(("error", idx, time.time(), (repr(e),)))


class _Members:
    """Consumers as threads of this process or as spawned processes."""

    def __init__(self, conf: dict, topic: str, cooperative: bool, mode: str):
        self.conf, self.topic, self.cooperative, self.mode = conf, topic, cooperative, mode
        if mode == "process":
            self.ctx = mp.get_context("spawn")
            self.events = self.ctx.Queue()
        else:
            self.events = queue.Queue()
        self.cmds: dict[int, object] = {}
        self.workers: dict[int, object] = {}

    def start(self, idx: int) -> None:
        if self.mode == "process":
            q = self.ctx.Queue()
            w = self.ctx.Process(
                target=_member, args=(idx, self.conf, self.topic, self.cooperative, q, self.events), daemon=True
            )
        else:
            q = queue.Queue()
            w = threading.Thread(
                target=_member,
                args=(idx, self.conf, self.topic, self.cooperative, q, self.events),
                daemon=True,
                name=f"member-{idx}",
            )
        self.cmds[idx], self.workers[idx] = q, w
        w.start()

    def send(self, idx: int, cmd: str) -> None:
        self.cmds[idx].put(cmd)

    def close(self) -> None:
        for idx, w in self.workers.items():
            if w.is_alive():
                self.cmds[idx].put("stop")
        for w in self.workers.values():
            w.join(30)
            if self.mode == "process" and w.is_alive():
                w.kill()


class _Tracker:
    """Replays member events; finds when the active members have converged: every one owns
    at least one partition, and together they own each partition exactly once."""

    def __init__(self, members: _Members, partitions: int):
        self.m = members
        self.partitions = partitions
        self.owned: dict[int, tuple] = {}
        self.log: list[tuple] = []  # every event, in arrival order

    def next_event(self, timeout: float):
        kind, idx, t, data = self.m.events.get(timeout=timeout)
        self.log.append((kind, idx, t, data))
        if kind in ("assign", "revoke"):
            self.owned[idx] = data
        elif kind == "error":
            raise RuntimeError(f"member {idx}: {data[0]}")
        return kind, idx, t, data

    def wait_for(self, kind: str, indexes, timeout: float = 60.0) -> dict[int, float]:
        want = set(indexes)
        got = {idx: t for k, idx, t, _ in self.log if k == kind and idx in want}  # already seen
        deadline = time.monotonic() + timeout
        while want - set(got):
            k, idx, t, _ = self.next_event(max(0.01, deadline - time.monotonic()))
            if k == kind and idx in want:
                got[idx] = t
        return got

    def converged(self, active) -> bool:
        seen: list[int] = []
        for idx in active:
            o = self.owned.get(idx, ())
            if not o:
                return False
            seen.extend(o)
        return len(seen) == self.partitions and set(seen) == set(range(self.partitions))

    def wait_converged(self, active, settle: float, timeout: float) -> float | None:
        """Time (time.time()) of the event after which the active members were converged and
        stayed so for ``settle`` seconds without any assignment change; None on timeout."""
        active = set(active)
        deadline = time.monotonic() + timeout
        t_ok = None
        if self.converged(active):
            t_ok = self.log[-1][2] if self.log else time.time()
        quiet_until = time.monotonic() + settle
        while time.monotonic() < deadline:
            wait = (quiet_until - time.monotonic()) if t_ok is not None else (deadline - time.monotonic())
            if t_ok is not None and wait <= 0:
                return t_ok
            try:
                kind, idx, t, _ = self.next_event(max(0.01, wait))
            except queue.Empty:
                continue
            if kind in ("assign", "revoke") and idx in active:
                t_ok = t if self.converged(active) else None
                quiet_until = time.monotonic() + settle
        return None

    def first_after(self, kind: str, t0: float, indexes) -> dict[int, float]:
        out: dict[int, float] = {}
        for k, idx, t, _ in self.log:
            if k == kind and idx in indexes and t >= t0 and idx not in out:
                out[idx] = t
        return out


_LOG_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] ")


def _log_time(line: str) -> float | None:
    m = _LOG_TS.match(line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000.0


def broker_group_lines(log_path: str, offset: int, group: str) -> list[tuple[float, str]]:
    """The broker's log lines about ``group`` (rebalance preparation, stabilisation, member
    removal) written after byte ``offset``, with their times."""
    out = []
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            for raw in f:
                line = raw.decode("utf-8", "replace").rstrip()
                if f" {group} " in line or f" {group}:" in line:
                    t = _log_time(line)
                    if t is not None:
                        out.append((t, line.split("] ", 1)[-1]))
    except OSError:
        pass
    return out


def log_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


_PREPARE = re.compile(r"Preparing to rebalance group \S+ in state \S+ with old generation (\d+) \(reason: (.*)\)")
_STABLE = re.compile(r"Stabilized group \S+ generation (\d+) with (\d+) members")


def classic_breakdown(lines: list[tuple[float, str]], t_from: float, t_to: float) -> dict:
    """Where a classic rebalance spent its time, from the coordinator's log: each join phase
    runs from "Preparing to rebalance" to "Stabilized". The phase opened on an Empty group
    (old generation 0) waits group.initial.rebalance.delay.ms (re-armed while members keep
    arriving); any other phase waits for the existing members to rejoin, which they do when
    their next heartbeat answers REBALANCE_IN_PROGRESS (heartbeat.interval.ms). The rest is
    the coordinator's reaction and the JoinGroup/SyncGroup round trips."""
    delay = rejoin = 0.0
    generations = 0
    opened = None
    initial = False
    for t, line in lines:
        if not t_from - 0.05 <= t <= t_to + 0.05:
            continue
        m = _PREPARE.search(line)
        if m and opened is None:
            opened, initial = t, m.group(1) == "0"
            continue
        m = _STABLE.search(line)
        if m and opened is not None:
            if initial:
                delay += t - opened
            else:
                rejoin += t - opened
            generations += 1
            opened = None
    total = t_to - t_from
    return {
        "initial_delay_wait": delay,
        "rejoin_wait": rejoin,
        "other": max(total - delay - rejoin, 0.0),
        "generations": generations,
    }


def rebalance_once(
    bootstrap: str,
    topic: str,
    partitions: int,
    group: str,
    members: int = 10,
    protocol: str = "classic",
    client_conf: dict | None = None,
    mode: str = "thread",
    settle: float = 1.5,
    timeout: float = 60.0,
    log_path: str | None = None,
    phases: tuple = ("join", "leave", "join-one"),
    trigger_phase: float = 0.5,
    period: float = 3.0,
) -> dict:
    """One group lifecycle, up to three rebalances:

    * ``join``: ``members`` consumers subscribe at (nearly) the same moment; from the last
      subscribe() call to convergence;
    * ``leave``: member 0 close()s; from that call to the remaining members' convergence;
    * ``join-one``: a new consumer subscribes to the stable group; from its subscribe() to
      convergence of all ``members``.

    Convergence: every active member owns >= 1 partition, the union is every partition
    exactly once, and nothing changes for ``settle`` s afterwards (the figure is the time of
    the last change, not the end of the quiet period). ``leave`` and ``join-one`` are
    triggered at ``trigger_phase`` (0..1) of a heartbeat ``period`` after the previous
    convergence (plus whole periods, past the quiet period): the members' heartbeat timers
    restart with their new assignment, so the phase decides how long they take to hear of
    the change, and the caller spreads it evenly over the passes instead of always hitting
    the same point."""
    cooperative = protocol == "consumer"
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "log_level": 3,
    }
    if cooperative:
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "range"
    conf.update(client_conf or {})
    ms = _Members(conf, topic, cooperative, mode)
    tr = _Tracker(ms, partitions)
    out: dict = {
        "protocol": protocol,
        "mode": mode,
        "members": members,
        "group": group,
        "trigger_phase": trigger_phase,
        "period": period,
        "phases": {},
    }
    log_off = log_size(log_path) if log_path else 0

    def phase(name: str, trigger: float, active: list[int], existing: list[int]) -> bool:
        t_ok = tr.wait_converged(active, settle, timeout)
        revoked = tr.first_after("revoke", trigger, set(existing))
        learned = max(revoked.values()) - trigger if existing and len(revoked) == len(existing) else None
        res = {
            "phase": name,
            "seconds": (t_ok - trigger) if t_ok else None,
            "trigger": trigger,
            "converged_at": t_ok,
            # members giving up partitions: in the classic protocol a member that owns
            # partitions learns of a rebalance from a heartbeat and revokes them all
            "revokes": sum(
                1
                for k, i, t, _ in tr.log
                if k == "revoke" and i in active and t >= trigger and (t_ok is None or t <= t_ok)
            ),
            # classic (eager): every existing member revokes everything when it learns of
            # the rebalance, so this is when the last one learned of it
            "last_existing_revoke_seconds": learned,
            "distribution": sorted(len(tr.owned.get(i, ())) for i in active),
        }
        if t_ok is None:
            res["owned"] = {i: tr.owned.get(i, ()) for i in active}
        out["phases"][name] = res
        return t_ok is not None

    def sleep_to_phase(t_conv: float) -> None:
        target = t_conv + trigger_phase * period
        now = time.time()
        if target < now:
            target += math.ceil((now - target) / period) * period
        time.sleep(target - now)

    try:
        idxs = list(range(members))
        for i in idxs:
            ms.start(i)
        tr.wait_for("ready", idxs, timeout=120)
        for i in idxs:
            ms.send(i, "subscribe")
        subs = tr.wait_for("subscribed", idxs)
        ok = phase("join", max(subs.values()), idxs, [])
        active = idxs
        if ok and "leave" in phases:
            sleep_to_phase(out["phases"]["join"]["converged_at"])
            ms.send(0, "leave")
            t_leave = tr.wait_for("leaving", [0])[0]
            tr.owned.pop(0, None)
            active = idxs[1:]
            ok = phase("leave", t_leave, active, active)
            tr.wait_for("closed", [0], timeout=30)
        if ok and "join-one" in phases:
            new = members
            ms.start(new)
            tr.wait_for("ready", [new], timeout=60)
            sleep_to_phase(out["phases"]["leave" if "leave" in out["phases"] else "join"]["converged_at"])
            existing = list(active)
            ms.send(new, "subscribe")
            t_new = tr.wait_for("subscribed", [new])[new]
            active = existing + [new]
            phase("join-one", t_new, active, existing)
        # cross-check the tracked ownership against the clients' own assignment()
        for i in active:
            ms.send(i, "check")
        checks = {}
        deadline = time.monotonic() + 10
        while len(checks) < len(active) and time.monotonic() < deadline:
            try:
                k, idx, _, _ = tr.next_event(0.5)
            except queue.Empty:
                continue
            if k.startswith("assignment:"):
                checks[idx] = tuple(sorted(int(x) for x in k.split(":", 1)[1].split(",") if x))
        out["assignment_mismatch"] = [i for i in active if checks.get(i) != tr.owned.get(i, ())]
    finally:
        ms.close()
        out["events"] = [(k, i, round(t, 4), d) for k, i, t, d in tr.log]
        if log_path:
            lines = broker_group_lines(log_path, log_off, group)
            out["broker_log"] = [(round(t, 3), line) for t, line in lines]
            if not cooperative:
                for res in out["phases"].values():
                    if res["converged_at"]:
                        res["breakdown"] = classic_breakdown(lines, res["trigger"], res["converged_at"])
                        res["breakdown"]["heartbeat_driven"] = res["revokes"] > 0
    return out


def rebalance(
    bootstrap: str,
    topic: str,
    partitions: int,
    passes: int,
    protocol: str,
    label: str,
    client_conf: dict | None = None,
    mode: str = "thread",
    settle: float = 1.5,
    timeout: float = 60.0,
    log_path: str | None = None,
    members: int = 10,
    phases: tuple = ("join", "leave", "join-one"),
    heartbeat_period: float = 3.0,
) -> dict:
    """``passes`` independent groups (fresh group ids). Pass k triggers its leave/join-one at
    (k + 0.5)/passes of a heartbeat period after the previous convergence, so the passes
    sample the heartbeat phase evenly. Per phase: the median, the range, and (classic) where
    the time went."""
    runs = []
    for n in range(passes):
        runs.append(
            rebalance_once(
                bootstrap,
                topic,
                partitions,
                f"bench-{label}-{n}-{os.getpid()}",
                members,
                protocol,
                client_conf,
                mode,
                settle,
                timeout,
                log_path,
                phases,
                trigger_phase=(n + 0.5) / passes,
                period=heartbeat_period,
            )
        )
    out = {
        "label": label,
        "protocol": protocol,
        "mode": mode,
        "passes": passes,
        "runs": runs,
        "client_conf": client_conf or {},
    }
    for ph in phases:
        res = [r["phases"].get(ph) for r in runs]
        vals = [x["seconds"] if x else None for x in res]
        ok = [v for v in vals if v is not None]
        learned = [x["last_existing_revoke_seconds"] for x in res if x and x["last_existing_revoke_seconds"]]
        bds = [x["breakdown"] for x in res if x and "breakdown" in x]
        summary = {
            "values": vals,
            "failed": len(vals) - len(ok),
            "median": statistics.median(ok) if ok else float("nan"),
            "min": min(ok) if ok else float("nan"),
            "max": max(ok) if ok else float("nan"),
            "learned": learned,
            "distributions": [x["distribution"] for x in res if x],
        }
        if ok:  # the run whose figure is the median: its breakdown explains the median
            mid = sorted((v, k) for k, v in enumerate(vals) if v is not None)[(len(ok) - 1) // 2][1]
            if res[mid] and "breakdown" in res[mid]:
                summary["median_breakdown"] = res[mid]["breakdown"]
            slow = max((v, k) for k, v in enumerate(vals) if v is not None)[1]
            if res[slow] and "breakdown" in res[slow]:
                summary["slowest_breakdown"] = res[slow]["breakdown"]
        if bds:
            summary["breakdown_max"] = {k: max(b[k] for b in bds) for k in bds[0]}
        out[ph] = summary
    out["assignment_mismatch"] = [r.get("assignment_mismatch") for r in runs if r.get("assignment_mismatch")]
    return out


# ================================================================== 2. offset commit rate


def produce_sync(bootstrap: str, topic: str, records: int, value_size: int = 100) -> dict:
    """One 100-byte record per Produce request, each waited for (produce() then flush()):
    one synchronous round trip per record, like a synchronous commit."""
    errors: list[str] = []

    def on_delivery(err, _msg):
        if err is not None and len(errors) < 10:
            errors.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 0,
            "enable.idempotence": False,
            "on_delivery": on_delivery,
            "log_level": 3,
        }
    )
    p.list_topics(topic, timeout=30)
    value = os.urandom(value_size)
    for _ in range(20):  # connection and first-request costs stay out of the clock
        p.produce(topic, value, partition=0)
        p.flush(30)
    produce, flush = p.produce, p.flush
    left = 0
    t0 = time.perf_counter()
    for _ in range(records):
        produce(topic, value, partition=0)
        left += flush(30)
    elapsed = time.perf_counter() - t0
    return {"records": records, "seconds": elapsed, "rate": records / elapsed, "undelivered": left, "errors": errors}


def commit_confluent(
    bootstrap: str, topic: str, commits: int, group: str, subscribe: bool = False, partitions: int = 1
) -> dict:
    """``commits`` synchronous commits of explicit offsets (commit(offsets=..., asynchronous=
    False)), one partition each, the offset growing by one every time. With ``subscribe``
    the consumer is a group member and every commit carries its generation and member id;
    otherwise it assign()s the partition and commits standalone (generation -1)."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "log_level": 3,
    }
    c = Consumer(conf)
    try:
        c.list_topics(topic, timeout=30)
        if subscribe:
            got = threading.Event()
            c.subscribe([topic], on_assign=lambda _c, parts: got.set() if parts else None)
            deadline = time.monotonic() + 60
            while not got.is_set() and time.monotonic() < deadline:
                c.poll(0.1)
            if not got.is_set():
                raise RuntimeError("subscribed consumer got no assignment within 60 s")
        else:
            c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        commit = c.commit
        for i in range(20):  # coordinator lookup and connection before the clock
            commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        errors = 0
        t0 = time.perf_counter()
        for i in range(commits):
            res = commit(offsets=[TopicPartition(topic, 0, 100 + i)], asynchronous=False)
            if res and res[0].error is not None:
                errors += 1
        elapsed = time.perf_counter() - t0
        committed = c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        c.close()
    return {
        "commits": commits,
        "seconds": elapsed,
        "rate": commits / elapsed,
        "errors": errors,
        "committed": committed,
        "expected_committed": 100 + commits - 1,
        "subscribe": subscribe,
    }


def commit_raw(bootstrap: str, topic: str, requests: int, window: int, group: str) -> dict:
    """The same standalone OffsetCommit (one partition) ``requests`` times, ``window`` in
    flight on one connection: the broker's own commit capacity (window 64) or its round
    trip without a client library (window 1)."""
    frame = offset_commit_request(group, topic, {0: 12345})
    first: list[int] = []
    res = wire.pipelined_same_request(
        bootstrap, frame, requests, window, check_first=lambda f: first.extend(commit_errors(f))
    )
    res["first_response_errors"] = first
    return res


def produce_raw_sync(bootstrap: str, topic: str, requests: int, window: int = 1) -> dict:
    """The bench's pre-encoded 1-record (100 B) ProduceRequest, ``window`` in flight: the
    produce counterpart of commit_raw."""
    import figures

    frame = figures.small_frame(topic)
    first: list[int] = []
    res = wire.pipelined_same_request(
        bootstrap, frame, requests, window, check_first=lambda f: first.extend(wire.produce_response_errors(f))
    )
    res["first_response_errors"] = first
    return res


# ================================================================== 3. coordinator load time and memory


def group_name(i: int) -> str:
    return f"bench-group-{i:05d}"


def expected_offset(i: int, p: int) -> int:
    return i * 10 + p + 1


def create_groups(bootstrap: str, topic: str, groups: int, partitions: int, window: int = 64) -> dict:
    """``groups`` standalone groups (generation -1, empty member id), each committing
    ``partitions`` offsets in one OffsetCommit, pipelined on one connection. Like a client,
    it asks FindCoordinator first (the first ask creates ``__consumer_offsets``)."""
    names = [group_name(i) for i in range(groups)]
    deadline = time.monotonic() + 60
    while True:
        missing: list[tuple[str, int]] = []
        batches = [names[k : k + 500] for k in range(0, groups, 500)]
        pipelined(
            bootstrap,
            (find_coordinator_request(b, j) for j, b in enumerate(batches)),
            8,
            lambda j, f: missing.extend((k, e) for k, n, e in parse_find_coordinator(f) if e or n < 0),
        )
        if not missing:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"FindCoordinator still failing for {len(missing)} groups: {missing[:3]}")
        time.sleep(0.2)
    frames = (
        offset_commit_request(
            group_name(i), topic, {p: expected_offset(i, p) for p in range(partitions)}, correlation_id=i
        )
        for i in range(groups)
    )
    bad: list[tuple[int, list[int]]] = []

    def on_response(i, frame):
        errs = commit_errors(frame)
        if any(errs) and len(bad) < 10:
            bad.append((i, errs))

    secs = pipelined(bootstrap, frames, window, on_response)
    return {"groups": groups, "partitions_each": partitions, "seconds": secs, "rate": groups / secs, "errors": bad}


def _compact_str(frame, p: int) -> tuple[str | None, int]:
    n, p = _uvarint(frame, p)
    if n == 0:
        return None, p
    return bytes(frame[p : p + n - 1]).decode(), p + n - 1


def parse_find_coordinator(frame) -> list[tuple[str, int, int]]:
    """(key, node id, error code) of each coordinator in a FindCoordinator v4+ response
    frame; a hand-written reader, as kio's full decode would dominate the polling."""
    p = wire.response_body_offset(True, frame) + 4  # throttle
    n, p = _uvarint(frame, p)
    out = []
    for _ in range(n - 1):
        key, p = _compact_str(frame, p)
        node = _I32.unpack_from(frame, p)[0]
        _host, p = _compact_str(frame, p + 4)
        err = _I16.unpack_from(frame, p + 4)[0]
        _msg, p = _compact_str(frame, p + 6)
        p = _skip_tags(frame, p)
        out.append((key, node, err))
    return out


def parse_offset_fetch(frame) -> list[tuple[str, int, dict]]:
    """(group id, group error, {(topic, partition): (offset, error)}) of each group in an
    OffsetFetch v8/v9 response frame (hand-written reader, see parse_find_coordinator)."""
    p = wire.response_body_offset(True, frame) + 4  # throttle
    ng, p = _uvarint(frame, p)
    out = []
    for _ in range(ng - 1):
        gid, p = _compact_str(frame, p)
        nt, p = _uvarint(frame, p)
        offs = {}
        for _ in range(nt - 1):
            name, p = _compact_str(frame, p)
            npart, p = _uvarint(frame, p)
            for _ in range(npart - 1):
                idx, off = _I32Q.unpack_from(frame, p)
                _meta, p = _compact_str(frame, p + 16)  # index, offset, leader epoch
                err = _I16.unpack_from(frame, p)[0]
                p = _skip_tags(frame, p + 2)
                offs[(name, idx)] = (off, err)
            p = _skip_tags(frame, p)
        gerr = _I16.unpack_from(frame, p)[0]
        p = _skip_tags(frame, p + 2)
        out.append((gid, gerr, offs))
    return out


def _fetch_ok(gerr: int, offs: dict, topic: str, i: int, partitions: int) -> bool:
    if gerr:
        return False
    for p in range(partitions):
        off, err = offs.get((topic, p), (None, -1))
        if err or off != expected_offset(i, p):
            return False
    return True


def poll_groups(
    bootstrap: str,
    topic: str,
    groups: int,
    partitions: int,
    deadline_s: float = 300.0,
    find_batch: int = 500,
    fetch_batch: int = 100,
    window: int = 8,
) -> dict:
    """Poll until every group answers OffsetFetch with its committed offsets: rounds of
    FindCoordinator (batched keys, v4) for the pending groups, then OffsetFetch (v9, batched
    groups) to the coordinator for those it names; groups that answer correctly leave the
    pending set. Returns when the last group answered (perf_counter) and the error codes
    seen on the way (14 = COORDINATOR_LOAD_IN_PROGRESS, 15 = COORDINATOR_NOT_AVAILABLE,
    16 = NOT_COORDINATOR)."""
    pending = list(range(groups))
    seen_errors: dict[int, int] = {}
    rounds = 0
    connect_failures = 0
    deadline = time.perf_counter() + deadline_s
    sock = None
    while pending and time.perf_counter() < deadline:
        rounds += 1
        try:
            if sock is None:
                sock = wire.connect(bootstrap)
            located: list[int] = []
            batches = [pending[k : k + find_batch] for k in range(0, len(pending), find_batch)]

            def on_find(j, frame):
                for gi, (_key, node, code) in zip(batches[j], parse_find_coordinator(frame)):
                    if code or node < 0:
                        seen_errors[code] = seen_errors.get(code, 0) + 1
                    else:
                        located.append(gi)  # single node: every coordinator is this broker

            pipelined(
                bootstrap,
                (find_coordinator_request([group_name(g) for g in b], j) for j, b in enumerate(batches)),
                window,
                on_find,
                sock=sock,
            )
            fbatches = [located[k : k + fetch_batch] for k in range(0, len(located), fetch_batch)]
            done: set[int] = set()
            parts = list(range(partitions))

            def on_fetch(j, frame):
                for gi, (_gid, gerr, offs) in zip(fbatches[j], parse_offset_fetch(frame)):
                    if _fetch_ok(gerr, offs, topic, gi, partitions):
                        done.add(gi)
                    else:
                        code = gerr or next((e for _o, e in offs.values() if e), -1)
                        seen_errors[code] = seen_errors.get(code, 0) + 1

            pipelined(
                bootstrap,
                (offset_fetch_request([group_name(g) for g in b], topic, parts, j) for j, b in enumerate(fbatches)),
                window,
                on_fetch,
                sock=sock,
            )
            pending = [g for g in pending if g not in done]
        except OSError:
            connect_failures += 1
            if sock is not None:
                sock.close()
            sock = None
            time.sleep(0.05)
            continue
        if pending:
            time.sleep(0.02)
    if sock is not None:
        sock.close()
    return {
        "done_at": time.perf_counter(),
        "pending": len(pending),
        "rounds": rounds,
        "errors_seen": seen_errors,
        "connect_failures": connect_failures,
    }


_LOADED = re.compile(
    r"Loaded group coordinator state of __consumer_offsets-(\d+): (\d+) records, (\d+) groups "
    r"in (\d+) ms"
)
_STARTED = re.compile(r"kesque node \d+ started in (\d+) ms")


def load_log_summary(log_path: str, offset: int) -> dict:
    """Sum of the broker's per-partition "Loaded group coordinator state" lines after byte
    ``offset`` (one broker start)."""
    ms = records = groups = parts = 0
    started_ms = None
    first = last = None
    with open(log_path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode("utf-8", "replace")
            m = _LOADED.search(line)
            if m:
                parts += 1
                records += int(m.group(2))
                groups += int(m.group(3))
                ms += int(m.group(4))
                t = _log_time(line)
                first = t if first is None else first
                last = t
                continue
            m = _STARTED.search(line)
            if m:
                started_ms = int(m.group(1))
    return {
        "partitions": parts,
        "records": records,
        "groups": groups,
        "sum_ms": ms,
        "started_ms": started_ms,
        "first_to_last_line_seconds": (last - first) if first is not None else None,
    }


def restart_and_load(broker, topic: str, groups: int, partitions: int, how: str) -> dict:
    """Stop the broker (``how`` = "clean": SIGTERM, flushed and checkpointed; "kill":
    SIGKILL), start it again on the same port and data, and time from the start of the new
    process until every group answers OffsetFetch with its offsets."""
    if how == "kill":
        broker.kill()
    else:
        broker.stop(60)
    offset = log_size(broker.log_path)
    t0 = time.perf_counter()
    broker.start(120)  # python -m kesque serve ... until it listens (readiness pipe)
    ready = time.perf_counter() - t0
    res = poll_groups(broker.bootstrap_servers, topic, groups, partitions)
    res["seconds"] = res.pop("done_at") - t0
    res["ready_seconds"] = ready
    res["pid"] = broker.process.pid
    res.update(rss_mib(broker.process.pid))
    res["log"] = load_log_summary(broker.log_path, offset)
    res["how"] = how
    return res


# ================================================================== reporting helpers (used by run.py)

CLASSIC_CLIENT_TIMERS = {"heartbeat.interval.ms": 3000, "session.timeout.ms": 45000, "max.poll.interval.ms": 300000}
# librdkafka sends at most one JoinGroup per second (rkcg_join_intvl, not configurable) and
# its main loop wakes up at least once a second, so a member told REBALANCE_IN_PROGRESS by
# SyncGroup (it had no assignment yet, so there is nothing to revoke) rejoins 1-2 s later.
LIBRDKAFKA_REJOIN_S = 2.0


def classic_timer_bound(phase: str, initial_delay_ms: int, heartbeat_ms: int) -> float:
    """Seconds of client and broker timers a classic rebalance may wait on. Joining an Empty
    group waits the initial delay, re-armed once when members kept arriving during it (all
    our members subscribe within milliseconds: 2 x delay); members that missed that
    generation start another one, which the first ones hear of from SyncGroup (then
    librdkafka's rejoin interval applies) or, once they own partitions, from a heartbeat.
    Leave and join of a stable group wait for the next heartbeat only."""
    hb = heartbeat_ms / 1000.0
    if phase == "join":
        return 2 * initial_delay_ms / 1000.0 + max(hb, LIBRDKAFKA_REJOIN_S)
    return hb


def dominating_timer(breakdown: dict | None, initial_delay_ms: int, heartbeat_ms: int, name_only: bool = False) -> str:
    if not breakdown:
        return "no coordinator log lines for this rebalance"
    rejoin = (
        f"heartbeat.interval.ms={heartbeat_ms} (client: members learn of the rebalance from a heartbeat "
        f"answering REBALANCE_IN_PROGRESS)"
        if breakdown.get("heartbeat_driven")
        else "librdkafka's rejoin interval (client: after SyncGroup answered REBALANCE_IN_PROGRESS, "
        "librdkafka sends its next JoinGroup 1-2 s later, rkcg_join_intvl 1 s + main-loop tick)"
    )
    parts = {
        f"group.initial.rebalance.delay.ms={initial_delay_ms} (broker)": breakdown["initial_delay_wait"],
        rejoin: breakdown["rejoin_wait"],
        "none: coordinator and JoinGroup/SyncGroup round trips": breakdown["other"],
    }
    name, secs = max(parts.items(), key=lambda kv: kv[1])
    if name_only:
        return name
    return (
        f"dominating timer: {name} {secs:.2f} s; initial-delay wait {breakdown['initial_delay_wait']:.2f} s, "
        f"rejoin wait {breakdown['rejoin_wait']:.2f} s, rest {breakdown['other'] * 1000:.0f} ms, "
        f"{breakdown['generations']} generation(s)"
    )


def values_text(summary: dict) -> str:
    vals = ", ".join("fail" if v is None else f"{v:.2f}" for v in summary["values"])
    return f"median of [{vals}] s"
