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
string: "x")``, ``Did you mean:`` hints): see :mod:`.plumbing.argparse4j`.

The Admin client calls are made over :mod:`kesque.client.wire` (confluent-kafka has none of these APIs), as
Kafka's Admin client makes them: DescribeProducers (v0) to the partition leader found with
Metadata (or to ``--broker-id``), DescribeTransactions (v0) to the transaction coordinator found
with FindCoordinator (key type 1, batched from v4), ListTransactions (v0-1) to every broker,
WriteTxnMarkers (v1, ``transaction_result=false``) to the partition leader for ``abort``.
Retriable errors are retried until ``default.api.timeout.ms`` (60 s unless ``--command-config``
says otherwise), then reported as Kafka's TimeoutException.
"""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass

from ..client.transactions import read_describe_transactions_v0
from ..client.wire import make
from ..protocol.api_keys import ApiKeys
from .plumbing.admin_client import WireAdmin
from .plumbing.argparse4j import ArgParser, ArgumentParserException, ParserExit
from .plumbing.errors import ERRORS_PKG, JavaError, kafka_error
from .plumbing.javautil import (
    java_hash_order,
    load_props,
    long_hash,
    pretty_print_table,
    topic_partition_hash,
    tp_str,
)
from .plumbing.run import exit_flushed, run_tool

NAME = "transactions"
SCRIPT = "kafka-transactions.sh"
DESCRIPTION = (
    "This tool is used to analyze the transactional state of producers in the cluster. "
    "It can be used to detect and recover from hanging transactions."
)
HELP = "list, describe and abort transactions, find hanging ones (kafka-transactions.sh)"
PROG = "kafka-transactions.sh"


def build_parser() -> ArgParser:
    """TransactionsCommand.buildBaseParser and each command's addSubparser."""
    p = ArgParser(PROG, DESCRIPTION)
    p.add_argument("-v", "--version", action="version", help="show the version of this Kafka distribution and exit")
    p.add_argument(
        "--command-config", metavar="FILE", help="property file containing configs to be passed to admin client"
    )
    p.add_argument(
        "--bootstrap-server",
        metavar="host:port",
        required=True,
        help="hostname and port for the broker to connect to, in the form `host:port`  "
        "(multiple comma-separated entries can be given)",
    )
    p.add_subparsers(dest="command", title="commands", metavar="COMMAND")

    s = p.add_parser("list", help="list transactions")
    s.add_argument(
        "--duration-filter",
        type="Long",
        help="Duration (in millis) to filter by: if < 0, all transactions will be returned; otherwise, "
        "only transactions running longer than this duration will be returned",
    )

    s = p.add_parser(
        "describe",
        help="describe the state of an active transactional-id",
        description="Describe the state of an active transactional-id.",
    )
    s.add_argument("--transactional-id", required=True, help="transactional id")

    s = p.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    s.add_argument(
        "--broker-id", type="Integer", help="optional broker id to describe the producer state on a specific replica"
    )
    s.add_argument("--topic", required=True, help="topic name")
    s.add_argument("--partition", type="Integer", required=True, help="partition number")

    s = p.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    s.add_argument("--topic", required=True, help="topic name")
    s.add_argument("--partition", type="Integer", required=True, help="partition number")
    g = s.add_group(
        "Brokers on versions 3.0 and above",
        "For newer brokers, only the start offset of the transaction to be aborted is required",
    )
    s.add_argument("--start-offset", type="Long", group=g, help="start offset of the transaction to abort")
    g = s.add_group("Brokers on versions older than 3.0", "For older brokers, you must provide all of these arguments")
    s.add_argument("--producer-id", type="Long", group=g, help="producer id")
    s.add_argument("--producer-epoch", type="Short", group=g, help="producer epoch")
    s.add_argument("--coordinator-epoch", type="Integer", group=g, help="coordinator epoch")

    s = p.add_parser("find-hanging", help="find hanging transactions")
    s.add_argument("--broker-id", type="Integer", help="broker id to search for hanging transactions")
    s.add_argument(
        "--max-transaction-timeout",
        type="Integer",
        default=15,
        help="maximum transaction timeout in minutes to limit the scope of the search (15 minutes by default)",
    )
    s.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    s.add_argument("--partition", type="Integer", help="partition number")
    return p


class ToolFailure(Exception):
    """printErrorAndExit: the message is printed on stderr and the tool exits 1."""


