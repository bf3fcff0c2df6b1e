"""Kafka's Admin client as the tools use it.

* confluent-kafka's AdminClient for the jopt-simple tools (:func:`make_admin`, :func:`client_config`),
  and the reachability check every tool makes before it starts working (:func:`check_reachable`);
* :class:`WireAdmin`, the calls confluent-kafka does not make, over :mod:`kesque.client.wire` as
  Kafka's Admin client makes them (AdminApiDriver: look a key's node up, ask it, retry a
  :class:`Retry` every ``retry.backoff.ms`` until ``default.api.timeout.ms``, then Kafka's
  TimeoutException), and :class:`ControllerAdmin`, the same to brokers or, with
  ``--bootstrap-controller``, to the controllers;
* how an Admin tool ends (:func:`run_admin`).
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
import time

from confluent_kafka.admin import AdminClient

from ...client.wire import PLAINTEXT, ClientSecurity, Connection, WireError, make
from ...protocol.api_keys import ApiKeys
from ...utils import java_string_hash
from .errors import ERRORS_PKG, JavaError, TerseException, kafka_error
from .javautil import java_hash_order, load_props, tp_str
from .rdkafka import librdkafka_props

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

TIMEOUT = 60.0  # seconds; Kafka's default.api.timeout.ms


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def client_config(bootstrap: str | None, command_config: str | None = None, extra: dict | None = None) -> dict:
    """librdkafka's settings for a tool's Admin client: ``command_config``'s (Kafka's security
    properties in librdkafka's names: rdkafka.py), ``extra``, ``bootstrap``."""
    conf: dict = {}
    if command_config:
        conf.update(librdkafka_props(load_props(command_config)))
    if extra:
        conf.update(extra)
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    conf.setdefault("log_level", 0)  # librdkafka chatter is not part of the tools' output
    return conf


def make_admin(bootstrap: str | None, command_config: str | None = None, client_id: str | None = None):
    """An AdminClient, once one of the bootstrap servers answered (else :class:`Unreachable`)."""
    extra = {"client.id": client_id} if client_id else None
    conf = client_config(bootstrap, command_config, extra)
    admin = AdminClient(conf)
    props = load_props(command_config) if command_config else {}
    check_reachable({**props, **conf})  # Kafka's names for the wire client's security, librdkafka's for the rest
    return admin


@functools.cache
def command_security(command_config: str | None) -> ClientSecurity:
    """The wire client's security for a tool's ``--command-config`` (read once per file)."""
    return ClientSecurity.of(load_props(command_config)) if command_config else PLAINTEXT


def any_broker_request(props: dict, api_key: int, build, client_id: str = "adminclient-1"):
    """One request to the first of ``props["bootstrap.servers"]`` that answers, as Kafka's Admin
    client sends CreateTopics, DeleteTopics and CreatePartitions: to any broker, which forwards it
    to the active controller. (librdkafka sends them to "the controller" of its metadata, which a
    KRaft broker names at random among the unfenced brokers - for ``broker.session.timeout.ms``
    after a broker died, possibly that one, and the call then times out waiting for it.) The
    answer is awaited ``default.api.timeout.ms``: a broker holds the request while it looks for a
    controller."""
    wait = _seconds(props, "default.api.timeout.ms", 60000)
    setup = min(_seconds(props, "socket.connection.setup.timeout.ms", 10000), wait)
    with Connection.to_any(str(props.get("bootstrap.servers") or ""), client_id, wait, setup, props) as conn:
        return conn.request(api_key, build)


def _seconds(props: dict, key: str, default_ms: int) -> float:
    try:
        return max(int(props.get(key, default_ms)), 1) / 1000.0
    except (TypeError, ValueError):
        return default_ms / 1000.0


