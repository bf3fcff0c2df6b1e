"""kesque against Apache Kafka on the wire: advertised API ranges and the error codes of bad input.

ApiVersions: every API whose range differs (or that only one broker serves) must be listed,
with the reason, in docs/compatibility.md ("Differences from Apache Kafka"); the listed rows
must be exactly the differences measured here.

Error codes: requests of the bad-input suite (tests/test_bad_input.py, built with tests/wire.py)
sent to both brokers, each on a fresh topic; the codes (and where they matter, whether the
connection was closed) must be equal. Known differences are xfails naming them.
"""

from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path

import pytest

import oracle
from kesque.protocol.api_keys import ApiKeys
from kesque.testing import kafka as K
from oracle import new_topic
from oracle import pair as pair  # the module fixture (the redundant alias: a re-export, not an unused import)
from test_bad_input import PRODUCE_CASES, _bad_crc
from wire import Api, ConnectionClosed, Msg, WireClient, build_batch

pytestmark = oracle.MARKS

ROOT = Path(__file__).resolve().parent.parent
DASH = "—"


# ====================================================================== ApiVersions
def advertised(broker) -> tuple[dict[int, tuple[int, int]], object]:
    with WireClient(broker.bootstrap_servers) as c:
        r = Api(c).api_versions(3)
    assert r.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}, r


def kafka_api_names() -> dict[int, str]:
    names = {}
    for name, text in (K.jar_resources("kafka-clients", "common/message") or {}).items():
        if name.endswith("Request.json"):
            names[json.loads(re.sub(r"//.*", "", text))["apiKey"]] = name.removesuffix("Request.json")
    return names


def _range(r: tuple[int, int] | None) -> str:
    return DASH if r is None else f"{r[0]}–{r[1]}"


