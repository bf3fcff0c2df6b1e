"""Shared plumbing of the Kafka-style command-line tools.

Kafka's tools parse options with jopt-simple and report usage errors by printing the
message followed by the option table on stderr and exiting with status 1. The helpers
here give argparse the same behaviour (and a jopt-like help table), so that every tool
looks the same whether it is run as ``kesque topics`` or as ``kafka-topics.sh``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import faulthandler
import os
import re
import signal
import sys
import textwrap
import time
import uuid

from ..utils import java_string_hash

# ----------------------------------------------------------------- exit / errors


class ToolExit(SystemExit):
    """Raised to stop a tool with a status code (message already printed)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: the tool stops cleanly and exits ``128 + signal`` (130, 143),
    as a JVM ends on those signals once its shutdown hooks have run."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.status = 128 + int(signum)


def interrupted_status(exc: KeyboardInterrupt) -> int:
    return getattr(exc, "status", 128 + signal.SIGINT)


STOP_GRACE_SECONDS = 30.0


def _stop_overdue(signum: int) -> None:
    print(f"Still running {STOP_GRACE_SECONDS:g} s after signal {signum}: exiting without the rest of the "
          "clean-up. Where it was:", file=sys.stderr)
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(128 + signum)


@contextlib.contextmanager
def stop_signals():
    """SIGINT and SIGTERM raise :class:`Interrupted` while the block runs, even when the tool was
    started with them ignored (a background job of a non-interactive shell, ``nohup``, some CI
    runners). Only the first one does: a second signal does not break the clean-up it started.
    A clean-up that blocks (a client library waiting on a broker that no longer answers) is cut
    short ``STOP_GRACE_SECONDS`` after the signal, with the stacks printed, so a signal always
    ends the tool. The previous handlers come back afterwards."""
    import threading

    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            watchdog = threading.Timer(STOP_GRACE_SECONDS, _stop_overdue, (signum,))
            watchdog.daemon = True
            watchdog.start()
            raise Interrupted(signum)

    saved = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def exit_flushed(code: int) -> None:
    """A console script's end: stdout flushed (a closed pipe is not an error), then ``code``."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    sys.exit(code)


def run_tool(fn, *args) -> int:
    """A tool's exit status: ``fn(*args)``'s, a ToolExit's code, 130 / 143 on SIGINT / SIGTERM
    (see :func:`stop_signals`), 1 when no bootstrap server could be reached (the message names
    them) or when the reader of stdout went away (a closed pipe: say nothing more)."""
    from ..client.wire import Unreachable

    try:
        with stop_signals():
            return fn(*args)
    except ToolExit as e:
        return e.code
    except KeyboardInterrupt as e:
        return interrupted_status(e)
    except Unreachable as e:
        sys.stdout.flush()
        print(error_line(e), file=sys.stderr)
        return 1
    except BrokenPipeError:
        try:
            sys.stdout = None  # type: ignore[assignment]
        except Exception:
            pass
        return 1


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


# ----------------------------------------------------------------- the parser


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
                "Integer" if action.type is int else ("Double" if action.type is float else "String"))
            left = f"{name} <{kind}: {meta}>" if action.nargs != "?" else f"{name} [{kind}: {meta}]"
        text = action.help or ""
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0 \
                and "(default:" not in text:
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
        from .. import __version__
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


# ----------------------------------------------------------------- properties


def load_props(path: str) -> dict[str, str]:
    """Java ``Properties.load`` for the simple cases (key=value / key: value, # comments)."""
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        pending = ""
        for raw in f.read().splitlines():
            line = pending + raw.lstrip() if pending else raw.strip()
            if not pending and (not line or line[0] in "#!"):
                continue
            if line.endswith("\\") and not line.endswith("\\\\"):
                pending = line[:-1]
                continue
            pending = ""
            m = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
            if m:
                props[m.group(1).replace("\\", "")] = m.group(2)
            else:
                props[line] = ""
    return props


def parse_key_value_args(items: list[str] | None) -> dict[str, str]:
    """CommandLineUtils.parseKeyValueArgs: ``k=v`` (a missing value becomes empty)."""
    out: dict[str, str] = {}
    for item in items or []:
        k, _, v = item.partition("=")
        out[k] = v
    return out


# ----------------------------------------------------------------- Kafka error vocabulary

# error code -> (Java exception class, Errors' default message); used when the broker sent
# no message and librdkafka only has its own generic wording.
_ERRORS: dict[int, tuple[str, str]] = {
    -1: ("UnknownServerException", "The server experienced an unexpected error when processing the request."),
    1: ("OffsetOutOfRangeException", "The requested offset is not within the range of offsets maintained by the server."),
    3: ("UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    5: ("LeaderNotAvailableException",
        "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    6: ("NotLeaderOrFollowerException", "For requests intended only for the leader, this error indicates that the "
        "broker is not the current leader. For requests intended for any replica, this error indicates that the "
        "broker is not a replica of the topic partition."),
    7: ("TimeoutException", "The request timed out."),
    17: ("InvalidTopicException", "The request attempted to perform an operation on an invalid topic."),
    29: ("TopicAuthorizationException", "Topic authorization failed."),
    31: ("ClusterAuthorizationException", "Cluster authorization failed."),
    35: ("UnsupportedVersionException", "The version of API is not supported."),
    36: ("TopicExistsException", "Topic with this name already exists."),
    37: ("InvalidPartitionsException", "Number of partitions is below 1."),
    38: ("InvalidReplicationFactorException",
         "Replication factor is below 1 or larger than the number of available brokers."),
    39: ("InvalidReplicaAssignmentException", "Replica assignment is invalid."),
    40: ("InvalidConfigurationException", "Configuration is invalid."),
    42: ("InvalidRequestException", "This most likely occurs because of a request being malformed by the client "
         "library or the message was sent to an incompatible broker. See the broker logs for more details."),
    44: ("PolicyViolationException", "Request parameters do not satisfy the configured policy."),
    73: ("TopicDeletionDisabledException", "Topic deletion is disabled."),
    85: ("NoReassignmentInProgressException", "No partition reassignment is in progress."),
    100: ("UnknownTopicIdException", "This server does not host this topic ID."),
}


def java_exception_for(code: int, message: str | None, error_name: str = "") -> tuple[str, str]:
    """(Java exception simple name, message) for a Kafka error code and the broker's message."""
    name, default = _ERRORS.get(code, (None, None))
    msg = message or ""
    if msg.startswith("Broker: ") or msg.startswith("Local: ") or not msg:
        msg = default or msg
    if name is None:
        if code < 0 or not error_name:
            name = "KafkaException"
        else:
            name = "".join(p.capitalize() for p in error_name.lower().split("_") if p) + "Exception"
    return name, msg


def java_exception(err) -> tuple[str, str]:
    """(Java exception simple name, message) for a confluent_kafka KafkaError."""
    return java_exception_for(err.code(), err.str(), err.name())


class BrokerError(Exception):
    """An error code (and message) a broker answered with, for the wire-client paths."""

    def __init__(self, code: int, message: str | None, error_name: str = ""):
        self.code = int(code)
        self.java_name, self.message = java_exception_for(self.code, message, error_name)
        super().__init__(self.message)


def kafka_error_of(exc: BaseException):
    """The KafkaError inside a KafkaException (or None)."""
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "code") and hasattr(args[0], "str"):
        return args[0]
    return None


