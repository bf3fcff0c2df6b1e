"""The kesque figures: each function drives one already-running broker and returns a dict of
measurements. Nothing here asserts on timing; correctness checks (every record landed, no
error answers) are reported in the result so a fast-but-wrong run is visible as such."""

from __future__ import annotations

import json
import multiprocessing as mp
import operator
import os
import random
import struct
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import wire

KIB = 1024
MB = 1e6
_error_of = operator.methodcaller("error")


# ================================================================== helpers


def rss_mib(pid: int) -> dict:
    """VmRSS and VmHWM of a process, in MiB (empty when it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) / 1024.0
    except OSError:
        pass
    return out


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=30)
    for f in fut.values():
        f.result(30)
    # wait until metadata shows every partition with a leader
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not become ready")


def consumer_conf(bootstrap: str, **extra) -> dict:
    # librdkafka insists on a group.id even for assign(); no group API is ever used:
    # partitions are assigned by hand and nothing is committed.
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "kesque-bench",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "log_level": 3,
    }
    conf.update(extra)
    return conf


def warm_up_consumer_path(bootstrap: str) -> None:
    """Let a consumer with a group.id talk to the broker once, unmeasured.

    librdkafka sends FindCoordinator for the group.id even when partitions are assigned by
    hand; the broker answers the first one by creating ``__consumer_offsets`` (50
    partitions) on its event loop, which stalls every connection for a moment. Doing it
    here keeps that one-off out of the figures (it is reported by the warm-up time)."""
    c = Consumer(consumer_conf(bootstrap))
    try:
        c.list_topics(timeout=30)
        c.consume(1, 1.0)
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer(consumer_conf(bootstrap))
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        c.close()


def timed_produce(p, topic: str, values: list[bytes], records: int, partitions: int = 0) -> tuple[float, int]:
    """Produce ``records`` values (cycling through ``values``; round robin over ``partitions``
    when given, else the client's partitioner) and flush: (seconds, records left undelivered)."""
    nv = len(values)
    produce, poll = p.produce, p.poll
    t0 = time.perf_counter()
    for i in range(records):
        v = values[i % nv]
        kw = {"partition": i % partitions} if partitions else {}
        try:
            produce(topic, v, **kw)
        except BufferError:
            poll(0.01)
            produce(topic, v, **kw)
        if not i & 0x3FFF:
            poll(0)
    left = p.flush(600)
    return time.perf_counter() - t0, left


def value_pool(size: int, count: int = 256, seed: int = 1) -> list[bytes]:
    """Random-looking values that LZ4 halves: each is a random half repeated once."""
    rnd = random.Random(seed)
    half = size // 2
    return [rnd.randbytes(half) * 2 + rnd.randbytes(size - 2 * half) for _ in range(count)]


# ================================================================== 1. produce with confluent-kafka


def produce_confluent(
    bootstrap: str,
    topic: str,
    records: int,
    value_size: int = KIB,
    compression: str = "none",
    acks: int | str = 1,
    values: list[bytes] | None = None,
    client: dict | None = None,
) -> dict:
    """``client``: more client settings (the security ones of bench/tls.py and bench/security.py)."""
    errors: list[str] = []

    def on_delivery(err, _msg):  # called for failures only (delivery.report.only.error)
        if err is not None and len(errors) < 10:
            errors.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1048576,
            "batch.num.messages": 1000000,
            "message.max.bytes": 16 << 20,
            "queue.buffering.max.kbytes": 2097151,
            "queue.buffering.max.messages": 10000000,
            "compression.type": compression,
            "enable.idempotence": False,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
            "log_level": 3,
            **(client or {}),
        }
    )
    p.list_topics(topic, timeout=30)  # metadata and connection up before the clock starts
    elapsed, left = timed_produce(p, topic, values or value_pool(value_size), records)
    payload = records * value_size
    return {
        "records": records,
        "payload_bytes": payload,
        "seconds": elapsed,
        "mb_s": payload / elapsed / MB,
        "undelivered": left,
        "errors": errors,
        "compression": compression,
    }


# ================================================================== 2. consume with confluent-kafka


