"""``kafka-producer-perf-test.sh``: producer throughput and latency (ProducerPerformance).

Prints a progress line every 5 s::

    50000 records sent, 49950.0 records/sec (48.78 MB/sec), 2.1 ms avg latency, 30.0 ms max latency.

and the summary with latency percentiles at the end. Flags as Kafka's (``--topic``,
``--num-records``, ``--record-size`` | ``--payload-file`` | ``--payload-monotonic``,
``--throughput``, ``--producer-props k=v ...``, ``--producer.config``, transactions),
plus ``--bootstrap-server`` as newer Kafka versions accept. Like Kafka's (argparse4j)
tool, usage errors print ``usage: ...`` and ``producer-performance: error: ...``.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
import uuid

from ..client.wire import Unreachable
from .console_producer import make_producer
from .plumbing.javautil import load_props
from .plumbing.progress import bar, shown
from .plumbing.run import ToolExit, interrupted_status

NAME = "producer-perf-test"
SCRIPT = "kafka-producer-perf-test.sh"
DESCRIPTION = (
    "This tool is used to verify the producer performance. To enable transactions, you can specify a "
    "transaction id or set a transaction duration using --transaction-duration-ms. There are three ways "
    "to specify the transaction id: set transaction.id=<id> via --producer-props, set transaction.id=<id> "
    "in the config file via --producer.config, or use --transaction-id <id>."
)
HELP = "producer throughput/latency test (kafka-producer-perf-test.sh)"
ARGPARSE_STYLE = True  # Kafka's tool uses argparse4j, whose messages look like Python's argparse
PROG = "producer-performance"


def configure(p) -> None:
    p.add_argument("--topic", metavar="TOPIC", help="produce messages to this topic")
    p.add_argument(
        "--num-records", type=int, metavar="NUM-RECORDS", dest="num_records", help="number of messages to produce"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--record-size",
        type=int,
        metavar="RECORD-SIZE",
        dest="record_size",
        help="message size in bytes. Note that you must provide exactly one of --record-size or "
        "--payload-file or --payload-monotonic.",
    )
    g.add_argument(
        "--payload-file",
        metavar="PAYLOAD-FILE",
        dest="payload_file",
        help="file to read the message payloads from. This works only for UTF-8 encoded text files. "
        "Payloads will be read from this file and a payload will be randomly selected when sending "
        "messages. Note that you must provide exactly one of --record-size or --payload-file or "
        "--payload-monotonic.",
    )
    g.add_argument(
        "--payload-monotonic",
        action="store_true",
        dest="payload_monotonic",
        help="payload is monotonically increasing integer. Note that you must provide exactly one of "
        "--record-size or --payload-file or --payload-monotonic.",
    )
    p.add_argument(
        "--payload-delimiter",
        default="\\n",
        metavar="PAYLOAD-DELIMITER",
        dest="payload_delimiter",
        help="provides delimiter to be used when --payload-file is provided. Defaults to new line. Note "
        "that this parameter will be ignored if --payload-file is not provided.",
    )
    p.add_argument(
        "--throughput",
        type=float,
        metavar="THROUGHPUT",
        help="throttle maximum message throughput to *approximately* THROUGHPUT messages/sec. Set this to "
        "-1 to disable throttling.",
    )
    p.add_argument(
        "--producer-props",
        nargs="+",
        metavar="PROP-NAME=PROP-VALUE",
        dest="producer_props",
        help="kafka producer related configuration properties like bootstrap.servers,client.id etc. These "
        "configs take precedence over those passed via --producer.config.",
    )
    p.add_argument(
        "--producer.config", metavar="CONFIG-FILE", dest="producer_config", help="producer config properties file."
    )
    p.add_argument(
        "--bootstrap-server",
        metavar="BOOTSTRAP-SERVERS",
        dest="bootstrap_server",
        help="The server(s) to connect to. This config takes precedence over bootstrap.servers specified "
        "via --producer-props or --producer.config.",
    )
    p.add_argument(
        "--print-metrics", action="store_true", dest="print_metrics", help="print out metrics at the end of the test."
    )
    p.add_argument(
        "--transactional-id",
        metavar="TRANSACTIONAL-ID",
        dest="transactional_id",
        help="The transactional id to use. This config takes precedence over the transactional.id "
        "specified via --producer.config or --producer-props. Note that if the transactional id is "
        "not specified while --transaction-duration-ms is provided, the default value for the "
        "transactional id will be performance-producer- followed by a random uuid.",
    )
    p.add_argument(
        "--transaction-duration-ms",
        type=int,
        metavar="TRANSACTION-DURATION",
        dest="transaction_duration_ms",
        help="The max age of each transaction. The commitTransaction will be called after this time has "
        "elapsed. The value should be greater than 0. If the transactional id is specified via "
        "--producer-props, --producer.config, or --transactional-id but --transaction-duration-ms is "
        "not specified, the default value will be 3000.",
    )


def jf(value: float, digits: int) -> str:
    """Java's String.format("%.Nf") including Infinity/NaN."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.{digits}f}"


