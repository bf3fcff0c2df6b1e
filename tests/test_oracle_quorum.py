"""Issue 13, test 8: the cluster scenarios on a 3-node Apache Kafka and on a 3-node kesque, compared.

Each scenario runs on both clusters (``cluster`` is parametrized, Kafka first): ``topics
--describe`` of a replication-factor-3 topic, ``metadata-quorum describe --status/--replication``,
``dump-log --cluster-metadata-decoder`` on the nodes' metadata files, SIGKILL of the active
controller (a new leader is elected, topics can still be created, the old one rejoins as a
follower) and the error a client gets while no controller can be elected (2 of 3 killed).

On each cluster Kafka's tools and kesque's tools must print the same thing (after masking what
changes between two calls: offsets, timestamps, lags). Across the clusters, what Kafka's cluster
showed (recorded in :data:`SEEN` while the Kafka half runs) is what kesque's must show, but for
ids, ports and placement. The time until a new controller is elected is measured on both and
printed (``-s``), never asserted: the figures are bench/controller.py's.

Both halves run: the kesque cluster is three `kesque.Broker` processes with the same settings.
The scenarios on the two 3-node clusters take minutes (three JVMs, failovers): they are marked
``slow`` and run with ``make oracle`` (and ``make slow``), not in ``make test``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

import oracle
from kesque.protocol.api_keys import ApiKeys
from kesque.testing import kafka as K

pytestmark = oracle.MARKS

# both clusters: Kafka's default quorum timeouts; a metadata snapshot every few KB so that one
# exists by the time the files are dumped
CONFIG = {"metadata.log.max.record.bytes.between.snapshots": "4096", "group.initial.rebalance.delay.ms": "0"}

SEEN: dict[str, object] = {}  # what the Kafka half saw, for the kesque half to compare with


class Nodes:
    """The little the scenarios need of a 3-node cluster, Kafka's or kesque's."""

    def __init__(self, kind: str, cluster):
        self.kind = kind
        self.cluster = cluster

    @property
    def ids(self) -> list[int]:
        return [1, 2, 3]

    def address(self, node_id: int) -> str:
        if self.kind == "kafka":
            return self.cluster.node(node_id).bootstrap_servers
        spec = next(s for s in self.cluster.specs if s.node_id == node_id)
        return f"{self.cluster.host}:{spec.port}"

    def controller_address(self, node_id: int) -> str:
        if self.kind == "kafka":
            return f"127.0.0.1:{self.cluster.node(node_id).controller_port}"
        spec = next(s for s in self.cluster.specs if s.node_id == node_id)
        return f"{self.cluster.host}:{spec.controller_port}"

    def bootstrap(self, ids=None) -> str:
        return ",".join(self.address(i) for i in ids or self.ids)

    def controllers(self) -> str:
        return ",".join(self.controller_address(i) for i in self.ids)

    def metadata_dir(self, node_id: int) -> str:
        root = self.cluster.node(node_id).data_dir
        found = glob.glob(os.path.join(root, "**", "__cluster_metadata-0"), recursive=True)
        assert found, f"no __cluster_metadata-0 under {root}"
        return found[0]

    def kill(self, node_id: int) -> None:
        self.cluster.node(node_id).kill()

    def restart(self, node_id: int) -> None:
        node = self.cluster.node(node_id)
        if self.kind == "kafka":
            node.start(timeout=120)
        else:
            self.cluster.restart(node_id)


@contextlib.contextmanager
def kafka_cluster(tmp_path_factory):
    with K.KafkaCluster(3, config=CONFIG) as c:
        yield Nodes("kafka", c)


@contextlib.contextmanager
def kesque_cluster(tmp_path_factory):
    from kesque.testing.cluster import Cluster

    with Cluster(nodes=3, data_dir=str(tmp_path_factory.mktemp("kesque-cluster")), config=CONFIG) as c:
        yield Nodes("kesque", c)


@pytest.fixture(
    scope="module",
    params=[pytest.param("kafka", marks=pytest.mark.slow), pytest.param("kesque", marks=pytest.mark.slow)],
)
def cluster(request, tmp_path_factory):
    start = kafka_cluster if request.param == "kafka" else kesque_cluster
    with start(tmp_path_factory) as nodes:
        yield nodes


# ---------------------------------------------------------------------- running the tools
def kafka_tool(script: str, *args) -> subprocess.CompletedProcess:
    return K.run_tool(script, *args)


def kesque_tool(script: str, *args) -> subprocess.CompletedProcess:
    name = re.fullmatch(r"kafka-(.+)\.sh", script).group(1)
    return subprocess.run([sys.executable, "-m", "kesque", name, *args], capture_output=True, text=True, timeout=180)


def both_tools(script: str, *args, normalise=lambda s: s) -> tuple[str, str]:
    """stdout of Kafka's tool and of kesque's (normalised), after checking both succeeded."""
    j, k = kafka_tool(script, *args), kesque_tool(script, *args)
    assert j.returncode == 0, j.stderr
    assert k.returncode == 0, k.stderr
    return normalise(j.stdout), normalise(k.stdout)


def without_log_lines(stderr: str) -> str:
    """A Kafka tool's stderr without its clients' log4j lines (the admin client's WARNs while it
    tries to connect: kesque's tools log nothing)."""
    return "".join(line for line in stderr.splitlines(True) if not LOG_LINE.match(line))


LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] (TRACE|DEBUG|INFO|WARN|ERROR) ")


