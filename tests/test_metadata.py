"""Metadata records, the image, the metadata log and the controller.

Records are checked three ways: encode/decode round trips for every type (hypothesis),
byte-for-byte against an encoder driven by Kafka's own schema JSONs (frame version 1,
api key, version, flexible fields, tagged fields), and decoding of other versions Kafka
writes. The controller runs against a real MetadataLog in a temp dir; every outcome is
checked again after the log is reopened and replayed.
"""

from __future__ import annotations

import json
import re
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kesque.clock import ManualClock
from kesque.config.broker import BrokerConfig
from kesque.controller.controller import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, Controller, NewTopic
from kesque.errors import ErrorCode, KafkaError
from kesque.metadata import records as mr
from kesque.metadata.image import RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC, Delta, MetadataImage
from kesque.metadata.log import MetadataLog
from kesque.protocol.primitives import ProtocolError, uvarint
from kesque.storage.checkpoint import uuid_to_kafka
from kesque.testing import kafka

SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow])
# Kafka's KRaft record schemas, from the kafka-metadata jar resolved by `make kafka`
KAFKA_SCHEMAS = kafka.jar_resources("kafka-metadata", "common/metadata")

# ======================================================================== a Kafka-schema encoder

_INTS = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "int64": ">q", "float64": ">d"}
_NAME_OVERRIDES = {"EndPoints": "endpoints"}


def _snake(name: str) -> str:
    return _NAME_OVERRIDES.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _in(spec: str | None, version: int) -> bool:
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


def _default(field) -> object:
    d = field.get("default")
    t = field["type"]
    if t.startswith("[]"):
        return None if d == "null" else []
    if t in _INTS:
        return int(d) if d is not None else 0
    if t == "bool":
        return d == "true"
    if t == "string":
        return None if d == "null" else d if d is not None else ""
    if t == "bytes":
        return b""
    if t == "uuid":
        return uuid.UUID(int=0)
    raise AssertionError(t)


def _kafka_value(field, value, version) -> bytes:
    t = field["type"]
    if t.startswith("[]"):
        if value is None:
            return b"\x00"
        out = [uvarint(len(value) + 1)]
        inner = t[2:]
        for item in value:
            if inner == "int32":
                out.append(struct.pack(">i", item))
            elif inner == "uuid":
                out.append(item.bytes)
            elif inner == "string":
                out.append(uvarint(len(item.encode()) + 1) + item.encode())
            else:
                out.append(_kafka_struct(field["fields"], item, version))
        return b"".join(out)
    if t in _INTS:
        return struct.pack(_INTS[t], value)
    if t == "bool":
        return b"\x01" if value else b"\x00"
    if t == "uuid":
        return value.bytes
    if t == "bytes":
        return uvarint(len(value) + 1) + value
    if t == "string":
        if value is None:
            return b"\x00"
        raw = value.encode()
        return uvarint(len(raw) + 1) + raw
    raise AssertionError(t)


def _kafka_struct(fields, rec: dict, version: int) -> bytes:
    out = []
    tagged = []
    for f in fields:
        if not _in(f["versions"], version):
            continue
        name = _snake(f["name"])
        value = rec.get(name, _default(f))
        if _in(f.get("taggedVersions"), version):
            if value != _default(f):
                tagged.append((int(f["tag"]), _kafka_value(f, value, version)))
        else:
            out.append(_kafka_value(f, value, version))
    out.append(uvarint(len(tagged)))
    for tag, data in sorted(tagged):
        out += [uvarint(tag), uvarint(len(data)), data]
    return b"".join(out)


def kafka_schema(name: str) -> dict:
    return json.loads(re.sub(r"//.*", "", KAFKA_SCHEMAS[f"{name}.json"]))


def kafka_encode(rec: dict, version: int | None = None) -> bytes:
    """What Kafka's MetadataRecordSerde writes: frame version 1, api key, version, message."""
    schema = kafka_schema(rec["type"])
    if version is None:
        version = mr.SCHEMAS[rec["type"]][1]
    return uvarint(1) + uvarint(schema["apiKey"]) + uvarint(version) + _kafka_struct(schema["fields"], rec, version)


needs_schemas = pytest.mark.skipif(KAFKA_SCHEMAS is None, reason=kafka.jars_missing() or "")

# ======================================================================== record strategies

I8, I16, U16 = st.integers(-128, 127), st.integers(-(2**15), 2**15 - 1), st.integers(0, 2**16 - 1)
I32, I64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)
INT_LISTS = st.lists(I32, max_size=5)


def _value_strategy(typ):
    if isinstance(typ, list):
        return st.lists(_struct_strategy(typ), max_size=3)
    return {
        "int8": I8,
        "int16": I16,
        "uint16": U16,
        "int32": I32,
        "int64": I64,
        "float64": st.floats(allow_nan=False),
        "bool": st.booleans(),
        "uuid": st.uuids(),
        "string": TEXT,
        "nstring": st.one_of(st.none(), TEXT),
        "[int32]": INT_LISTS,
        "[int32]?": st.one_of(st.none(), INT_LISTS),
        "[uuid]": st.lists(st.uuids(), max_size=3),
        "[string]": st.lists(TEXT, max_size=3),
        "bytes": st.binary(max_size=8),
    }[typ]


