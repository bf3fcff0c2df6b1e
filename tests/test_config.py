"""kesque.config: Java .properties parsing, broker config precedence, unknown and ignored
keys, value validation, topic configs, and Kafka 4.0's names, types and defaults.
"""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig, ConfigError, LogConfig, parse_properties
from kesque.config.broker import (
    DEFAULT_CONFIG,
    DEFAULTS_DIFFERING_FROM_KAFKA,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_WITHOUT_EFFECT,
    SINGLE_NODE,
    STATIC_BROKER_CONFIG,
    Listener,
    is_dynamic,
)
from kesque.config.kafka_keys import KAFKA_BROKER_KEYS, REMOVED_IN_4_0
from kesque.config.topic import SYNONYM_SCALE, validate_topic_configs
from kesque.config.types import LONG_MAX, render

# ======================================================================== .properties


def test_parse_properties_java_rules():
    text = "\n".join(
        [
            "# a comment",
            "! another comment",
            "   # indented comment",
            "",
            "plain=value",
            "spaced  =   value with spaces   ",
            "colon: value",
            "colon.nospace:value",
            "whitespace.sep   value",
            "empty=",
            "bare",
            "listeners=PLAINTEXT://:9092,\\",
            "    CONTROLLER://:9093",
            "escaped=PLAINTEXT\\://localhost\\:9092",  # as java.util.Properties.store writes ':'
            "key\\=with\\:seps=v",
            "unicode=caf\\u00e9",
            "tab=a\\tb",
            "path=C:\\\\kafka\\\\data",  # an escaped backslash
            "even.backslashes=x\\\\",  # ends in an escaped backslash: no continuation
            "next=1",
            "equals=a=b=c",
            "dup=1",
            "dup=2",
            "log.dirs = /a , /b",
        ]
    )
    p = parse_properties(text)
    assert p == {
        "plain": "value",
        "spaced": "value with spaces",
        "colon": "value",
        "colon.nospace": "value",
        "whitespace.sep": "value",
        "empty": "",
        "bare": "",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "escaped": "PLAINTEXT://localhost:9092",
        "key=with:seps": "v",
        "unicode": "café",
        "tab": "a\tb",
        "path": "C:\\kafka\\data",
        "even.backslashes": "x\\",
        "next": "1",
        "equals": "a=b=c",
        "dup": "2",
        "log.dirs": "/a , /b",
    }


def test_continuation_lines_keep_going_and_ignore_comment_markers():
    assert parse_properties("a=1\\\n  # not a comment\\\n  2\nb=3") == {"a": "1# not a comment2", "b": "3"}
    assert parse_properties("last=1\\") == {"last": "1"}  # a dangling continuation at the end of the file


@settings(max_examples=examples(200))
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True),
        st.from_regex(r"[A-Za-z0-9/:,._=-]{0,20}", fullmatch=True).map(str.strip),
        max_size=8,
    )
)
def test_parse_properties_round_trip(props):
    # written the way java.util.Properties.store escapes '=' and ':'
    text = "\n".join(f"{k}={v.replace(':', chr(92) + ':').replace('=', chr(92) + '=')}" for k, v in props.items())
    assert parse_properties(text) == props


# ======================================================================== broker config


def test_defaults_and_static_values():
    c = BrokerConfig({"num.partitions": "3", "log.dirs": "/a,/b", "auto.create.topics.enable": "FALSE"})
    assert c.get("num.partitions") == 3 and c.source("num.partitions") == STATIC_BROKER_CONFIG
    assert c.log_dirs == ["/a", "/b"] and c.metadata_log_dir == "/a"
    assert c.get("auto.create.topics.enable") is False
    assert c.get("default.replication.factor") == 1 and c.source("default.replication.factor") == DEFAULT_CONFIG
    assert BrokerConfig({}).log_dirs == ["/tmp/kafka-logs"]
    assert c.get("no.such.key") is None


