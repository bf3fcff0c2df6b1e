"""Runs the broker's :class:`~kesque.server.lifecycle.BrokerLifecycle` on the event loop.

The lifecycle is sans-IO: it says which request to send (BrokerRegistration, BrokerHeartbeat)
and when. This driver sends each one to the active controller through the
:class:`~kesque.server.forwarding.ControllerRouter` (in-process when the local controller is
active), hands the answer or the failure back, and sleeps until the lifecycle's next deadline
or until woken (the broker applied metadata, is ready to unfence, begins a controlled shutdown).
"""

from __future__ import annotations

import asyncio
import logging

from ..controller.cluster_control import RegistrationRequest

log = logging.getLogger(__name__)


class LifecycleDriver:
    def __init__(self, lifecycle, router, now_ms, request_timeout_ms: int = 30000):
        self.lc = lifecycle
        self.router = router
        self.now_ms = now_ms
        self.request_timeout_ms = request_timeout_ms
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._sending: asyncio.Task | None = None
        self._state = lifecycle.state

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        self._wake.set()

    async def until(self, done, timeout_s: float | None = None) -> bool:
        """Wait until ``done()`` (checked after every answer); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while not done():
            self._changed.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return done()
        return True

    def stop(self) -> None:
        for task in (self._task, self._sending):
            if task is not None:
                task.cancel()

    async def _run(self) -> None:
        lc = self.lc
        while not lc.shutdown_finished:
            now = self.now_ms()
            req = lc.poll(now)
            if req is not None:
                self._sending = asyncio.get_running_loop().create_task(self._send(req))
            self._notify()
            delay = max(min(lc.next_deadline() - self.now_ms(), 60_000), 0) / 1000.0
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass
        self._notify()
        log.info("Broker lifecycle: %s", lc.shutdown_reason)

    async def _send(self, req) -> None:
        lc = self.lc
        try:
            if isinstance(req, RegistrationRequest):
                reply = await self.router.broker_registration(req, self.request_timeout_ms)
                lc.on_registration_response(reply.error_code, reply.broker_epoch, self.now_ms())
                if reply.error_code:
                    log.warning(
                        "Unable to register broker %d because the controller returned error %s",
                        req.broker_id,
                        lc.registration_error,
                    )
                else:
                    log.info("Registered with the controller: broker epoch %d", reply.broker_epoch)
            else:
                reply = await self.router.broker_heartbeat(req, self.request_timeout_ms)
                lc.on_heartbeat_response(reply, self.now_ms())
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure is a failed request, retried with backoff
            log.debug("broker lifecycle request failed: %s", e)
            lc.on_request_failed(self.now_ms())
        self._notify()
        self.wake()

    def _notify(self) -> None:
        if self.lc.state != self._state:
            log.info("Broker state %s -> %s", self._state, self.lc.state)
            self._state = self.lc.state
        self._changed.set()
