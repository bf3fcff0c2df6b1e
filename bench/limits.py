"""Machine limits, measured in the same run as the kesque figures they are compared with.

* :func:`loopback_tcp` — what one TCP connection over loopback carries when neither end
  does any work: a sender process writing 1 MiB chunks, a receiver ``recv_into`` a reused
  buffer and discarding.
* :func:`disk_write` — sequential write speed of the filesystem holding the broker's data
  directory: 1 MiB chunks, one fsync at the end, inside the timing.
* :func:`echo_rate` — requests per second of a bare event-loop server that answers each
  size-prefixed request with its own write, driven by the same pipelined client and the
  same request bytes as the kesque small-request figure.
"""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time

import wire

CHUNK = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


# ================================================================== loopback


def _loopback_sender(port: int, seconds: float) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    data = os.urandom(CHUNK)
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            sock.sendall(data)
    finally:
        sock.close()


def best_of(runs: int, fn, key: str) -> dict:
    """The best of ``runs`` measurements: on a shared machine the best run is the closest
    to what the hardware can do (the kesque figures are treated the same way where they
    repeat)."""
    results = [fn() for _ in range(runs)]
    best = max(results, key=lambda r: r[key])
    best = dict(best)
    best["runs"] = [round(r[key], 1) for r in results]
    return best


def loopback_tcp(seconds: float = 1.0) -> dict:
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]
    proc = mp.get_context("spawn").Process(target=_loopback_sender, args=(port, seconds), daemon=True)
    proc.start()
    conn, _ = lsock.accept()
    lsock.close()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    t0 = None
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        if t0 is None:
            t0 = time.perf_counter()
        total += n
    elapsed = time.perf_counter() - t0
    conn.close()
    proc.join()
    return {"mb_s": total / elapsed / 1e6, "bytes": total, "seconds": elapsed}


# ================================================================== disk


def disk_write(directory: str, total_bytes: int = 1 << 30) -> dict:
    """Sequential write of ``total_bytes`` in 1 MiB chunks, then fsync, all timed."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "bench-disk-write.tmp")
    data = os.urandom(CHUNK)
    chunks = max(1, total_bytes // CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(chunks):
            os.write(fd, data)
        t_written = time.perf_counter()
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    total = chunks * CHUNK
    return {
        "mb_s": total / elapsed / 1e6,
        "bytes": total,
        "seconds": elapsed,
        "fsync_seconds": elapsed - (t_written - t0),
        "directory": directory,
    }


# ================================================================== echo


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def echo_rate(frame: bytes, count: int, window: int, loop: str = "asyncio") -> dict:
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "echo_server.py"), "--loop", loop], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"echo server ({loop}) did not start")
        port = int(line)
        # a short warm-up, then the measured run
        wire.pipelined_same_request(f"127.0.0.1:{port}", frame, min(count, 2000), window)
        res = wire.pipelined_same_request(f"127.0.0.1:{port}", frame, count, window)
    finally:
        proc.terminate()
        proc.wait(10)
    res["loop"] = loop
    return res
