"""``kesque transactions`` / ``kafka-transactions.sh`` (Kafka's TransactionsCommand) against a real
broker, with transactional state made by confluent-kafka producers and by raw wire requests.

The broker runs with ``transaction.partition.verification.enable=false`` - a Kafka broker before
3.6, where a transactional batch that reaches a partition after its transaction ended (a late or
retried produce) is appended and leaves an open transaction that no coordinator will ever close:
the *hanging transaction* ``find-hanging`` looks for and ``abort`` repairs.

The usage/help texts expected below were produced by argparse4j 0.7.0 (the version Kafka ships)
with the parser TransactionsCommand builds.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.cli.plumbing.javautil import java_hash_order, topic_partition_hash
from kesque.testing.broker import Broker
from test_transactions import _add, _end, _find_coordinator, _init, _txn_produce, lso
from wire import WireClient

BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(
        data_dir=str(tmp_path_factory.mktemp("txcli") / "data"),
        config={
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.num.partitions": "5",
            "transaction.partition.verification.enable": "false",
        },
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(autouse=True)
def _columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse4j's format width: 80 - 5


def tx(*args) -> subprocess.CompletedProcess:
    """``kesque transactions <args>`` in this process."""
    from kesque.cli.main import main

    class Buf(io.BytesIO):
        def close(self):
            pass

    saved = sys.stdout, sys.stderr
    out_b, err_b = Buf(), Buf()
    sys.stdout = io.TextIOWrapper(out_b, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err_b, encoding="utf-8", write_through=True)
    try:
        try:
            code = main(["transactions", *args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        sys.stdout, sys.stderr = saved
    return subprocess.CompletedProcess(args, code or 0, out_b.getvalue().decode(), err_b.getvalue().decode())


def table(text: str) -> list[list[str]]:
    """A prettyPrintTable: every cell padded to its column and followed by a tab."""
    lines = text.splitlines()
    assert lines and all(line.endswith("\t") for line in lines), repr(text)
    cells = [line[:-1].split("\t") for line in lines]
    for col in range(len(cells[0])):  # padded to the widest cell of the column
        assert len({len(row[col]) for row in cells}) == 1, repr(text)
    return [[c.rstrip(" ") for c in row] for row in cells]


def new_topic(bs: str, partitions: int = 1) -> str:
    name = "txc-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def fast_config(tmp_path) -> str:
    path = tmp_path / "admin.properties"
    path.write_text("default.api.timeout.ms=1500\n")
    return str(path)


def read_committed(bs: str, topic: str, partition: int, expect: int, timeout: float) -> list[str]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "rc-" + uuid.uuid4().hex[:6],
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, partition, 0)])
    got: list[str] = []
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and len(got) < expect:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value().decode())
    finally:
        c.close()
    return got


HANGING_HEADER = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
]
PRODUCERS_HEADER = [
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
]


# ============================================================================ arguments (argparse4j)

MAIN_HELP = """\
usage: kafka-transactions.sh [-h] [-v] [--command-config FILE]
                             --bootstrap-server host:port COMMAND ...

This tool is used to analyze  the  transactional  state of producers in the
cluster. It can be used to detect and recover from hanging transactions.

optional arguments:
  -h, --help             show this help message and exit
  -v, --version          show the version  of  this  Kafka distribution and
                         exit
  --command-config FILE  property file containing configs  to  be passed to
                         admin client
  --bootstrap-server host:port
                         hostname and port for  the  broker  to connect to,
                         in  the   form   `host:port`    (multiple   comma-
                         separated entries can be given)

commands:
  COMMAND
    list                 list transactions
    describe             describe the state of an active transactional-id
    describe-producers   describe the  states  of  active  producers  for a
                         topic partition
    abort                abort    a    hanging     transaction    (requires
                         administrative privileges)
    find-hanging         find hanging transactions
"""

ABORT_HELP = """\
usage: kafka-transactions.sh --bootstrap-server host:port abort [-h]
                             --topic TOPIC --partition PARTITION
                             [--start-offset START_OFFSET]
                             [--producer-id PRODUCER_ID]
                             [--producer-epoch PRODUCER_EPOCH]
                             [--coordinator-epoch COORDINATOR_EPOCH]

optional arguments:
  -h, --help             show this help message and exit
  --topic TOPIC          topic name
  --partition PARTITION  partition number

Brokers on versions 3.0 and above:
  For newer brokers,  only  the  start  offset  of  the  transaction  to be
  aborted is required

  --start-offset START_OFFSET
                         start offset of the transaction to abort

Brokers on versions older than 3.0:
  For older brokers, you must provide all of these arguments

  --producer-id PRODUCER_ID
                         producer id
  --producer-epoch PRODUCER_EPOCH
                         producer epoch
  --coordinator-epoch COORDINATOR_EPOCH
                         coordinator epoch
