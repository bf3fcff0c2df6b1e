"""Partition replication under faults, on real kesque processes (issue 14's tests 5 and 8).

Test 5 (``make chaos``, marked slow): continuous acks=all idempotent production to an RF 3 topic
with min.insync.replicas=2 while the partition's leader is SIGKILLed and restarted on a seeded
schedule; a transactional read-process-write under the same kills; a consumer group whose
coordinator's broker is killed. Test 8 (default suite): a reassignment from 1,2,3 to 2,3,4 under
acks=all load, then a preferred leader election.

A failure message names the seed; ``KESQUE_CHAOS_SEED`` replays a schedule (the processes' own
timing is not replayed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kesque.testing.cluster import Cluster
from test_coordinators_cluster import GROUP_KEY, coordinator
from test_replication import FAST, create, describe, tool, wait_for
from test_transactions_eos import Cluster as Clients
from test_transactions_eos import Processor, check_exactly_once

SEED = int(os.environ.get("KESQUE_CHAOS_SEED", random.randrange(1 << 30)))
CONFIG = {
    **FAST,
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
MIN_ISR_2 = "min.insync.replicas=2"
# a consumer's session outlives a coordinator's failover (the dead broker is fenced after
# broker.session.timeout.ms, 3 s, before a new coordinator is elected), as Kafka's defaults do
# (45 s against 9 s): with 3 s, every failover expires the member
GROUP_SESSION = {"session.timeout.ms": "10000", "heartbeat.interval.ms": "500"}


def read_log(
    bootstrap: str, topic: str, partition: int = 0, isolation: str = "read_uncommitted", timeout: float = 60.0
) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition up to its end (the high watermark)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"reading {topic}-{partition}: no end in {timeout}s"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    return out
                continue
            out.append((m.offset(), m.value()))
    finally:
        c.close()


class Tailer(threading.Thread):
    """A consumer reading the partition from offset 0 for the whole run: what it was served."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.served: list[tuple[int, bytes]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tail-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        c.assign([TopicPartition(self.topic, 0, 0)])
        try:
            while not self.stopping.is_set():
                m = c.poll(0.2)
                if m is not None and not m.error():
                    self.served.append((m.offset(), m.value()))
        finally:
            c.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


class Writer(threading.Thread):
    """An idempotent acks=all producer writing b"%08d" % i for i = 0, 1, ... until stopped:
    the acknowledged (value, offset) and the errors of its delivery reports."""

    def __init__(self, bootstrap: str, topic: str, pace: tuple[int, float] = (1000, 0.05), **conf):
        super().__init__(daemon=True)
        self.topic = topic
        self.pace = pace  # (records, seconds): a pause after so many
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 500,
                "retry.backoff.ms": 50,
                "queue.buffering.max.messages": 20000,
                "error_cb": self._error,
                **conf,
            }
        )
        self.acked: list[tuple[bytes, int]] = []
        self.errors: list[tuple[bytes, str]] = []
        self.fatal = None
        self.sent = 0
        self.stopping = threading.Event()

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked.append((msg.value(), msg.offset()))
        else:
            self.errors.append((msg.value(), str(err)))

    def _error(self, err) -> None:
        if err.fatal():
            self.fatal = err

    def progress(self) -> int:
        assert self.fatal is None, f"the producer failed: {self.fatal}"
        return len(self.acked)

    def run(self) -> None:
        while not self.stopping.is_set() and self.fatal is None:
            try:  # as fast as the producer's queue allows: the followers lag a little behind
                self.p.produce(self.topic, b"%08d" % self.sent, partition=0, on_delivery=self._report)
            except BufferError:
                self.p.poll(0.05)
                continue
            except KafkaException:  # fatal (error_cb has it)
                break
            self.sent += 1
            self.p.poll(0)
            if self.sent % self.pace[0] == 0:
                time.sleep(self.pace[1])
        self.p.flush(150)

    def stop(self) -> None:
        self.stopping.set()
        self.join(180)


