"""``kafka-console-consumer.sh``: print records of a topic on standard output.

Options and output follow Kafka's ConsoleConsumer and DefaultMessageFormatter
(``--property print.timestamp=true`` gives ``CreateTime:1700000000000<TAB>...``, then
``Partition:``, ``Offset:``, ``Delivery:``, ``Epoch:``, headers, key, value), and
``Processed a total of N messages`` on stderr at the end.

Without ``--group`` no consumer group is used at all: partitions are assigned directly,
start offsets resolved with ListOffsets, nothing is ever committed (see
:mod:`kesque.client.consumer`). With ``--group`` (or ``group.id`` in the consumer
properties) the topic is subscribed through a group with confluent-kafka's Consumer.

Committing in a group follows Kafka's ConsoleConsumer: auto commit is on unless
``enable.auto.commit=false`` is given, and only what was printed is ever committed. Kafka gets
this by committing in ``poll()`` (every record of the previous poll has been written by then)
and, on exit, by seeking back to the first record it did not print before ``close()``
(``resetUnconsumedOffsets``); here librdkafka's automatic offset store is turned off and each
record's offset is stored once it has been written and flushed to stdout, so the periodic
auto commit and the commit on close both cover exactly the printed records. Killed between
printing and the next commit, the consumer re-reads what it printed since that commit: the
console consumer is at-least-once.
"""

from __future__ import annotations

import struct
import sys
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from ..client.consumer import Message, WireConsumer
from ..client.wire import AuthenticationError, Unreachable
from .plumbing.admin_client import IncludeList, check_reachable
from .plumbing.errors import error_line
from .plumbing.javautil import load_props, log4j_stamp, parse_key_value_args
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version
from .plumbing.rdkafka import librdkafka_props
from .plumbing.run import ToolExit, interrupted_status

NAME = "console-consumer"
SCRIPT = "kafka-console-consumer.sh"
DESCRIPTION = "This tool helps to read data from Kafka topics and outputs it to standard output."
HELP = "print the records of a topic (kafka-console-consumer.sh)"

DEFAULT_FORMATTERS = {
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
    "kafka.tools.DefaultMessageFormatter",
    "DefaultMessageFormatter",
}
NOOP_FORMATTERS = {
    "org.apache.kafka.tools.consumer.NoOpMessageFormatter",
    "kafka.tools.NoOpMessageFormatter",
    "NoOpMessageFormatter",
}


def configure(p) -> None:
    p.add_argument("--topic", metavar="topic", help="The topic to consume on.")
    p.add_argument(
        "--include",
        metavar="Java regex (String)",
        help="Regular expression specifying list of topics to include for consumption.",
    )
    p.add_argument(
        "--partition",
        type=int,
        metavar="partition",
        help="The partition to consume from. Consumption starts from the end of the partition unless "
        "'--offset' is specified.",
    )
    p.add_argument(
        "--offset",
        metavar="consume offset",
        help="The offset to consume from (a non-negative number), or 'earliest' which means from "
        "beginning, or 'latest' which means from end (default: latest)",
    )
    p.add_argument(
        "--consumer-property",
        action="append",
        metavar="consumer_prop",
        help="A mechanism to pass user-defined properties in the form key=value to the consumer.",
    )
    p.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="config file",
        help="Consumer config properties file. Note that [consumer-property] takes precedence over this config.",
    )
    p.add_argument(
        "--formatter",
        metavar="class",
        help="The name of a class to use for formatting kafka messages for display. (default: "
        "org.apache.kafka.tools.consumer.DefaultMessageFormatter)",
    )
    p.add_argument(
        "--property",
        action="append",
        metavar="prop",
        help="The properties to initialize the message formatter. Default properties include: \n"
        " print.timestamp=true|false\n print.key=true|false\n print.offset=true|false\n"
        " print.epoch=true|false\n print.partition=true|false\n print.headers=true|false\n"
        " print.value=true|false\n key.separator=<key.separator>\n line.separator=<line.separator>\n"
        " headers.separator=<line.separator>\n null.literal=<null.literal>\n"
        " key.deserializer=<key.deserializer>\n value.deserializer=<value.deserializer>\n"
        " header.deserializer=<header.deserializer>",
    )
    p.add_argument(
        "--formatter-config",
        metavar="config file",
        help="Config properties file to initialize the message formatter. Note that [property] takes "
        "precedence over this config.",
    )
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="If the consumer does not already have an established offset to consume from, start with "
        "the earliest message present in the log rather than the latest message.",
    )
    p.add_argument(
        "--max-messages",
        type=int,
        metavar="num_messages",
        help="The maximum number of messages to consume before exiting. If not set, consumption is continual.",
    )
    p.add_argument(
        "--timeout-ms",
        type=int,
        metavar="timeout_ms",
        help="If specified, exit if no message is available for consumption for the specified interval.",
    )
    p.add_argument(
        "--skip-message-on-error",
        action="store_true",
        help="If there is an error when processing a message, skip it instead of halt.",
    )
    p.add_argument("--bootstrap-server", metavar="server to connect to", help="REQUIRED: The server(s) to connect to.")
    p.add_argument("--key-deserializer", metavar="deserializer for key")
    p.add_argument("--value-deserializer", metavar="deserializer for values")
    p.add_argument(
        "--enable-systest-events",
        action="store_true",
        help="Log lifecycle events of the consumer in addition to logging consumed messages. (This is "
        "specific for system tests.)",
    )
    p.add_argument(
        "--isolation-level",
        metavar="isolation-level",
        help="Set to read_committed in order to filter out transactional messages which are not "
        "committed. Set to read_uncommitted to read all messages. (default: read_uncommitted)",
    )
    p.add_argument("--group", metavar="consumer group id", help="The consumer group id of the consumer.")
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


