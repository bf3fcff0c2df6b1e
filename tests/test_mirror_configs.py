"""Topic config sync over a cluster link (issue 28, docs/mirror.md "Topic configs"): a mirror
topic takes the synced configs of its source topic every ``topic.config.sync.ms``, they are
read-only at the destination while it mirrors, and after a failover the topic's configs are its
own again. In-process, a kesque source and destination."""

from __future__ import annotations

import time
import uuid

import pytest

from kesque.clock import SYSTEM_CLOCK
from kesque.config.broker import BrokerConfig
from kesque.controller.controller import OP_SET, Controller
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata.image import RESOURCE_TOPIC, MetadataImage
from kesque.metadata.log import MetadataLog
from kesque.mirror import links as link_rules
from kesque.testing.broker import Broker
from mirrorlib import thread_brokers, tool


def test_which_configs_change():
    mirror = {"retention.ms": "5", "segment.bytes": "1048576", "cleanup.policy": "compact"}
    source = {"retention.ms": "7", "max.message.bytes": "2048", "segment.bytes": "99"}
    # set where they differ, removed where the source has no override; never an unsynced key
    assert link_rules.config_changes(source, mirror) == {
        "retention.ms": "7",
        "max.message.bytes": "2048",
        "cleanup.policy": None,
    }
    applied = {k: v for k, v in {**mirror, **link_rules.config_changes(source, mirror)}.items() if v is not None}
    assert link_rules.config_changes(source, applied) == {}
    assert link_rules.config_changes({"retention.ms": "7"}, {"retention.ms": "7"}) == {}
    assert "topic.config.sync.ms" in link_rules.check_link_configs(
        {"bootstrap.servers": "a:1", "topic.config.sync.ms": "0"}
    )


def test_the_controllers_rules(tmp_path):
    c = Controller(
        BrokerConfig({}), MetadataImage(), MetadataLog(str(tmp_path), SYSTEM_CLOCK), SYSTEM_CLOCK, lambda d: None
    )
    c.bootstrap()
    c.register_broker(1, [{"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": 0}])
    link_id = c.create_cluster_link("L", {"bootstrap.servers": "s:1", "sasl.mechanism": "PLAIN"})
    c.create_mirror_topic("m", "L", "s", uuid.uuid4(), 1)
    # a link's configs altered in place: same id, keys set and removed
    c.alter_cluster_link("L", {"bootstrap.servers": "t:2", "sasl.mechanism": None, "client.id": "x"})
    assert c.image.cluster_links["L"].link_id == link_id
    assert c.image.cluster_links["L"].configs == {"bootstrap.servers": "t:2", "client.id": "x"}
    with pytest.raises(KafkaError, match="bootstrap.servers"):
        c.alter_cluster_link("L", {"bootstrap.servers": None})
    # the sync writes what differs, synced keys only
    assert c.sync_mirror_configs("m", {"retention.ms": "5000", "cleanup.policy": None}) == ["retention.ms"]
    assert c.sync_mirror_configs("m", {"retention.ms": "5000"}) == []
    with pytest.raises(KafkaError, match="segment.bytes is not synced"):
        c.sync_mirror_configs("m", {"segment.bytes": "1048576"})
    # read-only to AlterConfigs / IncrementalAlterConfigs while mirroring; the others are the mirror's own
    with pytest.raises(KafkaError) as e:
        c.incremental_alter_configs(RESOURCE_TOPIC, "m", [("retention.ms", OP_SET, "1")], False)
    assert e.value.code == ErrorCode.invalid_request and "retention.ms of mirror topic m" in e.value.message
    c.incremental_alter_configs(RESOURCE_TOPIC, "m", [("segment.bytes", OP_SET, "1048576")], False)
    c.alter_configs(RESOURCE_TOPIC, "m", {"retention.ms": "5000", "segment.bytes": "2097152"}, False)
    with pytest.raises(KafkaError, match="retention.ms of mirror topic m"):
        c.alter_configs(RESOURCE_TOPIC, "m", {"segment.bytes": "2097152"}, False)  # would drop retention.ms
    # after a failover: no sync, and the configs are the topic's own
    assert c.alter_mirror_topics("failover", ["m"], -1, 0) == [None]
    with pytest.raises(KafkaError, match="not an active mirror topic"):
        c.sync_mirror_configs("m", {"retention.ms": "1"})
    c.incremental_alter_configs(RESOURCE_TOPIC, "m", [("retention.ms", OP_SET, "1")], False)
    assert c.image.topic_configs("m")["retention.ms"] == "1"