class Stats:
    def __init__(self, num_records: int, reporting_interval: int = 5000, out=None):
        self.out = out or sys.stdout
        self.start = _now()
        self.window_start = self.start
        self.sampling = max(1, num_records // min(num_records, 500000))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.max_latency = 0
        self.total_latency = 0
        self.window_count = 0
        self.window_max = 0
        self.window_total = 0
        self.window_bytes = 0
        self.interval = reporting_interval

    def record(self, latency: int, size: int, now: int) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency
        self.max_latency = max(self.max_latency, latency)
        self.window_count += 1
        self.window_bytes += size
        self.window_total += latency
        self.window_max = max(self.window_max, latency)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency)
        if now - self.window_start >= self.interval:
            self.print_window()
            self.new_window()

    def print_window(self) -> None:
        elapsed = _now() - self.window_start
        rps = 1000.0 * self.window_count / elapsed if elapsed else math.inf
        mbps = 1000.0 * self.window_bytes / elapsed / (1024.0 * 1024.0) if elapsed else math.inf
        avg = self.window_total / self.window_count if self.window_count else math.nan
        self.out.write(
            f"{self.window_count} records sent, {jf(rps, 1)} records/sec ({jf(mbps, 2)} MB/sec), "
            f"{jf(avg, 1)} ms avg latency, {jf(float(self.window_max), 1)} ms max latency.\n"
        )
        self.out.flush()

    def new_window(self) -> None:
        self.window_start = _now()
        self.window_count = 0
        self.window_max = 0
        self.window_total = 0
        self.window_bytes = 0

    def print_total(self) -> None:
        elapsed = _now() - self.start
        rps = 1000.0 * self.count / elapsed if elapsed else (math.inf if self.count else math.nan)
        mbps = 1000.0 * self.bytes / elapsed / (1024.0 * 1024.0) if elapsed else (math.inf if self.bytes else math.nan)
        avg = self.total_latency / self.count if self.count else math.nan
        lat = sorted(self.latencies)
        percs = [lat[int(q * len(lat))] if lat else 0 for q in (0.5, 0.95, 0.99, 0.999)]
        self.out.write(
            f"{self.count} records sent, {jf(rps, 1)} records/sec ({jf(mbps, 2)} MB/sec), "
            f"{jf(avg, 2)} ms avg latency, {jf(float(self.max_latency), 2)} ms max latency, "
            f"{percs[0]} ms 50th, {percs[1]} ms 95th, {percs[2]} ms 99th, {percs[3]} ms 99.9th.\n"
        )
        self.out.flush()


def _now() -> int:
    return int(time.time() * 1000)


class Throttler:
    """ThroughputThrottler: sleep so that sent/elapsed stays under the target rate."""

    def __init__(self, target: float, start_ms: int):
        self.target = target
        self.start = start_ms

    def maybe_throttle(self, sent: int) -> None:
        if self.target < 0:
            return
        if self.target == 0:
            time.sleep(3600)
            return
        due = self.start / 1000.0 + sent / self.target
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)


def _fail(p, msg: str) -> None:
    sys.stderr.write(p.format_usage())
    sys.stderr.write(f"{PROG}: error: {msg}\n")
    raise ToolExit(1)


def producer_props(a) -> dict[str, str]:
    props: dict[str, str] = {}
    if a.producer_config:
        props.update(load_props(a.producer_config))
    for prop in a.producer_props or []:
        pieces = prop.split("=")
        if len(pieces) != 2:
            raise ValueError(f"Invalid property: {prop}")
        props[pieces[0]] = pieces[1]
    if a.bootstrap_server:
        props["bootstrap.servers"] = a.bootstrap_server
    props.setdefault("client.id", "perf-producer-client")
    return props


