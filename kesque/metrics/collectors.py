"""What a broker's ``/metrics`` shows: one prometheus-client Collector that reads the broker's
state at scrape time, under the names the Prometheus JMX exporter's Kafka rules give Kafka's
MBeans (docs/metrics.md has the mapping).

A scrape runs in two steps. :meth:`BrokerCollector.snapshot` runs on the broker's event loop
(the endpoint hands it there, :mod:`kesque.metrics.endpoint`) and copies plain values out of the
live objects: the request path's counters (:mod:`kesque.metrics.stats`), each hosted partition's
log size, offsets and ISR, the image's partitions and brokers, the raft node's state, the open
connections, the group coordinators' committed offsets. Nothing there is formatted or allocated
beyond a tuple per partition, and the partitions are copied PARTITION_CHUNK at a time, one turn of
the loop each, so that requests are served between the chunks.
:meth:`BrokerCollector.families` then builds the metric families from that copy in the HTTP
server's thread, where prometheus-client also writes the text.

The collector gets the narrow objects it reads (:class:`Sources`), never the server.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ..errors import error_name
from ..protocol.api import api_name
from ..share.partition import ACCEPT, REJECT, RELEASE, RENEW
from ..share.partition import STATE_NAMES as SHARE_STATE_NAMES
from .stats import (
    METRIC_NAMES,
    PHASES,
    TOPIC_METERS,
    TOTAL_TIME_BUCKETS_MS,
    BrokerTopicStats,
    RequestMetrics,
)
from .telemetry import client_families

# acknowledge types as ShareGroupMetrics' ackType tag names them (AcknowledgeType, capitalized)
ACK_TYPE_NAMES = {ACCEPT: "Accept", RELEASE: "Release", REJECT: "Reject", RENEW: "Renew"}

# raft node states as Kafka's raft-metrics current-state names them
RAFT_STATES = {
    "Leader": "leader",
    "Candidate": "candidate",
    "Prospective": "prospective",
    "Voted": "voted",
    "Follower": "follower",
    "Unattached": "unattached",
    "Resigned": "resigned",
}


@dataclass
class Sources:
    """What the collector reads, each as narrow as the server can hand it over."""

    node_id: int
    topic_stats: BrokerTopicStats
    request_metrics: RequestMetrics
    image: object  # MetadataImage: topics_by_id (partitions: leader, replicas, isr), brokers
    replica_manager: object  # partitions {(topic, p): Partition}, offline_partitions, ISR change counts
    connections: Callable[[], Iterable[str]] = lambda: ()  # the listener of each open connection
    raft: object | None = None  # RaftManager: leader_id, epoch, node (state, high_watermark)
    controller_active: Callable[[], bool] = lambda: False
    group_coordinator: object | None = None  # committed_offsets(), list_groups()
    txn_coordinator: object | None = None  # shards: {p: shard with txns {id: metadata with state}}
    quotas: object | None = None  # kesque.quotas.Quotas: produce, fetch, request managers' rates()
    now_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000)  # the quotas' clock
    flush_stats: object | None = None  # kesque.storage.unified_log.LogFlushStats
    log_cleaner: Callable[[], object | None] = lambda: None  # its CleanerManager holds Kafka's gauges
    client_telemetry: object | None = None  # kesque.metrics.telemetry.ClientTelemetry: pushed client metrics
    share_manager: object | None = None  # SharePartitionManager: metrics_refs(), metrics_rows()
    extra: list = field(default_factory=list)  # more snapshot callables (name, fn)


PARTITION_CHUNK = 1000  # partitions copied per turn of the event loop
SHARE_CHUNK = 100  # share partitions read per turn (each a pass over up to max.record.locks records)


def _name(key: int) -> str:
    return METRIC_NAMES.get(key) or api_name(key)


class BrokerCollector(Collector):
    """A prometheus-client Collector; ``run_on_loop(fn)`` runs ``fn`` on the broker's event loop
    and returns its result (a direct call where there is no loop: tests, tools)."""

    def __init__(self, sources: Sources, run_on_loop: Callable = lambda fn: fn()):
        self.sources = sources
        self.run_on_loop = run_on_loop

    def collect(self):
        snap = self.run_on_loop(self.snapshot)
        # the partitions are read a chunk per turn of the loop, so that a broker with many
        # partitions serves requests between the chunks (a scrape need not be one instant)
        refs = snap.pop("partition_refs")
        rows, holds = [], [snap["loop_seconds"]]
        for i in range(0, len(refs), PARTITION_CHUNK):
            chunk_rows, seconds = self.run_on_loop(lambda c=refs[i : i + PARTITION_CHUNK]: self.partition_rows(c))
            rows += chunk_rows
            holds.append(seconds)
        snap["partitions"] = rows
        # share partitions likewise, SHARE_CHUNK at a time: each is one pass over its window of
        # in-flight records (up to group.share.partition.max.record.locks)
        share_refs = snap.pop("share_refs", None)
        if share_refs is not None:
            share_rows = []
            for i in range(0, len(share_refs), SHARE_CHUNK):
                chunk_rows, seconds = self.run_on_loop(lambda c=share_refs[i : i + SHARE_CHUNK]: self.share_rows(c))
                share_rows += chunk_rows
                holds.append(seconds)
            snap["share_rows"] = share_rows
        snap["loop_seconds"], snap["loop_longest"] = sum(holds), max(holds)
        return self.families(snap)

    def describe(self):
        return []  # registered without a describe-time collection (it would run a snapshot)

    # ------------------------------------------------------------------ on the event loop
    def snapshot(self) -> dict:
        t0 = time.perf_counter()
        s = self.sources
        image = s.image
        rm = s.replica_manager
        topics = image.topics_by_id.values()
        s.topic_stats.retire({t.name for t in topics})
        snap = {
            "topics": s.topic_stats.snapshot(),
            "requests": s.request_metrics.snapshot(),
            "partition_refs": list(rm.partitions.items()),
            "offline_replicas": len(rm.offline_partitions),
            "isr": (rm.isr_shrinks, rm.isr_expands, rm.failed_isr_updates),
            "connections": Counter(s.connections()),
            "image": (
                len(topics),
                sum(len(t.partitions) for t in topics),
                sum(1 for t in topics for reg in t.partitions.values() if reg.leader < 0),
                sum(1 for b in image.brokers.values() if not b.fenced),
                sum(1 for b in image.brokers.values() if b.fenced),
                image.offset,
            ),
            "controller_active": s.controller_active(),
        }
        if s.raft is not None and getattr(s.raft, "node", None) is not None:
            node = s.raft.node
            snap["raft"] = (
                s.raft.leader_id,
                s.raft.epoch,
                node.high_watermark,
                node.state.name,
                *node.commit_latency(s.raft.now_ms()),
            )
        gc = s.group_coordinator
        if gc is not None:
            snap["committed"] = gc.committed_offsets()
            snap["groups"] = [(row[2], row[3]) for row in gc.list_groups()]
        tc = s.txn_coordinator
        if tc is not None:
            snap["txns"] = Counter(m.state.name for shard in list(tc.shards.values()) for m in shard.txns.values())
        lc = s.log_cleaner()
        if lc is not None:
            m = lc.manager
            dirs = Counter(rm.partitions[tp].log.log_dir if tp in rm.partitions else "" for tp in list(m.uncleanable))
            snap["cleaner"] = (m.max_clean_time_secs, m.max_compaction_delay_secs, m.cleaner_recopy_percent, dirs)
        if s.flush_stats is not None:
            snap["flush"] = (s.flush_stats.BUCKETS_MS, *s.flush_stats.snapshot())
        if s.quotas is not None:
            now = s.now_ms()
            snap["quotas"] = {
                kind: mgr.rates(now)
                for kind, mgr in (
                    ("Produce", s.quotas.produce),
                    ("Fetch", s.quotas.fetch),
                    ("Request", s.quotas.request),
                )
            }
        if s.client_telemetry is not None:
            snap["clients"] = s.client_telemetry.snapshot()
        if s.share_manager is not None:
            refs, acks = s.share_manager.metrics_refs()
            snap["share_refs"] = refs
            snap["share"] = ({tid: t.name for tid, t in image.topics_by_id.items()}, acks)
        for name, fn in s.extra:
            snap[name] = fn()
        snap["loop_seconds"] = time.perf_counter() - t0
        return snap

    @staticmethod
    def partition_rows(refs) -> tuple[list[tuple], float]:
        """A tuple of plain values per ((topic, partition), Partition), and the seconds it took."""
        t0 = time.perf_counter()
        rows = []
        for (topic, p), part in refs:
            lg = part.log
            repl = part.repl
            rows.append(
                (
                    topic,
                    p,
                    repl.is_leader,
                    len(repl.replicas),
                    len(repl.isr),
                    lg.config.min_insync_replicas,
                    lg.size_in_bytes(),
                    lg.log_start_offset,
                    lg.log_end_offset,
                    lg.high_watermark,
                    len(lg.local_log.segments),
                )
            )
        return rows, time.perf_counter() - t0

    def share_rows(self, refs) -> tuple[list[tuple], float]:
        t0 = time.perf_counter()
        rows = self.sources.share_manager.metrics_rows(refs)
        return rows, time.perf_counter() - t0

    # ------------------------------------------------------------------ in the HTTP thread
    def families(self, snap: dict):
        yield from self._topic_families(*snap["topics"])
        yield from self._request_families(*snap["requests"])
        yield from self._partition_families(snap)
        yield from self._cluster_families(snap)
        yield from self._coordinator_families(snap)
        yield from self._quota_families(snap.get("quotas"))
        if "cleaner" in snap:
            yield from self._cleaner_families(*snap["cleaner"])
        if snap.get("clients"):
            yield from client_families(snap["clients"])
        if "share" in snap:
            names, acks = snap["share"]
            rows = [(g, names.get(tid, str(tid)), *rest) for g, tid, *rest in snap.get("share_rows", ())]
            yield from self._share_families(rows, acks)
        if "flush" in snap:
            bounds, counts, total = snap["flush"]
            yield _histogram(
                "kafka_log_logflushstats_logflushrateandtimems",
                "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs: ms per log flush with records to sync",
                [],
                [([], bounds, counts, total)],
            )
        yield GaugeMetricFamily(
            "kesque_metrics_snapshot_seconds",
            "kesque: how long this scrape held the event loop, in all, to copy the broker's state",
            value=snap["loop_seconds"],
        )
        yield GaugeMetricFamily(
            "kesque_metrics_snapshot_longest_hold_seconds",
            "kesque: the longest of those holds (the partitions are copied in chunks)",
            value=snap.get("loop_longest", snap["loop_seconds"]),
        )

    def _topic_families(self, per_topic: dict, totals: tuple, repl_out: int, repl_in: int = 0):
        for i, meter in enumerate(TOPIC_METERS):
            fam = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{meter.lower()}",
                f"kafka.server:type=BrokerTopicMetrics,name={meter}PerSec: count per topic, and for all topics"
                " (no topic label)",
                labels=["topic"],
            )
            for topic, counts in sorted(per_topic.items()):
                fam.add_metric([topic], counts[i])
            # Kafka's all-topics meter is the same MBean name without the topic key
            fam.samples.append(Sample(fam.name + "_total", {}, totals[i]))
            yield fam
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesOutPerSec: records sent to followers",
            value=repl_out,
        )
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesin",
            "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesInPerSec: records appended as a follower",
            value=repl_in,
        )

    def _request_families(self, requests: dict, errors: dict, buckets: dict, sums: dict, phases: dict, throttles: dict):
        fam = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "kafka.network:type=RequestMetrics,name=RequestsPerSec: responses completed per request and version",
            labels=["request", "version"],
        )
        for (key, version), n in sorted(requests.items()):
            fam.add_metric([_name(key), str(version)], n)
        yield fam
        fam = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "kafka.network:type=RequestMetrics,name=ErrorsPerSec: error codes in responses, per request and error",
            labels=["request", "error"],
        )
        for (key, code), n in sorted(errors.items()):
            fam.add_metric([_name(key), error_name(code)], n)
        yield fam
        yield _histogram(
            "kafka_network_requestmetrics_totaltimems",
            "kafka.network:type=RequestMetrics,name=TotalTimeMs: ms from a request's arrival to its response",
            ["request"],
            [([_name(key)], TOTAL_TIME_BUCKETS_MS, counts, sums[key]) for key, counts in sorted(buckets.items())],
        )
        for phase in PHASES:
            yield _histogram(
                f"kafka_network_requestmetrics_{phase.lower()}",
                f"kafka.network:type=RequestMetrics,name={phase}: ms per request (docs/metrics.md)",
                ["request"],
                [
                    ([_name(key)], TOTAL_TIME_BUCKETS_MS, counts, total)
                    for (key, name), (counts, total) in sorted(phases.items())
                    if name == phase
                ],
            )
        yield _histogram(
            "kafka_network_requestmetrics_throttletimems",
            "kafka.network:type=RequestMetrics,name=ThrottleTimeMs: the throttle time of each response, in ms"
            " (0: not throttled)",
            ["request"],
            [([_name(key)], TOTAL_TIME_BUCKETS_MS, c, total) for key, (c, total) in sorted(throttles.items())],
        )

    def _partition_families(self, snap: dict):
        parts = snap["partitions"]
        size = GaugeMetricFamily("kafka_log_log_size", "kafka.log:type=Log,name=Size", labels=["topic", "partition"])
        leo = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "kafka.log:type=Log,name=LogEndOffset", labels=["topic", "partition"]
        )
        lso = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "kafka.log:type=Log,name=LogStartOffset", labels=["topic", "partition"]
        )
        segs = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "kafka.log:type=Log,name=NumLogSegments", labels=["topic", "partition"]
        )
        urp = GaugeMetricFamily(
            "kafka_cluster_partition_underreplicated",
            "kafka.cluster:type=Partition,name=UnderReplicated (1: this broker leads it and its ISR is short)",
            labels=["topic", "partition"],
        )
        umi = GaugeMetricFamily(
            "kafka_cluster_partition_underminisr",
            "kafka.cluster:type=Partition,name=UnderMinIsr",
            labels=["topic", "partition"],
        )
        isr_count = GaugeMetricFamily(
            "kafka_cluster_partition_insyncreplicascount",
            "kafka.cluster:type=Partition,name=InSyncReplicasCount (on the leader)",
            labels=["topic", "partition"],
        )
        n_urp = n_umi = n_ami = n_leaders = 0
        for topic, p, leader, n_replicas, n_isr, min_isr, nbytes, start, end, _hw, n_segs in parts:
            labels = [topic, str(p)]
            size.add_metric(labels, nbytes)
            leo.add_metric(labels, end)
            lso.add_metric(labels, start)
            segs.add_metric(labels, n_segs)
            under = leader and n_isr < n_replicas
            under_min = leader and n_isr < min_isr
            urp.add_metric(labels, int(under))
            umi.add_metric(labels, int(under_min))
            isr_count.add_metric(labels, n_isr if leader else 0)
            n_leaders += leader
            n_urp += under
            n_umi += under_min
            n_ami += leader and n_isr == min_isr
        yield from (size, leo, lso, segs, urp, umi, isr_count)
        shrinks, expands, failed = snap["isr"]
        for name, value, what in (
            ("partitioncount", len(parts), "PartitionCount"),
            ("leadercount", n_leaders, "LeaderCount"),
            ("underreplicatedpartitions", n_urp, "UnderReplicatedPartitions"),
            ("underminisrpartitioncount", n_umi, "UnderMinIsrPartitionCount"),
            ("atminisrpartitioncount", n_ami, "AtMinIsrPartitionCount"),
            ("offlinereplicacount", snap["offline_replicas"], "OfflineReplicaCount"),
        ):
            yield GaugeMetricFamily(
                f"kafka_server_replicamanager_{name}", f"kafka.server:type=ReplicaManager,name={what}", value=value
            )
        for name, value, what in (
            ("isrshrinks", shrinks, "IsrShrinksPerSec"),
            ("isrexpands", expands, "IsrExpandsPerSec"),
            ("failedisrupdates", failed, "FailedIsrUpdatesPerSec"),
        ):
            yield CounterMetricFamily(
                f"kafka_server_replicamanager_{name}", f"kafka.server:type=ReplicaManager,name={what}", value=value
            )

    def _cluster_families(self, snap: dict):
        conns = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "kafka.server:type=socket-server-metrics,listener=<l>,networkProcessor=<n>: connection-count",
            labels=["listener", "networkProcessor"],
        )
        for listener, n in sorted(snap["connections"].items()):
            conns.add_metric([listener, "0"], n)
        yield conns
        active = snap["controller_active"]
        all_topics, n_partitions, offline, live, fenced, offset = snap["image"]
        # as Kafka's QuorumControllerMetrics: the cluster-wide gauges are the active controller's
        # (0 elsewhere), so that sum() over the brokers counts each once
        for name, value, what in (
            ("activecontrollercount", int(active), "ActiveControllerCount"),
            ("globaltopiccount", all_topics if active else 0, "GlobalTopicCount"),
            ("globalpartitioncount", n_partitions if active else 0, "GlobalPartitionCount"),
            ("offlinepartitionscount", offline if active else 0, "OfflinePartitionsCount"),
            ("activebrokercount", live if active else 0, "ActiveBrokerCount"),
            ("fencedbrokercount", fenced if active else 0, "FencedBrokerCount"),
        ):
            yield GaugeMetricFamily(
                f"kafka_controller_kafkacontroller_{name}",
                f"kafka.controller:type=KafkaController,name={what}",
                value=value,
            )
        yield GaugeMetricFamily(
            "kafka_server_metadataloader_currentmetadataoffset",
            "kesque: the offset of the last metadata record this broker's image has applied",
            value=offset,
        )
        raft = snap.get("raft")
        if raft is not None:
            leader, epoch, hw, state, latency_avg, latency_max = raft
            rows = [("current_leader", leader), ("current_epoch", epoch), ("high_watermark", hw)]
            if latency_avg == latency_avg:  # a leader's appends committed in the last minute (not NaN)
                rows += [("commit_latency_avg", latency_avg), ("commit_latency_max", latency_max)]
            for name, value in rows:
                yield GaugeMetricFamily(
                    f"kafka_server_raftmetrics_{name}",
                    f"kafka.server:type=raft-metrics: {name.replace('_', '-')}",
                    value=value,
                )
            fam = GaugeMetricFamily(
                "kafka_server_raftmetrics_current_state",
                "kafka.server:type=raft-metrics: current-state (1 for the state this node is in)",
                labels=["current_state"],
            )
            fam.add_metric([RAFT_STATES.get(state, state.lower())], 1)
            yield fam

    def _coordinator_families(self, snap: dict):
        committed = snap.get("committed")
        if committed is not None:
            hws = {(row[0], row[1]): row[9] for row in snap["partitions"] if row[2]}  # where this broker leads
            current = GaugeMetricFamily(
                "kafka_consumergroup_current_offset",
                "kesque (kafka_exporter's name): a group's committed offset, on the broker coordinating the group",
                labels=["consumergroup", "topic", "partition"],
            )
            lag_fam = GaugeMetricFamily(
                "kafka_consumergroup_lag",
                "kesque (kafka_exporter's name): high watermark - committed offset (partitions this broker leads)",
                labels=["consumergroup", "topic", "partition"],
            )
            for group, topic, p, offset in sorted(committed):
                hw = hws.get((topic, p))
                labels = [group, topic, str(p)]
                current.add_metric(labels, offset)
                if hw is not None:
                    lag_fam.add_metric(labels, max(hw - offset, 0))
            yield current
            yield lag_fam
        groups = snap.get("groups")
        if groups is not None:
            by_type = Counter(gtype for _state, gtype in groups)
            fam = GaugeMetricFamily(
                "kafka_server_group_coordinator_metrics_group_count",
                "kafka.server:type=group-coordinator-metrics: group-count per protocol",
                labels=["protocol"],
            )
            for gtype in ("classic", "consumer", "share"):
                fam.add_metric([gtype], by_type.get(gtype, 0))
            yield fam
            for gtype in ("classic", "consumer", "share"):
                fam = GaugeMetricFamily(
                    f"kafka_server_group_coordinator_metrics_{gtype}_group_count",
                    f"kafka.server:type=group-coordinator-metrics: {gtype}-group-count per state",
                    labels=["state"],
                )
                for state, n in sorted(Counter(st for st, t in groups if t == gtype).items()):
                    fam.add_metric([state], n)
                yield fam
        txns = snap.get("txns")
        if txns is not None:
            fam = GaugeMetricFamily(
                "kesque_transaction_coordinator_transactions",
                "kesque: the transactional ids this broker coordinates, per state",
                labels=["state"],
            )
            for state, n in sorted(txns.items()):
                fam.add_metric([state], n)
            yield fam

    def _share_families(self, rows: list[tuple], acks: dict[int, int]):
        """Kafka's SharePartitionMetrics (per group, topic, partition) and ShareGroupMetrics'
        record acknowledgements, and kesque's records per state and window offsets."""
        labels = ["group", "topic", "partition"]
        in_flight = GaugeMetricFamily(
            "kafka_server_sharepartitionmetrics_inflightmessagecount",
            "kafka.server:type=SharePartitionMetrics,name=InFlightMessageCount,group=,topic=,partition=: "
            "records from the share-partition start offset to its end offset",
            labels=labels,
        )
        timeouts = CounterMetricFamily(
            "kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
            "kafka.server:type=SharePartitionMetrics,name=AcquisitionLockTimeoutPerSec: records whose "
            "acquisition lock ran out",
            labels=labels,
        )
        records = GaugeMetricFamily(
            "kesque_server_sharepartition_records",
            "kesque: in-flight records of a share partition per state",
            labels=[*labels, "state"],
        )
        start = GaugeMetricFamily(
            "kesque_server_sharepartition_startoffset",
            "kesque: the share-partition start offset (SPSO): records below it are finished with",
            labels=labels,
        )
        end = GaugeMetricFamily(
            "kesque_server_sharepartition_endoffset",
            "kesque: the share-partition end offset (SPEO): the first offset never handed out",
            labels=labels,
        )
        for group, topic, p, spso, speo, counts, n_timeouts in sorted(rows):
            ls = [group, topic, str(p)]
            in_flight.add_metric(ls, speo - spso)
            timeouts.add_metric(ls, n_timeouts)
            start.add_metric(ls, spso)
            end.add_metric(ls, speo)
            for state, n in counts.items():
                records.add_metric([*ls, SHARE_STATE_NAMES[state]], n)
        yield from (in_flight, timeouts, records, start, end)
        fam = CounterMetricFamily(
            "kafka_server_sharegroupmetrics_recordacknowledgements",
            "kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec,ackType=: records "
            "acknowledged per acknowledge type",
            labels=["ackType"],
        )
        for ack_type, n in sorted(acks.items()):
            fam.add_metric([ACK_TYPE_NAMES[ack_type]], n)
        yield fam

    def _cleaner_families(self, max_clean: float, max_delay: float, recopy: int, uncleanable: Counter):
        for name, value in (
            ("max_clean_time_secs", max_clean),
            ("max_compaction_delay_secs", max_delay),
            ("cleaner_recopy_percent", recopy),
        ):
            yield GaugeMetricFamily(
                f"kafka_log_logcleaner_{name}", f"kafka.log:type=LogCleaner,name={name.replace('_', '-')}", value=value
            )
        fam = GaugeMetricFamily(
            "kafka_log_logcleanermanager_uncleanable_partitions_count",
            "kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count,logDirectory=<d>",
            labels=["logDirectory"],
        )
        for d, n in sorted(uncleanable.items()):
            fam.add_metric([d], n)
        yield fam

    def _quota_families(self, quotas: dict | None):
        """Kafka's per-entity quota sensors (kafka.server:type=Produce|Fetch|Request,user=,client-id=):
        the rate, as the exporter names it, and the throttling as counters of kesque's."""
        if quotas is None:
            return
        labels = ["resource", "user", "clientId"]
        byte_rate = GaugeMetricFamily(
            "kafka_server_quota_byte_rate", "kafka.server:type=Produce|Fetch,user=,client-id=: byte-rate", labels=labels
        )
        request_time = GaugeMetricFamily(
            "kafka_server_quota_request_time",
            "kafka.server:type=Request,user=,client-id=: request-time (percent of one thread)",
            labels=labels,
        )
        throttle_ms = CounterMetricFamily(
            "kesque_server_quota_throttle_time_ms",
            "kesque: ms of throttling given to the entity (rate()/rate(kesque_server_quota_throttles_total): "
            "Kafka's throttle-time)",
            labels=labels,
        )
        throttles = CounterMetricFamily(
            "kesque_server_quota_throttles", "kesque: responses throttled for the entity", labels=labels
        )
        for kind, rows in quotas.items():
            for user, client_id, rate, ms, count in sorted(rows):
                ls = [kind, user, client_id]
                (request_time if kind == "Request" else byte_rate).add_metric(ls, rate)
                throttle_ms.add_metric(ls, ms)
                throttles.add_metric(ls, count)
        yield from (byte_rate, request_time, throttle_ms, throttles)


def _histogram(name: str, doc: str, labels: list[str], rows) -> HistogramMetricFamily:
    """A histogram family from rows of (label values, bucket bounds, count per bucket and one
    past the last, sum)."""
    fam = HistogramMetricFamily(name, doc, labels=labels)
    for values, bounds, counts, total in rows:
        cumulative, running = [], 0
        for bound, n in zip((*bounds, float("inf")), counts):
            running += n
            cumulative.append((_le(bound), running))
        fam.add_metric(values, cumulative, total)
    return fam


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
