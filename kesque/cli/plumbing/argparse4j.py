"""argparse4j (0.7.0), as Kafka's tools that parse with it behave (``kafka-transactions.sh``,
``kafka-metadata-quorum.sh``, ``kafka-cluster.sh``): options of the tool come before the command,
the command's after it; ``--help`` prints argparse4j's help; usage errors print the usage of the
(sub)command and ``<prog>: error: ...`` on stderr. :class:`ArgParser` reproduces prefix
abbreviations of options and commands, the justified help (75 columns unless ``$COLUMNS`` or the
terminal say otherwise, :func:`format_width`), its messages (``argument --partition is
required``, ``could not convert 'x' to Integer (For input string: "x")``) and its ``Did you
mean:`` hints. A tool calls :meth:`ArgParser.parse_args` and, on
:class:`ArgumentParserException`, :meth:`ArgParser.handle_error`; ``--version`` raises
:class:`ParserExit`."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from ... import __version__


class ArgumentParserException(Exception):
    def __init__(
        self, message: str, parser: ArgParser, arg: Arg | None = None, *, token: str | None = None, kind: str = ""
    ):
        if arg is not None:
            message = f"argument {arg.textual_name()}: {message}"
        super().__init__(message)
        self.message = message
        self.parser = parser
        self.token = token
        self.kind = kind  # "argument" (UnrecognizedArgumentException), "command", "help" or ""


class ParserExit(Exception):
    """``--version`` was given: the tool ends with ``code`` (0)."""

    def __init__(self, code: int):
        self.code = code


_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_RANGES = {
    "Integer": (-(1 << 31), (1 << 31) - 1),
    "Long": (-(1 << 63), (1 << 63) - 1),
    "Short": (-(1 << 15), (1 << 15) - 1),
}


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

    def __init__(
        self,
        prog: str,
        description: str = "",
        command: str | None = None,
        main: ArgParser | None = None,
        help: str = "",
    ):
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
            print(f"{__version__} (Commit:unknown)")
            raise ParserExit(0)
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
                                    embedded_value = term[i + 1 :]
                                break
                            self._run(a, attrs)
                            used.add(id(a))
                    if not shorts_found:
                        raise ArgumentParserException(
                            f"unrecognized arguments: '{term}'", self, token=term, kind="argument"
                        )
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
                raise ArgumentParserException(f"unrecognized arguments: '{' '.join(state.args[state.index :])}'", self)
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
            raise ArgumentParserException(
                f"invalid choice: '{word}' (choose from {choices})", self, token=word, kind="command"
            )
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
            out.append(s[start : i + 1])
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
        out.append(sb[last : m.start()])
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
    cands = sorted(
        (0 if sb.startswith(body) else _levenshtein(body, sb, 0, 2, 1, 4), subject) for subject, sb in subjects
    )
    if not cands or cands[0][0] >= 7:
        return ""
    threshold = cands[0][0]
    return "\nDid you mean:\n" + "".join(f"\t{s}\n" for d, s in cands if d <= threshold)
