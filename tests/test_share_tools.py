"""The share-group tools against a real kesque broker with share groups on: kesque's share
consumer (kesque.client.share_consumer), ``kesque console-share-consumer`` and ``kesque
share-groups``. The oracle tests run Kafka 4.4's own kafka-share-groups.sh against the same
broker and state, and want the same bytes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

import oracle
from conftest import running_broker
from kesque.client.share_consumer import ShareConsumer
from kesque.testing import kafka as K
from test_clients import create_topic
from test_share_groups import produce, set_group_configs
from test_tools import kesque

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("kesque") / "data", {"group.share.enable": "true"}) as b:
        yield b


def fresh(broker, partitions: int = 1, records: int = 10) -> tuple[str, str]:
    """A new topic with ``records`` records (values 0..n-1) in its last partition, and a new
    share group reading from the earliest offset."""
    topic, group = f"st-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, partitions)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(records):
        p.produce(topic, str(i).encode(), partition=partitions - 1)
    p.flush(15)
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
    return topic, group


def share_groups(broker, *args):
    return kesque("share-groups", "--bootstrap-server", broker.bootstrap_servers, *args)


def console(broker, topic, group, *args):
    return kesque(
        "console-share-consumer",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--group",
        group,
        *args,
    )


def table(*rows: str) -> bytes:
    return "".join("\n" + r for r in rows).encode() + b"\n"


def poll_until(c: ShareConsumer, n: int, timeout: float = 30.0) -> list:
    out: list = []
    end = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        out += c.poll(0.5)
    return out


# ---------------------------------------------------------------------- the client
def test_share_consumer_implicit_ack_and_explicit_release_reject(share_broker):
    topic, group = fresh(share_broker, records=5)
    c = ShareConsumer(share_broker.bootstrap_servers, group)
    c.subscribe([topic])
    got = poll_until(c, 5)
    assert sorted(int(m.value) for m in got) == [0, 1, 2, 3, 4]
    assert {m.delivery_count for m in got} == {1}
    assert set(c.commit_sync().values()) == {0}  # implicit: every record accepted
    c.close()
    produce(share_broker, topic, 2)
    e = ShareConsumer(share_broker.bootstrap_servers, group, acknowledgement_mode="explicit")
    e.subscribe([topic])
    first = poll_until(e, 2)
    assert [m.offset for m in first] == [5, 6]
    e.acknowledge(first[0], "release")
    e.acknowledge(first[1], "reject")
    again = poll_until(e, 1)
    assert [(m.offset, m.delivery_count) for m in again] == [(5, 2)]  # released: delivered again
    e.acknowledge(again[0], "accept")
    e.commit_sync()
    assert poll_until(e, 1, timeout=2) == []  # the rejected one is archived, the accepted one done
    e.close()


def test_explicit_mode_wants_every_record_acknowledged(share_broker):
    topic, group = fresh(share_broker, records=2)
    e = ShareConsumer(share_broker.bootstrap_servers, group, acknowledgement_mode="explicit")
    try:
        e.subscribe([topic])
        got = poll_until(e, 2)
        e.acknowledge(got[0])
        with pytest.raises(ValueError, match="must be acknowledged"):
            e.poll(0.1)
    finally:
        e.close()


# ---------------------------------------------------------------------- console-share-consumer
def test_console_share_consumer_prints_delivery_counts_and_acknowledges(share_broker):
    topic, group = fresh(share_broker)
    fmt = ["--formatter-property", "print.delivery=true", "--formatter-property", "print.offset=true"]
    r = console(share_broker, topic, group, "--max-messages", "2", "--release", *fmt)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"Offset:0\tDelivery:1\t0\nOffset:1\tDelivery:1\t1\n"
    assert r.stderr == b"Processed a total of 2 messages\n"
    # released (and the records fetched but not printed, released on close): delivered again
    r = console(share_broker, topic, group, "--max-messages", "3", *fmt)
    assert r.stdout == b"Offset:0\tDelivery:2\t0\nOffset:1\tDelivery:2\t1\nOffset:2\tDelivery:2\t2\n"
    r = share_groups(share_broker, "--describe", "--group", group)
    assert r.stdout == table(
        f"{'GROUP':<15} {'TOPIC':<15} PARTITION  START-OFFSET  LAG",
        f"{group:<15} {topic:<15} 0          3             7",
    )


def test_describe_shows_dashes_for_a_partition_nothing_was_handed_out_from(share_broker):
    """Kafka 4.4 shows `-` for a share-partition a member fetched from but got nothing: its state
    is written at the first acquisition, not at the first fetch (kesque showed 0 / 0)."""
    topic, group = fresh(share_broker, partitions=2, records=3)  # all in partition 1
    assert console(share_broker, topic, group, "--max-messages", "3").stdout == b"0\n1\n2\n"
    r = share_groups(share_broker, "--describe", "--group", group, "--verbose")
    assert r.stdout == table(
        f"{'GROUP':<15} {'TOPIC':<15} PARTITION  LEADER-EPOCH  START-OFFSET  LAG",
        f"{group:<15} {topic:<15} 0          -             -             -",
        f"{group:<15} {topic:<15} 1          0             3             0",
    )


def test_sigterm_stops_the_console_share_consumer_and_its_member_leaves(share_broker):
    """A signal mid-poll left the poll's answer unread on the connection; the leave heartbeat on
    that connection then failed, and the member stayed until its session timed out."""
    topic, group = fresh(share_broker, records=0)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kesque",
            "console-share-consumer",
            "--bootstrap-server",
            share_broker.bootstrap_servers,
            "--topic",
            topic,
            "--group",
            group,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        end = time.monotonic() + 30
        stable = f"\n{group:<15} Stable\n".encode()
        while stable not in share_groups(share_broker, "--list", "--state").stdout and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(2)  # inside a ShareFetch that waits for records
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err) == (143, b"Processed a total of 0 messages\n")
    assert f"\n{group:<15} Empty\n".encode() in share_groups(share_broker, "--list", "--state").stdout


def test_console_share_consumer_usage_errors(share_broker):
    r = console(share_broker, "t", "g", "--reject", "--release")
    assert r.returncode == 1
    assert r.stderr.startswith(b"At most one of --reject and --release may be specified.\n")


# ---------------------------------------------------------------------- share-groups
def test_describe_members_state_and_list_of_a_live_group(share_broker):
    topic, group = fresh(share_broker, partitions=2)
    c = ShareConsumer(share_broker.bootstrap_servers, group, client_id="tool-test")
    try:
        c.subscribe([topic])
        poll_until(c, 10)
        g = group.ljust(15)
        r = share_groups(share_broker, "--describe", "--group", group, "--members", "--verbose")
        assert r.stdout == table(
            f"{'GROUP':<15} {'CONSUMER-ID':<22} HOST            CLIENT-ID       #PARTITIONS  MEMBER-EPOCH  ASSIGNMENT",
            f"{g} {c.member_id} /127.0.0.1      tool-test       2            {c.member_epoch:<13} {topic}:0,1",
        )
        r = share_groups(share_broker, "--describe", "--group", group, "--state")
        host = share_broker.bootstrap_servers
        assert r.stdout == table(
            f"GROUP           {'COORDINATOR (ID)':<25} STATE           #MEMBERS",
            f"{g} {host + '  (1)':<25} Stable          1",
        )
        r = share_groups(share_broker, "--list", "--state", "stable")
        assert f"\n{g} Stable\n".encode() in r.stdout
        r = share_groups(
            share_broker, "--reset-offsets", "--group", group, "--to-earliest", "--all-topics", "--execute"
        )
        assert (r.returncode, r.stdout, r.stderr) == (1, b"", f"Share group '{group}' is not empty.\n".encode())
        r = share_groups(share_broker, "--delete", "--group", group)
        assert (
            r.stdout
            == (
                f"\nError: Deletion of some share groups failed:\n* Group '{group}' could not be deleted "
                f"due to: org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{group}' "
                "is not EMPTY.\n"
            ).encode()
        )
    finally:
        c.close()
    r = share_groups(share_broker, "--describe", "--group", group, "--members")
    assert (r.stdout, r.stderr) == (b"", f"\nShare group '{group}' has no active members.\n".encode())


def test_reset_to_earliest_makes_everything_deliverable_again(share_broker):
    topic, group = fresh(share_broker)
    assert console(share_broker, topic, group, "--max-messages", "10").returncode == 0
    r = share_groups(share_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run")
    plan = table(f"{'GROUP':<15} {'TOPIC':<15} PARTITION  NEW-OFFSET", f"{group:<15} {topic:<15} 0          0")
    assert r.stdout == plan
    assert console(share_broker, topic, group, "--max-messages", "1", "--timeout-ms", "1500").stdout == b""
    r = share_groups(share_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert r.stdout == plan
    r = console(share_broker, topic, group, "--max-messages", "10")
    assert r.stdout == b"".join(b"%d\n" % i for i in range(10))


def test_reset_offsets_of_a_new_group_creates_it(share_broker):
    """AlterShareGroupOffsets on an unknown group id makes an empty share group (Kafka does);
    kesque answered GROUP_ID_NOT_FOUND."""
    topic, _ = fresh(share_broker, records=4)
    group = f"new-{uuid.uuid4().hex[:8]}"
    r = share_groups(
        share_broker, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "2", "--execute"
    )
    assert r.returncode == 0, r.stdout
    assert r.stdout == table(
        f"{'GROUP':<15} {'TOPIC':<15} PARTITION  NEW-OFFSET", f"{group:<15} {topic:<15} 0          2"
    )
    assert f"\n{group:<15} Empty\n".encode() in share_groups(share_broker, "--list", "--state").stdout
    assert console(share_broker, topic, group, "--max-messages", "2").stdout == b"2\n3\n"


def test_delete_offsets_and_delete(share_broker):
    topic, group = fresh(share_broker, records=3)
    console(share_broker, topic, group, "--max-messages", "3")
    r = share_groups(share_broker, "--delete-offsets", "--group", group, "--topic", topic, "--topic", "nope")
    assert r.returncode == 1  # a topic failed (Kafka's tool exits 0)
    assert r.stdout == table(
        f"{'TOPIC':<15} STATUS",
        f"{topic:<15} Successful",
        f"{'nope':<15} Error: This server does not host this topic-partition.",
    )
    r = share_groups(share_broker, "--describe", "--group", group)
    assert r.stdout == f"\nShare group '{group}' has no offset information.\n".encode()
    r = share_groups(share_broker, "--delete", "--group", group)
    assert r.stdout == f"Deletion of requested share groups ('{group}') was successful.\n".encode()
    r = share_groups(share_broker, "--delete", "--group", group)
    assert r.returncode == 1
    assert f"GroupIdNotFoundException: Group '{group}' is not a share group.".encode() in r.stdout


def test_errors_print_as_kafkas_tool_prints_them(share_broker):
    """Outputs of Kafka 4.4's kafka-share-groups.sh on a Kafka broker, same cases."""
    topic, group = fresh(share_broker, records=1)
    r = share_groups(share_broker, "--delete-offsets", "--group", "no-such-sg", "--topic", topic)
    assert (r.returncode, r.stdout) == (
        1,
        (
            "\nError: Group no-such-sg not found.\n\nTOPIC           STATUS\n"
            f"{topic:<15} Error: Group no-such-sg not found.\n"
        ).encode(),
    )
    r = share_groups(
        share_broker, "--reset-offsets", "--group", group, "--topic", "no-such-topic", "--to-earliest", "--dry-run"
    )
    assert r.stdout == (
        b"\nError: Executing share group command failed due to This server does not host this topic-partition.\n"
    )
    assert r.stderr == (
        b"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not "
        b"host this topic-partition.\n"
    )
    r = share_groups(share_broker, "--describe", "--group", group, "--members", "--offsets")
    assert r.returncode == 1
    assert r.stderr.startswith(b"Option [describe] takes at most one of these options: [members], [offsets], [state]\n")


