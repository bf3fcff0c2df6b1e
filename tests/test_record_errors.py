"""KIP-467 record errors: a produced batch that fails Kafka's per-record checks (a keyless
record on a compacted topic, a timestamp out of ``message.timestamp.*.max.ms``) is refused
whole, and the Produce response lists the index and message of each failing record, so a
client fails just those and tells the others apart.

On the wire (exact record_errors, error_message, offsets) and with real clients:
confluent-kafka fails the bad records with INVALID_RECORD and the others with
_INVALID_DIFFERENT_RECORD (not retried: the application may send them again); kafka-python
fails the bad records with the broker's per-record message and the others with a plain
KafkaError; aiokafka ignores record_errors and fails the whole batch.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from wire import Api, WireClient, build_batch, consume_all

INVALID_RECORD, INVALID_TIMESTAMP = 87, 32
LONG_MAX = 2**63 - 1
HOUR = 3_600_000
N = 100
KEYLESS = list(range(3, N, 10))  # the batch: 10 keyless records among 100


def keyless_batch() -> list[tuple[bytes | None, bytes, int | None]]:
    return [(None if i in KEYLESS else b"k%d" % i, b"v%d" % i, None) for i in range(N)]


def no_key_message(topic: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {topic}-0"


@pytest.fixture
def api(module_broker):
    with WireClient(module_broker.bootstrap_servers) as c:
        yield Api(c)


def new_topic(api: Api, **configs) -> str:
    topic = "t-" + uuid.uuid4().hex[:10]
    api.create_topic(topic, configs={k.replace("_", "."): str(v) for k, v in configs.items()})
    return topic


def log_of(bs: str, topic: str) -> list[tuple[int, bytes | None]]:
    return consume_all(bs, topic, timeout=10)[0]


# ============================================================================== wire


@pytest.mark.parametrize("version", [8, 9, 12])
def test_keyless_records_listed_in_the_produce_response(module_broker, api, version):
    topic = new_topic(api, cleanup_policy="compact")
    records = [(k, v, ()) for k, v, _ in keyless_batch()]
    r = api.produce(topic, build_batch(records), version=version)
    assert r.error_code == INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
        (i, no_key_message(topic)) for i in KEYLESS
    ]
    first3 = ", ".join(f"RecordError(batchIndex={i}, message='{no_key_message(topic)}')" for i in KEYLESS[:3])
    assert r.error_message == (
        "One or more records have been rejected due to 10 record errors in total, and only "
        f"showing the first three errors at most: [{first3}]"
    )
    # the whole batch is refused; Kafka reports the log start offset with record errors
    assert (r.base_offset, r.log_start_offset) == (-1, 0)
    assert log_of(module_broker.bootstrap_servers, topic) == []
    # the keyed records alone go through
    r = api.produce(topic, build_batch([rec for rec in records if rec[0] is not None]), version=version)
    assert (r.error_code, r.base_offset, r.record_errors, r.error_message) == (0, 0, (), None)


def test_before_record_errors_produce_v7_has_only_the_code(api):
    topic = new_topic(api, cleanup_policy="compact")
    r = api.produce(topic, build_batch([(None, b"v", ())]), version=7)
    assert r.error_code == INVALID_RECORD


def test_out_of_range_timestamps_listed_in_the_produce_response(module_broker, api):
    before = 24 * HOUR
    topic = new_topic(api, message_timestamp_before_max_ms=before)
    now = int(time.time() * 1000)
    old, future = now - 2 * before, now + 10 * HOUR
    stamps = {0: old, 2: future, 5: future}
    records = [(b"k", b"v", (), stamps.get(i, now)) for i in range(8)]
    r = api.produce(topic, build_batch(records))
    assert r.error_code == INVALID_TIMESTAMP
    assert r.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in r.record_errors] == [0, 2, 5]
    for e in r.record_errors:
        m = re.fullmatch(
            r"Timestamp (-?\d+) of message with offset (\d+) is out of range\. "
            r"The timestamp should be within \[(-?\d+), (-?\d+)\]",
            e.batch_index_error_message,
        )
        assert m, e.batch_index_error_message
        t, offset, lo, hi = map(int, m.groups())
        assert (t, offset, hi - lo) == (stamps[e.batch_index], e.batch_index, before + HOUR)
        assert not lo <= t <= hi
    assert (r.base_offset, r.log_start_offset) == (-1, 0)
    assert log_of(module_broker.bootstrap_servers, topic) == []


# ============================================================================== clients


def send_confluent(bs: str, topic: str, msgs, **conf) -> list:
    """Produce ``msgs`` (key, value, timestamp) in one batch; each message's delivery error or None."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "linger.ms": 5000, "message.timeout.ms": 20000, **conf})
    # the partition known before the first record: records waiting for metadata are moved to the
    # partition's queue in steps, and a flush meanwhile can split them into two batches (seen on
    # a loaded machine: the second batch, all valid records, was written)
    p.list_topics(topic, timeout=10)
    out: list = [False] * len(msgs)
    for i, (k, v, ts) in enumerate(msgs):
        p.produce(
            topic,
            value=v,
            key=k,
            partition=0,
            timestamp=ts or 0,
            on_delivery=lambda err, _m, i=i: out.__setitem__(i, err),
        )
    assert p.flush(30) == 0
    return out


