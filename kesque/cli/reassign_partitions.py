"""``kafka-reassign-partitions.sh``: move partitions between brokers (Kafka's ReassignPartitionsCommand).

    kafka-reassign-partitions.sh --bootstrap-server B --generate --topics-to-move-json-file F --broker-list 1,2,3
    kafka-reassign-partitions.sh --bootstrap-server B --execute --reassignment-json-file F [--additional]
        [--throttle N] [--replica-alter-log-dirs-throttle N]
    kafka-reassign-partitions.sh --bootstrap-server B --verify --reassignment-json-file F [--preserve-throttles]
    kafka-reassign-partitions.sh --bootstrap-server B --cancel --reassignment-json-file F
    kafka-reassign-partitions.sh --bootstrap-server B --list

The JSON files are Kafka's (``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4]}]}``,
``{"version":1,"topics":[{"topic":"t"}]}``) and so is the output, line for line. Requests go over
:mod:`kesque.client.wire`: ListPartitionReassignments / AlterPartitionReassignments to any broker
(which sends them on to the active controller), Metadata for the current replicas, DescribeCluster
for the brokers, IncrementalAlterConfigs to set the throttles as ``--execute --throttle`` does and to
clear them as ``--verify`` and ``--cancel`` do. ``log_dirs`` other than ``"any"`` move replicas
between their brokers' log dirs: AlterReplicaLogDirs and DescribeLogDirs to each replica's broker,
as Kafka's tool.

``--throttle N`` (KIP-73) sets, before the reassignment starts, ``leader.replication.throttled.replicas``
of each topic moving to the current replicas of its moving partitions (``partition:broker``),
``follower.replication.throttled.replicas`` to the replicas being added, and
``leader/follower.replication.throttled.rate`` = N on every broker involved, counting the
reassignments already in progress as Kafka's calculateProposedMoveMap does;
``--replica-alter-log-dirs-throttle N`` sets ``replica.alter.log.dirs.io.max.bytes.per.second`` on
the brokers of the ``log_dirs`` moves. Resubmitting with ``--additional`` changes them.
``--generate`` places replicas as Kafka's rack-unaware assignment (random start and shift), also
when every broker has a rack.
"""

from __future__ import annotations

import datetime
import json
import random
import sys
import time

from ..client.wire import make
from ..protocol.api_keys import ApiKeys
from ..utils import java_string_hash
from .plumbing.admin_client import ControllerAdmin, Retry, admin_properties
from .plumbing.errors import ERRORS_PKG, JavaError, TerseException, kafka_error
from .plumbing.javautil import java_hash_order, topic_partition_hash
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version
from .plumbing.progress import bar

NAME = "reassign-partitions"
SCRIPT = "kafka-reassign-partitions.sh"
DESCRIPTION = "This tool helps to move topic partitions between replicas."
HELP = "move partitions between brokers: generate, execute, verify, cancel, list (kafka-reassign-partitions.sh)"

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
ANY_LOG_DIR = "any"
_ADMIN_PKG = "org.apache.kafka.tools."
BROKER_THROTTLES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE = BROKER_THROTTLES
LEADER_REPLICAS, FOLLOWER_REPLICAS = TOPIC_THROTTLES
MUST_VERIFY = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."
)
EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override "
    "this and create a new partition assignment in addition to the existing one. The --additional flag "
    "can also be used to change the throttle by resubmitting the current reassignment."
)


