"""The console's HTTP server: the standard library's ``ThreadingHTTPServer`` on a thread of
its own, as the metrics endpoint runs prometheus-client's.

Why a thread and not the broker's event loop: the console is a Kafka client of the cluster
(blocking sockets, :mod:`.admin`), so inside ``kesque serve`` it talks to its own broker over
TCP like any other client and never touches the loop's state; a slow page holds its thread,
not the broker. Requests are answered one at a time (one admin, its connections reused).

Malformed HTTP is the standard library's to refuse (400, 414 for a request line past 64 KiB,
431 for too many headers); a form without Content-Length is a 411, one larger than
:data:`.app.MAX_BODY` a 413 read no further; a socket idle for :data:`IDLE_TIMEOUT_S` is closed.
Anything unexpected is logged here and answered 500 with no detail.
"""

from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..client.wire import ClientSecurity, client_security
from .admin import ConsoleAdmin
from .app import MAX_BODY, Console, Response

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 30.0
LOCAL = ("127.0.0.1", "localhost", "::1")


class _Handler(BaseHTTPRequestHandler):
    server_version = "kesque-console"
    console: Console  # set on the subclass each ConsoleServer makes
    lock: threading.Lock
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S

    def log_message(self, format, *args):  # noqa: A002 - the standard library's name
        log.debug("%s %s", self.address_string(), format % args)

    def _serve(self) -> None:
        console: Console = self.console
        body = b""
        if self.command == "POST":
            length = self.headers.get("Content-Length")
            if length is None or not length.strip().isdigit():
                return self._send(Response(411, b"Content-Length required\n", "text/plain"), close=True)
            if int(length) > MAX_BODY:
                return self._send(Response(413, b"Form too large\n", "text/plain"), close=True)
            body = self.rfile.read(int(length))
        try:
            with self.lock:
                resp = console.handle(self.command, self.path, dict(self.headers.items()), body)
        except Exception:
            log.exception("console: %s %s failed", self.command, self.path[:200])
            resp = Response(500, b"Internal error: see the console's log.\n", "text/plain")
        self._send(resp)

    def _send(self, resp: Response, close: bool = False) -> None:
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
        for k, v in resp.headers.items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class ConsoleServer:
    """``http://host:port/`` serving the console of the cluster at ``bootstrap``."""

    def __init__(
        self,
        host: str,
        port: int,
        bootstrap: str,
        *,
        timeout: float = 10.0,
        client_props: dict | ClientSecurity | None = None,
    ):
        """``client_props``: Kafka's client properties (or a :class:`ClientSecurity`) the console
        reaches the cluster with (PLAINTEXT without)."""
        self.host = host or "127.0.0.1"  # no host (http://:8080): the loopback; all interfaces only when named
        self.port = port
        self.bootstrap = bootstrap
        self.security = client_security(client_props)  # a bad value fails here, before anything is bound
        self.timeout = timeout
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.console: Console | None = None

    def start(self) -> int:
        """Bind and serve; the port bound (``port`` 0: any free one)."""
        handler = type("_ConsoleHandler", (_Handler,), {"lock": threading.Lock()})
        httpd = (_Server6 if ":" in self.host else _Server)((self.host, self.port), handler)
        self.port = httpd.server_address[1]
        hosts = None
        if self.host in LOCAL:  # answer only to our own names (DNS rebinding)
            hosts = {f"{n}:{self.port}" for n in ("127.0.0.1", "localhost", "[::1]")}
        self.console = handler.console = Console(
            ConsoleAdmin(self.bootstrap, timeout=self.timeout, client_props=self.security), allowed_hosts=hosts
        )
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="kesque-console", daemon=True)
        self._thread.start()
        log.info("Console listening on http://%s:%d/ (cluster %s)", self.host, self.port, self.bootstrap)
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self.console is not None:
            self.console.admin.close()