def fail(message: str, cause: BaseException | None = None) -> None:
    if cause is not None:
        text = cause.message if isinstance(cause, JavaError) else str(cause)
        message = f"{message}: {text}. Enable debug logging for additional detail."
    raise ToolFailure(message)


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
        return (
            f"AbortTransactionSpec(topicPartition={tp_str(self.tp)}, producerId={self.producer_id}, "
            f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})"
        )


_STATES = ("Ongoing", "PrepareAbort", "PrepareCommit", "CompleteAbort", "CompleteCommit", "Empty", "PrepareEpochFence")


def parse_state(name: str) -> str:
    """Admin's TransactionState.parse: an unknown name is ``Unknown``."""
    return name if name in _STATES else "Unknown"


def _ms(v) -> int:
    """A kio timedelta/datetime/int field as integer milliseconds (None: -1)."""
    if v is None:
        return -1
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1000)
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    return int(v)


class TransactionsAdmin(WireAdmin):
    """What TransactionsCommand asks of Kafka's Admin client beyond :class:`WireAdmin`: producers,
    transactions and aborting one."""

    # ------------------------------------------------------------------ DescribeProducers
    def describe_producers(self, tps: list, broker_id: int | None = None) -> tuple[dict, dict]:
        if broker_id is not None:

            def lookup(keys):
                return {k: broker_id for k in keys}, {}
        else:
            lookup = self.leader_lookup

        def fulfil(node, keys):
            by_topic: dict = {}
            for t, p in keys:
                by_topic.setdefault(t, []).append(p)

            def build(mod, v):
                return make(
                    mod.request.DescribeProducersRequest,
                    topics=tuple(
                        make(mod.request.TopicRequest, name=t, partition_indexes=tuple(ps))
                        for t, ps in by_topic.items()
                    ),
                )

            resp = self.send(self.node(node), ApiKeys.DESCRIBE_PRODUCERS, build, max_version=0)
            completed, failed, unmapped = {}, {}, []
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    err = int(p.error_code)
                    if err == 6:
                        if broker_id is not None:
                            failed[tp] = kafka_error(
                                6,
                                f"Failed to describe active producers for partition "
                                f"{tp_str(tp)} on brokerId {broker_id}",
                            )
                        else:
                            unmapped.append(tp)
                    elif err == 3:
                        pass  # retried
                    elif err == 17:
                        failed[tp] = JavaError(
                            ERRORS_PKG + "InvalidTopicException",
                            f"Failed to fetch metadata for partition {tp_str(tp)} due to invalid "
                            f"topic error: {p.error_message or kafka_error(17).message}",
                        )
                    elif err == 29:
                        failed[tp] = JavaError(
                            ERRORS_PKG + "TopicAuthorizationException",
                            f"Failed to describe active producers for partition {tp_str(tp)} due "
                            f"to authorization failure on topic `{tp[0]}`",
                        )
                    elif err:
                        failed[tp] = kafka_error(
                            err,
                            f"Failed to describe active producers for partition {tp_str(tp)} due to unexpected error",
                        )
                    else:
                        completed[tp] = [
                            ProducerState(
                                int(a.producer_id),
                                int(a.producer_epoch),
                                int(a.last_sequence),
                                _ms(a.last_timestamp),
                                max(int(a.coordinator_epoch), -1),
                                max(int(a.current_txn_start_offset), -1),
                            )
                            for a in p.active_producers
                        ]
            return completed, failed, unmapped

        return self.drive("describeProducers", tps, lookup, "METADATA", fulfil, "DESCRIBE_PRODUCERS")

    # ------------------------------------------------------------------ DescribeTransactions
    def _coordinator_lookup(self, ids: list) -> tuple[dict, dict]:
        """CoordinatorStrategy for transactional ids: FindCoordinator (key type 1), batched
        from v4, one key per request before."""
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

            r = self.send_any(ApiKeys.FIND_COORDINATOR, build)
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
                failed[tid] = JavaError(
                    ERRORS_PKG + "TransactionalIdAuthorizationException",
                    f"FindCoordinator request for transactionalId `{_coordinator_key(tid)}` failed "
                    "due to authorization failure",
                )
            else:
                failed[tid] = kafka_error(
                    err, f"FindCoordinator request for key `{_coordinator_key(tid)}` failed due to an unexpected error"
                )
        return mapped, failed

    def describe_transactions(self, ids: list) -> tuple[dict, dict]:
        def fulfil(node, keys):
            resp = self.send(
                self.node(node),
                ApiKeys.DESCRIBE_TRANSACTIONS,
                lambda mod, v: make(mod.request.DescribeTransactionsRequest, transactional_ids=tuple(keys)),
                max_version=0,
                reader=read_describe_transactions_v0,
            )
            completed, failed, unmapped = {}, {}, []
            for st in resp.transaction_states:
                tid = st.transactional_id
                if tid not in keys:
                    continue
                err = int(st.error_code)
                if err == 53:
                    failed[tid] = JavaError(
                        ERRORS_PKG + "TransactionalIdAuthorizationException",
                        f"DescribeTransactions request for transactionalId `{tid}` failed due to authorization failure",
                    )
                elif err == 105:
                    failed[tid] = kafka_error(
                        105,
                        f"DescribeTransactions request for transactionalId `{tid}` failed "
                        "because the ID could not be found",
                    )
                elif err == 14:
                    pass
                elif err in (16, 15):
                    unmapped.append(tid)
                elif err:
                    failed[tid] = kafka_error(
                        err, f"DescribeTransactions request for transactionalId `{tid}` failed due to unexpected error"
                    )
                else:
                    tps = [(td.topic, int(p)) for td in st.topics for p in td.partitions]
                    completed[tid] = TransactionDescription(
                        node,
                        parse_state(st.transaction_state),
                        int(st.producer_id),
                        int(st.producer_epoch),
                        st.transaction_timeout,
                        st.transaction_start_time,
                        java_hash_order(list(dict.fromkeys(tps)), topic_partition_hash),
                    )
            return completed, failed, unmapped

        return self.drive(
            "describeTransactions", ids, self._coordinator_lookup, "FIND_COORDINATOR", fulfil, "DESCRIBE_TRANSACTIONS"
        )

    # ------------------------------------------------------------------ ListTransactions
    def list_transactions(self, producer_ids=(), duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        """ListTransactions on every broker (AllBrokersStrategy); raises the first failure."""

        def lookup(keys):
            return {k: k for k in keys}, {}

        def fulfil(node, keys):
            conn = self.connection(*self.node(node))
            version = conn.version_for(ApiKeys.LIST_TRANSACTIONS, 1)
            if version is not None and version < 1 and duration_ms >= 0:
                raise kafka_error(
                    35,
                    "Duration filter can be set only when using API version 1 or higher. If "
                    "client is connected to an older broker, do not specify duration filter or set "
                    "duration filter to -1.",
                )
            resp = self.send(
                self.node(node),
                ApiKeys.LIST_TRANSACTIONS,
                lambda mod, v: make(
                    mod.request.ListTransactionsRequest,
                    state_filters=(),
                    producer_id_filters=tuple(producer_ids),
                    duration_filter=duration_ms,
                ),
                max_version=1,
            )
            err = int(resp.error_code)
            if err == 14:
                return {}, {}, []
            if err == 15:
                return (
                    {},
                    {
                        node: JavaError(
                            ERRORS_PKG + "CoordinatorNotAvailableException",
                            f"ListTransactions request sent to broker {node} failed because the "
                            "coordinator is shutting down",
                        )
                    },
                    [],
                )
            if err:
                return (
                    {},
                    {
                        node: kafka_error(
                            err, f"ListTransactions request sent to broker {node} failed with an unexpected exception"
                        )
                    },
                    [],
                )
            return (
                {
                    node: [
                        TransactionListing(s.transactional_id, int(s.producer_id), parse_state(s.transaction_state))
                        for s in resp.transaction_states
                    ]
                },
                {},
                [],
            )

        self.metadata_retrying((), "listTransactions(api=METADATA)")  # AllBrokersStrategy's lookup
        completed, failed = self.drive(
            "listTransactions", list(self.brokers), lookup, "METADATA", fulfil, "LIST_TRANSACTIONS"
        )
        if failed:
            raise next(iter(failed.values()))
        return {b: completed[b] for b in java_hash_order(list(completed), lambda i: i)}

    # ------------------------------------------------------------------ WriteTxnMarkers
    def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """AbortTransactionHandler: an ABORT marker through WriteTxnMarkers to the leader."""

        def fulfil(node, keys):
            def build(mod, v):
                return make(
                    mod.request.WriteTxnMarkersRequest,
                    markers=(
                        make(
                            mod.request.WritableTxnMarker,
                            producer_id=spec.producer_id,
                            producer_epoch=spec.producer_epoch,
                            transaction_result=False,
                            coordinator_epoch=spec.coordinator_epoch,
                            topics=(
                                make(
                                    mod.request.WritableTxnMarkerTopic, name=spec.tp[0], partition_indexes=(spec.tp[1],)
                                ),
                            ),
                        ),
                    ),
                )

            resp = self.send(self.node(node), ApiKeys.WRITE_TXN_MARKERS, build, max_version=1)
            tp = spec.tp
            markers = list(resp.markers)
            if len(markers) != 1 or int(markers[0].producer_id) != spec.producer_id:
                return (
                    {},
                    {
                        tp: JavaError(
                            "org.apache.kafka.common.KafkaException",
                            f"WriteTxnMarkers response included unexpected marker entries: {markers}"
                            "(expected to find exactly one entry with producerId "
                            f"{spec.producer_id})",
                        )
                    },
                    [],
                )
            topics = list(markers[0].topics)
            if len(topics) != 1 or topics[0].name != tp[0]:
                return (
                    {},
                    {
                        tp: JavaError(
                            "org.apache.kafka.common.KafkaException",
                            f"WriteTxnMarkers response included unexpected topic entries: {markers}"
                            f"(expected to find exactly one entry with topic partition "
                            f"{tp_str(tp)})",
                        )
                    },
                    [],
                )
            parts = list(topics[0].partitions)
            if len(parts) != 1 or int(parts[0].partition_index) != tp[1]:
                return (
                    {},
                    {
                        tp: JavaError(
                            "org.apache.kafka.common.KafkaException",
                            f"WriteTxnMarkers response included unexpected partition entries for topic "
                            f"{tp[0]}: {markers}(expected to find exactly one entry with partition "
                            f"{tp[1]})",
                        )
                    },
                    [],
                )
            err = int(parts[0].error_code)
            if err == 0:
                return {tp: None}, {}, []
            if err == 31:
                exc = JavaError(
                    ERRORS_PKG + "ClusterAuthorizationException",
                    f"WriteTxnMarkers request with {spec} failed due to cluster authorization error",
                )
            elif err == 47:
                exc = JavaError(
                    ERRORS_PKG + "InvalidProducerEpochException",
                    f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch",
                )
            elif err == 52:
                exc = JavaError(
                    ERRORS_PKG + "TransactionCoordinatorFencedException",
                    f"WriteTxnMarkers request with {spec} failed since the provided coordinator epoch "
                    f"{spec.coordinator_epoch} has been fenced by the active coordinator",
                )
            elif err in (6, 9, 8, 3):
                return {}, {}, [tp]
            else:
                exc = kafka_error(
                    err,
                    f"WriteTxnMarkers request with {spec} failed due to unexpected error: {kafka_error(err).message}",
                )
            return {}, {tp: exc}, []

        _completed, failed = self.drive(
            "abortTransaction", [spec.tp], self.leader_lookup, "METADATA", fulfil, "WRITE_TXN_MARKERS"
        )
        if failed:
            raise failed[spec.tp]


def _coordinator_key(tid: str) -> str:
    """CoordinatorKey.toString()."""
    return f"CoordinatorKey(idValue='{tid}', type=TRANSACTION)"


# ============================================================================ the commands

DESCRIBE_PRODUCERS_HEADERS = [
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
]
DESCRIBE_HEADERS = [
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
]
LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
FIND_HANGING_HEADERS = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
]
MAX_BATCH_SIZE = 500