# ----------------------------------------------------------------- formatter


def _deserializer(name: str | None):
    if not name:
        return None
    short = name.rsplit(".", 1)[-1]
    table = {
        "StringDeserializer": lambda b: b.decode("utf-8", "replace"),
        "LongDeserializer": lambda b: str(struct.unpack(">q", b)[0]),
        "IntegerDeserializer": lambda b: str(struct.unpack(">i", b)[0]),
        "ShortDeserializer": lambda b: str(struct.unpack(">h", b)[0]),
        "DoubleDeserializer": lambda b: repr(struct.unpack(">d", b)[0]),
        "FloatDeserializer": lambda b: repr(struct.unpack(">f", b)[0]),
        "UUIDDeserializer": lambda b: str(uuid.UUID(b.decode())),
        "ByteArrayDeserializer": None,
        "BytesDeserializer": lambda b: "".join(chr(c) if 32 <= c < 127 else f"\\x{c:02X}" for c in b),
        "VoidDeserializer": lambda b: "null",
    }
    if short not in table:
        print(
            f"[{log4j_stamp()}] ERROR Unable to instantiate a deserializer from {name} "
            "(org.apache.kafka.tools.consumer.DefaultMessageFormatter)",
            file=sys.stderr,
        )
        return None
    fn = table[short]
    return (lambda b: fn(b).encode("utf-8")) if fn else None


class DefaultMessageFormatter:
    def __init__(self, props: dict[str, str]):
        def flag(k, default):
            return props[k].strip().lower() == "true" if k in props else default

        self.ts = flag("print.timestamp", False)
        self.key = flag("print.key", False)
        self.offset = flag("print.offset", False)
        self.delivery = flag("print.delivery", False)
        self.epoch = flag("print.epoch", False)
        self.partition = flag("print.partition", False)
        self.headers = flag("print.headers", False)
        self.value = flag("print.value", True)
        self.key_sep = props.get("key.separator", "\t").encode()
        self.line_sep = props.get("line.separator", "\n").encode()
        self.headers_sep = props.get("headers.separator", ",").encode()
        self.null = props.get("null.literal", "null").encode()
        self.key_deser = _deserializer(props.get("key.deserializer"))
        self.value_deser = _deserializer(props.get("value.deserializer"))
        self.headers_deser = _deserializer(props.get("headers.deserializer"))

    def _des(self, fn, data):
        data = data if data is not None else self.null
        return fn(data) if fn else data

    def format(self, m) -> bytes:
        out = bytearray()
        rest = [self.partition, self.offset, self.delivery, self.epoch, self.headers, self.key, self.value]

        def sep(i):
            out.extend(self.key_sep if any(rest[i:]) else self.line_sep)

        if self.ts:
            out += (
                b"NO_TIMESTAMP" if m.timestamp_type == "NO_TIMESTAMP" else f"{m.timestamp_type}:{m.timestamp}".encode()
            )
            sep(0)
        if self.partition:
            out += f"Partition:{m.partition}".encode()
            sep(1)
        if self.offset:
            out += f"Offset:{m.offset}".encode()
            sep(2)
        if self.delivery:
            dc = getattr(m, "delivery_count", None)  # share consumers' records have one
            out += f"Delivery:{dc}".encode() if dc is not None else b"Delivery:NOT_PRESENT"
            sep(3)
        if self.epoch:
            out += (
                f"Epoch:{m.leader_epoch}".encode()
                if m.leader_epoch is not None and m.leader_epoch >= 0
                else b"Epoch:NOT_PRESENT"
            )
            sep(4)
        if self.headers:
            if not m.headers:
                out += b"NO_HEADERS"
            else:
                for i, (hk, hv) in enumerate(m.headers):
                    out += f"{hk}:".encode() + self._des(self.headers_deser, hv)
                    if i < len(m.headers) - 1:
                        out += self.headers_sep
            sep(5)
        if self.key:
            out += self._des(self.key_deser, m.key)
            sep(6)
        if self.value:
            out += self._des(self.value_deser, m.value)
            out += self.line_sep
        return bytes(out)


