"""kafkajs (Node.js) against a kesque broker: ``make compat`` (marker ``compat``).

tests/compat/ holds a package.json pinning kafkajs 2.2.4 and kafkajs_compat.js, which this
module drives as a subprocess (``npm install`` runs first if node_modules is missing).

Covered: produce with every codec kafkajs has without plugins (none, gzip; snappy, lz4 and
zstd need third-party codec packages), plain and idempotent; read back byte-identical by
kafkajs and by librdkafka; librdkafka-produced data read by kafkajs (incl. a fetch starting
inside a gzip batch); admin createTopics (with configs), listTopics, fetchTopicMetadata,
describeCluster, describeConfigs (topic and broker), alterConfigs, createPartitions,
fetchTopicOffsets, fetchTopicOffsetsByTimestamp, deleteTopicRecords.

Gap: kafkajs' consumer only works through a consumer group (JoinGroup/SyncGroup/
OffsetCommit), which kesque does not serve yet. Consumption here uses kafkajs' own
Cluster/Broker classes (Metadata + Fetch v11, kafkajs' record decoding and gzip), so the
wire path is kafkajs', but the group consumer itself is untested until groups exist.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

from clientlib import (
    assert_same,
    consume_confluent,
    counts,
    expected_by_partition,
    make_records,
    produce_confluent,
    segment_batches,
)
from kesque.testing.broker import Broker

pytestmark = pytest.mark.compat

COMPAT_DIR = os.path.join(os.path.dirname(__file__), "compat")
SCRIPT = os.path.join(COMPAT_DIR, "kafkajs_compat.js")
N = int(os.environ.get("KAFKAJS_RECORDS", "20000"))


@pytest.fixture(scope="module")
def kafkajs():
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed")
    if not os.path.isdir(os.path.join(COMPAT_DIR, "node_modules", "kafkajs")):
        r = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent"],
            cwd=COMPAT_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, f"npm install failed: {r.stderr[-2000:]}"
    return SCRIPT


@pytest.fixture(scope="module")
def jsbroker(tmp_path_factory):
    d = tmp_path_factory.mktemp("kesque-kafkajs") / "data"
    d.mkdir(parents=True)
    b = Broker(data_dir=str(d))
    b.start()
    try:
        yield b
    finally:
        b.stop(timeout=10)


def run_js(script: str, command: str, timeout: float = 120, **args):
    r = subprocess.run(
        ["node", script, command, json.dumps(args)], capture_output=True, text=True, timeout=timeout, cwd=COMPAT_DIR
    )
    assert r.returncode == 0, f"kafkajs {command} failed:\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def admin_ops(script, broker, *ops):
    """[(op, [args...]), ...] -> results; a failed op raises with kafkajs' error."""
    res = run_js(
        script, "admin", brokers=broker.bootstrap_servers, ops=[{"op": op, "args": list(args)} for op, *args in ops]
    )
    for (op, *_), r in zip(ops, res):
        assert r["ok"], f"kafkajs admin.{op} failed: {r['error']} ({r['type']})"
    return [r["result"] for r in res]


def new_topic() -> str:
    return "js-" + uuid.uuid4().hex[:10]


def _b64(x):
    return None if x is None else base64.b64encode(x).decode()


def _unb64(x):
    return None if x is None else base64.b64decode(x)


def write_records(path, recs) -> None:
    with open(path, "w") as f:
        for r in recs:
            f.write(
                json.dumps(
                    {
                        "p": r.partition,
                        "k": _b64(r.key),
                        "v": _b64(r.value),
                        "h": [[k, _b64(v)] for k, v in r.headers],
                        "ts": r.timestamp,
                    }
                )
                + "\n"
            )


