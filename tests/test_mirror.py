"""Mirror topics (issue 28, docs/mirror.md): the cluster-link records and the controller's rules,
the mirror partition's sans-IO rules, and kesque → kesque in-process: plain, idempotent and
transactional records (committed and aborted, several partitions) copied byte for byte at the
same offsets, read the same by read_committed readers, the mirror refusing producers, and the
tools. The Kafka 4.4 source and the fault cases are tests/test_mirror_faults.py (``make mirror``)."""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from contextlib import redirect_stdout

import pytest

from kesque.cli.dump_log import cluster_metadata_json
from kesque.cli.mirrors import describe, end_mirroring
from kesque.client.wire import Connection
from kesque.clock import SYSTEM_CLOCK
from kesque.config.broker import BrokerConfig
from kesque.controller.controller import Controller
from kesque.controller.controller import NewTopic as ControllerTopic
from kesque.coordinator.producer_id import ProducerIdManager
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata import records as mr
from kesque.metadata.image import MIRROR_ACTIVE, MIRROR_FAILED_OVER, MIRROR_PAUSED, Delta, MetadataImage
from kesque.metadata.log import MetadataLog
from kesque.metadata.snapshot import image_records
from kesque.mirror import links as link_rules
from kesque.mirror.partition import APPEND, BACKOFF, IDLE, OUT_OF_RANGE, REFRESH, MirrorPartitionState
from kesque.protocol.api import KESQUE_CLUSTER_LINKS
from kesque.records.records import build_batch
from kesque.server.apis.registry import served_versions
from kesque.server.drivers.mirror_fetcher import batches_from
from mirrorlib import produce_mixed, raw_batches, read_committed, thread_brokers, tool, wait_mirrored

# ------------------------------------------------------------------ records, image, controller


def _controller(tmp_path) -> Controller:
    image = MetadataImage()
    mlog = MetadataLog(str(tmp_path / "meta"), SYSTEM_CLOCK)
    c = Controller(BrokerConfig({}), image, mlog, SYSTEM_CLOCK, lambda d: None)
    c.bootstrap()
    c.register_broker(1, [{"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": 0}])
    return c


def test_records_round_trip_and_are_far_above_kafkas_ids():
    link_id, topic_id, source_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    recs = [
        {"type": "ClusterLinkRecord", "link_name": "L", "link_id": link_id, "configs": [{"name": "a", "value": "b"}]},
        {"type": "RemoveClusterLinkRecord", "link_id": link_id},
        {
            "type": "MirrorTopicRecord",
            "topic_id": topic_id,
            "link_id": link_id,
            "source_topic": "s",
            "source_topic_id": source_id,
            "state": MIRROR_PAUSED,
            "max_producer_id": 7,
        },
    ]
    for rec in recs:
        assert mr.decode(mr.encode(rec)) == rec
        assert mr.SCHEMAS[rec["type"]][0] >= 10000


def test_dump_log_prints_a_link_with_its_secrets_redacted():
    rec = {
        "type": "ClusterLinkRecord",
        "link_name": "L",
        "link_id": uuid.UUID(int=5),
        "configs": [
            {"name": "bootstrap.servers", "value": "src:9092"},
            {"name": "sasl.jaas.config", "value": "secret"},
            {"name": "ssl.key.password", "value": "secret"},
        ],
    }
    out = json.loads(cluster_metadata_json(mr.encode(rec)))
    assert out["type"] == "CLUSTER_LINK_RECORD"
    assert [c["value"] for c in out["data"]["configs"]] == ["src:9092", "[redacted]", "[redacted]"]
    assert "secret" not in json.dumps(out)


def test_links_and_mirrors_in_the_image_and_its_snapshot(tmp_path):
    c = _controller(tmp_path)
    link_id = c.create_cluster_link("L", {"bootstrap.servers": "src:9092", "sasl.jaas.config": "x"})
    source_id = uuid.uuid4()
    topic_id = c.create_mirror_topic("m", "L", "s", source_id, 3)
    image = c.image
    assert image.cluster_links["L"].link_id == link_id
    assert image.cluster_links["L"].configs["sasl.jaas.config"] == "x"
    m = image.mirror_of("m")
    assert (m.topic_id, m.link_id, m.source_topic, m.source_topic_id, m.state) == (
        topic_id,
        link_id,
        "s",
        source_id,
        MIRROR_ACTIVE,
    )
    assert len(image.topic("m").partitions) == 3
    # a snapshot rebuilds both
    copy = MetadataImage()
    for rec in image_records(image):
        copy.replay(mr.decode(mr.encode(rec)), Delta())
    assert copy.cluster_links == image.cluster_links
    assert copy.mirror_topics == image.mirror_topics
    # deleting the topic deletes its mirror state
    c.delete_topics(["m"], [None])
    assert image.mirror_topics == {}


