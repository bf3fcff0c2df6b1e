"""kesque's own client (``kesque.client``) against a real broker process.

* murmur2 partitioning byte-for-byte against kafka-python's implementation;
* the idempotent producer's batches are deduplicated when resent;
* transactions: commit, abort, fencing by a second incarnation;
* issue 5's test 9 with kesque's client, across real processes: process A prepares a
  two-phase-commit transaction, prints its PreparedTxnState and is SIGKILLed; process B
  (this test) takes over the transactional id with ``keep_prepared_txn`` and completes it —
  records appear exactly once when B commits and never when B aborts or holds a stale state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples, running_broker
from kesque.client.consumer import EARLIEST, WireConsumer
from kesque.client.producer import PreparedTxnState, Producer, _Pending, murmur2
from kesque.errors import KafkaError
from kesque.records.records import build_batch
from test_transactions import lso, new_topic, wait_past_a_timeout_abort

TXN_BROKER = {
    "transaction.two.phase.commit.enable": "true",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("client") / "data", TXN_BROKER) as b:
        yield b


@settings(max_examples=examples(300))
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data):
    from kafka.partitioner.default import murmur2 as reference

    assert murmur2(data) & 0xFFFFFFFF == reference(data) & 0xFFFFFFFF


def _read(bs, topic, partitions=1, isolation="read_committed"):
    c = WireConsumer(bs, isolation_level=1 if isolation == "read_committed" else 0)
    try:
        c.assign({(topic, p): EARLIEST for p in range(partitions)})
        return c.drain()
    finally:
        c.close()


def test_idempotent_produce_and_keyed_partitioning(kb):
    bs = kb.bootstrap_servers
    topic = new_topic(bs, 3)
    with Producer(bs) as p:
        for i in range(300):
            p.send(topic, f"v{i}".encode(), key=f"k{i % 7}".encode(), headers=[("h", b"x")])
        p.flush()
        assert p.producer_id >= 0
    got = _read(bs, topic, 3, "read_uncommitted")
    assert sorted(int(m.value[1:]) for m in got) == list(range(300))
    for m in got:  # every key where Kafka's default partitioner puts it
        assert m.partition == (murmur2(m.key) & 0x7FFFFFFF) % 3
        assert m.headers == [("h", b"x")]


def test_producer_creates_a_missing_topic_as_kafkas_does(kb):
    """Metadata with allow_auto_topic_creation (auto.create.topics.enable is on by default)."""
    bs = kb.bootstrap_servers
    topic = "auto-" + uuid.uuid4().hex[:6]
    with Producer(bs) as p:
        p.send(topic, b"first")
        p.flush()
    assert [m.value for m in _read(bs, topic, 1, "read_uncommitted")] == [b"first"]


def test_resent_batch_is_deduplicated(kb):
    bs = kb.bootstrap_servers
    topic = new_topic(bs)
    with Producer(bs) as p:
        p.send(topic, b"once", partition=0)
        p.flush()
        # resend the very same batch, as a retry after a lost response would
        x = _Pending(topic, 0, [(None, b"once", (), None)], sequence=0)
        x.batch = build_batch(x.records, producer_id=p.producer_id, producer_epoch=p.epoch, base_sequence=0)
        p._produce([x])
        assert p.offsets[(topic, 0)] == [0, 0]  # the duplicate is acknowledged with its original offset
    assert [m.value for m in _read(bs, topic, 1, "read_uncommitted")] == [b"once"]


def test_transactions_commit_abort_and_fencing(kb):
    bs = kb.bootstrap_servers
    topic = new_topic(bs, 2)
    txn_id = "cli-" + uuid.uuid4().hex[:6]
    with Producer(bs, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, f"c{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, f"a{i}".encode(), partition=i % 2)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, b"zombie", partition=0)
        p.flush()
        with Producer(bs, transactional_id=txn_id) as q:  # a new incarnation fences p, aborts its txn
            q.init_transactions()
            assert q.epoch > p.epoch
        with pytest.raises(KafkaError) as e:
            p.commit_transaction()
        assert e.value.code in (47, 90)  # INVALID_PRODUCER_EPOCH / PRODUCER_FENCED
    committed = sorted(m.value.decode() for m in _read(bs, topic, 2))
    assert committed == sorted(f"c{i}" for i in range(10))
    assert len(_read(bs, topic, 2, "read_uncommitted")) == 21


PREPARER = textwrap.dedent("""
    import sys, time
    from kesque.client.producer import Producer
    bs, txn_id, topic = sys.argv[1:4]
    p = Producer(bs, transactional_id=txn_id, enable_2pc=True, transaction_timeout_ms=1000)
    p.init_transactions()
    p.begin_transaction()
    for i in range(50):
        p.send(topic, f"r{i}".encode(), partition=i % 2)
    state = p.prepare_transaction()
    print(state, flush=True)
    time.sleep(3600)   # the external coordinator has the state; this process is killed here
