"""``kesque console --bootstrap-server HOST:PORT [--command-config FILE] [--listen
http://127.0.0.1:8080]``: the web console of any Kafka-protocol cluster (docs/console.md), over
the security of ``--command-config`` (Kafka's client properties: SSL, SASL_PLAINTEXT, SASL_SSL)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from ..config.broker import ConfigError, metrics_listener
from ..console.endpoint import ConsoleServer
from .plumbing.javautil import load_props


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="kesque console",
        description="Serve the web console of the cluster at --bootstrap-server (any Kafka-protocol "
        "cluster) at --listen, 127.0.0.1 unless told otherwise.",
    )
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the cluster to show")
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties to reach the cluster with (security.protocol, ssl.*, sasl.*)",
    )
    p.add_argument(
        "--listen",
        default="http://127.0.0.1:8080",
        metavar="http://HOST:PORT",
        help="where the console listens (default http://127.0.0.1:8080; port 0: any free port)",
    )
    p.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="how long a page waits for the cluster"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    try:
        host, port = metrics_listener("--listen", args.listen)
    except ConfigError as e:
        print(f"kesque console: {e}", file=sys.stderr)
        return 2
    try:
        props = load_props(args.command_config) if args.command_config else None
        endpoint = ConsoleServer(host, port, args.bootstrap_server, timeout=args.timeout, client_props=props)
    except (ConfigError, OSError) as e:  # a bad value names its key; a file that cannot be read
        print(f"kesque console: {e}", file=sys.stderr)
        return 1
    try:
        endpoint.start()
    except OSError as e:
        print(f"kesque console: unable to listen on {args.listen}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"kesque console of {args.bootstrap_server} at {endpoint.url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    endpoint.stop()
    return 0
