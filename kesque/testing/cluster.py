"""``kesque.Cluster``: several kesque processes forming one KRaft cluster, for tests and scripts.

    with kesque.Cluster(nodes=3) as cluster:        # 3 combined broker+controller nodes
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.kill(2); cluster.restart(2)

``controllers`` equal to ``nodes`` (the default) gives combined nodes 1..N, each a voter; fewer
gives ``controllers`` controller-only nodes (ids 1..C) and ``nodes`` broker-only nodes (ids
C+1..C+N), as Kafka's KRaft examples (config/controller.properties, config/broker.properties).
Every node is a :class:`kesque.Broker` subprocess with its own directory under ``data_dir``
(``node-<id>/``: server.properties, kesque.log, data/), formatted with one cluster id before
the first start. ``kesque cluster up`` runs the same nodes detached.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from .broker import Broker
from .kafka import free_port, random_cluster_id


@dataclass
class NodeSpec:
    node_id: int
    roles: tuple[str, ...]
    port: int | None  # the PLAINTEXT (client and inter-broker) port; None: controller only
    controller_port: int | None  # the CONTROLLER port; None: broker only

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


def plan(nodes: int = 3, controllers: int | None = None, base_port: int = 0, host: str = "127.0.0.1") -> list[NodeSpec]:
    """The nodes of a cluster: ids, roles and ports (from ``base_port`` on, each node's client
    port then its controller port, in node id order; free ports when 0)."""
    controllers = nodes if controllers is None else controllers
    if nodes < 1 or controllers < 1:
        raise ValueError("a cluster needs at least one broker and one controller")
    combined = controllers == nodes
    roles = [("broker", "controller")] * nodes if combined else [("controller",)] * controllers + [("broker",)] * nodes
    ports = iter(range(base_port, base_port + 2 * len(roles))) if base_port else None
    specs = []
    for i, r in enumerate(roles, start=1):
        port = (next(ports) if ports else free_port(host)) if "broker" in r else None
        cport = (next(ports) if ports else free_port(host)) if "controller" in r else None
        specs.append(NodeSpec(i, r, port, cport))
    return specs


def properties(spec: NodeSpec, specs: list[NodeSpec], data_dir: str, host: str = "127.0.0.1") -> dict[str, str]:
    """One node's server.properties, as a Kafka KRaft user writes them."""
    voters = ",".join(f"{s.node_id}@{host}:{s.controller_port}" for s in specs if s.controller_port)
    brokers = sum(1 for s in specs if s.is_broker)
    listeners = []
    if spec.port is not None:
        listeners.append(f"PLAINTEXT://{host}:{spec.port}")
    if spec.controller_port is not None:
        listeners.append(f"CONTROLLER://{host}:{spec.controller_port}")
    props = {
        "process.roles": ",".join(spec.roles),
        "node.id": str(spec.node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": data_dir,
        # internal topics as replicated as the brokers allow (Kafka's defaults: 3 and 2)
        "offsets.topic.replication.factor": str(min(3, brokers)),
        "transaction.state.log.replication.factor": str(min(3, brokers)),
        "transaction.state.log.min.isr": str(min(2, brokers)),
        "share.coordinator.state.topic.replication.factor": str(min(3, brokers)),
        "share.coordinator.state.topic.min.isr": str(min(2, brokers)),
    }
    if spec.is_broker:
        props["inter.broker.listener.name"] = "PLAINTEXT"
        props["advertised.listeners"] = f"PLAINTEXT://{host}:{spec.port}"
    return props


class Cluster:
    def __init__(
        self,
        nodes: int = 3,
        controllers: int | None = None,
        data_dir: str | None = None,
        base_port: int = 0,
        config: dict | None = None,
        host: str = "127.0.0.1",
        cluster_id: str | None = None,
        detach: bool = False,
    ):
        self.host = host
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kesque-cluster-")
        self.cluster_id = cluster_id or random_cluster_id()
        self.specs = plan(nodes, controllers, base_port, host)
        self.nodes: dict[int, Broker] = {}
        for spec in self.specs:
            node_dir = os.path.join(self.data_dir, f"node-{spec.node_id}")
            os.makedirs(node_dir, exist_ok=True)
            props = properties(spec, self.specs, os.path.join(node_dir, "data"), host)
            props.update({k: str(v) for k, v in (config or {}).items()})
            self.nodes[spec.node_id] = Broker(
                data_dir=node_dir,
                port=spec.port or spec.controller_port,
                config=props,
                host=host,
                properties_file=os.path.join(node_dir, "server.properties"),
                detach=detach,
                cluster_id=self.cluster_id,
            )

    # ------------------------------------------------------------------ properties
    def node(self, node_id: int) -> Broker:
        return self.nodes[node_id]

    @property
    def brokers(self) -> list[Broker]:
        return [self.nodes[s.node_id] for s in self.specs if s.is_broker]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{s.port}" for s in self.specs if s.is_broker)

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> Cluster:
        """Format every node with the one cluster id, start them all, then wait for each (a
        node may need the others to answer before it is ready)."""
        deadline = time.monotonic() + timeout
        try:
            for b in self.nodes.values():
                b.launch()
            for b in self.nodes.values():
                b.wait_ready(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every node (SIGKILL past ``timeout``): broker-only nodes first, as Kafka's
        operations guide says, so that their controlled shutdown still has a controller."""
        order = sorted(self.specs, key=lambda s: "controller" in s.roles)
        for b in (self.nodes[s.node_id] for s in order):
            if b.process is not None and b._ready_fd is not None:
                os.close(b._ready_fd)
                b._ready_fd = None
            b.stop(timeout)

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def restart(self, node_id: int, timeout: float = 60.0) -> Broker:
        return self.nodes[node_id].restart(timeout)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        if all(b.process is None for b in self.nodes.values()):
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Cluster({self.bootstrap_servers}, nodes={len(self.nodes)}, data_dir={self.data_dir})"
