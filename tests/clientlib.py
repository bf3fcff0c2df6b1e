"""Helpers for the client-compatibility tests (tests/test_clients.py).

Every client gets the same job: produce a deterministic data set (keys, headers, explicit
timestamps, sizes from empty to 30 KB, null keys and null values), then consume it back and
compare byte for byte with what was sent. The helpers here keep the per-client code short:

* :func:`make_records` builds the data set, :func:`expected_by_partition` lays it out by
  partition in offset order;
* ``produce_*`` send records with one client and raise if any delivery failed;
* ``consume_*`` read partitions from offset 0 (or a given offset) and return, per
  partition, a list of :data:`Row` tuples ``(offset, key, value, headers, timestamp)``;
* :func:`segment_batches` parses the broker's ``.log`` files directly (batch headers only)
  so a test can check what really reached the disk: codec, snappy framing, producer ids;
* :func:`raw_call` / :func:`fetch_v12` talk to the broker over a plain socket for the
  timing tests (long poll) where client internals would blur the measurement.
"""

from __future__ import annotations

import asyncio
import glob
import os
import random
import socket
import struct
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kesque.protocol.api_keys import ApiKeys

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# offset, key, value, headers (tuple of (str, bytes|None)), timestamp (ms)
Row = tuple


@dataclass(frozen=True, slots=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


# ---------------------------------------------------------------------------- data sets

_SIZES = (0, 1, 3, 17, 64, 100, 250, 40, 9, 0, 120)
_HEADER_BYTES = bytes(range(256))


def make_records(
    n: int,
    *,
    partitions: int = 3,
    seed: int = 1,
    ts_base: int | None = None,
    null_values: bool = True,
    text_only: bool = False,
) -> list[Rec]:
    """A deterministic data set of ``n`` records spread over ``partitions``.

    Sizes cycle from empty to 250 bytes, every 101st value is 1.5 KB and every 5003rd 30 KB
    (larger than a socket write and than the broker's small-region threshold); a third of
    the values are random bytes (incompressible), the rest repetitive. Every 10th key is
    null, every 23rd empty. Headers: none, one, binary values (incl. empty), duplicate and
    non-ASCII names. Timestamps are explicit, in the hour before ``ts_base`` and not
    monotonic inside a partition. ``text_only`` keeps keys/values free of the bytes kcat
    uses as delimiters (0x1e, 0x1f) and drops headers (kcat only has fixed -H headers).
    """
    rng = random.Random(seed)
    if ts_base is None:
        ts_base = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(n):
        size = _SIZES[i % len(_SIZES)]
        if i % 101 == 50:
            size = 1500
        if i % 5003 == 11:
            size = 30_000
        if i % 3 == 0:
            value = rng.randbytes(size)
        else:
            value = ((b"%08d|" % i) * (size // 9 + 1))[:size]
        if null_values and i % 97 == 5 and i % 10 != 3:  # kafka-python refuses key and value both null
            value = None
        if i % 10 == 3:
            key = None
        elif i % 23 == 4:
            key = b""
        else:
            key = b"key-%d" % i + (rng.randbytes(i % 5) if i % 7 == 0 else b"")
        if text_only:
            headers = ()
            if key is not None:
                key = key.replace(b"\x1e", b"a").replace(b"\x1f", b"b")
            if value is not None:
                value = value.replace(b"\x1e", b"a").replace(b"\x1f", b"b")
            if key is None and not value:
                value = b"-"  # kcat -P skips an empty input line
        else:
            h = i % 5
            if h == 0:
                headers = ()
            elif h == 1:
                headers = (("h1", b"v%d" % i),)
            elif h == 2:
                headers = (("empty", b""), ("bin", _HEADER_BYTES[i % 200 : i % 200 + 40]))
            elif h == 3:
                headers = (("dup", b"1"), ("dup", b"2"), ("ünï-çødé", "värde".encode()))
            else:
                headers = (("n%d" % j, b"x" * j) for j in range(6))
                headers = tuple(headers)
        partition = (i * 7 + i // 3) % partitions
        ts = ts_base + (i * 7919) % 3_000_000
        out.append(Rec(partition, key, value, headers, ts))
    return out


def expected_by_partition(recs: Iterable[Rec], start: dict[int, int] | None = None) -> dict[int, list[Row]]:
    """Records as consumers must return them: per partition, in send order, offsets from 0
    (or from ``start[p]`` when the partition already held records)."""
    out: dict[int, list[Row]] = {}
    for r in recs:
        rows = out.setdefault(r.partition, [])
        off = (start or {}).get(r.partition, 0) + len(rows)
        rows.append((off, r.key, r.value, tuple(r.headers), r.timestamp))
    return out


def counts(expected: dict[int, list[Row]]) -> dict[int, int]:
    return {p: len(rows) for p, rows in expected.items()}


def assert_same(actual: dict[int, list[Row]], expected: dict[int, list[Row]], what: str = "") -> None:
    """Byte-identical comparison with a readable first difference."""
    assert sorted(actual) == sorted(expected), f"{what}: partitions {sorted(actual)} != {sorted(expected)}"
    for p in sorted(expected):
        got, want = actual[p], expected[p]
        if got == want:
            continue
        offs = [r[0] for r in got]
        first = want[0][0] if want else 0
        assert offs == list(range(first, first + len(offs))), (
            f"{what}: partition {p}: offsets not contiguous from {first}: {_first_gap(offs, first)}"
        )
        assert len(got) == len(want), f"{what}: partition {p}: {len(got)} records, expected {len(want)}"
        for g, w in zip(got, want):
            if g != w:
                raise AssertionError(
                    f"{what}: partition {p} offset {w[0]} differs:\n  got      {_short(g)}\n  expected {_short(w)}"
                )


def _first_gap(offs, first):
    for i, o in enumerate(offs):
        if o != first + i:
            return f"index {i}: offset {o}, expected {first + i}"
    return "?"


def _short(row) -> str:
    def b(x):
        if x is None:
            return "None"
        return repr(x[:40]) + (f"...({len(x)} bytes)" if len(x) > 40 else "")

    off, key, value, headers, ts = row
    return f"offset={off} key={b(key)} value={b(value)} headers={headers!r:.120} ts={ts}"


# ---------------------------------------------------------------------------- producers


def produce_confluent(bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **conf) -> None:
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "linger.ms": 20,
        "batch.size": 512 * 1024,
        "queue.buffering.max.messages": 200_000,
    }
    config.update(conf)
    p = Producer(config)
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for r in recs:
        while True:
            try:
                p.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers) or None,
                    timestamp=r.timestamp,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    remaining = p.flush(60)
    assert remaining == 0, f"confluent producer: {remaining} messages not delivered"
    assert not errors, f"confluent producer: {len(errors)} delivery errors, first: {errors[0]}"


def produce_kafka_python(bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **conf) -> None:
    from kafka import KafkaProducer

    config = dict(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
    )
    config.update(conf)
    p = KafkaProducer(**config)
    try:
        futures = [
            p.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
            )
            for r in recs
        ]
        p.flush(60)
        failed = [f.exception for f in futures if not f.succeeded()]
        assert not failed, f"kafka-python producer: {len(failed)} failed sends, first: {failed[0]!r}"
    finally:
        p.close(5)


def produce_aiokafka(bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **conf) -> None:
    import aiokafka

    async def run():
        config = dict(
            bootstrap_servers=bootstrap,
            compression_type=None if codec == "none" else codec,
            linger_ms=20,
            max_batch_size=512 * 1024,
            max_request_size=8 * 1024 * 1024,
        )
        config.update(conf)
        p = aiokafka.AIOKafkaProducer(**config)
        await p.start()
        try:
            futures = []
            for r in recs:
                futures.append(
                    await p.send(
                        topic,
                        value=r.value,
                        key=r.key,
                        partition=r.partition,
                        headers=list(r.headers),
                        timestamp_ms=r.timestamp,
                    )
                )
            await asyncio.gather(*futures)
        finally:
            await p.stop()

    asyncio.run(run())


KCAT_KEY_DELIM = b"\x1f"
KCAT_MSG_DELIM = b"\x1e"
KCAT_HEADERS = (("kh1", b"kv1"), ("kh2", b""))


def produce_kcat(bootstrap: str, topic: str, recs: list[Rec], codec: str = "none") -> tuple[int, int]:
    """kcat -P, one process per partition (kcat has no per-message partition in its input).
    kcat cannot set timestamps nor per-message headers: every record gets KCAT_HEADERS and
    a CreateTime stamped by librdkafka; returns the (before, after) wall-clock window."""
    by_part: dict[int, list[bytes]] = {}
    for r in recs:
        assert r.value is not None, "kcat cannot send null values next to empty ones"
        line = (r.key + KCAT_KEY_DELIM if r.key is not None else b"") + r.value + KCAT_MSG_DELIM
        assert line.count(KCAT_KEY_DELIM) == (r.key is not None) and line.count(KCAT_MSG_DELIM) == 1
        by_part.setdefault(r.partition, []).append(line)
    t0 = int(time.time() * 1000)
    procs = []
    for p, lines in sorted(by_part.items()):
        args = [
            "kcat",
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(p),
            "-K",
            "\x1f",
            "-D",
            "\x1e",
            "-X",
            "linger.ms=20",
            "-X",
            "batch.size=524288",
        ]
        if codec != "none":
            args += ["-z", codec]
        for k, v in KCAT_HEADERS:
            args += ["-H", f"{k}={v.decode()}"]
        procs.append(
            (
                subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE),
                b"".join(lines),
            )
        )
    for proc, data in procs:
        out, err = proc.communicate(data, timeout=120)
        assert proc.returncode == 0, f"kcat -P failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}"
    return t0, int(time.time() * 1000)


