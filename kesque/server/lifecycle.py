"""The broker's side of its lifecycle with the controller (sans-IO): Kafka's BrokerLifecycleManager.

States, as Kafka's ``BrokerState``::

    STARTING --caught up--> RECOVERY --unfenced--> RUNNING --begin_controlled_shutdown--> PENDING_CONTROLLED_SHUTDOWN
        \\________________________\\_______________________________\\____________________________--> SHUTTING_DOWN

- STARTING: send BrokerRegistration until it succeeds, then BrokerHeartbeat every 10 ms until the
  controller says the broker has caught up with the metadata log (its RegisterBrokerRecord).
- RECOVERY: heartbeats (``want_fence`` until the server calls :meth:`set_ready_to_unfence`, once
  it has published the metadata and recovered its logs) until the controller unfences it.
- RUNNING: a heartbeat every ``broker.heartbeat.interval.ms``.
- PENDING_CONTROLLED_SHUTDOWN: heartbeats with ``want_shut_down`` (the first at once, the second
  50 ms after the first answer) until the controller answers ``should_shut_down``, or the bound
  ``controlled_shutdown_timeout_ms`` (Kafka: 5 minutes) passes.
- SHUTTING_DOWN: nothing more is sent. Reached also when the broker could not register within
  ``initial.broker.registration.timeout.ms``, when a controlled shutdown is asked for before
  RUNNING, or at once with ``controlled.shutdown.enable=false``. :attr:`shutdown_reason` says why.

One request is in flight at a time. A failed request (an error code, :meth:`on_request_failed`
or no answer within ``request_timeout_ms``) is retried after an exponential backoff: 100 ms
doubling up to ``broker.session.timeout.ms``, ±2 % jitter (Kafka's). A communication that falls
due while a request is in flight goes out as soon as the answer comes (unless it failed).

Driver loop: ``req = lc.poll(now)`` (a RegistrationRequest, a HeartbeatRequest or None); send it
to the active controller; hand the answer to :meth:`on_registration_response` /
:meth:`on_heartbeat_response` or the failure to :meth:`on_request_failed`; tell it the metadata
offset applied (:meth:`on_metadata_offset`); call ``poll`` again at :meth:`next_deadline`.
"""

from __future__ import annotations

import random
import uuid

from ..controller.cluster_control import (
    UNBOUNDED,
    HeartbeatReply,
    HeartbeatRequest,
    LifecycleConfig,
    RegistrationRequest,
)
from ..errors import error_name

STARTING, RECOVERY, RUNNING = "STARTING", "RECOVERY", "RUNNING"
PENDING_CONTROLLED_SHUTDOWN, SHUTTING_DOWN = "PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN"

STARTING_HEARTBEAT_MS = 10  # Kafka: heartbeat soon while catching up
FIRST_SHUTDOWN_RETRY_MS = 50  # Kafka: the second controlled-shutdown heartbeat comes sooner
BACKOFF_INITIAL_MS, BACKOFF_JITTER = 100, 0.02