def leader_of(cluster: Cluster, topic: str) -> int:
    return describe(cluster, topic).get(0, (-1,))[0]


def kill_leaders(cluster: Cluster, rng: random.Random, rounds: int, leader, progress, schedule: list[str]) -> None:
    """``rounds`` times, after a random pause, one of (seeded):

    - SIGKILL the broker ``leader()`` names;
    - SIGKILL it, then another broker a moment later: while the leader's session expires, the
      next leader may be the second victim, and the survivor briefly follows a dead leader
      (what it truncated then must not be lost when it leads);
    - SIGSTOP the other brokers, then SIGKILL the leader, then SIGCONT them: the followers lag
      when their leader dies (nothing above what they hold may have been acknowledged);

    then wait for another leader, restart the dead after random pauses, and wait for
    ``progress()`` to move. ``schedule`` gets what was done, for the messages."""
    brokers = [s.node_id for s in cluster.specs if s.is_broker]
    for _ in range(rounds):
        time.sleep(rng.uniform(0.5, 2.0))
        victims = [leader()]
        others = [b for b in brokers if b != victims[0]]
        kind = rng.choice(("kill", "kill-two", "pause-followers"))
        schedule.append(f"{kind} {victims[0]}")
        if kind == "pause-followers":
            for b in others:
                cluster.node(b).process.send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(0.3, 1.0))
        cluster.kill(victims[0])
        if kind == "pause-followers":
            for b in others:
                cluster.node(b).process.send_signal(signal.SIGCONT)
        elif kind == "kill-two":
            time.sleep(rng.uniform(0.0, 1.0))
            victims.append(rng.choice(others))
            schedule[-1] += f" {victims[1]}"
            cluster.kill(victims[1])
        wait_for(lambda: leader() not in (*victims, -1), timeout=30, what=f"a leader other than {victims} ({schedule})")
        for v in victims:
            time.sleep(rng.uniform(0.0, 1.5))
            cluster.restart(v)
        before = progress()
        wait_for(lambda: progress() > before, timeout=60, what=f"progress after the restarts ({schedule})")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # a controller of its own (node 1) and brokers 2, 3, 4: two brokers can die at once
    with Cluster(nodes=3, controllers=1, data_dir=str(tmp_path_factory.mktemp("chaos")), config=CONFIG) as c:
        yield c
        for b in c.nodes.values():  # the last node's controlled shutdown would wait for a lost quorum
            if b.process is not None:
                b.kill()


def full_isr(cluster: Cluster, topic: str, n: int = 3) -> None:
    wait_for(
        lambda: len(describe(cluster, topic).get(0, (0, [], []))[2]) == n, timeout=60, what=f"{topic}'s ISR of {n}"
    )


# ============================================================================ test 5
@pytest.mark.slow
def test_acks_all_idempotent_production_survives_leader_kills(cluster):
    """Every acknowledged record is in the final log once, at the offset it was acknowledged
    with, in production order; the log holds no duplicate; everything a consumer was served
    during the kills is in the final log at the offset it was served at (nothing it read was
    truncated)."""
    rng = random.Random(SEED)
    topic = "chaos-idempotent"
    create(cluster, topic, 3, MIN_ISR_2)
    writer, tailer = Writer(cluster.bootstrap_servers, topic), Tailer(cluster.bootstrap_servers, topic)
    writer.start()
    tailer.start()
    schedule, failure = [], None
    try:
        kill_leaders(cluster, rng, 5, lambda: leader_of(cluster, topic), writer.progress, schedule)
        full_isr(cluster, topic)
        writer.stop()
        wait_for(
            lambda: tailer.served and tailer.served[-1][1] == max(v for v, _ in writer.acked),
            timeout=30,
            what="the tailing consumer to reach the last acknowledged record",
        )
    except AssertionError as e:  # what was lost is the better message
        failure = e
    finally:
        writer.stop()
        tailer.stop()
    why = f"seed {SEED}, {schedule}"
    print(f"{why}: {writer.sent} sent, {len(writer.acked)} acknowledged, {len(tailer.served)} served")
    final = read_log(cluster.bootstrap_servers, topic)
    at = dict(final)
    lost = [(v, o) for v, o in writer.acked if at.get(o) != v]
    assert not lost, f"{why}: {len(lost)} acknowledged records not at their offsets, e.g. {lost[:5]}"
    truncated = [(o, v, at.get(o)) for o, v in tailer.served if at.get(o) != v]
    assert not truncated, f"{why}: served then truncated (offset, served, final): {truncated[:5]}"
    assert failure is None, f"{why}: {failure}"
    assert not writer.errors, f"{why}: {len(writer.errors)} delivery errors, e.g. {writer.errors[:3]}"
    values = [v for _, v in final]
    assert [o for o, _ in final] == list(range(len(final))), f"{why}: offsets with gaps"
    assert values == sorted(set(values)), f"{why}: duplicates or reordering in the final log"
    assert len(writer.acked) == writer.sent and len(values) == writer.sent
    assert len(tailer.served) >= len(final)


