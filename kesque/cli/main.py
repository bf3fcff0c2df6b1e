"""The ``kesque`` command."""

from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__
from . import tools  # light: each tool's module is imported when its subcommand is built


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """``kesque``'s parser; given the subcommand of a tool, with that tool alone (a tool run
    loads neither the broker's configuration nor the other tools: a quarter of a second)."""
    p = argparse.ArgumentParser(prog="kesque", description="kesque: a Kafka-compatible streaming platform")
    p.add_argument("--version", action="version", version=f"kesque {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    if command is not None and tools.is_tool(command):
        tools.add_parsers(sub, only=command)
        return p
    from . import serve  # lazy: a tool run must not load the broker's configuration and storage checks

    serve.add_parser(sub)
    tools.add_parsers(sub)
    # listed here for --help; main() hands its arguments to the tool, which parses them itself
    sub.add_parser(
        "transactions",
        help="list, describe and abort transactions, find hanging ones (kafka-transactions.sh)",
        add_help=False,
    )
    sub.add_parser(
        "storage", help="format a node's storage, show it, print a cluster id (kafka-storage.sh)", add_help=False
    )
    sub.add_parser("cluster", help="start, stop and show a local cluster of kesque processes", add_help=False)
    sub.add_parser(
        "certs", help="write a CA, a broker key store and SASL_SSL broker and client properties", add_help=False
    )
    sub.add_parser(
        "metadata-quorum", help="describe the KRaft metadata quorum (kafka-metadata-quorum.sh)", add_help=False
    )
    sub.add_parser(
        "cluster-tool", help="the cluster id, its endpoints, unregister a broker (kafka-cluster.sh)", add_help=False
    )
    sub.add_parser("cluster-links", help="create, list, describe and delete cluster links", add_help=False)
    sub.add_parser(
        "mirrors", help="create, describe, pause, resume, fail over and promote mirror topics", add_help=False
    )
    sub.add_parser(
        "spark", help="Spark deployments: compile-pyspark (bytecode for Spark's pyspark.zip)", add_help=False
    )
    sub.add_parser(
        "console",
        help="the web console of a Kafka-protocol cluster: topics, messages, groups, transactions, charts",
        add_help=False,
    )
    return p


# subcommands that parse their own arguments: name -> module of kesque.cli with main(argv)
_OWN_PARSERS = {
    "transactions": "transactions",
    "storage": "storage",
    "cluster": "cluster",
    "certs": "certs",
    "metadata-quorum": "metadata_quorum",
    "cluster-tool": "cluster_tool",
    "cluster-links": "cluster_links",
    "mirrors": "mirrors",
    "spark": "spark",
    "console": "console",  # loads the console (client, HTTP server) only when run
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _OWN_PARSERS:
        # Kafka's TransactionsCommand and StorageTool parse with argparse4j (options, then a
        # command with its own options): the tool reads everything after its name itself
        return importlib.import_module(f"{__package__}.{_OWN_PARSERS[argv[0]]}").main(argv[1:])
    parser = build_parser(argv[0] if argv else None)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # an unknown option of a tool subcommand is reported by that tool's own parser
        (getattr(args, "_parser", None) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    # the subcommand's own arguments, verbatim (tools quote them in error messages)
    if getattr(args, "command", None) in argv:
        args._argv = argv[argv.index(args.command) + 1 :]
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