def mask_cluster(text: str, nodes: Nodes) -> str:
    for i in nodes.ids:
        text = text.replace(nodes.address(i), f"<broker-{i}>").replace(nodes.controller_address(i), f"<controller-{i}>")
    return oracle.mask(text)


# ---------------------------------------------------------------------- wire helpers
def create_topic(bootstrap: str, name: str, timeout_ms: int = 5000, wait: float = 30.0) -> int:
    """CreateTopics (RF 1) to the first answering server of ``bootstrap``: the topic's error code."""
    from kesque.client.wire import Connection, make

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

    with Connection.to_any(bootstrap, "quorum-test", wait, connect_timeout=2.0) as conn:
        return int(conn.request(ApiKeys.CREATE_TOPICS, build).topics[0].error_code)


def quorum(bootstrap: str, controllers: bool = False, timeout_ms: int = 5000):
    """DescribeQuorum's partition data, asked as kesque's metadata-quorum tool asks it (of the
    brokers, or of the active controller among ``bootstrap`` controllers)."""
    from kesque.cli.metadata_quorum import QuorumAdmin

    admin = QuorumAdmin(
        bootstrap,
        {"default.api.timeout.ms": str(timeout_ms), "request.timeout.ms": str(min(2000, timeout_ms))},
        controllers,
    )
    try:
        return admin.describe_quorum()[0]
    finally:
        admin.close()