def group_state(clients: Clients, group: str, topic: str) -> str:
    """For a failure message: the group's state and its committed offset (require_stable)."""
    out = []
    for what, f in (
        ("state", lambda: clients.describe(group).state),
        ("committed", lambda: clients.committed(group, topic, 1)),
        ("end", lambda: clients.end_offsets(topic, 1)),
    ):
        try:
            out.append(f"{what}: {f()}")
        except Exception as e:  # noqa: BLE001
            out.append(f"{what}: {e!r}")
    return ", ".join(out)


@pytest.mark.slow
def test_transactional_read_process_write_survives_leader_kills(cluster):
    """tests/eos_processor.py turns an input topic into an output topic, transaction by
    transaction with its offsets (send_offsets_to_transaction), while an idempotent producer
    feeds the input and the leader of the output partition is killed and restarted (a processor
    that exits is replaced; the same transactional.id fences it). The read_committed output
    holds each input once."""
    rng = random.Random(SEED)
    inp, out, group = "chaos-rpw-in", "chaos-rpw-out", "chaos-rpw"
    create(cluster, inp, 3, MIN_ISR_2)
    create(cluster, out, 3, MIN_ISR_2)
    clients = Clients(cluster)
    feed = Writer(cluster.bootstrap_servers, inp, pace=(10, 0.05))  # about 150 records a second
    spec = {
        "bootstrap": cluster.bootstrap_servers,
        "group": group,
        "input": inp,
        "output": out,
        "txn_id": "chaos-rpw",
        "batch": 20,
        "txn_delay": 0.05,
        "consumer": GROUP_SESSION,
    }
    procs = [Processor(spec)]
    feed.start()

    def progress():
        if not procs[-1].alive():
            procs.append(Processor(spec))
        return sum(p.committed_records() for p in procs)

    schedule = []
    try:
        wait_for(lambda: procs[-1].events("COMMITTED"), timeout=60, what="a first transaction")
        kill_leaders(cluster, rng, 4, lambda: leader_of(cluster, out), progress, schedule)
        feed.stop()
        assert feed.fatal is None and not feed.errors, (feed.fatal, feed.errors[:3])

        def done():
            progress()
            return clients.committed(group, inp, 1) == {0: feed.sent}

        wait_for(done, timeout=120, what="the group's offsets at the input's end")
    except AssertionError as e:
        raise AssertionError(
            f"seed {SEED}, {schedule}: {e}\n{group_state(clients, group, inp)}\n"
            + "\n".join(f"processor {i}:{p.tail()}" for i, p in enumerate(procs))
        ) from None
    finally:
        feed.stop()
        for p in procs:
            p.kill()
    check_exactly_once(clients, out, 1, [v.decode() for _, v in read_log(cluster.bootstrap_servers, inp)])
    exits = [p.tail(3) for p in procs[:-1]]
    assert not exits, f"seed {SEED}, {schedule}: processors exited: {exits}"


