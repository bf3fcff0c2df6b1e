"""What the console asks a cluster, over kesque's own wire client (:mod:`kesque.client`):
only Kafka protocol requests, so the same pages read kesque and Apache Kafka alike.

Calls block (one HTTP request thread at a time holds the admin, see :mod:`.endpoint`); every
answer is plain data (dicts, lists, ints, strings) that the pages render and ``/api/*.json``
returns unchanged. A refusal the page should show becomes :class:`ConsoleError` with an HTTP
status; a broker that cannot be reached is a 502 naming it, never a traceback.
"""

from __future__ import annotations

import datetime
import struct
import time

from ..client.cluster import Cluster
from ..client.consumer import FetchError, WireConsumer
from ..client.producer import Producer
from ..client.transactions import read_describe_transactions_v0
from ..client.wire import AuthenticationError, ClientSecurity, WireError, make
from ..errors import KafkaError, error_name
from ..protocol.api_keys import ApiKeys

# AclOperation codes (org.apache.kafka.common.acl.AclOperation): bit n of an
# authorized_operations field is operation n
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS = (
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
)
OPS_NOT_ASKED = -(2**31)  # Kafka's "authorized operations not included"

# DescribeConfigs' config_source (org.apache.kafka.clients.admin.ConfigEntry.ConfigSource)
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}

EARLIEST, LATEST = -2, -1
MAX_MESSAGES = 500  # a page shows at most this many records
MAX_TXN_MS = 900000  # transaction.max.timeout.ms's default: an open transaction older than this hangs
CHART_GROUPS = 50  # the charts follow this many consumer groups
BROWSE_WAIT_S = 2.0  # the browser stops reading after this long without reaching its limit


