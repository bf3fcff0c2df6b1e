"""kesque benchmarks: figures and the machine limits they are compared with, measured in the
same run. A benchmark is not a test: it prints, it never fails on a timing (exit code 0
unless the harness itself breaks).

    python bench/run.py                 # full scale
    python bench/run.py --quick         # smoke scale
    python bench/run.py --only produce,latency
    python bench/run.py --quick --profile   # py-spy the broker of every group

Results: a table on stdout and bench/results/latest.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import socket
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

GROUPS = (
    "produce",
    "consume",
    "raw-produce",
    "small",
    "latency",
    "groups",
    "idempotence",
    "transactions",
    "spark",
    "recovery",
    "quotas",
    "share",
    "controller",
    "replication",
    "eos-apps",
)
# minutes of cluster restarts: only with --only controller / replication / eos-apps
OPT_IN = ("controller", "replication", "eos-apps")
SIDE_BY_SIDE = ("startup", "produce", "consume", "small", "latency")  # --against kafka (bench/sidebyside.py)

SCALES = {
    "full": {
        "records": 1_000_000,
        "disk_bytes": 1 << 30,
        "loopback_seconds": 1.5,
        "small_requests": 200_000,
        "small_confluent": 200_000,
        "echo_requests": 200_000,
        "latency_seconds": 20.0,
        "latency_warmup": 2.0,
        "passes": 3,
        "group_passes": 3,
        "sync_requests": 5000,
        "raw_commits": 100_000,
        "load_groups": 10_000,
        "idem_records": 1_000_000,
        "idem_passes": 5,
        "txn_records": 1_000_000,
        "spark_records": 1_000_000,
        "spark_latency_seconds": 30.0,
        "recovery_partitions": 10_000,
        "quota_seconds": 20.0,
        "quota_passes": 3,
        "share_records": 1_000_000,
        "share_passes": 3,
        "redelivery_passes": 5,
        "failover_runs": 20,
        "commit_requests": 200,
        "repl_records": 500_000,
        "repl_passes": 3,
        "catchup_bytes": 1 << 30,
        "eos_lines": 30_000,
        "copier_records": 100_000,
    },
    "quick": {
        "records": 50_000,
        "disk_bytes": 256 << 20,
        "loopback_seconds": 0.5,
        "small_requests": 20_000,
        "small_confluent": 20_000,
        "echo_requests": 20_000,
        "latency_seconds": 3.0,
        "latency_warmup": 0.5,
        "passes": 1,
        "group_passes": 1,
        "sync_requests": 1000,
        "raw_commits": 20_000,
        "load_groups": 1_000,
        "idem_records": 500_000,
        "idem_passes": 3,
        "txn_records": 200_000,
        "spark_records": 100_000,
        "spark_latency_seconds": 10.0,
        "recovery_partitions": 1_000,
        "quota_seconds": 5.0,
        "quota_passes": 2,
        "share_records": 200_000,
        "share_passes": 1,
        "redelivery_passes": 2,
        "failover_runs": 3,
        "commit_requests": 50,
        "repl_records": 200_000,
        "repl_passes": 1,
        "catchup_bytes": 128 << 20,
        "eos_lines": 5_000,
        "copier_records": 20_000,
    },
}

BARS = {  # figure -> (kind, threshold, text)
    "produce": ("ratio", 0.25, ">= 25%"),
    "raw-produce": ("ratio", 0.25, ">= 25% (info)"),
    "consume": ("ratio", 0.40, ">= 40%"),
    "small": ("ratio", 0.50, ">= 50%"),
    "latency": ("max", 5.0, "p99 <= 5 ms"),
    "kip848": ("below", 1.0, "< 1 s"),
    "classic": ("within", 0.5, "<= timers+0.5s"),  # value <= limit (the timers it waits on) + 0.5 s
    "commit": ("ratio", 0.50, ">= 50%"),
    "idempotence": ("ratio", 0.90, ">= 90%"),
    "quota-accuracy": ("band", 0.15, "within 15%"),
    "quota-cost": ("ratio", 0.95, ">= 95%"),
    "redelivery": ("within", 0.1, "<= lock+fetch+0.1s"),
    "replication-produce": ("ratio", 0.40, ">= 40%"),
    "controlled-shutdown": ("below", 1.0, "< 1 s"),
}


# ================================================================== setup


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke scale (50k records, 3 s latency run)")
    ap.add_argument("--only", default="", help=f"comma-separated figure groups: {','.join(GROUPS)}")
    ap.add_argument("--records", type=int, help="override the record count of the throughput figures")
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the throughput topics (default 4)")
    ap.add_argument(
        "--data-dir",
        default=tempfile.gettempdir(),
        help="parent directory of the brokers' data dirs and of the disk-write limit file",
    )
    ap.add_argument("--profile", action="store_true", help="sample each broker with py-spy, print hot functions")
    ap.add_argument(
        "--src",
        help="run brokers (and import kesque) from another source tree, e.g. a git "
        "export of a commit, instead of this checkout",
    )
    ap.add_argument(
        "--commit",
        help="run brokers from a clean `git archive` of this commit (e.g. HEAD) instead "
        "of the working tree, which may hold others' unfinished edits",
    )
    ap.add_argument(
        "--load-groups",
        type=int,
        help="override the group count of the coordinator load figure (10,000; 1,000 with --quick)",
    )
    ap.add_argument(
        "--against",
        choices=("kesque", "kafka", "kafka-only"),
        default="kesque",
        help="kafka: the side-by-side table, kesque and Apache Kafka (make kafka) on the same workloads "
        "and clients in one run (bench/sidebyside.py); kafka-only: this script's kesque figures "
        "measured on Kafka alone",
    )
    ap.add_argument(
        "--controller-parts",
        default="defaults,test,commit1",
        help="--only controller: which clusters to measure (defaults: failover with Kafka's quorum "
        "timeouts and the 3-controller commit latency; test: failover with test timeouts; "
        "commit1: one controller)",
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=1,
        help="--against kafka: runs of the whole table (the spread between them is reported)",
    )
    ap.add_argument(
        "--max-load",
        type=float,
        default=2.5,
        help="--against kafka: before each measured run, wait for the 1-minute load average to fall below this",
    )
    ap.add_argument(
        "--load-wait", type=float, help="--against kafka: the longest wait for that, in seconds (30; 10 with --quick)"
    )
    ap.add_argument(
        "--out", help="results file (default bench/results/latest.json, latest-kafka.json with --against kafka)"
    )
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = os.path.join(
            RESULTS,
            {"kafka": "latest-sidebyside.json", "kafka-only": "latest-kafka.json"}.get(args.against, "latest.json"),
        )
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    groups = SIDE_BY_SIDE if args.against == "kafka" else GROUPS
    bad = [x for x in only if x not in groups and x != "memory"]
    if bad:
        ap.error(f"unknown figure group(s) {bad}; choose from {','.join(groups)}")
    args.groups = [g for g in groups if g in only or not only and g not in OPT_IN]
    args.scale = dict(SCALES["quick" if args.quick else "full"])
    if args.records:
        args.scale["records"] = args.records
    if args.load_groups:
        args.scale["load_groups"] = args.load_groups
    return args


def kafka_version() -> str:
    from kesque.testing import kafka

    reason = kafka.unavailable()
    if reason:
        raise SystemExit(f"--against kafka: {reason}")
    return kafka.kafka_version()


def git(*cmd: str) -> str:
    import subprocess

    try:
        return subprocess.run(["git", "-C", REPO, *cmd], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return ""


def export_commit(rev: str) -> str:
    import subprocess

    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if not sha:
        raise SystemExit(f"unknown commit {rev!r}")
    dest = tempfile.mkdtemp(prefix=f"kesque-src-{sha[:10]}-")
    archive = subprocess.Popen(["git", "-C", REPO, "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dest], stdin=archive.stdout, check=True)
    archive.wait()
    return dest


def use_source_tree(src: str | None) -> None:
    if src:
        src = os.path.abspath(src)
        sys.path.insert(0, src)
        os.environ["PYTHONPATH"] = src + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
        os.chdir(src)  # `python -m kesque` puts the working directory first on sys.path
    elif REPO not in sys.path:
        sys.path.insert(0, REPO)
        os.chdir(REPO)


def proc_cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far; NaN when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan")


def proc_cpu_seconds(pid: int) -> float:
    return sum(proc_cpu_times(pid))


def self_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Meter:
    """Wall time, broker CPU and this process's CPU around one measurement."""

    def __init__(self, broker_pid: int | None):
        self.pid = broker_pid

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.b0 = proc_cpu_seconds(self.pid) if self.pid else float("nan")
        self.c0 = self_cpu_seconds()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        self.wall = wall
        self.broker_cpu = ((proc_cpu_seconds(self.pid) - self.b0) / wall) if self.pid and wall else float("nan")
        self.client_cpu = (self_cpu_seconds() - self.c0) / wall if wall else float("nan")

    def note(self) -> str:
        return f"broker CPU {self.broker_cpu:.0%}, client CPU {self.client_cpu:.0%}"