def wait_for(what: str, check, timeout: float = 120.0, pause: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception:  # noqa: BLE001 - not yet
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(pause)


# ---------------------------------------------------------------------- topics --describe
def test_describe_shows_every_brokers_partitions(cluster):
    """Seed 001's RF-3 create on one broker, --describe from another: the same placement whichever
    broker answers, leaders spread over the three brokers, and kesque's tool prints what Kafka's does."""
    topic = oracle.new_topic("rf3")
    r = kafka_tool(
        "kafka-topics.sh",
        "--bootstrap-server",
        cluster.address(1),
        "--create",
        "--topic",
        topic,
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    )
    assert r.returncode == 0 and r.stdout == f"Created topic {topic}.\n", r.stderr
    outs = {}
    for node in (2, 3):
        j, k = both_tools(
            "kafka-topics.sh", "--bootstrap-server", cluster.address(node), "--describe", "--topic", topic
        )
        assert k == j
        outs[node] = j
    assert outs[2] == outs[3]
    rows = [dict(re.findall(r"(\w+): ([^\t]*)", line)) for line in outs[2].splitlines()[1:]]
    assert [r["Partition"] for r in rows] == ["0", "1", "2"]
    assert all(sorted(r["Replicas"].split(",")) == ["1", "2", "3"] and r["Isr"] == r["Replicas"] for r in rows)
    assert {r["Leader"] for r in rows} == {"1", "2", "3"}
    # across the clusters: the same lines but for the topic id, the placement and Kafka's ELR config
    shape = re.sub(r"(Leader|Replicas|Isr): [^\t]*", r"\1: <n>", oracle.mask(outs[2]).replace(topic, "<topic>"))
    shape = re.sub(r"\tConfigs: .*", "\tConfigs: <configs>", shape)
    if cluster.kind == "kafka":
        SEEN["describe"] = shape
    elif "describe" in SEEN:
        assert shape == SEEN["describe"]


# ---------------------------------------------------------------------- metadata-quorum
STATUS_VOLATILE = re.compile(r"^(HighWatermark|MaxFollowerLag|MaxFollowerLagTimeMs):( +)-?\d+$", re.M)


def normalise_status(text: str) -> str:
    return STATUS_VOLATILE.sub(r"\1:\2<n>", text)


def replication_table(text: str) -> list[list[str]]:
    """The rows of a ``--replication`` table with offsets, lags and times masked (column widths
    follow the values, so the cells are compared, and the padding is checked on its own)."""
    lines = text.splitlines()
    cells = [line.split("\t") for line in lines]
    assert all(c[-1] == "" for c in cells), text  # every cell ends with a tab
    for col in zip(*[row[:-1] for row in cells]):
        assert len({len(x) for x in col}) == 1, text  # padded to the column's width
    rows = [[x.strip() for x in c[:-1]] for c in cells]
    for row in rows[1:]:
        row[2:4] = ["<n>", "<n>"]
        row[4:6] = [re.sub(r"^\d+ ms ago$", "<ago>", re.sub(r"^\d{13}$", "<ts>", x)) for x in row[4:6]]
    return rows


@pytest.mark.parametrize("via", ["--bootstrap-server", "--bootstrap-controller"])
def test_metadata_quorum_describe(cluster, via):
    target = cluster.bootstrap() if via == "--bootstrap-server" else cluster.controllers()
    j, k = both_tools("kafka-metadata-quorum.sh", via, target, "describe", "--status", normalise=normalise_status)
    assert k == j
    status = j
    leader = int(re.search(r"^LeaderId: +(\d+)$", j, re.M).group(1))
    assert leader in cluster.ids
    for flags in (["--replication"], ["--replication", "--human-readable"]):
        j, k = both_tools("kafka-metadata-quorum.sh", via, target, "describe", *flags, normalise=replication_table)
        assert k == j
        assert [row[-1] for row in j] == ["Status", "Leader", "Follower", "Follower"]
        assert j[1][0] == str(leader)
    # across the clusters: the same summary but for the ids, the endpoints and who leads
    status = re.sub(r"^(ClusterId: +).*$", r"\1<id>", mask_cluster(status, cluster), flags=re.M)
    status = re.sub(r"^(LeaderId|LeaderEpoch):( +)\d+$", r"\1:\2<n>", status, flags=re.M)
    if cluster.kind == "kafka":
        SEEN["status"] = status
    elif "status" in SEEN:
        assert status == SEEN["status"]


# usage errors and failures that need no cluster: byte for byte (stack traces aside)
TOOL_ERRORS = [
    [],
    ["--help"],
    ["describe", "--status"],
    ["--bootstrap-server", "{bs}"],
    ["--bootstrap-server", "{bs}", "describe"],
    ["--bootstrap-server", "{bs}", "describe", "--help"],
    ["--bootstrap-server", "{bs}", "describe", "--status", "--replication"],
    ["--bootstrap-server", "{bs}", "describe", "--status", "--human-readable"],
    ["--bootstrap-server", "{bs}", "--bootstrap-controller", "{bs}", "describe", "--status"],
    ["--bootstrap-server", "{bs}", "--command-config", "/nonexistent/admin.properties", "describe", "--status"],
    ["--bootstrap-server", "{bs}", "describe", "--foo"],
    ["--bootstrap-server", "{bs}", "frob"],
    ["--bootstrap-server", "{bs}", "remove-controller"],
    ["--bootstrap-server", "{bs}", "remove-controller", "-i", "x"],
    ["--bootstrap-server", "{bs}", "add-controller"],
]


@pytest.mark.parametrize("args", TOOL_ERRORS, ids=lambda a: " ".join(a) or "no-args")
def test_metadata_quorum_usage_errors_are_kafkas(args):
    args = [a.format(bs="127.0.0.1:9") for a in args]
    j, k = kafka_tool("kafka-metadata-quorum.sh", *args), kesque_tool("kafka-metadata-quorum.sh", *args)
    assert (k.returncode, k.stdout, k.stderr) == (j.returncode, j.stdout, without_log_lines(j.stderr))


# ---------------------------------------------------------------------- dump-log of the metadata files
def dump_both(path: str, *flags: str) -> None:
    j, k = both_tools("kafka-dump-log.sh", *flags, "--files", path)
    assert k == j


def test_dump_log_of_the_metadata_log_and_snapshots(cluster, tmp_path):
    """kafka-dump-log.sh --cluster-metadata-decoder on a node's segment (LeaderChange control
    records, every metadata record type the controller wrote) and on its snapshots."""
    src = cluster.metadata_dir(1)
    wait_for(
        "a metadata snapshot past offset 0",
        lambda: any(not f.startswith("00000000000000000000-") for f in os.listdir(src) if f.endswith(".checkpoint")),
    )
    for name in os.listdir(src):  # a copy: the node goes on appending
        if name.endswith((".checkpoint", ".log")):
            shutil.copy(os.path.join(src, name), tmp_path / name)
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith((".checkpoint", ".log")))
    # Kafka also keeps the bootstrap checkpoint its storage format wrote and older snapshots (until
    # metadata.max.retention.*); kesque writes none at format and keeps only the latest
    # (docs/compatibility.md)
    snapshots = sum(f.endswith(".checkpoint") for f in files)
    assert any(f.endswith(".log") for f in files) and snapshots >= (2 if cluster.kind == "kafka" else 1)
    for name in files:
        dump_both(str(tmp_path / name), "--cluster-metadata-decoder")
    dump_both(str(tmp_path / files[-1]), "--cluster-metadata-decoder", "--skip-record-metadata")
    text = kesque_tool("kafka-dump-log.sh", "--cluster-metadata-decoder", "--files", str(tmp_path / files[0])).stdout
    assert " LeaderChange: {" in text or " SnapshotHeader {" in text


