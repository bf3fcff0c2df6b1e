"""``kesque reassign-partitions`` (kafka-reassign-partitions.sh) and the reassignment APIs on real
processes: one broker for the APIs' errors and the tool's no-op paths; a cluster of three combined
nodes and a broker-only node 4 for a reassignment from 1,2,3 to 2,3,4 that --list, --verify and
``topics --describe`` report in progress, and one that completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import oracle
from kesque.protocol.api_keys import ApiKeys
from kesque.testing import kafka as K
from test_quorum_cluster import Nodes
from wire import Msg, WireClient

NO_ACTIVE = "None of the specified partition reassignments are active.\n"


def tool(*args, name: str = "reassign-partitions") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kesque", name, *args], capture_output=True, text=True, timeout=120)


def plan(path, topic: str, replicas: list[int], partition: int = 0) -> str:
    path.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": replicas}]})
    )
    return str(path)


def alter(c: WireClient, topic: str, partition: int, replicas, version: int = 1):
    m = Msg(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, version)
    extra = {"allow_replication_factor_change": True} if version else {}
    body = m(
        timeout=10000,
        **extra,
        topics=(
            m(
                "ReassignableTopic",
                name=topic,
                partitions=(
                    m(
                        "ReassignablePartition",
                        partition_index=partition,
                        replicas=None if replicas is None else tuple(replicas),
                    ),
                ),
            ),
        ),
    )
    p = c.request(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, version, body).responses[0].partitions[0]
    return int(p.error_code), p.error_message


# ------------------------------------------------------------------ one broker


def test_the_apis_answer_with_kafkas_errors(broker):
    r = tool("--bootstrap-server", broker.bootstrap_servers, "--list")
    assert r.stdout == "No partition reassignments found.\n"
    with WireClient(broker.bootstrap_servers) as c:
        m = Msg(ApiKeys.CREATE_TOPICS, 7)
        c.request(
            ApiKeys.CREATE_TOPICS,
            7,
            m(
                topics=(
                    m("CreatableTopic", name="one", num_partitions=1, replication_factor=1, assignments=(), configs=()),
                ),
                timeout=10000,
                validate_only=False,
            ),
        )
        assert alter(c, "nope", 0, [1]) == (3, "Unable to find a topic named nope.")
        assert alter(c, "one", 4, [1], version=0) == (3, "Unable to find partition one:4.")
        assert alter(c, "one", 0, [1, 9]) == (
            39,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        )
        assert alter(c, "one", 0, None) == (85, None)  # NO_REASSIGNMENT_IN_PROGRESS
        assert alter(c, "one", 0, [1]) == (0, None)
        m = Msg(ApiKeys.LIST_PARTITION_REASSIGNMENTS, 0)
        resp = c.request(ApiKeys.LIST_PARTITION_REASSIGNMENTS, 0, m(timeout=10000, topics=None))
        assert (resp.error_code, resp.topics) == (0, ())


def test_the_tool_on_one_broker(broker, tmp_path):
    bs = broker.bootstrap_servers
    r = tool("--bootstrap-server", bs, "--create", "--topic", "solo", "--partitions", "2", name="topics")
    assert r.returncode == 0
    (tmp_path / "topics.json").write_text('{"version":1,"topics":[{"topic":"solo"}]}')
    r = tool(
        "--bootstrap-server",
        bs,
        "--generate",
        "--topics-to-move-json-file",
        str(tmp_path / "topics.json"),
        "--broker-list",
        "1",
    )
    current, proposed = r.stdout.split("\n\n")
    assert current.startswith('Current partition replica assignment\n{"version":1,"partitions":[{"topic":"solo"')
    assert proposed == (
        "Proposed partition reassignment configuration\n"
        '{"version":1,"partitions":[{"topic":"solo","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"solo","partition":1,"replicas":[1],"log_dirs":["any"]}]}\n'
    )
    same = plan(tmp_path / "same.json", "solo", [1])
    r = tool("--bootstrap-server", bs, "--execute", "--reassignment-json-file", same)
    assert r.returncode == 0 and r.stdout.endswith(
        "during rollback\nSuccessfully started partition reassignment for solo-0\n"
    ), r.stdout + r.stderr
    r = tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", same)
    assert r.stdout == (
        "Status of partition reassignment:\nReassignment of partition solo-0 is completed.\n\n"
        "Clearing broker-level throttles on broker 1\nClearing topic-level throttles on topic solo\n"
    )
    r = tool("--bootstrap-server", bs, "--cancel", "--reassignment-json-file", same, "--preserve-throttles")
    assert r.stdout == NO_ACTIVE + "None of the specified partition moves are active."
    r = tool("--bootstrap-server", bs, "--execute", "--reassignment-json-file", plan(tmp_path / "b.json", "solo", [7]))
    assert (r.returncode, r.stdout.splitlines()[0]) == (1, "Error: Unknown broker id 7")


# ------------------------------------------------------------------ a cluster


@pytest.fixture(scope="module")
def cluster():
    # node 4 is paused during the in-progress test: its session must outlive it (it stays unfenced,
    # so the tool's DescribeCluster still lists it)
    nodes = Nodes(3, extra={"broker.session.timeout.ms": "60000"}, brokers_only=1)
    try:
        yield nodes.start()
    finally:
        nodes.close()


def _create(bs: str, topic: str) -> None:
    r = tool("--bootstrap-server", bs, "--create", "--topic", topic, "--replica-assignment", "1:2:3", name="topics")
    assert r.returncode == 0, r.stdout + r.stderr


def _partition_line(bs: str, topic: str) -> str:
    r = tool("--bootstrap-server", bs, "--describe", "--topic", topic, name="topics")
    return r.stdout


def _pause(nodes: Nodes, i: int, sig) -> None:
    os.kill(nodes.brokers[i].process.pid, sig)


def test_a_reassignment_in_progress_is_listed_verified_described_and_cancelled(cluster, tmp_path):
    bs = f"127.0.0.1:{cluster.brokers[0].port}"
    _create(bs, "moving")
    _pause(cluster, 3, signal.SIGSTOP)  # node 4 cannot catch up: the reassignment stays in progress
    try:
        target = plan(tmp_path / "plan.json", "moving", [2, 3, 4])
        r = tool("--bootstrap-server", bs, "--execute", "--reassignment-json-file", target)
        assert r.returncode == 0 and r.stdout.endswith("Successfully started partition reassignment for moving-0\n"), (
            r.stdout + r.stderr
        )
        assert '"replicas":[1,2,3]' in r.stdout  # the rollback plan
        listed = "Current partition reassignments:\nmoving-0: replicas: 2,3,4,1. adding: 4. removing: 1.\n"
        assert tool("--bootstrap-server", bs, "--list").stdout == listed
        for port in cluster.controller_ports:
            r = tool("--bootstrap-controller", f"127.0.0.1:{port}", "--list")
            assert r.stdout == listed, r.stdout + r.stderr
        r = tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", target)
        assert (r.returncode, r.stdout) == (
            0,
            "Status of partition reassignment:\nReassignment of partition moving-0 is still in progress.\n\n",
        )
        out = _partition_line(bs, "moving")
        assert "\tReplicationFactor: 3\t" in out
        assert "\tReplicas: 2,3,4,1\tIsr: 1,2,3\tAdding Replicas: 4\tRemoving Replicas: 1\t" in out, out
        r = tool("--bootstrap-server", bs, "--execute", "--reassignment-json-file", target)
        assert r.returncode == 1 and r.stdout.startswith(
            "Cannot execute because there is an existing partition assignment.  Use --additional"
        ), r.stdout
        r = tool("--bootstrap-server", bs, "--cancel", "--reassignment-json-file", target)
        assert r.stdout == (
            "Successfully cancelled partition reassignment for: moving-0\nNone of the specified "
            "partition moves are active.Clearing broker-level throttles on brokers 1,2,3,4\n"
            "Clearing topic-level throttles on topic moving\n"
        ), r.stdout + r.stderr
        assert tool("--bootstrap-server", bs, "--list").stdout == "No partition reassignments found.\n"
        out = _partition_line(bs, "moving")
        assert "\tReplicas: 2,3,1\tIsr: 1,2,3\tElr" in out, out  # Kafka's revert keeps the widened order
    finally:
        _pause(cluster, 3, signal.SIGCONT)


@pytest.mark.oracle
@pytest.mark.slow  # six JVM tool runs: about 35 s
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_kafkas_tools_see_the_same_reassignment(cluster, tmp_path):
    """kafka-reassign-partitions.sh and kafka-topics.sh (Kafka 4.4) on kesque print what kesque's print."""
    bs = f"127.0.0.1:{cluster.brokers[0].port}"
    _create(bs, "watched")
    _pause(cluster, 3, signal.SIGSTOP)
    try:
        target = plan(tmp_path / "plan.json", "watched", [2, 3, 4])
        r = K.run_tool(
            "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--execute", "--reassignment-json-file", target
        )
        assert r.returncode == 0, r.stdout + r.stderr
        for args in (["--list"], ["--verify", "--reassignment-json-file", target]):
            theirs = K.run_tool("kafka-reassign-partitions.sh", "--bootstrap-server", bs, *args)
            assert tool("--bootstrap-server", bs, *args).stdout == theirs.stdout, args
        theirs = K.run_tool("kafka-topics.sh", "--bootstrap-server", bs, "--describe", "--topic", "watched")
        assert _partition_line(bs, "watched") == theirs.stdout
    finally:
        _pause(cluster, 3, signal.SIGCONT)
    # node 4 runs again, catches up and the reassignment completes: both tools say so alike
    # (Kafka's --verify also clears throttles, sending node 4's removal to node 4 itself)
    deadline = time.monotonic() + 15
    while "is completed" not in (
        ours := tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", target).stdout
    ):
        assert time.monotonic() < deadline, ours
        time.sleep(0.5)
    theirs = K.run_tool(
        "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--verify", "--reassignment-json-file", target
    )
    assert ours == theirs.stdout


