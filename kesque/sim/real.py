"""The real broker under the simulator: ``KesqueServer`` nodes on :class:`~kesque.sim.loop.SimLoop`.

A cluster of three brokers (nodes 2-4) and one controller (node 1), or a quorum of three
(nodes 1, 5 and 6: a separate KRaft controller quorum, as Kafka's examples and
``kesque.testing.Cluster(controllers=3)`` configure it, ``controller.quorum.voters`` naming the
three), or the brokers as the voters (combined nodes) runs in this process, each node a
:class:`~kesque.sim.loop.Process` at its own address (``10.0.0.<id>``), with its log dirs in a
temporary directory (on ``/dev/shm`` when there is one) formatted as ``kesque storage format``
does. The nodes are the real code, unchanged: the socket server, the raft manager
and the quorum controller, broker registration and heartbeats, the replica manager, the
partitions and their ``Log`` files, the replica fetchers, AlterPartition, the coordinators
(loaded, idle). What the simulation changes, and nothing else:

* time is the loop's (``SimClock``: the broker's ``clock`` object, and ``loop.time()``);
* the network is :class:`~kesque.sim.loop.SimNetwork` (``SocketServer`` listens on the loop's
  sockets; a fetch response's file regions are written as bytes, not with ``sendfile``);
* no threads: the checkpoint writer (``io_executor``) and the raft flushes run inline, and the
  log cleaner is off (``log.cleaner.enable=false``: no compacted topic is written here);
* ``uuid4``, the ``random`` module and each server's ``rng`` draw from the seed;
* a halt (``halt_process``, a failed log dir) kills the simulated process, not Python.

A kill is ``kill -9``: the process's callbacks never run again and its sockets are reset; its
files stay as written (the page cache survives a process crash) and the directory locks are
released as the kernel releases them. A restart is a new ``KesqueServer`` on the same dirs.

The client (:class:`WireClient`) is a process of its own that speaks the Kafka protocol over the
same network with the broker's :class:`~kesque.server.channel.Channel`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import random
import shutil
import tempfile
import time
from functools import cache

from kio.index import load_request_schema

from ..client.wire import make
from ..config import BrokerConfig
from ..protocol.api_keys import ApiKeys
from ..records import batch as rb
from ..records.records import build_batch, iter_records
from ..server.channel import Channel
from ..server.server import KesqueServer
from ..storage.dirs import ensure_storage, format_dirs, read_meta_properties, storage_dirs
from .loop import InlineExecutor, Process, SimClock, SimLoop, deterministic_entropy
from .powerloss import PowerLossFS
from .scheduler import InvariantViolation, LivenessViolation, Scheduler

log = logging.getLogger(__name__)

CLUSTER_ID = "c1mU1aTIQ0S8Ydmtc2Qb6A"
CONTROLLER = 1
BROKERS = (2, 3, 4)
# a quorum of three controllers: the brokers keep ids 2-4, so every scenario's broker set is one
QUORUM = (CONTROLLER, 5, 6)
BROKER_PORT = 9092
CONTROLLER_PORT = 9093
CLIENT_HOST = "10.0.1.1"

# Kafka's defaults, shortened as the model simulators shorten them (the rules are the same)
SIM_CONFIG = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "log.cleaner.enable": "false",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}


SUBNET = "10.0.0"  # a cluster's nodes are at <subnet>.<id> (a second cluster on the same loop: another)


def host_of(node_id: int, subnet: str = SUBNET) -> str:
    return f"{subnet}.{node_id}"


def _tmp_root() -> str:
    return tempfile.mkdtemp(prefix="kesque-sim-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


class SimNode:
    def __init__(self, cluster: RealCluster, node_id: int):
        self.cluster = cluster
        self.node_id = node_id
        self.host = cluster.host(node_id)
        self.is_broker = node_id in BROKERS
        self.dir = os.path.join(cluster.root, f"node-{node_id}")
        self.server = None
        self.proc: Process | None = None
        self.incarnation = 0
        self.halted: str | None = None

    @property
    def log_dirs(self) -> list[str]:
        """One log dir (the node's dir), or ``d0, d1, ...`` in it (``d0`` holds the metadata log)."""
        n = self.cluster.dirs_per_node
        return [self.dir] if n == 1 else [os.path.join(self.dir, f"d{i}") for i in range(n)]

    def props(self) -> dict[str, str]:
        props = dict(SIM_CONFIG)
        props.update(
            {
                "node.id": str(self.node_id),
                "controller.quorum.voters": ",".join(
                    f"{c}@{self.cluster.host(c)}:{CONTROLLER_PORT}" for c in self.cluster.controllers
                ),
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "log.dirs": ",".join(self.log_dirs),
            }
        )
        if self.is_broker:
            combined = self.node_id in self.cluster.controllers
            listeners = f"PLAINTEXT://{self.host}:{BROKER_PORT}"
            props.update(
                {
                    "process.roles": "broker,controller" if combined else "broker",
                    "listeners": f"{listeners},CONTROLLER://{self.host}:{CONTROLLER_PORT}" if combined else listeners,
                    "advertised.listeners": f"PLAINTEXT://{self.host}:{BROKER_PORT}",
                    "inter.broker.listener.name": "PLAINTEXT",
                }
            )
        else:
            props.update({"process.roles": "controller", "listeners": f"CONTROLLER://{self.host}:{CONTROLLER_PORT}"})
        props.update(self.cluster.overrides)
        return props

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive

    @property
    def ready(self) -> bool:
        return self.alive and self.server.started.is_set()

    def start(self) -> None:
        c = self.cluster
        config = BrokerConfig(self.props())
        if self.incarnation == 0:  # kesque storage format
            format_dirs(read_meta_properties(storage_dirs(config)), c.cluster_id, self.node_id)
        ensure_storage(config)
        self.incarnation += 1
        self.proc = Process(f"{c.name}node-{self.node_id}.{self.incarnation}", self.host)
        server = KesqueServer(config, c.clock)
        server.io_executor = InlineExecutor()
        server.rng = random.Random(c.rng.getrandbits(64))
        server.halt = self._halt
        self.server = server
        c.loop.spawn(self.proc, self._run(server))

    async def _run(self, server) -> None:
        try:
            await server.start()
        except Exception as e:  # noqa: BLE001 - a failed start is the process exiting
            log.warning("node %d failed to start: %r", self.node_id, e)
            self.cluster.failures.append(f"node {self.node_id} failed to start: {e!r}")
            self.kill()

    def _halt(self, message: str) -> None:
        self.halted = message
        self.kill()

    def kill(self, power_loss: bool = False) -> None:
        """kill -9: no code of this incarnation runs again; its files stay; the kernel closes its
        descriptors (the sockets are reset, the log dir locks released). ``power_loss``: the
        machine loses power too, and its disk keeps only what was fsynced (the cluster's
        :class:`~kesque.sim.powerloss.PowerLossFS`)."""
        if not self.alive:
            return
        self.cluster.loop.net.kill(self.proc)
        self.cluster.graveyard.append(self.server)
        with contextlib.suppress(Exception):
            self.server._release_locks()
        if power_loss:
            self.cluster.fs.lose_power(self.dir)
            self.cluster.power_lost.add(self.node_id)


def _close_descriptors_under(root: str) -> None:
    """Close this process's descriptors of files under ``root``: what the kernel does when the
    simulated nodes' processes exit. A killed node's segment files stay open (its objects never
    run again, so nothing closes them); without this, every run of a sweep left 20-70
    descriptors behind, and a test process that ran a hundred seeds went past select()'s 1024."""
    prefix = os.path.realpath(root) + os.sep
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:  # no /proc: the descriptors stay until the process exits
        return
    for name in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(prefix):
            with contextlib.suppress(OSError):
                os.close(int(name))


class WireClient:
    """A Kafka client on the simulated network: requests to node ids with the broker's Channel."""

    def __init__(self, cluster: RealCluster):
        self.cluster = cluster
        self.channel = Channel(
            lambda n: (cluster.host(n), BROKER_PORT),
            client_id="sim-client",
            request_timeout_ms=5000,
            connect_timeout_ms=1000,
        )

    @staticmethod
    @cache  # kio resolves a schema by name on every call: 2% of a run
    def module(api_key: int, version: int):
        cls = load_request_schema(api_key, version)
        return importlib.import_module(cls.__module__.rsplit(".", 1)[0])

    async def send(self, node: int, api_key: int, version: int, build, timeout_ms: int | None = None):
        mod = self.module(api_key, version)
        return await self.channel.send(node, api_key, version, build(mod.request), timeout_ms=timeout_ms)

    async def create_topic(
        self, node: int, name: str, partitions: int, rf: int, configs: dict, timeout_ms: int = 5000
    ) -> int:
        def build(rq):
            topic = make(
                rq.CreatableTopic,
                name=name,
                num_partitions=partitions,
                replication_factor=rf,
                assignments=(),
                configs=tuple(make(rq.CreatableTopicConfig, name=k, value=v) for k, v in configs.items()),
            )
            return make(rq.CreateTopicsRequest, timeout=timeout_ms, validate_only=False, topics=(topic,))

        resp = await self.send(node, ApiKeys.CREATE_TOPICS, 7, build, timeout_ms=timeout_ms + 5000)
        return int(resp.topics[0].error_code)

    async def metadata_response(self, node: int, topics: list[str] | None):
        """``node``'s Metadata v12 answer for ``topics`` (None: every topic)."""

        def build(rq):
            return make(
                rq.MetadataRequest,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
                topics=None
                if topics is None
                else tuple(make(rq.MetadataRequestTopic, name=t, topic_id=None) for t in topics),
            )

        return await self.send(node, ApiKeys.METADATA, 12, build)

    async def quorum_leader(self, node: int) -> int:
        """The metadata quorum's leader as ``node``'s DescribeQuorum v2 tells (-1: none known)."""

        def build(rq):
            part = make(rq.PartitionData, partition_index=0)
            return make(
                rq.DescribeQuorumRequest,
                topics=(make(rq.TopicData, topic_name="__cluster_metadata", partitions=(part,)),),
            )

        resp = await self.send(node, ApiKeys.DESCRIBE_QUORUM, 2, build)
        p = resp.topics[0].partitions[0]
        return int(p.leader_id) if int(p.error_code) == 0 else -1

    async def metadata(self, node: int, topic: str) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, isr) as ``node`` sees it."""
        resp = await self.metadata_response(node, [topic])
        out = {}
        for t in resp.topics:
            if t.name == topic and int(t.error_code) == 0:
                for p in t.partitions:
                    out[int(p.partition_index)] = (int(p.leader_id), [int(b) for b in p.isr_nodes])
        return out

    async def produce(
        self, node: int, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 2000
    ) -> tuple[int, int]:
        """(error code, base offset)."""
        resp = await self.send(
            node,
            0,
            9,
            lambda rq: make(
                rq.ProduceRequest,
                transactional_id=None,
                acks=acks,
                timeout=timeout_ms,
                topic_data=(
                    make(
                        rq.TopicProduceData,
                        name=topic,
                        partition_data=(make(rq.PartitionProduceData, index=partition, records=batch),),
                    ),
                ),
            ),
            timeout_ms=timeout_ms + 1000,
        )
        p = resp.responses[0].partition_responses[0]
        return int(p.error_code), int(p.base_offset)

    async def fetch(self, node: int, topic: str, partition: int, offset: int) -> tuple[int, int, bytes]:
        """(error code, high watermark, record bytes) of one Fetch from ``offset``."""
        resp = await self.send(
            node,
            1,
            12,
            lambda rq: make(
                rq.FetchRequest,
                cluster_id=None,
                replica_id=-1,
                max_wait=0,
                min_bytes=0,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                forgotten_topics_data=(),
                rack_id="",
                topics=(
                    make(
                        rq.FetchTopic,
                        topic=topic,
                        partitions=(
                            make(
                                rq.FetchPartition,
                                partition=partition,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            ),
                        ),
                    ),
                ),
            ),
        )
        p = resp.responses[0].partitions[0]
        return int(p.error_code), int(p.high_watermark), bytes(p.records or b"")


class RealCluster:
    """A controller (or a quorum of three: ``controllers=3``) and three brokers of the real code
    on one simulated loop (see the module doc); ``controllers="combined"``: the three brokers are
    the quorum's voters too (``process.roles=broker,controller``, as ``kesque.testing.Cluster(nodes=3)``)."""

    def __init__(
        self,
        seed: int,
        overrides: dict | None = None,
        dirs_per_node: int = 1,
        controllers: int | str = 1,
        subnet: str = SUBNET,
        cluster_id: str = CLUSTER_ID,
        shared: RealCluster | None = None,
    ):
        """``shared``: a second cluster on ``shared``'s loop, scheduler, clock, client process,
        invariants and fault log (its nodes at ``subnet``, formatted with ``cluster_id``);
        ``shared`` runs the loop and closes it."""
        if controllers not in (1, len(QUORUM), "combined"):
            raise ValueError(f"controllers: 1, {len(QUORUM)} or 'combined', not {controllers!r}")
        self.dirs_per_node = dirs_per_node
        self.controllers = {1: (CONTROLLER,), len(QUORUM): QUORUM, "combined": BROKERS}[controllers]
        self.subnet = subnet
        self.cluster_id = cluster_id
        self.name = "" if shared is None else f"{subnet}/"
        self.owns_loop = shared is None
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.graveyard: list = []
        self.failures: list[str] = []
        self.power_lost: set[int] = set()  # the nodes that lost power (their unfsynced writes)
        self.fs: PowerLossFS | None = None
        self.client: WireClient | None = None
        if shared is None:
            self.s = Scheduler(seed)
            self.rng = self.s.rng
            self.loop = SimLoop(self.rng)
            self.clock = SimClock(self.loop)
            self.fault_log: list[str] = []  # the faults a scenario injected, in order ("kill 5", ...)
            self.client_proc = Process("client", CLIENT_HOST)
            self.invariants: list = []
            self.loop.after_iteration = self._check
        else:
            self.s, self.rng, self.loop, self.clock = shared.s, shared.rng, shared.loop, shared.clock
            self.fault_log, self.client_proc, self.invariants = shared.fault_log, shared.client_proc, shared.invariants
        self.root = _tmp_root()
        self.nodes = {i: SimNode(self, i) for i in dict.fromkeys((*self.controllers, *BROKERS))}

    def host(self, node_id: int) -> str:
        return host_of(node_id, self.subnet)

    # -- running -----------------------------------------------------------------------------------
    def _check(self) -> None:
        self.s.now = int(self.loop.time() * 1000)
        self.s.events = self.loop.iterations
        for check in self.invariants:
            check()

    def run(self, coro):
        """Run the driver coroutine ``coro`` (as the client process) to its end."""

        async def main():
            self.client = WireClient(self)
            return await coro

        return self.loop.run_until_complete(self.loop.spawn(self.client_proc, main()))

    async def until(self, cond, timeout_s: float, what: str, step_s: float = 0.05) -> None:
        deadline = self.loop.time() + timeout_s
        while not cond():
            if self.loop.time() >= deadline:
                raise LivenessViolation(f"not reached within {timeout_s} s of simulated time: {what}")
            await asyncio.sleep(step_s)

    def stamp(self, e: Exception) -> None:
        """Say in a failure's message when it happened, and name the files in it relative to the
        run's temporary root (whose name no seed draws): a replay of the seed fails with the same
        message, at the same simulated time."""
        if e.args and isinstance(e.args[0], str):
            what = e.args[0].replace(self.root + os.sep, "")
            e.args = (f"{what} [at {int(self.loop.time() * 1000)} ms of simulated time]", *e.args[1:])

    @property
    def trace_hash(self) -> str:
        """The hash of every byte the network delivered, with its time and link: equal for two
        runs of one seed."""
        return self.loop.net.trace.hexdigest()

    def close(self) -> None:
        """Kill every node and remove the files; the loop's owner closes the loop (close a
        ``shared`` cluster first)."""
        self.loop.finished = True
        with contextlib.suppress(Exception):
            if self.client is not None:
                self.client.channel.close()
        for node in self.nodes.values():
            node.kill()
        if self.owns_loop:
            with contextlib.suppress(Exception):
                self.loop.close()
        _close_descriptors_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the nodes ---------------------------------------------------------------------------------
    def start_all(self) -> None:
        """Format and start every node; from then on the file layer tracks what is durable (the
        formatted dirs are)."""
        for node in self.nodes.values():
            node.start()
        self.fs = PowerLossFS(self.root)

    def brokers(self) -> list[SimNode]:
        return [self.nodes[b] for b in BROKERS]

    def partition_state(self, node_id: int, topic: str, partition: int):
        """The Partition object of a live broker, or None."""
        node = self.nodes[node_id]
        if not node.ready:
            return None
        rm = getattr(node.server, "replica_manager", None)
        return None if rm is None else rm.partitions.get((topic, partition))

    def active_controllers(self) -> list[SimNode]:
        """The live controllers that act as the active one (their own epoch's LeaderChange
        committed and applied), newest epoch first: one in a settled quorum; an old leader cut
        off keeps acting until it learns of the new epoch or resigns."""
        nodes = [self.nodes[c] for c in self.controllers]
        active = [n for n in nodes if n.ready and n.server.quorum is not None and n.server.quorum.active]
        return sorted(active, key=lambda n: -n.server.quorum.active_epoch)

    def controller_view(self, topic: str, partition: int):
        """(leader, isr) of the partition in the active controller's image (the newest epoch's),
        or None."""
        active = self.active_controllers()
        if not active:
            return None
        t = active[0].server.controller.image.topic(topic)
        if t is None:
            return None
        p = t.partitions.get(partition)
        return None if p is None else (p.leader, list(p.isr))


def batch_summary(log_, end: int, start: int = 0) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of each batch of ``log_`` from ``start`` that ends below ``end``."""
    out = []
    for h, _data in log_.read_batches(max(start, log_.log_start_offset), end):
        if h.last_offset >= end:
            break
        if h.base_offset >= start:
            out.append((h.base_offset, h.last_offset, h.crc))
    return out


def read_values(data: bytes) -> dict[int, bytes]:
    """offset -> value of the records in fetched bytes."""
    out = {}
    for pos, h in rb.iter_headers(data):
        if h.is_control:
            continue
        for r in iter_records(data, pos, h):
            out[r.offset] = r.value
    return out


def new_batch(value: bytes, now_ms: int) -> bytes:
    return build_batch([(None, value, ())], timestamp=now_ms)


@contextlib.contextmanager
def quiet_logs(level=logging.ERROR):
    logger = logging.getLogger("kesque")
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


def wall() -> float:
    return time.perf_counter()


__all__ = ["RealCluster", "SimNode", "WireClient", "InvariantViolation", "LivenessViolation", "deterministic_entropy"]
