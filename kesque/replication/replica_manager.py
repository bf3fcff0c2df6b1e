"""ReplicaManager: the partitions this broker hosts, appends and reads across them, and the
watch lists that delayed operations (long-poll fetch, acks=all produce) wait on.

It follows the metadata image: ``apply_delta`` creates logs and partitions for the replicas
assigned to this broker, makes them leaders or followers (a follower's partition goes to the
replica fetchers, a leader's leaves them), drops deleted topics and replicas moved elsewhere, and
pushes config changes into the logs and the replication quotas (``quotas``,
:mod:`kesque.replication.quota`). It is the partitions' :class:`ReplicaEnv`: their ISR changes
go to the AlterPartition manager, and a moved high watermark wakes what waits on it.
Delayed operations (:mod:`kesque.replication.delayed`) wait on the watch lists kept here: ``hw``
(consumer fetches, acks=all produces: told the bytes a HW move made visible) and ``replica``
(follower fetches: told the bytes a leader append added).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict

from ..config.broker import BrokerConfig
from ..config.topic import TOPIC_CONFIGS, validate_topic_configs
from ..errors import ErrorCode, KafkaError
from ..metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC, Delta, MetadataImage, directories_supported
from ..storage.log_dir_failure import KafkaStorageError
from ..storage.log_manager import LogManager
from .partition import Partition, ReplicaEnv, not_leader
from .quota import ReplicationQuotas

log = logging.getLogger(__name__)


class ReplicaManager(ReplicaEnv):
    def __init__(self, config: BrokerConfig, log_manager: LogManager, image: MetadataImage, clock):
        self.config = config
        self.node_id = config.node_id
        self.log_manager = log_manager
        self.image = image
        self.clock = clock
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.by_id: dict[tuple[uuid.UUID, int], Partition] = {}
        # Kafka's HostedPartition.Offline: replicas whose log dir failed; not served (their
        # requests get KAFKA_STORAGE_ERROR) until the broker restarts
        self.offline_partitions: set[tuple[str, int]] = set()
        # callbacks in the order they were watched (dicts as ordered sets, as Kafka's watcher lists
        # are queues): waking them in a fixed order keeps a simulated run reproducible
        self._watchers: dict[str, dict[tuple[str, int], dict]] = {"hw": defaultdict(dict), "replica": defaultdict(dict)}
        self.local_broker_epoch = -1
        # the replication quotas (KIP-73), kept up to date from the broker's and the topics'
        # configs here; the leader's is checked in the Fetch handler, the follower's by the
        # replica fetchers, the alter-log-dirs one by the copies between log dirs
        self.quotas = ReplicationQuotas.from_config(config)
        # set by the server in a cluster: the replica fetchers (ReplicaFetcherManager) and the
        # AlterPartition sender (a callable (partition, proposal))
        self.fetchers = None
        self.send_alter_partition = None
        # set by the server in a cluster: a callable (topic id, partition, directory id) that
        # tells the controller the log dir holding a replica (AssignReplicasToDirs, KIP-858)
        self.assign_dir = None
        # callables (topic, partition, is_leader) told when this broker gains or loses
        # leadership of a partition (coordinators load and unload their state with it)
        self._leadership_listeners: list = []
        # callables (topic, partition, producer id, commit) told after a transaction marker
        self._marker_listeners: list = []
        # Kafka's IsrExpandsPerSec, IsrShrinksPerSec and FailedIsrUpdatesPerSec counts (read by
        # kesque.metrics at scrape time)
        self.isr_expands = self.isr_shrinks = self.failed_isr_updates = 0

    def add_leadership_listener(self, fn) -> None:
        self._leadership_listeners.append(fn)

    def _tell_leadership(self, topic: str, partition: int, is_leader: bool) -> None:
        for fn in self._leadership_listeners:
            fn(topic, partition, is_leader)

    # ------------------------------------------------------------------ ReplicaEnv
    @property
    def replica_lag_time_max_ms(self) -> int:
        return self.config.get("replica.lag.time.max.ms")

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def broker_epoch_of(self, broker_id: int) -> int | None:
        """The registered epoch of an unfenced broker not shutting down (may join an ISR)."""
        reg = self.image.brokers.get(broker_id)
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            return None
        return reg.epoch

    def alter_partition(self, part: Partition, proposal) -> None:
        if self.send_alter_partition is not None:
            self.send_alter_partition(part, proposal)
        else:  # nobody to ask (a lone node never changes its ISR): back to the committed state
            part.on_alter_partition_response(proposal, int(ErrorCode.operation_not_attempted), None)

    def hw_moved(self, part: Partition, visible_bytes: int) -> None:
        self._notify("hw", (part.topic, part.partition), visible_bytes)

    def isr_updated(self, kind: str, ok: bool) -> None:
        if not ok:
            self.failed_isr_updates += 1
        elif kind == "shrink":
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1

    def shrink_isrs(self) -> None:
        """The ISR-expiration task, every replica.lag.time.max.ms / 2."""
        for part in list(self.partitions.values()):
            if part.is_leader and len(part.isr) > 1:
                part.maybe_shrink_isr()

    # ------------------------------------------------------------------ config
    def log_config_for(self, topic: str):
        overrides = self.image.topic_configs(topic)
        try:
            parsed = validate_topic_configs({k: v for k, v in overrides.items() if k in TOPIC_CONFIGS})
        except Exception as e:  # a stored value that no longer parses: fall back to defaults
            log.warning("Ignoring invalid stored config of topic %s: %s", topic, e)
            parsed = {}
        return self.config.log_config(parsed)

    def config_for_loading(self, topic: str):
        t = self.image.topic(topic)
        return self.log_config_for(topic), (t.topic_id if t else None)

    # ------------------------------------------------------------------ metadata
    def apply_delta(self, delta: Delta) -> None:
        for topic_id, t in delta.deleted_topics.items():
            for p in list(t.partitions):
                self.offline_partitions.discard((t.name, p))
                part = self.partitions.pop((t.name, p), None)
                self.by_id.pop((topic_id, p), None)
                if part is not None:
                    self._drop(part)
                try:
                    self.log_manager.delete_log(t.name, p)
                except KafkaStorageError as e:  # its dir goes offline (the next start deletes it)
                    log.error("Unable to delete the log of %s-%d: %s", t.name, p, e.message)
            self.quotas.remove_topic(t.name)
        for rtype, rname in delta.changed_configs:
            if rtype == RESOURCE_BROKER and rname in ("", str(self.node_id)):
                layer_broker = rname != ""
                stored = self.image.configs.get((rtype, rname), {})
                target = self.config.dynamic_broker if layer_broker else self.config.dynamic_default
                target.clear()
                for k, v in stored.items():
                    try:
                        target[k] = self.config.validate_dynamic(k, v)
                    except Exception as e:
                        log.warning("Ignoring invalid dynamic broker config %s=%s: %s", k, v, e)
                for (topic, _p), part in self.partitions.items():
                    part.log.config = self.log_config_for(topic)
                self.quotas.update_rates(self.config.get)
            elif rtype == RESOURCE_TOPIC:
                self.quotas.update_topic(rname, self.image.topic_configs(rname))
                cfg = self.log_config_for(rname)
                for (topic, _p), part in self.partitions.items():
                    if topic == rname:
                        part.log.config = cfg
        to_fetch: dict = {}
        for topic_id, p in sorted(delta.changed_partitions, key=lambda x: (str(x[0]), x[1])):
            t = self.image.topics_by_id.get(topic_id)
            if t is None:
                continue
            try:
                self._apply_partition(t, topic_id, p, to_fetch)
            except KafkaStorageError as e:
                # the log dir failed (the channel has it and takes it offline): this replica is
                # offline, the rest of the delta is still applied
                log.error(
                    "Unable to apply the metadata change of partition %s-%d since its log directory is offline: %s",
                    t.name,
                    p,
                    e.message,
                )
                self._mark_offline(t.name, p)
        if to_fetch:
            self.fetchers.add_partitions(to_fetch)

    def _apply_partition(self, t, topic_id: uuid.UUID, p: int, to_fetch: dict) -> None:
        reg = t.partitions.get(p)
        if (t.name, p) in self.offline_partitions:
            if reg is None or self.node_id not in reg.replicas:
                self.offline_partitions.discard((t.name, p))  # deleted or moved: nothing to serve
            return
        part = self.partitions.get((t.name, p))
        if reg is None or self.node_id not in reg.replicas:
            if part is not None:  # reassigned away from this broker: the replica goes
                log.info("%s: no longer a replica here; deleting the local log", part.tp)
                del self.partitions[(t.name, p)]
                self.by_id.pop((topic_id, p), None)
                self._drop(part)
                self.log_manager.delete_log(t.name, p)
            return
        if part is None:
            lg = self.log_manager.get_or_create_log(
                t.name, p, self.log_config_for(t.name), topic_id, target_dir_id=reg.directory(self.node_id)
            )
            part = Partition(t.name, p, topic_id, lg, self.node_id, self)
            self.partitions[(t.name, p)] = part
            self.by_id[(topic_id, p)] = part
        self.maybe_update_assignment(part, reg)
        m = self.image.mirror_topics.get(topic_id)
        part.mirror = m is not None and m.mirroring
        was_leader = part.is_leader
        if reg.leader == self.node_id:
            part.make_leader(reg.replicas, reg.isr, reg.leader_epoch, reg.partition_epoch)
            if not was_leader and self.fetchers is not None:
                self.fetchers.remove_partitions([part])
        else:
            changed = part.make_follower(reg.leader, reg.replicas, reg.leader_epoch, reg.partition_epoch)
            if self.fetchers is not None:
                if reg.leader < 0:
                    self.fetchers.remove_partitions([part])
                elif changed or self.fetchers.leader_of(part) is None:
                    to_fetch[part] = (reg.leader, reg.leader_epoch)
        if part.is_leader != was_leader:
            self._wake(part)
        if part.is_leader != was_leader or part.is_leader:
            self._tell_leadership(t.name, p, part.is_leader)

    def maybe_update_assignment(self, part: Partition, reg=None) -> None:
        """Kafka's maybeUpdateTopicAssignment (KIP-858): when the metadata names another
        directory for this replica than the log dir holding its log (UNASSIGNED on a broker
        with several dirs, MIGRATING from before directory assignment, or after a move between
        log dirs), tell the controller where it is."""
        if self.assign_dir is None or not directories_supported(self.image):
            return
        if reg is None:
            t = self.image.topics_by_id.get(part.topic_id)
            reg = t.partitions.get(part.partition) if t is not None else None
            if reg is None or self.node_id not in reg.replicas:
                return
        d = self.log_manager.directory_ids.get(part.log.log_dir)
        if d is not None and reg.directory(self.node_id) != d:
            self.assign_dir(part.topic_id, part.partition, d)

    def _wake(self, part: Partition) -> None:
        """A role change: everything waiting on the partition looks again (and fails over)."""
        tp = (part.topic, part.partition)
        self._notify("hw", tp, 0)
        self._notify("replica", tp, 0)

    def _drop(self, part: Partition) -> None:
        if self.fetchers is not None:
            self.fetchers.remove_partitions([part])
        self._wake(part)
        if part.is_leader:
            self._tell_leadership(part.topic, part.partition, False)

    # ------------------------------------------------------------------ log dir failure
    def handle_log_dir_failure(self, d: str) -> list[tuple[str, int]]:
        """Kafka's ReplicaManager.handleLogDirFailure, the broker's part: every partition whose
        log is in ``d`` goes offline (no fetcher, no leadership here, waiters woken to fail
        with KAFKA_STORAGE_ERROR), then the LogManager drops the dir. Returns those partitions;
        the caller tells the controller and halts when no dir is left."""
        if not self.log_manager.is_log_dir_online(d):
            return []
        log.warning(
            "Stopping serving replicas in dir %s with uuid %s because the log directory has failed.",
            d,
            self.log_manager.directory_ids.get(d),
        )
        offline = [part for part in self.partitions.values() if part.log.log_dir == d]
        for part in offline:
            self._mark_offline(part.topic, part.partition)
        moving = [tp for tp, lg in self.log_manager.future_logs.items() if lg.log_dir == d]
        log.warning(
            "Broker %d stopped fetcher for partitions %s and stopped moving logs for partitions %s because "
            "they are in the failed log directory %s.",
            self.node_id,
            ",".join(p.tp for p in offline),
            ",".join(f"{t}-{p}" for t, p in moving),
            d,
        )
        self.log_manager.handle_log_dir_failure(d)
        return [(p.topic, p.partition) for p in offline]

    def _mark_offline(self, topic: str, partition: int) -> None:
        """Kafka's markPartitionOffline: the replica is no longer served here."""
        tp = (topic, partition)
        self.offline_partitions.add(tp)
        part = self.partitions.pop(tp, None)
        if part is not None:
            self.by_id.pop((part.topic_id, partition), None)
            self._drop(part)

    def _offline(self, topic: str, partition: int) -> KafkaStorageError:
        return KafkaStorageError(f"Partition {topic}-{partition} is in an offline log directory")

    # ------------------------------------------------------------------ lookup
    def get_partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            if (topic, partition) in self.offline_partitions:
                raise self._offline(topic, partition)
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        return part

    def get_partition_by_id(self, topic_id: uuid.UUID, partition: int) -> Partition:
        part = self.by_id.get((topic_id, partition))
        if part is None:
            raise KafkaError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
        return part

    # ------------------------------------------------------------------ produce
    def append(
        self,
        topic: str,
        partition: int,
        buf: memoryview,
        required_acks: int,
        verification_guard=None,
        require_verification: bool = False,
    ):
        """Append a produced batch to a leader partition; returns the UnifiedLog's AppendInfo or
        raises KafkaError. Waiting fetches on the partition are told about the new bytes.
        ``verification_guard``: the KIP-890 verification this batch passed (from
        :meth:`start_transaction_verification`), which the UnifiedLog checks when
        ``require_verification``."""
        part = self.partitions.get((topic, partition))
        if part is None:
            raise self._not_hosted(topic, partition)
        info = part.append_records_to_leader(
            buf, required_acks, self.clock.now_ms(), verification_guard, require_verification
        )
        self._notify("replica", (topic, partition), info.size)
        return info

    def start_transaction_verification(
        self, topic: str, partition: int, producer_id: int, sequence: int, epoch: int, supports_epoch_bump: bool
    ):
        """Kafka's maybeStartTransactionVerificationForPartition: the leader's log keeps the
        producer's pending verification; returns its guard (None when the transaction is already
        open here, or this broker does not lead the partition: the append then says why)."""
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            return None
        return part.log.maybe_start_transaction_verification(
            producer_id, sequence, epoch, self.clock.now_ms(), supports_epoch_bump
        )

    def _not_hosted(self, topic: str, partition: int) -> KafkaError:
        """As Kafka's getPartitionOrError: a partition of a topic in the metadata that this broker
        is not a replica of is NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata and
        retries), one the metadata does not have UNKNOWN_TOPIC_OR_PARTITION; one in a failed
        log dir KAFKA_STORAGE_ERROR."""
        if (topic, partition) in self.offline_partitions:
            return self._offline(topic, partition)
        t = self.image.topic(topic)
        if t is not None and partition in t.partitions:
            return not_leader(f"{topic}-{partition}", self.node_id)
        return KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")

    def append_txn_marker(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ):
        """Write a transaction's COMMIT/ABORT marker to a partition this broker leads
        (WriteTxnMarkers); marker listeners (the group coordinator) are told afterwards."""
        part = self.partitions.get((topic, partition))
        if part is None:
            if (topic, partition) in self.offline_partitions:
                raise self._offline(topic, partition)
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        info = part.append_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, self.clock.now_ms())
        self.notify_append(topic, partition, info.size)
        for fn in self._marker_listeners:
            fn(topic, partition, producer_id, commit)
        return info

    def add_marker_listener(self, fn) -> None:
        self._marker_listeners.append(fn)

    # ------------------------------------------------------------------ watchers
    def watch(self, tp: tuple[str, int], callback, kind: str = "hw") -> None:
        self._watchers[kind][tp][callback] = None

    def unwatch(self, tp: tuple[str, int], callback, kind: str = "hw") -> None:
        w = self._watchers[kind]
        s = w.get(tp)
        if s is not None:
            s.pop(callback, None)
            if not s:
                del w[tp]

    def notify_append(self, topic: str, partition: int, nbytes: int) -> None:
        """Bytes were appended by the broker itself as leader (coordinators, markers): wake
        waiting follower fetches (consumers are woken when the high watermark passes them)."""
        self._notify("replica", (topic, partition), nbytes)

    def _notify(self, kind: str, tp: tuple[str, int], nbytes: int) -> None:
        s = self._watchers[kind].get(tp)
        if s:
            for cb in list(s):
                cb(tp, nbytes)

    # ------------------------------------------------------------------ offsets
    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        part = self.get_partition(topic, partition)
        if not part.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower, "Not the leader")
        lg = part.log
        target = lg.high_watermark if offset == -1 else offset
        if target < 0:
            raise KafkaError(ErrorCode.offset_out_of_range, f"Invalid offset {offset}")
        return lg.maybe_increment_log_start_offset(target)

    def image_partition(self, topic: str, partition: int):
        t = self.image.topic(topic)
        return t.partitions.get(partition) if t else None