def _struct_strategy(fields):
    return st.fixed_dictionaries({name: _value_strategy(typ) for name, typ, _tag, _d in fields})


def record_strategy(name: str):
    return _struct_strategy(mr.SCHEMAS[name][2]).map(lambda d: {**d, "type": name})


ALL_RECORDS = st.one_of(*[record_strategy(n) for n in mr.SCHEMAS])
# the record types Kafka has (kesque's own, for mirror topics, are from KESQUE_RECORDS_BASE on)
KAFKA_TYPES = sorted(n for n, (key, _v, _f) in mr.SCHEMAS.items() if key < mr.KESQUE_RECORDS_BASE)
KAFKA_RECORDS = st.one_of(*[record_strategy(n) for n in KAFKA_TYPES])


@SETTINGS
@given(ALL_RECORDS)
def test_every_record_type_round_trips(rec):
    assert mr.decode(mr.encode(rec)) == rec


@needs_schemas
@SETTINGS
@given(KAFKA_RECORDS)
def test_every_record_type_matches_kafkas_schema_byte_for_byte(rec):
    assert mr.encode(rec) == kafka_encode(rec)


# versions other writers (Kafka 4.4's controllers) use, which kesque reads (dump-log, a snapshot)
OTHER_VERSIONS = [("RegisterBrokerRecord", v) for v in (0, 2, 3, 4)] + [
    ("PartitionRecord", 1),
    ("PartitionRecord", 2),
    ("PartitionChangeRecord", 1),
    ("PartitionChangeRecord", 2),
    ("BrokerRegistrationChangeRecord", 0),
    ("BrokerRegistrationChangeRecord", 2),
    ("BrokerRegistrationChangeRecord", 3),
]


@needs_schemas
@pytest.mark.parametrize("name,version", OTHER_VERSIONS)
@SETTINGS
@given(data=st.data())
def test_records_at_other_versions_decode_as_kafka_wrote_them(name, version, data):
    fields = mr.fields_for(name, version)
    kafkas = [_snake(f["name"]) for f in kafka_schema(name)["fields"] if _in(f["versions"], version)]
    assert [f[0] for f in fields] == kafkas  # every field of that version, in Kafka's order
    rec = {**data.draw(_struct_strategy(fields)), "type": name}
    assert mr.decode(kafka_encode(rec, version)) == rec


@needs_schemas
@pytest.mark.parametrize("name", KAFKA_TYPES)
def test_api_keys_and_versions_match_kafka(name):
    schema = kafka_schema(name)
    key, version, fields = mr.SCHEMAS[name]
    assert schema["apiKey"] == key and schema["type"] == "metadata"
    assert _in(schema["validVersions"], version) and _in(schema["flexibleVersions"], version)
    ours = {f[0]: f for f in fields}
    for f in schema["fields"]:
        if not _in(f["versions"], version):
            continue
        mine = ours.pop(_snake(f["name"]))
        tag = int(f["tag"]) if _in(f.get("taggedVersions"), version) else None
        assert mine[2] == tag, f["name"]
        if tag is not None or f["type"] in _INTS:  # a tagged field's default decides whether it is written
            assert mine[3] == _default(f), f["name"]
    assert not ours, f"fields Kafka's {name} v{version} does not have: {sorted(ours)}"


def test_known_layouts():
    tid = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    # TopicRecord v0: frame 1, key 2, version 0, compact string "a", uuid, no tags
    assert (
        mr.encode({"type": "TopicRecord", "name": "a", "topic_id": tid})
        == b"\x01\x02\x00" + b"\x02a" + tid.bytes + b"\x00"
    )
    # PartitionChangeRecord: only the fields that changed are written, as tags
    rec = {"type": "PartitionChangeRecord", "partition_id": 3, "topic_id": tid, "leader": 2}
    assert mr.encode(rec) == b"\x01\x05\x00" + struct.pack(">i", 3) + tid.bytes + b"\x01" + b"\x01\x04" + struct.pack(
        ">i", 2
    )
    # ConfigRecord deleting a key: null value
    assert (
        mr.encode({"type": "ConfigRecord", "resource_type": 2, "resource_name": "t", "name": "k", "value": None})
        == b"\x01\x04\x00" + b"\x02" + b"\x02t" + b"\x02k" + b"\x00" + b"\x00"
    )
    assert mr.encode({"type": "NoOpRecord"}) == b"\x01\x14\x00\x00"


@needs_schemas
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_register_broker_record_of_every_version_decodes(version):
    rec = {
        "type": "RegisterBrokerRecord",
        "broker_id": 4,
        "is_migrating_zk_broker": True,
        "incarnation_id": uuid.UUID(int=7),
        "broker_epoch": 99,
        "endpoints": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 25}],
        "rack": "r1",
        "fenced": False,
        "in_controlled_shutdown": True,
        "log_dirs": [uuid.UUID(int=9)],
    }
    got = mr.decode(kafka_encode(rec, version))
    assert (got["broker_id"], got["broker_epoch"], got["rack"], got["fenced"]) == (4, 99, "r1", False)
    assert got["endpoints"][0]["port"] == 9092 and got["incarnation_id"] == uuid.UUID(int=7)
    assert got.get("in_controlled_shutdown", False) == (version >= 1)


