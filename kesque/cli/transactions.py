"""``kafka-transactions.sh``: list, describe and abort transactions, describe the producers of a
partition, find hanging transactions (Kafka's TransactionsCommand).

Subcommands, flags, tables and exit codes as Kafka's tool::

    kafka-transactions.sh [--command-config FILE] --bootstrap-server host:port COMMAND ...
        list [--duration-filter MS]
        describe --transactional-id ID
        describe-producers --topic T --partition P [--broker-id B]
        abort --topic T --partition P (--start-offset O | --producer-id I --producer-epoch E --coordinator-epoch C)
        find-hanging (--topic T [--partition P] | --broker-id B) [--max-transaction-timeout MINUTES]

Tables are Kafka's ``ToolsUtils.prettyPrintTable``: every cell padded to its column's width and
followed by a tab (the last one too). Rows come in the order Kafka's Admin client hands them to
the tool: per broker in ``HashMap<Integer, ...>`` order for ``list``, the transaction's partitions
in ``HashSet<TopicPartition>`` order for ``describe``, hanging transactions grouped by producer id
in ``HashMap<Long, ...>`` order. A failure prints ``<what failed>: <cause>. Enable debug logging for
additional detail.`` on stderr and exits 1; success exits 0.

Kafka's tool parses its arguments with argparse4j (0.7.0), not jopt-simple: options of the tool
come before the command, the command's after it; ``--help`` prints argparse4j's help (and, as in
Kafka, exits 1); usage errors print the usage of the (sub)command and
``kafka-transactions.sh: error: ...`` on stderr and exit 1. :class:`ArgParser` reproduces
argparse4j: prefix abbreviations of options and commands, the justified 75-column help, its
messages (``argument --partition is required``, ``could not convert 'x' to Integer (For input
string: "x")``, ``Did you mean:`` hints).

The Admin client calls are made over :mod:`kesque.client.wire` (confluent-kafka has none of these APIs), as
Kafka's Admin client makes them: DescribeProducers (v0) to the partition leader found with
Metadata (or to ``--broker-id``), DescribeTransactions (v0) to the transaction coordinator found
with FindCoordinator (key type 1, batched from v4), ListTransactions (v0-1) to every broker,
WriteTxnMarkers (v1, ``transaction_result=false``) to the partition leader for ``abort``.
Retriable errors are retried until ``default.api.timeout.ms`` (60 s unless ``--command-config``
says otherwise), then reported as Kafka's TimeoutException.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from dataclasses import dataclass

from ..protocol.api_keys import ApiKeys
from ..utils import java_string_hash
from ._admin import check_reachable
from ._common import _ERRORS as _COMMON_ERRORS
from ._common import exit_flushed, java_hash_order, load_props, run_tool, topic_partition_hash

NAME = "transactions"
SCRIPT = "kafka-transactions.sh"
DESCRIPTION = ("This tool is used to analyze the transactional state of producers in the cluster. "
               "It can be used to detect and recover from hanging transactions.")
HELP = "list, describe and abort transactions, find hanging ones (kafka-transactions.sh)"
PROG = "kafka-transactions.sh"

_ERRORS_PKG = "org.apache.kafka.common.errors."


# ============================================================================ argparse4j

class ArgumentParserException(Exception):
    def __init__(self, message: str, parser: ArgParser, arg: Arg | None = None, *, token: str | None = None,
                 kind: str = ""):
        if arg is not None:
            message = f"argument {arg.textual_name()}: {message}"
        super().__init__(message)
        self.message = message
        self.parser = parser
        self.token = token
        self.kind = kind  # "argument" (UnrecognizedArgumentException), "command", "help" or ""


class _Exit(Exception):
    def __init__(self, code: int):
        self.code = code


_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_RANGES = {"Integer": (-(1 << 31), (1 << 31) - 1), "Long": (-(1 << 63), (1 << 63) - 1),
           "Short": (-(1 << 15), (1 << 15) - 1)}


def _java_number(kind: str, value: str) -> int:
    """``Integer/Long/Short.valueOf``: the value, or ValueError with Java's message."""
    lo, hi = _RANGES[kind]
    if kind == "Short":
        n = _java_number("Integer", value)
        if not lo <= n <= hi:
            raise ValueError(f'Value out of range. Value:"{value}" Radix:10')
        return n
    if not _JAVA_INT.fullmatch(value) or not lo <= int(value) <= hi:
        raise ValueError(f'For input string: "{value}"')
    return int(value)


@dataclass
class Arg:
    flags: tuple[str, ...]
    help: str = ""
    type: str = "String"  # String, Integer, Long, Short
    required: bool = False
    metavar: str | None = None
    action: str = "store"  # store, help, version, store_true
    default: object = None
    group: Group | None = None
    mutex: Group | None = None

    @property
    def dest(self) -> str:
        flag = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return flag.lstrip("-").replace("-", "_")

    @property
    def consumes(self) -> bool:
        return self.action == "store"

    @property
    def stores(self) -> bool:
        return self.action in ("store", "store_true")

    def textual_name(self) -> str:
        return "/".join(self.flags)

    def metavar_text(self) -> str:
        if not self.consumes:
            return ""
        return self.metavar if self.metavar is not None else self.dest.upper()

    def short_syntax(self, brackets: bool = True) -> str:
        s = self.flags[0]
        mv = self.metavar_text()
        if mv:
            s += " " + mv
        return f"[{s}]" if brackets and not self.required else s

    def help_title(self) -> str:
        mv = self.metavar_text()
        return ", ".join(f + (" " + mv if mv else "") for f in self.flags)

    def convert(self, parser: ArgParser, value: str):
        if self.type == "String":
            return value
        try:
            return _java_number(self.type, value)
        except ValueError as e:
            raise ArgumentParserException(f"could not convert '{value}' to {self.type} ({e})", parser, self) from None


@dataclass
class Group:
    title: str
    description: str
    args: list
    mutex: bool = False  # a mutually exclusive group (its args are listed with the parser's own)
    required: bool = False

    def usage_tokens(self, brackets: bool = True) -> list[str]:
        """``(--a A | --b B)`` (``[...]`` when optional), cut where argparse4j's usage may wrap it."""
        opening, closing = ("(", ")") if self.required or not brackets else ("[", "]")
        out = []
        for i, a in enumerate(self.args):
            out += ["|"] if i else []
            out.append(a.short_syntax(brackets=False))
        out[0], out[-1] = opening + out[0], out[-1] + closing
        return out


