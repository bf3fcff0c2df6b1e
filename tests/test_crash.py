"""Crash safety: what was acknowledged survives SIGKILL, and damaged segment files are
recovered the way Kafka's LogLoader recovers them.

Every test runs a real broker subprocess on its own data directory, kills or stops it
for real, edits the real files where the test is about damaged files, restarts it on the
same port and directory and reads everything back with confluent-kafka and the raw client.

Kafka's rules these tests hold kesque to (LogLoader / LogSegment / UnifiedLog):

* without the clean-shutdown marker (``.kafka_cleanshutdown``) every segment from the
  recovery point on is scanned; the first batch that runs past the end of the file or fails
  its CRC is where the segment is truncated ("Found invalid messages in log segment <file>
  at byte offset <n>"), later segments are deleted;
* with the marker, recovery is skipped, but a missing or corrupt ``.index``/``.timeindex``
  still makes the segment be rebuilt (LogSegment.sanityCheck -> recoverSegment); kesque
  also checks the active segment's tail then, where Kafka would append after torn bytes
  (see test_damaged_tail_with_clean_shutdown_marker);
* the marker is consumed on start, and written (after the flush and the checkpoints) on a
  clean shutdown.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time

import pytest
from confluent_kafka import Producer

from kesque.testing.broker import Broker
from wire import Api, WireClient, build_batch, consume_all, records_of

SEGMENT0 = "00000000000000000000"
MARKER = ".kafka_cleanshutdown"


# ====================================================================== helpers


@pytest.fixture
def kb(tmp_path):
    """A broker of its own (subprocess, its own data dir) for a test that kills it."""
    (tmp_path / "data").mkdir()
    b = Broker(data_dir=str(tmp_path / "data"))
    b.start()
    try:
        yield b
    finally:
        if b.process is not None:
            b.stop()


def restart(b: Broker) -> str:
    """Start ``b`` again (same port, same data) and return what it logged while starting."""
    mark = os.path.getsize(b.log_path)
    b.start()
    with open(b.log_path, errors="replace") as f:
        f.seek(mark)
        return f.read()


def wire(b: Broker) -> Api:
    return Api(WireClient(b.bootstrap_servers))


def produce_batches(
    api: Api, topic: str, values: list[bytes], partition: int = 0, t0: int | None = None, step_ms: int = 10
) -> None:
    """One single-record batch per value, so offsets and batch boundaries coincide."""
    for i, v in enumerate(values):
        ts = None if t0 is None else t0 + i * step_ms
        r = api.produce(topic, build_batch([(b"key", v, (), ts)]), partition=partition)
        assert r.error_code == 0, r


def batch_positions(path: str) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of every complete batch in a segment file."""
    from kesque.records import batch as rb

    with open(path, "rb") as f:
        data = f.read()
    return [(pos, h.base_offset, h.size) for pos, h in rb.iter_headers(data)]


def read_values(b: Broker, topic: str, partitions=(0,)) -> dict[int, list[tuple[int, bytes]]]:
    return consume_all(b.bootstrap_servers, topic, partitions=partitions)


def _lines(text: str, *needles: str) -> list[str]:
    """Log lines containing every needle."""
    return [line for line in text.splitlines() if all(n in line for n in needles)]


def checkpoint(path: str) -> tuple[int, dict]:
    """Kafka's offset checkpoint text layout: version line, count line, entries."""
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == "0", f"{path}: version line {lines[0]!r}"
    count = int(lines[1])
    entries = [line.split(" ") for line in lines[2:] if line]
    assert len(entries) == count, f"{path}: count line says {count}, {len(entries)} entries"
    return count, {(t, int(p)): int(o) for t, p, o in entries}


# ====================================================================== SIGKILL


