"""``kafka-get-offsets.sh``: offsets of topic-partitions at a point in time (GetOffsetShell).

Prints ``topic:partition:offset`` lines sorted as Kafka sorts them (by ``topic-partition``
text). ``--time`` takes ``-1``/``latest``, ``-2``/``earliest``, ``-3``/``max-timestamp``,
``-4``/``earliest-local``, ``-5``/``latest-tiered`` or a timestamp in milliseconds.
"""

from __future__ import annotations

import re
import sys

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ..client.consumer import FetchError, WireConsumer
from .plumbing import admin_client
from .plumbing.errors import error_message
from .plumbing.javautil import bootstrap_check, load_props
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version

NAME = "get-offsets"
SCRIPT = "kafka-get-offsets.sh"
DESCRIPTION = "An interactive shell for getting topic-partition offsets."
HELP = "print topic-partition offsets (kafka-get-offsets.sh)"

_TP_PATTERN = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


def configure(p) -> None:
    p.add_argument(
        "--bootstrap-server",
        metavar="HOST1:PORT1,...,HOST3:PORT3",
        help="REQUIRED. The server(s) to connect to in the form HOST1:PORT1,HOST2:PORT2.",
    )
    p.add_argument(
        "--topic-partitions",
        metavar="topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3",
        help="Comma separated list of topic-partition patterns to get the offsets for, with the format "
        "of '([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?'. The first group is an optional regex "
        "for the topic name, if omitted, it matches any topic name. The section after ':' describes "
        "a 'partition' pattern, which can be: a number, a range in the format of 'NUMBER-NUMBER' "
        "(lower inclusive, upper exclusive), an inclusive lower bound in the format of 'NUMBER-', an "
        "exclusive upper bound in the format of '-NUMBER' or may be omitted to accept all "
        "partitions.",
    )
    p.add_argument(
        "--topic",
        metavar="topic",
        help="The topic to get the offsets for. It also accepts a regular expression. If not present, "
        "all authorized topics are queried. Cannot be used if --topic-partitions is present.",
    )
    p.add_argument(
        "--partitions",
        metavar="partition ids",
        help="Comma separated list of partition ids to get the offsets for. If not present, all "
        "partitions of the authorized topics are queried. Cannot be used if --topic-partitions is "
        "present.",
    )
    p.add_argument(
        "--time",
        default="latest",
        metavar="<timestamp> / -1 or latest / -2 or earliest / -3 or max-timestamp / -4 or "
        "earliest-local / -5 or latest-tiered",
        help="timestamp of the offsets before that. [Note: No offset is returned, if the timestamp "
        "greater than recently committed record timestamp is given.]",
    )
    p.add_argument(
        "--command-config", metavar="config file", help="Property file containing configs to be passed to Admin Client."
    )
    p.add_argument(
        "--exclude-internal-topics",
        action="store_true",
        help="By default, internal topics are included. If specified, internal topics are excluded.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class Terse(Exception):
    pass


def parse_time(value: str) -> int:
    named = {"earliest": -2, "latest": -1, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
    if value in named:
        return named[value]
    try:
        return int(value)
    except ValueError:
        raise Terse(
            f"Malformed time argument {value}. Please use -1 or latest / -2 or earliest / -3 or "
            "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long format "
            "timestamp"
        ) from None


def _filters(a):
    """[(topic IncludeList, partition predicate)]"""
    if a.topic_partitions is not None:
        out = []
        for spec in a.topic_partitions.split(","):
            m = _TP_PATTERN.fullmatch(spec)
            if not m:
                raise Terse(f"Invalid rule specification: {spec}")
            g = [x if x else None for x in m.groups()]
            topic = admin_client.IncludeList(g[0] if g[0] is not None else ".*")
            if g[1] is not None:
                n = int(g[1])
                pred = lambda p, n=n: p == n
            else:
                lo = int(g[2]) if g[2] is not None else 0
                hi = int(g[3]) if g[3] is not None else 2**31 - 1
                pred = lambda p, lo=lo, hi=hi: lo <= p < hi
            out.append((topic, pred))
        return out
    parts = None
    if a.partitions:
        try:
            parts = {int(x) for x in a.partitions.split(",")}
        except ValueError:
            raise Terse(
                "--partitions expects a comma separated list of numeric partition ids, but received: " + a.partitions
            ) from None
    return [
        (
            admin_client.IncludeList(a.topic if a.topic is not None else ".*"),
            (lambda p: True) if not parts else (lambda p, s=parts: p in s),
        )
    ]


def _print(results: dict) -> None:
    """``topic:partition:offset`` sorted as Kafka sorts TopicPartition.toString()."""
    for t, pn in sorted(results, key=lambda k: f"{k[0]}-{k[1]}"):
        print(f"{t}:{pn}:{results[(t, pn)]}")


def _wire_offsets(a, tps: list[tuple[str, int]], ts: int) -> dict:

    props = load_props(a.command_config) if a.command_config else {}
    c = WireConsumer(a.bootstrap_server, client_id="GetOffsetShell", client_props=props)
    out = {}
    try:
        for tp in tps:
            try:
                off = c.list_offsets([tp], ts)[tp]
            except FetchError as e:
                print(f"Skip getting offsets for topic-partition {tp[0]}-{tp[1]} due to error: {e}", file=sys.stderr)
                continue
            if off != -1:
                out[tp] = off
    finally:
        c.close()
    return out


def run(a) -> int:

    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    check_required(p, a, "bootstrap-server")
    msg = bootstrap_check(a.bootstrap_server)
    if msg:
        print_usage_and_exit(p, msg)
    try:
        if a.topic_partitions is not None and (a.topic is not None or a.partitions is not None):
            raise Terse("--topic-partitions cannot be used with --topic or --partitions")
        ts = parse_time(a.time)
        filters = _filters(a)
        admin = admin_client.make_admin(a.bootstrap_server, a.command_config, "GetOffsetShell")
        names = [
            t
            for t in admin_client.list_topic_names(admin)
            if not (a.exclude_internal_topics and admin_client.is_internal(t))
            and any(f.allowed(t) for f, _p in filters)
        ]
        tps = []
        if names:
            for name, fut in admin.describe_topics(TopicCollection(names)).items():
                desc = fut.result()
                for part in desc.partitions:
                    if any(f.allowed(name) and pred(part.id) for f, pred in filters):
                        tps.append((name, part.id))
        if not tps:
            raise Terse("Could not match any topic-partitions with the specified filters")
        if ts in (-4, -5):
            # librdkafka refuses these specs locally; ask the leaders directly
            _print(_wire_offsets(a, tps, ts))
            return 0
        if ts == -2:
            spec = OffsetSpec.earliest()
        elif ts == -1:
            spec = OffsetSpec.latest()
        elif ts == -3:
            spec = OffsetSpec.max_timestamp()
        else:
            spec = OffsetSpec.for_timestamp(ts)
        futures = admin.list_offsets({TopicPartition(t, pn): spec for t, pn in tps}, request_timeout=60)
        results = {}
        for tp, fut in futures.items():
            try:
                info = fut.result()
            except Exception as e:
                print(
                    f"Skip getting offsets for topic-partition {tp.topic}-{tp.partition} due to error: "
                    f"{error_message(e)}",
                    file=sys.stderr,
                )
                continue
            if info.offset != -1:
                results[(tp.topic, tp.partition)] = info.offset
        _print(results)
    except Terse as e:
        print(f"Error occurred: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"Error occurred: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        print(f"Error occurred: {error_message(e)}", file=sys.stderr)
        return 1
    return 0
