"""Dynamic configs against a real broker.

* BROKER resources take Kafka's whole dynamic set (``background.threads``, the per-listener
  ``ssl.*`` and ``sasl.*`` keys, ...) with DynamicBrokerConfig's refusals and error codes,
  store and describe them, and the broker logs once the ones kesque does not act on.
* GROUP resources (type 32): DescribeConfigs, IncrementalAlterConfigs and AlterConfigs with
  Kafka 4.0's keys, sources and errors, the metadata log keeping them across a restart,
  ``kafka-configs.sh --group``, and the KIP-848 coordinator using a group's session timeout
  and heartbeat interval.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode as E

from kesque.protocol.api_keys import ApiKeys
from kesque.testing.broker import Broker
from test_groups_bad_input import cg_describe, cg_heartbeat, find_coordinator
from test_tools import err, kesque, out
from wire import Api, Msg, WireClient

GROUP, BROKER = 32, 4
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5
# bounds low enough for a member to expire in seconds; the broker's own session timeout stays long
BROKER_CONFIG = {
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "60000",
}


@pytest.fixture(scope="module")
def gb(tmp_path_factory):
    with Broker(data_dir=str(tmp_path_factory.mktemp("kesque-group-configs") / "data"), config=BROKER_CONFIG) as b:
        find_coordinator(b.bootstrap_servers, "warm-up")
        yield b


@pytest.fixture
def group():
    return "g-" + uuid.uuid4().hex[:10]


def describe(bs: str, group: str, keys=None, rtype: int = GROUP):
    m = Msg(ApiKeys.DESCRIBE_CONFIGS, 4)
    with WireClient(bs) as c:
        r = c.request(
            ApiKeys.DESCRIBE_CONFIGS,
            4,
            m(
                resources=(
                    m("DescribeConfigsResource", resource_type=rtype, resource_name=group, configuration_keys=keys),
                ),
                include_synonyms=True,
                include_documentation=False,
            ),
        )
    return r.results[0]


def alter(bs: str, group: str, ops: dict, incremental: bool = True, validate_only: bool = False, rtype: int = GROUP):
    """ops: name -> value (SET) or None (DELETE)."""
    api = 44 if incremental else 33
    version = 1 if incremental else 2
    m = Msg(api, version)
    if incremental:
        configs = tuple(
            m("AlterableConfig", name=k, config_operation=0 if v is not None else 1, value=v) for k, v in ops.items()
        )
    else:
        configs = tuple(m("AlterableConfig", name=k, value=v) for k, v in ops.items())
    with WireClient(bs) as c:
        r = c.request(
            api,
            version,
            m(
                resources=(m("AlterConfigsResource", resource_type=rtype, resource_name=group, configs=configs),),
                validate_only=validate_only,
            ),
        )
    return r.responses[0]


def entries(result) -> dict:
    assert result.error_code == E.none, result
    return {
        c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms]) for c in result.configs
    }


# ============================================================================ BROKER


def test_kafkas_dynamic_broker_set_is_stored_and_described(gb):
    bs = gb.bootstrap_servers
    assert alter(bs, "", {"background.threads": "12", "log.cleaner.threads": "2"}, rtype=BROKER).error_code == 0
    assert (
        alter(
            bs,
            "1",
            {"listener.name.plaintext.ssl.keystore.password": "secret", "sasl.enabled.mechanisms": "PLAIN"},
            rtype=BROKER,
        ).error_code
        == E.none
    )
    try:
        got = {c.name: c for c in describe(bs, "1", rtype=BROKER).configs}
        bt = got["background.threads"]
        assert (bt.value, bt.config_source, bt.read_only, bt.config_type) == ("12", 3, False, 3)  # INT
        assert [(s.name, s.value, s.source) for s in bt.synonyms] == [("background.threads", "12", 3)]
        pw = got["listener.name.plaintext.ssl.keystore.password"]
        assert (pw.value, pw.is_sensitive, pw.config_source) == (None, True, 2)
        assert [s.value for s in pw.synonyms] == [None]  # never shown, at any level
        assert got["sasl.enabled.mechanisms"].value == "PLAIN"
        assert got["num.partitions"].read_only and not got["log.retention.ms"].read_only
        defaults = {c.name: c.value for c in describe(bs, "", rtype=BROKER).configs}
        assert defaults == {"background.threads": "12", "log.cleaner.threads": "2"}
    finally:
        alter(bs, "", {"background.threads": None, "log.cleaner.threads": None}, rtype=BROKER)
        alter(
            bs,
            "1",
            {"listener.name.plaintext.ssl.keystore.password": None, "sasl.enabled.mechanisms": None},
            rtype=BROKER,
        )
    log = open(gb.log_path).read()
    assert (
        log.count(
            "Dynamic broker config(s) background.threads, log.cleaner.threads stored, but kesque does not "
            "act on them (yet)"
        )
        == 1
    ), log


@pytest.mark.parametrize(
    "name,ops,message",
    [
        ("1", {"num.partitions": "3"}, "Cannot update these configs dynamically: [num.partitions]"),
        (
            "1",
            {"ssl.keystore.location": "/ks"},
            "These security configs can be dynamically updated only per-listener "
            "using the listener prefix: [ssl.keystore.location]",
        ),
        (
            "",
            {"sasl.enabled.mechanisms": "PLAIN"},
            "Cannot update these configs at default cluster level, broker id "
            "must be specified: [sasl.enabled.mechanisms]",
        ),
        (
            "",
            {"background.threads": "many"},
            "Invalid value many for configuration background.threads: Not a number of type INT",
        ),
        (
            "1",
            {"listeners": "SSL://127.0.0.1:9999"},
            # Kafka 4.4's answer on a combined node (checked against it: KafkaConfig's requirement
            # comes before DynamicListenerConfig's checks)
            "requirement failed: controller.listener.names must contain at least one value appearing in "
            "the 'listeners' configuration when running the KRaft controller role",
        ),
        (
            "1",
            {"leader.replication.throttled.rate": "-5"},
            "Invalid value -5 for configuration leader.replication.throttled.rate: Value must be at least 0",
        ),
        (
            "",
            {"follower.replication.throttled.rate": "fast"},
            "Invalid value fast for configuration follower.replication.throttled.rate: Not a number of type LONG",
        ),
    ],
)
def test_dynamic_broker_changes_kafka_refuses(gb, name, ops, message):
    for incremental in (True, False):
        r = alter(gb.bootstrap_servers, name, ops, incremental=incremental, rtype=BROKER)
        assert r.error_code == E.invalid_request and message in r.error_message, r


# ============================================================================ TOPIC: throttled replica lists

_THROTTLED = (
    "Invalid value [{}] for configuration {key}: {key} must be the literal '*' or a list of replicas in "
    "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


def test_invalid_throttled_replica_lists_are_refused_with_kafkas_message(gb):
    """Kafka 4.4 answers INVALID_CONFIG with ThrottledReplicaListValidator's message, at
    CreateTopics and at (Incremental)AlterConfigs; kesque used to store any value."""
    bs = gb.bootstrap_servers
    key = "leader.replication.throttled.replicas"
    m = Msg(ApiKeys.CREATE_TOPICS, 7)
    topic = "thr-" + uuid.uuid4().hex[:8]
    with WireClient(bs) as c:
        for value, shown in (("0:1,x", "0:1, x"), ("*,0:1", "*, 0:1")):
            r = c.request(
                ApiKeys.CREATE_TOPICS,
                7,
                m(
                    topics=(
                        m(
                            "CreatableTopic",
                            name=topic,
                            num_partitions=1,
                            replication_factor=1,
                            assignments=(),
                            configs=(m("CreatableTopicConfig", name=key, value=value),),
                        ),
                    ),
                    timeout=10000,
                    validate_only=False,
                ),
            )
            t = r.topics[0]
            assert (t.error_code, t.error_message) == (E.invalid_config, _THROTTLED.format(shown, key=key))
        r = c.request(
            ApiKeys.CREATE_TOPICS,
            7,
            m(
                topics=(
                    m(
                        "CreatableTopic",
                        name=topic,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(m("CreatableTopicConfig", name=key, value="0:1, 0:2"),),
                    ),
                ),
                timeout=10000,
                validate_only=False,
            ),
        )
        assert r.topics[0].error_code == E.none
    follower = "follower.replication.throttled.replicas"
    for incremental in (True, False):
        r = alter(bs, topic, {follower: "abc"}, incremental=incremental, rtype=2)
        assert (r.error_code, r.error_message) == (E.invalid_config, _THROTTLED.format("abc", key=follower))
    assert alter(bs, topic, {follower: "*"}, rtype=2).error_code == E.none
    assert alter(bs, topic, {key: ""}, rtype=2).error_code == E.none  # Kafka's tool sets an empty list
    got = entries(describe(bs, topic, keys=[key, follower], rtype=2))
    assert got[key][:2] == ("", 1) and got[follower][:2] == ("*", 1)  # DYNAMIC_TOPIC_CONFIG


# ============================================================================ GROUP


def test_describe_shows_every_group_key_with_the_brokers_value_as_default(gb, group):
    got = entries(describe(gb.bootstrap_servers, group))
    assert sorted(got) == [
        "consumer.heartbeat.interval.ms",
        "consumer.session.timeout.ms",
        "share.auto.offset.reset",
        "share.heartbeat.interval.ms",
        "share.isolation.level",
        "share.record.lock.duration.ms",
        "share.session.timeout.ms",
    ]
    # the broker's group.consumer.session.timeout.ms, not Kafka's 45000
    assert got["consumer.session.timeout.ms"] == (
        "60000",
        DEFAULT_CONFIG,
        [("consumer.session.timeout.ms", "60000", DEFAULT_CONFIG)],
    )
    assert got["share.auto.offset.reset"][:2] == ("latest", DEFAULT_CONFIG)
    r = describe(gb.bootstrap_servers, group, keys=("consumer.heartbeat.interval.ms",))
    assert list(entries(r)) == ["consumer.heartbeat.interval.ms"]
    r = describe(gb.bootstrap_servers, "")
    assert (r.error_code, r.error_message) == (E.invalid_request, "Group name must not be empty")


def test_incremental_alter_sets_and_deletes_group_keys(gb, group):
    bs = gb.bootstrap_servers
    r = alter(bs, group, {"consumer.session.timeout.ms": "20000", "share.auto.offset.reset": "earliest"})
    assert r.error_code == E.none, r
    got = entries(describe(bs, group))
    assert got["consumer.session.timeout.ms"] == (
        "20000",
        GROUP_CONFIG,
        [("consumer.session.timeout.ms", "20000", GROUP_CONFIG)],
    )
    assert got["share.auto.offset.reset"][:2] == ("earliest", GROUP_CONFIG)
    assert alter(bs, group, {"share.auto.offset.reset": None}).error_code == E.none
    assert entries(describe(bs, group))["share.auto.offset.reset"][:2] == ("latest", DEFAULT_CONFIG)
    # legacy AlterConfigs replaces the group's whole set
    assert alter(bs, group, {"consumer.heartbeat.interval.ms": "600"}, incremental=False).error_code == E.none
    got = entries(describe(bs, group))
    assert got["consumer.heartbeat.interval.ms"][:2] == ("600", GROUP_CONFIG)
    assert got["consumer.session.timeout.ms"][:2] == ("60000", DEFAULT_CONFIG)


@pytest.mark.parametrize(
    "ops,code,message",
    [
        ({"no.such.key": "1"}, E.invalid_config, "Unknown group config name: no.such.key"),
        (
            {"consumer.session.timeout.ms": "abc"},
            E.invalid_config,
            "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            {"consumer.session.timeout.ms": "999"},
            E.invalid_config,
            "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms",
        ),
        (
            {"consumer.session.timeout.ms": "60001"},
            E.invalid_config,
            "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms",
        ),
        (
            {"consumer.heartbeat.interval.ms": "499"},
            E.invalid_config,
            "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"consumer.session.timeout.ms": "1000", "consumer.heartbeat.interval.ms": "1000"},
            E.invalid_config,
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
        ),
        (
            {"share.auto.offset.reset": "none"},
            E.invalid_config,
            "Invalid value none for configuration share.auto.offset.reset: String must be one of: latest, earliest",
        ),
    ],
)
def test_invalid_group_configs_are_refused(gb, group, ops, code, message):
    for incremental in (True, False):
        r = alter(gb.bootstrap_servers, group, ops, incremental=incremental)
        assert (r.error_code, r.error_message) == (code, message)
    assert all(src == DEFAULT_CONFIG for _v, src, _s in entries(describe(gb.bootstrap_servers, group)).values())


def test_default_group_resource_and_validate_only(gb, group):
    r = alter(gb.bootstrap_servers, "", {"consumer.session.timeout.ms": "20000"})
    assert (r.error_code, r.error_message) == (E.invalid_request, "Default group resources are not allowed.")
    r = alter(gb.bootstrap_servers, group, {"consumer.session.timeout.ms": "20000"}, validate_only=True)
    assert r.error_code == E.none
    assert entries(describe(gb.bootstrap_servers, group))["consumer.session.timeout.ms"][1] == DEFAULT_CONFIG


def test_group_configs_survive_a_restart(tmp_path, group):
    with Broker(data_dir=str(tmp_path), config=BROKER_CONFIG) as b:
        assert alter(b.bootstrap_servers, group, {"consumer.session.timeout.ms": "30000"}).error_code == E.none
        b.restart()
        assert entries(describe(b.bootstrap_servers, group))["consumer.session.timeout.ms"][:2] == (
            "30000",
            GROUP_CONFIG,
        )


def test_kafka_configs_group_entity(gb, group):
    bs = gb.bootstrap_servers
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--group",
        group,
        "--alter",
        "--add-config",
        "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=5000",
    )
    assert (r.returncode, out(r)) == (0, f"Completed updating config for group {group}.\n"), err(r)
    r = kesque("configs", "--bootstrap-server", bs, "--entity-type", "groups", "--entity-name", group, "--describe")
    assert out(r) == (
        f"Dynamic configs for group {group} are:\n"
        "  consumer.heartbeat.interval.ms=5000 sensitive=false "
        "synonyms={GROUP_CONFIG:consumer.heartbeat.interval.ms=5000}\n"
        "  consumer.session.timeout.ms=50000 sensitive=false "
        "synonyms={GROUP_CONFIG:consumer.session.timeout.ms=50000}\n"
    )
    r = kesque("configs", "--bootstrap-server", bs, "--group", group, "--describe", "--all")
    lines = out(r).splitlines()
    assert lines[0] == f"All configs for group {group} are:" and len(lines) == 8
    assert (
        "  share.session.timeout.ms=45000 sensitive=false synonyms={DEFAULT_CONFIG:share.session.timeout.ms=45000}"
        in lines
    )
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--group",
        group,
        "--alter",
        "--delete-config",
        "consumer.heartbeat.interval.ms",
    )
    assert r.returncode == 0, err(r)
    r = kesque(
        "configs",
        "--bootstrap-server",
        bs,
        "--group",
        group,
        "--alter",
        "--add-config",
        "consumer.session.timeout.ms=5",
    )
    assert r.returncode == 1
    assert "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms" in err(
        r
    )
    r = kesque("configs", "--bootstrap-server", bs, "--group", group, "--describe")
    assert out(r).splitlines()[1:] == [
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={GROUP_CONFIG:consumer.session.timeout.ms=50000}"
    ]


def test_the_consumer_coordinator_uses_the_groups_timeouts(gb, group):
    bs = gb.bootstrap_servers
    topic = "t-" + uuid.uuid4().hex[:10]
    with WireClient(bs) as c:
        Api(c).create_topic(topic, 1)
    assert (
        alter(bs, group, {"consumer.session.timeout.ms": "1500", "consumer.heartbeat.interval.ms": "700"}).error_code
        == E.none
    )
    with WireClient(bs) as c:  # one node: it coordinates every group
        r = cg_heartbeat(
            c,
            group,
            uuid.uuid4().hex[:22],
            0,
            subscribed_topic_names=(topic,),
            rebalance_timeout=30000,
            topic_partitions={},
        )
        assert r.error_code == E.none and r.heartbeat_interval == timedelta(milliseconds=700)  # not the broker's
        other = cg_heartbeat(
            c,
            group + "-other",
            uuid.uuid4().hex[:22],
            0,
            subscribed_topic_names=(topic,),
            rebalance_timeout=30000,
            topic_partitions={},
        )
        assert other.heartbeat_interval == timedelta(milliseconds=5000)
    # the member stops heartbeating: it is gone after the group's 1.5 s, long before the broker's 60 s
    deadline = time.monotonic() + 30
    while cg_describe(bs, group).members:
        assert time.monotonic() < deadline, "the member outlived the group's session timeout"
        time.sleep(0.2)
    assert len(cg_describe(bs, group + "-other").members) == 1
    # kafka-configs.sh --entity-type groups without a name goes over the consumer groups there are
    r = kesque("configs", "--bootstrap-server", bs, "--entity-type", "groups", "--describe")
    assert r.returncode == 0, err(r)
    assert (
        f"Dynamic configs for group {group} are:\n"
        "  consumer.heartbeat.interval.ms=700 sensitive=false "
        "synonyms={GROUP_CONFIG:consumer.heartbeat.interval.ms=700}\n"
    ) in out(r)


KIP848_MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]], on_assign=lambda _c, parts: print("assigned", len(parts), flush=True))
while True:
    c.poll(0.1)
"""


def test_a_crashed_kip848_client_expires_on_the_groups_session_timeout(gb, group, tmp_path):
    """confluent-kafka with group.protocol=consumer, SIGKILLed: the coordinator drops it after
    the group's consumer.session.timeout.ms (2 s), not the broker's (60 s)."""
    bs = gb.bootstrap_servers
    topic = "t-" + uuid.uuid4().hex[:10]
    with WireClient(bs) as c:
        Api(c).create_topic(topic, 2)
    assert (
        alter(bs, group, {"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "500"}).error_code
        == E.none
    )
    script = tmp_path / "member.py"
    script.write_text(KIP848_MEMBER)
    proc = subprocess.Popen([sys.executable, str(script), bs, group, topic], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.readline().startswith("assigned"), "the KIP-848 member got no assignment"
        assert len(cg_describe(bs, group).members) == 1
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while cg_describe(bs, group).members:
        assert time.monotonic() < deadline, "the crashed member outlived the group's session timeout"
        time.sleep(0.2)