def test_sigkill_while_producing_acks1_loses_nothing_acknowledged(kb):
    topic, parts, total = "crash", 4, 4000
    pad = b"." * 2000  # ~2 KB records: each partition rolls past a 1 MiB segment before the kill
    api = wire(kb)
    api.create_topic(topic, partitions=parts, configs={"segment.bytes": str(1 << 20)})
    acked: dict[tuple[int, int], bytes] = {}
    failed = []
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()
            else:
                failed.append(err)

    p = Producer(
        {
            "bootstrap.servers": kb.bootstrap_servers,
            "acks": "1",
            "linger.ms": 2,
            "batch.num.messages": 50,
            "enable.idempotence": False,
            "message.timeout.ms": 5000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )

    def send(i):
        while True:
            try:
                p.produce(topic, b"value-%06d" % i + pad, partition=i % parts, on_delivery=on_delivery)
                return
            except BufferError:
                p.poll(0.01)

    # phase 1: most records, all acknowledged (each partition rolls a segment)
    phase1 = total * 3 // 5
    for i in range(phase1):
        send(i)
        if i % 50 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert len(acked) == phase1, failed[:3]
    # phase 2: keep writing and crash the broker in the middle of it, at a moment when
    # records have been sent that are not acknowledged yet
    killed_at = None
    for i in range(phase1, total):
        send(i)
        if i % 20 == 0:
            p.poll(0.001)
        if killed_at is None and i >= phase1 + 200 and i + 1 > len(acked) + len(failed):
            kb.kill()
            killed_at = i
    assert killed_at is not None and killed_at < total - 1
    p.purge()  # whatever is still queued or in flight was never acknowledged
    assert p.flush(10) == 0
    assert len(acked) + len(failed) == total
    assert phase1 <= len(acked) < total

    started = restart(kb)
    assert "no clean shutdown marker: recovering" in started
    assert f"{topic}-0: recovering segment" in started
    segments = [f for f in os.listdir(os.path.join(kb.data_dir, f"{topic}-0")) if f.endswith(".log")]
    assert len(segments) >= 2, f"expected a rolled segment before the crash: {segments}"
    data = read_values(kb, topic, range(parts))
    logged = {(part, off): val for part, recs in data.items() for off, val in recs}
    lost = {k: v for k, v in acked.items() if logged.get(k) != v}
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {sorted(lost.items())[:5]}"
    for part, recs in data.items():
        assert [o for o, _v in recs] == list(range(len(recs))), f"partition {part} has holes"

    # the log continues where it ended: a new record lands right after the recovered end
    ends = {part: len(recs) for part, recs in data.items()}
    r = wire(kb).produce(topic, build_batch([(None, b"after-crash", ())]), partition=1)
    assert (r.error_code, r.base_offset) == (0, ends[1])
    assert read_values(kb, topic, (1,))[1][-1] == (ends[1], b"after-crash")


def test_sigkill_right_after_create_and_produce(kb):
    """Topic creation is in the metadata log before CreateTopics answers; a record acked
    with acks=-1 is in the segment file before Produce answers."""
    api = wire(kb)
    api.create_topic("fresh", partitions=2)
    r = api.produce("fresh", build_batch([(None, b"only", ())]), partition=1)
    assert r.error_code == 0
    kb.kill()
    restart(kb)
    api = wire(kb)
    md = api.metadata(["fresh"])
    assert md.topics[0].error_code == 0 and len(md.topics[0].partitions) == 2
    assert read_values(kb, "fresh", (0, 1)) == {0: [], 1: [(0, b"only")]}


# ====================================================================== clean shutdown


def test_clean_shutdown_leaves_marker_and_checkpoints_and_skips_recovery(kb):
    api = wire(kb)
    t = api.create_topic("clean", partitions=2)
    produce_batches(api, "clean", [b"a0", b"a1", b"a2"], partition=0)
    produce_batches(api, "clean", [b"b0"], partition=1)
    kb.stop()
    d = kb.data_dir

    with open(os.path.join(d, MARKER)) as f:
        marker = json.load(f)
    assert marker["version"] == 0 and isinstance(marker["brokerEpoch"], int) and marker["brokerEpoch"] >= 0

    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        _count, entries = checkpoint(os.path.join(d, name))
        assert entries[("clean", 0)] == 3 and entries[("clean", 1)] == 1, (name, entries)
    # log start offsets at their first segment's base need no entry (Kafka writes none)
    _count, entries = checkpoint(os.path.join(d, "log-start-offset-checkpoint"))
    assert ("clean", 0) not in entries

    props = dict(
        line.split("=", 1)
        for line in open(os.path.join(d, "meta.properties")).read().splitlines()
        if line and not line.startswith("#")
    )
    assert props["node.id"] == "1" and props["version"] == "1" and props["cluster.id"] and props["directory.id"]

    pdir = os.path.join(d, "clean-0")
    with open(os.path.join(pdir, "leader-epoch-checkpoint")) as f:
        lines = f.read().splitlines()
    assert lines[:2] == ["0", "1"] and lines[2].split() == ["0", "0"], lines
    with open(os.path.join(pdir, "partition.metadata")) as f:
        meta = f.read()
    from kesque.storage.checkpoint import uuid_to_kafka

    assert meta.startswith("version: 0\n") and f"topic_id: {uuid_to_kafka(t.topic_id)}" in meta
    for suffix in (".log", ".index", ".timeindex"):
        assert os.path.exists(os.path.join(pdir, SEGMENT0 + suffix)), suffix

    started = restart(kb)
    assert "clean shutdown: skipping recovery" in started
    assert "recovering segment" not in started.replace("__cluster_metadata-0: recovering segment", "")
    assert not os.path.exists(os.path.join(d, MARKER)), "the marker must be consumed on start"
    assert read_values(kb, "clean", (0, 1)) == {0: [(0, b"a0"), (1, b"a1"), (2, b"a2")], 1: [(0, b"b0")]}
    r = wire(kb).produce("clean", build_batch([(None, b"a3", ())]))
    assert (r.error_code, r.base_offset) == (0, 3)


OFFSET_CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
)


