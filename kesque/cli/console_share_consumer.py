"""``kafka-console-share-consumer.sh``: print the records a share group hands out.

Options and output follow Kafka's ConsoleShareConsumer: the records are printed by the
console consumer's DefaultMessageFormatter (``print.delivery=true`` shows each record's
delivery count), each printed record is acknowledged at once - accepted, or rejected with
``--reject``, released with ``--release`` - and ``Processed a total of N messages`` goes to
stderr at the end. Without ``--group`` the group is ``console-share-consumer``. Records
fetched but not printed (``--max-messages`` reached) are released when the consumer closes.
The share consumer is :mod:`kesque.client.share_consumer`.
"""

from __future__ import annotations

import sys
import time

from ..client.share_consumer import ACCEPT, REJECT, RELEASE, ShareConsumer
from ..client.wire import Unreachable
from .console_consumer import DEFAULT_FORMATTERS, NOOP_FORMATTERS, DefaultMessageFormatter, NoOpMessageFormatter
from .plumbing.admin_client import check_reachable
from .plumbing.errors import error_line
from .plumbing.javautil import load_props, log4j_stamp, parse_key_value_args
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version
from .plumbing.run import interrupted_status

NAME = "console-share-consumer"
SCRIPT = "kafka-console-share-consumer.sh"
DESCRIPTION = "This tool helps to read data from Kafka topics using share groups and outputs it to standard output."
HELP = "print the records a share group hands out (kafka-console-share-consumer.sh)"
LOGGER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
DEFAULT_GROUP = "console-share-consumer"

_FORMATTER_PROPS = (
    "The properties to initialize the message formatter. Default properties include: \n"
    " print.timestamp=true|false\n print.key=true|false\n print.offset=true|false\n"
    " print.delivery=true|false\n print.epoch=true|false\n print.partition=true|false\n"
    " print.headers=true|false\n print.value=true|false\n key.separator=<key.separator>\n"
    " line.separator=<line.separator>\n headers.separator=<headers.separator>\n"
    " null.literal=<null.literal>\n key.deserializer=<key.deserializer>\n"
    " value.deserializer=<value.deserializer>\n header.deserializer=<header.deserializer>"
)