def configure(p) -> None:
    for action, text in (
        (
            "verify",
            "Verify if the reassignment completed as specified by the --reassignment-json-file option. "
            "If there is a throttle engaged for the replicas specified, and the rebalance has completed, "
            "the throttle will be removed",
        ),
        (
            "generate",
            "Generate a candidate partition reassignment configuration. Note that this only generates "
            "a candidate assignment, it does not execute it.",
        ),
        ("execute", "Kick off the reassignment as specified by the --reassignment-json-file option."),
        ("cancel", "Cancel an active reassignment."),
        ("list", "List all active partition reassignments."),
    ):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument(
        "--bootstrap-server",
        nargs="?",
        const="",
        metavar="Server(s) to use for bootstrapping",
        help="the server(s) to use for bootstrapping.",
    )
    p.add_argument(
        "--command-config",
        metavar="Admin client property file",
        help="Property file containing configs to be passed to Admin Client.",
    )
    p.add_argument(
        "--reassignment-json-file",
        metavar="manual assignment json file path",
        help="The JSON file with the partition reassignment configurationThe format to use is - \n"
        '{"partitions":\n\t[{"topic": "foo",\n\t  "partition": 1,\n\t  "replicas": [1,2,3],\n'
        '\t  "log_dirs": ["dir1","dir2","dir3"] }],\n"version":1\n}\nNote that "log_dirs" '
        "is optional. When it is specified, its length must equal the length of the replicas list. "
        'The value in this list can be either "any" or the absolution path of the log directory on '
        "the broker. If absolute log directory path is specified, the replica will be moved to the "
        "specified log directory on the broker.",
    )
    p.add_argument(
        "--topics-to-move-json-file",
        metavar="topics to reassign json file path",
        help="Generate a reassignment configuration to move the partitions of the specified topics to the "
        "list of brokers specified by the --broker-list option. The format to use is - \n"
        '{"topics":\n\t[{"topic": "foo"},{"topic": "foo1"}],\n"version":1\n}',
    )
    p.add_argument(
        "--broker-list",
        metavar="brokerlist",
        help='The list of brokers to which the partitions need to be reassigned in the form "0,1,2". '
        "This is required if --topics-to-move-json-file is used to generate reassignment "
        "configuration",
    )
    p.add_argument(
        "--bootstrap-controller",
        nargs="?",
        const="",
        metavar="bootstrap controller to connect to",
        help="The controller to use for reassignment. By default, the tool will get the quorum "
        "controller. This option supports the actions --cancel and --list.",
    )
    p.add_argument("--disable-rack-aware", action="store_true", help="Disable rack aware replica assignment")
    for name, meta, text in (
        (
            "throttle",
            "throttle",
            "The movement of partitions between brokers will be throttled to this value (bytes/sec).",
        ),
        (
            "replica-alter-log-dirs-throttle",
            "replicaAlterLogDirsThrottle",
            "The movement of replicas between log directories on the same broker will be throttled to this value "
            "(bytes/sec).",
        ),
    ):
        a = p.add_argument(
            f"--{name}",
            type=int,
            default=-1,
            metavar=meta,
            help=text + " This option can be included with --execute when a reassignment is started, "
            "and it can be altered by resubmitting the current reassignment along with the "
            "--additional flag. The throttle rate should be at least 1 KB/s.",
        )
        a.jopt_kind = "Long"
    a = p.add_argument(
        "--timeout",
        type=int,
        default=10000,
        metavar="timeout",
        help="The maximum time in ms to wait for log directory replica assignment to begin.",
    )
    a.jopt_kind = "Long"
    p.add_argument(
        "--additional",
        action="store_true",
        help="Execute this reassignment in addition to any other ongoing ones. This option can also be "
        "used to change the throttle of an ongoing reassignment.",
    )
    p.add_argument("--preserve-throttles", action="store_true", help="Do not modify broker or topic throttles.")
    p.add_argument(
        "--disallow-replication-factor-change",
        action="store_true",
        help="Denies the ability to change a partition's replication factor as part of this reassignment "
        "through adding validation against it.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


# ------------------------------------------------------------------ arguments

REQUIRED = {
    "verify": ("reassignment-json-file",),
    "generate": ("topics-to-move-json-file", "broker-list"),
    "execute": ("reassignment-json-file",),
    "cancel": ("reassignment-json-file",),
    "list": (),
}


def _permitted(action: str, controller: bool) -> tuple[str, ...]:
    bootstrap = "bootstrap-controller" if controller else "bootstrap-server"
    return {
        "verify": ("bootstrap-server", "command-config", "preserve-throttles"),
        "generate": ("bootstrap-server", "broker-list", "command-config", "disable-rack-aware"),
        "execute": (
            "additional",
            "bootstrap-server",
            "command-config",
            "throttle",
            "replica-alter-log-dirs-throttle",
            "timeout",
            "disallow-replication-factor-change",
        ),
        "cancel": (bootstrap, "command-config", "preserve-throttles", "timeout"),
        "list": (bootstrap, "command-config"),
    }[action]


def _given_options(p, argv: list[str]) -> list[str]:
    """The options on the command line, in their order (jopt-simple's ``specs()``)."""
    names = {}
    for act in p._actions:
        for s in act.option_strings:
            names[s] = s.lstrip("-")
    out = []
    for tok in argv:
        name = tok.split("=", 1)[0]
        if name in names:
            full = names[name]
        else:
            full = next((v for k, v in names.items() if name.startswith("--") and k.startswith(name)), None)
        if full is not None and full not in out:
            out.append(full)
    return out


def validate(p, a) -> str:
    """Kafka's validateAndParseArgs: the action."""
    usage_or_version(a, p, DESCRIPTION)
    actions = [x for x in ACTIONS if getattr(a, x)]
    if len(actions) != 1:
        print_usage_and_exit(
            p, "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list"
        )
    action = actions[0]
    server, controller = a.bootstrap_server is not None, a.bootstrap_controller is not None
    if server and controller:
        print_usage_and_exit(p, "Please don't specify both --bootstrap-server and --bootstrap-controller")
    if not server and not controller:
        print_usage_and_exit(p, "Please specify either --bootstrap-server or --bootstrap-controller")
    check_required(p, a, *REQUIRED[action])
    allowed = {action, *REQUIRED[action], *_permitted(action, controller)}
    for opt in _given_options(p, getattr(a, "_argv", None) or sys.argv[1:]):
        if opt not in allowed:
            print_usage_and_exit(p, f'Option "[{opt}]" can\'t be used with action "[{action}]"')
    return action


# ------------------------------------------------------------------ JSON files


def _admin_failed(message: str) -> JavaError:
    return JavaError(_ADMIN_PKG + "AdminCommandFailedException", message)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        raise JavaError("java.io.IOException", f"Unable to read file {path}") from None


def _json(text: str) -> dict:
    try:
        js = json.loads(text)
    except ValueError:
        raise JavaError(_ADMIN_PKG + "AdminOperationException", "The input string is not a valid JSON") from None
    js = _object(js)
    version = _field(js, "version", _int) if "version" in js else 1
    if version != 1:
        raise JavaError(_ADMIN_PKG + "AdminOperationException", f"Not supported version field value {version}")
    return js


def _mapping_error(message: str) -> JavaError:
    return JavaError("com.fasterxml.jackson.databind.JsonMappingException", message)


def _received(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _object(value) -> dict:
    if not isinstance(value, dict):
        raise _mapping_error(f"Expected JSON object, received {_received(value)}")
    return value


def _int(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not -(1 << 31) <= value < (1 << 31):
        raise _mapping_error(f"Expected `Integer` value, received {_received(value)}")
    return value


def _str(value) -> str:
    if not isinstance(value, str):
        raise _mapping_error(f"Expected `String` value, received {_received(value)}")
    return value


def _list(convert):
    def read(value) -> list:
        if not isinstance(value, list):
            raise _mapping_error(f"Expected `JSON array` value, received {_received(value)}")
        return [convert(v) for v in value]

    return read


def _field(obj: dict, name: str, convert):
    """Kafka's JsonObject.apply(name).to(type), with its JsonMappingException messages."""
    if name not in obj:
        raise _mapping_error(f"No such field exists: `{name}`")
    return convert(obj[name])


def parse_reassignment(text: str) -> tuple[list[tuple[tuple[str, int], list[int]]], dict]:
    """([(topic-partition, replicas)] in file order, {(topic, partition, broker): log dir} of the
    log_dirs other than "any")."""
    js = _json(text)
    parts, dirs = [], {}
    for entry in _list(_object)(js["partitions"]) if "partitions" in js else []:
        tp = (_field(entry, "topic", _str), _field(entry, "partition", _int))
        replicas = _field(entry, "replicas", _list(_int))
        log_dirs = _field(entry, "log_dirs", _list(_str)) if "log_dirs" in entry else [ANY_LOG_DIR] * len(replicas)
        if len(log_dirs) != len(replicas):
            raise _admin_failed(
                f"Size of replicas list {_jlist(replicas)} is different from size of log dirs list "
                f"{_jlist(log_dirs)} for partition {tp_name(tp)}"
            )
        parts.append((tp, replicas))
        dirs.update({(tp[0], tp[1], r): d for r, d in zip(replicas, log_dirs) if d != ANY_LOG_DIR})
    return parts, dirs


def parse_topics(text: str) -> list[str]:
    js = _json(text)
    return [_field(t, "topic", _str) for t in _list(_object)(js["topics"])] if "topics" in js else []


def _duplicates(items) -> list:
    seen, dup = set(), []
    for x in items:
        if x in seen and x not in dup:
            dup.append(x)
        seen.add(x)
    return dup


def _jlist(items) -> str:
    return "[" + ", ".join(str(x) for x in items) + "]"


def _jset(items) -> str:
    """A small HashSet<Integer> / HashSet<String> as Java prints it."""
    return "[" + ", ".join(str(x) for x in _hash_ordered(items)) + "]"


def _hash_ordered(items) -> list:
    items = list(items)
    if all(isinstance(x, int) for x in items):
        return java_hash_order(sorted(items), lambda x: x)
    return java_hash_order(items, java_string_hash)


def tp_name(tp) -> str:
    return f"{tp[0]}-{tp[1]}"


def reassignment_json(assignment: dict, log_dirs: dict | None = None) -> str:
    """formatAsReassignmentJson: compact, partitions by topic then partition; each replica's log
    dir from ``log_dirs`` {(topic, partition, broker): dir}, else "any"."""
    dirs = log_dirs or {}
    parts = [
        {
            "topic": t,
            "partition": p,
            "replicas": assignment[(t, p)],
            "log_dirs": [dirs.get((t, p, r), ANY_LOG_DIR) for r in assignment[(t, p)]],
        }
        for t, p in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": parts}, separators=(",", ":"))


# ------------------------------------------------------------------ the admin calls


class ReassignAdmin(ControllerAdmin):
    def _to_controller(self, api_key: int, build):
        """To any broker (which sends it on), or with --bootstrap-controller to the active controller."""
        if not self.controllers:
            return self.send_any(api_key, build)
        if self.active is None:
            self.describe_cluster()
        if self.active is None:
            raise Retry("no active controller")
        resp = self.send(self.active, api_key, build)
        if int(resp.error_code) == 41:  # NOT_CONTROLLER: find the new one
            self.active = None
            raise Retry("not the active controller")
        return resp

    def list_reassignments(self, tps=None) -> dict:
        """{(topic, partition): (replicas, adding, removing)} (listPartitionReassignments)."""

        def build(mod, v):
            topics = None
            if tps is not None:
                by_topic: dict = {}
                for t, p in tps:
                    by_topic.setdefault(t, []).append(p)
                topics = tuple(
                    make(mod.request.ListPartitionReassignmentsTopics, name=t, partition_indexes=tuple(ps))
                    for t, ps in by_topic.items()
                )
            return make(mod.request.ListPartitionReassignmentsRequest, timeout=_ms(self.api_timeout_ms), topics=topics)

        def once():
            resp = self._to_controller(ApiKeys.LIST_PARTITION_REASSIGNMENTS, build)
            if int(resp.error_code):
                raise kafka_error(int(resp.error_code), resp.error_message)
            return {
                (t.name, int(p.partition_index)): _ints(p.replicas, p.adding_replicas, p.removing_replicas)
                for t in resp.topics
                for p in t.partitions
            }

        return self.retrying("listPartitionReassignments", once)

    def alter_reassignments(self, targets: dict, allow_rf_change: bool = True) -> dict:
        """{(topic, partition): JavaError} of the partitions refused (targets: replicas or None to cancel)."""

        def build(mod, v):
            by_topic: dict = {}
            for (t, p), replicas in targets.items():
                by_topic.setdefault(t, []).append(
                    make(
                        mod.request.ReassignablePartition,
                        partition_index=p,
                        replicas=None if replicas is None else tuple(replicas),
                    )
                )
            return make(
                mod.request.AlterPartitionReassignmentsRequest,
                timeout=_ms(self.api_timeout_ms),
                allow_replication_factor_change=allow_rf_change,
                topics=tuple(
                    make(mod.request.ReassignableTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                ),
            )

        def once():
            resp = self._to_controller(ApiKeys.ALTER_PARTITION_REASSIGNMENTS, build)
            if int(resp.error_code):
                err = kafka_error(int(resp.error_code), resp.error_message)
                return {tp: err for tp in targets}
            return {
                (t.name, int(p.partition_index)): kafka_error(int(p.error_code), p.error_message)
                for t in resp.responses
                for p in t.partitions
                if int(p.error_code)
            }

        return self.retrying("alterPartitionReassignments", once)

    def broker_ids(self) -> list[int]:
        self.retrying("listNodes", self.describe_cluster)
        return sorted(self.brokers)

    def broker_racks(self) -> dict:
        resp = self.retrying("listNodes", self.describe_cluster)
        return {int(b.broker_id): b.rack for b in resp.brokers}

    def replicas_of(self, topics) -> dict:
        """{(topic, partition): replicas} of ``topics`` (describeTopics); an unknown topic is
        UnknownTopicOrPartitionException "Topic t not found."."""
        md = self.retrying("describeTopics", lambda: self.metadata(sorted(set(topics))))
        out = {}
        for name in topics:
            err, _internal, parts = md.get(name, (3, False, []))
            if err == 3:
                raise JavaError(
                    "java.util.concurrent.ExecutionException",
                    f"{ERRORS_PKG}UnknownTopicOrPartitionException: Topic {name} not found.",
                )
            if err:
                raise kafka_error(err)
            out.update({(name, pid): replicas for pid, _e, _leader, replicas in parts})
        return out

    def replica_log_dirs(self, assignment: dict) -> dict:
        """{(topic, partition, broker): log dir} of the replicas of ``assignment`` whose broker
        reports them (describeReplicaLogDirs: DescribeLogDirs to each broker)."""
        return {
            r: current
            for r, (current, _future) in self.describe_replica_log_dirs(
                [(t, p, b) for (t, p), replicas in assignment.items() for b in replicas]
            ).items()
            if current
        }

    def describe_replica_log_dirs(self, replicas) -> dict:
        """{(topic, partition, broker): (current log dir, future log dir)} (None where there is
        none) of the ``replicas`` whose broker answered: DescribeLogDirs to each broker."""
        by_broker: dict = {}
        for t, p, b in replicas:
            by_broker.setdefault(b, {}).setdefault(t, []).append(p)
        out = {}
        for b, topics in sorted(by_broker.items()):

            def build(mod, v, topics=topics):
                rq = mod.request
                return make(
                    rq.DescribeLogDirsRequest,
                    topics=tuple(
                        make(rq.DescribableLogDirTopic, topic=t, partitions=tuple(ps)) for t, ps in topics.items()
                    ),
                )

            try:
                resp = self.send(self.node(b), ApiKeys.DESCRIBE_LOG_DIRS, build)
            except Retry:
                continue
            found: dict = {(t, p, b): [None, None] for t, ps in topics.items() for p in ps}
            for r in resp.results:
                if int(r.error_code):
                    continue
                for t in r.topics:
                    for p in t.partitions:
                        key = (t.name, int(p.partition_index), b)
                        if key in found:
                            found[key][1 if p.is_future_key else 0] = r.log_dir
            out.update({k: tuple(v) for k, v in found.items()})
        return out

    def alter_replica_log_dirs(self, moves: dict) -> dict:
        """AlterReplicaLogDirs to each replica's broker: {(topic, partition, broker): error code}."""
        by_broker: dict = {}
        for (t, p, b), d in moves.items():
            by_broker.setdefault(b, {}).setdefault(d, {}).setdefault(t, []).append(p)
        out = {}
        for b, dirs in sorted(by_broker.items()):

            def build(mod, v, dirs=dirs):
                rq = mod.request
                return make(
                    rq.AlterReplicaLogDirsRequest,
                    dirs=tuple(
                        make(
                            rq.AlterReplicaLogDir,
                            path=d,
                            topics=tuple(
                                make(rq.AlterReplicaLogDirTopic, name=t, partitions=tuple(ps)) for t, ps in ts.items()
                            ),
                        )
                        for d, ts in dirs.items()
                    ),
                )

            resp = self.send(self.node(b), ApiKeys.ALTER_REPLICA_LOG_DIRS, build)
            for t in resp.results:
                for p in t.partitions:
                    out[(t.topic_name, int(p.partition_index), b)] = int(p.error_code)
        return out

    def delete_configs(self, resources: list[tuple[int, str, tuple[str, ...]]]) -> None:
        """IncrementalAlterConfigs DELETE of ``names`` on each (resource type, name, names)."""
        self._alter_configs([(rtype, name, [(k, 1, None) for k in keys]) for rtype, name, keys in resources])

    def set_configs(self, resources: list[tuple[int, str, dict[str, str]]]) -> None:
        """IncrementalAlterConfigs SET of each (resource type, name, {key: value})."""
        self._alter_configs(
            [(rtype, name, [(k, 0, v) for k, v in values.items()]) for rtype, name, values in resources]
        )

    def _alter_configs(self, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> None:
        """One IncrementalAlterConfigs of (resource type, name, [(key, operation, value)]);
        the first resource refused raises its error, as ``all().get()``."""
        if not resources:
            return

        def build(mod, v):
            return make(
                mod.request.IncrementalAlterConfigsRequest,
                validate_only=False,
                resources=tuple(
                    make(
                        mod.request.AlterConfigsResource,
                        resource_type=rtype,
                        resource_name=name,
                        configs=tuple(
                            make(mod.request.AlterableConfig, name=k, config_operation=op, value=value)
                            for k, op, value in ops
                        ),
                    )
                    for rtype, name, ops in resources
                ),
            )

        def once():
            resp = self.send_any(ApiKeys.INCREMENTAL_ALTER_CONFIGS, build)
            for r in resp.responses:
                if int(r.error_code):
                    raise kafka_error(int(r.error_code), r.error_message)

        self.retrying("incrementalAlterConfigs", once)


def _ints(*lists) -> tuple[list[int], ...]:
    return tuple([int(x) for x in xs] for xs in lists)


def _ms(ms: int):
    return datetime.timedelta(milliseconds=ms)


# ------------------------------------------------------------------ the actions


def generate(admin: ReassignAdmin, a) -> None:
    try:
        brokers = [int(b) for b in a.broker_list.split(",")]
    except ValueError as e:
        raise JavaError(
            "java.lang.NumberFormatException", f'For input string: "{str(e).split(": ", 1)[-1].strip(chr(39))}"'
        ) from None
    if _duplicates(brokers):
        raise _admin_failed(f"Broker list contains duplicate entries: {_jset(_duplicates(brokers))}")
    topics = parse_topics(_read(a.topics_to_move_json_file))
    if _duplicates(topics):
        raise _admin_failed(f"List of topics to reassign contains duplicate entries: {_jset(_duplicates(topics))}")
    current = admin.replicas_of(topics)
    racks = {b: r for b, r in admin.broker_racks().items() if b in set(brokers)}
    rackless = [b for b, r in racks.items() if r is None]
    if not a.disable_rack_aware and rackless and len(rackless) != len(racks):
        raise JavaError(
            _ADMIN_PKG + "AdminOperationException",
            "Not all brokers have rack information. Add --disable-rack-aware in command line to make "
            "replica assignment without rack information.",
        )
    proposed = {}
    for topic in dict.fromkeys(t for t, _p in current):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        for pid, replicas in assign_replicas(sorted(racks), len(parts), rf).items():
            proposed[(topic, pid)] = replicas
    print(f"Current partition replica assignment\n{reassignment_json(current, admin.replica_log_dirs(current))}\n")
    print(f"Proposed partition reassignment configuration\n{reassignment_json(proposed)}")


def assign_replicas(brokers: list[int], partitions: int, rf: int, rng=random) -> dict[int, list[int]]:
    """AdminUtils.assignReplicasToBrokers without racks: the first replicas round-robin from a
    random broker, the followers shifted by a random amount that grows each round."""
    if partitions <= 0:
        raise JavaError(ERRORS_PKG + "InvalidPartitionsException", "Number of partitions must be larger than 0.")
    if rf <= 0:
        raise JavaError(ERRORS_PKG + "InvalidReplicationFactorException", "Replication factor must be larger than 0.")
    if rf > len(brokers):
        raise JavaError(
            ERRORS_PKG + "InvalidReplicationFactorException",
            f"Replication factor: {rf} larger than available brokers: {len(brokers)}.",
        )
    n = len(brokers)
    start, shift = rng.randrange(n), rng.randrange(n)
    out = {}
    for pid in range(partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        out[pid] = [brokers[first]] + [brokers[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(rf - 1)]
    return out


def execute(admin: ReassignAdmin, a) -> None:
    parts, dirs = parse_reassignment(_read(a.reassignment_json_file))
    if not parts:
        raise _admin_failed("Partition reassignment list cannot be empty")
    if any(not replicas for _tp, replicas in parts):
        raise _admin_failed("Partition replica list cannot be empty")
    dup = _duplicates(tp for tp, _r in parts)
    if dup:
        raise _admin_failed(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(tp_name(tp) for tp in _hash_ordered_tps(dup))
        )
    dup_replicas = [(tp, _duplicates(r)) for tp, r in parts if _duplicates(r)]
    if dup_replicas:
        raise _admin_failed(
            "Partition replica lists may not contain duplicate entries: "
            + ". ".join(
                f"{tp_name(tp)} contains multiple entries for {','.join(str(x) for x in _hash_ordered(d))}"
                for tp, d in dup_replicas
            )
        )
    proposed = dict(parts)
    ongoing = admin.list_reassignments()
    if not a.additional and ongoing:
        raise TerseException(EXISTING)
    known = set(admin.broker_ids())
    unknown = next((b for r in proposed.values() for b in r if b not in known), None)
    if unknown is not None:
        raise _admin_failed(f"Unknown broker id {unknown}")
    current = admin.replicas_of(list(dict.fromkeys(t for t, _p in proposed)))
    missing = [tp for tp in proposed if tp not in current]
    if missing:
        raise JavaError(
            "java.util.concurrent.ExecutionException",
            f"{ERRORS_PKG}UnknownTopicOrPartitionException: Unable to find partition: "
            + ", ".join(tp_name(tp) for tp in missing),
        )
    moving = {tp: current[tp] for tp in proposed}
    print(
        "Current partition replica assignment\n\n"
        f"{reassignment_json(moving, admin.replica_log_dirs(moving))}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    if a.throttle >= 0 or a.replica_alter_log_dirs_throttle >= 0:
        print(MUST_VERIFY)
        if a.throttle >= 0:
            set_reassignment_throttle(admin, move_map(ongoing, proposed, current), a.throttle)
        if a.replica_alter_log_dirs_throttle >= 0:
            rate = str(a.replica_alter_log_dirs_throttle)
            admin.set_configs([(4, str(b), {LOG_DIR_RATE: rate}) for b in sorted({b for _t, _p, b in dirs})])
            print(f"The replica-alter-dir throttle limit was set to {rate} B/s")
    errors = admin.alter_reassignments(proposed, not a.disallow_replication_factor_change)
    if errors:
        raise TerseException(
            "Error reassigning partition(s):\n"
            + "\n".join(f"{tp_name(tp)}: {errors[tp].message}" for tp in sorted(errors))
        )
    print(
        f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} for "
        + ",".join(tp_name(tp) for tp in sorted(proposed))
    )
    if dirs:
        execute_moves(admin, dirs, a.timeout)


def move_map(ongoing: dict, proposed: dict, current: dict) -> dict[str, dict[int, tuple[set, set]]]:
    """Kafka's calculateProposedMoveMap: {topic: {partition: (sources, destinations)}} of the
    reassignments in progress (sources: the replicas less those being added; destinations: those
    being added) and of the proposed ones (sources: those of the partition's reassignment in
    progress, else its current replicas; destinations: the proposed replicas less the sources)."""
    moves: dict[str, dict[int, tuple[set, set]]] = {}
    for (t, p), (replicas, adding, _removing) in ongoing.items():
        moves.setdefault(t, {})[p] = (set(replicas) - set(adding), set(adding))
    for (t, p), replicas in proposed.items():
        parts = moves.setdefault(t, {})
        sources = parts[p][0] if p in parts else set(current[(t, p)])
        parts[p] = (sources, set(replicas) - sources)
    return moves


def throttled_replicas(moves: dict) -> tuple[dict[str, str], dict[str, str]]:
    """calculateLeaderThrottles / calculateFollowerThrottles: per topic of ``moves``, its
    ``partition:broker`` entries of the sources (leader) and of the destinations that are not
    sources (follower), each list in Java's TreeSet<String> order."""
    leader, follower = {}, {}
    for topic, parts in moves.items():
        leader[topic] = ",".join(sorted({f"{p}:{b}" for p, (src, _dst) in parts.items() for b in src}))
        follower[topic] = ",".join(sorted({f"{p}:{b}" for p, (src, dst) in parts.items() for b in dst - src}))
    return leader, follower


def set_reassignment_throttle(admin: ReassignAdmin, moves: dict, rate: int) -> None:
    """modifyReassignmentThrottle: the topics' throttled replica lists, then the rates of every
    broker a move involves."""
    leader, follower = throttled_replicas(moves)
    admin.set_configs([(2, t, {LEADER_REPLICAS: leader[t], FOLLOWER_REPLICAS: follower[t]}) for t in moves])
    brokers = sorted({b for parts in moves.values() for src, dst in parts.values() for b in src | dst})
    admin.set_configs([(4, str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}) for b in brokers])
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def _replica_order(r):
    """Kafka's compareTopicPartitionReplicas: broker, topic, partition."""
    return r[2], r[0], r[1]


def replica_name(r) -> str:
    return f"{r[0]}-{r[1]}-{r[2]}"  # TopicPartitionReplica.toString


def execute_moves(admin: ReassignAdmin, moves: dict, timeout_ms: int) -> None:
    """AlterReplicaLogDirs until each replica's move has started (a replica that is not on its
    new broker yet answers REPLICA_NOT_AVAILABLE: asked again every 100 ms until --timeout)."""

    pending = dict(moves)
    deadline = time.monotonic() + timeout_ms / 1000
    # waiting for replicas to reach their brokers: a bar on a terminal (issue 29)
    progress = bar(len(moves), "Starting log dir moves", "replica", quiet=False)
    try:
        _start_moves(admin, pending, deadline, progress)
    finally:
        progress.close()


def _start_moves(admin: ReassignAdmin, pending: dict, deadline: float, progress) -> None:
    while True:
        errors = admin.alter_replica_log_dirs(pending)
        failed = sorted((r for r, code in errors.items() if code not in (0, 9)), key=_replica_order)
        if failed:
            r = failed[0]
            raise TerseException(f"Failed to alter dir for {replica_name(r)}: {kafka_error(errors[r]).message}")
        for r in sorted((r for r, code in errors.items() if code == 0), key=_replica_order):
            print(
                f"Successfully started moving log directory to {pending[r]} for replica {r[0]}-{r[1]} with broker "
                f"{r[2]} "
            )
            del pending[r]
            progress.update(1)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TerseException(
                f"Timed out before log directory move{'' if len(pending) == 1 else 's'} could be "
                "started for: " + ",".join(replica_name(r) for r in sorted(pending, key=_replica_order))
            )
        time.sleep(0.1)


def move_states(admin: ReassignAdmin, moves: dict) -> dict:
    """findLogDirMoveStates: {replica: (state, current dir, target dir, future dir)}."""
    infos = admin.describe_replica_log_dirs(list(moves))
    out = {}
    for r, target in moves.items():
        if r not in infos:
            out[r] = ("missing-replica", None, target, None)
            continue
        current, future = infos[r]
        if current is None:
            out[r] = ("missing-log-dir", None, target, None)
        elif future is None:
            out[r] = ("completed" if current == target else "cancelled", current, target, None)
        else:
            out[r] = ("active", current, target, future)
    return out


def move_states_text(states: dict) -> str:
    """replicaMoveStatesToString."""
    lines = []
    for r in sorted(states, key=_replica_order):
        state, current, target, future = states[r]
        where = f"Partition {r[0]}-{r[1]}"
        if state == "missing-log-dir":
            lines.append(
                f"{where} is not found in any live log dir on broker {r[2]}. There is likely an offline log "
                "directory on the broker."
            )
        elif state == "missing-replica":
            lines.append(f"{where} cannot be found in any live log directory on broker {r[2]}.")
        elif state == "active":
            lines.append(
                f"Reassignment of replica {replica_name(r)} is still in progress."
                if target == future
                else f"{where} on broker {r[2]} is being moved to log dir {future} instead of {target}."
            )
        elif state == "cancelled":
            lines.append(f"{where} on broker {r[2]} is not being moved from log dir {current} to {target}.")
        else:
            lines.append(f"Reassignment of replica {replica_name(r)} completed successfully.")
    return "\n".join(lines)


def _hash_ordered_tps(tps) -> list:
    return java_hash_order(list(tps), topic_partition_hash)


def verify(admin: ReassignAdmin, a) -> None:
    parts, dirs = parse_reassignment(_read(a.reassignment_json_file))
    ongoing = admin.list_reassignments()
    states = {}
    unknown_topics = {t for (t, _p), _r in parts if (t, _p) not in ongoing}
    current = {}
    for topic in sorted(unknown_topics):
        try:
            current.update(admin.replicas_of([topic]))
        except JavaError as e:
            if "UnknownTopicOrPartitionException" not in e.message:
                raise
    for tp, target in parts:
        if tp in ongoing:
            states[tp] = (ongoing[tp][0], target, False)
        else:
            states[tp] = (current.get(tp, []), target, True)
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        replicas, target, done = states[tp]
        if not done:
            lines.append(f"Reassignment of partition {tp_name(tp)} is still in progress.")
        elif replicas == target:
            lines.append(f"Reassignment of partition {tp_name(tp)} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp_name(tp)}, but replica set is "
                f"{','.join(map(str, replicas))} rather than {','.join(map(str, target))}."
            )
    print("\n".join(lines))
    states = move_states(admin, dirs)
    print(move_states_text(states))
    if not ongoing and all(st[0] == "completed" for st in states.values()) and not a.preserve_throttles:
        clear_throttles(admin, parts)


def clear_throttles(admin: ReassignAdmin, parts) -> None:
    brokers = set(admin.broker_ids()) | {b for _tp, r in parts for b in r}
    print(
        f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
        + ",".join(str(b) for b in _hash_ordered(brokers))
    )
    admin.delete_configs([(4, str(b), BROKER_THROTTLES) for b in _hash_ordered(brokers)])
    topics = list(dict.fromkeys(t for (t, _p), _r in parts))
    print(
        f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} " + ",".join(_hash_ordered(topics))
    )
    admin.delete_configs([(2, t, TOPIC_THROTTLES) for t in topics])


def cancel(admin: ReassignAdmin, a) -> None:
    parts, dirs = parse_reassignment(_read(a.reassignment_json_file))
    found = admin.list_reassignments([tp for tp, _r in parts])
    # as Kafka's tool: a reassignment that only adds replicas is not cancelled
    active = sorted(tp for tp, (_r, adding, removing) in found.items() if not adding or removing)
    if active:
        errors = admin.alter_reassignments({tp: None for tp in active})
        if errors:
            raise TerseException(
                f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n"
                + "\n".join(f"{tp_name(tp)}: {errors[tp].message}" for tp in sorted(errors))
            )
        print(
            f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: "
            + ",".join(tp_name(tp) for tp in active)
        )
    else:
        print("None of the specified partition reassignments are active.")
    moving = {r: st[1] for r, st in move_states(admin, dirs).items() if st[0] == "active"}
    if moving:
        execute_moves(admin, moving, a.timeout)  # back to the dir each replica is in: the copy is dropped
    else:
        sys.stdout.write("None of the specified partition moves are active.")
    if not a.preserve_throttles:
        clear_throttles(admin, parts)


def list_(admin: ReassignAdmin, _a) -> None:
    found = admin.list_reassignments()
    if not found:
        print("No partition reassignments found.")
        return
    lines = ["Current partition reassignments:"]
    for tp in sorted(found):
        replicas, adding, removing = found[tp]
        line = f"{tp_name(tp)}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        lines.append(line)
    print("\n".join(lines))


def run(a) -> int:
    p = a._parser
    action = validate(p, a)
    admin = None
    try:
        props = admin_properties(a.command_config)
        props.setdefault("client.id", "reassign-partitions-tool")
        controller = a.bootstrap_controller is not None
        admin = ReassignAdmin(a.bootstrap_controller if controller else a.bootstrap_server, props, controller)
        {"generate": generate, "execute": execute, "verify": verify, "cancel": cancel, "list": list_}[action](admin, a)
    except TerseException as e:
        print(e)
        return 1
    except JavaError as e:
        # Kafka prints "Error: " + getMessage() and the stack trace, whose first line names the exception
        print(f"Error: {e.message}")
        print(f"{e.java_class}: {e.message}")
        return 1
    except Retry as e:
        print(f"Error: {e}")
        return 1
    finally:
        if admin is not None:
            admin.close()
    return 0
