"""The tools fail loudly and stop on signals (kesque issue 11, items 4 and 5).

* No bootstrap server answering, a missing topic, a broker killed mid-stream: a one-line error
  naming the servers and a non-zero exit status, never a silent wait followed by exit 0.
* SIGINT and SIGTERM stop every long-running tool cleanly even when it was started with SIGINT
  ignored, as a background job of a non-interactive shell (``make test &``, ``nohup``, some CI
  runners) starts it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import running_broker, without_subprocess_site
from kesque.testing.broker import DEFAULTS
from test_tools import create, kesque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def text(r) -> str:
    return r.stdout.decode() + r.stderr.decode()


@pytest.fixture(scope="module")
def dead():
    """An address where nothing listens (the port stays bound, so nobody else gets it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def silent():
    """An address that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """A broker that does not create topics on demand."""
    with running_broker(tmp_path_factory.mktemp("strict") / "data", {"auto.create.topics.enable": "false"}) as b:
        yield b.bootstrap_servers


# ----------------------------------------------------------------- nothing listens


def _offsets_file(tmp_path) -> str:
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 1}))
    return str(path)


# tool -> its arguments for a bootstrap address (and a temp dir)
UNREACHABLE = {
    "topics": lambda bs, tmp: ["topics", "--bootstrap-server", bs, "--list"],
    "configs": lambda bs, tmp: [
        "configs",
        "--bootstrap-server",
        bs,
        "--describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "t",
    ],
    "console-producer": lambda bs, tmp: ["console-producer", "--bootstrap-server", bs, "--topic", "t"],
    "console-consumer": lambda bs, tmp: ["console-consumer", "--bootstrap-server", bs, "--topic", "t"],
    "console-consumer-group": lambda bs, tmp: [
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        "t",
        "--group",
        "g",
    ],
    "get-offsets": lambda bs, tmp: ["get-offsets", "--bootstrap-server", bs, "--topic", "t"],
    "delete-records": lambda bs, tmp: [
        "delete-records",
        "--bootstrap-server",
        bs,
        "--offset-json-file",
        _offsets_file(tmp),
    ],
    "log-dirs": lambda bs, tmp: ["log-dirs", "--bootstrap-server", bs, "--describe"],
    "consumer-groups-list": lambda bs, tmp: ["consumer-groups", "--bootstrap-server", bs, "--list"],
    "consumer-groups-describe": lambda bs, tmp: [
        "consumer-groups",
        "--bootstrap-server",
        bs,
        "--describe",
        "--group",
        "g",
    ],
    "transactions": lambda bs, tmp: ["transactions", "--bootstrap-server", bs, "list"],
    "producer-perf-test": lambda bs, tmp: [
        "producer-perf-test",
        "--topic",
        "t",
        "--num-records",
        "3",
        "--record-size",
        "10",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bs}",
    ],
    "consumer-perf-test": lambda bs, tmp: [
        "consumer-perf-test",
        "--bootstrap-server",
        bs,
        "--topic",
        "t",
        "--messages",
        "3",
    ],
}


@pytest.mark.parametrize("tool", sorted(UNREACHABLE))
def test_unreachable_bootstrap_fails_naming_the_address(tool, dead, tmp_path):
    r = kesque(*UNREACHABLE[tool](dead, tmp_path), input="one\n")
    assert r.returncode == 1, text(r)
    assert f"Could not connect to the bootstrap server {dead} (Connection refused)" in text(r)


def _request_timeout(tmp_path, ms: int) -> str:
    """A --command-config file setting request.timeout.ms."""
    path = tmp_path / "admin.properties"
    path.write_text(f"request.timeout.ms={ms}\n")
    return str(path)


def test_every_unreachable_server_is_named(dead, silent, tmp_path):
    r = kesque(
        "topics",
        "--bootstrap-server",
        f"{dead},{silent}",
        "--list",
        "--command-config",
        _request_timeout(tmp_path, 300),
    )
    assert r.returncode == 1
    assert r.stdout.decode() == (
        f"Error while executing topic command : Could not connect to any of the bootstrap "
        f"servers {dead} (Connection refused), {silent} (no answer within 300 ms)\n"
    )


def test_silent_server_fails_within_the_tools_timeout(silent, tmp_path):
    """A server that never answers: the tool's own request.timeout.ms bounds the wait."""
    r = kesque("topics", "--bootstrap-server", silent, "--list", "--command-config", _request_timeout(tmp_path, 300))
    assert r.returncode == 1
    assert r.stdout.decode() == (
        f"Error while executing topic command : Could not connect to the bootstrap server "
        f"{silent} (no answer within 300 ms)\n"
    )
    r = kesque(
        "console-producer", "--bootstrap-server", silent, "--topic", "t", "--request-timeout-ms", "300", input="one\n"
    )
    assert r.returncode == 1
    assert f"{silent} (no answer within 300 ms)" in r.stderr.decode()


# ----------------------------------------------------------------- records not delivered


def test_console_producer_to_missing_topic_fails(strict):
    r = kesque(
        "console-producer",
        "--bootstrap-server",
        strict,
        "--topic",
        "missing",
        "--max-block-ms",
        "500",
        input="one\ntwo\n",
    )
    assert r.returncode == 1
    assert r.stderr.decode().count("ERROR Error when sending message to topic missing") == 2
    assert "UnknownTopicOrPartitionException" in r.stderr.decode()


def test_producer_perf_test_with_failed_sends_fails(strict):
    r = kesque(
        "producer-perf-test",
        "--topic",
        "missing",
        "--num-records",
        "2",
        "--record-size",
        "5",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={strict}",
        "max.block.ms=500",
    )
    assert r.returncode == 1
    assert r.stdout.decode().startswith("0 records sent")


def test_delete_records_partition_error_fails(strict, topic_name, tmp_path):
    create(strict, topic_name)
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps({"partitions": [{"topic": topic_name, "partition": 0, "offset": 5}], "version": 1}))
    r = kesque("delete-records", "--bootstrap-server", strict, "--offset-json-file", str(path))
    assert r.returncode == 1
    assert (
        f"partition: {topic_name}-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException"
        in r.stdout.decode()
    )


