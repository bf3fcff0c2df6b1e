"""Broker configuration: ``server.properties`` plus ``--override``, with Kafka's names,
defaults and precedence, and the dynamic layers that AlterConfigs writes to the metadata log.

A key kesque uses is parsed and validated (a bad value is an error naming the key). A key
that Kafka knows but kesque does not use (JVM, thread pools, SSL, ZooKeeper...) is accepted
with a warning naming it, so a Kafka user's file starts kesque. Any other key (a plugin's, a
typo) is logged as not a known config and ignored, as Kafka does.
Every security protocol of Kafka's is served: PLAINTEXT, SSL (``kesque/server/tls.py``),
SASL_PLAINTEXT and SASL_SSL (``kesque/server/sasl.py`` over TLS); what kesque refuses or only warns about
because it does not do it yet is in ``not_yet``.

Dynamic changes (AlterConfigs on a BROKER) follow Kafka's DynamicBrokerConfig: its whole
dynamic set is accepted, stored and described, including the keys kesque does not act on.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from . import not_yet
from .kafka_keys import (
    KAFKA_BROKER_KEYS,
    KAFKA_CLUSTER_LEVEL_LISTENER_KEYS,
    KAFKA_DYNAMIC_BROKER_KEYS,
    KAFKA_DYNAMIC_ONLY_BROKER_KEYS,
    KAFKA_KEY_PREFIXES,
    KAFKA_LISTENER_MECHANISM_KEYS,
    KAFKA_LISTENER_ONLY_DYNAMIC_KEYS,
    KAFKA_PER_BROKER_DYNAMIC_KEYS,
    REMOVED_IN_4_0,
)
from .topic import SYNONYM_SCALE, TOPIC_CONFIGS, LogConfig
from .types import LONG_MAX, PARSERS, ConfigError, ConfigKey, at_least, between, one_of, render

log = logging.getLogger(__name__)

_K = ConfigKey

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# DescribeConfigs sources
SOURCE_UNKNOWN = 0
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
CLIENT_METRICS_CONFIG = 7
GROUP_CONFIG = 8

_BROKER_KEYS: list[ConfigKey] = [
    # identity and roles
    _K("node.id", "INT", -1, "id of this node"),
    _K("broker.id", "INT", -1, "legacy name of node.id"),
    _K("process.roles", "LIST", ["broker", "controller"], "broker, controller or both", one_of("broker", "controller")),
    _K("controller.quorum.voters", "LIST", [], "id@host:port of each controller"),
    _K("controller.quorum.bootstrap.servers", "LIST", [], "host:port of controllers"),
    _K("controller.quorum.election.timeout.ms", "INT", 1000, "no leader for this long: a voter stands", at_least(0)),
    _K(
        "controller.quorum.fetch.timeout.ms",
        "INT",
        2000,
        "no fetch answer for this long: the leader is gone",
        at_least(0),
    ),
    _K("controller.quorum.election.backoff.max.ms", "INT", 1000, "largest wait before another election", at_least(0)),
    _K("controller.quorum.request.timeout.ms", "INT", 2000, "a raft request unanswered this long fails", at_least(0)),
    _K("controller.quorum.retry.backoff.ms", "INT", 20, "wait before retrying a failed raft request", at_least(0)),
    _K(
        "controller.quorum.append.linger.ms",
        "INT",
        25,
        "the leader batches appends this long before a flush",
        at_least(0),
    ),
    _K("controller.listener.names", "STRING", ["CONTROLLER"], "listeners used by controllers", parse_as="LIST"),
    _K("cluster.id", "STRING", None, "cluster id (normally read from meta.properties)"),
    # network
    _K("listeners", "STRING", ["PLAINTEXT://:9092"], "listener URIs", parse_as="LIST", dynamic=True),
    _K("advertised.listeners", "STRING", None, "listeners published to clients", parse_as="LIST"),
    _K(
        "listener.security.protocol.map",
        "STRING",
        [
            "PLAINTEXT:PLAINTEXT",
            "SSL:SSL",
            "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "SASL_SSL:SASL_SSL",
            "CONTROLLER:PLAINTEXT",
        ],
        "listener name to security protocol",
        parse_as="LIST",
        dynamic=True,
    ),
    _K("inter.broker.listener.name", "STRING", None, "listener brokers use to talk to each other"),
    _K(
        "security.inter.broker.protocol",
        "STRING",
        "PLAINTEXT",
        "security protocol brokers use to talk to each other",
        one_of(*SECURITY_PROTOCOLS),
    ),
    _K("socket.request.max.bytes", "INT", 104857600, "largest request frame accepted", at_least(1)),
    _K("socket.send.buffer.bytes", "INT", 102400, "SO_SNDBUF (-1: OS default)"),
    _K("socket.receive.buffer.bytes", "INT", 102400, "SO_RCVBUF (-1: OS default)"),
    _K("connections.max.idle.ms", "LONG", 600000, "idle connections are closed after this"),
    _K(
        "queued.max.request.bytes",
        "LONG",
        256 * 1024 * 1024,
        "bytes of large requests being received or queued before reads pause (-1: unbounded; Kafka: -1)",
    ),
    _K("max.connections.per.ip", "INT", 2147483647, "connections one IP may hold open", at_least(0), dynamic=True),
    _K(
        "max.connections.per.ip.overrides", "STRING", "", "per-IP or per-host limits: host:count,ip:count", dynamic=True
    ),
    # logs
    _K("log.dirs", "STRING", None, "data directories", parse_as="LIST"),
    _K("log.dir", "STRING", "/tmp/kafka-logs", "data directory when log.dirs is unset"),
    _K("metadata.log.dir", "STRING", None, "directory of the metadata log (default: first log dir)"),
    _K("num.partitions", "INT", 1, "partitions of auto-created topics", at_least(1)),
    _K("default.replication.factor", "INT", 1, "replication factor of auto-created topics", at_least(1)),
    _K("auto.create.topics.enable", "BOOLEAN", True, "create topics on first Metadata/produce reference"),
    _K("delete.topic.enable", "BOOLEAN", True, "allow DeleteTopics"),
    _K("log.segment.bytes", "INT", 1073741824, "", at_least(1048576), dynamic=True),
    _K("log.roll.ms", "LONG", None, "", dynamic=True),
    _K("log.roll.hours", "INT", 168, "", at_least(1)),
    _K("log.roll.jitter.ms", "LONG", None, "", dynamic=True),
    _K("log.roll.jitter.hours", "INT", 0, "", at_least(0)),
    _K("log.retention.ms", "LONG", None, "", dynamic=True),
    _K("log.retention.minutes", "INT", None, ""),
    _K("log.retention.hours", "INT", 168, ""),
    _K("log.retention.bytes", "LONG", -1, "", dynamic=True),
    _K("log.retention.check.interval.ms", "LONG", 300000, "retention check period", at_least(1)),
    _K("log.segment.delete.delay.ms", "LONG", 60000, "", at_least(0), dynamic=True),
    _K("log.index.interval.bytes", "INT", 4096, "", at_least(0), dynamic=True),
    _K("log.index.size.max.bytes", "INT", 10485760, "", at_least(4), dynamic=True),
    _K("log.flush.interval.messages", "LONG", LONG_MAX, "", at_least(1), dynamic=True),
    _K("log.flush.interval.ms", "LONG", None, "", dynamic=True),
    _K("log.flush.scheduler.interval.ms", "LONG", LONG_MAX, "how often flush.ms is checked"),
    _K("log.flush.offset.checkpoint.interval.ms", "INT", 60000, "recovery point checkpoint period", at_least(0)),
    _K("log.flush.start.offset.checkpoint.interval.ms", "INT", 60000, "log start checkpoint period", at_least(0)),
    _K("replica.high.watermark.checkpoint.interval.ms", "LONG", 5000, "HW checkpoint period"),
    _K("log.cleanup.policy", "LIST", ["delete"], "", one_of("compact", "delete"), dynamic=True),
    _K("log.message.timestamp.type", "STRING", "CreateTime", "", one_of("CreateTime", "LogAppendTime"), dynamic=True),
    _K("log.message.timestamp.before.max.ms", "LONG", LONG_MAX, "", at_least(0), dynamic=True),
    _K("log.message.timestamp.after.max.ms", "LONG", 3600000, "", at_least(0), dynamic=True),
    _K("log.preallocate", "BOOLEAN", False, "accepted; kesque never preallocates", dynamic=True),
    _K("log.local.retention.ms", "LONG", -2, "", at_least(-2), dynamic=True),
    _K("log.local.retention.bytes", "LONG", -2, "", at_least(-2), dynamic=True),
    _K("log.cleaner.enable", "BOOLEAN", True, "run the log cleaner"),
    _K("log.cleaner.delete.retention.ms", "LONG", 86400000, "", at_least(0), dynamic=True),
    _K("log.cleaner.min.compaction.lag.ms", "LONG", 0, "", at_least(0), dynamic=True),
    _K("log.cleaner.max.compaction.lag.ms", "LONG", LONG_MAX, "", at_least(1), dynamic=True),
    _K("log.cleaner.min.cleanable.ratio", "DOUBLE", 0.5, "", between(0, 1), dynamic=True),
    _K("log.cleaner.backoff.ms", "LONG", 15000, "", at_least(0), dynamic=True),
    _K("log.cleaner.threads", "INT", 1, "log cleaner worker threads", at_least(0), dynamic=True),
    _K("log.cleaner.dedupe.buffer.size", "LONG", 134217728, "offset map memory of all cleaner threads", dynamic=True),
    _K("log.cleaner.io.max.bytes.per.second", "DOUBLE", 1.7976931348623157e308, "cleaner I/O bound", dynamic=True),
    _K("log.cleaner.io.buffer.size", "INT", 524288, "accepted; kesque reads whole batches", at_least(0), dynamic=True),
    _K("log.cleaner.io.buffer.load.factor", "DOUBLE", 0.9, "accepted; the offset map fills to 0.9", dynamic=True),
    _K("message.max.bytes", "INT", 1048588, "", at_least(0), dynamic=True),
    _K(
        "compression.type",
        "STRING",
        "producer",
        "",
        one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        dynamic=True,
    ),
    _K("compression.gzip.level", "INT", -1, "", between(-1, 9), dynamic=True),
    _K("compression.lz4.level", "INT", 9, "", between(1, 17), dynamic=True),
    _K("compression.zstd.level", "INT", 3, "", between(-131072, 22), dynamic=True),
    _K("min.insync.replicas", "INT", 1, "", at_least(1), dynamic=True),
    _K("unclean.leader.election.enable", "BOOLEAN", False, "", dynamic=True),
    # replication and fetch
    _K("replica.fetch.max.bytes", "INT", 1048576, "", at_least(0)),
    _K("replica.fetch.response.max.bytes", "INT", 10485760, "", at_least(0)),
    _K("replica.lag.time.max.ms", "LONG", 30000, ""),
    _K("num.replica.fetchers", "INT", 1, "fetcher connections per source broker", at_least(1), dynamic=True),
    _K("replica.fetch.wait.max.ms", "INT", 500, "a follower fetch's long-poll wait", at_least(0)),
    _K("replica.fetch.min.bytes", "INT", 1, "", at_least(1)),
    _K("replica.fetch.backoff.ms", "INT", 1000, "", at_least(0)),
    _K("replica.socket.timeout.ms", "INT", 30000, ""),
    _K("auto.leader.rebalance.enable", "BOOLEAN", True, "move leadership back to preferred replicas"),
    _K("leader.imbalance.check.interval.seconds", "LONG", 300, "", at_least(1)),
    _K("unclean.leader.election.interval.ms", "LONG", 300000, "", at_least(1)),
    _K("fetch.max.bytes", "INT", 57671680, "cap on a consumer fetch response", at_least(1024)),
    _K("max.incremental.fetch.session.cache.slots", "INT", 1000, "", at_least(0)),
    _K("controlled.shutdown.enable", "BOOLEAN", True, ""),
    # broker lifecycle (KRaft): registration, heartbeats, fencing
    _K("broker.heartbeat.interval.ms", "INT", 2000, "time between a broker's heartbeats to the controller"),
    _K("broker.session.timeout.ms", "INT", 9000, "a broker without a heartbeat for this long is fenced"),
    _K(
        "initial.broker.registration.timeout.ms",
        "INT",
        60000,
        "a broker that cannot register with the controller quorum within this stops",
    ),
    # metadata snapshots
    _K(
        "metadata.log.max.record.bytes.between.snapshots",
        "LONG",
        20971520,
        "metadata bytes applied between two snapshots",
        at_least(1),
    ),
    _K(
        "metadata.max.idle.interval.ms",
        "INT",
        500,
        "the active controller of a cluster writes a NoOpRecord this often (0: never)",
        at_least(0),
    ),
    _K(
        "metadata.log.max.snapshot.interval.ms",
        "LONG",
        3600000,
        "longest time between two metadata snapshots (0: no time rule)",
        at_least(0),
    ),
    # internal topics (later issues use them)
    _K("offsets.topic.num.partitions", "INT", 50, "", at_least(1)),
    _K("offsets.topic.replication.factor", "SHORT", 3, "", at_least(1)),
    _K("offsets.topic.segment.bytes", "INT", 104857600, "", at_least(1)),
    _K("transaction.state.log.num.partitions", "INT", 50, "", at_least(1)),
    _K("transaction.state.log.replication.factor", "SHORT", 3, "", at_least(1)),
    _K("transaction.state.log.min.isr", "INT", 2, "", at_least(1)),
    _K("transaction.state.log.segment.bytes", "INT", 104857600, "", at_least(1)),
    _K("group.initial.rebalance.delay.ms", "INT", 3000, ""),
    _K("group.min.session.timeout.ms", "INT", 6000, ""),
    _K("group.max.session.timeout.ms", "INT", 1800000, ""),
    _K("group.max.size", "INT", 2147483647, "", at_least(1)),
    _K("offsets.retention.minutes", "INT", 10080, "offsets of empty groups expire after this", at_least(1)),
    _K("offsets.retention.check.interval.ms", "LONG", 600000, "how often offsets expire", at_least(1)),
    _K("offset.metadata.max.bytes", "INT", 4096, "largest metadata string of an offset commit"),
    _K(
        "offsets.commit.timeout.ms",
        "INT",
        5000,
        "a group coordinator write is answered COORDINATOR_NOT_AVAILABLE if not committed within this",
        at_least(1),
    ),
    _K(
        "request.timeout.ms",
        "INT",
        30000,
        "inter-broker requests of the coordinators (transaction markers, KIP-890 verification)",
        at_least(0),
    ),
    _K(
        "group.coordinator.rebalance.protocols",
        "LIST",
        ["classic", "consumer"],
        "enabled group protocols",
        one_of("classic", "consumer", "share", "streams"),
    ),
    _K(
        "group.consumer.assignors",
        "LIST",
        [
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        ],
        "server-side assignors of the consumer protocol (uniform, range), the first is the default",
    ),
    _K("group.consumer.heartbeat.interval.ms", "INT", 5000, "", at_least(1)),
    _K("group.consumer.min.heartbeat.interval.ms", "INT", 5000, "", at_least(1)),
    _K("group.consumer.max.heartbeat.interval.ms", "INT", 15000, "", at_least(1)),
    _K("group.consumer.session.timeout.ms", "INT", 45000, "", at_least(1)),
    _K("group.consumer.min.session.timeout.ms", "INT", 45000, "", at_least(1)),
    _K("group.consumer.max.session.timeout.ms", "INT", 60000, "", at_least(1)),
    _K("group.consumer.max.size", "INT", 2147483647, "", at_least(1)),
    # the share-group bounds a group's share.* configs (IncrementalAlterConfigs on a GROUP) are checked against
    _K("group.share.session.timeout.ms", "INT", 45000, "", at_least(1)),
    _K("group.share.min.session.timeout.ms", "INT", 45000, "", at_least(1)),
    _K("group.share.max.session.timeout.ms", "INT", 60000, "", at_least(1)),
    _K("group.share.heartbeat.interval.ms", "INT", 5000, "", at_least(1)),
    _K("group.share.min.heartbeat.interval.ms", "INT", 5000, "", at_least(1)),
    _K("group.share.max.heartbeat.interval.ms", "INT", 15000, "", at_least(1)),
    _K("group.share.record.lock.duration.ms", "INT", 30000, "", between(1000, 3600000)),
    _K("group.share.min.record.lock.duration.ms", "INT", 15000, "", between(1000, 30000)),
    _K("group.share.max.record.lock.duration.ms", "INT", 60000, "", between(30000, 3600000)),
    _K("group.share.enable", "BOOLEAN", False, "serve share groups (KIP-932)"),
    _K("share.coordinator.state.topic.num.partitions", "INT", 50, "", at_least(1)),
    _K("share.coordinator.state.topic.replication.factor", "SHORT", 3, "", at_least(1)),
    _K("share.coordinator.state.topic.segment.bytes", "INT", 104857600, "", at_least(1)),
    _K("share.coordinator.state.topic.min.isr", "SHORT", 2, "", at_least(1)),
    _K("share.coordinator.snapshot.update.records.per.snapshot", "INT", 500, "", between(0, 500)),
    _K("share.coordinator.write.timeout.ms", "INT", 5000, "", at_least(1)),
    _K("group.share.max.size", "INT", 200, "most members of one share group", between(10, 1000)),
    _K("group.share.delivery.count.limit", "INT", 5, "deliveries of a record before it is archived", between(2, 10)),
    _K(
        "group.share.partition.max.record.locks",
        "INT",
        2000,
        "most in-flight records of a share-partition",
        between(100, 10000),
    ),
    # client quotas (KIP-13/124): the sampled window rates are measured over
    _K("quota.window.num", "INT", 11, "samples kept for client quota rates", at_least(1)),
    _K("quota.window.size.seconds", "INT", 1, "time span of each client quota sample", at_least(1)),
    _K("controller.quota.window.num", "INT", 11, "samples of controller_mutation_rate quotas", at_least(1)),
    _K(
        "controller.quota.window.size.seconds",
        "INT",
        1,
        "time span of each controller mutation quota sample",
        at_least(1),
    ),
    # replication quotas (KIP-73): the rates leader/follower.replication.throttled.rate bound, and
    # replica.alter.log.dirs.io.max.bytes.per.second's
    _K("replication.quota.window.num", "INT", 11, "samples kept for replication quota rates", at_least(1)),
    _K("replication.quota.window.size.seconds", "INT", 1, "time span of each replication quota sample", at_least(1)),
    _K(
        "alter.log.dirs.replication.quota.window.num",
        "INT",
        11,
        "samples kept for the rate of copies between log dirs",
        at_least(1),
    ),
    _K(
        "alter.log.dirs.replication.quota.window.size.seconds",
        "INT",
        1,
        "time span of each sample of the rate of copies between log dirs",
        at_least(1),
    ),
    # transactions and idempotent producers
    _K(
        "transaction.max.timeout.ms",
        "INT",
        900000,
        "largest transaction.timeout.ms a producer may ask for",
        at_least(1),
    ),
    _K(
        "transactional.id.expiration.ms", "INT", 604800000, "idle transactional ids are removed after this", at_least(1)
    ),
    _K(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "INT",
        10000,
        "how often timed-out transactions are aborted",
        at_least(1),
    ),
    _K(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "INT",
        3600000,
        "how often expired transactional ids are removed",
        at_least(1),
    ),
    _K(
        "transaction.partition.verification.enable",
        "BOOLEAN",
        True,
        "check with the coordinator that a partition is in the transaction before a transactional append (KIP-890)",
        dynamic=True,
    ),
    _K(
        "add.partitions.to.txn.retry.backoff.max.ms",
        "INT",
        100,
        "how long a partition leader asks again while the coordinator answers a TV2 producer's add with "
        "CONCURRENT_TRANSACTIONS (bounded by request.timeout.ms)",
        at_least(0),
    ),
    _K("add.partitions.to.txn.retry.backoff.ms", "INT", 20, "the wait between those asks", at_least(1)),
    _K(
        "transaction.two.phase.commit.enable",
        "BOOLEAN",
        False,
        "allow producers to take part in two-phase commit (KIP-939: transactions that never time out)",
    ),
    _K(
        "producer.id.expiration.ms",
        "INT",
        86400000,
        "idle producer state is removed after this",
        at_least(1),
        dynamic=True,
    ),
    _K(
        "producer.id.expiration.check.interval.ms",
        "INT",
        600000,
        "how often idle producer state is removed",
        at_least(1),
    ),
    # TLS (kesque/server/tls.py): the broker's, and per listener as listener.name.<l>.ssl.*;
    # Kafka updates them per listener only (the key store keys take effect at once: new
    # connections use the new store)
    _K("ssl.allow.dn.changes", "BOOLEAN", False, "a key store altered dynamically may change its subject DN"),
    _K("ssl.allow.san.changes", "BOOLEAN", False, "a key store altered dynamically may drop subject alt names"),
    _K(
        "ssl.keystore.type",
        "STRING",
        "JKS",
        "key store format: PEM or PKCS12 (JKS: a PEM or PKCS12 file)",
        dynamic=True,
    ),
    _K("ssl.keystore.location", "STRING", None, "key store file", dynamic=True),
    _K("ssl.keystore.password", "PASSWORD", None, "PKCS12 key store password", dynamic=True),
    _K("ssl.key.password", "PASSWORD", None, "password of an encrypted PEM private key", dynamic=True),
    _K("ssl.keystore.certificate.chain", "PASSWORD", None, "PEM certificate chain, inline", dynamic=True),
    _K("ssl.keystore.key", "PASSWORD", None, "PEM private key, inline", dynamic=True),
    _K("ssl.truststore.type", "STRING", "JKS", "trust store format: PEM or PKCS12", dynamic=True),
    _K("ssl.truststore.location", "STRING", None, "trust store file", dynamic=True),
    _K("ssl.truststore.password", "PASSWORD", None, "PKCS12 trust store password", dynamic=True),
    _K("ssl.truststore.certificates", "PASSWORD", None, "PEM trusted certificates, inline", dynamic=True),
    _K(
        "ssl.client.auth",
        "STRING",
        "none",
        "client certificates: none, requested or required",
        one_of("required", "requested", "none"),
        dynamic=True,
    ),
    _K("ssl.enabled.protocols", "LIST", ["TLSv1.2", "TLSv1.3"], "TLS versions accepted", dynamic=True),
    _K("ssl.protocol", "STRING", "TLSv1.3", "TLS protocol of the SSL context", dynamic=True),
    _K("ssl.cipher.suites", "LIST", [], "cipher suites (empty: OpenSSL's defaults)", dynamic=True),
    _K(
        "ssl.principal.mapping.rules",
        "STRING",
        "DEFAULT",
        "a client certificate's DN to its principal name (DEFAULT: the DN)",
    ),
    _K(
        "ssl.endpoint.identification.algorithm",
        "STRING",
        "https",
        "https: check the host name of the broker connected to; empty: do not",
        dynamic=True,
    ),
]

# authorization (issue 27): Kafka's StandardAuthorizer, the only authorizer kesque has
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _authorizer_class(name: str, value: str) -> None:
    if value not in ("", STANDARD_AUTHORIZER):
        raise ConfigError(
            name,
            f"Invalid value {value} for configuration {name}: kesque's only authorizer is Kafka's "
            f"{STANDARD_AUTHORIZER} (ACLs in the metadata log); leave {name} empty for none",
        )


def _super_users(name: str, value: str) -> None:
    for entry in value.split(";"):
        entry = entry.strip()
        if entry and ":" not in entry:
            raise ConfigError(
                name,
                f"Invalid value {value} for configuration {name}: expected a string in format "
                f"principalType:principalName but got {entry}",
            )


_BROKER_KEYS += [
    _K(
        "authorizer.class.name", "STRING", "", "the authorizer (Kafka's StandardAuthorizer, or none)", _authorizer_class
    ),
    _K("super.users", "STRING", None, "principals every action is allowed (User:a;User:b)", _super_users),
    _K(
        "allow.everyone.if.no.acl.found",
        "BOOLEAN",
        False,
        "a resource no ACL applies to is open to everyone (else to super users only)",
    ),
]

# SASL (issue 27; kesque/server/sasl.py): the broker's, and per listener as
# listener.name.<l>.sasl.enabled.mechanisms and listener.name.<l>.<mechanism>.sasl.jaas.config
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_BROKER_KEYS += [
    _K("sasl.enabled.mechanisms", "LIST", ["GSSAPI"], "SASL mechanisms a SASL listener offers", dynamic=True),
    _K("sasl.jaas.config", "PASSWORD", None, "JAAS login modules (per mechanism and listener)", dynamic=True),
    _K(
        "sasl.mechanism.inter.broker.protocol",
        "STRING",
        "GSSAPI",
        "mechanism brokers authenticate to each other with",
        dynamic=True,
    ),
    _K("sasl.mechanism.controller.protocol", "STRING", "GSSAPI", "mechanism nodes authenticate to controllers with"),
    _K("sasl.server.max.receive.size", "INT", 524288, "largest frame before authentication completes"),
    _K(
        "connection.failed.authentication.delay.ms",
        "INT",
        100,
        "a failed authentication is answered and closed after this",
        at_least(0),
    ),
    _K("connections.max.reauth.ms", "LONG", 0, "session lifetime of a SASL connection (KIP-368; 0: none)"),
    _K("sasl.oauthbearer.jwks.endpoint.url", "STRING", None, "JWKS the OAUTHBEARER tokens are checked against"),
    _K("sasl.oauthbearer.jwks.endpoint.refresh.ms", "LONG", 3600000, "an http(s) JWKS is fetched again this often"),
    _K("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "LONG", 100, "first wait after a failed JWKS fetch"),
    _K("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "LONG", 10000, "a JWKS fetch is retried this long"),
    _K("sasl.oauthbearer.expected.audience", "LIST", [], "audiences a token must name (empty: any)"),
    _K("sasl.oauthbearer.expected.issuer", "STRING", None, "issuer a token must name"),
    _K("sasl.oauthbearer.clock.skew.seconds", "INT", 30, "allowed clock skew for a token's times"),
    _K("sasl.oauthbearer.sub.claim.name", "STRING", "sub", "claim holding the principal"),
    _K("sasl.oauthbearer.scope.claim.name", "STRING", "scope", "claim holding the scope"),
]


def metrics_listener(name: str, value: str | None) -> tuple[str, int] | None:
    """``metrics.listener`` or ``console.listener`` (``http://host:port``; empty or unset: no
    endpoint) -> (host, port)."""
    if not value:
        return None
    m = re.fullmatch(r"http://(\[[0-9a-fA-F:.]+\]|[^:/\[\]\s]*):(\d{1,5})/?", value.strip())
    if m is None or int(m.group(2)) > 65535:
        raise ConfigError(
            name,
            f"Invalid value {value} for configuration {name}: expected http://host:port (e.g. "
            "http://127.0.0.1:9404; port 0: any free port)",
        )
    return m.group(1).strip("[]"), int(m.group(2))


# kesque's own (issue 29; kesque/metrics/): not Kafka's, which exposes JMX instead
_BROKER_KEYS += [
    _K(
        "metrics.listener",
        "STRING",
        None,
        "http://host:port of the Prometheus /metrics endpoint (unset: none)",
        metrics_listener,
    ),
    _K(
        "console.listener",
        "STRING",
        None,
        "http://host:port of the web console (docs/console.md; unset: none)",
        metrics_listener,
    ),
]
BROKER_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _BROKER_KEYS}

# the prefix of the web console's own client properties (BrokerConfig.console_client)
CONSOLE_CLIENT_PREFIX = "console.client."

# Where kesque's defaults knowingly differ from Kafka 4.0's (every other key has Kafka's
# default; tests/test_config.py checks it against the table in kafka_keys.py).
DEFAULTS_DIFFERING_FROM_KAFKA = {
    "node.id": "Kafka requires it; -1 means 'not set' and a single kesque node then runs as node 1",
    "process.roles": "Kafka requires it; kesque defaults to a combined broker+controller node",
    "controller.listener.names": "Kafka requires it in KRaft mode; kesque names its controller listener CONTROLLER",
    "listener.security.protocol.map": "Kafka maps controller listeners to PLAINTEXT when the map is not set; "
    "kesque writes that mapping into the default",
    "cluster.id": "not a Kafka broker config: kesque accepts it to pin the id meta.properties gets",
    "metrics.listener": "not a Kafka broker config: kesque's Prometheus endpoint (docs/metrics.md), where "
    "Kafka has JMX",
    "console.listener": "not a Kafka broker config: kesque's web console (docs/console.md)",
    "queued.max.request.bytes": "Kafka's -1 (unbounded) lets clients that declare large frames and send slowly "
    "exhaust the machine's memory; kesque bounds it at 256 MiB (docs/compatibility.md)",
}

# The single-node settings of config/server.properties: what `kesque serve` runs with when
# given no file. Kafka's defaults are a cluster's (internal topics with 3 replicas), which one
# node can never create; tests/test_config.py checks config/server.properties sets these too.
SINGLE_NODE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.two.phase.commit.enable": "true",
}

# KIP-896 et al: keys whose values kesque cannot honour at all (refuse rather than mislead)
_REJECTED_VALUES = {
    "log.message.format.version": "kesque stores only record format v2 (as Kafka 4.x does)",
}


# keys Kafka defines as internal (ConfigDef.defineInternal): not in a DescribeConfigs of all keys
KAFKA_INTERNAL_BROKER_KEYS = frozenset(
    {
        "cluster.id",
        "metrics.listener",  # kesque's own, not Kafka's: not described either
        "console.listener",  # the same
        "producer.id.expiration.check.interval.ms",
        "unclean.leader.election.interval.ms",
    }
)


# kesque keys Kafka can change at runtime that kesque accepts, stores and describes but does
# not act on while running (bound at start, or a feature kesque does not have yet)
DYNAMIC_WITHOUT_EFFECT = frozenset(
    {
        "listeners",
        "listener.security.protocol.map",
        "log.preallocate",
        "log.local.retention.ms",
        "log.local.retention.bytes",
        "transaction.partition.verification.enable",
        "log.cleaner.threads",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        # a listener's TLS settings are read when it is bound (but its key store: re-read when
        # listener.name.<l>.ssl.keystore.* change, kesque/server/server.py _reload_keystores)
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        # a SASL listener's settings are read when it is bound
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.mechanism.inter.broker.protocol",
    }
)

_LISTENER_KEYS = ("listeners", "listener.security.protocol.map")
_LISTENER_KEY = re.compile(r"^listener\.name\.[^.]*\.(.+)$")


def listener_base(name: str) -> str:
    """``listener.name.<l>.<key>`` (or ``.<mechanism>.<key>`` for the SASL login keys) -> key."""

    m = _LISTENER_KEY.match(name)
    if not m:
        return name
    return next((k for k in KAFKA_LISTENER_MECHANISM_KEYS if m.group(1).endswith(k)), m.group(1))


def is_dynamic(name: str) -> bool:
    """Kafka can change this broker key with AlterConfigs (its DynamicBrokerConfig set)."""

    return name in KAFKA_DYNAMIC_BROKER_KEYS or name in KAFKA_DYNAMIC_ONLY_BROKER_KEYS


# Kafka's dynamic-only broker keys (QuotaConfig.brokerQuotaConfigs: set with AlterConfigs, never
# in server.properties) and their validators
DYNAMIC_ONLY_VALIDATORS = {
    "leader.replication.throttled.rate": at_least(0),
    "follower.replication.throttled.rate": at_least(0),
    "replica.alter.log.dirs.io.max.bytes.per.second": at_least(0),
}
# the dynamic-only keys kesque acts on: all of them (kesque/replication/quota.py)
DYNAMIC_ONLY_WITH_EFFECT = frozenset(DYNAMIC_ONLY_VALIDATORS)


def has_effect(name: str) -> bool:
    """A dynamic change of this key changes what kesque does (without a restart)."""
    if name in DYNAMIC_ONLY_WITH_EFFECT:
        return True
    key = BROKER_CONFIGS.get(name)
    return key is not None and key.dynamic and name not in DYNAMIC_WITHOUT_EFFECT


def key_type(name: str) -> str:
    """Kafka's declared type of a broker key (STRING for a custom one)."""
    name = listener_base(name)
    if name in BROKER_CONFIGS:
        return BROKER_CONFIGS[name].type
    entry = KAFKA_BROKER_KEYS.get(name) or KAFKA_DYNAMIC_ONLY_BROKER_KEYS.get(name)
    return entry[0] if entry else "STRING"