@needs_schemas
@pytest.mark.parametrize("version", [0, 1, 2])
def test_partition_records_of_every_version_decode(version):
    tid = uuid.UUID(int=5)
    rec = {
        "type": "PartitionRecord",
        "partition_id": 1,
        "topic_id": tid,
        "replicas": [1, 2],
        "isr": [1],
        "removing_replicas": [],
        "adding_replicas": [2],
        "leader": 1,
        "leader_recovery_state": 1,
        "leader_epoch": 3,
        "partition_epoch": 4,
        "directories": [uuid.UUID(int=1), uuid.UUID(int=2)],
        "eligible_leader_replicas": [2],
        "last_known_elr": [3],
    }
    got = mr.decode(kafka_encode(rec, version))
    assert (got["replicas"], got["isr"], got["leader"], got["leader_epoch"], got["partition_epoch"]) == (
        [1, 2],
        [1],
        1,
        3,
        4,
    )
    assert got["leader_recovery_state"] == 1
    change = {
        "type": "PartitionChangeRecord",
        "partition_id": 1,
        "topic_id": tid,
        "isr": [1, 2],
        "leader": 2,
        "directories": [uuid.UUID(int=3)],
        "eligible_leader_replicas": [1],
        "last_known_elr": [2],
    }
    got = mr.decode(kafka_encode(change, version))  # newer tags are skipped
    assert (got["isr"], got["leader"], got["replicas"]) == ([1, 2], 2, None)


def test_decode_unknown_and_bad_input():
    assert mr.decode(b"\x01\x63\x00\x00") == {"type": "UnknownRecord99", "version": 0}
    good = mr.encode({"type": "TopicRecord", "name": "topic", "topic_id": uuid.UUID(int=1)})
    for cut in range(len(good)):
        with pytest.raises(ProtocolError):
            mr.decode(good[:cut])
    with pytest.raises(ProtocolError):
        mr.decode(b"\x00" + good[1:])  # frame version 0


# ======================================================================== image

TID, TID2 = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def replay_all(image: MetadataImage, recs: list[dict]) -> Delta:
    delta = Delta()
    for r in recs:
        image.replay(mr.decode(mr.encode(r)), delta)
    return delta


def _broker(i, fenced=False):
    return {
        "type": "RegisterBrokerRecord",
        "broker_id": i,
        "incarnation_id": uuid.UUID(int=i),
        "broker_epoch": 10 + i,
        "endpoints": [{"name": "PLAINTEXT", "host": "localhost", "port": 9090 + i, "security_protocol": 0}],
        "features": [],
        "rack": None,
        "fenced": fenced,
        "in_controlled_shutdown": False,
    }


def _partition(tid, p, replicas, leader=None):
    return {
        "type": "PartitionRecord",
        "partition_id": p,
        "topic_id": tid,
        "replicas": replicas,
        "isr": replicas,
        "removing_replicas": [],
        "adding_replicas": [],
        "leader": replicas[0] if leader is None else leader,
        "leader_recovery_state": 0,
        "leader_epoch": 0,
        "partition_epoch": 0,
    }


def test_image_replay():
    image = MetadataImage()
    d = replay_all(
        image,
        [
            _broker(1),
            _broker(2),
            _broker(3, fenced=True),
            {"type": "TopicRecord", "name": "orders", "topic_id": TID},
            {
                "type": "ConfigRecord",
                "resource_type": RESOURCE_TOPIC,
                "resource_name": "orders",
                "name": "retention.ms",
                "value": "1000",
            },
            _partition(TID, 0, [1, 2]),
            _partition(TID, 1, [2, 1]),
            {"type": "TopicRecord", "name": "other", "topic_id": TID2},
            _partition(TID2, 0, [1]),
            {"type": "FeatureLevelRecord", "name": "metadata.version", "feature_level": 25},
            {"type": "ProducerIdsRecord", "broker_id": 1, "broker_epoch": 11, "next_producer_id": 2000},
        ],
    )
    assert d.created_topics == {TID, TID2} and d.changed_brokers == {1, 2, 3}
    assert d.changed_partitions == {(TID, 0), (TID, 1), (TID2, 0)}
    assert [b.id for b in image.live_brokers()] == [1, 2]
    assert image.topic("orders").topic_id == TID and set(image.topic("orders").partitions) == {0, 1}
    assert image.topic_configs("orders") == {"retention.ms": "1000"}
    assert image.features == {"metadata.version": 25} and image.next_producer_id == 2000

    # leader change: the leader epoch and the partition epoch move; an ISR change moves only the latter
    d = replay_all(
        image,
        [
            {"type": "PartitionChangeRecord", "partition_id": 0, "topic_id": TID, "leader": 2},
            {"type": "PartitionChangeRecord", "partition_id": 0, "topic_id": TID, "isr": [2]},
        ],
    )
    p = image.topic("orders").partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr, p.replicas) == (2, 1, 2, [2], [1, 2])
    assert d.changed_partitions == {(TID, 0)}

    # brokers: fence, unfence, registration change, unregister
    replay_all(
        image,
        [{"type": "FenceBrokerRecord", "id": 1, "epoch": 11}, {"type": "UnfenceBrokerRecord", "id": 3, "epoch": 13}],
    )
    assert [b.id for b in image.live_brokers()] == [2, 3]
    replay_all(
        image,
        [
            {"type": "BrokerRegistrationChangeRecord", "broker_id": 1, "broker_epoch": 11, "fenced": -1},
            {
                "type": "BrokerRegistrationChangeRecord",
                "broker_id": 2,
                "broker_epoch": 12,
                "fenced": 1,
                "in_controlled_shutdown": 1,
            },
            {"type": "UnregisterBrokerRecord", "broker_id": 3, "broker_epoch": 13},
        ],
    )
    assert [b.id for b in image.live_brokers()] == [1] and image.brokers[2].in_controlled_shutdown
    assert 3 not in image.brokers

    # configs: delete a key with a null value; removing the topic drops it, its partitions and configs
    d = replay_all(
        image,
        [
            {
                "type": "ConfigRecord",
                "resource_type": RESOURCE_TOPIC,
                "resource_name": "orders",
                "name": "retention.ms",
                "value": None,
            }
        ],
    )
    assert image.topic_configs("orders") == {} and d.changed_configs == {(RESOURCE_TOPIC, "orders")}
    replay_all(
        image,
        [
            {
                "type": "ConfigRecord",
                "resource_type": RESOURCE_TOPIC,
                "resource_name": "orders",
                "name": "cleanup.policy",
                "value": "compact",
            }
        ],
    )
    d = replay_all(image, [{"type": "RemoveTopicRecord", "topic_id": TID}])
    assert TID in d.deleted_topics and image.topic("orders") is None and TID not in image.topics_by_id
    assert image.topic_configs("orders") == {}
    assert image.topic("other") is not None
    # records for unknown topics/partitions are ignored
    replay_all(
        image,
        [
            _partition(TID, 5, [1]),
            {"type": "PartitionChangeRecord", "partition_id": 9, "topic_id": TID2, "leader": 1},
            {"type": "NoOpRecord"},
        ],
    )
    assert set(image.topic("other").partitions) == {0}


