"""The controller's rules: validates cluster changes and writes them as metadata records.

Every decision — a topic created, partitions added, a config altered, a broker registered —
becomes one batch of records handed to ``log.append`` (the commit seam) and replayed into
``image``. In the server the seam is :class:`kesque.server.drivers.quorum_controller.QuorumController`: the
batch is proposed to the raft quorum, ``image`` is the active controller's working image, and
the request is answered once the batch is committed; brokers learn of it only through the
committed records. Given a :class:`~kesque.metadata.log.MetadataLog` instead, the commit is a
local fsynced append (the unit tests' single-node form).
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from dataclasses import dataclass, field

from .. import quotas as qm
from ..config.broker import BROKER_CONFIGS, BrokerConfig, has_effect
from ..config.client_metrics import CLIENT_METRICS_CONFIGS, ClientMetricsError, validate_client_metrics
from ..config.group import GROUP_CONFIGS, validate_group_configs
from ..config.topic import TOPIC_CONFIGS, validate_topic_configs
from ..config.types import ConfigError
from ..errors import ErrorCode, KafkaError
from ..metadata.image import (
    MIRROR_ACTIVE,
    MIRROR_FAILED_OVER,
    MIRROR_PAUSED,
    MIRROR_PROMOTED,
    MIRROR_STATES,
    MIRROR_SYNCED_CONFIGS,
    RESOURCE_BROKER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    Delta,
    MetadataImage,
)
from ..metadata.image import ClusterLink as ClusterLinkImage
from ..metadata.image import MirrorTopic as MirrorImage
from ..metadata.log import METADATA_TOPIC, MetadataLog
from ..metadata.snapshot import acl_record, link_record, mirror_record, scram_record
from ..protocol import cluster_links as cl
from ..security.acl import AclBinding, AclBindingFilter, creation_error, deletion_filter_error
from ..security.authorizer import StandardAcl
from ..security.scram import ScramFormatter, ScramMechanism
from ..storage.checkpoint import uuid_to_kafka
from . import reassignment
from .reassignment import default_dir_fn
from .replication_control import clear_elr_records, min_isr_in, unclean_enabled_in

log = logging.getLogger(__name__)

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

METADATA_VERSION_LEVEL = 25  # 4.0-IV3: the KRaft feature level kesque's records correspond to
# the feature levels a new cluster finalizes, as a Kafka 4.4 cluster formatted by default has ELR
# (KIP-966) on: eligible.leader.replicas.version 1, and transactions of version 2 (KIP-890 part 2:
# an epoch bump per transaction, partitions added by their leaders): transaction.version 2. A
# cluster bootstrapped before kesque finalized a feature keeps it at 0 (absent from its image).
FEATURES = {"metadata.version": METADATA_VERSION_LEVEL, "eligible.leader.replicas.version": 1, "transaction.version": 2}
# the lowest level kesque supports of each (metadata.version starts at 1, the others at 0)
FEATURE_MIN = {"eligible.leader.replicas.version": 0, "transaction.version": 0}


def supported_features() -> dict[str, tuple[int, int]]:
    """{feature: (min, max)} of what this broker supports (BrokerRegistration, ApiVersions)."""
    return {k: (FEATURE_MIN.get(k, 1), v) for k, v in FEATURES.items()}


# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: one request may not write more records
MAX_RECORDS_PER_USER_OP = 10000
_TOO_LARGE = "Unable to perform excessively large batch operation."

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


SCRAM_MAX_ITERATIONS = 16384  # ScramControlManager's MAX_ITERATIONS
_SCRAM_DELETE_MISSING = "Attempt to delete a user credential that does not exist"


def _scram_name_error(name: str, mechanism_type: int) -> KafkaError | None:
    """ScramControlManager.validateScramUsernameAndMechanism."""
    if not name:
        return KafkaError(ErrorCode.unacceptable_credential, "Username must not be empty")
    if ScramMechanism.from_type(mechanism_type) is None:
        return KafkaError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return None


def random_topic_id() -> uuid.UUID:
    """Kafka's Uuid.randomUuid: never the zero id, the metadata topic's id (0, 1), or one
    whose text starts with '-' (command lines would take it for an option)."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_kafka(u).startswith("-"):
            return u


def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_LENGTH:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_LENGTH} characters, topic name: {name}",
        )
    if not LEGAL_TOPIC.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        )


def _client_metrics_checked(name: str, configs: dict) -> None:
    """ClientMetricsConfigs.validate, its refusal as the error code Kafka's answer carries."""
    try:
        validate_client_metrics(name, configs)
    except ClientMetricsError as e:
        raise KafkaError(ErrorCode[e.code], e.message) from None


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class CreatedTopic:
    name: str
    topic_id: uuid.UUID | None = None
    error: KafkaError | None = None
    num_partitions: int = -1
    replication_factor: int = -1