def _now_ms() -> int:
    return int(time.time() * 1000)


def cmd_list(admin: TransactionsAdmin, ns: dict) -> None:
    duration = ns.get("duration_filter")
    try:
        result = admin.list_transactions(duration_ms=-1 if duration is None else duration)
    except JavaError as e:
        fail("Failed to list transactions", e)
    rows = [
        [listing.transactional_id, str(broker), str(listing.producer_id), listing.state]
        for broker, listings in result.items()
        for listing in listings
    ]
    pretty_print_table(LIST_HEADERS, rows)


def cmd_describe(admin: TransactionsAdmin, ns: dict) -> None:
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
    row = [
        str(d.coordinator_id),
        tid,
        str(d.producer_id),
        str(d.producer_epoch),
        d.state,
        str(d.transaction_timeout_ms),
        start,
        duration,
        ",".join(tp_str(tp) for tp in d.topic_partitions),
    ]
    pretty_print_table(DESCRIBE_HEADERS, [row])


def cmd_describe_producers(admin: TransactionsAdmin, ns: dict) -> None:
    tp = (ns["topic"], ns["partition"])
    broker_id = ns.get("broker_id")
    completed, failed = admin.describe_producers([tp], broker_id)
    if tp in failed:
        where = f"broker {broker_id}" if broker_id is not None else "leader"
        fail(f"Failed to describe producers for partition {tp_str(tp)} on {where}", failed[tp])
    rows = [
        [
            str(s.producer_id),
            str(s.producer_epoch),
            str(s.coordinator_epoch),
            str(s.last_sequence),
            str(s.last_timestamp),
            str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None",
        ]
        for s in completed[tp]
    ]
    pretty_print_table(DESCRIBE_PRODUCERS_HEADERS, rows)


