"""``kafka-consumer-groups.sh``: list, describe, delete consumer groups, reset and delete
their offsets (Kafka's ConsumerGroupCommand).

Output follows Kafka's tool: ``--describe`` prints the offsets table (GROUP TOPIC PARTITION
CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID, columns as wide as their longest
value and at least 15), ``--members`` / ``--state`` their tables, ``--reset-offsets`` the
NEW-OFFSET plan (or ``--export`` CSV), ``--delete`` / ``--delete-offsets`` Kafka's messages.
Informational notes ("Consumer group 'g' has no active members.") go to stderr, errors
("Error: ...") to stdout. Any error makes the exit status 1 (Kafka's tool exits 0 after an error
it reported itself; kesque issue 11 asks for non-zero on any failure), usage errors too.

Where the data comes from, as Kafka's Admin client gets it:

* groups are listed with ListGroups on every broker (state and type filters, KIP-848 states
  ``Assigning``/``Reconciling`` included) and described with ConsumerGroupDescribe, falling back
  to DescribeGroups for classic groups (exactly the Admin client's order) - both over
  :mod:`kesque.client.wire`, because confluent-kafka maps the KIP-848 states to UNKNOWN;
* OffsetDelete goes over :mod:`kesque.client.wire` too (confluent-kafka has no call for it);
* committed offsets, ListOffsets, altering offsets, deleting groups and describing topics use
  confluent-kafka's AdminClient.

Row order: Kafka prints several tables from ``java.util.HashMap`` iteration (partitions of a
member, the reset plan, deleted group names); :func:`._common.java_hash_order` reproduces it.
"""

from __future__ import annotations

import csv
import datetime
import re
import struct
import sys
import time
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ..client.wire import Connection, Unreachable, WireError, connect_any, make
from ..protocol.api_keys import ApiKeys
from ..utils import java_string_hash
from .plumbing.admin_client import command_security, make_admin
from .plumbing.errors import ERRORS_PKG, JavaError, group_error, kafka_error_of
from .plumbing.javautil import (
    java_hash_order,
    java_hashmap_order,
    load_props,
    log4j_stamp,
    topic_partition_hash,
    tp_str,
)
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version
from .plumbing.progress import bar
from .plumbing.run import ToolExit

NAME = "consumer-groups"
SCRIPT = "kafka-consumer-groups.sh"
DESCRIPTION = (
    "This tool helps to list all consumer groups, describe a consumer group, delete consumer group info, "
    "or reset consumer group offsets."
)
HELP = "list, describe and delete consumer groups, reset their offsets (kafka-consumer-groups.sh)"

MISSING = "-"
_LOGGER = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"

# ConsumerGroupState / GroupType as Kafka names them (declaration order, UNKNOWN first)
STATES = ("Unknown", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
TYPES = ("Unknown", "Consumer", "Classic", "Share")
_REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}

_NL = "\n"


def configure(p) -> None:
    p.add_argument("--bootstrap-server", metavar="server to connect to", help="REQUIRED: The server(s) to connect to.")
    p.add_argument("--group", action="append", metavar="consumer group", help="The consumer group we wish to act on.")
    p.add_argument(
        "--topic",
        action="append",
        metavar="topic",
        help="The topic whose consumer group information should be deleted or topic whose should be "
        "included in the reset offset process. In `reset-offsets` case, partitions can be specified "
        "using this format: `topic1:0,1,2`, where 0,1,2 are the partition to be included in the "
        "process. Reset-offsets also supports multiple topic inputs.",
    )
    p.add_argument(
        "--all-topics",
        action="store_true",
        help="Consider all topics assigned to a group in the `reset-offsets` process.",
    )
    p.add_argument("--list", action="store_true", help="List all consumer groups.")
    p.add_argument(
        "--describe",
        action="store_true",
        help="Describe consumer group and list offset lag (number of messages not yet processed) related "
        "to given group.",
    )
    p.add_argument("--all-groups", action="store_true", help="Apply to all consumer groups.")
    p.add_argument(
        "--delete",
        action="store_true",
        help="Pass in groups to delete topic partition offsets and ownership information over the entire "
        "consumer group. For instance --group g1 --group g2",
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=5000,
        metavar="timeout (ms)",
        help="The timeout that can be set for some use cases. For example, it can be used when describing "
        "the group to specify the maximum amount of time in milliseconds to wait before the group "
        "stabilizes (when the group is just created, or is going through some changes).",
    )
    p.add_argument(
        "--command-config",
        metavar="command config property file",
        help="Property file containing configs to be passed to Admin Client and Consumer.",
    )
    p.add_argument(
        "--reset-offsets",
        action="store_true",
        help="Reset offsets of consumer group. Supports one consumer group at the time, and instances "
        "should be inactive\nHas 2 execution options: --dry-run (the default) to plan which offsets "
        "to reset, and --execute to update the offsets. Additionally, the --export option is used to "
        "export the results to a CSV format.\nYou must choose one of the following reset "
        "specifications: --to-datetime, --by-duration, --to-earliest, --to-latest, --shift-by, "
        "--from-file, --to-current, --to-offset.\nTo define the scope use --all-topics or --topic. "
        "One scope must be specified unless you use '--from-file'.",
    )
    p.add_argument(
        "--delete-offsets",
        action="store_true",
        help="Delete offsets of consumer group. Supports one consumer group at the time, and multiple topics.",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="Only show results without executing changes on Consumer Groups. Supported operations: reset-offsets.",
    )
    p.add_argument("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    p.add_argument(
        "--export",
        action="store_true",
        help="Export operation execution to a CSV file. Supported operations: reset-offsets.",
    )
    p.add_argument("--to-offset", type=int, metavar="offset", help="Reset offsets to a specific offset.")
    p.add_argument("--from-file", metavar="path to CSV file", help="Reset offsets to values defined in CSV file.")
    p.add_argument(
        "--to-datetime",
        metavar="datetime",
        help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDTHH:mm:SS.sss'",
    )
    p.add_argument(
        "--by-duration",
        metavar="duration",
        help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'",
    )
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    p.add_argument(
        "--shift-by",
        type=int,
        metavar="number-of-offsets",
        help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.",
    )
    p.add_argument(
        "--members",
        action="store_true",
        help="Describe members of the group. This option may be used with '--describe' and "
        "'--bootstrap-server' options only.\nExample: --bootstrap-server localhost:9092 --describe "
        "--group group1 --members",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="Provide additional information, if any, when describing the group. This option may be used "
        "with '--offsets'/'--members'/'--state' and '--bootstrap-server' options only.\nExample: "
        "--bootstrap-server localhost:9092 --describe --group group1 --members --verbose",
    )
    p.add_argument(
        "--offsets",
        action="store_true",
        help="Describe the group and list all topic partitions in the group along with their offset lag. "
        "This is the default sub-action of and may be used with '--describe' and "
        "'--bootstrap-server' options only.\nExample: --bootstrap-server localhost:9092 --describe "
        "--group group1 --offsets",
    )
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="state",
        help="When specified with '--describe', includes the state of the group.\nExample: "
        "--bootstrap-server localhost:9092 --describe --group group1 --state\nWhen specified with "
        "'--list', it displays the state of all groups. It can also be used to list groups with "
        "specific states.\nExample: --bootstrap-server localhost:9092 --list --state stable,empty\n"
        "This option may be used with '--describe', '--list' and '--bootstrap-server' options only.",
    )
    p.add_argument(
        "--type",
        nargs="?",
        const="",
        metavar="type",
        help="When specified with '--list', it displays the types of all the groups. It can also be used "
        "to list groups with specific types.\nExample: --bootstrap-server localhost:9092 --list "
        "--type classic,consumer\nThis option may be used with the '--list' option only.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


# ----------------------------------------------------------------- errors

_RETRIABLE_COORDINATOR = {14, 15, 16}


def from_confluent(exc: BaseException) -> JavaError:
    """A confluent-kafka exception as the Java Admin client's exception."""
    err = kafka_error_of(exc)
    if err is None:
        return exc if isinstance(exc, JavaError) else JavaError("org.apache.kafka.common.KafkaException", str(exc))
    code = err.code()
    if code in (-185, -192):  # _TIMED_OUT, _TIMED_OUT_QUEUE
        return JavaError(ERRORS_PKG + "TimeoutException", "Timed out waiting for a node assignment.")
    if code == 1:  # librdkafka 'broker: offset out of range' etc. keep Kafka's vocabulary
        return JavaError(
            ERRORS_PKG + "OffsetOutOfRangeException",
            "The requested offset is not within the range of offsets maintained by the server.",
            1,
        )
    return group_error(code, err.str())


def execution(e: BaseException) -> str:
    """``ExecutionException.toString()`` of a failed future (how Kafka's RuntimeException
    wrappers render their cause)."""
    return f"java.util.concurrent.ExecutionException: {e}"


class Usage(Exception):
    """Kafka's IllegalArgumentException: the message, then the usage (exit 1)."""


# ----------------------------------------------------------------- model


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]]