# A transactional producer (eos_processor's configuration) that commits offsets for a group, then
# waits for a broker id on stdin, then until that broker has left its Metadata (librdkafka
# decommissions it), then commits offsets again.
DECOMMISSIONED_COORDINATOR = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
from confluent_kafka import Consumer, Producer, TopicPartition
from eos_processor import producer_config

spec = json.loads(sys.argv[1])
p = Producer(producer_config(spec))
c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"]})
p.init_transactions(30)

def transaction(offset):
    p.begin_transaction()
    p.produce(spec["topic"], b"x", partition=0)
    p.send_offsets_to_transaction([TopicPartition(spec["topic"], 0, offset)], c.consumer_group_metadata(), 30)
    p.commit_transaction(30)

transaction(1)
print("CACHED", flush=True)
victim = int(sys.stdin.readline())
while victim in p.list_topics(timeout=10).brokers:
    time.sleep(0.2)
print("DECOMMISSIONED", flush=True)
transaction(2)
print("DONE", flush=True)
"""


@pytest.mark.slow
def test_offsets_reach_a_transaction_after_the_group_coordinator_left_the_metadata(cluster):
    """The root cause of the read-process-write hang above, which is librdkafka's (its issues
    #5511 and #5456), not the broker's: after its cached group coordinator is fenced and dropped
    from the Metadata (as Kafka drops fenced brokers), send_offsets_to_transaction never sends
    TxnOffsetCommit, past its timeout, until some broker connection goes up or down.
    tests/eos_processor.py closes idle connections (``connections.max.idle.ms``), which lets it
    look the coordinator up again: the offsets reach the new coordinator and the group's
    committed offset moves."""
    topic, group = "chaos-decommissioned", "chaos-decommissioned"
    create(cluster, topic, 3)
    spec = {"bootstrap": cluster.bootstrap_servers, "txn_id": group, "group": group, "topic": topic}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            DECOMMISSIONED_COORDINATOR,
            json.dumps(spec),
            os.path.dirname(os.path.abspath(__file__)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.strip() for line in child.stdout), daemon=True)
    reader.start()
    victim = None
    try:
        wait_for(lambda: "CACHED" in lines, timeout=60, what="a first transaction with offsets")
        victim = coordinator(cluster, GROUP_KEY, group)
        cluster.kill(victim)
        child.stdin.write(f"{victim}\n")
        child.stdin.flush()
        wait_for(lambda: "DECOMMISSIONED" in lines, timeout=60, what=f"broker {victim} to leave the Metadata")
        # librdkafka 2.16 without the workaround: no TxnOffsetCommit is ever sent
        wait_for(lambda: "DONE" in lines, timeout=45, what="send_offsets_to_transaction after the decommission")
        clients = Clients(cluster)

        def committed() -> bool:
            try:  # require_stable: UNSTABLE_OFFSET_COMMIT until the marker lands
                return clients.committed(group, topic, 1) == {0: 2}
            except KafkaException:
                return False

        wait_for(committed, timeout=30, what="the group's offset from the second transaction")
    finally:
        child.kill()
        child.wait(10)
        if victim is not None:
            cluster.restart(victim)


@pytest.mark.slow
def test_a_group_keeps_its_offsets_when_its_coordinator_fails_over(cluster):
    """A consumer group commits after every batch; the broker of its coordinator (the leader of
    its __consumer_offsets partition) is killed mid-run: a new coordinator serves the committed
    offsets (none lower than one acknowledged before the kill), the consumer goes on from them,
    and every input record is consumed."""
    topic, group, n = "chaos-group", "chaos-group", 2000
    create(cluster, topic, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(n):
        p.produce(topic, b"%05d" % i, partition=0)
    assert p.flush(60) == 0
    clients = Clients(cluster)
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **GROUP_SESSION,
        }
    )
    seen: list[bytes] = []
    committed_before = -1
    victim = None
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 120
        while len(set(seen)) < n:
            assert time.monotonic() < deadline, f"consumed {len(set(seen))} of {n} (coordinator {victim} killed)"
            batch = [m for m in c.consume(50, 0.5) if m.error() is None]
            if not batch:
                continue
            seen += [m.value() for m in batch]
            try:
                c.commit(asynchronous=False)
            except Exception:  # noqa: BLE001  (the coordinator moving: committed again with the next batch)
                continue
            if victim is None and len(set(seen)) > n // 3:
                committed_before = clients.committed(group, topic, 1)[0]
                victim = coordinator(cluster, GROUP_KEY, group)
                cluster.kill(victim)
        assert clients.committed(group, topic, 1)[0] >= committed_before
    finally:
        c.close()
        if victim is not None:
            cluster.restart(victim)
    assert victim is not None
    assert sorted(set(seen)) == [b"%05d" % i for i in range(n)]
    assert clients.committed(group, topic, 1) == {0: n}


# ============================================================================ test 8
@pytest.fixture(scope="module")
def four(tmp_path_factory):
    with Cluster(nodes=4, data_dir=str(tmp_path_factory.mktemp("chaos4")), config=FAST) as c:
        yield c
        for b in c.nodes.values():
            if b.process is not None:
                b.kill()


@pytest.mark.slow  # about 24 s: make chaos (the default suite has the shorter reassignment and election tests)
def test_a_reassignment_under_load_loses_nothing_and_preferred_election_moves_leadership_back(four, tmp_path):
    """1,2,3 -> 2,3,4 (``reassign-partitions --execute``, ``--verify`` until completed) under
    acks=all idempotent load with min.insync.replicas=2: every acknowledged record is read back
    once, in order. Then broker 2 (the first replica) stops, leadership moves away, it comes back
    into the ISR, and ``leader-election --election-type PREFERRED`` gives it back."""
    bs, topic = four.bootstrap_servers, "moving-under-load"
    r = tool(
        "topics",
        "--bootstrap-server",
        bs,
        "--create",
        "--topic",
        topic,
        "--replica-assignment",
        "1:2:3",
        "--config",
        MIN_ISR_2,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    full_isr(four, topic)
    writer = Writer(bs, topic)
    writer.start()
    try:
        wait_for(lambda: len(writer.acked) > 500, what="load")
        target = tmp_path / "plan.json"
        target.write_text('{"version":1,"partitions":[{"topic":"%s","partition":0,"replicas":[2,3,4]}]}' % topic)
        r = tool("reassign-partitions", "--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(target))
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for(
            lambda: (
                "is completed"
                in tool(
                    "reassign-partitions", "--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(target)
                ).stdout
            ),
            what="the reassignment to complete",
        )
        moved_at = len(writer.acked)
        wait_for(lambda: len(writer.acked) > moved_at + 500, what="load after the move")
    finally:
        writer.stop()
    leader, replicas, isr = describe(four, topic)[0]
    assert (leader, replicas, sorted(isr)) == (2, [2, 3, 4], [2, 3, 4])
    assert not writer.errors, writer.errors[:3]
    final = read_log(bs, topic)
    assert [v for _, v in final] == [b"%08d" % i for i in range(writer.sent)]
    at = dict(final)
    assert all(at.get(o) == v for v, o in writer.acked)

    four.node(2).stop()
    wait_for(lambda: describe(four, topic)[0][0] in (3, 4), what="leadership away from broker 2")
    four.restart(2)
    full_isr(four, topic)
    assert describe(four, topic)[0][0] != 2
    r = tool(
        "leader-election",
        "--bootstrap-server",
        bs,
        "--election-type",
        "PREFERRED",
        "--topic",
        topic,
        "--partition",
        "0",
    )
    assert (
        r.returncode == 0 and f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in r.stdout
    ), r.stdout + r.stderr
    wait_for(lambda: describe(four, topic)[0][0] == 2, what="broker 2 leading again")
    assert [v for _, v in read_log(bs, topic)] == [b"%08d" % i for i in range(writer.sent)]
