"""The ``/metrics`` endpoint of ``metrics.listener``: prometheus-client's own HTTP server, on
its own thread.

Why a thread and not the broker's event loop: the text of a scrape (tens of thousands of
samples with 10,000 partitions) takes tens of milliseconds to format, and prometheus-client's
server already parses requests, answers malformed ones with a 4xx, compresses, and speaks
OpenMetrics when asked. On the loop, each scrape would stall every connection for that long.
What must be read on the loop (the live dicts and sets the loop mutates) is copied there by one
call (``run_on_loop``: :meth:`kesque.metrics.collectors.BrokerCollector.snapshot`), and the
formatting runs in the HTTP thread, which only holds the GIL in slices.
"""

from __future__ import annotations

import concurrent.futures
import logging

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, start_http_server

log = logging.getLogger(__name__)

SNAPSHOT_TIMEOUT_S = 10.0  # a scrape waits this long for the event loop, then answers 500


def on_loop(loop, timeout: float = SNAPSHOT_TIMEOUT_S):
    """A ``run_on_loop(fn)`` for the collector: ``fn`` runs on ``loop`` (between two of its
    callbacks) and its result comes back to the calling thread."""

    def run(fn):
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def call():
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the scraping thread
                fut.set_exception(e)

        loop.call_soon_threadsafe(call)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    return run


class MetricsEndpoint:
    """``http://host:port/metrics`` for ``collectors`` (plus the process' CPU, memory and file
    descriptors, and the Python version, as prometheus-client's defaults)."""

    def __init__(self, host: str, port: int, collectors):
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        for c in collectors:
            self.registry.register(c)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._httpd = None
        self._thread = None

    def start(self) -> int:
        """Bind and serve; the port bound (``port`` 0: any free one)."""
        self._httpd, self._thread = start_http_server(self.port, self.host, registry=self.registry)
        self._thread.name = "kesque-metrics"
        self.port = self._httpd.server_port
        log.info("Metrics endpoint listening on http://%s:%d/metrics", self.host or "0.0.0.0", self.port)
        return self.port

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
