"""``kafka-console-producer.sh``: one record per line of standard input.

As Kafka's ConsoleProducer with its LineMessageReader: ``--property parse.key=true``
(``key.separator``, default TAB), ``parse.headers`` (``headers.delimiter``,
``headers.separator``, ``headers.key.separator``), ``null.marker``, ``ignore.error``;
producer settings from ``--producer.config`` then ``--producer-property`` then the
dedicated flags (``--request-required-acks``, ``--compression-codec``, ``--timeout`` =
linger.ms, ...). At end of input everything is flushed before exiting, so it works in a
pipe. ``--sync`` waits for each record's acknowledgement.
"""

from __future__ import annotations

import re
import sys

from confluent_kafka import KafkaException, Producer

from .plumbing.admin_client import check_reachable
from .plumbing.errors import error_line
from .plumbing.javautil import bootstrap_check, load_props, log4j_stamp, parse_key_value_args
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version
from .plumbing.rdkafka import librdkafka_props
from .plumbing.run import interrupted_status

NAME = "console-producer"
SCRIPT = "kafka-console-producer.sh"
DESCRIPTION = "This tool helps to read data from standard input and publish it to Kafka."
HELP = "produce lines of standard input to a topic (kafka-console-producer.sh)"

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

# Java producer settings librdkafka spells differently, or has no use for
_JAVA_RENAMES = {"send.buffer.bytes": "socket.send.buffer.bytes", "receive.buffer.bytes": "socket.receive.buffer.bytes"}
_JAVA_ONLY = {
    "key.serializer",
    "value.serializer",
    "max.block.ms",
    "buffer.memory",
    "partitioner.class",
    "interceptor.classes",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.sample.window.ms",
    "metrics.recording.level",
    "partitioner.ignore.keys",
    "partitioner.adaptive.partitioning.enable",
    "partitioner.availability.timeout.ms",
    "auto.include.jmx.reporter",
    "enable.metrics.push",
}


