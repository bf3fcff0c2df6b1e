"""``kesque cluster-tool`` (kafka-cluster.sh) on a kesque cluster: the cluster id, the broker and
controller endpoints, and unregistering a broker that is gone."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import oracle
from kesque.testing import kafka as K
from oracle import pair as pair  # the fixture (the redundant alias: a re-export, not an unused import)
from test_quorum_cluster import Nodes
from wire import Api, WireClient


def tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kesque", "cluster-tool", *args], capture_output=True, text=True, timeout=120
    )


def test_cluster_id_endpoints_and_unregister():
    nodes = Nodes(3, brokers_only=1)
    try:
        nodes.start()
        bs = f"127.0.0.1:{nodes.brokers[0].port}"
        controllers = f"127.0.0.1:{nodes.controller_ports[1]}"
        for via in (["--bootstrap-server", bs], ["--bootstrap-controller", controllers]):
            r = tool("cluster-id", *via)
            assert (r.returncode, r.stdout) == (0, f"Cluster ID: {nodes.cluster_id}\n"), r.stderr
        r = tool("list-endpoints", "--bootstrap-server", bs)
        rows = [line.split() for line in r.stdout.splitlines()]
        assert rows[0] == ["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"], r.stdout
        assert [(row[0], row[1], row[2], row[4], row[5]) for row in rows[1:]] == [
            (str(i + 1), "127.0.0.1", str(b.port), "unfenced", "broker") for i, b in enumerate(nodes.brokers)
        ]
        r = tool("list-endpoints", "--bootstrap-controller", controllers)
        rows = [line.split() for line in r.stdout.splitlines()]
        assert [(row[0], row[2], row[5]) for row in rows[1:]] == [
            (str(i + 1), str(port), "controller") for i, port in enumerate(nodes.controller_ports)
        ], r.stdout

        r = tool("unregister", "--bootstrap-server", bs, "--id", "9")
        assert r.returncode == 1 and "Broker ID 9 is not currently registered" in r.stderr, r.stderr
        nodes.brokers[3].kill()  # the broker-only node goes; its registration stays until unregistered
        r = tool("unregister", "--bootstrap-server", bs, "--id", "4")
        assert (r.returncode, r.stdout) == (0, "Broker 4 is no longer registered.\n"), r.stderr
        with WireClient(("127.0.0.1", nodes.brokers[1].port)) as c:
            deadline = time.monotonic() + 10
            while 4 in {b.node_id for b in Api(c).metadata(None).brokers}:
                assert time.monotonic() < deadline, "broker 4 still listed"
                time.sleep(0.1)
        r = tool("list-endpoints", "--bootstrap-server", bs, "--include-fenced-brokers")
        assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["1", "2", "3"], r.stdout
    finally:
        nodes.close()


@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_the_same_output_as_kafkas_tool(pair):
    """kafka-cluster.sh and kesque's, each against its own broker: the same bytes, ports masked
    (Kafka's tool adds a Java stack trace after the error's first line)."""
    for args in (
        ["list-endpoints"],
        ["list-endpoints", "--include-fenced-brokers"],
        ["unregister", "--id", "9"],
        ["--help"],
        ["unregister"],
        ["cluster-id", "--bootstrap-server"],
    ):
        out = {}
        for kind, b in pair.items():
            full = (
                args
                if args[0] == "--help" or args[-1].startswith("--") or args == ["unregister"]
                else [args[0], "--bootstrap-server", b.bootstrap_servers, *args[1:]]
            )
            r = K.run_tool("kafka-cluster.sh", *full) if kind == "kafka" else tool(*full)
            port = b.bootstrap_servers.rsplit(":", 1)[1]
            lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("[")]  # not Kafka's log lines
            first = lines[:1] if r.returncode and not r.stdout else lines
            out[kind] = (r.returncode, r.stdout.replace(port, "<port>"), first)
        assert out["kesque"] == out["kafka"], args
