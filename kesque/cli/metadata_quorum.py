"""``kafka-metadata-quorum.sh``: the state of the KRaft metadata quorum (Kafka's MetadataQuorumCommand).

    kafka-metadata-quorum.sh (--bootstrap-server HOST:PORT | --bootstrap-controller HOST:PORT)
        [--command-config FILE] describe (--status | --replication [--human-readable])

``describe --status`` prints the summary (cluster id, leader, epoch, high watermark, the largest
follower lag in offsets and in ms, the voters and observers with their endpoints),
``describe --replication`` one row per replica: the leader, the other voters in the order the
leader lists them, then the observers, as Kafka's ``ToolsUtils.prettyPrintTable`` (each cell
padded and followed by a tab). ``--human-readable`` shows the timestamps as ``N ms ago``.

The tool sends what Kafka's Admin client sends: DescribeCluster (``--status`` only, for the
cluster id) and DescribeQuorum for ``__cluster_metadata-0``, to any broker with
``--bootstrap-server`` (the broker forwards it to the active controller), to the active
controller (DescribeCluster's ``controller_id``) with ``--bootstrap-controller``. Retriable
errors are retried every ``retry.backoff.ms`` until ``default.api.timeout.ms``, then reported as
Kafka's TimeoutException. Failures print the Java exception's message on stderr (Kafka's tool
adds a Java stack trace) and exit 1; argparse4j usage errors print the usage and
``kafka-metadata-quorum: error: ...``. ``add-controller`` and ``remove-controller`` are parsed as in
Kafka but not done: kesque has no dynamic voter changes (KIP-853 AddRaftVoter/RemoveRaftVoter).
"""

from __future__ import annotations

import sys
import time

from ..client.wire import make
from ..protocol.api_keys import ApiKeys
from .plumbing.admin_client import ControllerAdmin, Retry, admin_for, run_admin
from .plumbing.argparse4j import ArgParser, ArgumentParserException, ParserExit
from .plumbing.errors import ERRORS_PKG, JavaError, TerseException
from .plumbing.javautil import kafka_uuid, pretty_print_table
from .plumbing.run import exit_flushed, run_tool

NAME = "metadata-quorum"
SCRIPT = "kafka-metadata-quorum.sh"
PROG = "kafka-metadata-quorum"
DESCRIPTION = "This tool describes kraft metadata quorum status."
HELP = "describe the KRaft metadata quorum (kafka-metadata-quorum.sh)"

METADATA_TOPIC = "__cluster_metadata"
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
REPLICATION_HEADERS = [
    "NodeId",
    "DirectoryId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
]


def build_parser() -> ArgParser:
    p = ArgParser(PROG, DESCRIPTION)
    g = p.add_mutex_group(required=True)
    p.add_argument(
        "--bootstrap-server",
        group=g,
        help="A comma-separated list of host:port pairs to use for establishing the connection to the Kafka cluster.",
    )
    p.add_argument(
        "--bootstrap-controller",
        group=g,
        help="A comma-separated list of host:port pairs to use for establishing the connection to the "
        "Kafka controllers.",
    )
    p.add_argument(
        "--command-config",
        help="Property file containing configs to be passed to Admin Client. For add-controller, the file "
        "is used to specify the controller properties as well.",
    )
    p.add_subparsers(
        dest="command", title="positional arguments", metavar="{describe,add-controller,remove-controller}"
    )

    s = p.add_parser("describe", help="Describe the metadata quorum info")
    g = s.add_group("Status", "")
    s.add_argument(
        "--status",
        action="store_true",
        group=g,
        help="A short summary of the quorum status and the other provides detailed information about the "
        "status of replication.",
    )
    g = s.add_group("Replication", "")
    s.add_argument(
        "--replication", action="store_true", group=g, help="Detailed information about the status of replication"
    )
    s.add_argument("--human-readable", action="store_true", group=g, help="Human-readable output")

    s = p.add_parser("add-controller", help="Add a controller to the KRaft controller cluster")
    s.add_argument("--dry-run", action="store_true", help="True if we should print what would be done, but not do it.")

    s = p.add_parser("remove-controller", help="Remove a controller from the KRaft controller cluster")
    s.add_argument("--controller-id", "-i", type="Integer", required=True, help="The id of the controller to remove.")
    s.add_argument(
        "--controller-directory-id", "-d", required=True, help="The directory ID of the controller to remove."
    )
    s.add_argument("--dry-run", action="store_true", help="True if we should print what would be done, but not do it.")
    s.add_argument(
        "--unregister",
        action="store_true",
        help="If set, also unregister the controller after successfully removing it from the voter set.",
    )
    return p


