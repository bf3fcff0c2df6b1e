"""The idempotent-producer figure: confluent-kafka produce throughput with
``enable.idempotence=true`` against the same producer without it, same records, acks=all.

The two differ only in ``enable.idempotence``: both run with at most 5 requests in flight
per connection (the most an idempotent producer may have, and the client's limit once
idempotence is on), so the ratio is the price of the producer id, the sequence numbers and
the broker's duplicate / sequence check on every batch (seed 003), not of a smaller
window. Each function drives one already-running broker and returns a dict of
measurements; nothing here asserts on timing. See bench/README.md, "Idempotent producer".
"""

from __future__ import annotations

import glob
import os
import struct

import figures
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

VALUE_SIZE = 100
WARM_UP = 16  # records produced and flushed before the clock starts
KINDS = ("plain", "idempotent")

# RecordBatch v2 header fields from the producer id on (offset 43 in the batch):
# producerId int64, producerEpoch int16, baseSequence int32, records int32
_PRODUCER_FIELDS = struct.Struct(">qhii")


def producer_conf(bootstrap: str, idempotent: bool) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": idempotent,
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 5,
        "batch.size": 1048576,
        "batch.num.messages": 1000000,
        "queue.buffering.max.kbytes": 2097151,
        "queue.buffering.max.messages": 10000000,
        "compression.type": "none",
        "delivery.report.only.error": True,
        "log_level": 3,
    }


class Prepared:
    """A producer with its metadata, connection and producer id in place, ready for the clock."""

    def __init__(self, bootstrap: str, topic: str, idempotent: bool):
        self.topic = topic
        self.idempotent = idempotent
        self.errors: list[str] = []
        errors = self.errors

        def on_delivery(err, _msg):  # failures only (delivery.report.only.error)
            if err is not None and len(errors) < 10:
                errors.append(str(err))

        conf = producer_conf(bootstrap, idempotent)
        conf["on_delivery"] = on_delivery  # not a bound method: no cycle keeps the producer alive
        self.producer = Producer(conf)
        self.producer.list_topics(topic, timeout=30)
        # ... and the producer id: librdkafka asks for it in the background and, when its
        # first try finds no broker up yet, tries again after its 500 ms timer, which would
        # land in one pass and not another. A few records, flushed, before the clock.
        for _ in range(WARM_UP):
            self.producer.produce(topic, b"warm-up")
        self.warm_left = self.producer.flush(30)


def prepare(bootstrap: str, topic: str, idempotent: bool) -> Prepared:
    return Prepared(bootstrap, topic, idempotent)


def produce(prep: Prepared, records: int, value_size: int = VALUE_SIZE) -> dict:
    """``records`` values of ``value_size`` bytes (record i carries i in its first bytes, the
    same bytes for both kinds), spread by the default partitioner, then flush(). The topic
    also got ``WARM_UP`` small records in :func:`prepare`, outside the clock."""
    p, topic = prep.producer, prep.topic
    pad = b"." * value_size
    values = [(b"%012d" % i + pad)[:value_size] for i in range(min(records, 65536))]
    elapsed, left = figures.timed_produce(p, topic, values, records)
    return {
        "kind": "idempotent" if prep.idempotent else "plain",
        "records": records,
        "value_size": value_size,
        "seconds": elapsed,
        "rate": records / elapsed,
        "mb_s": records * value_size / elapsed / 1e6,
        "undelivered": left + prep.warm_left,
        "errors": prep.errors,
        "warm_up_records": WARM_UP,
    }


def stored_producer_ids(data_dir: str, topic: str, partitions: int) -> dict:
    """What the stored batches of ``topic`` say about producer ids and sequences: the set of
    producer ids and, per partition, whether the base sequences run gap-free from 0. A
    plain producer's batches carry producer id -1 and sequence -1."""
    pids: set[int] = set()
    gap_free = True
    batches = 0
    for p in range(partitions):
        nxt = 0
        for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-{p}", "*.log"))):
            with open(path, "rb") as f:
                buf = f.read()
            pos = 0
            while pos + 61 <= len(buf):
                length = struct.unpack_from(">i", buf, pos + 8)[0]
                if length <= 0 or pos + 12 + length > len(buf):
                    break
                pid, _epoch, seq, count = _PRODUCER_FIELDS.unpack_from(buf, pos + 43)
                pids.add(pid)
                if pid >= 0:
                    gap_free &= seq == nxt
                    nxt += count
                batches += 1
                pos += 12 + length
    return {"producer_ids": sorted(pids), "sequences_gap_free": gap_free, "batches": batches}


def delete_topic(bootstrap: str, topic: str) -> None:
    """Drop a pass's topic once it is checked, so the passes do not write into an ever larger
    data directory (1 GB at full scale) and the later ones do not pay for the earlier
    ones' page-cache writeback."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result(30)


def summary(passes: dict[str, list[dict]]) -> dict:
    """Best rate of each kind, every pass's rate, the broker CPU seconds per million records
    over all passes (from ``broker_cpu_seconds``, which the caller adds to each pass), and
    the per-pass ratios (the passes are interleaved, so pass k of both kinds saw the same
    neighbours)."""
    out: dict = {}
    for kind in KINDS:
        done = [r for r in passes.get(kind, []) if r]
        rates = [r["rate"] for r in done]
        cpu = sum(r.get("broker_cpu_seconds", float("nan")) for r in done)
        n = sum(r["records"] for r in done)
        out[kind] = {
            "best": max(rates) if rates else None,
            "rates": [round(x) for x in rates],
            # the broker's own cost, steadier than the rates when the client is the limit
            "broker_cpu_per_million": cpu / n * 1e6 if n else float("nan"),
        }
    pl, idem = passes.get("plain", []), passes.get("idempotent", [])
    out["pass_ratios"] = [round(i["rate"] / p["rate"], 3) for p, i in zip(pl, idem) if p and i]
    return out
