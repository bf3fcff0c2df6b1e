"""Metadata commit latency: CreateTopics round trip on 1 and on 3 controllers.

    .venv/bin/python bench/quorum_latency.py --topics 50

One topic (1 partition) per request, each awaited. On one node the commit is a local flush.
On three combined nodes (``controller.quorum.voters`` naming all three, Kafka's default
quorum timeouts) it is measured twice: sent to the active controller's node, and to a
standby's broker listener, which forwards it to the active controller; the answer comes once
a majority holds the records (``controller.quorum.append.linger.ms``: Kafka's 25 ms by
default, 0 for a lone voter). Also the time from SIGKILL of the active controller to the
first successful CreateTopics (one run; the issue's p50/p99 over 20 runs is not measured here).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from kesque.testing.broker import Broker  # noqa: E402
from test_quorum_cluster import Nodes, create  # noqa: E402
from wire import Api, WireClient  # noqa: E402


def latencies(port: int, prefix: str, n: int) -> list[float]:
    out = []
    with WireClient(("127.0.0.1", port)) as c:
        api = Api(c)
        for i in range(n):
            t = time.perf_counter()
            r = create(api, f"{prefix}-{i}", partitions=1, rf=1)
            out.append(time.perf_counter() - t)
            assert r.error_code == 0, r
    return out


def show(name: str, xs: list[float]) -> None:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    print(f"{name:<42} p50 {statistics.median(xs) * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   (n={len(xs)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument(
        "--quorum",
        default="default",
        choices=("default", "test"),
        help="Kafka's default quorum timeouts, or the tests' short ones",
    )
    args = ap.parse_args()
    with Broker() as b:
        show("1 controller", latencies(b.port, "one", args.topics))
    import test_quorum_cluster as tq

    if args.quorum == "default":
        tq.FAST_QUORUM.clear()
    nodes = Nodes(3)
    try:
        nodes.start()
        leader = nodes.leader()
        standby = next(i for i in range(3) if i + 1 != leader)
        show("3 controllers, via the active one", latencies(nodes.brokers[leader - 1].port, "lead", args.topics))
        show("3 controllers, via a standby (forwarded)", latencies(nodes.brokers[standby].port, "fwd", args.topics))
        t0 = time.perf_counter()
        nodes.brokers[leader - 1].kill()
        with WireClient(("127.0.0.1", nodes.brokers[standby].port), timeout=60) as c:
            r = create(Api(c), "after-failover", partitions=1, rf=1, timeout_ms=30000)
        print(
            f"{'SIGKILL of the active controller -> created':<42} {time.perf_counter() - t0:.2f} s "
            f"(error {int(r.error_code)}, {args.quorum} quorum timeouts)"
        )
    finally:
        nodes.close()


if __name__ == "__main__":
    main()