def _known_kafka_key(name: str) -> bool:

    return name in KAFKA_BROKER_KEYS or name in REMOVED_IN_4_0 or name.startswith(tuple(KAFKA_KEY_PREFIXES))


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    """java.util.Properties escapes: ``\\t \\n \\r \\f \\uXXXX``; any other escaped
    character stands for itself (``\\:`` ``\\=`` ``\\\\``)."""
    if "\\" not in s:
        return s
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if c != "\\":
            out.append(c)
        i += 1
    return "".join(out)


def _continues(line: str) -> bool:
    """A logical line goes on when the physical one ends in an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties as ``Properties.load`` reads them: ``key=value`` / ``key: value`` /
    ``key value``, ``#``/``!`` comments, backslash line continuation, backslash escapes."""
    props: dict[str, str] = {}
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not buf and (not line or line[0] in "#!"):
            continue
        if _continues(line):
            buf += line[:-1]
            continue
        logical.append(buf + line)
        buf = ""
    if buf:
        logical.append(buf)
    for line in logical:
        m = re.match(r"^((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)$", line, re.S)
        if m:
            key, value = m.group(1), m.group(2)
        else:
            key, value = line, ""
        props[_unescape(key)] = _unescape(value).strip()
    return props


@dataclass
class Listener:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, uri: str, key: str = "listeners") -> Listener:
        m = re.match(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)$", uri.strip())
        if not m:
            raise ConfigError(
                key, f"Invalid value {uri} for configuration {key}: Unable to parse {uri} to a broker endpoint"
            )
        host = m.group(2).strip("[]")
        return cls(m.group(1).upper(), host, int(m.group(3)))