def test_controller_rules(tmp_path):
    c = _controller(tmp_path)
    with pytest.raises(KafkaError, match="bootstrap.servers"):
        c.create_cluster_link("L", {})
    with pytest.raises(KafkaError, match="illegal"):
        c.create_cluster_link("bad name", {"bootstrap.servers": "s:1"})
    c.create_cluster_link("L", {"bootstrap.servers": "s:1"})
    with pytest.raises(KafkaError, match="already exists"):
        c.create_cluster_link("L", {"bootstrap.servers": "s:1"})
    with pytest.raises(KafkaError, match="does not exist"):
        c.create_mirror_topic("m", "nope", "s", uuid.uuid4(), 1)
    c.create_mirror_topic("m", "L", "s", uuid.uuid4(), 1)
    with pytest.raises(KafkaError) as e:
        c.create_mirror_topic("m", "L", "s", uuid.uuid4(), 1)
    assert e.value.code == ErrorCode.topic_already_exists
    # no delete while a topic mirrors over the link, as Confluent's
    with pytest.raises(KafkaError, match="active mirror topics: m"):
        c.delete_cluster_link("L")
    assert c.alter_mirror_topics("pause", ["m"]) == [None]
    assert c.image.mirror_of("m").state == MIRROR_PAUSED
    errors = c.alter_mirror_topics("resume", ["m", "plain", "gone"])
    assert errors[0] is None and c.image.mirror_of("m").state == MIRROR_ACTIVE
    c.create_topics([ControllerTopic("plain", 1, 1)])
    errors = c.alter_mirror_topics("pause", ["plain", "gone"])
    assert [e.code for e in errors] == [ErrorCode.invalid_request, ErrorCode.unknown_topic_or_partition]
    c.delete_topics(["m"], [None])
    c.delete_cluster_link("L")
    assert c.image.cluster_links == {}


def test_controller_failover(tmp_path):
    c = _controller(tmp_path)
    c.create_cluster_link("L", {"bootstrap.servers": "s:1"})
    c.create_mirror_topic("m", "L", "s", uuid.uuid4(), 2)
    t = c.image.topic("m")
    assert [p.leader_epoch for p in t.partitions.values()] == [0, 0]
    assert c.alter_mirror_topics("failover", ["m"], 4041, 3) == [None]
    m = c.image.mirror_of("m")
    assert (m.state, m.max_producer_id, m.mirroring) == (MIRROR_FAILED_OVER, 4041, False)
    # every leader epoch above the mirrored logs' (3), so the next batches' epochs grow
    assert [p.leader_epoch for p in t.partitions.values()] == [4, 4]
    assert c.image.next_producer_id == 4042
    start, _size = c.allocate_producer_ids(1, 0)
    assert start == 4042
    # no way back, and nothing left to pause
    errors = c.alter_mirror_topics("resume", ["m"])
    assert "FAILED_OVER: it cannot resume" in errors[0].message
    c.delete_cluster_link("L")  # no active mirror any more


def test_producer_id_floor():
    asked = []
    ids = ProducerIdManager(lambda: asked.append(1))
    ids.prefetch()
    ids.block_arrived(0, 1000)
    assert ids.generate() == 0
    ids.block_arrived(1000, 1000)  # the next block, ready
    ids.raise_floor(1500)  # the mirrored logs use ids up to 1499
    assert ids.generate() == 1500
    ids.raise_floor(10)  # lower: nothing changes
    assert ids.generate() == 1501


def test_link_configs():
    props = "# comment\nbootstrap.servers = a:1,b:2\n! other\nsasl.jaas.config=x \\\n  y\nempty\n"
    configs = link_rules.parse_properties(props)
    assert configs == {"bootstrap.servers": "a:1,b:2", "sasl.jaas.config": "x y", "empty": ""}
    assert link_rules.bootstrap_addresses(configs) == [("a", 1), ("b", 2)]
    assert link_rules.masked({"ssl.truststore.password": "p", "sasl.jaas.config": "j", "client.id": "c"}) == {
        "ssl.truststore.password": "[hidden]",
        "sasl.jaas.config": "[hidden]",
        "client.id": "c",
    }
    assert link_rules.check_link_configs({"bootstrap.servers": "a:1"}) is None
    assert "bootstrap.servers" in link_rules.check_link_configs({})
    assert "Invalid url" in link_rules.check_link_configs({"bootstrap.servers": "nohost"})
    assert link_rules.check_link_configs({"bootstrap.servers": "a:1", "security.protocol": "sasl_ssl"}) is None
    assert "security.protocol" in link_rules.check_link_configs({"bootstrap.servers": "a:1", "security.protocol": "X"})


