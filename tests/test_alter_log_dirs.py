"""AlterReplicaLogDirs (KIP-113): moving a replica between one broker's log dirs, with
DescribeLogDirs showing the future replica, on a real broker with two log dirs and real
clients; and the mover's rules (following truncation, log start and gaps) on real logs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.client.wire import Connection, make
from kesque.clock import SYSTEM_CLOCK
from kesque.config.topic import LogConfig
from kesque.errors import ErrorCode
from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.server.drivers.alter_log_dirs import LogDirMover
from kesque.storage.log_manager import LogManager
from kesque.storage.unified_log import UnifiedLog
from kesque.testing.broker import Broker


# ------------------------------------------------------------------ the wire
def alter(bs: str, moves: dict[tuple[str, int], str]) -> dict[tuple[str, int], int]:
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (t, p), d in moves.items():
        by_dir.setdefault(d, {}).setdefault(t, []).append(p)
    with Connection.to_any(bs) as conn:

        def build(mod, v):
            rq = mod.request
            return make(
                rq.AlterReplicaLogDirsRequest,
                dirs=tuple(
                    make(
                        rq.AlterReplicaLogDir,
                        path=d,
                        topics=tuple(
                            make(rq.AlterReplicaLogDirTopic, name=t, partitions=tuple(ps)) for t, ps in ts.items()
                        ),
                    )
                    for d, ts in by_dir.items()
                ),
            )

        resp = conn.request(ApiKeys.ALTER_REPLICA_LOG_DIRS, build)
    return {(t.topic_name, p.partition_index): int(p.error_code) for t in resp.results for p in t.partitions}


def describe(bs: str) -> dict[tuple[str, int, bool], tuple[str, int, int]]:
    """(topic, partition, is_future) -> (log dir, size, offset lag)."""
    with Connection.to_any(bs) as conn:
        resp = conn.request(ApiKeys.DESCRIBE_LOG_DIRS, lambda mod, v: mod.request.DescribeLogDirsRequest(topics=None))
    return {
        (t.name, p.partition_index, p.is_future_key): (os.path.realpath(r.log_dir), p.partition_size, p.offset_lag)
        for r in resp.results
        for t in r.topics
        for p in t.partitions
    }


def create(bs: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()


def wait_for(cond, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def consume_all(bs: str, topic: str, n: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for msg in c.consume(1000, 1.0):
            if msg.error() is None:
                got.append(msg.value())
    c.close()
    return got


@pytest.fixture
def two_dir_broker(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    b = Broker(
        data_dir=str(tmp_path / "meta"),
        config={
            "log.dirs": ",".join(dirs),
            "metadata.log.dir": str(tmp_path / "meta"),
            "log.segment.delete.delay.ms": "200",
            "log.segment.bytes": "1048576",
            "replica.fetch.max.bytes": "20000",
        },
    )
    b.start()
    yield b, [os.path.realpath(d) for d in dirs]
    b.stop()


def test_a_replica_moves_to_another_log_dir_under_load_and_keeps_everything(two_dir_broker):
    """An idempotent producer writes before, during and after the move: the move ends with the
    partition in the other dir, its old directory deleted, every record read back once in
    order, the producer's sequence state carried (no OUT_OF_ORDER_SEQUENCE_NUMBER) and the
    leader-epoch checkpoint as before; a restart finds it in the new dir."""
    b, dirs = two_dir_broker
    bs = b.bootstrap_servers
    create(bs, "moving")
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2, "batch.size": 2000})
    errors: list = []
    sent = 0

    def send(n):
        nonlocal sent
        for _ in range(n):
            p.produce(
                "moving", f"v{sent:06d}".encode() * 20, on_delivery=lambda e, m: e is not None and errors.append(e)
            )
            sent += 1
            p.poll(0)

    send(6000)
    p.flush(30)
    (src,) = {d for (t, _p, fut), (d, _s, _l) in describe(bs).items() if t == "moving" and not fut}
    dest = next(d for d in dirs if d != src)
    epochs_before = open(os.path.join(src, "moving-0", "leader-epoch-checkpoint")).read()
    assert alter(bs, {("moving", 0): dest}) == {("moving", 0): 0}
    send(3000)  # while the copy runs
    p.flush(30)
    wait_for(lambda: describe(bs).get(("moving", 0, False), ("",))[0] == dest, what="the move to end")
    send(1000)
    p.flush(30)
    assert not errors
    d = describe(bs)
    assert ("moving", 0, True) not in d and d[("moving", 0, False)][0] == dest
    assert open(os.path.join(dest, "moving-0", "leader-epoch-checkpoint")).read() == epochs_before
    wait_for(lambda: not [n for n in os.listdir(src) if n.startswith("moving-0")], what="the old dir deleted")
    assert consume_all(bs, "moving", sent) == [f"v{i:06d}".encode() * 20 for i in range(sent)]
    b.stop()
    b.start()
    assert describe(bs)[("moving", 0, False)][0] == dest
    assert len(consume_all(bs, "moving", sent)) == sent


def test_errors_and_a_dir_chosen_before_the_replica_exists(two_dir_broker):
    b, dirs = two_dir_broker
    bs = b.bootstrap_servers
    # a dir not in log.dirs, and a partition this broker does not host (its dir is remembered)
    assert alter(bs, {("later", 0): "/nonexistent/dir"}) == {("later", 0): int(ErrorCode.log_dir_not_found)}
    assert alter(bs, {("later", 0): dirs[1]}) == {("later", 0): int(ErrorCode.replica_not_available)}
    create(bs, "later")
    wait_for(lambda: ("later", 0, False) in describe(bs))
    assert describe(bs)[("later", 0, False)][0] == dirs[1]
    # the dir it is already in: nothing to move
    assert alter(bs, {("later", 0): dirs[1]}) == {("later", 0): 0}
    assert ("later", 0, True) not in describe(bs)


# ------------------------------------------------------------------ the mover on real logs
def _log(d: str, name: str = "t-0", start: int = 0) -> UnifiedLog:
    return UnifiedLog(os.path.join(d, name), "t", 0, LogConfig(), log_start_offset=start, had_clean_shutdown=True)


def _append(lg: UnifiedLog, epoch: int, values: list[bytes]) -> None:
    lg.append_as_leader(memoryview(bytearray(build_batch([(None, v) for v in values]))), epoch, int(time.time() * 1000))


class _Env:
    """LogManager over two dirs with one partition, and a replica manager of one Partition."""

    def __init__(self, tmp_path):
        self.dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
        for d in self.dirs:
            os.makedirs(d)
        self.lm = LogManager(self.dirs, SYSTEM_CLOCK, node_id=1, cluster_id=None)
        self.current = _log(self.dirs[0])
        self.lm.logs[("t", 0)] = self.current
        self.lm._dir_of[("t", 0)] = self.dirs[0]
        self.part = types.SimpleNamespace(log=self.current, replace_log=self._replace)
        self.rm = types.SimpleNamespace(partitions={("t", 0): self.part}, maybe_update_assignment=lambda part: None)
        self.mover = LogDirMover(self.lm, self.rm, 300, spawn=lambda coro: coro.close())

    def _replace(self, lg):
        self.part.log = lg

    def run(self, limit: int = 1000) -> str:
        for _ in range(limit):
            state = self.mover.step("t", 0)
            if state != "copied":
                return state
        raise AssertionError("no end")


def _records(lg: UnifiedLog) -> list[tuple[int, int]]:
    return [(h.base_offset, h.partition_leader_epoch) for h, _d in lg.read_batches(lg.log_start_offset)]


def test_the_copy_follows_a_truncation_of_the_current_log_by_epoch(tmp_path):
    env = _Env(tmp_path)
    for i in range(10):
        _append(env.current, 1, [b"x%d" % i] * 5)
    assert env.mover.alter("t", 0, env.dirs[1]) == ErrorCode.none
    future = env.lm.future_logs[("t", 0)]
    for _ in range(20):  # copy all of it, without the swap
        if future.log_end_offset == env.current.log_end_offset:
            break
        env.mover.step("t", 0)
    # the replica became a follower and diverged: epoch 1 ends at 30 on the new leader, which
    # then wrote epoch 2 from there; the copy had epoch 1 up to 50
    env.current.truncate_to(30)
    env.current.leader_epoch_cache.assign(2, 30)
    for i in range(4):
        _append(env.current, 2, [b"y%d" % i] * 5)
    assert env.run() == "swapped"
    assert env.part.log is env.lm.logs[("t", 0)] and env.part.log.parent_dir == env.dirs[1]
    assert _records(env.part.log) == [(o, 1) for o in range(0, 30, 5)] + [(o, 2) for o in range(30, 50, 5)]
    assert env.part.log.leader_epoch_cache.entries == [(1, 0), (2, 30)]


def test_the_copy_follows_the_log_start_and_skips_compacted_gaps(tmp_path):
    env = _Env(tmp_path)
    for i in range(10):
        _append(env.current, 1, [b"x%d" % i] * 5)
    env.current.update_high_watermark(50)
    env.current.maybe_increment_log_start_offset(12)  # DeleteRecords inside a batch
    assert env.mover.alter("t", 0, env.dirs[1]) == ErrorCode.none
    assert env.run() == "swapped"
    moved = env.part.log
    assert moved.log_start_offset == 12 and moved.log_end_offset == 50 and moved.high_watermark == 50
    assert _records(moved)[0][0] == 10  # the batch holding offset 12 is kept whole, as the source had it


def test_the_copy_is_held_while_the_alter_log_dirs_quota_is_exceeded(tmp_path):
    """replica.alter.log.dirs.io.max.bytes.per.second: once a chunk took the quota's rate over
    its bound, no chunk is copied until it is back under (here: until the bound is lifted);
    every chunk copied counts. Breaks without the check, or if the copies are not counted."""
    from kesque.replication.quota import ReplicationQuota

    env = _Env(tmp_path)
    for i in range(10):
        _append(env.current, 1, [b"x%d" % i] * 5)
    quota = env.mover.quota = ReplicationQuota("alter-log-dirs")
    quota.set_bound(100)
    assert env.mover.alter("t", 0, env.dirs[1]) == ErrorCode.none
    future = env.lm.future_logs[("t", 0)]
    assert env.mover.step("t", 0) == "copied"
    copied = future.log_end_offset
    assert 0 < copied < env.current.log_end_offset and quota.rate.total > 100
    assert [env.mover.step("t", 0) for _ in range(3)] == ["held"] * 3 and future.log_end_offset == copied
    quota.set_bound(None)
    assert env.run() == "swapped"
    assert quota.rate.total == os.path.getsize(os.path.join(env.part.log.dir, "00000000000000000000.log"))


def test_a_crash_between_the_two_renames_keeps_one_copy(tmp_path):
    """The swap renames the future log into place, then the source for deletion: a crash in
    between leaves topic-N in both dirs. The next load keeps one (Kafka refuses to start)."""
    env = _Env(tmp_path)
    for i in range(10):
        _append(env.current, 1, [b"x%d" % i] * 5)
    env.current.flush()
    assert env.mover.alter("t", 0, env.dirs[1]) == ErrorCode.none

    class Crash(Exception):
        pass

    def hook(step):
        raise Crash(step)

    env.mover.crash_hook = hook
    with pytest.raises(Crash):
        env.run()
    assert os.path.isdir(os.path.join(env.dirs[0], "t-0")) and os.path.isdir(os.path.join(env.dirs[1], "t-0"))
    lm = LogManager(env.dirs, SYSTEM_CLOCK, node_id=1, cluster_id=None)
    lm.load_logs(lambda topic: (LogConfig(), None))
    assert list(lm.logs) == [("t", 0)] and lm.logs[("t", 0)].log_end_offset == 50
    assert sum(os.path.isdir(os.path.join(d, "t-0")) for d in env.dirs) == 1


def test_a_restart_resumes_an_unfinished_copy(tmp_path):
    env = _Env(tmp_path)
    for i in range(10):
        _append(env.current, 1, [b"x%d" % i] * 5)
    env.current.flush()
    assert env.mover.alter("t", 0, env.dirs[1]) == ErrorCode.none
    env.mover.step("t", 0)
    future = env.lm.future_logs[("t", 0)]
    assert 0 < future.log_end_offset < 50
    future.flush()
    lm = LogManager(env.dirs, SYSTEM_CLOCK, node_id=1, cluster_id=None)
    lm.load_logs(lambda topic: (LogConfig(), None))
    assert ("t", 0) in lm.future_logs and lm.future_logs[("t", 0)].log_end_offset == future.log_end_offset
    part = types.SimpleNamespace(log=lm.logs[("t", 0)])
    part.replace_log = lambda lg: setattr(part, "log", lg)
    rm = types.SimpleNamespace(partitions={("t", 0): part}, maybe_update_assignment=lambda p: None)
    mover = LogDirMover(lm, rm, 300, spawn=lambda c: c.close())
    for _ in range(100):
        if mover.step("t", 0) == "swapped":
            break
    assert part.log.parent_dir == env.dirs[1] and part.log.log_end_offset == 50
    assert [o for o, _e in _records(part.log)] == list(range(0, 50, 5))


# ------------------------------------------------------------------ the tools
def tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kesque", "reassign-partitions", *args], capture_output=True, text=True, timeout=120
    )


def _move_plan(bs: str, dirs, tmp_path, topic: str, records: int, producer: dict | None = None):
    """``records`` x 100 bytes in a new 1-partition topic, and a reassignment plan moving its
    replica on broker 1 to the other log dir: (its dir, the other dir, the plan's path)."""
    import json

    create(bs, topic)
    p = Producer({"bootstrap.servers": bs, **(producer or {})})
    for _ in range(records):
        p.produce(topic, b"v" * 100)
    p.flush(30)
    (src,) = {d for (t, _p, fut), (d, _s, _l) in describe(bs).items() if t == topic and not fut}
    dest = next(d for d in dirs if d != src)
    spec = tmp_path / "plan.json"
    spec.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1], "log_dirs": [dest]}]}
        )
    )
    return src, dest, spec


