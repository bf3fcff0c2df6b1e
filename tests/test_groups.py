"""Consumer groups against a real broker process and real clients (issue 4).

* classic protocol with confluent-kafka (eager ``range`` and ``cooperative-sticky``): three
  members over a 6-partition topic that join, leave (close) and crash (a member in a
  subprocess, SIGKILLed: the group rebalances once ``session.timeout.ms`` has passed);
* the KIP-848 protocol (``group.protocol=consumer``) through the same scenario, with member
  epochs and the uniform assignor's balance read back with ConsumerGroupDescribe;
* static membership (KIP-345): a restarted static member takes its place back without a
  rebalance; a second live member with the same ``group.instance.id`` fences the first;
* kafka-python and aiokafka groups: join, consume, commit, leave, rejoin from the committed
  offsets, two members sharing the partitions;
* committed offsets, classic members (Stable, still heartbeating) and KIP-848 epochs survive
  a broker restart (clean and SIGKILL).

How the scenario tests check the group. Every member runs a commit-after-process loop and
journals, with CLOCK_MONOTONIC timestamps (shared by all processes of the machine): the
partitions its ``on_assign`` receives (stamped when the callback starts), those its
``on_revoke``/``on_lost`` gives up (stamped when the callback has returned) and every
record it processed. From the journal a partition's ownership is a set of intervals, one per
(member, assignment); intervals of one partition must never overlap, every processed record
must fall inside an interval of the member that processed it, and every record of the log
must have been processed. At each step the group must settle: Stable, the expected members,
their assignments an exact partition of the topic, committed offsets at the log end.

A member in a subprocess is this file run as a script (see the bottom): it prints its
journal as JSON lines on stdout.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict

import pytest

from kesque.protocol.api_keys import ApiKeys

# a member subprocess (this file run as a script) needs confluent-kafka only
if __name__ != "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    from conftest import running_broker
    from kesque.testing.broker import Broker
    from wire import Msg, WireClient

SESSION_MS = 2000  # classic members' session.timeout.ms in the scenario tests
HEARTBEAT_MS = 200
CONSUMER_SESSION_MS = 3000  # KIP-848: the broker's group.consumer.session.timeout.ms
CONSUMER_HEARTBEAT_MS = 300
PARTITIONS = 6
BURST_PER_PARTITION = 40
PROCESS_DELAY_S = 0.002  # per record: rebalances land while members are busy

BROKER_CONFIG = {
    "group.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": CONSUMER_SESSION_MS,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.heartbeat.interval.ms": CONSUMER_HEARTBEAT_MS,
    "group.consumer.min.heartbeat.interval.ms": 100,
}


# ============================================================================ the member loop
def member_loop(conf: dict, topic: str, emit, should_stop, process_delay: float = PROCESS_DELAY_S) -> None:
    """A commit-after-process consumer: consume a batch, process it (journal it), commit the
    next offsets synchronously. Failed commits (rebalance in progress, stale generation) are
    retried while the partition is still owned; on revoke the processed offsets of the
    revoked partitions are committed first (the usual pattern)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    fatal_errors = []

    def on_error(err):  # librdkafka raises fatal errors (FENCED_INSTANCE_ID) through error_cb
        emit("error", code=err.code(), error=str(err), fatal=err.fatal())
        if err.fatal():
            fatal_errors.append(err)

    c = Consumer(dict(conf, error_cb=on_error))
    pending: dict[int, int] = {}  # partition -> next offset, processed but not committed

    def generation():
        try:
            md = c.consumer_group_metadata()
        except KafkaException:
            return None
        if isinstance(md, bytes) and md.startswith(b"CGMDv2:"):
            return struct.unpack_from("<i", md, 7)[0]  # librdkafka's serialized group metadata
        return None

    def commit(parts) -> None:
        offs = [TopicPartition(topic, p, pending[p]) for p in parts if p in pending]
        if not offs:
            return
        try:
            done = c.commit(offsets=offs, asynchronous=False)
        except KafkaException as e:
            emit("commit_error", code=e.args[0].code(), error=str(e.args[0]))
            return
        for tp in done:
            if tp.error:
                emit("commit_error", code=tp.error.code(), error=str(tp.error), partition=tp.partition)
        done = [tp for tp in done if not tp.error]
        emit("commit", offsets=[[tp.partition, tp.offset] for tp in done])
        for tp in done:
            if pending.get(tp.partition) == tp.offset:
                del pending[tp.partition]

    def on_assign(_c, parts):
        emit("assign", partitions=sorted(p.partition for p in parts), generation=generation())

    def on_revoke(_c, parts):
        ps = sorted(p.partition for p in parts)
        commit(ps)
        for p in ps:
            pending.pop(p, None)
        emit("revoke", partitions=ps)

    def on_lost(_c, parts):
        ps = sorted(p.partition for p in parts)
        for p in ps:
            pending.pop(p, None)
        emit("lost", partitions=ps)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        while not should_stop():
            msgs = c.consume(200, 0.1)
            got = []
            fatal = False
            for m in msgs:
                err = m.error()
                if err:
                    is_fatal = err.fatal() or err.code() == KafkaError._FATAL
                    emit("error", code=err.code(), error=str(err), fatal=is_fatal)
                    fatal = fatal or is_fatal
                    continue
                got.append((m.partition(), m.offset()))
            if fatal or fatal_errors:
                break  # the consumer is unusable (fenced): close it
            if got:
                time.sleep(process_delay * len(got))
                emit("processed", records=got)
                for p, o in got:
                    pending[p] = max(pending.get(p, 0), o + 1)
            if pending:
                owned = {tp.partition for tp in c.assignment()}
                commit([p for p in pending if p in owned])
    finally:
        c.close()  # revokes (on_revoke) and leaves the group
        emit("closed")