@pytest.mark.parametrize(
    "props,expected_ms",
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "2"}, 2 * 3_600_000),
        ({"log.retention.minutes": "5", "log.retention.hours": "2"}, 5 * 60_000),
        ({"log.retention.ms": "1234", "log.retention.minutes": "5", "log.retention.hours": "2"}, 1234),
        ({"log.retention.ms": "-1"}, -1),
    ],
)
def test_retention_precedence_ms_over_minutes_over_hours(props, expected_ms):
    c = BrokerConfig(props)
    value, source, synonyms = c.topic_default("retention.ms")
    assert value == expected_ms
    assert c.log_config().retention_ms == expected_ms
    assert source == (STATIC_BROKER_CONFIG if props else DEFAULT_CONFIG)
    # synonyms in Kafka's order: ms before minutes before hours, each with its source
    names = [n for n, _v, _s in synonyms]
    assert names == sorted(names, key=["log.retention.ms", "log.retention.minutes", "log.retention.hours"].index)


def test_roll_precedence():
    assert BrokerConfig({}).log_config().segment_ms == 168 * 3_600_000
    assert BrokerConfig({"log.roll.hours": "1"}).log_config().segment_ms == 3_600_000
    assert BrokerConfig({"log.roll.hours": "1", "log.roll.ms": "500"}).log_config().segment_ms == 500
    assert BrokerConfig({"log.roll.jitter.hours": "1"}).log_config().segment_jitter_ms == 3_600_000


def test_dynamic_layers():
    c = BrokerConfig({"log.retention.ms": "100"})
    assert c.topic_default("retention.ms")[:2] == (100, STATIC_BROKER_CONFIG)
    c.set_dynamic(False, "log.retention.ms", c.validate_dynamic("log.retention.ms", "200"))
    assert c.topic_default("retention.ms")[:2] == (200, DYNAMIC_DEFAULT_BROKER_CONFIG)
    c.set_dynamic(True, "log.retention.ms", c.validate_dynamic("log.retention.ms", "300"))
    assert c.topic_default("retention.ms")[:2] == (300, DYNAMIC_BROKER_CONFIG)
    assert c.get("log.retention.ms") == 300 and c.source("log.retention.ms") == DYNAMIC_BROKER_CONFIG
    assert [s for _n, _v, s in c.synonym_entries("log.retention.ms")] == [
        DYNAMIC_BROKER_CONFIG,
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        STATIC_BROKER_CONFIG,
    ]
    # a dynamic hours setting does not beat a static ms setting: ms wins at any level
    c.set_dynamic(True, "log.retention.hours", 5)
    assert c.topic_default("retention.ms")[0] == 300
    c.set_dynamic(True, "log.retention.ms", None)  # removing the per-broker value
    assert c.topic_default("retention.ms")[:2] == (200, DYNAMIC_DEFAULT_BROKER_CONFIG)
    with pytest.raises(ConfigError) as e:
        c.validate_dynamic("node.id", "4")
    assert e.value.name == "node.id" and "node.id" in str(e.value)


# Kafka's DynamicBrokerConfig.validateConfigs, checked against a Kafka 4.x build
@pytest.mark.parametrize(
    "name,value,per_broker,expected",
    [
        ("background.threads", "4", False, 4),  # Kafka's dynamic set, not used by kesque
        ("num.network.threads", "4", False, 4),
        ("log.cleaner.threads", "2", False, 2),
        ("sasl.enabled.mechanisms", "PLAIN", True, ["PLAIN"]),
        ("ssl.cipher.suites", "x", True, ["x"]),
        ("listener.name.external.ssl.keystore.location", "/ks", True, "/ks"),
        ("listener.name.external.max.connections", "2", False, 2),  # cluster-wide even per listener
        ("listener.name.external.plain.sasl.jaas.config", "x", True, "x"),
        ("leader.replication.throttled.rate", "10", False, 10),  # a dynamic-only quota key
        ("my.plugin.setting", "v", False, "v"),  # not Kafka's: a custom config, kept as given
        ("metrics.context.env", "prod", False, "prod"),  # under a Kafka prefix, but not a key Kafka defines
        ("log.retention.ms", "5", False, 5),
    ],
)
def test_kafkas_dynamic_broker_keys_are_accepted(name, value, per_broker, expected):
    assert BrokerConfig({}).validate_dynamic(name, value, per_broker) == expected


