"""``kesque.Broker``: a real broker for tests and scripts, no JVM or Docker.

    with kesque.Broker() as broker:             # subprocess, temp data dir, free port
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

``mode="subprocess"`` (default) runs ``python -m kesque serve`` — a separate process you
can SIGKILL (:meth:`kill`) and :meth:`restart` on the same port and data. ``mode="thread"``
runs the broker's event loop in a background thread of the calling process (fastest start,
shares the GIL with the test). A node that is not a lone combined one (``process.roles``,
``controller.quorum.voters`` naming others), or any node given a ``cluster_id``, has its storage
formatted first, as ``kesque storage format --ignore-formatted``; :class:`kesque.Cluster` starts
several with :meth:`launch` then :meth:`wait_ready`.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ..config import BrokerConfig, ConfigError
from ..config.broker import SINGLE_NODE
from ..server.server import KesqueServer
from ..storage.dirs import ensure_storage
from ..storage.format import format_storage, random_uuid


def terminate(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM (a broker's clean shutdown), SIGKILL if it has not exited within ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# a lone node's settings (as `kesque serve` without a file), with Kafka's default of two-phase
# commit (off) and no initial rebalance delay
DEFAULTS = {**SINGLE_NODE, "transaction.two.phase.commit.enable": "false", "group.initial.rebalance.delay.ms": "0"}


class Broker:
    def __init__(
        self,
        data_dir: str | None = None,
        port: int = 0,
        config: dict | None = None,
        mode: str = "subprocess",
        host: str = "127.0.0.1",
        log_file: str | None = None,
        fd_limit: int | None = None,
        properties_file: str | None = None,
        detach: bool = False,
        cluster_id: str | None = None,
    ):
        if mode not in ("subprocess", "thread"):
            raise ValueError("mode must be 'subprocess' or 'thread'")
        if fd_limit is not None and mode != "subprocess":
            raise ValueError("fd_limit needs a subprocess broker")
        self.fd_limit = fd_limit  # soft and hard RLIMIT_NOFILE of the broker process
        self.mode = mode
        self.host = host
        self.port = port
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kesque-")
        os.makedirs(self.data_dir, exist_ok=True)
        self.config = dict(DEFAULTS)
        self.config.update({k: str(v) for k, v in (config or {}).items()})
        self.log_file = log_file
        self.process: subprocess.Popen | None = None
        # the process's group id (root only): a firewall rule can then tell this node's traffic
        # from another node's on one loopback address (tests/test_network_partition.py)
        self.gid: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._stop_event: asyncio.Event | None = None
        self.start_seconds: float | None = None
        # the settings are written to this file and the process runs `kesque serve FILE`
        # (otherwise each one is an --override)
        self.properties_file = properties_file
        self.detach = detach  # a session of its own: it outlives the caller (`kesque cluster up`)
        # the cluster id a node that is not a lone one is formatted with before its first start
        self.cluster_id = cluster_id
        self._ready_fd: int | None = None

    # ------------------------------------------------------------------ properties
    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def _props(self) -> dict[str, str]:
        props = dict(self.config)
        props.setdefault("log.dirs", self.data_dir)
        if "listeners" in props:
            # the caller's listeners, names and protocols as given (a protocol kesque does not
            # serve stops the start); port 0 of the first one is the port bound at the first start
            if self.port:
                props["listeners"] = re.sub(r"^([^,]*):0(?=,|$)", rf"\g<1>:{self.port}", props["listeners"])
            return props
        props["listeners"] = f"PLAINTEXT://{self.host}:{self.port}"
        if self.port:
            props.setdefault("advertised.listeners", f"PLAINTEXT://{self.host}:{self.port}")
        return props

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0) -> Broker:
        t0 = time.monotonic()
        if self.mode == "subprocess":
            self._start_subprocess(timeout)
        else:
            self._start_thread(timeout)
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_subprocess(self, timeout: float) -> None:
        self.launch()
        self.wait_ready(timeout)

    def format_storage(self) -> None:
        """``kesque storage format --ignore-formatted`` with ``cluster_id``, as a Kafka node is
        formatted before its first start; without a ``cluster_id``, a lone node formats itself
        at start."""

        try:
            config = BrokerConfig(self._props(), strict=False)
        except ConfigError:
            return  # the node says so when it starts
        if self.cluster_id or not config.lone_node:
            self.cluster_id = self.cluster_id or config.get("cluster.id") or random_uuid()
            format_storage(config, self.cluster_id, ignore_formatted=True)

    def launch(self) -> None:
        """Start the process without waiting for it (a cluster's nodes start together, then
        :meth:`wait_ready`)."""
        self.format_storage()
        r, w = os.pipe()
        args = [sys.executable, "-m", "kesque", "serve"]
        if self.properties_file:
            with open(self.properties_file, "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in self._props().items())
            args.append(self.properties_file)
        else:
            for k, v in self._props().items():
                args += ["--override", f"{k}={v}"]
        env = dict(os.environ, KESQUE_READY_FD=str(w))
        out = open(self.log_file, "ab") if self.log_file else open(os.path.join(self.data_dir, "kesque.log"), "ab")
        self.process = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(w,),
            env=env,
            start_new_session=self.detach,
            stdin=subprocess.DEVNULL,
            preexec_fn=self._limit_fds if self.fd_limit is not None else None,
            group=self.gid,
        )
        out.close()
        os.close(w)
        self._ready_fd = r

    def wait_ready(self, timeout: float) -> None:
        """Wait for the ready line (the ports it listens on) of a :meth:`launch`-ed process."""
        r, self._ready_fd = self._ready_fd, None
        deadline = time.monotonic() + timeout
        buf = b""
        poller = select.poll()  # not select(): a test process may hold descriptors past 1023
        poller.register(r, select.POLLIN)
        try:
            while b"\n" not in buf:
                if time.monotonic() > deadline:
                    raise TimeoutError("kesque broker did not start in time")
                if poller.poll(200):
                    chunk = os.read(r, 4096)
                    if not chunk:
                        break
                    buf += chunk
                elif self.process.poll() is not None:
                    break
        finally:
            os.close(r)
        if b"\n" not in buf:
            try:
                code = self.process.wait(10)  # its error is in the log once it has exited
            except subprocess.TimeoutExpired:
                code = None
            raise RuntimeError(
                f"kesque broker exited during start (code {code}){self._start_error()}; see {self.log_path}"
            )
        first = buf.decode().split("\n")[0].split(",")[0]
        if first:
            self.port = int(first.rsplit(":", 1)[1])

    def _start_thread(self, timeout: float) -> None:
        self.format_storage()
        config = BrokerConfig(self._props())
        ensure_storage(config)
        started = threading.Event()
        errors: list[BaseException] = []

        def run():
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def main():
                self._stop_event = asyncio.Event()
                try:  # a bad config stops the constructor as well as the start
                    self._server = KesqueServer(config)
                    await self._server.start()
                except BaseException as e:  # report start failures to the caller
                    errors.append(e)
                    started.set()
                    return
                started.set()
                await self._stop_event.wait()
                await self._server.stop(clean=self._clean_stop)

            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        self._clean_stop = True
        self._thread = threading.Thread(target=run, name="kesque-broker", daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise TimeoutError("kesque broker did not start in time")
        if errors:  # the thread ends with its loop closed: nothing is left to stop
            self._thread.join(timeout)
            self._thread = None
            raise errors[0]
        self.port = next(iter(self._server.bound.values()))[1]

    def _start_error(self) -> str:
        """The error the broker printed before exiting (``kesque: ...``), if any."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [line.strip() for line in f if line.startswith("kesque: ")]
        except OSError:
            return ""
        return f": {lines[-1]}" if lines else ""

    def _limit_fds(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.fd_limit, self.fd_limit))

    def open_descriptors(self) -> int:
        """How many file descriptors the broker process has open (Linux, subprocess mode)."""
        if self.process is None:
            raise RuntimeError("open_descriptors() needs a running subprocess broker")
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    @property
    def log_path(self) -> str:
        return self.log_file or os.path.join(self.data_dir, "kesque.log")

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown (SIGTERM): flush, checkpoint, clean-shutdown marker."""
        if self.process is not None:
            terminate(self.process, timeout)
            self.process = None
        if self._thread is not None:
            self._clean_stop = True
            self._loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(timeout)
            self._thread = None

    def kill(self) -> None:
        """Crash the broker (SIGKILL): no flush, no checkpoints (subprocess mode)."""
        if self.process is None:
            raise RuntimeError("kill() needs a subprocess broker")
        self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self, timeout: float = 30.0) -> Broker:
        """Start again on the same port and data directory."""
        if self.process is not None or self._thread is not None:
            self.stop()
        return self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Broker:
        if self.process is None and self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Broker({self.bootstrap_servers}, mode={self.mode}, data_dir={self.data_dir})"
