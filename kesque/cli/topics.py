"""``kafka-topics.sh``: create, delete, describe, alter (partitions) and list topics.

Options, validation messages and output follow Kafka's TopicCommand: ``Created topic X.``,
the describe lines (``Topic: X<TAB>TopicId: ...`` then one indented line per partition),
and errors as ``Error while executing topic command : <message>`` with exit status 1.
"""

from __future__ import annotations

import datetime
import re
import sys
from types import SimpleNamespace as NS

import kio.schema.describe_topic_partitions.v0.request as rq
from confluent_kafka import TopicCollection

from ..client.wire import Connection, make
from ..protocol.api_keys import ApiKeys
from .plumbing import admin_client
from .plumbing.errors import BrokerError, error_message
from .plumbing.javautil import kafka_uuid
from .plumbing.jopt import check_invalid, check_required, print_usage_and_exit, usage_or_version
from .plumbing.run import ToolExit

NAME = "topics"
SCRIPT = "kafka-topics.sh"
DESCRIPTION = "This tool helps to create, delete, describe, or change a topic."
HELP = "create, delete, describe, alter or list topics (kafka-topics.sh)"

_ALTER_CONFIGS_HINT = " (To alter topic configurations, the kafka-configs tool can be used.)"
_ACTIONS = ("list", "create", "alter", "describe", "delete")
_REPORTS = (
    "under_replicated_partitions",
    "under_min_isr_partitions",
    "at_min_isr_partitions",
    "unavailable_partitions",
)