def test_the_admin_api_is_not_advertised():
    assert KESQUE_CLUSTER_LINKS not in served_versions()


# ------------------------------------------------------------------ the partition's rules


def test_mirror_partition_state():
    st = MirrorPartitionState(now_ms=1000)
    assert st.on_response(0, 10, 0, True) == APPEND
    st.after_append(4, 1100)
    lag = st.lag(4, 1500)
    assert (lag.source_high_watermark, lag.lag, lag.time_lag_ms) == (10, 6, 500)  # caught up at creation
    assert st.on_response(0, 10, 0, False) == IDLE
    st.after_append(10, 1600)
    assert st.lag(10, 1700).lag == 0 and st.lag(10, 1700).time_lag_ms == 0
    assert st.on_response(int(ErrorCode.not_leader_or_follower), -1, -1, False) == REFRESH
    assert st.lag(10, 1800).error == "NOT_LEADER_OR_FOLLOWER"
    assert st.on_response(int(ErrorCode.unknown_server_error), -1, -1, False) == BACKOFF
    assert st.on_response(int(ErrorCode.offset_out_of_range), -1, -1, False) == OUT_OF_RANGE
    # retention at the source passed the mirror's position: the loss is counted, never silent
    assert st.on_out_of_range(10, 25, 40) == 25
    assert st.lost_records == 15 and "lost 15 records" in st.error
    # a new mirror starts at the source's log start: nothing lost
    fresh = MirrorPartitionState(now_ms=0)
    assert fresh.on_out_of_range(0, 7, 9) == 7 and fresh.lost_records == 0 and fresh.error is None
    # a source whose log ends below the mirror's (truncated): the mirror waits, never truncates
    assert st.on_out_of_range(30, 0, 20) is None
    assert "below the mirror's 30" in st.error
    st.on_response(0, 40, 25, False)
    assert st.error is None


def test_which_fetched_batches_are_appended():
    def batch(base: int, n: int) -> bytes:
        return build_batch([(None, b"v", [])] * n, base_offset=base)

    second = batch(20, 2)  # built once: a batch's timestamps (and so its CRC) are the clock's
    buf = memoryview(batch(10, 5) + second)  # offsets 15-19 compacted away
    got, restart = batches_from(buf, 10, False)
    assert bytes(got) == bytes(buf) and restart == -1
    got, restart = batches_from(buf, 15, False)  # the gap: the next batch, as it is
    assert bytes(got) == second and restart == -1
    got, restart = batches_from(buf, 12, True)  # an empty log restarted inside the first batch
    assert bytes(got) == bytes(buf) and restart == 10
    got, restart = batches_from(buf, 21, False)  # a log with records never takes a batch below its end
    assert got is None and restart == -1


# ------------------------------------------------------------------ kesque -> kesque


@pytest.fixture
def kesque_pair():
    with thread_brokers() as brokers:
        yield brokers