@pytest.mark.parametrize(
    "name,value,per_broker,message",
    [
        ("num.partitions", "3", True, "Cannot update these configs dynamically: [num.partitions]"),
        ("log.retention.hours", "3", True, "Cannot update these configs dynamically: [log.retention.hours]"),
        ("node.id", "4", True, "Cannot update these configs dynamically: [node.id]"),
        (
            "ssl.keystore.location",
            "/ks",
            True,
            "These security configs can be dynamically updated only per-listener "
            "using the listener prefix: [ssl.keystore.location]",
        ),
        (
            "listener.name.external.ssl.keystore.location",
            "/ks",
            False,
            "Cannot update these configs at default cluster "
            "level, broker id must be specified: [listener.name.external.ssl.keystore.location]",
        ),
        (
            "sasl.enabled.mechanisms",
            "PLAIN",
            False,
            "Cannot update these configs at default cluster level, broker id "
            "must be specified: [sasl.enabled.mechanisms]",
        ),
        (
            "background.threads",
            "abc",
            False,
            "Invalid value abc for configuration background.threads: Not a number of type INT",
        ),
        (
            "message.max.bytes",
            "-1",
            False,
            "Invalid value -1 for configuration message.max.bytes: Value must be at least 0",
        ),
        # listeners are dynamic, and must be valid now as at the next start
        (
            "listeners",
            "CLIENTS://:9093",
            True,
            "No security protocol defined for listener CLIENTS",
        ),
        ("listener.security.protocol.map", "PLAINTEXT:TLS", True, "TLS is not a security protocol"),
    ],
)
def test_dynamic_broker_keys_kafka_refuses(name, value, per_broker, message):
    c = BrokerConfig({})
    with pytest.raises(ConfigError) as e:
        c.validate_dynamic(name, value, per_broker)
    assert message in str(e.value) and name in str(e.value)
    assert c.dynamic_broker == {}  # a refused listener change leaves nothing behind


def test_dynamic_flags_are_kafkas():
    assert [n for n, k in BROKER_CONFIGS.items() if k.dynamic != is_dynamic(n)] == []
    assert all(is_dynamic(n) for n in DYNAMIC_WITHOUT_EFFECT)
    assert "unclean.leader.election.enable" not in DYNAMIC_WITHOUT_EFFECT  # the controller reads it


def test_unknown_key_warns_naming_it_and_is_ignored(caplog):
    # Kafka hands keys it does not know to plugins and goes on: a typo or a plugin's key is a
    # warning naming it, never a refused start
    with caplog.at_level(logging.WARNING, logger="kesque.config.broker"):
        c = BrokerConfig({"num.partitons": "3", "confluent.metrics.reporter.topic": "x"})
    assert c.get("num.partitions") == 1 and c.unused == ["num.partitons", "confluent.metrics.reporter.topic"]
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "The configuration 'num.partitons' was supplied but isn't a known config." in messages


def test_single_node_settings_are_those_of_config_server_properties():
    """`kesque serve` without a file runs SINGLE_NODE: config/server.properties must set the same."""
    with open(os.path.join(os.path.dirname(__file__), "..", "config", "server.properties")) as f:
        shipped = parse_properties(f.read())
    assert {k: shipped.get(k) for k in SINGLE_NODE} == SINGLE_NODE
    c = BrokerConfig(SINGLE_NODE)
    assert c.get("offsets.topic.replication.factor") == 1 and c.get("transaction.two.phase.commit.enable") is True


