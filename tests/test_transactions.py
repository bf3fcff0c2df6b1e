"""Transactions against a real broker process (issue 5, tests 5, 6, 7, 9 and 10).

* zombie fencing: a second producer with the same transactional.id fences the first, whose
  open transaction is aborted;
* aborted data is invisible to read_committed and visible to read_uncommitted; a consumer
  held at the LSO by an open transaction proceeds when it commits or times out;
* a broker SIGKILLed mid-transaction recovers the coordinator state from
  ``__transaction_state`` and the producer state from snapshots and the log: an open
  transaction is aborted by its timeout, a committed one is completed (markers re-sent);
* two-phase commit (KIP-939) driven over the wire: prepare in one connection, kill it,
  commit or abort from another with the same transactional id;
* bad input, each answered with Kafka's code and the coordinator's state intact.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import running_broker
from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from wire import Msg, WireClient

TXN_BROKER = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    "transaction.two.phase.commit.enable": "true",
    "log.flush.interval.messages": "1000000",
}


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("txn") / "data", TXN_BROKER) as b:
        yield b


@pytest.fixture
def fresh_broker(tmp_path):
    with running_broker(tmp_path / "data", TXN_BROKER) as b:
        yield b


def new_topic(bs: str, partitions: int = 1) -> str:
    name = "tx-" + uuid.uuid4().hex[:10]
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def txn_producer(bs: str, txn_id: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id, "linger.ms": 5, **extra})
    p.init_transactions(15)
    return p


def read_all(
    bs: str, topic: str, isolation: str, partitions: int = 1, expect: int | None = None, timeout: float = 8.0
) -> list[str]:
    """Every value of the topic as the isolation level sees it (stops at the end or after ``expect``)."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "r-" + uuid.uuid4().hex[:6],
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, eof = [], set()
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                    if expect is None and len(eof) == partitions:
                        break
                continue
            got.append(m.value().decode())
            if expect is not None and len(got) >= expect:
                break
    finally:
        c.close()
    return got


def lso(bs: str, topic: str, partition: int = 0) -> int:
    c = Consumer(
        {"bootstrap.servers": bs, "group.id": "w-" + uuid.uuid4().hex[:6], "isolation.level": "read_committed"}
    )
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)[1]
    finally:
        c.close()


def wait_past_a_timeout_abort(bs: str, timeout_ms: int) -> None:
    """Open a plain transaction with ``timeout_ms`` now and wait until the coordinator has
    aborted it for its timeout (its ABORT marker moves the LSO): by then a transaction opened
    earlier with the same timeout would have been aborted too, were it subject to it."""
    topic = new_topic(bs)
    p = txn_producer(bs, "timeout-" + uuid.uuid4().hex[:6], **{"transaction.timeout.ms": timeout_ms})
    p.begin_transaction()
    p.produce(topic, b"times-out", partition=0)
    p.flush(10)
    deadline = time.time() + 30
    while lso(bs, topic) == 0:
        assert time.time() < deadline, "the control transaction was never aborted by its timeout"
        time.sleep(0.1)


# ============================================================================ tests 5 and 6


