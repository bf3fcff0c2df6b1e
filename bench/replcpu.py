"""Broker CPU per MB of replicated produce, A/B between source trees in one run (issue 14's bar).

Wall-clock throughput on a shared machine is noisy; the CPU seconds the broker processes spend
per MB produced (utime + stime of every node from /proc, the client's own CPU apart) are much
less so. This script starts one 3-node kesque cluster per source tree (``--src NAME=DIR``: the
nodes run ``python -m kesque`` from DIR, so a baseline export and a working tree can be compared
in the same run), then runs interleaved passes of the cases (``--cases``):

* ``rf1``: RF 1, acks=1;  ``rf3all``: RF 3, acks=all;  ``rf3one``: RF 3, acks=1

each into a fresh ``--partitions``-partition topic (replicas spread round robin, so every node
leads some partitions and follows others), with figure 1's confluent-kafka producer
(``figures.produce_confluent``). Per pass it prints MB/s, the nodes' CPU seconds per MB of
payload and the client's. With ``--profile DIR`` every node of every tree is sampled by py-spy
during the ``--profile-case`` passes only (raw files in DIR, and a top-N summary printed).

    .venv/bin/python bench/replcpu.py --src base=/tmp/kesque-base --src new=. --passes 3

Nothing asserts on timing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CASES = {"rf1": (1, 1), "rf3all": (3, "all"), "rf3one": (3, 1)}


@contextlib.contextmanager
def cluster_from(src: str, settings: dict):
    """A 3-node kesque cluster whose nodes import kesque from ``src``."""
    import controller as C

    old_cwd, old_pp = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(src)  # `python -m kesque` puts the working directory first on sys.path
    os.environ["PYTHONPATH"] = src
    try:
        cm = C.kesque_cluster(3, settings)
        nodes = cm.__enter__()
    finally:
        os.chdir(old_cwd)
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp
    try:
        yield nodes
    finally:
        cm.__exit__(None, None, None)


def OnCpuSampler(pid: int, out_path: str):
    """profiling.Sampler without ``--idle``: py-spy keeps only samples of running threads, so the
    time a broker waits in a syscall (an fsync, a journal lock in pwrite) is not counted."""
    import subprocess

    import profiling

    s = profiling.Sampler.__new__(profiling.Sampler)
    s.out_path, s.error = out_path, None
    s.proc = subprocess.Popen(
        [
            profiling.py_spy_path(),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--format",
            "raw",
            "--nonblocking",
            "-o",
            out_path,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", action="append", default=[], help="NAME=DIR (repeatable); default: this tree")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--cases", default="rf1,rf3all")
    ap.add_argument("--profile", metavar="DIR", help="py-spy every node during the --profile-case passes")
    ap.add_argument("--profile-case", default="rf3all")
    ap.add_argument(
        "--perf",
        action="store_true",
        help="with --profile: also `perf record -g` the nodes (on-CPU, "
        "kernel included) into DIR/<tree>-<case>-p<pass>.perf",
    )
    args = ap.parse_args()

    repo = os.path.dirname(HERE)
    srcs = [tuple(s.split("=", 1)) for s in args.src] or [("tree", repo)]
    srcs = [(n, os.path.abspath(d)) for n, d in srcs]
    sys.path.insert(0, repo)
    import figures as F
    import profiling
    import replication as R
    from run import proc_cpu_times, self_cpu_seconds

    cases = args.cases.split(",")
    values = F.value_pool(F.KIB)
    mb = args.records * F.KIB / F.MB
    results: dict = {(n, c): [] for n, _d in srcs for c in cases}
    with contextlib.ExitStack() as stack:
        clusters = []
        for name, d in srcs:
            nodes = stack.enter_context(cluster_from(d, R.TEST_SETTINGS))
            clusters.append((name, nodes, R.Client(nodes)))
            print(f"{name}: 3 nodes from {d}", flush=True)
        for i in range(args.passes):
            for name, nodes, client in clusters:
                for case in cases:
                    rf, acks = CASES[case]
                    topic = f"cpu-{case}-{i}"
                    client.create(topic, R.spread(nodes.ids, args.partitions, rf))
                    samplers = []
                    if args.profile and case == args.profile_case:
                        os.makedirs(args.profile, exist_ok=True)
                        samplers = [
                            OnCpuSampler(nodes.pid(n), os.path.join(args.profile, f"{name}-{case}-p{i}-node{n}.txt"))
                            for n in nodes.ids
                        ]
                    perf = None
                    if args.profile and args.perf and case == args.profile_case:
                        import subprocess

                        perf = subprocess.Popen(
                            [
                                "perf",
                                "record",
                                "-F",
                                "499",
                                "-g",
                                "-q",
                                "-o",
                                os.path.join(args.profile, f"{name}-{case}-p{i}.perf"),
                                "-p",
                                ",".join(str(nodes.pid(n)) for n in nodes.ids),
                            ],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        )
                    per0 = {n: proc_cpu_times(nodes.pid(n)) for n in nodes.ids}
                    c0 = self_cpu_seconds()
                    r = F.produce_confluent(nodes.bootstrap(), topic, args.records, acks=acks, values=values)
                    c1 = self_cpu_seconds()
                    per1 = {n: proc_cpu_times(nodes.pid(n)) for n in nodes.ids}
                    per = {n: sum(per1[n]) - sum(per0[n]) for n in nodes.ids}
                    sys_s = sum(per1[n][1] - per0[n][1] for n in nodes.ids)
                    user_s = sum(per1[n][0] - per0[n][0] for n in nodes.ids)
                    for s in samplers:
                        s.stop()
                    if perf is not None:
                        import signal

                        perf.send_signal(signal.SIGINT)
                        perf.wait(60)
                    try:  # acks=1: the high watermarks follow shortly
                        stored = R.wait(
                            lambda: (lambda v: v if v == args.records else 0)(
                                sum(F.end_offsets(nodes.bootstrap(), topic, args.partitions).values())
                            ),
                            30,
                            "stored",
                        )
                    except TimeoutError:
                        stored = -1
                    cpu = sum(per.values())
                    row = {
                        "mb_s": r["mb_s"],
                        "cpu_per_mb": cpu / mb * 1000,
                        "client_per_mb": (c1 - c0) / mb * 1000,
                        "sys_share": sys_s / cpu if cpu else 0.0,
                        "user_per_mb": user_s / mb * 1000,
                        "per_node": per,
                        "ok": stored == args.records and not r["undelivered"],
                    }
                    results[(name, case)].append(row)
                    print(
                        f"  pass {i + 1} {name:>6} {case:>6}: {r['mb_s']:6.1f} MB/s, brokers "
                        f"{row['cpu_per_mb']:6.2f} ms CPU/MB ({' '.join(f'{v:.2f}' for v in per.values())} s, "
                        f"{row['sys_share']:.0%} sys; user {row['user_per_mb']:.2f} ms/MB), "
                        f"client {row['client_per_mb']:5.2f} ms/MB{'' if row['ok'] else '  CHECK: not all stored'}",
                        flush=True,
                    )
                    if samplers:
                        for n, s in zip(nodes.ids, samplers):
                            if s.error is None:
                                print(
                                    profiling.format_summary(
                                        f"{name} {case} node {n}", profiling.summarize(s.out_path), 25
                                    )
                                )
    print(
        f"\n{args.records:,} x 1 KiB, {args.partitions} partitions; median over {args.passes} passes "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    for name, _d in srcs:
        med = {
            c: (
                statistics.median(r["mb_s"] for r in results[(name, c)]),
                statistics.median(r["cpu_per_mb"] for r in results[(name, c)]),
                statistics.median(r["user_per_mb"] for r in results[(name, c)]),
            )
            for c in cases
        }
        line = "  ".join(f"{c}: {m:.1f} MB/s {cp:.2f} ms/MB (user {u:.2f})" for c, (m, cp, u) in med.items())
        print(f"{name:>6}: {line}")
        if "rf1" in med and "rf3all" in med:
            print(
                f"{'':>6}  rf3all/rf1: throughput {med['rf3all'][0] / med['rf1'][0]:.0%}, "
                f"CPU per MB {med['rf3all'][1] / med['rf1'][1]:.2f}x (user {med['rf3all'][2] / med['rf1'][2]:.2f}x)"
            )


if __name__ == "__main__":
    main()
