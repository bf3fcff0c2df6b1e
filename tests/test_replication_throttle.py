"""Replication quotas (KIP-73) on real kesque processes: a controller (node 1) and brokers 2, 3, 4.

A partition with a few MB on broker 2 gets a new replica on broker 4 (a reassignment). While
its replication is throttled at 100 kB/s the new replica holds little of it: the first fetch
takes up to ``replica.fetch.max.bytes`` (1 MiB) and the quota, measured over Kafka's 11 one-second
samples, then holds the partition back for about ten seconds. Once the throttle is lifted
the replica catches up and joins the ISR. Replicas in sync are never held back: acks=all writes
to a throttled partition complete while the quota is far exceeded.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.testing.cluster import Cluster
from test_replication import FAST, describe, produce, tool, wait_for
from wire import Api, Msg, WireClient

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
RATE = 100_000  # bytes per second: the batches below take ~50 s at this rate
BATCH = [(None, b"x" * 1000, ())] * 100  # ~100 kB a batch
BATCHES = 50  # ~5 MB
SOURCE, OTHER, NEW = 2, 3, 4  # the partition's broker, a broker not involved, the replica added


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # a controller of its own: the brokers stop at once (three combined nodes take 30 s, the last
    # one's controlled shutdown waiting for a controller quorum that is gone)
    with Cluster(nodes=3, controllers=1, data_dir=str(tmp_path_factory.mktemp("throttle")), config=FAST) as c:
        yield c


def alter_configs(cluster: Cluster, rtype: int, name: str, configs: dict) -> None:
    """IncrementalAlterConfigs: SET each key to its value, DELETE those given None."""
    m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
    ops = tuple(
        m("AlterableConfig", name=k, config_operation=1 if v is None else 0, value=v) for k, v in configs.items()
    )
    with WireClient(("127.0.0.1", cluster.node(SOURCE).port)) as c:
        r = c.request(
            ApiKeys.INCREMENTAL_ALTER_CONFIGS,
            1,
            m(
                resources=(m("AlterConfigsResource", resource_type=rtype, resource_name=name, configs=ops),),
                validate_only=False,
            ),
        )
    assert r.responses[0].error_code == 0, r


def dynamic_configs(cluster: Cluster, rtype: int, name: str, node: int = SOURCE) -> dict:
    """The configs set on the resource (DescribeConfigs, dynamic sources only)."""
    m = Msg(ApiKeys.DESCRIBE_CONFIGS, 4)
    with WireClient(("127.0.0.1", cluster.node(node).port)) as c:
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
        )
    res = r.results[0]
    assert res.error_code == 0, res
    return {e.name: e.value for e in res.configs if e.config_source in (1, 2, 3)}


def fill(cluster: Cluster, topic: str) -> int:
    """A one-replica topic on broker SOURCE with ~5 MB; the bytes written."""
    r = tool(
        "topics",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--create",
        "--topic",
        topic,
        "--replica-assignment",
        str(SOURCE),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: describe(cluster, topic).get(0, (0, [], []))[2] == [SOURCE], what=f"{topic} on {SOURCE}")
    with WireClient(("127.0.0.1", cluster.node(SOURCE).port)) as c:
        for _ in range(BATCHES):
            assert Api(c).produce(topic, build_batch(BATCH), acks=1).error_code == 0
    return log_bytes(cluster, SOURCE, topic)


def log_bytes(cluster: Cluster, node: int, topic: str) -> int:
    """The bytes of the replica's segment files on ``node``."""
    path = os.path.join(cluster.data_dir, f"node-{node}", "data", f"{topic}-0")
    if not os.path.isdir(path):
        return 0
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))


def plan(tmp_path, topic: str, replicas: list[int]) -> str:
    path = tmp_path / f"{topic}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(path)


