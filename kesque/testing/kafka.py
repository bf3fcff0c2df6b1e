"""Apache Kafka beside kesque: the oracle of the differential tests and benchmarks.

``make kafka`` resolves the Kafka release pinned in ``oracle/pom.xml`` with Maven into
``build/kafka/libs`` (git-ignored); set ``KESQUE_KAFKA_LIBS`` to use another folder of Kafka
jars. Nothing here downloads anything: without the jars (or without ``java``) :func:`unavailable`
says why, in one line, and the oracle tests skip with that line.

    with KafkaBroker() as kafka:                      # KRaft, combined mode, free port, temp dir
        run_tool("kafka-topics.sh", "--bootstrap-server", kafka.bootstrap_servers, "--list")

:class:`KafkaBroker` has the lifecycle of :class:`kesque.Broker` (``start``, ``stop``, ``kill``,
``restart``, ``close``); :class:`KafkaCluster` starts several of them as one KRaft quorum.
:func:`run_tool` runs Kafka's own command-line tools (the classes behind ``bin/kafka-*.sh``)
against any broker, kesque's included.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
import zipfile
from functools import cache
from pathlib import Path

from confluent_kafka.admin import AdminClient

from .broker import terminate

LIBS_ENV = "KESQUE_KAFKA_LIBS"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_LIBS = REPO / "build" / "kafka" / "libs"

# the classes behind Kafka's bin/*.sh scripts (Kafka 4.x)
TOOLS = {
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-cluster.sh": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs.sh": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-producer.sh": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-console-share-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-share-groups.sh": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-dump-log.sh": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records.sh": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs.sh": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-transactions.sh": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-producer-perf-test.sh": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test.sh": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-features.sh": "org.apache.kafka.tools.FeatureCommand",
    "kafka-metadata-quorum.sh": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-leader-election.sh": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions.sh": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-client-metrics.sh": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-storage.sh": "kafka.tools.StorageTool",
    "kafka-server-start.sh": "kafka.Kafka",
}

# tools start often and live shortly: C1 only, serial GC (Kafka's scripts give tools -Xmx256M)
TOOL_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]
BROKER_HEAP = "512m"

# log4j2: the broker logs INFO to server.log in its work dir; tools log WARN to stderr (as Kafka's
# config/tools-log4j2.yaml does), so their stdout is only what they print.
BROKER_LOG4J = """\
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""
TOOLS_LOG4J = """\
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


# ---------------------------------------------------------------------- where Kafka is
def libs_dir() -> Path:
    return Path(os.environ.get(LIBS_ENV) or DEFAULT_LIBS)


def jars_missing() -> str | None:
    """Why Kafka's jars are not here (one line, saying how to get them), or None."""
    if not list(libs_dir().glob("kafka_2.13-*.jar")):
        return (
            f"Apache Kafka jars not found in {libs_dir()}: run `make kafka` (needs java + mvn) "
            f"or set {LIBS_ENV} to a folder of Kafka jars"
        )
    return None


def unavailable() -> str | None:
    """Why Kafka cannot run here (one line), or None when it can."""
    if shutil.which("java") is None:
        return "the Apache Kafka oracle needs a JDK: no `java` on PATH"
    return jars_missing()


def kafka_version() -> str:
    jar = next(libs_dir().glob("kafka_2.13-*.jar"))
    return jar.name[len("kafka_2.13-") : -len(".jar")]


def jar_path(artifact: str) -> Path | None:
    """The resolved jar of one Kafka artifact (``kafka-clients``, ``kafka-metadata``, ...)."""
    for jar in libs_dir().glob(f"{artifact}-*.jar"):
        if re.fullmatch(re.escape(artifact) + r"-\d[^-]*\.jar", jar.name):
            return jar
    return None


