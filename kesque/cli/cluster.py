"""``kesque cluster up|down|status --dir DIR``: a local cluster of kesque processes in one command.

    kesque cluster up --nodes 3 --dir /tmp/c [--controllers 3] [--base-port 9092]
    kesque cluster status --dir /tmp/c
    kesque cluster down --dir /tmp/c

``up`` writes one server.properties per node under ``DIR/node-<id>/`` (combined broker+controller
nodes when ``--controllers`` equals ``--nodes``, the default; otherwise controller-only and
broker-only nodes, see :mod:`kesque.testing.cluster`), formats every node's storage with one
cluster id, starts the nodes detached (``kesque.pid`` and ``kesque.log`` beside their
server.properties), waits until each one is ready and prints the bootstrap servers on stdout.
The nodes run with two-phase commit (KIP-939) enabled, so that kesque's own pipelines (the Spark
sink writes exactly once with it) run on them; ``--override KEY=VALUE`` sets any key of every
node, that one included; ``--config FILE`` sets every key of a properties file first (the
``cluster.properties`` of ``kesque certs``: a SASL_SSL cluster).
``down`` stops them: SIGTERM (a clean shutdown), SIGKILL after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from ..config import parse_properties
from ..testing.cluster import Cluster

STATE = "cluster.properties"
PID = "kesque.pid"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kesque cluster", description="Start, stop and show a local cluster of kesque processes."
    )
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="write the nodes' configurations, format their storage, start them")
    up.add_argument("--nodes", type=int, default=3, help="broker nodes (default 3)")
    up.add_argument(
        "--controllers",
        type=int,
        help="controller nodes (default: --nodes, every node both broker "
        "and controller; otherwise separate controller-only nodes)",
    )
    up.add_argument("--dir", required=True, help="the cluster's directory (configurations, data, logs)")
    up.add_argument(
        "--base-port",
        type=int,
        default=0,
        help="first port: each node takes its client port, then its "
        "controller port, in node id order (default: free ports)",
    )
    up.add_argument("--timeout", type=float, default=60, help="seconds to wait for the nodes (default 60)")
    up.add_argument(
        "--config",
        metavar="FILE",
        help="a properties file whose keys every node gets (before the --override ones), e.g. the "
        "cluster.properties of kesque certs",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key on every node (repeatable), as kafka-server-start.sh --override",
    )
    for name, text in (
        ("down", "stop the cluster's nodes (SIGTERM, SIGKILL after --timeout)"),
        ("status", "show the cluster's nodes and whether each runs"),
    ):
        q = sub.add_parser(name, help=text)
        q.add_argument("--dir", required=True, help="the cluster's directory")
        if name == "down":
            q.add_argument("--timeout", type=float, default=30, help="seconds before SIGKILL (default 30)")
    return p


# ---------------------------------------------------------------------- node processes
def _node_dirs(directory: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = [(int(n[5:]), os.path.join(directory, n)) for n in names if n.startswith("node-") and n[5:].isdigit()]
    return sorted(out)


def _pid(node_dir: str) -> int | None:
    """The pid of the node's running ``kesque serve`` (None: not running, or the pid file is
    stale: that pid is now another program)."""
    try:
        with open(os.path.join(node_dir, PID)) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
    except (OSError, ValueError, IndexError):
        return None
    config = os.path.join(node_dir, "server.properties").encode()
    return pid if b"serve" in cmdline and config in cmdline else None


def _roles(node_dir: str) -> tuple[str, str]:

    try:
        with open(os.path.join(node_dir, "server.properties")) as f:
            props = parse_properties(f.read())
    except OSError:
        return "?", ""
    return props.get("process.roles", "?"), props.get("listeners", "")


# what every node `up` starts runs with unless an --override says otherwise: two-phase commit
# (KIP-939, off in Kafka by default) on, because the Spark sink (kesque/spark/sink.py) needs it
UP_DEFAULTS = {"transaction.two.phase.commit.enable": "true"}


def node_config(overrides: list[str], path: str | None = None) -> dict[str, str]:
    """The settings `up` adds to each node's server.properties: UP_DEFAULTS, the file's (--config),
    then the overrides."""
    config = dict(UP_DEFAULTS)
    if path:
        try:
            with open(path) as f:
                config.update(parse_properties(f.read()))
        except OSError as e:
            raise ValueError(f"cannot read --config {path}: {e.strerror}") from None
    for item in overrides:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"Invalid --override {item!r}: expected key=value")
        config[k.strip()] = v.strip()
    return config


# ---------------------------------------------------------------------- commands
def up(args) -> int:
    running = [n for n, d in _node_dirs(args.dir) if _pid(d)]
    if running:
        print(
            f"kesque cluster: nodes {', '.join(map(str, running))} of a cluster in {args.dir} are running: "
            f"kesque cluster down --dir {args.dir} first",
            file=sys.stderr,
        )
        return 1
    try:
        cluster = Cluster(
            args.nodes,
            args.controllers,
            data_dir=os.path.abspath(args.dir),
            base_port=args.base_port,
            config=node_config(args.override, args.config),
            detach=True,
        )
    except ValueError as e:
        print(f"kesque cluster: {e}", file=sys.stderr)
        return 2
    try:
        for b in cluster.nodes.values():
            b.launch()
            with open(os.path.join(b.data_dir, PID), "w") as f:
                f.write(f"{b.process.pid}\n")
        deadline = time.monotonic() + args.timeout
        for b in cluster.nodes.values():
            b.wait_ready(max(0.1, deadline - time.monotonic()))
    except Exception as e:
        cluster.stop()
        print(f"kesque cluster: the cluster did not start: {e}", file=sys.stderr)
        return 1
    with open(os.path.join(args.dir, STATE), "w") as f:
        f.write(f"cluster.id={cluster.cluster_id}\nbootstrap.servers={cluster.bootstrap_servers}\n")
    n = len(cluster.nodes)
    print(
        f"kesque cluster {cluster.cluster_id}: {n} node{'' if n == 1 else 's'} running in {args.dir}", file=sys.stderr
    )
    print(cluster.bootstrap_servers)
    return 0


def down(args) -> int:
    pids = {n: pid for n, d in _node_dirs(args.dir) if (pid := _pid(d))}
    for pid in pids.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for n, pid in pids.items():
        how = "stopped"
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            how = f"killed (SIGKILL: still running after {args.timeout:g} s)"
        print(f"node {n} (pid {pid}) {how}")
    for _, d in _node_dirs(args.dir):
        try:
            os.unlink(os.path.join(d, PID))
        except FileNotFoundError:
            pass
    if not pids:
        print(f"no kesque node is running in {args.dir}")
    return 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def status(args) -> int:
    nodes = _node_dirs(args.dir)
    if not nodes:
        print(f"no kesque cluster in {args.dir}", file=sys.stderr)
        return 1
    down_nodes = 0
    for n, d in nodes:
        pid = _pid(d)
        roles, listeners = _roles(d)
        down_nodes += pid is None
        print(f"node {n} ({roles}) {'running, pid ' + str(pid) if pid else 'not running'}: {listeners}")
    return 1 if down_nodes else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return {"up": up, "down": down, "status": status}[args.command](args)
