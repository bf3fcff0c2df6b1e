"""A producer's pipelined first batches while KIP-890 verification is pending (issue 25, tests 0
and 3), on three real brokers with the partition leader and the transaction coordinator on
different brokers.

A client pipelines its batches to a leader on one connection (librdkafka, the Java client: up to
five in flight). The first transactional batch for a partition waits while the leader asks the
remote coordinator (AddPartitionsToTxn verify_only, or a transaction version 2 add); kesque used
to start the connection's later requests meanwhile, so a later sequence could be verified and
appended first: librdkafka then counted the earlier batches as "implicitly acked" and committed
records were gone (the high watermark was 2 or 4 where it should have been 7), and Kafka Streams
got OutOfOrderSequenceException on every other transaction. Kafka appends a connection's
requests in order (it reads the next one only after answering the last), and a partition refuses
a sequence above the lowest one still being verified (VerificationStateEntry).

The tests speak the wire protocol, so each request is placed exactly: every response must be a
success the first time, and the log must hold the batches in sequence order.
"""

from __future__ import annotations

import time

import pytest

from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from kesque.testing.cluster import Cluster
from test_coordinators_cluster import CONFIG, TXN_KEY, coordinator, create
from test_transactions_eos import Cluster as Clients
from wire import Msg, WireClient

CONCURRENT_TRANSACTIONS, NOT_ENOUGH_REPLICAS = 51, 19


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3, controllers=1, config=CONFIG) as c:  # a controller of its own: stops at once
        yield c


def address(cluster: Cluster, node: int) -> str:
    return f"127.0.0.1:{cluster.node(node).port}"


def leader_apart_from(cluster: Cluster, topic: str, partitions: int, txn_id: str) -> tuple[int, list[int]]:
    """A broker that leads at least two of ``topic``'s partitions and is not ``txn_id``'s
    transaction coordinator, with those partitions."""
    leaders = create(cluster, topic, partitions, replication=3)
    txn_coordinator = coordinator(cluster, TXN_KEY, txn_id)
    by_leader: dict[int, list[int]] = {}
    for p, node in sorted(leaders.items()):
        by_leader.setdefault(node, []).append(p)
    node, parts = max(((n, ps) for n, ps in by_leader.items() if n != txn_coordinator), key=lambda x: len(x[1]))
    assert len(parts) >= 2, f"no broker but the coordinator leads two partitions: {by_leader}"
    return node, parts