def reassign(*args: str) -> str:
    r = tool("reassign-partitions", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def held_back(cluster: Cluster, topic: str, total: int, seconds: float = 3.0) -> int:
    """After ``seconds``, broker NEW holds well under half of the partition (one fetch of at most
    replica.fetch.max.bytes goes before the quota is exceeded; none when bytes of an earlier test
    still count) and is not in the ISR."""
    time.sleep(seconds)
    got = log_bytes(cluster, NEW, topic)
    assert got < total // 2, (got, total)
    assert describe(cluster, topic)[0][2] == [SOURCE]
    return got


def test_a_leader_throttled_partition_holds_a_new_replica_back_until_the_rate_is_lifted(cluster, tmp_path):
    """The leader side alone (no follower list): the leader answers the new replica's fetches of the
    partition with no records while the leader quota is exceeded; deleting the rate lifts it
    without a restart. Breaks if the leader does not check its quota, or does not count the
    bytes it sends."""
    topic = "leader-held"
    total = fill(cluster, topic)
    alter_configs(cluster, TOPIC_RESOURCE, topic, {LEADER_REPLICAS: f"0:{SOURCE}"})
    alter_configs(cluster, BROKER_RESOURCE, str(SOURCE), {LEADER_RATE: str(RATE)})
    try:
        reassign(
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--execute",
            "--reassignment-json-file",
            plan(tmp_path, topic, [SOURCE, NEW]),
        )
        held_back(cluster, topic, total)
    finally:
        alter_configs(cluster, BROKER_RESOURCE, str(SOURCE), {LEADER_RATE: None})
    wait_for(
        lambda: [sorted(x) for x in describe(cluster, topic)[0][1:]] == [[SOURCE, NEW]] * 2,
        30,
        "the new replica in the ISR",
    )
    assert log_bytes(cluster, NEW, topic) == total


def test_an_in_sync_replica_of_a_throttled_partition_keeps_replicating(cluster):
    """Every replica of an RF 3 partition throttled on both sides at 1 B/s, on every broker:
    the quotas are exceeded from the first replicated byte, yet acks=all writes complete at
    once and the ISR stays whole, because replicas in sync are never held back. Breaks if the
    leader or a follower throttles a replica in sync (the HW stops: the writes time out)."""
    topic = "in-sync"
    r = tool(
        "topics",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "--create",
        "--topic",
        topic,
        "--replica-assignment",
        "2:3:4",
        "--config",
        f"{LEADER_REPLICAS}=*",
        "--config",
        f"{FOLLOWER_REPLICAS}=*",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: sorted(describe(cluster, topic).get(0, (0, [], []))[2]) == [2, 3, 4], what="ISR 2,3,4")
    rates = {LEADER_RATE: "1", FOLLOWER_RATE: "1"}
    alter_configs(cluster, BROKER_RESOURCE, "", rates)  # the cluster default: every broker
    try:
        start = time.monotonic()
        reports = produce(
            cluster.bootstrap_servers,
            topic,
            [b"v" * 1000 for _ in range(200)],
            **{"batch.num.messages": 10, "linger.ms": 1},
        )
        took = time.monotonic() - start
        assert reports == [None] * 200 and took < 10, (took, [e for e in reports if e][:3])
        assert sorted(describe(cluster, topic)[0][2]) == [2, 3, 4]
    finally:
        alter_configs(cluster, BROKER_RESOURCE, "", {k: None for k in rates})


def test_reassign_partitions_throttle_holds_the_new_replica_and_verify_clears_it(cluster, tmp_path):
    """``reassign-partitions --execute --throttle`` as Kafka's tool: it prints Kafka's lines,
    sets the leader list to the current replicas, the follower list to the one added and the
    rates on the brokers involved; the new replica is held back; resubmitting with --additional
    and a higher rate lets it catch up, and --verify then clears every throttle."""
    topic = "reassigned"
    bs = cluster.bootstrap_servers
    total = fill(cluster, topic)
    target = plan(tmp_path, topic, [SOURCE, NEW])
    out = reassign("--bootstrap-server", bs, "--execute", "--reassignment-json-file", target, "--throttle", str(RATE))
    assert out.endswith(
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
        "throttle is removed.\nThe inter-broker throttle limit was set to 100000 B/s\n"
        f"Successfully started partition reassignment for {topic}-0\n"
    ), out
    assert dynamic_configs(cluster, TOPIC_RESOURCE, topic) == {
        LEADER_REPLICAS: f"0:{SOURCE}",
        FOLLOWER_REPLICAS: f"0:{NEW}",
    }
    for b in (SOURCE, NEW):
        assert dynamic_configs(cluster, BROKER_RESOURCE, str(b), node=b) == {
            LEADER_RATE: "100000",
            FOLLOWER_RATE: "100000",
        }
    assert dynamic_configs(cluster, BROKER_RESOURCE, str(OTHER), node=OTHER) == {}  # not involved
    held_back(cluster, topic, total)
    verify = ("--bootstrap-server", bs, "--verify", "--reassignment-json-file", target)
    assert (
        reassign(*verify) == f"Status of partition reassignment:\nReassignment of partition {topic}-0 is still in "
        "progress.\n\n"
    )  # nothing cleared yet
    out = reassign(
        "--bootstrap-server",
        bs,
        "--execute",
        "--additional",
        "--reassignment-json-file",
        target,
        "--throttle",
        "1000000000",
    )
    assert "\nThe inter-broker throttle limit was set to 1000000000 B/s\n" in out, out

    def completed():
        out = reassign(*verify)
        return out if "is completed" in out else None

    done = wait_for(completed, 30, "the reassignment")
    assert done == (
        f"Status of partition reassignment:\nReassignment of partition {topic}-0 is completed.\n\n"
        "Clearing broker-level throttles on brokers 2,3,4\n"
        f"Clearing topic-level throttles on topic {topic}\n"
    )
    assert dynamic_configs(cluster, TOPIC_RESOURCE, topic) == {}
    for b in (SOURCE, NEW):
        assert dynamic_configs(cluster, BROKER_RESOURCE, str(b), node=b) == {}
    assert sorted(describe(cluster, topic)[0][2]) == [SOURCE, NEW] and log_bytes(cluster, NEW, topic) == total