def test_aborted_records_are_invisible_to_read_committed(txn_broker):
    bs = txn_broker.bootstrap_servers
    topic = new_topic(bs, 2)
    p = txn_producer(bs, "vis-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(10)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, f"a{i}".encode(), partition=i % 2)
    p.flush()
    p.abort_transaction(10)
    p.begin_transaction()
    p.produce(topic, b"c-last", partition=1)
    p.commit_transaction(10)
    committed = sorted(read_all(bs, topic, "read_committed", 2))
    assert committed == sorted([f"c{i}" for i in range(6)] + ["c-last"])
    assert sorted(read_all(bs, topic, "read_uncommitted", 2)) == sorted(committed + [f"a{i}" for i in range(4)])


def test_consumer_waits_at_lso_until_commit_or_timeout(txn_broker):
    bs = txn_broker.bootstrap_servers
    topic = new_topic(bs)
    # a plain producer writes around an open transaction: read_committed stops at its start
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, b"before", partition=0)
    plain.flush(10)
    p = txn_producer(bs, "lso-" + uuid.uuid4().hex[:6])
    p.begin_transaction()
    p.produce(topic, b"in-txn", partition=0)
    p.flush(10)
    plain.produce(topic, b"after", partition=0)
    plain.flush(10)
    assert lso(bs, topic) == 1
    assert read_all(bs, topic, "read_committed", timeout=2) == ["before"]
    p.commit_transaction(10)
    assert read_all(bs, topic, "read_committed", expect=3) == ["before", "in-txn", "after"]

    # an open transaction that times out is aborted by the coordinator and the LSO moves on
    short = txn_producer(bs, "lso-t-" + uuid.uuid4().hex[:6], **{"transaction.timeout.ms": 1500})
    short.begin_transaction()
    short.produce(topic, b"never", partition=0)
    short.flush(10)
    plain.produce(topic, b"later", partition=0)
    plain.flush(10)
    held = lso(bs, topic)
    deadline = time.time() + 10
    while lso(bs, topic) == held and time.time() < deadline:
        time.sleep(0.2)
    assert lso(bs, topic) > held
    assert read_all(bs, topic, "read_committed", expect=4)[-1] == "later"
    assert "never" not in read_all(bs, topic, "read_committed")
    with pytest.raises(KafkaException):
        short.commit_transaction(5)  # its epoch was bumped by the timeout abort


def test_second_producer_fences_the_first(txn_broker):
    bs = txn_broker.bootstrap_servers
    topic = new_topic(bs)
    txn_id = "fence-" + uuid.uuid4().hex[:6]
    first = txn_producer(bs, txn_id)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(10)
    second = txn_producer(bs, txn_id)  # aborts the first's open transaction, bumps the epoch
    with pytest.raises(KafkaException) as e:
        first.produce(topic, b"zombie-2", partition=0)
        first.commit_transaction(10)
    err = e.value.args[0]
    assert err.fatal() or "fenced" in err.str().lower(), err
    second.begin_transaction()
    second.produce(topic, b"winner", partition=0)
    second.commit_transaction(10)
    assert read_all(bs, topic, "read_committed") == ["winner"]
    assert "zombie" in read_all(bs, topic, "read_uncommitted")


# ============================================================================ test 7


def test_broker_sigkill_mid_transaction(fresh_broker):
    b = fresh_broker
    bs = b.bootstrap_servers
    topic = new_topic(bs, 2)
    done = txn_producer(bs, "k-done")
    done.begin_transaction()
    for i in range(10):
        done.produce(topic, f"done-{i}".encode(), partition=i % 2)
    done.commit_transaction(10)
    open_ = txn_producer(bs, "k-open", **{"transaction.timeout.ms": 2000})
    open_.begin_transaction()
    for i in range(10):
        open_.produce(topic, f"open-{i}".encode(), partition=i % 2)
    open_.flush(10)
    b.kill()
    b.restart()
    bs = b.bootstrap_servers
    # the open transaction is recovered as Ongoing and aborted by its timeout: each partition
    # holds 5 committed records, the COMMIT marker, 5 open records and then the ABORT marker,
    # so the LSO reaches 12 only once the timeout abort wrote its markers (before any new
    # producer of "k-open" could abort it by fencing). Nothing of it ever becomes visible.
    deadline = time.time() + 15
    while time.time() < deadline and (lso(bs, topic, 0) < 12 or lso(bs, topic, 1) < 12):
        time.sleep(0.3)
    assert (lso(bs, topic, 0), lso(bs, topic, 1)) == (12, 12)
    assert sorted(read_all(bs, topic, "read_uncommitted", 2)) == sorted(
        [f"done-{i}" for i in range(10)] + [f"open-{i}" for i in range(10)]
    )
    with pytest.raises(KafkaException):
        open_.commit_transaction(5)  # its epoch was bumped by the timeout abort
    got = sorted(read_all(bs, topic, "read_committed", 2))
    assert got == sorted(f"done-{i}" for i in range(10))
    # the same transactional id starts again after the restart
    again = txn_producer(bs, "k-open")
    again.begin_transaction()
    again.produce(topic, b"again", partition=0)
    again.commit_transaction(10)
    assert "again" in read_all(bs, topic, "read_committed", 2)