def test_reassign_partitions_moves_a_replica_between_log_dirs(two_dir_broker, tmp_path):
    """kafka-reassign-partitions.sh's log_dirs, with kesque's tool and with Kafka 4.4's (when
    it is here) against the same broker: --execute starts the move, --verify reports it, as
    Kafka's tool prints it."""
    import json

    from kesque.testing import kafka as K

    b, dirs = two_dir_broker
    bs = b.bootstrap_servers
    src, dest, spec = _move_plan(bs, dirs, tmp_path, "tooled", 2000)
    r = tool("--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(spec))
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(
        "Successfully started partition reassignment for tooled-0\n"
        f"Successfully started moving log directory to {dest} for replica tooled-0 with broker 1 \n"
    )
    wait_for(lambda: describe(bs).get(("tooled", 0, False), ("",))[0] == dest, what="the move")
    r = tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(spec))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(
        "Status of partition reassignment:\nReassignment of partition tooled-0 is completed.\n"
        "Reassignment of replica tooled-0-1 completed successfully.\n"
    )
    if K.unavailable() is None:
        theirs = K.run_tool(
            "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(spec)
        )
        assert theirs.stdout == r.stdout
        # Kafka's tool moves it back; kesque's verify then says what Kafka's does
        spec.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": "tooled", "partition": 0, "replicas": [1], "log_dirs": [src]}]}
            )
        )
        theirs = K.run_tool(
            "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(spec)
        )
        assert (
            theirs.returncode == 0
            and f"Successfully started moving log directory to {src} for replica tooled-0 with broker 1"
            in theirs.stdout
        ), theirs.stdout + theirs.stderr
        wait_for(lambda: describe(bs).get(("tooled", 0, False), ("",))[0] == src, what="the move back")
        ours = tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(spec)).stdout
        theirs = K.run_tool(
            "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(spec)
        )
        assert ours == theirs.stdout
    assert len(consume_all(bs, "tooled", 2000)) == 2000