@dataclass
class Description:
    group_id: str
    state: str
    type: str
    assignor: str
    coordinator: tuple[int, str, int]
    members: list[Member] = field(default_factory=list)


@dataclass
class Listing:
    group_id: str
    state: str | None
    type: str | None


def hash_order(tps) -> list[tuple[str, int]]:
    """A ``HashMap<TopicPartition, ?>`` filled in ``tps`` order, iterated."""
    return java_hash_order(list(tps), topic_partition_hash)


def _spec_order(names: list[str]) -> list[str]:
    """Iteration order of a HashSet of jopt-simple OptionSpecs (hashCode: List<String>)."""
    return java_hash_order(list(names), lambda n: 31 + java_string_hash(n))


def _specs(names: list[str]) -> str:
    return ", ".join(f"[{n}]" for n in _spec_order(names))


def parse_assignment(data: bytes | None) -> list[tuple[str, int]]:
    """ConsumerProtocolAssignment (any version): the assigned partitions."""
    if not data:
        return []
    pos = 2
    (n,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = []
    for _ in range(max(n, 0)):
        (ln,) = struct.unpack_from(">h", data, pos)
        pos += 2
        topic = bytes(data[pos : pos + ln]).decode()
        pos += ln
        (np_,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for i in range(max(np_, 0)):
            out.append((topic, struct.unpack_from(">i", data, pos + 4 * i)[0]))
        pos += 4 * max(np_, 0)
    return out


# ----------------------------------------------------------------- the service


class GroupService:
    """What Kafka's ConsumerGroupService asks of its Admin client."""

    def __init__(self, a):
        self.a = a
        self.bootstrap = a.bootstrap_server
        self.timeout_ms = a.timeout
        self.props = load_props(a.command_config) if a.command_config else {}
        self._admin = None
        self._conns: dict[tuple[str, int], object] = {}
        self._coordinators: dict[str, tuple[int, str, int]] = {}

    # ------------------------------------------------------------------ plumbing
    @property
    def admin(self):
        if self._admin is None:
            self._admin = make_admin(self.bootstrap, self.a.command_config)
        return self._admin

    @property
    def request_timeout(self) -> float:
        return max(self.timeout_ms, 1) / 1000.0

    def _deadline(self) -> float:
        return time.monotonic() + max(self.timeout_ms, 1) / 1000.0

    @property
    def _connect_timeout(self) -> float:
        """socket.connection.setup.timeout.ms (10 s), at most --timeout."""
        return min(self.request_timeout, 10.0)

    def _conn(self, host: str, port: int):
        key = (host, port)
        c = self._conns.get(key)
        if c is None:
            c = Connection(
                host,
                port,
                client_id=self.props.get("client.id", "adminclient-1"),
                timeout=max(self.timeout_ms / 1000.0, 5.0),
                connect_timeout=self._connect_timeout,
                security=command_security(self.a.command_config),
            )
            self._conns[key] = c
        return c

    def _drop(self, host: str, port: int) -> None:
        c = self._conns.pop((host, port), None)
        if c is not None:
            c.close()

    def _boot(self):
        return connect_any(self.bootstrap, self._conn, self._connect_timeout)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def brokers(self) -> list[tuple[int, str, int]]:
        def build(mod, v):
            return make(
                mod.request.MetadataRequest,
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False,
            )

        resp = self._boot().request(ApiKeys.METADATA, build, max_version=12)
        return [(int(b.node_id), b.host, int(b.port)) for b in resp.brokers]

    def coordinators(self, groups: list[str]) -> dict[str, tuple[int, str, int]]:
        """FindCoordinator (GROUP), retried while the coordinator loads or is not there yet."""
        wanted = [g for g in groups if g not in self._coordinators]
        deadline = self._deadline()
        while wanted:
            conn = self._boot()
            version = conn.version_for(ApiKeys.FIND_COORDINATOR)
            found: dict[str, tuple[int, int | None, str, int]] = {}
            if version is not None and version >= 4:

                def build(mod, v, keys=tuple(wanted)):
                    return make(mod.request.FindCoordinatorRequest, key_type=0, coordinator_keys=keys)

                resp = conn.request(ApiKeys.FIND_COORDINATOR, build)
                for c in resp.coordinators:
                    found[c.key] = (int(c.error_code), int(c.node_id), c.host, int(c.port))
            else:
                for g in wanted:

                    def build(mod, v, key=g):
                        return make(mod.request.FindCoordinatorRequest, key=key, key_type=0)

                    r = conn.request(ApiKeys.FIND_COORDINATOR, build)
                    found[g] = (int(r.error_code), int(r.node_id), r.host, int(r.port))
            retry = []
            for g in wanted:
                code, node, host, port = found.get(g, (15, -1, "", -1))
                if code == 0:
                    self._coordinators[g] = (node, host, port)
                elif code in _RETRIABLE_COORDINATOR:
                    retry.append(g)
                else:
                    raise group_error(code)
            wanted = retry
            if wanted:
                if time.monotonic() > deadline:
                    raise JavaError(
                        ERRORS_PKG + "TimeoutException",
                        "Timed out waiting for a node assignment. Call: findCoordinator",
                    )
                time.sleep(0.1)
        return {g: self._coordinators[g] for g in groups}

    def _forget(self, group: str) -> None:
        self._coordinators.pop(group, None)

    # ------------------------------------------------------------------ listing
    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[Listing]:
        """ListGroups on every broker; consumer-protocol (and empty-protocol) groups only,
        in the iteration order of the Admin client's HashMap of listings."""
        listings: dict[str, Listing] = {}
        for _node, host, port in self.brokers():
            conn = self._conn(host, port)

            def build(mod, v):
                return make(
                    mod.request.ListGroupsRequest, states_filter=tuple(states or ()), types_filter=tuple(types or ())
                )

            deadline = self._deadline()
            while True:
                resp = conn.request(ApiKeys.LIST_GROUPS, build)
                code = int(resp.error_code)
                if code in (14, 15) and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                break
            if code:
                raise group_error(code, f"Error listing groups on {host}:{port} (id: {_node} rack: null)")
            for g in resp.groups:
                ptype = g.protocol_type
                if ptype not in ("consumer", ""):
                    continue
                state = getattr(g, "group_state", "") or ""
                gtype = getattr(g, "group_type", "") or ""
                listings[g.group_id] = Listing(
                    g.group_id, _parse_state(state) if state else None, _parse_type(gtype) if gtype else None
                )
        order = java_hashmap_order(list(listings))
        return [listings[g] for g in order]

    def group_ids(self) -> list[str]:
        return [x.group_id for x in self.list_groups()]

    # ------------------------------------------------------------------ describing
    def describe(self, groups: list[str]) -> dict[str, Description]:
        """ConsumerGroupDescribe first, DescribeGroups for the groups that are not KIP-848
        consumer groups - the Admin client's describeConsumerGroups. The first failure
        (in HashMap order of the group ids) is raised, as ``future.get()`` would."""
        done: dict[str, Description] = {}
        failed: dict[str, Exception] = {}
        classic: set[str] = set()
        pending = list(dict.fromkeys(groups))
        deadline = self._deadline()
        while pending:
            was_classic = set(classic)
            by_coordinator: dict[tuple[int, str, int], list[str]] = {}
            for g, node in self.coordinators(pending).items():
                by_coordinator.setdefault(node, []).append(g)
            retry: list[str] = []
            for node, gs in by_coordinator.items():
                new = [g for g in gs if g not in classic]
                old = [g for g in gs if g in classic]
                try:
                    conn = self._conn(node[1], node[2])
                    if new:
                        if conn.version_for(ApiKeys.CONSUMER_GROUP_DESCRIBE) is None:
                            classic.update(new)
                            retry += new
                        else:
                            retry += self._consumer_group_describe(conn, node, new, done, failed, classic)
                    if old:
                        retry += self._describe_groups(conn, node, old, done, failed)
                except OSError:
                    self._drop(node[1], node[2])
                    for g in gs:
                        self._forget(g)
                    retry += gs
            fallback_only = all(g in classic and g not in was_classic for g in retry)
            pending = [g for g in retry if g not in done and g not in failed]
            if pending and time.monotonic() > deadline:
                raise JavaError(
                    ERRORS_PKG + "TimeoutException",
                    "Timed out waiting for a node assignment. Call: describeConsumerGroups",
                )
            if pending and not fallback_only:
                time.sleep(0.05)
        for g in java_hashmap_order(list(dict.fromkeys(groups))):
            if g in failed:
                raise failed[g]
        return done

    def _consumer_group_describe(self, conn, node, groups, done, failed, classic) -> list[str]:
        def build(mod, v):
            return make(
                mod.request.ConsumerGroupDescribeRequest, group_ids=tuple(groups), include_authorized_operations=False
            )

        resp = conn.request(ApiKeys.CONSUMER_GROUP_DESCRIBE, build)
        retry = []
        for dg in resp.groups:
            gid = dg.group_id
            code = int(dg.error_code)
            if code == 0:
                members = []
                for m in dg.members:
                    members.append(
                        Member(
                            m.member_id,
                            m.instance_id,
                            m.client_id,
                            m.client_host,
                            [(tp.topic_name, int(p)) for tp in m.assignment.topic_partitions for p in tp.partitions],
                        )
                    )
                done[gid] = Description(gid, _parse_state(dg.group_state), "Consumer", dg.assignor_name, node, members)
            elif code in (69, 35):  # not a consumer-protocol group: ask DescribeGroups
                classic.add(gid)
                retry.append(gid)
            elif code == 14:
                retry.append(gid)
            elif code in (15, 16):
                self._forget(gid)
                retry.append(gid)
            else:
                failed[gid] = group_error(code, dg.error_message)
        return retry

    def _describe_groups(self, conn, node, groups, done, failed) -> list[str]:
        def build(mod, v):
            return make(mod.request.DescribeGroupsRequest, groups=tuple(groups), include_authorized_operations=False)

        # v5: the versions Kafka's Admin client speaks (no GROUP_ID_NOT_FOUND for unknown
        # groups: they come back Dead, and the tool says the group does not exist)
        resp = conn.request(ApiKeys.DESCRIBE_GROUPS, build, max_version=5)
        retry = []
        for dg in resp.groups:
            gid = dg.group_id
            code = int(dg.error_code)
            if code == 14:
                retry.append(gid)
                continue
            if code in (15, 16):
                self._forget(gid)
                retry.append(gid)
                continue
            if code:
                failed[gid] = group_error(code)
                continue
            if dg.protocol_type not in ("consumer", ""):
                failed[gid] = JavaError(
                    "java.lang.IllegalArgumentException", f"GroupId {gid} is not a consumer group ({dg.protocol_type})."
                )
                continue
            members = [
                Member(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, parse_assignment(m.member_assignment)
                )
                for m in dg.members
            ]
            done[gid] = Description(gid, _parse_state(dg.group_state), "Classic", dg.protocol_data, node, members)
        return retry

    # ------------------------------------------------------------------ offsets
    def committed(self, group: str) -> dict[tuple[str, int], int | None]:
        """listConsumerGroupOffsets: every partition with a committed offset (None: no offset)."""
        try:
            fut = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.request_timeout
            )[group]
            res = fut.result()
        except Exception as e:  # noqa: BLE001 - surfaced as Kafka's exception
            raise from_confluent(e) from None
        out: dict[tuple[str, int], int | None] = {}
        for tp in res.topic_partitions or []:
            if tp.error is not None:
                raise group_error(tp.error.code(), tp.error.str())
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def log_offsets(self, tps, spec: str, timestamp: int | None = None) -> dict[tuple[str, int], int]:
        """ListOffsets (``earliest``/``latest``/``timestamp``): {tp: offset} (-1: no offset
        for that timestamp)."""

        tps = list(dict.fromkeys(tps))
        if not tps:
            return {}
        if spec == "earliest":
            s = OffsetSpec.earliest()
        elif spec == "latest":
            s = OffsetSpec.latest()
        else:
            s = OffsetSpec.for_timestamp(timestamp)
        try:
            futs = self.admin.list_offsets(
                {TopicPartition(t, p): s for t, p in tps}, request_timeout=self.request_timeout
            )
            out = {}
            for tp, f in futs.items():
                out[(tp.topic, tp.partition)] = f.result().offset
            return out
        except Exception as e:  # noqa: BLE001
            raise from_confluent(e) from None

    def alter_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        if not offsets:
            return
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        try:
            res = self.admin.alter_consumer_group_offsets([req], request_timeout=self.request_timeout)[group].result()
        except Exception as e:  # noqa: BLE001
            raise from_confluent(e) from None
        for tp in res.topic_partitions or []:
            if tp.error is not None:
                raise group_error(tp.error.code(), tp.error.str())

    def topic_partitions(self, topics: list[str]) -> dict[str, list[int] | JavaError]:
        """describeTopics: {topic: partition ids, or the failure}."""
        out: dict[str, list[int] | JavaError] = {}
        if not topics:
            return out
        futs = self.admin.describe_topics(
            TopicCollection(list(dict.fromkeys(topics))), request_timeout=self.request_timeout
        )
        for topic, f in futs.items():
            try:
                out[topic] = sorted(p.id for p in f.result().partitions)
            except Exception as e:  # noqa: BLE001
                out[topic] = from_confluent(e)
        return out

    def delete_groups(self, groups: list[str]) -> dict[str, JavaError | None]:
        futs = self.admin.delete_consumer_groups(list(dict.fromkeys(groups)), request_timeout=self.request_timeout)
        out: dict[str, JavaError | None] = {}
        for g in groups:
            try:
                futs[g].result()
                out[g] = None
            except Exception as e:  # noqa: BLE001
                out[g] = from_confluent(e)
        return out

    def delete_offsets(self, group: str, tps: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete at the group's coordinator: (group error, {tp: partition error})."""
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        deadline = self._deadline()
        while True:
            node = self.coordinators([group])[group]
            conn = self._conn(node[1], node[2])

            def build(mod, v):
                rq = mod.request
                return make(
                    rq.OffsetDeleteRequest,
                    group_id=group,
                    topics=tuple(
                        make(
                            rq.OffsetDeleteRequestTopic,
                            name=t,
                            partitions=tuple(make(rq.OffsetDeleteRequestPartition, partition_index=p) for p in ps),
                        )
                        for t, ps in topics.items()
                    ),
                )

            resp = conn.request(ApiKeys.OFFSET_DELETE, build)
            code = int(resp.error_code)
            if code in _RETRIABLE_COORDINATOR and time.monotonic() < deadline:
                self._forget(group)
                time.sleep(0.1)
                continue
            break
        parts = {}
        for t in resp.topics:
            for p in t.partitions:
                parts[(t.name, int(p.partition_index))] = int(p.error_code)
        return code, parts


def _parse_state(s: str) -> str:
    """ConsumerGroupState.parse (case-insensitive; anything else is Unknown)."""
    for name in STATES:
        if name.upper() == (s or "").upper():
            return name
    return "Unknown"


def _parse_type(s: str) -> str:
    for name in TYPES:
        if name.lower() == (s or "").lower():
            return name
    return "Unknown"


# ----------------------------------------------------------------- argument checks


def _check_args(p, a) -> None:
    usage_or_version(a, p, DESCRIPTION)
    # jopt-simple's availableIf: rejected while parsing, before any other check
    unavailable = [
        n
        for n, needs in (
            ("members", ("describe",)),
            ("verbose", ("describe",)),
            ("offsets", ("describe",)),
            ("state", ("describe", "list")),
            ("type", ("list",)),
        )
        if _has(a, n) and not any(_has(a, x) for x in needs)
    ]
    if unavailable:
        sys.stdout.flush()
        print(
            'Exception in thread "main" joptsimple.UnavailableOptionException: Option(s) '
            f"[{', '.join(unavailable)}] are unavailable given other options on the command line",
            file=sys.stderr,
        )
        raise ToolExit(1)
    check_required(p, a, "bootstrap-server")
    scope = _specs(["group", "all-groups"])
    if a.describe:
        if not _has(a, "group") and not a.all_groups:
            print_usage_and_exit(p, f"Option [describe] takes one of these options: {scope}")
        if sum(1 for x in ("members", "offsets", "state") if _has(a, x)) > 1:
            print_usage_and_exit(
                p, "Option [describe] takes at most one of these options: [members], [offsets], [state]"
            )
        if a.state:  # a value given
            print_usage_and_exit(p, "Option [describe] does not take a value for [state]")
    if a.delete:
        if not _has(a, "group") and not a.all_groups:
            print_usage_and_exit(p, f"Option [delete] takes one of these options: {scope}")
        if _has(a, "topic"):
            print_usage_and_exit(
                p, "The consumer does not support topic-specific offset deletion from a consumer group."
            )
    if a.delete_offsets and (not _has(a, "group") or not _has(a, "topic")):
        print_usage_and_exit(p, "Option [delete-offsets] takes the following options: " + _specs(["group", "topic"]))
    if a.reset_offsets:
        if a.dry_run and a.execute:
            print_usage_and_exit(p, "Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not a.dry_run and not a.execute:
            print(
                "WARN: No action will be performed as the --execute option is missing.In a future major release, "
                "the default behavior of this command will be to prompt the user before executing the reset "
                "rather than doing a dry run. You should add the --dry-run option explicitly if you are "
                "scripting this command and want to keep the current default behavior without prompting.",
                file=sys.stderr,
            )
        if not _has(a, "group") and not a.all_groups:
            print_usage_and_exit(p, f"Option [reset-offsets] takes one of these options: {scope}")
        for used in _SCENARIOS:
            _check_invalid(p, a, used, [s for s in _SCENARIOS if s != used])
    _check_invalid(p, a, "group", ["all-groups"])
    _check_invalid(p, a, "group", ["list"])
    _check_invalid(p, a, "topic", ["list", "describe"])


_SCENARIOS = (
    "to-offset",
    "shift-by",
    "to-datetime",
    "by-duration",
    "to-earliest",
    "to-latest",
    "to-current",
    "from-file",
)


def _has(a, name: str) -> bool:
    return getattr(a, name.replace("-", "_"), None) not in (None, False, [])


def _check_invalid(p, a, used: str, invalid: list[str]) -> None:
    if not _has(a, used):
        return
    for name in _spec_order(invalid):
        if _has(a, name):
            print_usage_and_exit(p, f'Option "[{used}]" can\'t be used with option "[{name}]"')


# ----------------------------------------------------------------- run


def run(a) -> int:
    p = a._parser
    _check_args(p, a)
    actions = sum(1 for x in (a.list, a.describe, a.delete, a.reset_offsets, a.delete_offsets) if x)
    if actions != 1:
        print_usage_and_exit(
            p,
            "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets",
        )
    svc = GroupService(a)
    Reported.errors = 0
    try:
        if a.list:
            list_groups(svc, a)
        elif a.describe:
            describe_groups(svc, a)
        elif a.delete:
            delete_groups(svc, a)
        elif a.reset_offsets:
            plan = reset_offsets(svc, a)
            if a.export:
                print(export_csv(a, plan))
            else:
                print_offsets_to_reset(plan)
        else:
            delete_offsets(svc, a)
    except Usage as e:
        print_usage_and_exit(p, str(e))
    except ToolExit:
        raise
    except Exception as e:  # noqa: BLE001 - Kafka's tool reports every failure the same way
        detail = str(e) if isinstance(e, JavaError) else java_text(e)
        print_error(f"Executing consumer group command failed due to {detail}")
        sys.stdout.flush()
        print(detail if isinstance(e, (JavaError, Unreachable)) else f"{type(e).__name__}: {e}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        svc.close()
    return 1 if Reported.errors else 0


def java_text(e: BaseException) -> str:
    if isinstance(e, Unreachable):
        return f"{ERRORS_PKG}{e.java_name}: {e}"
    if isinstance(e, (OSError, WireError)):
        return f"{ERRORS_PKG}TimeoutException: Timed out waiting for a node assignment. ({type(e).__name__}: {e})"
    if kafka_error_of(e) is not None:
        return str(from_confluent(e))
    return f"{type(e).__name__}: {e}"


class Reported:
    """Whether this run printed an ``Error:`` (the exit status is then 1)."""

    errors = 0


def print_error(msg: str) -> None:
    Reported.errors += 1
    print(f"\nError: {msg}")


# ----------------------------------------------------------------- --list


def list_groups(svc: GroupService, a) -> None:
    include_type = a.type is not None
    include_state = a.state is not None
    if not (include_type or include_state):
        for g in svc.group_ids():
            print(g)
        return
    types = _types_from(a.type) if a.type else []
    states = _states_from(a.state) if a.state else []
    listings = svc.list_groups(states=states, types=types)
    width = max([max(15, len(x.group_id)) for x in listings], default=15) + 10
    header = [f"{'GROUP':<{width}}"]
    if include_type:
        header.append(f"{'TYPE':<20}")
    if include_state:
        header.append(f"{'STATE':<20}")
    print(" ".join(header))
    for x in listings:
        row = [f"{x.group_id:<{width}}"]
        if include_type:
            row.append(f"{x.type or 'Unknown':<20}")
        if include_state:
            row.append(f"{x.state or 'Unknown':<20}")
        print(" ".join(row))


def _states_from(value: str) -> list[str]:
    parsed = [_parse_state(s.strip()) for s in value.split(",")]
    if "Unknown" in parsed:
        raise Usage(f"Invalid state list '{value}'. Valid states are: " + ", ".join(STATES[1:]))
    return list(dict.fromkeys(parsed))


def _types_from(value: str) -> list[str]:
    parsed = [_parse_type(s.strip()) for s in value.lower().split(",")]
    if "Unknown" in parsed:
        raise Usage(f"Invalid types list '{value}'. Valid types are: " + ", ".join(TYPES[1:]))
    return list(dict.fromkeys(parsed))


# ----------------------------------------------------------------- --describe


def _should_print(group: str, state: str | None, rows: int | None) -> bool:
    if rows is None:
        print_error(f"The consumer group '{group}' does not exist.")
        return False
    state = state or "Unknown"
    if state == "Dead":
        print_error(f"Consumer group '{group}' does not exist.")
    elif state == "Empty":
        sys.stdout.flush()
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in _REBALANCING:
        sys.stdout.flush()
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    elif state != "Stable":
        raise JavaError(
            "org.apache.kafka.common.KafkaException", f"Expected a valid consumer group state, but found '{state}'."
        )
    sys.stderr.flush()
    return state != "Dead" and rows > 0


def describe_groups(svc: GroupService, a) -> None:
    groups = svc.group_ids() if a.all_groups else list(a.group)
    members_opt = a.members
    state_opt = a.state is not None
    if not members_opt and not state_opt or a.offsets:
        print_offsets(collect_offsets(svc, groups))
    elif members_opt:
        print_members(svc.describe(groups), a.verbose)
    else:
        print_states(svc.describe(groups))


@dataclass
class Row:
    group: str
    topic: str | None
    partition: int | None
    offset: int | None
    log_end_offset: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset


def collect_offsets(svc: GroupService, groups: list[str]) -> dict[str, tuple[str, list[Row]]]:
    """{group: (state, rows)} in TreeMap (sorted) order of the group ids."""
    descriptions = svc.describe(groups)
    out: dict[str, tuple[str, list[Row]]] = {}
    for gid in sorted(descriptions):
        d = descriptions[gid]
        committed = svc.committed(gid)
        rows: list[Row] = []
        assigned: list[tuple[str, int]] = []
        with_partitions = [m for m in d.members if m.assignment]
        with_partitions.sort(key=lambda m: -len(set(m.assignment)))  # stable, as Java's sort
        plan: list[tuple[list[tuple[str, int]], str, str, str]] = []
        for m in with_partitions:
            tps = list(dict.fromkeys(m.assignment))
            assigned += tps
            plan.append((tps, m.member_id, m.host, m.client_id))
        unassigned = [tp for tp in hash_order(committed) if tp not in set(assigned)]
        if unassigned:
            plan.append((unassigned, MISSING, MISSING, MISSING))
        ends = svc.log_offsets([tp for tps, *_ in plan for tp in tps], "latest") if plan else {}
        for tps, cid, host, client in plan:
            # sorted by partition, then put in a HashMap by the LEO lookup: HashMap order
            ordered = hash_order(sorted(hash_order(tps), key=lambda tp: tp[1]))
            for tp in ordered:
                rows.append(Row(gid, tp[0], tp[1], committed.get(tp), ends.get(tp), cid, host, client))
        out[gid] = (d.state, rows)
    return out


def print_offsets(offsets: dict[str, tuple[str, list[Row]]]) -> None:
    for gid, (state, rows) in offsets.items():
        if not _should_print(gid, state, len(rows)):
            continue
        wg = max([15] + [len(r.group) for r in rows])
        wt = max([15] + [len(r.topic or MISSING) for r in rows])
        wc = max([15] + [len(r.consumer_id) for r in rows])
        wh = max([15] + [len(r.host) for r in rows])

        def line(g, t, p, cur, leo, lag, cid, host, client, wg=wg, wt=wt, wc=wc, wh=wh):
            return f"\n{g:<{wg}} {t:<{wt}} {p:<10} {cur:<15} {leo:<15} {lag:<15} {cid:<{wc}} {host:<{wh}} {client}"

        out = [
            line(
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            )
        ]
        for r in rows:
            out.append(
                line(
                    r.group,
                    r.topic or MISSING,
                    _s(r.partition),
                    _s(r.offset),
                    _s(r.log_end_offset),
                    _s(r.lag),
                    r.consumer_id,
                    r.host,
                    r.client_id,
                )
            )
        sys.stdout.write("".join(out) + "\n")


def _s(v) -> str:
    return MISSING if v is None else str(v)


def _assignment_text(tps: list[tuple[str, int]]) -> str:
    """``topic1(0,1), topic2(0)``: each topic's partitions (sorted as strings, like Kafka),
    topics sorted, as the tool's documentation shows it."""
    if not tps:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    parts = [t + "(" + ",".join(sorted(str(p) for p in ps)) + ")" for t, ps in by_topic.items()]
    return ", ".join(sorted(parts))


def print_members(descriptions: dict[str, Description], verbose: bool) -> None:
    for gid in sorted(descriptions):
        d = descriptions[gid]
        wg, wc, wi, wh, wcl = 15, 15, 17, 15, 15
        with_instance = False
        if _should_print(gid, d.state, len(d.members)):
            for m in d.members:
                wg = max(wg, len(gid))
                wc = max(wc, len(m.member_id))
                wi = max(wi, len(m.instance_id or ""))
                wh = max(wh, len(m.host))
                wcl = max(wcl, len(m.client_id))
                with_instance = with_instance or bool(m.instance_id)

        def fmt(g, c, i, h, cl, n, wg=wg, wc=wc, wi=wi, wh=wh, wcl=wcl, with_instance=with_instance):
            if with_instance:
                return f"{g:<{wg}} {c:<{wc}} {i:<{wi}} {h:<{wh}} {cl:<{wcl}} {n:<15} "
            return f"{g:<{wg}} {c:<{wc}} {h:<{wh}} {cl:<{wcl}} {n:<15} "

        out = [
            "\n"
            + fmt("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
            + ("ASSIGNMENT" if verbose else "")
            + "\n"
        ]
        for m in d.members:
            tps = list(dict.fromkeys(m.assignment))
            out.append(
                fmt(gid, m.member_id, m.instance_id or "", m.host, m.client_id, str(len(tps)))
                + (_assignment_text(tps) if verbose else "")
                + "\n"
            )
        sys.stdout.write("".join(out))


def print_states(descriptions: dict[str, Description]) -> None:
    for gid in sorted(descriptions):
        d = descriptions[gid]
        if not _should_print(gid, d.state, 1):
            continue
        node_id, host, port = d.coordinator
        coordinator = f"{host}:{port}  ({node_id})"
        w = max(25, len(coordinator))

        def line(g, c, s, st, n, w=w):
            return f"\n{g:<{w}} {c:<25} {s:<20} {st:<15} {n}"

        sys.stdout.write(
            line("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
            + line(gid, coordinator, d.assignor, d.state, len(d.members))
            + "\n"
        )


# ----------------------------------------------------------------- --delete


def delete_groups(svc: GroupService, a) -> None:
    groups = svc.group_ids() if a.all_groups else list(dict.fromkeys(a.group))
    results = svc.delete_groups(groups)
    success = [g for g in java_hashmap_order(list(results)) if results[g] is None]
    failed = [g for g in java_hashmap_order(list(results)) if results[g] is not None]
    if not failed:
        print("Deletion of requested consumer groups ('" + ", ".join(success) + "') was successful.")
        return
    print_error("Deletion of some consumer groups failed:")
    for g in failed:
        print(f"* Group '{g}' could not be deleted due to: {execution(results[g])}")
    if success:
        # sic: Kafka joins the names with a quote and ends with "', '"
        print("\nThese consumer groups were deleted successfully: '" + "'".join(success) + "', '")


# ----------------------------------------------------------------- --delete-offsets


def delete_offsets(svc: GroupService, a) -> None:
    group = a.group[0]
    topics = list(a.topic)
    with_parts = [t for t in dict.fromkeys(topics) if ":" in t]
    without = [t for t in dict.fromkeys(topics) if ":" not in t]
    results: dict[tuple[str, int], JavaError | None] = {}
    partitions: list[tuple[str, int]] = []
    for t in with_parts:
        partitions += parse_topic_partitions(t)
    for topic, parts in svc.topic_partitions(without).items():
        if isinstance(parts, JavaError):
            results[(topic, -1)] = parts
        else:
            partitions += [(topic, p) for p in parts]
    partitions = list(dict.fromkeys(partitions))
    code, per_partition = svc.delete_offsets(group, partitions)
    top = code
    if top == 0:
        for tp in partitions:
            c = per_partition.get(tp, 0)
            if c:
                top = c
                break
    for tp in partitions:
        c = code or per_partition.get(tp, 0)
        results[tp] = group_error(c) if c else None
    if top == 0:
        print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    elif top == 24:
        print_error(f"'{group}' is not valid.")
    elif top == 69:
        print_error(f"'{group}' does not exist.")
    elif top == 30:
        print_error(f"Access to '{group}' is not authorized.")
    elif top == 68:
        print_error(f"Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.")
    elif top in (86, 29, 3):
        print_error("Encounter some partition level error, see the follow-up details:")
    else:
        name = group_error(top).java_class.rsplit(".", 1)[-1]
        print_error(f"Encounter some unknown error: {_error_enum(top, name)}")
    out = [f"\n{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}"]
    for tp in sorted(results, key=lambda tp: tp[0] + str(tp[1])):
        err = results[tp]
        part = str(tp[1]) if tp[1] >= 0 else "Not Provided"
        status = f"Error: :{err}" if err is not None else "Successful"
        out.append(f"\n{tp[0]:<30} {part:<15} {status:<15}")
    sys.stdout.write("".join(out) + "\n")


def _error_enum(code: int, fallback: str) -> str:
    names = {
        7: "REQUEST_TIMED_OUT",
        14: "COORDINATOR_LOAD_IN_PROGRESS",
        15: "COORDINATOR_NOT_AVAILABLE",
        16: "NOT_COORDINATOR",
        35: "UNSUPPORTED_VERSION",
        -1: "UNKNOWN_SERVER_ERROR",
    }
    return names.get(code, fallback)


def parse_topic_partitions(arg: str) -> list[tuple[str, int]]:
    parts = arg.split(":")
    if len(parts) != 2 or not parts[1]:
        raise Usage(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, plist = parts
    out = []
    for s in plist.split(","):
        try:
            out.append((topic, _java_int(s)))
        except ValueError:
            raise Usage(f"Invalid partition '{s}' specified in topic arg '{arg}''") from None
    return out


def _java_int(s: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", s):
        raise ValueError(s)
    v = int(s)
    if not -(2**31) <= v < 2**31:
        raise ValueError(s)
    return v


# ----------------------------------------------------------------- --reset-offsets


def reset_offsets(svc: GroupService, a) -> dict[str, dict[tuple[str, int], int]]:
    groups = svc.group_ids() if a.all_groups else list(dict.fromkeys(a.group))
    descriptions = svc.describe(groups)
    result: dict[str, dict[tuple[str, int], int]] = {}
    dry_run = a.dry_run or not a.execute
    # many groups take a while: a bar on a terminal (issue 29), nothing when captured
    progress = bar(len(descriptions), "Resetting offsets", "group") if len(descriptions) > 1 else None
    try:
        for gid in java_hashmap_order(list(descriptions)):
            _reset_group(svc, a, gid, descriptions[gid].state, dry_run, result)
            if progress is not None:
                progress.update(1)
    finally:
        if progress is not None:
            progress.close()
    return {g: result[g] for g in java_hashmap_order(list(result))}


def _reset_group(svc: GroupService, a, gid: str, state: str, dry_run: bool, result: dict) -> None:
    """One group's reset (its plan in ``result``): an active group is refused with Kafka's message."""
    if state in ("Empty", "Dead"):
        partitions = _partitions_to_reset(svc, a, gid)
        prepared = _prepare(svc, a, gid, partitions)
        if not dry_run:
            try:
                svc.alter_offsets(gid, prepared)
            except JavaError as e:
                raise JavaError("java.lang.RuntimeException", execution(e)) from None
        result[gid] = prepared
    else:
        print_error(
            f"Assignments can only be reset if the group '{gid}' is inactive, but the current state is {state}."
        )
        result[gid] = {}


def wrapped(fn, *args, **kw):
    """Kafka's ``catch (ExecutionException e) { throw new RuntimeException(e); }``."""
    try:
        return fn(*args, **kw)
    except JavaError as e:
        if e.java_class.startswith("java.lang.") or e.java_class.startswith("java.util."):
            raise
        raise JavaError("java.lang.RuntimeException", execution(e)) from None


def _partitions_to_reset(svc: GroupService, a, gid: str) -> list[tuple[str, int]]:
    if a.all_topics:
        return hash_order(wrapped(svc.committed, gid))
    if a.topic:
        specified: list[tuple[str, int]] = []
        plain: list[str] = []
        for t in a.topic:
            if ":" in t:
                specified += parse_topic_partitions(t)
            else:
                plain.append(t)
        described = svc.topic_partitions(plain)
        for t in java_hashmap_order(list(dict.fromkeys(plain))):
            parts = described[t]
            if isinstance(parts, JavaError):
                raise JavaError("java.lang.RuntimeException", execution(parts))
            specified += [(t, p) for p in parts]
        return specified
    if not a.from_file:
        raise UsageExit("One of the reset scopes should be defined: --all-topics, --topic.")
    return []


class UsageExit(Usage):
    """CommandLineUtils.printUsageAndExit from inside the command."""


def _warn(msg: str) -> None:
    sys.stdout.flush()
    print(f"[{log4j_stamp()}] WARN {msg} ({_LOGGER})", file=sys.stderr)


def _check_range(svc: GroupService, requested: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    starts = wrapped(svc.log_offsets, requested, "earliest")
    ends = wrapped(svc.log_offsets, requested, "latest")
    out: dict[tuple[str, int], int] = {}
    for tp, offset in requested.items():
        end = ends.get(tp)
        if end is None:
            raise JavaError(
                "java.lang.IllegalStateException",
                f"Unexpected non-existing offset value for topic partition {tp_str(tp)}",
            )
        if offset > end:
            _warn(
                f"New offset ({offset}) is higher than latest offset for topic partition {tp_str(tp)}. "
                f"Value will be set to {end}"
            )
            out[tp] = end
        else:
            start = starts.get(tp)
            if start is not None and offset < start:
                _warn(
                    f"New offset ({offset}) is lower than earliest offset for topic partition {tp_str(tp)}. "
                    f"Value will be set to {start}"
                )
                out[tp] = start
            else:
                out[tp] = offset
    return {tp: out[tp] for tp in hash_order(out)}


def _by_timestamp(svc: GroupService, partitions, ts: int) -> dict[tuple[str, int], int]:
    found = wrapped(svc.log_offsets, partitions, "timestamp", ts)
    ok = {tp: o for tp, o in found.items() if o != -1}
    empty = [tp for tp in hash_order(found) if found[tp] == -1]
    for tp in empty:
        print(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
    ok.update(wrapped(svc.log_offsets, empty, "latest"))
    return ok


def _prepare(svc: GroupService, a, gid: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    partitions = list(dict.fromkeys(partitions))
    if a.to_offset is not None:
        return _check_range(svc, {tp: a.to_offset for tp in hash_order(partitions)})
    if a.to_earliest or a.to_latest:
        kind = "earliest" if a.to_earliest else "latest"
        found = wrapped(svc.log_offsets, partitions, kind)
        out = {}
        for tp in hash_order(partitions):
            if tp not in found:
                raise UsageExit(
                    f"Error getting {'starting' if a.to_earliest else 'ending'} offset of topic partition: {tp_str(tp)}"
                )
            out[tp] = found[tp]
        return out
    if a.shift_by is not None:
        current = wrapped(svc.committed, gid)
        requested = {}
        for tp in hash_order(partitions):
            if current.get(tp) is None:
                raise Usage(
                    f"Cannot shift offset for partition {tp_str(tp)} since there is no current committed offset"
                )
            requested[tp] = current[tp] + a.shift_by
        return _check_range(svc, requested)
    if a.to_datetime is not None:
        ts = java_datetime(a.to_datetime)
        return _timestamp_plan(svc, partitions, ts)
    if a.by_duration is not None:
        ms = java_duration_ms(a.by_duration)
        return _timestamp_plan(svc, partitions, int(time.time() * 1000) - ms)
    if a.from_file is not None:
        plan = reset_plan_from_file(a)
        mine = plan.get(gid)
        if mine is None:
            print_error(f"No reset plan for group {gid} found")
            return {}
        return _check_range(svc, {tp: mine[tp] for tp in hash_order(mine)})
    if a.to_current:
        current = wrapped(svc.committed, gid)
        with_offset = [tp for tp in partitions if current.get(tp) is not None]
        without = [tp for tp in partitions if current.get(tp) is None]
        out = {tp: current[tp] for tp in hash_order(with_offset)}
        ends = wrapped(svc.log_offsets, without, "latest")
        for tp in hash_order(without):
            if tp not in ends:
                raise UsageExit(f"Error getting ending offset of topic partition: {tp_str(tp)}")
            out[tp] = ends[tp]
        return {tp: out[tp] for tp in hash_order(out)}
    raise UsageExit(
        "Option '[reset-offsets]' requires one of the following scenarios: [" + _specs(list(_SCENARIOS)) + "]"
    )


def _timestamp_plan(svc, partitions, ts: int) -> dict[tuple[str, int], int]:
    found = _by_timestamp(svc, partitions, ts)
    out = {}
    for tp in hash_order(partitions):
        if tp not in found:
            raise UsageExit(f"Error getting offset by timestamp of topic partition: {tp_str(tp)}")
        out[tp] = found[tp]
    return out


def java_datetime(value: str) -> int:
    """Kafka's Utils.getDateTime: ``yyyy-MM-dd'T'HH:mm:ss.SSS`` with an optional zone (``Z``,
    ``+hh``, ``+hhmm``, ``+hh:mm``); no zone means UTC."""
    parts = value.split("T")
    if len(parts) < 2:
        raise JavaError(
            "java.text.ParseException", "Error parsing timestamp. It does not contain a 'T' according to ISO8601 format"
        )
    if not any(c in parts[1] for c in "+-Z"):
        value = value + "Z"
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{1,3})(Z|[+-]\d{2}(?::?\d{2})?)", value)
    bad = JavaError("java.text.ParseException", f'Unparseable date: "{value}"')
    if not m:
        raise bad
    y, mo, d, h, mi, s, ms, zone = m.groups()
    try:
        base = datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=datetime.UTC)
    except ValueError:
        raise bad from None
    offset = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        hh, mm = int(digits[:2]), int(digits[2:4] or 0)
        if hh > 23 or mm > 59:
            raise bad
        offset = sign * (hh * 3600 + mm * 60) * 1000
    return int(base.timestamp() * 1000) + int(ms) - offset


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
    r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def java_duration_ms(value: str) -> int:
    """java.time.Duration.parse (ISO-8601 ``PnDTnHnMn.nS``), in milliseconds."""
    m = _DURATION.fullmatch(value)
    if not m or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise JavaError("java.time.format.DateTimeParseException", "Text cannot be parsed to a Duration")
    neg, days, _t, hours, minutes, seconds, frac = m.groups()
    total_ns = 0
    total_ns += int(days or 0) * 86400 * 10**9
    total_ns += int(hours or 0) * 3600 * 10**9
    total_ns += int(minutes or 0) * 60 * 10**9
    sec = int(seconds or 0)
    f = int((frac or "").ljust(9, "0")) if frac else 0
    total_ns += sec * 10**9 + (-f if seconds and seconds.startswith("-") else f)
    if neg == "-":
        total_ns = -total_ns
    return total_ns // 10**6


def reset_plan_from_file(a) -> dict[str, dict[tuple[str, int], int]]:
    try:
        with open(a.from_file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise JavaError("java.lang.RuntimeException", f"java.nio.file.NoSuchFileException: {a.from_file}") from None
    except OSError as e:
        raise JavaError("java.lang.RuntimeException", f"java.io.IOException: {e}") from None
    lines = text.split("\n")
    while lines and lines[-1] == "":  # Java's split drops trailing empty strings
        lines.pop()
    single = len(a.group or []) == 1
    old_format = False
    if lines:
        try:
            _csv_no_group(lines[0])
            old_format = True
        except ValueError as e:
            print(f"com.fasterxml.jackson.databind.RuntimeJsonMappingException: {e}", file=sys.stderr)
    plan: dict[str, dict[tuple[str, int], int]] = {}
    try:
        if single and old_format:
            for line in lines:
                t, p, o = _csv_no_group(line)
                plan.setdefault(a.group[0], {})[(t, p)] = o
        else:
            for line in lines:
                g, t, p, o = _csv_with_group(line)
                plan.setdefault(g, {})[(t, p)] = o
    except ValueError as e:
        raise JavaError(
            "java.lang.RuntimeException", f"com.fasterxml.jackson.databind.RuntimeJsonMappingException: {e}"
        ) from None
    return plan


def _csv_fields(line: str) -> list[str]:
    return next(csv.reader([line.rstrip("\r")]))


def _csv_no_group(line: str) -> tuple[str, int, int]:
    f = _csv_fields(line)
    if len(f) != 3:
        raise ValueError(
            f'Too many entries: expected at most 3 (value #{len(f) - 1} ({len(f[-1])} chars) "{f[-1]}")'
            if len(f) > 3
            else f"Not enough entries in line: {line}"
        )
    return f[0], _csv_number(f[1], 32), _csv_number(f[2], 64)


def _csv_with_group(line: str) -> tuple[str, str, int, int]:
    f = _csv_fields(line)
    if len(f) != 4:
        raise ValueError(f"Wrong number of entries ({len(f)}, expected 4) in line: {line}")
    return f[0], f[1], _csv_number(f[2], 32), _csv_number(f[3], 64)


def _csv_number(s: str, bits: int) -> int:
    try:
        v = int(s.strip())
    except ValueError:
        raise ValueError(
            f"Cannot deserialize value of type `{'int' if bits == 32 else 'long'}` from String "
            f'"{s}": not a valid `{"int" if bits == 32 else "long"}` value'
        ) from None
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise ValueError(f"Numeric value ({s}) out of range")
    return v


def print_offsets_to_reset(plan: dict[str, dict[tuple[str, int], int]]) -> None:
    out = []
    if plan:
        out.append(f"\n{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}")
    for gid, offsets in plan.items():
        for (t, p), o in offsets.items():
            out.append(f"\n{gid:<30} {t:<30} {p!s:<10} {o!s:<15}")
    sys.stdout.write("".join(out) + "\n")


def export_csv(a, plan: dict[str, dict[tuple[str, int], int]]) -> str:
    single = len(a.group or []) == 1
    lines = []
    for gid, offsets in plan.items():
        for (t, p), o in offsets.items():
            lines.append(f"{_csv_quote(t)},{p},{o}\n" if single else f"{_csv_quote(gid)},{_csv_quote(t)},{p},{o}\n")
    return "".join(lines)


def _csv_quote(s: str) -> str:
    if any(c in s for c in ',"\n\r') or s != s.strip():
        return '"' + s.replace('"', '""') + '"'
    return s
