"""``kesque cluster up|down|status`` and ``kesque.Cluster``: a local cluster in one command.

The node configurations are checked as data; the processes for real (pid files, SIGTERM then
SIGKILL, one cluster id everywhere).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from kesque.client.producer import KafkaError, Producer
from kesque.config import BrokerConfig
from kesque.storage.checkpoint import read_properties
from kesque.testing.cluster import Cluster, plan, properties


def cluster(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kesque", "cluster", *args], capture_output=True, text=True, timeout=timeout
    )


def _pids(d) -> list[int]:
    return [
        int(open(os.path.join(d, n, "kesque.pid")).read())
        for n in sorted(os.listdir(d))
        if n.startswith("node-") and os.path.exists(os.path.join(d, n, "kesque.pid"))
    ]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def cluster_dir(tmp_path):
    d = str(tmp_path / "c")
    yield d
    cluster("down", "--dir", d, "--timeout", "5")  # never leave a node behind


# ---------------------------------------------------------------------- configurations


def test_combined_nodes_are_all_voters():
    specs = plan(3, base_port=19092)
    assert [(s.node_id, s.roles, s.port, s.controller_port) for s in specs] == [
        (1, ("broker", "controller"), 19092, 19093),
        (2, ("broker", "controller"), 19094, 19095),
        (3, ("broker", "controller"), 19096, 19097),
    ]
    props = properties(specs[1], specs, "/d/node-2/data")
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19094"
    assert (props["node.id"], props["process.roles"], props["log.dirs"]) == ("2", "broker,controller", "/d/node-2/data")
    assert props["offsets.topic.replication.factor"] == "3" and props["transaction.state.log.min.isr"] == "2"
    config = BrokerConfig(props, strict=False)  # valid settings, read as Kafka reads them
    assert config.node_id == 2 and not config.lone_node


def test_separate_controllers_and_brokers():
    specs = plan(2, controllers=1, base_port=19092)
    assert [(s.node_id, s.roles, s.port, s.controller_port) for s in specs] == [
        (1, ("controller",), None, 19092),
        (2, ("broker",), 19093, None),
        (3, ("broker",), 19094, None),
    ]
    controller, broker = properties(specs[0], specs, "/d"), properties(specs[1], specs, "/d")
    assert controller["listeners"] == "CONTROLLER://127.0.0.1:19092" and "advertised.listeners" not in controller
    assert broker["listeners"] == "PLAINTEXT://127.0.0.1:19093" and broker["process.roles"] == "broker"
    assert broker["controller.quorum.voters"] == controller["controller.quorum.voters"] == "1@127.0.0.1:19092"
    assert broker["offsets.topic.replication.factor"] == "2"  # no more replicas than brokers
    with pytest.raises(ValueError):
        plan(0)


# ---------------------------------------------------------------------- processes


def test_up_status_down_of_one_node(cluster_dir):
    r = cluster("up", "--nodes", "1", "--dir", cluster_dir)
    assert r.returncode == 0, r.stderr
    bootstrap = r.stdout.strip()
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert list(md.brokers) == [1]
    # formatted with the cluster id `up` chose, which the node serves
    state = read_properties(os.path.join(cluster_dir, "cluster.properties"))
    assert state["bootstrap.servers"] == bootstrap
    assert (
        read_properties(os.path.join(cluster_dir, "node-1", "data", "meta.properties"))["cluster.id"]
        == state["cluster.id"]
        == md.cluster_id
    )
    # the project's own pipelines run on it: the Spark sink's two-phase commit (KIP-939) is on
    assert (
        read_properties(os.path.join(cluster_dir, "node-1", "server.properties"))["transaction.two.phase.commit.enable"]
        == "true"
    )
    p = Producer(bootstrap, transactional_id="up-2pc", enable_2pc=True, timeout=20)
    try:
        p.init_transactions()
        assert p.producer_id >= 0
    finally:
        p.close()
    # a second `up` on a running cluster is refused
    again = cluster("up", "--nodes", "1", "--dir", cluster_dir)
    assert again.returncode == 1 and "cluster down" in again.stderr
    r = cluster("status", "--dir", cluster_dir)
    pid = _pids(cluster_dir)[0]
    assert r.returncode == 0 and f"node 1 (broker,controller) running, pid {pid}" in r.stdout, r
    r = cluster("down", "--dir", cluster_dir)
    assert r.returncode == 0 and r.stdout == f"node 1 (pid {pid}) stopped\n"
    assert not _running(pid) and _pids(cluster_dir) == []
    assert os.path.exists(os.path.join(cluster_dir, "node-1", "data", ".kafka_cleanshutdown"))  # SIGTERM: clean
    r = cluster("status", "--dir", cluster_dir)
    assert r.returncode == 1 and "node 1 (broker,controller) not running" in r.stdout


def test_up_override_sets_every_node_and_can_turn_two_phase_commit_off(cluster_dir):
    r = cluster(
        "up",
        "--nodes",
        "1",
        "--dir",
        cluster_dir,
        "--override",
        "transaction.two.phase.commit.enable=false",
        "--override",
        "log.retention.check.interval.ms = 1234",
    )
    assert r.returncode == 0, r.stderr
    props = read_properties(os.path.join(cluster_dir, "node-1", "server.properties"))
    assert props["transaction.two.phase.commit.enable"] == "false"
    assert props["log.retention.check.interval.ms"] == "1234"
    p = Producer(r.stdout.strip(), transactional_id="up-no-2pc", enable_2pc=True, timeout=20)
    try:
        with pytest.raises(KafkaError) as e:  # the user said so: Kafka's refusal
            p.init_transactions()
        assert int(e.value.code) == 53
    finally:
        p.close()
    bad = cluster("up", "--nodes", "1", "--dir", cluster_dir + "-bad", "--override", "no-equals-sign")
    assert bad.returncode == 2 and "Invalid --override 'no-equals-sign': expected key=value" in bad.stderr
    assert not os.path.exists(cluster_dir + "-bad")


def test_down_kills_a_node_that_does_not_stop(cluster_dir):
    assert cluster("up", "--nodes", "1", "--dir", cluster_dir).returncode == 0
    pid = _pids(cluster_dir)[0]
    os.kill(pid, signal.SIGSTOP)  # a stopped process cannot act on SIGTERM
    r = cluster("down", "--dir", cluster_dir, "--timeout", "1")
    assert r.returncode == 0 and "killed (SIGKILL: still running after 1 s)" in r.stdout, r
    assert not _running(pid)


def test_a_stale_pid_file_is_not_another_program(cluster_dir):
    assert cluster("up", "--nodes", "1", "--dir", cluster_dir).returncode == 0
    cluster("down", "--dir", cluster_dir)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:  # the pid file now names a process that is not this node: left alone
        with open(os.path.join(cluster_dir, "node-1", "kesque.pid"), "w") as f:
            f.write(f"{sleeper.pid}\n")
        r = cluster("down", "--dir", cluster_dir)
        assert r.returncode == 0 and "no kesque node is running" in r.stdout
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_cluster_class_kills_and_restarts_a_node(tmp_path):
    with Cluster(nodes=1, data_dir=str(tmp_path)) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        assert list(admin.list_topics(timeout=10).brokers) == [1]
        c.kill(1)
        c.restart(1)
        assert list(admin.list_topics(timeout=10).brokers) == [1]
        assert admin.list_topics(timeout=10).cluster_id == c.cluster_id
    assert c.node(1).process is None


def test_the_fixture(kesque_cluster_factory):
    c = kesque_cluster_factory(nodes=1)
    assert AdminClient({"bootstrap.servers": c.bootstrap_servers}).list_topics(timeout=10).brokers


# ---------------------------------------------------------------------- several nodes (the quorum)


def _brokers_seen(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def test_up_three_nodes_each_answers_with_three_brokers(cluster_dir):
    r = cluster("up", "--nodes", "3", "--dir", cluster_dir, "--timeout", "30")
    assert r.returncode == 0, r.stderr
    servers = r.stdout.strip().split(",")
    assert len(servers) == 3
    for server in servers:
        deadline = time.monotonic() + 30
        while _brokers_seen(server) != {1, 2, 3}:
            assert time.monotonic() < deadline, f"{server} does not see 3 brokers"
            time.sleep(0.2)
    ids = {
        read_properties(os.path.join(cluster_dir, f"node-{n}", "data", "meta.properties"))["cluster.id"]
        for n in (1, 2, 3)
    }
    assert len(ids) == 1


def test_the_cluster_class_with_separate_controllers(tmp_path):
    with Cluster(nodes=2, controllers=1, data_dir=str(tmp_path)).start(timeout=30) as c:
        assert _brokers_seen(c.bootstrap_servers) == {2, 3}


def test_free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice():
    """A cluster's ports are chosen before its nodes bind them; one from the kernel's ephemeral
    range could be taken meanwhile by any outgoing connection (a clean-clone run on two workers
    failed that way: 'Address already in use')."""
    from kesque.testing.kafka import _ephemeral_range, free_port

    lo, _hi = _ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(10000 <= p < lo for p in ports), sorted(p for p in ports if not 10000 <= p < lo)