class Controller:
    def __init__(self, config: BrokerConfig, image: MetadataImage, metadata_log: MetadataLog, clock, publish):
        self.config = config
        self.image = image
        self.log = metadata_log
        self.clock = clock
        self.publish = publish  # callable(delta) run after every commit
        self._warned_without_effect: set[str] = set()

    # ------------------------------------------------------------------ commit
    def commit(self, records: list[dict]) -> Delta:
        if not records:
            return Delta()
        offset = self.log.append(records)
        delta = Delta()
        for rec in records:
            self.image.replay(rec, delta)
        self.image.offset = offset
        self.publish(delta)
        return delta

    def bootstrap(self, records: list[dict] | None = None) -> None:
        """First start of a fresh cluster: record the finalized features, or the records of
        the node's bootstrap file (its features and ``--add-scram`` credentials)."""
        if not self.image.features:
            self.commit(
                records or [{"type": "FeatureLevelRecord", "name": k, "feature_level": v} for k, v in FEATURES.items()]
            )

    # ------------------------------------------------------------------ brokers
    def register_broker(self, node_id: int, endpoints: list[dict], rack: str | None = None) -> int:
        prev = self.image.brokers.get(node_id)
        epoch = max(self.image.offset + 1, (prev.epoch + 1) if prev else 0)
        self.commit(
            [
                {
                    "type": "RegisterBrokerRecord",
                    "broker_id": node_id,
                    "incarnation_id": uuid.uuid4(),
                    "broker_epoch": epoch,
                    "endpoints": endpoints,
                    "features": [
                        {"name": k, "min_supported_version": FEATURE_MIN.get(k, 1), "max_supported_version": v}
                        for k, v in FEATURES.items()
                    ],
                    "rack": rack,
                    "fenced": False,
                    "in_controlled_shutdown": False,
                }
            ]
        )
        return epoch

    # ------------------------------------------------------------------ producer ids
    PRODUCER_ID_BLOCK = 1000

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """A block of producer ids, unique across restarts and brokers (AllocateProducerIds)."""
        start = self.image.next_producer_id
        self.commit(
            [
                {
                    "type": "ProducerIdsRecord",
                    "broker_id": broker_id,
                    "broker_epoch": broker_epoch,
                    "next_producer_id": start + self.PRODUCER_ID_BLOCK,
                }
            ]
        )
        return start, self.PRODUCER_ID_BLOCK

    # ------------------------------------------------------------------ topics
    def create_topics(self, topics: list[NewTopic], validate_only: bool = False, quota=None) -> list[CreatedTopic]:
        """``quota``: the request's controller mutation quota (kesque.quotas.MutationQuota),
        charged each topic's partitions; a strict one refuses a topic once exhausted."""
        results: list[CreatedTopic] = []
        records: list[dict] = []
        counts: dict[str, int] = {}
        for t in topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        budget = [MAX_RECORDS_PER_USER_OP]
        for t in topics:
            res = CreatedTopic(t.name)
            results.append(res)
            try:
                # as Kafka's ControllerApis: a name given twice is refused and created for neither
                if counts[t.name] > 1:
                    raise KafkaError(ErrorCode.invalid_request, "Duplicate topic name.")
                if t.name == METADATA_TOPIC:
                    raise KafkaError(
                        ErrorCode.invalid_request, f"Creation of internal topic {METADATA_TOPIC} is prohibited."
                    )
                recs, n, rf, topic_id = self._plan_topic(t, budget)
                if quota is not None and not validate_only:
                    quota.record(n)
                res.num_partitions, res.replication_factor = n, rf
                res.topic_id = topic_id
                if not validate_only:
                    records.extend(recs)
            except KafkaError as e:
                if e.message == _TOO_LARGE:  # the whole request fails, as in Kafka
                    return [CreatedTopic(x.name, error=e) for x in topics]
                res.error = e
        if records:
            self.commit(records)
        for res in results:
            if res.error is None and not validate_only:
                log.info("Created topic %s with topic id %s", res.name, res.topic_id)
        return results

    def _plan_topic(self, t: NewTopic, budget: list[int] | None = None):
        validate_topic_name(t.name)
        if self.image.topic(t.name) is not None:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
        collide = t.name.replace(".", "_")
        for existing in self.image.topics_by_name:
            if existing != t.name and existing.replace(".", "_") == collide:
                raise KafkaError(
                    ErrorCode.invalid_topic_exception, f"Topic '{t.name}' collides with existing topic: {existing}"
                )
        # configs before partitions, as Kafka's ReplicationControlManager.createTopics
        null = [k for k, v in t.configs.items() if v is None]
        if null:
            raise KafkaError(ErrorCode.invalid_config, f"Null value not supported for topic configs: {','.join(null)}")
        try:
            overrides = dict(t.configs)
            validate_topic_configs(overrides)
        except ConfigError as e:
            raise KafkaError(ErrorCode.invalid_config, str(e)) from None
        live = [b.id for b in self.image.live_brokers()]
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            assignment = self._check_assignment(t.assignments, 0)
            n = len(assignment)
            rf = len(assignment[0])
        else:
            n = t.num_partitions if t.num_partitions != -1 else self.config.get("num.partitions")
            rf = t.replication_factor if t.replication_factor != -1 else self.config.get("default.replication.factor")
            if n <= 0:
                raise KafkaError(
                    ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
                )
            if rf <= 0:
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if rf > len(live):
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {rf} time(s): The target replication factor "
                    f"of {rf} cannot be reached because only {len(live)} broker(s) are registered.",
                )
            if budget is not None and n + len(t.configs) + 1 > budget[0]:
                raise KafkaError(ErrorCode.policy_violation, _TOO_LARGE)
            assignment = self._place(n, rf, live)
        if budget is not None:
            budget[0] -= len(assignment) + len(t.configs) + 1
            if budget[0] < 0:
                raise KafkaError(ErrorCode.policy_violation, _TOO_LARGE)
        topic_id = random_topic_id()
        while topic_id in self.image.topics_by_id:
            topic_id = random_topic_id()
        recs = [{"type": "TopicRecord", "name": t.name, "topic_id": topic_id}]
        recs += [
            {"type": "ConfigRecord", "resource_type": RESOURCE_TOPIC, "resource_name": t.name, "name": k, "value": v}
            for k, v in sorted(overrides.items())
        ]
        recs += self._partition_records(topic_id, assignment, 0)
        return recs, n, rf, topic_id

    def _partition_records(self, topic_id: uuid.UUID, assignment: list[list[int]], first: int) -> list[dict]:
        live = {b.id for b in self.image.live_brokers()}
        default_dir = default_dir_fn(self.image)
        out = []
        for i, replicas in enumerate(assignment):
            isr = [r for r in replicas if r in live] or list(replicas)
            out.append(
                {
                    "type": "PartitionRecord",
                    "partition_id": first + i,
                    "topic_id": topic_id,
                    "replicas": replicas,
                    "isr": isr,
                    "removing_replicas": [],
                    "adding_replicas": [],
                    "leader": isr[0],
                    "leader_recovery_state": 0,
                    "leader_epoch": 0,
                    "partition_epoch": 0,
                }
            )
            if default_dir is not None:  # KIP-858: each replica's directory (Kafka's defaultDir)
                out[-1]["directories"] = [default_dir(r) for r in replicas]
        return out

    def _check_assignment(
        self, assignments: dict[int, list[int]], first: int, rf: int | None = None
    ) -> list[list[int]]:
        """Kafka's validateManualPartitionAssignment: replicas non-empty, registered (fenced
        ones too), distinct, one replication factor (the topic's, when adding partitions),
        at least one of them active; partition indexes consecutive."""
        indexes = sorted(assignments)
        if indexes != list(range(first, first + len(indexes))):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment, "partitions should be a consecutive 0-based integer sequence"
            )
        live = {b.id for b in self.image.live_brokers()}
        out = []
        for i in indexes:
            replicas = list(assignments[i])
            reassignment.validate_manual_assignment(self.image, replicas, rf)
            if not any(r in live for r in replicas):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"All brokers specified in the manual partition assignment for partition {i} are "
                    "fenced or in controlled shutdown.",
                )
            rf = len(replicas)
            out.append(replicas)
        return out

    def _place(self, n: int, rf: int, live: list[int], first: int = 0) -> list[list[int]]:
        """Striped placement: leaders spread round-robin, followers on the next brokers."""
        if not live:
            raise KafkaError(ErrorCode.invalid_replication_factor, "No brokers are registered.")
        start = random.randrange(len(live))
        return [[live[(start + first + p + j) % len(live)] for j in range(rf)] for p in range(n)]

    def delete_topics(self, names: list[str | None], ids: list[uuid.UUID | None], quota=None) -> list[tuple]:
        """Returns (name, topic_id, KafkaError|None) per requested topic; ``quota`` as for
        create_topics (charged the deleted topic's partitions)."""
        out = []
        records = []
        given = [name if name else topic_id for name, topic_id in zip(names, ids)]
        for name, topic_id in zip(names, ids):
            if given.count(name if name else topic_id) > 1:  # as Kafka's ControllerApis.deleteTopics
                out.append(
                    (
                        name,
                        topic_id,
                        KafkaError(
                            ErrorCode.invalid_request, "Duplicate topic name." if name else "Duplicate topic id."
                        ),
                    )
                )
                continue
            t = self.image.topic(name) if name else self.image.topics_by_id.get(topic_id)
            if t is None:
                code = ErrorCode.unknown_topic_or_partition if name else ErrorCode.unknown_topic_id
                out.append(
                    (
                        name,
                        topic_id,
                        KafkaError(
                            code,
                            "This server does not host this topic-partition."
                            if name
                            else "This server does not host this topic ID.",
                        ),
                    )
                )
                continue
            if not self.config.get("delete.topic.enable"):
                out.append(
                    (t.name, t.topic_id, KafkaError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."))
                )
                continue
            if quota is not None:
                try:
                    quota.record(len(t.partitions))
                except KafkaError as e:
                    out.append((t.name, t.topic_id, e))
                    continue
            records.append({"type": "RemoveTopicRecord", "topic_id": t.topic_id})
            out.append((t.name, t.topic_id, None))
        self.commit(records)
        for name, _tid, err in out:
            if err is None:
                log.info("Deleted topic %s", name)
        return out

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, validate_only: bool, quota=None
    ) -> None:
        t = self.image.topic(name)
        if t is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        current = len(t.partitions)
        if count < current:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        live = [b.id for b in self.image.live_brokers()]
        rf = len(t.partitions[0].replicas) if t.partitions else 1
        if assignments:
            if len(assignments) != count - current:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {count - current} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.",
                )
            plan = self._check_assignment({current + i: a for i, a in enumerate(assignments)}, current, rf)
        else:
            if rf > len(live):
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {rf} time(s): only {len(live)} broker(s) are registered.",
                )
            if count - current > MAX_RECORDS_PER_USER_OP:
                raise KafkaError(ErrorCode.policy_violation, _TOO_LARGE)
            plan = self._place(count - current, rf, live, current)
        if not validate_only:
            if quota is not None:
                quota.record(count - current)
            self.commit(self._partition_records(t.topic_id, plan, current))

    # ------------------------------------------------------------------ reassignment
    def alter_partition_reassignments(self, topics: list, allow_rf_change: bool = True) -> list:
        """AlterPartitionReassignments (``reassignment.alter_reassignments``): the records of
        every accepted partition in one batch; [(topic, [(partition, KafkaError | None)])]."""
        records, results = reassignment.alter_reassignments(self.image, topics, self.unclean_enabled, allow_rf_change)
        self.commit(records)
        ok = sum(err is None for _t, parts in results for _p, err in parts)
        log.info(
            "Successfully altered %d out of %d partition reassignment(s).", ok, sum(len(parts) for _t, parts in results)
        )
        return results

    def min_isr(self, topic: str) -> int:
        """``min.insync.replicas`` of a topic, resolved as the controller does."""
        return min_isr_in(self.image, topic, self.config.get("node.id"), self.config.get("min.insync.replicas") or 1)

    def unclean_enabled(self, topic: str) -> bool:
        """``unclean.leader.election.enable`` of a topic, resolved as the controller does."""
        return unclean_enabled_in(
            self.image, topic, self.config.get("node.id"), bool(self.config.get("unclean.leader.election.enable"))
        )

    # ------------------------------------------------------------------ configs
    def _check_resource(self, rtype: int, rname: str) -> None:
        if rtype == RESOURCE_TOPIC:
            if self.image.topic(rname) is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {rname} does not exist.")
        elif rtype == RESOURCE_BROKER:
            if rname != "":
                try:
                    node = int(rname)
                except ValueError:
                    raise KafkaError(ErrorCode.invalid_request, f"Invalid broker name {rname}") from None
                if node not in self.image.brokers:
                    raise KafkaError(ErrorCode.invalid_request, f"Unknown broker {node}")
        elif rtype == RESOURCE_GROUP:
            if rname == "":
                raise KafkaError(ErrorCode.invalid_request, "Default group resources are not allowed.")
        elif rtype == RESOURCE_CLIENT_METRICS:
            if rname == "":
                raise KafkaError(ErrorCode.invalid_request, "Subscription name can't be empty")
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type {rtype}")

    def _validate_value(self, rtype: int, rname: str, name: str, value: str | None) -> None:
        try:
            if rtype == RESOURCE_TOPIC:
                if name not in TOPIC_CONFIGS:
                    raise ConfigError(name, f"Unknown topic config name: {name}")
                if value is not None:
                    validate_topic_configs({name: value})
            elif rtype == RESOURCE_GROUP:
                if name not in GROUP_CONFIGS:
                    raise ConfigError(name, f"Unknown group config name: {name}")
                GROUP_CONFIGS[name].parse(value)
            elif rtype == RESOURCE_CLIENT_METRICS:
                _client_metrics_checked(rname, {name: value})
            else:
                self.config.validate_dynamic(name, value, per_broker=rname != "")
        except ConfigError as e:
            # Kafka checks broker changes on the broker (ConfigAdminManager), where a
            # refusal is INVALID_REQUEST; the controller's checks answer INVALID_CONFIG
            code = ErrorCode.invalid_request if rtype == RESOURCE_BROKER else ErrorCode.invalid_config
            raise KafkaError(code, str(e)) from None

    def incremental_alter_configs(
        self, rtype: int, rname: str, ops: list[tuple[str, int, str | None]], validate_only: bool
    ) -> None:
        """Apply SET/DELETE/APPEND/SUBTRACT ops to one resource atomically."""
        self._check_resource(rtype, rname)
        current = dict(self.image.configs.get((rtype, rname), {}))
        new = dict(current)
        seen = set()
        for name, op, value in ops:
            if name in seen:
                raise KafkaError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {name}")
            seen.add(name)
            if op == OP_SET:
                new[name] = value
            elif op == OP_DELETE:
                new.pop(name, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                # Kafka's isSplittable: the resource's key must be a LIST (topic or broker)
                keys = {RESOURCE_TOPIC: TOPIC_CONFIGS, RESOURCE_GROUP: GROUP_CONFIGS}.get(rtype, BROKER_CONFIGS)
                key = keys.get(name) if rtype != RESOURCE_CLIENT_METRICS else None
                listed = rtype == RESOURCE_CLIENT_METRICS and CLIENT_METRICS_CONFIGS.get(name, ("",))[0] == "LIST"
                if not listed and (key is None or key.type != "LIST"):
                    raise KafkaError(
                        ErrorCode.invalid_config, f"Config value append is not allowed for config key: {name}"
                    )
                base = new.get(name)
                items = [x for x in (base.split(",") if base else list(key.default or () if key else ())) if x]
                add = [x.strip() for x in (value or "").split(",") if x.strip()]
                if op == OP_APPEND:
                    items += [x for x in add if x not in items]
                else:
                    items = [x for x in items if x not in add]
                new[name] = ",".join(items)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"Unknown alter config operation {op}")
            self._validate_value(rtype, rname, name, new.get(name))
        self._commit_configs(rtype, rname, current, new, validate_only)

    def alter_configs(self, rtype: int, rname: str, configs: dict[str, str | None], validate_only: bool) -> None:
        """Legacy AlterConfigs: the given set replaces all dynamic configs of the resource."""
        self._check_resource(rtype, rname)
        for name, value in configs.items():
            self._validate_value(rtype, rname, name, value)
        current = dict(self.image.configs.get((rtype, rname), {}))
        new = {k: v for k, v in configs.items() if v is not None}
        self._commit_configs(rtype, rname, current, new, validate_only)

    def _commit_configs(self, rtype, rname, current: dict, new: dict, validate_only: bool) -> None:
        if rtype == RESOURCE_TOPIC:
            self._refuse_synced_changes(rname, current, new)
        try:
            if rtype == RESOURCE_TOPIC:
                validate_topic_configs(new)
            elif rtype == RESOURCE_GROUP:
                validate_group_configs(new, self.config)
            elif rtype == RESOURCE_CLIENT_METRICS:
                _client_metrics_checked(rname, new)
        except ConfigError as e:
            raise KafkaError(ErrorCode.invalid_config, str(e)) from None
        if validate_only:
            return
        recs = []
        for name in sorted(set(current) | set(new)):
            if current.get(name) != new.get(name):
                recs.append(
                    {
                        "type": "ConfigRecord",
                        "resource_type": rtype,
                        "resource_name": rname,
                        "name": name,
                        "value": new.get(name),
                    }
                )
        self.commit(recs + clear_elr_records(self.image, recs))
        if rtype == RESOURCE_BROKER:
            self.warn_without_effect(r["name"] for r in recs if r["value"] is not None)

    # ------------------------------------------------------------------ client quotas
    def alter_client_quotas(
        self, alterations: list[tuple[list, list[tuple[str, float | None]]]], validate_only: bool
    ) -> list[tuple[list, KafkaError | None]]:
        """AlterClientQuotas as Kafka's ClientQuotaControlManager: each entity's ops (value
        None removes the key) are validated on their own; the valid entities' changes are
        written as one batch of ClientQuotaRecords. Returns (entity entries, error) per entity."""
        results: dict[tuple, tuple[list, KafkaError | None]] = {}
        records: list[dict] = []
        for entries, ops in alterations:
            entity = qm.entity_key(dict(entries))
            changes: dict[str, float | None] = {}
            error = None
            for key, value in ops:
                if key in changes:
                    error = KafkaError(
                        ErrorCode.invalid_request,
                        f"Duplicate quota key {key} not updating quota for this entity {qm.entity_text(entity)}",
                    )
                changes[key] = value
            if error is not None or entity in results:
                results[entity] = (
                    entries,
                    KafkaError(ErrorCode.invalid_request, f"Ignoring duplicate entity {qm.entity_text(entity)}"),
                )
                continue
            try:
                records.extend(self._quota_records(entries, changes))
            except KafkaError as e:
                error = e
            results[entity] = (entries, error)
        if records and not validate_only:
            self.commit(records)
        return list(results.values())

    def _quota_records(self, entries, changes: dict[str, float | None]) -> list[dict]:
        entity = qm.validate_entity(entries)
        keys = qm.quota_keys_for(entity)
        current = self.image.client_quotas.get(qm.entity_key(entity), {})
        rec_entity = [{"entity_type": t, "entity_name": n} for t, n in entity.items()]
        out = []
        for key, value in changes.items():
            if value is None:
                if key in current:
                    out.append(
                        {"type": "ClientQuotaRecord", "entity": rec_entity, "key": key, "value": 0.0, "remove": True}
                    )
                continue
            qm.validate_quota_value(keys, key, value)
            if current.get(key) != value:
                out.append(
                    {"type": "ClientQuotaRecord", "entity": rec_entity, "key": key, "value": value, "remove": False}
                )
        return out

    # ------------------------------------------------------------------ ACLs
    def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """CreateAcls as Kafka's AclControlManager.createAcls (after the broker's AclApis
        checks): each binding is validated on its own; a new one gets a fresh id and an
        AccessControlEntryRecord, one already stored (or earlier in this request) succeeds and
        writes nothing. The records are one batch."""
        results: list[KafkaError | None] = []
        records: list[dict] = []
        seen: set[StandardAcl] = set()
        for binding in bindings:
            error = creation_error(binding)
            if error is not None:
                results.append(error)
                continue
            acl = StandardAcl.from_binding(binding)
            if acl not in self.image.acl_ids and acl not in seen:
                seen.add(acl)
                if len(records) >= MAX_RECORDS_PER_USER_OP:
                    raise KafkaError(ErrorCode.unknown_server_error, _TOO_LARGE)
                records.append(acl_record(self._new_acl_id(records), acl))
            results.append(None)
        self.commit(records)
        return results

    def _new_acl_id(self, pending: list[dict]) -> uuid.UUID:
        taken = {r["id"] for r in pending}
        while True:
            acl_id = random_topic_id()  # Kafka's Uuid.randomUuid, as for topics
            if acl_id not in self.image.acls and acl_id not in taken:
                return acl_id

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[tuple[list[AclBinding], KafkaError | None]]:
        """DeleteAcls as AclControlManager.deleteAcls: per filter, the stored ACLs it matches
        (each removed by a RemoveAccessControlEntryRecord, once however many filters match it)
        or its error; the removals are one batch."""
        results: list[tuple[list[AclBinding], KafkaError | None]] = []
        removed: dict[uuid.UUID, None] = {}
        for filt in filters:
            error = deletion_filter_error(filt)
            if error is not None:
                results.append(([], error))
                continue
            deleted = []
            for acl_id, acl in self.image.acls.items():
                binding = acl.to_binding()
                if filt.matches(binding):
                    deleted.append(binding)
                    removed[acl_id] = None
                    if len(removed) > MAX_RECORDS_PER_USER_OP:
                        error = KafkaError(
                            ErrorCode.unknown_server_error,
                            f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation.",
                        )
                        break
            results.append(([], error) if error is not None else (deleted, None))
        self.commit([{"type": "RemoveAccessControlEntryRecord", "id": acl_id} for acl_id in removed])
        return results

    # ------------------------------------------------------------------ SCRAM credentials
    def alter_user_scram_credentials(
        self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
    ) -> list[tuple[str, KafkaError | None]]:
        """AlterUserScramCredentials as Kafka's ScramControlManager.alterCredentials:
        ``deletions`` (user, mechanism type), ``upsertions`` (user, mechanism type, iterations,
        salt, salted password). A user altered twice is DUPLICATE_RESOURCE, a bad name,
        mechanism or iteration count is refused; the stored key and server key are derived
        from the salted password. The records of the accepted alterations are one batch.
        Returns (user, error) for each user: deletions, then upsertions, then the refused."""
        to_delete: dict[str, int] = {}
        to_upsert: dict[str, tuple] = {}
        errors: dict[str, KafkaError] = {}
        twice = "A user credential cannot be altered twice in the same request"
        for name, mech in deletions:
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None:
                errors[name] = KafkaError(ErrorCode.duplicate_resource, twice)
                continue
            error = _scram_name_error(name, mech)
            mechanism = ScramMechanism.from_type(mech)
            if error is None and name not in self.image.scram_credentials.get(mechanism.mechanism_name, {}):
                error = KafkaError(ErrorCode.resource_not_found, _SCRAM_DELETE_MISSING)
            if error is not None:
                errors[name] = error
            else:
                to_delete[name] = mech
        for up in upsertions:
            name, mech, iterations = up[0], up[1], up[2]
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
                errors[name] = KafkaError(ErrorCode.duplicate_resource, twice)
                continue
            error = _scram_name_error(name, mech)
            if error is None:
                mechanism = ScramMechanism.from_type(mech)
                if iterations < mechanism.min_iterations:
                    error = KafkaError(ErrorCode.unacceptable_credential, "Too few iterations")
                elif iterations > SCRAM_MAX_ITERATIONS:
                    error = KafkaError(ErrorCode.unacceptable_credential, "Too many iterations")
            if error is not None:
                errors[name] = error
            else:
                to_upsert[name] = up
        records = [{"type": "RemoveUserScramCredentialRecord", "name": n, "mechanism": m} for n, m in to_delete.items()]
        for name, mech, iterations, salt, salted_password in to_upsert.values():
            mechanism = ScramMechanism.from_type(mech)
            formatter = ScramFormatter(mechanism)
            credential = formatter.credential_from_salted(bytes(salt), bytes(salted_password), iterations)
            records.append(scram_record(mechanism, name, credential))
        self.commit(records)
        return [(n, None) for n in to_delete] + [(n, None) for n in to_upsert] + list(errors.items())

    # ------------------------------------------------------------------ cluster links (docs/mirror.md)
    def create_cluster_link(self, name: str, configs: dict[str, str], validate_only: bool = False) -> uuid.UUID:
        """A link to a source cluster: ``configs`` are its client settings, ``bootstrap.servers``
        among them (Confluent's ClusterLinkConfig names)."""
        if not name or not LEGAL_TOPIC.match(name) or len(name) > MAX_TOPIC_LENGTH:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Cluster link name '{name}' is illegal: use ASCII alphanumerics, '.', '_' and '-'",
            )
        if name in self.image.cluster_links:
            raise KafkaError(ErrorCode.invalid_request, f"Cluster link '{name}' already exists.")
        if not (configs.get("bootstrap.servers") or "").strip():
            raise KafkaError(ErrorCode.invalid_config, "Cluster link configs must set bootstrap.servers.")
        link_id = random_topic_id()
        if not validate_only:
            self.commit([link_record(ClusterLinkImage(name, link_id, dict(configs)))])
            log.info("Created cluster link %s with link id %s", name, link_id)
        return link_id

    def alter_cluster_link(self, name: str, updates: dict[str, str | None]) -> None:
        """The link's configs changed (a value None removes the key): a new ClusterLinkRecord with
        the same id, so each broker's fetchers and copiers of the link start again with them."""
        link = self.image.cluster_links.get(name)
        if link is None:
            raise KafkaError(ErrorCode.invalid_request, f"Cluster link '{name}' does not exist.")
        configs = {**link.configs, **{k: v for k, v in updates.items() if v is not None}}
        for k in [k for k, v in updates.items() if v is None]:
            configs.pop(k, None)
        if not (configs.get("bootstrap.servers") or "").strip():
            raise KafkaError(ErrorCode.invalid_config, "Cluster link configs must set bootstrap.servers.")
        self.commit([link_record(ClusterLinkImage(name, link.link_id, configs))])
        changed = sorted(k for k in set(configs) | set(link.configs) if configs.get(k) != link.configs.get(k))
        log.info("Altered cluster link %s: %s", name, ", ".join(changed) or "no change")

    def delete_cluster_link(self, name: str) -> None:
        """Refused while a topic still mirrors through the link, as Confluent's (promote or fail
        the mirrors over, or delete them, first)."""
        link = self.image.cluster_links.get(name)
        if link is None:
            raise KafkaError(ErrorCode.invalid_request, f"Cluster link '{name}' does not exist.")
        offsets_mirror = self.image.topic(cl.offsets_mirror_topic(name))
        active = sorted(
            self.image.topics_by_id[m.topic_id].name
            for m in self.image.mirror_topics.values()
            if m.link_id == link.link_id and m.mirroring and m.topic_id in self.image.topics_by_id
        )
        if offsets_mirror is not None and offsets_mirror.name in active:
            active.remove(offsets_mirror.name)  # the link's own: deleted with it
        if active:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Cluster link '{name}' has active mirror topics: {', '.join(active)}",
            )
        records = [{"type": "RemoveClusterLinkRecord", "link_id": link.link_id}]
        m = None if offsets_mirror is None else self.image.mirror_topics.get(offsets_mirror.topic_id)
        if m is not None and m.link_id == link.link_id:
            records.insert(0, {"type": "RemoveTopicRecord", "topic_id": offsets_mirror.topic_id})
        self.commit(records)
        log.info("Deleted cluster link %s", name)

    def create_mirror_topic(
        self,
        name: str,
        link_name: str,
        source_topic: str,
        source_topic_id: uuid.UUID,
        num_partitions: int,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
    ) -> uuid.UUID:
        """A topic with the source's partition count whose records come from ``source_topic``
        over the link: its TopicRecord, configs and partitions, and its MirrorTopicRecord, in one
        batch (a broker never sees the topic without its mirror state)."""
        link = self.image.cluster_links.get(link_name)
        if link is None:
            raise KafkaError(ErrorCode.invalid_request, f"Cluster link '{link_name}' does not exist.")
        if name in INTERNAL_TOPICS or name == METADATA_TOPIC:
            raise KafkaError(ErrorCode.invalid_request, f"Internal topic {name} cannot be a mirror topic.")
        t = NewTopic(name, num_partitions, replication_factor, configs=dict(configs or {}))
        recs, _n, _rf, topic_id = self._plan_topic(t)
        recs.append(
            {
                "type": "MirrorTopicRecord",
                "topic_id": topic_id,
                "link_id": link.link_id,
                "source_topic": source_topic,
                "source_topic_id": source_topic_id,
                "state": MIRROR_ACTIVE,
            }
        )
        self.commit(recs)
        log.info("Created mirror topic %s of %s over cluster link %s", name, source_topic, link_name)
        return topic_id

    def _refuse_synced_changes(self, topic: str, current: dict, new: dict) -> None:
        """A mirror topic's synced configs are its source topic's while it mirrors: a change of
        one by AlterConfigs or IncrementalAlterConfigs is refused (INVALID_REQUEST, as a Produce
        to the mirror: Kafka has no code for it)."""
        t = self.image.topic(topic)
        m = None if t is None else self.image.mirror_topics.get(t.topic_id)
        if m is None or not m.mirroring:
            return
        changed = [k for k in MIRROR_SYNCED_CONFIGS if current.get(k) != new.get(k)]
        if changed:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Cannot alter {', '.join(changed)} of mirror topic {topic}: synced from its source topic "
                f"{m.source_topic}, read-only while it mirrors (alter the source topic, or promote or fail "
                "the mirror over first)",
            )

    def sync_mirror_configs(self, name: str, configs: dict[str, str | None]) -> list[str]:
        """The synced configs of mirror ``name`` as its source topic has them (a value None: no
        override at the source, so none here). Only while it mirrors, never after a failover or
        promotion; only the keys that differ are written. Returns their names."""
        t = self.image.topic(name)
        m = None if t is None else self.image.mirror_topics.get(t.topic_id)
        if m is None or not m.mirroring:
            raise KafkaError(ErrorCode.invalid_request, f"Topic '{name}' is not an active mirror topic.")
        current = self.image.topic_configs(name)
        recs = []
        for key, value in sorted(configs.items()):
            if key not in MIRROR_SYNCED_CONFIGS:
                raise KafkaError(ErrorCode.invalid_request, f"Topic config {key} is not synced from a source topic.")
            if current.get(key) == value:
                continue
            if value is not None:
                try:
                    validate_topic_configs({key: value})
                except ConfigError as e:
                    raise KafkaError(ErrorCode.invalid_config, str(e)) from None
            recs.append(
                {
                    "type": "ConfigRecord",
                    "resource_type": RESOURCE_TOPIC,
                    "resource_name": name,
                    "name": key,
                    "value": value,
                }
            )
        if recs:
            self.commit(recs)
        return [r["name"] for r in recs]

    def grow_mirror_topic(self, name: str, partitions: int) -> None:
        """The source topic of mirror ``name`` has ``partitions`` partitions now: the mirror gets the
        ones it lacks (nothing when it has them already: every broker that leads one of its
        partitions may ask)."""
        t = self.image.topic(name)
        m = None if t is None else self.image.mirror_topics.get(t.topic_id)
        if m is None or not m.mirroring:
            raise KafkaError(ErrorCode.invalid_request, f"Topic '{name}' is not an active mirror topic.")
        if partitions > len(t.partitions):
            self.create_partitions(name, partitions, None, False)
            log.info("Mirror topic %s has %d partitions now, as its source %s", name, partitions, m.source_topic)

    # the state changes ``kesque mirrors`` asks for: {operation: (states it applies to, new state)};
    # a promotion writes what a failover writes (the tool waited until the mirror caught up)
    MIRROR_OPS = {
        "pause": ((MIRROR_ACTIVE, MIRROR_PAUSED), MIRROR_PAUSED),
        "resume": ((MIRROR_ACTIVE, MIRROR_PAUSED), MIRROR_ACTIVE),
        "failover": ((MIRROR_ACTIVE, MIRROR_PAUSED), MIRROR_FAILED_OVER),
        "promote": ((MIRROR_ACTIVE, MIRROR_PAUSED), MIRROR_PROMOTED),
    }

    def alter_mirror_topics(
        self, op: str, names: list[str], max_producer_id: int = -1, max_epoch: int = -1
    ) -> list[KafkaError | None]:
        """One error (or None) per topic: ``op`` is one of MIRROR_OPS.

        ``failover`` makes the topics writable now, in one batch with what a writable topic
        needs (docs/mirror.md): every partition's leader epoch raised above ``max_epoch`` (the
        highest source epoch in the mirrored logs; a leader epoch only grows by one per
        PartitionChangeRecord naming the leader, so as many records as that takes), and the
        cluster's next producer id above ``max_producer_id`` (the highest mirrored one), so a new
        producer never gets an id the mirrored logs use. The leaders then abort the transactions
        whose markers never came (``MirrorTopic.max_producer_id`` says whose)."""
        allowed, new = self.MIRROR_OPS[op]
        out: list[KafkaError | None] = []
        records = []
        for name in names:
            t = self.image.topic(name)
            m = None if t is None else self.image.mirror_topics.get(t.topic_id)
            if t is None:
                out.append(KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."))
            elif m is None:
                out.append(KafkaError(ErrorCode.invalid_request, f"Topic '{name}' is not a mirror topic."))
            elif m.state not in allowed:
                out.append(
                    KafkaError(
                        ErrorCode.invalid_request,
                        f"Mirror topic '{name}' is {MIRROR_STATES[m.state]}: it cannot {op}.",
                    )
                )
            else:
                out.append(None)
                if m.state != new:
                    writable = new in (MIRROR_FAILED_OVER, MIRROR_PROMOTED)
                    pid = max_producer_id if writable else m.max_producer_id
                    records.append(
                        mirror_record(MirrorImage(m.topic_id, m.link_id, m.source_topic, m.source_topic_id, new, pid))
                    )
                    if writable:
                        records += self._epochs_above(t, max_epoch)
        if records and op in ("failover", "promote") and max_producer_id >= self.image.next_producer_id:
            records.append(
                {
                    "type": "ProducerIdsRecord",
                    "broker_id": -1,
                    "broker_epoch": -1,
                    "next_producer_id": max_producer_id + 1,
                }
            )
        self.commit(records)
        return out

    @staticmethod
    def _epochs_above(t, max_epoch: int) -> list[dict]:
        """PartitionChangeRecords that take each led partition's leader epoch past ``max_epoch``
        (at least one: the leader then starts an epoch of its own in the log)."""
        out = []
        for pid, p in sorted(t.partitions.items()):
            if p.leader < 0:
                continue
            bumps = max(1, max_epoch + 1 - p.leader_epoch)
            out += [
                {"type": "PartitionChangeRecord", "partition_id": pid, "topic_id": t.topic_id, "leader": p.leader}
                for _ in range(bumps)
            ]
        return out

    def warn_without_effect(self, names=None) -> None:
        """Log once per key the dynamic broker configs kesque stores and describes but does
        not act on (by default: every one the image holds, as at start)."""
        if names is None:
            names = [n for (rtype, _r), cfg in self.image.configs.items() if rtype == RESOURCE_BROKER for n in cfg]
        fresh = sorted({n for n in names if not has_effect(n)} - self._warned_without_effect)
        if fresh:
            self._warned_without_effect.update(fresh)
            log.warning(
                "Dynamic broker config(s) %s stored, but kesque does not act on %s (yet)",
                ", ".join(fresh),
                "it" if len(fresh) == 1 else "them",
            )
