"""Exactly-once read-process-write end to end: a real broker process, confluent-kafka
processors in subprocesses (tests/eos_processor.py) that the tests SIGKILL and SIGSTOP.

* test_read_process_write_survives_sigkill: one processor (transactional.id "rpw-0") turns
  every input record into f"out-{value}" inside a transaction that also commits the
  consumer's offsets (send_offsets_to_transaction). It is SIGKILLed four times, at random
  points (mostly inside a transaction), and restarted with the same transactional.id: its
  init_transactions fences the dead instance and aborts its open transaction (output records
  and pending offsets), the consumer resumes from the offsets committed with the last
  committed transaction. The read_committed output holds every input value exactly once.

* test_zombie_processor_fenced_by_group_generation (KIP-447): two processors with different
  transactional ids share a group; A stops (SIGSTOP) inside a transaction, after its records
  are written and before its offsets are sent, for longer than its session: the group
  rebalances, B takes all the partitions and reprocesses A's batch. Continued, A's
  send_offsets_to_transaction carries its old member id and generation: the group
  coordinator refuses the TxnOffsetCommit (UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION), an
  abortable error; A aborts, rewinds, rejoins. The read_committed output holds every input
  value exactly once, the read_uncommitted one also A's aborted batch.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.testing.broker import Broker

PROCESSOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eos_processor.py")

BROKER_CONFIG = {
    "group.min.session.timeout.ms": 1000,
    # a producer SIGKILLed inside a transaction is fenced by its successor; a timed-out
    # transaction (none expected here) would be aborted within a second
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}


# ============================================================================ helpers
def wait_until(cond, timeout: float, what: str, interval: float = 0.1, on_timeout=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001  (an admin request that raced a rebalance)
            last = e
        if last is True or (last and not isinstance(last, (Exception, str))):
            return last
        time.sleep(interval)
    extra = on_timeout() if on_timeout else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}{extra}")


class Cluster:
    """The broker plus an AdminClient, topic and record helpers."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.bs = broker.bootstrap_servers
        self.admin = AdminClient({"bootstrap.servers": self.bs})

    def create_topic(self, name: str, partitions: int) -> None:
        for f in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            f.result(15)

    def produce(self, topic: str, values: list[str]) -> None:
        """Plain (non-transactional) records, round-robin over the partitions by key."""
        p = Producer({"bootstrap.servers": self.bs, "linger.ms": 5, "enable.idempotence": True})
        for v in values:
            p.produce(topic, key=v.encode(), value=v.encode())
            p.poll(0)
        assert p.flush(30) == 0

    def end_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": self.bs, "group.id": "eos-watermarks"})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        finally:
            c.close()

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
        res = self.admin.list_consumer_group_offsets([req], require_stable=True)[group].result(10)
        return {tp.partition: tp.offset for tp in res.topic_partitions}

    def describe(self, group: str):
        return self.admin.describe_consumer_groups([group], request_timeout=10)[group].result(10)

    def read_all(self, topic: str, partitions: int, isolation: str, timeout: float = 30.0) -> list[str]:
        """Every record of the topic as seen with ``isolation`` (read up to the partition
        ends: the high watermark, or the last stable offset for read_committed)."""
        c = Consumer(
            {
                "bootstrap.servers": self.bs,
                "group.id": f"eos-reader-{uuid.uuid4().hex[:6]}",
                "isolation.level": isolation,
                "enable.partition.eof": True,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        try:
            c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            out: list[str] = []
            at_end: set[int] = set()
            deadline = time.monotonic() + timeout
            while len(at_end) < partitions:
                assert time.monotonic() < deadline, f"reading {topic} ({isolation}): no end in {timeout}s"
                for m in c.consume(500, 0.2):
                    if m.error():
                        assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                        at_end.add(m.partition())
                    else:
                        at_end.discard(m.partition())
                        out.append(m.value().decode())
            return out
        finally:
            c.close()


class Processor:
    """tests/eos_processor.py in a subprocess; its stdout lines are collected with
    timestamps by a reader thread."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.name = spec["txn_id"]
        self.lines: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, PROCESSOR, json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def events(self, prefix: str, since: float = 0.0) -> list[str]:
        with self.lock:
            return [line for t, line in self.lines if t >= since and line.split(" ", 1)[0] == prefix]

    def committed_records(self, since: float = 0.0) -> int:
        return sum(int(line.split()[1]) for line in self.events("COMMITTED", since))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        assert self.alive(), f"processor {self.name} exited ({self.proc.returncode}): {self.tail()}"

    def tail(self, n: int = 25) -> str:
        with self.lock:
            return "\n  ".join([""] + [line for _t, line in self.lines[-n:]])

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)  # a stopped process dies of SIGKILL too, but be sure
            self.proc.kill()
        self.proc.wait(10)
        self.reader.join(5)


@pytest.fixture
def cluster(tmp_path):
    b = Broker(data_dir=str(tmp_path / "data"), config=BROKER_CONFIG)
    b.start()
    c = Cluster(b)
    try:
        yield c
    finally:
        c.admin = None  # close the AdminClient before the broker goes away
        b.stop()


def check_exactly_once(cluster: Cluster, output: str, partitions: int, inputs: list[str]) -> tuple[list, list]:
    committed = cluster.read_all(output, partitions, "read_committed")
    uncommitted = cluster.read_all(output, partitions, "read_uncommitted")
    expected = sorted(f"out-{v}" for v in inputs)
    seen: dict[str, int] = {}
    for v in committed:
        seen[v] = seen.get(v, 0) + 1
    dups = sorted(v for v, n in seen.items() if n > 1)
    missing = sorted(set(expected) - set(seen))
    unexpected = sorted(set(seen) - set(expected))
    assert not dups, f"{len(dups)} values committed more than once, e.g. {dups[:10]}"
    assert not missing, f"{len(missing)} values never committed, e.g. {missing[:10]}"
    assert not unexpected, f"unexpected values {unexpected[:10]}"
    assert sorted(committed) == expected
    assert len(uncommitted) >= len(committed)
    assert set(uncommitted) >= set(committed)
    return committed, uncommitted


# ============================================================================ A: SIGKILL
N_A = 3000
PARTITIONS_A = 3
KILLS = 4


def test_read_process_write_survives_sigkill(cluster):
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    print(f"seed {seed}")  # shown with a failure: the kill points
    suffix = uuid.uuid4().hex[:8]
    inp, out, group = f"rpw-in-{suffix}", f"rpw-out-{suffix}", f"rpw-{suffix}"
    cluster.create_topic(inp, PARTITIONS_A)
    cluster.create_topic(out, PARTITIONS_A)
    values = [f"v{i:05d}-{suffix}" for i in range(N_A)]
    cluster.produce(inp, values)
    in_ends = cluster.end_offsets(inp, PARTITIONS_A)
    assert sum(in_ends.values()) == N_A

    spec = {
        "bootstrap": cluster.bs,
        "group": group,
        "input": inp,
        "output": out,
        "txn_id": "rpw-0",
        "batch": 40,
        "txn_delay": 0.02,
        "consumer": {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300},
    }
    procs: list[Processor] = []
    try:
        kills = []
        for k in range(KILLS):
            p = Processor(spec)
            procs.append(p)
            # progress: a few transactions committed by this instance, then a random delay
            # (the transaction takes >= txn_delay: most kills land inside one)
            want = rng.randint(2, 6)
            wait_until(
                lambda p=p, want=want: len(p.events("COMMITTED")) >= want or not p.alive(),
                40,
                f"processor instance {k} to commit {want} transactions",
                on_timeout=p.tail,
            )
            p.check_alive()
            time.sleep(rng.uniform(0, 0.06))
            p.kill()
            kills.append(p.committed_records())
        assert sum(kills) < N_A, f"the processor finished before the last kill ({kills}): make batches smaller"

        last = Processor(spec)
        procs.append(last)

        def done():
            last.check_alive()
            return cluster.committed(group, inp, PARTITIONS_A) == in_ends

        wait_until(
            done, 60, "the group's committed offsets to reach the input's end", interval=0.5, on_timeout=last.tail
        )
        last.kill()
        committed, uncommitted = check_exactly_once(cluster, out, PARTITIONS_A, values)
        # the instances' own reports: a kill can land between the EndTxn(commit) request and
        # its response (or the print), so up to one batch per kill committed unreported
        per_instance = [p.committed_records() for p in procs]
        assert N_A - KILLS * spec["batch"] <= sum(per_instance) <= N_A, f"seed {seed}: {per_instance}"
        for p in procs:
            assert not p.events("COMMIT-FAILED") and not p.events("FATAL"), p.tail()
        print(
            f"seed {seed}: committed per instance {per_instance}, "
            f"read_uncommitted {len(uncommitted)} records, read_committed {len(committed)}"
        )
    finally:
        for p in procs:
            p.kill()


# ============================================================================ B: zombie
PARTITIONS_B = 4
SESSION_MS = 3000
HEARTBEAT_MS = 500


def test_zombie_processor_fenced_by_group_generation(cluster, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    inp, out, group = f"zin-{suffix}", f"zout-{suffix}", f"zombie-{suffix}"
    cluster.create_topic(inp, PARTITIONS_B)
    cluster.create_topic(out, PARTITIONS_B)
    pause_file = str(tmp_path / "pause-a")

    def spec(txn_id, **extra):
        return dict(
            {
                "bootstrap": cluster.bs,
                "group": group,
                "input": inp,
                "output": out,
                "txn_id": txn_id,
                "batch": 20,
                "txn_delay": 0.01,
                "consumer": {
                    "session.timeout.ms": SESSION_MS,
                    "heartbeat.interval.ms": HEARTBEAT_MS,
                    "partition.assignment.strategy": "range",
                    "client.id": txn_id,
                },
            },
            **extra,
        )

    # a steady input: 40 records every 0.1 s until told to stop
    values: list[str] = []
    stop_input = threading.Event()
    input_errors: list[BaseException] = []

    def feed():
        try:
            p = Producer({"bootstrap.servers": cluster.bs, "linger.ms": 5, "enable.idempotence": True})
            i = 0
            while not stop_input.is_set():
                for _ in range(40):
                    v = f"z{i:06d}-{suffix}"
                    i += 1
                    p.produce(inp, key=v.encode(), value=v.encode())
                    values.append(v)
                p.poll(0)
                time.sleep(0.1)
            assert p.flush(30) == 0
        except BaseException as e:  # noqa: BLE001
            input_errors.append(e)

    feeder = threading.Thread(target=feed, daemon=True)
    a = b = None
    try:
        a = Processor(spec("z-a", pause_file=pause_file))
        b = Processor(spec("z-b"))

        def both_own():
            d = cluster.describe(group)
            parts = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members}
            return (
                d.state.name == "STABLE"
                and sorted(parts) == ["z-a", "z-b"]
                and all(parts.values())
                and a.events("ASSIGN")
                and b.events("ASSIGN")
            )

        wait_until(
            both_own,
            30,
            "a Stable group with z-a and z-b both owning partitions",
            on_timeout=lambda: a.tail() + b.tail(),
        )
        feeder.start()
        wait_until(
            lambda: len(a.events("COMMITTED")) >= 3 and len(b.events("COMMITTED")) >= 3,
            30,
            "both processors to commit transactions",
            on_timeout=lambda: a.tail() + b.tail(),
        )

        # A stops itself (SIGSTOP) inside its next transaction: records written, offsets not sent
        open(pause_file, "w").close()
        wait_until(lambda: a.events("PAUSE"), 15, "A to stop inside a transaction", on_timeout=a.tail)
        t_pause = time.monotonic()
        paused_batch = int(a.events("PAUSE")[0].split()[1])  # records A wrote in the open transaction

        # B takes every partition once A's session has expired, and commits with them
        def b_owns_all():
            b.check_alive()
            d = cluster.describe(group)
            parts = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members}
            if d.state.name != "STABLE" or parts != {"z-b": list(range(PARTITIONS_B))}:
                return f"{d.state.name} {parts}"
            assigns = b.events("ASSIGN", t_pause)
            if not assigns or assigns[-1] != "ASSIGN " + ",".join(map(str, range(PARTITIONS_B))):
                return f"B's assignments since the pause: {assigns}"
            with b.lock:
                t_assign = max(t for t, line in b.lines if line == assigns[-1])
            return len(b.events("COMMITTED", t_assign)) >= 2

        wait_until(b_owns_all, 30, "B to own all partitions and commit", interval=0.2, on_timeout=b.tail)
        # by A's session expiring (its last heartbeat was at most one interval before the pause)
        assert time.monotonic() - t_pause >= (SESSION_MS - HEARTBEAT_MS) / 1000 - 0.2
        with open(cluster.broker.log_path, errors="replace") as f:
            assert re.search(rf"Member z-a-\S+ in group {group} has failed", f.read()), "A did not expire"
        t_cont = time.monotonic()
        a.signal(signal.SIGCONT)

        # A's offsets (old member id / generation) are refused: it aborts and rejoins
        wait_until(
            lambda: a.events("ABORTED", t_cont) or not a.alive(),
            30,
            "A's transaction to fail and be aborted",
            on_timeout=a.tail,
        )
        a.check_alive()
        failures = a.events("COMMIT-FAILED", t_cont)
        assert failures, a.tail()
        first = failures[0].split()
        # Kafka: the member was removed (UNKNOWN_MEMBER_ID); ILLEGAL_GENERATION had it been kept
        assert first[1] in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"), failures
        assert "abortable=1" in first and "fatal=0" in first, failures

        # A rejoins and processes again
        wait_until(
            lambda: both_own() and a.events("COMMITTED", t_cont),
            40,
            "A to rejoin the group and commit again",
            on_timeout=lambda: a.tail() + b.tail(),
        )
        stop_input.set()
        feeder.join(40)
        assert not feeder.is_alive() and not input_errors, input_errors
        in_ends = cluster.end_offsets(inp, PARTITIONS_B)
        assert sum(in_ends.values()) == len(values)

        def drained():
            a.check_alive()
            b.check_alive()
            return cluster.committed(group, inp, PARTITIONS_B) == in_ends

        wait_until(
            drained, 40, "the processors to drain the input", interval=0.5, on_timeout=lambda: a.tail() + b.tail()
        )
        a.kill()
        b.kill()
        committed, uncommitted = check_exactly_once(cluster, out, PARTITIONS_B, values)
        # A's paused batch was written (read_uncommitted) and aborted (not read_committed)
        assert len(uncommitted) >= len(committed) + paused_batch > len(committed)
        for p in (a, b):
            assert not p.events("FATAL"), p.tail()
        print(
            f"{len(values)} inputs; A committed {a.committed_records()}, B {b.committed_records()}; "
            f"A's failure: {failures[0]}; read_uncommitted {len(uncommitted)}"
        )
    finally:
        stop_input.set()
        for p in (a, b):
            if p is not None:
                p.kill()
        if feeder.is_alive():
            feeder.join(10)