def check_reachable(props: dict, bound: str = "default.api.timeout.ms", bound_default_ms: int = 60000) -> None:
    """Raise :class:`kesque.client.wire.Unreachable`, naming the servers, unless one of
    ``props["bootstrap.servers"]`` answers ApiVersions.

    Kafka's clients retry unreachable bootstrap servers until the call's timeout and only then
    fail (``Timed out waiting for a node assignment``, exit 1 after 60 s). Here a refused
    connection fails at once and a silent server after ``socket.connection.setup.timeout.ms``
    (10 s), the answer is awaited ``request.timeout.ms`` (30 s) - both capped by the tool's own
    bound (``bound``: ``default.api.timeout.ms`` for admin and consumer tools, ``max.block.ms``
    for producers). ``props`` are the tool's client settings, Kafka's names."""
    limit = _seconds(props, bound, bound_default_ms)
    setup = min(_seconds(props, "socket.connection.setup.timeout.ms", 10000), limit)
    request = min(_seconds(props, "request.timeout.ms", 30000), limit)
    client_id = str(props.get("client.id") or "kesque-tools")
    Connection.to_any(str(props.get("bootstrap.servers") or ""), client_id, request, setup, props).close()


class IncludeList:
    """Kafka's TopicFilter.IncludeList: a Java regex (commas mean alternatives) matched
    against the whole topic name."""

    def __init__(self, raw: str):
        regex = raw.strip().replace(",", "|").replace(" ", "")
        regex = re.sub(r"^[\"']+", "", regex)
        regex = re.sub(r"[\"']+$", "", regex)
        self.regex = regex
        try:
            self.pattern = re.compile(regex)
        except re.error:
            raise ValueError(f"{regex} is an invalid regex.") from None

    def allowed(self, topic: str, exclude_internal: bool = False) -> bool:
        return self.pattern.fullmatch(topic) is not None and not (exclude_internal and is_internal(topic))


def list_topic_names(admin, timeout: float = TIMEOUT) -> list[str]:
    md = admin.list_topics(timeout=timeout)
    return sorted(t for t, tm in md.topics.items() if tm.error is None or tm.error.code() != 3)


def cluster_nodes(admin, timeout: float = TIMEOUT) -> list:
    """The live brokers (``.id``, ``.host``, ``.port``), by id, from any broker's Metadata answer.
    Not librdkafka's describe_cluster: it sends DescribeCluster to "the controller", which a KRaft
    broker's Metadata names at random among the brokers not yet fenced - a broker that has just
    died, for ``broker.session.timeout.ms``, and then the call times out (Kafka's Admin asks the
    least loaded broker)."""
    brokers = admin.list_topics(timeout=timeout).brokers
    return [brokers[i] for i in sorted(brokers)]


def node_address(admin, node_id: int) -> str | None:
    md = admin.list_topics(timeout=TIMEOUT)
    b = md.brokers.get(node_id)
    return f"{b.host}:{b.port}" if b is not None else None


class Retry(Exception):
    """A retriable condition: try again after retry.backoff.ms until the call's deadline."""


def parse_bootstrap_servers(value: str) -> list[tuple[str, int]]:
    """ClientUtils.parseAndValidateAddresses: Kafka's ConfigException messages."""
    out = []
    for url in [u.strip() for u in value.split(",")]:
        if not url:
            continue
        m = re.match(r".*?\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)$", url)
        if not m or not m.group(1):
            raise JavaError(
                "org.apache.kafka.common.config.ConfigException", f"Invalid url in bootstrap.servers: {url}"
            )
        try:
            socket.getaddrinfo(m.group(1), int(m.group(2)))
        except (OSError, UnicodeError):
            continue
        out.append((m.group(1), int(m.group(2))))
    if not out:
        raise JavaError(
            "org.apache.kafka.common.config.ConfigException", "No resolvable bootstrap urls given in bootstrap.servers"
        )
    return out


def timeout_error(call: str) -> JavaError:
    return JavaError(ERRORS_PKG + "TimeoutException", f"Timed out waiting for a node assignment. Call: {call}")


