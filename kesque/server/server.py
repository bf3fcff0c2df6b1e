"""KesqueServer: wires storage, metadata, controller, replication and the network together
and runs the periodic work (retention, flushes, checkpoints).

Start-up order follows Kafka's: format/verify the log dirs, open the controller listener
(when the quorum has other members) and start the raft node of ``__cluster_metadata``, wait
until the committed metadata is applied to the image, load (and if needed recover) the
partition logs, apply the image to the ReplicaManager (leaders elected in the image become
leaders here), open the broker listeners, and register this broker with the active controller.
The broker's image is fed only by committed metadata records; the controller (when this node
is one) keeps its own images (kesque.server.drivers.quorum_controller).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import random
import socket
import time
import uuid

from .. import quotas as quota_core
from ..client.wire import ClientSecurity
from ..clock import SYSTEM_CLOCK
from ..config import not_yet
from ..config.broker import CONSOLE_CLIENT_PREFIX, BrokerConfig, metrics_listener
from ..config.types import ConfigError
from ..console.endpoint import ConsoleServer
from ..controller.controller import FEATURES, supported_features
from ..coordinator.group.runtime import GroupCoordinator
from ..coordinator.runtime import CoordinatorHost
from ..coordinator.share.runtime import ShareCoordinator
from ..coordinator.transaction.runtime import TransactionCoordinator
from ..errors import ErrorCode, KafkaError
from ..metadata import records as metadata_records
from ..metadata import snapshot as metadata_snapshot
from ..metadata.image import RESOURCE_BROKER, Delta, Endpoint, MetadataImage
from ..metrics.collectors import BrokerCollector, Sources
from ..metrics.endpoint import MetricsEndpoint, on_loop
from ..metrics.stats import PENDING_ITEMS, BrokerTopicStats, RequestMetrics, error_counts
from ..metrics.stats import note as note_request
from ..metrics.telemetry import ClientTelemetry
from ..protocol import api as protocol
from ..protocol.api_keys import ApiKeys
from ..protocol.primitives import INT32, ProtocolError
from ..quotas import Quotas
from ..replication.replica_manager import ReplicaManager
from ..security.authorizer import AuthorizerNotReady, StandardAuthorizer
from ..share import enabled as share_groups_enabled
from ..storage import checkpoint as ck
from ..storage.dirs import DirLock, check_fd_limit
from ..storage.log_dir_failure import LogDirFailureChannel
from ..storage.log_manager import LogManager
from ..storage.unified_log import LOG_FLUSH_STATS
from . import request_log, txn_channels
from .apis.acls import AclApis
from .apis.authz import error_response
from .apis.cluster_links import ClusterLinkApis
from .apis.configs import ConfigApis
from .apis.core import CoordinatorLookup, CoreApis, api_versions_v0_error
from .apis.fetch import FetchApis
from .apis.groups import GroupApis
from .apis.logdirs import LogDirApis
from .apis.offsets import OffsetApis
from .apis.produce import ProduceApis
from .apis.quorum import QuorumApis
from .apis.quotas import QuotaApis
from .apis.reassignment import ReassignmentApis
from .apis.registry import bind
from .apis.sasl import SaslApis
from .apis.scram import ScramApis
from .apis.share import ShareGroupApis
from .apis.share_state import ShareStateApis
from .apis.telemetry import TelemetryApis
from .apis.topics import TopicApis
from .apis.transactions import TransactionApis
from .assignments import AssignmentsManager
from .channel import Channel
from .context import NO_RESPONSE, PLAINTEXT, CloseConnection, RequestContext
from .drivers.alter_log_dirs import LogDirMover
from .drivers.alter_partition import AlterPartitionManager
from .drivers.log_cleaner import LogCleaner
from .drivers.mirror_fetcher import MirrorFetcherManager
from .drivers.mirror_offsets import OffsetSyncer
from .drivers.producer_ids import ProducerIdBlocks
from .drivers.quorum_controller import QuorumController
from .drivers.replica_fetcher import ReplicaFetcherManager
from .drivers.share_manager import SharePartitionManager
from .drivers.timers import LoopScheduler
from .envelope import EnvelopeApis
from .forwarding import ControllerRouter
from .heartbeats import LifecycleDriver
from .lifecycle import BrokerLifecycle
from .network import SocketServer
from .raft_manager import RaftManager, discover_voters, quorum_config
from .request_log import REQUEST_LOG
from .sasl import SASL_PROTOCOLS, SaslConnection, SaslListener, client_login
from .throttling import Throttler
from .tls import (
    ListenerContexts,
    SslReconfigurationError,
    client_context,
    reconfigured_listeners,
    reconfigured_server_context,
    store_state,
)

log = logging.getLogger(__name__)

# Kafka's SecurityProtocol ids, as broker registrations carry them
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
QUOTA_REPORT_INTERVAL_MS = 30_000  # per-entity rates and throttle times are logged this often
# a handler's result that is no kio message (encoded by hand, or no response at all)
_ENCODED = frozenset({bytes, bytearray, list, type(NO_RESPONSE)})
_clock = time.perf_counter_ns  # the request metrics' clock, one global lookup a reading


async def _timed(awaitable, ctx):
    """Await ``awaitable``, adding the time each of its steps runs (not the time it waits)
    to ``ctx.busy_ns``, for request_percentage."""
    gen = awaitable.__await__()
    send, error = None, None
    while True:
        ctx.step_ns = t0 = time.perf_counter_ns()
        try:
            future = gen.throw(error) if error is not None else gen.send(send)
        except StopIteration as done:
            return done.value
        finally:
            ctx.busy_ns += time.perf_counter_ns() - t0
            ctx.step_ns = 0
        try:
            send, error = await _Yield(future), None
        except BaseException as e:  # noqa: BLE001 - handed back to the awaitable, as await does
            send, error = None, e


class _Yield:
    """Passes one future of the wrapped awaitable up to the event loop."""

    __slots__ = ("future",)

    def __init__(self, future):
        self.future = future

    def __await__(self):
        return (yield self.future)


def halt_process(message: str) -> None:
    """Kafka's fatal log line then Exit.halt(1): no shutdown hook runs, nothing more is written
    (a clean-shutdown marker would skip the recovery the failed dir needs)."""
    log.critical(message)
    for h in logging.getLogger().handlers:
        try:
            h.flush()
        except Exception:  # noqa: BLE001 - the process ends anyway
            pass
    os._exit(1)


class KesqueServer:
    def __init__(self, config: BrokerConfig, clock=SYSTEM_CLOCK):
        self.config = config
        self.clock = clock
        self._monotonic = clock.monotonic  # read on every produce and fetch under a quota
        self.node_id = config.node_id if config.node_id >= 0 else 1
        if config.node_id < 0:
            config.static["node.id"] = config.static["broker.id"] = self.node_id
        self.apis: dict[int, protocol.ApiSpec] = {}
        self.controller_apis: dict[int, protocol.ApiSpec] = {}  # served on controller listeners only
        self.raft = None
        self.quorum = None
        self.controller = None
        self.channel = None
        self._metadata_ready = False
        self.lifecycle = None  # BrokerLifecycle (registration, heartbeats) in a cluster
        self.heartbeats = None
        # KIP-112: the first I/O error of a log dir takes it offline (see _handle_log_dir_failures)
        self.dir_failure = LogDirFailureChannel()
        self.halt = halt_process  # Kafka's Exit.halt: a broker left without a usable dir stops
        self._pending_delta = Delta()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.socket_server: SocketServer | None = None
        self.bound: dict[str, tuple[str, int]] = {}
        self.broker_epoch = -1
        self.started = asyncio.Event()
        self._timers: list[asyncio.TimerHandle] = []
        self._tasks: set[asyncio.Task] = set()
        self._publishers = []
        # file writes that must not stall the event loop (checkpoint fsyncs), one at a time
        self.io_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kesque-io")
        self.stopped = False
        self.log_cleaner = None
        self.start_time = time.monotonic()
        self.quotas = Quotas.from_config(config)
        self.throttler = Throttler(self.quotas, clock.monotonic)
        # authorizer.class.name: Kafka's StandardAuthorizer over the image's ACLs (answering
        # super users only until the metadata has caught up); none: every request is allowed
        self.authorizer = (
            StandardAuthorizer.from_config(config, loading_complete=False)
            if config.get("authorizer.class.name")
            else None
        )
        self._ip_overrides: tuple[str | None, dict[str, int]] = (None, {})
        self.metadata_dir_lock: DirLock | None = None
        # the SASL listeners' mechanisms and JAAS configs, read (and refused when wrong) at once
        self.sasl_listeners: dict[str, SaslListener] = {
            name: SaslListener(config, name, self._scram_credential, clock.now_ms)
            for name, proto in config.security_protocol_map().items()
            if proto in SASL_PROTOCOLS and any(lis.name == name for lis in config.listeners())
        }
        # what this node logs in with on its channels to a SASL inter-broker or controller listener
        # (checked now: a mechanism kesque has not, or a JAAS entry without credentials, stops it)
        self.sasl_inter_broker = client_login(
            config, config.inter_broker_listener(), "sasl.mechanism.inter.broker.protocol"
        )
        controller_names = [n.upper() for n in config.get("controller.listener.names")]
        self.sasl_controller = (
            client_login(config, controller_names[0], "sasl.mechanism.controller.protocol")
            if controller_names
            else None
        )
        # the raft node's and the broker lifecycle's jitter (a simulation seeds it)
        self.rng = random.Random()
        # metrics.listener (kesque/metrics/): the request path's counters are kept only with it
        self.metrics_address = metrics_listener("metrics.listener", config.get("metrics.listener"))
        self.topic_stats = BrokerTopicStats() if self.metrics_address else None
        self.request_metrics = RequestMetrics(self.topic_stats) if self.metrics_address else None
        # the list the request path appends each answered request's clock readings to
        self._pending_requests = self.request_metrics.pending if self.request_metrics is not None else None
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.client_telemetry: ClientTelemetry | None = None  # made with the image (start)
        # console.listener (kesque/console/): the web console, a Kafka client of this node
        self.console_address = metrics_listener("console.listener", config.get("console.listener"))
        self.console_security = self._console_client_security()  # console.client.*: a bad one stops the start
        self.console: ConsoleServer | None = None

    # ================================================================== lifecycle
    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            self._release_locks()  # a refused or failed start leaves the dirs to the next one
            raise

    def _lock_dirs(self, meta_dir: str) -> None:
        """Every log dir, and the metadata log dir when it is not one of them (as Kafka's
        KafkaRaftManager), before anything in them is read or written."""
        self.log_manager.lock_dirs()
        if meta_dir not in self.log_manager.log_dirs:
            os.makedirs(meta_dir, exist_ok=True)
            self.metadata_dir_lock = DirLock(meta_dir)

    def _release_locks(self) -> None:
        if getattr(self, "log_manager", None) is not None:
            self.log_manager.release_locks()
        if self.metadata_dir_lock is not None:
            self.metadata_dir_lock.release()
            self.metadata_dir_lock = None

    async def _start(self) -> None:
        t0 = time.monotonic()
        self.loop = asyncio.get_running_loop()
        cfg = self.config
        # every SSL listener's context and the client side's, built (and their ssl.* keys
        # checked) before anything is opened
        self.tls = ListenerContexts(cfg)
        for sasl in self.sasl_listeners.values():  # an http(s) JWKS's refreshes
            sasl.start(self.loop)
        self._keystores = {name: store_state(cfg, name) for name in self.tls.server}
        self._client_stores = {side: store_state(cfg, name) for side, name in self.tls.client_listeners.items()}
        self.log_manager = LogManager(
            cfg.log_dirs,
            self.clock,
            node_id=self.node_id,
            cluster_id=cfg.get("cluster.id"),
            dir_failure=self.dir_failure,
        )
        loop = self.loop
        self.dir_failure.on_offline = lambda _d: loop.call_soon_threadsafe(self._handle_log_dir_failures)
        meta_dir = os.path.abspath(cfg.metadata_log_dir)
        self._lock_dirs(meta_dir)
        check_fd_limit(list(dict.fromkeys([*self.log_manager.log_dirs, meta_dir])))
        cluster_id = self.log_manager.prepare_dirs()
        os.makedirs(meta_dir, exist_ok=True)
        self.image = MetadataImage()
        # KIP-714: the clients' pushed metrics, shown at /metrics (kesque/metrics/telemetry.py);
        # telemetry.max.bytes is Kafka's key, read as its file sets it
        self.client_telemetry = (
            ClientTelemetry(self.image, int(cfg.raw.get("telemetry.max.bytes") or 1048576))
            if self.metrics_address
            else None
        )
        self.image.cluster_id = cluster_id
        self._start_quorum(meta_dir, cluster_id)
        if not self.voters:
            await self._discover_voters()
        self.replica_manager = ReplicaManager(cfg, self.log_manager, self.image, self.clock)
        # AlterReplicaLogDirs: copies run as tasks of this server (spawn is bound at call time)
        self.log_dir_mover = LogDirMover(
            self.log_manager,
            self.replica_manager,
            cfg.get("replica.fetch.max.bytes"),
            lambda coro: self.spawn(coro),
            quota=self.replica_manager.quotas.alter_log_dirs,
            backoff_ms=cfg.get("replica.fetch.backoff.ms"),
        )
        host = CoordinatorHost(LoopScheduler(self.loop), self.clock, cfg, self.replica_manager, lambda: self.image)
        self.group_coordinator = GroupCoordinator(host)
        self.replica_manager.add_leadership_listener(self.group_coordinator.on_leadership)
        # mirror topics: the partitions this broker leads copy their source (docs/mirror.md)
        self.mirror_fetchers = MirrorFetcherManager(
            self.node_id,
            self.image,
            self.replica_manager,
            self.clock,
            lambda part: self.replica_manager.notify_append(part.topic, part.partition, 1),
            loop=self.loop,
            raise_producer_id_floor=lambda floor: self.producer_ids.raise_floor(floor),
        )
        self.replica_manager.add_leadership_listener(self.mirror_fetchers.schedule_refresh)
        self.add_publisher(lambda delta: delta.changed_mirrors and self.mirror_fetchers.schedule_refresh())
        self.producer_id_blocks = ProducerIdBlocks(
            lambda: self.controllers.allocate_producer_ids(self.node_id, self.broker_epoch), self.spawn
        )
        self.producer_ids = self.producer_id_blocks.manager
        self.txn_coordinator = TransactionCoordinator(host, self.producer_ids)
        self.txn_verifier, channels = txn_channels.wire(
            config=cfg,
            node_id=self.node_id,
            image=self.image,
            replica_manager=self.replica_manager,
            txn_coordinator=self.txn_coordinator,
            ssl_context=self.tls.inter_broker,
            sasl=self.sasl_inter_broker,
        )
        self._channels += channels
        self.replica_manager.add_leadership_listener(self.txn_coordinator.on_leadership)
        self.replica_manager.add_marker_listener(self._on_txn_marker)
        self.share_coordinator = None
        if share_groups_enabled(cfg):
            self.share_coordinator = ShareCoordinator(host)
            self.replica_manager.add_leadership_listener(self.share_coordinator.on_leadership)
        self.coordinators = CoordinatorLookup(
            self.image, cfg, self.controllers, self.spawn, share_groups=self.share_coordinator is not None
        )
        # consumer offsets copied over cluster links, into this broker's group coordinator
        mirror_channel = Channel(
            txn_channels.broker_resolver(lambda: self.image, cfg),
            client_id=f"mirror-offsets-{self.node_id}",
            request_timeout_ms=cfg.get("request.timeout.ms"),
            ssl_context=self.tls.inter_broker,
            sasl=self.sasl_inter_broker,
        )
        self._channels += (mirror_channel,)
        self.mirror_fetchers.group_coordinator = self.group_coordinator
        self.mirror_fetchers.group_coordinator_of = lambda group: self.coordinators.coordinator_for(0, group)
        self.mirror_fetchers.destination_channel = lambda: mirror_channel
        self.mirror_fetchers.offset_syncer = OffsetSyncer
        self.share_manager = None
        if self.share_coordinator is not None:
            # the share-state RPCs to other brokers' share coordinators (kesque/server/drivers/share_persister.py)
            channel = Channel(
                txn_channels.broker_resolver(lambda: self.image, cfg),
                client_id=f"share-persister-{self.node_id}",
                request_timeout_ms=cfg.get("request.timeout.ms"),
                ssl_context=self.tls.inter_broker,
                sasl=self.sasl_inter_broker,
            )
            self._channels += (channel,)
            self.share_manager = SharePartitionManager(
                image=self.image,
                config=cfg,
                replica_manager=self.replica_manager,
                share_coordinator=self.share_coordinator,
                node_id=self.node_id,
                clock=self.clock,
                spawn=self.spawn,
                coordinator_of=lambda key: self.coordinators.coordinator_for(2, key),
                channel=channel,
            )
        self._build_handlers()
        self.socket_server = SocketServer(
            self.loop,
            self.handle_frame,
            cfg.get("socket.request.max.bytes"),
            cfg.get("socket.send.buffer.bytes"),
            cfg.get("socket.receive.buffer.bytes"),
            cfg.get("queued.max.request.bytes"),
            cfg.get("connections.max.idle.ms"),
        )
        self.socket_server.admit = self._admit_connection
        self.socket_server.release = self.quotas.connections.release
        self.socket_server.on_accept = self._on_accept
        if self.share_manager is not None:  # a closed connection ends its share sessions
            self.socket_server.closed_listeners.append(
                lambda conn: None if self.stopped else self.share_manager.connection_closed(conn.id)
            )
        # the controller listener first: the quorum needs it to elect a leader and to replicate
        # (a lone voter needs none: its controller is in-process, as before)
        controller_bound = {}
        if self.cluster_mode and self.node_id in self.voters:
            controller_bound = self._listen(lambda name: name in self.controller_listener_names)
        self.raft.endpoints = tuple(
            (name, *self._advertised(host, port)) for name, (host, port) in controller_bound.items()
        )
        self.raft.start()
        await self.raft.wait_caught_up()
        log.info("Metadata caught up to offset %d", self.image.offset)
        if isinstance(self.authorizer, StandardAuthorizer):
            self.authorizer.complete_initial_load()
        # the committed metadata is in the image: now the logs and the broker listeners
        self.quotas.update(self.image.client_quotas)
        self.add_publisher(lambda delta: delta.changed_quotas and self.quotas.update(self.image.client_quotas))
        full = Delta(changed_configs=set(self.image.configs))
        self.replica_manager.apply_delta(full)
        self.log_manager.load_logs(self.replica_manager.config_for_loading)
        if meta_dir not in self.log_manager.log_dirs:
            ck.consume_clean_shutdown(meta_dir)
        self._metadata_ready = True
        self._publish(self._pending_delta)
        self._pending_delta = Delta()
        # the broker listeners are bound now (their ports go into the registration) and accept
        # once this broker is registered and caught up, as Kafka's enableRequestProcessing: a
        # broker back from a crash must not serve followers or clients from the leaderships of
        # the image it replayed (its log may have lost its unflushed tail) before the controller
        # has fenced its old incarnation and moved them (kesque.sim's real_power_loss scenario)
        self.bound.update(self._listen(lambda name: name not in self.controller_listener_names, serve=False))
        self.bound.update(controller_bound)
        if "broker" in self.roles:
            if self.cluster_mode:
                await self._join_cluster(cluster_id)
            else:  # a lone node: registered and unfenced at once, as before the quorum
                self.broker_epoch = await self.controllers.register_broker(
                    self.node_id, self._endpoints(), cluster_id, uuid.uuid4(), FEATURES, cfg.get("broker.rack")
                )
            self.replica_manager.local_broker_epoch = self.broker_epoch
            if self.cluster_mode:
                self._start_replication()
            await self.producer_id_blocks.load()
        # partitions of every topic in the image (become leader where this node leads)
        self.replica_manager.apply_delta(
            Delta(changed_partitions={(t.topic_id, p) for t in self.image.topics_by_id.values() for p in t.partitions})
        )
        self._delete_stray_logs()
        self._warn_not_yet()
        self._write_checkpoints_at_start()
        self._schedule_periodic()
        self._start_log_cleaner()
        self.log_dir_mover.resume()  # moves between log dirs a restart interrupted
        self.socket_server.start_serving()
        self._start_metrics()
        self._start_console()
        self.started.set()
        log.info(
            "kesque node %d started in %.0f ms (cluster %s)", self.node_id, (time.monotonic() - t0) * 1000, cluster_id
        )

    def _start_metrics(self) -> None:
        """metrics.listener: the /metrics endpoint, reading this node's state at scrape time."""
        if self.metrics_address is None:
            return
        sources = Sources(
            node_id=self.node_id,
            topic_stats=self.topic_stats,
            request_metrics=self.request_metrics,
            image=self.image,
            replica_manager=self.replica_manager,
            connections=lambda: [c.listener for c in self.socket_server.connections],
            raft=self.raft,
            controller_active=lambda: self.quorum is not None and self.quorum.active,
            group_coordinator=self.group_coordinator,
            txn_coordinator=self.txn_coordinator,
            quotas=self.quotas,
            now_ms=self._now_ms,
            flush_stats=LOG_FLUSH_STATS,
            log_cleaner=lambda: self.log_cleaner,
            client_telemetry=self.client_telemetry,
            share_manager=self.share_manager,
        )
        self.metrics_endpoint = MetricsEndpoint(*self.metrics_address, [BrokerCollector(sources, on_loop(self.loop))])
        try:
            self.metrics_endpoint.start()
        except OSError as e:
            self.metrics_endpoint = None
            raise ConfigError(
                "metrics.listener",
                f"Unable to listen on {self.config.get('metrics.listener')} (metrics.listener): {e.strerror or e}",
            ) from None

    def _console_client_security(self) -> ClientSecurity | None:
        """The console's own client properties (``console.client.*``) read, or None without them;
        a ConfigError naming the key when one is bad or no broker listener speaks its protocol."""
        own = self.config.console_client
        if not own:
            return None
        if self.console_address is None:
            log.warning("console.client.* is set but console.listener is not: no console uses it")
            return None
        try:
            security = ClientSecurity.of(own)
        except ConfigError as e:
            key = CONSOLE_CLIENT_PREFIX + e.name
            raise ConfigError(key, f"{e} ({key})") from None
        protocols = self.config.security_protocol_map()
        controllers = {n.upper() for n in self.config.get("controller.listener.names")}
        if not any(
            protocols.get(lis.name, lis.name) == security.protocol
            for lis in self.config.listeners()
            if lis.name not in controllers
        ):
            key = CONSOLE_CLIENT_PREFIX + "security.protocol"
            raise ConfigError(key, f"No broker listener of this node speaks {security.protocol} ({key})")
        return security

    def _start_console(self) -> None:
        """console.listener: the web console, reading this node as a client. With
        ``console.client.*`` (Kafka client properties: its own principal) over the node's first
        broker listener of that ``security.protocol``; without them over its first PLAINTEXT
        broker listener, or, without one, over the inter-broker listener as this node's own
        client side does (its TLS context and SASL login: the console acts as the broker's
        principal). docs/console.md."""
        if self.console_address is None:
            return
        protocols = self.config.security_protocol_map()
        brokers = [n for n in self.bound if n not in self.controller_listener_names]
        security = self.console_security
        if security is not None:
            name = next(n for n in brokers if protocols.get(n, n) == security.protocol)
        elif plain := [n for n in brokers if protocols.get(n) == "PLAINTEXT"]:
            name = plain[0]
        else:
            name = self.config.inter_broker_listener()
            protocol = protocols.get(name, "PLAINTEXT")
            security = ClientSecurity(protocol, self.tls.inter_broker, self.sasl_inter_broker)
        if name not in self.bound:
            log.warning("console.listener is set but this node has no broker listener to read: no console")
            return
        host, port = self.bound[name]
        if host in ("", "0.0.0.0", "::"):
            # the name its certificate is for, over TLS (the advertised one), else the loopback
            advertised = [lis.host for lis in self.config.advertised_listeners() if lis.name == name and lis.host]
            host = advertised[0] if security is not None and security.ssl_context and advertised else "127.0.0.1"
        self.console = ConsoleServer(*self.console_address, f"{host}:{port}", client_props=security)
        try:
            self.console.start()
        except OSError as e:
            self.console = None
            raise ConfigError(
                "console.listener",
                f"Unable to listen on {self.config.get('console.listener')} (console.listener): {e.strerror or e}",
            ) from None

    async def _join_cluster(self, cluster_id: str | None) -> None:
        """BrokerRegistration, then heartbeats until the controller unfences this broker (it
        has caught up with the metadata log and its logs are loaded), as Kafka's broker
        start-up waits for; heartbeats every broker.heartbeat.interval.ms from then on."""

        lc = BrokerLifecycle(
            self.node_id,
            uuid.uuid4(),
            self.config,
            cluster_id=cluster_id or "",
            listeners=[Endpoint(**e) for e in self._endpoints()],
            features=supported_features(),
            rack=self.config.get("broker.rack"),
            rng=self.rng,
            now=self._now_ms(),
            log_dirs=[
                self.log_manager.directory_ids[d]
                for d in self.log_manager.live_log_dirs
                if d in self.log_manager.directory_ids
            ],
        )
        lc.on_metadata_offset(self.image.offset)
        lc.set_ready_to_unfence(self._now_ms())  # the logs are loaded
        self.lifecycle = lc
        self.heartbeats = LifecycleDriver(lc, self.controllers, self._now_ms)
        self.heartbeats.start()
        await self.heartbeats.until(lambda: lc.unfenced or lc.shutdown_finished)
        if lc.shutdown_finished:
            raise RuntimeError(f"broker {self.node_id} could not join the cluster: {lc.shutdown_reason}")
        self.broker_epoch = lc.broker_epoch

    # ================================================================== log dir failure
    def _handle_log_dir_failures(self) -> None:
        """Kafka's LogDirFailureHandler, on the event loop: each dir the channel took offline."""
        for d in self.dir_failure.take_offline_log_dirs():
            if self.stopped:
                return
            self._handle_log_dir_failure(d)

    def _handle_log_dir_failure(self, d: str) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure: the dir's partitions go offline; no live
        log dir left, or the metadata log dir gone, halts the broker (with Kafka's messages);
        otherwise the controller is told (the dir's id in the heartbeats' offline_log_dirs) and
        moves the leaderships away."""
        lm = self.log_manager
        meta_dir = os.path.abspath(self.config.metadata_log_dir)
        if lm.is_log_dir_online(d):
            dir_id = lm.directory_ids.get(d)
            if getattr(self, "replica_manager", None) is not None:
                self.replica_manager.handle_log_dir_failure(d)
            else:
                lm.handle_log_dir_failure(d)
            if not lm.live_log_dirs:
                self.halt(f"Shutdown broker because all log dirs in {', '.join(lm.log_dirs)} have failed")
                return
            if d == meta_dir:
                self.halt(f"Shutdown broker because the metadata log dir {d} has failed")
                return
            if self.lifecycle is not None:
                if dir_id is None:
                    self.halt(f"Unable to propagate directory failure disabled because directory {d} has no UUID")
                    return
                self.lifecycle.add_offline_log_dir(dir_id)
                self.heartbeats.wake()
            log.warning("Stopped serving replicas in dir %s", d)
        elif d == meta_dir:
            self.halt(f"Shutdown broker because the metadata log dir {d} has failed")

    def _start_replication(self) -> None:
        """A broker of a cluster: replica fetchers for the partitions it follows, and the
        AlterPartition sender for the ISR changes of those it leads."""

        rm = self.replica_manager
        listener = self.config.inter_broker_listener()

        def resolve(broker_id: int):
            reg = self.image.brokers.get(broker_id)
            ep = reg and (reg.endpoint(listener) or reg.endpoint())
            return (ep.host, ep.port) if ep else None

        # on_progress: nothing to wake on a follower (consumers fetch from leaders only: no KIP-392)
        rm.fetchers = ReplicaFetcherManager(
            self.node_id,
            self.config,
            self.clock,
            resolve,
            lambda: self.broker_epoch,
            lambda _part: None,
            loop=self.loop,
            quota=rm.quotas.follower,
            ssl_context=self.tls.inter_broker,
            sasl=self.sasl_inter_broker,
            topic_stats=self.topic_stats,
        )
        self.alter_partitions = AlterPartitionManager(self.controllers, self.node_id, lambda: self.broker_epoch)
        rm.send_alter_partition = self.alter_partitions.sender()
        # KIP-858: the log dir of each replica whose metadata names another, to the controller
        self.assignments = AssignmentsManager(
            self.node_id, self.controllers, lambda: self.broker_epoch, lambda: self.image
        )
        self.assignments.start()
        rm.assign_dir = self.assignments.assign

    async def _controlled_shutdown(self) -> None:
        """SIGTERM in a cluster: the controller moves this broker's leaderships off it
        (controlled.shutdown.enable) before the broker stops serving."""
        lc = self.lifecycle
        if lc is None or lc.shutdown_finished:
            return
        lc.begin_controlled_shutdown(self._now_ms())
        self.heartbeats.wake()
        await self.heartbeats.until(lambda: lc.shutdown_finished)
        log.info("Controlled shutdown finished: %s", lc.shutdown_reason)

    def _listen(self, which, serve: bool = True) -> dict[str, tuple[str, int]]:
        out = {}
        protocols = self.config.security_protocol_map()
        for lis in self.config.listeners():
            if not which(lis.name):
                continue
            port = self.socket_server.listen(
                lis.host,
                lis.port,
                lis.name,
                protocols.get(lis.name, PLAINTEXT),
                serve=serve,
                ssl_context=self.tls.server.get(lis.name),
                principal_of=self.tls.principal.get(lis.name),
            )
            out[lis.name] = (lis.host, port)
            log.info("Listening on %s://%s:%d", lis.name, lis.host or "0.0.0.0", port)
        return out

    @staticmethod
    def _advertised(host: str, port: int) -> tuple[str, int]:
        return (host if host and host not in ("0.0.0.0", "::") else socket.getfqdn()), port

    def _start_quorum(self, meta_dir: str, cluster_id: str | None) -> None:
        """The raft node of __cluster_metadata (a voter when this node is a controller in
        controller.quorum.voters, else an observer), the controller when this node is one, and
        the router that takes the broker's controller calls where the active controller is."""

        cfg = self.config
        self.roles = set(cfg.get("process.roles") or ("broker", "controller"))
        self.controller_listener_names = {n.upper() for n in cfg.get("controller.listener.names")}
        self.voters = not_yet.voter_addresses(cfg, self.node_id)
        # several nodes (voters, or separate broker and controller roles): the controller
        # listener, broker heartbeats and fencing; a lone combined node keeps it all in process,
        # unless it listens for controller traffic: then broker-only nodes may join it, as a
        # Kafka combined node with a CONTROLLER listener takes them
        listens_as_controller = any(lis.name.upper() in self.controller_listener_names for lis in cfg.listeners())
        self.cluster_mode = (
            len(self.voters) > 1
            or self.roles != {"broker", "controller"}
            or (listens_as_controller and self.node_id in self.voters)
        )
        qc = quorum_config(cfg, lone_voter=list(self.voters) == [self.node_id])
        # two channels, as Kafka's raft and controller clients: responses come back in request
        # order on a connection, and a forwarded request that waits for a commit must not
        # hold up the raft Fetch whose answer the commit needs
        raft_channel = Channel(
            self.voters.get,
            client_id=f"raft-client-{self.node_id}",
            request_timeout_ms=qc.request_timeout_ms,
            ssl_context=self.tls.controller,
            sasl=self.sasl_controller,
        )
        self.channel = Channel(
            self.voters.get,
            client_id=f"kesque-node-{self.node_id}",
            ssl_context=self.tls.controller,
            sasl=self.sasl_controller,
        )
        self._channels = (raft_channel, self.channel)
        self.raft = RaftManager(
            self.node_id,
            self.voters,
            meta_dir,
            qc,
            raft_channel,
            cluster_id,
            seed=self.rng.getrandbits(64),
            clock=self.clock,
        )
        self.raft.dir_failure = self.dir_failure
        self.snapshots = metadata_snapshot.SnapshotPolicy.from_config(cfg, self._now_ms())
        if "controller" in self.roles and self.node_id in self.voters:
            self.quorum = QuorumController(cfg, self.clock, self.raft, cluster_id, lifecycle=self.cluster_mode)
            self.controller = self.quorum.controller
            self.raft.on_snapshot(self.quorum.load_snapshot)
            self.raft.on_commit(self.quorum.apply_committed)
            self.raft.on_state_change(self.quorum.on_state_change)
        self.raft.on_snapshot(self._load_snapshot)
        self.raft.on_commit(self._apply_committed)
        self.controllers = ControllerRouter(
            self.node_id, self.quorum, lambda: self.raft.leader_id, self.channel, self.controller_listener_names
        )

    async def _discover_voters(self) -> None:
        """A broker-only node given controller.quorum.bootstrap.servers and no voters asks
        them (DescribeQuorum v2) for the voters and their controller endpoints."""

        servers = [s.strip() for s in self.config.get(not_yet.BOOTSTRAP) or [] if s.strip()]
        addrs = [(host.strip("[]") or "localhost", int(port)) for host, _, port in (s.rpartition(":") for s in servers)]
        found = await discover_voters(
            addrs,
            self.controller_listener_names,
            self.node_id,
            ssl_context=self.tls.controller,
            sasl=self.sasl_controller,
        )
        self.voters.update(found)
        self.raft.voters.update(found)
        log.info(
            "Controller quorum voters from %s: %s",
            not_yet.BOOTSTRAP,
            ", ".join(f"{v}@{h}:{p}" for v, (h, p) in sorted(found.items())),
        )

    def _load_snapshot(self, values: list, end_offset: int) -> None:
        """A metadata snapshot (at start, or fetched from the leader): the image is rebuilt."""
        cluster_id = self.image.cluster_id
        fresh = MetadataImage()
        fresh.cluster_id = cluster_id
        fresh.offset = end_offset - 1
        self.snapshots.reset(self._now_ms())
        delta = Delta()
        for v in values:
            if isinstance(v, (bytes, bytearray)):
                fresh.replay(metadata_records.decode(v), delta)
        self.image.__dict__.update(fresh.__dict__)
        if isinstance(self.authorizer, StandardAuthorizer):
            self.authorizer.load_snapshot(self.image.acls)
        self._deliver(delta)

    def _apply_committed(self, records: list) -> None:
        """Committed metadata records, in offset order: replayed into the broker's image."""
        delta = Delta()
        size = 0
        for rec in records:
            if isinstance(rec.value, (bytes, bytearray)):
                self.image.replay(metadata_records.decode(rec.value), delta)
            size += rec.batch_bytes  # the batches' bytes, as Kafka counts between snapshots
            self.image.offset = rec.offset
        if records and self.snapshots.on_batch(size, self._now_ms()):
            self._take_snapshot()
        if delta.changed_acls and isinstance(self.authorizer, StandardAuthorizer):
            self._apply_acls(delta.changed_acls)
        if self.lifecycle is not None:
            self.lifecycle.on_metadata_offset(self.image.offset)
        self._deliver(delta)

    def _apply_acls(self, changes: dict) -> None:
        """Kafka's AclPublisher: the ACLs a batch added or removed, into the authorizer at once
        (the next request on any open connection is decided by them)."""
        a = self.authorizer
        for acl_id, acl in changes.items():
            if acl is None:
                a.remove_acl(acl_id)
            else:
                a.add_acl(acl_id, acl)

    def _take_snapshot(self) -> None:
        """metadata.log.max.record.bytes.between.snapshots (or .max.snapshot.interval.ms)
        reached: the image, as records, becomes a snapshot and the log behind it goes."""
        try:
            self.raft.snapshot(
                self.image.offset + 1, [metadata_records.encode(r) for r in metadata_snapshot.image_records(self.image)]
            )
        except Exception:
            log.exception("metadata snapshot failed")

    def _deliver(self, delta: Delta) -> None:
        if not delta:
            return
        if self._metadata_ready:
            self._publish(delta)
        else:
            self._pending_delta.merge(delta)

    def _write_checkpoints_at_start(self) -> None:
        """The log dir's checkpoints exist from the start, not from the first periodic write a
        minute later (Kafka creates them when its LogManager and ReplicaManager start and
        writes the high watermarks as soon as the partitions are applied); written here with
        what loading and leader election settled."""
        lm = self.log_manager
        lm.write_checkpoints(
            lm.high_watermark_checkpoints() + lm.recovery_point_checkpoints() + lm.log_start_checkpoints()
        )

    def _endpoints(self) -> list[dict]:
        adv = self.config.advertised_listeners()
        protocols = self.config.security_protocol_map()
        out = []
        for lis in adv:
            host, port = lis.host, lis.port
            if lis.name in self.bound:
                bhost, bport = self.bound[lis.name]
                port = port or bport
                if not self.config.get("advertised.listeners"):
                    port = bport
            if not host or host in ("0.0.0.0", "::"):
                host = socket.getfqdn()
            proto = SECURITY_PROTOCOL_IDS[protocols.get(lis.name, PLAINTEXT)]
            out.append({"name": lis.name, "host": host, "port": port, "security_protocol": proto})
        return out

    def _warn_not_yet(self) -> None:
        """Once at start: what is stored but not acted on."""
        if self.controller is not None:
            self.controller.warn_without_effect()

    def _start_log_cleaner(self) -> None:
        """log.cleaner.enable: the background cleaner of compacted logs, woken every
        log.cleaner.backoff.ms (read each time: it is dynamic) and after each cleaning."""

        if not self.config.get("log.cleaner.enable"):
            return
        self.log_cleaner = LogCleaner(self.config, self.log_manager, self.clock, self.loop, self._write_in_background)

        def tick():
            if self.stopped:
                return
            try:
                self.log_cleaner.kick()
            except Exception:
                log.exception("log cleaner selection failed")
            self._timers.append(self.loop.call_later(self.config.get("log.cleaner.backoff.ms") / 1000.0, tick))

        self._timers.append(self.loop.call_soon(tick))

    def _delete_stray_logs(self) -> None:
        for (topic, partition), lg in list(self.log_manager.logs.items()):
            part = self.replica_manager.partitions.get((topic, partition))
            if part is None or (lg.topic_id is not None and part.topic_id != lg.topic_id):
                log.info("Deleting stray log %s-%d (topic no longer in metadata)", topic, partition)
                self.log_manager.delete_log(topic, partition)

    def _publish(self, delta: Delta) -> None:
        self.replica_manager.apply_delta(delta)
        self._reload_keystores(delta)
        for fn in self._publishers:
            fn(delta)

    # ------------------------------------------------------------------ key stores altered dynamically
    def _validate_broker_update(self, updates: dict) -> None:
        """An alteration of this broker's own config that changes a TLS listener's
        ``listener.name.<l>.ssl.{keystore,key,truststore}.*``: the new stores must load and match
        the ones in use (tls.reconfigured_server_context), else INVALID_REQUEST before it reaches
        the controller."""
        listeners = reconfigured_listeners(updates, self.tls.server)
        if not listeners:
            return
        cfg = self.config
        before = dict(cfg.dynamic_broker)
        try:
            for k, v in updates.items():
                if v is None:
                    cfg.dynamic_broker.pop(k, None)
                else:
                    cfg.dynamic_broker[k] = cfg.validate_dynamic(k, v)
            for name in sorted(listeners):
                reconfigured_server_context(
                    cfg, name, self.tls.server[name], inter_broker=name == cfg.inter_broker_listener()
                )
        except SslReconfigurationError as e:  # as Kafka's DynamicBrokerConfig wraps a reconfigurable's refusal
            message = f"Invalid value {e} for configuration Invalid dynamic configuration"
            raise KafkaError(ErrorCode.invalid_request, message) from None
        except ConfigError as e:
            raise KafkaError(ErrorCode.invalid_request, str(e)) from None
        finally:
            cfg.dynamic_broker.clear()
            cfg.dynamic_broker.update(before)

    def _reload_keystores(self, delta: Delta) -> None:
        """This broker's config changed: a TLS listener whose key or trust store settings (or
        files) differ from those it was built with gets a new context, which the connections
        accepted from now on use (Kafka's dynamic SSL reconfiguration); stores that no longer
        load or match are logged and the listener keeps its own."""
        mine = ("", str(self.node_id))
        if not any(rtype == RESOURCE_BROKER and rname in mine for rtype, rname in delta.changed_configs):
            return
        inter = self.config.inter_broker_listener()
        for name, current in list(self.tls.server.items()):
            state = store_state(self.config, name)
            if state == self._keystores.get(name):
                continue
            self._keystores[name] = state
            try:
                new = reconfigured_server_context(self.config, name, current, inter_broker=name == inter)
            except ConfigError as e:
                log.error("The SSL stores of listener %s were not reloaded: %s", name, e)
                continue
            self.tls.server[name] = new
            self.socket_server.set_context(name, new)
            log.info("Reloaded the SSL key and trust stores of listener %s: new connections use them", name)
        self._reload_client_contexts()

    def _reload_client_contexts(self) -> None:
        """The node's own client side of a TLS inter-broker or controller listener whose stores
        changed (Kafka reconfigures its channel builders too): rebuilt, and the channels and
        replica fetchers open their next connections with it."""
        for side, name in self.tls.client_listeners.items():
            state = store_state(self.config, name)
            if state == self._client_stores.get(side):
                continue
            self._client_stores[side] = state
            old = getattr(self.tls, side)
            try:
                new = client_context(self.config, name)
            except ConfigError as e:
                log.error("The SSL client side of listener %s was not reloaded: %s", name, e)
                continue
            setattr(self.tls, side, new)
            for holder in (*self._channels, self.replica_manager.fetchers):
                if getattr(holder, "ssl_context", None) is old:
                    holder.ssl_context = new
            log.info("Reloaded the SSL client side of listener %s: this node's new connections use it", name)

    def add_publisher(self, fn) -> None:
        self._publishers.append(fn)

    async def stop(self, clean: bool = True) -> None:
        if self.stopped:
            return
        if clean and self.lifecycle is not None:
            try:
                await self._controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown failed")
        self.stopped = True
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
        if self.console is not None:
            self.console.stop()
        if self.heartbeats is not None:
            self.heartbeats.stop()
        if getattr(self, "assignments", None) is not None:
            self.assignments.stop()
        for t in self._timers:
            t.cancel()
        if self.socket_server is not None:
            self.socket_server.close()
        for sasl in self.sasl_listeners.values():
            sasl.stop()
        if getattr(self, "group_coordinator", None) is not None:
            self.group_coordinator.shutdown()
        if getattr(self, "share_coordinator", None) is not None:
            self.share_coordinator.shutdown()
        if getattr(self, "txn_coordinator", None) is not None:
            self.txn_coordinator.shutdown()
        for task in list(self._tasks):
            task.cancel()
        if getattr(self, "mirror_fetchers", None) is not None:
            await self.mirror_fetchers.shutdown()
        if getattr(self, "replica_manager", None) is not None and self.replica_manager.fetchers is not None:
            self.alter_partitions.close()
            await self.replica_manager.fetchers.shutdown()
        if self.log_cleaner is not None:
            await self.log_cleaner.stop()
            if clean:
                self.log_manager.write_checkpoints(self.log_cleaner.manager.checkpoint_jobs(self.log_manager))
        self.io_executor.shutdown(wait=True)
        # the controller stops (its NoOp, session-expiry and election timers with it) before
        # the raft manager resigns and closes the metadata log, which nothing may write after
        if self.quorum is not None:
            self.quorum.shutdown()
        if self.raft is not None and self.raft.node is not None:
            await self.raft.close(graceful=clean)
        for channel in getattr(self, "_channels", ()):
            channel.close()
        if clean:
            self.log_manager.shutdown(self.broker_epoch)
            meta_dir = os.path.abspath(self.config.metadata_log_dir)
            if meta_dir not in self.log_manager.log_dirs and not self.dir_failure.has_offline_log_dir(meta_dir):
                try:
                    ck.write_clean_shutdown(meta_dir, self.broker_epoch)
                except OSError as e:
                    log.error("Error while writing the clean shutdown marker in dir %s: %s", meta_dir, e)
        self._release_locks()

    # ================================================================== periodic work
    def _every(self, interval_ms: int, fn, name: str) -> None:
        if interval_ms <= 0 or interval_ms >= (1 << 62):
            return
        interval = interval_ms / 1000.0

        def run():
            if self.stopped:
                return
            try:
                fn()
            except Exception:
                log.exception("periodic task %s failed", name)
            self._timers.append(self.loop.call_later(interval, run))
            if len(self._timers) > 64:
                self._timers = [t for t in self._timers if not t.cancelled()][-32:]

        self._timers.append(self.loop.call_later(interval, run))

    def _schedule_periodic(self) -> None:
        cfg = self.config
        lm = self.log_manager
        self._every(cfg.get("log.retention.check.interval.ms"), lm.cleanup_logs, "log-retention")
        idle_ms = cfg.get("connections.max.idle.ms")
        if idle_ms >= 0:  # checked every tenth of the period, at most every 10 s
            self._every(min(max(idle_ms // 10, 50), 10000), self.socket_server.expire_idle, "idle-connections")
        self._every(1000, lm.delete_expired, "delete-expired-files")
        self._every(cfg.get("log.flush.scheduler.interval.ms"), lm.flush_dirty_logs, "log-flusher")
        self._every(
            cfg.get("log.flush.offset.checkpoint.interval.ms"),
            lambda: self._write_in_background(lm.recovery_point_checkpoints()),
            "recovery-point-checkpoint",
        )
        self._every(
            cfg.get("log.flush.start.offset.checkpoint.interval.ms"),
            lambda: self._write_in_background(lm.log_start_checkpoints()),
            "log-start-offset-checkpoint",
        )
        self._every(
            cfg.get("offsets.retention.check.interval.ms"), self.group_coordinator.expire_offsets, "offset-expiration"
        )
        tc = self.txn_coordinator
        self._every(
            cfg.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            tc.abort_timed_out,
            "transaction-abort",
        )
        self._every(
            cfg.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
            tc.expire_transactional_ids,
            "transactionalId-expiration",
        )
        self._every(
            cfg.get("producer.id.expiration.check.interval.ms"),
            lambda: lm.remove_expired_producers(cfg.get("producer.id.expiration.ms")),
            "producer-id-expiration",
        )
        self._every(QUOTA_REPORT_INTERVAL_MS, self._report_quotas, "client-quota-metrics")
        self._every(cfg.get("replica.lag.time.max.ms") // 2, self.replica_manager.shrink_isrs, "isr-expiration")
        self._every(
            cfg.get("replica.high.watermark.checkpoint.interval.ms"),
            lambda: self._write_in_background(lm.high_watermark_checkpoints()),
            "highwatermark-checkpoint",
        )

    def _on_txn_marker(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        if topic == self.group_coordinator.TOPIC:
            self.group_coordinator.on_txn_marker(partition, producer_id, commit)

    def _write_in_background(self, jobs) -> None:
        fut = self.io_executor.submit(self.log_manager.write_checkpoints, jobs)
        fut.add_done_callback(lambda f: f.exception() and log.error("checkpoint write failed: %s", f.exception()))

    def spawn(self, coro) -> asyncio.Task:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ================================================================== requests
    def _build_handlers(self) -> None:
        """The one place where the API handlers are built, each with the collaborators it uses
        (the image is updated in place, never replaced), and bound to the dispatch tables."""
        cfg, image, rm, router, throttler = (
            self.config,
            self.image,
            self.replica_manager,
            self.controllers,
            self.throttler,
        )
        links = ClusterLinkApis(image=image, controllers=router, node_id=self.node_id, mirrors=self.mirror_fetchers)
        self.mirror_fetchers.grow_mirror = links.grow_mirror  # a source topic that grew: at the controller
        self.mirror_fetchers.sync_configs = links.sync_configs  # its synced configs, likewise
        self.mirror_fetchers.create_offsets_mirror = links.create_offsets_mirror
        handlers = (
            CoreApis(
                image=image,
                config=cfg,
                node_id=self.node_id,
                controllers=router,
                raft=self.raft,
                voters=self.voters,
                controller_listener_names=self.controller_listener_names,
                coordinators=self.coordinators,
                api_table=lambda: self.apis,
            ),
            ProduceApis(
                image=image,
                replica_manager=rm,
                config=cfg,
                node_id=self.node_id,
                txn_coordinator=self.txn_coordinator,
                txn_verifier=self.txn_verifier,
                throttler=throttler,
                topic_stats=self.topic_stats,
                request_metrics=self.request_metrics,
            ),
            TransactionApis(
                image=image,
                config=cfg,
                replica_manager=rm,
                txn_coordinator=self.txn_coordinator,
                group_coordinator=self.group_coordinator,
                producer_ids=self.producer_ids,
                txn_verifier=self.txn_verifier,
                clock=self.clock,
            ),
            FetchApis(
                image=image,
                replica_manager=rm,
                config=cfg,
                raft=self.raft,
                controller_listener_names=self.controller_listener_names,
                clock=self.clock,
                throttler=throttler,
                topic_stats=self.topic_stats,
                request_metrics=self.request_metrics,
            ),
            OffsetApis(replica_manager=rm),
            TopicApis(image=image, config=cfg, controllers=router, throttler=throttler),
            ConfigApis(
                image=image,
                config=cfg,
                node_id=self.node_id,
                controllers=router,
                validate_broker=self._validate_broker_update,
            ),
            LogDirApis(log_manager=self.log_manager, mover=self.log_dir_mover),
            ShareStateApis(share_coordinator=self.share_coordinator),
            QuotaApis(image=image, controllers=router),
            QuorumApis(raft=self.raft, controllers=router),
            ReassignmentApis(controllers=router),
            GroupApis(
                image=image,
                group_coordinator=self.group_coordinator,
                share_manager=self.share_manager,
                request_metrics=self.request_metrics,
            ),
            ShareGroupApis(
                image=image,
                config=cfg,
                node_id=self.node_id,
                replica_manager=rm,
                group_coordinator=self.group_coordinator,
                share_coordinator=self.share_coordinator,
                share_manager=self.share_manager,
                coordinators=self.coordinators,
                controllers=router,
            ),
            AclApis(authorizer=self.authorizer, controllers=router),
            links,
            SaslApis(),
            ScramApis(image=image, controllers=router),
            TelemetryApis(image=image, telemetry=self.client_telemetry),
        )
        for h in handlers:
            bind(h, cfg, self.apis, self.controller_apis)
        # Kafka's Envelope: the brokers' forwarded requests, run as their clients' (envelope.py)
        envelope = EnvelopeApis(
            tables=(self.controller_apis, self.apis),
            authorizer=self.authorizer,
            throttler=throttler,
            context_cls=RequestContext,
        )
        self.controller_apis[ApiKeys.ENVELOPE] = protocol.ApiSpec(ApiKeys.ENVELOPE, 0, 0, envelope.envelope)

    def handle_frame(self, conn, frame: memoryview) -> None:
        """Parse one request frame and answer it (now, later, or never for acks=0)."""
        try:
            header = protocol.parse_request_header(frame)
        except ProtocolError as e:
            log.warning("%s: closing connection: malformed request header (%s)", conn.id, e)
            conn.close()
            return
        spec = self.apis.get(header.api_key)
        if self.controller_apis and conn.listener in self.controller_listener_names:
            spec = self.controller_apis.get(header.api_key, spec)
        if spec is None:
            log.warning(
                "%s: closing connection: unknown API key %d (client %s)", conn.id, header.api_key, header.client_id
            )
            conn.close()
            return
        version = header.api_version
        if not spec.min_version <= version <= spec.max_version:
            if header.api_key == ApiKeys.API_VERSIONS:
                # the v0-framed fallback: clients retry with a version from the list
                slot = conn.new_slot()
                body = self.api_versions_fallback()
                conn.complete(slot, [INT32.pack(4 + len(body)), INT32.pack(header.correlation_id), body])
                return
            log.warning(
                "%s: closing connection: unsupported version %d of %s (client %s)",
                conn.id,
                version,
                protocol.api_name(header.api_key),
                header.client_id,
            )
            conn.close()
            return
        body_view = frame[header.body_offset :]
        try:
            request = body_view if spec.raw else protocol.decode_request(header.api_key, version, body_view)
        except ProtocolError as e:
            log.warning("%s: closing connection: %s", conn.id, e)
            conn.close()
            return
        # every listener checks its requests with their principal, the controller's too (the
        # brokers' forwarded requests come in Envelopes with their clients' principals)
        ctx = RequestContext(header, conn, conn.listener, conn.security_protocol, conn.principal, self.authorizer)
        if self.quotas.request.enabled:
            ctx.start_ns = ctx.step_ns = time.perf_counter_ns()
        if REQUEST_LOG.isEnabledFor(logging.DEBUG):
            ctx.log_ns = time.perf_counter_ns()
        if self.request_metrics is not None:
            ctx.recv_ns = _clock()
        slot = conn.new_slot()
        try:
            result = spec.handler(ctx, request)
        except AuthorizerNotReady as e:
            result = self._not_ready(conn, ctx, request, e)
            if result is None:
                return
        except (ProtocolError, CloseConnection) as e:
            log.warning("%s: closing connection: %s", conn.id, e)
            conn.close()
            return
        if result is not NO_RESPONSE and inspect.isawaitable(result):
            # the handler's local time ends where it hands the rest to a wait; a handler that
            # answers at once has its local time end where its response is queued (local_ns 0,
            # _answer), as Kafka's does: its KafkaApis thread builds the response and sets
            # apiLocalCompleteTimeNanos when it queues it (RequestChannel.sendResponse)
            if ctx.recv_ns:
                ctx.local_ns = _clock()
            if ctx.start_ns:  # a delayed answer's request time: the handler's steps, not its waits
                ctx.busy_ns = time.perf_counter_ns() - ctx.step_ns
                ctx.step_ns = 0
                result = _timed(result, ctx)
            self.spawn(self._complete_later(conn, slot, ctx, result, request))
            return
        self._answer(conn, slot, ctx, result)

    @staticmethod
    def _not_ready(conn, ctx, request, e):
        """A request the authorizer could not decide yet (its ACLs are not loaded): Kafka's
        error response with UNKNOWN_SERVER_ERROR (its AuthorizerNotReadyException has no code of
        its own); a request whose errors are per item closes its connection instead."""
        result = error_response(ctx, request, ErrorCode.unknown_server_error)
        if result is None:
            log.warning("%s: closing connection: %s", conn.id, e)
            conn.close()
        return result

    async def _complete_later(self, conn, slot, ctx, awaitable, request) -> None:
        header = ctx.header
        try:
            result = await awaitable
            if ctx.recv_ns:
                ctx.remote_ns = _clock()
        except AuthorizerNotReady as e:
            result = self._not_ready(conn, ctx, request, e)
            if result is None:
                return
        except (ProtocolError, CloseConnection) as e:
            log.warning("%s: closing connection: %s", conn.id, e)
            conn.close()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: error completing %s", conn.id, protocol.api_name(header.api_key))
            conn.close()
            return
        self._answer(conn, slot, ctx, result)

    def _answer(self, conn, slot, ctx, result) -> None:
        """A handler's result to its slot (none for acks=0), throttled as its quotas say, then
        the client muted for the throttle time and the request logged."""
        if result is NO_RESPONSE:
            conn.drop_slot(slot)
        else:
            if ctx.throttle_ms or (ctx.start_ns and not ctx.recorded):
                result = self.throttler.throttled(ctx, result)
            conn.complete(slot, self._frame(ctx.header, result))
        if ctx.throttle_ms:
            self._mute(conn, ctx)
        if ctx.log_ns:
            request_log.completed(ctx, conn, ctx.log_ns)
        recv = ctx.recv_ns
        if recv:
            # Kafka's RequestChannel.updateRequestMetrics: the request's clock readings, folded
            # into its time histograms in bulk (RequestMetrics.fold), and the error codes of a kio
            # response (Produce, Fetch and OffsetCommit, encoded by hand, count theirs in their
            # handlers)
            header = ctx.header
            if note_request(
                self._pending_requests,
                PENDING_ITEMS,
                header.api_key,
                header.api_version,
                ctx.follower,
                conn.read_ns,
                recv,
                ctx.local_ns,
                ctx.remote_ns,
            ):  # the time the response was queued added last, by the compiled note
                self.request_metrics.fold()
            if ctx.throttle_ms:
                self.request_metrics.record_throttle(header.api_key, ctx.throttle_ms, ctx.follower)
            if result.__class__ not in _ENCODED:
                counts: dict[int, int] = {}
                error_counts(result, counts)
                self.request_metrics.errors_of(header.api_key, counts)

    # ================================================================== client quotas
    def _now_ms(self) -> int:
        return int(self._monotonic() * 1000)

    def _mute(self, conn, ctx) -> None:
        """KIP-219: the response went out at once; the connection reads nothing more until
        the throttle time has passed (other connections are served meanwhile)."""
        log.debug("%s: throttling client %s for %d ms", conn.id, ctx.client_id, ctx.throttle_ms)
        conn.mute_until(self.loop.time() + ctx.throttle_ms / 1000.0)

    def _on_accept(self, conn) -> None:
        """A connection of a SASL listener authenticates before its requests reach the handlers;
        with metrics, each connection notes when it reads (its requests' queue time)."""
        if self.request_metrics is not None:
            conn.timed = True
        sasl = self.sasl_listeners.get(conn.listener)
        if sasl is not None:
            cfg = self.config
            SaslConnection(
                sasl,
                conn,
                self.handle_frame,
                cfg.get("connection.failed.authentication.delay.ms"),
                cfg.get("sasl.server.max.receive.size"),
                cfg.get("socket.request.max.bytes"),
            )

    def _scram_credential(self, mechanism, user: str):
        """The SCRAM credential of ``user`` in the image (UserScramCredentialRecord), None without one."""
        return self.image.scram_credentials.get(mechanism.mechanism_name, {}).get(user)

    def _admit_connection(self, sock, addr) -> bool:
        """max.connections.per.ip (and overrides) and connection_creation_rate: a refused
        connection is closed, after the throttle delay when its IP's rate was exceeded."""
        ip = addr[0]
        ok, delay_ms, reason = self.quotas.connections.admit(ip, self._ip_limit(ip), self._now_ms())
        if ok:
            return True
        log.info("Rejected connection from %s: %s", ip, reason)
        if delay_ms:
            self.loop.call_later(delay_ms / 1000.0, sock.close)
        else:
            sock.close()
        return False

    def _ip_limit(self, ip: str) -> int:
        raw = self.config.get("max.connections.per.ip.overrides") or ""
        if raw != self._ip_overrides[0]:
            by_host = quota_core.parse_ip_overrides(raw)
            by_ip = {}
            for host, count in by_host.items():
                try:
                    by_ip[socket.gethostbyname(host)] = count
                except OSError:
                    by_ip[host] = count
            self._ip_overrides = (raw, by_ip)
        limit = self._ip_overrides[1].get(ip)
        return self.config.get("max.connections.per.ip") if limit is None else limit

    def _report_quotas(self) -> None:
        for line in self.quotas.report(self._now_ms()):
            log.info("Client quota %s", line)
        for line in self.replica_manager.quotas.report(self.replica_manager.now_ms()):
            log.info("Replication quota: %s", line)

    @staticmethod
    def _frame(header, result) -> list:
        """Size prefix + response header + body (bytes, list of buffers, or kio object)."""
        if isinstance(result, (bytes, bytearray)):
            items = [result]
        elif isinstance(result, list):
            items = result
        else:
            items = [protocol.encode_body(result)]
        head = protocol.response_header(header.correlation_id, header.api_key, header.api_version)
        size = len(head) + sum(len(x) for x in items)
        return [INT32.pack(size) + head, *items]

    def api_versions_fallback(self) -> bytes:

        return api_versions_v0_error(self.apis)
