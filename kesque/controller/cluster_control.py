"""Broker registrations, sessions and fencing on the active controller (sans-IO).

This is Kafka's ClusterControlManager + BrokerHeartbeatManager + the broker-lifecycle part of
ReplicationControlManager, as one object that is given the time and answers with metadata
records to propose. It never writes: the driver proposes the records (as one atomic batch) and
applies them to the image ``image_fn()`` returns.

**The image contract.** ``image_fn()`` is the active controller's image *including the records
it has proposed and not yet seen committed*, as Kafka's controller replays its own records as it
writes them (and rebuilds from the committed log when it loses the lead). Each call's records
must be applied to that image before the next call, or two calls may decide on the same stale
state (e.g. elect as leader a broker another call has just fenced).

Methods (``now`` in ms; ``next_offset``: the offset the first returned record will get, the
leader's log end offset, Kafka's ``nextWriteOffset``):

- ``activate(now)``: this node became the active controller (after it applied every record up
  to its epoch's start): every registered broker gets a fresh session. ``deactivate()``: it no
  longer leads; every call raises NOT_CONTROLLER until the next ``activate``.
- ``register(req, now, next_offset) -> (records, broker_epoch)``: BrokerRegistration. Errors as
  :class:`~kesque.errors.KafkaError`: INCONSISTENT_CLUSTER_ID; DUPLICATE_BROKER_REGISTRATION when
  another incarnation of that id still has a live (unfenced, unexpired) session; UNSUPPORTED_VERSION
  when the broker's feature ranges miss a finalized level. A new incarnation gets the epoch
  ``next_offset`` (the offset of its RegisterBrokerRecord, as Kafka) and starts *fenced*; the
  partitions the previous incarnation led are moved off it first (it stopped uncleanly). The
  same incarnation registering again amends its registration and keeps its epoch and state.
- ``heartbeat(req, now, next_offset) -> (records, HeartbeatReply)``: BrokerHeartbeat, Kafka's
  ``calculateNextBrokerState``. STALE_BROKER_EPOCH for an unknown broker or another epoch.
  A fenced broker is unfenced once it does not ``want_fence`` and its ``current_metadata_offset``
  is at least the offset of its RegisterBrokerRecord; it then takes the leadership of the
  leaderless partitions whose ISR has it. ``want_shutdown`` on an unfenced broker that leads
  partitions starts a controlled shutdown (in_controlled_shutdown, it leaves every ISR and its
  leaderships move); the reply says ``should_shut_down`` once it leads nothing and every active
  broker has reached the offset of the batch that started it; it is then fenced. ``want_fence``
  fences at once (with ``want_shutdown``: shut down now).
- ``expire(now) -> records``: fences the broker whose session (``broker.session.timeout.ms``
  since its last heartbeat) ran out longest ago, one per call as Kafka does, so that the next
  call sees its effect in the image; call again when ``next_deadline()`` comes.
- ``assign_replicas_to_dirs(broker_id, broker_epoch, {dir: {topic id: [partition]}}) -> (records,
  answer)``: AssignReplicasToDirs (KIP-858), Kafka's handleAssignReplicasToDirs.
- Log dirs (KIP-858, metadata.version 3.7-IV2+): ``register`` checks and records the broker's
  ``log_dirs``; a heartbeat naming some of them offline fences only the replicas whose directory
  is one of them (``_dirs_offline``) and drops them from the registration.
- ``replay(record, offset)``: the driver hands every applied RegisterBrokerRecord (optional:
  without it the broker epoch stands for the registration's offset; they differ only after a
  registration was amended).

Moving leadership follows Kafka's generateLeaderAndIsrUpdates (PartitionChangeBuilder, without
ELR; :func:`~kesque.controller.replication_control.partition_change`): the broker leaves the ISR
unless it is the last member; the leader stays if it is still an acceptable ISR member, else the
first replica (in assignment order) that is in the new ISR and registered, unfenced and not
shutting down; else, when ``unclean_enabled(topic)`` (the topic's effective
``unclean.leader.election.enable``), the first acceptable replica with the ISR set to it alone
(an unclean election, RECOVERING); else -1 with the ISR kept. Unfencing a broker retries the
election of every leaderless partition (Kafka's ``partitionsWithNoLeader``). A leader change bumps
the leader epoch (the image does it); an ISR shrink alone does not (metadata.version >= 3.6).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import uuid
from dataclasses import dataclass, field
from functools import cache

from kio.schema.assign_replicas_to_dirs.v0 import request as assign_rq
from kio.schema.assign_replicas_to_dirs.v0 import response as assign_rs

from ..errors import ErrorCode, KafkaError, error
from ..metadata.image import Endpoint, MetadataImage, directories_supported, reserved_dir
from ..raft.wire import _new
from .reassignment import leader_acceptor
from .replication_control import ONLINE, UNCLEAN, elr_args, elr_enabled_in, partition_change

log = logging.getLogger(__name__)

NO_LEADER = -1
NO_LEADER_CHANGE = -2
UNBOUNDED = 1 << 62

# BrokerRegistrationChangeRecord's fenced / in_controlled_shutdown values
FENCE, UNFENCE = 1, -1
IN_CONTROLLED_SHUTDOWN = 1


@dataclass(slots=True)
class LifecycleConfig:
    """The broker lifecycle settings (Kafka's names and defaults)."""

    heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    initial_registration_timeout_ms: int = 60000  # initial.broker.registration.timeout.ms
    controlled_shutdown_enable: bool = True  # controlled.shutdown.enable
    # how long a broker waits for the controller to let it go (Kafka's KafkaBroker.shutdown()
    # bound, 5 minutes), after which it shuts down anyway
    controlled_shutdown_timeout_ms: int = 300_000

    KEYS = {
        "heartbeat_interval_ms": "broker.heartbeat.interval.ms",
        "session_timeout_ms": "broker.session.timeout.ms",
        "initial_registration_timeout_ms": "initial.broker.registration.timeout.ms",
        "controlled_shutdown_enable": "controlled.shutdown.enable",
    }

    @classmethod
    def of(cls, config) -> LifecycleConfig:
        """From a :class:`~kesque.config.broker.BrokerConfig` (a key it does not know keeps
        Kafka's default), a LifecycleConfig, or None (the defaults)."""
        if config is None or isinstance(config, cls):
            return config or cls()
        out = cls()
        for attr, key in cls.KEYS.items():
            value = config.get(key)
            if value is not None:
                setattr(out, attr, value)
        return out


# -- the RPCs (field names as Kafka's BrokerRegistration / BrokerHeartbeat schemas) ------------------
@dataclass(slots=True)
class RegistrationRequest:
    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: list[Endpoint] = field(default_factory=list)
    features: dict[str, tuple[int, int]] = field(default_factory=dict)  # name: (min, max)
    rack: str | None = None
    previous_broker_epoch: int = -1
    log_dirs: list = field(default_factory=list)  # v2+: the directory ids of its log dirs (KIP-858)


@dataclass(slots=True)
class RegistrationReply:
    error_code: int = 0
    broker_epoch: int = -1


@dataclass(slots=True)
class HeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False
    offline_log_dirs: list = field(default_factory=list)  # v1: directory ids of failed log dirs


@dataclass(slots=True)
class HeartbeatReply:
    error_code: int = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    in_controlled_shutdown: bool = False  # Kafka's BrokerHeartbeatReply; not on the wire


# -- the controller side -------------------------------------------------------------------------
# Kafka's BrokerControlState: (fenced, in controlled shutdown, should shut down)
FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = "FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN", "SHUTDOWN_NOW"
_FLAGS = {
    FENCED: (True, False, False),
    UNFENCED: (False, False, False),
    CONTROLLED_SHUTDOWN: (False, True, False),
    SHUTDOWN_NOW: (True, False, True),
}


@dataclass(slots=True)
class Session:
    """A broker's session on the active controller (Kafka's BrokerHeartbeatState)."""

    last_contact: int
    fenced: bool = True
    metadata_offset: int = -1
    shutdown_offset: int = -1  # >= 0 while in controlled shutdown
    offline_dirs: set = field(default_factory=set)  # log dir ids its heartbeats named offline

    def state(self) -> str:
        if self.shutdown_offset >= 0:
            return CONTROLLED_SHUTDOWN
        return FENCED if self.fenced else UNFENCED


class ClusterControl:
    def __init__(
        self,
        config,
        image_fn,
        cluster_id: str | None = None,
        unclean_enabled=lambda topic: False,
        min_isr=lambda topic: 1,
    ):
        self.config = LifecycleConfig.of(config)
        self.image_fn = image_fn
        self.cluster_id = cluster_id
        self.unclean_enabled = unclean_enabled  # topic -> its unclean.leader.election.enable
        self.min_isr = min_isr  # topic -> its min.insync.replicas
        self.sessions: dict[int, Session] | None = None  # None: not the active controller
        self.registration_offsets: dict[int, int] = {}

    # -- activation ---------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.sessions is not None

    def activate(self, now: int) -> None:
        self.sessions = {b.id: Session(now, b.fenced) for b in self.image_fn().brokers.values()}

    def deactivate(self) -> None:
        self.sessions = None

    def replay(self, rec: dict, offset: int) -> None:
        if rec["type"] == "RegisterBrokerRecord":
            self.registration_offsets[rec["broker_id"]] = offset
        elif rec["type"] == "UnregisterBrokerRecord":
            self.registration_offsets.pop(rec["broker_id"], None)

    def _sessions(self) -> dict[int, Session]:
        if self.sessions is None:
            raise error("not_controller", "This node is not the active controller")
        return self.sessions

    def has_valid_session(self, broker_id: int, now: int) -> bool:
        s = self._sessions().get(broker_id)
        return s is not None and not s.fenced and s.last_contact + self.config.session_timeout_ms >= now

    # -- BrokerRegistration -------------------------------------------------------------------------
    def register(self, req: RegistrationRequest, now: int, next_offset: int) -> tuple[list[dict], int]:
        sessions = self._sessions()
        image = self.image_fn()
        cluster_id = self.cluster_id or image.cluster_id
        if cluster_id is not None and req.cluster_id != cluster_id:
            raise error(
                "inconsistent_cluster_id", f"Expected cluster ID {cluster_id}, but got cluster ID {req.cluster_id}"
            )
        b = req.broker_id
        existing = image.brokers.get(b)
        same = existing is not None and existing.incarnation_id == req.incarnation_id
        if existing is not None and not same and self.has_valid_session(b, now):
            raise error("duplicate_broker_registration", "Another broker is registered with that broker id.")
        features = self._check_features(req, image)
        dirs = directories_supported(image)
        if dirs:
            self._check_log_dirs(req, image)
        records: list[dict] = []
        if same:
            epoch, fenced, in_cs = existing.epoch, existing.fenced, existing.in_controlled_shutdown
        else:
            if existing is not None:  # a new incarnation: the previous one shut down
                records += self._shutdown(image, b, clean=existing.epoch == req.previous_broker_epoch)
            epoch, fenced, in_cs = next_offset + len(records), True, False
        records.append(
            {
                "type": "RegisterBrokerRecord",
                "broker_id": b,
                "incarnation_id": req.incarnation_id,
                "broker_epoch": epoch,
                "endpoints": [dataclasses.asdict(e) for e in req.listeners],
                "features": features,
                "rack": req.rack,
                "fenced": fenced,
                "in_controlled_shutdown": in_cs,
            }
        )
        if dirs:
            records[-1]["log_dirs"] = list(req.log_dirs)
        self.registration_offsets[b] = next_offset + len(records) - 1
        old = sessions.get(b)
        if same and old is not None:
            self._touch(old, now, fenced, old.metadata_offset if old.fenced != fenced else -1)
        else:
            sessions[b] = Session(now, fenced)
        return records, epoch

    @staticmethod
    def _check_log_dirs(req: RegistrationRequest, image: MetadataImage) -> None:
        """Kafka's checks of a registration's log dirs (KIP-858): no reserved id, none twice,
        none another broker registered. A registration naming none is accepted (Kafka refuses
        it with "No directories specified in request"): kesque's simulated brokers and older
        callers register none, and such a broker is handled as before directory assignment."""
        if any(reserved_dir(d) for d in req.log_dirs):
            raise error("invalid_registration", "Reserved directory ID in request")
        if len(set(req.log_dirs)) != len(req.log_dirs):
            raise error("invalid_registration", "Duplicate directory ID in request")
        for other in image.brokers.values():
            if other.id != req.broker_id:
                for d in req.log_dirs:
                    if d in other.log_dirs:
                        raise error(
                            "invalid_registration", f"Broker {other.id} is already registered with directory {d}"
                        )

    @staticmethod
    def _check_features(req: RegistrationRequest, image: MetadataImage) -> list[dict]:
        """Every finalized feature level must lie in the broker's range (Kafka's rule: a broker
        naming no metadata.version supports level 1 only, an unnamed feature level 0 only)."""
        ranges = dict(req.features)
        ranges.setdefault("metadata.version", (1, 1))
        for name, level in image.features.items():
            lo, hi = ranges.get(name, (0, 0))
            if level != 0 and not lo <= level <= hi:
                raise error(
                    "unsupported_version",
                    f"Unable to register because the broker does not support finalized version {level} "
                    f"of {name}. The broker wants a version between {lo} and {hi}, inclusive.",
                )
        return [
            {"name": n, "min_supported_version": lo, "max_supported_version": hi}
            for n, (lo, hi) in sorted(ranges.items())
        ]

    # -- BrokerHeartbeat ----------------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest, now: int, next_offset: int) -> tuple[list[dict], HeartbeatReply]:
        sessions = self._sessions()
        image = self.image_fn()
        b = req.broker_id
        reg = image.brokers.get(b)
        if reg is None:
            raise error("stale_broker_epoch", f"No broker registration found for broker id {b}")
        if reg.epoch != req.broker_epoch:
            raise error(
                "stale_broker_epoch", f"Expected broker epoch {reg.epoch}, but got broker epoch {req.broker_epoch}"
            )
        reg_offset = self.registration_offsets.get(b, reg.epoch)
        s = sessions.get(b)
        if s is None:
            s = sessions[b] = Session(now, reg.fenced)
        current = s.state()
        nxt = self._next_state(image, s, req, reg_offset)
        records: list[dict] = []
        if nxt != current:
            if nxt in (FENCED, SHUTDOWN_NOW):
                records = self._fence(image, b, reg.epoch)
            elif nxt == UNFENCED:
                records = self._unfence(image, b, reg.epoch)
            else:
                records = self._enter_controlled_shutdown(image, b, reg.epoch)
        else:
            records = self._dirs_offline(image, b, reg, s, req.offline_log_dirs)
        fenced, in_cs, shut_down = _FLAGS[nxt]
        self._touch(s, now, fenced, req.current_metadata_offset)
        if in_cs and s.shutdown_offset < 0:
            s.shutdown_offset = next_offset + len(records) - 1  # the end of this batch
        return records, HeartbeatReply(0, req.current_metadata_offset >= reg_offset, fenced, shut_down, in_cs)

    def _next_state(self, image: MetadataImage, s: Session, req: HeartbeatRequest, reg_offset: int) -> str:
        b = req.broker_id
        current = s.state()
        if current == FENCED:
            if req.want_shut_down:
                return SHUTDOWN_NOW
            if not req.want_fence and req.current_metadata_offset >= reg_offset:
                return UNFENCED
            return FENCED
        if current == UNFENCED:
            if req.want_fence:
                return SHUTDOWN_NOW if req.want_shut_down else FENCED
            if req.want_shut_down:
                return CONTROLLED_SHUTDOWN if leads_any(image, b) else SHUTDOWN_NOW
            return UNFENCED
        if leads_any(image, b) or s.shutdown_offset > self.lowest_active_offset():
            return CONTROLLED_SHUTDOWN
        return SHUTDOWN_NOW

    @staticmethod
    def _touch(s: Session, now: int, fenced: bool, metadata_offset: int) -> None:
        s.last_contact = now
        s.metadata_offset = metadata_offset
        s.fenced = fenced
        if fenced:
            s.shutdown_offset = -1  # a fenced broker leaves controlled shutdown

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset of the unfenced brokers not shutting down."""
        return min(
            (s.metadata_offset for s in self._sessions().values() if not s.fenced and s.shutdown_offset < 0),
            default=UNBOUNDED,
        )

    # -- session expiry -----------------------------------------------------------------------------
    def next_deadline(self) -> int:
        """The first time at which ``expire`` will fence someone (UNBOUNDED if never)."""
        if self.sessions is None:
            return UNBOUNDED
        return min(
            (s.last_contact + self.config.session_timeout_ms + 1 for s in self.sessions.values() if not s.fenced),
            default=UNBOUNDED,
        )

    def expire(self, now: int) -> list[dict]:
        sessions = self._sessions()
        timeout = self.config.session_timeout_ms
        stale = [(s.last_contact, b) for b, s in sessions.items() if not s.fenced and s.last_contact + timeout < now]
        if not stale:
            return []
        _, b = min(stale)
        image = self.image_fn()
        self._touch(sessions[b], sessions[b].last_contact, True, sessions[b].metadata_offset)
        reg = image.brokers.get(b)
        return self._fence(image, b, reg.epoch) if reg is not None else []

    def unregister(self, broker_id: int) -> list[dict]:
        """UnregisterBroker (KIP-500's kafka-cluster.sh unregister): the broker's leaderships and ISR
        places go, then its registration; BROKER_ID_NOT_REGISTERED for an id with none."""
        image = self.image_fn()
        reg = image.brokers.get(broker_id)
        if reg is None:
            raise KafkaError(ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered")
        return (
            self._move_off(image, broker_id)
            + self._changes(image, lambda p: broker_id in p.elr, remove=broker_id)
            + [{"type": "UnregisterBrokerRecord", "broker_id": broker_id, "broker_epoch": reg.epoch}]
        )

    # -- AssignReplicasToDirs (KIP-858) ---------------------------------------------------------------
    def assign_replicas_to_dirs(self, broker_id: int, broker_epoch: int, assignments: dict) -> tuple[list[dict], dict]:
        """Kafka's ReplicationControlManager.handleAssignReplicasToDirs: ``assignments`` {dir
        id: {topic id: [partition]}} from the broker; the answer {dir id: {topic id: [(partition,
        error code)]}}. Each replica of the broker gets its directory (a PartitionChangeRecord
        with ``directories`` when it changes); a replica assigned to a dir that is not online on
        the broker then leaves the ISR as in :meth:`_dirs_offline`. UNSUPPORTED_VERSION before
        metadata.version 3.7-IV2, STALE_BROKER_EPOCH for an unknown broker or another epoch;
        per partition UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (not
        one of its replicas)."""
        self._sessions()
        image = self.image_fn()
        if not directories_supported(image):
            raise error("unsupported_version", "Directory assignment is not supported yet.")
        reg = image.brokers.get(broker_id)
        if reg is None:
            raise error("stale_broker_epoch", f"No broker registration found for broker id {broker_id}")
        if reg.epoch != broker_epoch:
            raise error("stale_broker_epoch", f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}")
        changed: dict[tuple, dict] = {}  # (topic id, partition): its record
        offline: set[tuple] = set()
        answer: dict = {}
        for d, topics in assignments.items():
            dir_offline = not reg.has_online_dir(d)
            for topic_id, partitions in topics.items():
                t = image.topics_by_id.get(topic_id)
                out = answer.setdefault(d, {}).setdefault(topic_id, [])
                for pid in partitions:
                    if t is None:
                        log.warning(
                            "AssignReplicasToDirsRequest from broker %d references unknown topic ID %s",
                            broker_id,
                            topic_id,
                        )
                        out.append((pid, int(ErrorCode.unknown_topic_id)))
                        continue
                    p = t.partitions.get(pid)
                    if p is None:
                        out.append((pid, int(ErrorCode.unknown_topic_or_partition)))
                        continue
                    if broker_id not in p.replicas:
                        out.append((pid, int(ErrorCode.not_leader_or_follower)))
                        continue
                    key = (topic_id, pid)
                    current = changed[key]["directories"] if key in changed else [p.directory(r) for r in p.replicas]
                    dirs = [d if r == broker_id else current[i] for i, r in enumerate(p.replicas)]
                    if dirs != [p.directory(r) for r in p.replicas]:
                        changed[key] = {
                            "type": "PartitionChangeRecord",
                            "topic_id": topic_id,
                            "partition_id": pid,
                            "isr": None,
                            "leader": NO_LEADER_CHANGE,
                            "replicas": None,
                            "removing_replicas": None,
                            "adding_replicas": None,
                            "leader_recovery_state": -1,
                            "directories": dirs,
                        }
                    else:
                        changed.pop(key, None)
                    if dir_offline:
                        offline.add(key)
                    out.append((pid, 0))
        # the replicas assigned to an offline dir leave the ISR; their directories go in that
        # same record (Kafka writes both, one after the other)
        records = []
        for rec in self._changes(image, lambda p: b_in_isr_of(p, broker_id), remove=broker_id, only=offline):
            key = (rec["topic_id"], rec["partition_id"])
            if key in changed:
                rec["directories"] = changed.pop(key)["directories"]
            records.append(rec)
        return list(changed.values()) + records, answer

    # -- the records of each transition (Kafka's ReplicationControlManager.handleBroker*) ------------
    def _fence(self, image: MetadataImage, b: int, epoch: int) -> list[dict]:
        return self._move_off(image, b) + [
            {
                "type": "BrokerRegistrationChangeRecord",
                "broker_id": b,
                "broker_epoch": epoch,
                "fenced": FENCE,
                "in_controlled_shutdown": 0,
            }
        ]

    def _unfence(self, image: MetadataImage, b: int, epoch: int) -> list[dict]:
        records = [
            {
                "type": "BrokerRegistrationChangeRecord",
                "broker_id": b,
                "broker_epoch": epoch,
                "fenced": UNFENCE,
                "in_controlled_shutdown": 0,
            }
        ]
        return records + self._changes(image, lambda p: p.leader == NO_LEADER, add=b)

    def _enter_controlled_shutdown(self, image: MetadataImage, b: int, epoch: int) -> list[dict]:
        records = []
        if not image.brokers[b].in_controlled_shutdown:
            records.append(
                {
                    "type": "BrokerRegistrationChangeRecord",
                    "broker_id": b,
                    "broker_epoch": epoch,
                    "fenced": 0,
                    "in_controlled_shutdown": IN_CONTROLLED_SHUTDOWN,
                }
            )
        return records + self._move_off(image, b)

    def _dirs_offline(self, image: MetadataImage, b: int, reg, s: Session, offline: list) -> list[dict]:
        """Kafka's handleDirectoriesOffline (KIP-858), for a heartbeat naming log dirs.

        A broker that registered its log dirs (metadata.version 3.7-IV2+): the named dirs still
        in its registration are its new offline dirs; the replicas whose directory is one of
        them leave the ISR (a partition such a replica led elects another leader: a replica in
        a failed dir may not lead, Kafka's LeaderAcceptor), and a BrokerRegistrationChangeRecord
        keeps only the others in its ``log_dirs``. Replicas whose directory is UNASSIGNED or
        MIGRATING are left alone, as Kafka leaves them (its directoriesToPartitions never holds
        a reserved id; ``DirectoryId.isOnline`` counts them online).

        A broker that registered none (before directory assignment): the controller cannot tell
        which replicas were in the failed dir, so on the first heartbeat naming a dir it takes
        the broker out of every ISR that another replica remains in (a replica in a healthy dir
        rejoins once caught up; one whose ISR is this broker alone keeps it)."""
        if directories_supported(image) and reg.log_dirs:
            failed = [d for d in reg.log_dirs if d in offline]
            if not failed:
                return []
            remaining = [d for d in reg.log_dirs if d not in offline]
            log.warning(
                "Directories %s in broker %d marked offline, remaining directories: %s",
                ", ".join(str(d) for d in failed),
                b,
                ", ".join(str(d) for d in remaining),
            )
            return self._changes(image, lambda p: b in p.isr and p.directory(b) in failed, remove=b) + [
                {
                    "type": "BrokerRegistrationChangeRecord",
                    "broker_id": b,
                    "broker_epoch": reg.epoch,
                    "fenced": 0,
                    "in_controlled_shutdown": 0,
                    "log_dirs": remaining,
                }
            ]
        new = [d for d in offline if d not in s.offline_dirs]
        if not new:
            return []
        s.offline_dirs.update(new)
        log.warning("Directories %s in broker %d marked offline", ", ".join(str(d) for d in new), b)
        return self._changes(image, lambda p: b in p.isr and len(p.isr) > 1, remove=b)

    def _move_off(self, image: MetadataImage, b: int) -> list[dict]:
        return self._changes(image, lambda p: b in p.isr, remove=b)

    def _shutdown(self, image: MetadataImage, b: int, clean: bool) -> list[dict]:
        """A new incarnation of ``b`` registers (Kafka's handleBrokerShutdown). With ELR on, a
        broker whose previous broker epoch is not the registered one did not shut down cleanly
        (its log may have lost what it acknowledged): it leaves every ISR and ELR and leads
        nothing. Otherwise it leaves the ISRs as a fenced broker does."""
        if elr_enabled_in(image) and not clean:
            return self._changes(image, lambda p: b in p.isr, unclean=b) + self._changes(
                image, lambda p: b in p.elr, unclean=b
            )
        return self._move_off(image, b)

    def _changes(
        self,
        image: MetadataImage,
        which,
        remove: int = NO_LEADER,
        add: int = NO_LEADER,
        unclean: int = NO_LEADER,
        only: set | None = None,
    ) -> list[dict]:
        """Kafka's generateLeaderAndIsrUpdates: ``remove`` leaves the ISR (and leads nothing),
        ``add`` may lead although the image still has it fenced, ``unclean`` (shut down
        uncleanly) leaves the ISR and the ELR and leads nothing."""
        sessions = self.sessions or {}

        def acceptable(r: int) -> bool:
            if r in (remove, unclean):
                return False
            if r == add:
                return True
            reg = image.brokers.get(r)
            s = sessions.get(r)
            return (
                reg is not None
                and not reg.fenced
                and not reg.in_controlled_shutdown
                and (s is None or s.state() == UNFENCED)
            )

        out = []
        for t in image.topics_by_id.values():
            election = UNCLEAN if self.unclean_enabled(t.name) else ONLINE
            for pid, p in t.partitions.items():
                if (only is None or (t.topic_id, pid) in only) and which(p):
                    rec = partition_change(
                        t.topic_id,
                        pid,
                        p,
                        leader_acceptor(image, p, acceptable),
                        [r for r in p.isr if r not in (remove, unclean)],
                        election,
                        unclean_shutdown=(unclean,) if unclean != NO_LEADER else (),
                        **elr_args(image, t.name, p, self.min_isr),
                    )
                    if rec is not None:
                        out.append(rec)
        return out


def b_in_isr_of(p, broker_id: int) -> bool:
    return broker_id in p.isr


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for t in image.topics_by_id.values() for p in t.partitions.values())


# -- kio mapping (the network edge) --------------------------------------------------------------------
VERSIONS = {"broker_registration": range(0, 5), "broker_heartbeat": range(0, 2)}
_API = {
    RegistrationRequest: ("broker_registration", "request"),
    RegistrationReply: ("broker_registration", "response"),
    HeartbeatRequest: ("broker_heartbeat", "request"),
    HeartbeatReply: ("broker_heartbeat", "response"),
}


@cache
def _kio_module(api: str, version: int, kind: str):
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def to_kio(msg, version: int):
    """The kio body of one of this module's four messages at ``version``."""
    api, kind = _API[type(msg)]
    if version not in VERSIONS[api]:
        raise KafkaError(ErrorCode.unsupported_version, f"{api} v{version} is not served")
    mod = _kio_module(api, version, kind)
    if isinstance(msg, RegistrationRequest):
        return _new(
            mod.BrokerRegistrationRequest,
            broker_id=msg.broker_id,
            cluster_id=msg.cluster_id,
            incarnation_id=msg.incarnation_id,
            rack=msg.rack,
            previous_broker_epoch=msg.previous_broker_epoch,
            listeners=tuple(
                _new(mod.Listener, name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in msg.listeners
            ),
            features=tuple(
                _new(mod.Feature, name=n, min_supported_version=lo, max_supported_version=hi)
                for n, (lo, hi) in sorted(msg.features.items())
                if version >= 4 or lo != 0
            ),
            **({"log_dirs": tuple(msg.log_dirs)} if version >= 2 else {}),
        )
    if isinstance(msg, RegistrationReply):
        return _new(
            mod.BrokerRegistrationResponse,
            throttle_time=0,
            error_code=ErrorCode(msg.error_code),
            broker_epoch=msg.broker_epoch,
        )
    if isinstance(msg, HeartbeatRequest):
        return _new(
            mod.BrokerHeartbeatRequest,
            broker_id=msg.broker_id,
            broker_epoch=msg.broker_epoch,
            current_metadata_offset=msg.current_metadata_offset,
            want_fence=msg.want_fence,
            want_shut_down=msg.want_shut_down,
            **({"offline_log_dirs": tuple(msg.offline_log_dirs)} if version >= 1 else {}),
        )
    return _new(
        mod.BrokerHeartbeatResponse,
        throttle_time=0,
        error_code=ErrorCode(msg.error_code),
        is_caught_up=msg.is_caught_up,
        is_fenced=msg.is_fenced,
        should_shut_down=msg.should_shut_down,
    )


def from_kio(obj):
    """This module's dataclass for a kio BrokerRegistration/BrokerHeartbeat request or response."""
    name = type(obj).__name__
    if name == "BrokerRegistrationRequest":
        listeners = [Endpoint(e.name, e.host, int(e.port), int(e.security_protocol)) for e in obj.listeners]
        return RegistrationRequest(
            int(obj.broker_id),
            obj.cluster_id,
            obj.incarnation_id,
            listeners,
            {f.name: (int(f.min_supported_version), int(f.max_supported_version)) for f in obj.features},
            obj.rack,
            int(getattr(obj, "previous_broker_epoch", -1)),
            list(getattr(obj, "log_dirs", ())),
        )
    if name == "BrokerRegistrationResponse":
        return RegistrationReply(int(obj.error_code), int(obj.broker_epoch))
    if name == "BrokerHeartbeatRequest":
        return HeartbeatRequest(
            int(obj.broker_id),
            int(obj.broker_epoch),
            int(obj.current_metadata_offset),
            obj.want_fence,
            obj.want_shut_down,
            list(getattr(obj, "offline_log_dirs", ())),
        )
    if name == "BrokerHeartbeatResponse":
        return HeartbeatReply(int(obj.error_code), obj.is_caught_up, obj.is_fenced, obj.should_shut_down)
    raise ValueError(f"not a BrokerRegistration or BrokerHeartbeat message: {name}")


# -- AssignReplicasToDirs (API 73, v0; KIP-858) on the wire ---------------------------------------------
ASSIGN_VERSION = 0


def assign_request_to_kio(broker_id: int, broker_epoch: int, assignments: dict):
    """``assignments`` {dir id: {topic id: [partition]}} as an AssignReplicasToDirsRequest."""
    return _new(
        assign_rq.AssignReplicasToDirsRequest,
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        directories=tuple(
            _new(
                assign_rq.DirectoryData,
                id_=d,
                topics=tuple(
                    _new(
                        assign_rq.TopicData,
                        topic_id=t,
                        partitions=tuple(_new(assign_rq.PartitionData, partition_index=p) for p in parts),
                    )
                    for t, parts in topics.items()
                ),
            )
            for d, topics in assignments.items()
        ),
    )


def assign_request_from_kio(req) -> tuple[int, int, dict]:
    out: dict = {}
    for d in req.directories:
        for t in d.topics:
            out.setdefault(d.id_, {}).setdefault(t.topic_id, []).extend(int(p.partition_index) for p in t.partitions)
    return int(req.broker_id), int(req.broker_epoch), out


def assign_response_to_kio(error_code: int, answer: dict):
    """``answer`` {dir id: {topic id: [(partition, error code)]}} as an AssignReplicasToDirsResponse."""
    return _new(
        assign_rs.AssignReplicasToDirsResponse,
        throttle_time=0,
        error_code=ErrorCode(error_code),
        directories=tuple(
            _new(
                assign_rs.DirectoryData,
                id_=d,
                topics=tuple(
                    _new(
                        assign_rs.TopicData,
                        topic_id=t,
                        partitions=tuple(
                            _new(assign_rs.PartitionData, partition_index=p, error_code=ErrorCode(e)) for p, e in parts
                        ),
                    )
                    for t, parts in topics.items()
                ),
            )
            for d, topics in answer.items()
        ),
    )


def assign_response_from_kio(resp) -> tuple[int, dict]:
    answer: dict = {}
    for d in resp.directories:
        for t in d.topics:
            answer.setdefault(d.id_, {}).setdefault(t.topic_id, []).extend(
                (int(p.partition_index), int(p.error_code)) for p in t.partitions
            )
    return int(resp.error_code), answer