class BrokerLifecycle:
    def __init__(
        self,
        node_id: int,
        incarnation_id: uuid.UUID,
        config=None,
        *,
        cluster_id: str = "",
        listeners=(),
        features: dict | None = None,
        rack: str | None = None,
        previous_broker_epoch: int = -1,
        request_timeout_ms: int = 30_000,
        rng: random.Random | None = None,
        now: int = 0,
        log_dirs=(),
    ):
        self.node_id = node_id
        self.incarnation_id = incarnation_id
        self.config = LifecycleConfig.of(config)
        self.cluster_id = cluster_id
        self.listeners = list(listeners)
        self.features = dict(features or {})
        self.rack = rack
        self.previous_broker_epoch = previous_broker_epoch
        self.request_timeout_ms = request_timeout_ms
        self.rng = rng
        self.state = STARTING
        self.shutdown_reason: str | None = None
        self.registration_error: str | None = None  # Kafka's name of the last error a registration got
        self.broker_epoch = -1
        self.registered = False
        self.ever_registered = False
        self.ready_to_unfence = False
        self.caught_up = False  # the controller said so once (RECOVERY reached)
        self.metadata_offset = -1
        self.failed_attempts = 0
        self.got_shutdown_reply = False
        self.in_flight_until = -1  # >= 0: a request is in flight until then
        self.send_at = now  # the next communication
        self.send_asap = False  # one fell due while a request was in flight
        self.registration_deadline = now + self.config.initial_registration_timeout_ms
        self.shutdown_deadline = UNBOUNDED
        self.offline_log_dirs: list[uuid.UUID] = []  # directory ids of failed log dirs (KIP-858)
        self.log_dirs: list[uuid.UUID] = list(log_dirs)  # directory ids of its log dirs, registered (KIP-858)

    # -- queries --------------------------------------------------------------------------------------
    @property
    def unfenced(self) -> bool:
        return self.state in (RUNNING, PENDING_CONTROLLED_SHUTDOWN)

    @property
    def shutdown_finished(self) -> bool:
        """Controlled shutdown is over (the controller let the broker go, or the bound passed, or
        there was none to do): the broker may stop."""
        return self.state == SHUTTING_DOWN

    def next_deadline(self) -> int:
        if self.state == SHUTTING_DOWN:
            return UNBOUNDED
        d = self.in_flight_until if self.in_flight_until >= 0 else self.send_at
        if not self.ever_registered:
            d = min(d, self.registration_deadline)
        return min(d, self.shutdown_deadline)

    # -- inputs ---------------------------------------------------------------------------------------
    def poll(self, now: int):
        """The request to send now, or None."""
        if self.state == SHUTTING_DOWN:
            return None
        if not self.ever_registered and now >= self.registration_deadline:
            why = f" (the controller's last answer: {self.registration_error})" if self.registration_error else ""
            self._shut_down("unable to register with the controller quorum" + why)
            return None
        if now >= self.shutdown_deadline:
            self._shut_down("timed out waiting for the controller to approve controlled shutdown")
            return None
        if self.in_flight_until >= 0:
            if now < self.in_flight_until:
                return None
            self.on_request_failed(now)
        if now < self.send_at:
            return None
        self.in_flight_until = now + self.request_timeout_ms
        if not self.registered:
            return RegistrationRequest(
                self.node_id,
                self.cluster_id,
                self.incarnation_id,
                list(self.listeners),
                dict(self.features),
                self.rack,
                self.previous_broker_epoch,
                list(self.log_dirs),
            )
        return HeartbeatRequest(
            self.node_id,
            self.broker_epoch,
            self.metadata_offset,
            want_fence=not self.ready_to_unfence,
            want_shut_down=self.state == PENDING_CONTROLLED_SHUTDOWN,
            offline_log_dirs=list(self.offline_log_dirs),
        )

    def on_registration_response(self, error_code: int, broker_epoch: int, now: int) -> None:
        if not self._answered():
            return
        if error_code:
            self.registration_error = error_name(error_code)
            self._failed(now)
            return
        self.failed_attempts = 0
        self.broker_epoch = broker_epoch
        self.registered = self.ever_registered = True
        self._schedule(now, 0)  # the first heartbeat at once

    def on_heartbeat_response(self, reply: HeartbeatReply, now: int) -> None:
        if not self._answered():
            return
        if reply.error_code:
            self._failed(now)
            return
        self.failed_attempts = 0
        if self.state == STARTING:
            if reply.is_caught_up:
                self.state = RECOVERY
                self.caught_up = True
            self._schedule(now, STARTING_HEARTBEAT_MS)
        elif self.state == RECOVERY:
            if not reply.is_fenced:
                self.state = RUNNING
            self._schedule(now, self.config.heartbeat_interval_ms)
        elif self.state == RUNNING:
            self._schedule(now, self.config.heartbeat_interval_ms)
        elif self.state == PENDING_CONTROLLED_SHUTDOWN:
            if reply.should_shut_down:
                self._shut_down("the controller let the broker shut down")
            else:
                first = not self.got_shutdown_reply
                self._schedule(now, FIRST_SHUTDOWN_RETRY_MS if first else self.config.heartbeat_interval_ms)
            self.got_shutdown_reply = True

    def on_request_failed(self, now: int) -> None:
        """The request in flight failed (disconnected, timed out, no controller known)."""
        if self._answered():
            self._failed(now)

    def on_metadata_offset(self, offset: int) -> None:
        """The offset of the last metadata record the broker has applied."""
        self.metadata_offset = max(self.metadata_offset, offset)

    def add_offline_log_dir(self, dir_id: uuid.UUID) -> None:
        """A log dir failed (KIP-858): every heartbeat from now on names it, as Kafka's
        BrokerLifecycleManager.propagateDirectoryFailure, sent at the next poll."""
        if dir_id not in self.offline_log_dirs:
            self.offline_log_dirs.append(dir_id)
            if self.in_flight_until >= 0:
                self.send_asap = True
            else:
                self.send_at = min(self.send_at, 0)

    def set_ready_to_unfence(self, now: int) -> None:
        self.ready_to_unfence = True
        self._schedule_now(now)

    def resend_registration(self, now: int) -> None:
        """The broker's registration in the metadata is not its own any more: register again."""
        self.registered = False
        self._schedule_now(now)

    def begin_controlled_shutdown(self, now: int) -> None:
        if self.state == RUNNING and self.config.controlled_shutdown_enable:
            self.state = PENDING_CONTROLLED_SHUTDOWN
            self.shutdown_deadline = now + self.config.controlled_shutdown_timeout_ms
            self._schedule_now(now)
        elif self.state != PENDING_CONTROLLED_SHUTDOWN:
            self._shut_down(
                "controlled.shutdown.enable is false"
                if not self.config.controlled_shutdown_enable
                else f"no controlled shutdown from state {self.state}"
            )

    # -- scheduling ------------------------------------------------------------------------------------
    def _answered(self) -> bool:
        """An answer to the request in flight (anything else is stale and ignored)."""
        if self.in_flight_until < 0 or self.state == SHUTTING_DOWN:
            return False
        self.in_flight_until = -1
        return True

    def _failed(self, now: int) -> None:
        delay = min(BACKOFF_INITIAL_MS * 2**self.failed_attempts, self.config.session_timeout_ms)
        if self.rng is not None:
            delay = int(delay * (1 + self.rng.uniform(-BACKOFF_JITTER, BACKOFF_JITTER)))
        self.failed_attempts = min(self.failed_attempts + 1, 32)
        self.send_asap = False  # never at once after a failure
        self.send_at = now + delay

    def _schedule(self, now: int, delay: int) -> None:
        self.send_at = now if self.send_asap else now + delay
        self.send_asap = False

    def _schedule_now(self, now: int) -> None:
        if self.in_flight_until >= 0:
            self.send_asap = True
        else:
            self.send_at = now

    def _shut_down(self, reason: str) -> None:
        self.state = SHUTTING_DOWN
        self.shutdown_reason = reason
        self.in_flight_until = -1
        self.shutdown_deadline = UNBOUNDED