# ============================================================================ the Admin client calls


class QuorumAdmin(ControllerAdmin):
    """Kafka's Admin client as MetadataQuorumCommand uses it, to brokers or to controllers."""

    def describe_quorum(self):
        """``describeMetadataQuorum().quorumInfo()``: the PartitionData and the nodes of the answer."""
        return self.retrying("describeMetadataQuorum", self._describe_quorum_once)

    def _describe_quorum_once(self):
        def build(mod, v):
            rq = mod.request
            return make(
                rq.DescribeQuorumRequest,
                topics=(
                    make(
                        rq.TopicData, topic_name=METADATA_TOPIC, partitions=(make(rq.PartitionData, partition_index=0),)
                    ),
                ),
            )

        if self.controllers:  # LeastLoadedBrokerOrActiveKController: the active controller
            if self.active is None:
                self.describe_cluster()
            if self.active is None:
                raise Retry("no active controller")
            resp = self.send(self.active, ApiKeys.DESCRIBE_QUORUM, build)
        else:
            resp = self.send_any(ApiKeys.DESCRIBE_QUORUM, build)
        if int(resp.error_code):
            self.active = None
            raise self.error_for(int(resp.error_code), resp.error_message)
        if len(resp.topics) != 1:
            raise self.unknown_error(f"DescribeMetadataQuorum received {len(resp.topics)} topics when 1 was expected")
        topic = resp.topics[0]
        if topic.topic_name != METADATA_TOPIC:
            raise self.unknown_error(
                f"DescribeMetadataQuorum received a topic with name {topic.topic_name} when "
                f"{METADATA_TOPIC} was expected"
            )
        if len(topic.partitions) != 1:
            raise self.unknown_error(
                f"DescribeMetadataQuorum received a topic {topic.topic_name} with "
                f"{len(topic.partitions)} partitions when 1 was expected"
            )
        part = topic.partitions[0]
        if int(part.partition_index) != 0:
            raise self.unknown_error(
                f"DescribeMetadataQuorum received a single partition with index "
                f"{int(part.partition_index)} when 0 was expected"
            )
        if int(part.error_code):
            self.active = None
            raise self.error_for(int(part.error_code), part.error_message)
        return part, getattr(resp, "nodes", ())


# ============================================================================ the commands


def _opt_ms(v) -> int | None:
    """OptionalLong from a DescribeQuorum timestamp (-1: empty)."""
    v = int(v)
    return None if v == -1 else v


def relative_time_ms(timestamp_ms: int, desc: str, now_ms: int | None = None) -> int:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if not 0 < timestamp_ms <= now_ms:
        raise JavaError(
            "org.apache.kafka.common.KafkaException",
            "Error while computing relative time, possible drift in system clock.\n"
            f"Current timestamp is {now_ms}, {desc} timestamp is {timestamp_ms}",
        )
    return now_ms - timestamp_ms


def _leader(part):
    leader = next((v for v in part.current_voters if int(v.replica_id) == int(part.leader_id)), None)
    if leader is None:  # Optional.get() of no leader among the voters
        raise JavaError("java.util.NoSuchElementException", "No value present")
    return leader


def _directory_id(replica) -> str:
    d = getattr(replica, "replica_directory_id", None)
    return ZERO_UUID if d is None else kafka_uuid(d)


def replication_rows(part, human_readable: bool) -> list[list[str]]:
    leader = _leader(part)

    def stamp(v, desc: str) -> str:
        ms = _opt_ms(v)
        if ms is None:
            return "-1"
        return f"{relative_time_ms(ms, desc)} ms ago" if human_readable else str(ms)

    def rows(replicas, status: str) -> list[list[str]]:
        return [
            [
                str(int(r.replica_id)),
                _directory_id(r),
                str(int(r.log_end_offset)),
                str(int(leader.log_end_offset) - int(r.log_end_offset)),
                stamp(r.last_fetch_timestamp, "last fetch"),
                stamp(r.last_caught_up_timestamp, "last caught up"),
                status,
            ]
            for r in replicas
        ]

    followers = [v for v in part.current_voters if int(v.replica_id) != int(part.leader_id)]
    return rows([leader], "Leader") + rows(followers, "Follower") + rows(part.observers, "Observer")