def test_checkpoints_exist_right_after_start(kb):
    """The README and the seeds ``cat`` them right after starting a broker; the periodic
    writes come a minute later, so start-up writes them (Kafka creates them at start)."""
    d = kb.data_dir
    for name in OFFSET_CHECKPOINTS:  # a fresh dir: files with no entries
        assert checkpoint(os.path.join(d, name)) == (0, {}), name
    api = wire(kb)
    api.create_topic("startcp", partitions=1)
    produce_batches(api, "startcp", [b"x0", b"x1"])
    kb.kill()
    for name in OFFSET_CHECKPOINTS:
        os.unlink(os.path.join(d, name))
    restart(kb)  # files written before the broker reports itself started, not a minute later
    _count, hws = checkpoint(os.path.join(d, "replication-offset-checkpoint"))
    assert hws[("startcp", 0)] == 2, hws
    _count, points = checkpoint(os.path.join(d, "recovery-point-offset-checkpoint"))
    assert points[("startcp", 0)] == 0, points  # as Kafka: only a flush advances it, not recovery
    assert checkpoint(os.path.join(d, "log-start-offset-checkpoint")) == (0, {})
    with open(os.path.join(d, "startcp-0", "leader-epoch-checkpoint")) as f:
        assert f.read().splitlines()[:2] == ["0", "1"]


# ====================================================================== torn and corrupt tails

VALUES = [b"value-%02d" % i for i in range(10)]


def _damaged_log(kb, topic: str, damage, keep_marker: bool = False):
    """Write VALUES as ten batches, stop cleanly, ``damage(path, positions)`` the segment,
    drop the clean-shutdown marker unless asked to keep it, and restart."""
    api = wire(kb)
    api.create_topic(topic)
    produce_batches(api, topic, VALUES)
    kb.stop()
    path = os.path.join(kb.data_dir, f"{topic}-0", SEGMENT0 + ".log")
    positions = batch_positions(path)
    assert [base for _p, base, _s in positions] == list(range(10))
    damage(path, positions)
    if not keep_marker:
        os.unlink(os.path.join(kb.data_dir, MARKER))
    return path, positions, restart(kb)


def _assert_recovered_to(kb, topic: str, path: str, valid_batches: int, started: str, byte_offset: int) -> None:
    assert "no clean shutdown marker: recovering" in started
    needle = f"Found invalid messages in log segment {path} at byte offset {byte_offset}"
    assert needle in started, f"no truncation line naming the segment and byte {byte_offset}:\n{started}"
    assert os.path.getsize(path) == byte_offset
    api = wire(kb)
    assert api.list_offsets(topic, -1).offset == valid_batches
    # every batch before the damage is served, to the end, by a real consumer
    assert read_values(kb, topic)[0] == list(enumerate(VALUES[:valid_batches]))
    # producing continues at the right offset, and the new record reads back
    r = api.produce(topic, build_batch([(None, b"after", ())]))
    assert (r.error_code, r.base_offset) == (0, valid_batches)
    assert read_values(kb, topic)[0] == list(enumerate(VALUES[:valid_batches])) + [(valid_batches, b"after")]
    p = api.fetch(topic, valid_batches).responses[0].partitions[0]
    assert [(o, v) for o, _k, v, _t in records_of(p.records)] == [(valid_batches, b"after")]


@pytest.mark.parametrize("cut", [1, 20, 60, "header"], ids=lambda c: f"cut-{c}")
def test_torn_tail_truncated_on_recovery(kb, cut):
    def damage(path, positions):
        _pos, _base, last_size = positions[-1]
        n = last_size - 5 if cut == "header" else cut  # "header": leave 5 bytes of the last batch
        assert n < last_size
        os.truncate(path, os.path.getsize(path) - n)

    path, positions, started = _damaged_log(kb, "torn", damage)
    _assert_recovered_to(kb, "torn", path, 9, started, positions[-1][0])


