"""The many-partitions figures (issue 14): descriptors per partition and the time a broker
with 10,000 partitions (2,000 topics of 5, one small segment each) takes to recover after
SIGKILL, against a clean restart of the same data measured in the same run. Each function
drives a broker; nothing here asserts on timing. See bench/README.md, "Recovery".
"""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS_PER_TOPIC = 5


def topics_for(partitions: int) -> list[str]:
    return [f"rec{i:05d}" for i in range(partitions // PARTITIONS_PER_TOPIC)]


def fill(bootstrap: str, topics: list[str]) -> dict:
    """Create the topics (200 per request) and produce one 100-byte record per partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.perf_counter()
    for i in range(0, len(topics), 200):
        futs = admin.create_topics(
            [NewTopic(t, PARTITIONS_PER_TOPIC, 1) for t in topics[i : i + 200]], operation_timeout=60
        )
        for f in futs.values():
            f.result(120)
    created = time.perf_counter() - t0
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    for t in topics:
        for part in range(PARTITIONS_PER_TOPIC):
            p.produce(t, b"x" * 100, partition=part)
        p.poll(0)
    left = p.flush(120)
    return {"create_seconds": created, "undelivered": left}


def restart_seconds(broker, kill: bool) -> float:
    """Stop (SIGKILL or SIGTERM) and start again; seconds until the broker serves."""
    if kill:
        broker.kill()
    else:
        broker.stop(600)
    t0 = time.perf_counter()
    broker.start(1800)
    return time.perf_counter() - t0
