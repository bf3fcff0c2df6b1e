"""The command walkthrough of seeds 001/002 (replication, leader epoch, controller config,
log segment deletion), run on ONE kesque broker with the commands exactly as the seeds print
them, except for these substitutions:

* ``/usr/local/kafka/bin/kafka-X.sh`` -> ``kesque X`` (a few run through the ``kafka-X.sh``
  console scripts instead, to show both spellings behave the same);
* the bootstrap host ``peter-kafka01.foo.bar:9092`` -> the test broker's address;
* ``/data/kafka-logs`` -> the broker's data dir.

Typos in the seeds, corrected here (no hidden aliases exist for them):
``kafka-cosole-producer.sh`` and ``kafka-console.producer.sh`` (-> ``kafka-console-producer.sh``),
``--decribe`` (-> ``--describe``), ``perter-kafka01.foo.bar`` (-> ``peter-kafka01.foo.bar``), and the
``0000..0.log`` shorthand for the segment ``00000000000000000000.log``. Seed 001 prints the
checkpoint line as ``peter-test 0 1``; the topic it is about is ``peter-test01``.

The seeds run a three-broker cluster: ``--replication-factor 3`` (and 2) must fail on one broker
exactly as Kafka fails; the same command with ``--replication-factor 1`` continues the walkthrough.
The leader-failover part of §4.1.5 (epoch 2 after stopping broker 1) needs a second broker and is
not part of this single-broker walkthrough.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from kesque.testing.broker import Broker

BIN = os.path.dirname(sys.executable)
SEED_BIN = "/usr/local/kafka/bin/"
SEED_HOST = "peter-kafka01.foo.bar:9092"
SEED_DATA = "/data/kafka-logs"

# what the seeds' broker does, on a timescale a test can wait for: HW checkpoints every 200 ms
# (default 5 s) and retention checks every 500 ms (default 5 min). (Not log.segment.delete.delay.ms:
# a static broker setting with a topic-level synonym would show in every topic's describe
# "Configs:", as Kafka shows every config whose source is not DEFAULT_CONFIG.)
CONFIG = {"replica.high.watermark.checkpoint.interval.ms": "200", "log.retention.check.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("seeds") / "kafka-logs"
    data.mkdir()  # Broker.start() opens kesque.log inside the data dir before the broker creates it
    b = Broker(data_dir=str(data), config=CONFIG)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def translate(command: str, broker: Broker, via_script: bool = False) -> list[str]:
    """A seed command line -> argv for this machine (see the module docstring)."""
    command = command.replace(SEED_HOST, broker.bootstrap_servers).replace(SEED_DATA, broker.data_dir)
    argv = shlex.split(command)
    if argv[0].startswith(SEED_BIN):
        script = argv[0][len(SEED_BIN) :]
        if via_script:
            return [os.path.join(BIN, script), *argv[1:]]
        tool = re.fullmatch(r"kafka-(.+)\.sh", script).group(1)
        return [sys.executable, "-m", "kesque", tool, *argv[1:]]
    return argv


def run(
    command: str, broker: Broker, input: str | None = None, via_script: bool = False, timeout: float = 60
) -> subprocess.CompletedProcess:
    argv = translate(command, broker, via_script)
    if via_script and not os.path.exists(argv[0]):
        pytest.skip(f"{argv[0]} not installed (pip install -e .)")
    return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


RF_ERROR = (
    "Error while executing topic command : Unable to replicate the partition {rf} time(s): The target "
    "replication factor of {rf} cannot be reached because only 1 broker(s) are registered.\n"
)
DESCRIBE = re.compile(
    r"^Topic: (?P<topic>\S+)\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 1\tReplicationFactor: 1\t"
    r"Configs: (?P<configs>.*)\n\tTopic: (?P=topic)\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\t"
    r"Elr: \tLastKnownElr: \n$"
)


def test_411_replication_overview(broker):
    """§4.1.1: create peter-test01, describe it, produce "test message1", dump segment 0."""
    create = (
        "/usr/local/kafka/bin/kafka-topics.sh --bootstrap-server peter-kafka01.foo.bar:9092 --create "
        "--topic peter-test01 --partitions 1 --replication-factor 3"
    )
    r = run(create, broker)
    assert r.returncode == 1
    assert r.stdout == RF_ERROR.format(rf=3)
    r = run(create.replace("--replication-factor 3", "--replication-factor 1"), broker)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Created topic peter-test01.\n"

    r = run(
        "/usr/local/kafka/bin/kafka-topics.sh --bootstrap-server peter-kafka01.foo.bar:9092 --topic peter-test01 "
        "--describe",
        broker,
        via_script=True,
    )
    assert r.returncode == 0, r.stderr
    m = DESCRIBE.match(r.stdout)
    assert m, r.stdout
    assert m.group("topic") == "peter-test01" and m.group("configs") == ""

    # seed: kafka-cosole-producer.sh (typo)
    r = run(
        "/usr/local/kafka/bin/kafka-console-producer.sh --bootstrap-server peter-kafka01.foo.bar:9092 "
        "--topic peter-test01",
        broker,
        input="test message1\n",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""

    # seed: --files /data/kafka-logs/peter-test01-0/0000..0.log (shorthand for the segment name)
    r = run(
        "/usr/local/kafka/bin/kafka-dump-log.sh --print-data-log --files "
        "/data/kafka-logs/peter-test01-0/00000000000000000000.log",
        broker,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"Dumping {broker.data_dir}/peter-test01-0/00000000000000000000.log"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: "
    )
    assert re.search(r" size: \d+ magic: 2 compresscodec: none crc: \d+ isvalid: true$", lines[2])
    assert re.fullmatch(
        r"\| offset: 0 CreateTime: \d+ keySize: -1 valueSize: 13 sequence: -1 headerKeys: \[\] "
        r"payload: test message1",
        lines[3],
    )
    assert len(lines) == 4


def test_413_high_watermark_checkpoint(broker):
    """§4.1.3: the committed offset lands in replication-offset-checkpoint; seed 002 then sends
    test message2 and sees it advance."""
    path = f"{broker.data_dir}/replication-offset-checkpoint"

    def entry():
        r = run("cat /data/kafka-logs/replication-offset-checkpoint", broker)
        # the checkpoint is written every replica.high.watermark.checkpoint.interval.ms: one
        # written between the topic's creation and the first record still says 0
        return r.returncode == 0 and re.search(r"^peter-test01 0 1$", r.stdout, re.M)

    m = wait_for(entry, what=f"peter-test01 0 1 in {path}")
    assert m.group(0) == "peter-test01 0 1"
    lines = read(path).splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2

    r = run(
        "/usr/local/kafka/bin/kafka-console-producer.sh --bootstrap-server peter-kafka01.foo.bar:9092 "
        "--topic peter-test01",
        broker,
        input="test message2\n",
        via_script=True,
    )
    assert r.returncode == 0, r.stderr
    wait_for(lambda: re.search(r"^peter-test01 0 2$", read(path) or "", re.M), what="the HW checkpoint to reach 2")


def test_415_leader_epoch_checkpoint(broker):
    """§4.1.5: peter-test02's leader-epoch-checkpoint is 0/1/"0 0" and stays so after a write."""
    create = (
        "/usr/local/kafka/bin/kafka-topics.sh --bootstrap-server perter-kafka01.foo.bar:9092 --create "
        "--topic peter-test02 --partitions 1 --replication-factor 2"
    ).replace("perter-kafka01", "peter-kafka01")
    r = run(create, broker)
    assert r.returncode == 1 and r.stdout == RF_ERROR.format(rf=2)
    r = run(create.replace("--replication-factor 2", "--replication-factor 1"), broker)
    assert r.stdout == "Created topic peter-test02.\n"

    # seed: --decribe (typo)
    r = run(
        "/usr/local/kafka/bin/kafka-topics.sh --bootstrap-server peter-kafka01.foo.bar:9092 --topic peter-test02 "
        "--describe",
        broker,
    )
    assert DESCRIBE.match(r.stdout).group("topic") == "peter-test02"

    r = run("cat /data/kafka-logs/peter-test02-0/leader-epoch-checkpoint", broker)
    assert r.returncode == 0 and r.stdout == "0\n1\n0 0\n"

    # seed: kafka-console.producer.sh (typo)
    r = run(
        "/usr/local/kafka/bin/kafka-console-producer.sh --bootstrap-server peter-kafka01.foo.bar:9092 "
        "--topic peter-test02",
        broker,
        input="a message for peter-test02\n",
    )
    assert r.returncode == 0, r.stderr
    r = run("cat /data/kafka-logs/peter-test02-0/leader-epoch-checkpoint", broker)
    assert r.stdout == "0\n1\n0 0\n"