def cmd_abort(admin: TransactionsAdmin, ns: dict) -> None:
    tp = (ns["topic"], ns["partition"])
    start_offset = ns.get("start_offset")
    producer_id = ns.get("producer_id")
    if start_offset is None and producer_id is None:
        fail(
            "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
            "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"
        )
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
        found = next(
            (
                s
                for s in completed[tp]
                if s.current_txn_start_offset >= 0 and s.current_txn_start_offset == start_offset
            ),
            None,
        )
        if found is None:
            fail(f"Could not find any open transactions starting at offset {start_offset} on partition {tp_str(tp)}")
        # coordinatorEpoch().orElse(0): DescribeProducers' -1 means none
        spec = AbortTransactionSpec(
            tp, found.producer_id, _as_short(found.producer_epoch), max(found.coordinator_epoch, 0)
        )
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


def cmd_find_hanging(admin: TransactionsAdmin, ns: dict) -> None:
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
            batch = topics[i : i + MAX_BATCH_SIZE]
            try:
                described = admin.describe_topics(batch)
            except JavaError as e:
                fail(f"Failed to describe {len(batch)} topics", e)
            for t, parts in described:
                tps += [(t, p) for p, replicas in parts if broker_id is None or broker_id in replicas]

    # open transactions older than the timeout, by partition
    candidates: list[_OpenTransaction] = []
    for i in range(0, len(tps), MAX_BATCH_SIZE):
        batch = tps[i : i + MAX_BATCH_SIZE]
        completed, failed = admin.describe_producers(batch, broker_id)
        # DescribeProducersResult.all(): a HashMap built from the futures' HashMap
        order = java_hash_order(
            java_hash_order(java_hash_order(list(dict.fromkeys(batch)), topic_partition_hash), topic_partition_hash),
            topic_partition_hash,
            initial_capacity=len(set(batch)),
        )
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
    rows = [
        [
            c.tp[0],
            str(c.tp[1]),
            str(c.state.producer_id),
            str(c.state.producer_epoch),
            str(c.state.coordinator_epoch),
            str(c.state.current_txn_start_offset),
            str(c.state.last_timestamp),
            str(int((now - c.state.last_timestamp) / 60_000)),
        ]
        for c in hanging
    ]
    pretty_print_table(FIND_HANGING_HEADERS, rows)


COMMANDS = {
    "list": cmd_list,
    "describe": cmd_describe,
    "describe-producers": cmd_describe_producers,
    "abort": cmd_abort,
    "find-hanging": cmd_find_hanging,
}


# ============================================================================ entry points


def execute(argv: list[str]) -> int:
    """TransactionsCommand.execute: parse, build the Admin client, run the command."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except ArgumentParserException as e:
        parser.handle_error(e)
        return 1
    except ParserExit as e:
        return e.code
    admin = None
    try:
        try:
            props = load_props(ns["command_config"]) if ns.get("command_config") else {}
        except OSError as e:
            fail(
                "Failed to load admin client properties",
                JavaError("java.nio.file.NoSuchFileException", e.filename or str(e)),
            )
        try:
            admin = TransactionsAdmin(ns["bootstrap_server"], props)
        except JavaError as e:
            sys.stdout.flush()
            sys.stderr.write(
                'Exception in thread "main" org.apache.kafka.common.KafkaException: '
                "Failed to create new KafkaAdminClient\n"
                f"Caused by: {e.java_class}: {e.message}\n"
            )
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
