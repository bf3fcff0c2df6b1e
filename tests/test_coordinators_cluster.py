"""Coordinators on a three-broker cluster (issue 14, item 6), real processes on loopback.

The internal topics have replication factor 1, so their partitions, and with them the group and
transaction coordinators, are spread over the brokers, away from most data partitions: the
transaction markers go to other brokers with WriteTxnMarkers, and KIP-890 verification (of the
produce path and of TxnOffsetCommit) asks a coordinator on another broker with
AddPartitionsToTxn verify_only.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.protocol.api_keys import ApiKeys
from kesque.testing.cluster import Cluster
from test_quorum_cluster import FAST_QUORUM
from test_transactions_eos import Cluster as Clients
from wire import Msg, WireClient

CONFIG = {
    **FAST_QUORUM,
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}
GROUP_KEY, TXN_KEY = 0, 1

pytestmark = pytest.mark.slow  # a three-broker cluster: about 40 s


@pytest.fixture(scope="module")
def cluster():
    with Cluster(nodes=3, config=CONFIG) as c:
        yield c


def coordinator(cluster: Cluster, key_type: int, key: str) -> int:
    """The node id of ``key``'s coordinator (the internal topic is created on first use)."""
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    m = Msg(ApiKeys.FIND_COORDINATOR, 4)
    deadline = time.monotonic() + 30
    with WireClient((host, int(port))) as c:
        while True:
            r = c.request(ApiKeys.FIND_COORDINATOR, 4, m(key_type=key_type, coordinator_keys=(key,))).coordinators[0]
            if r.error_code == 0:
                return r.node_id
            assert time.monotonic() < deadline, f"no coordinator for {key}: error {r.error_code}"
            time.sleep(0.2)


def create(cluster: Cluster, name: str, partitions: int, replication: int = 1) -> dict[int, int]:
    """Create a topic (replication factor 1 unless said), once every partition has a leader and
    its replicas in sync; {partition: leader}."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for f in admin.create_topics([NewTopic(name, partitions, replication)]).values():
        f.result(30)
    deadline = time.monotonic() + 30
    while True:
        t = admin.list_topics(name, timeout=10).topics[name]
        if (
            t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == replication for p in t.partitions.values())
        ):
            return {p: meta.leader for p, meta in t.partitions.items()}
        assert time.monotonic() < deadline, f"{name} has no leaders"
        time.sleep(0.2)


def transactional(cluster: Cluster, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    return p


def send(p: Producer, topic: str, partitions: int, prefix: str) -> list[str]:
    values = [f"{prefix}-{i}" for i in range(partitions)]
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i)
    return values


def test_commit_and_abort_with_partitions_on_other_brokers_than_the_coordinator(cluster):
    topic, n = "remote-txn", 6
    leaders = create(cluster, topic, n)
    txn_coordinator = coordinator(cluster, TXN_KEY, "remote-txn-producer")
    assert set(leaders.values()) - {txn_coordinator}, "every partition is on the coordinator's broker"
    p = transactional(cluster, "remote-txn-producer")
    committed = []
    for prefix, commit in (("first", True), ("aborted", False), ("second", True)):
        p.begin_transaction()
        values = send(p, topic, n, prefix)
        if commit:
            p.commit_transaction(30)
            committed += values
        else:
            assert p.flush(30) == 0  # written, so that the abort needs its markers
            p.abort_transaction(30)
    clients = Clients(cluster)
    assert sorted(clients.read_all(topic, n, "read_committed")) == sorted(committed)
    # the aborted records are in the logs, behind their ABORT markers
    assert len(clients.read_all(topic, n, "read_uncommitted")) == 3 * n


def test_consume_transform_produce_with_offsets_sent_to_the_transaction(cluster):
    src, dst, n, records = "ctp-in", "ctp-out", 3, 30
    create(cluster, src, n)
    create(cluster, dst, n)
    clients = Clients(cluster)
    clients.produce(src, [f"v{i}" for i in range(records)])
    txn_id = "ctp-producer"
    txn_coordinator = coordinator(cluster, TXN_KEY, txn_id)
    # a group whose coordinator is not the transaction coordinator: TxnOffsetCommit's KIP-890
    # verification crosses brokers
    group = next(
        g for g in (f"ctp-group-{i}" for i in range(50)) if coordinator(cluster, GROUP_KEY, g) != txn_coordinator
    )
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )
    producer = transactional(cluster, txn_id)
    try:
        consumer.subscribe([src])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < records:
            assert time.monotonic() < deadline, f"consumed {seen} of {records}"
            batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(dst, value=b"out-" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            seen += len(batch)
    finally:
        consumer.close()
    assert sorted(clients.read_all(dst, n, "read_committed")) == sorted(f"out-v{i}" for i in range(records))
    assert clients.committed(group, src, n) == clients.end_offsets(src, n)
    assert sum(clients.end_offsets(src, n).values()) == records