# ---------------------------------------------------------------------------- consumers


def _norm_headers(h) -> tuple:
    if not h:
        return ()
    return tuple((k if isinstance(k, str) else k.decode(), v) for k, v in h)


def consume_confluent(
    bootstrap: str,
    topic: str,
    want: dict[int, int],
    start: dict[int, int] | None = None,
    idle_timeout: float = 10.0,
    **conf,
) -> dict[int, list[Row]]:
    """Assign (no group membership) and read ``want[p]`` records from each partition."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "kesque-compat-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
    }
    config.update(conf)
    c = Consumer(config)
    out: dict[int, list[Row]] = {p: [] for p in want}
    try:
        c.assign([TopicPartition(topic, p, (start or {}).get(p, 0)) for p in want])
        last_progress = time.monotonic()
        while any(len(out[p]) < n for p, n in want.items()):
            msgs = c.consume(10_000, 0.5)
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > idle_timeout:
                break
            for m in msgs:
                if m.error():
                    raise AssertionError(f"confluent consumer error: {m.error()}")
                ts_type, ts = m.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME, f"timestamp type {ts_type}"
                out[m.partition()].append((m.offset(), m.key(), m.value(), _norm_headers(m.headers()), ts))
    finally:
        c.close()
    return out


def consume_kafka_python(
    bootstrap: str,
    topic: str,
    want: dict[int, int],
    start: dict[int, int] | None = None,
    idle_timeout: float = 10.0,
    **conf,
) -> dict[int, list[Row]]:
    from kafka import KafkaConsumer, TopicPartition

    config = dict(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="none", fetch_max_wait_ms=100
    )
    config.update(conf)
    c = KafkaConsumer(**config)
    out: dict[int, list[Row]] = {p: [] for p in want}
    try:
        tps = [TopicPartition(topic, p) for p in want]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, (start or {}).get(tp.partition, 0))
        last_progress = time.monotonic()
        while any(len(out[p]) < n for p, n in want.items()):
            batch = c.poll(timeout_ms=500, max_records=50_000)
            if batch:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > idle_timeout:
                break
            for tp, records in batch.items():
                rows = out[tp.partition]
                for m in records:
                    assert m.timestamp_type == 0, f"timestamp type {m.timestamp_type}"
                    rows.append((m.offset, m.key, m.value, _norm_headers(m.headers), m.timestamp))
    finally:
        c.close()
    return out


def consume_aiokafka(
    bootstrap: str,
    topic: str,
    want: dict[int, int],
    start: dict[int, int] | None = None,
    idle_timeout: float = 4.0,
    **conf,
) -> dict[int, list[Row]]:
    import aiokafka

    out: dict[int, list[Row]] = {p: [] for p in want}

    async def run():
        config = dict(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_wait_ms=100,
            request_timeout_ms=5000,
        )
        config.update(conf)
        c = aiokafka.AIOKafkaConsumer(**config)
        await c.start()
        try:
            tps = [aiokafka.TopicPartition(topic, p) for p in want]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, (start or {}).get(tp.partition, 0))
            last_progress = time.monotonic()
            while any(len(out[p]) < n for p, n in want.items()):
                batch = await c.getmany(timeout_ms=500, max_records=50_000)
                if batch:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > idle_timeout:
                    break
                for tp, records in batch.items():
                    rows = out[tp.partition]
                    for m in records:
                        assert m.timestamp_type == 0, f"timestamp type {m.timestamp_type}"
                        rows.append((m.offset, m.key, m.value, _norm_headers(m.headers), m.timestamp))
        finally:
            await asyncio.wait_for(c.stop(), 10)

    asyncio.run(run())
    return out


_KCAT_END = b"\x1e<kcat-end>\x1e\n"
KCAT_FORMAT = "%o %T %K %S %h" + _KCAT_END.decode() + "%k%s"


def consume_kcat(
    bootstrap: str, topic: str, want: dict[int, int], start: dict[int, int] | None = None, timeout: float | None = None
) -> dict[int, list[Row]]:
    """kcat -C -e per partition with a length-prefixed output format (binary safe).
    Headers come back as kcat prints them (``name=value,...``) and are parsed against that
    rendering; header values containing ',' or '=' cannot be told apart (none of ours do)."""
    out: dict[int, list[Row]] = {}
    if timeout is None:
        timeout = 10 + sum(want.values()) / 20_000
    procs = {}
    for p, n in want.items():
        args = [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(p),
            "-o",
            str((start or {}).get(p, 0)),
            "-c",
            str(n),
            "-e",
            "-q",
            "-f",
            KCAT_FORMAT,
        ]
        procs[p] = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    for p, proc in procs.items():
        try:
            data, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            data, err = proc.communicate()
        out[p] = _parse_kcat(data)
    return out


def _parse_kcat(data: bytes) -> list[Row]:
    rows = []
    pos = 0
    while pos < len(data):
        end = data.index(_KCAT_END, pos)
        head = data[pos:end]
        off_s, ts_s, klen_s, vlen_s, hdrs = head.split(b" ", 4)
        klen, vlen = int(klen_s), int(vlen_s)
        pos = end + len(_KCAT_END)
        key = None if klen < 0 else data[pos : pos + klen]
        pos += max(klen, 0)
        value = None if vlen < 0 else data[pos : pos + vlen]
        pos += max(vlen, 0)
        headers = ()
        if hdrs:
            headers = tuple((k.decode(), v) for k, _, v in (h.partition(b"=") for h in hdrs.split(b",")))
        rows.append((int(off_s), key, value, headers, int(ts_s)))
    return rows


# ---------------------------------------------------------------------------- on-disk view


@dataclass(frozen=True)
class BatchInfo:
    base_offset: int
    last_offset: int
    codec: int
    timestamp_type: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    max_timestamp: int
    xerial: bool  # snappy payload starts with the xerial magic


_XERIAL = b"\x82SNAPPY\x00"


def segment_batches(data_dir: str, topic: str, partition: int) -> list[BatchInfo]:
    """Batch headers of a partition as stored in its .log files (RecordBatch v2 layout). A running
    broker's cleaner or retention may delete a segment between the listing and its read: the
    files are listed and read again then (a few times), so the answer is one listing's."""
    for attempt in range(5):
        try:
            return _segment_batches(data_dir, topic, partition)
        except FileNotFoundError:
            if attempt == 4:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def _segment_batches(data_dir: str, topic: str, partition: int) -> list[BatchInfo]:
    out = []
    for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 61 <= len(buf):
            base, length = struct.unpack_from(">qi", buf, pos)
            if length <= 0 or pos + 12 + length > len(buf):
                break
            attrs, lod = struct.unpack_from(">hi", buf, pos + 21)
            max_ts, pid, epoch, seq, count = struct.unpack_from(">qqhii", buf, pos + 35)
            codec = attrs & 7
            payload = buf[pos + 61 : pos + 61 + 8]
            out.append(
                BatchInfo(
                    base,
                    base + lod,
                    codec,
                    (attrs >> 3) & 1,
                    pid,
                    epoch,
                    seq,
                    count,
                    max_ts,
                    codec == 2 and payload == _XERIAL,
                )
            )
            pos += 12 + length
    return out


