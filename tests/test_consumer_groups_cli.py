"""``kesque consumer-groups`` / ``kafka-consumer-groups.sh``, the group paths of the console
tools, the ``__consumer_offsets`` decoder of ``dump-log`` and the delivery-semantics
demonstrations of docs/delivery-semantics.md - all against real brokers and real clients."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from kesque.utils import java_string_hash
from test_tools import kesque as run_in_process

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = os.path.dirname(sys.executable)


# ----------------------------------------------------------------- helpers


def kesque(*args, input: str | None = None) -> subprocess.CompletedProcess:
    """``kesque <args>`` in this process (test_tools' runner), output as text."""
    r = run_in_process(*args, input=input)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def cg(bs, *args) -> subprocess.CompletedProcess:
    return kesque("consumer-groups", "--bootstrap-server", bs, *args)


def popen(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kesque", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(bs, topic, partitions=1):
    r = kesque(
        "topics",
        "--bootstrap-server",
        bs,
        "--create",
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "1",
    )
    assert r.returncode == 0, r.stdout + r.stderr


def produce(bs, topic, values, partition=0, timestamp=None):
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for v in values:
        kw = {"timestamp": timestamp} if timestamp is not None else {}
        p.produce(topic, v.encode(), partition=partition, **kw)
    assert p.flush(30) == 0


def consume(bs, topic, group, *extra, n=None, timeout_ms=10000) -> subprocess.CompletedProcess:
    args = ["console-consumer", "--bootstrap-server", bs, "--topic", topic, "--group", group, *extra]
    if n is not None:
        args += ["--max-messages", str(n)]
    return kesque(*args, "--timeout-ms", str(timeout_ms))


def rows(text: str) -> list[dict[str, str]]:
    """The rows of an offsets/members table as {column: value}, cut at the header's column
    starts (a column may be empty, e.g. GROUP-INSTANCE-ID of a dynamic member)."""
    lines = [line for line in text.splitlines() if line.strip()]
    out = []
    cols: list[tuple[str, int]] = []
    for line in lines:
        if line.startswith("GROUP "):
            cols = [(m.group(0), m.start()) for m in re.finditer(r"\S+", line)]
            continue
        if cols and not line.startswith("Error"):
            row = {}
            for i, (col, start) in enumerate(cols):
                end = cols[i + 1][1] if i + 1 < len(cols) else None
                row[col] = line[start:end].strip()
            out.append(row)
    return out


def offsets(bs, group) -> dict[int, dict[str, str]]:
    return {
        int(r["PARTITION"]): r
        for r in rows(cg(bs, "--describe", "--group", group).stdout)
        if r.get("PARTITION", "-") != "-"
    }


def committed(bs, group) -> dict[int, int | None]:
    return {
        p: (None if r["CURRENT-OFFSET"] == "-" else int(r["CURRENT-OFFSET"])) for p, r in offsets(bs, group).items()
    }


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def group_state(bs, group) -> str | None:
    r = cg(bs, "--describe", "--group", group, "--state")
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    return lines[1].split()[4]


class Member:
    """A live group member (confluent-kafka) polling in a background thread."""

    def __init__(self, bs, group, topic, protocol="classic", instance=None, client_id="member", auto_commit=True):
        conf = {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "client.id": client_id,
            "enable.auto.commit": auto_commit,
            "auto.commit.interval.ms": 200,
            "log_level": 0,
        }
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        if instance:
            conf["group.instance.id"] = instance
        self.conf = conf
        self.topic = topic
        self.assigned = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        c = Consumer(self.conf)
        c.subscribe([self.topic], on_assign=lambda cons, parts: parts and self.assigned.set())
        try:
            while not self.stop.is_set():
                c.poll(0.1)
        finally:
            c.close()

    def __enter__(self):
        self.thread.start()
        assert self.assigned.wait(30), "no assignment"
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


@pytest.fixture(scope="module")
def bs(module_broker):
    return module_broker.bootstrap_servers


@pytest.fixture(scope="module")
def data_dir(module_broker):
    return module_broker.data_dir


# ----------------------------------------------------------------- options and usage


def test_help_and_argument_checks(bs):
    r = kesque("consumer-groups", "--help")
    assert r.returncode == 0
    assert r.stdout.startswith(
        "This tool helps to list all consumer groups, describe a consumer group, delete "
        "consumer group info, or reset consumer group offsets.\nOption"
    )
    for flag in (
        "--all-groups",
        "--by-duration",
        "--delete-offsets",
        "--from-file",
        "--members",
        "--shift-by",
        "--to-datetime",
        "--type [String: type]",
        "--state [String: state]",
    ):
        assert flag in r.stdout

    def usage(*args) -> str:
        r = cg(bs, *args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "Option                                   Description" in r.stderr
        return r.stderr.splitlines()[0]

    assert usage() == (
        "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets"
    )
    assert usage("--list", "--describe", "--all-groups").startswith("Command must include exactly one action")
    assert usage("--describe") == "Option [describe] takes one of these options: [all-groups], [group]"
    assert usage("--describe", "--group", "g", "--members", "--state") == (
        "Option [describe] takes at most one of these options: [members], [offsets], [state]"
    )
    assert usage("--describe", "--group", "g", "--state", "stable") == (
        "Option [describe] does not take a value for [state]"
    )
    assert usage("--delete", "--group", "g", "--topic", "t") == (
        "The consumer does not support topic-specific offset deletion from a consumer group."
    )
    assert usage("--delete-offsets", "--group", "g") == (
        "Option [delete-offsets] takes the following options: [topic], [group]"
    )
    assert usage("--reset-offsets", "--group", "g", "--dry-run", "--execute") == (
        "Option [reset-offsets] only accepts one of [execute] and [dry-run]"
    )
    assert usage("--reset-offsets", "--group", "g", "--to-earliest", "--to-latest", "--dry-run") == (
        'Option "[to-earliest]" can\'t be used with option "[to-latest]"'
    )
    assert usage("--describe", "--group", "g", "--all-groups") == (
        'Option "[group]" can\'t be used with option "[all-groups]"'
    )
    assert usage("--describe", "--group", "g", "--topic", "t") == (
        'Option "[topic]" can\'t be used with option "[describe]"'
    )
    assert usage("--list", "--state", "bogus") == (
        "Invalid state list 'bogus'. Valid states are: PreparingRebalance, CompletingRebalance, Stable, Dead, Empty, "
        "Assigning, Reconciling"
    )
    assert usage("--list", "--type", "bogus") == "Invalid types list 'bogus'. Valid types are: Consumer, Classic, Share"
    r = cg(bs, "--list", "--members")
    assert r.returncode == 1
    assert "joptsimple.UnavailableOptionException: Option(s) [members] are unavailable" in r.stderr
    r = kesque("consumer-groups", "--list")
    assert r.returncode == 1 and r.stderr.startswith('Missing required argument "[bootstrap-server]"')
    # a reset without --execute plans only, and says so
    r = cg(bs, "--reset-offsets", "--group", name("g"), "--to-earliest")
    assert r.returncode == 1  # ... and here lacks a scope
    assert r.stderr.startswith("WARN: No action will be performed as the --execute option is missing.In a future")
    assert "One of the reset scopes should be defined: --all-topics, --topic." in r.stderr


def test_console_script(bs):
    path = os.path.join(BIN, "kafka-consumer-groups.sh")
    if not os.path.exists(path):
        pytest.skip("kafka-consumer-groups.sh console script not installed (pip install -e .)")
    r = subprocess.run(
        [path, "--bootstrap-server", bs, "--describe", "--group", name("none")], capture_output=True, timeout=60
    )
    assert r.returncode == 1  # Kafka's tool exits 0 after its own "Error:"; kesque issue 11 wants non-zero
    assert r.stdout.decode().endswith("' does not exist.\n") and r.stdout.startswith(b"\nError: Consumer group '")


# ----------------------------------------------------------------- --list


def test_list_with_state_and_type_filters(bs, tmp_path):
    topic = name("lst")
    create(bs, topic, 2)
    produce(bs, topic, [f"v{i}" for i in range(4)])
    empty, classic, kip848 = name("empty"), name("classic"), name("kip848")
    r = consume(bs, topic, empty, "--from-beginning", n=2)
    assert r.returncode == 0, r.stderr
    with Member(bs, classic, topic), Member(bs, kip848, topic, protocol="consumer"):
        wait_for(
            lambda: group_state(bs, classic) == "Stable" and group_state(bs, kip848) == "Stable", what="stable groups"
        )
        listed = cg(bs, "--list").stdout.splitlines()
        assert {empty, classic, kip848} <= set(listed)

        r = cg(bs, "--list", "--state")
        lines = r.stdout.splitlines()
        width = max(15, *(len(g) for g in listed)) + 10
        assert lines[0] == f"{'GROUP':<{width}} {'STATE':<20}"
        states = {line.split()[0]: line.split()[1] for line in lines[1:]}
        assert states[empty] == "Empty" and states[classic] == "Stable" and states[kip848] == "Stable"
        assert f"{classic:<{width}} {'Stable':<20}" in lines

        stable = [line.split()[0] for line in cg(bs, "--list", "--state", "stable").stdout.splitlines()[1:]]
        assert classic in stable and kip848 in stable and empty not in stable
        both = [line.split()[0] for line in cg(bs, "--list", "--state", "Stable,EMPTY").stdout.splitlines()[1:]]
        assert {empty, classic, kip848} <= set(both)

        r = cg(bs, "--list", "--type")
        types = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()[1:]}
        assert r.stdout.splitlines()[0].split() == ["GROUP", "TYPE"]
        assert types[empty] == "Classic" and types[classic] == "Classic" and types[kip848] == "Consumer"

        # --command-config configures the admin client
        cfg = tmp_path / "admin.properties"
        cfg.write_text("# admin settings\nclient.id=cg-admin\nsocket.timeout.ms=30000\n")
        r = cg(bs, "--list", "--command-config", str(cfg))
        assert r.returncode == 0 and r.stderr == "" and {empty, classic, kip848} <= set(r.stdout.splitlines())

        only = cg(bs, "--list", "--type", "consumer").stdout.splitlines()[1:]
        assert kip848 in [line.split()[0] for line in only]
        assert classic not in [line.split()[0] for line in only]
        r = cg(bs, "--list", "--type", "classic", "--state", "empty")
        assert r.stdout.splitlines()[0].split() == ["GROUP", "TYPE", "STATE"]
        picked = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[1:]}
        assert picked[empty] == ["Classic", "Empty"] and classic not in picked and kip848 not in picked


# ----------------------------------------------------------------- --describe


def _offsets_line(widths, *cols) -> str:
    wg, wt, wc, wh = widths
    g, t, p, cur, leo, lag, cid, host, client = cols
    return f"{g:<{wg}} {t:<{wt}} {p:<10} {cur:<15} {leo:<15} {lag:<15} {cid:<{wc}} {host:<{wh}} {client}"


def test_describe_lag_follows_producer_and_consumer(bs):
    topic = name("lag")
    group = name("lag")
    create(bs, topic, 2)
    for p in (0, 1):
        produce(bs, topic, [f"p{p}-{i}" for i in range(5)], partition=p)
    r = consume(bs, topic, group, "--from-beginning", n=10)
    assert r.returncode == 0 and r.stderr.endswith("Processed a total of 10 messages\n")

    r = cg(bs, "--describe", "--group", group)
    assert r.returncode == 0
    assert r.stderr == f"\nConsumer group '{group}' has no active members.\n"
    widths = (15, max(15, len(topic)), 15, 15)
    header = _offsets_line(
        widths,
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    assert r.stdout.startswith("\n" + header + "\n")
    body = r.stdout.splitlines()[2:]
    assert sorted(body) == sorted(
        _offsets_line(widths, group, topic, str(p), "5", "5", "0", "-", "-", "-") for p in (0, 1)
    )

    # a producer writes while the group is stopped: the lag grows
    seen = []
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            produce(bs, topic, [f"more-{i}"], partition=i % 2)
            i += 1
            time.sleep(0.02)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(4):
            time.sleep(0.3)
            seen.append(sum(int(r["LAG"]) for r in offsets(bs, group).values()))
    finally:
        stop.set()
        writer.join()
    assert seen == sorted(seen) and seen[-1] > seen[0] > 0, seen
    final = offsets(bs, group)
    for row in final.values():
        assert int(row["LAG"]) == int(row["LOG-END-OFFSET"]) - int(row["CURRENT-OFFSET"])
        assert row["CURRENT-OFFSET"] == "5"

    # a member joins and catches up: the lag shrinks to 0, the rows name the member
    proc = popen(
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--group",
        group,
        "--consumer-property",
        "auto.commit.interval.ms=100",
        "--consumer-property",
        "client.id=lagger",
    )
    try:

        def caught_up():
            rs = offsets(bs, group)
            return rs if all(r["LAG"] == "0" and r["CONSUMER-ID"] != "-" for r in rs.values()) else None

        rs = wait_for(caught_up, what="the group catching up")
        assert {r["HOST"] for r in rs.values()} == {"/127.0.0.1"}
        assert {r["CLIENT-ID"] for r in rs.values()} == {"lagger"}
        assert len({r["CONSUMER-ID"] for r in rs.values()}) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_describe_members_and_state_classic_and_kip848(bs, module_broker):
    topic = name("mem")
    create(bs, topic, 3)
    produce(bs, topic, ["x"])
    classic, kip848 = name("classic"), name("kip848")
    with (
        Member(bs, classic, topic, instance="static-1", client_id="cl-a"),
        Member(bs, classic, topic, client_id="cl-b"),
        Member(bs, kip848, topic, protocol="consumer", client_id="kip"),
    ):
        wait_for(
            lambda: group_state(bs, classic) == "Stable" and group_state(bs, kip848) == "Stable", what="stable groups"
        )

        def assigned_everywhere():
            r = cg(bs, "--describe", "--group", classic, "--members")
            ms = rows(r.stdout)
            return r if len(ms) == 2 and sum(int(m["#PARTITIONS"]) for m in ms) == 3 else None

        r = wait_for(assigned_everywhere, what="both members assigned")
        lines = r.stdout.splitlines()
        assert lines[0] == ""
        ids = [line.split()[1] for line in lines[2:]]
        wc = max(15, *(len(i) for i in ids))
        assert lines[1] == (
            f"{'GROUP':<{max(15, len(classic))}} {'CONSUMER-ID':<{wc}} {'GROUP-INSTANCE-ID':<17} "
            f"{'HOST':<15} {'CLIENT-ID':<15} {'#PARTITIONS':<15} "
        )
        by_client = {line.split()[-2]: line for line in lines[2:]}
        assert "static-1" in by_client["cl-a"]

        r = cg(bs, "--describe", "--group", classic, "--members", "--verbose")
        lines = r.stdout.splitlines()
        assert lines[1].endswith("#PARTITIONS     ASSIGNMENT")
        assignments = [line.rsplit(None, 1)[1] for line in lines[2:]]
        parts = sorted(
            p for a in assignments for p in re.fullmatch(re.escape(topic) + r"\(([\d,]+)\)", a).group(1).split(",")
        )
        assert parts == ["0", "1", "2"]

        r = cg(bs, "--describe", "--group", classic, "--state")
        coordinator = f"{module_broker.host}:{module_broker.port}  (1)"
        w = max(25, len(coordinator))
        assert r.stdout == (
            f"\n{'GROUP':<{w}} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<15} "
            f"#MEMBERS\n{classic:<{w}} {coordinator:<25} {'range':<20} {'Stable':<15} 2\n"
        )

        # KIP-848 (consumer protocol) groups are described through ConsumerGroupDescribe
        r = cg(bs, "--describe", "--group", kip848, "--members", "--verbose")
        (m,) = rows(r.stdout)
        assert m["CLIENT-ID"] == "kip" and m["#PARTITIONS"] == "3" and m["ASSIGNMENT"] == f"{topic}(0,1,2)"
        assert "GROUP-INSTANCE-ID" not in r.stdout
        r = cg(bs, "--describe", "--group", kip848, "--state")
        fields = r.stdout.splitlines()[2].split()
        assert fields[0] == kip848 and fields[4] == "Stable" and fields[5] == "1"
        assert fields[3] == "uniform"
        r = cg(bs, "--describe", "--group", kip848, "--offsets")
        rs = rows(r.stdout)
        assert sorted(int(x["PARTITION"]) for x in rs) == [0, 1, 2]
        assert {x["CONSUMER-ID"] for x in rs} == {m["CONSUMER-ID"]} and {x["CLIENT-ID"] for x in rs} == {"kip"}

        # several groups at once, sorted by group id
        r = cg(bs, "--describe", "--group", kip848, "--group", classic, "--state")
        assert [line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith("GROUP")] == sorted(
            [classic, kip848]
        )
        r = cg(bs, "--describe", "--all-groups", "--state")
        described = [line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith("GROUP")]
        assert {classic, kip848} <= set(described) and described == sorted(described)
    # everybody left: Empty, no members, the committed offsets remain
    wait_for(lambda: group_state(bs, kip848) == "Empty", what="the KIP-848 group emptying")
    r = cg(bs, "--describe", "--group", kip848, "--members")
    assert r.stderr == f"\nConsumer group '{kip848}' has no active members.\n"
    assert r.stdout.splitlines()[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert len(r.stdout.splitlines()) == 2


def test_describe_unknown_group(bs):
    g = name("ghost")
    assert cg(bs, "--describe", "--group", g).stdout == f"\nError: Consumer group '{g}' does not exist.\n"
    assert cg(bs, "--describe", "--group", g, "--state").stdout == f"\nError: Consumer group '{g}' does not exist.\n"


# ----------------------------------------------------------------- --reset-offsets

OLD = 1577836800000  # 2020-01-01T00:00:00Z
NEWER = 1609459200000  # 2021-01-01T00:00:00Z


def _plan(text: str) -> dict[tuple[str, int], int]:
    lines = text.splitlines()
    assert lines[0] == "" and lines[1] == f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}"
    out = {}
    for line in lines[2:]:
        g, t, p, o = line.split()
        assert line == f"{g:<30} {t:<30} {p:<10} {o:<15}"
        out[(t, int(p))] = int(o)
    return out


def test_reset_offsets_every_scenario(bs, tmp_path):
    topic = name("rst")
    group = name("rst")
    create(bs, topic, 2)
    for p in (0, 1):
        produce(bs, topic, [f"old-{p}-{i}" for i in range(5)], partition=p, timestamp=OLD)
        produce(bs, topic, [f"new-{p}-{i}" for i in range(5)], partition=p, timestamp=NEWER)
    assert consume(bs, topic, group, "--from-beginning", n=20).returncode == 0
    assert committed(bs, group) == {0: 10, 1: 10}

    def reset(*args, execute=True):
        r = cg(bs, "--reset-offsets", "--group", group, *args, "--execute" if execute else "--dry-run")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Error" not in r.stdout, r.stdout
        return r

    # dry run: a plan, nothing moves
    assert _plan(reset("--topic", topic, "--to-earliest", execute=False).stdout) == {(topic, 0): 0, (topic, 1): 0}
    assert committed(bs, group) == {0: 10, 1: 10}
    # each scenario, executed
    assert _plan(reset("--topic", topic, "--to-earliest").stdout) == {(topic, 0): 0, (topic, 1): 0}
    assert committed(bs, group) == {0: 0, 1: 0}
    reset("--all-topics", "--to-latest")
    assert committed(bs, group) == {0: 10, 1: 10}
    assert _plan(reset("--topic", f"{topic}:0", "--to-offset", "3").stdout) == {(topic, 0): 3}
    assert committed(bs, group) == {0: 3, 1: 10}
    reset("--all-topics", "--shift-by", "-2")
    assert committed(bs, group) == {0: 1, 1: 8}
    r = reset("--all-topics", "--shift-by", "-5")  # below the log start: clamped, with Kafka's warning
    assert committed(bs, group) == {0: 0, 1: 3}
    assert re.search(
        rf"WARN New offset \(-4\) is lower than earliest offset for topic partition {topic}-0\. Value "
        r"will be set to 0 \(org\.apache\.kafka\.tools\.consumer\.group\.ConsumerGroupCommand\)",
        r.stderr,
    )
    r = reset("--topic", f"{topic}:1", "--to-offset", "99")
    assert committed(bs, group) == {0: 0, 1: 10}
    assert (
        f"New offset (99) is higher than latest offset for topic partition {topic}-1. Value will be set to 10"
        in r.stderr
    )
    reset("--topic", topic, "--to-datetime", "2020-06-01T00:00:00.000")  # first record at or after it
    assert committed(bs, group) == {0: 5, 1: 5}
    reset("--topic", topic, "--to-datetime", "2020-06-01T02:00:00.000+02:00")
    assert committed(bs, group) == {0: 5, 1: 5}
    reset("--topic", topic, "--by-duration", "P3650D")  # ten years back: before every record
    assert committed(bs, group) == {0: 0, 1: 0}
    r = reset("--topic", topic, "--by-duration", "PT1S")  # nothing that recent: Kafka falls back to the end
    assert committed(bs, group) == {0: 10, 1: 10}
    assert f"\nWarn: Partition 0 from topic {topic} is empty. Falling back to latest known offset." in r.stdout
    reset("--topic", f"{topic}:0", "--to-offset", "4")
    assert _plan(reset("--all-topics", "--to-current").stdout) == {(topic, 0): 4, (topic, 1): 10}
    assert committed(bs, group) == {0: 4, 1: 10}

    # --export writes the plan as CSV, --from-file reads one
    r = reset("--all-topics", "--to-offset", "6", execute=False)
    r = cg(bs, "--reset-offsets", "--group", group, "--all-topics", "--to-offset", "6", "--dry-run", "--export")
    assert sorted(r.stdout.splitlines()[:-1]) == [f"{topic},0,6", f"{topic},1,6"] and r.stdout.endswith("\n\n")
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,7\n{topic},1,2\n")
    assert _plan(reset("--from-file", str(plan)).stdout) == {(topic, 0): 7, (topic, 1): 2}
    assert committed(bs, group) == {0: 7, 1: 2}

    # the next consumer of the group starts exactly there
    r = consume(bs, topic, group, "--property", "print.partition=true", "--property", "print.offset=true", n=11)
    assert r.returncode == 0, r.stderr
    seen: dict[int, list[int]] = {0: [], 1: []}
    for line in r.stdout.splitlines():
        part, off, _value = line.split("\t")
        seen[int(part.split(":")[1])].append(int(off.split(":")[1]))
    assert seen == {0: [7, 8, 9], 1: list(range(2, 10))}
    assert committed(bs, group) == {0: 10, 1: 10}

    # errors Kafka reports: shifting a partition without a committed offset is a usage error,
    # a bad date or duration an "Error:" line
    r = cg(bs, "--reset-offsets", "--group", name("fresh"), "--topic", topic, "--shift-by", "1", "--dry-run")
    assert r.returncode == 1
    assert r.stderr.startswith(f"Cannot shift offset for partition {topic}-")
    r = cg(
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-datetime",
        "2020-13-01T00:00:00.000",
        "--dry-run",
    )
    assert r.stdout == (
        "\nError: Executing consumer group command failed due to java.text.ParseException: "
        'Unparseable date: "2020-13-01T00:00:00.000Z"\n'
    )
    r = cg(bs, "--reset-offsets", "--group", group, "--topic", topic, "--by-duration", "1 hour", "--dry-run")
    assert r.stdout == (
        "\nError: Executing consumer group command failed due to java.time.format."
        "DateTimeParseException: Text cannot be parsed to a Duration\n"
    )
    # a group that does not exist yet can be given a position (it is Dead, so inactive)
    fresh = name("fresh")
    reset_fresh = cg(bs, "--reset-offsets", "--group", fresh, "--topic", topic, "--to-offset", "1", "--execute")
    assert _plan(reset_fresh.stdout) == {(topic, 0): 1, (topic, 1): 1}
    assert committed(bs, fresh) == {0: 1, 1: 1}


def test_reset_and_delete_refused_on_an_active_group(bs):
    topic = name("act")
    group = name("act")
    create(bs, topic, 1)
    produce(bs, topic, ["a", "b", "c"])
    with Member(bs, group, topic):
        wait_for(lambda: committed(bs, group).get(0) == 3, what="the member's commit")
        r = cg(bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert r.returncode == 1
        assert r.stdout == (
            f"\nError: Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is Stable.\n\n{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} "
            f"{'NEW-OFFSET':<15}\n"
        )
        assert committed(bs, group) == {0: 3}
        r = cg(bs, "--delete", "--group", group)
        assert r.stdout == (
            "\nError: Deletion of some consumer groups failed:\n"
            f"* Group '{group}' could not be deleted due to: java.util.concurrent.ExecutionException: "
            "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.\n"
        )
        r = cg(bs, "--delete-offsets", "--group", group, "--topic", topic)
        assert r.stdout == (
            "\nError: Encounter some partition level error, see the follow-up details:\n"
            f"\n{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}"
            f"\n{topic:<30} {'0':<15} Error: :org.apache.kafka.common.errors."
            "GroupSubscribedToTopicException: Deleting offsets of a topic is forbidden while the "
            "consumer group is actively subscribed to it.\n"
        )
        assert committed(bs, group) == {0: 3}


def test_delete_offsets_and_delete_group(bs):
    topic, other = name("del"), name("del")
    group = name("del")
    create(bs, topic, 2)
    create(bs, other, 1)
    produce(bs, topic, ["a", "b"], partition=0)
    produce(bs, topic, ["c"], partition=1)
    produce(bs, other, ["d"])
    assert consume(bs, topic, group, "--from-beginning", n=3).returncode == 0
    r = cg(bs, "--reset-offsets", "--group", group, "--topic", other, "--to-latest", "--execute")
    assert "Error" not in r.stdout
    assert {(x["TOPIC"], x["PARTITION"]) for x in rows(cg(bs, "--describe", "--group", group).stdout)} == {
        (topic, "0"),
        (topic, "1"),
        (other, "0"),
    }

    r = cg(bs, "--delete-offsets", "--group", group, "--topic", f"{topic}:0", "--topic", "no-such-topic")
    assert r.stdout == (
        f"Request succeed for deleting offsets with topic {topic}:0, no-such-topic group {group}\n"
        f"\n{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}"
        f"\n{topic:<30} {'0':<15} {'Successful':<15}"
        f"\n{'no-such-topic':<30} {'Not Provided':<15} Error: :org.apache.kafka.common.errors."
        "UnknownTopicOrPartitionException: This server does not host this topic-partition.\n"
    )
    assert {(x["TOPIC"], x["PARTITION"]) for x in rows(cg(bs, "--describe", "--group", group).stdout)} == {
        (topic, "1"),
        (other, "0"),
    }
    r = cg(bs, "--delete-offsets", "--group", group, "--topic", other)
    assert f"\n{other:<30} {'0':<15} {'Successful':<15}\n" in r.stdout
    r = cg(bs, "--delete-offsets", "--group", name("nobody"), "--topic", f"{topic}:1")
    assert r.stdout.startswith("\nError: '") and "' does not exist.\n" in r.stdout
    assert "GroupIdNotFoundException: The group id does not exist." in r.stdout

    r = cg(bs, "--delete", "--group", group)
    assert r.stdout == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert group not in cg(bs, "--list").stdout.splitlines()
    assert cg(bs, "--describe", "--group", group).stdout == f"\nError: Consumer group '{group}' does not exist.\n"
    r = cg(bs, "--delete", "--group", group)
    assert r.stdout == (
        "\nError: Deletion of some consumer groups failed:\n"
        f"* Group '{group}' could not be deleted due to: java.util.concurrent.ExecutionException: "
        "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist.\n"
    )
    # the deleted group starts over from auto.offset.reset
    r = consume(bs, topic, group, "--from-beginning", n=3)
    assert sorted(r.stdout.split()) == ["a", "b", "c"]


# ----------------------------------------------------------------- console tools in a group


def test_console_consumer_group_commits_what_it_printed(bs):
    topic = name("cc")
    group = name("cc")
    create(bs, topic, 1)
    produce(bs, topic, [f"m{i}" for i in range(10)])
    # one poll returns all ten records; only the three printed are committed (Kafka's
    # ConsoleConsumer seeks back to the first unprinted record before closing)
    r = consume(bs, topic, group, "--from-beginning", n=3)
    assert r.stdout.split() == ["m0", "m1", "m2"] and r.returncode == 0
    assert committed(bs, group) == {0: 3}
    r = consume(bs, topic, group, n=4)
    assert r.stdout.split() == ["m3", "m4", "m5", "m6"]
    assert committed(bs, group) == {0: 7}
    # enable.auto.commit=false: consumes from the committed position, commits nothing
    r = consume(bs, topic, group, "--consumer-property", "enable.auto.commit=false", n=3)
    assert r.stdout.split() == ["m7", "m8", "m9"]
    assert committed(bs, group) == {0: 7}
    # a group id given as a consumer property is the same group
    r = kesque(
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--consumer-property",
        f"group.id={group}",
        "--max-messages",
        "3",
        "--timeout-ms",
        "10000",
    )
    assert r.stdout.split() == ["m7", "m8", "m9"]
    assert committed(bs, group) == {0: 10}
    # without any commit a new group has no rows at all
    fresh = name("cc")
    consume(bs, topic, fresh, "--from-beginning", "--consumer-property", "enable.auto.commit=false", n=1)
    r = cg(bs, "--describe", "--group", fresh)
    assert r.stdout == "" and r.stderr == f"\nConsumer group '{fresh}' has no active members.\n"


def test_consumer_perf_test_in_a_group(bs):
    topic = name("perf")
    group = name("perf")
    create(bs, topic, 2)
    for p in (0, 1):
        produce(bs, topic, ["x" * 100] * 250, partition=p)
    r = kesque(
        "consumer-perf-test",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--group",
        group,
        "--messages",
        "500",
        "--timeout",
        "20000",
    )
    assert r.returncode == 0, r.stderr
    fields = r.stdout.splitlines()[1].split(", ")
    assert fields[4] == "500"
    assert int(fields[6]) > 0  # the time to join the group is rebalance time ...
    assert int(fields[7]) >= 0  # ... and not part of the fetch time
    assert committed(bs, group) == {0: 250, 1: 250}


# ----------------------------------------------------------------- restart


def test_groups_and_offsets_survive_a_broker_restart(broker):
    bs = broker.bootstrap_servers
    topic = name("rs")
    classic, kip848 = name("rs"), name("rs848")
    create(bs, topic, 2)
    produce(bs, topic, ["a", "b", "c"], partition=0)
    produce(bs, topic, ["d"], partition=1)
    assert consume(bs, topic, classic, "--from-beginning", n=4).returncode == 0
    with Member(bs, kip848, topic, protocol="consumer"):
        wait_for(lambda: committed(bs, kip848) == {0: 3, 1: 1}, what="the KIP-848 member's commits")
    cg(bs, "--reset-offsets", "--group", classic, "--topic", f"{topic}:0", "--to-offset", "1", "--execute")
    simple = name("rs-simple")  # a group that only ever had offsets committed for it
    cg(bs, "--reset-offsets", "--group", simple, "--topic", topic, "--to-latest", "--execute")
    before = cg(bs, "--describe", "--group", classic, "--group", kip848, "--group", simple).stdout
    assert committed(bs, classic) == {0: 1, 1: 1}
    assert committed(bs, simple) == {0: 3, 1: 1}

    broker.stop()
    broker.start()
    after = wait_for(
        lambda: cg(bs, "--describe", "--group", classic, "--group", kip848, "--group", simple).stdout or None,
        what="describe after the restart",
    )
    assert after == before
    assert {classic, kip848, simple} <= set(cg(bs, "--list").stdout.splitlines())
    r = cg(bs, "--list", "--type", "--state")
    listed = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[1:]}
    assert listed[classic] == ["Classic", "Empty"] and listed[kip848] == ["Consumer", "Empty"]
    assert listed[simple] == ["Classic", "Empty"]
    # and the group goes on from there
    r = consume(bs, topic, classic, "--property", "print.offset=true", n=2)
    assert sorted(r.stdout.splitlines()) == ["Offset:1\tb", "Offset:2\tc"]

    # a crash (SIGKILL) keeps them too: commits are acknowledged writes of __consumer_offsets
    broker.kill()
    broker.start()
    assert wait_for(lambda: committed(bs, classic) or None, what="offsets after the crash") == {0: 3, 1: 1}
    assert committed(bs, kip848) == {0: 3, 1: 1}


# ----------------------------------------------------------------- dump-log --offsets-decoder


def _offsets_partition(data_dir: str, group: str) -> str:
    n = sum(1 for d in os.listdir(data_dir) if d.startswith("__consumer_offsets-"))
    p = (java_string_hash(group) & 0x7FFFFFFF) % n
    return os.path.join(data_dir, f"__consumer_offsets-{p}", "00000000000000000000.log")


def test_offsets_decoder_on_a_real_segment(bs, data_dir):
    topic = name("dec")
    group = name("dec")
    create(bs, topic, 1)
    produce(bs, topic, ["a", "b"])
    assert consume(bs, topic, group, "--from-beginning", n=2).returncode == 0
    cg(bs, "--delete-offsets", "--group", group, "--topic", topic)
    kip848 = name("dec848")
    with Member(bs, kip848, topic, protocol="consumer", client_id="dec-client"):
        wait_for(lambda: committed(bs, kip848) == {0: 2}, what="the KIP-848 commit")

    log = _offsets_partition(data_dir, group)
    r = kesque("dump-log", "--offsets-decoder", "--files", log)
    assert r.returncode == 0, r.stderr
    mine = [line for line in r.stdout.splitlines() if f'"group":"{group}"' in line]
    commit_key = f'key: {{"type":"1","data":{{"group":"{group}","topic":"{topic}","partition":0}}}}'
    commits = [line for line in mine if commit_key in line]
    assert len(commits) == 2  # the commit, then the tombstone of --delete-offsets
    assert re.search(
        r' payload: \{"version":"3","data":\{"offset":2,"leaderEpoch":0,"metadata":"",'
        r'"commitTimestamp":\d{13}\}\}$',
        commits[0],
    ), commits[0]
    assert commits[1].endswith(" payload: <DELETE>")
    assert re.match(
        r"^\| offset: \d+ CreateTime: \d{13} keySize: \d+ valueSize: \d+ sequence: -1 headerKeys: \[\] "
        r"key: ",
        commits[0],
    )
    meta = [line for line in mine if f'key: {{"type":"2","data":{{"group":"{group}"}}}}' in line]
    joined = [line for line in meta if '"protocolType":"consumer","generation":1,"protocol":"range"' in line]
    assert joined, meta
    assert f'"subscription":{{"topics":["{topic}"],' in joined[0]
    assert f'"assignment":{{"assignedPartitions":[{{"topic":"{topic}","partitions":[0]}}],' in joined[0]
    assert '"clientId":"console-consumer","clientHost":"/127.0.0.1"' in joined[0]

    r = kesque("dump-log", "--offsets-decoder", "--files", _offsets_partition(data_dir, kip848))
    lines = [line for line in r.stdout.splitlines() if f'"groupId":"{kip848}"' in line]
    types = {re.search(r'key: \{"type":"(\d)"', line).group(1) for line in lines}
    assert {"3", "5", "6", "7", "8"} <= types, types
    member = next(line for line in lines if 'key: {"type":"5"' in line)
    assert re.search(
        r'payload: \{"version":"0","data":\{"instanceId":null,"rackId":null,"clientId":"dec-client",'
        rf'"clientHost":"/127.0.0.1","subscribedTopicNames":\["{topic}"\]',
        member,
    ), member
    assert any(
        re.search(r'"topicPartitions":\[\{"topicId":"[A-Za-z0-9_-]{22}","partitions":\[0\]\}\]', line)
        for line in lines
        if 'key: {"type":"7"' in line
    )


def test_offsets_decoder_matches_kafkas_parser():
    """The cases of Kafka's DumpLogSegmentsTest.testOffsetsMessageParser, byte for byte."""
    import struct

    from kesque.cli.dump_log import DumpError, offsets_key_value
    from kesque.coordinator.group import records as gr

    class Rec:
        def __init__(self, key, value, offset=0):
            self.key, self.value, self.offset = key, value, offset

    def s16(x):
        b = x.encode()
        return struct.pack(">h", len(b)) + b

    key3 = gr.encode_key(3, {"group": "group"})
    assert offsets_key_value(Rec(key3, gr.encode_value(3, {"epoch": 10}))) == (
        '{"type":"3","data":{"groupId":"group"}}',
        '{"version":"0","data":{"epoch":10}}',
    )
    assert offsets_key_value(Rec(key3, None)) == ('{"type":"3","data":{"groupId":"group"}}', "<DELETE>")
    assert offsets_key_value(Rec(struct.pack(">h", 32767) + s16("group"), b"")) == (
        "Unknown record type 32767 at offset 0, skipping.",
        None,
    )
    with pytest.raises(
        DumpError,
        match="Failed to decode message at offset 0 using offset topic decoder "
        r"\(message had a missing key\)",
    ):
        offsets_key_value(Rec(None, None))

    # ConsumerProtocolSubscription v3 / ConsumerProtocolAssignment v3 as the Java client writes them
    subscription = (
        struct.pack(">h", 3)
        + struct.pack(">i", 1)
        + s16("foo")
        + struct.pack(">i", -1)
        + struct.pack(">i", 1)
        + s16("foo")
        + struct.pack(">ii", 1, 0)
        + struct.pack(">i", 0)
        + s16("rack")
    )
    assignment = (
        struct.pack(">h", 3) + struct.pack(">i", 1) + s16("foo") + struct.pack(">ii", 1, 0) + struct.pack(">i", -1)
    )
    member = {
        "member_id": "member",
        "group_instance_id": "instance",
        "client_id": "client",
        "client_host": "host",
        "rebalance_timeout": 1000,
        "session_timeout": 100,
    }
    value = {
        "protocol_type": "consumer",
        "generation": 10,
        "protocol": "range",
        "leader": "member",
        "current_state_timestamp": -1,
        "members": [dict(member, subscription=subscription, assignment=assignment)],
    }
    key2 = gr.encode_key(2, {"group": "group"})
    assert offsets_key_value(Rec(key2, gr.encode_value(2, value, 4)))[0] == '{"type":"2","data":{"group":"group"}}'
    assert offsets_key_value(Rec(key2, gr.encode_value(2, value, 4)))[1] == (
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
        '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}'
    )
    # a value that is not what its key says: reported, skipped
    assert offsets_key_value(Rec(key3, struct.pack(">h", 0)))[0] == (
        "Error at offset 0, skipping. Could not read record with version 0 from value's buffer due to: truncated record"
    )
    assert offsets_key_value(Rec(key3, struct.pack(">h", 7) + b"x"))[0] == (
        "Error at offset 0, skipping. Could not read record with version 7 from value's buffer due to: Can't read "
        "version 7 of ConsumerGroupMetadataValue"
    )
    value["members"] = [dict(member, subscription=b"Subscription", assignment=b"Assignment")]
    assert offsets_key_value(Rec(key2, gr.encode_value(2, value, 4)))[1] == (
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":"U3Vic2NyaXB0aW9u",'
        '"assignment":"QXNzaWdubWVudA=="}]}}'
    )


# ----------------------------------------------------------------- delivery semantics (docs)


class Lines:
    """Read a child's stdout line by line with a deadline."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for raw in self.proc.stdout:
            with self._cv:
                self.lines.append(raw.decode().rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def until(self, predicate, timeout=30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not predicate(self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; got {self.lines}")
                self._cv.wait(left)
            return list(self.lines)


def _crash(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def test_at_least_once_with_the_console_consumer(bs):
    """Print (process), then commit: a crash in between re-delivers, nothing is lost."""
    topic, group = name("alo"), name("alo")
    create(bs, topic, 1)
    records = [f"m{i}" for i in range(20)]
    produce(bs, topic, records)
    cc = [
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--consumer-property",
        f"group.instance.id={group}-1",
    ]

    first = kesque(*cc, "--max-messages", "5", "--timeout-ms", "20000")
    assert first.stdout.split() == records[:5]
    assert committed(bs, group) == {0: 5}  # exactly what was printed

    crashed = popen(*cc, "--consumer-property", "auto.commit.interval.ms=60000")
    lines = Lines(crashed).until(lambda ls: len(ls) >= 5)  # processed m5 ... (at least) m9
    _crash(crashed)
    assert lines[:5] == records[5:10]
    assert committed(bs, group) == {0: 5}  # the crash came before the commit

    again = kesque(*cc, "--max-messages", "15", "--timeout-ms", "20000")
    assert again.stdout.split() == records[5:]
    assert committed(bs, group) == {0: 20}
    delivered = first.stdout.split() + lines + again.stdout.split()
    assert set(delivered) == set(records)  # nothing lost
    redelivered = {r for r in records if delivered.count(r) > 1}
    assert redelivered >= set(records[5:10])  # ... and what the crash left uncommitted came twice


def test_at_most_once_with_the_console_consumer(bs):
    """The console consumer hands records over, auto commit saves the position at once, the
    processing crashes: what was handed over but not processed is skipped, never re-delivered."""
    topic, group = name("amo"), name("amo")
    create(bs, topic, 1)
    records = [f"m{i}" for i in range(20)]
    produce(bs, topic, records)
    cc = [
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--consumer-property",
        f"group.instance.id={group}-1",
        "--consumer-property",
        "auto.commit.interval.ms=100",
    ]

    reader = popen(*cc)
    handed_over = Lines(reader)
    processed = handed_over.until(lambda ls: len(ls) >= 3)[:3]  # the slow processor got through m0 m1 m2
    wait_for(lambda: committed(bs, group) == {0: 20}, what="the auto commit")  # ... while all 20 were committed
    _crash(reader)  # the pipeline dies: the records not processed yet are gone with it
    assert processed == records[:3]

    produce(bs, topic, ["m20", "m21"])
    restarted = kesque(*cc, "--max-messages", "2", "--timeout-ms", "20000")
    processed += restarted.stdout.split()
    assert processed == records[:3] + ["m20", "m21"]  # m3 ... m19 skipped
    assert len(processed) == len(set(processed))  # nothing delivered twice
    assert committed(bs, group) == {0: 22}


def _doc_scripts() -> dict[str, str]:
    text = (ROOT / "docs" / "delivery-semantics.md").read_text()
    return {m.group(1): m.group(0) for m in re.finditer(r"(?ms)^# (\w+\.py) .*?(?=^```)", text)}


@pytest.mark.parametrize("script", ["at_least_once.py", "at_most_once.py"])
def test_python_examples_of_the_docs(bs, tmp_path, script):
    source = _doc_scripts()[script]
    path = tmp_path / script
    path.write_text(source)
    topic, group = name("py"), name("py")
    create(bs, topic, 1)
    records = [f"m{i}" for i in range(4)]
    produce(bs, topic, records)

    def start():
        return subprocess.Popen(
            [sys.executable, str(path), bs, topic, group], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )

    first = start()
    got = Lines(first).until(lambda ls: "start m1" in ls)  # killed in the middle of processing m1
    _crash(first)
    second = start()
    try:
        more = Lines(second).until(lambda ls: "done m3" in ls)
    finally:
        _crash(second)
    out = got + more
    started = [line.split()[1] for line in out if line.startswith("start ")]
    done = [line.split()[1] for line in out if line.startswith("done ")]
    if script == "at_least_once.py":
        assert done == records  # every record processed: nothing lost ...
        assert started == ["m0", "m1", "m1", "m2", "m3"]  # ... and m1 was delivered twice
    else:
        assert done == ["m0", "m2", "m3"]  # m1 was lost ...
        assert started == ["m0", "m1", "m2", "m3"]  # ... and nothing was delivered twice