def test_delta_merge():
    a, b = Delta(created_topics={TID}), Delta(changed_brokers={1})
    assert not Delta()
    a.merge(b)
    assert a.created_topics == {TID} and a.changed_brokers == {1} and a


# ======================================================================== metadata log


def test_metadata_log_persists_and_replays(tmp_path):
    clock = ManualClock()
    mlog = MetadataLog(str(tmp_path), clock)
    image = MetadataImage()
    mlog.replay_all(image)
    batches = [
        [_broker(1)],
        [{"type": "TopicRecord", "name": "a", "topic_id": TID}, _partition(TID, 0, [1])],
        [
            {
                "type": "ConfigRecord",
                "resource_type": RESOURCE_TOPIC,
                "resource_name": "a",
                "name": "retention.ms",
                "value": "5",
            }
        ],
    ]
    last = None
    for recs in batches:
        last = mlog.append(recs)
        clock.advance(10)
    assert last == 3
    assert (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").exists()
    mlog.close()
    for expected, clean in ((3, True), (4, False)):
        mlog = MetadataLog(str(tmp_path), clock, had_clean_shutdown=clean)
        image = MetadataImage()
        mlog.replay_all(image)
        assert image.offset == expected and [b.id for b in image.live_brokers()] == [1]
        assert image.topic("a").partitions[0].replicas == [1]
        assert image.topic_configs("a") == {"retention.ms": "5"}
        assert mlog.append([{"type": "NoOpRecord"}]) == expected + 1
        mlog.close()


# ======================================================================== controller


class Cluster:
    """A controller over a real metadata log, and a way to restart it."""

    def __init__(self, path, brokers=(1,), **config):
        self.path = str(path)
        self.clock = ManualClock()
        self.config = BrokerConfig({k.replace("_", "."): str(v) for k, v in config.items()})
        self.published: list[Delta] = []
        self._open()
        if not self.image.brokers:
            self.controller.bootstrap()
            for b in brokers:
                self.controller.register_broker(
                    b, [{"name": "PLAINTEXT", "host": "localhost", "port": 9092 + b, "security_protocol": 0}]
                )

    def _open(self):
        self.mlog = MetadataLog(self.path, self.clock)
        self.image = MetadataImage()
        self.mlog.replay_all(self.image)
        self.controller = Controller(self.config, self.image, self.mlog, self.clock, self.published.append)

    def restart(self):
        self.mlog.close()
        self._open()
        return self

    def close(self):
        self.mlog.close()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, brokers=(1, 2, 3))
    yield c
    c.close()


def err(result) -> int:
    e = result.error if hasattr(result, "error") else result
    return int(e.code) if e is not None else 0


def code(fn, *a, **kw) -> int:
    try:
        fn(*a, **kw)
    except KafkaError as e:
        return int(e.code)
    return 0