class ConsoleError(Exception):
    """A message for the page, with the HTTP status it is served with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def allowed(ops: int | None, op: int) -> bool:
    """``op`` is in an authorized_operations bit field (a field the broker did not fill in,
    or that was not asked for, allows nothing: a write action is only shown when granted)."""
    if ops is None or ops == OPS_NOT_ASKED or ops < 0:
        return False
    return bool(ops & (1 << op))


def _check(code: int, what: str, message: str | None = None) -> None:
    if code:
        name = error_name(code)
        status = 404 if code in (3, 69, 105) else 403 if code in (29, 30, 31, 53) else 409
        raise ConsoleError(status, f"{what}: {name}" + (f" ({message})" if message else ""))


def _ms(v) -> int:
    if v is None:
        return -1
    if isinstance(v, datetime.datetime):
        return int(v.timestamp() * 1000)
    if isinstance(v, datetime.timedelta):
        return int(v.total_seconds() * 1000)
    return int(v)


class ConsoleAdmin(Cluster):
    def __init__(self, bootstrap: str, *, timeout: float = 10.0, client_props: dict | ClientSecurity | None = None):
        super().__init__(bootstrap, client_id="kesque-console", timeout=timeout, client_props=client_props)

    # ------------------------------------------------------------------ plumbing
    def _call(self, node: int | None, api: int, build, max_version: int | None = None, reader=None):
        """One request to ``node`` (None: the bootstrap connection), once more on a fresh
        connection if the first is broken; a cluster that does not answer is a 502."""
        for attempt in (0, 1):
            try:
                conn = self._bootstrap_conn() if node is None else self._conn(node)
                return conn.request(api, build, max_version=max_version, reader=reader)
            except AuthenticationError as e:
                self._drop_all()
                raise self.unreachable(e) from None
            except (OSError, WireError) as e:
                self._drop_all()
                if attempt:
                    raise self.unreachable(e) from None
        raise AssertionError("unreachable")

    def unreachable(self, e: Exception) -> ConsoleError:
        """The 502 of a cluster that did not answer, or refused the console's TLS or SASL login
        (the message Kafka's clients report for it)."""
        if isinstance(e, AuthenticationError):
            java = f"org.apache.kafka.common.errors.{e.java_name}"
            return ConsoleError(502, f"the cluster at {self.bootstrap} refused the console: {java}: {e}")
        return ConsoleError(502, f"the cluster at {self.bootstrap} did not answer: {e}")

    def _metadata(self, topics: list[str] | None):
        def build(mod, v):
            rq = mod.request
            ts = None if topics is None else tuple(make(rq.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
            return make(
                rq.MetadataRequest,
                topics=ts,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
                include_cluster_authorized_operations=False,
            )

        resp = self._call(None, ApiKeys.METADATA, build, max_version=12)
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
        return resp

    # ------------------------------------------------------------------ cluster
    def cluster(self) -> dict:
        """DescribeCluster: the brokers, the controller, what the caller may do on the cluster."""

        def build(mod, v):
            return make(
                mod.request.DescribeClusterRequest,
                include_cluster_authorized_operations=True,
                endpoint_type=1,
                include_fenced_brokers=True,
            )

        resp = self._call(None, ApiKeys.DESCRIBE_CLUSTER, build)
        _check(int(resp.error_code), "DescribeCluster", resp.error_message)
        return {
            "cluster_id": resp.cluster_id,
            "controller_id": int(resp.controller_id),
            "brokers": sorted(
                (
                    {
                        "id": int(b.broker_id),
                        "host": b.host,
                        "port": int(b.port),
                        "rack": b.rack,
                        "fenced": bool(getattr(b, "is_fenced", False)),
                    }
                    for b in resp.brokers
                ),
                key=lambda b: b["id"],
            ),
            "ops": int(resp.cluster_authorized_operations),
        }

    def cluster_ops(self) -> int | None:
        """What the caller may do on the cluster (None: DescribeCluster refused, so nothing)."""
        try:
            return self.cluster()["ops"]
        except ConsoleError as e:
            if e.status == 502:
                raise
            return None

    def quorum(self) -> dict | None:
        """DescribeQuorum of the metadata log (None where the cluster answers no quorum)."""

        def build(mod, v):
            rq = mod.request
            return make(
                rq.DescribeQuorumRequest,
                topics=(
                    make(
                        rq.TopicData,
                        topic_name="__cluster_metadata",
                        partitions=(make(rq.PartitionData, partition_index=0),),
                    ),
                ),
            )

        try:
            resp = self._call(None, ApiKeys.DESCRIBE_QUORUM, build)
        except ConsoleError:
            return None
        if int(resp.error_code) or not resp.topics or not resp.topics[0].partitions:
            return None
        p = resp.topics[0].partitions[0]
        if int(p.error_code):
            return None

        def replica(r, voter):
            return {
                "id": int(r.replica_id),
                "voter": voter,
                "log_end_offset": int(r.log_end_offset),
                "lag": max(int(p.high_watermark) - int(r.log_end_offset), 0),
                "last_fetch_ms": _ms(r.last_fetch_timestamp),
                "last_caught_up_ms": _ms(r.last_caught_up_timestamp),
            }

        return {
            "leader_id": int(p.leader_id),
            "leader_epoch": int(p.leader_epoch),
            "high_watermark": int(p.high_watermark),
            "replicas": [replica(r, True) for r in p.current_voters] + [replica(r, False) for r in p.observers],
        }

    def overview(self) -> dict:
        c = self.cluster()
        md = self._metadata(None)
        under, offline, partitions = [], [], 0
        for t in md.topics:
            for p in t.partitions:
                partitions += 1
                tp = f"{t.name}-{int(p.partition_index)}"
                if int(p.leader_id) < 0:
                    offline.append(tp)
                elif len(p.isr_nodes) < len(p.replica_nodes):
                    under.append(tp)
        c.update(
            quorum=self.quorum(),
            topics=len(md.topics),
            partitions=partitions,
            under_replicated=sorted(under),
            offline=sorted(offline),
        )
        return c

    # ------------------------------------------------------------------ topics
    def topics(self) -> list[dict]:
        md = self._metadata(None)
        return sorted(
            (
                {
                    "name": t.name,
                    "internal": bool(t.is_internal),
                    "partitions": len(t.partitions),
                    "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
                    "under_replicated": sum(1 for p in t.partitions if len(p.isr_nodes) < len(p.replica_nodes)),
                    "ops": int(t.topic_authorized_operations),
                }
                for t in md.topics
                if int(t.error_code) == 0
            ),
            key=lambda t: t["name"],
        )

    def topic(self, name: str) -> dict:
        """Partitions (leader, replicas, ISR, offsets, size on the leader) and configs of ``name``."""
        md = self._metadata([name])
        t = next((t for t in md.topics if t.name == name), None)
        if t is None or int(t.error_code) == 3:
            raise ConsoleError(404, f"Topic {name} does not exist.")
        _check(int(t.error_code), f"Topic {name}")
        parts = sorted(
            (
                {
                    "partition": int(p.partition_index),
                    "leader": int(p.leader_id),
                    "replicas": [int(r) for r in p.replica_nodes],
                    "isr": [int(r) for r in p.isr_nodes],
                    "offline": [int(r) for r in p.offline_replicas],
                }
                for p in t.partitions
            ),
            key=lambda p: p["partition"],
        )
        tps = [(name, p["partition"]) for p in parts if p["leader"] >= 0]
        start = self.offsets(tps, EARLIEST)
        end = self.offsets(tps, LATEST)
        sizes = self.sizes(name, [p["partition"] for p in parts])
        for p in parts:
            tp = (name, p["partition"])
            p["start_offset"] = start.get(tp, -1)
            p["end_offset"] = end.get(tp, -1)
            p["size"] = sizes.get((p["leader"], p["partition"]), -1)
        return {
            "name": name,
            "internal": bool(t.is_internal),
            "topic_id": str(t.topic_id) if getattr(t, "topic_id", None) else None,
            "partitions": parts,
            "configs": self.configs(name),
            "ops": int(t.topic_authorized_operations),
        }

    def sizes(self, topic: str, partitions: list[int]) -> dict[tuple[int, int], int]:
        """{(broker, partition): bytes} from DescribeLogDirs on every broker (future replicas
        of a move between log dirs left out); a broker that refuses adds nothing."""

        def build(mod, v):
            rq = mod.request
            return make(
                rq.DescribeLogDirsRequest,
                topics=(make(rq.DescribableLogDirTopic, topic=topic, partitions=tuple(partitions)),),
            )

        out: dict[tuple[int, int], int] = {}
        for node in sorted(self.brokers):
            try:
                resp = self._call(node, ApiKeys.DESCRIBE_LOG_DIRS, build)
            except ConsoleError:
                continue
            for d in resp.results:
                for t in d.topics:
                    for p in t.partitions:
                        if t.name == topic and not p.is_future_key:
                            key = (node, int(p.partition_index))
                            out[key] = out.get(key, 0) + int(p.partition_size)
        return out

    def configs(self, topic: str) -> list[dict]:
        def build(mod, v):
            rq = mod.request
            return make(
                rq.DescribeConfigsRequest,
                include_synonyms=False,
                include_documentation=False,
                resources=(
                    make(rq.DescribeConfigsResource, resource_type=2, resource_name=topic, configuration_keys=None),
                ),
            )

        resp = self._call(None, ApiKeys.DESCRIBE_CONFIGS, build)
        r = resp.results[0]
        if int(r.error_code):  # DESCRIBE_CONFIGS refused: the page shows no configs
            return []
        return sorted(
            (
                {
                    "name": c.name,
                    "value": None if c.is_sensitive else c.value,
                    "source": CONFIG_SOURCES.get(int(c.config_source), str(c.config_source)),
                    "read_only": bool(c.read_only),
                    "sensitive": bool(c.is_sensitive),
                }
                for c in r.configs
            ),
            key=lambda c: c["name"],
        )

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        def build(mod, v):
            rq = mod.request
            topic = make(
                rq.CreatableTopic,
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=(),
                configs=tuple(make(rq.CreatableTopicConfig, name=k, value=val) for k, val in configs.items()),
            )
            return make(rq.CreateTopicsRequest, topics=(topic,), timeout=30000, validate_only=False)

        resp = self._call(None, ApiKeys.CREATE_TOPICS, build)
        r = resp.topics[0]
        _check(int(r.error_code), f"Creating topic {name}", r.error_message)

    def delete_topic(self, name: str) -> None:
        def build(mod, v):
            rq = mod.request
            return make(
                rq.DeleteTopicsRequest,
                topic_names=(name,),
                timeout=30000,
                topics=(make(rq.DeleteTopicState, name=name, topic_id=None),),
            )

        resp = self._call(None, ApiKeys.DELETE_TOPICS, build)
        r = resp.responses[0]
        _check(int(r.error_code), f"Deleting topic {name}", getattr(r, "error_message", None))

    def alter_config(self, topic: str, key: str, value: str | None) -> None:
        """IncrementalAlterConfigs: SET ``key`` to ``value``, or DELETE it (None)."""

        def build(mod, v):
            rq = mod.request
            cfg = make(rq.AlterableConfig, name=key, config_operation=0 if value is not None else 1, value=value)
            return make(
                rq.IncrementalAlterConfigsRequest,
                resources=(make(rq.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(cfg,)),),
                validate_only=False,
            )

        resp = self._call(None, ApiKeys.INCREMENTAL_ALTER_CONFIGS, build)
        r = resp.responses[0]
        _check(int(r.error_code), f"Altering {key} of topic {topic}", r.error_message)

    # ------------------------------------------------------------------ offsets and records
    def offsets(self, tps: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets at the leaders (EARLIEST, LATEST or a timestamp; -1: none matched)."""
        if not tps:
            return {}
        consumer = WireConsumer(
            self.bootstrap, client_id="kesque-console", timeout=self.timeout, client_props=self.security
        )
        try:
            return consumer.list_offsets(tps, timestamp)
        except FetchError as e:
            raise ConsoleError(409, f"ListOffsets: {error_name(e.code)}") from None
        except (OSError, WireError, AuthenticationError) as e:
            raise self.unreachable(e) from None
        finally:
            consumer.close()

    def messages(
        self,
        topic: str,
        partition: int,
        offset: int | None = None,
        timestamp: int | None = None,
        limit: int = 50,
        search: str = "",
    ) -> dict:
        """Up to ``limit`` records of ``topic``-``partition`` from ``offset`` (or the first at
        or after ``timestamp``; neither: the last ``limit``), those whose key, value or a header
        contains ``search``."""
        info = self.topic_partitions(topic)
        if partition not in info:
            raise ConsoleError(404, f"Topic {topic} has no partition {partition} (partitions: 0-{len(info) - 1}).")
        tp = (topic, partition)
        start = self.offsets([tp], EARLIEST)[tp]
        end = self.offsets([tp], LATEST)[tp]
        if timestamp is not None:
            found = self.offsets([tp], timestamp)[tp]
            offset = end if found < 0 else found
        elif offset is None:
            offset = max(start, end - limit)
        if offset < start or offset > end:
            raise ConsoleError(
                416,
                f"Offset {offset} is out of range for {topic}-{partition}: its records are at offsets "
                f"{start} to {end - 1}" + (" (it is empty)" if start == end else "") + ".",
            )
        out: list[dict] = []
        needle = search.encode()
        position = offset
        if offset < end:
            consumer = WireConsumer(
                self.bootstrap,
                client_id="kesque-console",
                timeout=self.timeout,
                auto_offset_reset="earliest",
                client_props=self.security,
            )
            try:
                consumer.assign({tp: offset})
                deadline = time.monotonic() + BROWSE_WAIT_S
                while len(out) < limit and position < end and time.monotonic() < deadline:
                    got = consumer.poll(0.2)
                    for m in got:
                        if len(out) >= limit:
                            break  # a later page starts here
                        position = m.offset + 1
                        if needle and not any(
                            needle in (x or b"") for x in (m.key, m.value, *(h[1] for h in m.headers))
                        ):
                            continue
                        out.append(_record(m))
                    if not got:  # past control batches and aborted records: the consumer's own position
                        position = max(position, consumer.assignment[tp].position)
            except FetchError as e:
                raise ConsoleError(409, f"Fetch: {error_name(e.code)}") from None
            except (OSError, WireError, AuthenticationError) as e:
                raise self.unreachable(e) from None
            finally:
                consumer.close()
        return {
            "topic": topic,
            "partition": partition,
            "start_offset": start,
            "end_offset": end,
            "records": out,
            "next_offset": min(position, end),  # where reading stopped: the next page starts there
        }

    def topic_partitions(self, topic: str) -> list[int]:
        md = self._metadata([topic])
        t = next((t for t in md.topics if t.name == topic), None)
        if t is None or int(t.error_code) == 3:
            raise ConsoleError(404, f"Topic {topic} does not exist.")
        _check(int(t.error_code), f"Topic {topic}")
        return sorted(int(p.partition_index) for p in t.partitions)

    def produce(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
    ) -> tuple[int, int]:
        """One record, acks=all; (partition, offset) it was written at."""
        parts = self.topic_partitions(topic)
        if partition is not None and partition not in parts:
            raise ConsoleError(404, f"Topic {topic} has no partition {partition} (partitions: 0-{len(parts) - 1}).")
        producer = Producer(
            self.bootstrap,
            enable_idempotence=False,
            client_id="kesque-console",
            timeout=self.timeout,
            client_props=self.security,
        )
        try:
            producer.send(topic, value, key=key, headers=headers, partition=partition)
            producer.flush()
            ((tp, bases),) = producer.offsets.items()
            return tp[1], bases[0]
        except KafkaError as e:
            raise ConsoleError(409, f"Produce to {topic}: {error_name(e.code)} ({e})") from None
        except (OSError, WireError, AuthenticationError) as e:
            raise self.unreachable(e) from None
        finally:
            producer.close()

    # ------------------------------------------------------------------ consumer groups
    def groups(self, types: tuple[str, ...] = ()) -> list[dict]:
        """ListGroups on every broker."""
        self._metadata([])
        out: dict[str, dict] = {}
        for node in sorted(self.brokers):

            def build(mod, v):
                return make(mod.request.ListGroupsRequest, states_filter=(), types_filter=types)

            resp = self._call(node, ApiKeys.LIST_GROUPS, build)
            _check(int(resp.error_code), f"ListGroups on broker {node}")
            for g in resp.groups:
                out[g.group_id] = {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "state": getattr(g, "group_state", "") or "",
                    "type": (getattr(g, "group_type", "") or "").lower(),
                }
        return [out[g] for g in sorted(out)]

    def _coordinator(self, group: str) -> int:
        try:
            return self.find_coordinator(group, 0)
        except KafkaError as e:
            raise ConsoleError(409, f"No coordinator for group {group}: {error_name(e.code)}") from None
        except (OSError, WireError, AuthenticationError) as e:
            raise self.unreachable(e) from None

    def group(self, group: str) -> dict:
        """Members and assignment (ConsumerGroupDescribe, else DescribeGroups), committed
        offsets, end offsets and lag per partition."""
        node = self._coordinator(group)
        desc = None
        if self._conn(node).version_for(ApiKeys.CONSUMER_GROUP_DESCRIBE) is not None:

            def build(mod, v):
                return make(
                    mod.request.ConsumerGroupDescribeRequest, group_ids=(group,), include_authorized_operations=True
                )

            g = self._call(node, ApiKeys.CONSUMER_GROUP_DESCRIBE, build).groups[0]
            if int(g.error_code) == 0:
                desc = {
                    "group_id": group,
                    "type": "consumer",
                    "state": g.group_state,
                    "assignor": g.assignor_name,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "client_id": m.client_id,
                            "host": m.client_host,
                            "assignment": sorted(
                                (tp.topic_name, int(p)) for tp in m.assignment.topic_partitions for p in tp.partitions
                            ),
                        }
                        for m in g.members
                    ],
                    "ops": int(g.authorized_operations),
                }
            elif int(g.error_code) not in (69, 35):  # not a KIP-848 group: DescribeGroups below
                _check(int(g.error_code), f"Group {group}", g.error_message)
        if desc is None:

            def build(mod, v):
                return make(mod.request.DescribeGroupsRequest, groups=(group,), include_authorized_operations=True)

            g = self._call(node, ApiKeys.DESCRIBE_GROUPS, build, max_version=5).groups[0]
            _check(int(g.error_code), f"Group {group}")
            if g.group_state == "Dead":
                raise ConsoleError(404, f"Consumer group {group} does not exist.")
            desc = {
                "group_id": group,
                "type": "classic",
                "state": g.group_state,
                "assignor": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "host": m.client_host,
                        "assignment": sorted(_consumer_assignment(bytes(m.member_assignment or b""))),
                    }
                    for m in g.members
                ],
                "ops": int(g.authorized_operations),
            }
        committed = self.committed(group, node)
        owner = {tp: m["member_id"] for m in desc["members"] for tp in m["assignment"]}
        tps = sorted(set(committed) | set(owner))
        end = self.offsets(tps, LATEST) if tps else {}
        desc["partitions"] = [
            {
                "topic": t,
                "partition": p,
                "committed": committed.get((t, p)),
                "end_offset": end.get((t, p), -1),
                "lag": None if committed.get((t, p)) is None else max(end.get((t, p), 0) - committed[(t, p)], 0),
                "member_id": owner.get((t, p)),
            }
            for t, p in tps
        ]
        desc["lag"] = sum(p["lag"] or 0 for p in desc["partitions"])
        return desc

    def committed(self, group: str, node: int) -> dict[tuple[str, int], int]:
        def build(mod, v):
            rq = mod.request
            if v >= 8:
                return make(
                    rq.OffsetFetchRequest,
                    groups=(
                        make(rq.OffsetFetchRequestGroup, group_id=group, member_id=None, member_epoch=-1, topics=None),
                    ),
                    require_stable=True,
                )
            return make(rq.OffsetFetchRequest, group_id=group, topics=None, require_stable=True)

        resp = self._call(node, ApiKeys.OFFSET_FETCH, build, max_version=9)
        if hasattr(resp, "groups"):
            g = resp.groups[0]
            _check(int(g.error_code), f"OffsetFetch of group {group}")
            topics = g.topics
        else:
            _check(int(resp.error_code), f"OffsetFetch of group {group}")
            topics = resp.topics
        return {
            (t.name, int(p.partition_index)): int(p.committed_offset)
            for t in topics
            for p in t.partitions
            if int(p.committed_offset) >= 0
        }

    def reset_offsets(self, group: str, to: str, offset: int | None = None) -> dict[tuple[str, int], int]:
        """kafka-consumer-groups.sh --reset-offsets --all-topics --execute: the group's
        partitions to the earliest, the latest or a given offset (an inactive group only, as
        the tool requires)."""
        desc = self.group(group)
        if desc["members"]:
            raise ConsoleError(
                409,
                f"Assignments can only be reset if the group '{group}' is inactive, but the current state is "
                f"{desc['state']}.",
            )
        tps = [(p["topic"], p["partition"]) for p in desc["partitions"]]
        if not tps:
            raise ConsoleError(409, f"Group {group} has no committed offsets to reset.")
        if to == "earliest":
            target = self.offsets(tps, EARLIEST)
        elif to == "latest":
            target = self.offsets(tps, LATEST)
        else:
            lo, hi = self.offsets(tps, EARLIEST), self.offsets(tps, LATEST)
            target = {tp: min(max(int(offset or 0), lo[tp]), hi[tp]) for tp in tps}  # clamped, as the tool does
        node = self._coordinator(group)

        def build(mod, v):
            rq = mod.request
            by_topic: dict[str, list] = {}
            for (t, p), off in sorted(target.items()):
                by_topic.setdefault(t, []).append(
                    make(
                        rq.OffsetCommitRequestPartition,
                        partition_index=p,
                        committed_offset=off,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                )
            return make(
                rq.OffsetCommitRequest,
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                retention_time=-1,
                topics=tuple(
                    make(rq.OffsetCommitRequestTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                ),
            )

        resp = self._call(node, ApiKeys.OFFSET_COMMIT, build, max_version=9)
        for t in resp.topics:
            for p in t.partitions:
                _check(int(p.error_code), f"OffsetCommit of group {group} on {t.name}-{int(p.partition_index)}")
        return target

    # ------------------------------------------------------------------ share groups
    def share_group(self, group: str) -> dict:
        node = self._coordinator(group)

        def build(mod, v):
            return make(mod.request.ShareGroupDescribeRequest, group_ids=(group,), include_authorized_operations=True)

        g = self._call(node, ApiKeys.SHARE_GROUP_DESCRIBE, build).groups[0]
        if int(g.error_code) == 69:
            raise ConsoleError(404, f"Share group {group} does not exist.")
        _check(int(g.error_code), f"Share group {group}", g.error_message)
        return {
            "group_id": group,
            "state": g.group_state,
            "group_epoch": int(g.group_epoch),
            "assignor": g.assignor_name,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "subscribed": sorted(m.subscribed_topic_names),
                    "assignment": sorted(
                        (tp.topic_name, int(p)) for tp in m.assignment.topic_partitions for p in tp.partitions
                    ),
                }
                for m in g.members
            ],
        }

    # ------------------------------------------------------------------ transactions
    def transactions(self) -> dict:
        """ListTransactions on every broker and DescribeTransactions at each coordinator;
        the open transactions of every partition (DescribeProducers at the leaders), hanging
        ones marked as kafka-transactions.sh find-hanging marks them."""
        cluster_ops = self.cluster_ops()
        md = self._metadata(None)
        listed: dict[str, dict] = {}
        for node in sorted(self.brokers):

            def build(mod, v):
                return make(
                    mod.request.ListTransactionsRequest,
                    state_filters=(),
                    producer_id_filters=(),
                    duration_filter=-1,
                    transactional_id_pattern=None,
                )

            resp = self._call(node, ApiKeys.LIST_TRANSACTIONS, build)
            if int(resp.error_code) in (29, 31, 53):  # not allowed to list: none shown
                continue
            _check(int(resp.error_code), f"ListTransactions on broker {node}")
            for t in resp.transaction_states:
                listed[t.transactional_id] = {
                    "transactional_id": t.transactional_id,
                    "producer_id": int(t.producer_id),
                    "producer_epoch": -1,
                    "state": t.transaction_state,
                    "start_ms": -1,
                    "timeout_ms": -1,
                    "partitions": [],
                }
        for tid, row in listed.items():
            try:
                node = self.find_coordinator(tid, 1)
            except (KafkaError, OSError, WireError, AuthenticationError):
                continue
            resp = self._call(
                node,
                ApiKeys.DESCRIBE_TRANSACTIONS,
                lambda mod, v, tid=tid: make(mod.request.DescribeTransactionsRequest, transactional_ids=(tid,)),
                max_version=0,
                reader=read_describe_transactions_v0,
            )
            for st in resp.transaction_states:
                if st.transactional_id == tid and not st.error_code:
                    row.update(
                        producer_epoch=st.producer_epoch,
                        state=st.transaction_state,
                        start_ms=st.transaction_start_time,
                        timeout_ms=st.transaction_timeout,
                        partitions=sorted((t.topic, p) for t in st.topics for p in t.partitions),
                    )
        ongoing = {
            (r["producer_id"], tp)
            for r in listed.values()
            if r["state"] in ("Ongoing", "PrepareCommit", "PrepareAbort")
            for tp in r["partitions"]
        }
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for t in md.topics:
            for p in t.partitions:
                if int(p.leader_id) >= 0:
                    by_leader.setdefault(int(p.leader_id), []).append((t.name, int(p.partition_index)))
        now = int(time.time() * 1000)
        open_txns = []
        for leader, tps in sorted(by_leader.items()):
            for tp, st in sorted(self._producers(leader, tps).items()):
                for a in st:
                    if a["current_txn_start_offset"] < 0:
                        continue
                    hanging = (a["producer_id"], tp) not in ongoing or now - a["last_timestamp"] > MAX_TXN_MS
                    open_txns.append(
                        {
                            "topic": tp[0],
                            "partition": tp[1],
                            "producer_id": a["producer_id"],
                            "producer_epoch": a["producer_epoch"],
                            "start_offset": a["current_txn_start_offset"],
                            "last_timestamp": a["last_timestamp"],
                            "hanging": hanging,
                        }
                    )
        return {
            "cluster_ops": cluster_ops,
            "transactions": [listed[t] for t in sorted(listed)],
            "open": open_txns,
        }

    def _producers(self, leader: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], list[dict]]:
        """DescribeProducers at ``leader``: the active producers of each partition it leads."""

        def build(mod, v):
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            return make(
                mod.request.DescribeProducersRequest,
                topics=tuple(
                    make(mod.request.TopicRequest, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
                ),
            )

        resp = self._call(leader, ApiKeys.DESCRIBE_PRODUCERS, build, max_version=0)
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                if int(p.error_code) == 0:
                    out[(t.name, int(p.partition_index))] = [
                        {
                            "producer_id": int(a.producer_id),
                            "producer_epoch": int(a.producer_epoch),
                            "coordinator_epoch": int(a.coordinator_epoch),
                            "last_timestamp": _ms(a.last_timestamp),
                            "current_txn_start_offset": int(a.current_txn_start_offset),
                        }
                        for a in p.active_producers
                    ]
        return out

    def abort_transaction(self, topic: str, partition: int, start_offset: int) -> None:
        """kafka-transactions.sh abort --topic --partition --start-offset: the producer whose
        open transaction on the partition starts there (DescribeProducers at the leader), and an
        abort marker for it written by WriteTxnMarkers to the leader."""
        md = self._metadata([topic])
        t = next((t for t in md.topics if t.name == topic), None)
        if t is None or int(t.error_code) == 3:
            raise ConsoleError(404, f"Topic {topic} does not exist.")
        leader = next((int(p.leader_id) for p in t.partitions if int(p.partition_index) == partition), -1)
        if leader < 0:
            raise ConsoleError(409, f"{topic}-{partition} has no leader.")
        found = [
            a
            for a in self._producers(leader, [(topic, partition)]).get((topic, partition), [])
            if a["current_txn_start_offset"] == start_offset
        ]
        if not found:
            raise ConsoleError(
                404, f"No open transaction on {topic}-{partition} starts at offset {start_offset} (it may have ended)."
            )
        a = found[0]

        def build(mod, v):
            rq = mod.request
            return make(
                rq.WriteTxnMarkersRequest,
                markers=(
                    make(
                        rq.WritableTxnMarker,
                        producer_id=a["producer_id"],
                        producer_epoch=a["producer_epoch"],
                        transaction_result=False,
                        coordinator_epoch=max(a["coordinator_epoch"], 0),
                        topics=(make(rq.WritableTxnMarkerTopic, name=topic, partition_indexes=(partition,)),),
                    ),
                ),
            )

        resp = self._call(leader, ApiKeys.WRITE_TXN_MARKERS, build, max_version=1)
        for m in resp.markers:
            for mt in m.topics:
                for mp in mt.partitions:
                    _check(int(mp.error_code), f"Aborting the transaction on {topic}-{partition}")

    # ------------------------------------------------------------------ quotas
    def quotas(self) -> list[dict]:
        """DescribeClientQuotas of every entity (users, clients, IPs; defaults included)."""
        out = []
        for entity in ("user", "client-id", "ip"):

            def build(mod, v, entity=entity):
                rq = mod.request
                return make(
                    rq.DescribeClientQuotasRequest,
                    components=(make(rq.ComponentData, entity_type=entity, match_type=2, match=None),),
                    strict=False,
                )

            resp = self._call(None, ApiKeys.DESCRIBE_CLIENT_QUOTAS, build)
            _check(int(resp.error_code), "DescribeClientQuotas", resp.error_message)
            for e in resp.entries or ():
                key = {d.entity_type: d.entity_name for d in e.entity}
                row = {"entity": key, "values": {v.key: float(v.value) for v in e.values}}
                if row not in out:
                    out.append(row)
        return sorted(out, key=lambda r: sorted((k, v or "") for k, v in r["entity"].items()))

    # ------------------------------------------------------------------ charts
    def stats(self) -> dict:
        """What the live charts poll: each topic's end offset (summed over its partitions)
        and the total lag of each consumer group (the first :data:`CHART_GROUPS` by name), with
        the time they were read. Lag here is committed offsets against the end offsets read in
        the same call (OffsetFetch at each coordinator), no describe."""
        md = self._metadata(None)
        tps = [(t.name, int(p.partition_index)) for t in md.topics if not t.is_internal for p in t.partitions]
        ends = self.offsets(tps, LATEST)
        topics: dict[str, int] = {}
        for (t, _p), off in ends.items():
            topics[t] = topics.get(t, 0) + max(off, 0)
        groups = [
            g["group_id"] for g in self.groups() if g["protocol_type"] in ("consumer", "") and g["type"] != "share"
        ]
        lags = {}
        for gid in groups[:CHART_GROUPS]:
            try:
                committed = self.committed(gid, self._coordinator(gid))
            except ConsoleError:
                continue
            missing = [tp for tp in committed if tp not in ends]  # an internal topic's, say
            known = {**ends, **(self.offsets(missing, LATEST) if missing else {})}
            lags[gid] = sum(max(known.get(tp, off) - off, 0) for tp, off in committed.items())
        return {"time_ms": int(time.time() * 1000), "end_offsets": topics, "lag": lags}


def _record(m) -> dict:
    return {
        "partition": m.partition,
        "offset": m.offset,
        "timestamp": m.timestamp,
        "timestamp_type": m.timestamp_type,
        "key": m.key,
        "value": m.value,
        "headers": [(k, v) for k, v in m.headers],
    }


def _consumer_assignment(data: bytes) -> list[tuple[str, int]]:
    """The topic partitions of a classic consumer's ConsumerProtocolAssignment (version,
    then [topic, [partition]]); anything else (another protocol's bytes) is no partitions."""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + ln].decode()
            pos += ln
            (np_,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(np_):
                out.append((topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
        return out
    except (struct.error, UnicodeDecodeError):
        return []