def test_consumer_groups_error_fails(strict):
    r = kesque("consumer-groups", "--bootstrap-server", strict, "--describe", "--group", "no-such-group")
    assert r.returncode == 1
    assert r.stdout.decode() == "\nError: Consumer group 'no-such-group' does not exist.\n"


def test_console_producer_with_broker_killed_mid_stream_fails(tmp_path, topic_name):
    with running_broker(tmp_path / "data") as b:
        bs = b.bootstrap_servers
        create(bs, topic_name)
        proc = _tool(
            "console-producer",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--sync",
            "--producer-property",
            "delivery.timeout.ms=2000",
        )
        try:
            proc.stdin.write(b"before\n")
            proc.stdin.flush()
            _wait_for_record(bs, topic_name, "before")
            b.kill()
            proc.stdin.write(b"after\n")
            proc.stdin.close()
            assert proc.wait(60) == 1
            assert "ERROR Error when sending message to topic" in proc.stderr.read().decode()
        finally:
            _reap(proc)


# ----------------------------------------------------------------- signals


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _tool(*args) -> subprocess.Popen:
    """``kesque <args>`` started as a background job of a non-interactive shell starts it:
    SIGINT ignored."""
    return subprocess.Popen(
        [sys.executable, "-m", "kesque", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_ignore_sigint,
    )


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None and not f.closed:
            f.close()


def _catches(pid: int, *sigs: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                mask = int(line.split()[1], 16)
                return all(mask >> (s - 1) & 1 for s in sigs)
    return False


def _wait_catching(proc: subprocess.Popen) -> None:
    """Until the tool has installed its SIGINT and SIGTERM handlers (a hang guard, not a timing)."""
    deadline = time.monotonic() + 60
    while not _catches(proc.pid, signal.SIGINT, signal.SIGTERM):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tool never caught SIGINT and SIGTERM"
        time.sleep(0.05)


def _wait_for_record(bs: str, topic: str, value: str) -> None:
    r = kesque(
        "console-consumer",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "1",
        "--timeout-ms",
        "20000",
    )
    assert r.stdout.decode() == f"{value}\n", text(r)


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])


@pytest.fixture(scope="module")
def bs(module_broker):
    return module_broker.bootstrap_servers