def test_kesque_to_kesque_byte_for_byte(kesque_pair, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    src, dst = kesque_pair
    n = 3
    admin = AdminClient({"bootstrap.servers": src.bootstrap_servers})
    admin.create_topics([NewTopic("orders", n, 1)])["orders"].result(15)
    produce_mixed(src.bootstrap_servers, "orders", n)
    props = tmp_path / "link.properties"
    props.write_text(
        f"bootstrap.servers={src.bootstrap_servers}\nsasl.jaas.config=top-secret\nmetadata.max.age.ms=300\n"
    )
    d = dst.bootstrap_servers
    assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config-file", str(props))[
        :2
    ] == (0, "Cluster link 'L' creation successfully completed.\n")
    code, out, _ = tool("cluster-links", "--bootstrap-server", d, "--describe", "--link", "L")
    assert code == 0 and "top-secret" not in out and "sasl.jaas.config=[hidden] sensitive=true" in out
    assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "orders", "--link", "L")[:2] == (
        0,
        "Created topic orders.\n",
    )
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "orders", n)
    for p in range(n):
        # every batch (plain, idempotent, transactional, the markers) equal at the same offset
        assert dst_b[p] == src_b[p], f"partition {p}"
        assert len(src_b[p]) >= 9
    # records written after the mirror was created come too
    produce_mixed(src.bootstrap_servers, "orders", n)
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "orders", n)
    assert dst_b == src_b
    # read_committed readers see the same records on both: no aborted record, whole transactions
    a, b = read_committed(src.bootstrap_servers, "orders", n), read_committed(d, "orders", n)
    assert a == b
    assert all(not v.startswith(b"txn-abort") for recs in b.values() for _o, v in recs)
    assert sum(v.startswith(b"txn-commit") for recs in b.values() for _o, v in recs) == 4 * n
    # the lag, from each partition's leader
    (m,) = describe(d, ["orders"])
    assert m["state"] == "ACTIVE" and m["source_topic"] == "orders"
    for p in m["partitions"]:
        assert p["lag"] == 0 and p["log_end_offset"] == src_b[p["partition"]][-1][0] + 1
    code, out, _ = tool("mirrors", "--bootstrap-server", d, "--describe", "--topics", "orders")
    assert code == 0 and "State: ACTIVE" in out and out.count("\tPartition: ") == n and "Lag: 0" in out
    # the broker's ApiVersions stays Kafka's: the kesque-only API is served, not advertised
    with Connection.to_any(d) as conn:
        assert KESQUE_CLUSTER_LINKS not in conn.versions and max(conn.versions) < 100
        # read-only to producers, with a clear error
    errors = []
    prod = Producer({"bootstrap.servers": d, "enable.idempotence": False, "retries": 0})
    prod.produce("orders", b"x", partition=0, on_delivery=lambda e, _m: errors.append(e))
    prod.flush(10)
    assert [e.code() for e in errors] == [ErrorCode.invalid_request]
    # pause: nothing more is copied; resume: copied again
    assert tool("mirrors", "--bootstrap-server", d, "--pause", "--topics", "orders")[:2] == (
        0,
        "Topic: orders\tResult: Paused\n",
    )
    assert "State: PAUSED" in tool("mirrors", "--bootstrap-server", d, "--describe")[1]
    time.sleep(0.3)
    before = {p: raw_batches(dst.data_dir, "orders", p) for p in range(n)}
    produce_mixed(src.bootstrap_servers, "orders", n)
    time.sleep(0.6)  # a fetcher would have copied them within a fetch wait (500 ms at most)
    assert {p: raw_batches(dst.data_dir, "orders", p) for p in range(n)} == before
    assert tool("mirrors", "--bootstrap-server", d, "--resume", "--topics", "orders")[0] == 0
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "orders", n)
    assert dst_b == src_b
    # partitions added at the source appear at the destination, and are mirrored
    admin.create_partitions([NewPartitions("orders", n + 1)])["orders"].result(15)
    produce_mixed(src.bootstrap_servers, "orders", n + 1)
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "orders", n + 1)
    assert dst_b == src_b and len(dst_b[n]) >= 9
    # a link with active mirrors is not deleted; promote and failover are refused for now
    code, _out, err = tool("cluster-links", "--bootstrap-server", d, "--delete", "--link", "L")
    assert code == 1 and "active mirror topics: orders" in err
    assert tool("mirrors", "--bootstrap-server", d, "--list")[1] == "orders\n"
    # promote waits for the mirror to catch up with no source transaction open: refused while one is
    # open (and the topic keeps mirroring), done once it is committed
    txn = Producer({"bootstrap.servers": src.bootstrap_servers, "transactional.id": "promo", "linger.ms": 0})
    txn.init_transactions(15)
    txn.begin_transaction()
    txn.produce("orders", b"promo", partition=0)
    assert txn.flush(15) == 0
    out = io.StringIO()
    with redirect_stdout(out):
        assert end_mirroring(d, "orders", "promote", timeout=1.5) == 1
    assert "has not caught up with its source" in out.getvalue()
    assert "State: ACTIVE" in tool("mirrors", "--bootstrap-server", d, "--describe")[1]
    txn.commit_transaction(15)
    assert tool("mirrors", "--bootstrap-server", d, "--promote", "--topics", "orders")[:2] == (
        0,
        "Topic: orders\tResult: Promoted\n",
    )
    src_b = {p: raw_batches(src.data_dir, "orders", p) for p in range(n + 1)}
    assert {p: raw_batches(dst.data_dir, "orders", p) for p in range(n + 1)} == src_b  # all of it, marker too
    assert "State: PROMOTED" in tool("mirrors", "--bootstrap-server", d, "--describe")[1]
    errors = []
    prod.produce("orders", b"mine", partition=0, on_delivery=lambda e, _m: errors.append(e))
    prod.flush(10)
    assert errors == [None]


