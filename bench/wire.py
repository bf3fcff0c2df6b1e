"""Raw Kafka-protocol clients for the benchmarks: requests encoded once with kio, sent over
plain blocking sockets with many requests in flight.

These clients exist so that a figure measures the broker rather than a client library:
they pre-encode what they can, count responses by bytes where every response has the same
size, and never build per-record objects.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import threading
import time
from collections import deque
from functools import cache

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kesque.protocol.primitives import read_uvarint as _uvarint
from kesque.protocol.primitives import skip_tagged_fields as _skip_tags
from kesque.records.records import build_batch

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
BATCH_LOD = struct.Struct(">i")  # lastOffsetDelta at +23

PRODUCE_VERSION = 9  # flexible, topic names (v13+ would need topic ids from Metadata)
FETCH_VERSION = 12  # flexible, topic names
CLIENT_ID = "kesque-bench"


# ================================================================== encoding


@cache
def _writer(cls):
    return entity_writer(cls)


def encode_request(body, correlation_id: int = 0, client_id: str = CLIENT_ID) -> bytes:
    """Size prefix + request header (the version the schema says) + body, all with kio."""
    cls = type(body)
    hcls = cls.__header_schema__
    header = hcls(
        request_api_key=cls.__api_key__,
        request_api_version=cls.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buf = io.BytesIO()
    _writer(hcls)(buf, header)
    _writer(cls)(buf, body)
    data = buf.getvalue()
    return INT32.pack(len(data)) + data


def produce_request(
    topic: str,
    partition: int,
    batch: bytes,
    acks: int = 1,
    timeout_ms: int = 30000,
    version: int = PRODUCE_VERSION,
    correlation_id: int = 0,
) -> bytes:
    req = load_request_schema(0, version)
    mod = __import__(req.__module__, fromlist=["TopicProduceData"])
    body = req(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            mod.TopicProduceData(
                name=topic, partition_data=(mod.PartitionProduceData(index=partition, records=batch),)
            ),
        ),
    )
    return encode_request(body, correlation_id)


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    partition_max_bytes: int,
    max_bytes: int,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    correlation_id: int = 0,
    version: int = FETCH_VERSION,
) -> bytes:
    req = load_request_schema(1, version)
    mod = __import__(req.__module__, fromlist=["FetchTopic"])
    body = req(
        cluster_id=None,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            mod.FetchTopic(
                topic=topic,
                partitions=(
                    mod.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return encode_request(body, correlation_id)


def full_batch(value: bytes, max_size: int = 1 << 20, codec: int = 0) -> tuple[bytes, int]:
    """The largest uncompressed batch of copies of ``value`` that fits in ``max_size`` bytes."""
    rec = build_batch([(None, value, ())] * 2)
    per = len(rec) - len(build_batch([(None, value, ())]))
    n = max(1, (max_size - 61) // per)
    while True:
        b = build_batch([(None, value, ())] * n, compression_codec=codec)
        if len(b) <= max_size or n == 1:
            return b, n
        n -= 1


def decode_response(api_key: int, version: int, body: bytes):
    """Full kio decode of a response body (header already stripped): for checks, not the hot loop."""
    cls = load_response_schema(api_key, version)
    obj, _ = entity_reader(cls)(memoryview(bytes(body)).toreadonly(), 0)
    return obj


# ================================================================== reading


def response_body_offset(flexible_header: bool, frame) -> int:
    """Offset of the body in a response frame (frame excludes the size prefix)."""
    return _skip_tags(frame, 4) if flexible_header else 4


class FrameReader:
    """Reads size-prefixed frames from a blocking socket into reusable buffers."""

    def __init__(self, sock: socket.socket, bufsize: int = 1 << 20):
        self.sock = sock
        self.buf = bytearray(bufsize)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0
        self.bytes_in = 0

    def _fill(self, need: int) -> None:
        """Ensure ``need`` bytes are buffered from ``start``."""
        if self.start + need > len(self.buf):
            have = self.end - self.start
            if need > len(self.buf):
                nb = bytearray(max(need, 2 * len(self.buf)))
                nb[:have] = self.buf[self.start : self.end]
                self.buf = nb
                self.view = memoryview(nb)
            else:
                self.buf[:have] = self.buf[self.start : self.end]
            self.start, self.end = 0, have
        while self.end - self.start < need:
            n = self.sock.recv_into(self.view[self.end :])
            if n == 0:
                raise ConnectionError("connection closed by peer")
            self.end += n
            self.bytes_in += n

    def frame(self) -> memoryview:
        """The next frame (without the size prefix); valid until the next call."""
        self._fill(4)
        size = INT32.unpack_from(self.buf, self.start)[0]
        self._fill(4 + size)
        begin = self.start + 4
        self.start = begin + size
        if self.start == self.end:
            self.start = self.end = 0
            # the view stays valid: the bytes are only overwritten by the next _fill
        return self.view[begin : begin + size]


def connect(bootstrap: str, nodelay: bool = True, rcvbuf: int = 0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    if nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    return sock


# ================================================================== produce responses


def produce_response_errors(frame) -> list[int]:
    """Error codes of every partition in a flexible (v9+) ProduceResponse frame."""
    p = response_body_offset(True, frame)
    errors = []
    ntopics, p = _uvarint(frame, p)
    for _ in range(ntopics - 1):
        n, p = _uvarint(frame, p)
        p += n - 1
        nparts, p = _uvarint(frame, p)
        for _ in range(nparts - 1):
            p += 4
            errors.append(INT16.unpack_from(frame, p)[0])
            p += 2 + 8 + 8 + 8  # error, base offset, log append time, log start offset
            nerr, p = _uvarint(frame, p)
            for _ in range(nerr - 1):
                p += 4
                n, p = _uvarint(frame, p)
                p += max(n - 1, 0)
                p = _skip_tags(frame, p)
            n, p = _uvarint(frame, p)  # error message
            p += max(n - 1, 0)
            p = _skip_tags(frame, p)
        p = _skip_tags(frame, p)
    return errors


# ================================================================== pipelined small requests


def pipelined_same_request(bootstrap: str, frame: bytes, count: int, window: int, check_first=None) -> dict:
    """Send ``count`` copies of ``frame`` keeping ``window`` in flight on one connection.

    Every answer must have the same size (true for an echo server, and for a broker's
    answer to an identical produce request), so answers are counted by bytes: the client
    does one recv and one send per burst, not per request, and stays out of the way of
    the server it measures. The first request is sent alone; its answer gives the size
    and is handed to ``check_first``.
    """
    sock = connect(bootstrap)
    try:
        reader = FrameReader(sock, 1 << 16)
        sock.sendall(frame)
        first = bytes(reader.frame())
        if check_first is not None:
            check_first(first)
        rsize = 4 + len(first)
        remaining = count - 1
        buf = bytearray(max(1 << 20, rsize * window * 2))
        view = memoryview(buf)
        burst_cache: dict[int, bytes] = {}

        def burst(k: int) -> bytes:
            b = burst_cache.get(k)
            if b is None:
                b = burst_cache[k] = frame * k
            return b

        t0 = time.perf_counter()
        sent = min(window, remaining)
        if sent:
            sock.sendall(burst(sent))
        got = 0
        partial = 0
        while got < remaining:
            n = sock.recv_into(view)
            if n == 0:
                raise ConnectionError("server closed the connection")
            partial += n
            done, partial = divmod(partial, rsize)
            got += done
            k = min(done, remaining - sent)
            if k > 0:
                sock.sendall(burst(k))
                sent += k
        elapsed = time.perf_counter() - t0
    finally:
        sock.close()
    return {
        "requests": remaining,
        "seconds": elapsed,
        "rate": remaining / elapsed if elapsed else 0.0,
        "request_bytes": len(frame),
        "response_bytes": rsize,
    }


# ================================================================== pipelined big produce


def pipelined_produce(bootstrap: str, frames: list[bytes], total_requests: int, connections: int, window: int) -> dict:
    """Send ``total_requests`` produce requests (cycling through ``frames``) over
    ``connections`` sockets, each with ``window`` requests in flight; every response is
    parsed for partition errors."""
    per_conn = [
        total_requests // connections + (1 if i < total_requests % connections else 0) for i in range(connections)
    ]
    errors: list[str] = []
    barrier = threading.Barrier(connections + 1)
    done_at = [0.0] * connections
    socks = [connect(bootstrap) for _ in range(connections)]

    def run(i: int) -> None:
        sock = socks[i]
        reader = FrameReader(sock, 1 << 16)
        n = per_conn[i]
        sent = got = 0
        j = i
        try:
            barrier.wait()
            while got < n:
                while sent < n and sent - got < window:
                    sock.sendall(frames[j % len(frames)])
                    j += 1
                    sent += 1
                errs = produce_response_errors(reader.frame())
                got += 1
                if any(errs):
                    errors.append(f"connection {i}: partition errors {errs}")
                    return
        except Exception as e:  # report, don't hang the benchmark
            errors.append(f"connection {i}: {e!r}")
        finally:
            done_at[i] = time.perf_counter()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(connections)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = max(done_at) - t0
    for s in socks:
        s.close()
    return {"requests": total_requests, "seconds": elapsed, "errors": errors}


# ================================================================== pipelined fetch


class _Cursor:
    __slots__ = ("partition", "start", "end", "next", "done")

    def __init__(self, partition: int, start: int, end: int):
        self.partition = partition
        self.start = start
        self.end = end
        self.next = start
        self.done = start >= end


def _fetch_records_view(frame):
    """(error code, high watermark, records memoryview) of the single partition of a
    flexible FetchResponse frame (v12+)."""
    p = response_body_offset(True, frame)
    p += 4  # throttle
    err = INT16.unpack_from(frame, p)[0]
    p += 2 + 4  # error, session id
    if err:
        return err, -1, None
    ntopics, p = _uvarint(frame, p)
    if ntopics - 1 != 1:
        return -1, -1, None
    n, p = _uvarint(frame, p)
    p += n - 1
    nparts, p = _uvarint(frame, p)
    p += 4
    perr = INT16.unpack_from(frame, p)[0]
    p += 2
    hw = INT64.unpack_from(frame, p)[0]
    p += 8 + 8 + 8  # hw, lso, log start
    naborted, p = _uvarint(frame, p)
    for _ in range(max(naborted - 1, 0)):
        p += 16
        p = _skip_tags(frame, p)
    p += 4  # preferred read replica
    n, p = _uvarint(frame, p)
    if n == 0:
        return perr, hw, None
    return perr, hw, frame[p : p + n - 1]


def pipelined_fetch(
    bootstrap: str,
    topic: str,
    end_offsets: dict[int, int],
    window: int = 8,
    cursors_per_partition: int = 4,
    partition_max_bytes: int = 4 << 20,
) -> dict:
    """Read every partition from offset 0 to its end with ``window`` Fetch requests in flight
    on one connection.

    A pipelined reader cannot know the next offset before the previous answer arrives, so
    each partition is split into ``cursors_per_partition`` offset ranges read
    independently; the window is spread over the cursors. Bytes are counted per whole batch
    (by base offset inside the cursor's range), so every batch counts exactly once and the
    total equals the bytes of the log.
    """
    cursors = []
    for p, end in sorted(end_offsets.items()):
        k = cursors_per_partition
        bounds = [end * i // k for i in range(k + 1)]
        for i in range(k):
            if bounds[i] < bounds[i + 1]:
                cursors.append(_Cursor(p, bounds[i], bounds[i + 1]))
    sock = connect(bootstrap, rcvbuf=0)
    reader = FrameReader(sock, 8 << 20)
    ready = deque(cursors)
    inflight: deque[_Cursor] = deque()
    counted_bytes = 0
    counted_records = 0
    requests = 0
    t0 = time.perf_counter()
    try:
        while ready or inflight:
            while ready and len(inflight) < window:
                c = ready.popleft()
                sock.sendall(
                    fetch_request(
                        topic, c.partition, c.next, partition_max_bytes, partition_max_bytes, correlation_id=requests
                    )
                )
                requests += 1
                inflight.append(c)
            c = inflight.popleft()
            frame = reader.frame()
            err, _hw, recs = _fetch_records_view(frame)
            if err:
                raise RuntimeError(f"fetch error {err} for partition {c.partition} at offset {c.next}")
            pos = 0
            n = len(recs) if recs is not None else 0
            while pos + 61 <= n:
                base, blen = BATCH_HEAD.unpack_from(recs, pos)
                size = 12 + blen
                if pos + size > n:
                    break  # partial batch at the end of the answer
                if base >= c.end:
                    c.done = True
                    break
                last = base + BATCH_LOD.unpack_from(recs, pos + 23)[0]
                if base >= c.start:
                    counted_bytes += size
                    counted_records += last - base + 1
                c.next = last + 1
                pos += size
            if c.next >= c.end:
                c.done = True
            if not c.done:
                ready.append(c)
        elapsed = time.perf_counter() - t0
    finally:
        sock.close()
    return {
        "bytes": counted_bytes,
        "records": counted_records,
        "requests": requests,
        "seconds": elapsed,
        "wire_bytes": reader.bytes_in,
    }
