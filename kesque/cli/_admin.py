"""confluent-kafka AdminClient helpers shared by the tools."""

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
    from confluent_kafka.admin import AdminClient

    extra = {"client.id": client_id} if client_id else None
    return AdminClient(client_config(bootstrap, command_config, extra))


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
    return list(admin.describe_cluster(request_timeout=timeout).result().nodes)


def node_address(admin, node_id: int) -> str | None:
    md = admin.list_topics(timeout=TIMEOUT)
    b = md.brokers.get(node_id)
    return f"{b.host}:{b.port}" if b is not None else None