class ArgParser:
    """An argparse4j ``ArgumentParser`` (or ``Subparser``), reduced to what the tool uses:
    optional arguments that store one value, help/version actions, argument groups (also
    mutually exclusive ones) and one level of subcommands."""

    def __init__(self, prog: str, description: str = "", command: str | None = None,
                 main: ArgParser | None = None, help: str = ""):
        self.prog = prog
        self.description = description
        self.command = command
        self.main = main
        self.help = help
        self.args: list[Arg] = []
        self.groups: list[Group] = []
        self.commands: dict[str, ArgParser] = {}
        self.commands_title = ""
        self.commands_metavar = ""
        self.commands_dest = ""
        self.add_argument("-h", "--help", action="help", help="show this help message and exit")

    # ------------------------------------------------------------------ building
    def add_argument(self, *flags: str, group: Group | None = None, **kw) -> Arg:
        arg = Arg(tuple(flags), group=group, **kw)
        self.args.append(arg)
        if group is not None:
            if group.mutex:
                arg.group = None  # listed among the parser's own arguments
                arg.mutex = group
            group.args.append(arg)
        return arg

    def add_group(self, title: str, description: str) -> Group:
        g = Group(title, description, [])
        self.groups.append(g)
        return g

    def add_mutex_group(self, required: bool = False) -> Group:
        """``addMutuallyExclusiveGroup()``: its args go with the parser's own in the help."""
        g = Group("", "", [], mutex=True, required=required)
        self.groups.append(g)
        return g

    def add_subparsers(self, dest: str, title: str, metavar: str) -> None:
        self.commands_dest, self.commands_title, self.commands_metavar = dest, title, metavar

    def add_parser(self, command: str, help: str = "", description: str = "") -> ArgParser:
        p = ArgParser(self.prog, description, command=command, main=self, help=help)
        self.commands[command] = p
        return p

    # ------------------------------------------------------------------ parsing
    def parse_args(self, argv: list[str]) -> dict:
        attrs: dict = {}
        state = _State(list(argv))
        self._parse(state, attrs)
        if state.deferred is not None:
            raise state.deferred
        return attrs

    @staticmethod
    def _is_flag(term: str) -> bool:
        return len(term) > 1 and term[0] == "-" and not re.fullmatch(r"-\d+", term)

    def _resolve(self, flag: str) -> Arg | None:
        index = {f: a for a in self.args for f in a.flags}
        if flag in index:
            return index[flag]
        cand = [f for f in index if f.startswith(flag)]
        if not cand:
            return None
        if self._concatenated_short(flag, index):
            cand.append(flag[:2])
        elif len(cand) == 1:
            return index[cand[0]]
        cand.sort()
        raise ArgumentParserException(f"ambiguous option: {flag} could match {', '.join(cand)}", self)

    @staticmethod
    def _concatenated_short(term: str, index: dict) -> bool:
        if not re.fullmatch(r"-[^-].*", term, re.DOTALL):
            return False
        for ch in term[1:]:
            arg = index.get("-" + ch)
            if arg is None:
                return False
            if arg.consumes:
                return True
        return True

    def _run(self, arg: Arg, attrs: dict, value=None) -> None:
        if arg.action == "help":
            sys.stdout.write(self.format_help())
            sys.stdout.flush()
            raise ArgumentParserException("", self, kind="help")
        if arg.action == "version":
            from .. import __version__
            print(f"{__version__} (Commit:unknown)")
            raise _Exit(0)
        attrs[arg.dest] = True if arg.action == "store_true" else value

    def _parse(self, state: _State, attrs: dict) -> None:
        for a in self.args:
            if a.stores:
                attrs[a.dest] = False if a.action == "store_true" and a.default is None else a.default
        used: set[int] = set()
        index = {f: a for a in self.args for f in a.flags}
        while state.index < len(state.args):
            term = state.args[state.index]
            if not state.separator and (term == "--" or self._is_flag(term)) and term != "--":
                flag, _, embedded = term.partition("=")
                embedded_value = embedded if "=" in term else None
                arg = self._resolve(flag)
                if arg is None:
                    embedded_value = None
                    shorts_found = False
                    if len(term) > 1 and term[0] == "-" and term[1] != "-":
                        shorts_found = True
                        for i in range(1, len(term)):
                            short = "-" + term[i]
                            a = index.get(short)
                            if a is None:
                                shorts_found = False
                                break
                            if a.consumes:
                                flag, arg = short, a
                                if len(term) > i + 1:
                                    embedded_value = term[i + 1:]
                                break
                            self._run(a, attrs)
                            used.add(id(a))
                    if not shorts_found:
                        raise ArgumentParserException(f"unrecognized arguments: '{term}'", self, token=term,
                                                      kind="argument")
                state.index += 1
                if arg is not None:
                    self._check_mutex(arg, used)
                    self._process(attrs, state, arg, embedded_value)
                    used.add(id(arg))
            elif term == "--" and not state.separator:
                state.separator = True
                state.index += 1
            elif not state.separator and self.commands:
                self._check_required(state, used)
                self._parse_command(state, attrs)
                return
            else:
                raise ArgumentParserException(
                    f"unrecognized arguments: '{' '.join(state.args[state.index:])}'", self)
        if self.commands:
            raise ArgumentParserException("too few arguments", self)
        self._check_required(state, used)

    def _process(self, attrs: dict, state: _State, arg: Arg, embedded: str | None) -> None:
        if not arg.consumes:
            if embedded is None:
                self._run(arg, attrs)
                return
            raise ArgumentParserException(f"ignore implicit argument '{embedded}'", self, arg)
        value = embedded
        if value is None and state.index < len(state.args):
            nxt = state.args[state.index]
            if state.separator or not (nxt == "--" or self._is_flag(nxt)):
                value = nxt
                state.index += 1
        if value is None:
            raise ArgumentParserException("expected one argument", self, arg)
        self._run(arg, attrs, arg.convert(self, value))

    def _check_mutex(self, arg: Arg, used: set[int]) -> None:
        other = next((a for a in (arg.mutex.args if arg.mutex else ()) if a is not arg and id(a) in used), None)
        if other is not None:
            raise ArgumentParserException(f"not allowed with argument {other.textual_name()}", self, arg)

    def _check_required(self, state: _State, used: set[int]) -> None:
        if state.deferred is not None:
            return
        for a in self.args:  # as argparse4j: the last missing one is reported
            if a.required and id(a) not in used:
                state.deferred = ArgumentParserException(f"argument {a.textual_name()} is required", self)
        for g in self.groups:
            if g.mutex and g.required and not any(id(a) in used for a in g.args):
                names = " ".join(a.textual_name() for a in g.args)
                state.deferred = ArgumentParserException(f"one of the arguments {names} is required", self)

    def _parse_command(self, state: _State, attrs: dict) -> None:
        word = state.args[state.index]
        sub = self.commands.get(word) if word else None
        if sub is None and word:
            cand = [c for c in self.commands if c.startswith(word)]
            if len(cand) == 1:
                sub = self.commands[cand[0]]
            elif len(cand) > 1:
                raise ArgumentParserException(f"ambiguous command: {word} could match {', '.join(sorted(cand))}", self)
        if sub is None:
            choices = ", ".join(f"'{c}'" for c in self.commands)
            raise ArgumentParserException(f"invalid choice: '{word}' (choose from {choices})", self, token=word,
                                          kind="command")
        state.index += 1
        sub._parse(state, attrs)
        attrs[self.commands_dest] = sub.command

    # ------------------------------------------------------------------ help and errors
    def _upper_usage(self) -> list[str]:
        """Command, required options of the parsers above (argparse4j's addUpperParserUsage)."""
        if self.main is None:
            return []
        out = self.main._upper_usage()
        out += [a.short_syntax() for a in self.main.args if a.required and a.mutex is None]
        for g in self.main.groups:
            if g.mutex and g.required:
                out += g.usage_tokens()
        return out

    def format_usage(self, width: int | None = None) -> str:
        width = width or format_width()
        head = "usage: " + self.prog
        if len(head) > 30:
            lines, cur, indent = [head], 12, " " * 6
            line = indent
        else:
            lines, cur, indent = [], len(head), " " * len(head)
            line = head
        opts = self._upper_usage()
        if self.command is not None:
            opts.append(self.command)
        opts += [a.short_syntax() for a in self.args if a.mutex is None]
        for g in self.groups:
            if g.mutex:
                opts += g.usage_tokens()
        if self.commands:
            opts += [self.commands_metavar, "..."]
        first = True
        for syntax in opts:
            if not first and cur + len(syntax) + 1 > width:
                lines.append(line)
                line = indent + " " + syntax
                cur = len(indent) + 1 + len(syntax)
            else:
                line += " " + syntax
                cur += 1 + len(syntax)
                first = False
        lines.append(line)
        return "\n".join(lines) + "\n"

    def format_help(self) -> str:
        width = format_width()
        out = [self.format_usage(width)]
        if self.description:
            out.append("\n" + wrap(self.description, width, 0, "", "") + "\n")
        commands = []
        if self.commands:
            commands.append(f"\n{self.commands_title}:\n")
            commands.append(_help_line(self.commands_metavar, "", width))
            commands += [_help_line("  " + c, p.help, width) for c, p in self.commands.items() if p.help]
        if self.commands_title == "positional arguments":  # subparsers without a title of their own
            out += commands
            commands = []
        default = [a for a in self.args if a.group is None]
        if default:
            out.append("\noptional arguments:\n")
            out += [_help_line(a.help_title(), a.help, width) for a in default]
        out += commands
        for g in (g for g in self.groups if not g.mutex):
            out.append("\n")
            if g.title:
                out.append(g.title + ":\n")
            if g.description:
                out.append("  " + wrap(g.description, width, 2, "", "  ") + "\n\n")
            out += [_help_line(a.help_title(), a.help, width) for a in g.args]
        return "".join(out)

    def handle_error(self, e: ArgumentParserException) -> None:
        if e.kind == "help":
            return
        err = sys.stderr
        err.write(e.parser.format_usage())
        err.write(wrap(f"{self.prog}: error: {e.message}\n", format_width(), 0, "", ""))
        if e.kind == "argument" and self._is_flag(e.token or ""):
            body = e.token.lstrip("-")
            if len(body) >= 2:
                subjects = [(f, f.lstrip("-")) for a in e.parser.args for f in a.flags if len(f.lstrip("-")) > 1]
                err.write(_candidates(body, subjects))
        elif e.kind == "command":
            err.write(_candidates(e.token or "", [(c, c) for c in e.parser.commands]))
        err.flush()