def test_dump_log_of_files_kesques_raft_log_writes(tmp_path):
    """The same on a segment and a snapshot that kesque's FileRaftLog wrote."""
    import uuid

    from kesque.metadata import records as mr
    from kesque.metadata.image import UNASSIGNED
    from kesque.raft.file_log import FileRaftLog
    from kesque.raft.log import LeaderChange

    topic_id, dir_a, dir_b = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    values = [
        mr.encode(r)
        for r in (
            {"type": "FeatureLevelRecord", "name": "metadata.version", "feature_level": 21},
            {
                "type": "RegisterBrokerRecord",
                "broker_id": 1,
                "incarnation_id": uuid.uuid4(),
                "broker_epoch": 5,
                "endpoints": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": 0}],
                "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 21}],
                "rack": None,
                "fenced": True,
                "in_controlled_shutdown": False,
            },
            {"type": "TopicRecord", "name": "orders", "topic_id": topic_id},
            {
                "type": "PartitionRecord",
                "partition_id": 0,
                "topic_id": topic_id,
                "replicas": [1, 2, 3],
                "isr": [1, 2, 3],
                "leader": 1,
                "leader_epoch": 0,
                "partition_epoch": 0,
            },
            {"type": "PartitionChangeRecord", "partition_id": 0, "topic_id": topic_id, "isr": [1, 2], "leader": 2},
            {"type": "BrokerRegistrationChangeRecord", "broker_id": 1, "broker_epoch": 5, "fenced": -1},
            # KIP-858: log dirs and the directory of each replica (UNASSIGNED: not placed yet)
            {
                "type": "RegisterBrokerRecord",
                "broker_id": 2,
                "incarnation_id": uuid.uuid4(),
                "broker_epoch": 9,
                "endpoints": [],
                "features": [],
                "rack": None,
                "fenced": True,
                "in_controlled_shutdown": False,
                "log_dirs": [dir_a, dir_b],
            },
            {
                "type": "PartitionRecord",
                "partition_id": 1,
                "topic_id": topic_id,
                "replicas": [2, 1],
                "isr": [2, 1],
                "leader": 2,
                "leader_epoch": 0,
                "partition_epoch": 0,
                "directories": [UNASSIGNED, dir_a],
            },
            {"type": "PartitionChangeRecord", "partition_id": 1, "topic_id": topic_id, "directories": [dir_b, dir_a]},
            {"type": "BrokerRegistrationChangeRecord", "broker_id": 2, "broker_epoch": 9, "log_dirs": [dir_a]},
            {"type": "NoOpRecord"},
        )
    ]
    log = FileRaftLog(str(tmp_path))
    log.append(1, [LeaderChange(1, (1, 2, 3), (1, 2))])
    log.append(1, values[:4])
    log.append(2, [LeaderChange(2, (1, 2, 3), (2, 3))])
    log.append(2, values[4:])
    log.flush()
    sid = log.create_snapshot(6, values[:4])
    log.close()
    part = tmp_path / "__cluster_metadata-0"
    segment = sorted(glob.glob(str(part / "*.log")))[0]
    snapshot = str(part / f"{sid.end_offset:020d}-{sid.epoch:010d}.checkpoint")
    for path in (segment, snapshot):
        dump_both(path, "--cluster-metadata-decoder")
        dump_both(path)
    assert (
        ' LeaderChange: {"version":0,"leaderId":2,'
        in kesque_tool("kafka-dump-log.sh", "--cluster-metadata-decoder", "--files", segment).stdout
    )


