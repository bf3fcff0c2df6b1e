"""jopt-simple, as Kafka's usual tools parse options, on Python's argparse: usage errors print
the message and the option table on stderr and exit 1 (:func:`print_usage_and_exit`), ``--help``
prints jopt's table (:func:`jopt_help`), so that a tool looks the same whether it runs as
``kesque topics`` or as ``kafka-topics.sh``."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap

from ... import __version__
from .run import ToolExit


def print_usage_and_exit(parser: argparse.ArgumentParser, message: str) -> None:
    sys.stdout.flush()
    print(message, file=sys.stderr)
    sys.stderr.write(jopt_help(parser, with_description=False))
    sys.stderr.flush()
    raise ToolExit(1)


def opt(name: str) -> str:
    """How jopt-simple renders an option spec in messages: ``[topic]``."""
    return f"[{name}]"


def check_required(parser, args, *names: str) -> None:
    for name in names:
        if getattr(args, name.replace("-", "_").replace(".", "_"), None) in (None, False, []):
            print_usage_and_exit(parser, f'Missing required argument "{opt(name)}"')


def check_invalid(parser, args, used: str, *invalid: str) -> None:
    if not given(args, used):
        return
    for name in invalid:
        if given(args, name):
            print_usage_and_exit(parser, f'Option "{opt(used)}" can\'t be used with option "{opt(name)}"')


def given(args, name: str) -> bool:
    value = getattr(args, name.replace("-", "_").replace(".", "_"), None)
    return value not in (None, False, [])


def _kafka_error(self: argparse.ArgumentParser, message: str) -> None:
    # argparse's wording -> jopt-simple's wording for the common cases
    m = re.match(r"unrecognized arguments: (.*)", message)
    if m:
        first = m.group(1).split()[0]
        message = f"{first.lstrip('-')} is not a recognized option"
    m = re.match(r"argument (\S+?)(/\S+)?: expected one argument", message)
    if m:
        message = f"Option {m.group(1).lstrip('-')} requires an argument"
    m = re.match(r"argument (\S+?)(/\S+)?: invalid (int|float) value: '(.*)'", message)
    if m:
        message = f"Cannot parse argument '{m.group(4)}' of option {m.group(1).lstrip('-')}"
    print_usage_and_exit(self, message)


def _format_help(self: argparse.ArgumentParser) -> str:
    return jopt_help(self)


def kafkaize(parser: argparse.ArgumentParser, description: str) -> argparse.ArgumentParser:
    """Give an argparse parser (possibly a subparser) Kafka's error and help behaviour."""
    parser.description = description
    parser.error = _kafka_error.__get__(parser)  # type: ignore[method-assign]
    parser.format_help = _format_help.__get__(parser)  # type: ignore[method-assign]
    return parser


def new_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, add_help=True, allow_abbrev=True)
    return kafkaize(p, description)


def jopt_help(parser: argparse.ArgumentParser, with_description: bool = True) -> str:
    """An option table shaped like jopt-simple's ``printHelpOn`` (``--help`` prints the
    tool's description above it, as Kafka's tools do)."""
    rows = []
    for action in parser._actions:
        if not action.option_strings:
            continue
        if isinstance(action, argparse._HelpAction):
            rows.append(("--help", "Print usage information."))
            continue
        name = ", ".join(sorted(action.option_strings, key=len, reverse=True))
        if action.nargs == 0:
            left = name
        else:
            meta = action.metavar or action.dest
            kind = getattr(action, "jopt_kind", None) or (
                "Integer" if action.type is int else ("Double" if action.type is float else "String")
            )
            left = f"{name} <{kind}: {meta}>" if action.nargs != "?" else f"{name} [{kind}: {meta}]"
        text = action.help or ""
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0 and "(default:" not in text:
            text += f" (default: {action.default})"
        rows.append((left, text))
    rows.sort(key=lambda r: r[0].lstrip("-"))
    out = []
    if parser.description and with_description:
        out.append(parser.description)
    out.append(f"{'Option':<40} {'Description'}")
    out.append(f"{'------':<40} {'-----------'}")
    for left, text in rows:
        lw = textwrap.wrap(left, 39, subsequent_indent="  ", break_on_hyphens=False) or [""]
        rw = []
        for para in text.split("\n"):
            rw += textwrap.wrap(para, 40, subsequent_indent="  ") or [""]
        for i in range(max(len(lw), len(rw))):
            a = lw[i] if i < len(lw) else ""
            b = rw[i] if i < len(rw) else ""
            out.append(f"{a:<40} {b}".rstrip())
    return "\n".join(out) + "\n"


def usage_or_version(args, parser, description: str) -> None:
    """Kafka's tool prologue: no options prints the usage (exit 1), --version the version."""
    if is_empty(args, parser):
        print_usage_and_exit(parser, description)
    if getattr(args, "version", False):
        print(__version__)
        raise ToolExit(0)


def is_empty(args, parser: argparse.ArgumentParser) -> bool:
    """True when no option was given (Kafka's tools then print their usage)."""
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help",):
            continue
        if getattr(args, action.dest, None) != action.default:
            return False
    return True
