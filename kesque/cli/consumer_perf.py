"""``kafka-consumer-perf-test.sh``: consumer throughput (ConsumerPerformance).

Prints Kafka's header and summary line::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, ...
    2024-06-01 10:00:00:000, 2024-06-01 10:00:01:234, 9.5367, 7.7281, 100000, 81037.2771, 0, 1234, 7.7281, 81037.2771

or, with ``--show-detailed-stats``, one progress line per reporting interval. Without
``--group`` the partitions are read with no consumer group (assignment, see
:mod:`kesque.client.consumer`), so the rebalance time is 0; with ``--group`` the topic is
subscribed through that group and, as Kafka's rebalance listener measures it, the time from
subscribing (or from a revocation) to the assignment is ``rebalance.time.ms``, left out of
``fetch.time.ms``.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer

from ..client.consumer import EARLIEST, LATEST, WireConsumer
from .plumbing.admin_client import check_reachable
from .plumbing.javautil import java_simple_date, load_props
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version
from .plumbing.progress import bar, shown
from .plumbing.rdkafka import librdkafka_props
from .plumbing.run import interrupted_status
from .producer_perf import jf

NAME = "consumer-perf-test"
SCRIPT = "kafka-consumer-perf-test.sh"
DESCRIPTION = "This tool is used to verify the consumer performance."
HELP = "consumer throughput test (kafka-consumer-perf-test.sh)"


def configure(p) -> None:
    p.add_argument("--bootstrap-server", metavar="server to connect to", help="REQUIRED: The server(s) to connect to.")
    p.add_argument("--topic", metavar="topic", help="REQUIRED: The topic to consume from.")
    p.add_argument(
        "--group",
        metavar="gid",
        help="The group id to consume on. Without it the partitions are read with no consumer group.",
    )
    p.add_argument(
        "--fetch-size",
        type=int,
        default=1024 * 1024,
        metavar="size",
        help="The amount of data to fetch in a single request.",
    )
    p.add_argument(
        "--from-latest",
        action="store_true",
        help="If the consumer does not already have an established offset to consume from, start with "
        "the latest message present in the log rather than the earliest message.",
    )
    p.add_argument(
        "--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="size", help="The size of the tcp RECV size."
    )
    p.add_argument(
        "--consumer.config", dest="consumer_config", metavar="config file", help="Consumer config properties file."
    )
    p.add_argument("--print-metrics", action="store_true", help="Print out the metrics.")
    p.add_argument(
        "--show-detailed-stats",
        action="store_true",
        help="If set, stats are reported for each reporting interval as configured by reporting-interval",
    )
    p.add_argument(
        "--timeout",
        type=int,
        nargs="?",
        const=10000,
        default=10000,
        metavar="milliseconds",
        help="The maximum allowed time in milliseconds between returned records.",
    )
    p.add_argument("--messages", type=int, metavar="count", help="REQUIRED: The number of messages to send or consume")
    p.add_argument(
        "--reporting-interval",
        type=int,
        default=5000,
        metavar="interval_ms",
        help="Interval in milliseconds at which to print progress info.",
    )
    p.add_argument(
        "--date-format",
        default="yyyy-MM-dd HH:mm:ss:SSS",
        metavar="date format",
        help="The date format to use for formatting the time field. See java.text.SimpleDateFormat for options.",
    )
    p.add_argument("--hide-header", action="store_true", help="If set, skips printing the header for the stats")
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


def _now() -> int:
    return int(time.time() * 1000)


def _header(detailed: bool) -> str:
    extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    if not detailed:
        return f"start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}"
    return f"time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}"


def _div(a: float, b: float) -> float:
    if b == 0:
        return float("nan") if a == 0 else (float("inf") if a > 0 else float("-inf"))
    return a / b


class _Source:
    join_ms = 0  # total rebalance time (group members only)
    join_round_ms = 0  # rebalance time since the last progress line

    def __init__(self, a, props: dict):
        check_reachable({**props, "bootstrap.servers": a.bootstrap_server})
        self.group = a.group is not None or "group.id" in props
        if self.group:
            conf = {
                k: v for k, v in librdkafka_props(props).items() if k not in ("key.deserializer", "value.deserializer")
            }
            conf.update(
                {
                    "bootstrap.servers": a.bootstrap_server,
                    "group.id": a.group or props["group.id"],
                    "auto.offset.reset": "latest" if a.from_latest else "earliest",
                    "max.partition.fetch.bytes": a.fetch_size,
                    "socket.receive.buffer.bytes": a.socket_buffer_size,
                    "check.crcs": False,
                    "log_level": 0,
                }
            )
            conf.setdefault("client.id", "perf-consumer-client")
            self.c = Consumer(conf)
            # ConsumerPerfRebListener: the time from subscribing (or a revocation) to an
            # assignment is rebalance time, not fetch time
            self._join_start = _now()
            self.c.subscribe([a.topic], on_assign=self._assigned, on_revoke=self._revoked)
        else:
            self.c = WireConsumer(
                a.bootstrap_server,
                client_id=props.get("client.id", "perf-consumer-client"),
                auto_offset_reset="latest" if a.from_latest else "earliest",
                partition_max_bytes=a.fetch_size,
                isolation_level=1 if props.get("isolation.level") == "read_committed" else 0,
                client_props=props,
            )
            self.topic = a.topic
            self.start = LATEST if a.from_latest else EARLIEST
            self._next = 0.0

    def _assigned(self, consumer, partitions) -> None:
        elapsed = _now() - self._join_start
        self.join_ms += elapsed
        self.join_round_ms += elapsed

    def _revoked(self, consumer, partitions) -> None:
        self._join_start = _now()

    def poll(self, timeout: float) -> list[tuple[bytes | None, bytes | None]]:
        if self.group:
            out = []
            for m in self.c.consume(10000, timeout):
                if m.error() is None:
                    out.append((m.key(), m.value()))
            return out
        now = time.monotonic()
        if now >= self._next:
            self._next = now + (5.0 if self.c.assignment else 0.2)
            parts = self.c.partitions_for(self.topic) or []
            new = {(self.topic, pn): self.start for pn in parts if (self.topic, pn) not in self.c.assignment}
            if new:
                self.c.assign(new)
        return [(m.key, m.value) for m in self.c.poll(timeout)]

    def close(self) -> None:
        self.c.close()


def run(a) -> int:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    for req in ("topic", "messages"):
        if getattr(a, req) is None:
            print_usage_and_exit(p, f'Missing required argument "[{req}]"')
    check_required(p, a, "bootstrap-server")
    if a.reporting_interval <= 0:
        print("Reporting interval must be greater than 0.", file=sys.stderr)
        return 1
    props = load_props(a.consumer_config) if a.consumer_config else {}
    if not a.hide_header:
        print(_header(a.show_detailed_stats))
        sys.stdout.flush()
    fmt = a.date_format
    try:
        source = _Source(a, props)
    except Exception as e:
        print(str(e), file=sys.stderr)
        return 1
    start_ms = _now()
    messages = 0
    nbytes = 0
    last_bytes = last_msgs = 0
    last_report = last_consumed = now = start_ms
    # a bar on a terminal (issue 29); with --show-detailed-stats only when those lines go elsewhere
    quiet = not a.show_detailed_stats
    progress = bar(a.messages, "Consuming", "record", quiet=quiet, unit_scale=True) if shown(quiet) else None
    try:
        while messages < a.messages and now - last_consumed <= a.timeout:
            batch = source.poll(0.1)
            now = _now()
            if batch:
                last_consumed = now
                if progress is not None:
                    progress.update(len(batch))
            for key, value in batch:
                messages += 1
                if key is not None:
                    nbytes += len(key)
                if value is not None:
                    nbytes += len(value)
                if now - last_report >= a.reporting_interval:
                    if a.show_detailed_stats:
                        _progress(fmt, nbytes, last_bytes, messages, last_msgs, last_report, now, source.join_round_ms)
                    source.join_round_ms = 0
                    last_report = now
                    last_msgs = messages
                    last_bytes = nbytes
                if messages >= a.messages:
                    break
    except KeyboardInterrupt as e:
        status = interrupted_status(e)
    else:
        status = 0
    finally:
        if progress is not None:
            progress.close()
        source.close()
    if messages < a.messages:
        print(
            f"WARNING: Exiting before consuming the expected number of messages: timeout ({a.timeout} ms) "
            "exceeded. You can use the --timeout option to increase the timeout."
        )
    end_ms = _now()
    elapsed_sec = (end_ms - start_ms) / 1000.0
    join_ms = source.join_ms
    fetch_ms = (end_ms - start_ms) - join_ms
    if not a.show_detailed_stats:
        mb = nbytes / (1024 * 1024)
        print(
            f"{java_simple_date(fmt, start_ms)}, {java_simple_date(fmt, end_ms)}, {jf(mb, 4)}, "
            f"{jf(_div(mb, elapsed_sec), 4)}, {messages}, {jf(_div(messages, elapsed_sec), 4)}, {join_ms}, "
            f"{fetch_ms}, {jf(_div(mb, fetch_ms / 1000.0), 4)}, {jf(_div(messages, fetch_ms / 1000.0), 4)}"
        )
    if a.print_metrics:
        print(f"\n{'Metric Name':<60}Value")
        print(
            f"{'consumer-fetch-manager-metrics:records-consumed-total:{client-id=perf-consumer-client}':<60}: "
            f"{float(messages):.3f}"
        )
        print(
            f"{'consumer-fetch-manager-metrics:bytes-consumed-total:{client-id=perf-consumer-client}':<60}: "
            f"{float(nbytes):.3f}"
        )
    return status


def _progress(fmt, nbytes, last_bytes, msgs, last_msgs, start, end, join_ms: int = 0) -> None:
    elapsed = end - start
    total_mb = nbytes / (1024 * 1024)
    interval_mb = (nbytes - last_bytes) / (1024 * 1024)
    line = (
        f"{java_simple_date(fmt, end)}, 0, {jf(total_mb, 4)}, {jf(_div(1000.0 * interval_mb, elapsed), 4)}, "
        f"{msgs}, {jf(_div(msgs - last_msgs, elapsed) * 1000.0, 4)}"
    )
    fetch_ms = elapsed - join_ms
    line += (
        f", {join_ms}, {fetch_ms}, {jf(1000.0 * interval_mb / fetch_ms if fetch_ms > 0 else 0.0, 4)}, "
        f"{jf(1000.0 * (msgs - last_msgs) / fetch_ms if fetch_ms > 0 else 0.0, 4)}"
    )
    print(line)
    sys.stdout.flush()
