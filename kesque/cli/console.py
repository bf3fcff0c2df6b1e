"""``kesque console --bootstrap-server HOST:PORT [--listen http://127.0.0.1:8080]``: the web
console of any Kafka-protocol cluster (docs/console.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from ..config.broker import ConfigError, metrics_listener
from ..console.endpoint import ConsoleServer


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="kesque console",
        description="Serve the web console of the cluster at --bootstrap-server (any Kafka-protocol "
        "cluster, PLAINTEXT) at --listen, 127.0.0.1 unless told otherwise.",
    )
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the cluster to show")
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
    endpoint = ConsoleServer(host, port, args.bootstrap_server, timeout=args.timeout)
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