# ---------------------------------------------------------------------- the active controller dies
def test_sigkill_of_the_active_controller(cluster):
    """Another controller is elected, topics are created and described again, and the old leader,
    restarted, catches up and rejoins as a follower."""
    before = quorum(cluster.bootstrap())
    old = int(before.leader_id)
    survivors = [i for i in cluster.ids if i != old]
    cluster.kill(old)
    t0 = time.monotonic()
    controllers = ",".join(cluster.controller_address(i) for i in survivors)
    wait_for(
        "a new leader among the controllers",
        lambda: int(quorum(controllers, True, timeout_ms=300).leader_id) in survivors,
        pause=0.05,
    )
    elected = time.monotonic() - t0
    topic = oracle.new_topic("failover")
    wait_for(
        "a topic created after the failover",
        lambda: create_topic(cluster.bootstrap(survivors), topic, wait=10) in (0, 36),
        pause=0.05,
    )
    elapsed = time.monotonic() - t0
    after = wait_for(
        "a new leader",
        lambda: (lambda q: q if int(q.leader_id) in survivors else None)(quorum(cluster.bootstrap(survivors))),
    )
    assert int(after.leader_epoch) > int(before.leader_epoch)
    print(
        f"\n{cluster.kind}: SIGKILL of controller {old} -> leader {int(after.leader_id)} elected in epoch "
        f"{int(after.leader_epoch)} after {elected:.2f}s, first CreateTopics after {elapsed:.2f}s"
    )
    SEEN.setdefault("failover", {})[cluster.kind] = (elected, elapsed)
    r = kesque_tool(
        "kafka-topics.sh", "--bootstrap-server", cluster.bootstrap(survivors), "--describe", "--topic", topic
    )
    assert r.returncode == 0 and f"Topic: {topic}\t" in r.stdout, r.stderr

    cluster.restart(old)

    def rejoined():
        rows = replication_table(
            kesque_tool(
                "kafka-metadata-quorum.sh", "--bootstrap-server", cluster.bootstrap(), "describe", "--replication"
            ).stdout
        )
        q = quorum(cluster.bootstrap())
        voter = next(v for v in q.current_voters if int(v.replica_id) == old)
        follows = any(row[0] == str(old) and row[-1] == "Follower" for row in rows[1:])
        return follows and int(voter.log_end_offset) >= int(q.high_watermark)

    wait_for(f"node {old} back as a caught-up follower", rejoined, pause=0.5)


@pytest.mark.slow
def test_no_controller_elected_error(cluster):
    """2 of 3 controllers killed: no leader can be elected. Kafka's broker holds CreateTopics while
    it forwards it to a controller it cannot find, and answers REQUEST_TIMED_OUT (7) after its
    forwarding timeout (60 s, not the request's timeout_ms); kesque must answer the same error."""
    leader = int(quorum(cluster.bootstrap()).leader_id)
    other = next(i for i in cluster.ids if i != leader)
    alive = [i for i in cluster.ids if i not in (leader, other)]
    cluster.kill(leader)
    cluster.kill(other)
    try:
        t0 = time.monotonic()
        code = create_topic(cluster.address(alive[0]), oracle.new_topic("noquorum"), timeout_ms=5000, wait=120)
        waited = time.monotonic() - t0
        print(f"\n{cluster.kind}: CreateTopics without a quorum -> error {code} after {waited:.1f}s")
        if cluster.kind == "kafka":
            assert code == 7
            SEEN["no-quorum"] = code
        else:
            assert code == SEEN.get("no-quorum", 7)
        j = kafka_tool(
            "kafka-metadata-quorum.sh",
            "--bootstrap-server",
            cluster.address(alive[0]),
            "--command-config",
            _fast_fail(),
            "describe",
            "--status",
        )
        k = kesque_tool(
            "kafka-metadata-quorum.sh",
            "--bootstrap-server",
            cluster.address(alive[0]),
            "--command-config",
            _fast_fail(),
            "describe",
            "--status",
        )
        assert (j.returncode, k.returncode) == (1, 1)
        # the call's timeout, as Kafka's Admin client words it (its retry count is its own)
        first = [
            re.sub(
                r"\d{13}", "<ts>", re.sub(r"(tries=|after )\d+", r"\1<n>", without_log_lines(r.stderr).splitlines()[0])
            )
            for r in (j, k)
        ]
        assert first[1] == first[0]
    finally:
        cluster.restart(leader)
        cluster.restart(other)
    wait_for("a quorum again", lambda: create_topic(cluster.bootstrap(), oracle.new_topic("back"), wait=10) == 0)


def _fast_fail() -> str:
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"quorum-fast-fail-{os.getpid()}.properties")
    with open(path, "w") as f:
        f.write("default.api.timeout.ms=3000\nrequest.timeout.ms=1000\n")
    return path