def configure(p) -> None:
    p.add_argument(
        "--bootstrap-server", metavar="server to connect to", help="REQUIRED: The Kafka server to connect to."
    )
    p.add_argument(
        "--command-config",
        metavar="command config property file",
        help="Property file containing configs to be passed to Admin Client.",
    )
    p.add_argument("--list", action="store_true", help="List all available topics.")
    p.add_argument("--create", action="store_true", help="Create a new topic.")
    p.add_argument("--delete", action="store_true", help="Delete a topic.")
    p.add_argument(
        "--alter",
        action="store_true",
        help="Alter the number of partitions and replica assignment." + _ALTER_CONFIGS_HINT,
    )
    p.add_argument("--describe", action="store_true", help="List details for the given topics.")
    p.add_argument(
        "--topic",
        metavar="topic",
        help="The topic to create, alter, describe or delete. It also accepts a regular expression, "
        "except for --create option. Put topic name in double quotes and use the '\\' prefix to "
        'escape regular expression symbols; e.g. "test\\.topic".',
    )
    p.add_argument("--topic-id", metavar="topic-id", help="The topic-id to describe.")
    p.add_argument(
        "--config",
        action="append",
        metavar="name=value",
        help="A topic configuration override for the topic being created. See the Kafka documentation "
        "for full details on the topic configs. It is supported only in combination with --create."
        + _ALTER_CONFIGS_HINT,
    )
    p.add_argument(
        "--delete-config",
        action="append",
        metavar="name",
        help="This option is no longer supported and has been deprecated since 4.0",
    )
    p.add_argument(
        "--partitions",
        type=int,
        metavar="# of partitions",
        help="The number of partitions for the topic being created or altered. If not supplied with "
        "--create, the topic uses the cluster default.",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        metavar="replication factor",
        help="The replication factor for each partition in the topic being created. If not supplied, "
        "the topic uses the cluster default.",
    )
    p.add_argument(
        "--replica-assignment",
        metavar="broker_id_for_part1_replica1 : broker_id_for_part1_replica2 , "
        "broker_id_for_part2_replica1 : broker_id_for_part2_replica2 , ...",
        help="A list of manual partition-to-broker assignments for the topic being created or altered.",
    )
    p.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="If set when describing topics, only show under-replicated partitions.",
    )
    p.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="If set when describing topics, only show partitions whose leader is not available.",
    )
    p.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="If set when describing topics, only show partitions whose isr count is less than the configured minimum.",
    )
    p.add_argument(
        "--at-min-isr-partitions",
        action="store_true",
        help="If set when describing topics, only show partitions whose isr count is equal to the configured minimum.",
    )
    p.add_argument(
        "--topics-with-overrides",
        action="store_true",
        help="If set when describing topics, only show topics that have overridden configs.",
    )
    p.add_argument(
        "--if-exists",
        action="store_true",
        help="If set when altering or deleting or describing topics, the action will only execute if the topic exists.",
    )
    p.add_argument(
        "--if-not-exists",
        action="store_true",
        help="If set when creating topics, the action will only execute if the topic does not already exist.",
    )
    p.add_argument(
        "--exclude-internal",
        action="store_true",
        help="Exclude internal topics when listing or describing topics. By default, the internal topics are included.",
    )
    p.add_argument(
        "--partition-size-limit-per-response",
        type=int,
        metavar="maximum number of partitions per response",
        help="The maximum partition size to be included in one DescribeTopicPartitions response.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


# ----------------------------------------------------------------- argument checks


def _check_args(p, a) -> None:
    usage_or_version(a, p, "Create, delete, describe, or change a topic.")
    if sum(bool(getattr(a, x)) for x in _ACTIONS) != 1:
        print_usage_and_exit(
            p, "Command must include exactly one action: --list, --describe, --create, --alter or --delete"
        )
    if a.delete_config:
        print(
            "delete-config option is no longer supported and deprecated since version 4.0. The config will be "
            "fully removed in future releases.",
            file=sys.stderr,
        )
    if not a.bootstrap_server:
        print("--bootstrap-server must be specified", file=sys.stderr)
        raise ToolExit(1)
    if a.describe and a.if_exists:
        if not a.topic and not a.topic_id:
            print_usage_and_exit(p, "--topic or --topic-id is required to describe a topic")
        if a.topic and a.topic_id:
            print(
                "Only topic id will be used when both --topic and --topic-id are specified and topicId is not "
                "Uuid.ZERO_UUID"
            )
    if not a.list and not a.describe:
        check_required(p, a, "topic")
    if a.alter:
        if a.config:
            print_usage_and_exit(
                p,
                'Option combination "[[bootstrap-server], [config]]" can\'t be used with '
                'option "[alter]"' + _ALTER_CONFIGS_HINT,
            )
        check_required(p, a, "partitions")

    def others(*allowed):
        return [x for x in _ACTIONS if x not in allowed]

    check_invalid(p, a, "config", *others("alter", "create"))
    check_invalid(p, a, "partitions", *others("alter", "create"))
    check_invalid(p, a, "replication-factor", *others("create"))
    check_invalid(p, a, "replica-assignment", *others("alter", "create"))
    if a.create:
        check_invalid(p, a, "replica-assignment", "partitions", "replication-factor")
    for rep in _REPORTS:
        check_invalid(p, a, rep.replace("_", "-"), *others("describe"), "topics-with-overrides")
    check_invalid(p, a, "topics-with-overrides", *others("describe"), *(r.replace("_", "-") for r in _REPORTS))
    check_invalid(p, a, "if-exists", *others("alter", "delete", "describe"))
    check_invalid(p, a, "if-not-exists", *others("create"))
    check_invalid(p, a, "exclude-internal", *others("list", "describe"))


class CommandError(Exception):
    """Printed as ``Error while executing topic command : <message>``."""


def _parse_replica_assignment(text: str) -> list[list[int]]:
    out: list[list[int]] = []
    for i, part in enumerate(text.split(",")):
        brokers = [int(x.strip()) for x in part.split(":")]
        dups = sorted({b for b in brokers if brokers.count(b) > 1})
        if dups:
            raise CommandError("Partition replica lists may not contain duplicate entries: " + ",".join(map(str, dups)))
        out.append(brokers)
        if len(brokers) != len(out[0]):
            raise CommandError(f"Partition {i} has different replication factor: [{', '.join(map(str, brokers))}]")
    return out


def _parse_configs(items: list[str] | None) -> dict[str, str]:
    pairs = [re.split(r"\s*=\s*", s) for s in items or []]
    if not all(len(x) == 2 for x in pairs):
        raise CommandError(
            'requirement failed: Invalid topic config: all configs to be added must be in the format "key=val".'
        )
    return {k.strip(): v.strip() for k, v in pairs}


def _ensure_exists(found: list, requested: str | None, require: bool) -> None:
    if requested and require and not found:
        # Kafka's text, less the "Optional[...]" that Java's formatting of the name adds there
        raise CommandError(f"Topic '{requested}' does not exist as expected")


def _get_topics(admin, topic: str | None, exclude_internal: bool) -> list[str]:
    names = admin_client.list_topic_names(admin)
    if topic is not None:
        try:
            flt = admin_client.IncludeList(topic)
        except ValueError as e:
            raise CommandError(str(e)) from None
        return [t for t in names if flt.allowed(t, exclude_internal)]
    return [t for t in names if not (exclude_internal and admin_client.is_internal(t))]


def _result(future):
    return future.result()


def _controller_request(a, api_key: int, build) -> list:
    """CreateTopics / DeleteTopics / CreatePartitions to any broker (see
    :func:`admin_client.any_broker_request`); raises the first topic error as the broker worded it."""
    props = admin_client.client_config(a.bootstrap_server, a.command_config)
    timeout_ms = round(admin_client.TIMEOUT * 1000)
    resp = admin_client.any_broker_request(props, api_key, lambda mod, v: build(mod.request, make, timeout_ms))
    for t in getattr(resp, {19: "topics", 20: "responses", 37: "results"}[api_key]):
        if int(t.error_code):
            raise BrokerError(int(t.error_code), t.error_message, t.error_code.name)
    return resp


# ----------------------------------------------------------------- actions


def _create(admin, a) -> None:
    name = a.topic
    if "." in name or "_" in name:
        print(
            "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
            "collide. To avoid issues it is best to use either, but not both."
        )
    if a.replication_factor is not None and not 1 <= a.replication_factor <= 32767:
        raise CommandError("The replication factor must be between 1 and 32767 inclusive")
    if a.partitions is not None and a.partitions < 1:
        raise CommandError("The partitions must be greater than 0")
    configs = _parse_configs(a.config)
    assignment = _parse_replica_assignment(a.replica_assignment) if a.replica_assignment else None

    def build(rq, make, timeout_ms):
        topic = make(
            rq.CreatableTopic,
            name=name,
            num_partitions=-1 if assignment or a.partitions is None else a.partitions,
            replication_factor=-1 if assignment or a.replication_factor is None else a.replication_factor,
            assignments=tuple(
                make(rq.CreatableReplicaAssignment, partition_index=i, broker_ids=tuple(r))
                for i, r in enumerate(assignment or [])
            ),
            configs=tuple(make(rq.CreatableTopicConfig, name=k, value=v) for k, v in configs.items()),
        )
        return make(rq.CreateTopicsRequest, topics=(topic,), timeout=timeout_ms, validate_only=False)

    try:
        _controller_request(a, ApiKeys.CREATE_TOPICS, build)
    except BrokerError as e:
        if e.code == 36 and a.if_not_exists:
            return
        raise
    print(f"Created topic {name}.")


def _list(admin, a) -> None:
    print("\n".join(_get_topics(admin, a.topic, a.exclude_internal)))


def _delete(admin, a) -> None:
    topics = _get_topics(admin, a.topic, a.exclude_internal)
    _ensure_exists(topics, a.topic, not a.if_exists)
    if topics:
        _controller_request(
            a,
            ApiKeys.DELETE_TOPICS,
            lambda rq, make, timeout_ms: make(
                rq.DeleteTopicsRequest,
                topic_names=tuple(topics),
                timeout=timeout_ms,
                topics=tuple(make(rq.DeleteTopicState, name=t, topic_id=None) for t in topics),
            ),
        )


def _alter(admin, a) -> None:
    topics = _get_topics(admin, a.topic, a.exclude_internal)
    _ensure_exists(topics, a.topic, not a.if_exists)
    if not topics:
        return
    assignment = _parse_replica_assignment(a.replica_assignment) if a.replica_assignment else None
    added = {}  # topic -> the replicas of each new partition (None: the controller places them)
    for t in topics:
        if assignment:
            desc = _describe_topics(admin, a, [t])[0][t]
            added[t] = assignment[len(desc.partitions) :]
        else:
            added[t] = None
    _controller_request(
        a,
        ApiKeys.CREATE_PARTITIONS,
        lambda rq, make, timeout_ms: make(
            rq.CreatePartitionsRequest,
            timeout=timeout_ms,
            validate_only=False,
            topics=tuple(
                make(
                    rq.CreatePartitionsTopic,
                    name=t,
                    count=a.partitions,
                    assignments=None
                    if new is None
                    else tuple(make(rq.CreatePartitionsAssignment, broker_ids=tuple(r)) for r in new),
                )
                for t, new in added.items()
            ),
        ),
    )


def _describe_topics(admin, a, topics: list[str]) -> tuple[dict, dict]:
    """({topic: description}, {(topic, partition): (elr, last known elr) or None}) with
    DescribeTopicPartitions to any broker, as Kafka's Admin describes topics (librdkafka's
    describe_topics waits for "the controller" of its metadata, see
    :func:`admin_client.any_broker_request`); librdkafka's, without ELR, where a broker lacks the API.
    A description has confluent-kafka's shape: ``topic_id``, ``partitions`` of ``id``,
    ``leader.id``, ``replicas[].id``, ``isr[].id``."""

    props = admin_client.client_config(a.bootstrap_server, a.command_config)
    security = admin_client.command_security(a.command_config)
    with Connection.to_any(props["bootstrap.servers"], "kafka-topics", admin_client.TIMEOUT, security=security) as conn:
        if conn.version_for(ApiKeys.DESCRIBE_TOPIC_PARTITIONS) is None:
            return {
                n: _result(f)
                for n, f in admin.describe_topics(TopicCollection(topics), request_timeout=admin_client.TIMEOUT).items()
            }, {}
        descriptions: dict = {}
        elr: dict = {}
        cursor = None
        while True:

            def build(mod, v, cursor=cursor):
                return mod.request.DescribeTopicPartitionsRequest(
                    topics=tuple(mod.request.TopicRequest(name=t) for t in topics),
                    response_partition_limit=2000,
                    cursor=cursor,
                )

            resp = conn.request(ApiKeys.DESCRIBE_TOPIC_PARTITIONS, build)
            for t in resp.topics:
                if int(t.error_code):
                    raise BrokerError(int(t.error_code), None, t.error_code.name)
                td = descriptions.setdefault(t.name, NS(topic_id=t.topic_id, partitions=[]))
                for p in t.partitions:
                    td.partitions.append(
                        NS(
                            id=int(p.partition_index),
                            leader=NS(id=int(p.leader_id)),
                            replicas=[NS(id=int(r)) for r in p.replica_nodes],
                            isr=[NS(id=int(r)) for r in p.isr_nodes],
                        )
                    )
                    elr[(t.name, int(p.partition_index))] = tuple(
                        None if x is None else [int(r) for r in x]
                        for x in (p.eligible_leader_replicas, p.last_known_elr)
                    )
            if resp.next_cursor is None:
                return descriptions, elr

            cursor = rq.Cursor(topic_name=resp.next_cursor.topic_name, partition_index=resp.next_cursor.partition_index)


_DEFAULT_CONFIG = 5  # DescribeConfigs' config_source of a default nobody set


def _topic_configs(a, topics: list[str]) -> dict[str, list[tuple[str, str | None, int]]]:
    """{topic: [(name, value, config source)]}: one DescribeConfigs to any broker (librdkafka
    sends topic DescribeConfigs to "the controller", see :func:`admin_client.any_broker_request`)."""

    def build(mod, v):
        rq = mod.request
        return make(
            rq.DescribeConfigsRequest,
            include_synonyms=False,
            include_documentation=False,
            resources=tuple(
                make(rq.DescribeConfigsResource, resource_type=2, resource_name=t, configuration_keys=None)
                for t in topics
            ),
        )

    resp = admin_client.any_broker_request(
        admin_client.client_config(a.bootstrap_server, a.command_config), ApiKeys.DESCRIBE_CONFIGS, build
    )
    out = {}
    for r in resp.results:
        if int(r.error_code):
            raise BrokerError(int(r.error_code), r.error_message, r.error_code.name)
        out[r.resource_name] = [(c.name, c.value, int(c.config_source)) for c in r.configs]
    return out


def _reassignments(a, descriptions: dict) -> dict:
    """{(topic, partition): (replicas, adding, removing)} of the partitions being reassigned
    (listPartitionReassignments, as TopicCommand asks before describing)."""

    def build(mod, v):
        rq = mod.request
        return make(
            rq.ListPartitionReassignmentsRequest,
            timeout=datetime.timedelta(seconds=60),
            topics=tuple(
                make(
                    rq.ListPartitionReassignmentsTopics,
                    name=name,
                    partition_indexes=tuple(sorted(p.id for p in td.partitions)),
                )
                for name, td in descriptions.items()
            ),
        )

    resp = admin_client.any_broker_request(
        admin_client.client_config(a.bootstrap_server, a.command_config), ApiKeys.LIST_PARTITION_REASSIGNMENTS, build
    )
    if int(resp.error_code):
        raise BrokerError(int(resp.error_code), resp.error_message, resp.error_code.name)
    return {
        (t.name, int(p.partition_index)): (
            [int(r) for r in p.replicas],
            [int(r) for r in p.adding_replicas],
            [int(r) for r in p.removing_replicas],
        )
        for t in resp.topics
        for p in t.partitions
    }


def _replication_factor(replicas: list[int], ra) -> int:
    """TopicCommand.getReplicationFactor: during a reassignment, the replicas less the adding."""
    if ra is not None and set(replicas) & set(ra[1] + ra[2]):
        return len(ra[0]) - len(ra[1])
    return len(replicas)


def _describe(admin, a) -> None:
    if a.topic_id:
        # describe by id: find the name that has this id
        names = admin_client.list_topic_names(admin)
        descs = _describe_topics(admin, a, names)[0] if names else {}
        topics = [
            n
            for n, d in descs.items()
            if kafka_uuid(d.topic_id) == a.topic_id and not (a.exclude_internal and admin_client.is_internal(n))
        ]
        if not topics and not a.if_exists:
            raise CommandError(f"TopicId '{a.topic_id}' does not exist as expected")
    else:
        topics = _get_topics(admin, a.topic, a.exclude_internal)
        _ensure_exists(topics, a.topic, not a.if_exists)
    if not topics:
        return
    descriptions, elr = _describe_topics(admin, a, topics)
    configs = _topic_configs(a, topics)
    live = {n.id for n in admin_client.cluster_nodes(admin)}
    moving = _reassignments(a, {n: descriptions[n] for n in topics})
    describe_configs = not any(getattr(a, r) for r in _REPORTS)
    describe_partitions = not a.topics_with_overrides
    for name in topics:
        td = descriptions[name]
        entries = configs.get(name, [])
        non_default = [(k, v) for k, v, source in entries if source != _DEFAULT_CONFIG]
        parts = sorted(td.partitions, key=lambda p: p.id)
        if describe_configs and (not a.topics_with_overrides or non_default):
            line = f"Topic: {name}"
            if td.topic_id is not None and kafka_uuid(td.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA":
                line += f"\tTopicId: {kafka_uuid(td.topic_id)}"
            line += f"\tPartitionCount: {len(parts)}"
            rf = _replication_factor([n.id for n in parts[0].replicas], moving.get((name, parts[0].id))) if parts else 0
            line += f"\tReplicationFactor: {rf}"
            line += "\tConfigs: " + ",".join(f"{k}={'null' if v is None else v}" for k, v in non_default)
            print(line)
        if not describe_partitions:
            continue
        min_isr = None
        for k, v, _source in entries:
            if k == "min.insync.replicas":
                min_isr = int(v)
        for p in parts:
            leader = p.leader.id if p.leader is not None and p.leader.id >= 0 else None
            isr = [n.id for n in p.isr]
            replicas = [n.id for n in p.replicas]
            ra = moving.get((name, p.id))
            if not describe_configs:
                show = False
                if a.under_replicated_partitions and _replication_factor(replicas, ra) - len(isr) > 0:
                    show = True
                if a.unavailable_partitions and (leader is None or leader not in live):
                    show = True
                if a.under_min_isr_partitions and (leader is None or (min_isr is not None and len(isr) < min_isr)):
                    show = True
                if a.at_min_isr_partitions and min_isr is not None and len(isr) == min_isr:
                    show = True
                if not show:
                    continue
            e = elr.get((name, p.id))
            line = (
                f"\tTopic: {name}\tPartition: {p.id}\tLeader: {leader if leader is not None else 'none'}"
                f"\tReplicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}"
            )
            if ra is not None:
                line += (
                    f"\tAdding Replicas: {','.join(map(str, ra[1]))}\tRemoving Replicas: {','.join(map(str, ra[2]))}"
                )
            if e is None or e[0] is None:
                line += "\tElr: N/A"
            else:
                line += "\tElr: " + ",".join(map(str, e[0]))
            if e is None or e[1] is None:
                line += "\tLastKnownElr: N/A"
            else:
                line += "\tLastKnownElr: " + ",".join(map(str, e[1]))
            print(line)


def run(a) -> int:
    p = a._parser
    try:
        _check_args(p, a)
    except ToolExit as e:
        return e.code
    try:
        admin = admin_client.make_admin(a.bootstrap_server, a.command_config)
        if a.create:
            _create(admin, a)
        elif a.alter:
            _alter(admin, a)
        elif a.list:
            _list(admin, a)
        elif a.describe:
            _describe(admin, a)
        elif a.delete:
            _delete(admin, a)
    except Exception as e:  # printed on stdout, as TopicCommand.printException does
        print(f"Error while executing topic command : {error_message(e)}")
        sys.stdout.flush()
        return 1
    sys.stdout.flush()
    return 0