def run(a) -> int:

    p = a._parser
    if all(
        getattr(a, n) in (None, False, "\\n")
        for n in (
            "topic",
            "num_records",
            "record_size",
            "payload_file",
            "payload_monotonic",
            "throughput",
            "producer_props",
            "producer_config",
            "bootstrap_server",
            "transactional_id",
            "transaction_duration_ms",
        )
    ):
        p.print_help()
        return 0
    missing = [f"--{n.replace('_', '-')}" for n in ("topic", "num_records", "throughput") if getattr(a, n) is None]
    if missing:
        _fail(p, f"argument {missing[0]} is required")
    if a.record_size is None and a.payload_file is None and not a.payload_monotonic:
        _fail(p, "one of the arguments --record-size --payload-file --payload-monotonic is required")
    if a.num_records <= 0:
        _fail(p, "--num-records should be greater than zero")
    if a.record_size is not None and a.record_size <= 0:
        _fail(p, "--record-size should be greater than zero")
    if a.producer_props is None and a.producer_config is None and a.bootstrap_server is None:
        _fail(p, "Either --producer-props or --producer.config must be specified.")
    if a.transaction_duration_ms is not None and a.transaction_duration_ms <= 0:
        _fail(p, "--transaction-duration-ms should be greater than zero")

    payloads: list[bytes] = []
    if a.payload_file:
        path = os.path.abspath(a.payload_file)
        print(f"Reading payloads from: {path}")
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            print("File does not exist or empty file provided.", file=sys.stderr)
            return 1
        delim = "\n" if a.payload_delimiter == "\\n" else a.payload_delimiter
        with open(path, encoding="utf-8") as f:
            parts = f.read().split(delim)
        while parts and parts[-1] == "":
            parts.pop()  # Java's String.split drops trailing empty strings
        print(f"Number of messages read: {len(parts)}")
        payloads = [x.encode() for x in parts]
    try:
        props = producer_props(a)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 1
    txn_id = a.transactional_id or props.get("transactional.id")
    transactions = a.transaction_duration_ms is not None or txn_id is not None
    duration = a.transaction_duration_ms
    if transactions:
        props["transactional.id"] = txn_id or f"performance-producer-{uuid.uuid4()}"
        duration = duration or 3000
    try:
        producer = make_producer(props)
    except Unreachable:
        raise
    except Exception as e:
        print(f"org.apache.kafka.common.config.ConfigException: {e}", file=sys.stderr)
        return 1
    if transactions:
        producer.init_transactions()

    rng = random.Random(0)
    pool = bytes(rng.randrange(26) + 65 for _ in range(max(a.record_size or 0, 1) * 4 + 4096)) if a.record_size else b""
    n = a.num_records
    stats = Stats(n)
    throttler = Throttler(a.throughput, _now())
    failures = [0]

    def callback_for(start: int, size: int):
        def cb(err, msg):
            now = _now()
            if err is None:
                stats.record(now - start, size, now)
                stats.iteration += 1
            else:
                failures[0] += 1
                print(f"org.apache.kafka.common.KafkaException: {err.str()}", file=sys.stderr)

        return cb

    in_txn = 0
    txn_start = 0
    topic = a.topic
    size = a.record_size
    # a bar on a terminal while the report lines go elsewhere (issue 29), advanced every 1024 sends
    progress = bar(n, "Producing", "record", quiet=False, unit_scale=True) if shown(quiet=False) else None
    try:
        for i in range(n):
            if progress is not None and not i & 1023:
                progress.update(min(1024, n - i) if i else 0)
            if payloads:
                payload = payloads[rng.randrange(len(payloads))]
            elif size:
                off = (i * 7919) % (len(pool) - size)
                payload = pool[off : off + size]
            else:
                payload = str(i).encode()
            if transactions and in_txn == 0:
                producer.begin_transaction()
                txn_start = _now()
            start = _now()
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=callback_for(start, len(payload)))
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
            in_txn += 1
            if transactions and duration <= start - txn_start:
                producer.commit_transaction()
                in_txn = 0
            throttler.maybe_throttle(i + 1)
        if transactions and in_txn:
            producer.commit_transaction()
    except KeyboardInterrupt as e:
        status = interrupted_status(e)
    else:
        status = 0
    finally:
        if progress is not None:
            progress.close()
    producer.flush()
    stats.print_total()
    if a.print_metrics:
        _print_metrics(stats, props.get("client.id", "perf-producer-client"))
    # Kafka's tool prints the failed sends' stack traces and exits 0; here they fail the run
    return status or (1 if failures[0] else 0)


def _print_metrics(stats: Stats, client_id: str) -> None:
    elapsed = max(_now() - stats.start, 1) / 1000.0
    latency_avg = stats.total_latency / stats.count if stats.count else 0.0
    metrics = {
        f"producer-metrics:record-send-total:{{client-id={client_id}}}": f"{float(stats.count):.3f}",
        f"producer-metrics:record-send-rate:{{client-id={client_id}}}": f"{stats.count / elapsed:.3f}",
        f"producer-metrics:outgoing-byte-total:{{client-id={client_id}}}": f"{float(stats.bytes):.3f}",
        f"producer-metrics:request-latency-avg:{{client-id={client_id}}}": f"{latency_avg:.3f}",
        f"producer-metrics:request-latency-max:{{client-id={client_id}}}": f"{float(stats.max_latency):.3f}",
    }
    width = max(len(k) for k in metrics) + 2
    print(f"\n{'Metric Name':<{width}}Value")
    for k in sorted(metrics):
        print(f"{k:<{width}}: {metrics[k]}")