def configure(p) -> None:
    p.add_argument("--topic", metavar="topic", help="REQUIRED: The topic name to produce messages to.")
    p.add_argument(
        "--bootstrap-server",
        metavar="server to connect to",
        help="REQUIRED: The server(s) to connect to. The broker list string in the form HOST1:PORT1,HOST2:PORT2.",
    )
    p.add_argument(
        "--sync",
        action="store_true",
        help="If set message send requests to the brokers are synchronously, one at a time as they arrive.",
    )
    p.add_argument(
        "--compression-codec",
        nargs="?",
        const="",
        metavar="compression-codec",
        help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. If specified "
        "without value, then it defaults to 'gzip'",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="size",
        help="Number of messages to send in a single batch if they are not being sent synchronously. "
        "please note that this option will be replaced if max-partition-memory-bytes is also set "
        "(default: 16384)",
    )
    p.add_argument(
        "--message-send-max-retries",
        type=int,
        metavar="message-send-max-retries",
        help="Brokers can fail receiving the message for multiple reasons, and being unavailable "
        "transiently is just one of them. This property specifies the number of retries before "
        "the producer give up and drop this message. (default: 3)",
    )
    p.add_argument(
        "--retry-backoff-ms",
        type=int,
        metavar="retry-backoff-ms",
        help="Before each retry, the producer refreshes the metadata of relevant topics. Since leader "
        "election takes a bit of time, this property specifies the amount of time that the "
        "producer waits before refreshing the metadata. (default: 100)",
    )
    p.add_argument(
        "--timeout",
        type=int,
        metavar="timeout_ms",
        help="If set and the producer is running in asynchronous mode, this gives the maximum amount of "
        "time a message will queue awaiting sufficient batch size. The value is given in ms. This "
        "is the option to control `linger.ms` in producer configs. (default: 1000)",
    )
    p.add_argument(
        "--request-required-acks",
        metavar="request required acks",
        help="The required `acks` of the producer requests (default: -1)",
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        metavar="request timeout ms",
        help="The ack timeout of the producer requests. Value must be non-negative and non-zero. (default: 1500)",
    )
    p.add_argument(
        "--metadata-expiry-ms",
        type=int,
        metavar="metadata expiration interval",
        help="The period of time in milliseconds after which we force a refresh of metadata even if we "
        "haven't seen any leadership changes. This is the option to control `metadata.max.age.ms` "
        "in producer configs. (default: 300000)",
    )
    p.add_argument(
        "--max-block-ms",
        type=int,
        metavar="max block on send",
        help="The max time that the producer will block for during a send request. (default: 60000)",
    )
    p.add_argument(
        "--max-memory-bytes",
        type=int,
        metavar="total memory in bytes",
        help="The total memory used by the producer to buffer records waiting to be sent to the server. "
        "This is the option to control `buffer.memory` in producer configs. (default: 33554432)",
    )
    p.add_argument(
        "--max-partition-memory-bytes",
        type=int,
        metavar="memory in bytes per partition",
        help="The buffer size allocated for a partition. When records are received which are smaller "
        "than this size the producer will attempt to optimistically group them together until "
        "this size is reached. This is the option to control `batch.size` in producer configs. "
        "(default: 16384)",
    )
    p.add_argument(
        "--line-reader",
        metavar="reader_class",
        help="The class name of the class to use for reading lines from standard in. By default each "
        "line is read as a separate message. (default: org.apache.kafka.tools.LineMessageReader)",
    )
    p.add_argument(
        "--socket-buffer-size",
        type=int,
        metavar="size",
        help="The size of the tcp RECV size. This is the option to control `send.buffer.bytes` in "
        "producer configs. (default: 102400)",
    )
    p.add_argument(
        "--property",
        action="append",
        metavar="prop",
        help="A mechanism to pass user-defined properties in the form key=value to the message reader. "
        "This allows custom configuration for a user-defined message reader.\nDefault properties "
        "include:\n parse.key=false\n parse.headers=false\n ignore.error=false\n key.separator=\\t\n"
        " headers.delimiter=\\t\n headers.separator=,\n headers.key.separator=:\n null.marker=   "
        "When set, any fields (key, value and headers) equal to this will be replaced by null\n"
        'Default parsing pattern when:\n parse.headers=true and parse.key=true:\n  "h1:v1,h2:v2...\\t'
        'key\\tvalue"\n parse.key=true:\n  "key\\tvalue"\n parse.headers=true:\n  "h1:v1,h2:v2...\\t'
        'value"',
    )
    p.add_argument(
        "--reader-config",
        metavar="config file",
        help="Config properties file for the message reader. Note that [property] takes precedence over this config.",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        metavar="producer_prop",
        help="A mechanism to pass user-defined properties in the form key=value to the producer.",
    )
    p.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="config file",
        help="Producer config properties file. Note that [producer-property] takes precedence over this config.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class ReaderError(Exception):
    """org.apache.kafka.common.KafkaException raised by the line reader."""