@pytest.mark.parametrize(
    "props,lone",
    [
        ({}, True),
        ({"controller.quorum.voters": "1@127.0.0.1:9093", "node.id": "1"}, True),
        (
            {
                "controller.quorum.bootstrap.servers": "localhost:9093",
                "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            },
            True,
        ),  # Kafka 4.x's config/server.properties
        ({"controller.quorum.voters": "1@h:9093,2@h:9094,3@h:9095", "node.id": "1"}, False),
        ({"controller.quorum.voters": "2@127.0.0.1:9093", "node.id": "1"}, False),
        ({"controller.quorum.bootstrap.servers": "10.0.0.1:9093"}, False),
        ({"process.roles": "broker"}, False),
    ],
)
def test_lone_node(props, lone):
    assert BrokerConfig(props, strict=False).lone_node is lone


@pytest.mark.parametrize(
    "key",
    [
        "num.network.threads",
        "zookeeper.connect",
        "ssl.keymanager.algorithm",  # a JVM's: OpenSSL has no key manager to choose
        "listener.name.internal.ssl.provider",
        "log.message.format.version",
        "metrics.context.env",
        "background.threads",
    ],
)
def test_kafka_keys_kesque_ignores_warn_naming_the_key(caplog, key):
    with caplog.at_level(logging.WARNING, logger="kesque.config.broker"):
        c = BrokerConfig({key: "x"})
    assert key in c.unused
    assert any(key in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize(
    "key,value",
    [
        ("num.partitions", "abc"),
        ("num.partitions", "0"),
        ("num.partitions", "2147483648"),
        ("log.retention.bytes", "1.5"),
        ("auto.create.topics.enable", "yes"),
        ("log.cleanup.policy", "shred"),
        ("compression.type", "GZIP"),
        ("compression.type", "brotli"),
        ("log.message.timestamp.type", "createtime"),
        ("log.segment.bytes", "1000"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.min.cleanable.ratio", "x"),
        ("listeners", "PLAINTEXT://:notaport"),
        ("advertised.listeners", "nonsense"),
        ("process.roles", "observer"),
        ("offsets.topic.replication.factor", "40000"),
        ("compression.gzip.level", "10"),
    ],
)
def test_invalid_values_name_the_key(key, value):
    with pytest.raises(ConfigError) as e:
        BrokerConfig({key: value})
    assert e.value.name == key and key in str(e.value)


def test_listeners():
    c = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,CONTROLLER://127.0.0.1:9093,EXTERNAL://[::1]:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,EXTERNAL:PLAINTEXT",
        }
    )
    assert [(ln.name, ln.host, ln.port) for ln in c.listeners()] == [
        ("PLAINTEXT", "", 9092),
        ("CONTROLLER", "127.0.0.1", 9093),
        ("EXTERNAL", "::1", 9094),
    ]
    assert [ln.name for ln in c.advertised_listeners()] == ["PLAINTEXT", "EXTERNAL"]  # not the controller's
    c = BrokerConfig({"advertised.listeners": "PLAINTEXT://broker:19092"})
    assert [(ln.host, ln.port) for ln in c.advertised_listeners()] == [("broker", 19092)]
    assert Listener.parse("plaintext://h:1").name == "PLAINTEXT"


def test_queued_max_request_bytes_must_hold_the_largest_request():
    # KafkaConfig: a bound (> 0) smaller than socket.request.max.bytes could never admit that request
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"queued.max.request.bytes": "1000"})
    assert e.value.name == "queued.max.request.bytes" and "socket.request.max.bytes" in str(e.value)
    assert BrokerConfig({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1000"})
    assert BrokerConfig({"queued.max.request.bytes": "-1"}).get("queued.max.request.bytes") == -1
    # the default is kesque's own, so a Kafka file with a larger socket.request.max.bytes still starts
    assert BrokerConfig({"socket.request.max.bytes": str(1 << 30)})


def test_node_id_falls_back_to_broker_id():
    assert BrokerConfig({"broker.id": "7"}).node_id == 7
    assert BrokerConfig({"broker.id": "7", "node.id": "3"}).node_id == 3


# ======================================================================== topic configs


def test_validate_topic_configs():
    out = validate_topic_configs(
        {
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "preallocate": "true",
        }
    )
    assert out == {
        "retention.ms": 1000,
        "cleanup.policy": ["compact", "delete"],
        "min.cleanable.dirty.ratio": 0.1,
        "preallocate": True,
    }
    for key, value in [
        ("retention.ms", "-2"),
        ("segment.bytes", "1"),
        ("segment.ms", "0"),
        ("message.timestamp.type", "Now"),
        ("max.message.bytes", "-1"),
        ("compression.type", "Snappy"),
        ("min.insync.replicas", "0"),
    ]:
        with pytest.raises(ConfigError) as e:
            validate_topic_configs({key: value})
        assert e.value.name == key and key in str(e.value)
    for bad in ({"retention.hours": "1"}, {"log.retention.ms": "1"}):
        with pytest.raises(ConfigError) as e:
            validate_topic_configs(bad)
        assert e.value.name in bad and e.value.name in str(e.value)
    with pytest.raises(ConfigError) as e:
        validate_topic_configs({"retention.ms": None})
    assert e.value.name == "retention.ms"
    with pytest.raises(ConfigError) as e:
        validate_topic_configs({"retention.bytes": "100", "local.retention.bytes": "200"})
    assert e.value.name == "local.retention.bytes"
    validate_topic_configs({"retention.bytes": "-1", "local.retention.bytes": "200"})


def test_log_config_from_broker_and_overrides():
    c = BrokerConfig(
        {
            "log.segment.bytes": "2000000",
            "log.cleanup.policy": "compact",
            "log.message.timestamp.type": "LogAppendTime",
            "message.max.bytes": "5000",
        }
    )
    lc = c.log_config()
    assert (lc.segment_bytes, lc.compact, lc.delete, lc.log_append_time, lc.max_message_bytes) == (
        2000000,
        True,
        False,
        True,
        5000,
    )
    lc = c.log_config(validate_topic_configs({"segment.bytes": "3000000", "cleanup.policy": "delete"}))
    assert (lc.segment_bytes, lc.compact, lc.delete) == (3000000, False, True)
    assert lc.flush_ms == LONG_MAX and lc.file_delete_delay_ms == 60000
    assert LogConfig().retention_ms == 604800000


# ======================================================================== Kafka 4.0 names, types, defaults


def _kafka_default(name: str):
    return KAFKA_BROKER_KEYS[name][1]


def test_every_broker_key_is_kafkas_with_kafkas_type_and_default():
    for name, key in BROKER_CONFIGS.items():
        if name in DEFAULTS_DIFFERING_FROM_KAFKA:
            continue
        assert name in KAFKA_BROKER_KEYS, f"{name} is not a Kafka broker config"
        assert name not in REMOVED_IN_4_0, name
        kafka_type, kafka_default = KAFKA_BROKER_KEYS[name]
        assert key.type == kafka_type, name
        assert render(key.default) == kafka_default, name


def test_the_documented_differences_are_real_and_few():
    assert set(DEFAULTS_DIFFERING_FROM_KAFKA) == {
        "node.id",
        "process.roles",
        "controller.listener.names",
        "listener.security.protocol.map",
        "cluster.id",
        "metrics.listener",
        "console.listener",
        "queued.max.request.bytes",
    }
    for name in DEFAULTS_DIFFERING_FROM_KAFKA:
        assert name in BROKER_CONFIGS
        if name in KAFKA_BROKER_KEYS:
            assert BROKER_CONFIGS[name].type == KAFKA_BROKER_KEYS[name][0], name
            assert render(BROKER_CONFIGS[name].default) != _kafka_default(name), name
        else:
            assert name in ("cluster.id", "metrics.listener", "console.listener")


def test_kafka_4_defaults_that_changed():
    assert _kafka_default("log.message.timestamp.after.max.ms") == "3600000"  # KIP-1030
    assert BROKER_CONFIGS["log.message.timestamp.after.max.ms"].default == 3_600_000
    assert TOPIC_CONFIGS["message.timestamp.after.max.ms"].default == 3_600_000


def test_every_topic_key_synonym_is_kafkas_and_defaults_agree():
    for name, key in TOPIC_CONFIGS.items():
        for syn in key.synonyms:
            assert syn in KAFKA_BROKER_KEYS and syn in BROKER_CONFIGS, (name, syn)
        with_default = [s for s in key.synonyms if _kafka_default(s) is not None]
        if not with_default:
            continue
        syn = with_default[0]  # Kafka: the first synonym that has a value supplies the default
        expected = _kafka_default(syn)
        if syn in SYNONYM_SCALE:
            expected = str(int(expected) * SYNONYM_SCALE[syn])
        assert render(key.default) == expected, name
        if syn not in SYNONYM_SCALE:
            assert key.type == KAFKA_BROKER_KEYS[syn][0], name
    # flush.ms: log.flush.interval.ms has no default; the topic default is Long.MAX_VALUE
    assert TOPIC_CONFIGS["flush.ms"].default == LONG_MAX
    assert BrokerConfig({}).log_config().flush_ms == LONG_MAX


def test_broker_defaults_give_the_topic_defaults():
    c = BrokerConfig({})
    for name, key in TOPIC_CONFIGS.items():
        assert c.topic_default(name)[0] == key.default, name


def test_file_delete_delay_is_a_topic_key_only():
    # the broker key is log.segment.delete.delay.ms; file.delete.delay.ms is not a broker config
    assert "file.delete.delay.ms" not in KAFKA_BROKER_KEYS
    c = BrokerConfig({"file.delete.delay.ms": "1"})  # not a known config: ignored
    assert c.unused == ["file.delete.delay.ms"] and c.log_config().file_delete_delay_ms == 60000
    assert BrokerConfig({"log.segment.delete.delay.ms": "5"}).log_config().file_delete_delay_ms == 5


# replication quotas (KIP-73): the throttled replica lists and the rates, with Kafka 4.4's messages

_LIST_MESSAGE = (
    "Invalid value [{}] for configuration {key}: {key} must be the literal '*' or a list of replicas in "
    "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


@pytest.mark.parametrize("key", ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"])
@pytest.mark.parametrize(
    "value,shown",
    [
        ("abc", "abc"),
        ("0:1,x", "0:1, x"),
        ("*,0:1", "*, 0:1"),
        ("0 : 1", "0 : 1"),
        ("*,*", "*, *"),
        ("0:1,,x", "0:1, , x"),
        ("-1:2", "-1:2"),
        ("0:1:2", "0:1:2"),
        ("0:1 ,x", "0:1, x"),
    ],
)
def test_invalid_throttled_replica_lists_are_refused_as_kafka_refuses_them(key, value, shown):
    with pytest.raises(ConfigError) as e:
        validate_topic_configs({key: value})
    assert str(e.value) == _LIST_MESSAGE.format(shown, key=key) and e.value.name == key


@pytest.mark.parametrize("value", [" * ", "0:1, 1:2", "", "0:1,", ",0:1", ", *", "*"])
def test_valid_throttled_replica_lists_kafka_accepts(value):
    validate_topic_configs({"leader.replication.throttled.replicas": value})


@pytest.mark.parametrize(
    "value,message",
    [
        ("abc", "Invalid value abc for configuration leader.replication.throttled.rate: Not a number of type LONG"),
        ("-5", "Invalid value -5 for configuration leader.replication.throttled.rate: Value must be at least 0"),
    ],
)
def test_invalid_rates_are_refused_as_kafka_refuses_them(value, message):
    with pytest.raises(ConfigError) as e:
        BrokerConfig({}).validate_dynamic("leader.replication.throttled.rate", value)
    assert str(e.value) == message
    assert BrokerConfig({}).validate_dynamic("follower.replication.throttled.rate", "0", per_broker=False) == 0