def documented_api_differences() -> tuple[str, dict[int, tuple[str, str, str, str]]]:
    """(the section's text, {key: (name, kesque, Kafka, reason)}) from docs/compatibility.md."""
    text = (ROOT / "docs" / "compatibility.md").read_text()
    section = text.split("## Differences from Apache Kafka", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for key, name, ours, theirs, why in re.findall(
        r"^\| (\d+) (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]*) \|$", section, re.M
    ):
        rows[int(key)] = (name, ours.strip(), theirs.strip(), why.strip())
    return section, rows


def test_every_api_range_difference_is_documented(pair):
    kafka, _ = advertised(pair["kafka"])
    kesque, _ = advertised(pair["kesque"])
    names = kafka_api_names()
    measured = {
        key: (names.get(key, "?"), _range(kesque.get(key)), _range(kafka.get(key)))
        for key in sorted(set(kafka) | set(kesque))
        if kafka.get(key) != kesque.get(key)
    }
    section, rows = documented_api_differences()
    assert f"Kafka {K.kafka_version()}" in section, "the section names the Kafka release it was measured against"
    documented = {key: row[:3] for key, row in rows.items()}
    assert documented == measured
    assert all(row[3] for row in rows.values()), "every difference says why"


def test_features_differences_are_documented(pair):
    _, kafka = advertised(pair["kafka"])
    _, kesque = advertised(pair["kesque"])
    section, _ = documented_api_differences()
    theirs = {f.name: (f.min_version_level, f.max_version_level) for f in kafka.finalized_features}
    ours = {f.name: (f.min_version_level, f.max_version_level) for f in kesque.finalized_features}
    for name in sorted(set(theirs) | set(ours)):
        if theirs.get(name) != ours.get(name):
            assert f"`{name}`" in section, (
                f"finalized feature {name}: kesque {ours.get(name)}, Kafka {theirs.get(name)}"
            )


# ====================================================================== error codes
def wait_leaders(api: Api, topic: str, partitions: int, timeout: float = 15.0) -> None:
    """Kafka answers CreateTopics before its partitions have a leader that serves them; wait until
    ListOffsets (answered by the leader itself) succeeds on each."""
    deadline = time.monotonic() + timeout
    for p in range(partitions):
        while (r := api.list_offsets(topic, -1, partition=p)).error_code != 0:
            assert time.monotonic() < deadline, r
            time.sleep(0.05)


def create(api: Api, topic: str, partitions: int = 1, configs: dict | None = None) -> None:
    api.create_topic(topic, partitions, configs)
    wait_leaders(api, topic, partitions)


def on_both(pair, scenario) -> dict[str, object]:
    """``scenario(api, topic)`` on each broker, a fresh connection and topic name each; a closed
    connection or a missing answer is a result too."""
    out = {}
    for name, broker in pair.items():
        with WireClient(broker.bootstrap_servers, timeout=5) as c:
            try:
                out[name] = scenario(Api(c), new_topic())
            except (ConnectionClosed, TimeoutError) as e:
                out[name] = type(e).__name__
    return out


class Text(str):
    """An error message in a scenario's result: compared after the codes, see :func:`assert_same`."""


def text(message: str | None, topic: str | None = None) -> Text:
    return Text(oracle.mask(message or "", {topic: "<topic>"} if topic else None))


def _codes(value):
    if isinstance(value, Text):
        return None
    if isinstance(value, (list, tuple)):
        return type(value)(_codes(v) for v in value)
    return value


def assert_same(results: dict[str, object], message_difference: str | None = None) -> None:
    """Equal results; with ``message_difference`` (a documented difference of Kafka's error
    message wording) equal codes, and the test xfails naming the difference when only texts differ."""
    assert _codes(results["kesque"]) == _codes(results["kafka"]), results
    if message_difference and results["kesque"] != results["kafka"]:
        pytest.xfail(f"error message wording: {message_difference} ({results})")
    assert results["kesque"] == results["kafka"], results


# Kafka 4.4 throws a NullPointerException on null records and never answers (the connection stays
# open); kesque answers INVALID_RECORD (docs/compatibility.md, "Differences from Apache Kafka")
_NO_ANSWER = pytest.mark.xfail(
    reason="deliberate: Kafka does not answer a Produce with null records (NPE)", strict=True
)


@pytest.mark.parametrize(
    "records,error,version,acks",
    [pytest.param(*c.values, marks=_NO_ANSWER, id=c.id) if c.id == "null-records" else c for c in PRODUCE_CASES],
)
def test_bad_produce(pair, records, error, version, acks):
    def scenario(api, topic):
        create(api, topic)
        first = api.produce(topic, build_batch([(b"k", b"good", ())])).error_code
        bad = api.produce(topic, records, acks=acks, version=version)
        after = api.produce(topic, build_batch([(b"k", b"good", ())]))
        return first, bad.error_code, bad.base_offset, after.error_code, after.base_offset

    assert_same(on_both(pair, scenario))


def test_batch_larger_than_max_message_bytes(pair):
    def scenario(api, topic):
        create(api, topic, configs={"max.message.bytes": "1000"})
        return [api.produce(topic, build_batch([(b"k", v, ())])).error_code for v in (b"x" * 2000, b"y" * 900)]

    assert_same(on_both(pair, scenario))


def test_one_bad_partition_does_not_fail_the_others(pair):
    def scenario(api, topic):
        create(api, topic, partitions=3)
        m = Msg(ApiKeys.PRODUCE, 9)
        parts = (
            m("PartitionProduceData", index=0, records=build_batch([(None, b"p0", ())])),
            m("PartitionProduceData", index=1, records=_bad_crc()),
            m("PartitionProduceData", index=7, records=build_batch([(None, b"p7", ())])),
        )
        r = api.c.request(
            ApiKeys.PRODUCE,
            9,
            m(
                transactional_id=None,
                acks=-1,
                timeout=5000,
                topic_data=(m("TopicProduceData", name=topic, partition_data=parts),),
            ),
        )
        return sorted((p.index, p.error_code) for p in r.responses[0].partition_responses)

    assert_same(on_both(pair, scenario))


def test_produce_to_missing_partition_and_metadata_of_bad_names(pair):
    def scenario(api, topic):
        create(api, topic)
        missing = api.produce(topic, build_batch([(None, b"x", ())]), partition=5).error_code
        bad = api.metadata(["bad/name"], allow_auto=True).topics[0].error_code
        unknown = api.metadata([new_topic()], allow_auto=False).topics[0].error_code
        return missing, bad, unknown

    assert_same(on_both(pair, scenario))


@pytest.mark.parametrize(
    "key,value",
    [
        ("retention.ms", "abc"),
        ("foo.bar", "1"),
        ("segment.bytes", "10"),
        ("cleanup.policy", "shred"),
        ("min.insync.replicas", "0"),
    ],
)
def test_create_topics_invalid_config(pair, key, value):
    def scenario(api, topic):
        r = api.create_topics([{"name": topic, "configs": {key: value}}]).topics[0]
        v = api.create_topics([{"name": topic, "configs": {key: value}}], validate_only=True).topics[0]
        return r.error_code, text(r.error_message, topic), v.error_code

    assert_same(on_both(pair, scenario))


@pytest.mark.parametrize("name", ["a/b", "x" * 250, ".", "..", "", "spaced name", "ünïcode"])
def test_create_topics_invalid_name(pair, name):
    def scenario(api, _topic):
        r = api.create_topics([{"name": name}]).topics[0]
        return r.error_code, text(r.error_message)

    assert_same(on_both(pair, scenario), 'Kafka 4.x\'s Topic.validate wording ("Topic name is invalid: ...")')


def test_create_topics_bad_counts(pair):
    def scenario(api, topic):
        codes = [
            api.create_topics([t]).topics[0]
            for t in (
                {"name": topic, "replication_factor": 3},
                {"name": topic, "num_partitions": 0},
                {"name": topic, "num_partitions": 10001},
            )
        ]
        return [(r.error_code, text(r.error_message)) for r in codes]

    assert_same(
        on_both(pair, scenario),
        'replication factor ("... or some brokers have all their log directories '
        'cordoned.", KIP-1066) and partition count limits ("Excessively large '
        'number of partitions per request.")',
    )


def test_create_partitions_bad_counts(pair):
    def scenario(api, topic):
        create(api, topic, partitions=3)
        m = Msg(ApiKeys.CREATE_PARTITIONS, 3)
        out = []
        for name, count in ((topic, 2), (topic, 3), (topic, 0), (topic, -1), (topic, 10004), (new_topic(), 5)):
            r = api.c.request(
                ApiKeys.CREATE_PARTITIONS,
                3,
                m(
                    topics=(m("CreatePartitionsTopic", name=name, count=count, assignments=None),),
                    timeout=5000,
                    validate_only=True,
                ),
            )
            out.append((count, r.results[0].error_code, text(r.results[0].error_message, topic)))
        return out

    assert_same(
        on_both(pair, scenario),
        '"Excessively large number of additional partitions per request."; no message for an unknown topic',
    )


@pytest.mark.parametrize(
    "key,value", [("retention.ms", "abc"), ("foo.bar", "1"), ("segment.bytes", "10"), ("max.message.bytes", "-5")]
)
def test_alter_configs_invalid_values(pair, key, value):
    def scenario(api, topic):
        create(api, topic)
        m = Msg(ApiKeys.ALTER_CONFIGS, 2)
        legacy = api.c.request(
            ApiKeys.ALTER_CONFIGS,
            2,
            m(
                resources=(
                    m(
                        "AlterConfigsResource",
                        resource_type=2,
                        resource_name=topic,
                        configs=(m("AlterableConfig", name=key, value=value),),
                    ),
                ),
                validate_only=False,
            ),
        ).responses[0]
        m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
        incr = api.c.request(
            ApiKeys.INCREMENTAL_ALTER_CONFIGS,
            1,
            m(
                resources=(
                    m(
                        "AlterConfigsResource",
                        resource_type=2,
                        resource_name=topic,
                        configs=(m("AlterableConfig", name=key, config_operation=0, value=value),),
                    ),
                ),
                validate_only=False,
            ),
        ).responses[0]
        return [(r.error_code, text(r.error_message, topic)) for r in (legacy, incr)]

    assert_same(on_both(pair, scenario))


def test_incremental_alter_configs_bad_operation_on_scalar(pair):
    def scenario(api, topic):
        create(api, topic)
        m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
        r = api.c.request(
            ApiKeys.INCREMENTAL_ALTER_CONFIGS,
            1,
            m(
                resources=(
                    m(
                        "AlterConfigsResource",
                        resource_type=2,
                        resource_name=topic,
                        configs=(m("AlterableConfig", name="retention.ms", config_operation=2, value="5"),),
                    ),
                ),
                validate_only=False,
            ),
        ).responses[0]
        return r.error_code, text(r.error_message, topic)

    assert_same(on_both(pair, scenario), '"Can\'t APPEND to key retention.ms because its type is not LIST."')


def _broker_read_only(api) -> dict[str, bool]:
    """{key: read_only} of DescribeConfigs on BROKER 1, every key."""
    m = Msg(ApiKeys.DESCRIBE_CONFIGS, 4)
    r = api.c.request(
        ApiKeys.DESCRIBE_CONFIGS,
        4,
        m(
            resources=(m("DescribeConfigsResource", resource_type=4, resource_name="1", configuration_keys=None),),
            include_synonyms=False,
            include_documentation=False,
        ),
    ).results[0]
    assert r.error_code == 0, r
    return {c.name: c.read_only for c in r.configs}


def test_describe_configs_read_only_of_every_broker_key(pair):
    """Which broker keys DescribeConfigs calls changeable at runtime (read_only false) is
    Kafka 4.4's DynamicBrokerConfig set: for every key both describe, the same answer (4.4
    dropped advertised.listeners from the set; kafka-python's suite caught kesque still
    reporting it changeable); a key only kesque describes is not called changeable."""
    ro = on_both(pair, lambda api, topic: _broker_read_only(api))
    kafka, kesque = ro["kafka"], ro["kesque"]
    assert len(kafka) > 300 and len(kesque) > 100
    assert {k: (kesque[k], kafka[k]) for k in kesque.keys() & kafka.keys() if kesque[k] != kafka[k]} == {}
    assert [k for k in kesque.keys() - kafka.keys() if not kesque[k]] == []
    assert kesque["advertised.listeners"] is True and kesque["listeners"] is False  # both kinds seen


def test_alter_configs_of_advertised_listeners_is_refused(pair):
    def scenario(api, topic):
        value = "PLAINTEXT://127.0.0.1:1"
        m = Msg(ApiKeys.ALTER_CONFIGS, 2)
        legacy = api.c.request(
            ApiKeys.ALTER_CONFIGS,
            2,
            m(
                resources=(
                    m(
                        "AlterConfigsResource",
                        resource_type=4,
                        resource_name="1",
                        configs=(m("AlterableConfig", name="advertised.listeners", value=value),),
                    ),
                ),
                validate_only=True,
            ),
        ).responses[0]
        m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
        incr = api.c.request(
            ApiKeys.INCREMENTAL_ALTER_CONFIGS,
            1,
            m(
                resources=(
                    m(
                        "AlterConfigsResource",
                        resource_type=4,
                        resource_name="1",
                        configs=(m("AlterableConfig", name="advertised.listeners", config_operation=0, value=value),),
                    ),
                ),
                validate_only=True,
            ),
        ).responses[0]
        return [(r.error_code, text(r.error_message)) for r in (legacy, incr)]

    results = on_both(pair, scenario)
    assert results["kafka"][1][0] != 0, results  # Kafka 4.4 refuses it
    assert_same(results)


def test_fetch_and_list_offsets_out_of_range(pair):
    def scenario(api, topic):
        create(api, topic)
        for i in range(3):
            api.produce(topic, build_batch([(None, b"f%d" % i, ())]))
        codes = [api.fetch(topic, offset).responses[0].partitions[0].error_code for offset in (3, 4, 1000, 2**62)]
        return codes, api.list_offsets(topic, -1).offset, api.list_offsets(topic, -2).offset

    assert_same(on_both(pair, scenario))


def test_fetch_with_future_and_stale_leader_epoch(pair):
    def scenario(api, topic):
        create(api, topic)
        api.produce(topic, build_batch([(None, b"x", ())]))
        epoch = api.metadata([topic]).topics[0].partitions[0].leader_epoch
        return [
            api.fetch(topic, 0, current_leader_epoch=e).responses[0].partitions[0].error_code
            for e in (epoch, epoch + 1, epoch - 1)
        ]

    assert_same(on_both(pair, scenario))


def test_unknown_api_and_unsupported_versions_close_the_connection(pair):
    def scenario(api, _topic):
        out = []
        for key, version in ((999, 0), (3, 99), (1, 0)):
            with WireClient(api.c.address) as c:
                c.send(key, version, b"\x00" * 8)
                out.append(c.is_closed())
        return out

    assert_same(on_both(pair, scenario))


def test_api_versions_from_the_future_gets_a_v0_answer(pair):
    def scenario(api, _topic):
        api.c.send(ApiKeys.API_VERSIONS, 99, b"\x00\x01\x02garbage-of-a-future-version")
        raw = api.c.recv_frame()
        (error,) = struct.unpack_from(">h", raw, 4)
        return error, Api(api.c).api_versions(3).error_code

    assert_same(on_both(pair, scenario))
