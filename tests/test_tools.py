"""The Kafka command-line tools (``kesque topics`` … / ``kafka-topics.sh`` …) against a real
broker subprocess: main paths, error paths and the exact output shapes of Kafka's tools."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

from kesque.cli import tools
from kesque.testing.broker import DEFAULTS
from kesque.testing.kafka import free_port

BIN = os.path.dirname(sys.executable)

TOOLS = {
    "topics": "kafka-topics.sh",
    "configs": "kafka-configs.sh",
    "console-producer": "kafka-console-producer.sh",
    "console-consumer": "kafka-console-consumer.sh",
    "dump-log": "kafka-dump-log.sh",
    "get-offsets": "kafka-get-offsets.sh",
    "delete-records": "kafka-delete-records.sh",
    "log-dirs": "kafka-log-dirs.sh",
    "producer-perf-test": "kafka-producer-perf-test.sh",
    "consumer-perf-test": "kafka-consumer-perf-test.sh",
    "console-share-consumer": "kafka-console-share-consumer.sh",
    "share-groups": "kafka-share-groups.sh",
}


def kesque(*args, input: bytes | str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``kesque <args>`` in this process (stdin/stdout/stderr swapped for buffers): the
    machine is shared, and a fresh interpreter per command would dominate the run time.
    Real processes, pipes and signals are covered by ``kesque_proc`` and ``script`` below."""
    import io

    from kesque.cli.main import main

    class Buf(io.BytesIO):
        def close(self):  # the wrappers must not close what we read afterwards
            pass

    if isinstance(input, str):
        input = input.encode()
    saved = sys.stdin, sys.stdout, sys.stderr
    out_b, err_b = Buf(), Buf()
    sys.stdin = io.TextIOWrapper(io.BytesIO(input or b""), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out_b, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err_b, encoding="utf-8", write_through=True)
    try:
        try:
            code = main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return subprocess.CompletedProcess(["kesque", *args], code or 0, out_b.getvalue(), err_b.getvalue())


def kesque_proc(*args, input: bytes | str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    if isinstance(input, str):
        input = input.encode()
    return subprocess.run(
        [sys.executable, "-m", "kesque", *args], input=input, capture_output=True, timeout=timeout, text=False
    )


def script(name: str, *args, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} console script not installed (pip install -e .)")
    return subprocess.run([path, *args], input=input, capture_output=True, timeout=timeout)


def out(r) -> str:
    return r.stdout.decode()


def err(r) -> str:
    return r.stderr.decode()


@pytest.fixture(scope="module")
def bs(module_broker):
    return module_broker.bootstrap_servers


def create(bs, topic, partitions=1, *extra):
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
        *extra,
    )
    assert r.returncode == 0, out(r) + err(r)
    assert out(r) == f"Created topic {topic}.\n"


def produce(bs, topic, lines, *extra):
    data = "".join(line + "\n" for line in lines)
    r = kesque("console-producer", "--bootstrap-server", bs, "--topic", topic, *extra, input=data)
    assert r.returncode == 0, err(r)
    return r


def consume(bs, topic, *extra, n=None, timeout_ms=5000):
    args = ["console-consumer", "--bootstrap-server", bs, "--topic", topic, *extra]
    if n is not None:
        args += ["--max-messages", str(n)]
    args += ["--timeout-ms", str(timeout_ms)]
    return kesque(*args)


# ----------------------------------------------------------------- help / usage


@pytest.mark.parametrize("sub", sorted(TOOLS))
def test_help_of_every_tool(sub):
    r = kesque(sub, "--help")
    assert r.returncode == 0, err(r)
    assert "--" in out(r)
    s = script(TOOLS[sub], "--help")
    assert s.returncode == 0
    assert s.stdout.decode().splitlines()[1:] == out(r).splitlines()[1:] or "usage" in s.stdout.decode()


def test_each_tool_subcommand_names_its_module():
    """`kesque <tool>` builds a parser for that tool alone, found by subcommand name in
    kesque.cli.tools' table: each entry must be the module's own NAME, and `kesque --help` lists
    every tool."""
    for command, name in tools._MODULES.items():
        assert tools._module(name).NAME == command
    listed = out(kesque("--help"))
    assert all(command in listed for command in tools._MODULES)


def test_help_is_shaped_like_jopt_simple():
    text = out(kesque("topics", "--help"))
    lines = text.splitlines()
    assert lines[0] == "This tool helps to create, delete, describe, or change a topic."
    assert lines[1].startswith("Option") and lines[1].rstrip().endswith("Description")
    assert lines[2].startswith("------")
    assert any(line.startswith("--bootstrap-server <String: server to") for line in lines)
    assert any(line.startswith("--partitions <Integer: # of partitions>") for line in lines)


def test_no_arguments_prints_usage_and_fails():
    r = kesque("topics")
    assert r.returncode == 1
    assert err(r).startswith("Create, delete, describe, or change a topic.\nOption")
    r = kesque("configs")
    assert r.returncode == 1
    assert "This tool helps to manipulate and describe entity config" in err(r)


def test_unknown_option_is_reported_like_jopt():
    r = kesque("topics", "--bootstrap-server", "localhost:1", "--list", "--nonsense")
    assert r.returncode == 1
    assert err(r).startswith("nonsense is not a recognized option\n")


def test_server_start_usage():
    r = script("kafka-server-start.sh")
    assert r.returncode == 1
    assert (
        r.stderr.decode() == "USAGE: kafka-server-start.sh [-daemon] server.properties [--override property=value]*\n"
    )


