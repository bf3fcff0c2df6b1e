"""The ``kesque`` command."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from .. import __version__

# subcommand -> module of kesque.cli that parses its own arguments (argparse4j-style tools)
SELF_PARSING = {"transactions": "transactions", "metadata-quorum": "metadata_quorum"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kesque", description="kesque: a Kafka-compatible streaming platform")
    p.add_argument("--version", action="version", version=f"kesque {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    from . import serve, tools
    serve.add_parser(sub)
    tools.add_parsers(sub)
    # listed here for --help; main() hands its arguments to the tool, which parses them itself
    for name, module in SELF_PARSING.items():
        sub.add_parser(name, help=import_module(f"{__package__}.{module}").HELP, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SELF_PARSING:
        # Kafka's TransactionsCommand and MetadataQuorumCommand parse with argparse4j (options, then
        # a command with its own options): the tool reads everything after its name itself
        return import_module(f"{__package__}.{SELF_PARSING[argv[0]]}").main(argv[1:])
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # an unknown option of a tool subcommand is reported by that tool's own parser
        (getattr(args, "_parser", None) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    # the subcommand's own arguments, verbatim (tools quote them in error messages)
    if getattr(args, "command", None) in argv:
        args._argv = argv[argv.index(args.command) + 1:]
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