# ============================================================================ journal and members
class Journal:
    def __init__(self):
        self.lock = threading.Lock()
        self.events: list[dict] = []

    def add(self, member: str, kind: str, t: float | None = None, **fields) -> None:
        ev = dict(fields, member=member, kind=kind, t=time.monotonic() if t is None else t)
        with self.lock:
            self.events.append(ev)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return sorted(self.events, key=lambda e: e["t"])

    def of(self, member: str, kind: str, since: float = 0.0) -> list[dict]:
        return [e for e in self.snapshot() if e["member"] == member and e["kind"] == kind and e["t"] >= since]

    def owned(self) -> dict[str, set[int]]:
        """What each member owns now according to its callbacks."""
        out: dict[str, set[int]] = defaultdict(set)
        for e in self.snapshot():
            if e["kind"] == "assign":
                out[e["member"]].update(e["partitions"])
            elif e["kind"] in ("revoke", "lost"):
                out[e["member"]].difference_update(e["partitions"])
            elif e["kind"] in ("closed", "dead"):
                out[e["member"]].clear()
        return dict(out)


def consumer_conf(bootstrap: str, group: str, name: str, protocol: str, extra: dict | None = None) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 50,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update(
            {
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "partition.assignment.strategy": protocol,
            }
        )
    conf.update(extra or {})
    return conf


