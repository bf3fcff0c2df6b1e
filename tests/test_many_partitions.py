"""A broker with many partitions recovers after SIGKILL within its open-file limit.

Each segment used to hold up to three descriptors after recovery (log, offset index, time
index), so 10,000 partitions died half-way through recovery with EMFILE. Now a segment
holds one (its log file; indexes are mapped or written whole, as Kafka maps them), the soft
limit is raised to the hard one at start, and a limit too low for the segments on disk is
refused up front with the number needed.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kesque.storage.dirs import FD_HEADROOM, count_segments
from kesque.testing.broker import Broker
from wire import Api, WireClient

# every batch but a partition's first gets an offset index entry, and every partition a
# time index entry: recovery rebuilds both indexes of every segment
TOPIC_CONFIG = {"index.interval.bytes": "0"}


def _create(bootstrap: str, topics: list[str], partitions: int) -> None:
    api = Api(WireClient(bootstrap, timeout=120))
    for i in range(0, len(topics), 200):
        r = api.create_topics(
            [{"name": t, "num_partitions": partitions, "configs": TOPIC_CONFIG} for t in topics[i : i + 200]]
        )
        assert all(t.error_code == 0 for t in r.topics), r


def _produce_rounds(bootstrap: str, tps: list[tuple[str, int]], rounds: range) -> None:
    """A record per round to every partition, flushed per round: a batch each."""
    # idempotent: a request retried on a loaded machine must not store a record twice
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": True,
        }
    )
    for r in rounds:
        for t, part in tps:
            p.produce(t, value=b"%s-%d-%d" % (t.encode(), part, r), partition=part)
            p.poll(0)
        assert p.flush(600) == 0


def _consume_everything(bootstrap: str, tps: list[tuple[str, int]], rounds: int, timeout: float = 120) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "check.crcs": True,
        }
    )
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in tps])
        want = {(t, p): [b"%s-%d-%d" % (t.encode(), p, r) for r in range(rounds)] for t, p in tps}
        got: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in tps}
        left = len(tps) * rounds
        deadline = time.monotonic() + timeout
        while left:
            assert time.monotonic() < deadline, f"{left} records not served"
            for msg in c.consume(1000, 0.5):
                assert not msg.error(), msg.error()
                got[(msg.topic(), msg.partition())].append(msg.value())
                left -= 1
        assert got == want
    finally:
        c.close()


def _crash_and_recover(tmp_path, topics: list[str], partitions: int, fd_limit: int | None) -> Broker:
    """Create, produce two rounds, SIGKILL, restart under ``fd_limit``, produce a third round,
    read all three back; returns the running broker."""
    tps = [(t, p) for t in topics for p in range(partitions)]
    b = Broker(data_dir=str(tmp_path / "data"), fd_limit=fd_limit)
    b.start(timeout=120)
    try:
        _create(b.bootstrap_servers, topics, partitions)
        _produce_rounds(b.bootstrap_servers, tps, range(2))
        b.kill()
        b.start(timeout=600)
        _produce_rounds(b.bootstrap_servers, tps, range(2, 3))  # appends after recovery index too
        _consume_everything(b.bootstrap_servers, tps, 3)
        return b
    except BaseException:
        if b.process is not None:
            b.stop()
        raise


def assert_one_descriptor_per_segment(b: Broker) -> None:
    """Descriptors open: one per segment on disk (__consumer_offsets' too, created by the
    consumer) plus a few (listener, connections, the broker's log, the dir lock)."""
    segments = count_segments([b.data_dir])
    fds = b.open_descriptors()
    assert fds <= segments + 30, f"{fds} descriptors open for {segments} segments"


PARTITIONS = 400


def test_recovery_keeps_one_descriptor_per_segment_under_a_low_limit(tmp_path):
    # enough for one descriptor per segment (__consumer_offsets' 50 included) and the
    # headroom, far from the three per segment recovery used to leave open
    limit = PARTITIONS + 50 + FD_HEADROOM + 100
    b = _crash_and_recover(tmp_path, ["many"], PARTITIONS, fd_limit=limit)
    try:
        assert_one_descriptor_per_segment(b)
    finally:
        b.stop()
    # a limit below one per segment is refused before any work, with the number needed
    low = Broker(data_dir=str(tmp_path / "data"), fd_limit=PARTITIONS // 2, log_file=str(tmp_path / "low.log"))
    with pytest.raises(RuntimeError, match=r"code 1"):
        low.start()
    with open(low.log_path) as f:
        out = f.read()
    segments = count_segments([str(tmp_path / "data")])
    assert (
        f"The open file limit ({PARTITIONS // 2}, hard limit {PARTITIONS // 2}) is too low for the "
        f"{segments} log segments" in out
    ), out
    assert f"at least {segments + FD_HEADROOM} file descriptors are needed" in out, out
    assert "Traceback" not in out
    # the refused start changed nothing: a start with a sufficient limit serves everything
    with Broker(data_dir=str(tmp_path / "data"), fd_limit=limit) as again:
        _consume_everything(again.bootstrap_servers, [("many", p) for p in range(PARTITIONS)], 3)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ten_thousand_partitions_recover_after_sigkill(tmp_path):
    """The issue's case: 2,000 topics of 5 partitions, SIGKILL, restart, everything served,
    under a limit (20,000) that two descriptors per segment exceed."""
    topics = [f"t{i:04d}" for i in range(2000)]
    b = _crash_and_recover(tmp_path, topics, 5, fd_limit=20_000)
    try:
        assert_one_descriptor_per_segment(b)
    finally:
        b.stop()