"""

MAIN_USAGE = """\
usage: kafka-transactions.sh [-h] [-v] [--command-config FILE]
                             --bootstrap-server host:port COMMAND ...
"""

DESCRIBE_PRODUCERS_USAGE = """\
usage: kafka-transactions.sh --bootstrap-server host:port
                             describe-producers [-h]
                             [--broker-id BROKER_ID] --topic TOPIC
                             --partition PARTITION
"""


def test_help_is_argparse4js_and_exits_1():
    r = tx("--help")
    assert (r.returncode, r.stdout, r.stderr) == (1, MAIN_HELP, "")  # Kafka exits 1 after help, too
    r = tx("--bootstrap-server", "x", "abort", "-h")
    assert (r.returncode, r.stdout, r.stderr) == (1, ABORT_HELP, "")


@pytest.mark.parametrize(
    "args, stderr",
    [
        (["list"], MAIN_USAGE + "kafka-transactions.sh: error: argument --bootstrap-server is required\n"),
        ([], MAIN_USAGE + "kafka-transactions.sh: error: too few arguments\n"),
        (
            ["--bootstrap-server", "x", "foo"],
            MAIN_USAGE + "kafka-transactions.sh: error: invalid  choice:  'foo'  (choose from 'list',\n"
            "'describe', 'describe-producers', 'abort', 'find-hanging')\n\nDid you mean:\n\tabort\n",
        ),
        (
            ["--bootstrap-server", "x", "d"],
            MAIN_USAGE + "kafka-transactions.sh: error: ambiguous  command:  d  could match describe,\n"
            "describe-producers\n",
        ),
        (
            ["--bootstrap-server", "x", "describe-producers"],  # the last missing one is named
            DESCRIBE_PRODUCERS_USAGE + "kafka-transactions.sh: error: argument --partition is required\n",
        ),
        (
            ["--bootstrap-server", "x", "describe-producers", "--partition", "x", "--topic", "t"],
            DESCRIBE_PRODUCERS_USAGE + "kafka-transactions.sh: error: argument --partition:  could  not convert 'x'\n"
            'to Integer (For input string: "x")\n',
        ),
        (
            ["--bootstrap-server", "x", "describe-producers", "--topc", "t"],
            DESCRIBE_PRODUCERS_USAGE + "kafka-transactions.sh: error: unrecognized arguments: '--topc'\n\n"
            "Did you mean:\n\t--topic\n",
        ),
    ],
)
def test_usage_errors(args, stderr):
    r = tx(*args)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", stderr)


def test_checks_of_the_commands_and_the_admin_client(tmp_path):
    r = tx("--bootstrap-server", "localhost:9092", "abort", "--topic", "t", "--partition", "0")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 "
        "or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older "
        "brokers)\n"
    )
    r = tx("--bootstrap-server", "localhost:9092", "abort", "--topic", "t", "--partition", "0", "--producer-id", "5")
    assert (r.returncode, r.stderr) == (1, "Missing required argument --producer-epoch\n")
    r = tx(
        "--bootstrap-server",
        "localhost:9092",
        "abort",
        "--topic",
        "t",
        "--partition",
        "0",
        "--producer-id",
        "5",
        "--producer-epoch",
        "1",
    )
    assert (r.returncode, r.stderr) == (1, "Missing required argument --coordinator-epoch\n")
    r = tx("--bootstrap-server", "localhost:9092", "find-hanging")
    assert (r.returncode, r.stderr) == (
        1,
        "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search\n",
    )
    r = tx("--bootstrap-server", "localhost:9092", "find-hanging", "--broker-id", "0", "--partition", "5")
    assert (r.returncode, r.stderr) == (1, "The --partition argument requires --topic to be provided\n")
    r = tx("--bootstrap-server", "nohost", "list")
    assert r.returncode == 1 and r.stderr.endswith(
        "Caused by: org.apache.kafka.common.config.ConfigException: Invalid url in bootstrap.servers: nohost\n"
    )
    missing = str(tmp_path / "nope.properties")
    r = tx("--command-config", missing, "--bootstrap-server", "localhost:9092", "list")
    assert (r.returncode, r.stderr) == (
        1,
        f"Failed to load admin client properties: {missing}. Enable debug logging for additional detail.\n",
    )


# ============================================================================ list / describe / describe-producers


def test_list_describe_and_describe_producers(broker, tmp_path):
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 2)
    done_id, open_id = "done-" + uuid.uuid4().hex[:6], "open-" + uuid.uuid4().hex[:6]
    done = Producer({"bootstrap.servers": bs, "transactional.id": done_id, "linger.ms": 0})
    done.init_transactions(15)
    done.begin_transaction()
    done.produce(topic, b"committed", partition=0)
    done.commit_transaction(15)
    ongoing = Producer(
        {"bootstrap.servers": bs, "transactional.id": open_id, "linger.ms": 0, "transaction.timeout.ms": 600000}
    )
    ongoing.init_transactions(15)
    ongoing.begin_transaction()
    before = int(time.time() * 1000)
    ongoing.produce(topic, b"open-1", partition=1)
    ongoing.produce(topic, b"open-0", partition=0)
    assert ongoing.flush(15) == 0

    # list: both transactions, with their coordinator (broker 1) and state
    r = tx("--bootstrap-server", bs, "list")
    assert r.returncode == 0 and r.stderr == ""
    rows = table(r.stdout)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    listed = {row[0]: row for row in rows[1:]}
    assert listed[done_id][1:2] + listed[done_id][3:] == ["1", "CompleteCommit"]
    assert listed[open_id][1:2] + listed[open_id][3:] == ["1", "Ongoing"]
    open_pid, done_pid = int(listed[open_id][2]), int(listed[done_id][2])
    assert open_pid != done_pid
    # --duration-filter: none of them has run for an hour
    r = tx("--bootstrap-server", bs, "list", "--duration-filter", "3600000")
    assert r.returncode == 0 and table(r.stdout) == [rows[0]]

    # describe: state, epoch, timeout, start time and duration, the partitions in Java's HashSet order
    r = tx("--bootstrap-server", bs, "describe", "--transactional-id", open_id)
    assert r.returncode == 0 and r.stderr == ""
    header, row = table(r.stdout)
    assert header == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    assert row[:6] == ["1", open_id, str(open_pid), "0", "Ongoing", "600000"]
    start = int(row[6])
    assert before - 5000 <= start <= int(time.time() * 1000) and 0 <= int(row[7]) < 60000
    tps = java_hash_order([(topic, 1), (topic, 0)], topic_partition_hash)
    assert row[8] == ",".join(f"{t}-{p}" for t, p in tps)
    r = tx("--bootstrap-server", bs, "describe", "--transactional-id", done_id)
    assert r.returncode == 0
    row = table(r.stdout)[1]
    assert row[4:6] == ["CompleteCommit", "60000"] and row[8] == ""  # markers written: no partition left

    # describe-producers: the open transaction's first offset, None for the committed one
    r = tx("--bootstrap-server", bs, "describe-producers", "--topic", topic, "--partition", "0")
    assert r.returncode == 0 and r.stderr == ""
    rows = table(r.stdout)
    assert rows[0] == PRODUCERS_HEADER
    producers = {int(row[0]): row for row in rows[1:]}
    # done: offset 0, its commit marker 1; open: its batch at offset 2
    assert producers[done_pid][1:4] == ["0", "0", "0"] and producers[done_pid][5] == "None"
    assert producers[open_pid][1:4] == ["0", "-1", "0"] and producers[open_pid][5] == "2"
    assert int(producers[open_pid][4]) >= before - 5000
    assert (
        tx(
            "--bootstrap-server", bs, "describe-producers", "--topic", topic, "--partition", "0", "--broker-id", "1"
        ).stdout
        == r.stdout
    )
    # the coordinator knows where the open transaction wrote: not hanging, however old
    r = tx("--bootstrap-server", bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert r.returncode == 0 and table(r.stdout) == [HANGING_HEADER]

    # errors, as Kafka's tool words them (a partition that does not exist: retried until the timeout)
    conf = fast_config(tmp_path)
    r = tx(
        "--command-config", conf, "--bootstrap-server", bs, "describe-producers", "--topic", topic, "--partition", "7"
    )
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        f"Failed to describe producers for partition {topic}-7 on leader: Timed out waiting for a "
        "node assignment. Call: describeProducers(api=METADATA). Enable debug logging for additional "
        "detail.\n"
    )
    r = tx("--bootstrap-server", bs, "find-hanging", "--topic", "no-such-topic")
    assert (r.returncode, r.stderr) == (
        1,
        "Failed to describe 1 topics: This server does not host this "
        "topic-partition.. Enable debug logging for additional detail.\n",
    )

    # the console script is the same tool
    r = subprocess.run(
        [
            os.path.join(BIN, "kafka-transactions.sh"),
            "--bootstrap-server",
            bs,
            "describe-producers",
            "--topic",
            topic,
            "--partition",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and table(r.stdout)[1][0] == str(open_pid) and table(r.stdout)[1][5] == "0"
    ongoing.abort_transaction(15)


def test_describe_unknown_transactional_id(broker, tmp_path):
    r = tx(
        "--command-config",
        fast_config(tmp_path),
        "--bootstrap-server",
        broker.bootstrap_servers,
        "describe",
        "--transactional-id",
        "never-used",
    )
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        "Failed to describe transaction state of transactional-id `never-used`: DescribeTransactions "
        "request for transactionalId `never-used` failed because the ID could not be found. Enable "
        "debug logging for additional detail.\n"
    )


# ============================================================================ find-hanging / abort


def test_find_and_abort_a_hanging_transaction(broker):
    """A producer commits a transaction on partition 1; a transactional batch of it reaches
    partition 0 afterwards (a late produce: nothing added partition 0 to any transaction). The
    coordinator has nothing to abort there, so read_committed consumers of partition 0 stop at
    that batch for good - until ``abort`` writes the ABORT marker."""
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 2)
    txn_id = "late-" + uuid.uuid4().hex[:6]
    with WireClient(bs) as c:
        _find_coordinator(c, txn_id)
        pid, epoch = _init(c, txn_id, 60000)
        assert _add(c, txn_id, pid, epoch, topic, [1]) == [0]
        assert _txn_produce(c, txn_id, topic, 1, pid, epoch, 0, ["in-txn"]).error_code == 0
        assert _end(c, txn_id, pid, epoch, True) == 0
        late = _txn_produce(c, txn_id, topic, 0, pid, epoch, 0, ["late"])
        assert (late.error_code, late.base_offset) == (0, 0)
        # and a second one on partition 1, after the commit marker (offset 2)
        late1 = _txn_produce(c, txn_id, topic, 1, pid, epoch, 1, ["late-1"])
        assert (late1.error_code, late1.base_offset) == (0, 2)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    p.produce(topic, b"after", partition=0)
    assert p.flush(10) == 0
    assert lso(bs, topic, 0) == 0 and read_committed(bs, topic, 0, 1, timeout=1.5) == []

    # not older than the default 15 minutes: not reported yet
    r = tx("--bootstrap-server", bs, "find-hanging", "--topic", topic)
    assert r.returncode == 0 and table(r.stdout) == [HANGING_HEADER]
    r = tx("--bootstrap-server", bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert r.returncode == 0 and r.stderr == ""
    rows = table(r.stdout)
    assert rows[0] == HANGING_HEADER
    assert sorted(row[:6] + row[7:] for row in rows[1:]) == [
        [topic, "0", str(pid), str(epoch), "-1", "0", "0"],
        [topic, "1", str(pid), str(epoch), "0", "2", "0"],
    ]
    assert all(abs(int(row[6]) - time.time() * 1000) < 60000 for row in rows[1:])
    # the same partitions, found by broker (every topic, internal ones included)
    r = tx("--bootstrap-server", bs, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0")
    assert r.returncode == 0 and sorted(row for row in table(r.stdout) if row[0] == topic) == sorted(rows[1:])
    r = tx(
        "--bootstrap-server", bs, "find-hanging", "--topic", topic, "--partition", "0", "--max-transaction-timeout", "0"
    )
    assert [row[:2] for row in table(r.stdout)[1:]] == [[topic, "0"]]

    # abort by start offset (the producer state comes from DescribeProducers)
    r = tx("--bootstrap-server", bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1")
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "",
        f"Could not find any open transactions starting at offset 1 on partition {topic}-0\n",
    )
    r = tx("--bootstrap-server", bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert read_committed(bs, topic, 0, 1, timeout=10) == ["after"]  # past the aborted batch
    assert lso(bs, topic, 0) == 3  # late, after, the ABORT marker

    # abort with the pre-3.0 arguments: a wrong epoch is refused as Kafka refuses it...
    r = tx(
        "--bootstrap-server",
        bs,
        "abort",
        "--topic",
        topic,
        "--partition",
        "1",
        "--producer-id",
        str(pid),
        "--producer-epoch",
        str(epoch - 1),
        "--coordinator-epoch",
        "0",
    )
    spec = (
        f"AbortTransactionSpec(topicPartition={topic}-1, producerId={pid}, producerEpoch={epoch - 1}, "
        "coordinatorEpoch=0)"
    )
    assert (r.returncode, r.stderr) == (
        1,
        f"Failed to abort transaction {spec}: WriteTxnMarkers request with {spec} "
        "failed due an invalid producer epoch. Enable debug logging for additional "
        "detail.\n",
    )
    # ...and coordinator epoch -1 (as DescribeProducers shows an unknown one) is sent as 0
    r = tx(
        "--bootstrap-server",
        bs,
        "abort",
        "--topic",
        topic,
        "--partition",
        "1",
        "--producer-id",
        str(pid),
        "--producer-epoch",
        str(epoch),
        "--coordinator-epoch",
        "-1",
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert read_committed(bs, topic, 1, 1, timeout=10) == ["in-txn"]
    assert lso(bs, topic, 1) == 4

    r = tx("--bootstrap-server", bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert r.returncode == 0 and table(r.stdout) == [HANGING_HEADER]
    r = tx("--bootstrap-server", bs, "describe-producers", "--topic", topic, "--partition", "0")
    assert [row[5] for row in table(r.stdout)[1:]] == ["None"]