def test_server_start_runs_a_broker(tmp_path):
    port = free_port()  # below the ephemeral range: no client takes it meanwhile
    props = dict(DEFAULTS)
    props.update({"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(tmp_path / "logs")})
    cfg = tmp_path / "server.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    exe = os.path.join(BIN, "kafka-server-start.sh")
    if not os.path.exists(exe):
        pytest.skip("console scripts not installed")
    proc = subprocess.Popen(
        [exe, str(cfg), "--override", "num.partitions=3"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        bs = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "kafka-server-start.sh did not listen"
                assert proc.poll() is None, "broker exited"
                time.sleep(0.1)
        r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", "started")
        assert out(r) == "Created topic started.\n"
        r = kesque("topics", "--bootstrap-server", bs, "--describe", "--topic", "started")
        assert "PartitionCount: 3" in out(r)  # the --override reached the broker
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert (tmp_path / "logs" / "meta.properties").exists()


def test_server_start_daemon(tmp_path):
    exe = os.path.join(BIN, "kafka-server-start.sh")
    if not os.path.exists(exe):
        pytest.skip("console scripts not installed")
    port = free_port()  # below the ephemeral range: no client takes it meanwhile
    props = dict(DEFAULTS)
    props.update({"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(tmp_path / "logs")})
    cfg = tmp_path / "daemon.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    r = subprocess.run(
        [exe, "-daemon", str(cfg)], env=dict(os.environ, LOG_DIR=str(tmp_path / "out")), capture_output=True, timeout=30
    )
    assert r.returncode == 0 and r.stdout == b""  # returns at once, the broker runs detached

    def daemon_pids():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if str(cfg).encode() in cmd and b"serve" in cmd:
                pids.append(int(pid))
        return pids

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "out" / "kafkaServer.out").read_text()
                time.sleep(0.1)
        assert out(kesque("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list")) == "\n"
        assert (tmp_path / "out" / "kafkaServer.out").exists()
    finally:
        for pid in daemon_pids():  # the broker this test started
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while daemon_pids() and time.monotonic() < deadline:
            time.sleep(0.1)


# ----------------------------------------------------------------- topics

DESCRIBE_TOPIC = re.compile(
    r"^Topic: (\S+)\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: (\d+)\tReplicationFactor: "
    r"(\d+)\tConfigs: (.*)$"
)
DESCRIBE_PARTITION = re.compile(
    r"^\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]*)\t"
    r"Isr: ([\d,]*)\tElr: ([\d,]*|N/A)\tLastKnownElr: ([\d,]*|N/A)$"
)


def test_topics_create_describe_list_alter_delete(bs, topic_name):
    create(bs, topic_name, 2, "--config", "retention.ms=12345", "--config", "cleanup.policy=compact")
    r = kesque("topics", "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    assert r.returncode == 0
    lines = out(r).splitlines()
    assert len(lines) == 3
    m = DESCRIBE_TOPIC.match(lines[0])
    assert m, lines[0]
    assert m.group(1) == topic_name and m.group(2) == "2" and m.group(3) == "1"
    # only the topic's own overrides, as name=value joined by commas
    assert sorted(m.group(4).split(",")) == ["cleanup.policy=compact", "retention.ms=12345"]
    for i, line in enumerate(lines[1:]):
        pm = DESCRIBE_PARTITION.match(line)
        assert pm, line
        assert pm.groups() == (topic_name, str(i), "1", "1", "1", "", "")
    assert lines[1].endswith("\tElr: \tLastKnownElr: ")

    r = kesque("topics", "--bootstrap-server", bs, "--list")
    assert topic_name in out(r).splitlines()

    r = kesque("topics", "--bootstrap-server", bs, "--alter", "--topic", topic_name, "--partitions", "4")
    assert r.returncode == 0 and out(r) == ""
    r = kesque("topics", "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    assert "\tPartitionCount: 4\t" in out(r)
    assert len(out(r).splitlines()) == 5

    r = kesque("topics", "--bootstrap-server", bs, "--alter", "--topic", topic_name, "--partitions", "2")
    assert r.returncode == 1
    assert out(r).startswith("Error while executing topic command : ")
    assert "4" in out(r) and "2" in out(r)

    r = kesque("topics", "--bootstrap-server", bs, "--delete", "--topic", topic_name)
    assert r.returncode == 0 and out(r) == ""
    deadline = time.monotonic() + 10
    while topic_name in out(kesque("topics", "--bootstrap-server", bs, "--list")).splitlines():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_topics_create_existing_topic_fails(bs, topic_name):
    create(bs, topic_name)
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--partitions", "1")
    assert r.returncode == 1
    assert out(r) == f"Error while executing topic command : Topic '{topic_name}' already exists.\n"
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--if-not-exists")
    assert r.returncode == 0 and out(r) == ""


def test_topics_describe_or_delete_missing_topic(bs):
    for action in ("--describe", "--delete"):
        r = kesque("topics", "--bootstrap-server", bs, action, "--topic", "no-such-topic")
        assert r.returncode == 1
        assert out(r) == "Error while executing topic command : Topic 'no-such-topic' does not exist as expected\n"
        r = kesque("topics", "--bootstrap-server", bs, action, "--topic", "no-such-topic", "--if-exists")
        assert r.returncode == 0 and out(r) == ""


def test_topics_replication_factor_above_broker_count(bs, topic_name):
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--replication-factor", "2")
    assert r.returncode == 1
    assert out(r) == (
        "Error while executing topic command : Unable to replicate the partition 2 time(s): The target "
        "replication factor of 2 cannot be reached because only 1 broker(s) are registered.\n"
    )


def test_topics_argument_checks(bs, topic_name):
    r = kesque("topics", "--bootstrap-server", bs, "--list", "--describe")
    assert r.returncode == 1
    assert err(r).startswith(
        "Command must include exactly one action: --list, --describe, --create, --alter or --delete\n"
    )
    r = kesque("topics", "--bootstrap-server", bs, "--create")
    assert r.returncode == 1 and err(r).startswith('Missing required argument "[topic]"\n')
    r = kesque("topics", "--bootstrap-server", bs, "--alter", "--topic", topic_name)
    assert r.returncode == 1 and err(r).startswith('Missing required argument "[partitions]"\n')
    r = kesque("topics", "--bootstrap-server", bs, "--describe", "--replication-factor", "2")
    assert r.returncode == 1
    assert err(r).startswith('Option "[replication-factor]" can\'t be used with option "[describe]"')
    r = kesque("topics", "--create", "--topic", topic_name)
    assert r.returncode == 1 and err(r).startswith("--bootstrap-server must be specified")
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--partitions", "0")
    assert r.returncode == 1
    assert out(r) == "Error while executing topic command : The partitions must be greater than 0\n"
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--config", "nonsense")
    assert r.returncode == 1
    assert out(r) == (
        "Error while executing topic command : requirement failed: Invalid topic config: all configs "
        'to be added must be in the format "key=val".\n'
    )
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--config", "no.such.config=1")
    assert r.returncode == 1 and out(r).startswith("Error while executing topic command : ")
    assert "no.such.config" in out(r)


def test_topics_collision_warning_and_regex_topic(bs):
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", "with.dot")
    assert r.returncode == 0
    assert out(r) == (
        "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
        "could collide. To avoid issues it is best to use either, but not both.\nCreated topic "
        "with.dot.\n"
    )
    r = kesque("topics", "--bootstrap-server", bs, "--list", "--topic", "with\\..*")
    assert out(r) == "with.dot\n"


def test_topics_replica_assignment(bs, topic_name):
    r = kesque("topics", "--bootstrap-server", bs, "--create", "--topic", topic_name, "--replica-assignment", "1,1,1")
    assert out(r) == f"Created topic {topic_name}.\n"
    r = kesque("topics", "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    assert "\tPartitionCount: 3\tReplicationFactor: 1\t" in out(r)
    r = kesque(
        "topics", "--bootstrap-server", bs, "--create", "--topic", topic_name + "x", "--replica-assignment", "1:1"
    )
    assert (
        out(r) == "Error while executing topic command : Partition replica lists may not contain duplicate entries: 1\n"
    )


def test_topics_never_ask_librdkafkas_controller(bs, topic_name, monkeypatch, capsys):
    """--create, --alter, --delete and --describe (and configs --alter of a topic) go to any broker,
    as Kafka's Admin sends them.
    librdkafka's create_topics, create_partitions, delete_topics and describe_cluster wait for "the
    controller" of its metadata, which a KRaft broker names at random among the unfenced brokers:
    for broker.session.timeout.ms after a SIGKILL possibly the dead one, and the tool failed after
    60 s (seen on a 3-node Kafka: tests/test_oracle_quorum.py)."""
    from kesque.cli.main import main
    from kesque.cli.plumbing import admin_client

    make_admin = admin_client.make_admin

    class NoController:
        def __init__(self, admin):
            self.admin = admin

        def __getattr__(self, name):
            if name in (
                "create_topics",
                "create_partitions",
                "delete_topics",
                "describe_cluster",
                "describe_configs",
                "describe_topics",
                "incremental_alter_configs",
            ):
                raise AssertionError(f"librdkafka's {name} waits for a controller")
            return getattr(self.admin, name)

    monkeypatch.setattr(admin_client, "make_admin", lambda *a, **kw: NoController(make_admin(*a, **kw)))
    for args in (["--create", "--partitions", "2"], ["--alter", "--partitions", "3"], ["--describe"]):
        assert main(["topics", "--bootstrap-server", bs, "--topic", topic_name, *args]) == 0, capsys.readouterr()
    assert capsys.readouterr().out.startswith(f"Created topic {topic_name}.\nTopic: {topic_name}\t")
    assert (
        main(
            ["configs", "--bootstrap-server", bs, "--topic", topic_name, "--alter", "--add-config", "retention.ms=1000"]
        )
        == 0
    )
    assert main(["topics", "--bootstrap-server", bs, "--topic", topic_name, "--describe"]) == 0
    assert "\tConfigs: retention.ms=1000\n" in capsys.readouterr().out
    assert main(["topics", "--bootstrap-server", bs, "--topic", topic_name, "--delete"]) == 0


def test_topics_with_overrides_filter(bs, topic_name):
    create(bs, topic_name)
    create(bs, topic_name + "-o", 1, "--config", "retention.ms=1000")
    r = kesque("topics", "--bootstrap-server", bs, "--describe", "--topics-with-overrides")
    lines = out(r).splitlines()
    assert any(line.startswith(f"Topic: {topic_name}-o\t") for line in lines)
    assert not any(line.startswith(f"Topic: {topic_name}\t") for line in lines)
    assert not any(line.startswith("\t") for line in lines)  # no partition lines with this filter


# ----------------------------------------------------------------- configs

CONFIG_LINE = re.compile(r"^  (\S+?)=(.*) sensitive=(true|false) synonyms=\{(.*)\}$")


def test_configs_topic_alter_describe_delete(bs, topic_name):
    create(bs, topic_name)
    r = kesque(
        "configs", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic_name, "--describe"
    )
    assert out(r) == f"Dynamic configs for topic {topic_name} are:\n"
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--alter",
        "--add-config",
        "retention.ms=60000,cleanup.policy=[compact,delete]",
    )
    assert r.returncode == 0, err(r)
    assert out(r) == f"Completed updating config for topic {topic_name}.\n"
    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--describe")
    assert out(r) == (
        f"Dynamic configs for topic {topic_name} are:\n"
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}\n"
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000, "
        "DEFAULT_CONFIG:log.retention.hours=168}\n"
    )
    r = kesque("topics", "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    assert "\tConfigs: cleanup.policy=compact,delete,retention.ms=60000\n" in out(r)

    r = kesque(
        "configs", "--bootstrap-server", bs, "--topic", topic_name, "--alter", "--delete-config", "cleanup.policy"
    )
    assert out(r) == f"Completed updating config for topic {topic_name}.\n"
    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--describe", "--all")
    lines = out(r).splitlines()
    assert lines[0] == f"All configs for topic {topic_name} are:"
    parsed = {m.group(1): m for m in map(CONFIG_LINE.match, lines[1:])}
    assert None not in parsed
    assert parsed["cleanup.policy"].group(2) == "delete"
    assert parsed["retention.ms"].group(2) == "60000"
    assert sorted(parsed) == list(parsed)  # sorted by name, as ConfigCommand prints

    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--alter", "--delete-config", "nope,other")
    assert r.returncode == 1
    assert err(r) == "Invalid config(s): nope,other\n"


def test_configs_errors(bs, topic_name):
    r = kesque("configs", "--bootstrap-server", bs, "--topic", "no-such-topic", "--describe")
    assert r.returncode == 1
    assert out(r) == "Dynamic configs for topic no-such-topic are:\n"
    assert err(r) == (
        "Error while executing config command with args '--bootstrap-server "
        f"{bs} --topic no-such-topic --describe'\n"
        "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
        "UnknownTopicOrPartitionException: Topic no-such-topic does not exist.\n"
    )
    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--describe", "--alter")
    assert r.returncode == 1
    assert err(r).startswith("Command must include exactly one action: --describe, --alter\n")
    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--alter")
    assert r.returncode == 1
    assert (
        err(r) == "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter\n"
    )
    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--alter", "--add-config", "a=1,b")
    assert (
        err(r) == "requirement failed: Invalid entity config: all configs to be added must be in the format "
        '"key=val".\n'
    )
    r = kesque("configs", "--bootstrap-server", bs, "--entity-type", "topics", "--topic", topic_name, "--describe")
    assert err(r) == "Duplicate entity type(s) specified: topics\n"
    r = kesque("configs", "--bootstrap-server", bs, "--entity-name", "x", "--topic", topic_name, "--describe")
    assert err(r) == "--entity-{type,name,default} should not be used in conjunction with specific entity flags\n"
    r = kesque("configs", "--bootstrap-server", bs, "--broker", "abc", "--describe")
    assert err(r) == "The entity name for brokers must be a valid integer broker id, but it is: abc\n"
    r = kesque("configs", "--topic", topic_name, "--describe")
    assert (
        err(r) == "One of the required --bootstrap-server, --boostrap-controller, or --zookeeper arguments must "
        "be specified\n"
    )
    create(bs, topic_name)
    r = kesque(
        "configs", "--bootstrap-server", bs, "--topic", topic_name, "--alter", "--add-config", "retention.ms=abc"
    )
    assert r.returncode == 1
    assert err(r).startswith("Error while executing config command with args ")
    assert "InvalidConfigurationException" in err(r)


def test_configs_add_config_file_and_entity_default(bs, topic_name, tmp_path):
    create(bs, topic_name)
    f = tmp_path / "topic.properties"
    f.write_text("retention.ms=5000\nmax.message.bytes=2000\n")
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--entity-type",
        "topics",
        "--entity-name",
        topic_name,
        "--alter",
        "--add-config-file",
        str(f),
    )
    assert out(r) == f"Completed updating config for topic {topic_name}.\n", err(r)
    r = kesque("configs", "--bootstrap-server", bs, "--topic", topic_name, "--describe")
    assert [line.split("=")[0].strip() for line in out(r).splitlines()[1:]] == ["max.message.bytes", "retention.ms"]
    r = kesque("configs", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-default", "--describe")
    assert out(r).splitlines()[0] == "Default configs for brokers in the cluster are:"
    r = kesque("configs", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-default", "--describe")
    assert r.returncode == 1 and err(r) == "--entity-default must not be specified with --describe of topics\n"


def test_configs_broker_describe_all(bs):
    r = kesque("configs", "--bootstrap-server", bs, "--broker", "1", "--describe", "--all")
    assert r.returncode == 0, err(r)
    lines = out(r).splitlines()
    assert lines[0] == "All configs for broker 1 are:"
    parsed = {}
    for line in lines[1:]:
        m = CONFIG_LINE.match(line)
        assert m, line
        parsed[m.group(1)] = m
    assert parsed["num.partitions"].group(2) == "1"
    assert parsed["num.partitions"].group(4) == "DEFAULT_CONFIG:num.partitions=1"
    # a static setting lists both layers, highest priority first
    assert (
        parsed["offsets.topic.replication.factor"].group(4)
        == "STATIC_BROKER_CONFIG:offsets.topic.replication.factor=1, DEFAULT_CONFIG:offsets.topic.replication.factor=3"
    )
    r = kesque("configs", "--bootstrap-server", bs, "--entity-type", "brokers", "--entity-name", "1", "--describe")
    assert out(r).splitlines()[0] == "Dynamic configs for broker 1 are:"


def test_configs_broker_dynamic_alter(bs):
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--broker-defaults",
        "--alter",
        "--add-config",
        "log.segment.delete.delay.ms=61000",
    )
    assert r.returncode == 0, err(r)
    assert out(r) == "Completed updating default config for brokers in the cluster.\n"
    r = kesque("configs", "--bootstrap-server", bs, "--broker-defaults", "--describe")
    assert out(r) == (
        "Default configs for brokers in the cluster are:\n"
        "  log.segment.delete.delay.ms=61000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.delete.delay.ms=61000}\n"
    )
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--broker-defaults",
        "--alter",
        "--delete-config",
        "log.segment.delete.delay.ms",
    )
    assert r.returncode == 0, err(r)
    r = kesque("configs", "--bootstrap-server", bs, "--broker-defaults", "--describe")
    assert out(r) == "Default configs for brokers in the cluster are:\n"


# ----------------------------------------------------------------- console producer / consumer


def test_console_producer_and_consumer_formats(bs, topic_name):
    create(bs, topic_name)
    produce(bs, topic_name, ["k1:v1", "k2:v:2", "k3:"], "--property", "parse.key=true", "--property", "key.separator=:")
    produce(
        bs, topic_name, ["h1:a,h2:b\tkey\tvalue"], "--property", "parse.key=true", "--property", "parse.headers=true"
    )
    r = consume(
        bs,
        topic_name,
        "--from-beginning",
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.timestamp=true",
        "--property",
        "print.headers=true",
        n=4,
    )
    assert r.returncode == 0, err(r)
    lines = out(r).splitlines()
    stamp = re.compile(r"^CreateTime:\d{13}$")
    rows = [line.split("\t") for line in lines]
    assert all(stamp.match(row[0]) for row in rows)
    assert [row[1:] for row in rows] == [
        ["Partition:0", "Offset:0", "NO_HEADERS", "k1", "v1"],
        ["Partition:0", "Offset:1", "NO_HEADERS", "k2", "v:2"],
        ["Partition:0", "Offset:2", "NO_HEADERS", "k3", ""],
        ["Partition:0", "Offset:3", "h1:a,h2:b", "key", "value"],
    ]
    assert err(r).endswith("Processed a total of 4 messages\n")

    r = consume(
        bs,
        topic_name,
        "--from-beginning",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=|",
        "--property",
        "print.value=false",
        n=2,
    )
    assert out(r) == "k1\nk2\n"
    # a specific partition and offset, no group
    r = consume(bs, topic_name, "--partition", "0", "--offset", "2", n=2)
    assert out(r) == "\nvalue\n"
    r = consume(bs, topic_name, "--partition", "0", "--offset", "earliest", n=1)
    assert out(r) == "v1\n"
    # the consumer never used a group: nothing created __consumer_offsets
    assert "__consumer_offsets" not in out(kesque("topics", "--bootstrap-server", bs, "--list"))


def test_console_consumer_timeout_and_latest(bs, topic_name):
    create(bs, topic_name)
    produce(bs, topic_name, ["old"])
    t0 = time.monotonic()
    r = consume(bs, topic_name, timeout_ms=700)  # latest: nothing to read
    assert time.monotonic() - t0 < 10
    assert r.returncode == 0
    assert out(r) == ""
    assert "ERROR Error processing message, terminating consumer process:" in err(r)
    assert "org.apache.kafka.common.errors.TimeoutException" in err(r)
    assert err(r).endswith("Processed a total of 0 messages\n")


def test_console_consumer_sees_new_records_and_stops_on_signal(bs, topic_name):
    create(bs, topic_name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kesque", "console-consumer", "--bootstrap-server", bs, "--topic", topic_name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # the consumer starts at the end: produce until it has printed something
        deadline = time.monotonic() + 20
        os.set_blocking(proc.stdout.fileno(), False)
        seen = b""
        while b"live\n" not in seen:
            assert time.monotonic() < deadline, seen
            produce(bs, topic_name, ["live"])
            t = time.monotonic()
            while time.monotonic() - t < 1.5 and b"live\n" not in seen:
                seen += proc.stdout.read() or b""
                time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
        rest = proc.stderr.read().decode()
        assert re.search(r"Processed a total of \d+ messages\n$", rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_console_consumer_argument_checks(bs):
    r = kesque("console-consumer", "--bootstrap-server", bs, "--topic", "x", "--offset", "3")
    assert r.returncode == 1 and err(r).startswith("The partition is required when offset is specified.\n")
    r = kesque("console-consumer", "--bootstrap-server", bs)
    assert r.returncode == 1 and err(r).startswith("Exactly one of --include/--topic is required. \n")
    r = kesque("console-consumer", "--bootstrap-server", bs, "--topic", "x", "--partition", "0", "--offset", "-5")
    assert r.returncode == 1 and err(r).startswith(
        "The provided offset value '-5' is incorrect. Valid values are 'earliest', 'latest', or a non-negative long.\n"
    )
    r = kesque("console-consumer", "--bootstrap-server", bs, "--topic", "x", "--partition", "0", "--group", "g")
    assert r.returncode == 1 and err(r).startswith("Options group and partition cannot be specified together.\n")
    r = kesque("console-consumer", "--bootstrap-server", bs, "--topic", "x", "--isolation-level", "sometimes")
    assert r.returncode == 1 and "Invalid value sometimes for configuration isolation.level" in err(r)


def test_console_consumer_include_pattern(bs, topic_name):
    create(bs, topic_name + "-a")
    create(bs, topic_name + "-b")
    produce(bs, topic_name + "-a", ["from-a"])
    produce(bs, topic_name + "-b", ["from-b"])
    r = kesque(
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--include",
        topic_name + "-.*",
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "5000",
    )
    assert sorted(out(r).splitlines()) == ["from-a", "from-b"]


def test_console_producer_options(bs, topic_name, tmp_path):
    create(bs, topic_name)
    cfg = tmp_path / "producer.properties"
    cfg.write_text(
        "acks=1\nlinger.ms=5\n# a comment\nkey.serializer=org.apache.kafka.common.serialization.ByteArraySerializer\n"
    )
    for codec in (
        "--compression-codec=lz4",
        "--compression-codec",
        "--compression-codec=zstd",
        "--compression-codec=snappy",
    ):
        # (librdkafka sends a batch uncompressed when compressing would not shrink it)
        produce(
            bs,
            topic_name,
            [f"via {codec} " + "z" * 300],
            codec,
            "--producer.config",
            str(cfg),
            "--producer-property",
            "client.id=tool-test",
            "--request-required-acks",
            "all",
            "--sync",
        )
    r = consume(bs, topic_name, "--from-beginning", n=4)
    assert [line.split()[1] for line in out(r).splitlines()] == [
        "--compression-codec=lz4",
        "--compression-codec",
        "--compression-codec=zstd",
        "--compression-codec=snappy",
    ]
    # the codecs really reached the log
    log = os.path.join(_data_dir(bs), f"{topic_name}-0", "00000000000000000000.log")
    dump = out(kesque("dump-log", "--files", log))
    assert [m for m in re.findall(r"compresscodec: (\w+)", dump)] == ["lz4", "gzip", "zstd", "snappy"]

    r = kesque(
        "console-producer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--property",
        "parse.key=true",
        input="no separator here\n",
    )
    assert r.returncode == 1
    assert err(r) == (
        "org.apache.kafka.common.KafkaException: No key separator found on line number 1: 'no separator here'\n"
    )
    r = kesque(
        "console-producer", "--bootstrap-server", bs, "--topic", topic_name, "--compression-codec=brotli", input="x\n"
    )
    assert r.returncode == 1 and "compression.type" in err(r)
    r = kesque("console-producer", "--bootstrap-server", bs)
    assert r.returncode == 1 and err(r).startswith('Missing required argument "[topic]"\n')


def test_console_producer_null_marker(bs, topic_name):
    create(bs, topic_name)
    produce(
        bs,
        topic_name,
        ["NULL|NULL", "k|v"],
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=|",
        "--property",
        "null.marker=NULL",
    )
    r = consume(
        bs, topic_name, "--from-beginning", "--property", "print.key=true", "--property", "null.literal=<nil>", n=2
    )
    assert out(r) == "<nil>\t<nil>\nk\tv\n"


# ----------------------------------------------------------------- dump-log

_DATA_DIRS: dict[str, str] = {}


def _data_dir(bs: str) -> str:
    return _DATA_DIRS[bs]


@pytest.fixture(scope="module", autouse=True)
def _remember_data_dir(module_broker):
    _DATA_DIRS[module_broker.bootstrap_servers] = module_broker.data_dir


BATCH_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) producerId: "
    r"(-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (-?\d+) isTransactional: (true|false) isControl: "
    r"(true|false) deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: (\d+) size: (\d+) magic: 2 "
    r"compresscodec: (\w+) crc: (\d+) isvalid: (true|false)$"
)
RECORD_LINE = re.compile(
    r"^\| offset: (\d+) CreateTime: (\d+) keySize: (-?\d+) valueSize: (-?\d+) sequence: (-?\d+) "
    r"headerKeys: \[(.*)\]( key: (.*?))?( payload: (.*))?$"
)


def test_dump_log_segment(bs, topic_name):
    create(bs, topic_name)
    produce(
        bs,
        topic_name,
        ["k:value one", "k2:two"],
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--sync",
    )
    produce(bs, topic_name, ["h:1\tthree"], "--property", "parse.headers=true")
    log = os.path.join(_data_dir(bs), f"{topic_name}-0", "00000000000000000000.log")
    r = kesque("dump-log", "--files", log)
    lines = out(r).splitlines()
    assert lines[0] == f"Dumping {log}"
    assert lines[1] == "Log starting offset: 0"
    batches = [BATCH_LINE.match(line) for line in lines[2:]]
    assert all(batches), lines
    assert [(b.group(1), b.group(2), b.group(3)) for b in batches] == [
        ("0", "0", "1"),
        ("1", "1", "1"),
        ("2", "2", "1"),
    ]
    assert batches[0].group(11) == "0"
    assert int(batches[1].group(11)) == int(batches[0].group(13))  # positions add up
    assert all(b.group(16) == "true" for b in batches)

    r = kesque("dump-log", "--print-data-log", "--files", log)
    lines = out(r).splitlines()
    recs = [RECORD_LINE.match(line) for line in lines if line.startswith("|")]
    assert len(recs) == 3 and all(recs)
    assert recs[0].group(3, 4, 8, 10) == ("1", "9", "k", "value one")
    assert recs[2].group(6) == "h" and recs[2].group(3) == "-1" and recs[2].group(8) is None
    assert recs[2].group(10) == "three"

    r = kesque("dump-log", "--deep-iteration", "--files", log)
    assert "payload:" not in out(r)
    assert sum(1 for line in out(r).splitlines() if line.startswith("| offset: ")) == 3

    r = kesque("dump-log", "--print-data-log", "--skip-record-metadata", "--files", log)
    assert "| key: k payload: value one" in out(r).splitlines()


def test_dump_log_indexes(bs, topic_name):
    create(bs, topic_name, 1, "--config", "index.interval.bytes=100")
    produce(bs, topic_name, [f"record-{i:04d}-" + "x" * 200 for i in range(20)], "--sync")
    base = os.path.join(_data_dir(bs), f"{topic_name}-0", "00000000000000000000")
    r = kesque("dump-log", "--files", base + ".index")
    lines = out(r).splitlines()
    assert lines[0] == f"Dumping {base}.index"
    entries = [re.match(r"^offset: (\d+) position: (\d+)$", line) for line in lines[1:]]
    assert entries and all(entries), lines
    assert err(r) == ""  # every entry points at the batch that ends at its offset
    r = kesque("dump-log", "--files", base + ".timeindex")
    lines = out(r).splitlines()
    assert all(re.match(r"^timestamp: \d{13} offset: \d+$", line) for line in lines[1:]), lines
    r = kesque("dump-log", "--index-sanity-check", "--files", f"{base}.index,{base}.timeindex")
    assert out(r).splitlines() == [
        f"Dumping {base}.index",
        f"{base}.index passed sanity check.",
        f"Dumping {base}.timeindex",
        f"{base}.timeindex passed sanity check.",
    ]
    r = kesque("dump-log", "--verify-index-only", "--files", base + ".index")
    assert out(r) == f"Dumping {base}.index\n" and err(r) == ""


def test_dump_log_checkpoints_and_unknown_files(module_broker, topic_name, tmp_path):
    bs = module_broker.bootstrap_servers
    create(bs, topic_name)
    produce(bs, topic_name, ["a", "b"])
    pdir = os.path.join(module_broker.data_dir, f"{topic_name}-0")
    r = kesque(
        "dump-log",
        "--files",
        os.path.join(pdir, "leader-epoch-checkpoint") + "," + os.path.join(pdir, "partition.metadata"),
    )
    lines = out(r).splitlines()
    assert lines[1:3] == ["version: 0 entries: 1", "epoch: 0 startOffset: 0"]
    assert re.match(r"^version: 0 topicId: [A-Za-z0-9_-]{22}$", lines[4])
    desc = out(kesque("topics", "--bootstrap-server", bs, "--describe", "--topic", topic_name))
    assert lines[4].split()[-1] in desc  # the same topic id the broker reports

    ck = tmp_path / "replication-offset-checkpoint"
    ck.write_text("0\n2\nt 0 5\nt 1 7\n")
    r = kesque("dump-log", "--files", str(ck))
    assert out(r).splitlines()[1:] == [
        "version: 0 entries: 2",
        "topic: t partition: 0 offset: 5",
        "topic: t partition: 1 offset: 7",
    ]
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    r = kesque("dump-log", "--files", str(other))
    assert r.returncode == 0
    assert out(r) == f"Dumping {other}\n" and err(r) == f"Ignoring unknown file {other}\n"
    r = kesque("dump-log", "--print-data-log")
    assert r.returncode == 1 and err(r).startswith('Missing required argument "[files]"\n')


def test_dump_log_trailing_garbage_and_cluster_metadata(module_broker, tmp_path):
    meta = os.path.join(module_broker.data_dir, "__cluster_metadata-0", "00000000000000000000.log")
    r = kesque("dump-log", "--cluster-metadata-decoder", "--files", meta)
    assert r.returncode == 0, err(r)
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in out(r).splitlines() if " payload: " in line]
    types = {p["type"] for p in payloads}
    assert {"FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "TOPIC_RECORD", "PARTITION_RECORD"} <= types
    topic = next(p for p in payloads if p["type"] == "TOPIC_RECORD")
    assert set(topic["data"]) == {"name", "topicId"} and topic["version"] == 0

    torn = tmp_path / "00000000000000000042.log"
    with open(meta, "rb") as f:
        data = f.read()
    torn.write_bytes(data + b"\x00\x00\x00")
    r = kesque("dump-log", "--files", str(torn))
    assert out(r).splitlines()[1] == "Log starting offset: 42"
    assert out(r).splitlines()[-1] == f"Found 3 invalid bytes at the end of {torn.name}"


def test_dump_log_idempotent_batches_and_producer_snapshots(module_broker, topic_name):
    bs = module_broker.bootstrap_servers
    create(bs, topic_name, 1, "--config", "segment.ms=1")  # every append rolls: segments and snapshots
    produce(
        bs, topic_name, ["record 1", "record 2", "record 3"], "--producer-property", "enable.idempotence=true", "--sync"
    )
    pdir = os.path.join(module_broker.data_dir, f"{topic_name}-0")
    logs = sorted(f for f in os.listdir(pdir) if f.endswith(".log"))
    assert len(logs) >= 2
    r = kesque("dump-log", "--print-data-log", "--files", ",".join(os.path.join(pdir, f) for f in logs))
    batches = [m for m in map(BATCH_LINE.match, out(r).splitlines()) if m]
    records = [m for m in map(RECORD_LINE.match, out(r).splitlines()) if m]
    assert len(batches) == 3 and len(records) == 3
    pid = batches[0].group(6)
    assert int(pid) >= 0
    for i, b in enumerate(batches):  # one producer, sequences follow the offsets
        assert b.group(1, 3, 4, 5, 6, 7) == (str(i), "1", str(i), str(i), pid, "0")
    assert [m.group(5, 10) for m in records] == [("0", "record 1"), ("1", "record 2"), ("2", "record 3")]
    snapshots = sorted(f for f in os.listdir(pdir) if f.endswith(".snapshot"))
    assert snapshots
    r = kesque("dump-log", "--files", os.path.join(pdir, snapshots[-1]))
    line = out(r).splitlines()[1]
    last = int(snapshots[-1].split(".")[0]) - 1  # a snapshot at offset N holds the state up to N - 1
    assert re.fullmatch(
        rf"producerId: {pid} producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        rf"OptionalLong.empty lastTimestamp: (\d+) firstSequence: {last} lastSequence: {last} "
        rf"lastOffset: {last} offsetDelta: 0 timestamp: \1",
        line,
    ), line


def test_dump_log_control_and_transactional_batches(tmp_path):
    """Transaction markers as DumpLogSegments prints them (segment built with kesque's own builder)."""
    import struct as _struct

    from kesque.records.records import build_batch

    data = build_batch(
        [(b"k", b"v", [("h1", b"x"), ("h2", None)])],
        base_offset=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
        partition_leader_epoch=5,
        timestamp=1700000000000,
    )
    marker = build_batch(
        [(_struct.pack(">hh", 0, 1), _struct.pack(">hi", 0, 9), [])],
        base_offset=8,
        producer_id=42,
        producer_epoch=3,
        transactional=True,
        control=True,
        partition_leader_epoch=5,
        timestamp=1700000000001,
    )
    seg = tmp_path / "00000000000000000007.log"
    seg.write_bytes(data + marker)
    r = kesque("dump-log", "--print-data-log", "--files", str(seg))
    lines = out(r).splitlines()
    assert lines[2] == (
        f"baseOffset: 7 lastOffset: 7 count: 1 baseSequence: 10 lastSequence: 10 producerId: 42 "
        f"producerEpoch: 3 partitionLeaderEpoch: 5 isTransactional: true isControl: false "
        f"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: {len(data)} "
        f"magic: 2 compresscodec: none crc: {_struct.unpack_from('>I', data, 17)[0]} isvalid: true"
    )
    assert lines[3] == (
        "| offset: 7 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: 10 "
        "headerKeys: [h1,h2] key: k payload: v"
    )
    assert "isTransactional: true isControl: true" in lines[4] and f"position: {len(data)} " in lines[4]
    assert lines[5] == (
        "| offset: 8 CreateTime: 1700000000001 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 9"
    )
    # a flipped byte: the CRC no longer matches
    bad = bytearray(data)
    bad[-1] ^= 0xFF
    seg.write_bytes(bytes(bad))
    assert "isvalid: false" in out(kesque("dump-log", "--files", str(seg)))


# ----------------------------------------------------------------- get-offsets / delete-records / log-dirs


def test_get_offsets(bs, topic_name):
    create(bs, topic_name, 3)
    produce(
        bs, topic_name, [f"k{i}:v" for i in range(6)], "--property", "parse.key=true", "--property", "key.separator=:"
    )
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name)
    lines = out(r).splitlines()
    assert [line.rsplit(":", 1)[0] for line in lines] == [f"{topic_name}:0", f"{topic_name}:1", f"{topic_name}:2"]
    assert sum(int(line.rsplit(":", 1)[1]) for line in lines) == 6
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "-2")
    assert out(r).splitlines() == [f"{topic_name}:{p}:0" for p in range(3)]
    r = kesque(
        "get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--partitions", "0,2", "--time", "earliest"
    )
    assert out(r).splitlines() == [f"{topic_name}:0:0", f"{topic_name}:2:0"]
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic-partitions", f"{topic_name}:1-")
    assert [line.rsplit(":", 1)[0] for line in out(r).splitlines()] == [f"{topic_name}:1", f"{topic_name}:2"]
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "earliest-local")
    assert out(r).splitlines() == [f"{topic_name}:{p}:0" for p in range(3)]
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "-5")
    assert r.returncode == 0 and out(r) == ""  # no tiered storage: no latest-tiered offset
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "9999999999999")
    assert out(r) == ""  # no record that late: Kafka prints nothing for the partition
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "sometime")
    assert r.returncode == 1 and err(r).startswith("Error occurred: Malformed time argument sometime.")
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", "no-such-topic")
    assert r.returncode == 1
    assert err(r) == "Error occurred: Could not match any topic-partitions with the specified filters\n"
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic-partitions", "x:1", "--topic", "x")
    assert err(r) == "Error occurred: --topic-partitions cannot be used with --topic or --partitions\n"