class _State:
    def __init__(self, args: list[str]):
        self.args = args
        self.index = 0
        self.separator = False
        self.deferred: ArgumentParserException | None = None


def format_width() -> int:
    """argparse4j's format width: $COLUMNS (else the terminal's width) minus 5, or 75."""
    width = os.environ.get("COLUMNS")
    if width is not None:
        try:
            w = int(width) - 5
        except ValueError:
            return 75
        return w if w > 0 else 75
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
        try:
            w = os.get_terminal_size(fd).columns - 5
        finally:
            os.close(fd)
    except OSError:
        return 75
    return w if w > 0 else 75


def _help_line(title: str, help: str, width: int) -> str:
    """argparse4j's TextHelper.printHelp: the title at column 2, the help at column 25."""
    out = "  " + title
    if not help:
        return out + "\n"
    if len(title) <= 21:
        out += " " * (25 - len(title) - 2)
    else:
        out += "\n" + " " * 25
    return out + wrap(help, width, 25, "", " " * 25) + "\n"


def _line_segments(s: str) -> list[str]:
    """Pieces between line-break opportunities, close to java.text.BreakIterator's line
    instance: after spaces, after a hyphen inside a word, after punctuation that is followed
    by a letter, after a newline."""
    out, start = [], 0
    n = len(s)
    for i in range(n - 1):
        c, nx = s[i], s[i + 1]
        brk = False
        if c == "\n":
            brk = True
        elif c in " \t":
            brk = nx not in " \t\n"
        elif c == "-":
            j = i
            while j > 0 and s[j - 1] == "-":
                j -= 1
            word_start = j == 0 or s[j - 1] in " \t\n'\""
            brk = nx not in " \t\n-'" and not (nx.isdigit() and word_start)
        elif c in ".,;:!?":
            brk = nx not in " \t\n'\")]}" and not (nx.isdigit() and i > 0 and s[i - 1].isdigit())
        if brk:
            out.append(s[start:i + 1])
            start = i + 1
    if start < n:
        out.append(s[start:])
    return out


def _adjust_space(sb: str, width: int, curwidth: int) -> str:
    """argparse4j's TextHelper.adjustSpace: trim, then justify the line to ``width`` (extra
    spaces spread over the blanks, the odd ones in the middle ones)."""
    orig = len(sb)
    sb = sb.strip(" ")
    curwidth -= orig - len(sb)
    blocks = list(re.finditer(r" +", sb))
    if not blocks:
        return sb
    need = width - curwidth
    each = int(need / len(blocks))  # Java's / and % truncate toward zero
    rem = need - each * len(blocks)
    rem_start = (len(blocks) - rem + 1) // 2
    rem_end = rem_start + rem
    out, last = [], 0
    for b, m in enumerate(blocks):
        add = each + (1 if rem_start <= b < rem_end else 0)
        out.append(sb[last:m.start()])
        out.append(" " * max(add, 0) + m.group(0))
        last = m.end()
    out.append(sb[last:])
    return "".join(out)


def wrap(s: str, width: int, initial_offset: int, initial_indent: str, subsequent_indent: str) -> str:
    """argparse4j's TextHelper.wrap (justified lines)."""
    res = [initial_indent]
    sb = ""
    cur = initial_offset + len(initial_indent)
    for sub in _line_segments(s):
        cur += len(sub)
        if cur > width:
            res.append(_adjust_space(sb, width, cur - len(sub)))
            res.append("\n" + subsequent_indent)
            sb = ""
            cur = len(subsequent_indent) + len(sub)
        sb += sub
        if sub.endswith("\n"):
            res.append(sb + subsequent_indent)
            sb = ""
            cur = len(subsequent_indent)
    res.append(sb)
    return "".join(res)


def _levenshtein(a: str, b: str, swap: int, sub: int, add: int, dele: int) -> int:
    prev2 = [0] * (len(b) + 1)
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = prev[j - 1] + (0 if a[i - 1] == b[j - 1] else sub)
            if i >= 2 and j >= 2 and a[i - 1] != b[j - 1] and a[i - 2] == b[j - 1] and a[i - 1] == b[j - 2]:
                cur[j] = min(cur[j], prev2[j - 2] + swap)
            cur[j] = min(cur[j], prev[j] + dele, cur[j - 1] + add)
        prev2, prev = prev, cur
    return prev[len(b)]


def _candidates(body: str, subjects: list[tuple[str, str]]) -> str:
    """argparse4j's "Did you mean:" block (distances as git's help.c)."""
    cands = sorted((0 if sb.startswith(body) else _levenshtein(body, sb, 0, 2, 1, 4), subject)
                   for subject, sb in subjects)
    if not cands or cands[0][0] >= 7:
        return ""
    threshold = cands[0][0]
    return "\nDid you mean:\n" + "".join(f"\t{s}\n" for d, s in cands if d <= threshold)


def build_parser() -> ArgParser:
    """TransactionsCommand.buildBaseParser and each command's addSubparser."""
    p = ArgParser(PROG, DESCRIPTION)
    p.add_argument("-v", "--version", action="version", help="show the version of this Kafka distribution and exit")
    p.add_argument("--command-config", metavar="FILE",
                   help="property file containing configs to be passed to admin client")
    p.add_argument("--bootstrap-server", metavar="host:port", required=True,
                   help="hostname and port for the broker to connect to, in the form `host:port`  "
                        "(multiple comma-separated entries can be given)")
    p.add_subparsers(dest="command", title="commands", metavar="COMMAND")

    s = p.add_parser("list", help="list transactions")
    s.add_argument("--duration-filter", type="Long",
                   help="Duration (in millis) to filter by: if < 0, all transactions will be returned; otherwise, "
                        "only transactions running longer than this duration will be returned")

    s = p.add_parser("describe", help="describe the state of an active transactional-id",
                     description="Describe the state of an active transactional-id.")
    s.add_argument("--transactional-id", required=True, help="transactional id")

    s = p.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    s.add_argument("--broker-id", type="Integer",
                   help="optional broker id to describe the producer state on a specific replica")
    s.add_argument("--topic", required=True, help="topic name")
    s.add_argument("--partition", type="Integer", required=True, help="partition number")

    s = p.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    s.add_argument("--topic", required=True, help="topic name")
    s.add_argument("--partition", type="Integer", required=True, help="partition number")
    g = s.add_group("Brokers on versions 3.0 and above",
                    "For newer brokers, only the start offset of the transaction to be aborted is required")
    s.add_argument("--start-offset", type="Long", group=g, help="start offset of the transaction to abort")
    g = s.add_group("Brokers on versions older than 3.0", "For older brokers, you must provide all of these arguments")
    s.add_argument("--producer-id", type="Long", group=g, help="producer id")
    s.add_argument("--producer-epoch", type="Short", group=g, help="producer epoch")
    s.add_argument("--coordinator-epoch", type="Integer", group=g, help="coordinator epoch")

    s = p.add_parser("find-hanging", help="find hanging transactions")
    s.add_argument("--broker-id", type="Integer", help="broker id to search for hanging transactions")
    s.add_argument("--max-transaction-timeout", type="Integer", default=15,
                   help="maximum transaction timeout in minutes to limit the scope of the search (15 minutes by "
                        "default)")
    s.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    s.add_argument("--partition", type="Integer", help="partition number")
    return p