class ThreadMember:
    """A member running :func:`member_loop` in a thread of the test process."""

    def __init__(self, name: str, conf: dict, topic: str, journal: Journal):
        self.name = name
        self.stop_event = threading.Event()
        self.thread = threading.Thread(
            target=member_loop,
            name=f"member-{name}",
            daemon=True,
            args=(conf, topic, lambda kind, **f: journal.add(name, kind, **f), self.stop_event.is_set),
        )
        self.thread.start()

    def close(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"member {self.name} did not close"


class ProcessMember:
    """A member running :func:`member_loop` in a subprocess (this file as a script), so it
    can be SIGKILLed. Its journal lines come back on stdout."""

    def __init__(self, name: str, conf: dict, topic: str, journal: Journal, extra_env: dict | None = None):
        self.name = name
        self.journal = journal
        args = [sys.executable, os.path.abspath(__file__), json.dumps({"conf": conf, "topic": topic})]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, **(extra_env or {}))
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            kind, t = ev.pop("kind"), ev.pop("t")
            self.journal.add(self.name, kind, t=t, **ev)

    def kill(self) -> float:
        """SIGKILL; returns the monotonic time of the kill (its ownership ends there)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        t = time.monotonic()
        self.reader.join(5)
        self.journal.add(self.name, "dead", t=t)
        return t


# ============================================================================ helpers
def wait_until(cond, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001  (a describe that raced a rebalance)
            last = e
        if last is True or (last and not isinstance(last, (Exception, str))):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


_ADMINS: dict = {}


def admin(bootstrap: str):
    """One AdminClient per broker address (a handle must outlive its futures)."""
    from confluent_kafka.admin import AdminClient

    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return _ADMINS[bootstrap]


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import NewTopic

    for f in admin(bootstrap).create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(10)


def produce_burst(
    bootstrap: str, topic: str, per_partition: int = BURST_PER_PARTITION, partitions: int = PARTITIONS, tag: str = ""
) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kesque-test-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    res = admin(bootstrap).list_consumer_group_offsets([req])[group].result(10)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def describe(bootstrap: str, group: str):
    return admin(bootstrap).describe_consumer_groups([group], request_timeout=10)[group].result(10)


def member_partitions(desc) -> dict[str, list[int]]:
    """{client id: sorted partitions} from a ConsumerGroupDescription."""
    out = {}
    for m in desc.members:
        assert m.client_id not in out, f"two members with client id {m.client_id}"
        out[m.client_id] = sorted(tp.partition for tp in m.assignment.topic_partitions)
    return out


def wire_consumer_group_describe(bootstrap: str, group: str):
    with WireClient(bootstrap) as c:
        r = c.request(
            ApiKeys.CONSUMER_GROUP_DESCRIBE,
            0,
            Msg(ApiKeys.CONSUMER_GROUP_DESCRIBE, 0)(group_ids=(group,), include_authorized_operations=False),
        )
    return r.groups[0]


def log_count(broker, pattern: str) -> int:
    with open(broker.log_path, errors="replace") as f:
        return len(re.findall(pattern, f.read()))


# ============================================================================ journal checks
def ownership_intervals(events: list[dict]) -> dict[int, list[tuple[float, float, str]]]:
    """{partition: [(start, end, member)]} from assign/revoke/lost/closed/dead events; a
    member is never assigned a partition it already owns."""
    start: dict[tuple[str, int], float] = {}
    out: dict[int, list] = defaultdict(list)
    for e in events:
        m = e["member"]
        if e["kind"] == "assign":
            for p in e["partitions"]:
                assert (m, p) not in start, f"{m} assigned partition {p} it already owns: {e}"
                start[(m, p)] = e["t"]
        elif e["kind"] in ("revoke", "lost"):
            for p in e["partitions"]:
                if (m, p) in start:
                    out[p].append((start.pop((m, p)), e["t"], m))
        elif e["kind"] in ("closed", "dead"):
            for mm, p in [k for k in start if k[0] == m]:
                out[p].append((start.pop((mm, p)), e["t"], m))
    for (m, p), s in start.items():
        out[p].append((s, float("inf"), m))
    return out


def check_exactly_once(p: int, end: int, events: list[dict], intervals: list[tuple[float, float, str]]) -> None:
    """Partition ``p`` is processed in offset order, each record once: every owner resumes
    exactly at the last acknowledged commit, which is where its predecessor stopped, and
    continues without a gap; commits never move back nor past what was processed. The one
    exception is an owner that ended abruptly (SIGKILLed, or its partitions lost): what it
    processed after its last acknowledged commit is processed again by the next owner (and
    its last commit may have landed unacknowledged, so the next owner may start up to where
    it stopped)."""
    abrupt = {
        (e["member"], e["t"]) for e in events if e["kind"] == "dead" or (e["kind"] == "lost" and p in e["partitions"])
    }
    committed = 0  # the last acknowledged commit of p
    nxt = 0  # the first offset of p never processed
    owner = None  # the ownership interval of the last records processed
    last = -1  # the last offset the current owner processed
    for e in events:
        if e["kind"] == "commit":
            for cp, off in e["offsets"]:
                if cp == p:
                    assert committed <= off <= nxt, (
                        f"partition {p}: {e['member']} committed {off} "
                        f"after a commit of {committed}, with records up to {nxt - 1} processed"
                    )
                    committed = off
            continue
        if e["kind"] != "processed":
            continue
        offs = [o for rp, o in e["records"] if rp == p]
        if not offs:
            continue
        iv = next(iv for iv in intervals if iv[2] == e["member"] and iv[0] <= e["t"] <= iv[1])
        if iv != owner:
            before = [x for x in intervals if x[1] <= iv[0]]
            prev = max(before, key=lambda x: x[1]) if before else None
            if prev is not None and (prev[2], prev[1]) in abrupt:
                assert committed <= offs[0] <= nxt, (
                    f"partition {p}: {e['member']} resumed at {offs[0]} "
                    f"after {prev[2]} ended abruptly; acknowledged commit {committed}, processed up to {nxt - 1}"
                )
            else:
                assert offs[0] == committed == nxt, (
                    f"partition {p}: {e['member']} resumed at {offs[0]}; "
                    f"acknowledged commit {committed}, processed up to {nxt - 1}"
                )
            owner = iv
        else:
            assert offs[0] == last + 1, f"partition {p}: {e['member']} went from {last} to {offs[0]}"
        assert offs == list(range(offs[0], offs[0] + len(offs))), f"partition {p}: {e['member']} processed {offs}"
        last = offs[-1]
        nxt = max(nxt, last + 1)
    assert nxt == end, f"partition {p}: processed up to {nxt - 1}, the log ends at {end}"
    assert committed == end, f"partition {p}: the last acknowledged commit is {committed}, the log ends at {end}"


def check_journal(journal: Journal, ends: dict[int, int]) -> dict:
    events = journal.snapshot()
    intervals = ownership_intervals(events)
    # one owner at a time, whatever the generation
    for p, ivs in intervals.items():
        ivs.sort()
        for (s1, e1, m1), (s2, e2, m2) in itertools.pairwise(ivs):
            assert s2 >= e1, f"partition {p} owned by {m1} [{s1:.3f}, {e1:.3f}] and {m2} [{s2:.3f}, {e2:.3f}]"
    # one owner per generation, as the members saw their generations (eager assignments)
    by_gen: dict[int, dict[int, str]] = defaultdict(dict)
    for e in events:
        if e["kind"] == "assign" and e.get("generation") is not None:
            for p in e["partitions"]:
                other = by_gen[e["generation"]].setdefault(p, e["member"])
                assert other == e["member"], f"generation {e['generation']}: partition {p} to {other} and {e['member']}"
    # every record processed by a member owning its partition, every record processed
    processed: dict[int, set[int]] = defaultdict(set)
    for e in events:
        if e["kind"] != "processed":
            continue
        for p, o in e["records"]:
            assert any(m == e["member"] and s <= e["t"] <= en for s, en, m in intervals[p]), (
                f"{e['member']} processed {p}@{o} at {e['t']:.3f} without owning the partition"
            )
            processed[p].add(o)
    for p, end in ends.items():
        missing = set(range(end)) - processed[p]
        assert not missing, f"partition {p}: records never processed: {sorted(missing)[:20]}"
        check_exactly_once(p, end, events, intervals[p])
    fatal = [e for e in events if e["kind"] == "error" and e.get("fatal")]
    assert not fatal, fatal
    return {"intervals": intervals, "processed": processed, "events": events}


# ============================================================================ fixtures
@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("kesque-groups") / "data", BROKER_CONFIG) as b:
        yield b


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return f"topic-{suffix}", f"group-{suffix}"


# ============================================================================ 1 and 3: the scenario
@dataclasses.dataclass
class Settled:
    desc: object  # the ConsumerGroupDescription
    parts: dict[str, list[int]]  # member name -> its partitions


class Scenario:
    """Members join, leave and crash; after every step the group settles and every record
    produced so far is processed and committed."""

    def __init__(self, broker, topic: str, group: str, protocol: str, extra: dict | None = None):
        self.broker = broker
        self.bs = broker.bootstrap_servers
        self.topic, self.group, self.protocol = topic, group, protocol
        self.extra = extra or {}  # member name -> extra consumer config
        self.journal = Journal()
        self.members: dict[str, object] = {}
        self.steps: list[tuple[str, float]] = []  # (step, monotonic time it started)
        self.bursts = 0

    def conf(self, name: str) -> dict:
        return consumer_conf(self.bs, self.group, name, self.protocol, self.extra.get(name))

    def mark(self, step: str) -> float:
        t = time.monotonic()
        self.steps.append((step, t))
        return t

    def burst(self) -> None:
        self.bursts += 1
        produce_burst(self.bs, self.topic, tag=f"b{self.bursts}")

    def start_thread(self, name: str) -> None:
        self.members[name] = ThreadMember(name, self.conf(name), self.topic, self.journal)

    def start_process(self, name: str) -> None:
        self.members[name] = ProcessMember(name, self.conf(name), self.topic, self.journal)

    def generation(self, member: str) -> int:
        """The generation of the member's last on_assign (as librdkafka saw it)."""
        return self.journal.of(member, "assign")[-1]["generation"]

    def client_id(self, name: str) -> str:
        return self.conf(name)["client.id"]

    def settle(self, expected: set[str], timeout: float = 30.0) -> Settled:
        """Wait for a Stable group of exactly ``expected`` whose assignments partition the
        topic and agree with the members' callbacks, and committed offsets at the log end."""
        ends = end_offsets(self.bs, self.topic)
        by_client = {self.client_id(n): n for n in expected}

        def ok():
            d = describe(self.bs, self.group)
            if d.state.name != "STABLE":
                return f"state {d.state}"
            parts = {by_client.get(c, c): ps for c, ps in member_partitions(d).items()}
            if set(parts) != expected:
                return f"members {sorted(parts)}"
            flat = sorted(p for ps in parts.values() for p in ps)
            assert len(flat) == len(set(flat)), f"a partition assigned twice: {parts}"
            if flat != list(range(PARTITIONS)):
                return f"assignment {parts}"
            owned = self.journal.owned()
            if any(owned.get(m, set()) != set(ps) for m, ps in parts.items()):
                return f"callbacks {owned} vs {parts}"
            committed = committed_offsets(self.bs, self.group, self.topic)
            if committed != ends:
                return f"committed {committed} vs end {ends}"
            return Settled(d, parts)

        return wait_until(ok, timeout, f"group {self.group} to settle with {sorted(expected)}")

    def revokes(self, since: float, until: float = float("inf")) -> list[dict]:
        return [
            e for e in self.journal.snapshot() if e["kind"] == "revoke" and since <= e["t"] < until and e["partitions"]
        ]

    def close_all(self) -> None:
        for _name, m in list(self.members.items()):
            if isinstance(m, ThreadMember):
                m.close()
            elif m.proc.poll() is None:
                m.kill()


