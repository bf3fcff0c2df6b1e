"""The exactly-once figures (issue 5): transactional produce throughput for transactions of
1, 100 and 10,000 records, against plain (non-transactional, acks=all) produce of the same
records measured in the same run. Each function drives an already-running broker and
returns measurements; nothing here asserts on timing. See bench/README.md, "Transactions".
"""

from __future__ import annotations

import time
import uuid

import figures
from confluent_kafka import Producer

VALUE = b"x" * 100


def plain_rate(bootstrap: str, topic: str, records: int, partitions: int) -> dict:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    dt, left = figures.timed_produce(p, topic, [VALUE], records, partitions)
    return {"records": records, "seconds": dt, "rate": records / dt, "undelivered": left}


def txn_rate(
    bootstrap: str, topic: str, txn_size: int, records: int, partitions: int, min_seconds: float = 3.0
) -> dict:
    """Transactions of ``txn_size`` records, back to back, for ``records`` records (at least
    one transaction; stops early after ``min_seconds`` when transactions are slow)."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "bench-" + uuid.uuid4().hex[:8],
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    p.init_transactions(30)
    done = txns = 0
    t0 = time.perf_counter()
    while done < records:
        p.begin_transaction()
        for i in range(txn_size):
            while True:
                try:
                    p.produce(topic, VALUE, partition=(done + i) % partitions)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
        done += txn_size
        txns += 1
        if txn_size < 100 and time.perf_counter() - t0 > min_seconds and txns >= 50:
            break
    dt = time.perf_counter() - t0
    return {
        "txn_size": txn_size,
        "transactions": txns,
        "records": done,
        "seconds": dt,
        "rate": done / dt,
        "txn_rate": txns / dt,
    }
