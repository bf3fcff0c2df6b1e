"""Transaction version 2 (KIP-890 part 2) on a real broker, driven over the wire as a TV2 client
drives it: no AddPartitionsToTxn (Produce v12 has the leader add the partition), EndTxn v5
answers the bumped epoch the next transaction uses, and a zombie of an older epoch is fenced on
the partitions (INVALID_PRODUCER_EPOCH) and at the coordinator (PRODUCER_FENCED)."""

from __future__ import annotations

import time

import pytest

from conftest import running_broker
from kesque.protocol.api_keys import ApiKeys
from kesque.records.records import build_batch
from test_transactions import TXN_BROKER, _add, _find_coordinator, _init, lso, new_topic
from wire import Msg, WireClient

INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, TRANSACTION_ABORTABLE = 47, 90, 51, 120


def produce(c: WireClient, txn_id, topic, pid, epoch, seq, values, version=12):
    batch = build_batch(
        [(None, v.encode(), ()) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    m = Msg(ApiKeys.PRODUCE, version)
    r = c.request(
        ApiKeys.PRODUCE,
        version,
        m(
            transactional_id=txn_id,
            acks=-1,
            timeout=10000,
            topic_data=(
                m("TopicProduceData", name=topic, partition_data=(m("PartitionProduceData", index=0, records=batch),)),
            ),
        ),
    )
    return r.responses[0].partition_responses[0].error_code


def end(c: WireClient, txn_id, pid, epoch, commit, version=5):
    for _ in range(100):  # the markers of the previous transaction may still be in flight
        r = c.request(
            ApiKeys.END_TXN,
            version,
            Msg(ApiKeys.END_TXN, version)(
                transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit
            ),
        )
        if r.error_code != CONCURRENT_TRANSACTIONS:
            break
        time.sleep(0.05)
    return r.error_code, getattr(r, "producer_id", None), getattr(r, "producer_epoch", None)


def produce_retrying(c, *args, **kw):
    for _ in range(100):  # CONCURRENT_TRANSACTIONS while the coordinator completes the last transaction
        code = produce(c, *args, **kw)
        if code not in (19, CONCURRENT_TRANSACTIONS):
            return code
        time.sleep(0.05)
    return code


def describe(c: WireClient, txn_id):
    r = c.request(ApiKeys.DESCRIBE_TRANSACTIONS, 0, Msg(ApiKeys.DESCRIBE_TRANSACTIONS, 0)(transactional_ids=(txn_id,)))
    s = r.transaction_states[0]
    return s.transaction_state, s.producer_epoch, sorted((t.topic, p) for t in s.topics for p in t.partitions)


def test_tv2_epoch_bump_implicit_add_and_zombie_fencing(tmp_path):
    with running_broker(tmp_path / "data", TXN_BROKER) as b, WireClient(b.bootstrap_servers) as c:
        features = {
            f.name: f.max_version_level
            for f in c.request(
                ApiKeys.API_VERSIONS,
                3,
                Msg(ApiKeys.API_VERSIONS, 3)(client_software_name="t", client_software_version="1"),
            ).finalized_features
        }
        assert features["transaction.version"] == 2
        topic = new_topic(b.bootstrap_servers)
        _find_coordinator(c, "tv2")
        pid, epoch = _init(c, "tv2", 60000)
        assert epoch == 0
        for i, commit in enumerate([True, False, True]):
            # no AddPartitionsToTxn: the leader adds the partition before appending
            assert produce_retrying(c, "tv2", topic, pid, epoch, 0, [f"r{i}-0", f"r{i}-1"]) == 0
            assert describe(c, "tv2") == ("Ongoing", epoch, [(topic, 0)])
            code, new_pid, new_epoch = end(c, "tv2", pid, epoch, commit)
            assert (code, new_pid, new_epoch) == (0, pid, epoch + 1)
            epoch = new_epoch
        deadline = time.monotonic() + 10
        while describe(c, "tv2")[0] != "CompleteCommit" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert describe(c, "tv2") == ("CompleteCommit", 3, [])
        # a zombie of an older epoch: fenced on the partition and at the coordinator
        assert produce(c, "tv2", topic, pid, 1, 0, ["zombie"]) == INVALID_PRODUCER_EPOCH
        assert end(c, "tv2", pid, 1, True)[0] == PRODUCER_FENCED
        assert end(c, "tv2", pid, 1, True, version=4)[0] == PRODUCER_FENCED
        # the current epoch goes on; a retried EndTxn (one epoch back) gets the current one
        assert end(c, "tv2", pid, 2, True) == (0, pid, 3)
        assert produce_retrying(c, "tv2", topic, pid, 3, 0, ["last"]) == 0
        assert end(c, "tv2", pid, 3, True) == (0, pid, 4)
        # every transaction is closed: the LSO is the log end (7 records and 4 markers)
        deadline = time.monotonic() + 10
        while lso(b.bootstrap_servers, topic) < 11 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lso(b.bootstrap_servers, topic) == 11
        # a TV1 client (AddPartitionsToTxn v3, Produce v11, EndTxn v4) keeps version 1's rules
        pid1, e1 = _init(c, "tv1", 60000)
        assert produce(c, "tv1", topic, pid1, e1, 0, ["x"], version=11) == TRANSACTION_ABORTABLE  # not added
        assert _add(c, "tv1", pid1, e1, topic, [0]) == [0]
        assert produce(c, "tv1", topic, pid1, e1, 0, ["x"], version=11) == 0
        assert end(c, "tv1", pid1, e1, True, version=4)[0] == 0
        assert describe(c, "tv1")[1] == e1


@pytest.mark.slow
def test_tv2_on_three_brokers_the_leader_adds_the_partition_at_a_remote_coordinator(tmp_path):
    """The partition's leader and the transaction coordinator on different brokers: a TV2
    Produce makes the leader send AddPartitionsToTxn (v5, not verify_only) to the coordinator's
    broker; EndTxn v5 bumps the epoch; the markers reach the remote leader and read_committed
    sees the committed records only."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from kesque.testing.cluster import Cluster
    from test_replication import FAST

    with Cluster(nodes=3, data_dir=str(tmp_path), config=FAST) as cl:
        bs = cl.bootstrap_servers
        txn_id = "tv2-remote"
        coordinator, deadline = -1, time.monotonic() + 60
        with WireClient(cl.node(1).bootstrap_servers) as c:
            while coordinator < 0 and time.monotonic() < deadline:  # the first call creates __transaction_state
                found = c.request(
                    ApiKeys.FIND_COORDINATOR,
                    4,
                    Msg(ApiKeys.FIND_COORDINATOR, 4)(key_type=1, coordinator_keys=(txn_id,)),
                ).coordinators[0]
                coordinator = found.node_id if found.error_code == 0 else -1
                time.sleep(0.2)
        assert coordinator > 0
        leader = next(b for b in (1, 2, 3) if b != coordinator)
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("remote-txn", 1, replica_assignment=[[leader]])])["remote-txn"].result(30)
        with (
            WireClient(cl.node(coordinator).bootstrap_servers) as co,
            WireClient(cl.node(leader).bootstrap_servers) as le,
        ):
            pid, epoch = _init(co, txn_id, 60000)
            for i, commit in enumerate([True, False, True]):
                assert produce_retrying(le, txn_id, "remote-txn", pid, epoch, 0, [f"r{i}-0", f"r{i}-1"]) == 0
                assert describe(co, txn_id) == ("Ongoing", epoch, [("remote-txn", 0)])
                code, new_pid, new_epoch = end(co, txn_id, pid, epoch, commit)
                assert (code, new_pid, new_epoch) == (0, pid, epoch + 1)
                epoch = new_epoch
        consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": "tv2-remote",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("remote-txn", 0, 0)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
        consumer.close()
        assert got == ["r0-0", "r0-1", "r2-0", "r2-1"]