def segment_files(data_dir: str, topic: str, partition: int) -> list[str]:
    return sorted(glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*.log")))


# ---------------------------------------------------------------------------- raw protocol


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _cstr(s: str) -> bytes:
    b = s.encode()
    return _uvarint(len(b) + 1) + b


class RawConnection:
    """A blocking socket speaking Kafka framing; requests use header v1 or v2 (flexible)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.corr = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, api_key: int, version: int, body: bytes, flexible: bool) -> int:
        self.corr += 1
        header = struct.pack(">hhi", api_key, version, self.corr) + _str("kesque-tests")
        if flexible:
            header += b"\x00"
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        return self.corr

    def recv(self, flexible: bool, timeout: float | None = None) -> bytes:
        if timeout is not None:
            self.sock.settimeout(timeout)
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        return frame[5:] if flexible else frame[4:]

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)


def broker_alive(bootstrap: str, timeout: float = 2.0) -> bool:
    """ApiVersions v0 round trip within ``timeout``."""
    try:
        with RawConnection(bootstrap, timeout=timeout) as c:
            c.send(ApiKeys.API_VERSIONS, 0, b"", flexible=False)
            c.recv(False, timeout)
        return True
    except (OSError, ConnectionError):
        return False


def log_text(broker, start: int = 0) -> str:
    """The broker log from byte offset ``start`` (fuzzed input puts bytes of any kind in it)."""
    with open(broker.log_path, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def wait_for_log(broker, needle: str, timeout: float = 5.0) -> str:
    """The broker's log once it contains ``needle`` (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        text = log_text(broker)
        if needle in text:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} not in broker log")
        time.sleep(0.02)