class LineReader:
    """Kafka's LineMessageReader."""

    def __init__(self, props: dict[str, str]):
        def flag(k):
            return props.get(k, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_sep = props.get("key.separator", "\t")
        self.parse_headers = flag("parse.headers")
        self.headers_delim = props.get("headers.delimiter", "\t")
        self.headers_sep = props.get("headers.separator", ",")
        self.headers_key_sep = props.get("headers.key.separator", ":")
        self.ignore_error = flag("ignore.error")
        self.null_marker = props.get("null.marker")
        if self.headers_delim == self.headers_sep:
            raise ReaderError("headers.delimiter and headers.separator may not be equal")
        if self.headers_delim == self.headers_key_sep:
            raise ReaderError("headers.delimiter and headers.key.separator may not be equal")
        if self.headers_sep == self.headers_key_sep:
            raise ReaderError("headers.separator and headers.key.separator may not be equal")
        nm = self.null_marker
        if nm is not None:
            for other, name in (
                (self.key_sep, "key.separator"),
                (self.headers_sep, "headers.separator"),
                (self.headers_delim, "headers.delimiter"),
                (self.headers_key_sep, "headers.key.separator"),
            ):
                if other == nm:
                    raise ReaderError(f"null.marker and {name} may not be equal")
        self.line_number = 0

    def _cut(self, enabled: bool, line: str, start: int, sep: str, what: str) -> str | None:
        if not enabled:
            return None
        i = line.find(sep, start)
        if i == -1:
            if self.ignore_error:
                return None
            raise ReaderError(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:i]

    def parse(self, line: str):
        """(key, value, headers) of one line."""
        self.line_number += 1
        headers = self._cut(self.parse_headers, line, 0, self.headers_delim, "headers delimiter")
        hoff = 0 if headers is None else len(headers) + len(self.headers_delim)
        key = self._cut(self.parse_key, line, hoff, self.key_sep, "key separator")
        koff = 0 if key is None else len(key) + len(self.key_sep)
        value = line[hoff + koff :]
        nm = self.null_marker
        k = key.encode() if key is not None and key != nm else None
        v = value.encode() if value is not None and value != nm else None
        hs = []
        if headers is not None and headers != nm:
            for pair in re.split(self.headers_sep, headers):
                i = pair.find(self.headers_key_sep)
                if i == -1:
                    if self.ignore_error:
                        hs.append((pair, None))
                        continue
                    raise ReaderError(
                        f"No header key separator found in pair '{pair}' on line number {self.line_number}"
                    )
                hk = pair[:i]
                if hk == nm:
                    raise ReaderError(
                        f"Header keys should not be equal to the null marker '{nm}' as they can't be null"
                    )
                hv = pair[i + len(self.headers_key_sep) :]
                hs.append((hk, None if hv == nm else hv.encode()))
        return k, v, hs


def _merge(props: dict, key: str, value, given: bool) -> None:
    """CommandLineUtils.maybeMergeOptions: the flag wins when given, else fills a gap."""
    if given or key not in props:
        if value is None:
            props.pop(key, None)
        else:
            props[key] = str(value)


def producer_config(a) -> dict[str, str]:
    props: dict[str, str] = {}
    if a.producer_config:
        props.update(load_props(a.producer_config))
    props.update(parse_key_value_args(a.producer_property))
    props["bootstrap.servers"] = a.bootstrap_server
    if a.compression_codec is not None:
        props["compression.type"] = a.compression_codec or "gzip"
    else:
        props["compression.type"] = "none"
    props.setdefault("client.id", "console-producer")
    _merge(props, "linger.ms", a.timeout if a.timeout is not None else 1000, a.timeout is not None)
    _merge(
        props,
        "acks",
        a.request_required_acks if a.request_required_acks is not None else "-1",
        a.request_required_acks is not None,
    )
    _merge(
        props,
        "request.timeout.ms",
        a.request_timeout_ms if a.request_timeout_ms is not None else 1500,
        a.request_timeout_ms is not None,
    )
    _merge(
        props,
        "retries",
        a.message_send_max_retries if a.message_send_max_retries is not None else 3,
        a.message_send_max_retries is not None,
    )
    _merge(
        props,
        "retry.backoff.ms",
        a.retry_backoff_ms if a.retry_backoff_ms is not None else 100,
        a.retry_backoff_ms is not None,
    )
    _merge(
        props,
        "send.buffer.bytes",
        a.socket_buffer_size if a.socket_buffer_size is not None else 102400,
        a.socket_buffer_size is not None,
    )
    _merge(
        props,
        "buffer.memory",
        a.max_memory_bytes if a.max_memory_bytes is not None else 33554432,
        a.max_memory_bytes is not None,
    )
    if a.max_partition_memory_bytes is not None or a.batch_size is not None or "batch.size" not in props:
        size = (
            a.max_partition_memory_bytes
            if a.max_partition_memory_bytes is not None
            else (a.batch_size if a.batch_size is not None else 16384)
        )
        props["batch.size"] = str(size)
    _merge(
        props,
        "metadata.max.age.ms",
        a.metadata_expiry_ms if a.metadata_expiry_ms is not None else 300000,
        a.metadata_expiry_ms is not None,
    )
    _merge(props, "max.block.ms", a.max_block_ms if a.max_block_ms is not None else 60000, a.max_block_ms is not None)
    return props


def to_librdkafka(props: dict[str, str]) -> dict:
    """Java producer settings -> librdkafka's names (dropping the JVM-only ones; the security
    properties: plumbing/rdkafka.py)."""
    out: dict = {}
    for k, v in librdkafka_props(props).items():
        if k in _JAVA_ONLY:
            if k == "buffer.memory":
                try:
                    out["queue.buffering.max.kbytes"] = max(1, int(v) // 1024)
                except ValueError:
                    pass
            continue
        out[_JAVA_RENAMES.get(k, k)] = v
    if "compression.type" in out and out["compression.type"] not in CODECS:
        raise ValueError(
            f"Invalid value {out['compression.type']} for configuration compression.type: String must "
            "be one of: none, gzip, snappy, lz4, zstd"
        )
    if "message.timeout.ms" not in out:
        out.setdefault("delivery.timeout.ms", "120000")  # the Java producer's default
    if "max.block.ms" in props:  # the wait for a topic's metadata
        out.setdefault("topic.metadata.propagation.max.ms", str(_metadata_wait_ms(props)))
    out.setdefault("log_level", 0)
    return out


def _check_args(p, a) -> None:
    usage_or_version(a, p, DESCRIPTION)
    check_required(p, a, "topic")
    msg = bootstrap_check(a.bootstrap_server)
    if msg:
        print_usage_and_exit(p, msg)


def _lines():
    """Lines of stdin as Java's BufferedReader.readLine sees them (no terminator)."""
    prompt = sys.stdin.isatty() and sys.stdout.isatty()
    stream = sys.stdin.buffer
    while True:
        if prompt:
            sys.stdout.write(">")
            sys.stdout.flush()
        raw = stream.readline()
        if not raw:
            return
        line = raw.decode("utf-8", "replace")
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        yield line


def make_producer(props: dict[str, str]):
    """A confluent-kafka Producer for Java producer settings, made once one of the bootstrap
    servers answered. Raises ValueError / KafkaException for bad settings and
    :class:`kesque.client.wire.Unreachable` (naming the servers) when none answers."""
    producer = Producer(to_librdkafka(props))
    check_reachable(props, "max.block.ms")
    return producer


def _metadata_wait_ms(props: dict[str, str]) -> int:
    """How long librdkafka waits for a missing topic (topic.metadata.propagation.max.ms): the Java
    producer's max.block.ms, at most librdkafka's 30 s default."""
    try:
        return min(int(props.get("max.block.ms", 60000)), 30000)
    except ValueError:
        return 30000


def run(a) -> int:
    p = a._parser
    _check_args(p, a)
    reader_props: dict[str, str] = {}
    if a.reader_config:
        reader_props.update(load_props(a.reader_config))
    reader_props["topic"] = a.topic
    reader_props.update(parse_key_value_args(a.property))
    props = producer_config(a)
    try:
        reader = LineReader(reader_props)
        producer = make_producer(props)
    except ReaderError as e:
        print(f"org.apache.kafka.common.KafkaException: {e}", file=sys.stderr)
        return 1
    except (ValueError, KafkaException) as e:
        print(f"org.apache.kafka.common.config.ConfigException: {e}", file=sys.stderr)
        return 1

    failures: list = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(err)
            key = msg.key()
            value = msg.value()
            print(
                f"[{_stamp()}] ERROR Error when sending message to topic {msg.topic()} with key: "
                f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                f"{'null' if value is None else f'{len(value)} bytes'} with error: "
                f"(org.apache.kafka.clients.producer.internals.ErrorLoggingCallback)\n"
                f"{error_line(KafkaException(err))}",
                file=sys.stderr,
            )

    status = 0
    try:
        for line in _lines():
            key, value, headers = reader.parse(line)
            while True:
                try:
                    producer.produce(a.topic, value=value, key=key, headers=headers or None, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            if a.sync:
                producer.flush()
                if failures:
                    break
            else:
                producer.poll(0)
    except ReaderError as e:
        print(f"org.apache.kafka.common.KafkaException: {e}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM: what was read is still sent, as Kafka's close() does
        status = interrupted_status(e)
    finally:
        producer.flush()
    # Kafka's tool exits 0 when an asynchronous send failed (it only logs it); a record that was
    # not delivered is a failure here (kesque issue 11)
    return status or (1 if failures else 0)


def _stamp() -> str:
    return log4j_stamp()