@needs_proc
@SIGNALS
@pytest.mark.parametrize("group", [False, True], ids=["assigned", "group"])
def test_console_consumer_stops_on_signal_with_sigint_ignored(bs, topic_name, sig, group):
    create(bs, topic_name)
    kesque("console-producer", "--bootstrap-server", bs, "--topic", topic_name, input="one\n")
    args = ["console-consumer", "--bootstrap-server", bs, "--topic", topic_name, "--from-beginning"]
    proc = _tool(*args, *(["--group", f"g-{topic_name}"] if group else []))
    try:
        assert proc.stdout.readline() == b"one\n"
        _wait_catching(proc)
        proc.send_signal(sig)
        assert proc.wait(60) == 128 + sig  # a JVM's status after its shutdown hooks ran
        assert proc.stderr.read().decode().endswith("Processed a total of 1 messages\n")
    finally:
        _reap(proc)
    if group:  # it left the group on the way out
        r = kesque("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", f"g-{topic_name}", "--members")
        assert "has no active members" in r.stderr.decode(), text(r)


@needs_proc
@SIGNALS
def test_console_producer_stops_on_signal_with_sigint_ignored(bs, topic_name, sig):
    create(bs, topic_name)
    proc = _tool("console-producer", "--bootstrap-server", bs, "--topic", topic_name)
    try:
        proc.stdin.write(b"one\n")
        proc.stdin.flush()
        _wait_for_record(bs, topic_name, "one")
        _wait_catching(proc)
        proc.send_signal(sig)
        assert proc.wait(60) == 128 + sig
    finally:
        _reap(proc)


PERF = {
    "producer-perf-test": lambda bs, topic: [
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        "100000000",
        "--record-size",
        "10",
        "--throughput",
        "50",
        "--producer-props",
        f"bootstrap.servers={bs}",
    ],
    "consumer-perf-test": lambda bs, topic: [
        "consumer-perf-test",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--messages",
        "100000000",
        "--timeout",
        "600000",
    ],
}


@needs_proc
@SIGNALS
@pytest.mark.parametrize("tool", sorted(PERF))
def test_perf_tools_stop_on_signal_with_sigint_ignored(bs, topic_name, sig, tool):
    create(bs, topic_name)
    proc = _tool(*PERF[tool](bs, topic_name))
    try:
        _wait_catching(proc)
        proc.send_signal(sig)
        assert proc.wait(60) == 128 + sig, proc.stderr.read()
    finally:
        _reap(proc)


BLOCKING_CLEANUP = """
import sys, time
from kesque.cli.plumbing import run
run.STOP_GRACE_SECONDS = 1.0
def tool():
    try:
        time.sleep(600)
    finally:
        print("cleaning up", flush=True)
        time.sleep(600)  # a clean-up that never ends, as a client stuck on a dead broker
sys.exit(run.run_tool(tool))
"""


@needs_proc
def test_a_clean_up_that_blocks_is_cut_short_after_the_grace_period():
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKING_CLEANUP],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        _wait_catching(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM
        assert out.decode() == "cleaning up\n"
        assert "Still running 1 s after signal 15" in err.decode() and "line 10 in tool" in err.decode()
    finally:
        _reap(proc)


@needs_proc
@SIGNALS
def test_serve_stops_on_signal_with_sigint_ignored(tmp_path, sig):
    props = dict(DEFAULTS)
    props.update({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs")})
    cfg = tmp_path / "server.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    proc = _tool("serve", str(cfg))
    try:
        _wait_catching(proc)
        proc.send_signal(sig)
        assert proc.wait(60) == 0
    finally:
        _reap(proc)


# the tests that stop a tool with a signal (test_seeds' console consumer is ended with Ctrl-C)
SIGNAL_TESTS = [
    "tests/test_seeds.py::test_431_log_segment_deletion",
    "tests/test_tools.py::test_console_consumer_sees_new_records_and_stops_on_signal",
]


@pytest.mark.skipif(os.environ.get("KESQUE_NESTED_SIGINT_RUN") == "1", reason="already the nested run")
def test_signal_tests_pass_with_sigint_ignored():
    """``make test &``: the suite's signal tests, run by a pytest that inherited SIGINT ignored."""
    env = without_subprocess_site(dict(os.environ, KESQUE_NESTED_SIGINT_RUN="1"))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SIGNAL_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        preexec_fn=_ignore_sigint,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    assert b"2 passed" in r.stdout