def run_scenario(broker, topic: str, group: str, protocol: str, on_settled=None):
    """A joins; B joins; C (a subprocess) joins; B closes; C is SIGKILLed; D joins. Returns
    the scenario and its checked journal."""
    create_topic(broker.bootstrap_servers, topic)
    s = Scenario(broker, topic, group, protocol)
    session_s = (CONSUMER_SESSION_MS if protocol == "consumer" else SESSION_MS) / 1000
    heartbeat_s = (CONSUMER_HEARTBEAT_MS if protocol == "consumer" else HEARTBEAT_MS) / 1000
    settled = on_settled or (lambda step, desc: None)
    try:
        s.burst()
        s.mark("A joins")
        s.start_thread("A")
        settled("A joins", s.settle({"A"}).desc)

        s.burst()
        s.mark("B joins")
        s.start_thread("B")
        settled("B joins", s.settle({"A", "B"}).desc)

        s.burst()
        s.mark("C joins")
        s.start_process("C")
        settled("C joins", s.settle({"A", "B", "C"}).desc)

        s.burst()
        s.mark("B leaves")
        s.members.pop("B").close()
        settled("B leaves", s.settle({"A", "C"}).desc)

        s.burst()
        c_parts = s.journal.owned()["C"]
        assert c_parts, "C owns nothing before the crash"
        t_kill = s.members.pop("C").kill()
        s.mark("C crashes")
        # C's partitions move only once its session has expired
        moved = wait_until(
            lambda: [
                e
                for e in s.journal.snapshot()
                if e["kind"] == "assign" and e["t"] > t_kill and set(e["partitions"]) & c_parts
            ],
            session_s + 20,
            "C's partitions to be reassigned",
        )
        delay = moved[0]["t"] - t_kill
        assert delay >= session_s - heartbeat_s - 0.2, f"C's partitions reassigned {delay:.2f}s after the kill"
        assert delay <= session_s + 10, f"C's partitions reassigned only {delay:.2f}s after the kill"
        settled("C crashes", s.settle({"A"}).desc)

        s.burst()
        s.mark("D joins")
        s.start_thread("D")
        settled("D joins", s.settle({"A", "D"}).desc)
        s.mark("end")
        s.close_all()
    except BaseException:
        s.close_all()
        raise
    ends = end_offsets(broker.bootstrap_servers, topic)
    assert sum(ends.values()) == s.bursts * BURST_PER_PARTITION * PARTITIONS
    assert committed_offsets(broker.bootstrap_servers, group, topic) == ends
    return s, check_journal(s.journal, ends)


def step_window(s: Scenario, step: str) -> tuple[float, float]:
    names_ = [n for n, _t in s.steps]
    i = names_.index(step)
    return s.steps[i][1], s.steps[i + 1][1]