# ============================================================================ Kafka's vocabulary

# error code -> (exception class, Errors' default message): the shared table plus the codes of the
# transaction APIs
_ERRORS: dict[int, tuple[str, str]] = {
    **_COMMON_ERRORS,
    2: ("CorruptRecordException", "This message has failed its CRC checksum, exceeds the valid size, has a null key "
        "for a compacted topic, or is otherwise corrupt."),
    8: ("BrokerNotAvailableException", "The broker is not available."),
    9: ("ReplicaNotAvailableException", "The replica is not available for the requested topic-partition. "
        "Produce/Fetch requests and other requests intended only for the leader or follower return "
        "NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition."),
    13: ("NetworkException", "The server disconnected before a response was received."),
    14: ("CoordinatorLoadInProgressException", "The coordinator is loading and hence can't process requests."),
    15: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    102: ("BrokerIdNotRegisteredException", "The given broker ID was not registered."),
    16: ("NotCoordinatorException", "This is not the correct coordinator."),
    19: ("NotEnoughReplicasException", "Messages are rejected since there are fewer in-sync replicas than required."),
    45: ("OutOfOrderSequenceException", "The broker received an out of order sequence number."),
    47: ("InvalidProducerEpochException", "Producer attempted to produce with an old epoch."),
    48: ("InvalidTxnStateException", "The producer attempted a transactional operation in an invalid state."),
    49: ("InvalidPidMappingException", "The producer attempted to use a producer id which is not currently assigned "
         "to its transactional id."),
    51: ("ConcurrentTransactionsException", "The producer attempted to update a transaction while another concurrent "
         "operation on the same transaction was ongoing."),
    52: ("TransactionCoordinatorFencedException", "Indicates that the transaction coordinator sending a "
         "WriteTxnMarker is no longer the current coordinator for a given producer."),
    53: ("TransactionalIdAuthorizationException", "Transactional Id authorization failed."),
    56: ("KafkaStorageException", "Disk error when trying to access log file on the disk."),
    59: ("UnknownProducerIdException", "This exception is raised by the broker if it could not locate the producer "
         "metadata associated with the producerId in question. This could happen if, for instance, the producer's "
         "records were deleted because their retention time had elapsed. Once the last records of the producerId "
         "are removed, the producer's metadata is removed from the broker, and future appends by the producer will "
         "return this exception."),
    74: ("FencedLeaderEpochException", "The leader epoch in the request is older than the epoch on the broker."),
    90: ("ProducerFencedException", "There is a newer producer with the same transactionalId which fences the "
         "current one."),
    105: ("TransactionalIdNotFoundException", "The transactionalId could not be found."),
    120: ("TransactionAbortableException", "The server encountered an error with the transaction. The client can "
          "abort the transaction to continue using this transactional ID."),
}


class JavaError(Exception):
    """A Java exception as the tool meets it: ``message`` is ``getMessage()``."""

    def __init__(self, java_class: str, message: str, code: int | None = None):
        super().__init__(message)
        self.java_class = java_class
        self.message = message
        self.code = code


def kafka_error(code: int, message: str | None = None) -> JavaError:
    """``Errors.forCode(code).exception(message)`` (the default message when ``message`` is None)."""
    name, default = _ERRORS.get(code, ("UnknownServerException" if code > 0 else "KafkaException",
                                       f"Unexpected error code: {code}."))
    return JavaError(_ERRORS_PKG + name, default if message is None else message, code)


def timeout_error(call: str) -> JavaError:
    return JavaError(_ERRORS_PKG + "TimeoutException", f"Timed out waiting for a node assignment. Call: {call}")


class ToolFailure(Exception):
    """printErrorAndExit: the message is printed on stderr and the tool exits 1."""


def fail(message: str, cause: BaseException | None = None) -> None:
    if cause is not None:
        text = cause.message if isinstance(cause, JavaError) else str(cause)
        message = f"{message}: {text}. Enable debug logging for additional detail."
    raise ToolFailure(message)


def tp_str(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def long_hash(v: int) -> int:
    """java.lang.Long.hashCode."""
    v &= 0xFFFFFFFFFFFFFFFF
    h = (v ^ (v >> 32)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def pretty_print_table(headers: list[str], rows: list[list[str]], out=None) -> None:
    """ToolsUtils.prettyPrintTable: cells padded to the column width, each followed by a tab."""
    out = out or sys.stdout
    widths = [len(h) for h in headers]
    for row in rows:
        for i in range(len(headers)):
            widths[i] = max(widths[i], len(row[i]))
    for row in [headers, *rows]:
        out.write("".join(v.ljust(widths[i]) + "\t" for i, v in enumerate(row)) + "\n")


# ============================================================================ the Admin client

@dataclass
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int  # -1: none (OptionalInt.empty())
    current_txn_start_offset: int  # -1: none (OptionalLong.empty())


@dataclass
class TransactionDescription:
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: none
    topic_partitions: list  # in HashSet<TopicPartition> order


@dataclass
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class AbortTransactionSpec:
    tp: tuple[str, int]
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:
        return (f"AbortTransactionSpec(topicPartition={tp_str(self.tp)}, producerId={self.producer_id}, "
                f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})")


_STATES = ("Ongoing", "PrepareAbort", "PrepareCommit", "CompleteAbort", "CompleteCommit", "Empty",
           "PrepareEpochFence")


@dataclass
class _TxnStateV0:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout: int
    transaction_start_time: int
    producer_id: int
    producer_epoch: int
    topics: list


@dataclass
class _TxnTopicV0:
    topic: str
    partitions: list


@dataclass
class _DescribeTransactionsV0:
    transaction_states: list


def read_describe_transactions_v0(buf, pos: int, version: int) -> _DescribeTransactionsV0:
    """DescribeTransactionsResponse v0, read by hand: kio's reader refuses the
    ``TransactionStartTimeMs`` -1 that Kafka sends for an unknown or Empty id."""
    from ..protocol.primitives import (
        read_array_len,
        read_compact_string,
        read_int16,
        read_int32,
        read_int64,
        skip_tagged_fields,
    )
    _throttle, pos = read_int32(buf, pos)
    n, pos = read_array_len(buf, pos, True)
    states = []
    for _ in range(max(n, 0)):
        err, pos = read_int16(buf, pos)
        tid, pos = read_compact_string(buf, pos)
        state, pos = read_compact_string(buf, pos)
        timeout, pos = read_int32(buf, pos)
        start, pos = read_int64(buf, pos)
        pid, pos = read_int64(buf, pos)
        epoch, pos = read_int16(buf, pos)
        nt, pos = read_array_len(buf, pos, True)
        topics = []
        for _ in range(max(nt, 0)):
            name, pos = read_compact_string(buf, pos)
            np_, pos = read_array_len(buf, pos, True)
            parts = []
            for _ in range(max(np_, 0)):
                p, pos = read_int32(buf, pos)
                parts.append(p)
            pos = skip_tagged_fields(buf, pos)
            topics.append(_TxnTopicV0(name, parts))
        pos = skip_tagged_fields(buf, pos)
        states.append(_TxnStateV0(err, tid, state, timeout, start, pid, epoch, topics))
    return _DescribeTransactionsV0(states)


def parse_state(name: str) -> str:
    """Admin's TransactionState.parse: an unknown name is ``Unknown``."""
    return name if name in _STATES else "Unknown"


def _ms(v) -> int:
    """A kio timedelta/datetime/int field as integer milliseconds (None: -1)."""
    import datetime

    if v is None:
        return -1
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1000)
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    return int(v)