class BrokerConfig:
    """Static (file + overrides) and dynamic (AlterConfigs) broker configuration."""

    def __init__(self, props: dict[str, str] | None = None, *, strict: bool = True):
        props = dict(props or {})
        self.raw = props
        self.static: dict[str, Any] = {}
        self.unused: list[str] = []
        self.dynamic_default: dict[str, Any] = {}
        self.dynamic_broker: dict[str, Any] = {}
        self.listener_static: dict[str, Any] = {}  # listener.name.<l>.<key> of a key kesque reads
        # console.client.<key>: Kafka client properties of the web console inside the node
        # (security.protocol, ssl.*, sasl.*), read when the console starts (docs/console.md)
        self.console_client: dict[str, str] = {}
        for name, value in props.items():
            key = BROKER_CONFIGS.get(name)
            if key is not None:
                self.static[name] = key.parse(value)
                continue
            if name.startswith(CONSOLE_CLIENT_PREFIX) and len(name) > len(CONSOLE_CLIENT_PREFIX):
                self.console_client[name[len(CONSOLE_CLIENT_PREFIX) :]] = value
                continue
            base = listener_base(name)
            if base != name and base in BROKER_CONFIGS:
                key = BROKER_CONFIGS[base]
                parsed = PARSERS[key.parse_as or key.type](name, value)
                if key.validator is not None:
                    key.validator(name, parsed)
                self.listener_static[name] = parsed
                continue
            if name in _REJECTED_VALUES:
                log.warning("Config %s is ignored: %s", name, _REJECTED_VALUES[name])
                self.unused.append(name)
                continue
            if _known_kafka_key(name):
                log.warning("Kafka config %s is not used by kesque; ignoring it", name)
                self.unused.append(name)
                continue
            # Kafka passes such keys on to plugins and goes on (AbstractConfig.logUnused)
            log.warning("The configuration '%s' was supplied but isn't a known config.", name)
            self.unused.append(name)
        # KRaft: broker.id and node.id are the same id, whichever the file sets
        if "node.id" not in self.static and "broker.id" in self.static:
            self.static["node.id"] = self.static["broker.id"]
        elif "broker.id" not in self.static and "node.id" in self.static:
            self.static["broker.id"] = self.static["node.id"]
        self._validate()
        if strict:
            not_yet.check(self)

    def _validate(self) -> None:
        queued = self.get("queued.max.request.bytes")
        if self.is_set("queued.max.request.bytes") and 0 < queued < self.get("socket.request.max.bytes"):
            raise ConfigError(
                "queued.max.request.bytes",
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes",
            )
        protocols = self.security_protocol_map()
        for key in ("listeners", "advertised.listeners"):
            for uri in self.get(key) or []:
                self._check_protocol(key, uri, Listener.parse(uri, key).name, protocols)
        inter = self.get("inter.broker.listener.name")
        if inter:
            if self.is_set("security.inter.broker.protocol"):
                raise ConfigError(
                    "inter.broker.listener.name",
                    "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
                )
            self._check_protocol("inter.broker.listener.name", inter, inter.upper(), protocols)

    def inter_broker_listener(self) -> str:
        """The listener brokers connect to each other on: inter.broker.listener.name, else the
        listener named as security.inter.broker.protocol (Kafka's default: PLAINTEXT)."""
        return (self.get("inter.broker.listener.name") or self.get("security.inter.broker.protocol")).upper()

    def listener_value(self, name: str) -> Any:
        """A ``listener.name.<l>.<key>`` setting (dynamic, then static), None when not set."""
        for layer in (self.dynamic_broker, self.dynamic_default, self.listener_static):
            if name in layer:
                return layer[name]
        return None

    def listener_get(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """``key`` as ``listener`` sees it: ``listener.name.<l>.<mechanism>.<key>`` (the
        mechanism's, for the keys Kafka reads per mechanism), ``listener.name.<l>.<key>``, then
        the broker's ``key``."""
        prefix = f"listener.name.{listener.lower()}."
        if mechanism is not None:
            value = self.listener_value(f"{prefix}{mechanism.lower()}.{key}")
            if value is not None:
                return value
        value = self.listener_value(prefix + key)
        return self.get(key) if value is None else value

    def security_protocol_map(self) -> dict[str, str]:
        """listener name -> security protocol (Kafka's listener.security.protocol.map; when
        the map is not set, the controller listeners are PLAINTEXT as in Kafka)."""
        key = "listener.security.protocol.map"
        out = {}
        if not self.is_set(key):
            out.update({n.upper(): "PLAINTEXT" for n in self.get("controller.listener.names")})
        for entry in self.get(key):
            name, sep, proto = entry.partition(":")
            proto = proto.strip().upper()
            if not sep or not name.strip():
                raise ConfigError(
                    key, f"Invalid value {entry} for configuration {key}: Map entry should be of form <key>:<value>"
                )
            if proto not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    key,
                    f"Invalid value {entry} for configuration {key}: {proto} is not a security "
                    f"protocol (one of {', '.join(SECURITY_PROTOCOLS)})",
                )
            out[name.strip().upper()] = proto
        return out

    @staticmethod
    def _check_protocol(key: str, value: str, listener: str, protocols: dict[str, str]) -> None:
        """Every listener named has a security protocol (all four of Kafka's are served)."""
        proto = protocols.get(listener)
        if proto is None:
            raise ConfigError(
                key,
                f"Invalid value {value} for configuration {key}: No security protocol defined "
                f"for listener {listener} (listener.security.protocol.map)",
            )

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> Any:
        for layer in (self.dynamic_broker, self.dynamic_default, self.static):
            if name in layer:
                return layer[name]
        key = BROKER_CONFIGS.get(name)
        return key.default if key else None

    def is_set(self, name: str) -> bool:
        return any(name in layer for layer in (self.dynamic_broker, self.dynamic_default, self.static))

    def source(self, name: str) -> int:
        if name in self.dynamic_broker:
            return DYNAMIC_BROKER_CONFIG
        if name in self.dynamic_default:
            return DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self.static:
            return STATIC_BROKER_CONFIG
        return DEFAULT_CONFIG

    def synonym_entries(self, name: str) -> list[tuple[str, str | None, int]]:
        """(name, value, source) for every layer that sets a broker key, highest first."""
        out = []
        for layer, src in (
            (self.dynamic_broker, DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, STATIC_BROKER_CONFIG),
        ):
            if name in layer:
                out.append((name, render(layer[name]), src))
        key = BROKER_CONFIGS.get(name)
        if key is not None and key.default is not None:
            out.append((name, render(key.default), DEFAULT_CONFIG))
        return out

    # ------------------------------------------------------------------ derived
    @property
    def node_id(self) -> int:
        return self.get("node.id")

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.get("log.dirs")
        return list(dirs) if dirs else [self.get("log.dir")]

    @property
    def metadata_log_dir(self) -> str:
        return self.get("metadata.log.dir") or self.log_dirs[0]

    @property
    def lone_node(self) -> bool:
        """A combined broker+controller whose voters and bootstrap servers name no other node:
        it may format its own storage on first start (``make serve``); any other node needs
        ``kesque storage format`` first, as Kafka's does."""
        if set(self.get("process.roles")) != {"broker", "controller"}:
            return False
        voters = {v.strip().split("@", 1)[0] for v in self.get("controller.quorum.voters") or [] if v.strip()}
        if voters - {str(self.node_id if self.node_id >= 0 else 1)}:
            return False
        own_ports = {str(lis.port) for lis in self.listeners()}
        servers = [s.strip() for s in self.get("controller.quorum.bootstrap.servers") or [] if s.strip()]
        return all(s.rsplit(":", 1)[-1] in own_ports for s in servers)

    def listeners(self) -> list[Listener]:
        return [Listener.parse(u) for u in self.get("listeners")]

    def advertised_listeners(self) -> list[Listener]:
        adv = self.get("advertised.listeners")
        if adv:
            return [Listener.parse(u) for u in adv]
        controller_names = {n.upper() for n in self.get("controller.listener.names")}
        return [lis for lis in self.listeners() if lis.name not in controller_names]

    # ------------------------------------------------------------------ topic defaults
    def topic_default(self, topic_key: str) -> tuple[Any, int, list[tuple[str, str | None, int]]]:
        """Effective broker-level default of a topic config: (value, source, synonyms)."""
        key = TOPIC_CONFIGS[topic_key]
        synonyms: list[tuple[str, str | None, int]] = []
        chosen = None
        for broker_key in key.synonyms:
            for entry in self.synonym_entries(broker_key):
                synonyms.append(entry)
                if chosen is None and entry[2] != DEFAULT_CONFIG:
                    chosen = (broker_key, self.get(broker_key), entry[2])
        if chosen is None:
            for broker_key in key.synonyms:
                bk = BROKER_CONFIGS.get(broker_key)
                if bk is not None and bk.default is not None:
                    chosen = (broker_key, bk.default, DEFAULT_CONFIG)
                    break
        if chosen is None:
            return key.default, DEFAULT_CONFIG, synonyms
        broker_key, value, src = chosen
        if broker_key in SYNONYM_SCALE and value is not None:
            value = value * SYNONYM_SCALE[broker_key]
        if topic_key == "flush.ms" and value is None:
            value = LONG_MAX
        return value, src, synonyms

    def log_config(self, overrides: dict[str, Any] | None = None) -> LogConfig:
        values = {name: self.topic_default(name)[0] for name in TOPIC_CONFIGS}
        if values.get("flush.ms") is None:
            values["flush.ms"] = self.get("log.flush.scheduler.interval.ms")
        values.update(overrides or {})
        return LogConfig.from_values(values)

    # ------------------------------------------------------------------ dynamic
    def validate_dynamic(self, name: str, value: str | None, per_broker: bool = True) -> Any:
        """Check one key of an AlterConfigs on a BROKER resource as Kafka's
        DynamicBrokerConfig.validateConfigs does (per broker, or the cluster default when
        ``per_broker`` is false) and return its parsed value. Kafka's whole dynamic set is
        accepted, so is a key that is not Kafka's (a custom config); a Kafka key outside the
        set is refused. The caller answers a refusal with INVALID_REQUEST, as Kafka does."""
        base = listener_base(name)
        if base == name and name in KAFKA_LISTENER_ONLY_DYNAMIC_KEYS:
            raise ConfigError(
                name,
                "These security configs can be dynamically updated only per-listener using the "
                f"listener prefix: [{name}]",
            )
        if not is_dynamic(name) and (name in BROKER_CONFIGS or name in KAFKA_BROKER_KEYS):
            raise ConfigError(name, f"Cannot update these configs dynamically: [{name}]")
        if not per_broker and (
            base in KAFKA_PER_BROKER_DYNAMIC_KEYS or (base != name and base not in KAFKA_CLUSTER_LEVEL_LISTENER_KEYS)
        ):
            raise ConfigError(
                name, f"Cannot update these configs at default cluster level, broker id must be specified: [{name}]"
            )
        if value is None:
            return None
        key = BROKER_CONFIGS.get(base)
        if key is not None and key.dynamic:
            parsed = key.parse(value)
            if base == name and name in _LISTENER_KEYS:
                self._check_listener_change(name, parsed)
            return parsed
        if is_dynamic(base):
            parsed = PARSERS[key_type(base)](base, value)
            check = DYNAMIC_ONLY_VALIDATORS.get(base)
            if check is not None:
                check(base, parsed)
            return parsed
        return value  # a custom config: Kafka keeps it as given

    def _check_listener_change(self, name: str, value: list[str]) -> None:
        """A dynamic listener setting takes effect at the next start: it must be valid, as the
        static one must."""
        old_listeners = {lis.name: lis for lis in self.listeners()}
        old_advertised = {lis.name: lis for lis in self.advertised_listeners()}
        old_map = self.security_protocol_map()
        before = dict(self.dynamic_broker)
        self.dynamic_broker[name] = value
        try:
            self._validate()
            self._check_listener_reconfiguration(name, old_listeners, old_advertised, old_map)
        finally:
            self.dynamic_broker.clear()
            self.dynamic_broker.update(before)

    def _check_listener_reconfiguration(self, key: str, old_listeners: dict, old_advertised: dict, old_map: dict):
        """Kafka's DynamicListenerConfig.validateReconfiguration, on the config with the change
        (after KafkaConfig's own requirement that a controller keeps a controller listener)."""
        new_listeners = {lis.name: lis for lis in self.listeners()}
        roles = self.get("process.roles") or []
        roles = roles.split(",") if isinstance(roles, str) else roles
        if "controller" in [r.strip() for r in roles] and not {
            n.upper() for n in self.get("controller.listener.names")
        } & set(new_listeners):
            raise ConfigError(
                key,
                "requirement failed: controller.listener.names must contain at least one value appearing in "
                "the 'listeners' configuration when running the KRaft controller role",
            )
        new_advertised = {lis.name: lis for lis in self.advertised_listeners()}
        new_map = self.security_protocol_map()

        def render(listeners: dict) -> str:  # a Scala Map's toString, as Kafka prints it
            return (
                "Map(" + ", ".join(f"{n} -> {lis.name}://{lis.host}:{lis.port}" for n, lis in listeners.items()) + ")"
            )

        if not set(new_advertised) <= set(new_listeners):
            raise ConfigError(
                key,
                f"Advertised listeners '{render(new_advertised)}' must be a subset of listeners "
                f"'{render(new_listeners)}'",
            )
        if not set(new_listeners) <= set(new_map):
            raise ConfigError(
                key,
                f"Listeners '{render(new_listeners)}' must be subset of listener map "
                "'Map(" + ", ".join(f"{n} -> {p}" for n, p in new_map.items()) + ")'",
            )
        for listener in set(new_listeners) & set(old_listeners):
            if old_map.get(listener) != new_map.get(listener):
                raise ConfigError(key, f"Security protocol cannot be updated for existing listener {listener}")
        inter = self.inter_broker_listener()
        if inter not in new_advertised:
            raise ConfigError(key, f"Advertised listener must be specified for inter-broker listener {inter}")
        if new_advertised != old_advertised:  # KRaft: a broker's registered endpoints do not change
            raise ConfigError(key, "Advertised listeners cannot be altered when using a Raft-based metadata quorum.")

    def set_dynamic(self, broker_scope: bool, name: str, value: Any | None) -> None:
        layer = self.dynamic_broker if broker_scope else self.dynamic_default
        if value is None:
            layer.pop(name, None)
        else:
            layer[name] = value