def test_describe_a_missing_group(share_broker):
    r = share_groups(share_broker, "--describe", "--group", "no-such-share-group")
    assert r.returncode == 1
    assert r.stdout == (
        b"\nError: Executing share group command failed due to org.apache.kafka.common.errors."
        b"GroupIdNotFoundException: Group no-such-share-group not found.\n"
    )


# ---------------------------------------------------------------------- Kafka's own tool, same bytes
_ID = re.compile(r"(?<= )[A-Za-z0-9_-]{22}(?= )")


@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_kafka_share_groups_sh_prints_what_kesque_prints(share_broker):
    """kafka-share-groups.sh (Kafka 4.4) and kesque share-groups against the same broker and
    state: stdout byte for byte, for every view."""
    topic, group = fresh(share_broker, partitions=2)
    console(share_broker, topic, group, "--max-messages", "4")
    c = ShareConsumer(share_broker.bootstrap_servers, group, client_id="console-share-consumer")
    bs = ["--bootstrap-server", share_broker.bootstrap_servers]
    views = [
        ["--list", "--state"],
        ["--describe", "--group", group],
        ["--describe", "--group", group, "--verbose"],
        ["--describe", "--group", group, "--state", "--verbose"],
        ["--describe", "--group", "missing-sg"],
    ]
    try:
        c.subscribe([topic])
        poll_until(c, 6)
        for args in views + [["--describe", "--group", group, "--members", "--verbose"]]:
            mine = share_groups(share_broker, *args)
            theirs = K.run_tool("kafka-share-groups.sh", *bs, *args)
            assert _ID.sub("<id>", theirs.stdout) == _ID.sub("<id>", mine.stdout.decode()), args
    finally:
        c.close()
    for args in views + [
        ["--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--dry-run"],
        ["--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "20", "--dry-run", "--export"],
    ]:
        mine = share_groups(share_broker, *args)
        theirs = K.run_tool("kafka-share-groups.sh", *bs, *args)
        assert theirs.stdout == mine.stdout.decode(), args


@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_kafka_console_share_consumer_prints_what_kesque_prints(share_broker):
    """Kafka 4.4's kafka-console-share-consumer.sh (KafkaShareConsumer) and kesque's, each with
    its own new group on the same topic of a kesque broker: the same stdout and stderr."""
    topic, group = fresh(share_broker, records=6)
    other = f"{group}-java"
    set_group_configs(share_broker, other, {"share.auto.offset.reset": "earliest"})
    fmt = [
        "--formatter-property",
        "print.offset=true",
        "--formatter-property",
        "print.delivery=true",
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "null.literal=<none>",
    ]
    for args in (
        ["--max-messages", "2", "--release"],
        ["--max-messages", "3", "--reject"],
        ["--max-messages", "9", "--timeout-ms", "3000"],
    ):
        mine = console(share_broker, topic, group, *fmt, *args)
        theirs = K.run_tool(
            "kafka-console-share-consumer.sh",
            "--bootstrap-server",
            share_broker.bootstrap_servers,
            "--topic",
            topic,
            "--group",
            other,
            *fmt,
            *args,
        )
        assert (mine.stdout.decode(), _STAMP.sub("", mine.stderr.decode())) == (
            theirs.stdout,
            _STAMP.sub("", theirs.stderr),
        ), args


# ---------------------------------------------------------------------- the same scenario on Apache Kafka
class Side:
    """One broker with its own tools: Kafka's scripts on Kafka, kesque's on kesque."""

    def __init__(self, broker, kafka: bool):
        self.broker, self.kafka = broker, kafka
        self.bs = ["--bootstrap-server", broker.bootstrap_servers]

    def run(self, tool: str, *args) -> tuple[int, str, str]:
        if self.kafka:
            r = K.run_tool(f"kafka-{tool}.sh", *self.bs, *args)
            return r.returncode, r.stdout, r.stderr
        r = kesque(tool, *self.bs, *args)
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def spawn(self, *args) -> subprocess.Popen:
        argv = ["console-share-consumer", *self.bs, *args]
        cmd = (
            K.java_command(K.TOOLS["kafka-console-share-consumer.sh"], argv[1:])
            if self.kafka
            else [sys.executable, "-m", "kesque", *argv]
        )
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] ", re.M)