def consume_confluent(
    bootstrap: str, topic: str, ends: dict[int, int], stall_seconds: float = 30.0, client: dict | None = None
) -> dict:
    total = sum(ends.values())
    c = Consumer(
        consumer_conf(
            bootstrap,
            **{
                "fetch.max.bytes": 64 << 20,
                "max.partition.fetch.bytes": 16 << 20,
                "receive.message.max.bytes": 100 << 20,
                "queued.max.messages.kbytes": 1 << 20,
                "queued.min.messages": 1000000,
                "fetch.wait.max.ms": 100,
                **(client or {}),
            },
        )
    )
    c.list_topics(topic, timeout=30)
    got = 0
    payload = 0
    errors = 0
    consume = c.consume
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, p, 0) for p in sorted(ends)])
    last_progress = time.perf_counter()
    while got < total:
        msgs = consume(min(10000, total - got), 1.0)  # never wait for messages that cannot come
        if msgs:
            if any(map(_error_of, msgs)):
                errors += sum(1 for m in msgs if m.error() is not None)
            payload += sum(map(len, msgs))
            got += len(msgs)
            last_progress = time.perf_counter()
        elif time.perf_counter() - last_progress > stall_seconds:
            break
    elapsed = time.perf_counter() - t0
    c.close()
    return {
        "records": got,
        "expected": total,
        "payload_bytes": payload,
        "seconds": elapsed,
        "mb_s": payload / elapsed / MB,
        "errors": errors,
    }


def consume_raw(bootstrap: str, topic: str, ends: dict[int, int], window: int = 8) -> dict:
    res = wire.pipelined_fetch(bootstrap, topic, ends, window=window)
    res["expected"] = sum(ends.values())
    res["mb_s"] = res["bytes"] / res["seconds"] / MB
    return res


# ================================================================== 3. raw produce capacity


def produce_raw(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    value_size: int = KIB,
    connections: int = 2,
    window: int = 8,
) -> dict:
    values = value_pool(value_size, count=1)
    batch, per_batch = wire.full_batch(values[0], 1 << 20)
    frames = [wire.produce_request(topic, p, batch) for p in range(partitions)]
    nreq = max(connections, round(records / per_batch))
    res = wire.pipelined_produce(bootstrap, frames, nreq, connections, window)
    payload = nreq * per_batch * value_size
    res.update(
        {
            "records": nreq * per_batch,
            "payload_bytes": payload,
            "mb_s": payload / res["seconds"] / MB,
            "wire_mb_s": nreq * len(frames[0]) / res["seconds"] / MB,
            "batch_bytes": len(batch),
            "records_per_batch": per_batch,
        }
    )
    return res


# ================================================================== 4. small requests


def small_frame(topic: str, value_size: int = 100) -> bytes:
    """The pre-encoded 1-record ProduceRequest of the small-request figure (also the echo
    server's request, so both are measured with identical bytes)."""
    return wire.produce_request(topic, 0, wire.build_batch([(None, value_pool(value_size, 1)[0], ())]))


def small_confluent(bootstrap: str, topic: str, records: int, value_size: int = 100) -> dict:
    stats: list[dict] = []
    errors: list[str] = []

    def on_delivery(err, _msg):
        if err is not None and len(errors) < 10:
            errors.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "queue.buffering.max.messages": 10000000,
            "queue.buffering.max.kbytes": 2097151,
            "enable.idempotence": False,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
            "statistics.interval.ms": 100,
            "stats_cb": lambda s: stats.append(json.loads(s)),
            "log_level": 3,
        }
    )
    p.list_topics(topic, timeout=30)
    p.poll(0.3)

    def produce_requests() -> int:
        if not stats:
            return 0
        return sum(b.get("req", {}).get("Produce", 0) for b in stats[-1].get("brokers", {}).values())

    before = produce_requests()
    value = value_pool(value_size, 1)[0]
    produce = p.produce
    poll = p.poll
    t0 = time.perf_counter()
    for i in range(records):
        try:
            produce(topic, value, partition=0)
        except BufferError:
            poll(0.005)
            produce(topic, value, partition=0)
        if not i & 0x3FF:
            poll(0)
    left = p.flush(600)
    elapsed = time.perf_counter() - t0
    stats.clear()
    deadline = time.monotonic() + 2
    while not stats and time.monotonic() < deadline:
        p.poll(0.05)
    requests = produce_requests() - before if stats else records
    return {
        "records": records,
        "requests": requests,
        "seconds": elapsed,
        "rate": requests / elapsed,
        "records_per_request": records / requests if requests else 0.0,
        "undelivered": left,
        "errors": errors,
    }