def test_create_topics(cluster):
    c = cluster.controller
    res = c.create_topics(
        [NewTopic("orders", 3, 2, configs={"retention.ms": "1000", "cleanup.policy": "compact"}), NewTopic("defaults")]
    )
    assert [err(r) for r in res] == [0, 0]
    assert (res[0].num_partitions, res[0].replication_factor) == (3, 2)
    assert (res[1].num_partitions, res[1].replication_factor) == (1, 1)  # num.partitions, default.replication.factor
    assert not uuid_to_kafka(res[0].topic_id).startswith("-") and res[0].topic_id.int > 1
    t = cluster.image.topic("orders")
    assert t.topic_id == res[0].topic_id and len(t.partitions) == 3
    for p in t.partitions.values():
        assert len(set(p.replicas)) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    leaders = [p.leader for p in t.partitions.values()]
    assert len(set(leaders)) == 3  # striped over the brokers
    assert cluster.image.topic_configs("orders") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert cluster.published and res[0].topic_id in cluster.published[-1].created_topics
    # validate_only: the answer without the topic
    res = c.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
    assert err(res[0]) == 0 and res[0].num_partitions == 2 and cluster.image.topic("dry") is None
    # everything survives a restart (replayed from the log)
    image = cluster.restart().image
    assert image.topic("orders").topic_id == t.topic_id
    assert {i: p.replicas for i, p in image.topic("orders").partitions.items()} == {
        i: p.replicas for i, p in t.partitions.items()
    }
    assert image.topic_configs("orders") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert image.topic("dry") is None


@pytest.mark.parametrize(
    "topic,expected",
    [
        (NewTopic("x", 0, 1), ErrorCode.invalid_partitions),
        (NewTopic("x", -5, 1), ErrorCode.invalid_partitions),
        (NewTopic("x", 1, 0), ErrorCode.invalid_replication_factor),
        (NewTopic("x", 1, -3), ErrorCode.invalid_replication_factor),
        (NewTopic("x", 1, 4), ErrorCode.invalid_replication_factor),  # three brokers
        (NewTopic("x", assignments={0: [1], 2: [2]}), ErrorCode.invalid_replica_assignment),  # not consecutive
        (NewTopic("x", assignments={1: [1]}), ErrorCode.invalid_replica_assignment),  # not 0-based
        (NewTopic("x", assignments={0: [1, 9]}), ErrorCode.invalid_replica_assignment),  # unknown broker
        (NewTopic("x", assignments={0: [1, 1]}), ErrorCode.invalid_replica_assignment),  # twice
        (NewTopic("x", assignments={0: []}), ErrorCode.invalid_replica_assignment),  # empty
        (NewTopic("x", assignments={0: [1, 2], 1: [3]}), ErrorCode.invalid_replica_assignment),  # two RFs
        (NewTopic("x", 2, -1, assignments={0: [1]}), ErrorCode.invalid_request),
        (NewTopic("x", configs={"no.such.config": "1"}), ErrorCode.invalid_config),
        (NewTopic("x", configs={"retention.ms": "soon"}), ErrorCode.invalid_config),
        (NewTopic("x", configs={"cleanup.policy": "shred"}), ErrorCode.invalid_config),
        (NewTopic("x", configs={"compression.type": "GZIP"}), ErrorCode.invalid_config),  # case matters (ValidString)
        (NewTopic("x", configs={"retention.ms": None}), ErrorCode.invalid_config),  # null values are refused
        (NewTopic("x", 0, 1, configs={"retention.ms": "x"}), ErrorCode.invalid_config),  # configs are checked first
        (NewTopic(""), ErrorCode.invalid_topic_exception),
        (NewTopic("."), ErrorCode.invalid_topic_exception),
        (NewTopic(".."), ErrorCode.invalid_topic_exception),
        (NewTopic("a" * 250), ErrorCode.invalid_topic_exception),
        (NewTopic("bad/name"), ErrorCode.invalid_topic_exception),
        (NewTopic("bad name"), ErrorCode.invalid_topic_exception),
        (NewTopic("é"), ErrorCode.invalid_topic_exception),
        (NewTopic("__cluster_metadata"), ErrorCode.invalid_request),
    ],
)
def test_create_topic_errors(cluster, topic, expected):
    res = cluster.controller.create_topics([topic])
    assert err(res[0]) == expected
    assert cluster.image.topic(topic.name) is None


def test_create_topic_conflicts(cluster):
    c = cluster.controller
    assert err(c.create_topics([NewTopic("a.b")])[0]) == 0
    assert err(c.create_topics([NewTopic("a.b")])[0]) == ErrorCode.topic_already_exists
    assert err(c.create_topics([NewTopic("a_b")])[0]) == ErrorCode.invalid_topic_exception  # collides with a.b
    ok = "x" * 249
    assert err(c.create_topics([NewTopic(ok)])[0]) == 0
    # a name given twice in one request: refused for both, created for neither (ControllerApis)
    res = c.create_topics([NewTopic("dup"), NewTopic("fine"), NewTopic("dup")])
    assert [err(r) for r in res] == [ErrorCode.invalid_request, 0, ErrorCode.invalid_request]
    assert cluster.image.topic("dup") is None and cluster.image.topic("fine") is not None


def test_manual_assignment(cluster):
    c = cluster.controller
    res = c.create_topics([NewTopic("m", assignments={0: [3, 1], 1: [2, 3]})])
    assert err(res[0]) == 0 and (res[0].num_partitions, res[0].replication_factor) == (2, 2)
    parts = cluster.image.topic("m").partitions
    assert (parts[0].replicas, parts[0].leader, parts[1].replicas) == ([3, 1], 3, [2, 3])