def _configs(admin, topic: str) -> dict[str, str]:
    """The topic's own overrides (DescribeConfigs, as kafka-configs --describe lists them)."""
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource("topic", topic)
    entries = admin.describe_configs([res])[res].result(15)
    return {k: e.value for k, e in entries.items() if e.source == 1}  # DYNAMIC_TOPIC_CONFIG


def _alter(admin, topic: str, **changes) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    ops = [
        ConfigEntry(
            k.replace("_", "."),
            v,
            incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET,
        )
        for k, v in changes.items()
    ]
    res = ConfigResource("topic", topic, incremental_configs=ops)
    admin.incremental_alter_configs([res])[res].result(15)


def _wait(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_a_mirror_takes_its_source_topics_configs_and_keeps_them_read_only():
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    with thread_brokers() as (src, dst):
        s_admin = AdminClient({"bootstrap.servers": src.bootstrap_servers})
        d_admin = AdminClient({"bootstrap.servers": dst.bootstrap_servers})
        d = dst.bootstrap_servers
        new = NewTopic("conf", 1, 1, config={"retention.ms": "3600000", "segment.bytes": "2000000"})
        s_admin.create_topics([new])["conf"].result(15)
        link = f"bootstrap.servers={src.bootstrap_servers},topic.config.sync.ms=200"
        assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config", link)[0] == 0
        assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "conf", "--link", "L")[0] == 0
        # the synced ones only (segment.bytes is the destination's own)
        assert _wait(lambda: _configs(d_admin, "conf") == {"retention.ms": "3600000"}), _configs(d_admin, "conf")
        # a change at the source comes within the interval; an override removed there goes here too
        t0 = time.monotonic()
        _alter(s_admin, "conf", retention_ms="7200000", cleanup_policy="compact", max_message_bytes="65536")
        want = {"retention.ms": "7200000", "cleanup.policy": "compact", "max.message.bytes": "65536"}
        assert _wait(lambda: _configs(d_admin, "conf") == want), _configs(d_admin, "conf")
        print(f"source config change seen at the destination after {time.monotonic() - t0:.2f} s (sync every 0.2 s)")
        _alter(s_admin, "conf", cleanup_policy=None)
        want.pop("cleanup.policy")
        assert _wait(lambda: _configs(d_admin, "conf") == want), _configs(d_admin, "conf")
        # read-only at the destination while it mirrors; the other configs are the mirror's own
        with pytest.raises(KafkaException) as e:
            _alter(d_admin, "conf", retention_ms="1")
        err = e.value.args[0]
        assert err.code() == 42 and "retention.ms of mirror topic conf" in err.str()  # INVALID_REQUEST
        _alter(d_admin, "conf", segment_bytes="3000000")
        assert _configs(d_admin, "conf")["segment.bytes"] == "3000000"
        # after a failover the configs are the topic's own: nothing comes from the source any more
        assert tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", "conf")[0] == 0
        _alter(s_admin, "conf", retention_ms="60000")
        time.sleep(0.8)
        assert _configs(d_admin, "conf")["retention.ms"] == "7200000"
        _alter(d_admin, "conf", retention_ms="1000")
        assert _configs(d_admin, "conf")["retention.ms"] == "1000"


@pytest.mark.mirror
def test_configs_synced_into_a_destination_with_a_separate_controller():
    """Brokers that are not controllers: each sync goes to the active controller over the
    controller listener (KesqueClusterLinks' SYNC_CONFIGS), and a refused alter comes back
    through the forwarding of IncrementalAlterConfigs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from kesque.testing.cluster import Cluster

    src = Broker(mode="thread").start()
    try:
        with Cluster(nodes=3, controllers=1) as dst:
            d = dst.bootstrap_servers
            s_admin = AdminClient({"bootstrap.servers": src.bootstrap_servers})
            d_admin = AdminClient({"bootstrap.servers": d})
            s_admin.create_topics([NewTopic("wide", 3, 1, config={"retention.ms": "3600000"})])["wide"].result(15)
            link = f"bootstrap.servers={src.bootstrap_servers},topic.config.sync.ms=300"
            assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config", link)[0] == 0
            assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "wide", "--link", "L",
                        "--replication-factor", "3")[0] == 0  # fmt: skip
            assert _wait(lambda: _configs(d_admin, "wide") == {"retention.ms": "3600000"}, 30), _configs(
                d_admin, "wide"
            )
            _alter(s_admin, "wide", retention_bytes="1048576000")
            want = {"retention.ms": "3600000", "retention.bytes": "1048576000"}
            assert _wait(lambda: _configs(d_admin, "wide") == want, 30), _configs(d_admin, "wide")
            with pytest.raises(KafkaException, match="retention.bytes of mirror topic wide"):
                _alter(d_admin, "wide", retention_bytes="1")
    finally:
        src.stop()
