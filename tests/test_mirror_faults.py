"""Mirror topics against other sources and through faults (issue 28; marker ``mirror``,
``make mirror``): Apache Kafka 4.4 as the source; a source that is unreachable and comes back and
a destination leader SIGKILLed and restarted while the source is written; a source leader change
on a 3-node source and a destination leader change on a 3-node destination. After each, every
batch of the mirror (on every destination replica) equals the source's byte for byte at the same
offset: no gap, no duplicate."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import pytest

from kesque.cli.mirrors import describe
from kesque.testing import kafka as K
from kesque.testing.broker import Broker
from kesque.testing.cluster import Cluster
from mirrorlib import produce_mixed, raw_batches, read_committed, tool, wait_mirrored

pytestmark = pytest.mark.mirror


def _create_topic(bootstrap: str, topic: str, partitions: int, rf: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)


def _mirror(dest: str, source: str, topic: str, rf: int = -1) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as f:
        f.write(f"bootstrap.servers={source}\nfetch.max.wait.ms=200\n")
        f.flush()
        code, _out, err = tool(
            "cluster-links", "--bootstrap-server", dest, "--create", "--link", "L", "--config-file", f.name
        )
    assert code == 0, err
    argv = ["mirrors", "--bootstrap-server", dest, "--create", "--mirror-topic", topic, "--link", "L"]
    code, _out, err = tool(*argv, "--replication-factor", str(rf))
    assert code == 0, err


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


class Writer:
    """An idempotent producer writing numbered records to every partition until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        from confluent_kafka import Producer

        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000}
        )
        self.topic, self.partitions = topic, partitions
        self.sent = self.failed = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def _done(self, err, _msg) -> None:
        if err is not None:
            self.failed += 1

    def run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            self.producer.produce(self.topic, str(i).encode(), partition=i % self.partitions, on_delivery=self._done)
            self.sent += 1
            i += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(60)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(90)


def _assert_mirrored(src_dirs: list[str], dst_dirs: list[str], topic: str, partitions: int) -> None:
    """Every destination replica equals the source's leader log (the first source dir that has the
    most batches), batch for batch."""
    deadline = time.monotonic() + 60
    while True:
        src = {p: max((raw_batches(d, topic, p) for d in src_dirs), key=len) for p in range(partitions)}
        dsts = [{p: raw_batches(d, topic, p) for p in range(partitions)} for d in dst_dirs]
        if all(d == src for d in dsts) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    for d in dsts:
        for p in range(partitions):
            assert d[p] == src[p], f"partition {p}: {len(d[p])} batches mirrored, {len(src[p])} at the source"
            offsets = [b for b, _ in d[p]]
            assert offsets == sorted(set(offsets))


@pytest.mark.skipif(K.unavailable() is not None, reason=K.unavailable() or "")
def test_kafka_44_to_kesque():
    kafka = K.KafkaBroker(config={"group.initial.rebalance.delay.ms": "0"})
    dst = Broker(mode="thread")
    try:
        kafka.launch()  # the JVM starts while kesque does
        dst.start()
        K.wait_ready([kafka], 120)
        n = 3
        _create_topic(kafka.bootstrap_servers, "orders", n)
        produce_mixed(kafka.bootstrap_servers, "orders", n)
        _mirror(dst.bootstrap_servers, kafka.bootstrap_servers, "orders")
        produce_mixed(kafka.bootstrap_servers, "orders", n)
        src_b, dst_b = wait_mirrored(kafka.data_dir, dst.data_dir, "orders", n, timeout=30)
        for p in range(n):
            assert dst_b[p] == src_b[p], f"partition {p}"
            assert len(src_b[p]) >= 18
        assert read_committed(kafka.bootstrap_servers, "orders", n) == read_committed(
            dst.bootstrap_servers, "orders", n
        )
    finally:
        dst.stop()
        kafka.close()


def test_source_unreachable_and_destination_killed_while_written():
    src, dst = Broker(), Broker()
    try:
        src.start()
        dst.start()
        n = 2
        _create_topic(src.bootstrap_servers, "events", n)
        _mirror(dst.bootstrap_servers, src.bootstrap_servers, "events")
        w = Writer(src.bootstrap_servers, "events", n)
        try:
            time.sleep(1.0)
            dst.kill()  # the destination leader dies mid-append
            time.sleep(0.5)
            dst.restart()
            time.sleep(1.0)
            src.kill()  # the source goes away: the mirror reports it and waits
            time.sleep(1.0)
            (m,) = describe(dst.bootstrap_servers, ["events"])
            assert all(p["error"] for p in m["partitions"]), m
            src.restart()
            time.sleep(1.5)
        finally:
            w.stop()
        assert w.sent > 500
        _assert_mirrored([src.data_dir], [dst.data_dir], "events", n)
        (m,) = describe(dst.bootstrap_servers, ["events"])
        assert all(p["lag"] == 0 and p["error"] is None for p in m["partitions"]), m
    finally:
        dst.stop()
        src.stop()


def test_source_and_destination_leader_changes():
    """A 3-node source and a 3-node destination (replication factor 3 on both): the source leader
    of a partition and the destination leader of a mirror partition are killed and restarted
    while the source is written."""
    source, dest = Cluster(nodes=3), Cluster(nodes=3)
    try:
        source.start()
        dest.start()
        n = 2
        _create_topic(source.bootstrap_servers, "events", n, rf=3)
        produce_mixed(source.bootstrap_servers, "events", n)  # plain, idempotent, both kinds of transactions
        _mirror(dest.bootstrap_servers, source.bootstrap_servers, "events", rf=3)
        w = Writer(source.bootstrap_servers, "events", n)
        try:
            time.sleep(1.0)
            s_leader = _leader(source.bootstrap_servers, "events", 0)
            source.kill(s_leader)
            time.sleep(1.5)
            source.restart(s_leader)
            d_leader = _leader(dest.bootstrap_servers, "events", 1)
            dest.kill(d_leader)
            time.sleep(1.5)
            dest.restart(d_leader)
            time.sleep(1.0)
        finally:
            w.stop()
        assert w.sent > 500
        dirs = [os.path.join(c.data_dir, f"node-{i}", "data") for c in (source, dest) for i in (1, 2, 3)]
        _assert_mirrored(dirs[:3], dirs[3:], "events", n)
        assert read_committed(source.bootstrap_servers, "events", n) == read_committed(
            dest.bootstrap_servers, "events", n
        )
    finally:
        dest.stop()
        source.stop()