def _scenario(side: Side, topic: str, group: str, csv: str) -> list:
    """What each step prints: (args, stdout, stderr) with ids, ports and times masked."""
    out = []

    def step(tool, *args, stderr=True):
        code, so, se = side.run(tool, *args)
        out.append((tool, args, oracle.mask(so), oracle.mask(_STAMP.sub("[<time>] ", se)) if stderr else None))

    fmt = [
        "--formatter-property",
        "print.partition=true",
        "--formatter-property",
        "print.offset=true",
        "--formatter-property",
        "print.delivery=true",
    ]
    step("console-share-consumer", "--topic", topic, "--group", group, "--max-messages", "4", *fmt)
    step("console-share-consumer", "--topic", topic, "--group", group, "--max-messages", "2", "--release", *fmt)
    step("console-share-consumer", "--topic", topic, "--group", group, "--max-messages", "1", "--reject", *fmt)
    sg = ["--group", group]
    step("share-groups", "--list", "--state")
    step("share-groups", "--list", "--state", "Stable")
    step("share-groups", "--describe", *sg)
    step("share-groups", "--describe", *sg, "--verbose")
    step("share-groups", "--describe", *sg, "--members")
    step("share-groups", "--describe", *sg, "--state")
    live = side.spawn("--topic", topic, "--group", group)
    try:
        end = time.monotonic() + 60
        while "console-share-consumer" not in side.run("share-groups", "--describe", *sg, "--members")[1]:
            assert time.monotonic() < end and live.poll() is None
            time.sleep(0.5)
        step("share-groups", "--describe", *sg, "--members")
        step("share-groups", "--describe", *sg, "--state")
        step("share-groups", "--reset-offsets", *sg, "--topic", topic, "--to-earliest", "--dry-run")
        step("share-groups", "--delete", *sg)
    finally:
        live.send_signal(signal.SIGTERM)
        live.communicate(timeout=60)
    # (no --describe here: Kafka's durable start offset trails the acknowledgement that completed
    # the last records until its next state write - 9 / lag 0 where kesque shows 10 / lag 0)
    step("share-groups", "--reset-offsets", *sg, "--topic", topic, "--to-earliest", "--dry-run")
    step("share-groups", "--reset-offsets", *sg, "--all-topics", "--to-offset", "99", "--dry-run", "--export")
    step("share-groups", "--reset-offsets", *sg, "--from-file", csv, "--execute")
    step("share-groups", "--describe", *sg)
    step(
        "share-groups",
        "--reset-offsets",
        "--group",
        f"{group}-new",
        "--topic",
        f"{topic}:0",
        "--to-latest",
        "--execute",
    )
    step("share-groups", "--delete-offsets", *sg, "--topic", topic, "--topic", f"{topic}-missing")
    step("share-groups", "--describe", *sg)
    step("share-groups", "--delete", *sg)
    step("share-groups", "--delete", *sg, stderr=False)  # Kafka adds a stack trace
    step("share-groups", "--list")
    return out


@pytest.mark.slow
@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_share_tools_print_what_kafkas_print_on_kafka(tmp_path_factory, tmp_path):
    """The same share-group story on Apache Kafka 4.4 (its own scripts) and on kesque (kesque's
    tools): every step prints the same bytes, ids, ports and log times masked."""
    topic, group = "orders", "sg1"
    csv = tmp_path / "plan.csv"
    csv.write_text(f"{topic},0,3\n")
    with oracle.brokers(tmp_path_factory, {"group.share.enable": "true"}) as b:
        results = {}
        for name in ("kafka", "kesque"):
            create_topic(b[name], topic, 1)
            produce(b[name], topic, 10)
            set_group_configs(b[name], group, {"share.auto.offset.reset": "earliest"})
            results[name] = _scenario(Side(b[name], name == "kafka"), topic, group, str(csv))
    assert len(results["kafka"]) == len(results["kesque"])
    for theirs, mine in zip(results["kafka"], results["kesque"]):
        assert mine == theirs