class BrokerGroup:
    """One fresh broker for one figure group; records its memory and (optionally) a profile."""

    def __init__(self, name: str, args, report: dict, config: dict | None = None):
        self.name = name
        self.args = args
        self.report = report
        self.config = config or {}

    def __enter__(self):
        from kesque.testing.broker import Broker

        os.makedirs(RESULTS, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=f"kesque-bench-{self.name}-", dir=self.args.data_dir)
        self.log_path = os.path.join(RESULTS, f"broker-{self.name}.log")
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)
        if self.args.against == "kafka-only":  # Apache Kafka on the same figures (its log: broker.log_path)
            from kesque.testing.kafka import KafkaBroker

            self.broker = KafkaBroker(
                data_dir=self.dir, heap="1g", config={"auto.create.topics.enable": "false", **self.config}
            )
            self.broker.start(120)
            self.log_path = self.broker.log_path
        else:
            self.broker = Broker(
                data_dir=self.dir,
                log_file=self.log_path,
                config={"log.dirs": self.dir, "auto.create.topics.enable": "false", **self.config},
            )
            self.broker.start(60)
        self.pid = self.broker.process.pid
        import figures

        t0 = time.perf_counter()
        figures.warm_up_consumer_path(self.bootstrap)
        self.warm_up_seconds = time.perf_counter() - t0
        self.sampler = None
        if self.args.profile:
            import profiling

            self.prof_path = os.path.join(RESULTS, f"profile-{self.name}.txt")
            if os.path.exists(self.prof_path):
                os.unlink(self.prof_path)
            self.sampler = profiling.Sampler(self.pid, self.prof_path)
        return self

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    def alive(self) -> bool:
        return self.broker.process is not None and self.broker.process.poll() is None

    def restarted(self) -> None:
        """After a restart of the broker: memory and CPU are read from the new process (a
        py-spy profile stays on the first one)."""
        self.pid = self.broker.process.pid

    def __exit__(self, *exc):
        info = {"alive_at_end": self.alive(), "consumer_warm_up_seconds": round(self.warm_up_seconds, 3)}
        import figures

        info.update(figures.rss_mib(self.pid))
        info["data_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(self.dir) for f in fs)
        if self.sampler is not None:
            import profiling

            self.sampler.stop()
            if self.sampler.error:
                info["profile_error"] = self.sampler.error
            else:
                s = profiling.summarize(self.prof_path)
                info["profile"] = s
                info["profile_file"] = self.prof_path
        if not info["alive_at_end"]:
            info["exit_code"] = self.broker.process.poll() if self.broker.process else None
        try:
            self.broker.stop(30)
        finally:
            if self.args.against == "kafka-only":
                self.broker.close()  # its work dir (config, server.log)
            shutil.rmtree(self.dir, ignore_errors=True)
        self.report["brokers"][self.name] = info
        return False


# ================================================================== figures table


def add_figure(
    report,
    name,
    group,
    value,
    unit,
    limit_name=None,
    limit_value=None,
    note="",
    bar_key=None,
    ratio=None,
    extra=None,
    judged=None,
):
    """``judged``: the value the bar is applied to when it is not the printed one (e.g. the
    slowest of several passes while the table shows their median)."""
    bar = BARS.get(bar_key) if bar_key else None
    if ratio is None and limit_value:
        ratio = value / limit_value
    report_value, report_ratio = value, ratio
    verdict = ""
    if bar is not None:
        kind, threshold, _text = bar
        if judged is not None:
            value = judged
            ratio = value / limit_value if limit_value else ratio
        if value != value:  # NaN
            verdict = "MISS"
        elif kind == "ratio":
            verdict = "PASS" if ratio is not None and ratio >= threshold else "MISS"
        elif kind == "below":
            verdict = "PASS" if value < threshold else "MISS"
        elif kind == "band":  # the ratio within +-threshold of 1
            verdict = "PASS" if ratio is not None and abs(ratio - 1) <= threshold else "MISS"
        elif kind == "within":
            verdict = "PASS" if limit_value is not None and value <= limit_value + threshold else "MISS"
        else:
            verdict = "PASS" if value <= threshold else "MISS"
    if judged is not None:
        value, ratio = report_value, report_ratio
    report["figures"].append(
        {
            "name": name,
            "group": group,
            "value": value,
            "unit": unit,
            "limit": limit_name,
            "limit_value": limit_value,
            "ratio": ratio,
            "bar": bar[2] if bar else None,
            "verdict": verdict or None,
            "note": note,
            **({"detail": extra} if extra else {}),
        }
    )


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    return str(v)


def print_table(report) -> None:
    rows = [("figure", "value", "unit", "limit", "limit value", "ratio", "bar", "", "note")]
    for f in report["figures"]:
        rows.append(
            (
                f["name"],
                _fmt(f["value"]),
                f["unit"],
                f["limit"] or "-",
                _fmt(f["limit_value"]),
                f"{f['ratio'] * 100:.0f}%" if f["ratio"] is not None else "-",
                f["bar"] or "-",
                f["verdict"] or "",
                f["note"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    print()
    for i, r in enumerate(rows):
        print(
            "  ".join(c.rjust(w) if 1 <= j <= 5 and i else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths)))
            + "  "
            + r[-1]
        )
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * 4)


def add_controller_figures(report, measured: dict, runs: int, requests: int, why: str) -> None:
    """One row per figure: kesque's value against Kafka's from the same run (the ratio is
    kesque / Kafka), or Kafka's alone, named so, while kesque cannot be measured."""
    kafka, kesque = measured.get("kafka"), measured.get("kesque")
    rows = [
        (
            f"controller failover p{p}, {label} (SIGKILL -> CreateTopics)",
            "s",
            lambda m, s=setting, p=p: m["failover"][s][f"p{p}"],
            f"{runs} runs",
        )
        for setting, label in (("defaults", "Kafka's default timeouts"), ("test", "test timeouts"))
        for p in (50, 99)
    ]
    rows += [
        (
            f"metadata commit p{p}, {c} controller{'s' * (c > 1)} (CreateTopics round trip)",
            "ms",
            lambda m, c=c, p=p: m["commit"][c][f"p{p}"],
            f"{requests} sequential requests",
        )
        for c in (1, 3)
        for p in (50, 99)
    ]

    def value(m, get):
        try:
            return get(m) if m else None
        except KeyError:  # that part was not asked, or failed (listed under errors)
            return None

    for name, unit, get, how in rows:
        k, v = value(kafka, get), value(kesque, get)
        if v is not None:
            add_figure(
                report,
                name,
                "controller",
                v,
                unit,
                "Apache Kafka (same run)",
                k,
                how,
                extra={"kesque": kesque, "kafka": kafka},
            )
        elif k is not None:
            add_figure(
                report,
                f"{name} [Apache Kafka]",
                "controller",
                k,
                unit,
                note=f"{how}; {why or 'kesque not measured (see errors)'}",
                extra={"kafka": kafka},
            )


def add_replication_figures(report, measured: dict, sc: dict, partitions: int) -> None:
    """kesque's rows against the same run's limits (RF 1 acks=1 on the same brokers; Apache Kafka),
    Kafka's own RF 3 / RF 1 row, and Kafka's alone where kesque's part failed."""
    kesque, kafka = measured.get("kesque") or {}, measured.get("kafka") or {}
    runs = f"{sc['failover_runs']} runs, test settings"

    def tput(m, key):
        return (m.get("throughput") or {}).get(key, {}).get("mb_s")

    mb = f"{sc['repl_records']:,} x 1 KiB, {partitions}-partition topics, best of {sc['repl_passes']}"
    k3, k1, a3, a1 = tput(kesque, "rf3"), tput(kesque, "rf1"), tput(kafka, "rf3"), tput(kafka, "rf1")
    if k3 is not None:
        t = kesque["throughput"]
        checks = "".join(f"; CHECK: {c}" for key in ("rf3", "rf1") for c in t[key]["checks"])
        cpu = "cluster CPU {:.1f} s against {:.1f} s".format(
            *(t[k]["best"]["cluster_cpu_seconds"] for k in ("rf3", "rf1"))
        )
        add_figure(
            report,
            "produce RF 3 acks=all (confluent, 3 nodes)",
            "replication",
            k3,
            "MB/s",
            "RF 1 acks=1, same brokers",
            k1,
            f"{mb}; {cpu}{checks}",
            "replication-produce",
            extra=t,
        )
        if a3 is not None:
            add_figure(
                report,
                "produce RF 3 acks=all, kesque / Kafka",
                "replication",
                k3,
                "MB/s",
                "Apache Kafka (same run)",
                a3,
                mb,
            )
    if a3 is not None:
        add_figure(
            report,
            "produce RF 3 acks=all (confluent, 3 nodes) [Apache Kafka]",
            "replication",
            a3,
            "MB/s",
            "RF 1 acks=1, same brokers",
            a1,
            mb,
            extra=kafka["throughput"],
        )
    for m, suffix in ((kesque, ""), (kafka, " [Apache Kafka]")):
        ceiling = (m.get("throughput") or {}).get("ceiling")
        if ceiling:
            f = ceiling["ms_per_mb"]
            add_figure(
                report,
                f"produce RF 3 / RF 1 ceiling: the brokers' user CPU free{suffix}",
                "replication",
                100 * ceiling["ratio"],
                "%",
                note=f"kernel + client CPU per MB of the best passes: RF 1 {f['rf1']:.2f}, RF 3 "
                f"{f['rf3']:.2f} ms/MB; cores busy RF 1 {ceiling['busy']['rf1']:.0%}, RF 3 "
                f"{ceiling['busy']['rf3']:.0%}; per pass, measured / ceiling: "
                + ", ".join(f"{m:.0%} / {c:.0%}" for m, c in ceiling["passes"]),
                extra=ceiling,
            )
    rows = [
        (
            "follower catch-up",
            "MB/s",
            "catch_up",
            lambda r: r["mb_s"],
            None,
            f"{sc['catchup_bytes'] >> 20} MiB behind, first fetched byte -> logs equal",
        )
    ]
    rows += [
        (f"leader failover p{p}, {label}", "s", part, lambda r, p=p: r[f"p{p}"], bar, runs)
        for part, label, bar in (
            ("kill", "SIGKILL -> acks=all ack on the new leader", None),
            ("term", "controlled shutdown (SIGTERM) -> acks=all ack on the new leader", "controlled-shutdown"),
        )
        for p in (50, 99)
    ]
    for name, unit, part, get, bar, how in rows:
        mine, theirs = kesque.get(part), kafka.get(part)
        if part == "catch_up":
            for m in (mine, theirs):
                if m:
                    how += (
                        f"; {'kesque' if m is mine else 'Kafka'}: {m['bytes_behind'] / 1e6:.0f} MB in "
                        f"{m['seconds']:.1f} s, restart -> ISR {m['restart_to_isr']:.1f} s"
                    )
        if mine:
            add_figure(
                report,
                name,
                "replication",
                get(mine),
                unit,
                "Apache Kafka (same run)",
                get(theirs) if theirs else None,
                how,
                bar,
                extra={"kesque": mine, "kafka": theirs},
            )
        elif theirs:
            why = "; ".join(e for e in kesque.get("errors", []) if f" {part}:" in e) or "kesque not measured"
            add_figure(
                report,
                f"{name} [Apache Kafka]",
                "replication",
                get(theirs),
                unit,
                note=f"{how}; {why}"[:300],
                extra={"kafka": theirs},
            )


def add_eos_app_figures(report, measured: dict) -> None:
    """Kafka's exactly-once applications (bench/eos_apps.py): kesque's rate against Kafka's, same run."""
    kesque, kafka = measured.get("kesque") or {}, measured.get("kafka") or {}
    rows = (
        ("streams", "Kafka Streams word count exactly_once_v2 (3 nodes)", "lines/s"),
        ("copier", "TransactionalMessageCopier x2 (3 nodes)", "rec/s"),
        ("copier_bounced", "TransactionalMessageCopier x2, brokers SIGKILLed in turn (3 nodes)", "rec/s"),
        ("copier_killed", "TransactionalMessageCopier x2, each copier SIGKILLed once (3 nodes)", "rec/s"),
    )
    for part, name, unit in rows:
        mine, theirs = kesque.get(part), kafka.get(part)
        notes = []
        for who, m in (("kesque", mine), ("Kafka", theirs)):
            if not m:
                continue
            if part == "streams":
                ev = m["events"]
                notes.append(
                    f"{who}: {m['lines']:,} lines ({m['words']:,} words) in {m['seconds']:.1f} s, first output "
                    f"after {m['first_output_s'] or float('nan'):.1f} s, OutOfOrderSequence {ev['out_of_order']},"
                    f" fenced {ev['fenced']}"
                )
                if not m["exact"] or ev["out_of_order"] or ev["fenced"] or ev["replaced"]:
                    notes.append(f"CHECK: {who} counts exact {m['exact']}, events {ev}")
            else:
                notes.append(
                    f"{who}: {m['records']:,} in {m['seconds']:.1f} s, OUT_OF_ORDER_SEQUENCE_NUMBER answers "
                    f"{m['out_of_order_answers']}" + (f", bounces {m['bounces']}" if m["bounces"] else "")
                )
                if not m["exact"]:
                    notes.append(
                        f"CHECK: {who} output not the input (finished {m['finished']}, read {m['read']:,}"
                        f"{', ' + ', '.join(m['failed']) if m['failed'] else ''})"
                    )
        note = "; ".join(notes)
        if mine:
            add_figure(
                report,
                name,
                "eos-apps",
                mine["rate"],
                unit,
                "Apache Kafka (same run)",
                theirs["rate"] if theirs else None,
                note,
                extra={"kesque": mine, "kafka": theirs},
            )
        elif theirs:
            why = "; ".join(e for e in kesque.get("errors", []) if part in e) or "kesque not measured"
            add_figure(
                report,
                f"{name} [Apache Kafka]",
                "eos-apps",
                theirs["rate"],
                unit,
                note=f"{note}; {why}"[:400],
                extra={"kafka": theirs},
            )


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ================================================================== main


def main(argv=None) -> int:
    args = parse_args(argv)
    exported = None
    if args.commit:
        exported = args.src = export_commit(args.commit)
    source = {
        "tree": os.path.abspath(args.src) if args.src else REPO,
        "commit": git("rev-parse", "--short", args.commit or "HEAD"),
        "working_tree": not (args.src or args.commit),
    }
    if source["working_tree"]:
        source["uncommitted_kesque_files"] = len(git("status", "--porcelain", "--", "kesque").splitlines())
    use_source_tree(args.src)
    sys.path.insert(0, HERE)
    import figures
    import limits

    import kesque

    sc = args.scale
    report = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "scale": "quick" if args.quick else "full",
        "parameters": {**sc, "partitions": args.partitions, "groups": args.groups},
        "host": {
            "hostname": socket.gethostname(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_start": os.getloadavg(),
            "kesque_imported_from": os.path.dirname(os.path.dirname(os.path.abspath(kesque.__file__))),
        },
        "source": source,
        "broker": {
            "kafka-only": lambda: f"Apache Kafka {kafka_version()}",
            "kafka": lambda: f"kesque and Apache Kafka {kafka_version()}",
        }.get(args.against, lambda: "kesque")(),
        "limits": {},
        "figures": [],
        "brokers": {},
        "errors": [],
    }
    tree = (
        f", working tree with {source['uncommitted_kesque_files']} uncommitted kesque/ files"
        if source["working_tree"]
        else ""
    )
    log(
        f"broker={report['broker']} scale={report['scale']} groups={','.join(args.groups)} data-dir={args.data_dir} "
        f"kesque={report['host']['kesque_imported_from']} (commit {source['commit']}{tree})"
    )
    if args.against == "kafka":  # the side-by-side table: its own workloads, both brokers
        import sidebyside

        sidebyside.main(args, report, log)
        return finish(report, args, exported)
    records = sc["records"]
    small_topic = "bench-small"

    def guarded(name, fn):
        try:
            return fn()
        except Exception as e:  # a broken figure is reported, the others still run
            traceback.print_exc()
            report["errors"].append(f"{name}: {e!r}")
            log(f"{name} FAILED: {e!r}")
            return None

    # ---------------------------------------------------------------- machine limits
    need_net = bool({"produce", "consume", "raw-produce"} & set(args.groups))
    need_disk = bool({"produce", "raw-produce"} & set(args.groups))
    L = report["limits"]
    if need_net:
        log("limit: loopback TCP socket sink, best of 3 ...")
        L["loopback"] = guarded(
            "loopback", lambda: limits.best_of(3, lambda: limits.loopback_tcp(sc["loopback_seconds"]), "mb_s")
        )
        if L["loopback"]:
            log(f"  loopback {L['loopback']['mb_s']:.0f} MB/s")
    if need_disk:
        log(f"limit: sequential write + fsync of {sc['disk_bytes'] >> 20} MiB in {args.data_dir}, best of 2 ...")
        L["disk"] = guarded(
            "disk", lambda: limits.best_of(2, lambda: limits.disk_write(args.data_dir, sc["disk_bytes"]), "mb_s")
        )
        if L["disk"]:
            log(f"  disk {L['disk']['mb_s']:.0f} MB/s")
    if "small" in args.groups:
        frame = figures.small_frame(small_topic)
        for loop in ("asyncio", "uvloop"):
            if loop == "uvloop" and not limits.uvloop_available():
                L["echo_uvloop"] = None
                continue
            log(f"limit: bare {loop} echo server, {len(frame)}-byte requests, window 64, best of 3 ...")
            L[f"echo_{loop}"] = guarded(
                f"echo_{loop}",
                lambda: limits.best_of(3, lambda: limits.echo_rate(frame, sc["echo_requests"], 64, loop), "rate"),
            )
            if L[f"echo_{loop}"]:
                log(f"  echo ({loop}) {L[f'echo_{loop}']['rate']:.0f} req/s")

    loop_mb = (L.get("loopback") or {}).get("mb_s")
    disk_mb = (L.get("disk") or {}).get("mb_s")
    net_disk = min(x for x in (loop_mb, disk_mb) if x) if (loop_mb or disk_mb) else None
    net_disk_name = ("disk" if disk_mb and (not loop_mb or disk_mb <= loop_mb) else "loopback") if net_disk else None
    echo = (L.get("echo_asyncio") or {}).get("rate")
    parts = args.partitions

    # ---------------------------------------------------------------- 1 + 2: produce / consume
    if "produce" in args.groups or "consume" in args.groups:
        with BrokerGroup("produce-consume", args, report) as g:
            topic = "bench-none"
            figures.create_topic(g.bootstrap, topic, parts)
            if "produce" in args.groups:
                for codec, t0 in (("none", topic), ("lz4", "bench-lz4")):
                    # best of N passes, each into a topic of its own, like the machine limits
                    # (this VM's throughput swings by 2x between identical runs)
                    best = m = None
                    for n in range(sc["passes"]):
                        t = t0 if n == 0 else f"{t0}-{n}"
                        if t != topic:
                            figures.create_topic(g.bootstrap, t, parts)
                        log(
                            f"produce: {records:,} x 1 KiB, confluent-kafka, compression={codec}, "
                            f"pass {n + 1}/{sc['passes']} ..."
                        )
                        with Meter(g.pid) as mm:
                            rr = guarded(
                                f"produce-{codec}",
                                lambda: figures.produce_confluent(g.bootstrap, t, records, compression=codec),
                            )
                        if rr and (best is None or rr["mb_s"] > best[0]["mb_s"]):
                            best, m = (rr, t), mm
                    r, t = best if best else (None, t0)
                    if r:
                        ends = figures.end_offsets(g.bootstrap, t, parts)
                        r["stored_records"] = sum(ends.values())
                        ok = r["stored_records"] == records and not r["errors"] and not r["undelivered"]
                        note = f"{m.note()}; linger 5 ms, batch 1 MiB, acks=1; best of {sc['passes']}"
                        if not ok:
                            note += f"; CHECK: stored {r['stored_records']}/{records}, errors {r['errors'][:2]}"
                        add_figure(
                            report,
                            f"produce {codec} (confluent)",
                            "produce",
                            r["mb_s"],
                            "MB/s",
                            f"min(loopback,disk)={net_disk_name}",
                            net_disk,
                            note,
                            "produce",
                            extra=r,
                        )
                        log(f"  {r['mb_s']:.0f} MB/s in {r['seconds']:.1f} s ({m.note()})")
            else:
                log(f"consume: filling {topic} with {records:,} records (unmeasured) ...")
                figures.produce_raw(g.bootstrap, topic, parts, records)
            if "consume" in args.groups:
                ends = figures.end_offsets(g.bootstrap, topic, parts)
                log(f"consume: {sum(ends.values()):,} records, confluent-kafka assign() from offset 0 ...")
                r = m = None
                for _ in range(sc["passes"]):
                    with Meter(g.pid) as mm:
                        rr = guarded("consume", lambda: figures.consume_confluent(g.bootstrap, topic, ends))
                    if rr and (r is None or rr["mb_s"] > r["mb_s"]):
                        r, m = rr, mm
                if r:
                    note = f"{m.note()}; consume(10000) batches; best of {sc['passes']}"
                    if r["records"] != r["expected"] or r["errors"]:
                        note += f"; CHECK: got {r['records']}/{r['expected']}, errors {r['errors']}"
                    add_figure(
                        report,
                        "consume (confluent)",
                        "consume",
                        r["mb_s"],
                        "MB/s",
                        "loopback",
                        loop_mb,
                        note,
                        "consume",
                        extra=r,
                    )
                    log(f"  {r['mb_s']:.0f} MB/s in {r['seconds']:.1f} s ({m.note()})")
                log("consume: raw pipelined Fetch client (window 8, 4 MiB per partition) ...")
                with Meter(g.pid) as m:
                    r = guarded(
                        "consume-raw",
                        lambda: limits.best_of(3, lambda: figures.consume_raw(g.bootstrap, topic, ends), "mb_s"),
                    )
                if r:
                    note = f"{m.note()}; record-set bytes, best of 3 passes; fetch path: sendfile"
                    if r["records"] != r["expected"]:
                        note += f"; CHECK: {r['records']}/{r['expected']} records"
                    add_figure(
                        report,
                        "consume (raw fetch)",
                        "consume",
                        r["mb_s"],
                        "MB/s",
                        "loopback",
                        loop_mb,
                        note,
                        "consume",
                        extra=r,
                    )
                    log(f"  {r['mb_s']:.0f} MB/s in {r['seconds']:.2f} s ({m.note()})")

    # ---------------------------------------------------------------- 3: raw produce capacity
    if "raw-produce" in args.groups:
        with BrokerGroup("raw-produce", args, report) as g:
            topic = "bench-raw"
            figures.create_topic(g.bootstrap, topic, parts)
            log(f"raw produce: {records:,} x 1 KiB as pre-encoded 1 MiB ProduceRequests, 2 conns x window 8 ...")
            with Meter(g.pid) as m:
                r = guarded("raw-produce", lambda: figures.produce_raw(g.bootstrap, topic, parts, records))
            if r:
                ends = figures.end_offsets(g.bootstrap, topic, parts)
                r["stored_records"] = sum(ends.values())
                note = f"{m.note()}; Produce v9, acks=1"
                if r["errors"] or r["stored_records"] != r["records"]:
                    note += f"; CHECK: stored {r['stored_records']}/{r['records']}, errors {r['errors'][:2]}"
                add_figure(
                    report,
                    "produce (raw pipelined)",
                    "raw-produce",
                    r["mb_s"],
                    "MB/s",
                    f"min(loopback,disk)={net_disk_name}",
                    net_disk,
                    note,
                    "raw-produce",
                    extra=r,
                )
                log(f"  {r['mb_s']:.0f} MB/s in {r['seconds']:.1f} s ({m.note()})")

    # ---------------------------------------------------------------- 4: small requests
    if "small" in args.groups:
        with BrokerGroup("small", args, report) as g:
            figures.create_topic(g.bootstrap, small_topic, 1)
            n = sc["small_confluent"]
            log(f"small: {n:,} x 100 B, one record per request, confluent-kafka linger.ms=0 ...")
            with Meter(g.pid) as m:
                r = guarded("small-confluent", lambda: figures.small_confluent(g.bootstrap, small_topic, n))
            if r:
                note = f"{m.note()}; {r['records_per_request']:.2f} records/request"
                if r["errors"] or r["undelivered"]:
                    note += f"; CHECK: errors {r['errors'][:2]}, undelivered {r['undelivered']}"
                add_figure(
                    report,
                    "small produce (confluent)",
                    "small",
                    r["rate"],
                    "req/s",
                    "echo asyncio",
                    echo,
                    note,
                    "small",
                    extra=r,
                )
                log(f"  {r['rate']:.0f} req/s ({m.note()})")
            n = sc["small_requests"]
            before = sum(figures.end_offsets(g.bootstrap, small_topic, 1).values())
            log(f"small: {n:,} pre-encoded 1-record ProduceRequests, raw socket, window 64 ...")
            with Meter(g.pid) as m:
                r = guarded("small-raw", lambda: figures.small_raw(g.bootstrap, small_topic, n))
            if r:
                stored = sum(figures.end_offsets(g.bootstrap, small_topic, 1).values()) - before
                r["stored_records"] = stored
                note = f"{m.note()}; {r['request_bytes']} B request, {r['response_bytes']} B response"
                if stored != n or any(r["first_response_errors"]):
                    note += f"; CHECK: stored {stored}/{n}, first errors {r['first_response_errors']}"
                add_figure(
                    report,
                    "small produce (raw, window 64)",
                    "small",
                    r["rate"],
                    "req/s",
                    "echo asyncio",
                    echo,
                    note,
                    "small",
                    extra=r,
                )
                log(f"  {r['rate']:.0f} req/s ({m.note()})")
            uv = (L.get("echo_uvloop") or {}).get("rate")
            if uv:
                add_figure(
                    report,
                    "  (same, vs uvloop echo)",
                    "small",
                    r["rate"] if r else float("nan"),
                    "req/s",
                    "echo uvloop",
                    uv,
                    "information: kesque runs on the asyncio loop",
                )

    # ---------------------------------------------------------------- 5: latency
    if "latency" in args.groups:
        with BrokerGroup("latency", args, report) as g:
            topic = "bench-latency"
            figures.create_topic(g.bootstrap, topic, 1)
            secs = sc["latency_seconds"]
            log(f"latency: 10,000 x 1 KiB records/s for {secs:.0f} s, acks=1, linger.ms=0 ...")
            with Meter(g.pid) as m:
                r = guarded(
                    "latency", lambda: figures.latency(g.bootstrap, topic, 10000, secs, warmup=sc["latency_warmup"])
                )
            if r:
                note = (
                    f"{m.note()}; {r['measured']:,} samples, send rate {r['send_rate']:.0f}/s, max {r['max_ms']:.1f} ms"
                )
                if r["received"] != r["expected"]:
                    note += f"; CHECK: received {r['received']}/{r['expected']}"
                add_figure(
                    report, "e2e latency p99", "latency", r["p99_ms"], "ms", None, None, note, "latency", extra=r
                )
                add_figure(report, "e2e latency p50", "latency", r["p50_ms"], "ms", None, None, "")
                add_figure(report, "e2e latency p99.9", "latency", r["p999_ms"], "ms", None, None, "")
                log(f"  p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, p99.9 {r['p999_ms']:.2f} ms")

    # ---------------------------------------------------------------- 7: consumer groups
    if "groups" in args.groups:
        import groups as G

        gp = sc["group_passes"]
        gtopic, gparts = "bench-groups", 30
        hb848 = 250
        timers = G.CLASSIC_CLIENT_TIMERS
        hb = timers["heartbeat.interval.ms"]

        def rebalance_rows(r, label, short, bar, delay_ms=0, heartbeat_ms=hb, extra_note=""):
            names = {
                "join": f"rebalance: 10 join ({short})",
                "leave": f"rebalance: 1 of 10 leaves ({short})",
                "join-one": f"rebalance: 10th joins ({short})",
            }
            for ph in ("join", "leave", "join-one"):
                s = r.get(ph)
                if not s:
                    continue
                note = G.values_text(s)
                if s["failed"]:
                    note += f"; CHECK: {s['failed']} pass(es) never converged"
                if r["assignment_mismatch"]:
                    note += f"; CHECK: tracked vs assignment() differ for members {r['assignment_mismatch']}"
                dist = {tuple(d) for d in s["distributions"]}
                note += (
                    f"; partitions per member {'/'.join(str(x) for x in min(dist))}"
                    if len(dist) == 1
                    else f"; partitions per member vary: {sorted(dist)}"
                )
                note += f"; bar judged on the slowest pass ({s['max']:.2f} s)" if len(s["values"]) > 1 else ""
                detail = {**s, "runs": r["runs"]} if ph == "join" else s  # events and log lines once
                if r["protocol"] == "consumer":
                    add_figure(
                        report,
                        names[ph],
                        "groups",
                        s["median"],
                        "s",
                        None,
                        None,
                        f"{note}; {extra_note}".rstrip("; "),
                        bar,
                        extra=detail,
                        judged=s["max"],
                    )
                else:
                    bound = G.classic_timer_bound(ph, delay_ms, heartbeat_ms)
                    note += "; " + G.dominating_timer(s.get("median_breakdown"), delay_ms, heartbeat_ms)
                    slow = s.get("slowest_breakdown")
                    if slow and G.dominating_timer(slow, delay_ms, heartbeat_ms, True) != G.dominating_timer(
                        s.get("median_breakdown"), delay_ms, heartbeat_ms, True
                    ):
                        note += f"; slowest pass ({s['max']:.2f} s): " + G.dominating_timer(
                            slow, delay_ms, heartbeat_ms
                        )
                    if s["learned"]:
                        note += f"; last member learned after {max(s['learned']):.2f} s (max)"
                    add_figure(
                        report,
                        names[ph],
                        "groups",
                        s["median"],
                        "s",
                        "timer bound",
                        bound,
                        f"{note}; {extra_note}".rstrip("; "),
                        bar,
                        extra=detail,
                        judged=s["max"],
                    )
                log(f"  {names[ph]}: {note}")

        def run_rebalance(g, label, protocol, passes, **kw):
            log(f"groups: rebalance {label}: 10 consumers, {gparts} partitions, {passes} pass(es) ...")
            with Meter(g.pid) as m:
                r = guarded(
                    f"rebalance-{label}",
                    lambda: G.rebalance(
                        g.bootstrap,
                        gtopic,
                        gparts,
                        passes,
                        protocol,
                        label,
                        log_path=g.log_path,
                        heartbeat_period=kw.pop("heartbeat_period"),
                        **kw,
                    ),
                )
            return r, m

        # 1. rebalance time: KIP-848 and classic (initial delay 0) on one broker
        with BrokerGroup(
            "groups-rebalance",
            args,
            report,
            config={
                "group.initial.rebalance.delay.ms": "0",
                "group.consumer.heartbeat.interval.ms": str(hb848),
                "group.consumer.min.heartbeat.interval.ms": str(hb848),
            },
        ) as g:
            figures.create_topic(g.bootstrap, gtopic, gparts)
            r, m = run_rebalance(g, "kip848", "consumer", gp, heartbeat_period=hb848 / 1000)
            if r:
                rebalance_rows(
                    r,
                    "kip848",
                    "KIP-848",
                    "kip848",
                    extra_note=(
                        f"broker group.consumer.heartbeat.interval.ms={hb848}, uniform assignor; 10 consumer threads; "
                        f"{m.note()}"
                    ),
                )
            rp, m = run_rebalance(g, "kip848-processes", "consumer", gp, heartbeat_period=hb848 / 1000, mode="process")
            if rp:
                parts_txt = ", ".join(f"{ph} {G.values_text(rp[ph])}" for ph in ("join", "leave", "join-one"))
                t = r["join"]["median"] if r else float("nan")
                add_figure(
                    report,
                    "  (same, 10 consumer processes)",
                    "groups",
                    rp["join"]["median"],
                    "s",
                    "10 threads",
                    t,
                    f"information, checks that threads do not distort: {parts_txt}",
                    extra=rp,
                )
            r, m = run_rebalance(g, "classic", "classic", gp, heartbeat_period=hb / 1000)
            if r:
                rebalance_rows(
                    r,
                    "classic",
                    "classic, delay 0",
                    "classic",
                    extra_note=(
                        "range assignor; client "
                        + ", ".join(f"{k}={v}" for k, v in timers.items())
                        + " (defaults; max.poll.interval.ms is the rebalance timeout); broker "
                        "group.initial.rebalance.delay.ms=0"
                    ),
                )
            r, m = run_rebalance(
                g, "classic-hb500", "classic", gp, heartbeat_period=0.5, client_conf={"heartbeat.interval.ms": 500}
            )
            if r:
                rebalance_rows(
                    r,
                    "classic-hb500",
                    "classic, heartbeat 500 ms",
                    "classic",
                    heartbeat_ms=500,
                    extra_note="client heartbeat.interval.ms=500 instead of 3000: the rebalance "
                    "follows the client's heartbeat",
                )

        # the same formation with Kafka's default initial delay (only the join of an Empty group waits on it)
        with BrokerGroup("groups-delay3000", args, report, config={"group.initial.rebalance.delay.ms": "3000"}) as g:
            figures.create_topic(g.bootstrap, gtopic, gparts)
            r, m = run_rebalance(g, "classic-delay3000", "classic", gp, heartbeat_period=hb / 1000, phases=("join",))
            if r:
                rebalance_rows(
                    r,
                    "classic-delay3000",
                    "classic, delay 3000",
                    "classic",
                    delay_ms=3000,
                    extra_note="broker group.initial.rebalance.delay.ms=3000 (Kafka's default)",
                )

        # 2. synchronous offset commits against synchronous single-record produce
        with BrokerGroup("groups-commit", args, report) as g:
            ctopic = "bench-commit"
            figures.create_topic(g.bootstrap, ctopic, 1)
            n = sc["sync_requests"]

            # the passes of the compared figures are interleaved (produce, commit, commit, ...
            # then again), so a neighbour's burst cannot land on one figure's passes only
            kinds = {
                "produce": lambda: G.produce_sync(g.bootstrap, ctopic, n),
                "assign": lambda: G.commit_confluent(g.bootstrap, ctopic, n, f"bench-commit-a-{os.getpid()}"),
                "subscribe": lambda: G.commit_confluent(
                    g.bootstrap, ctopic, n, f"bench-commit-s-{os.getpid()}", subscribe=True
                ),
                "raw-produce": lambda: G.produce_raw_sync(g.bootstrap, ctopic, max(n, 2000), 1),
                "raw-commit": lambda: G.commit_raw(g.bootstrap, ctopic, max(n, 2000), 1, "bench-commit-raw"),
            }
            bests: dict = {}
            passes: dict = {k: [] for k in kinds}
            for p in range(sc["passes"]):
                log(
                    f"groups: pass {p + 1}/{sc['passes']}: {n:,} synchronous produce round trips (produce + "
                    f"flush, linger.ms=0, 100 B), {n:,} synchronous commits (assign, then subscribe), raw "
                    f"window 1 produce and commit ..."
                )
                for kind, fn in kinds.items():
                    with Meter(g.pid) as mm:
                        rr = guarded(f"{kind}-sync", fn)
                    if rr:
                        passes[kind].append(round(rr["rate"]))
                        if kind not in bests or rr["rate"] > bests[kind][0]["rate"]:
                            bests[kind] = (rr, mm)
                log("  " + ", ".join(f"{k} {v[-1] if v else 'failed'}/s" for k, v in passes.items()))

            def all_passes(kind):
                return f"best of {passes[kind]}"

            pr, m = bests.get("produce", (None, None))
            prate = pr["rate"] if pr else None
            if pr:
                note = f"{m.note()}; acks=1; the limit of the commit bar; {all_passes('produce')}"
                if pr["errors"] or pr["undelivered"]:
                    note += f"; CHECK: errors {pr['errors'][:2]}, undelivered {pr['undelivered']}"
                add_figure(
                    report,
                    "sync produce, 1 record per round trip (confluent)",
                    "groups",
                    pr["rate"],
                    "req/s",
                    note=note,
                    extra={**pr, "passes": passes["produce"]},
                )
            for how in ("assign", "subscribe"):
                cr, m = bests.get(how, (None, None))
                if cr:
                    kind = (
                        "member commits (generation, member id)" if how == "subscribe" else "standalone (generation -1)"
                    )
                    note = f"{m.note()}; commit(offsets=[1 partition], asynchronous=False); {kind}; {all_passes(how)}"
                    if len(passes[how]) == len(passes["produce"]) > 1:  # same-pass ratios: neighbours cancel out
                        note += "; per-pass ratio " + "/".join(
                            f"{c / p:.0%}" for c, p in zip(passes[how], passes["produce"]) if p
                        )
                    if cr["errors"] or cr["committed"] != cr["expected_committed"]:
                        note += (
                            f"; CHECK: {cr['errors']} errors, committed {cr['committed']}/{cr['expected_committed']}"
                        )
                    add_figure(
                        report,
                        f"sync commit ({how}, confluent)",
                        "groups",
                        cr["rate"],
                        "commits/s",
                        "sync produce",
                        prate,
                        note,
                        "commit",
                        extra={**cr, "passes": passes[how]},
                    )
            rc, m = bests.get("raw-commit", (None, None))
            rp = bests.get("raw-produce", (None, None))[0]
            if rc:
                note = (
                    f"{m.note()}; information: one OffsetCommit at a time, no client library; "
                    f"{all_passes('raw-commit')}; limit: the same for a 1-record Produce, "
                    f"{all_passes('raw-produce')}"
                )
                if any(rc["first_response_errors"]):
                    note += f"; CHECK: errors {rc['first_response_errors']}"
                add_figure(
                    report,
                    "commit (raw, window 1)",
                    "groups",
                    rc["rate"],
                    "req/s",
                    "produce raw window 1",
                    rp["rate"] if rp else None,
                    note,
                    extra={"commit": rc, "produce": rp},
                )
            nr = sc["raw_commits"]
            with Meter(g.pid) as m:
                rc = guarded("commit-raw-w64", lambda: G.commit_raw(g.bootstrap, ctopic, nr, 64, "bench-commit-raw"))
            if rc:
                note = f"{m.note()}; information: the broker's commit capacity, {nr:,} pre-encoded requests"
                if any(rc["first_response_errors"]):
                    note += f"; CHECK: errors {rc['first_response_errors']}"
                add_figure(
                    report, "commit (raw pipelined, window 64)", "groups", rc["rate"], "req/s", note=note, extra=rc
                )
                log(f"  raw window 64: {rc['rate']:.0f} commits/s ({m.note()})")

        # 3. coordinator memory and load time for many groups
        with BrokerGroup("groups-load", args, report) as g:
            ng, lparts, otopic = sc["load_groups"], 3, "bench-offsets"
            figures.create_topic(g.bootstrap, otopic, lparts)
            base = G.rss_mib(g.pid)
            log(f"groups: {ng:,} standalone groups x {lparts} offsets, raw OffsetCommit, window 64 ...")
            with Meter(g.pid) as m:
                cr = guarded("create-groups", lambda: G.create_groups(g.bootstrap, otopic, ng, lparts))
            if cr:
                note = f"{m.note()}; information; generation -1, empty member id"
                if cr["errors"]:
                    note += f"; CHECK: error answers {cr['errors'][:3]}"
                add_figure(
                    report,
                    f"create {ng:,} groups (raw OffsetCommit)",
                    "groups",
                    cr["rate"],
                    "groups/s",
                    note=note,
                    extra=cr,
                )
                log(f"  {cr['rate']:.0f} groups/s")
            t0 = time.perf_counter()
            warm = guarded("poll-groups-warm", lambda: G.poll_groups(g.bootstrap, otopic, ng, lparts))
            warm_s = (warm["done_at"] - t0) if warm else float("nan")
            before = G.rss_mib(g.pid)
            if cr and before:
                per = (before["VmRSS"] - base.get("VmRSS", float("nan"))) * 1024 / ng
                add_figure(
                    report,
                    f"broker RSS with {ng:,} groups",
                    "groups",
                    before["VmRSS"],
                    "MiB",
                    note=(
                        f"{base.get('VmRSS', float('nan')):.1f} MiB before the groups, {per:.2f} KiB per group "
                        f"({lparts} offsets each)"
                    ),
                )
            for how in ("clean", "kill"):
                what = "clean stop" if how == "clean" else "SIGKILL"
                runs = []
                for k in range(sc["passes"]):
                    log(
                        f"groups: {what} and restart ({k + 1}/{sc['passes']}), polling until all {ng:,} groups "
                        f"answer OffsetFetch ..."
                    )
                    lr = guarded(f"load-{how}", lambda: G.restart_and_load(g.broker, otopic, ng, lparts, how))
                    if g.broker.process is not None:
                        g.restarted()
                    if lr:
                        runs.append(lr)
                        log(
                            f"  all answered after {lr['seconds']:.2f} s (listening after {lr['ready_seconds']:.2f} "
                            f"s, log sum {lr['log']['sum_ms']} ms), RSS {lr.get('VmRSS', float('nan')):.1f} MiB"
                        )
                if not runs:
                    continue
                lr = min(runs, key=lambda x: x["seconds"])
                lg = lr["log"]
                secs = ", ".join(f"{x['seconds']:.2f}" for x in runs)
                note = (
                    f"from process start, best of [{secs}] s: "
                    f"listening after {lr['ready_seconds']:.2f} s (the broker logs 'started in "
                    f"{lg['started_ms']} ms'), then {lr['rounds']} polling round(s); 'Loaded group coordinator "
                    f"state' lines: {lg['partitions']} partitions, {lg['groups']:,} groups, {lg['records']:,} "
                    f"records, sum {lg['sum_ms']} ms; polling every group on a warm broker takes {warm_s:.2f} s"
                )
                if lr["errors_seen"]:
                    note += f"; error codes while loading {lr['errors_seen']}"
                if any(x["pending"] for x in runs):
                    note += f"; CHECK: groups never answered with their offsets: {[x['pending'] for x in runs]}"
                if lg["groups"] < ng:
                    note += f"; CHECK: the log lines count {lg['groups']} groups"
                add_figure(
                    report,
                    f"load {ng:,} groups after {what}",
                    "groups",
                    lr["seconds"],
                    "s",
                    note=note,
                    extra={"best": lr, "runs": runs},
                )
                add_figure(
                    report,
                    f"  broker RSS after reload ({what})",
                    "groups",
                    runs[-1].get("VmRSS", float("nan")),
                    "MiB",
                    note=f"before the first restart {before.get('VmRSS', float('nan')):.1f} MiB",
                )

    # ---------------------------------------------------------------- 8: idempotent producer
    if "idempotence" in args.groups:
        import idempotence as I

        with BrokerGroup("idempotence", args, report) as g:
            n, np_ = sc["idem_records"], sc["idem_passes"]
            passes: dict = {k: [] for k in I.KINDS}
            meters: dict = {}
            checks: list[str] = []
            for k in range(np_):
                # interleaved, and the order flips every pass, so neither kind always goes first
                order = I.KINDS if k % 2 == 0 else tuple(reversed(I.KINDS))
                log(
                    f"idempotence: pass {k + 1}/{np_}: {n:,} x {I.VALUE_SIZE} B, acks=all, 5 in flight, "
                    f"{' then '.join(order)} ..."
                )
                for kind in order:
                    topic = f"bench-idem-{kind}-{k}"
                    figures.create_topic(g.bootstrap, topic, parts)
                    prep = guarded(
                        f"idempotence-{kind}-prepare",
                        lambda t=topic, kd=kind: I.prepare(g.bootstrap, t, kd == "idempotent"),
                    )
                    rr = None
                    if prep:
                        with Meter(g.pid) as mm:  # the timed part only
                            rr = guarded(f"idempotence-{kind}", lambda pr=prep: I.produce(pr, n))
                    prep = None  # the producer goes now, not after the broker has stopped
                    passes[kind].append(rr)
                    if not rr:
                        continue
                    rr["broker_cpu_seconds"] = mm.broker_cpu * mm.wall
                    if kind not in meters or rr["rate"] > meters[kind][0]["rate"]:
                        meters[kind] = (rr, mm)
                    stored = sum(figures.end_offsets(g.bootstrap, topic, parts).values())
                    ids = I.stored_producer_ids(g.dir, topic, parts)
                    rr.update(stored_records=stored, **ids)
                    want = n + rr["warm_up_records"]
                    if stored != want or rr["errors"] or rr["undelivered"]:
                        checks.append(f"{topic}: stored {stored}/{want}, errors {rr['errors'][:2]}")
                    if kind == "idempotent" and (
                        len(ids["producer_ids"]) != 1 or ids["producer_ids"][0] < 0 or not ids["sequences_gap_free"]
                    ):
                        checks.append(
                            f"{topic}: producer ids {ids['producer_ids']}, gap-free {ids['sequences_gap_free']}"
                        )
                    if kind == "plain" and ids["producer_ids"] != [-1]:
                        checks.append(f"{topic}: plain batches carry producer ids {ids['producer_ids']}")
                    guarded(f"idempotence-delete-{topic}", lambda t=topic: I.delete_topic(g.bootstrap, t))
                log(
                    "  "
                    + ", ".join(
                        f"{kd} {passes[kd][-1]['rate']:,.0f}/s" if passes[kd] and passes[kd][-1] else f"{kd} failed"
                        for kd in order
                    )
                )
            sm = I.summary(passes)
            check = f"; CHECK: {'; '.join(checks[:3])}" if checks else ""
            plain = meters.get("plain")
            if plain:
                r, m = plain
                add_figure(
                    report,
                    f"produce {I.VALUE_SIZE} B, acks=all (confluent, plain)",
                    "idempotence",
                    r["rate"],
                    "rec/s",
                    note=f"{m.note()}; enable.idempotence=false, max.in.flight 5, "
                    f"linger 5 ms; best of {sm['plain']['rates']}{check}",
                    extra={"summary": sm, "passes": passes["plain"]},
                )
            idem = meters.get("idempotent")
            if idem:
                r, m = idem
                ratios = "/".join(f"{x:.0%}" for x in sm["pass_ratios"])
                add_figure(
                    report,
                    f"produce {I.VALUE_SIZE} B, acks=all (confluent, idempotent)",
                    "idempotence",
                    r["rate"],
                    "rec/s",
                    "plain (same run)",
                    plain[0]["rate"] if plain else None,
                    f"{m.note()}; enable.idempotence=true; best of {sm['idempotent']['rates']}; "
                    f"per-pass ratio {ratios}; broker CPU per 1M records, all passes: plain "
                    f"{sm['plain']['broker_cpu_per_million']:.2f} s, idempotent "
                    f"{sm['idempotent']['broker_cpu_per_million']:.2f} s{check}",
                    "idempotence",
                    extra={"summary": sm, "passes": passes["idempotent"]},
                )
            log(
                f"  best: plain {sm['plain']['best'] or float('nan'):,.0f}/s, idempotent "
                f"{sm['idempotent']['best'] or float('nan'):,.0f}/s, per-pass ratios {sm['pass_ratios']}"
            )

    # ---------------------------------------------------------------- 12: client quotas
    if "quotas" in args.groups:
        import quotas as Q

        # two 1 s samples: a throttled rate is measured over 1-2 s (Kafka's default 11 samples
        # let a client burst ~10 s of quota every ~11 s, which a short run cannot average out)
        with BrokerGroup("quotas", args, report, config={"quota.window.num": "2"}) as g:
            topic = "bench-quotas"
            figures.create_topic(g.bootstrap, topic, 1)
            secs = sc["quota_seconds"]
            for rate in (100_000, 1_000_000, 10_000_000):
                log(f"quotas: producer_byte_rate={rate:,} B/s, 1 KiB records flat out, {secs:.0f} s after 2 s ...")
                with Meter(g.pid) as m:
                    r = guarded(f"quota-{rate}", lambda rt=rate: Q.accuracy(g.bootstrap, topic, rt, secs, 2.0))
                if r:
                    note = f"{m.note()}; record value bytes acknowledged per s; {r['records']:,} records"
                    if r["errors"]:
                        note += f"; CHECK: errors {r['errors'][:2]}"
                    add_figure(
                        report,
                        f"produce under a {rate / 1e6:g} MB/s quota (confluent)",
                        "quotas",
                        r["rate"],
                        "B/s",
                        "the quota",
                        rate,
                        note,
                        "quota-accuracy",
                        extra=r,
                    )
                    log(f"  {r['rate']:,.0f} B/s ({r['ratio']:.1%} of the quota)")
            small = "bench-quota-small"
            figures.create_topic(g.bootstrap, small, 1)
            n, np_ = sc["small_requests"], sc["quota_passes"]
            log(
                f"quotas: small requests, {n:,} raw 1-record ProduceRequests, with and without quotas, "
                f"{np_} interleaved passes ..."
            )
            with Meter(g.pid) as m:
                r = guarded("quota-cost", lambda: Q.cost(g.bootstrap, small, n, np_, g.pid))
            if r:
                note = (
                    f"{m.note()}; producer_byte_rate and request_percentage on /clients/<default>, never "
                    f"throttling; passes: none {[round(x['rate']) for x in r['passes']['none']]}, quotas "
                    f"{[round(x['rate']) for x in r['passes']['quotas']]}"
                )
                if any(r["first_response_errors"]):
                    note += f"; CHECK: errors {r['first_response_errors']}"
                add_figure(
                    report,
                    "small produce with quota accounting (raw, window 64)",
                    "quotas",
                    r["best"]["quotas"],
                    "req/s",
                    "no quotas (same run)",
                    r["best"]["none"],
                    note,
                    "quota-cost",
                    extra=r,
                )
                log(
                    f"  quotas {r['best']['quotas']:,.0f} req/s, none {r['best']['none']:,.0f} req/s ({r['ratio']:.1%})"
                )
                cpu = r["best_per_cpu_second"]
                add_figure(
                    report,
                    "small produce with quota accounting, per broker CPU s",
                    "quotas",
                    cpu["quotas"],
                    "req/CPU s",
                    "no quotas (same run)",
                    cpu["none"],
                    "the same passes, counted by the broker's CPU seconds (/proc) instead of wall time: "
                    "less disturbed by other load on the machine",
                    "quota-cost",
                )
                log(
                    f"  per broker CPU second: quotas {cpu['quotas']:,.0f}, none {cpu['none']:,.0f} "
                    f"({r['cpu_ratio']:.1%})"
                )

    # ---------------------------------------------------------------- 14: share groups
    if "share" in args.groups:
        import share as SH

        with BrokerGroup("share", args, report, config=SH.BROKER_CONFIG) as g:
            n, np_ = sc["share_records"], sc["share_passes"]
            topic = "bench-share"
            figures.create_topic(g.bootstrap, topic, 1)
            log(f"share: {n:,} records of {SH.VALUE_SIZE} B into one partition ...")
            SH.fill(g.bootstrap, topic, n)
            best: dict = {}
            for k in range(np_):
                # 0: the classic consumer, 3 times a pass (a fraction of a second each, so noisy)
                for members in (0, 0, 0, 1, 2, 4):
                    label = f"{members} share consumer(s)" if members else "classic consumer"
                    log(f"share: {label}, pass {k + 1}/{np_} ...")
                    with Meter(g.pid) as m:
                        r = guarded(
                            f"share-{members}",
                            lambda mb=members: (
                                SH.share(g.bootstrap, topic, n, mb) if mb else SH.classic(g.bootstrap, topic, n)
                            ),
                        )
                    if r:
                        log(f"  {r['rate']:,.0f} records/s")
                        cpu = m.broker_cpu * m.wall / n * 1e6  # broker CPU s per 1M records: steadier under load
                        best.setdefault(members, []).append((r, f"{m.note()}, {cpu:.2f} s per 1M records"))
            classic = max((r for r, _ in best.get(0, [])), key=lambda r: r["rate"], default=None)
            for members, runs in sorted(best.items()):
                r, mnote = max(runs, key=lambda x: x[0]["rate"])
                rates = [round(x["rate"]) for x, _ in runs]
                note = f"{mnote}; first record after {r['first_record_s'] or float('nan'):.2f} s; best of {rates}"
                if members:
                    note += f"; per member {r['per_member']}; confluent-kafka ShareConsumer threads, implicit acks"
                    if r["distinct"] != n or r["duplicates"] or r["errors"]:
                        note += (
                            f"; CHECK: {r['distinct']}/{n} distinct, {r['duplicates']} duplicates, "
                            f"errors {r['errors'][:2]}"
                        )
                    add_figure(
                        report,
                        f"share group, {members} consumer(s), 1 partition",
                        "share",
                        r["rate"],
                        "rec/s",
                        "classic consumer (same run)",
                        classic["rate"] if classic else None,
                        note,
                        extra={"passes": [x for x, _ in runs]},
                    )
                else:
                    if r["records"] != n:
                        note += f"; CHECK: {r['records']}/{n} records"
                    add_figure(
                        report,
                        "classic consumer, assign(), 1 partition",
                        "share",
                        r["rate"],
                        "rec/s",
                        note=note + "; confluent-kafka Consumer, consume(10000)",
                        extra={"passes": [x for x, _ in runs]},
                    )
            passes = []
            for k in range(sc["redelivery_passes"]):
                log(f"share: redelivery after a {SH.LOCK_MS} ms lock, pass {k + 1}/{sc['redelivery_passes']} ...")
                r = guarded(f"share-redelivery-{k}", lambda kk=k: SH.redelivery(g.bootstrap, f"bench-redeliver-{kk}"))
                if r:
                    passes.append(r)
                    log(f"  {r['latency_s']:.3f} s (limit {r['limit_s']:.3f} s)")
            if passes:
                sm = SH.summary_redelivery(passes)
                note = (
                    f"median of {len(passes)}, max {sm['max_s']:.3f} s; share.record.lock.duration.ms="
                    f"{SH.LOCK_MS}; raw holder, confluent-kafka ShareConsumer receiver"
                )
                bad = [p for p in passes if p["redelivered"] != p["acquired"] or p["delivery_counts"] != [2]]
                if bad:
                    note += f"; CHECK: {bad[0]}"
                add_figure(
                    report,
                    "redelivery after a lock expiry",
                    "share",
                    sm["median_s"],
                    "s",
                    "lock duration + one ShareFetch (same run)",
                    sm["limit_s"],
                    note,
                    "redelivery",
                    extra={"passes": passes, "summary": sm},
                    judged=sm["max_s"],
                )

    # ---------------------------------------------------------------- 9: transactions
    if "transactions" in args.groups:
        import transactions as T

        with BrokerGroup("transactions", args, report) as g:
            n = sc["txn_records"]
            topic = "bench-txn"
            figures.create_topic(g.bootstrap, topic, parts)
            log(f"transactions: plain produce of {n:,} x 100 B, acks=all (the limit) ...")
            plain = guarded("txn-plain", lambda: T.plain_rate(g.bootstrap, topic, n, parts))
            for size in (1, 100, 10_000):
                log(f"transactions: transactions of {size:,} record(s), {n:,} records at most ...")
                with Meter(g.pid) as mm:
                    r = guarded(f"txn-{size}", lambda sz=size: T.txn_rate(g.bootstrap, topic, sz, n, parts))
                if r:
                    add_figure(
                        report,
                        f"transactional produce, {size:,} record(s) per transaction",
                        "transactions",
                        r["rate"],
                        "rec/s",
                        "plain acks=all (same run)",
                        plain["rate"] if plain else None,
                        f"{mm.note()}; {r['txn_rate']:,.0f} transactions/s over {r['seconds']:.1f} s "
                        f"({r['transactions']:,} transactions); the issue sets no bar",
                        extra=r,
                    )

    # ---------------------------------------------------------------- 10: the Spark connector
    if "spark" in args.groups:
        import spark as S

        with BrokerGroup("spark", args, report, config={"transaction.two.phase.commit.enable": "true"}) as g:
            n = sc["spark_records"]
            topic = "bench-spark"
            figures.create_topic(g.bootstrap, topic, parts)
            log(f"spark: {n:,} records of {len(S.VALUE)} B into {topic} ...")
            S.fill(g.bootstrap, topic, n, parts)
            spark = S.session()
            try:
                log("spark: batch read, kesque vs an in-memory Python data source ...")
                r = guarded("spark-read", lambda: S.batch_read(spark, g.bootstrap, topic, n, parts))
                if r:
                    add_figure(
                        report,
                        f"Spark batch read of {n:,} x {len(S.VALUE)} B records (local[2])",
                        "spark",
                        r["rate"],
                        "rows/s",
                        "in-memory Python data source, same Arrow batches (same run)",
                        r["ceiling"],
                        f"best of {len(r['kesque_seconds'])} passes, noop sink; {parts} "
                        f"partitions; the issue sets no bar",
                        extra=r,
                    )
                log("spark: batch write through the exactly-once sink vs the noop sink ...")
                figures.create_topic(g.bootstrap, topic + "-w", parts)
                w = guarded("spark-write", lambda: S.batch_write(spark, g.bootstrap, topic + "-w", n, parts))
                if w:
                    add_figure(
                        report,
                        f"Spark batch write of {n:,} x {len(S.VALUE)} B rows, exactly once (local[2])",
                        "spark",
                        w["rate"],
                        "rows/s",
                        "the same rows into the noop sink (same run)",
                        w["ceiling"],
                        f"best of {len(w['kesque_seconds'])} passes; one prepared transaction "
                        "per task, committed by the driver; the issue sets no bar",
                        extra=w,
                    )
                log("spark: streaming end-to-end latency (default trigger, exactly-once sink) ...")
                lat = guarded(
                    "spark-latency",
                    lambda: S.streaming_latency(
                        spark, g.bootstrap, sc["spark_latency_seconds"], tempfile.mkdtemp(prefix="kesque-cp-")
                    ),
                )
                if lat and lat.get("visible"):
                    for q in ("p50", "p99"):
                        add_figure(
                            report,
                            f"Spark streaming append -> visible in the sink, {q}",
                            "spark",
                            lat[f"{q}_ms"],
                            "ms",
                            note=f"{lat['visible']} of {lat['records']} records, one "
                            "every 100 ms, read_committed reader of the output; default trigger; the issue "
                            "sets no bar",
                            extra=lat,
                        )
            finally:
                spark.stop()

    # ---------------------------------------------------------------- 11: many partitions, recovery
    if "recovery" in args.groups:
        import recovery as R

        from kesque.storage.dirs import count_segments

        with BrokerGroup("recovery", args, report) as g:
            n = sc["recovery_partitions"]
            topics = R.topics_for(n)
            log(f"recovery: {len(topics):,} topics x {R.PARTITIONS_PER_TOPIC} partitions, one record each ...")
            filled = guarded("recovery-fill", lambda: R.fill(g.bootstrap, topics))
            clean = guarded("recovery-clean", lambda: R.restart_seconds(g.broker, kill=False))
            g.restarted()
            log("recovery: SIGKILL and restart ...")
            crash = guarded("recovery-crash", lambda: R.restart_seconds(g.broker, kill=True))
            g.restarted()
            if crash is not None:
                fds = g.broker.open_descriptors()
                segments = count_segments([g.dir])
                clean_txt = f"{clean:.1f} s" if clean is not None else "failed"
                note = (
                    f"{n:,} partitions; clean restart ({clean_txt}) is the limit; {segments:,} segments on disk "
                    f"(__cluster_metadata and internal topics included); the issue sets no bar"
                )
                if filled is None or filled["undelivered"]:
                    note += f"; CHECK: fill {filled}"
                add_figure(
                    report,
                    f"restart after SIGKILL, {n:,} partitions (recovery)",
                    "recovery",
                    crash,
                    "s",
                    "clean restart of the same data (same run)",
                    clean,
                    note,
                    extra={"fill": filled, "clean_seconds": clean, "descriptors": fds, "segments": segments},
                )
                add_figure(
                    report,
                    "open descriptors per partition after recovery",
                    "recovery",
                    fds / n,
                    "fd",
                    note=f"{fds:,} descriptors for {n:,} partitions ({segments:,} segments): one per segment "
                    "(its log file) plus the listener, connections and log files; was up to 3 per "
                    "recovered segment",
                )
                log(f"  recovery {crash:.1f} s, clean restart {clean_txt}, {fds:,} descriptors")

    # ---------------------------------------------------------------- 13: controller failover, commit latency
    if "controller" in args.groups:
        import controller as C

        runs, n = sc["failover_runs"], sc["commit_requests"]
        measured = {}
        log(f"controller: Apache Kafka, {runs} failovers per setting, {n} CreateTopics per commit figure ...")
        parts = args.controller_parts.split(",")

        def failed(part, e):
            traceback.print_exc()
            report["errors"].append(f"controller {part}: {e!r}")
            log(f"controller {part} FAILED: {e!r}")

        measured["kafka"] = C.measure("kafka", runs, n, log, parts, failed)
        log("controller: kesque, the same ...")
        measured["kesque"] = C.measure("kesque", runs, n, log, parts, failed)
        add_controller_figures(report, measured, runs, n, "")

    # ---------------------------------------------------------------- 16: partition replication
    if "replication" in args.groups:
        import replication as R

        measured = {}
        for kind in ("kesque", "kafka"):
            log(
                f"replication: {kind}, 3 nodes: produce RF 3/RF 1, catch-up of {sc['catchup_bytes'] >> 20} MiB, "
                f"{sc['failover_runs']} SIGKILL and {sc['failover_runs']} SIGTERM failovers ..."
            )
            measured[kind] = guarded(f"replication-{kind}", lambda k=kind: R.measure(k, sc, parts, RESULTS, log))
            for e in (measured[kind] or {}).get("errors", []):
                report["errors"].append(f"replication: {e}")
            for line in (measured[kind] or {}).get("log_problems", []) if kind == "kesque" else ():
                report["errors"].append(f"replication: kesque log: {line}")
        add_replication_figures(report, measured, sc, parts)

    # ---------------------------------------------------------------- issue 25: Kafka's exactly-once apps
    if "eos-apps" in args.groups:
        import eos_apps as E

        measured = {}
        for kind in ("kesque", "kafka"):
            log(
                f"eos-apps: {kind}, 3 nodes: Streams word count of {sc['eos_lines']:,} lines, copier of "
                f"{sc['copier_records']:,} records calm and with broker kills ..."
            )
            measured[kind] = guarded(f"eos-apps-{kind}", lambda k=kind: E.measure(k, sc, log))
            for e in (measured[kind] or {}).get("errors", []):
                report["errors"].append(f"eos-apps: {e}")
        add_eos_app_figures(report, measured)

    # ---------------------------------------------------------------- 6: memory
    for name, info in report["brokers"].items():
        if "VmRSS" in info:
            note = (
                f"peak {info.get('VmHWM', float('nan')):.0f} MiB; data {info['data_bytes'] / 1e6:.0f} MB; "
                f"first consumer (FindCoordinator) took {info['consumer_warm_up_seconds']:.1f} s"
            )
            if not info["alive_at_end"]:
                note += f"; BROKER DIED (exit {info.get('exit_code')})"
            add_figure(report, f"broker RSS after {name}", "memory", info["VmRSS"], "MiB", note=note)
        elif not info.get("alive_at_end", True):
            add_figure(
                report,
                f"broker RSS after {name}",
                "memory",
                float("nan"),
                "MiB",
                note=f"BROKER DIED (exit {info.get('exit_code')})",
            )

    # ---------------------------------------------------------------- output
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report["host"]["loadavg_end"] = os.getloadavg()
    print_table(report)
    print()
    print(
        f"limits: loopback {_fmt(loop_mb)} MB/s, disk {_fmt(disk_mb)} MB/s (write+fsync), "
        f"echo asyncio {_fmt(echo)} req/s, echo uvloop "
        f"{_fmt((L.get('echo_uvloop') or {}).get('rate')) if L.get('echo_uvloop') else 'not installed'}"
    )
    print(
        f"load average at start {report['host']['loadavg_start'][0]:.2f}, at end {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs (figures from a loaded machine are provisional)"
    )
    if args.profile:
        import profiling

        for name, info in report["brokers"].items():
            print()
            if "profile" in info:
                print(profiling.format_summary(name, info["profile"]))
            elif "profile_error" in info:
                print(f"broker profile, {name}: {info['profile_error']}")
    return finish(report, args, exported)


def finish(report: dict, args, exported: str | None) -> int:
    """Errors, the JSON file, the exported tree removed."""
    report.setdefault("finished", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    report["host"].setdefault("loadavg_end", os.getloadavg())
    if report["errors"]:
        print("\nerrors:\n  " + "\n  ".join(report["errors"]))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(f"\nwritten: {args.out}")
    if exported:
        shutil.rmtree(exported, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
