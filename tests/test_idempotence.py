"""The idempotent producer (seed 003, KIP-98): producer ids, sequence numbers and the
broker's memory of each producer's last five batches, held to Kafka 4's rules
(ProducerAppendInfo, ProducerStateManager, UnifiedLog, LogValidator).

* **Duplicates made by the network** (``test_network_duplicates_confluent``): a TCP proxy
  in this file sits between confluent-kafka and the broker (the broker advertises the
  proxy's address, so every connection goes through it). It forwards every byte, but now
  and then swallows a Produce *response* and closes the connection instead: the broker has
  written the batch, the client never hears so and retries (often with more requests of
  that connection in flight). 100,000 records later every one is in the log exactly once,
  in order, and the offsets the client was told are where the records are.
* **Seed 003, scenario 1** (``test_out_of_order_pipelined_then_retried``): batches with
  sequences 3, 5, 4 pipelined on one connection: 5 is refused with
  OUT_OF_ORDER_SEQUENCE_NUMBER (45), 4 is accepted, the retried 5 too; a resent batch that
  was already acknowledged gets its original offset and is not written again. Sequences
  wrap from 2^31-1 to 0 (``test_sequence_wraps_around``).
* **Producer state across a crash** (``test_producer_state_survives_sigkill``): SIGKILL before
  any snapshot covers the last batches; recovery replays the log, the last five batches are
  still recognised as retries, and no producer id is handed out twice. Kafka then writes
  ``<log end offset>.snapshot``, and so does kesque (``test_snapshot_written_after_recovery``).
* **An emptied partition** (``test_producer_continues_after_log_emptied``): retention or
  DeleteRecords moves the log start offset to the log end; Kafka 4 keeps the producer's
  state (``onLogStartOffsetIncremented`` evicts nothing), so the same producer goes on with
  its next sequence and a resend of its last batch is still recognised, also after a
  SIGKILL once retention has emptied the log.
* **Bad input** (``test_refused_batches``): a skipped sequence, a mismatched range, a batch
  older than the five remembered, a new epoch not starting at 0 (all 45), a stale epoch
  (INVALID_PRODUCER_EPOCH, 47), an idempotent batch without a sequence (INVALID_RECORD,
  87); after each the partition takes the correct next batch and nothing refused is in
  the log.

Raw requests go through tests/wire.py; batches are built with kesque's ``build_batch``.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer

from clientlib import segment_batches
from kesque.protocol.api_keys import ApiKeys
from kesque.records import batch as rb
from kesque.testing.broker import Broker
from wire import Api, Msg, WireClient, build_batch, decode_request_frame, decode_response, records_of

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_RECORD = 87

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


# ====================================================================== helpers


def new_topic() -> str:
    return "idem-" + uuid.uuid4().hex[:10]


@pytest.fixture
def kb(tmp_path):
    """A broker of its own (subprocess) for a test that kills it or changes retention."""
    b = Broker(data_dir=str(tmp_path / "data"), config={"log.retention.check.interval.ms": "100"})
    b.start()
    try:
        yield b
    finally:
        if b.process is not None:
            b.stop()


def init_producer_id(api: Api) -> tuple[int, int]:
    m = Msg(ApiKeys.INIT_PRODUCER_ID, 4)
    r = api.c.request(
        ApiKeys.INIT_PRODUCER_ID,
        4,
        m(transactional_id=None, transaction_timeout=60000, producer_id=-1, producer_epoch=-1),
    )
    assert r.error_code == NONE, r
    assert r.producer_id >= 0 and r.producer_epoch == 0, r
    return r.producer_id, r.producer_epoch


def values_of(seq: int, n: int) -> list[bytes]:
    """The values of the records with sequences seq..seq+n-1: the value names its sequence."""
    return [b"seq-%06d" % s for s in range(seq, seq + n)]


def idem_batch(pid: int, epoch: int, seq: int, n: int = 1) -> bytes:
    return build_batch(
        [(None, v, ()) for v in values_of(seq, n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def produce_ok(api: Api, topic: str, batch: bytes, expected_offset: int | None = None) -> int:
    r = api.produce(topic, batch)
    assert r.error_code == NONE, r
    if expected_offset is not None:
        assert r.base_offset == expected_offset, r
    return r.base_offset


def offsets(api: Api, topic: str) -> tuple[int, int]:
    """(log start offset, log end offset) by ListOffsets earliest / latest."""
    lo = api.list_offsets(topic, -2)
    hi = api.list_offsets(topic, -1)
    assert lo.error_code == NONE and hi.error_code == NONE, (lo, hi)
    return lo.offset, hi.offset


def read_log(api: Api, topic: str, start: int = 0) -> list[tuple[int, bytes]]:
    """(offset, value) of every record from ``start`` to the high watermark (raw Fetch)."""
    out = []
    pos = start
    while True:
        p = api.fetch(topic, pos).responses[0].partitions[0]
        assert p.error_code == NONE, p
        recs = [(o, v) for o, _k, v, _ts in records_of(p.records) if o >= pos]
        out += recs
        if not recs:
            assert pos >= p.high_watermark, (
                f"fetch at {pos} returned nothing below the high watermark {p.high_watermark}"
            )
            return out
        pos = recs[-1][0] + 1


def partition_dir(b: Broker, topic: str, partition: int = 0) -> str:
    return os.path.join(b.data_dir, f"{topic}-{partition}")


def snapshot_offsets(b: Broker, topic: str) -> list[int]:
    return sorted(int(n.split(".")[0]) for n in os.listdir(partition_dir(b, topic)) if n.endswith(".snapshot"))


# ====================================================================== 1. duplicates from the network


class DroppingProxy:
    """A TCP proxy that forwards both directions byte for byte, except that every
    ``every``-th Produce response (at most ``max_drops`` of them) is swallowed: instead of
    forwarding it the proxy closes the client's and the broker's connection. The broker
    has handled the request; the client sees a broken connection and retries.

    It parses the frames it forwards to learn which batches each Produce carried
    (topic, partition, producer id, epoch, base sequence, record count), how often each was
    sent, and which batches were acknowledged (error 0) in a response it swallowed."""

    def __init__(self, every: int, max_drops: int):
        self.every = every
        self.max_drops = max_drops
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.lock = threading.Lock()
        self.produce_responses = 0
        self.dropped = 0
        self.connections = 0
        self.sent: Counter = Counter()  # batch -> times sent to the broker
        self.acked_unheard: set = set()  # batches the broker acknowledged in a swallowed response
        self.in_flight_at_drop: list[int] = []
        self.errors: list[str] = []
        self.stopped = False
        self._socks: list[socket.socket] = []

    def start(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def stop(self) -> None:
        self.stopped = True
        self.lsock.close()
        with self.lock:
            socks, self._socks = self._socks, []
        for s in socks:
            self._close(s)

    @staticmethod
    def _close(s: socket.socket) -> None:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.connections += 1
                self._socks += [client, server]
            pending: dict[int, tuple[int, list]] = {}
            threading.Thread(target=self._pump, args=(client, server, pending, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, pending, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pending: dict, requests: bool) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = src.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4:
                    size = _I32.unpack_from(buf, 0)[0]
                    if len(buf) < 4 + size:
                        break
                    frame = bytes(buf[: 4 + size])
                    del buf[: 4 + size]
                    if not (self._on_request(frame, pending) if requests else self._on_response(frame, pending)):
                        return
                    dst.sendall(frame)
        except OSError:
            pass
        except Exception as e:  # noqa: BLE001  (a parsing bug in the proxy must fail the test, not hang it)
            self.errors.append(repr(e))
        finally:
            self._close(src)
            self._close(dst)

    def _on_request(self, frame: bytes, pending: dict) -> bool:
        api_key, version, corr = (
            _I16.unpack_from(frame, 4)[0],
            _I16.unpack_from(frame, 6)[0],
            _I32.unpack_from(frame, 8)[0],
        )
        if api_key == ApiKeys.PRODUCE:
            _, _, req = decode_request_frame(frame)
            batches = []
            for t in req.topic_data:
                for p in t.partition_data:
                    h = rb.read_header(p.records)
                    batches.append((t.name, p.index, h.producer_id, h.producer_epoch, h.base_sequence, h.records_count))
            with self.lock:
                self.sent.update(batches)
            if req.acks != 0:
                pending[corr] = (version, batches)
        return True

    def _on_response(self, frame: bytes, pending: dict) -> bool:
        corr = _I32.unpack_from(frame, 4)[0]
        got = pending.pop(corr, None)
        if got is None:
            return True
        version, batches = got
        with self.lock:
            self.produce_responses += 1
            drop = self.every > 0 and self.produce_responses % self.every == 0 and self.dropped < self.max_drops
            if not drop:
                return True
            self.dropped += 1
            self.in_flight_at_drop.append(len(pending))  # other requests of this connection then unanswered
            _, resp = decode_response(ApiKeys.PRODUCE, version, frame[4:])
            ok = {(t.name, p.index) for t in resp.responses for p in t.partition_responses if p.error_code == NONE}
            self.acked_unheard.update(b for b in batches if (b[0], b[1]) in ok)
        return False  # swallow the response: the pump closes both sockets


def test_network_duplicates_confluent(tmp_path):
    """confluent-kafka (idempotent, acks=all, 5 in flight) through a proxy that loses Produce
    responses: every record is in the log exactly once and in order per partition, and the
    offsets the client got in its delivery reports are the records' offsets in the log."""
    n, parts = 100_000, 3
    proxy = DroppingProxy(every=5, max_drops=40)
    b = Broker(data_dir=str(tmp_path / "data"), config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    b.start()
    proxy.start(("127.0.0.1", b.port))
    try:
        topic = new_topic()
        with WireClient(b.bootstrap_servers) as c:
            Api(c).create_topic(topic, partitions=parts)
        delivered: dict[bytes, tuple[int, int]] = {}
        errors: list = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                delivered[msg.value()] = (msg.partition(), msg.offset())

        p = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{proxy.port}",
                "enable.idempotence": True,
                "acks": "all",
                "max.in.flight.requests.per.connection": 5,
                "linger.ms": 2,
                "batch.num.messages": 250,
                "retry.backoff.ms": 10,
                "retry.backoff.max.ms": 50,
                "reconnect.backoff.ms": 10,
                "reconnect.backoff.max.ms": 50,
                "message.timeout.ms": 60000,
                "log_level": 2,
            }
        )
        for i in range(n):
            while True:
                try:
                    p.produce(topic, value=b"%07d" % i, partition=i % parts, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 1000 == 0:
                p.poll(0)
        left = p.flush(60)
        assert not proxy.errors, f"the proxy failed: {proxy.errors}"
        assert left == 0, f"{left} records still undelivered after 60 s"
        fatal = [e for e in errors if e.fatal()]
        assert not errors, f"{len(errors)} delivery errors (fatal: {fatal[:1]}), first {errors[0]}"
        proxy.every = 0  # nothing more to drop

        # the network really lost acknowledgements, and the client really resent batches the
        # broker had already written
        assert proxy.dropped > 0, "the proxy swallowed no Produce response"
        resent = [bt for bt in proxy.acked_unheard if proxy.sent[bt] > 1]
        assert resent, (
            f"no acknowledged-but-unheard batch was sent again ({proxy.dropped} responses dropped, "
            f"{len(proxy.acked_unheard)} batches acknowledged unheard, other requests in flight at "
            f"each drop: {proxy.in_flight_at_drop})"
        )

        # the log: each record once, in order, at the offset its delivery report named
        expected = {q: [b"%07d" % i for i in range(q, n, parts)] for q in range(parts)}
        for q in range(parts):
            stored = []
            for path in sorted(os.listdir(partition_dir(b, topic, q))):
                if path.endswith(".log"):
                    with open(os.path.join(partition_dir(b, topic, q), path), "rb") as f:
                        stored += [(o, v) for o, _k, v, _ts in records_of(f.read())]
            assert [o for o, _ in stored] == list(range(len(stored))), f"p{q}: offsets not contiguous from 0"
            values = [v for _, v in stored]
            dup = [v for v, c in Counter(values).items() if c > 1]
            assert not dup, f"p{q}: {len(dup)} records stored more than once, e.g. {dup[:3]}"
            assert values == expected[q], f"p{q}: {len(values)} records stored, {len(expected[q])} expected, in order"
            wrong = [(v, delivered[v], o) for o, v in stored if delivered[v] != (q, o)]
            assert not wrong, f"p{q}: delivery reports name other offsets, e.g. {wrong[:3]}"
            seqs = [(bt.producer_id, bt.base_sequence, bt.count) for bt in segment_batches(b.data_dir, topic, q)]
            assert len({pid for pid, _, _ in seqs}) == 1, f"p{q}: producer ids {sorted({s[0] for s in seqs})}"
            nxt = 0
            for _pid, seq, count in seqs:
                assert seq == nxt, f"p{q}: stored batch sequence {seq}, expected {nxt}"
                nxt += count
        assert proxy.connections > proxy.dropped  # the client reconnected after each drop
    finally:
        proxy.stop()
        b.stop()


# ====================================================================== 2. seed 003: out of order, retried


@pytest.mark.parametrize("sizes", [(1, 1, 1), (2, 3, 4)], ids=["one-record-batches", "multi-record-batches"])
def test_out_of_order_pipelined_then_retried(module_broker, sizes):
    """Seed 003, scenario 1: A (seq 3), C (seq 5), B (seq 4) arrive in that order on one
    connection. The broker expects B after A, refuses C with OUT_OF_ORDER_SEQUENCE_NUMBER,
    takes B, then the retried C. Nothing lost, nothing twice, in order."""
    topic = new_topic()
    with WireClient(module_broker.bootstrap_servers) as c:
        api = Api(c)
        api.create_topic(topic)
        pid, epoch = init_producer_id(api)
        for s in range(3):  # sequences 0, 1, 2: the broker now expects 3
            produce_ok(api, topic, idem_batch(pid, epoch, s), expected_offset=s)
        na, nb, nc = sizes
        a = idem_batch(pid, epoch, 3, na)
        b = idem_batch(pid, epoch, 3 + na, nb)
        cc = idem_batch(pid, epoch, 3 + na + nb, nc)
        got = c.pipeline([(0, 9, api.produce_request(topic, x)) for x in (a, cc, b)])
        ra, rc, rb_ = (r.responses[0].partition_responses[0] for _, r in got)
        assert (ra.error_code, ra.base_offset) == (NONE, 3), ra
        assert rc.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER and rc.base_offset == -1, rc
        assert (rb_.error_code, rb_.base_offset) == (NONE, 3 + na), rb_
        assert offsets(api, topic) == (0, 3 + na + nb)

        produce_ok(api, topic, cc, expected_offset=3 + na + nb)  # the producer's retry of C
        end = 3 + na + nb + nc
        assert offsets(api, topic) == (0, end)

        # resends of acknowledged batches: the original offsets, nothing written
        for batch, off in ((a, 3), (cc, 3 + na + nb), (b, 3 + na)):
            produce_ok(api, topic, batch, expected_offset=off)
        assert offsets(api, topic) == (0, end)

        # the next batch goes on after C
        produce_ok(api, topic, idem_batch(pid, epoch, end), expected_offset=end)
        log = read_log(api, topic)
        assert [o for o, _ in log] == list(range(end + 1))
        assert [v for _, v in log] == values_of(0, end + 1)


def test_sequence_wraps_around(module_broker):
    """Sequences are int32 and wrap from 2147483647 to 0 (ProducerAppendInfo.inSequence,
    DefaultRecordBatch.incrementSequence), also inside one batch."""
    topic = new_topic()
    top = 0x7FFFFFFF
    with WireClient(module_broker.bootstrap_servers) as c:
        api = Api(c)
        api.create_topic(topic)
        pid, epoch = init_producer_id(api)

        def batch(seq, n):
            return build_batch(
                [(None, b"%d+%d" % (seq, i), ()) for i in range(n)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )

        produce_ok(api, topic, batch(top - 4, 2), expected_offset=0)  # a new producer may start anywhere
        produce_ok(api, topic, batch(top - 2, 4), expected_offset=2)  # top-2 .. top, 0: wraps inside
        produce_ok(api, topic, batch(top - 2, 4), expected_offset=2)  # its retry
        assert api.produce(topic, batch(0, 1)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER  # 0 was used
        produce_ok(api, topic, batch(1, 2), expected_offset=6)
        produce_ok(api, topic, batch(1, 2), expected_offset=6)
        assert offsets(api, topic) == (0, 8)


# ====================================================================== 3. producer state across a crash


def _produce_run(api: Api, topic: str, batches: int = 8, size: int = 2) -> tuple[int, int, list[tuple[bytes, int]]]:
    """``batches`` idempotent batches of ``size`` records; returns (pid, epoch, [(batch, offset)])."""
    pid, epoch = init_producer_id(api)
    sent = []
    for k in range(batches):
        bt = idem_batch(pid, epoch, k * size, size)
        sent.append((bt, produce_ok(api, topic, bt, expected_offset=k * size)))
    return pid, epoch, sent


def test_producer_state_survives_sigkill(kb):
    """SIGKILL before any snapshot covers the last batches: recovery rebuilds the producer
    state from the log, so the last five batches are still recognised as retries (original
    offsets, nothing written), an older one is refused as out of order, and the producer
    goes on with its next sequence."""
    topic = new_topic()
    api = Api(WireClient(kb.bootstrap_servers))
    api.create_topic(topic)
    pid, epoch, sent = _produce_run(api, topic)
    leo = 16
    last_base = sent[-1][1]
    assert all(off <= last_base for off in snapshot_offsets(kb, topic)), (
        f"a snapshot already covers the last batch: {snapshot_offsets(kb, topic)}"
    )
    api.c.close()
    kb.kill()
    kb.restart()
    with WireClient(kb.bootstrap_servers) as c:
        api = Api(c)
        assert offsets(api, topic) == (0, leo)
        for bt, off in reversed(sent[-5:]):  # the five batches the broker remembers
            produce_ok(api, topic, bt, expected_offset=off)
        assert offsets(api, topic) == (0, leo)
        r = api.produce(topic, sent[-6][0])  # acknowledged long ago: no longer remembered
        assert r.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, r
        produce_ok(api, topic, idem_batch(pid, epoch, leo, 2), expected_offset=leo)
        log = read_log(api, topic)
        assert [v for _, v in log] == values_of(0, leo + 2)
        assert [o for o, _ in log] == list(range(leo + 2))
        # a producer id handed out before the crash is never handed out again (it would
        # inherit the old producer's sequences)
        new_pid, _ = init_producer_id(api)
        assert new_pid > pid


def test_snapshot_written_after_recovery(kb):
    """After an unclean restart Kafka rebuilds the producer state and writes
    ``<log end offset>.snapshot`` (UnifiedLog.rebuildProducerState: updateMapEndOffset(lastOffset);
    takeSnapshot()), so the next recovery starts from there instead of replaying the log."""
    topic = new_topic()
    api = Api(WireClient(kb.bootstrap_servers))
    api.create_topic(topic)
    _produce_run(api, topic)
    assert 16 not in snapshot_offsets(kb, topic)
    api.c.close()
    kb.kill()
    kb.restart()
    with WireClient(kb.bootstrap_servers) as c:
        assert offsets(Api(c), topic) == (0, 16)  # the partition is loaded and online
    assert 16 in snapshot_offsets(kb, topic), f"snapshots after recovery: {snapshot_offsets(kb, topic)}"


def _set_topic_config(api: Api, topic: str, **configs: str) -> None:
    m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
    r = api.c.request(
        ApiKeys.INCREMENTAL_ALTER_CONFIGS,
        1,
        m(
            resources=(
                m(
                    "AlterConfigsResource",
                    resource_type=2,
                    resource_name=topic,
                    configs=tuple(
                        m("AlterableConfig", name=k.replace("_", "."), config_operation=0, value=v)
                        for k, v in configs.items()
                    ),
                ),
            ),
            validate_only=False,
        ),
    )
    assert r.responses[0].error_code == NONE, r.responses[0]


def _delete_records(api: Api, topic: str, offset: int) -> int:
    m = Msg(ApiKeys.DELETE_RECORDS, 2)
    r = api.c.request(
        ApiKeys.DELETE_RECORDS,
        2,
        m(
            topics=(
                m(
                    "DeleteRecordsTopic",
                    name=topic,
                    partitions=(m("DeleteRecordsPartition", partition_index=0, offset=offset),),
                ),
            ),
            timeout=10000,
        ),
    )
    p = r.topics[0].partitions[0]
    assert p.error_code == NONE, p
    return p.low_watermark


def _wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["retention", "delete-records"])
def test_producer_continues_after_log_emptied(kb, how):
    """Every record of the producer is removed (retention deletes the segments, or
    DeleteRecords moves the log start offset to the high watermark). Kafka 4 keeps the
    producer's state, so the same producer (same id and epoch) goes on with its next
    sequence without an error, and a resend of its last batch is still a recognised retry,
    not a second copy. With retention the broker is also SIGKILLed once the log is empty:
    the state then comes from the snapshot taken when retention rolled the log."""
    topic = new_topic()
    api = Api(WireClient(kb.bootstrap_servers))
    api.create_topic(topic)
    pid, epoch, sent = _produce_run(api, topic)
    leo = 16
    bt, off = sent[-1]
    if how == "retention":
        _set_topic_config(api, topic, retention_ms="100")
        _wait_until(lambda: offsets(api, topic) == (leo, leo), 20, "retention to empty the partition")
        _set_topic_config(api, topic, retention_ms="604800000")
        assert [n for n in os.listdir(partition_dir(kb, topic)) if n.endswith(".log")] == [f"{leo:020d}.log"]
    else:
        assert _delete_records(api, topic, -1) == leo
    assert offsets(api, topic) == (leo, leo)
    produce_ok(api, topic, bt, expected_offset=off)  # a retry of the last batch: remembered
    assert offsets(api, topic) == (leo, leo), "the retried batch was written again"
    if how == "retention":
        api.c.close()
        kb.kill()
        kb.restart()
        api = Api(WireClient(kb.bootstrap_servers))
        assert offsets(api, topic) == (leo, leo)
        produce_ok(api, topic, bt, expected_offset=off)  # still remembered after the crash
        assert offsets(api, topic) == (leo, leo), "the retried batch was written again"
    nxt = idem_batch(pid, epoch, leo, 2)
    produce_ok(api, topic, nxt, expected_offset=leo)
    produce_ok(api, topic, nxt, expected_offset=leo)  # and its retry
    assert offsets(api, topic) == (leo, leo + 2)
    assert read_log(api, topic, leo) == [(leo, values_of(leo, 1)[0]), (leo + 1, values_of(leo + 1, 1)[0])]
    api.c.close()


# ====================================================================== 4. refused batches

# case -> (the state before: [(epoch, seq, n)], the refused batch (epoch, seq, n), the
#          error, then the correct next batch (epoch, seq, n))
REFUSED = {
    # ProducerAppendInfo.checkSequence: same epoch, not lastSeq + 1
    "sequence-gap": ([(0, 0, 1), (0, 1, 1), (0, 2, 1)], (0, 4, 1), OUT_OF_ORDER_SEQUENCE_NUMBER, (0, 3, 1)),
    # same first sequence as a remembered batch but another range: not a retry, not in sequence
    "range-mismatch": ([(0, 0, 2), (0, 2, 2)], (0, 2, 3), OUT_OF_ORDER_SEQUENCE_NUMBER, (0, 4, 1)),
    # a batch older than the five remembered ones (Kafka 4 has no DUPLICATE_SEQUENCE_NUMBER)
    "older-than-five": ([(0, s, 1) for s in range(7)], (0, 0, 1), OUT_OF_ORDER_SEQUENCE_NUMBER, (0, 7, 1)),
    # a new epoch must start at sequence 0
    "new-epoch-nonzero-seq": ([(0, 0, 1), (0, 1, 1), (0, 2, 1)], (1, 3, 1), OUT_OF_ORDER_SEQUENCE_NUMBER, (1, 0, 1)),
    # checkProducerEpoch: an epoch below the last seen one (InvalidProducerEpochException)
    "stale-epoch": ([(0, 0, 1), (0, 1, 1), (1, 0, 1)], (0, 2, 1), INVALID_PRODUCER_EPOCH, (1, 1, 1)),
    # even a batch that was a retry under the old epoch
    "stale-epoch-retry": ([(0, 0, 1), (0, 1, 1), (1, 0, 1)], (0, 1, 1), INVALID_PRODUCER_EPOCH, (1, 1, 1)),
    # LogValidator: a producer id without a base sequence
    "no-sequence": ([(0, 0, 1)], (0, -1, 1), INVALID_RECORD, (0, 1, 1)),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_batches(module_broker, case):
    before, bad, code, good = REFUSED[case]
    topic = new_topic()
    with WireClient(module_broker.bootstrap_servers) as c:
        api = Api(c)
        api.create_topic(topic)
        pid, _ = init_producer_id(api)

        def batch(epoch, seq, n):
            return build_batch(
                [(None, b"e%d-s%d-%d" % (epoch, seq, i), ()) for i in range(n)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )

        expected = []
        for spec in before:
            produce_ok(api, topic, batch(*spec), expected_offset=len(expected))
            expected += [b"e%d-s%d-%d" % (spec[0], spec[1], i) for i in range(spec[2])]
        end = len(expected)
        for attempt in range(2):  # refused again when resent: the refusal changed nothing
            r = api.produce(topic, batch(*bad))
            assert r.error_code == code, (attempt, r)
            assert r.base_offset == -1, r
            assert offsets(api, topic) == (0, end), "a refused batch was written"
        produce_ok(api, topic, batch(*good), expected_offset=end)
        expected += [b"e%d-s%d-%d" % (good[0], good[1], i) for i in range(good[2])]
        produce_ok(api, topic, batch(*good), expected_offset=end)  # its retry is recognised
        log = read_log(api, topic)
        assert [o for o, _ in log] == list(range(len(expected)))
        assert [v for _, v in log] == expected