def error_message(exc: BaseException) -> str:
    err = kafka_error_of(exc)
    if err is not None:
        return java_exception(err)[1]
    if isinstance(exc, BrokerError):
        return exc.message
    return str(exc)


def error_line(exc: BaseException) -> str:
    """``org.apache.kafka.common.errors.X: message`` as a Java stack trace starts."""
    err = kafka_error_of(exc)
    if err is not None:
        name, msg = java_exception(err)
        return f"org.apache.kafka.common.errors.{name}: {msg}"
    if isinstance(exc, BrokerError):
        return f"org.apache.kafka.common.errors.{exc.java_name}: {exc.message}"
    if getattr(exc, "java_name", None):
        return f"org.apache.kafka.common.errors.{exc.java_name}: {exc}"
    return f"{type(exc).__name__}: {exc}"


# ----------------------------------------------------------------- formatting


def kafka_uuid(u) -> str:
    """Kafka's Uuid.toString (URL-safe base64, no padding) of a uuid.UUID, a confluent
    Uuid or 16 bytes."""
    if u is None:
        return "AAAAAAAAAAAAAAAAAAAAAA"
    if isinstance(u, uuid.UUID):
        raw = u.bytes
    elif isinstance(u, (bytes, bytearray)):
        raw = bytes(u)
    else:
        msb = u.get_most_significant_bits() & (2**64 - 1)
        lsb = u.get_least_significant_bits() & (2**64 - 1)
        raw = msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def java_hash_order(items: list, hash_fn, initial_capacity: int | None = None) -> list:
    """Iteration order of a java.util.HashMap whose keys were put in ``items`` order:
    bucket index (of the table after any resizes), then insertion order. Kafka's tools
    print maps and JSON built from HashMaps, so this reproduces their ordering."""
    if initial_capacity is None:
        capacity = 16
    else:
        capacity = 1
        while capacity < initial_capacity:
            capacity *= 2
    while len(items) > capacity * 0.75:
        capacity *= 2

    def bucket(item) -> int:
        h = hash_fn(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    indexed = list(enumerate(items))
    indexed.sort(key=lambda t: (bucket(t[1]), t[0]))
    return [x for _i, x in indexed]


def java_hashmap_order(keys: list[str]) -> list[str]:
    """Iteration order of a small HashMap<String, ?> filled with ``keys`` in that order."""
    return java_hash_order(keys, java_string_hash)


def topic_partition_hash(tp: tuple[str, int]) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode()."""
    h = (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def log4j_stamp() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


def java_simple_date(fmt: str, ms: int) -> str:
    """Format ``ms`` with a java.text.SimpleDateFormat pattern (the letters the tools use)."""
    lt = time.localtime(ms / 1000.0)
    repl = {
        "yyyy": f"{lt.tm_year:04d}", "yy": f"{lt.tm_year % 100:02d}", "MM": f"{lt.tm_mon:02d}",
        "dd": f"{lt.tm_mday:02d}", "HH": f"{lt.tm_hour:02d}", "mm": f"{lt.tm_min:02d}",
        "ss": f"{lt.tm_sec:02d}", "SSS": f"{ms % 1000:03d}",
    }
    return re.sub(r"yyyy|yy|MM|dd|HH|mm|ss|SSS", lambda m: repl[m.group(0)], fmt)


def bootstrap_check(value: str | None) -> str | None:
    """ToolsUtils.validateBootstrapServer: an error message or None."""
    if value is None or not value.strip():
        return "Error while validating the bootstrap address\n"
    for part in value.split(","):
        part = part.strip()
        if not re.match(r"^\[?[^\s\]]*\]?:\d+$", part):
            return "Please provide valid host:port like host1:9091,host2:9092\n "
    return None