def test_a_reassignment_completes_once_the_new_replica_caught_up(cluster, tmp_path):
    bs = f"127.0.0.1:{cluster.brokers[0].port}"
    _create(bs, "moved")
    target = plan(tmp_path / "plan.json", "moved", [2, 3, 4])
    r = tool("--bootstrap-server", bs, "--execute", "--reassignment-json-file", target)
    assert r.returncode == 0, r.stdout + r.stderr
    deadline = time.monotonic() + 15
    while True:
        r = tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", target)
        if "Reassignment of partition moved-0 is completed." in r.stdout:
            break
        assert time.monotonic() < deadline, r.stdout
        time.sleep(0.5)
    fields = dict(f.split(": ", 1) for f in _partition_line(bs, "moved").splitlines()[1].strip("\t").split("\t"))
    assert (fields["Leader"], fields["Replicas"]) == ("2", "2,3,4"), fields  # 1 left: the first ISR replica leads
    assert sorted(fields["Isr"].split(",")) == ["2", "3", "4"] and "Adding Replicas" not in fields, fields


@pytest.mark.parametrize(
    "text,error",
    [
        ('{"version":1,"partitions":[{"topic":"a","partition":0}]}', "No such field exists: `replicas`"),
        (
            '{"version":1,"partitions":[{"topic":"a","partition":"x","replicas":[1]}]}',
            'Expected `Integer` value, received "x"',
        ),
        (
            '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":1}]}',
            "Expected `JSON array` value, received 1",
        ),
        ("[1,2]", "Expected JSON object, received [1,2]"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ("{{", "The input string is not a valid JSON"),
        (
            '{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
            "Size of replicas list [1, 2] is different from size of log dirs list [any] for partition a-0",
        ),
    ],
)
def test_bad_plan_files_get_kafkas_messages(text, error):
    from kesque.cli.plumbing.errors import JavaError
    from kesque.cli.reassign_partitions import parse_reassignment

    with pytest.raises(JavaError) as e:
        parse_reassignment(text)
    assert e.value.message == error


# ------------------------------------------------------------------ --throttle (KIP-73)


def test_throttled_replicas_are_kafkas_move_map():
    """calculateProposedMoveMap and the leader / follower lists: sources are the current
    replicas (those of a reassignment in progress when the partition has one), destinations the
    replicas added; another reassignment in progress is throttled too; entries sort as strings."""
    from kesque.cli.reassign_partitions import move_map, throttled_replicas

    ongoing = {("a", 1): ([4, 5, 1, 2], [4, 5], [1, 2]), ("b", 0): ([1, 2, 3], [3], [])}
    proposed = {("a", 1): [4, 6], ("a", 10): [3, 1], ("a", 2): [2, 3]}
    current = {("a", 1): [4, 5, 1, 2], ("a", 10): [1, 2], ("a", 2): [1, 2]}
    moves = move_map(ongoing, proposed, current)
    assert moves == {"a": {1: ({1, 2}, {4, 6}), 10: ({1, 2}, {3}), 2: ({1, 2}, {3})}, "b": {0: ({1, 2}, {3})}}
    leader, follower = throttled_replicas(moves)
    assert leader == {"a": "10:1,10:2,1:1,1:2,2:1,2:2", "b": "0:1,0:2"}
    assert follower == {"a": "10:3,1:4,1:6,2:3", "b": "0:3"}
    assert throttled_replicas(move_map({}, {("c", 0): [1]}, {("c", 0): [1]})) == ({"c": "0:1"}, {"c": ""})


def _throttle_configs(cluster, topic: str) -> dict:
    """The throttle configs set on ``topic`` and on each broker (DescribeConfigs, dynamic only)."""
    out = {}
    for rtype, name, port in [(2, topic, cluster.brokers[0].port)] + [
        (4, str(i + 1), b.port) for i, b in enumerate(cluster.brokers)
    ]:
        m = Msg(ApiKeys.DESCRIBE_CONFIGS, 4)
        with WireClient(("127.0.0.1", port)) as c:
            r = c.request(
                ApiKeys.DESCRIBE_CONFIGS,
                4,
                m(
                    resources=(
                        m("DescribeConfigsResource", resource_type=rtype, resource_name=name, configuration_keys=None),
                    ),
                    include_synonyms=False,
                    include_documentation=False,
                ),
            ).results[0]
        assert r.error_code == 0, r
        out[(rtype, "<topic>" if rtype == 2 else name)] = {
            e.name: e.value for e in r.configs if "throttled" in e.name and e.config_source in (1, 2)
        }
    return out


@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_kafkas_tool_and_kesques_set_the_same_throttles(cluster, tmp_path):
    """``--execute --throttle``: Kafka 4.4's tool on one topic, kesque's on a twin: the same
    output, the same topic lists and broker rates; each tool's --verify clears them alike."""
    bs = f"127.0.0.1:{cluster.brokers[0].port}"
    runs = {}
    for who, topic in (("kafka", "paced-k"), ("kesque", "paced-q")):
        _create(bs, topic)
        target = plan(tmp_path / f"{topic}.json", topic, [2, 3, 4])
        args = ("--bootstrap-server", bs, "--execute", "--reassignment-json-file", target, "--throttle", "30000")
        r = K.run_tool("kafka-reassign-partitions.sh", *args) if who == "kafka" else tool(*args)
        assert r.returncode == 0, r.stdout + r.stderr
        configs = _throttle_configs(cluster, topic)
        verify = ("--bootstrap-server", bs, "--verify", "--reassignment-json-file", target)
        deadline = time.monotonic() + 20
        while "is completed" not in (
            done := (K.run_tool("kafka-reassign-partitions.sh", *verify) if who == "kafka" else tool(*verify)).stdout
        ):
            assert time.monotonic() < deadline, done
            time.sleep(0.5)
        runs[who] = (
            r.stdout.replace(topic, "<topic>"),
            configs,
            done.replace(topic, "<topic>"),
            _throttle_configs(cluster, topic),
        )
    assert runs["kesque"] == runs["kafka"]
    _out, configs, _done, cleared = runs["kesque"]
    assert configs[(2, "<topic>")] == {
        "leader.replication.throttled.replicas": "0:1,0:2,0:3",
        "follower.replication.throttled.replicas": "0:4",
    }
    assert configs[(4, "4")] == {
        "leader.replication.throttled.rate": "30000",
        "follower.replication.throttled.rate": "30000",
    }
    assert all(not c for c in cleared.values())
