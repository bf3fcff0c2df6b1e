"""The controller figures (issue 13): controller failover and metadata commit latency, on a
3-node kesque beside a 3-node Apache Kafka in the same run.

* **Failover**: SIGKILL of the active controller (the Raft leader of ``__cluster_metadata``,
  found with DescribeQuorum) -> the first CreateTopics answered without error by a surviving
  broker (retried every 20 ms, each to the survivors in turn). Then the killed node is started
  again and the next run waits until it is a caught-up follower, so every run starts from a full
  quorum. p50 and p99 over ``runs`` runs, with Kafka's default quorum timeouts and with
  :data:`TEST_SETTINGS`.
* **Commit latency**: the round trip of one CreateTopics (one partition, RF 1) over a kept
  connection, sequential, on 1 controller (a single combined node) and on 3 (the cluster above):
  the request is answered once the TopicRecord and PartitionRecord are committed by the quorum.

Kafka nodes are :class:`kesque.testing.kafka.KafkaCluster`; kesque nodes ``kesque.Cluster``
(``kesque.testing.cluster``). Each part (a cluster and its figures) is measured on its own, so a
node that fails to come back costs that part only (run.py lists it under ``errors``). Nothing
here asserts on timing.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import uuid

from kesque.protocol.api_keys import ApiKeys

# test settings: a leader is suspected after 500 ms without a fetch (Kafka's default 2 s), elections
# time out after 250-500 ms (1-2 s)
TEST_SETTINGS = {
    "controller.quorum.fetch.timeout.ms": "500",
    "controller.quorum.election.timeout.ms": "250",
    "controller.quorum.election.backoff.max.ms": "250",
}
DEFAULTS: dict[str, str] = {}
COMMON = {"group.initial.rebalance.delay.ms": "0"}


# ------------------------------------------------------------------ clusters
class Nodes:
    """A started 3-node (or 1-node) cluster, Kafka's or kesque's: addresses, kill, restart."""

    def __init__(self, kind: str, cluster):
        self.kind, self.cluster = kind, cluster

    @property
    def ids(self) -> list[int]:
        if self.kind == "kafka":
            return [n.node_id for n in self.cluster.nodes]
        return [s.node_id for s in self.cluster.specs]

    def address(self, node_id: int) -> str:
        if self.kind == "kafka":
            return self.cluster.node(node_id).bootstrap_servers
        spec = next(s for s in self.cluster.specs if s.node_id == node_id)
        return f"{self.cluster.host}:{spec.port}"

    def bootstrap(self, ids=None) -> str:
        return ",".join(self.address(i) for i in (self.ids if ids is None else ids))

    def kill(self, node_id: int) -> None:
        self.cluster.node(node_id).kill()

    def restart(self, node_id: int) -> None:
        if self.kind == "kafka":
            self.cluster.node(node_id).start(timeout=180)
        else:
            self.cluster.restart(node_id)

    def stop(self, node_id: int) -> None:
        """Clean shutdown (SIGTERM, SIGKILL past the broker's stop timeout); returns once it exited."""
        self.cluster.node(node_id).stop()

    def pid(self, node_id: int) -> int | None:
        process = self.cluster.node(node_id).process
        return None if process is None else process.pid

    def data_dir(self, node_id: int) -> str:
        """The node's ``log.dirs`` (Kafka's on-disk layout on both)."""
        if self.kind == "kafka":
            return self.cluster.node(node_id).data_dir
        return os.path.join(self.cluster.data_dir, f"node-{node_id}", "data")

    def log_path(self, node_id: int) -> str:
        return self.cluster.node(node_id).log_path


@contextlib.contextmanager
def kafka_cluster(size: int, config: dict):
    from kesque.testing import kafka as K

    with K.KafkaCluster(size, config={**COMMON, **config}) as c:
        try:
            yield Nodes("kafka", c)
        finally:  # SIGKILL: a clean stop of the last nodes waits a minute for a quorum that is gone
            for node in c.nodes:
                if node.process is not None:
                    node.kill()


@contextlib.contextmanager
def kesque_cluster(size: int, config: dict):
    from kesque.testing.cluster import Cluster  # issue 13 item 1

    with tempfile.TemporaryDirectory(prefix="bench-controller-") as d:
        with Cluster(nodes=size, data_dir=d, config={**COMMON, **config}) as c:
            nodes = Nodes("kesque", c)
            leader(nodes.bootstrap(), timeout=60)  # a quorum, not only listening sockets
            yield nodes


CLUSTERS = {"kafka": kafka_cluster, "kesque": kesque_cluster}


# ------------------------------------------------------------------ requests
def create_topic(conn, name: str, timeout_ms: int = 5000) -> int:
    """One CreateTopics (1 partition, RF 1) on ``conn``: the topic's error code."""
    from kesque.client.wire import make

    def build(mod, v):
        rq = mod.request
        return make(
            rq.CreateTopicsRequest,
            timeout=timeout_ms,
            validate_only=False,
            topics=(
                make(rq.CreatableTopic, name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()),
            ),
        )

    return int(conn.request(ApiKeys.CREATE_TOPICS, build).topics[0].error_code)


def describe_quorum(bootstrap: str, timeout_ms: int = 5000):
    from kesque.cli.metadata_quorum import QuorumAdmin

    admin = QuorumAdmin(bootstrap, {"default.api.timeout.ms": str(timeout_ms), "request.timeout.ms": "2000"}, False)
    try:
        return admin.describe_quorum()[0]
    finally:
        admin.close()


def leader(bootstrap: str, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            q = describe_quorum(bootstrap)
            if int(q.leader_id) >= 0:
                return int(q.leader_id)
        except Exception:  # noqa: BLE001 - no quorum yet
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def wait_caught_up(nodes: Nodes, node_id: int, timeout: float = 120.0) -> None:
    """Until ``node_id`` is a voter whose log reaches the high watermark."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            q = describe_quorum(nodes.bootstrap())
            voter = next(v for v in q.current_voters if int(v.replica_id) == node_id)
            if int(q.leader_id) != node_id and int(voter.log_end_offset) >= int(q.high_watermark) > 0:
                return
        except Exception:  # noqa: BLE001 - not yet
            pass
        time.sleep(0.2)
    raise TimeoutError(f"node {node_id} did not catch up in {timeout}s")


def first_create_after(bootstrap: str, t0: float, timeout: float = 120.0, pause: float = 0.02) -> float:
    """Seconds from ``t0`` to the first CreateTopics answered without error (each try a new
    connection to the next live server: a broker may hold a request it cannot forward)."""
    from kesque.client.wire import Connection

    deadline = t0 + timeout
    name = f"failover-{uuid.uuid4().hex[:8]}"
    while time.monotonic() < deadline:
        try:
            with Connection.to_any(bootstrap, "bench-controller", 2.0, connect_timeout=1.0) as conn:
                code = create_topic(conn, name, timeout_ms=2000)
            if code in (0, 36):  # created (36: by an earlier try whose answer was lost)
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - refused, timed out, disconnected: try again
            pass
        time.sleep(pause)
    raise TimeoutError(f"no CreateTopics succeeded within {timeout}s of the SIGKILL")


# ------------------------------------------------------------------ figures
def percentile(values: list[float], p: float) -> float:
    """Nearest rank (p99 of 20 runs is the slowest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def failover(nodes: Nodes, runs: int, log=print) -> dict:
    """``runs`` times: SIGKILL the active controller, time the first successful CreateTopics,
    restart it and wait until it has caught up."""
    seconds = []
    for i in range(runs):
        old = leader(nodes.bootstrap())
        survivors = [n for n in nodes.ids if n != old]
        nodes.kill(old)
        t0 = time.monotonic()
        seconds.append(first_create_after(nodes.bootstrap(survivors), t0))
        log(f"    {nodes.kind} run {i + 1}/{runs}: controller {old} killed, CreateTopics after {seconds[-1]:.2f} s")
        nodes.restart(old)
        wait_caught_up(nodes, old)
    return {
        "seconds": seconds,
        "p50": percentile(seconds, 50),
        "p99": percentile(seconds, 99),
        "mean": statistics.fmean(seconds),
    }


def commit_latency(nodes: Nodes, requests: int) -> dict:
    """Sequential CreateTopics round trips over one connection (after 5 unmeasured), in ms."""
    from kesque.client.wire import Connection

    ms, errors = [], 0
    prefix = f"commit-{uuid.uuid4().hex[:6]}"
    with Connection.to_any(nodes.bootstrap(), "bench-controller", 30.0) as conn:
        for i in range(requests + 5):
            t0 = time.perf_counter()
            code = create_topic(conn, f"{prefix}-{i}", timeout_ms=30000)
            if i >= 5:
                ms.append((time.perf_counter() - t0) * 1000)
                errors += code != 0
    return {"ms": ms, "p50": percentile(ms, 50), "p99": percentile(ms, 99), "errors": errors}


PARTS = ("defaults", "test", "commit1")


def measure(kind: str, runs: int, requests: int, log=print, parts=PARTS, failed=None) -> dict:
    """Every figure of one broker kind: {"failover": {"defaults"|"test": {...}}, "commit": {1|3: {...}}},
    of the ``parts`` asked ("defaults": failover with default timeouts and the 3-controller commit
    latency, "test": failover with TEST_SETTINGS, "commit1": one controller). A part that fails is
    passed to ``failed(part, exception)`` and the others still run (a Kafka node that does not come
    back once must not cost the figures already measured); without ``failed`` it raises."""
    out: dict = {"failover": {}, "commit": {}}

    def part(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            if failed is None:
                raise
            failed(name, e)

    def cluster3(setting, config):
        log(f"  {kind}: 3 nodes, {setting} quorum timeouts {config or ''} ...")
        with CLUSTERS[kind](3, config) as nodes:
            if setting == "defaults":
                out["commit"][3] = commit_latency(nodes, requests)
            out["failover"][setting] = failover(nodes, runs, log)

    def cluster1():
        log(f"  {kind}: 1 node (one controller) ...")
        with CLUSTERS[kind](1, {}) as nodes:
            out["commit"][1] = commit_latency(nodes, requests)

    for setting, config in (("defaults", DEFAULTS), ("test", TEST_SETTINGS)):
        if setting in parts:
            part(f"{kind} {setting}", lambda s=setting, c=config: cluster3(s, c))
    if "commit1" in parts:
        part(f"{kind} commit1", cluster1)
    return out
