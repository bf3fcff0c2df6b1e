"""Soak: repeated SIGKILLs under load (``make slow``).

A producer (confluent-kafka, idempotent, acks=all) writes to several partitions of topics
with small segments while the broker is killed with SIGKILL again and again and restarted
on the same data. At the end every acknowledged record is in the log exactly once, at the
offset its delivery report gave, and the log recovers with no corruption reported.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.testing.broker import Broker

pytestmark = pytest.mark.slow

CYCLES = int(os.environ.get("KESQUE_SOAK_CYCLES", "15"))
PARTITIONS = 4


def test_repeated_sigkill_under_load_loses_nothing_acknowledged(tmp_path):
    broker = Broker(data_dir=str(tmp_path / "data"), config={"log.segment.bytes": 1048576})
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("soak", PARTITIONS, 1)])["soak"].result(30)

    acked: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            with lock:
                key = (msg.partition(), msg.offset())
                assert key not in acked, f"offset {key} acknowledged twice"
                acked[key] = msg.value()

    def produce():
        p = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 120000,
                "reconnect.backoff.max.ms": 200,
            }
        )
        i = 0
        while not stop.is_set():
            try:
                p.produce(
                    "soak", value=b"%08d-" % i + os.urandom(200), partition=i % PARTITIONS, on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(120)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    rng = random.Random(7)
    try:
        for _ in range(CYCLES):
            time.sleep(rng.uniform(0.3, 1.5))
            broker.kill()
            broker.start()
    finally:
        stop.set()
        t.join(180)
    assert not t.is_alive(), "producer did not finish"
    assert len(acked) > 1000

    # everything acknowledged is there, once, at its offset
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "soak-check", "enable.auto.commit": False})
    found: dict[tuple[int, int], bytes] = {}
    ends = {}
    for p in range(PARTITIONS):
        _lo, hi = c.get_watermark_offsets(TopicPartition("soak", p), timeout=30)
        ends[p] = hi
    c.assign([TopicPartition("soak", p, 0) for p in range(PARTITIONS)])
    deadline = time.time() + 120
    while sum(1 for _ in found) < sum(ends.values()) and time.time() < deadline:
        for m in c.consume(10000, 1.0):
            assert m.error() is None, m.error()
            found[(m.partition(), m.offset())] = m.value()
    c.close()
    missing = [k for k in acked if found.get(k) != acked[k]]
    assert not missing, f"{len(missing)} acknowledged records missing or different, e.g. {missing[:5]}"
    values = list(found.values())
    assert len(values) == len(set(values)), "a record was written twice (idempotence broken)"

    log = open(broker.log_path, errors="replace").read()
    # SIGKILL is not a power cut: the page cache keeps every completed write, so recovery
    # must find nothing to truncate
    assert "Found invalid messages" not in log
    assert log.count("recovering") >= CYCLES
    broker.stop()
    broker.close()