def test_manual_assignment_with_fenced_brokers(cluster):
    c = cluster.controller
    c.commit([{"type": "FenceBrokerRecord", "id": 3, "epoch": 0}])
    # a fenced broker may be a replica (Kafka checks registration), it is just not in the ISR
    assert err(c.create_topics([NewTopic("f", assignments={0: [3, 1]})])[0]) == 0
    p = cluster.image.topic("f").partitions[0]
    assert (p.replicas, p.isr, p.leader) == ([3, 1], [1], 1)
    assert err(c.create_topics([NewTopic("g", assignments={0: [3]})])[0]) == ErrorCode.invalid_replica_assignment
    assert err(c.create_topics([NewTopic("h", 1, 3)])[0]) == ErrorCode.invalid_replication_factor


def test_delete_topics(cluster):
    c = cluster.controller
    ids = {r.name: r.topic_id for r in c.create_topics([NewTopic("a"), NewTopic("b"), NewTopic("c")])}
    c.alter_configs(RESOURCE_TOPIC, "a", {"retention.ms": "5"}, False)
    out = c.delete_topics(["a", None, "missing", None], [None, ids["b"], None, uuid.UUID(int=77)])
    assert [(n, i, err(e)) for n, i, e in out] == [
        ("a", ids["a"], 0),
        ("b", ids["b"], 0),
        ("missing", None, ErrorCode.unknown_topic_or_partition),
        (None, uuid.UUID(int=77), ErrorCode.unknown_topic_id),
    ]
    assert cluster.image.topic("a") is None and cluster.image.topic("b") is None
    assert cluster.image.topic_configs("a") == {}
    assert {ids["a"], ids["b"]} <= set(cluster.published[-1].deleted_topics)
    # duplicates are refused, nothing deleted
    out = c.delete_topics(["c", "c"], [None, None])
    assert [err(e) for _n, _i, e in out] == [ErrorCode.invalid_request] * 2 and cluster.image.topic("c") is not None
    image = cluster.restart().image
    assert image.topic("a") is None and image.topic("b") is None and image.topic("c") is not None
    # a re-created topic gets a new id
    res = cluster.controller.create_topics([NewTopic("a")])
    assert err(res[0]) == 0 and res[0].topic_id != ids["a"]


def test_delete_topics_disabled(tmp_path):
    cl = Cluster(tmp_path, delete_topic_enable="false")
    cl.controller.create_topics([NewTopic("a")])
    out = cl.controller.delete_topics(["a"], [None])
    assert err(out[0][2]) == ErrorCode.topic_deletion_disabled and cl.image.topic("a") is not None
    cl.close()


def test_create_partitions(cluster):
    c = cluster.controller
    c.create_topics([NewTopic("p", 2, 2)])
    assert code(c.create_partitions, "nope", 3, None, False) == ErrorCode.unknown_topic_or_partition
    assert code(c.create_partitions, "p", 2, None, False) == ErrorCode.invalid_partitions
    assert code(c.create_partitions, "p", 1, None, False) == ErrorCode.invalid_partitions
    assert code(c.create_partitions, "p", 4, [[1, 2]], False) == ErrorCode.invalid_replica_assignment  # one of two
    assert code(c.create_partitions, "p", 3, [[1]], False) == ErrorCode.invalid_replica_assignment  # RF 1 != 2
    assert code(c.create_partitions, "p", 3, [[1, 9]], False) == ErrorCode.invalid_replica_assignment
    assert code(c.create_partitions, "p", 3, [[1, 1]], False) == ErrorCode.invalid_replica_assignment
    assert code(c.create_partitions, "p", 5, None, True) == 0
    assert len(cluster.image.topic("p").partitions) == 2  # validate_only
    assert code(c.create_partitions, "p", 3, [[3, 1]], False) == 0
    assert code(c.create_partitions, "p", 5, None, False) == 0
    parts = cluster.image.topic("p").partitions
    assert sorted(parts) == [0, 1, 2, 3, 4] and parts[2].replicas == [3, 1]
    assert all(len(p.replicas) == 2 for p in parts.values())
    assert sorted(cluster.restart().image.topic("p").partitions) == [0, 1, 2, 3, 4]


def test_create_partitions_needs_enough_brokers(tmp_path):
    cl = Cluster(tmp_path, brokers=(1, 2))
    cl.controller.create_topics([NewTopic("p", 1, 2)])
    cl.controller.commit([{"type": "FenceBrokerRecord", "id": 2, "epoch": 0}])
    assert code(cl.controller.create_partitions, "p", 2, None, False) == ErrorCode.invalid_replication_factor
    cl.close()