def small_raw(bootstrap: str, topic: str, requests: int, window: int = 64, value_size: int = 100) -> dict:
    frame = small_frame(topic, value_size)
    first_errors: list[int] = []
    res = wire.pipelined_same_request(
        bootstrap, frame, requests, window, check_first=lambda f: first_errors.extend(wire.produce_response_errors(f))
    )
    res["first_response_errors"] = first_errors
    return res


# ================================================================== 5. end-to-end latency

_TS = struct.Struct(">d")


def _latency_producer(
    bootstrap: str, topic: str, rate: float, seconds: float, value_size: int, start_evt, result_q
) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 0,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 10000000,
            "log_level": 3,
        }
    )
    p.list_topics(topic, timeout=30)
    pad = os.urandom(value_size - _TS.size)
    total = int(rate * seconds)
    start_evt.wait(60)
    produce = p.produce
    pack = _TS.pack
    now = time.time
    t0 = time.perf_counter()
    i = 0
    while i < total:
        due = min(total, int((time.perf_counter() - t0) * rate) + 1)
        while i < due:
            produce(topic, pack(now()) + pad, partition=0)
            i += 1
        p.poll(0)
        time.sleep(0.0005)
    sent_seconds = time.perf_counter() - t0
    left = p.flush(60)
    result_q.put({"sent": total, "send_seconds": sent_seconds, "undelivered": left})


def latency(
    bootstrap: str, topic: str, rate: float = 10000, seconds: float = 20.0, value_size: int = KIB, warmup: float = 1.0
) -> dict:
    c = Consumer(
        consumer_conf(bootstrap, **{"fetch.wait.max.ms": 100, "fetch.min.bytes": 1, "fetch.queue.backoff.ms": 0})
    )
    c.assign([TopicPartition(topic, 0, 0)])
    c.consume(1, 1.0)  # fetch session up, nothing there yet
    ctx = mp.get_context("spawn")
    start_evt = ctx.Event()
    q = ctx.Queue()
    proc = ctx.Process(
        target=_latency_producer, args=(bootstrap, topic, rate, seconds, value_size, start_evt, q), daemon=True
    )
    proc.start()
    time.sleep(0.5)
    start_evt.set()
    total = int(rate * seconds)
    lat: list[float] = []
    first_sent = None
    got = 0
    unpack = _TS.unpack_from
    deadline = time.monotonic() + seconds + 60
    poll = c.poll
    now = time.time
    # poll() returns as soon as one message is there (consume(n, t) would wait for n or t)
    while got < total and time.monotonic() < deadline:
        m = poll(0.1)
        if m is None:
            continue
        t = now()
        if m.error() is not None:
            continue
        sent = unpack(m.value())[0]
        if first_sent is None:
            first_sent = sent
        if sent - first_sent >= warmup:
            lat.append(t - sent)
        got += 1
    c.close()
    prod = q.get(timeout=60) if proc.is_alive() or not q.empty() else {}
    proc.join(30)
    lat.sort()

    def pct(x: float) -> float:
        if not lat:
            return float("nan")
        return lat[min(len(lat) - 1, int(x / 100.0 * len(lat)))] * 1000.0

    return {
        "received": got,
        "expected": total,
        "measured": len(lat),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "p999_ms": pct(99.9),
        "max_ms": lat[-1] * 1000.0 if lat else float("nan"),
        "send_rate": prod.get("sent", 0) / prod["send_seconds"] if prod.get("send_seconds") else 0.0,
        "producer": prod,
    }
