"""confluent-kafka AdminClient helpers shared by the tools, and the reachability check every
tool makes before it starts working (:func:`check_reachable`)."""

from __future__ import annotations

import re

from ._common import load_props

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

TIMEOUT = 60.0  # seconds; Kafka's default.api.timeout.ms


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def client_config(bootstrap: str | None, command_config: str | None = None, extra: dict | None = None) -> dict:
    conf: dict = {}
    if command_config:
        conf.update(load_props(command_config))
    if extra:
        conf.update(extra)
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    conf.setdefault("log_level", 0)  # librdkafka chatter is not part of the tools' output
    return conf


def make_admin(bootstrap: str | None, command_config: str | None = None, client_id: str | None = None):
    """An AdminClient, once one of the bootstrap servers answered (else :class:`Unreachable`)."""
    from confluent_kafka.admin import AdminClient

    extra = {"client.id": client_id} if client_id else None
    conf = client_config(bootstrap, command_config, extra)
    admin = AdminClient(conf)
    check_reachable(conf)
    return admin


def any_broker_request(props: dict, api_key: int, build, client_id: str = "adminclient-1"):
    """One request to the first of ``props["bootstrap.servers"]`` that answers, as Kafka's Admin
    client sends CreateTopics, DeleteTopics and CreatePartitions: to any broker, which forwards it
    to the active controller. (librdkafka sends them to "the controller" of its metadata, which a
    KRaft broker names at random among the unfenced brokers - for ``broker.session.timeout.ms``
    after a broker died, possibly that one, and the call then times out waiting for it.) The
    answer is awaited ``default.api.timeout.ms``: a broker holds the request while it looks for a
    controller."""
    from ..client.wire import Connection

    wait = _seconds(props, "default.api.timeout.ms", 60000)
    setup = min(_seconds(props, "socket.connection.setup.timeout.ms", 10000), wait)
    with Connection.to_any(str(props.get("bootstrap.servers") or ""), client_id, wait, setup) as conn:
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
    from ..client.wire import Connection

    limit = _seconds(props, bound, bound_default_ms)
    setup = min(_seconds(props, "socket.connection.setup.timeout.ms", 10000), limit)
    request = min(_seconds(props, "request.timeout.ms", 30000), limit)
    client_id = str(props.get("client.id") or "kesque-tools")
    Connection.to_any(str(props.get("bootstrap.servers") or ""), client_id, request, setup).close()


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