def test_mirror_of_a_missing_source_topic_and_a_bad_link(kesque_pair, tmp_path):
    src, dst = kesque_pair
    d = dst.bootstrap_servers
    code, _o, err = tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config", "a=b")
    assert code == 1 and "bootstrap.servers" in err
    assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config",
                f"bootstrap.servers={src.bootstrap_servers}")[0] == 0  # fmt: skip
    code, _o, err = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "nope", "--link", "L")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _o, err = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "x", "--link", "M")
    assert code == 1 and "Cluster link 'M' does not exist." in err
    assert tool("cluster-links", "--bootstrap-server", d, "--list")[1].startswith("Link name: 'L', link ID: '")
    # a source whose log starts above 0 (DeleteRecords): the new mirror starts there, nothing lost
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": src.bootstrap_servers})
    admin.create_topics([NewTopic("trimmed", 1, 1)])["trimmed"].result(15)
    prod = Producer({"bootstrap.servers": src.bootstrap_servers, "linger.ms": 0})
    for i in range(5):
        prod.produce("trimmed", f"r{i}".encode(), partition=0)
        prod.flush(10)  # one batch each
    admin.delete_records([TopicPartition("trimmed", 0, 3)])[TopicPartition("trimmed", 0, 3)].result(15)
    assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "trimmed", "--link", "L")[0] == 0
    deadline = time.monotonic() + 15
    while len(raw_batches(dst.data_dir, "trimmed", 0)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert raw_batches(dst.data_dir, "trimmed", 0) == raw_batches(src.data_dir, "trimmed", 0)[3:]
    (m,) = describe(d, ["trimmed"])
    assert m["partitions"][0]["lost_records"] == 0 and m["partitions"][0]["lag"] == 0
    assert tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", "trimmed")[0] == 0
    assert tool("cluster-links", "--bootstrap-server", d, "--delete", "--link", "L")[0] == 0
    assert tool("cluster-links", "--bootstrap-server", d, "--list")[1] == ""


def test_failover_in_the_middle_of_an_open_transaction(kesque_pair):
    """The source's producer left a transaction open on every partition: after failover the
    destination's leaders abort it (its LSO moves on, read_committed readers never see it), the
    topic takes writes, a producer with the same transactional id commits there, and the
    destination hands out no producer id the mirrored logs use."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    src, dst = kesque_pair
    s, d, n = src.bootstrap_servers, dst.bootstrap_servers, 2
    admin = AdminClient({"bootstrap.servers": s})
    admin.create_topics([NewTopic("pay", n, 1)])["pay"].result(15)
    app = Producer({"bootstrap.servers": s, "transactional.id": "app", "linger.ms": 0})
    app.init_transactions(15)
    app.begin_transaction()
    for p in range(n):
        app.produce("pay", f"committed-{p}".encode(), partition=p)
    app.commit_transaction(15)
    app.begin_transaction()
    for p in range(n):
        app.produce("pay", f"open-{p}".encode(), partition=p)
    assert app.flush(15) == 0  # and never committed: the source goes away with it open
    assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config",
                f"bootstrap.servers={s}")[0] == 0  # fmt: skip
    assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "pay", "--link", "L")[0] == 0
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "pay", n)
    assert dst_b == src_b
    mirrored_pids = {struct.unpack_from(">q", b, 43)[0] for p in range(n) for _o, b in dst_b[p]}
    code, out, err = tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", "pay")
    assert (code, out) == (0, "Topic: pay\tResult: Failed over\n"), err
    assert "State: FAILED_OVER" in tool("mirrors", "--bootstrap-server", d, "--describe")[1]
    # writable now; the same transactional id commits at the destination
    again = Producer({"bootstrap.servers": d, "transactional.id": "app", "linger.ms": 0})
    again.init_transactions(15)
    again.begin_transaction()
    for p in range(n):
        again.produce("pay", f"after-{p}".encode(), partition=p)
    again.commit_transaction(15)
    got = read_committed(d, "pay", n)
    for p in range(n):
        # the open transaction was aborted at the destination: its records are never read, and the
        # LSO moved past it (the records after it are read)
        assert [v for _o, v in got[p]] == [f"committed-{p}".encode(), f"after-{p}".encode()]
    # the marker the destination wrote, and the new producer's id above every mirrored one
    batches = [b for p in range(n) for _o, b in raw_batches(dst.data_dir, "pay", p)[len(dst_b[p]) :]]
    new_pids = {struct.unpack_from(">q", b, 43)[0] for b in batches} - mirrored_pids
    assert new_pids and min(new_pids) > max(mirrored_pids)
