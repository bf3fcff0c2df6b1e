"""Byte-rate quotas hold real clients (confluent-kafka) to their rate.

These are rate assertions, with wide tolerances, and deliberately so: the rate a throttled
client gets is the broker's own arithmetic (Kafka's sampled window and throttle formula),
not the machine's speed — a slow machine can only make a client slower than its quota, and
the unthrottled client is checked to be faster than the quota, not to reach any speed. The
brokers keep two 1 s samples (see SHORT_WINDOW); the default-suite run measures 5 s within
30%, the slow one 20 s within 15%.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from conftest import running_broker
from wire import Api, WireClient

MB = 1_000_000
# two samples of 1 s: a client's rate is measured over 1-2 s, so a flat-out client bursts at
# most ~1 s of quota. With Kafka's default 11 samples it may burst ~10 s of quota each time
# its oldest sample expires (every ~11 s): the average holds, but only over minutes.
SHORT_WINDOW = {"quota.window.num": 2}
PAYLOAD = b"x" * 1000


def set_quota(bootstrap: str, client_id: str, key: str, value: int) -> None:
    with WireClient(bootstrap) as c:
        r = Api(c).alter_client_quotas([({"client-id": client_id}, {key: value})])
        assert r.entries[0].error_code == 0


def produce_rate(bootstrap: str, topic: str, client_id: str, seconds: float, warmup: float = 1.0) -> float:
    """Bytes of record values per second acknowledged to a producer that sends flat out
    (after ``warmup``: the burst a fresh rate allows is not what is measured). Requests of
    at most 64 kB, so one request is a small part of a second's quota."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.kbytes": 2048,
            "batch.size": 65536,
        }
    )
    acked = [0]

    def on_delivery(err, msg):
        if err is None and start <= time.monotonic() < end:
            acked[0] += len(msg.value())

    start = time.monotonic() + warmup
    end = start + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, PAYLOAD, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(60)
    return acked[0] / seconds


def consume_rate(bootstrap: str, topic: str, client_id: str, seconds: float, warmup: float = 1.0) -> float:
    """Bytes of record values per second a consumer reading from the start gets (after
    ``warmup`` from its first record), fetching at most 64 kB per partition."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 65536,
        }
    )
    c.subscribe([topic])
    got = 0
    first = None
    try:
        while first is None or time.monotonic() < first + seconds:
            msg = c.poll(0.1)
            if msg is None or msg.error():
                continue
            if first is None:
                first = time.monotonic() + warmup  # joining the group and the first burst are not measured
            if time.monotonic() >= first:
                got += len(msg.value())
    finally:
        c.close()
    return got / seconds


def fill(bootstrap: str, topic: str, nbytes: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.kbytes": 65536})
    for _ in range(nbytes // len(PAYLOAD)):
        while True:
            try:
                p.produce(topic, PAYLOAD)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def check_rates(bootstrap: str, topic: str, seconds: float, tolerance: float) -> None:
    with WireClient(bootstrap) as c:
        Api(c).create_topic(topic)
    set_quota(bootstrap, "capped", "producer_byte_rate", MB)
    set_quota(bootstrap, "capped", "consumer_byte_rate", MB)
    rate = produce_rate(bootstrap, topic, "capped", seconds)
    assert abs(rate - MB) <= tolerance * MB, f"produced at {rate / MB:.2f} MB/s under a 1 MB/s quota"
    assert produce_rate(bootstrap, topic, "free", 2, 0) > 2 * MB  # another client id is not held back
    fill(bootstrap, topic, int((seconds + 8) * MB))
    rate = consume_rate(bootstrap, topic, "capped", seconds)
    assert abs(rate - MB) <= tolerance * MB, f"consumed at {rate / MB:.2f} MB/s under a 1 MB/s quota"
    assert consume_rate(bootstrap, topic, "free", 1, 0) > 2 * MB


def test_byte_rate_quotas_hold_clients_to_their_rate(tmp_path, topic_name):
    with running_broker(tmp_path / "data", SHORT_WINDOW) as broker:
        check_rates(broker.bootstrap_servers, topic_name, 5, 0.3)


@pytest.mark.slow
def test_byte_rate_quotas_over_20_seconds(tmp_path, topic_name):
    with running_broker(tmp_path / "data", SHORT_WINDOW) as broker:
        check_rates(broker.bootstrap_servers, topic_name, 20, 0.15)