class NoOpMessageFormatter:
    def __init__(self, props):
        pass

    def format(self, m) -> bytes:
        return b""


# ----------------------------------------------------------------- options


class Options:
    pass


def _check(p, a) -> Options:
    usage_or_version(a, p, DESCRIPTION)
    if (a.topic is not None) + (a.include is not None) != 1:
        print_usage_and_exit(p, "Exactly one of --include/--topic is required. ")
    if a.partition is not None:
        if a.topic is None:
            print_usage_and_exit(p, "The topic is required when partition is specified.")
        if a.from_beginning and a.offset is not None:
            print_usage_and_exit(p, "Options from-beginning and offset cannot be specified together.")
    elif a.offset is not None:
        print_usage_and_exit(p, "The partition is required when offset is specified.")
    check_required(p, a, "bootstrap-server")
    o = Options()
    file_props = load_props(a.consumer_config) if a.consumer_config else {}
    extra = parse_key_value_args(a.consumer_property)
    groups = []
    for g in (a.group, file_props.get("group.id"), extra.get("group.id")):
        if g is not None and g not in groups:
            groups.append(g)
    if len(groups) > 1:
        print_usage_and_exit(
            p,
            "The group ids provided in different places (directly using '--group', via "
            "'--consumer-property', or via '--consumer.config') do not match. Detected group ids: "
            + ", ".join(f"'{g}'" for g in groups),
        )
    if groups and a.partition is not None:
        print_usage_and_exit(p, "Options group and partition cannot be specified together.")
    props = dict(file_props)
    props.update(extra)
    if "auto.offset.reset" in props:
        if a.from_beginning and props["auto.offset.reset"] != "earliest":
            print(
                f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={props['auto.offset.reset']}', "
                "please remove one option",
                file=sys.stderr,
            )
            raise ToolExit(1)
    else:
        props["auto.offset.reset"] = "earliest" if a.from_beginning else "latest"
    props["bootstrap.servers"] = a.bootstrap_server
    props.setdefault("client.id", "console-consumer")
    if a.isolation_level is not None or "isolation.level" not in props:
        props["isolation.level"] = a.isolation_level or "read_uncommitted"
    if props["isolation.level"] not in ("read_committed", "read_uncommitted"):
        print(
            f"org.apache.kafka.common.config.ConfigException: Invalid value {props['isolation.level']} for "
            "configuration isolation.level: String must be one of: read_committed, read_uncommitted",
            file=sys.stderr,
        )
        raise ToolExit(1)
    o.group = groups[0] if groups else None
    o.props = props
    # start offset for --partition
    o.offset = None
    if a.offset is not None:
        low = a.offset.lower()
        if low == "earliest":
            o.offset = -2
        elif low == "latest":
            o.offset = -1
        else:
            try:
                o.offset = int(a.offset)
            except ValueError:
                o.offset = -100
            if o.offset < 0:
                print_usage_and_exit(
                    p,
                    f"The provided offset value '{a.offset}' is incorrect. Valid values are "
                    "'earliest', 'latest', or a non-negative long.",
                )
    elif a.from_beginning:
        o.offset = -2
    else:
        o.offset = -1
    o.timeout_ms = a.timeout_ms if a.timeout_ms is not None and a.timeout_ms >= 0 else None
    o.max_messages = a.max_messages if a.max_messages is not None else -1
    # formatter
    fprops = load_props(a.formatter_config) if a.formatter_config else {}
    if a.key_deserializer:
        fprops["key.deserializer"] = a.key_deserializer
    if a.value_deserializer:
        fprops["value.deserializer"] = a.value_deserializer
    fprops.update(parse_key_value_args(a.property))
    name = a.formatter or "org.apache.kafka.tools.consumer.DefaultMessageFormatter"
    if name in DEFAULT_FORMATTERS:
        o.formatter = DefaultMessageFormatter(fprops)
    elif name in NOOP_FORMATTERS:
        o.formatter = NoOpMessageFormatter(fprops)
    else:
        print_usage_and_exit(p, name)
    return o