def test_classic_eager_group_one_owner_per_partition(gbroker, names):
    topic, group = names
    s, _checked = run_scenario(gbroker, topic, group, "range")
    # eager: every rebalance revokes everything, so each step revoked something from A
    for step in ("B joins", "C joins", "B leaves", "C crashes", "D joins"):
        lo, hi = step_window(s, step)
        assert any(e["member"] == "A" for e in s.revokes(lo, hi)), f"{step}: A was never revoked (eager)"
    assert log_count(gbroker, f"Preparing to rebalance group {group} ") >= 6


def test_classic_cooperative_sticky_revokes_only_moving_partitions(gbroker, names):
    topic, group = names
    s, checked = run_scenario(gbroker, topic, group, "cooperative-sticky")
    events = checked["events"]
    # a member leaving or crashing moves only the leaver's partitions: nobody else revokes
    for step in ("B leaves", "C crashes"):
        lo, hi = step_window(s, step)
        others = [e for e in s.revokes(lo, hi) if e["member"] not in ("B", "C")]
        assert not others, f"{step}: unaffected members revoked {others}"
    # every revoked partition moves: its next owner is another member (a final close excepted)
    for i, e in enumerate(events):
        if e["kind"] != "revoke" or not e["partitions"]:
            continue
        later = events[i + 1 :]
        own_next = next(
            (x for x in later if x["member"] == e["member"] and x["kind"] in ("assign", "revoke", "closed")), None
        )
        if own_next is not None and own_next["kind"] == "closed":
            continue  # the member's close revoked its partitions
        for p in e["partitions"]:
            nxt = next((x for x in later if x["kind"] == "assign" and p in x["partitions"]), None)
            assert nxt is not None and nxt["member"] != e["member"], (
                f"{e['member']} revoked partition {p} that did not move (next: {nxt})"
            )


def _check_consumer_group_epochs(bs: str, group: str, expected_members: int) -> None:
    g = wire_consumer_group_describe(bs, group)
    assert g.error_code == 0, g
    assert g.group_state == "Stable", g.group_state
    assert g.group_epoch == g.assignment_epoch, (g.group_epoch, g.assignment_epoch)
    assert g.assignor_name == "uniform", g.assignor_name
    assert len(g.members) == expected_members
    sizes = []
    seen: list[int] = []
    for m in g.members:
        assert m.member_epoch == g.assignment_epoch, (m.member_id, m.member_epoch, g.assignment_epoch)
        current = sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)
        target = sorted(p for tp in m.target_assignment.topic_partitions for p in tp.partitions)
        assert current == target, (m.member_id, current, target)
        sizes.append(len(current))
        seen += current
    assert sorted(seen) == list(range(PARTITIONS))
    assert max(sizes) - min(sizes) <= 1, f"uniform assignor unbalanced: {sizes}"


def test_kip848_consumer_protocol_group(gbroker, names):
    topic, group = names
    epochs = []

    def on_settled(step, desc):
        assert desc.type.name == "CONSUMER", desc.type
        assert desc.partition_assignor == "uniform"
        for m in desc.members:
            target = sorted(tp.partition for tp in m.target_assignment.topic_partitions)
            assert target == sorted(tp.partition for tp in m.assignment.topic_partitions)
        _check_consumer_group_epochs(gbroker.bootstrap_servers, group, len(desc.members))
        epochs.append(wire_consumer_group_describe(gbroker.bootstrap_servers, group).group_epoch)

    s, _checked = run_scenario(gbroker, topic, group, "consumer", on_settled)
    # every membership change bumped the group epoch
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs), epochs
    # KIP-848 is incremental: a leaving or crashing member's partitions move without revoking others
    for step in ("B leaves", "C crashes"):
        lo, hi = step_window(s, step)
        others = [e for e in s.revokes(lo, hi) if e["member"] not in ("B", "C")]
        assert not others, f"{step}: unaffected members revoked {others}"
    assert log_count(gbroker, "Removing member .* from consumer group " + group) >= 2  # B left, C expired


# ============================================================================ 2: static membership
STATIC_SESSION_MS = 10000  # long enough to restart a member (a subprocess: ~1 s) within it


def _static_scenario(broker, topic, group, members=("L", "F")) -> Scenario:
    create_topic(broker.bootstrap_servers, topic)
    extra = {n: {"group.instance.id": f"{group}-{n}", "session.timeout.ms": STATIC_SESSION_MS} for n in members}
    return Scenario(broker, topic, group, "range", extra)


@pytest.mark.parametrize("who", ["leader", "follower"])
@pytest.mark.parametrize("how", ["close", "kill"])
def test_static_member_restart_keeps_generation_and_assignment(gbroker, names, how, who):
    """A static member that comes back within session.timeout.ms takes its old place: same
    generation, same partitions, no rebalance (no 'Preparing to rebalance' in the broker log,
    no callback for the other member). L joins first, so L is the group leader."""
    topic, group = names
    s = _static_scenario(gbroker, topic, group)
    restarted, other = ("L", "F") if who == "leader" else ("F", "L")
    start = {restarted: s.start_thread if how == "close" else s.start_process, other: s.start_thread}
    rebalances = f"Preparing to rebalance group {group} "
    try:
        s.burst()
        start["L"]("L")
        s.settle({"L"})
        start["F"]("F")
        before = s.settle({"L", "F"}).parts
        gen = s.generation("L")
        assert s.generation("F") == gen
        n_rebalances = log_count(gbroker, rebalances)
        t_restart = s.mark("restart")

        s.burst()
        if how == "close":
            s.members.pop(restarted).close()  # a static member does not send LeaveGroup
        else:
            s.members.pop(restarted).kill()
        start[restarted](restarted)
        assert s.settle({"L", "F"}).parts == before
        assert s.generation(restarted) == gen, "the restarted static member joined a new generation"
        assert [
            e
            for e in s.journal.snapshot()
            if e["member"] == other and e["t"] > t_restart and e["kind"] in ("assign", "revoke", "lost")
        ] == [], f"{other} was rebalanced"
        assert log_count(gbroker, rebalances) == n_rebalances, "the broker rebalanced the group"
        # the group keeps working at the same generation
        s.burst()
        assert s.settle({"L", "F"}).parts == before
        assert s.generation(other) == gen
        s.mark("end")
        s.close_all()
    except BaseException:
        s.close_all()
        raise
    check_journal(s.journal, end_offsets(gbroker.bootstrap_servers, topic))