def read_rows(path) -> dict[int, list]:
    out: dict[int, list] = {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            out.setdefault(j["p"], []).append(
                (j["o"], _unb64(j["k"]), _unb64(j["v"]), tuple((k, _unb64(v)) for k, v in j["h"]), j["ts"])
            )
    return out


def kafkajs_consume(script, broker, topic, want, tmp_path, start=None) -> dict[int, list]:
    out = tmp_path / f"consumed-{uuid.uuid4().hex[:6]}.jsonl"
    run_js(
        script,
        "consume",
        brokers=broker.bootstrap_servers,
        topic=topic,
        want={str(p): n for p, n in want.items()},
        start={str(p): o for p, o in (start or {}).items()},
        output=str(out),
    )
    got = read_rows(out)
    return {p: got.get(p, []) for p in want}


def create(script, broker, topic, partitions=3, configs=None):
    [ok] = admin_ops(
        script,
        broker,
        (
            "createTopics",
            {
                "topics": [
                    {
                        "topic": topic,
                        "numPartitions": partitions,
                        "replicationFactor": 1,
                        "configEntries": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                    }
                ],
                "waitForLeaders": True,
            },
        ),
    )
    assert ok is True


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_produce_roundtrip(kafkajs, jsbroker, tmp_path, codec, idempotent):
    topic = new_topic()
    create(kafkajs, jsbroker, topic)
    recs = make_records(N, seed=7 + idempotent)
    src = tmp_path / "records.jsonl"
    write_records(src, recs)
    res = run_js(
        kafkajs,
        "produce",
        brokers=jsbroker.bootstrap_servers,
        topic=topic,
        codec=codec,
        idempotent=idempotent,
        input=str(src),
    )
    assert res["count"] == N
    batches = [b for p in range(3) for b in segment_batches(jsbroker.data_dir, topic, p)]
    assert {b.codec for b in batches} == {0 if codec == "none" else 1}
    if idempotent:
        assert {b.producer_id for b in batches} != {-1} and all(b.producer_id >= 0 for b in batches)
    expected = expected_by_partition(recs)
    assert_same(
        kafkajs_consume(kafkajs, jsbroker, topic, counts(expected), tmp_path), expected, f"kafkajs->kafkajs/{codec}"
    )
    assert_same(
        consume_confluent(jsbroker.bootstrap_servers, topic, counts(expected)), expected, f"kafkajs->confluent/{codec}"
    )


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_reads_librdkafka_data(kafkajs, jsbroker, tmp_path, codec):
    topic = new_topic()
    create(kafkajs, jsbroker, topic)
    recs = make_records(N, seed=9)
    produce_confluent(jsbroker.bootstrap_servers, topic, recs, codec)
    expected = expected_by_partition(recs)
    assert_same(
        kafkajs_consume(kafkajs, jsbroker, topic, counts(expected), tmp_path), expected, f"confluent->kafkajs/{codec}"
    )
    if codec == "gzip":  # start inside a compressed batch: the whole batch comes back, kafkajs skips
        b = next(b for b in segment_batches(jsbroker.data_dir, topic, 0) if b.count > 2)
        mid = b.base_offset + 1
        got = kafkajs_consume(kafkajs, jsbroker, topic, {0: len(expected[0]) - mid}, tmp_path, start={0: mid})
        assert got[0] == expected[0][mid:]


def test_kafkajs_admin(kafkajs, jsbroker, tmp_path):
    topic = new_topic()
    create(kafkajs, jsbroker, topic, 3, {"retention.ms": "86400000"})
    base = int(time.time() * 1000) - 60_000
    from clientlib import Rec

    recs = [Rec(p, b"k%d" % i, b"v%d" % i, (), base + 10 * i) for i in range(100) for p in range(3)]
    src = tmp_path / "ts.jsonl"
    write_records(src, recs)
    run_js(kafkajs, "produce", brokers=jsbroker.bootstrap_servers, topic=topic, codec="gzip", input=str(src), chunk=300)
    TOPIC, BROKER = 2, 4  # kafkajs ConfigResourceTypes
    (topics, meta, cluster, offsets, by_ts, by_ts_late, desc, broker_desc) = admin_ops(
        kafkajs,
        jsbroker,
        ("listTopics",),
        ("fetchTopicMetadata", {"topics": [topic]}),
        ("describeCluster",),
        ("fetchTopicOffsets", topic),
        ("fetchTopicOffsetsByTimestamp", topic, base + 10 * 42),
        ("fetchTopicOffsetsByTimestamp", topic, base + 10_000_000),
        (
            "describeConfigs",
            {
                "resources": [{"type": TOPIC, "name": topic, "configNames": ["retention.ms", "cleanup.policy"]}],
                "includeSynonyms": False,
            },
        ),
        ("describeConfigs", {"resources": [{"type": BROKER, "name": "1"}], "includeSynonyms": False}),
    )
    assert topic in topics
    [tm] = meta["topics"]
    assert tm["name"] == topic
    assert sorted((p["partitionId"], p["leader"], p["replicas"], p["isr"]) for p in tm["partitions"]) == [
        (i, 1, [1], [1]) for i in range(3)
    ]
    assert cluster["controller"] == 1 and cluster["clusterId"]
    assert [(b["nodeId"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", jsbroker.port)]
    assert sorted((o["partition"], o["low"], o["high"]) for o in offsets) == [(p, "0", "100") for p in range(3)]
    assert sorted((o["partition"], o["offset"]) for o in by_ts) == [(p, "42") for p in range(3)]
    # past the last timestamp kafkajs falls back to the high watermark
    assert sorted((o["partition"], o["offset"]) for o in by_ts_late) == [(p, "100") for p in range(3)]
    entries = {e["configName"]: e for e in desc["resources"][0]["configEntries"]}
    assert entries["retention.ms"]["configValue"] == "86400000"
    assert entries["retention.ms"]["configSource"] == 1  # DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"]["configValue"] == "delete"
    assert entries["cleanup.policy"]["isDefault"] is True or entries["cleanup.policy"]["configSource"] == 5
    bentries = {e["configName"]: e["configValue"] for e in broker_desc["resources"][0]["configEntries"]}
    assert bentries["num.partitions"] == "1"

    (_alter, desc2, _cp, meta2, _del, offsets2) = admin_ops(
        kafkajs,
        jsbroker,
        (
            "alterConfigs",
            {
                "resources": [
                    {"type": TOPIC, "name": topic, "configEntries": [{"name": "retention.ms", "value": "123456"}]}
                ],
                "validateOnly": False,
            },
        ),
        (
            "describeConfigs",
            {"resources": [{"type": TOPIC, "name": topic, "configNames": ["retention.ms"]}], "includeSynonyms": False},
        ),
        ("createPartitions", {"topicPartitions": [{"topic": topic, "count": 5}]}),
        ("fetchTopicMetadata", {"topics": [topic]}),
        ("deleteTopicRecords", {"topic": topic, "partitions": [{"partition": 0, "offset": "37"}]}),
        ("fetchTopicOffsets", topic),
    )
    [e] = desc2["resources"][0]["configEntries"]
    assert (e["configName"], e["configValue"], e["configSource"]) == ("retention.ms", "123456", 1)
    assert sorted(p["partitionId"] for p in meta2["topics"][0]["partitions"]) == [0, 1, 2, 3, 4]
    lows = {o["partition"]: (o["low"], o["high"]) for o in offsets2}
    assert lows == {0: ("37", "100"), 1: ("0", "100"), 2: ("0", "100"), 3: ("0", "0"), 4: ("0", "0")}
    got = kafkajs_consume(kafkajs, jsbroker, topic, {0: 63}, tmp_path, start={0: 37})
    assert [r[0] for r in got[0]] == list(range(37, 100))


def test_kafkajs_refused_operations(kafkajs, jsbroker):
    """Errors come back as Kafka's: existing topic, partition decrease, unknown config."""
    topic = new_topic()
    create(kafkajs, jsbroker, topic, 2)
    res = run_js(
        kafkajs,
        "admin",
        brokers=jsbroker.bootstrap_servers,
        ops=[
            {"op": "createTopics", "args": [{"topics": [{"topic": topic, "numPartitions": 1}]}]},
            {"op": "createPartitions", "args": [{"topicPartitions": [{"topic": topic, "count": 1}]}]},
            {
                "op": "alterConfigs",
                "args": [
                    {
                        "resources": [
                            {"type": 2, "name": topic, "configEntries": [{"name": "no.such.config", "value": "1"}]}
                        ]
                    }
                ],
            },
        ],
    )
    # kafkajs' createTopics resolves false when the topic already exists
    assert res[0] == {"ok": True, "result": False}
    assert (res[1]["ok"], res[1]["type"]) == (False, "INVALID_PARTITIONS"), res[1]
    assert (res[2]["ok"], res[2]["type"]) == (False, "INVALID_CONFIG"), res[2]
