"""Kafka's command-line tools, re-done on confluent-kafka.

Each tool is a module of :mod:`kesque.cli` with ``NAME`` (the ``kesque`` subcommand),
``SCRIPT`` (Kafka's script name, installed as a console script), ``DESCRIPTION``,
``configure(parser)`` and ``run(args) -> int``. The same module serves both
``kesque topics ...`` and ``kafka-topics.sh ...`` with identical flags and output.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys

from .plumbing.jopt import kafkaize, new_parser
from .plumbing.run import ToolExit, exit_flushed, run_tool

# subcommand (the module's NAME) -> module: `kesque <subcommand>` imports that tool alone
_MODULES = {
    "topics": "topics",
    "configs": "configs",
    "console-producer": "console_producer",
    "console-consumer": "console_consumer",
    "dump-log": "dump_log",
    "get-offsets": "get_offsets",
    "delete-records": "delete_records",
    "log-dirs": "log_dirs",
    "producer-perf-test": "producer_perf",
    "consumer-perf-test": "consumer_perf",
    "consumer-groups": "consumer_groups",
    "console-share-consumer": "console_share_consumer",
    "share-groups": "share_groups",
    "leader-election": "leader_election",
    "reassign-partitions": "reassign_partitions",
    "acls": "acls",
}


def is_tool(command: str) -> bool:
    return command in _MODULES


def _module(name: str):
    return importlib.import_module(f"{__package__}.{name}")


def _wrap(mod):
    def func(args) -> int:
        return run_tool(mod.run, args)

    return func


def add_parsers(sub, only: str | None = None) -> None:
    """Register the tool subcommands on ``kesque``'s subparsers (``only``: that one alone)."""
    for command, name in _MODULES.items():
        if only is not None and command != only:
            continue
        try:
            mod = _module(name)
        except Exception:  # a broken tool must never take `kesque serve` down with it
            continue
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.DESCRIPTION, allow_abbrev=True)
        _style(p, mod)
        mod.configure(p)
        p.set_defaults(func=_wrap(mod), _parser=p)


def _style(p, mod) -> None:
    """jopt-simple behaviour (Kafka's usual) or argparse4j's (ProducerPerformance)."""
    if getattr(mod, "ARGPARSE_STYLE", False):

        def error(message, p=p):
            sys.stderr.write(p.format_usage())
            sys.stderr.write(f"{mod.PROG}: error: {message}\n")
            raise ToolExit(1)

        p.error = error
        p.description = mod.DESCRIPTION
    else:
        kafkaize(p, mod.DESCRIPTION)


def _console(module_name: str, argv: list[str] | None = None) -> int:
    mod = _module(module_name)
    if getattr(mod, "ARGPARSE_STYLE", False):
        p = argparse.ArgumentParser(prog=getattr(mod, "PROG", mod.SCRIPT))
    else:
        p = new_parser(mod.SCRIPT, mod.DESCRIPTION)
    _style(p, mod)
    mod.configure(p)
    p.set_defaults(_parser=p)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = p.parse_args(argv)
    except ToolExit as e:
        return e.code
    args._argv = argv
    return _wrap(mod)(args)


_exit = exit_flushed


def kafka_topics() -> None:
    _exit(_console("topics"))


def kafka_configs() -> None:
    _exit(_console("configs"))


def kafka_console_producer() -> None:
    _exit(_console("console_producer"))


def kafka_console_consumer() -> None:
    _exit(_console("console_consumer"))


def kafka_dump_log() -> None:
    _exit(_console("dump_log"))


def kafka_get_offsets() -> None:
    _exit(_console("get_offsets"))


def kafka_delete_records() -> None:
    _exit(_console("delete_records"))


def kafka_log_dirs() -> None:
    _exit(_console("log_dirs"))


def kafka_producer_perf_test() -> None:
    _exit(_console("producer_perf"))


def kafka_consumer_perf_test() -> None:
    _exit(_console("consumer_perf"))


def kafka_consumer_groups() -> None:
    _exit(_console("consumer_groups"))


def kafka_console_share_consumer() -> None:
    _exit(_console("console_share_consumer"))


def kafka_share_groups() -> None:
    _exit(_console("share_groups"))


def kafka_leader_election() -> None:
    _exit(_console("leader_election"))


def kafka_reassign_partitions() -> None:
    _exit(_console("reassign_partitions"))


def kafka_acls() -> None:
    _exit(_console("acls"))


def kafka_server_start(argv: list[str] | None = None) -> None:
    """``kafka-server-start.sh [-daemon] server.properties [--override property=value]*``."""
    # lazy: only kafka-server-start.sh loads the broker
    from . import serve

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        out = sys.stdout if argv else sys.stderr
        print("USAGE: kafka-server-start.sh [-daemon] server.properties [--override property=value]*", file=out)
        _exit(0 if argv else 1)
    if argv[0] == "-daemon":
        # as kafka-run-class.sh -daemon: detach, output to $LOG_DIR/kafkaServer.out
        log_dir = os.environ.get("LOG_DIR") or os.path.join(os.getcwd(), "logs")
        os.makedirs(log_dir, exist_ok=True)
        with open(os.path.join(log_dir, "kafkaServer.out"), "ab") as out:
            subprocess.Popen(
                [sys.executable, "-m", "kesque", "serve", *argv[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _exit(0)
    p = new_parser("kafka-server-start.sh", "Run a kesque broker (combined broker and controller roles).")
    p.add_argument("config", metavar="server.properties")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="property=value",
        help="Optional property that should override values set in server.properties file",
    )
    p.add_argument("--log-level", default=os.environ.get("KESQUE_LOG_LEVEL", "INFO"), help="logging level")
    try:
        args = p.parse_args(argv)
    except ToolExit as e:
        _exit(e.code)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _exit(serve.run(args))


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - convenience
    # lazy: the kafka-*.sh entry points load only the tool they run
    from .main import main as kesque_main

    return kesque_main(argv)