def test_static_member_duplicate_instance_id_fences_old_member(gbroker, names):
    """A second live consumer with the same group.instance.id takes over (KIP-345): the new
    member gets the old one's partitions without a rebalance, the old one's next heartbeat
    or commit gets the fatal FENCED_INSTANCE_ID."""
    from confluent_kafka import KafkaError

    topic, group = names
    s = _static_scenario(gbroker, topic, group)
    # L2: the same instance id as L. Kafka keeps the replaced member's client id and host,
    # so the group still describes it as L
    s.extra["L2"] = dict(s.extra["L"], **{"client.id": "L"})
    try:
        s.burst()
        s.start_thread("L")
        s.settle({"L"})
        s.start_thread("F")
        before = s.settle({"L", "F"}).parts
        gen = s.generation("L")
        n_rebalances = log_count(gbroker, f"Preparing to rebalance group {group} ")
        t0 = s.mark("duplicate")
        s.start_thread("L2")
        fenced = wait_until(lambda: [e for e in s.journal.of("L", "error", t0) if e["fatal"]], 20, "L to be fenced")
        # librdkafka wraps it in _FATAL, with the description of FENCED_INSTANCE_ID (82)
        assert KafkaError(KafkaError.FENCED_INSTANCE_ID).str() in fenced[0]["error"], fenced
        wait_until(lambda: s.journal.of("L", "closed", t0), 20, "L to close")
        s.members.pop("L").close()
        s.burst()
        assert s.settle({"L2", "F"}).parts == {"L2": before["L"], "F": before["F"]}
        assert s.generation("L2") == gen
        assert [
            e
            for e in s.journal.snapshot()
            if e["member"] == "F" and e["t"] > t0 and e["kind"] in ("assign", "revoke", "lost")
        ] == [], "F was rebalanced"
        assert log_count(gbroker, f"Preparing to rebalance group {group} ") == n_rebalances
        d = describe(gbroker.bootstrap_servers, group)
        assert sorted(m.group_instance_id for m in d.members) == [f"{group}-F", f"{group}-L"]
        s.mark("end")
        s.close_all()
    except BaseException:
        s.close_all()
        raise


# ============================================================================ 4: kafka-python and aiokafka
def _await_group(bs: str, group: str, members: int, state: str = "STABLE", timeout: float = 30.0):
    def ok():
        d = describe(bs, group)
        return d if d.state.name == state and len(d.members) == members else f"{d.state} {len(d.members)}"

    return wait_until(ok, timeout, f"group {group} {state} with {members} members")


def test_kafka_python_group(gbroker, names):
    """Join, consume, commit, leave; a new member resumes from the committed offsets; two
    members share the partitions and each record goes to exactly one of them."""
    from kafka import KafkaConsumer

    topic, group = names
    bs = gbroker.bootstrap_servers
    create_topic(bs, topic, 4)
    produce_burst(bs, topic, 25, partitions=4, tag="kp1")

    def consumer(name):
        # the topic's partitions are known before the member joins: kafka-python's leader assigns
        # from the metadata it holds, and one that joined before its first Metadata answer
        # ("No partition metadata for topic", seen under coverage on a loaded machine) assigned
        # nothing and polled nothing for 30 s
        c = KafkaConsumer(
            bootstrap_servers=bs,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )
        assert c.partitions_for_topic(topic) == {0, 1, 2, 3}
        c.subscribe([topic])
        return c

    def consume_n(c, n, timeout=30.0):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=200).items():
                got += [(tp.partition, r.offset, r.value) for r in recs]
        return got

    c1 = consumer("kp-1")
    got = consume_n(c1, 100)
    assert sorted((p, o) for p, o, _v in got) == [(p, o) for p in range(4) for o in range(25)]
    assert {tp.partition for tp in c1.assignment()} == {0, 1, 2, 3}
    c1.commit()
    assert committed_offsets(bs, group, topic, 4) == {p: 25 for p in range(4)}
    c1.close()  # LeaveGroup
    _await_group(bs, group, 0, "EMPTY")

    produce_burst(bs, topic, 25, partitions=4, tag="kp2")
    c2 = consumer("kp-2")
    got = consume_n(c2, 100)
    assert sorted((p, o) for p, o, _v in got) == [(p, o) for p in range(4) for o in range(25, 50)], (
        "the new member did not resume from the committed offsets"
    )
    assert all(v.startswith(b"kp2-") for _p, _o, v in got)
    c2.commit()

    # two members: each polls in its own thread (the join needs both to poll)
    stop = threading.Event()
    seen: dict[str, list] = {"kp-2": [], "kp-3": []}
    assigned: dict[str, set] = {}

    def run(c, name):
        while not stop.is_set():
            for tp, recs in c.poll(timeout_ms=100).items():
                seen[name] += [(tp.partition, r.offset) for r in recs]
            assigned[name] = {tp.partition for tp in c.assignment()}
            if seen[name]:
                c.commit()
        c.close()

    c3 = consumer("kp-3")
    threads = [threading.Thread(target=run, args=(c, n), daemon=True) for c, n in ((c2, "kp-2"), (c3, "kp-3"))]
    for t in threads:
        t.start()
    try:
        d = _await_group(bs, group, 2)
        wait_until(lambda: assigned.get("kp-2") and assigned.get("kp-3"), 10, "both members assigned")
        produce_burst(bs, topic, 25, partitions=4, tag="kp3")
        wait_until(lambda: committed_offsets(bs, group, topic, 4) == {p: 75 for p in range(4)}, 30, "kp3 consumed")
        assert describe(bs, group).state.name == "STABLE"
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    parts = member_partitions(d)
    assert sorted(parts) == ["kp-2", "kp-3"] and all(parts.values()), parts
    assert sorted(parts["kp-2"] + parts["kp-3"]) == [0, 1, 2, 3]
    assert assigned == {n: set(ps) for n, ps in parts.items()}
    records = seen["kp-2"] + seen["kp-3"]
    new = sorted(r for r in records if r[1] >= 50)
    assert new == [(p, o) for p in range(4) for o in range(50, 75)], "a kp3 record missing or consumed twice"
    for name, recs in seen.items():
        assert {p for p, o in recs if o >= 50} <= set(parts[name])
    _await_group(bs, group, 0, "EMPTY")