def configure(p) -> None:
    p.add_argument("--topic", metavar="topic", help="The topic to consume from.")
    p.add_argument(
        "--consumer-property",
        action="append",
        metavar="consumer_prop",
        help="(DEPRECATED) Consumer config properties in the form key=value.",
    )
    p.add_argument(
        "--command-property",
        action="append",
        metavar="consumer_prop",
        help="Consumer config properties in the form key=value.",
    )
    p.add_argument("--consumer-config", metavar="config file", help="(DEPRECATED) Consumer config properties file.")
    p.add_argument(
        "--command-config",
        metavar="config file",
        help="Consumer config properties file. Note that [command-property] takes precedence over this config.",
    )
    p.add_argument(
        "--formatter", metavar="class", help="The name of a class to use for formatting Kafka messages for display."
    )
    p.add_argument("--property", action="append", metavar="prop", help="(DEPRECATED) " + _FORMATTER_PROPS)
    p.add_argument("--formatter-property", action="append", metavar="prop", help=_FORMATTER_PROPS)
    p.add_argument(
        "--formatter-config",
        metavar="config file",
        help="Config properties file to initialize the message formatter. Note that [formatter-property] "
        "takes precedence over this config.",
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
    p.add_argument("--reject", action="store_true", help="If specified, messages are rejected as they are consumed.")
    p.add_argument("--release", action="store_true", help="If specified, messages are released as they are consumed.")
    p.add_argument(
        "--reject-message-on-error",
        action="store_true",
        help="If there is an error when processing a message, reject it instead of halting.",
    )
    p.add_argument("--bootstrap-server", metavar="server to connect to", help="REQUIRED: The server(s) to connect to.")
    p.add_argument("--key-deserializer", metavar="deserializer for keys")
    p.add_argument("--value-deserializer", metavar="deserializer for values")
    p.add_argument(
        "--enable-systest-events",
        action="store_true",
        help="Log lifecycle events of the share consumer in addition to logging consumed messages. "
        "(This is specific for system tests.)",
    )
    p.add_argument("--group", metavar="share group id", help="The share group id of the consumer.")
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class Options:
    pass


def _pair(p, a, new: str, old: str):
    if getattr(a, new) is not None and getattr(a, old) is not None:
        print_usage_and_exit(
            p, f"Options --{old.replace('_', '-')} and --{new.replace('_', '-')} cannot be specified together."
        )
    return getattr(a, new) if getattr(a, new) is not None else getattr(a, old)


def _check(p, a) -> Options:
    usage_or_version(a, p, DESCRIPTION)
    if a.reject and a.release:
        print_usage_and_exit(p, "At most one of --reject and --release may be specified.")
    props_args = _pair(p, a, "command_property", "consumer_property")
    config_file = _pair(p, a, "command_config", "consumer_config")
    if a.topic is None:
        print_usage_and_exit(p, "--topic is a required argument")
    check_required(p, a, "bootstrap-server")
    props = load_props(config_file) if config_file else {}
    props.update(parse_key_value_args(props_args))
    groups = []
    for g in (a.group, props.get("group.id")):
        if g is not None and g not in groups:
            groups.append(g)
    if len(groups) > 1:
        print_usage_and_exit(
            p,
            "The group ids provided in different places (directly using '--group', via "
            "'--consumer-property', or via '--consumer-config') do not match. Detected group "
            "ids: " + ", ".join(f"'{g}'" for g in groups),
        )
    props["group.id"] = groups[0] if groups else DEFAULT_GROUP
    props["bootstrap.servers"] = a.bootstrap_server
    props.setdefault("client.id", "console-share-consumer")
    o = Options()
    o.props = props
    o.ack = REJECT if a.reject else RELEASE if a.release else ACCEPT
    o.timeout_ms = a.timeout_ms if a.timeout_ms is not None and a.timeout_ms >= 0 else None
    o.max_messages = a.max_messages if a.max_messages is not None else -1
    fprops = load_props(a.formatter_config) if a.formatter_config else {}
    if a.key_deserializer:
        fprops["key.deserializer"] = a.key_deserializer
    if a.value_deserializer:
        fprops["value.deserializer"] = a.value_deserializer
    fprops.update(parse_key_value_args(_pair(p, a, "formatter_property", "property")))
    name = a.formatter or "org.apache.kafka.tools.consumer.DefaultMessageFormatter"
    if name in DEFAULT_FORMATTERS:
        o.formatter = DefaultMessageFormatter(fprops)
    elif name in NOOP_FORMATTERS:
        o.formatter = NoOpMessageFormatter(fprops)
    else:
        print_usage_and_exit(p, name)
    return o


def _consumer(o: Options) -> ShareConsumer:
    props = o.props

    def num(key, default):
        return int(props.get(key, default))

    return ShareConsumer(
        props["bootstrap.servers"],
        props["group.id"],
        client_id=props["client.id"],
        acknowledgement_mode="explicit",
        max_wait_ms=num("fetch.max.wait.ms", 500),
        max_records=num("max.poll.records", 500),
        fetch_min_bytes=num("fetch.min.bytes", 1),
        fetch_max_bytes=num("fetch.max.bytes", 52428800),
        rack_id=props.get("client.rack"),
        client_props=props,
    )


def _timed_out() -> None:
    sys.stdout.flush()
    print(
        f"[{log4j_stamp()}] ERROR Error processing message, terminating consumer process:  ({LOGGER})\n"
        "org.apache.kafka.common.errors.TimeoutException",
        file=sys.stderr,
    )


def run(a) -> int:
    o = _check(a._parser, a)
    count = 0
    status = 0
    consumer = None
    out = sys.stdout.buffer
    try:
        check_reachable(o.props)
        consumer = _consumer(o)
        consumer.subscribe([a.topic])
        pending: list = []
        last = time.monotonic()
        while o.max_messages < 0 or count < o.max_messages:
            if not pending:
                wait = 1.0
                if o.timeout_ms is not None:
                    remaining = o.timeout_ms / 1000.0 - (time.monotonic() - last)
                    if remaining < 0:
                        _timed_out()
                        break
                    wait = min(remaining, 1.0)
                pending = consumer.poll(max(wait, 0.0))
                if pending:
                    last = time.monotonic()
                continue
            m = pending.pop(0)
            count += 1
            try:
                out.write(o.formatter.format(m))
                consumer.acknowledge(m, o.ack)
            except BrokenPipeError:
                print("Unable to write to standard out, closing consumer.", file=sys.stderr)
                break
            except Exception as e:
                if not a.reject_message_on_error:
                    raise
                print(
                    f"[{log4j_stamp()}] ERROR Error processing message, rejecting this message:  ({LOGGER})\n{e}",
                    file=sys.stderr,
                )
                consumer.acknowledge(m, REJECT)
            if not pending:
                out.flush()
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: close, leave the group
        status = interrupted_status(e)
    except Unreachable as e:
        print(error_line(e), file=sys.stderr)
        status = 1
    except Exception as e:
        print(
            f"[{log4j_stamp()}] ERROR Error processing message, terminating consumer process:  ({LOGGER})\n{e}",
            file=sys.stderr,
        )
    finally:
        try:
            out.flush()
        except Exception:
            pass
        if consumer is not None:
            consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
        sys.stderr.flush()
    return status