def test_broker_sigkill_after_commit_completes_it(fresh_broker):
    """Kill the broker right after EndTxn(commit) was answered: the PrepareCommit is in
    __transaction_state, the markers may not all be written; after the restart the
    coordinator re-sends them and the transaction becomes visible whole."""
    b = fresh_broker
    bs = b.bootstrap_servers
    topic = new_topic(bs, 3)
    with WireClient(bs) as c:
        _find_coordinator(c, "k-prep")
        pid, epoch = _init(c, "k-prep", 60000)
        _add(c, "k-prep", pid, epoch, topic, [0, 1, 2])
        for p in range(3):
            _txn_produce(c, "k-prep", topic, p, pid, epoch, 0, [f"v{p}-{i}" for i in range(5)])
        r = c.request(
            ApiKeys.END_TXN,
            3,
            Msg(ApiKeys.END_TXN, 3)(transactional_id="k-prep", producer_id=pid, producer_epoch=epoch, committed=True),
        )
        assert r.error_code == 0
    b.kill()
    b.restart()
    bs = b.bootstrap_servers
    got = read_all(bs, topic, "read_committed", 3, expect=15, timeout=15)
    assert sorted(got) == sorted(f"v{p}-{i}" for p in range(3) for i in range(5))


# ============================================================================ wire helpers


def _init(c: WireClient, txn_id: str, timeout_ms: int, version: int = 4, **kw):
    for _ in range(50):
        r = c.request(
            ApiKeys.INIT_PRODUCER_ID,
            version,
            Msg(ApiKeys.INIT_PRODUCER_ID, version)(
                transactional_id=txn_id, transaction_timeout=timeout_ms, producer_id=-1, producer_epoch=-1, **kw
            ),
        )
        if r.error_code not in (51, 14, 15):  # CONCURRENT_TRANSACTIONS, LOAD_IN_PROGRESS, NOT_AVAILABLE
            break
        time.sleep(0.1)
    assert r.error_code == 0, r
    return (r.producer_id, r.producer_epoch) if version < 6 else r


