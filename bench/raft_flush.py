"""The metadata log's fsync off the event loop: what a slow disk does to the other requests.

    .venv/bin/python bench/raft_flush.py --delay-ms 50 --seconds 10

One node (a lone voter). A client creates topics one after another (each CreateTopics waits for
its raft commit, hence for a flush), while another measures ApiVersions round trips on its own
connection. Each raft flush first sleeps ``--delay-ms`` (a slow disk, the bench-only
``KESQUE_TEST_RAFT_FLUSH_DELAY_MS``). Run twice: the fsync in the raft manager's worker thread
(as kesque runs it), and on the event loop (``KESQUE_TEST_RAFT_FLUSH_ON_LOOP=1``, as before
issue 13 item 4). Prints the ApiVersions p50/p99 and the commit p50 of each, and their ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from kesque.testing.broker import Broker  # noqa: E402
from wire import Api, WireClient  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def measure(on_loop: bool, delay_ms: int, seconds: float) -> dict:
    os.environ["KESQUE_TEST_RAFT_FLUSH_DELAY_MS"] = str(delay_ms)
    os.environ["KESQUE_TEST_RAFT_FLUSH_ON_LOOP"] = "1" if on_loop else "0"
    commits: list[float] = []
    pings: list[float] = []
    with Broker() as b:
        addr = ("127.0.0.1", b.port)
        stop = threading.Event()

        def create():
            with WireClient(addr, timeout=60) as c:
                api, i = Api(c), 0
                while not stop.is_set():
                    t = time.perf_counter()
                    r = api.create_topics([{"name": f"t-{i}"}]).topics[0]
                    commits.append(time.perf_counter() - t)
                    assert r.error_code == 0, r
                    i += 1

        th = threading.Thread(target=create, daemon=True)
        th.start()
        with WireClient(addr, timeout=60) as c:
            api = Api(c)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                t = time.perf_counter()
                api.api_versions()
                pings.append(time.perf_counter() - t)
                time.sleep(0.002)
        stop.set()
        th.join(60)
    return {
        "ping_p50": pct(pings, 0.5),
        "ping_p99": pct(pings, 0.99),
        "pings": len(pings),
        "commit_p50": statistics.median(commits) * 1000,
        "commits": len(commits),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delay-ms", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    res = {mode: measure(mode == "on the loop", a.delay_ms, a.seconds) for mode in ("worker thread", "on the loop")}
    for mode, r in res.items():
        print(
            f"fsync {mode:13s} (+{a.delay_ms} ms per flush): ApiVersions p50 {r['ping_p50']:.2f} ms, "
            f"p99 {r['ping_p99']:.2f} ms ({r['pings']} sent); CreateTopics p50 {r['commit_p50']:.1f} ms "
            f"({r['commits']} committed)"
        )
    t, lp = res["worker thread"], res["on the loop"]
    print(
        f"ratio on-loop / worker thread: ApiVersions p50 {lp['ping_p50'] / t['ping_p50']:.1f}x, "
        f"p99 {lp['ping_p99'] / t['ping_p99']:.1f}x; CreateTopics p50 {lp['commit_p50'] / t['commit_p50']:.2f}x"
    )


if __name__ == "__main__":
    main()