class _Retry(Exception):
    """A retriable condition: try again after retry.backoff.ms until the call's deadline."""


def parse_bootstrap_servers(value: str) -> list[tuple[str, int]]:
    """ClientUtils.parseAndValidateAddresses: Kafka's ConfigException messages."""
    out = []
    for url in [u.strip() for u in value.split(",")]:
        if not url:
            continue
        m = re.match(r".*?\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)$", url)
        if not m or not m.group(1):
            raise JavaError("org.apache.kafka.common.config.ConfigException",
                            f"Invalid url in bootstrap.servers: {url}")
        try:
            socket.getaddrinfo(m.group(1), int(m.group(2)))
        except (OSError, UnicodeError):
            continue
        out.append((m.group(1), int(m.group(2))))
    if not out:
        raise JavaError("org.apache.kafka.common.config.ConfigException",
                        "No resolvable bootstrap urls given in bootstrap.servers")
    return out


class Admin:
    """What TransactionsCommand asks of Kafka's Admin client, over :mod:`kesque.client.wire`."""

    def __init__(self, bootstrap: str, props: dict[str, str] | None = None):
        props = dict(props or {})
        self.bootstrap = parse_bootstrap_servers(bootstrap)
        self.api_timeout_ms = int(props.get("default.api.timeout.ms", 60000))
        self.request_timeout_s = int(props.get("request.timeout.ms", 30000)) / 1000.0
        self.backoff_s = int(props.get("retry.backoff.ms", 100)) / 1000.0
        self.client_id = props.get("client.id", "adminclient-1")
        self._probe: dict | None = {**props, "bootstrap.servers": bootstrap}
        self._conns: dict[tuple[str, int], object] = {}
        self.brokers: dict[int, tuple[str, int]] = {}

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # ------------------------------------------------------------------ plumbing
    def _deadline(self) -> float:
        return time.monotonic() + self.api_timeout_ms / 1000.0

    def _conn(self, host: str, port: int):
        from ..client.wire import Connection

        c = self._conns.get((host, port))
        if c is None:
            c = Connection(host, port, client_id=self.client_id, timeout=self.request_timeout_s)
            self._conns[(host, port)] = c
        return c

    def _drop(self, addr: tuple[str, int]) -> None:
        c = self._conns.pop(addr, None)
        if c is not None:
            c.close()

    def _send(self, addr: tuple[str, int], api_key: int, build, max_version: int | None = None, reader=None):
        """One request; a connection problem is retriable (the connection is dropped)."""
        from ..client.wire import WireError

        if self._probe is not None:
            # before the first request: when no bootstrap server answers, say which at once
            # (run_tool prints it, exit 1) instead of retrying until default.api.timeout.ms
            check_reachable(self._probe)
            self._probe = None
        try:
            conn = self._conn(*addr)
            if conn.version_for(api_key, max_version) is None:
                raise kafka_error(35, f"The node does not support {ApiKeys(api_key).name}")
            return conn.request(api_key, build, max_version=max_version, reader=reader)
        except (OSError, WireError) as e:
            self._drop(addr)
            raise _Retry(str(e)) from None

    def _any(self, api_key: int, build, max_version: int | None = None):
        """A request to any broker (the known ones, then the bootstrap servers)."""
        last: _Retry | None = None
        for addr in [*self.brokers.values(), *self.bootstrap]:
            try:
                return self._send(addr, api_key, build, max_version)
            except _Retry as e:
                last = e
        raise last or _Retry("no broker")

    def _node(self, node_id: int) -> tuple[str, int]:
        addr = self.brokers.get(node_id)
        if addr is None:
            self.metadata(())
            addr = self.brokers.get(node_id)
        if addr is None:
            raise _Retry(f"unknown node {node_id}")
        return addr

    def _pause(self, deadline: float, call: str) -> None:
        if time.monotonic() + self.backoff_s >= deadline:
            raise timeout_error(call)
        time.sleep(self.backoff_s)

    def metadata(self, topics):
        """Metadata for ``topics`` (None: all); updates the broker map. Returns the topics as
        ``{name: (error_code, is_internal, [(partition, error_code, leader, replicas)])}`` in
        the response's order."""
        from ..client.wire import make

        def build(mod, v):
            ts = None if topics is None else tuple(make(mod.request.MetadataRequestTopic, name=t, topic_id=None)
                                                    for t in topics)
            return make(mod.request.MetadataRequest, topics=ts, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False, include_cluster_authorized_operations=False)
        resp = self._any(ApiKeys.METADATA, build, max_version=12)
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
        out = {}
        for t in resp.topics:
            parts = sorted((int(p.partition_index), int(p.error_code), int(p.leader_id),
                            [int(r) for r in p.replica_nodes]) for p in t.partitions)
            out[t.name] = (int(t.error_code), bool(getattr(t, "is_internal", False)), parts)
        return out

    def _drive(self, api: str, keys: list, lookup, lookup_api: str, fulfil, fulfil_api: str):
        """Kafka's AdminApiDriver, synchronously: ``lookup(keys) -> (mapped {key: node},
        failed {key: exc})`` finds where each key goes, ``fulfil(node, keys) -> (completed,
        failed, unmapped)`` asks it. Keys neither completed nor failed are retried after
        retry.backoff.ms; those left at the deadline fail with a TimeoutException.
        Returns ``(completed, failed)``."""
        deadline = self._deadline()
        completed: dict = {}
        failed: dict = {}
        mapped: dict = {}
        pending = list(dict.fromkeys(keys))
        while True:
            try:
                unmapped = [k for k in pending if k not in mapped]
                if unmapped:
                    try:
                        m, f = lookup(unmapped)
                    except JavaError as e:
                        m, f = {}, {k: e for k in unmapped}
                    mapped.update(m)
                    failed.update(f)
                    pending = [k for k in pending if k not in f]
                by_node: dict = {}
                for k in pending:
                    if k in mapped:
                        by_node.setdefault(mapped[k], []).append(k)
                for node, ks in by_node.items():
                    try:
                        c, f, u = fulfil(node, ks)
                    except _Retry:
                        c, f, u = {}, {}, ks
                    except JavaError as e:
                        c, f, u = {}, {k: e for k in ks}, []
                    completed.update(c)
                    failed.update(f)
                    for k in u:
                        mapped.pop(k, None)
            except _Retry:
                pass
            pending = [k for k in pending if k not in completed and k not in failed]
            if not pending:
                return completed, failed
            stage = lookup_api if any(k not in mapped for k in pending) else fulfil_api
            try:
                self._pause(deadline, f"{api}(api={stage})")
            except JavaError as e:
                for k in pending:
                    failed[k] = e
                return completed, failed

    # ------------------------------------------------------------------ leaders
    def _leader_lookup(self, tps: list) -> tuple[dict, dict]:
        """PartitionLeaderStrategy (unknown topics tolerated: retried)."""
        md = self.metadata(sorted({t for t, _p in tps}))
        mapped, failed = {}, {}
        for topic, (err, _internal, parts) in md.items():
            wanted = [tp for tp in tps if tp[0] == topic]
            if err in (3, 5, 8):
                continue
            if err:
                for tp in wanted:
                    if err == 29:
                        failed[tp] = JavaError(_ERRORS_PKG + "TopicAuthorizationException",
                                               f"Failed to fetch metadata for partition {tp_str(tp)} due to topic "
                                               "authorization failure")
                    elif err == 17:
                        failed[tp] = JavaError(_ERRORS_PKG + "InvalidTopicException",
                                               f"Failed to fetch metadata for partition {tp_str(tp)} due to invalid "
                                               f"topic `{topic}`")
                    else:
                        failed[tp] = kafka_error(err, f"Failed to fetch metadata for partition {tp_str(tp)} due to "
                                                      f"unexpected error for topic `{topic}`")
                continue
            for index, perr, leader, _replicas in parts:
                tp = (topic, index)
                if tp not in wanted:
                    continue
                if perr in (6, 9, 5, 8, 56, 3):
                    continue
                if perr:
                    failed[tp] = kafka_error(perr, f"Unexpected error during metadata lookup for {tp_str(tp)}")
                elif leader >= 0:
                    mapped[tp] = leader
        return mapped, failed

    # ------------------------------------------------------------------ DescribeProducers
    def describe_producers(self, tps: list, broker_id: int | None = None) -> tuple[dict, dict]:
        from ..client.wire import make

        if broker_id is not None:
            def lookup(keys):
                return {k: broker_id for k in keys}, {}
        else:
            lookup = self._leader_lookup

        def fulfil(node, keys):
            by_topic: dict = {}
            for t, p in keys:
                by_topic.setdefault(t, []).append(p)

            def build(mod, v):
                return make(mod.request.DescribeProducersRequest, topics=tuple(
                    make(mod.request.TopicRequest, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()))
            resp = self._send(self._node(node), ApiKeys.DESCRIBE_PRODUCERS, build, max_version=0)
            completed, failed, unmapped = {}, {}, []
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    err = int(p.error_code)
                    if err == 6:
                        if broker_id is not None:
                            failed[tp] = kafka_error(6, f"Failed to describe active producers for partition "
                                                        f"{tp_str(tp)} on brokerId {broker_id}")
                        else:
                            unmapped.append(tp)
                    elif err == 3:
                        pass  # retried
                    elif err == 17:
                        failed[tp] = JavaError(_ERRORS_PKG + "InvalidTopicException",
                                               f"Failed to fetch metadata for partition {tp_str(tp)} due to invalid "
                                               f"topic error: {p.error_message or kafka_error(17).message}")
                    elif err == 29:
                        failed[tp] = JavaError(_ERRORS_PKG + "TopicAuthorizationException",
                                               f"Failed to describe active producers for partition {tp_str(tp)} due "
                                               f"to authorization failure on topic `{tp[0]}`")
                    elif err:
                        failed[tp] = kafka_error(err, f"Failed to describe active producers for partition "
                                                      f"{tp_str(tp)} due to unexpected error")
                    else:
                        completed[tp] = [ProducerState(int(a.producer_id), int(a.producer_epoch),
                                                       int(a.last_sequence), _ms(a.last_timestamp),
                                                       max(int(a.coordinator_epoch), -1),
                                                       max(int(a.current_txn_start_offset), -1))
                                         for a in p.active_producers]
            return completed, failed, unmapped
        return self._drive("describeProducers", tps, lookup, "METADATA", fulfil, "DESCRIBE_PRODUCERS")

    # ------------------------------------------------------------------ DescribeTransactions
    def _coordinator_lookup(self, ids: list) -> tuple[dict, dict]:
        """CoordinatorStrategy for transactional ids: FindCoordinator (key type 1), batched
        from v4, one key per request before."""
        from ..client.wire import make

        found = {}
        remaining = list(ids)
        while remaining:
            sent: list[str] = []

            def build(mod, v, sent=sent, keys=tuple(remaining)):
                if v >= 4:
                    sent[:] = keys
                    return make(mod.request.FindCoordinatorRequest, key_type=1, coordinator_keys=keys)
                sent[:] = keys[:1]
                return make(mod.request.FindCoordinatorRequest, key=keys[0], key_type=1)
            r = self._any(ApiKeys.FIND_COORDINATOR, build)
            if getattr(r, "coordinators", None) is not None:
                for c in r.coordinators:
                    found[c.key] = (int(c.error_code), int(c.node_id), c.host, int(c.port))
            else:
                found[sent[0]] = (int(r.error_code), int(r.node_id), r.host, int(r.port))
            remaining = [k for k in remaining if k not in sent]
        mapped, failed = {}, {}
        for tid, (err, node, host, port) in found.items():
            if tid not in ids:
                continue
            if err == 0:
                mapped[tid] = node
                self.brokers.setdefault(node, (host, port))
            elif err in (14, 15):
                pass
            elif err == 53:
                failed[tid] = JavaError(_ERRORS_PKG + "TransactionalIdAuthorizationException",
                                        f"FindCoordinator request for transactionalId `{_coordinator_key(tid)}` failed "
                                        "due to authorization failure")
            else:
                failed[tid] = kafka_error(err, f"FindCoordinator request for key `{_coordinator_key(tid)}` failed due "
                                               "to an unexpected error")
        return mapped, failed

    def describe_transactions(self, ids: list) -> tuple[dict, dict]:
        from ..client.wire import make

        def fulfil(node, keys):
            resp = self._send(self._node(node), ApiKeys.DESCRIBE_TRANSACTIONS, lambda mod,
                              v: make(mod.request.DescribeTransactionsRequest,
                                                                         transactional_ids=tuple(keys)), max_version=0,
                              reader=read_describe_transactions_v0)
            completed, failed, unmapped = {}, {}, []
            for st in resp.transaction_states:
                tid = st.transactional_id
                if tid not in keys:
                    continue
                err = int(st.error_code)
                if err == 53:
                    failed[tid] = JavaError(_ERRORS_PKG + "TransactionalIdAuthorizationException",
                                            f"DescribeTransactions request for transactionalId `{tid}` failed due to "
                                            "authorization failure")
                elif err == 105:
                    failed[tid] = kafka_error(105, f"DescribeTransactions request for transactionalId `{tid}` failed "
                                                   "because the ID could not be found")
                elif err == 14:
                    pass
                elif err in (16, 15):
                    unmapped.append(tid)
                elif err:
                    failed[tid] = kafka_error(err, f"DescribeTransactions request for transactionalId `{tid}` failed "
                                                   "due to unexpected error")
                else:
                    tps = [(td.topic, int(p)) for td in st.topics for p in td.partitions]
                    completed[tid] = TransactionDescription(
                        node, parse_state(st.transaction_state), int(st.producer_id), int(st.producer_epoch),
                        st.transaction_timeout, st.transaction_start_time,
                        java_hash_order(list(dict.fromkeys(tps)), topic_partition_hash))
            return completed, failed, unmapped
        return self._drive("describeTransactions", ids, self._coordinator_lookup, "FIND_COORDINATOR", fulfil,
                           "DESCRIBE_TRANSACTIONS")

    # ------------------------------------------------------------------ ListTransactions
    def list_transactions(self, producer_ids=(), duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        """ListTransactions on every broker (AllBrokersStrategy); raises the first failure."""
        from ..client.wire import make

        def lookup(keys):
            return {k: k for k in keys}, {}

        def fulfil(node, keys):
            conn = self._conn(*self._node(node))
            version = conn.version_for(ApiKeys.LIST_TRANSACTIONS, 1)
            if version is not None and version < 1 and duration_ms >= 0:
                raise kafka_error(35, "Duration filter can be set only when using API version 1 or higher. If "
                                      "client is connected to an older broker, do not specify duration filter or set "
                                      "duration filter to -1.")
            resp = self._send(self._node(node), ApiKeys.LIST_TRANSACTIONS, lambda mod, v: make(
                mod.request.ListTransactionsRequest, state_filters=(), producer_id_filters=tuple(producer_ids),
                duration_filter=duration_ms), max_version=1)
            err = int(resp.error_code)
            if err == 14:
                return {}, {}, []
            if err == 15:
                return {}, {node: JavaError(_ERRORS_PKG + "CoordinatorNotAvailableException",
                                            f"ListTransactions request sent to broker {node} failed because the "
                                            "coordinator is shutting down")}, []
            if err:
                return {}, {node: kafka_error(err, f"ListTransactions request sent to broker {node} failed with an "
                                                   "unexpected exception")}, []
            return {node: [TransactionListing(s.transactional_id, int(s.producer_id),
                                              parse_state(s.transaction_state))
                           for s in resp.transaction_states]}, {}, []

        self._metadata_retrying((), "listTransactions(api=METADATA)")  # AllBrokersStrategy's lookup
        completed, failed = self._drive("listTransactions", list(self.brokers), lookup, "METADATA", fulfil,
                                        "LIST_TRANSACTIONS")
        if failed:
            raise next(iter(failed.values()))
        return {b: completed[b] for b in java_hash_order(list(completed), lambda i: i)}

    # ------------------------------------------------------------------ WriteTxnMarkers
    def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """AbortTransactionHandler: an ABORT marker through WriteTxnMarkers to the leader."""
        from ..client.wire import make

        def fulfil(node, keys):
            def build(mod, v):
                return make(mod.request.WriteTxnMarkersRequest, markers=(make(
                    mod.request.WritableTxnMarker, producer_id=spec.producer_id, producer_epoch=spec.producer_epoch,
                    transaction_result=False, coordinator_epoch=spec.coordinator_epoch,
                    topics=(make(mod.request.WritableTxnMarkerTopic, name=spec.tp[0],
                                 partition_indexes=(spec.tp[1],)),)),))
            resp = self._send(self._node(node), ApiKeys.WRITE_TXN_MARKERS, build, max_version=1)
            tp = spec.tp
            markers = list(resp.markers)
            if len(markers) != 1 or int(markers[0].producer_id) != spec.producer_id:
                return {}, {tp: JavaError("org.apache.kafka.common.KafkaException",
                                          f"WriteTxnMarkers response included unexpected marker entries: {markers}"
                                          "(expected to find exactly one entry with producerId "
                                          f"{spec.producer_id})")}, []
            topics = list(markers[0].topics)
            if len(topics) != 1 or topics[0].name != tp[0]:
                return {}, {tp: JavaError("org.apache.kafka.common.KafkaException",
                                          f"WriteTxnMarkers response included unexpected topic entries: {markers}"
                                          f"(expected to find exactly one entry with topic partition "
                                          f"{tp_str(tp)})")}, []
            parts = list(topics[0].partitions)
            if len(parts) != 1 or int(parts[0].partition_index) != tp[1]:
                return {}, {tp: JavaError("org.apache.kafka.common.KafkaException",
                                          f"WriteTxnMarkers response included unexpected partition entries for topic "
                                          f"{tp[0]}: {markers}(expected to find exactly one entry with partition "
                                          f"{tp[1]})")}, []
            err = int(parts[0].error_code)
            if err == 0:
                return {tp: None}, {}, []
            if err == 31:
                exc = JavaError(_ERRORS_PKG + "ClusterAuthorizationException",
                                f"WriteTxnMarkers request with {spec} failed due to cluster authorization error")
            elif err == 47:
                exc = JavaError(_ERRORS_PKG + "InvalidProducerEpochException",
                                f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch")
            elif err == 52:
                exc = JavaError(_ERRORS_PKG + "TransactionCoordinatorFencedException",
                                f"WriteTxnMarkers request with {spec} failed since the provided coordinator epoch "
                                f"{spec.coordinator_epoch} has been fenced by the active coordinator")
            elif err in (6, 9, 8, 3):
                return {}, {}, [tp]
            else:
                exc = kafka_error(err, f"WriteTxnMarkers request with {spec} failed due to unexpected error: "
                                       f"{kafka_error(err).message}")
            return {}, {tp: exc}, []

        _completed, failed = self._drive("abortTransaction", [spec.tp], self._leader_lookup, "METADATA", fulfil,
                                         "WRITE_TXN_MARKERS")
        if failed:
            raise failed[spec.tp]

    # ------------------------------------------------------------------ topics
    def _metadata_retrying(self, topics, call: str):
        deadline = self._deadline()
        while True:
            try:
                return self.metadata(topics)
            except _Retry:
                self._pause(deadline, call)

    def list_topics(self) -> list[str]:
        """listTopics(listInternal=true).names(): the keys of a HashMap<String, TopicListing>."""
        md = self._metadata_retrying(None, "listTopics")
        names = [t for t, (err, _i, _p) in md.items() if err == 0]
        return java_hash_order(names, java_string_hash)

    def describe_topics(self, topics: list[str]) -> list[tuple[str, list]]:
        """describeTopics(topics).allTopicNames(): ``[(topic, [(partition, replicas)])]`` in the
        order of the HashMap it returns; the first failing topic raises."""
        md = self._metadata_retrying(topics, "describeTopics")
        n = len(topics)
        order = java_hash_order(java_hash_order(list(topics), java_string_hash, initial_capacity=n),
                                java_string_hash, initial_capacity=n)
        for t in order:
            err = md.get(t, (3, False, []))[0]
            if err:
                raise kafka_error(err)
        return [(t, [(p, replicas) for p, _e, _l, replicas in md[t][2]]) for t in order]


def _coordinator_key(tid: str) -> str:
    """CoordinatorKey.toString()."""
    return f"CoordinatorKey(idValue='{tid}', type=TRANSACTION)"


# ============================================================================ the commands

DESCRIBE_PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                              "CurrentTransactionStartOffset"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"]
LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
FIND_HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"]
MAX_BATCH_SIZE = 500


def _now_ms() -> int:
    return int(time.time() * 1000)


def cmd_list(admin: Admin, ns: dict) -> None:
    duration = ns.get("duration_filter")
    try:
        result = admin.list_transactions(duration_ms=-1 if duration is None else duration)
    except JavaError as e:
        fail("Failed to list transactions", e)
    rows = [[listing.transactional_id, str(broker), str(listing.producer_id), listing.state]
            for broker, listings in result.items() for listing in listings]
    pretty_print_table(LIST_HEADERS, rows)


def cmd_describe(admin: Admin, ns: dict) -> None:
    tid = ns["transactional_id"]
    completed, failed = admin.describe_transactions([tid])
    if tid in failed:
        fail(f"Failed to describe transaction state of transactional-id `{tid}`", failed[tid])
    d = completed[tid]
    if d.transaction_start_time_ms >= 0:
        start = str(d.transaction_start_time_ms)
        duration = str(_now_ms() - d.transaction_start_time_ms)
    else:
        start = duration = "None"
    row = [str(d.coordinator_id), tid, str(d.producer_id), str(d.producer_epoch), d.state,
           str(d.transaction_timeout_ms), start, duration, ",".join(tp_str(tp) for tp in d.topic_partitions)]
    pretty_print_table(DESCRIBE_HEADERS, [row])


def cmd_describe_producers(admin: Admin, ns: dict) -> None:
    tp = (ns["topic"], ns["partition"])
    broker_id = ns.get("broker_id")
    completed, failed = admin.describe_producers([tp], broker_id)
    if tp in failed:
        where = f"broker {broker_id}" if broker_id is not None else "leader"
        fail(f"Failed to describe producers for partition {tp_str(tp)} on {where}", failed[tp])
    rows = [[str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
             str(s.last_timestamp), str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None"]
            for s in completed[tp]]
    pretty_print_table(DESCRIBE_PRODUCERS_HEADERS, rows)


def cmd_abort(admin: Admin, ns: dict) -> None:
    tp = (ns["topic"], ns["partition"])
    start_offset = ns.get("start_offset")
    producer_id = ns.get("producer_id")
    if start_offset is None and producer_id is None:
        fail("The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
             "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)")
    if start_offset is None:
        producer_epoch = ns.get("producer_epoch")
        if producer_epoch is None:
            fail("Missing required argument --producer-epoch")
        coordinator_epoch = ns.get("coordinator_epoch")
        if coordinator_epoch is None:
            fail("Missing required argument --coordinator-epoch")
        # a transaction begun by a new producer id that hung before its first marker shows
        # coordinator epoch -1 in DescribeProducers: 0 is <= any coordinator epoch
        spec = AbortTransactionSpec(tp, producer_id, producer_epoch, max(coordinator_epoch, 0))
    else:
        completed, failed = admin.describe_producers([tp])
        if tp in failed:
            fail(f"Failed to validate producer state for partition {tp_str(tp)}", failed[tp])
        found = next((s for s in completed[tp] if s.current_txn_start_offset >= 0
                      and s.current_txn_start_offset == start_offset), None)
        if found is None:
            fail(f"Could not find any open transactions starting at offset {start_offset} on partition {tp_str(tp)}")
        # coordinatorEpoch().orElse(0): DescribeProducers' -1 means none
        spec = AbortTransactionSpec(tp, found.producer_id, _as_short(found.producer_epoch),
                                    max(found.coordinator_epoch, 0))
    try:
        admin.abort_transaction(spec)
    except JavaError as e:
        fail(f"Failed to abort transaction {spec}", e)


def _as_short(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


@dataclass
class _OpenTransaction:
    tp: tuple[str, int]
    state: ProducerState


def cmd_find_hanging(admin: Admin, ns: dict) -> None:
    broker_id = ns.get("broker_id")
    topic = ns.get("topic")
    if topic is None and broker_id is None:
        fail("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search")
    partition = ns.get("partition")
    if partition is not None and topic is None:
        fail("The --partition argument requires --topic to be provided")
    max_ms = ns["max_transaction_timeout"] * 60_000

    # the partitions to search
    if topic is not None and partition is not None:
        tps = [(topic, partition)]
    else:
        if topic is not None:
            topics = [topic]
        else:
            try:
                topics = admin.list_topics()
            except JavaError as e:
                fail("Failed to list topics", e)
        tps = []
        for i in range(0, len(topics), MAX_BATCH_SIZE):
            batch = topics[i:i + MAX_BATCH_SIZE]
            try:
                described = admin.describe_topics(batch)
            except JavaError as e:
                fail(f"Failed to describe {len(batch)} topics", e)
            for t, parts in described:
                tps += [(t, p) for p, replicas in parts if broker_id is None or broker_id in replicas]

    # open transactions older than the timeout, by partition
    candidates: list[_OpenTransaction] = []
    for i in range(0, len(tps), MAX_BATCH_SIZE):
        batch = tps[i:i + MAX_BATCH_SIZE]
        completed, failed = admin.describe_producers(batch, broker_id)
        # DescribeProducersResult.all(): a HashMap built from the futures' HashMap
        order = java_hash_order(java_hash_order(java_hash_order(list(dict.fromkeys(batch)), topic_partition_hash),
                                                topic_partition_hash), topic_partition_hash,
                                initial_capacity=len(set(batch)))
        first_failure = next((failed[tp] for tp in order if tp in failed), None)
        if first_failure is not None:
            where = f"Optional[{broker_id}]" if broker_id is not None else "Optional.empty"
            fail(f"Failed to describe producers for {len(batch)} partitions on broker {where}", first_failure)
        now = _now_ms()
        for tp in order:
            for s in completed[tp]:
                if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms:
                    candidates.append(_OpenTransaction(tp, s))

    hanging: list[_OpenTransaction] = []
    if candidates:
        by_pid: dict[int, list[_OpenTransaction]] = {}
        for c in candidates:
            by_pid.setdefault(c.state.producer_id, []).append(c)
        pids = java_hash_order(list(by_pid), long_hash)
        try:
            txn_ids: dict[int, str] = {}
            for listings in admin.list_transactions(producer_ids=pids).values():
                for listing in listings:
                    if listing.producer_id in by_pid:
                        txn_ids[listing.producer_id] = listing.transactional_id
        except JavaError as e:
            fail(f"Failed to list transactions for {len(by_pid)} producers", e)
        ids = list(txn_ids.values())
        descriptions: dict[str, TransactionDescription | None] = {}
        completed, failed = admin.describe_transactions(list(dict.fromkeys(ids)))
        for tid in ids:
            if tid in completed:
                descriptions[tid] = completed[tid]
            elif failed[tid].code == 105:
                descriptions[tid] = None
            else:
                fail(f"Failed to describe {len(ids)} transactions", failed[tid])
        for pid in pids:
            tid = txn_ids.get(pid)
            description = descriptions.get(tid) if tid is not None else None
            if description is None:
                # no transactional id for the producer id, or the coordinator does not know it
                hanging += by_pid[pid]
            else:
                # an ongoing transaction (or one whose markers are being written) lists the
                # partition: the coordinator will still complete it there
                hanging += [c for c in by_pid[pid] if c.tp not in description.topic_partitions]

    now = _now_ms()
    rows = [[c.tp[0], str(c.tp[1]), str(c.state.producer_id), str(c.state.producer_epoch),
             str(c.state.coordinator_epoch), str(c.state.current_txn_start_offset), str(c.state.last_timestamp),
             str(int((now - c.state.last_timestamp) / 60_000))] for c in hanging]
    pretty_print_table(FIND_HANGING_HEADERS, rows)


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "describe-producers": cmd_describe_producers,
            "abort": cmd_abort, "find-hanging": cmd_find_hanging}


# ============================================================================ entry points

def execute(argv: list[str]) -> int:
    """TransactionsCommand.execute: parse, build the Admin client, run the command."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except ArgumentParserException as e:
        parser.handle_error(e)
        return 1
    except _Exit as e:
        return e.code
    admin = None
    try:
        try:
            props = load_props(ns["command_config"]) if ns.get("command_config") else {}
        except OSError as e:
            fail("Failed to load admin client properties", JavaError("java.nio.file.NoSuchFileException",
                                                                     e.filename or str(e)))
        try:
            admin = Admin(ns["bootstrap_server"], props)
        except JavaError as e:
            sys.stdout.flush()
            sys.stderr.write('Exception in thread "main" org.apache.kafka.common.KafkaException: '
                             "Failed to create new KafkaAdminClient\n"
                             f"Caused by: {e.java_class}: {e.message}\n")
            return 1
        COMMANDS[ns["command"]](admin, ns)
    except ToolFailure as e:
        sys.stdout.flush()
        sys.stderr.write(f"{e}\n")
        sys.stderr.flush()
        return 1
    finally:
        if admin is not None:
            admin.close()
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``kesque transactions ...`` (the arguments after the subcommand)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_tool(execute, argv)


def kafka_transactions() -> None:
    """The ``kafka-transactions.sh`` console script."""
    exit_flushed(main())