def jar_resources(artifact: str, folder: str, suffix: str = ".json") -> dict[str, str] | None:
    """Text of the resources ``folder/*suffix`` of one Kafka jar, by file name (None without the jar).

    Kafka's jars carry the JSON message schemas: kafka-clients ``common/message`` (requests,
    responses), kafka-metadata ``common/metadata`` (KRaft records), kafka-group-coordinator
    ``common/message`` (``__consumer_offsets`` records)."""
    jar = jar_path(artifact)
    if jar is None:
        return None
    prefix = folder.rstrip("/") + "/"
    with zipfile.ZipFile(jar) as z:
        return {
            name[len(prefix) :]: z.read(name).decode()
            for name in z.namelist()
            if name.startswith(prefix) and name.endswith(suffix) and "/" not in name[len(prefix) :]
        }


@cache
def _classpath(libs: str) -> str:
    return os.pathsep.join(sorted(str(p) for p in Path(libs).glob("*.jar")))


def classpath() -> str:
    return _classpath(str(libs_dir()))


@cache
def _tools_log4j() -> str:
    path = os.path.join(tempfile.gettempdir(), f"kesque-kafka-tools-log4j2-{os.getuid()}.properties")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(TOOLS_LOG4J)
        os.replace(path + ".tmp", path)
    return path


def java_command(main_class: str, args=(), jvm=TOOL_JVM, log4j: str | None = None) -> list[str]:
    """argv of a JVM running ``main_class`` with Kafka's jars (tools get the class-data archive)."""
    cds = [f"-XX:SharedArchiveFile={_tools_cds()}"] if jvm is TOOL_JVM and _tools_cds() else []
    return [
        "java",
        *jvm,
        *cds,
        f"-Dlog4j2.configurationFile={log4j or _tools_log4j()}",
        "-cp",
        classpath(),
        main_class,
        *map(str, args),
    ]


_CDS_LOCK = threading.Lock()