def fetch_v12_body(
    topic: str, partition: int, offset: int, max_wait_ms: int, min_bytes: int = 1, max_bytes: int = 1 << 20
) -> bytes:
    """Fetch v12 (flexible, topic names, no session)."""
    part = struct.pack(">iiqiqi", partition, -1, offset, -1, -1, max_bytes) + b"\x00"
    topics = _uvarint(2) + _cstr(topic) + _uvarint(2) + part + b"\x00"
    return (
        struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, 0, 0, -1)
        + topics
        + _uvarint(1)
        + _cstr("")
        + b"\x00"
    )


def fetch_nonflexible_body(
    version: int,
    topic: str,
    partitions: list[tuple[int, int]],
    max_wait_ms: int,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
) -> bytes:
    """Fetch v4 or v11 (non-flexible, header v1) for ``[(partition, offset), ...]``."""
    assert version in (4, 11)
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
    if version >= 7:
        body += struct.pack(">ii", 0, -1)  # no session
    body += struct.pack(">i", 1) + _str(topic) + struct.pack(">i", len(partitions))
    for p, off in partitions:
        if version >= 9:
            body += struct.pack(">iiqqi", p, -1, off, -1, max_bytes)
        else:
            body += struct.pack(">iqi", p, off, max_bytes)
    if version >= 7:
        body += struct.pack(">i", 0)  # forgotten topics
    if version >= 11:
        body += _str("")  # rack id
    return body


def decode_fetch(version: int, body: bytes):
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(1, version)
    obj, _ = entity_reader(cls)(memoryview(body).toreadonly(), 0)
    return obj


def decode_fetch_v12(body: bytes):
    return decode_fetch(12, body)
