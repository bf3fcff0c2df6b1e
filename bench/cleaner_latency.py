"""Produce latency while the log cleaner works, against the same broker idle (bar: p99 at most 2x).

    .venv/bin/python bench/cleaner_latency.py --mib 256

A topic ``big`` is filled (``cleanup.policy=delete``, 10 % distinct keys); one producer then
sends single records to ``lat`` (acks=all, one in flight, each awaited) and its latencies are
taken while the broker is idle, then again from the moment ``big`` is altered to
``cleanup.policy=compact`` until the broker logs that its cleaning finished.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402
from confluent_kafka.admin import ResourceType  # noqa: E402

from kesque.testing.broker import Broker  # noqa: E402


def fill(bootstrap: str, mib: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 1 << 20})
    value = os.urandom(50).hex().encode()
    n = (mib << 20) // 130
    distinct = max(1, n // 10)
    for i in range(n):
        while True:
            try:
                p.produce("big", key=b"k%d" % (i % distinct), value=value)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)


def latencies(bootstrap: str, until, min_count: int = 200) -> list[float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "max.in.flight.requests.per.connection": 1})
    out: list[float] = []
    while len(out) < min_count or not until():
        t0 = time.perf_counter()
        p.produce("lat", value=b"x" * 100)
        p.flush(10)
        out.append((time.perf_counter() - t0) * 1000)
        if len(out) > 200000:
            break
    return out


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        with Broker(data_dir=os.path.join(d, "data"), config={"log.cleaner.backoff.ms": "100"}) as b:
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            for f in admin.create_topics([NewTopic("big", 1, 1, config={"segment.bytes": str(16 << 20)}),
                                          NewTopic("lat", 1, 1)]).values():
                f.result()
            fill(b.bootstrap_servers, args.mib)
            idle = latencies(b.bootstrap_servers, lambda: True, 2000)
            res = ConfigResource(ResourceType.TOPIC, "big", incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([res]).values():
                f.result()
            t0 = time.perf_counter()

            def cleaned() -> bool:
                with open(b.log_path) as f:
                    return "Log cleaner finished big-0" in f.read()

            busy = latencies(b.bootstrap_servers, cleaned, 1)
            took = time.perf_counter() - t0
        print(f"big: {args.mib} MiB, cleaned in {took:.1f} s")
        print(f"idle      produce p99 {p99(idle):7.2f} ms  median {sorted(idle)[len(idle) // 2]:6.2f} ms  "
              f"({len(idle)} sends)")
        print(f"cleaning  produce p99 {p99(busy):7.2f} ms  median {sorted(busy)[len(busy) // 2]:6.2f} ms  "
              f"({len(busy)} sends)   ratio {p99(busy) / p99(idle):.2f} (bar 2.00)")


if __name__ == "__main__":
    main()