""")


def _prepare_in_another_process(bs: str, txn_id: str, topic: str) -> PreparedTxnState:
    proc = subprocess.Popen(
        [sys.executable, "-c", PREPARER, bs, txn_id, topic],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        line = proc.stdout.readline()
        assert line, "the preparing process died"
        return PreparedTxnState.parse(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("decision", ["commit", "abort", "stale-state"])
def test_two_phase_commit_with_kesque_client(kb, decision):
    bs = kb.bootstrap_servers
    topic = new_topic(bs, 2)
    txn_id = "2pc-client-" + uuid.uuid4().hex[:6]
    state = _prepare_in_another_process(bs, txn_id, topic)
    wait_past_a_timeout_abort(bs, 1000)  # A asked for 1 s: a prepared 2PC transaction does not time out
    assert lso(bs, topic) == 0  # prepared, not visible, not aborted
    b = Producer(bs, transactional_id=txn_id, enable_2pc=True)
    try:
        kept = b.init_transactions(keep_prepared_txn=True)
        assert kept == state
        if decision == "commit":
            assert b.complete_transaction(state) is True
        elif decision == "abort":
            b.abort_transaction()
        else:  # a state from another attempt: completeTransaction aborts
            assert b.complete_transaction(PreparedTxnState(state.producer_id, state.epoch - 1)) is False
        # a second completion finds nothing open: replaying the decision is harmless
        assert b.init_transactions(keep_prepared_txn=True) is None
        assert b.complete_transaction(state) is False
    finally:
        b.close()
    expected = sorted(f"r{i}" for i in range(50)) if decision == "commit" else []
    got = sorted(m.value.decode() for m in _read(bs, topic, 2))
    assert got == expected
    assert lso(bs, topic, 0) == lso(bs, topic, 1) > 0  # markers written: nothing is left open


def test_two_phase_commit_refused_without_broker_config(tmp_path):
    with running_broker(tmp_path / "data") as b:
        p = Producer(b.bootstrap_servers, transactional_id="no-2pc", enable_2pc=True)
        try:
            with pytest.raises(KafkaError) as e:
                p.init_transactions()
            assert e.value.code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        finally:
            p.close()


def test_two_phase_recovery_survives_a_coordinator_restart(tmp_path):
    """The recovering process takes over (epoch bump), the broker is SIGKILLed, a second
    recovery still reports the preparer's state, so the commit goes through."""
    with running_broker(tmp_path / "data", TXN_BROKER) as kb:
        bs = kb.bootstrap_servers
        topic = new_topic(bs, 2)
        txn_id = "2pc-restart-" + uuid.uuid4().hex[:6]
        state = _prepare_in_another_process(bs, txn_id, topic)
        with Producer(bs, transactional_id=txn_id, enable_2pc=True) as b:
            assert b.init_transactions(keep_prepared_txn=True) == state
        kb.kill()
        kb.restart()
        with Producer(bs, transactional_id=txn_id, enable_2pc=True) as b:
            assert b.init_transactions(keep_prepared_txn=True) == state
            assert b.complete_transaction(state) is True
        assert sorted(m.value.decode() for m in _read(bs, topic, 2)) == sorted(f"r{i}" for i in range(50))