def init_producer(cluster: Cluster, txn_id: str, version: int = 4) -> tuple[int, int]:
    """InitProducerId as a client does it: retried while the coordinator loads or is busy, and
    sent again to the coordinator found anew on NOT_COORDINATOR (the node FindCoordinator named
    from its image may not have applied that leadership yet, just after the topic's creation)."""
    for _ in range(100):
        node = coordinator(cluster, TXN_KEY, txn_id)
        with WireClient(address(cluster, node)) as c:
            r = c.request(
                ApiKeys.INIT_PRODUCER_ID,
                version,
                Msg(ApiKeys.INIT_PRODUCER_ID, version)(
                    transactional_id=txn_id, transaction_timeout=60000, producer_id=-1, producer_epoch=-1
                ),
            )
        if r.error_code not in (51, 14, 15, 16):
            break
        time.sleep(0.1)
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def produce_request(version: int, txn_id: str, topic: str, partition: int, pid: int, epoch: int, seq: int, value: str):
    batch = build_batch(
        [(None, value.encode(), ())], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )
    m = Msg(ApiKeys.PRODUCE, version)
    return (
        0,
        version,
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


def pipelined(c: WireClient, requests: list) -> list[tuple[int, int]]:
    """(error code, base offset) of each request, all written in one send."""
    out = []
    for _corr, r in c.pipeline(requests, timeout=30):
        p = r.responses[0].partition_responses[0]
        out.append((p.error_code, p.base_offset))
    return out


def end_txn(cluster: Cluster, txn_id: str, pid: int, epoch: int, version: int):
    with WireClient(address(cluster, coordinator(cluster, TXN_KEY, txn_id))) as c:
        for _ in range(200):
            r = c.request(
                ApiKeys.END_TXN,
                version,
                Msg(ApiKeys.END_TXN, version)(
                    transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True
                ),
            )
            if r.error_code != CONCURRENT_TRANSACTIONS:
                break
            time.sleep(0.05)
    assert r.error_code == 0, r
    return r


def committed(cluster: Cluster, topic: str, partitions: int, prefix: str) -> list[str]:
    """The committed records of ``topic`` whose value starts with ``prefix`` (one partition's,
    as the tests name them), in log order."""
    return [v for v in Clients(cluster).read_all(topic, partitions, "read_committed") if v.startswith(prefix)]


def test_pipelined_first_batches_keep_their_order_while_a_remote_coordinator_verifies(cluster):
    """Issue 25 test 0 (librdkafka's 0103 reduced): transaction version 1 (Produce v11,
    AddPartitionsToTxn from the client, verify_only from the leader). Six one-record batches of
    sequences 0-5 to partition B and one to partition A go out together, A's first: while A's
    verification is in flight B's first verifications queued behind it and pushed each other out
    (one per transactional id, as Kafka's AddPartitionsToTxnManager keeps), and a later sequence
    of B reached the log at offset 0 ahead of sequence 0."""
    topic, n, txn_id = "verify-order", 6, "verify-order-producer"
    node, parts = leader_apart_from(cluster, topic, n, txn_id)
    a, b = parts[:2]
    pid, epoch = init_producer(cluster, txn_id)
    with WireClient(address(cluster, coordinator(cluster, TXN_KEY, txn_id))) as c:
        m = Msg(ApiKeys.ADD_PARTITIONS_TO_TXN, 3)
        r = c.request(
            ApiKeys.ADD_PARTITIONS_TO_TXN,
            3,
            m(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=(m("AddPartitionsToTxnTopic", name=topic, partitions=(a, b)),),
            ),
        )
        assert [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition] == [
            0,
            0,
        ]
    requests = [produce_request(11, txn_id, topic, a, pid, epoch, 0, "a0")]
    requests += [produce_request(11, txn_id, topic, b, pid, epoch, seq, f"b{seq}") for seq in range(6)]
    with WireClient(address(cluster, node)) as c:
        results = pipelined(c, requests)
    assert results == [(0, 0)] + [(0, seq) for seq in range(6)], results
    end_txn(cluster, txn_id, pid, epoch, 3)
    assert committed(cluster, topic, n, "a") == ["a0"]
    assert committed(cluster, topic, n, "b") == [f"b{seq}" for seq in range(6)]
    hw = Clients(cluster).end_offsets(topic, n)
    assert (hw[a], hw[b]) == (2, 7), hw  # the records and a COMMIT marker each


def test_pipelined_first_batches_after_end_txn_get_no_out_of_order_sequence(cluster):
    """Issue 25 test 3: transaction version 2 (Produce v12 has the leader add the partition,
    EndTxn v5 bumps the epoch). Right after EndTxn the coordinator is still writing the previous
    transaction's markers, so it answers the leader's add with CONCURRENT_TRANSACTIONS; the next
    transaction's first batches are already in flight. The leader asks again for up to
    add.partitions.to.txn.retry.backoff.max.ms, and the later batches wait behind the first: each
    is appended once, in order, and none is told OUT_OF_ORDER_SEQUENCE_NUMBER (which the Java
    client takes as fatal for the batch next in line: Kafka Streams fenced its threads on it)."""
    topic, n, txn_id = "tv2-order", 6, "tv2-order-producer"
    node, parts = leader_apart_from(cluster, topic, n, txn_id)
    a, b = parts[:2]
    pid, epoch = init_producer(cluster, txn_id, version=5)
    expected: dict[int, list[str]] = {a: [], b: []}
    with WireClient(address(cluster, node)) as c:
        for txn in range(6):
            requests = [produce_request(12, txn_id, topic, a, pid, epoch, 0, f"a-t{txn}-0")]
            requests += [produce_request(12, txn_id, topic, b, pid, epoch, seq, f"b-t{txn}-{seq}") for seq in range(4)]
            pending = {a: requests[:1], b: requests[1:]}
            for _ in range(100):
                sent = [req for reqs in pending.values() for req in reqs]
                if not sent:
                    break
                results = dict(zip(map(id, sent), pipelined(c, sent)))
                for part, reqs in pending.items():
                    codes = [results[id(req)][0] for req in reqs]
                    failed = next((i for i, code in enumerate(codes) if code), len(codes))
                    # the batch next in line is told only what a client retries; behind it an
                    # out-of-order answer is fine (the client resends from the first failed one)
                    assert codes[failed : failed + 1] in ([], [CONCURRENT_TRANSACTIONS], [NOT_ENOUGH_REPLICAS]), (
                        txn,
                        part,
                        codes,
                    )
                    assert all(code == 0 for code in codes[:failed]), (txn, part, codes)
                    pending[part] = reqs[failed:]
                time.sleep(0.02)
            assert not any(pending.values()), f"transaction {txn} not accepted: {pending}"
            expected[a].append(f"a-t{txn}-0")
            expected[b] += [f"b-t{txn}-{seq}" for seq in range(4)]
            r = end_txn(cluster, txn_id, pid, epoch, 5)  # no wait: the next transaction goes out at once
            epoch = r.producer_epoch
    assert committed(cluster, topic, n, "a-") == expected[a]
    assert committed(cluster, topic, n, "b-") == expected[b]