def test_topic_config_changes(cluster):
    c = cluster.controller
    c.create_topics([NewTopic("cfg", configs={"retention.ms": "100"})])
    T = RESOURCE_TOPIC
    c.incremental_alter_configs(
        T, "cfg", [("segment.bytes", OP_SET, "2000000"), ("retention.ms", OP_DELETE, None)], False
    )
    assert cluster.image.topic_configs("cfg") == {"segment.bytes": "2000000"}
    c.incremental_alter_configs(T, "cfg", [("cleanup.policy", OP_APPEND, "compact")], False)
    assert cluster.image.topic_configs("cfg")["cleanup.policy"] == "delete,compact"
    c.incremental_alter_configs(T, "cfg", [("cleanup.policy", OP_SUBTRACT, "delete")], False)
    assert cluster.image.topic_configs("cfg")["cleanup.policy"] == "compact"
    assert (
        code(c.incremental_alter_configs, T, "cfg", [("retention.ms", OP_APPEND, "1")], False)
        == ErrorCode.invalid_config
    )  # not a list
    assert (
        code(c.incremental_alter_configs, T, "cfg", [("retention.ms", OP_SET, "x")], False) == ErrorCode.invalid_config
    )
    assert code(c.incremental_alter_configs, T, "cfg", [("bogus", OP_SET, "1")], False) == ErrorCode.invalid_config
    assert (
        code(c.incremental_alter_configs, T, "cfg", [("segment.bytes", OP_SET, "1")], False) == ErrorCode.invalid_config
    )  # below segment.bytes' minimum
    assert (
        code(c.incremental_alter_configs, T, "nope", [("retention.ms", OP_SET, "1")], False)
        == ErrorCode.unknown_topic_or_partition
    )
    assert (
        code(
            c.incremental_alter_configs,
            T,
            "cfg",
            [("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)],
            False,
        )
        == ErrorCode.invalid_request
    )
    c.incremental_alter_configs(T, "cfg", [("retention.ms", OP_SET, "7")], True)  # validate only
    assert "retention.ms" not in cluster.image.topic_configs("cfg")
    # legacy AlterConfigs replaces the whole set
    c.alter_configs(T, "cfg", {"retention.ms": "9"}, False)
    assert cluster.image.topic_configs("cfg") == {"retention.ms": "9"}
    assert code(c.alter_configs, T, "cfg", {"retention.ms": "-7"}, False) == ErrorCode.invalid_config
    assert cluster.restart().image.topic_configs("cfg") == {"retention.ms": "9"}


def test_broker_config_changes(cluster):
    c = cluster.controller
    c.incremental_alter_configs(RESOURCE_BROKER, "", [("log.retention.ms", OP_SET, "1234")], False)
    c.incremental_alter_configs(RESOURCE_BROKER, "1", [("log.retention.ms", OP_SET, "99")], False)
    assert cluster.image.configs[(RESOURCE_BROKER, "")] == {"log.retention.ms": "1234"}
    assert cluster.image.configs[(RESOURCE_BROKER, "1")] == {"log.retention.ms": "99"}
    # Kafka checks broker changes on the broker: every refusal there is INVALID_REQUEST
    assert (
        code(c.incremental_alter_configs, RESOURCE_BROKER, "", [("broker.id", OP_SET, "3")], False)
        == ErrorCode.invalid_request
    )  # not dynamic
    assert (
        code(c.incremental_alter_configs, RESOURCE_BROKER, "", [("log.retention.ms", OP_SET, "x")], False)
        == ErrorCode.invalid_request
    )
    assert (
        code(c.incremental_alter_configs, RESOURCE_BROKER, "", [("ssl.cipher.suites", OP_SET, "x")], False)
        == ErrorCode.invalid_request
    )  # per broker only
    # Kafka's whole dynamic set is stored, and so is a custom (non-Kafka) key
    c.incremental_alter_configs(
        RESOURCE_BROKER,
        "1",
        [("ssl.cipher.suites", OP_SET, "x"), ("listener.name.ext.ssl.keystore.location", OP_SET, "/ks")],
        False,
    )
    c.incremental_alter_configs(
        RESOURCE_BROKER, "", [("background.threads", OP_SET, "4"), ("no.such", OP_SET, "3")], False
    )
    assert cluster.image.configs[(RESOURCE_BROKER, "")] == {
        "log.retention.ms": "1234",
        "background.threads": "4",
        "no.such": "3",
    }
    assert (
        code(c.incremental_alter_configs, RESOURCE_BROKER, "42", [("log.retention.ms", OP_SET, "1")], False)
        == ErrorCode.invalid_request
    )  # unknown broker
    assert code(c.incremental_alter_configs, 99, "x", [], False) == ErrorCode.invalid_request
    # APPEND/SUBTRACT work on a broker's LIST keys too, starting from the default
    c.incremental_alter_configs(RESOURCE_BROKER, "", [("log.cleanup.policy", OP_APPEND, "compact")], False)
    assert cluster.image.configs[(RESOURCE_BROKER, "")]["log.cleanup.policy"] == "delete,compact"
    assert (
        code(c.incremental_alter_configs, RESOURCE_BROKER, "", [("log.retention.ms", OP_APPEND, "1")], False)
        == ErrorCode.invalid_config
    )
    assert cluster.restart().image.configs[(RESOURCE_BROKER, "1")] == {
        "log.retention.ms": "99",
        "ssl.cipher.suites": "x",
        "listener.name.ext.ssl.keystore.location": "/ks",
    }


def test_dynamic_broker_configs_without_effect_are_logged_once(cluster, caplog):
    c = cluster.controller
    with caplog.at_level("WARNING", logger="kesque.controller.controller"):
        c.incremental_alter_configs(
            RESOURCE_BROKER, "", [("background.threads", OP_SET, "4"), ("log.retention.ms", OP_SET, "5")], False
        )
        c.incremental_alter_configs(RESOURCE_BROKER, "", [("background.threads", OP_SET, "5")], False)
    lines = [r.getMessage() for r in caplog.records if "does not act on" in r.getMessage()]
    assert lines == ["Dynamic broker config(s) background.threads stored, but kesque does not act on it (yet)"]


def test_group_config_changes(cluster):
    c = cluster.controller
    G = RESOURCE_GROUP
    c.incremental_alter_configs(
        G,
        "g1",
        [("consumer.session.timeout.ms", OP_SET, "50000"), ("consumer.heartbeat.interval.ms", OP_SET, "6000")],
        False,
    )
    assert cluster.image.configs[(G, "g1")] == {
        "consumer.session.timeout.ms": "50000",
        "consumer.heartbeat.interval.ms": "6000",
    }
    errors = {
        "unknown": ([("no.such", OP_SET, "1")], ErrorCode.invalid_config),
        "not a number": ([("consumer.session.timeout.ms", OP_SET, "x")], ErrorCode.invalid_config),
        # bounds from group.consumer.min/max.* (45000..60000, 5000..15000)
        "below min": ([("consumer.session.timeout.ms", OP_SET, "44999")], ErrorCode.invalid_config),
        "above max": ([("consumer.heartbeat.interval.ms", OP_SET, "15001")], ErrorCode.invalid_config),
        "share below": ([("share.record.lock.duration.ms", OP_SET, "14999")], ErrorCode.invalid_config),
        "bad reset": ([("share.auto.offset.reset", OP_SET, "none")], ErrorCode.invalid_config),
        "not a list": ([("consumer.session.timeout.ms", OP_APPEND, "1")], ErrorCode.invalid_config),
    }
    for ops, expected in errors.values():
        assert code(c.incremental_alter_configs, G, "g1", ops, False) == expected, ops
    assert (
        code(c.incremental_alter_configs, G, "", [("consumer.session.timeout.ms", OP_SET, "50000")], False)
        == ErrorCode.invalid_request
    )  # no default group resource
    c.incremental_alter_configs(G, "g1", [("consumer.heartbeat.interval.ms", OP_DELETE, None)], False)
    c.alter_configs(G, "g2", {"share.auto.offset.reset": "earliest"}, False)
    image = cluster.restart().image  # ConfigRecords in the metadata log, as Kafka keeps them
    assert image.configs[(G, "g1")] == {"consumer.session.timeout.ms": "50000"}
    assert image.configs[(G, "g2")] == {"share.auto.offset.reset": "earliest"}


def test_producer_id_blocks_survive_restarts(cluster):
    a = cluster.controller.allocate_producer_ids(1, 0)
    b = cluster.controller.allocate_producer_ids(1, 0)
    assert b[0] == a[0] + a[1]
    c = cluster.restart().controller.allocate_producer_ids(1, 0)
    assert c[0] == b[0] + b[1]


def test_bootstrap_records_features_once(cluster):
    # a new cluster has ELR (KIP-966) and transaction version 2 (KIP-890 part 2) on, as a Kafka
    # 4.4 cluster formatted by default
    assert cluster.image.features == {
        "metadata.version": 25,
        "eligible.leader.replicas.version": 1,
        "transaction.version": 2,
    }
    offset = cluster.image.offset
    cluster.controller.bootstrap()
    assert cluster.image.offset == offset


def test_elr_fields_round_trip_through_records_image_and_snapshot():
    """KIP-966: a record carrying the ELR is written at version 2 (tagged fields); the image keeps
    them and a snapshot rebuilds them."""
    from kesque.metadata.snapshot import image_records

    tid = uuid.uuid4()
    rec = {
        "type": "PartitionRecord",
        "partition_id": 0,
        "topic_id": tid,
        "replicas": [1, 2, 3],
        "isr": [],
        "removing_replicas": [],
        "adding_replicas": [],
        "leader": -1,
        "leader_recovery_state": 0,
        "leader_epoch": 3,
        "partition_epoch": 5,
        "eligible_leader_replicas": [1, 2],
        "last_known_elr": [2],
    }
    raw = mr.encode(rec)
    assert raw[:3] == bytes([1, 3, 2])  # frame 1, PartitionRecord, version 2
    back = mr.decode(raw)
    assert (back["eligible_leader_replicas"], back["last_known_elr"], back["directories"]) == ([1, 2], [2], [])
    change = {
        "type": "PartitionChangeRecord",
        "partition_id": 0,
        "topic_id": tid,
        "leader": 2,
        "isr": [2],
        "eligible_leader_replicas": [1],
        "last_known_elr": [],
    }
    assert mr.encode(change)[:3] == bytes([1, 5, 2])
    plain = {"type": "PartitionChangeRecord", "partition_id": 0, "topic_id": tid, "leader": 2}
    assert mr.encode(plain)[:3] == bytes([1, 5, 0])  # no ELR field: version 0 as before
    image = MetadataImage()
    replay_all(image, [{"type": "TopicRecord", "name": "t", "topic_id": tid}, back])
    p = image.topic("t").partitions[0]
    assert (p.elr, p.last_known_elr) == ([1, 2], [2])
    replay_all(image, [mr.decode(mr.encode(change))])
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, [2], [1], [])
    p.elr = [3]
    rebuilt = MetadataImage()
    replay_all(rebuilt, [mr.decode(mr.encode(r)) for r in image_records(image)])
    assert rebuilt.topic("t").partitions[0] == p