def test_42_controller_broker_configs(broker):
    """§4.2: controlled.shutdown.enable among the broker's configs."""
    r = run(
        "/usr/local/kafka/bin/kafka-configs.sh --bootstrap-server peter-kafka01.foo.bar:9092 --broker 1 "
        "--describe --all",
        broker,
        via_script=True,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "All configs for broker 1 are:"
    assert all(re.fullmatch(r"  \S+=.* sensitive=(true|false) synonyms=\{.*\}", line) for line in lines[1:])
    assert (
        "  controlled.shutdown.enable=true sensitive=false synonyms={DEFAULT_CONFIG:controlled.shutdown.enable=true}"
        in lines
    )
    # the overrides this broker was started with show as static configs
    assert (
        "  log.retention.check.interval.ms=500 sensitive=false synonyms={STATIC_BROKER_CONFIG:"
        "log.retention.check.interval.ms=500, DEFAULT_CONFIG:log.retention.check.interval.ms=300000}" in lines
    )


def test_431_log_segment_deletion(broker):
    """§4.3.1: retention.ms=0 on peter-test03 deletes segment 0; a new one starts at offset 1."""
    create = (
        "/usr/local/kafka/bin/kafka-topics.sh --bootstrap-server perter-kafka01.foo.bar:9092 --create "
        "--topic peter-test03 --partitions 1 --replication-factor 3"
    ).replace("perter-kafka01", "peter-kafka01")
    r = run(create, broker)
    assert r.returncode == 1 and r.stdout == RF_ERROR.format(rf=3)
    r = run(create.replace("--replication-factor 3", "--replication-factor 1"), broker)
    assert r.stdout == "Created topic peter-test03.\n"

    r = run(
        "/usr/local/kafka/bin/kafka-console-producer.sh --bootstrap-server peter-kafka01.foo.bar:9092 "
        "--topic peter-test03",
        broker,
        input="log1\n",
    )
    assert r.returncode == 0, r.stderr

    # the console consumer runs until interrupted, as in the seed (Ctrl-C)
    argv = translate(
        "/usr/local/kafka/bin/kafka-console-consumer.sh --bootstrap-server peter-kafka01.foo.bar:9092 "
        "--topic peter-test03 --from-beginning",
        broker,
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "log1\n"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
        assert err.endswith("Processed a total of 1 messages\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # the seed lists the directory before the 5-minute retention check; with the check every
    # 500 ms here, list it before the retention change lands
    r = run("ls /data/kafka-logs/peter-test03-0/", broker)
    assert r.stdout.split() == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ]

    r = run(
        "/usr/local/kafka/bin/kafka-configs.sh --bootstrap-server peter-kafka01.foo.bar:9092 --topic peter-test03 "
        "--add-config retention.ms=0 --alter",
        broker,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Completed updating config for topic peter-test03.\n"

    r = run(
        "/usr/local/kafka/bin/kafka-topics.sh --bootstrap-server peter-kafka01.foo.bar:9092 --topic peter-test03 "
        "--describe",
        broker,
    )
    assert DESCRIBE.match(r.stdout).group("configs") == "retention.ms=0"

    def rolled():
        names = run("ls /data/kafka-logs/peter-test03-0/", broker).stdout.split()
        live = [n for n in names if not n.endswith(".deleted")]
        done = "00000000000000000001.log" in live and not any(n.startswith("00000000000000000000.") for n in live)
        return names if done else None

    names = wait_for(rolled, what="segment 0 to be deleted")
    for suffix in (".index", ".log", ".timeindex"):
        assert "00000000000000000001" + suffix in names
    assert {"leader-epoch-checkpoint", "partition.metadata"} <= set(names)
    # segment 0's files wait file.delete.delay.ms (60 s) as *.deleted before they go, as in Kafka
    assert all(
        n.startswith("00000000000000000001.") or n.endswith(".deleted") or "." not in n or n == "partition.metadata"
        for n in names
    ), names

    r = run(
        "/usr/local/kafka/bin/kafka-dump-log.sh --print-data-log --files "
        "/data/kafka-logs/peter-test03-0/00000000000000000001.log",
        broker,
    )
    assert r.stdout.splitlines()[1:] == ["Log starting offset: 1"]
    r = run(
        "/usr/local/kafka/bin/kafka-get-offsets.sh --bootstrap-server peter-kafka01.foo.bar:9092 "
        "--topic peter-test03 --time -2",
        broker,
    )
    assert r.stdout == "peter-test03:0:1\n"


def test_clean_shutdown_writes_every_checkpoint(broker):
    """After a clean stop the checkpoints hold the walkthrough's state (as ``cat`` shows it)."""
    broker.stop()
    try:
        hw = read(f"{broker.data_dir}/replication-offset-checkpoint")
        assert re.search(r"^peter-test01 0 2$", hw, re.M)
        assert re.search(r"^peter-test03 0 1$", hw, re.M)
        # (log-start-offset-checkpoint stays empty: as in Kafka, it only lists logs whose start
        # offset is above their first segment's base offset, and peter-test03's segment 1 starts at 1)
        assert read(f"{broker.data_dir}/log-start-offset-checkpoint") == "0\n0\n"
        r = run("/usr/local/kafka/bin/kafka-dump-log.sh --files /data/kafka-logs/replication-offset-checkpoint", broker)
        assert "topic: peter-test01 partition: 0 offset: 2" in r.stdout.splitlines()
    finally:
        broker.start()