# ----------------------------------------------------------------- sources


class WireSource:
    """Group-less: direct assignment (see kesque.client.consumer)."""

    def __init__(self, a, o):

        props = o.props
        self.consumer = WireConsumer(
            a.bootstrap_server,
            client_id=props.get("client.id", "console-consumer"),
            isolation_level=1 if props["isolation.level"] == "read_committed" else 0,
            auto_offset_reset=props.get("auto.offset.reset", "latest"),
            max_wait_ms=int(props.get("fetch.max.wait.ms", 500)),
            fetch_min_bytes=int(props.get("fetch.min.bytes", 1)),
            fetch_max_bytes=int(props.get("fetch.max.bytes", 52428800)),
            partition_max_bytes=int(props.get("max.partition.fetch.bytes", 1048576)),
            client_props=props,
        )
        self.a = a
        self.o = o
        self.pattern = None
        if a.include is not None:
            self.pattern = IncludeList(a.include)
        self.reset_kind = -2 if props.get("auto.offset.reset") == "earliest" else -1
        self._next_refresh = 0.0

    def _refresh(self) -> None:
        """Assign partitions not assigned yet (topic appearing, partitions added)."""
        now = time.monotonic()
        if now < self._next_refresh:
            return
        self._next_refresh = now + (5.0 if self.consumer.assignment else 0.5)
        a = self.a
        if a.partition is not None:
            tp = (a.topic, a.partition)
            if tp not in self.consumer.assignment:
                parts = self.consumer.partitions_for(a.topic)
                if parts is not None and a.partition in parts:
                    self.consumer.assign({tp: self.o.offset})
            return
        if self.pattern is None:
            md = self.consumer.metadata([a.topic])
        else:
            md = self.consumer.metadata(None)
        new = {}
        for topic, info in md.items():
            if info["error"] != 0:
                continue
            if self.pattern is not None and not self.pattern.allowed(topic):
                continue
            if self.pattern is None and topic != a.topic:
                continue
            for part in info["partitions"]:
                if (topic, part) not in self.consumer.assignment:
                    new[(topic, part)] = self.reset_kind
        if new:
            self.consumer.assign(new)

    def poll(self, timeout: float):
        try:
            self._refresh()
        except OSError:
            pass
        return self.consumer.poll(timeout)

    def close(self) -> None:
        self.consumer.close()


