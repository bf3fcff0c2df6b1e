"""What Prometheus metrics cost on kesque (issue 29), as ratios of figures measured in the same
run. A benchmark, not a test: it prints and asserts nothing on timing.

onoff   Two brokers at once, one with ``metrics.listener`` (scraped every ``--interval`` seconds
        by a thread of this process for the whole run: Prometheus' default is 15 s, 1 s is
        harsher) and one without (no counters are kept there: the request path checks one
        attribute). Passes alternate between them, best of N each:
        small   run.py's small-request rate: pre-encoded 1-record ProduceRequests of 100 B on
                one raw socket, window 64;
        produce confluent-kafka, 1 KiB records (run.py's produce settings).
        The order of the two turns every pass (the second of two runs writes while the page
        cache still flushes the first's data). Bar: on/off >= 98% for both. Beside the rates,
        requests (MB) per broker CPU-second (median of the passes), steadier on a machine shared
        with other work; and
        the messages-in the scrape shows for the topics, against what was produced.
loopcpu The event-loop thread's own CPU per small request (time.thread_time), two brokers in
        this process, metrics on (never scraped) and off, rounds alternating, medians: what the
        counters cost, without the machine's other work in the figure. The ratio off/on (loop
        CPU per request without metrics over with) is given twice: of the two medians, and the
        median of each pass's own off/on (its two rounds ran back to back, so the machine's
        drift over the run moves it less). This machine's VM exposes no instruction counter
        (perf: instructions not supported), so CPU time is the steadiest figure here.
scrape  A broker with ``--partitions`` partitions (10,000): the scrape's wall time (best and
        median of 5), the broker's CPU per scrape, its size (plain and gzip), and how long it
        held the broker's event loop
        in all and at the longest (``kesque_metrics_snapshot_seconds``,
        ``kesque_metrics_snapshot_longest_hold_seconds``, measured inside the broker: the
        partitions are copied 1,000 per turn of the loop).

    python bench/metrics.py [--quick] [--only onoff,loopcpu,scrape] [--passes N] [--partitions N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import figures  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from run import proc_cpu_seconds  # noqa: E402

from kesque.testing.broker import Broker  # noqa: E402
from kesque.testing.kafka import free_port  # noqa: E402

SCALES = {
    "full": {"small_requests": 100_000, "records": 300_000, "passes": 6},
    "quick": {"small_requests": 20_000, "records": 50_000, "passes": 1},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def start_broker(name: str, data_dir: str, config: dict) -> Broker:
    d = tempfile.mkdtemp(prefix=f"kesque-bench-{name}-", dir=data_dir)
    b = Broker(data_dir=d, config={"log.dirs": d, "auto.create.topics.enable": "false", **config})
    b.start(120)
    return b


def fetch(port: int, gzipped: bool = False) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if gzipped:
        req.add_header("Accept-Encoding", "gzip")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def samples(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


class Scraper(threading.Thread):
    """Scrapes ``port`` every ``interval`` s until stopped (as Prometheus would)."""

    def __init__(self, port: int, interval: float):
        super().__init__(daemon=True)
        self.port, self.interval = port, interval
        self.stopping = threading.Event()
        self.count = 0
        self.failures = 0

    def run(self):
        while not self.stopping.wait(self.interval):
            try:
                fetch(self.port)
                self.count += 1
            except OSError:
                self.failures += 1


# ================================================================== onoff


def onoff(args, sc) -> dict:
    port = free_port()
    brokers: dict[str, Broker] = {}
    scraper = None
    try:
        brokers["off"] = start_broker("metrics-off", args.data_dir, {})
        brokers["on"] = start_broker("metrics-on", args.data_dir, {"metrics.listener": f"http://127.0.0.1:{port}"})
        for b in brokers.values():
            figures.create_topic(b.bootstrap_servers, "bench-small", 1)
            figures.warm_up_consumer_path(b.bootstrap_servers)
        scraper = Scraper(port, args.interval)
        scraper.start()
        n, records = sc["small_requests"], sc["records"]
        small: dict[str, dict] = {}
        produce: dict[str, dict] = {}
        per_cpu: dict[str, dict[str, list]] = {"small": {}, "produce": {}}
        for p in range(args.passes):
            # the order turns every pass: the second of two runs writes while the page cache
            # still flushes the first's data, which would always count against one side
            order = list(brokers.items()) if p % 2 == 0 else list(reversed(brokers.items()))
            for name, b in order:
                log(f"onoff: {n:,} 1-record ProduceRequests, window 64, metrics {name}, pass {p + 1}/{args.passes} ...")
                cpu = proc_cpu_seconds(b.process.pid)
                r = figures.small_raw(b.bootstrap_servers, "bench-small", n)
                r["per_cpu_second"] = n / (proc_cpu_seconds(b.process.pid) - cpu)
                log(
                    f"  {r['rate']:,.0f} req/s, {r['per_cpu_second']:,.0f} per broker CPU-second, "
                    f"first answer's errors {r['first_response_errors']}"
                )
                if name not in small or r["rate"] > small[name]["rate"]:
                    small[name] = r
                per_cpu["small"].setdefault(name, []).append(r["per_cpu_second"])
            for name, b in order:
                t = f"bench-produce-{p}"
                figures.create_topic(b.bootstrap_servers, t, args.produce_partitions)
                log(f"onoff: produce {records:,} x 1 KiB, metrics {name}, pass {p + 1}/{args.passes} ...")
                cpu = proc_cpu_seconds(b.process.pid)
                r = figures.produce_confluent(b.bootstrap_servers, t, records)
                r["mb_per_cpu_second"] = records * 1024 / 1e6 / (proc_cpu_seconds(b.process.pid) - cpu)
                log(
                    f"  {r['mb_s']:.0f} MB/s, {r['mb_per_cpu_second']:.0f} MB per broker CPU-second, "
                    f"errors {r['errors'][:2]}"
                )
                if name not in produce or r["mb_s"] > produce[name]["mb_s"]:
                    produce[name] = r
                per_cpu["produce"].setdefault(name, []).append(r["mb_per_cpu_second"])
        scraper.stopping.set()
        s = samples(fetch(port).decode())
        shown = {
            "small_messages_in": s.get(
                ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "bench-small"),))
            ),
            "small_expected": n * args.passes,
            "produce_messages_in": sum(
                s.get(("kafka_server_brokertopicmetrics_messagesin_total", (("topic", f"bench-produce-{p}"),)), 0)
                for p in range(args.passes)
            ),
            "produce_expected": records * args.passes,
        }
    finally:
        if scraper is not None:
            scraper.stopping.set()
        for b in brokers.values():
            b.stop(30)
            b.close()
    keep = ("rate", "seconds", "mb_s", "errors", "undelivered", "first_response_errors")
    return {
        "passes": args.passes,
        "scrape_interval_s": args.interval,
        "scrapes": scraper.count,
        "scrape_failures": scraper.failures,
        "small_requests": n,
        "small_rate_off": small["off"]["rate"],
        "small_rate_on": small["on"]["rate"],
        "small_ratio": small["on"]["rate"] / small["off"]["rate"],
        "records": records,
        "produce_mb_s_off": produce["off"]["mb_s"],
        "produce_mb_s_on": produce["on"]["mb_s"],
        "produce_ratio": produce["on"]["mb_s"] / produce["off"]["mb_s"],
        # per broker CPU-second: the median of the passes (a rate's best pass is the least
        # disturbed one; CPU per request drifts with the machine's load both ways)
        "small_per_cpu_second": {k: statistics.median(v) for k, v in per_cpu["small"].items()},
        "small_cpu_ratio": statistics.median(per_cpu["small"]["on"]) / statistics.median(per_cpu["small"]["off"]),
        "produce_mb_per_cpu_second": {k: statistics.median(v) for k, v in per_cpu["produce"].items()},
        "produce_cpu_ratio": statistics.median(per_cpu["produce"]["on"]) / statistics.median(per_cpu["produce"]["off"]),
        "per_cpu_passes": per_cpu,
        "shown": shown,
        "small": {k: {x: v[x] for x in keep if x in v} for k, v in small.items()},
        "produce": {k: {x: v[x] for x in keep if x in v} for k, v in produce.items()},
    }


# ================================================================== loopcpu


def loopcpu(args, sc) -> dict:
    """The event-loop thread's own CPU time per small request (``time.thread_time`` read on the
    loop), two brokers in this process (``Broker(mode="thread")``), metrics on (never scraped)
    and off, the requests sent by a child process; rounds alternate, median of each side. Less
    disturbed by the machine's other work than a rate: time the loop waits for a CPU is not
    counted."""
    n = sc["small_requests"] // 4
    brokers = {
        "off": Broker(mode="thread", config={"auto.create.topics.enable": "false"}).start(60),
        "on": Broker(
            mode="thread",
            config={"auto.create.topics.enable": "false", "metrics.listener": f"http://127.0.0.1:{free_port()}"},
        ).start(60),
    }

    def loop_cpu(b: Broker) -> float:
        done, out = threading.Event(), []
        b._loop.call_soon_threadsafe(lambda: (out.append(time.thread_time()), done.set()))
        done.wait(10)
        return out[0]

    per_request: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for b in brokers.values():
            figures.create_topic(b.bootstrap_servers, "bench-small", 1)
        send = "import sys; sys.path[:0] = {!r}; import figures; figures.small_raw({!r}, 'bench-small', {})"
        for p in range(args.passes * 2):
            order = list(brokers.items()) if p % 2 == 0 else list(reversed(brokers.items()))
            for name, b in order:
                t0 = loop_cpu(b)
                subprocess.run([sys.executable, "-c", send.format([REPO, HERE], b.bootstrap_servers, n)], check=True)
                per_request[name].append((loop_cpu(b) - t0) / n * 1e6)
                log(f"loopcpu: metrics {name}: {per_request[name][-1]:.1f} µs of loop CPU per request")
    finally:
        for b in brokers.values():
            b.stop(30)
            b.close()
    off, on = statistics.median(per_request["off"]), statistics.median(per_request["on"])
    # each pass ran both brokers back to back: its own off/on, whose median follows the machine's
    # drift less than the ratio of the two medians
    paired = [o / m for o, m in zip(per_request["off"], per_request["on"])]
    return {
        "requests_per_round": n,
        "rounds": args.passes * 2,
        "loop_us_per_request_off": off,
        "loop_us_per_request_on": on,
        "added_us_per_request": on - off,
        "ratio": off / on,  # requests per loop CPU-second, on against off
        "paired_ratio": statistics.median(paired),
        "paired_ratios": paired,
        "rounds_us": per_request,
    }


# ================================================================== scrape


def scrape(args, sc) -> dict:
    port = free_port()
    b = start_broker("metrics-scrape", args.data_dir, {"metrics.listener": f"http://127.0.0.1:{port}"})
    try:
        per_topic = 1000
        topics = max(1, args.partitions // per_topic)
        t0 = time.perf_counter()
        for i in range(topics):
            figures.create_topic(b.bootstrap_servers, f"wide-{i}", min(per_topic, args.partitions))
        log(f"scrape: {topics * min(per_topic, args.partitions):,} partitions in {time.perf_counter() - t0:.0f} s")
        fetch(port)  # the first one builds the per-class caches
        walls, loop, longest, sizes = [], [], [], []
        cpu = proc_cpu_seconds(b.process.pid)
        for _ in range(5):
            t = time.perf_counter()
            body = fetch(port)
            walls.append(time.perf_counter() - t)
            sizes.append(len(body))
            s = samples(body.decode())
            loop.append(s[("kesque_metrics_snapshot_seconds", ())])
            longest.append(s[("kesque_metrics_snapshot_longest_hold_seconds", ())])
        cpu_per_scrape = (proc_cpu_seconds(b.process.pid) - cpu) / 5
        gz = len(fetch(port, gzipped=True))
        partitions = s[("kafka_server_replicamanager_partitioncount", ())]
        series = len(s)
    finally:
        b.stop(60)
        b.close()
    return {
        "partitions": int(partitions),
        "series": series,
        "scrape_seconds_best": min(walls),
        "scrape_seconds_median": statistics.median(walls),
        "loop_seconds_best": min(loop),
        "loop_seconds_median": statistics.median(loop),
        "longest_hold_seconds_best": min(longest),
        "longest_hold_seconds_median": statistics.median(longest),
        "broker_cpu_seconds_per_scrape": cpu_per_scrape,
        "bytes": sizes[-1],
        "bytes_gzip": gz,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="onoff,loopcpu,scrape")
    ap.add_argument("--passes", type=int)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--produce-partitions", type=int, default=4)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes during onoff")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    sc = dict(SCALES["quick" if args.quick else "full"])
    args.passes = args.passes or sc["passes"]
    args.data_dir = args.data_dir or tempfile.mkdtemp(prefix="kesque-bench-metrics-")
    out = {}
    for name in args.only.split(","):
        out[name] = {"onoff": onoff, "loopcpu": loopcpu, "scrape": scrape}[name](args, sc)
        log(json.dumps(out[name], indent=2, default=str))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "metrics.json"), "w") as f:
        json.dump(out, f, indent=2, default=str)
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