def _endpoint(listener) -> str:
    host = listener.host if ":" not in listener.host else f"[{listener.host}]"
    return f"{listener.name}://{host}:{int(listener.port)}"


def _replica_states(replicas, nodes) -> str:
    """CurrentVoters / CurrentObservers: ``[{"id": 1, "directoryId": "...", "endpoints": [...]}, ...]``
    (no directoryId for the zero uuid, no endpoints for a node the answer does not list)."""
    by_id = {int(n.node_id): n for n in nodes}
    out = []
    for r in replicas:
        text = f'{{"id": {int(r.replica_id)}'
        if _directory_id(r) != ZERO_UUID:
            text += f', "directoryId": "{_directory_id(r)}"'
        node = by_id.get(int(r.replica_id))
        if node is not None and node.listeners:
            text += ', "endpoints": [' + ", ".join(f'"{_endpoint(lst)}"' for lst in node.listeners) + "]"
        out.append(text + "}")
    return "[" + ", ".join(out) + "]"


def status_text(cluster_id: str, part, nodes) -> str:
    leader = _leader(part)
    laggard = min(part.current_voters, key=lambda v: int(v.log_end_offset))  # the first of the smallest
    max_lag = int(leader.log_end_offset) - int(laggard.log_end_offset)
    lead_caught_up, lag_caught_up = _opt_ms(leader.last_caught_up_timestamp), _opt_ms(laggard.last_caught_up_timestamp)
    if laggard is leader:
        lag_ms = 0
    elif lead_caught_up is not None and lag_caught_up is not None:
        lag_ms = lead_caught_up - lag_caught_up
    else:
        lag_ms = -1
    return (
        f"ClusterId:              {cluster_id}\n"
        f"LeaderId:               {int(part.leader_id)}\n"
        f"LeaderEpoch:            {int(part.leader_epoch)}\n"
        f"HighWatermark:          {int(part.high_watermark)}\n"
        f"MaxFollowerLag:         {max_lag}\n"
        f"MaxFollowerLagTimeMs:   {lag_ms}\n"
        f"CurrentVoters:          {_replica_states(part.current_voters, nodes)}\n"
        f"CurrentObservers:       {_replica_states(part.observers, nodes)}\n"
    )


def _describe(admin: QuorumAdmin, ns: dict) -> None:
    if ns["status"] and ns["replication"]:
        raise TerseException("Only one of --status or --replication should be specified with describe sub-command")
    if ns["replication"]:
        part, _nodes = admin.describe_quorum()
        rows = replication_rows(part, bool(ns["human_readable"]))
        pretty_print_table(REPLICATION_HEADERS, rows)
    elif ns["status"]:
        if ns["human_readable"]:
            raise TerseException("The option --human-readable is only supported along with --replication")
        cluster_id = admin.cluster_id()
        part, nodes = admin.describe_quorum()
        sys.stdout.write(status_text(cluster_id, part, nodes))
    else:
        raise TerseException("One of --status or --replication must be specified with describe sub-command")


def _not_supported(what: str) -> JavaError:
    return JavaError(
        ERRORS_PKG + "UnsupportedVersionException", f"kesque does not support dynamic controller membership ({what})"
    )


def execute(argv: list[str]) -> int:
    """MetadataQuorumCommand.mainNoExit: parse, make the Admin client, run the command."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except ArgumentParserException as e:
        parser.handle_error(e)
        return 0 if e.kind == "help" else 1
    except ParserExit as e:
        return e.code

    def command(admin) -> None:
        if ns["command"] == "describe":
            _describe(admin, ns)
        elif ns["command"] == "add-controller":
            if ns["command_config"] is None:
                raise TerseException(
                    "You must supply the configuration file of the controller you are adding when using add-controller."
                )
            raise _not_supported("AddRaftVoter")
        else:
            raise _not_supported("RemoveRaftVoter")

    return run_admin(lambda: admin_for(QuorumAdmin, ns, ns["command_config"]), command)


def main(argv: list[str] | None = None) -> int:
    """``kesque metadata-quorum ...`` (the arguments after the subcommand)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_tool(execute, argv)


def kafka_metadata_quorum() -> None:
    """The ``kafka-metadata-quorum.sh`` console script."""
    exit_flushed(main())