class WireAdmin:
    """Kafka's Admin client over :mod:`kesque.client.wire`: connections to the brokers, requests
    retried as its AdminApiDriver retries them, Metadata, partition leaders and topics."""

    def __init__(self, bootstrap: str, props: dict[str, str] | None = None):
        props = dict(props or {})
        self.bootstrap = parse_bootstrap_servers(bootstrap)
        self.api_timeout_ms = int(props.get("default.api.timeout.ms", 60000))
        self.request_timeout_s = int(props.get("request.timeout.ms", 30000)) / 1000.0
        self.backoff_s = int(props.get("retry.backoff.ms", 100)) / 1000.0
        self.client_id = props.get("client.id", "adminclient-1")
        self.security = ClientSecurity.of(props)  # security.protocol, ssl.*, sasl.*: read once
        self._probe: dict | None = {**props, "bootstrap.servers": bootstrap}
        self._conns: dict[tuple[str, int], object] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # ------------------------------------------------------------------ plumbing
    def deadline(self) -> float:
        return time.monotonic() + self.api_timeout_ms / 1000.0

    def connection(self, host: str, port: int):
        c = self._conns.get((host, port))
        if c is None:
            c = Connection(host, port, client_id=self.client_id, timeout=self.request_timeout_s, security=self.security)
            self._conns[(host, port)] = c
        return c

    def drop(self, addr: tuple[str, int]) -> None:
        c = self._conns.pop(addr, None)
        if c is not None:
            c.close()

    def send(self, addr: tuple[str, int], api_key: int, build, max_version: int | None = None, reader=None):
        """One request; a connection problem is retriable (the connection is dropped)."""
        if self._probe is not None:
            # before the first request: when no bootstrap server answers, say which at once
            # (run_tool prints it, exit 1) instead of retrying until default.api.timeout.ms
            check_reachable(self._probe)
            self._probe = None
        try:
            conn = self.connection(*addr)
            if conn.version_for(api_key, max_version) is None:
                raise kafka_error(35, f"The node does not support {ApiKeys(api_key).name}")
            return conn.request(api_key, build, max_version=max_version, reader=reader)
        except (OSError, WireError) as e:
            self.drop(addr)
            raise Retry(str(e)) from None

    def send_any(self, api_key: int, build, max_version: int | None = None):
        """A request to any broker (the known ones, then the bootstrap servers)."""
        last: Retry | None = None
        for addr in [*self.brokers.values(), *self.bootstrap]:
            try:
                return self.send(addr, api_key, build, max_version)
            except Retry as e:
                last = e
        raise last or Retry("no broker")

    def node(self, node_id: int) -> tuple[str, int]:
        addr = self.brokers.get(node_id)
        if addr is None:
            self.metadata(())
            addr = self.brokers.get(node_id)
        if addr is None:
            raise Retry(f"unknown node {node_id}")
        return addr

    def pause(self, deadline: float, call: str) -> None:
        if time.monotonic() + self.backoff_s >= deadline:
            raise timeout_error(call)
        time.sleep(self.backoff_s)

    def metadata(self, topics):
        """Metadata for ``topics`` (None: all); updates the broker map. Returns the topics as
        ``{name: (error_code, is_internal, [(partition, error_code, leader, replicas)])}`` in
        the response's order."""

        def build(mod, v):
            ts = (
                None
                if topics is None
                else tuple(make(mod.request.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
            )
            return make(
                mod.request.MetadataRequest,
                topics=ts,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False,
            )

        resp = self.send_any(ApiKeys.METADATA, build, max_version=12)
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
        out = {}
        for t in resp.topics:
            parts = sorted(
                (int(p.partition_index), int(p.error_code), int(p.leader_id), [int(r) for r in p.replica_nodes])
                for p in t.partitions
            )
            out[t.name] = (int(t.error_code), bool(getattr(t, "is_internal", False)), parts)
        return out

    def drive(self, api: str, keys: list, lookup, lookup_api: str, fulfil, fulfil_api: str):
        """Kafka's AdminApiDriver, synchronously: ``lookup(keys) -> (mapped {key: node},
        failed {key: exc})`` finds where each key goes, ``fulfil(node, keys) -> (completed,
        failed, unmapped)`` asks it. Keys neither completed nor failed are retried after
        retry.backoff.ms; those left at the deadline fail with a TimeoutException.
        Returns ``(completed, failed)``."""
        deadline = self.deadline()
        completed: dict = {}
        failed: dict = {}
        mapped: dict = {}
        pending = list(dict.fromkeys(keys))
        while True:
            try:
                unmapped = [k for k in pending if k not in mapped]
                if unmapped:
                    try:
                        m, f = lookup(unmapped)
                    except JavaError as e:
                        m, f = {}, {k: e for k in unmapped}
                    mapped.update(m)
                    failed.update(f)
                    pending = [k for k in pending if k not in f]
                by_node: dict = {}
                for k in pending:
                    if k in mapped:
                        by_node.setdefault(mapped[k], []).append(k)
                for node, ks in by_node.items():
                    try:
                        c, f, u = fulfil(node, ks)
                    except Retry:
                        c, f, u = {}, {}, ks
                    except JavaError as e:
                        c, f, u = {}, {k: e for k in ks}, []
                    completed.update(c)
                    failed.update(f)
                    for k in u:
                        mapped.pop(k, None)
            except Retry:
                pass
            pending = [k for k in pending if k not in completed and k not in failed]
            if not pending:
                return completed, failed
            stage = lookup_api if any(k not in mapped for k in pending) else fulfil_api
            try:
                self.pause(deadline, f"{api}(api={stage})")
            except JavaError as e:
                for k in pending:
                    failed[k] = e
                return completed, failed

    # ------------------------------------------------------------------ leaders
    def leader_lookup(self, tps: list) -> tuple[dict, dict]:
        """PartitionLeaderStrategy (unknown topics tolerated: retried)."""
        md = self.metadata(sorted({t for t, _p in tps}))
        mapped, failed = {}, {}
        for topic, (err, _internal, parts) in md.items():
            wanted = [tp for tp in tps if tp[0] == topic]
            if err in (3, 5, 8):
                continue
            if err:
                for tp in wanted:
                    if err == 29:
                        failed[tp] = JavaError(
                            ERRORS_PKG + "TopicAuthorizationException",
                            f"Failed to fetch metadata for partition {tp_str(tp)} due to topic authorization failure",
                        )
                    elif err == 17:
                        failed[tp] = JavaError(
                            ERRORS_PKG + "InvalidTopicException",
                            f"Failed to fetch metadata for partition {tp_str(tp)} due to invalid topic `{topic}`",
                        )
                    else:
                        failed[tp] = kafka_error(
                            err,
                            f"Failed to fetch metadata for partition {tp_str(tp)} due to "
                            f"unexpected error for topic `{topic}`",
                        )
                continue
            for index, perr, leader, _replicas in parts:
                tp = (topic, index)
                if tp not in wanted:
                    continue
                if perr in (6, 9, 5, 8, 56, 3):
                    continue
                if perr:
                    failed[tp] = kafka_error(perr, f"Unexpected error during metadata lookup for {tp_str(tp)}")
                elif leader >= 0:
                    mapped[tp] = leader
        return mapped, failed

    # ------------------------------------------------------------------ topics
    def metadata_retrying(self, topics, call: str):
        deadline = self.deadline()
        while True:
            try:
                return self.metadata(topics)
            except Retry:
                self.pause(deadline, call)

    def list_topics(self) -> list[str]:
        """listTopics(listInternal=true).names(): the keys of a HashMap<String, TopicListing>."""
        md = self.metadata_retrying(None, "listTopics")
        names = [t for t, (err, _i, _p) in md.items() if err == 0]
        return java_hash_order(names, java_string_hash)

    def describe_topics(self, topics: list[str]) -> list[tuple[str, list]]:
        """describeTopics(topics).allTopicNames(): ``[(topic, [(partition, replicas)])]`` in the
        order of the HashMap it returns; the first failing topic raises."""
        md = self.metadata_retrying(topics, "describeTopics")
        n = len(topics)
        order = java_hash_order(
            java_hash_order(list(topics), java_string_hash, initial_capacity=n), java_string_hash, initial_capacity=n
        )
        for t in order:
            err = md.get(t, (3, False, []))[0]
            if err:
                raise kafka_error(err)
        return [(t, [(p, replicas) for p, _e, _l, replicas in md[t][2]]) for t in order]


# errors the Admin client retries (RetriableException / InvalidMetadataException subclasses)
ADMIN_RETRIABLE = frozenset({6, 7, 8, 13, 14, 15, 41, 51, 74, 75, 89})


class ControllerAdmin(WireAdmin):
    """Kafka's Admin client as the quorum tools use it (kafka-metadata-quorum.sh, kafka-cluster.sh,
    kafka-reassign-partitions.sh): to any broker, or with ``--bootstrap-controller`` to the
    controllers (the active one found with DescribeCluster)."""

    def __init__(self, bootstrap: str, props: dict, controllers: bool):
        super().__init__(bootstrap, props)
        self.controllers = controllers
        self.active: tuple[str, int] | None = None
        self.tries = 0

    def send(self, addr, api_key, build, max_version=None, reader=None):
        try:
            return super().send(addr, api_key, build, max_version, reader)
        except Retry as e:
            if "timed out" in str(e):  # the request went out and got no answer in request.timeout.ms
                self.tries += 1
            raise

    def retrying(self, call: str, attempt):
        """``attempt()`` until it does not raise Retry, then Kafka's TimeoutException for ``call``:
        "Timed out waiting for a node assignment" when no request got as far as a node, the
        call's own timeout message when requests were sent and went unanswered."""
        self.tries = 0
        deadline = self.deadline()
        deadline_ms = int(time.time() * 1000) + self.api_timeout_ms
        while True:
            try:
                return attempt()
            except Retry:
                if not self.tries:
                    self.pause(deadline, call)
                elif time.monotonic() + self.backoff_s >= deadline:
                    now_ms = int(time.time() * 1000)
                    raise JavaError(
                        ERRORS_PKG + "TimeoutException",
                        f"Call(callName={call}, deadlineMs={deadline_ms}, tries={self.tries}, "
                        f"nextAllowedTryMs={now_ms + round(self.backoff_s * 1000)}) timed out at "
                        f"{now_ms} after {self.tries} attempt(s)",
                    ) from None
                else:
                    time.sleep(self.backoff_s)

    def describe_cluster(self):
        def build(mod, v):
            return make(
                mod.request.DescribeClusterRequest,
                include_cluster_authorized_operations=False,
                endpoint_type=2 if self.controllers else 1,
                include_fenced_brokers=False,
            )

        resp = self.send_any(ApiKeys.DESCRIBE_CLUSTER, build)
        if int(resp.error_code):
            raise self.error_for(int(resp.error_code), resp.error_message)
        nodes = {int(b.broker_id): (b.host, int(b.port)) for b in resp.brokers}
        self.brokers = nodes
        controller = int(resp.controller_id)
        self.active = nodes.get(controller) if self.controllers else None
        return resp

    def cluster_id(self) -> str:
        """``describeCluster().clusterId()`` (the Admin client names that call listNodes)."""
        return str(self.retrying("listNodes", self.describe_cluster).cluster_id)

    @staticmethod
    def error_for(code: int, message: str | None) -> Exception:
        if code in ADMIN_RETRIABLE:
            return Retry(f"error {code}")
        return kafka_error(code, message)

    @staticmethod
    def unknown_error(message: str) -> JavaError:
        return JavaError(ERRORS_PKG + "UnknownServerException", message)


def admin_properties(path: str | None) -> dict:
    """The ``--command-config`` properties (none without a path); a missing file is a TerseException."""
    if path is None:
        return {}
    if not os.path.exists(path):
        raise TerseException(f"Properties file {path} does not exist.")
    return load_props(path)


def admin_for(cls, ns: dict, config_path: str | None):
    """The Admin client of ``--bootstrap-server`` or ``--bootstrap-controller``."""
    props = admin_properties(config_path)
    controllers = ns["bootstrap_controller"] is not None
    return cls(ns["bootstrap_controller"] if controllers else ns["bootstrap_server"], props, controllers)


def run_admin(make_admin, command) -> int:
    """``command(admin)`` with the Admin client ``make_admin()`` gives, as Kafka's Admin tools end:
    a TerseException's message, or the Java exception's, on stderr and exit 1; the client closed."""
    admin = None
    try:
        admin = make_admin()
        command(admin)
    except TerseException as e:
        sys.stdout.flush()
        print(e, file=sys.stderr)
        return 1
    except JavaError as e:
        # Kafka prints getMessage() (of the ExecutionException: "<class>: <message>") and a stack trace
        sys.stdout.flush()
        wrapped = e.java_class.startswith(ERRORS_PKG)
        print(f"{e.java_class}: {e.message}" if wrapped else e.message, file=sys.stderr)
        return 1
    finally:
        if admin is not None:
            admin.close()
    sys.stdout.flush()
    return 0