def _add(c: WireClient, txn_id: str, pid: int, epoch: int, topic: str, partitions: list[int]) -> list[int]:
    m = Msg(ApiKeys.ADD_PARTITIONS_TO_TXN, 3)
    r = c.request(
        ApiKeys.ADD_PARTITIONS_TO_TXN,
        3,
        m(
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(m("AddPartitionsToTxnTopic", name=topic, partitions=tuple(partitions)),),
        ),
    )
    return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def _txn_produce(
    c: WireClient,
    txn_id: str | None,
    topic: str,
    partition: int,
    pid: int,
    epoch: int,
    seq: int,
    values: list[str],
    transactional: bool = True,
):
    batch = build_batch(
        [(None, v.encode(), ()) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )
    m = Msg(ApiKeys.PRODUCE, 9)
    r = c.request(
        ApiKeys.PRODUCE,
        9,
        m(
            transactional_id=txn_id,
            acks=-1,
            timeout=10000,
            topic_data=(
                m(
                    "TopicProduceData",
                    name=topic,
                    partition_data=(m("PartitionProduceData", index=partition, records=batch),),
                ),
            ),
        ),
    )
    return r.responses[0].partition_responses[0]


def _end(c: WireClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return c.request(
        ApiKeys.END_TXN,
        version,
        Msg(ApiKeys.END_TXN, version)(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit),
    ).error_code


def _find_coordinator(c: WireClient, key: str, key_type: int = 1) -> None:
    m = Msg(ApiKeys.FIND_COORDINATOR, 4)
    r = c.request(ApiKeys.FIND_COORDINATOR, 4, m(key_type=key_type, coordinator_keys=(key,)))
    assert r.coordinators[0].error_code == 0


# ============================================================================ test 9: KIP-939


@pytest.mark.parametrize("commit", [True, False])
def test_two_phase_commit_across_processes(txn_broker, commit):
    bs = txn_broker.bootstrap_servers
    topic = new_topic(bs)
    txn_id = "2pc-" + uuid.uuid4().hex[:6]
    # process A: enable 2PC, write, "prepare" (flush; the state to commit is (pid, epoch)), die
    with WireClient(bs) as a:
        _find_coordinator(a, txn_id)
        ra = _init(a, txn_id, 1000, version=6, enable2_pc=True, keep_prepared_txn=False)
        pid, epoch = ra.producer_id, ra.producer_epoch
        assert _add(a, txn_id, pid, epoch, topic, [0]) == [0]
        r = _txn_produce(a, txn_id, topic, 0, pid, epoch, 0, ["p0", "p1", "p2"])
        assert r.error_code == 0
    wait_past_a_timeout_abort(bs, 1000)  # A asked for 1 s: a 2PC transaction does not time out
    assert lso(bs, topic) == 0
    # process B: same transactional id, keep the prepared transaction, then decide
    with WireClient(bs) as b:
        rb_ = _init(b, txn_id, 1000, version=6, enable2_pc=True, keep_prepared_txn=True)
        assert (rb_.ongoing_txn_producer_id, rb_.ongoing_txn_producer_epoch) == (pid, epoch)
        assert rb_.producer_id == pid and rb_.producer_epoch == epoch + 1  # A is fenced
        assert _end(b, txn_id, pid, epoch, commit, version=4) == 90  # A's epoch: PRODUCER_FENCED
        assert _end(b, txn_id, rb_.producer_id, rb_.producer_epoch, commit) == 0
    expected = ["p0", "p1", "p2"] if commit else []
    assert read_all(bs, topic, "read_committed", expect=len(expected) or None) == expected
    assert lso(bs, topic) == 4  # three records and the marker


def test_two_phase_commit_needs_the_broker_config(broker):
    with WireClient(broker.bootstrap_servers) as c:
        _find_coordinator(c, "no-2pc")
        m = Msg(ApiKeys.INIT_PRODUCER_ID, 6)
        for _ in range(50):
            r = c.request(
                ApiKeys.INIT_PRODUCER_ID,
                6,
                m(
                    transactional_id="no-2pc",
                    transaction_timeout=1000,
                    producer_id=-1,
                    producer_epoch=-1,
                    enable2_pc=True,
                    keep_prepared_txn=False,
                ),
            )
            if r.error_code not in (14, 15):
                break
            time.sleep(0.1)
        assert r.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka


# ============================================================================ test 10: bad input


def test_bad_transactional_input_gets_kafkas_codes(txn_broker):
    bs = txn_broker.bootstrap_servers
    topic = new_topic(bs, 2)
    other = new_topic(bs)
    txn_id = "bad-" + uuid.uuid4().hex[:6]
    with WireClient(bs) as c:
        _find_coordinator(c, txn_id)
        # transaction.timeout.ms above transaction.max.timeout.ms
        r = c.request(
            ApiKeys.INIT_PRODUCER_ID,
            4,
            Msg(ApiKeys.INIT_PRODUCER_ID, 4)(
                transactional_id=txn_id, transaction_timeout=900_001, producer_id=-1, producer_epoch=-1
            ),
        )
        assert r.error_code == 50  # INVALID_TRANSACTION_TIMEOUT
        pid, epoch = _init(c, txn_id, 10000)
        # EndTxn with nothing open
        assert _end(c, txn_id, pid, epoch, True) == 48  # INVALID_TXN_STATE
        # stale epoch and unknown producer id at the coordinator
        assert _add(c, txn_id, pid, epoch + 5, topic, [0]) == [90]  # PRODUCER_FENCED
        assert _add(c, txn_id, pid + 1000, epoch, topic, [0]) == [49]  # INVALID_PRODUCER_ID_MAPPING
        assert _add(c, "never-initialized-" + txn_id, pid, epoch, topic, [0]) == [49]
        # an unknown partition fails the whole request
        assert sorted(_add(c, txn_id, pid, epoch, topic, [0, 7])) == [3, 55]
        # a transactional produce to a partition not added (KIP-890 verification)
        assert _add(c, txn_id, pid, epoch, topic, [0]) == [0]
        r = _txn_produce(c, txn_id, other, 0, pid, epoch, 0, ["x"])
        assert r.error_code == 48  # INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce v11)
        r = _txn_produce(c, txn_id, topic, 0, pid, epoch, 0, ["ok-0"])
        assert r.error_code == 0
        # sequences that skip, and a stale epoch, at the partition
        r = _txn_produce(c, txn_id, topic, 0, pid, epoch, 5, ["skip"])
        assert r.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        # TxnOffsetCommit for a group the transaction never added
        _find_coordinator(c, "g-" + txn_id, 0)
        m = Msg(ApiKeys.TXN_OFFSET_COMMIT, 3)
        r = c.request(
            ApiKeys.TXN_OFFSET_COMMIT,
            3,
            m(
                transactional_id=txn_id,
                group_id="g-" + txn_id,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=(
                    m(
                        "TxnOffsetCommitRequestTopic",
                        name=topic,
                        partitions=(
                            m(
                                "TxnOffsetCommitRequestPartition",
                                partition_index=0,
                                committed_offset=1,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            ),
        )
        assert r.topics[0].partitions[0].error_code == 48
        # the coordinator's state is intact: the transaction commits what was appended
        r = _txn_produce(c, txn_id, topic, 0, pid, epoch, 1, ["ok-1"])
        assert r.error_code == 0
        assert _end(c, txn_id, pid, epoch, True) == 0
    assert read_all(bs, topic, "read_committed", 2, expect=2) == ["ok-0", "ok-1"]


# ============================================================================ transactional offsets


def _offset_fetch(c: WireClient, group: str, topic: str, stable: bool) -> tuple[int, int]:
    m = Msg(ApiKeys.OFFSET_FETCH, 7)
    r = c.request(
        ApiKeys.OFFSET_FETCH,
        7,
        m(
            group_id=group,
            require_stable=stable,
            topics=(m("OffsetFetchRequestTopic", name=topic, partition_indexes=(0,)),),
        ),
    )
    p = r.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def test_transactional_offsets_pending_until_commit_and_replayed(fresh_broker):
    b = fresh_broker
    bs = b.bootstrap_servers
    topic = new_topic(bs)
    group, txn_id = "g-off", "t-off"
    with WireClient(bs) as c:
        _find_coordinator(c, txn_id)
        _find_coordinator(c, group, 0)
        pid, epoch = _init(c, txn_id, 60000)
        for offset, commit in ((5, False), (7, True)):
            r = c.request(
                ApiKeys.ADD_OFFSETS_TO_TXN,
                3,
                Msg(ApiKeys.ADD_OFFSETS_TO_TXN, 3)(
                    transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group
                ),
            )
            assert r.error_code == 0
            m = Msg(ApiKeys.TXN_OFFSET_COMMIT, 3)
            r = c.request(
                ApiKeys.TXN_OFFSET_COMMIT,
                3,
                m(
                    transactional_id=txn_id,
                    group_id=group,
                    producer_id=pid,
                    producer_epoch=epoch,
                    generation_id=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=(
                        m(
                            "TxnOffsetCommitRequestTopic",
                            name=topic,
                            partitions=(
                                m(
                                    "TxnOffsetCommitRequestPartition",
                                    partition_index=0,
                                    committed_offset=offset,
                                    committed_leader_epoch=-1,
                                    committed_metadata="m",
                                ),
                            ),
                        ),
                    ),
                ),
            )
            assert r.topics[0].partitions[0].error_code == 0
            assert _offset_fetch(c, group, topic, stable=True) == (-1, 88)  # UNSTABLE_OFFSET_COMMIT
            assert _offset_fetch(c, group, topic, stable=False) == (-1, 0)  # nothing committed yet
            assert _end(c, txn_id, pid, epoch, commit) == 0
            deadline = time.time() + 5
            while _offset_fetch(c, group, topic, stable=True)[1] == 88 and time.time() < deadline:
                time.sleep(0.05)
        assert _offset_fetch(c, group, topic, stable=True) == (7, 0)  # the aborted 5 never showed
    b.kill()
    b.restart()
    with WireClient(b.bootstrap_servers) as c:
        _find_coordinator(c, group, 0)
        assert _offset_fetch(c, group, topic, stable=True) == (7, 0)