def test_two_torn_batches_worth_of_garbage_truncated(kb):
    """Junk appended after the last batch (a batch header whose size runs past the file)."""

    def damage(path, _positions):
        with open(path, "ab") as f:
            f.write(struct.pack(">qi", 10, 5000) + b"\x00" * 100)

    path, positions, started = _damaged_log(kb, "junk", damage)
    _assert_recovered_to(kb, "junk", path, 10, started, positions[-1][0] + positions[-1][2])


def test_crc_mismatch_in_last_batch_truncated_on_recovery(kb):
    def damage(path, positions):
        last_pos, _base, last_size = positions[-1]
        with open(path, "r+b") as f:
            f.seek(last_pos + last_size - 3)  # inside the last record's value
            b = f.read(1)
            f.seek(last_pos + last_size - 3)
            f.write(bytes([b[0] ^ 0x5A]))

    path, positions, started = _damaged_log(kb, "flipped", damage)
    assert "CRC" in started
    _assert_recovered_to(kb, "flipped", path, 9, started, positions[-1][0])


def test_crc_mismatch_in_middle_batch_truncates_from_there(kb):
    """As Kafka: recovery stops at the first invalid batch, and everything after it goes."""

    def damage(path, positions):
        pos, _base, size = positions[6]
        with open(path, "r+b") as f:
            f.seek(pos + size - 2)
            b = f.read(1)
            f.seek(pos + size - 2)
            f.write(bytes([b[0] ^ 0x01]))

    path, positions, started = _damaged_log(kb, "middle", damage)
    _assert_recovered_to(kb, "middle", path, 6, started, positions[6][0])


@pytest.mark.parametrize("damage_kind", ["torn", "crc"])
def test_damaged_tail_with_clean_shutdown_marker(kb, damage_kind):
    """Kafka skips recovery when the marker is there (LogLoader.recoverLog), so it would not
    truncate the damaged bytes: its LogSegment.readNextOffset ignores a partial batch
    (FileLogInputStream stops at a batch that runs past the end), so the log end offset is 9,
    but the next append goes to the end of the file, after the torn bytes, and a fetch of
    offset 9 then returns the torn header glued to the new batch — Kafka would serve a corrupt
    tail here (and a flipped byte would reach consumers as a CRC error). kesque checks the
    active segment's tail even after a clean shutdown (a few header reads and one CRC) and
    recovers it: every complete batch served, the log end at 9, new records readable."""

    def damage(path, positions):
        if damage_kind == "torn":
            os.truncate(path, os.path.getsize(path) - 5)
        else:
            pos, _base, size = positions[-1]
            with open(path, "r+b") as f:
                f.seek(pos + size - 1)
                b = f.read(1)
                f.seek(pos + size - 1)
                f.write(bytes([b[0] ^ 0x80]))

    path, positions, started = _damaged_log(kb, "tailclean", damage, keep_marker=True)
    assert "clean shutdown: skipping recovery" in started
    needle = f"Found invalid messages in log segment {path} at byte offset {positions[-1][0]}"
    assert needle in started, started
    api = wire(kb)
    assert api.list_offsets("tailclean", -1).offset == 9, "the damaged batch must not count"
    r = api.produce("tailclean", build_batch([(None, b"after", ())]))
    assert (r.error_code, r.base_offset) == (0, 9)
    assert read_values(kb, "tailclean")[0] == list(enumerate(VALUES[:9])) + [(9, b"after")]


# ====================================================================== indexes


def _index_log(kb, topic: str, n: int = 200):
    """n single-record batches with timestamps t0, t0+10, ... and a dense index."""
    api = wire(kb)
    api.create_topic(topic, configs={"index.interval.bytes": "128"})
    t0 = int(time.time() * 1000) - 60_000
    produce_batches(api, topic, [b"idx-%04d" % i for i in range(n)], t0=t0, step_ms=10)
    return t0


