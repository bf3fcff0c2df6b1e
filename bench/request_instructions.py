"""The broker's user-space instructions per small produce request, A/B between source trees.

Throughput on this 2-core machine spreads 10-20% between runs of one tree, so a 2% bar cannot be
read off it. Instructions can: ``valgrind --tool=callgrind`` counts what the broker process
executes, the same from run to run (0.02% apart here) whatever else the machine does. Per tree
(``--src NAME=DIR``, the broker runs ``python -m kesque`` from DIR) the broker is started under
callgrind twice and sent ``--low`` then ``--high`` pre-encoded one-record ProduceRequests (figure
4's raw client, a window of 64); the difference of the two totals over ``high - low`` is the
instructions one request costs, start-up and warm-up cancelled. With ``--config
metrics.listener=...`` each run ends with one scrape of /metrics, so that what the broker folds
at scrape time is counted too. A setting given as ``--config NAME:KEY=VALUE`` applies to the
source NAME only, so that one tree is measured with metrics off and on in the same run
(``--src off=. --src on=. --config on:metrics.listener=http://127.0.0.1:0``); ``--keep DIR``
keeps each run's callgrind output there (``callgrind_annotate`` them to see where a difference
is). The kernel's side is not counted:
``--syscalls`` also attaches ``strace -c`` to a normal run and prints the system calls per request.

    .venv/bin/python bench/request_instructions.py --src before=/tmp/kesque-a542bed --src after=.

Each callgrind run takes one to two minutes. Nothing asserts on timing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


CONFIG: dict[str, str] = {}  # --config KEY=VALUE: broker settings of the source being measured
KEEP: list[str] = []  # --keep DIR: where each run's callgrind output is copied


def _broker(src: str, data: str, wrapper: str | None):
    """A broker running ``python -m kesque serve`` from ``src`` (under ``wrapper``, a script that
    execs the interpreter with its arguments)."""
    from kesque.testing.broker import Broker

    config = {"auto.create.topics.enable": "false", **CONFIG}
    b = Broker(data_dir=data, log_file=os.path.join(data, "broker.log"), config=config)
    if wrapper:
        b_exe, sys.executable = sys.executable, wrapper
        try:
            b.start(900)
        finally:
            sys.executable = b_exe
    else:
        b.start(120)
    return b


def _wrapper(directory: str, out: str) -> str:
    path = os.path.join(directory, "python-under-callgrind")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file="{out}" "{sys.executable}" "$@"\n')
    os.chmod(path, 0o755)
    return path


def instructions(src: str, requests: int, name: str = "") -> int:
    """Total instructions of a broker from ``src`` that served ``requests`` small requests (its
    callgrind output kept as ``<KEEP>/<name>-<requests>.out`` with ``--keep``)."""
    import figures

    with tempfile.TemporaryDirectory(prefix="kesque-instr-") as d:
        out = os.path.join(d, "callgrind.out")
        b = _broker(src, os.path.join(d, "data"), _wrapper(d, out))
        try:
            figures.create_topic(b.bootstrap_servers, "small", 1)
            figures.small_raw(b.bootstrap_servers, "small", requests)
            if "metrics.listener" in CONFIG:
                _scrape(os.path.join(d, "data", "broker.log"))
        finally:
            b.stop(600)
        if KEEP:
            shutil.copy(out, os.path.join(KEEP[0], f"{name or 'run'}-{requests}.out"))
        with open(out) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("totals:"))


def _scrape(log_file: str) -> None:
    """One scrape of the broker's /metrics (its URL from the log line): whatever the broker defers
    to a scrape (the request time histograms' fold) is in the count, as with a Prometheus."""
    with open(log_file) as f:
        url = re.search(r"Metrics endpoint listening on (http://\S+)", f.read()).group(1)
    with urllib.request.urlopen(url, timeout=600) as r:
        r.read()


def syscalls(src: str, requests: int) -> dict[str, int]:
    """System calls per name of a broker from ``src`` while it serves ``requests`` small requests."""
    import figures

    with tempfile.TemporaryDirectory(prefix="kesque-strace-") as d:
        b = _broker(src, os.path.join(d, "data"), None)
        out = os.path.join(d, "strace.out")
        try:
            figures.create_topic(b.bootstrap_servers, "small", 1)
            figures.small_raw(b.bootstrap_servers, "small", 2000)
            pid = str(b.process.pid)
            st = subprocess.Popen(["strace", "-f", "-c", "-o", out, "-p", pid], stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            figures.small_raw(b.bootstrap_servers, "small", requests)
            st.send_signal(signal.SIGINT)
            st.wait(60)
        finally:
            b.stop()
        counts = {}
        with open(out) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                    counts[parts[-1]] = int(parts[3])
        return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", action="append", required=True, metavar="NAME=DIR")
    p.add_argument("--low", type=int, default=2000)
    p.add_argument("--high", type=int, default=12000)
    p.add_argument("--syscalls", action="store_true", help="also count system calls per request (strace)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="[NAME:]KEY=VALUE",
        help="a broker setting of every run, or of source NAME's runs only",
    )
    p.add_argument("--keep", metavar="DIR", help="keep each run's callgrind output in DIR")
    args = p.parse_args(argv)
    settings = []  # (source name or None, key, value)
    for item in args.config:
        key, value = item.split("=", 1)
        only, _, key = key.rpartition(":")
        settings.append((only or None, key, value))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        KEEP.append(os.path.abspath(args.keep))
    if shutil.which("valgrind") is None:
        print("valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 2
    os.environ["PYTHONHASHSEED"] = "0"  # the same dict and set layouts on every run
    per = {}
    sources = [(name, os.path.abspath(src)) for name, src in (spec.split("=", 1) for spec in args.src)]
    for name, src in sources:  # each run changes directory: the paths are resolved before the first
        os.environ["PYTHONPATH"] = src
        os.chdir(src)
        CONFIG.clear()
        CONFIG.update((key, value) for only, key, value in settings if only in (None, name))
        low, high = instructions(src, args.low, name), instructions(src, args.high, name)
        per[name] = (high - low) / (args.high - args.low)
        print(f"{name}: {per[name]:,.0f} instructions per small produce request ({low:,} / {high:,} in all)")
        if args.syscalls:
            n = 20000
            counts = syscalls(src, n)
            print(f"{name}: {sum(counts.values()) / n:.3f} system calls per request: {counts}")
    names = list(per)
    for other in names[1:]:
        print(f"{names[0]} / {other}: {per[names[0]] / per[other]:.1%} (the request rate {other} can reach, CPU bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