class GroupSource:
    """With a group: confluent-kafka's Consumer subscribed to the topic (or pattern)."""

    _JAVA_ONLY = {
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
        "partition.assignment.strategy",
        "default.api.timeout.ms",
        "exclude.internal.topics",
        "allow.auto.create.topics",
    }

    def __init__(self, a, o):
        conf = {k: v for k, v in librdkafka_props(o.props).items() if k not in self._JAVA_ONLY}
        conf["group.id"] = o.group
        conf.setdefault("log_level", 0)
        # offsets are stored by hand once printed (see the module docstring)
        self.store = str(conf.setdefault("enable.auto.offset.store", "false")).lower() == "false"
        self.consumer = Consumer(conf)
        if a.include is not None:
            self.consumer.subscribe(["^" + IncludeList(a.include).regex])
        else:
            self.consumer.subscribe([a.topic])

    def poll(self, timeout: float):

        msgs = self.consumer.consume(500, timeout)
        out = []
        for m in msgs:
            if m.error() is not None:
                if m.error().code() in (-191,):  # partition EOF
                    continue
                continue
            ts_kind, ts = m.timestamp()
            kind = {1: "CreateTime", 2: "LogAppendTime"}.get(ts_kind, "NO_TIMESTAMP")
            out.append(
                Message(
                    m.topic(),
                    m.partition(),
                    m.offset(),
                    ts if ts_kind else -1,
                    kind,
                    m.key(),
                    m.value(),
                    list(m.headers() or []),
                    m.leader_epoch() if m.leader_epoch() is not None else -1,
                )
            )
        return out

    def printed(self, msgs) -> None:
        """Store the offsets after the printed records: the next commit covers them."""
        if not self.store or not msgs:
            return

        last: dict[tuple[str, int], object] = {}
        for m in msgs:
            last[(m.topic, m.partition)] = m
        tps = []
        for (topic, partition), m in last.items():
            if m.leader_epoch is not None and m.leader_epoch >= 0:
                tps.append(TopicPartition(topic, partition, m.offset + 1, leader_epoch=m.leader_epoch))
            else:
                tps.append(TopicPartition(topic, partition, m.offset + 1))
        try:
            self.consumer.store_offsets(offsets=tps)
        except Exception:  # a partition revoked meanwhile: its offsets are not ours to commit
            for tp in tps:
                try:
                    self.consumer.store_offsets(offsets=[tp])
                except Exception:
                    pass

    def close(self) -> None:
        self.consumer.close()


# ----------------------------------------------------------------- main loop


class _Stop(Exception):
    """Nobody reads standard output any more."""


def run(a) -> int:
    p = a._parser
    o = _check(p, a)
    count = 0
    status = 0
    source = None
    out = sys.stdout.buffer
    printed: list = []  # written, offsets not stored yet
    try:
        check_reachable(o.props)
        source = GroupSource(a, o) if o.group else WireSource(a, o)
        last = time.monotonic()
        while o.max_messages < 0 or count < o.max_messages:
            if o.timeout_ms is not None:
                remaining = o.timeout_ms / 1000.0 - (time.monotonic() - last)
                if remaining < 0:
                    sys.stdout.flush()
                    print(
                        f"[{log4j_stamp()}] ERROR Error processing message, terminating consumer process:  "
                        "(org.apache.kafka.tools.consumer.ConsoleConsumer)\n"
                        "org.apache.kafka.common.errors.TimeoutException",
                        file=sys.stderr,
                    )
                    break
                wait = min(remaining, 1.0)
            else:
                wait = 1.0
            msgs = source.poll(max(wait, 0.0))
            if not msgs:
                continue
            last = time.monotonic()
            for m in msgs:
                if 0 <= o.max_messages <= count:
                    break
                count += 1
                printed.append(m)
                try:
                    out.write(o.formatter.format(m))
                except BrokenPipeError:
                    print("Unable to write to standard out, closing consumer.", file=sys.stderr)
                    raise _Stop(0) from None
                except Exception as e:
                    if not a.skip_message_on_error:
                        raise
                    print(
                        f"[{log4j_stamp()}] ERROR Error processing message, skipping this message: {e}", file=sys.stderr
                    )
            try:
                out.flush()
            except BrokenPipeError:
                print("Unable to write to standard out, closing consumer.", file=sys.stderr)
                break
            if isinstance(source, GroupSource):
                source.printed(printed)
            printed.clear()
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (see _common.stop_signals): close, leave the group
        status = interrupted_status(e)
    except _Stop:
        pass
    except Unreachable as e:
        print(error_line(e), file=sys.stderr)
        status = 1
    except AuthenticationError as e:
        # Kafka 4.4's poll raises it in ConsoleConsumer.process, which logs it and returns: exit 0
        print(
            f"[{log4j_stamp()}] ERROR Error processing message, terminating consumer process:  "
            f"(org.apache.kafka.tools.consumer.ConsoleConsumer)\n{error_line(e)}",
            file=sys.stderr,
        )
    except Exception as e:
        print(
            f"[{log4j_stamp()}] ERROR Error processing message, terminating consumer process:  "
            f"(org.apache.kafka.tools.consumer.ConsoleConsumer)\n{e}",
            file=sys.stderr,
        )
        status = 1
    finally:
        try:
            out.flush()
            if isinstance(source, GroupSource):
                source.printed(printed)  # written before the stop: commit them on close
        except Exception:
            pass
        if source is not None:
            try:
                source.close()
            except Exception:
                pass
        print(f"Processed a total of {count} messages", file=sys.stderr)
        sys.stderr.flush()
    return status