def _check_index_reads(kb, topic: str, t0: int, n: int) -> None:
    api = wire(kb)
    for k in (0, 1, 57, 123, n - 2, n - 1):
        p = api.fetch(topic, k, max_bytes=300).responses[0].partitions[0]
        recs = records_of(p.records)
        assert recs and recs[0][0] == k and recs[0][2] == b"idx-%04d" % k, (k, recs[:2])
    for k in (0, 5, 99, 150, n - 1):
        lo = api.list_offsets(topic, t0 + 10 * k)
        assert (lo.offset, lo.timestamp) == (k, t0 + 10 * k), (k, lo)
        lo = api.list_offsets(topic, t0 + 10 * k - 5) if k else api.list_offsets(topic, t0 - 1000)
        assert lo.offset == k, (k, lo)
    assert api.list_offsets(topic, t0 + 10 * n).offset == -1
    mx = api.list_offsets(topic, -3)  # MAX_TIMESTAMP
    assert (mx.offset, mx.timestamp) == (n - 1, t0 + 10 * (n - 1))
    assert consume_all(kb.bootstrap_servers, topic, start=120)[0] == [(k, b"idx-%04d" % k) for k in range(120, n)]
    # appends after the rebuild keep the index consistent
    r = api.produce(topic, build_batch([(b"key", b"idx-%04d" % n, (), t0 + 10 * n)]))
    assert (r.error_code, r.base_offset) == (0, n)
    lo = api.list_offsets(topic, t0 + 10 * n)
    assert lo.offset == n


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


INDEX_DAMAGE = {
    "index-odd-size": (".index", lambda p: _write(p, b"\x13" * 13), "Found a corrupted index file"),
    "index-out-of-order": (
        ".index",
        lambda p: _write(p, struct.pack(">iiii", 50, 4000, 10, 100)),
        "Found a corrupted index file",
    ),
    "index-past-end": (".index", lambda p: _write(p, struct.pack(">ii", 5, 10**7)), "Found a corrupted index file"),
    "index-missing": (".index", os.unlink, "rebuilding indexes of"),
    "timeindex-missing": (".timeindex", os.unlink, "rebuilding indexes of"),
    "timeindex-odd-size": (".timeindex", lambda p: _write(p, b"\x01" * 7), "Found a corrupted index file"),
    "timeindex-out-of-order": (
        ".timeindex",
        lambda p: _write(p, struct.pack(">qiqi", 10**13, 9, 5, 1)),
        "Found a corrupted index file",
    ),
}


@pytest.mark.parametrize("case", list(INDEX_DAMAGE))
def test_corrupt_or_missing_index_rebuilt(kb, case):
    suffix, damage, needle = INDEX_DAMAGE[case]
    topic, n = "idx", 200
    t0 = _index_log(kb, topic, n)
    kb.stop()
    pdir = os.path.join(kb.data_dir, f"{topic}-0")
    good_index = open(os.path.join(pdir, SEGMENT0 + ".index"), "rb").read()
    assert len(good_index) >= 8 * 20, "the test needs a dense index"
    damage(os.path.join(pdir, SEGMENT0 + suffix))
    started = restart(kb)
    assert "clean shutdown: skipping recovery" in started
    assert _lines(started, needle, f"{topic}-0", SEGMENT0), started
    assert "Found invalid messages" not in started
    _check_index_reads(kb, topic, t0, n)
    rebuilt = open(os.path.join(pdir, SEGMENT0 + ".index"), "rb").read()
    assert len(rebuilt) % 8 == 0 and len(rebuilt) >= 8 * 20


def test_missing_index_below_recovery_point_rebuilt_after_crash(kb):
    """Two segments; the first one's .index disappears and the clean-shutdown marker is gone
    (as after a crash), so the next start recovers from the recovery point (the active
    segment) and has to notice the missing index of the older segment on its own, with
    Kafka's log line ("Could not find index file ... recovering segment")."""
    topic = "idx2"
    api = wire(kb)
    api.create_topic(topic, configs={"segment.bytes": str(1 << 20), "index.interval.bytes": "4096"})
    big = b"z" * 100_000
    produce_batches(api, topic, [big + b"%02d" % i for i in range(14)])
    kb.stop()
    pdir = os.path.join(kb.data_dir, f"{topic}-0")
    logs = sorted(f for f in os.listdir(pdir) if f.endswith(".log"))
    assert len(logs) >= 2, logs
    os.unlink(os.path.join(pdir, SEGMENT0 + ".index"))
    os.unlink(os.path.join(kb.data_dir, MARKER))
    started = restart(kb)
    assert "no clean shutdown marker: recovering" in started
    # reads through the first segment are right whatever is logged
    got = consume_all(kb.bootstrap_servers, topic, start=3)[0]
    assert [(o, v[-2:]) for o, v in got] == [(i, b"%02d" % i) for i in range(3, 14)]
    assert os.path.exists(os.path.join(pdir, SEGMENT0 + ".index"))
    assert _lines(started, "Could not find index file", f"{topic}-0", SEGMENT0), started
