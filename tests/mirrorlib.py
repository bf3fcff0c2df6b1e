"""Helpers of the mirror-topic tests (tests/test_mirror.py, tests/test_mirror_faults.py)."""

from __future__ import annotations

import glob
import io
import os
import struct
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout

from kesque.cli import main as cli
from kesque.testing.broker import Broker


def raw_batches(data_dir: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """(base offset, the batch's bytes) of every batch in a partition's .log files."""
    out = []
    for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 12 <= len(buf):
            base, length = struct.unpack_from(">qi", buf, pos)
            if length <= 0 or pos + 12 + length > len(buf):
                break
            out.append((base, buf[pos : pos + 12 + length]))
            pos += 12 + length
    return out


@contextmanager
def thread_brokers():
    """A source and a destination broker in this process (threads), stopped in reverse order."""
    src = Broker(mode="thread").start()
    try:
        dst = Broker(mode="thread").start()
        try:
            yield src, dst
        finally:
            dst.stop()
    finally:
        src.stop()


def tool(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def produce_mixed(bootstrap: str, topic: str, partitions: int) -> None:
    """Plain, idempotent and transactional records (a committed and an aborted transaction) on
    every partition."""
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": 1, "linger.ms": 0})
    idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for p in range(partitions):
        for i in range(3):
            plain.produce(topic, f"plain-{p}-{i}".encode(), key=b"k", partition=p)
            idem.produce(topic, f"idem-{p}-{i}".encode(), partition=p, headers=[("h", b"v")])
    assert plain.flush(15) == 0 and idem.flush(15) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"mirror-{topic}", "linger.ms": 0})
    txn.init_transactions(15)
    for outcome in ("commit", "abort", "commit"):
        txn.begin_transaction()
        for p in range(partitions):
            txn.produce(topic, f"txn-{outcome}-{p}".encode(), partition=p)
        txn.flush(15)
        (txn.commit_transaction if outcome == "commit" else txn.abort_transaction)(15)
    for p in range(partitions):
        plain.produce(topic, f"after-{p}".encode(), partition=p)
    assert plain.flush(15) == 0


def read_committed(
    bootstrap: str, topic: str, partitions: int, timeout: float = 30.0
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record a read_committed consumer reads of each partition, up to its end (the last
    stable offset): read until every partition reported its end, not until a quiet moment, which
    a loaded machine makes long before the first fetch answers."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    out: dict[int, list] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                else:
                    at_end.discard(m.partition())
                    out[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def wait_mirrored(src_dir, dst_dir, topic, partitions, timeout=20.0) -> tuple[dict, dict]:
    """The batches of both sides once they are equal and stayed so for 0.3 s (a transaction's
    markers are written after its EndTxn was answered), or as they are at the timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        src = {p: raw_batches(src_dir, topic, p) for p in range(partitions)}
        dst = {p: raw_batches(dst_dir, topic, p) for p in range(partitions)}
        if src == dst and src == last or time.monotonic() > deadline:
            return src, dst
        last = src if src == dst else None
        time.sleep(0.3 if last else 0.1)