def test_aiokafka_group(gbroker, names):
    """The same with aiokafka: join, consume, commit, leave, rejoin from the committed
    offsets, two members sharing the partitions."""
    import asyncio

    import aiokafka

    topic, group = names
    bs = gbroker.bootstrap_servers
    create_topic(bs, topic, 4)
    produce_burst(bs, topic, 25, partitions=4, tag="ak1")

    def consumer(name):
        return aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )

    async def consume_n(c, n, timeout=30.0):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for tp, recs in (await c.getmany(timeout_ms=200)).items():
                got += [(tp.partition, r.offset, r.value) for r in recs]
        return got

    async def main():
        c1 = consumer("ak-1")
        await c1.start()
        got = await consume_n(c1, 100)
        assert sorted((p, o) for p, o, _v in got) == [(p, o) for p in range(4) for o in range(25)]
        assert {tp.partition for tp in c1.assignment()} == {0, 1, 2, 3}
        await c1.commit()
        assert committed_offsets(bs, group, topic, 4) == {p: 25 for p in range(4)}
        await c1.stop()  # LeaveGroup
        _await_group(bs, group, 0, "EMPTY")

        produce_burst(bs, topic, 25, partitions=4, tag="ak2")
        c2 = consumer("ak-2")
        await c2.start()
        got = await consume_n(c2, 100)
        assert sorted((p, o) for p, o, _v in got) == [(p, o) for p in range(4) for o in range(25, 50)], (
            "the new member did not resume from the committed offsets"
        )
        await c2.commit()

        c3 = consumer("ak-3")
        await c3.start()
        seen: dict[str, list] = {"ak-2": [], "ak-3": []}

        async def run(c, name):
            for tp, recs in (await c.getmany(timeout_ms=100)).items():
                seen[name] += [(tp.partition, r.offset) for r in recs]
            if seen[name]:
                await c.commit()

        async def run_until(cond, what):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await asyncio.gather(run(c2, "ak-2"), run(c3, "ak-3"))
                if cond():
                    return
            raise AssertionError(f"timed out waiting for {what}")

        def joined():
            d = describe(bs, group)
            return c2.assignment() and c3.assignment() and d.state.name == "STABLE" and len(d.members) == 2

        await run_until(joined, "two members")
        produce_burst(bs, topic, 25, partitions=4, tag="ak3")
        await run_until(lambda: committed_offsets(bs, group, topic, 4) == {p: 75 for p in range(4)}, "ak3 consumed")
        d = describe(bs, group)
        assert d.state.name == "STABLE" and len(d.members) == 2, d
        parts = member_partitions(d)
        assert {n: set(ps) for n, ps in parts.items()} == {
            "ak-2": {tp.partition for tp in c2.assignment()},
            "ak-3": {tp.partition for tp in c3.assignment()},
        }
        assert sorted(parts["ak-2"] + parts["ak-3"]) == [0, 1, 2, 3] and all(parts.values())
        new = sorted(r for r in seen["ak-2"] + seen["ak-3"] if r[1] >= 50)
        assert new == [(p, o) for p in range(4) for o in range(50, 75)], "a record missing or consumed twice"
        for name, recs in seen.items():
            assert {p for p, o in recs if o >= 50} <= set(parts[name])
        await asyncio.gather(c2.stop(), c3.stop())

    asyncio.run(main())
    _await_group(bs, group, 0, "EMPTY")