def send_kafka_python(bs: str, topic: str, msgs) -> list:
    """Each message's exception, or None once delivered."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bs, linger_ms=5000)
    try:
        futures = [p.send(topic, value=v, key=k, partition=0, timestamp_ms=ts) for k, v, ts in msgs]
        p.flush(30)
        return [f.exception for f in futures]
    finally:
        p.close(5)


def send_aiokafka(bs: str, topic: str, msgs) -> list:
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=500)  # flush does not cut the linger short
        await p.start()
        try:
            futures = [await p.send(topic, value=v, key=k, partition=0, timestamp_ms=ts) for k, v, ts in msgs]
            await p.flush()
            return [
                None if not isinstance(r, Exception) else r
                for r in await asyncio.gather(*futures, return_exceptions=True)
            ]
        finally:
            await p.stop()

    return asyncio.run(run())


def test_confluent_fails_only_the_keyless_records(module_broker, api):
    from confluent_kafka import KafkaError

    bs = module_broker.bootstrap_servers
    topic = new_topic(api, cleanup_policy="compact")
    msgs = keyless_batch()
    errors = send_confluent(bs, topic, msgs)
    assert [e.code() for e in errors] == [
        KafkaError.INVALID_RECORD if i in KEYLESS else KafkaError._INVALID_DIFFERENT_RECORD for i in range(N)
    ]
    assert not any(e.retriable() for e in errors)  # librdkafka does not resend the others itself
    assert log_of(bs, topic) == []
    # the application sends the others again: exactly the 90 keyed records are in the log
    again = [m for m, e in zip(msgs, errors) if e.code() == KafkaError._INVALID_DIFFERENT_RECORD]
    assert send_confluent(bs, topic, again) == [None] * 90
    assert log_of(bs, topic) == [(i, v) for i, (_k, v, _t) in enumerate(again)]


def test_confluent_fails_only_the_records_with_a_bad_timestamp(module_broker, api):
    from confluent_kafka import KafkaError

    bs = module_broker.bootstrap_servers
    topic = new_topic(api)
    now = int(time.time() * 1000)
    late = {7, 40, 99}
    errors = send_confluent(bs, topic, [(b"k", b"v", now + 2 * HOUR if i in late else now) for i in range(N)])
    # librdkafka fails every listed record with INVALID_RECORD, whatever the batch's error
    assert [e.code() for e in errors] == [
        KafkaError.INVALID_RECORD if i in late else KafkaError._INVALID_DIFFERENT_RECORD for i in range(N)
    ]


def test_kafka_python_fails_the_keyless_records_with_the_broker_message(module_broker, api):
    from kafka.errors import InvalidRecordError, KafkaError

    bs = module_broker.bootstrap_servers
    topic = new_topic(api, cleanup_policy="compact")
    errors = send_kafka_python(bs, topic, keyless_batch())
    for i, e in enumerate(errors):
        if i in KEYLESS:
            assert type(e) is InvalidRecordError and str(e).endswith(no_key_message(topic)), (i, e)
        else:
            assert type(e) is KafkaError and "part of a batch which had one more more invalid records" in str(e), (i, e)
    assert log_of(bs, topic) == []


def test_kafka_python_fails_the_record_with_a_bad_timestamp(module_broker, api):
    from kafka.errors import InvalidTimestampError, KafkaError

    bs = module_broker.bootstrap_servers
    topic = new_topic(api)
    now = int(time.time() * 1000)
    errors = send_kafka_python(bs, topic, [(b"k", b"v", now + 2 * HOUR if i == 4 else now) for i in range(10)])
    # one record error: kafka-python raises the batch's error class with that record's message
    assert type(errors[4]) is InvalidTimestampError and "of message with offset 4 is out of range" in str(errors[4])
    assert all(type(e) is KafkaError for i, e in enumerate(errors) if i != 4)


def test_aiokafka_fails_the_whole_batch(module_broker, api):
    # aiokafka reads record_errors but does not use them (nor knows INVALID_RECORD's code)
    from aiokafka.errors import InvalidTimestampError, UnknownError

    bs = module_broker.bootstrap_servers
    topic = new_topic(api, cleanup_policy="compact")
    assert {type(e) for e in send_aiokafka(bs, topic, keyless_batch())} == {UnknownError}
    now = int(time.time() * 1000)
    topic = new_topic(api)
    errors = send_aiokafka(bs, topic, [(b"k", b"v", now + 2 * HOUR if i == 4 else now) for i in range(10)])
    assert {type(e) for e in errors} == {InvalidTimestampError}
    assert log_of(bs, topic) == []