@cache
def _tools_cds() -> str | None:
    """A class-data sharing archive of the tools' classes (halves a tool's start-up CPU), made once
    beside the jars by one admin call that fails fast; None where it cannot be made. A stale or
    foreign archive is harmless: the JVM checks it and runs without it."""
    with _CDS_LOCK:
        path = libs_dir().parent / "cds" / f"tools-{hashlib.sha1(classpath().encode()).hexdigest()[:16]}.jsa"
        if path.exists():
            return str(path)
        try:
            path.parent.mkdir(exist_ok=True)
            claim = os.open(f"{path}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # one maker at a time
        except OSError:
            return None
        try:
            port = free_port()
            subprocess.run(
                [
                    "java",
                    *TOOL_JVM,
                    f"-XX:ArchiveClassesAtExit={path}.tmp",
                    f"-Dlog4j2.configurationFile={_tools_log4j()}",
                    "-cp",
                    classpath(),
                    TOOLS["kafka-topics.sh"],
                    "--bootstrap-server",
                    f"127.0.0.1:{port}",
                    "--list",
                    "--command-config",
                    _fast_fail(),
                ],
                capture_output=True,
                timeout=60,
            )
            if os.path.exists(f"{path}.tmp"):
                os.replace(f"{path}.tmp", path)
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            os.close(claim)
            os.unlink(f"{path}.lock")
        return str(path) if path.exists() else None


def _fast_fail() -> str:
    path = os.path.join(tempfile.gettempdir(), f"kesque-kafka-fast-fail-{os.getuid()}.properties")
    with open(path, "w") as f:
        f.write("default.api.timeout.ms=1500\nrequest.timeout.ms=500\n")
    return path


def run_class(
    main_class: str, *args, input: str | None = None, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        java_command(main_class, args), input=input, capture_output=True, text=True, timeout=timeout, env=env
    )


def run_tool(script: str, *args, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools by its script name: ``run_tool("kafka-topics.sh", ...)``."""
    return run_class(TOOLS[script], *args, input=input, timeout=timeout)


# ---------------------------------------------------------------------- brokers
_PORTS = random.Random()  # seeded from the OS: processes (pytest-xdist workers) pick apart
_HANDED: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server started later (a cluster's nodes must know each
    other's ports before they start). Picked at random below the kernel's ephemeral range: a
    port from ``bind(0)`` comes from that range, which outgoing connections also draw from, so
    between this call and the server's bind a client's connection could take it (seen as
    "Address already in use" with two test workers). Each port is handed out once per process."""
    lo, _hi = _ephemeral_range()
    if lo - 10000 >= 2000:
        for _ in range(200):
            port = _PORTS.randrange(10000, lo)
            if port in _HANDED:
                continue
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _HANDED.add(port)
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` prints it (base64url, no padding), never
    starting with ``-`` (as Kafka's Uuid avoids: ``format -t -x...`` reads it as an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


DEFAULTS = {
    "process.roles": "broker,controller",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
}


class KafkaBroker:
    """One Apache Kafka node in KRaft combined mode (broker + controller), as a subprocess.

    ``work_dir`` holds server.properties, log4j2.properties and server.log; the log directory
    (``data_dir``, Kafka's ``log.dirs``) is ``work_dir/data`` unless given, so it holds only what
    Kafka writes there. ``node_id``, ``voters`` and ``cluster_id`` are set by :class:`KafkaCluster`.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        port: int = 0,
        config: dict | None = None,
        host: str = "127.0.0.1",
        heap: str = BROKER_HEAP,
        node_id: int = 1,
        controller_port: int = 0,
        voters: str | None = None,
        cluster_id: str | None = None,
        extra_listeners: str = "",
    ):
        """``extra_listeners``: ``NAME://host:port[,...]`` served and advertised beside PLAINTEXT
        (their protocols in ``config``'s ``listener.security.protocol.map``)."""
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        self.host = host
        self.port = port or free_port(host)
        self.controller_port = controller_port or free_port(host)
        self.node_id = node_id
        self.voters = voters or f"{node_id}@{host}:{self.controller_port}"
        self.cluster_id = cluster_id or random_cluster_id()
        self.gid: int | None = None  # the JVM's group id (root only), as kesque's Broker.gid
        self.heap = heap
        self.work_dir = tempfile.mkdtemp(prefix="kafka-")
        self.data_dir = data_dir or os.path.join(self.work_dir, "data")
        self.config = dict(DEFAULTS)
        self.config.update({k: str(v) for k, v in (config or {}).items()})
        self.extra_listeners = extra_listeners
        self.process: subprocess.Popen | None = None
        self._formatted = False
        self.start_seconds: float | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.work_dir, "server.log")

    @property
    def properties_path(self) -> str:
        return os.path.join(self.work_dir, "server.properties")

    def _props(self) -> dict[str, str]:
        props = dict(self.config)
        listeners = f"PLAINTEXT://{self.host}:{self.port}"
        advertised = listeners + (f",{self.extra_listeners}" if self.extra_listeners else "")
        if self.extra_listeners:
            listeners += f",{self.extra_listeners}"
        if "controller" in props["process.roles"].split(","):
            listeners += f",CONTROLLER://{self.host}:{self.controller_port}"
        props.update(
            {
                "node.id": str(self.node_id),
                "controller.quorum.voters": self.voters,
                "listeners": listeners,
                "advertised.listeners": advertised,
            }
        )
        props.setdefault("log.dirs", self.data_dir)
        return props

    def _write_config(self) -> None:
        with open(self.properties_path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in self._props().items())
        with open(os.path.join(self.work_dir, "log4j2.properties"), "w") as f:
            f.write(BROKER_LOG4J.format(log=self.log_path))

    def format(self) -> None:
        """``kafka-storage.sh format`` (once: a restart keeps the formatted data)."""
        self._write_config()
        r = run_class(
            TOOLS["kafka-storage.sh"], "format", "-t", self.cluster_id, "-c", self.properties_path, "--ignore-formatted"
        )
        if r.returncode != 0:
            raise RuntimeError(f"kafka-storage.sh format failed ({r.returncode}): {r.stdout}{r.stderr}")
        self._formatted = True

    def launch(self) -> None:
        """Start the JVM without waiting (a cluster starts all nodes, then waits)."""
        if not self._formatted:
            self.format()
        self._write_config()
        jvm = [f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]
        argv = java_command(
            TOOLS["kafka-server-start.sh"],
            [self.properties_path],
            jvm=jvm,
            log4j=os.path.join(self.work_dir, "log4j2.properties"),
        )
        with open(os.path.join(self.work_dir, "stdout.log"), "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, group=self.gid)
        self._launched = time.monotonic()

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        self.launch()
        try:
            wait_ready([self], timeout)
        except BaseException:  # no JVM left behind by a start that failed
            self.stop()
            raise
        return self

    def check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise RuntimeError(
                f"Kafka node {self.node_id} exited (code {code}); see {self.log_path}:\n"
                + _errors(self.log_path)
                + _tail(self.log_path)
                + _tail(os.path.join(self.work_dir, "stdout.log"))
            )

    def stop(self, timeout: float = 60.0) -> None:
        """Clean shutdown (SIGTERM, as kafka-server-stop.sh): Kafka flushes and writes its checkpoints."""
        if self.process is not None:
            terminate(self.process, timeout)
            self.process = None

    def kill(self) -> None:
        """Crash (SIGKILL): no flush, no checkpoints."""
        if self.process is None:
            raise RuntimeError("kill() needs a running broker")
        self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self, timeout: float = 90.0) -> KafkaBroker:
        """Start again on the same ports and data directory."""
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)  # data_dir too, unless given

    def __enter__(self) -> KafkaBroker:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap_servers}, node {self.node_id}, data_dir={self.data_dir})"


class KafkaCluster:
    """``size`` Kafka nodes forming one KRaft cluster (static voters), node ids 1..size: the first
    ``controllers`` (all by default) in combined mode, the others broker-only (as
    ``kesque.Cluster(combined=True)``)."""

    def __init__(
        self,
        size: int = 3,
        config: dict | None = None,
        host: str = "127.0.0.1",
        heap: str = BROKER_HEAP,
        controllers: int | None = None,
    ):
        cluster_id = random_cluster_id()
        controller_ports = [free_port(host) for _ in range(size if controllers is None else controllers)]
        voters = ",".join(f"{i + 1}@{host}:{p}" for i, p in enumerate(controller_ports))
        cfg = {
            "offsets.topic.replication.factor": str(min(3, size)),
            "transaction.state.log.replication.factor": str(min(3, size)),
            "transaction.state.log.min.isr": str(min(2, size)),
            "share.coordinator.state.topic.replication.factor": str(min(3, size)),
            "share.coordinator.state.topic.min.isr": str(min(2, size)),
            **(config or {}),
        }
        roles = [{}] * len(controller_ports) + [{"process.roles": "broker"}] * (size - len(controller_ports))
        self.nodes = [
            KafkaBroker(
                config={**cfg, **role},
                host=host,
                heap=heap,
                node_id=i + 1,
                controller_port=controller_ports[i] if i < len(controller_ports) else 0,
                voters=voters,
                cluster_id=cluster_id,
            )
            for i, role in enumerate(roles)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap_servers for n in self.nodes)

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        for node in self.nodes:
            node.format()
        try:
            for node in self.nodes:
                node.launch()
            wait_ready(self.nodes, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def wait_ready(nodes: list[KafkaBroker], timeout: float) -> None:
    """Until every node answers Metadata listing all ``nodes`` as (unfenced) brokers."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    want = {n.node_id for n in nodes}
    for node in nodes:
        admin = AdminClient({"bootstrap.servers": node.bootstrap_servers, "logger": _QUIET})
        while True:
            node.check_alive()
            try:
                if set(admin.list_topics(timeout=1).brokers) >= want:
                    break
            except Exception:  # KafkaException while the socket server is not up yet
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka node {node.node_id} not ready in {timeout}s; see {node.log_path}")
            time.sleep(0.2)
    for node in nodes:
        node.start_seconds = time.monotonic() - t0


_QUIET = logging.getLogger("kesque.testing.kafka.librdkafka")  # connection refused while Kafka starts
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _errors(path: str, lines: int = 10) -> str:
    """The log's last ERROR lines and what follows each (the cause of an exit; its tail is the
    shutdown that came after, and the work dir is gone once the caller's temp dir is)."""
    try:
        with open(path, errors="replace") as f:
            text = f.readlines()
    except OSError:
        return ""
    picked = [i for i, line in enumerate(text) if " ERROR " in line or " FATAL " in line][-lines:]
    return "".join(text[i] + "".join(text[i + 1 : i + 4]) for i in picked)


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""