# ============================================================================ 5: broker restart
@pytest.mark.parametrize("how", ["stop", "kill"])
def test_offsets_and_members_survive_broker_restart(tmp_path, how):
    """Stop (SIGTERM) or SIGKILL the broker and start it again on the same data: committed
    offsets (metadata and leader epochs included) are fetched back; a classic group is
    restored Stable with its members and assignments, its members keep heartbeating at
    their generation (and a member that stops heartbeating still expires); a confluent
    consumer rides through without a rebalance; a KIP-848 group keeps its epochs."""
    from test_groups_bad_input import (
        ClassicMember,
        Kip848Member,
        assignment,
        cg_snapshot,
        fetch_offsets,
        find_coordinator,
        group_snapshot,
    )

    b = Broker(data_dir=str(tmp_path / "data"), config=BROKER_CONFIG)
    b.start()
    s = None
    try:
        bs = b.bootstrap_servers
        suffix = uuid.uuid4().hex[:8]
        topic, group = f"rt-{suffix}", f"classic-{suffix}"
        create_topic(bs, topic, 2)
        # a confluent consumer (classic, range) with a session that outlasts the restart
        s = Scenario(b, f"rt2-{suffix}", f"confluent-{suffix}", "range", {"A": {"session.timeout.ms": 20000}})
        create_topic(bs, s.topic)
        s.burst()
        s.start_thread("A")
        s.settle({"A"})
        gen = s.generation("A")
        rebalances = f"Preparing to rebalance group {s.group} "
        n_rebalances = log_count(b, rebalances)
        # a classic member over the wire: Stable, owns both partitions, committed offsets
        m = ClassicMember(bs, group, [topic], session_ms=4000)
        assert m.join().error_code == 0
        assert m.sync({m.member_id: assignment({topic: [0, 1]})}).error_code == 0
        assert m.commit({(topic, 0): (11, "meta-0", 3), (topic, 1): (22, "meta-1")}) == {(topic, 0): 0, (topic, 1): 0}
        assert m.commit({(topic, 1): (23, "meta-1b", 0)}) == {(topic, 1): 0}  # the latest commit wins
        classic_before = group_snapshot(bs, group)
        assert classic_before[0] == "Stable"
        # offsets of a group without members (a standalone committer)
        solo = ClassicMember(bs, f"solo-{suffix}", [topic])
        assert solo.commit({(topic, 0): (5, "solo")}, generation_id_or_member_epoch=-1, member_id="") == {(topic, 0): 0}
        solo.close()
        # a KIP-848 member
        k = Kip848Member(bs, f"cg-{suffix}", topic)
        k.join()
        wait_until(lambda: k.heartbeat() and sum(len(p) for p in k.owned.values()) == 2, 10, "KIP-848 assignment")
        kip848_before = cg_snapshot(bs, k.group)
        assert kip848_before[0] == "Stable"
        t_restart = s.mark("restart")

        m.close()
        k.close()
        if how == "stop":
            b.stop()
        else:
            b.kill()
        b.start()
        assert b.bootstrap_servers == bs
        # a fresh AdminClient: librdkafka 2.16's re-bootstrap after losing every broker can
        # leave an idle handle's coordinator lookups on a decommissioned broker object
        _ADMINS.pop(bs, None)

        # KIP-848 first (its session is the shortest): same epochs and assignment, and the
        # member heartbeats at its epoch
        k2 = Kip848Member(bs, k.group, topic)
        k2.member_id, k2.epoch, k2.owned = k.member_id, k.epoch, k.owned
        assert cg_snapshot(bs, k.group) == kip848_before
        r = k2.heartbeat()
        assert r.error_code == 0 and r.member_epoch == k.epoch, r
        assert cg_snapshot(bs, k.group) == kip848_before
        k2.close()

        find_coordinator(bs, group)
        assert group_snapshot(bs, group) == classic_before
        err, offs = fetch_offsets(bs, group, topic, [0, 1], with_epoch=True)
        assert err == 0 and offs == {0: (11, "meta-0", 3, 0), 1: (23, "meta-1b", 0, 0)}, offs
        assert fetch_offsets(bs, f"solo-{suffix}", topic, [0])[1][0][:2] == (5, "solo")
        # the restored member heartbeats at its generation for longer than its session
        m2 = ClassicMember(bs, group, [topic], session_ms=4000)
        m2.member_id, m2.generation = m.member_id, m.generation
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            assert m2.heartbeat() == 0
            time.sleep(0.5)
        assert group_snapshot(bs, group) == classic_before
        assert m2.commit({(topic, 0): (12, "after")}) == {(topic, 0): 0}
        # and, silent, it expires after its session
        t_silent = time.monotonic()
        wait_until(lambda: group_snapshot(bs, group)[0] == "Empty", 15, "the silent member to expire")
        assert time.monotonic() - t_silent >= 3.0
        assert fetch_offsets(bs, group, topic, [0, 1])[1][0][:2] == (12, "after")
        m2.close()

        # the confluent consumer kept its membership: no rebalance, new records processed
        s.burst()
        s.settle({"A"})
        assert s.generation("A") == gen
        assert [
            e for e in s.journal.snapshot() if e["t"] > t_restart and e["kind"] in ("assign", "revoke", "lost")
        ] == [], "the consumer was rebalanced by the restart"
        assert log_count(b, rebalances) == n_rebalances
        s.mark("end")
        s.close_all()
        check_journal(s.journal, end_offsets(bs, s.topic))
    finally:
        if s is not None:
            s.close_all()
        b.stop()


# ============================================================================ member subprocess
if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    out_lock = threading.Lock()

    def _emit(kind, **fields):
        line = json.dumps(dict(fields, kind=kind, t=time.monotonic()))
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    member_loop(spec["conf"], spec["topic"], _emit, lambda: False)