def test_get_offsets_by_timestamp(bs, topic_name):
    create(bs, topic_name)
    produce(bs, topic_name, ["a", "b", "c"], "--sync")
    r = kesque(
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--from-beginning",
        "--property",
        "print.timestamp=true",
        "--property",
        "print.value=false",
        "--max-messages",
        "3",
    )
    stamps = [int(line.split(":")[1]) for line in out(r).splitlines()]
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", str(stamps[1]))
    first = min(i for i, s in enumerate(stamps) if s >= stamps[1])
    assert out(r) == f"{topic_name}:0:{first}\n"
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "max-timestamp")
    # the first record carrying the largest timestamp, as Kafka answers MAX_TIMESTAMP
    assert out(r) == f"{topic_name}:0:{min(i for i, s in enumerate(stamps) if s == max(stamps))}\n"


def test_delete_records(bs, topic_name, tmp_path):
    create(bs, topic_name, 2)
    produce(
        bs,
        topic_name,
        ["a", "b", "c"],
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=|",
        "--property",
        "ignore.error=true",
    )
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic_name, "partition": 0, "offset": -1},
                    {"topic": topic_name, "partition": 1, "offset": 0},
                ],
                "version": 1,
            }
        )
    )
    r = kesque("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(spec))
    assert r.returncode == 0, err(r)
    lines = out(r).splitlines()
    assert lines[:2] == ["Executing records delete operation", "Records delete operation completed:"]
    got = dict(re.match(r"^partition: (\S+)\tlow_watermark: (\d+)$", line).groups() for line in lines[2:])
    ends = dict(
        line.rsplit(":", 1)
        for line in out(kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name)).splitlines()
    )
    assert got == {f"{topic_name}-0": ends[f"{topic_name}:0"], f"{topic_name}-1": "0"}
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name, "--time", "-2", "--partitions", "0")
    assert out(r) == f"{topic_name}:0:{ends[f'{topic_name}:0']}\n"

    spec.write_text(json.dumps({"partitions": [{"topic": topic_name, "partition": 1, "offset": 999}]}))
    r = kesque("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(spec))
    assert out(r).splitlines()[2] == (
        f"partition: {topic_name}-1\terror: org.apache.kafka.common.errors."
        "OffsetOutOfRangeException: The requested offset is not within the range of "
        "offsets maintained by the server."
    )
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "t", "partition": 1, "offset": 1},
                    {"topic": "t", "partition": 1, "offset": 2},
                ],
                "version": 1,
            }
        )
    )
    r = kesque("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(spec))
    assert r.returncode == 1 and err(r) == "Offset json file contains duplicate topic partitions: t-1\n"
    spec.write_text("{not json")
    r = kesque("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(spec))
    assert r.returncode == 1 and err(r) == "The input string is not a valid JSON\n"
    spec.write_text('{"partitions": [], "version": 2}')
    r = kesque("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(spec))
    assert r.returncode == 1 and err(r) == "Not supported version field value 2\n"


def test_log_dirs(module_broker, topic_name):
    bs = module_broker.bootstrap_servers
    create(bs, topic_name, 2)
    produce(bs, topic_name, ["x" * 100])
    r = kesque("log-dirs", "--bootstrap-server", bs, "--describe", "--topic-list", topic_name)
    assert r.returncode == 0, err(r)
    lines = out(r).splitlines()
    assert lines[:2] == [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 1",
    ]
    assert lines[2].startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[')
    assert lines[2].endswith('"version":1}')
    doc = json.loads(lines[2])
    (d,) = doc["brokers"][0]["logDirs"]
    assert list(d) == ["partitions", "error", "logDir"]  # Kafka's (HashMap) key order
    assert d["error"] is None and os.path.realpath(d["logDir"]) == os.path.realpath(module_broker.data_dir)
    parts = {p["partition"]: p for p in d["partitions"]}
    assert set(parts) == {f"{topic_name}-0", f"{topic_name}-1"}
    assert list(parts[f"{topic_name}-0"]) == ["partition", "size", "offsetLag", "isFuture"]
    assert sum(p["size"] for p in parts.values()) > 100
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in parts.values())

    r = kesque("log-dirs", "--bootstrap-server", bs, "--describe", "--broker-list", "1,7")
    assert r.returncode == 1
    assert err(r) == "ERROR: The given brokers do not exist from --broker-list: 7. Current existent brokers: 1\n"
    r = kesque("log-dirs", "--bootstrap-server", bs)
    assert r.returncode == 1 and err(r).startswith('Missing required argument "[describe]"\n')


# ----------------------------------------------------------------- perf tests


def test_producer_and_consumer_perf(bs, topic_name):
    create(bs, topic_name, 2)
    r = kesque(
        "producer-perf-test",
        "--topic",
        topic_name,
        "--num-records",
        "3000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bs}",
        "acks=1",
        "linger.ms=5",
    )
    assert r.returncode == 0, err(r)
    last = out(r).splitlines()[-1]
    assert re.match(
        r"^3000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max "
        r"latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$",
        last,
    ), last
    r = kesque("get-offsets", "--bootstrap-server", bs, "--topic", topic_name)
    assert sum(int(line.rsplit(":", 1)[1]) for line in out(r).splitlines()) == 3000

    r = kesque("consumer-perf-test", "--bootstrap-server", bs, "--topic", topic_name, "--messages", "3000")
    assert r.returncode == 0, err(r)
    header, row = out(r).splitlines()
    assert header == (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    fields = row.split(", ")
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}$", fields[0])
    assert fields[2] == "0.2861" and fields[4] == "3000" and fields[6] == "0"

    r = kesque(
        "consumer-perf-test",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--messages",
        "5000",
        "--timeout",
        "500",
        "--hide-header",
    )
    lines = out(r).splitlines()
    assert lines[0] == (
        "WARNING: Exiting before consuming the expected number of messages: timeout (500 ms) "
        "exceeded. You can use the --timeout option to increase the timeout."
    )
    assert lines[1].split(", ")[4] == "3000"
    assert "__consumer_offsets" not in out(kesque("topics", "--bootstrap-server", bs, "--list"))


def test_perf_argument_errors(bs):
    r = kesque(
        "producer-perf-test",
        "--topic",
        "t",
        "--num-records",
        "10",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bs}",
    )
    assert r.returncode == 1
    assert (
        "producer-performance: error: one of the arguments --record-size --payload-file --payload-monotonic "
        "is required" in err(r)
    )
    r = kesque(
        "producer-perf-test",
        "--topic",
        "t",
        "--num-records",
        "0",
        "--throughput",
        "-1",
        "--record-size",
        "10",
        "--producer-props",
        f"bootstrap.servers={bs}",
    )
    assert r.returncode == 1 and "--num-records should be greater than zero" in err(r)
    r = kesque("consumer-perf-test", "--bootstrap-server", bs, "--topic", "t")
    assert r.returncode == 1 and err(r).startswith('Missing required argument "[messages]"\n')


def test_console_scripts_match_subcommands(bs, topic_name):
    r = script("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", topic_name)
    assert r.returncode == 0 and r.stdout == f"Created topic {topic_name}.\n".encode()
    r = script("kafka-console-producer.sh", "--bootstrap-server", bs, "--topic", topic_name, input=b"via script\n")
    assert r.returncode == 0
    r = script(
        "kafka-console-consumer.sh",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--from-beginning",
        "--max-messages",
        "1",
    )
    assert r.stdout == b"via script\n" and r.stderr.endswith(b"Processed a total of 1 messages\n")
    r = script("kafka-get-offsets.sh", "--bootstrap-server", bs, "--topic", topic_name)
    assert r.stdout == f"{topic_name}:0:1\n".encode()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_console_producer_output_readable_by_kcat(bs, topic_name):
    create(bs, topic_name)
    produce(bs, topic_name, ["k\tv"], "--property", "parse.key=true")
    r = subprocess.run(
        ["kcat", "-b", bs, "-C", "-t", topic_name, "-o", "beginning", "-c", "1", "-f", "%k=%s\n"],
        capture_output=True,
        timeout=30,
    )
    assert r.stdout == b"k=v\n"


# ----------------------------------------------------------------- configs: client quotas


def test_configs_client_quotas_alter_describe_delete(bs):
    client = "q-" + uuid.uuid4().hex[:8]

    def configs(*args):
        return kesque("configs", "--bootstrap-server", bs, *args)

    r = configs(
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--alter",
        "--add-config",
        "producer_byte_rate=1024,consumer_byte_rate=20000000,request_percentage=12.5",
    )
    assert (r.returncode, out(r)) == (0, f"Completed updating config for client {client}.\n"), err(r)
    r = configs("--entity-type", "clients", "--entity-name", client, "--describe")
    # Java's Double.toString of each value, in the admin client's HashMap order
    assert out(r) == (
        f"Quota configs for client-id '{client}' are consumer_byte_rate=2.0E7, "
        "producer_byte_rate=1024.0, request_percentage=12.5\n"
    )
    r = configs(
        "--entity-type",
        "users",
        "--entity-name",
        "ANONYMOUS",
        "--entity-type",
        "clients",
        "--entity-default",
        "--alter",
        "--add-config",
        "producer_byte_rate=5",
    )
    assert out(r) == "Completed updating config for user ANONYMOUS.\n", err(r)
    r = configs("--user", "ANONYMOUS", "--client-defaults", "--describe")
    assert out(r) == "Quota configs for user-principal 'ANONYMOUS', the default client-id are producer_byte_rate=5.0\n"
    r = configs("--entity-type", "clients", "--entity-default", "--alter", "--add-config", "consumer_byte_rate=7")
    assert out(r) == "Completed updating default config for clients in the cluster.\n", err(r)
    r = configs("--client-defaults", "--describe")  # strict: only the <default> client entity
    assert out(r) == "Quota configs for the default client-id are consumer_byte_rate=7.0\n"
    r = configs(
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--alter",
        "--delete-config",
        "producer_byte_rate,request_percentage",
    )
    assert r.returncode == 0, err(r)
    r = configs("--entity-type", "clients", "--entity-name", client, "--describe")
    assert out(r) == f"Quota configs for client-id '{client}' are consumer_byte_rate=2.0E7\n"


def test_configs_client_quota_errors(bs):
    def configs(*args):
        return kesque("configs", "--bootstrap-server", bs, *args)

    r = configs("--client", "c", "--alter", "--add-config", "producer_byte_rate=-5")
    assert r.returncode == 1
    assert err(r) == (
        f"Error while executing config command with args '--bootstrap-server {bs} --client c --alter "
        "--add-config producer_byte_rate=-5'\njava.util.concurrent.ExecutionException: "
        "org.apache.kafka.common.errors.InvalidRequestException: Quota producer_byte_rate must be "
        "greater than 0\n"
    )
    r = configs("--client", "c", "--alter", "--add-config", "retention.ms=5")
    assert (r.returncode, err(r)) == (
        1,
        "Only quota configs can be added for 'clients' using --bootstrap-server. "
        "Unexpected config names: Set(retention.ms)\n",
    )
    r = configs("--client", "c", "--alter", "--add-config", "producer_byte_rate=fast")
    assert err(r) == "Cannot parse quota configuration value for producer_byte_rate: fast\n"
    r = configs("--client", "c", "--alter", "--delete-config", "consumer_byte_rate")
    assert err(r) == "Invalid config(s): consumer_byte_rate\n"
    r = configs("--ip", "127.0.0.1", "--alter", "--add-config", "producer_byte_rate=5")
    assert err(r) == (
        "Only connection quota configs can be added for 'ips' using --bootstrap-server. Unexpected "
        "config names: producer_byte_rate\n"
    )
    r = configs("--client", "never-set", "--describe")
    assert (r.returncode, out(r)) == (0, "")
