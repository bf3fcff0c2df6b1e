"""Produce latency while the log cleaner works, against the same broker idle (bar: p99 at most 2x).

    .venv/bin/python bench/cleaner_latency.py                      # 4 cleanings of 256 MiB
    .venv/bin/python bench/cleaner_latency.py --mib 512 --cleanings 6 --throttle 100

Topics ``big-0`` .. ``big-<n-1>`` are filled (``cleanup.policy=delete``, 10 % distinct keys); one
producer then sends single records to ``lat`` (acks=all, one in flight, each awaited) in
interleaved passes: idle (``--idle-sends``), then from the moment ``big-<i>`` is altered to
``cleanup.policy=compact`` until the broker logs that its cleaning finished, then idle again,
and so on. With ``--throttle`` every other cleaning runs under
``log.cleaner.io.max.bytes.per.second`` (MB/s), which stretches its window. The idle and the
cleaning samples are pooled over the passes too. The figure is the median over the cleaning
passes of each pass's p99 against the same over the idle passes: on a shared machine one pass
may fall into someone else's burst (an idle pass as well as a cleaning one), and the median
of several interleaved passes is what stays put from run to run; the pooled p99 and p99.9
are printed beside it. The load average is taken at every pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,  # noqa: E402
)

from kesque.testing.broker import Broker  # noqa: E402


def fill(bootstrap: str, topics: list[str], mib: int) -> None:
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20}
    )
    value = os.urandom(50).hex().encode()
    n = (mib << 20) // 130
    distinct = max(1, n // 10)
    for i in range(n):
        for topic in topics:
            while True:
                try:
                    p.produce(topic, key=b"k%d" % (i % distinct), value=value)
                    break
                except BufferError:
                    p.poll(0.01)
    p.flush(300)


class LogTail:
    """The broker log, read from where the last look stopped (not the whole file each time)."""

    def __init__(self, path: str):
        self.f = open(path, errors="replace")
        self.f.seek(0, os.SEEK_END)
        self.seen = ""

    def has(self, text: str) -> bool:
        self.seen = self.seen[-len(text) :] + self.f.read()
        return text in self.seen


class Sender:
    """One producer, kept across the passes (its connection and metadata are warm)."""

    def __init__(self, bootstrap: str):
        self.p = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "max.in.flight.requests.per.connection": 1}
        )
        self.send(50)

    def send(self, min_count: int, until=lambda: True, check_every: int = 20) -> list[float]:
        out: list[float] = []
        while len(out) < min_count or len(out) % check_every or not until():
            t0 = time.perf_counter()
            self.p.produce("lat", value=b"x" * 100)
            self.p.flush(10)
            out.append((time.perf_counter() - t0) * 1000)
        return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def alter(admin: AdminClient, rtype, name: str, key: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(rtype, name, incremental_configs=[ConfigEntry(key, value or "", incremental_operation=op)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result()


def row(label: str, xs: list[float], load: float, extra: str = "") -> str:
    return (
        f"{label:<22} p99 {pct(xs, 0.99):7.2f} ms  p50 {pct(xs, 0.5):6.2f} ms  p99.9 {pct(xs, 0.999):7.2f} ms  "
        f"max {max(xs):7.2f} ms  "
        f"{len(xs):6d} sends  load {load:5.2f}  {extra}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="size of each topic cleaned")
    ap.add_argument("--cleanings", type=int, default=4)
    ap.add_argument("--idle-sends", type=int, default=1500)
    ap.add_argument("--throttle", type=float, default=0, help="MB/s for every other cleaning (0: none)")
    ap.add_argument("--config", action="append", default=[], help="broker config key=value")
    args = ap.parse_args()
    topics = [f"big-{i}" for i in range(args.cleanings)]
    config = {"log.cleaner.backoff.ms": "100", **dict(c.split("=", 1) for c in args.config)}
    idle: list[float] = []
    busy: list[float] = []
    passes: dict[str, list[float]] = {"idle": [], "cleaning": []}  # p99 of each pass
    with tempfile.TemporaryDirectory() as d:
        with Broker(data_dir=os.path.join(d, "data"), config=config) as b:
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            new = [NewTopic(t, 1, 1, config={"segment.bytes": str(16 << 20)}) for t in topics]
            for f in admin.create_topics(new + [NewTopic("lat", 1, 1)]).values():
                f.result()
            t0 = time.perf_counter()
            fill(b.bootstrap_servers, topics, args.mib)
            print(
                f"filled {args.cleanings} x {args.mib} MiB in {time.perf_counter() - t0:.1f} s; "
                f"load at start {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            sender = Sender(b.bootstrap_servers)
            tail = LogTail(b.log_path)
            for i, topic in enumerate(topics):
                xs = sender.send(args.idle_sends)
                idle += xs
                passes["idle"].append(pct(xs, 0.99))
                print(row("idle", xs, os.getloadavg()[0]), flush=True)
                throttled = args.throttle > 0 and i % 2 == 1
                if args.throttle > 0:
                    alter(
                        admin,
                        ResourceType.BROKER,
                        b.config["node.id"],
                        "log.cleaner.io.max.bytes.per.second",
                        str(args.throttle * 1e6) if throttled else None,
                    )
                alter(admin, ResourceType.TOPIC, topic, "cleanup.policy", "compact")
                t0 = time.perf_counter()
                xs = sender.send(1, lambda: tail.has(f"Log cleaner finished {topic}-0"))
                busy += xs
                passes["cleaning"].append(pct(xs, 0.99))
                label = f"cleaning {topic}" + (" (thr)" if throttled else "")
                print(row(label, xs, os.getloadavg()[0], f"{time.perf_counter() - t0:.1f} s"), flush=True)
            xs = sender.send(args.idle_sends)
            idle += xs
            passes["idle"].append(pct(xs, 0.99))
            print(row("idle", xs, os.getloadavg()[0]), flush=True)
    print(row("ALL idle", idle, os.getloadavg()[0]))
    print(row("ALL cleaning", busy, os.getloadavg()[0]))
    print(
        f"ratio of the median pass p99, cleaning / idle {median(passes['cleaning']) / median(passes['idle']):.2f} "
        f"(bar 2.00)   pooled p99 {pct(busy, 0.99) / pct(idle, 0.99):.2f}   "
        f"pooled p99.9 {pct(busy, 0.999) / pct(idle, 0.999):.2f}"
    )


if __name__ == "__main__":
    main()
