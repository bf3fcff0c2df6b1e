"""Connections to a cluster: the bootstrap connection, one connection per broker, topic
metadata and coordinator lookup. The consumer and producer of :mod:`kesque.client` share it."""

from __future__ import annotations

import time

from ..errors import KafkaError
from ..protocol.api_keys import ApiKeys
from .wire import ClientSecurity, Connection, WireError, client_security, make, parse_bootstrap

# FindCoordinator / coordinator errors a client retries after a fresh lookup
COORDINATOR_RETRIABLE = frozenset({14, 15, 16})  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR


class Cluster:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "kesque-client",
        timeout: float = 30.0,
        client_props: dict | ClientSecurity | None = None,
    ):
        """``client_props``: Kafka's client properties for the connections' security
        (``security.protocol``, ``ssl.*``, ``sasl.*``; PLAINTEXT without), read here once."""
        self.security = client_security(client_props)
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.timeout = timeout
        self._conns: dict[int, Connection] = {}
        self._boot: Connection | None = None
        self.brokers: dict[int, tuple[str, int]] = {}

    # ------------------------------------------------------------------ connections
    def _bootstrap_conn(self) -> Connection:
        if self._boot is None:
            self._boot = Connection.to_any(self.bootstrap, self.client_id, self.timeout, security=self.security)
        return self._boot

    def _conn(self, node: int) -> Connection:
        c = self._conns.get(node)
        if c is None:
            host, port = self.brokers.get(node) or parse_bootstrap(self.bootstrap)[0]
            try:
                c = Connection(host, port, self.client_id, self.timeout, security=self.security)
            except OSError as e:
                raise WireError(f"cannot connect to broker {node} at {host}:{port}: {e}") from e
            self._conns[node] = c
        return c

    def _drop(self, node: int) -> None:
        c = self._conns.pop(node, None)
        if c is not None:
            c.close()

    def _drop_all(self) -> None:
        for node in list(self._conns):
            self._drop(node)
        if self._boot is not None:
            self._boot.close()
            self._boot = None

    def close(self) -> None:
        self._drop_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ metadata
    def metadata(self, topics: list[str] | None, allow_auto_create: bool = False) -> dict[str, dict]:
        """{topic: {"error": code, "partitions": {p: (leader, epoch)}, "internal": bool, "topic_id": uuid}}.
        ``allow_auto_create``: a producer's request, which creates a missing topic when the
        broker has ``auto.create.topics.enable`` (the Java producer asks the same)."""

        def build(mod, v):
            rq = mod.request
            ts = None if topics is None else tuple(make(rq.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
            return make(
                rq.MetadataRequest,
                topics=ts,
                allow_auto_topic_creation=allow_auto_create,
                include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False,
            )

        try:
            resp = self._bootstrap_conn().request(ApiKeys.METADATA, build, max_version=12)
        except (OSError, WireError):
            if self._boot is not None:
                self._boot.close()
                self._boot = None
            raise
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
        out = {}
        for t in resp.topics:
            parts = {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch)) for p in t.partitions}
            out[t.name] = {
                "error": int(t.error_code),
                "partitions": parts,
                "internal": bool(t.is_internal),
                "topic_id": getattr(t, "topic_id", None),
            }
        return out

    def partitions_for(self, topic: str) -> list[int] | None:
        md = self.metadata([topic]).get(topic)
        if md is None or md["error"] != 0:
            return None
        return sorted(md["partitions"])

    def find_coordinator(self, key: str, key_type: int = 1, deadline: float | None = None) -> int:
        """The node id of the group (0) or transaction (1) coordinator for ``key``."""
        deadline = deadline or time.monotonic() + self.timeout
        while True:

            def build(mod, v):
                rq = mod.request
                return make(rq.FindCoordinatorRequest, key=key, key_type=key_type, coordinator_keys=(key,))

            resp = self._bootstrap_conn().request(ApiKeys.FIND_COORDINATOR, build)
            if hasattr(resp, "coordinators") and resp.coordinators:
                c = resp.coordinators[0]
                code, node, host, port = int(c.error_code), int(c.node_id), c.host, int(c.port)
            else:
                code, node, host, port = int(resp.error_code), int(resp.node_id), resp.host, int(resp.port)
            if code == 0:
                self.brokers.setdefault(node, (host, port))
                return node
            if code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                raise KafkaError(code, f"FindCoordinator({key!r}) failed")
            time.sleep(0.1)