def test_reassign_partitions_replica_alter_log_dirs_throttle_holds_the_copy(two_dir_broker, tmp_path):
    """``--replica-alter-log-dirs-throttle``: the tool sets the rate on the broker of the move
    (Kafka's lines), the copy stops after its first chunk, resubmitting a higher rate with
    --additional lets it finish and --verify clears the rate."""
    b, dirs = two_dir_broker
    bs = b.bootstrap_servers
    src, dest, spec = _move_plan(
        bs, dirs, tmp_path, "paced", 3000, {"batch.size": 2000}
    )  # many batches: the copy takes whole ones
    r = tool(
        "--bootstrap-server",
        bs,
        "--execute",
        "--reassignment-json-file",
        str(spec),
        "--replica-alter-log-dirs-throttle",
        "1000",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "rollback\nWarning: You must run --verify periodically, until the reassignment completes, to ensure the "
        "throttle is removed.\nThe replica-alter-dir throttle limit was set to 1000 B/s\nSuccessfully started "
        "partition reassignment for paced-0\n" in r.stdout
    ), r.stdout
    assert _broker_configs(bs) == {"replica.alter.log.dirs.io.max.bytes.per.second": "1000"}
    time.sleep(2)
    d = describe(bs)
    assert d[("paced", 0, False)][0] == src and d[("paced", 0, True)][2] > 0  # the copy is behind, held
    r = tool(
        "--bootstrap-server",
        bs,
        "--execute",
        "--additional",
        "--reassignment-json-file",
        str(spec),
        "--replica-alter-log-dirs-throttle",
        "100000000",
    )
    assert "The replica-alter-dir throttle limit was set to 100000000 B/s" in r.stdout, r.stdout + r.stderr
    wait_for(lambda: describe(bs).get(("paced", 0, False), ("",))[0] == dest, what="the move")
    r = tool("--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(spec))
    assert r.stdout.endswith(
        "Reassignment of replica paced-0-1 completed successfully.\n"
        "Clearing broker-level throttles on broker 1\nClearing topic-level throttles on topic "
        "paced\n"
    ), r.stdout
    assert _broker_configs(bs) == {}


def _broker_configs(bs: str) -> dict:
    """The dynamic throttle configs of broker 1."""
    with Connection.to_any(bs) as conn:
        resp = conn.request(
            ApiKeys.DESCRIBE_CONFIGS,
            lambda mod, v: make(
                mod.request.DescribeConfigsRequest,
                resources=(
                    make(
                        mod.request.DescribeConfigsResource, resource_type=4, resource_name="1", configuration_keys=None
                    ),
                ),
                include_synonyms=False,
                include_documentation=False,
            ),
        )
    return {
        c.name: c.value
        for c in resp.results[0].configs
        if "throttl" in c.name or "alter.log.dirs" in c.name
        if c.config_source == 2
    }


# ------------------------------------------------------------------ a follower's replica
@pytest.mark.slow
def test_a_follower_replica_moves_while_it_replicates(tmp_path):
    """On two brokers (and a controller), the follower's replica of an RF 2 topic moves to its other log dir while
    acks=all writes go on: the replica fetcher appends to the new log from the swap on (it
    shares the partition's log view), so the follower stays in the ISR and, once the leader is
    killed, serves every acknowledged record."""
    from kesque.testing.cluster import Cluster

    fast = {
        "controller.quorum.election.timeout.ms": "300",
        "controller.quorum.fetch.timeout.ms": "600",
        "controller.quorum.request.timeout.ms": "500",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "3000",
        "replica.fetch.backoff.ms": "200",
        "replica.lag.time.max.ms": "3000",
        "replica.fetch.max.bytes": "20000",
    }
    c = Cluster(nodes=2, controllers=1, data_dir=str(tmp_path / "c"), config=fast)
    follower = c.node(3)  # node 1 is the controller, 2 and 3 the brokers
    dirs = [os.path.realpath(str(tmp_path / "f1")), os.path.realpath(str(tmp_path / "f2"))]
    follower.config["log.dirs"] = ",".join(dirs)  # two log dirs on the follower
    with c:
        bs1, bs2 = c.node(2).bootstrap_servers, follower.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs1})
        admin.create_topics([NewTopic("followed", 1, replica_assignment=[[2, 3]])])["followed"].result()
        p = Producer({"bootstrap.servers": bs1, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
        acked: list[bytes] = []
        errors: list = []

        def send(n):
            for _ in range(n):
                v = b"r%06d" % (len(acked) + len(errors) + n) + b"." * 100
                p.produce("followed", v, on_delivery=lambda e, m: errors.append(e) if e else acked.append(m.value()))
                p.poll(0)
            p.flush(30)

        send(3000)
        (src,) = {d for (t, _p, fut), (d, _s, _l) in describe(bs2).items() if t == "followed" and not fut}
        dest = next(d for d in dirs if d != src)
        assert alter(bs2, {("followed", 0): dest}) == {("followed", 0): 0}
        for _ in range(10):
            send(300)
        wait_for(lambda: describe(bs2).get(("followed", 0, False), ("",))[0] == dest, what="the move")
        send(1000)
        assert not errors
        # the follower has everything the leader acknowledged (it was in the ISR for acks=all)
        c.kill(2)
        got = wait_for(
            lambda: (vs := consume_all(bs2, "followed", len(acked))) and len(vs) >= len(acked) and vs,
            timeout=60,
            what="the new leader to serve everything",
        )
        assert got == acked
