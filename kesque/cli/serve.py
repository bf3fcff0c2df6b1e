"""``kesque serve [FILE] [--override k=v ...]``: run a broker."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from ..config import BrokerConfig, ConfigError, parse_properties
from ..config.broker import SINGLE_NODE
from ..storage.dirs import LogDirError, ensure_storage

log = logging.getLogger("kesque")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="run a kesque broker",
        description="Run a kesque node. FILE is a Kafka server.properties file; --override sets "
        "or replaces keys. Without FILE the node runs the single-node settings of "
        "config/server.properties (internal topics with one replica).",
    )
    p.add_argument("config", nargs="?", metavar="FILE", help="server.properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key (repeatable), as kafka-server-start.sh --override",
    )
    p.add_argument(
        "--log-level", default=os.environ.get("KESQUE_LOG_LEVEL", "INFO"), help="logging level (default INFO)"
    )
    p.set_defaults(func=run)


def load_config(path: str | None, overrides: list[str]) -> BrokerConfig:
    props: dict[str, str] = {} if path else dict(SINGLE_NODE)
    if path:
        with open(path) as f:
            props.update(parse_properties(f.read()))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, f"Invalid --override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return BrokerConfig(props)


async def serve(config: BrokerConfig, ready_fd: int | None = None) -> None:
    # lazy: only `kesque serve` loads the broker; the other tools import this module
    from ..server.server import KesqueServer

    server = KesqueServer(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    if ready_fd is not None:
        ports = ",".join(f"{name}={host or '0.0.0.0'}:{port}" for name, (host, port) in server.bound.items())
        os.write(ready_fd, (ports + "\n").encode())
        os.close(ready_fd)
    await stop.wait()
    log.info("Shutting down")
    await server.stop(clean=True)


def run(args) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
    )
    try:
        config = load_config(args.config, args.override)
    except ConfigError as e:
        print(f"kesque: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kesque: cannot read {args.config}: {e}", file=sys.stderr)
        return 2
    ready = os.environ.get("KESQUE_READY_FD")
    try:
        ensure_storage(config)
        asyncio.run(serve(config, int(ready) if ready else None))
    except KeyboardInterrupt:
        pass
    except Exception as e:
        if isinstance(e, (LogDirError, ConfigError, OSError)):
            print(f"kesque: {e}", file=sys.stderr)
            return 1
        raise
    return 0
