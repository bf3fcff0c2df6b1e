"""A coordinator write is answered only once committed (the high watermark of its partition
passed it), as Kafka's CoordinatorRuntime answers (issue 14, item 6).

One node in this process: the high watermark of ``__consumer_offsets-0`` is held where it is (a
follower that never fetches, in effect), so that an OffsetCommit's record is appended but not
committed. Whether an answer went out is told without timing: a round trip on a second
connection after the append is seen guarantees that an answer sent with the append has reached
the first connection's socket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import select
import threading
import time

import pytest
from confluent_kafka import Producer

from kesque.coordinator.runtime import CoordinatorHost, CoordinatorRuntime, KeyedTimer
from kesque.metadata.image import Delta
from kesque.protocol.api_keys import ApiKeys
from kesque.replication.partition import Partition
from kesque.server.drivers.timers import LoopScheduler
from kesque.testing.broker import Broker
from wire import Api, Msg, WireClient

GROUP = "g-commit"
TOPIC = "t-commit"
NONE, REQUEST_TIMED_OUT, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 7, 15, 16


@pytest.fixture
def node(tmp_path):
    b = Broker(
        data_dir=str(tmp_path / "data"),
        mode="thread",
        config={
            "offsets.topic.num.partitions": "1",
            "offsets.commit.timeout.ms": "30000",
            "transaction.state.log.num.partitions": "1",
        },
    ).start()
    try:
        with WireClient(b.bootstrap_servers) as c:
            Api(c).create_topic(TOPIC)
            find_coordinator(c)
            assert commit(c, 1).topics[0].partitions[0].error_code == NONE  # __consumer_offsets is there
        yield b
    finally:
        b.stop()


def find_coordinator(c: WireClient):
    m = Msg(ApiKeys.FIND_COORDINATOR, 4)
    r = c.request(ApiKeys.FIND_COORDINATOR, 4, m(key_type=0, coordinator_keys=(GROUP,)))
    assert r.coordinators[0].error_code == NONE


def commit_request(offset: int, group: str = GROUP):
    m = Msg(ApiKeys.OFFSET_COMMIT, 8)
    return m(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            m(
                "OffsetCommitRequestTopic",
                name=TOPIC,
                partitions=(
                    m(
                        "OffsetCommitRequestPartition",
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def commit(c: WireClient, offset: int):
    return c.request(ApiKeys.OFFSET_COMMIT, 8, commit_request(offset))


def on_loop(b: Broker, fn):
    """Run ``fn`` on the broker's event loop (where its state is changed) and return its result."""

    async def run():
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), b._loop).result(10)


def offsets_partition(b: Broker, topic: str = "__consumer_offsets"):
    return b._server.replica_manager.partitions[(topic, 0)]


def hold_high_watermark(b: Broker, topic: str = "__consumer_offsets") -> None:
    part = offsets_partition(b, topic)
    on_loop(b, lambda: setattr(part, "maybe_increment_high_watermark", lambda: False))


def release_high_watermark(b: Broker, topic: str = "__consumer_offsets") -> None:
    part = offsets_partition(b, topic)

    def release():
        del part.maybe_increment_high_watermark
        part.maybe_increment_high_watermark()

    on_loop(b, release)


def send_uncommitted_commit(b: Broker, c: WireClient, offset: int) -> None:
    """Send an OffsetCommit and return once its record is in the log above the high watermark
    and any answer sent with the append would be readable on ``c``."""
    send_uncommitted(b, c, "__consumer_offsets", 8, 8, commit_request(offset))


def send_uncommitted(b: Broker, c: WireClient, topic: str, api_key: int, version: int, body) -> None:
    lg = offsets_partition(b, topic).log
    end = lg.log_end_offset
    c.send(api_key, version, body)
    deadline = time.monotonic() + 10
    while lg.log_end_offset == end:
        assert time.monotonic() < deadline, "the commit was never appended"
        time.sleep(0.01)
    assert lg.high_watermark < lg.log_end_offset
    with WireClient(b.bootstrap_servers) as other:
        Api(other).api_versions()


def elect(b: Broker, topic: str, leader: int, isr: list[int] | None = None) -> None:
    """Partition 0 of ``topic`` gets ``leader`` (1 is this broker) and ``isr`` in a new leader
    epoch, as the controller's next image would say."""

    def change():
        server = b._server
        t = server.image.topic(topic)
        reg = t.partitions[0]
        t.partitions[0] = dataclasses.replace(
            reg,
            leader=leader,
            replicas=[1, 2],
            isr=isr or [leader],
            leader_epoch=reg.leader_epoch + 1,
            partition_epoch=reg.partition_epoch + 1,
        )
        server.replica_manager.apply_delta(Delta(changed_partitions={(t.topic_id, 0)}))

    on_loop(b, change)


def spin(b: Broker) -> None:
    """Let the broker's event loop turn a few times (what it had scheduled runs)."""

    async def turns():
        for _ in range(20):
            await asyncio.sleep(0)

    asyncio.run_coroutine_threadsafe(turns(), b._loop).result(10)


def answered(c: WireClient) -> bool:
    return bool(c._buf) or bool(select.select([c.sock], [], [], 0)[0])


def test_an_offset_commit_is_answered_once_the_high_watermark_passes_its_record(node):
    with WireClient(node.bootstrap_servers) as c:
        hold_high_watermark(node)
        send_uncommitted_commit(node, c, 5)
        assert not answered(c), "answered before the commit record was committed"
        release_high_watermark(node)
        _corr, r = c.recv(ApiKeys.OFFSET_COMMIT, 8)
        assert r.topics[0].partitions[0].error_code == NONE


def test_an_offset_commit_whose_coordinator_loses_leadership_meanwhile_gets_not_coordinator(node):
    with WireClient(node.bootstrap_servers) as c:
        hold_high_watermark(node)
        send_uncommitted_commit(node, c, 6)

        elect(node, "__consumer_offsets", 2)
        _corr, r = c.recv(ApiKeys.OFFSET_COMMIT, 8)
        assert r.topics[0].partitions[0].error_code == NOT_COORDINATOR
        assert 0 not in node._server.group_coordinator.shards  # its uncommitted state is gone


def test_an_offset_commit_not_committed_in_offsets_commit_timeout_gets_coordinator_not_available(tmp_path):
    b = Broker(
        data_dir=str(tmp_path / "data"),
        mode="thread",
        config={"offsets.topic.num.partitions": "1", "offsets.commit.timeout.ms": "200"},
    ).start()
    try:
        with WireClient(b.bootstrap_servers) as c:
            Api(c).create_topic(TOPIC)
            find_coordinator(c)
            assert commit(c, 1).topics[0].partitions[0].error_code == NONE
            hold_high_watermark(b)
            assert commit(c, 2).topics[0].partitions[0].error_code == COORDINATOR_NOT_AVAILABLE
    finally:
        b.stop()


def open_transaction(node, txn_id: str):
    """A producer with an open transaction holding one record of TOPIC-0; the data partition's
    and the __transaction_state partition's logs."""
    p = Producer({"bootstrap.servers": node.bootstrap_servers, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, value=b"v", partition=0)
    assert p.flush(30) == 0
    return p, offsets_partition(node, TOPIC).log, offsets_partition(node, "__transaction_state").log


def test_markers_are_written_only_once_the_prepare_commit_record_is_committed(node):
    """A coordinator that failed over before its PrepareCommit was committed must not have
    sent markers: the next one may never know the transaction was committed."""
    p, data, txn_log = open_transaction(node, "tx-commit")
    assert data.last_stable_offset < data.log_end_offset  # the transaction is open on the data partition
    hold_high_watermark(node, "__transaction_state")
    end = txn_log.log_end_offset
    committing = threading.Thread(target=p.commit_transaction, args=(30,))
    committing.start()
    try:
        deadline = time.monotonic() + 10
        while txn_log.log_end_offset == end:  # PrepareCommit appended, not committed
            assert time.monotonic() < deadline, "EndTxn never wrote PrepareCommit"
            time.sleep(0.01)
        spin(node)  # a marker sent without waiting would be written by now
        assert data.last_stable_offset < data.log_end_offset, "a marker was written before PrepareCommit committed"
    finally:
        release_high_watermark(node, "__transaction_state")
        committing.join(30)
    assert not committing.is_alive()
    deadline = time.monotonic() + 10
    while data.last_stable_offset < data.log_end_offset:  # the COMMIT marker
        assert time.monotonic() < deadline, "no marker after PrepareCommit was committed"
        time.sleep(0.01)


def test_write_txn_markers_answers_a_marker_once_it_is_committed(node):
    """Kafka appends markers with acks=all: the coordinator counts a marker only once the
    partition's high watermark passed it."""
    p = Producer({"bootstrap.servers": node.bootstrap_servers, "transactional.id": "tx-markers", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, value=b"v", partition=0)
    assert p.flush(30) == 0
    tc = node._server.txn_coordinator
    txn = on_loop(node, lambda: tc.shard_for("tx-markers").txns["tx-markers"])
    m = Msg(ApiKeys.WRITE_TXN_MARKERS, 1)
    body = m(
        markers=(
            m(
                "WritableTxnMarker",
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                transaction_result=True,
                coordinator_epoch=tc.shard_for("tx-markers").coordinator_epoch,
                topics=(m("WritableTxnMarkerTopic", name=TOPIC, partition_indexes=(0,)),),
            ),
        )
    )
    hold_high_watermark(node, TOPIC)
    with WireClient(node.bootstrap_servers) as c:
        send_uncommitted(node, c, TOPIC, 27, 1, body)
        assert not answered(c), "the marker was answered before it was committed"
        release_high_watermark(node, TOPIC)
        _corr, r = c.recv(ApiKeys.WRITE_TXN_MARKERS, 1)
        assert r.markers[0].topics[0].partitions[0].error_code == NONE


def test_a_transaction_log_write_below_min_insync_replicas_is_refused_before_it_is_applied(node, monkeypatch):
    """The transaction log is appended with acks=-1 (Kafka's TransactionStateManager): below
    min.insync.replicas nothing is written, and the client retries on COORDINATOR_NOT_AVAILABLE."""
    with WireClient(node.bootstrap_servers) as c:
        m = Msg(ApiKeys.FIND_COORDINATOR, 4)
        deadline = time.monotonic() + 10
        while (
            c.request(ApiKeys.FIND_COORDINATOR, 4, m(key_type=1, coordinator_keys=("tx-isr",)))
            .coordinators[0]
            .error_code
        ):
            assert time.monotonic() < deadline, "__transaction_state was not created"
            time.sleep(0.05)
        txn_log = offsets_partition(node, "__transaction_state").log
        end = txn_log.log_end_offset
        monkeypatch.setattr(Partition, "is_under_min_isr", property(lambda p: p.topic == "__transaction_state"))
        m = Msg(ApiKeys.INIT_PRODUCER_ID, 4)
        r = c.request(
            ApiKeys.INIT_PRODUCER_ID,
            4,
            m(transactional_id="tx-isr", transaction_timeout=60000, producer_id=-1, producer_epoch=-1),
        )
        assert r.error_code == COORDINATOR_NOT_AVAILABLE
        assert txn_log.log_end_offset == end


def test_a_share_acknowledgement_is_answered_once_the_share_state_is_committed(tmp_path):
    from test_share_groups import SHARE_CONFIG, _acquired, _share_fetch, _wire_group, share_ack_body

    b = Broker(
        data_dir=str(tmp_path / "data"),
        mode="thread",
        config={**SHARE_CONFIG, "share.coordinator.state.topic.num.partitions": "1"},
    ).start()
    try:
        _topic, group, tid = _wire_group(b, 2)
        with WireClient(b.bootstrap_servers) as c:
            assert _acquired(_share_fetch(c, group, "m1", 0, tid)) == [(0, 1, 1)]
            hold_high_watermark(b, "__share_group_state")
            send_uncommitted(b, c, "__share_group_state", 79, 1, share_ack_body(group, "m1", 1, tid, [(0, 1, 1)]))
            assert not answered(c), "answered before the share state was committed"
            release_high_watermark(b, "__share_group_state")
            _corr, r = c.recv(ApiKeys.SHARE_ACKNOWLEDGE, 1)
            assert r.error_code == NONE and r.responses[0].partitions[0].error_code == NONE
    finally:
        b.stop()


def commit_above_the_high_watermark(node, p, txn_log) -> threading.Thread:
    """Hold __transaction_state's high watermark and start ``p``'s commit in a thread; returns
    it once EndTxn has appended PrepareCommit (above the high watermark)."""
    hold_high_watermark(node, "__transaction_state")
    end = txn_log.log_end_offset
    committing = threading.Thread(target=p.commit_transaction, args=(30,))
    committing.start()
    deadline = time.monotonic() + 10
    while txn_log.log_end_offset == end:
        assert time.monotonic() < deadline, "EndTxn never wrote PrepareCommit"
        time.sleep(0.01)
    return committing


def test_a_reloaded_prepare_commit_above_the_high_watermark_gets_its_markers_once_committed(node):
    """A new leader of a __transaction_state partition replays records the previous leader
    wrote but the high watermark had not passed: their markers wait for it."""
    p, data, txn_log = open_transaction(node, "tx-reload")
    committing = commit_above_the_high_watermark(node, p, txn_log)
    try:
        elect(node, "__transaction_state", 2)
        # leads again, with a follower that has not fetched yet: PrepareCommit is replayed, and
        # stays above the high watermark
        elect(node, "__transaction_state", 1, isr=[1, 2])
        spin(node)
        assert txn_log.high_watermark < txn_log.log_end_offset
        assert data.last_stable_offset < data.log_end_offset, "a marker was written for an uncommitted PrepareCommit"
    finally:
        release_high_watermark(node, "__transaction_state")
        elect(node, "__transaction_state", 1)  # the follower left the ISR: the HW moves
        committing.join(30)
    assert not committing.is_alive()
    deadline = time.monotonic() + 10
    while data.last_stable_offset < data.log_end_offset:
        assert time.monotonic() < deadline, "no marker after PrepareCommit was committed"
        time.sleep(0.01)


def test_a_partition_unloaded_with_a_write_pending_holds_up_no_other_answer():
    """``uncommitted()`` of every partition (what a ShareAcknowledge waits for) must not keep
    the end offset of a partition this broker no longer leads: every answer would fail."""

    class Part:
        def __init__(self, leader: bool, hw: int):
            self.is_leader = leader
            self.log = type("L", (), {"high_watermark": hw})()

    class Runtime(CoordinatorRuntime):
        TOPIC = "__share_group_state"

    rm = type(
        "RM", (), {"partitions": {("__share_group_state", 0): Part(True, 3), ("__share_group_state", 1): Part(True, 3)}}
    )()
    rt = Runtime(CoordinatorHost(scheduler=None, clock=None, config=None, replica_manager=rm, image=lambda: None))
    rt.shards = {0: object(), 1: object()}
    rt.write_ends = {0: 5, 1: 7}
    rm.partitions[("__share_group_state", 0)].is_leader = False
    rt._unload(0)
    assert rt.uncommitted() == {("__share_group_state", 1): 7}


def test_coordinator_timers_run_on_the_hosts_scheduler():
    """KeyedTimer (sans-IO) on the event loop's scheduler (kesque.server.drivers.timers): a key
    scheduled again replaces its timer, a partition's timers go with its prefix, a timer that
    raises is logged and forgotten."""
    fired = []

    async def main():
        timer = KeyedTimer(LoopScheduler(asyncio.get_running_loop()))
        timer.schedule("0/a", 50, lambda: fired.append("first a"))
        timer.schedule("0/a", 1, lambda: fired.append("a"))  # replaces the first
        timer.schedule("0/b", 1, lambda: fired.append("b"))
        timer.schedule("1/c", 1, lambda: fired.append("c"))
        timer.schedule("1/boom", 0, lambda: 1 / 0)
        timer.cancel_prefixed("1/")
        timer.schedule("2/boom", 0, lambda: 1 / 0)
        await asyncio.sleep(0.1)
        assert timer.handles == {}

    asyncio.run(main())
    assert sorted(fired) == ["a", "b"]


# ---------------------------------------------------------------------- reads (committed state only)


def fetch_offset(b: Broker, group: str = GROUP):
    """The committed offset of TOPIC-0 in ``group`` (OffsetFetch v7, on its own connection)."""
    m = Msg(ApiKeys.OFFSET_FETCH, 7)
    with WireClient(b.bootstrap_servers) as c:
        r = c.request(
            ApiKeys.OFFSET_FETCH,
            7,
            m(
                group_id=group,
                topics=(m("OffsetFetchRequestTopic", name=TOPIC, partition_indexes=(0,)),),
                require_stable=False,
            ),
        )
    if r.error_code:
        return r.error_code, None
    return r.error_code, r.topics[0].partitions[0].committed_offset


def listed_groups(b: Broker) -> dict:
    m = Msg(ApiKeys.LIST_GROUPS, 4)
    with WireClient(b.bootstrap_servers) as c:
        r = c.request(ApiKeys.LIST_GROUPS, 4, m(states_filter=()))
    return {g.group_id: g.group_state for g in r.groups}


def described_state(b: Broker, group: str) -> str:
    m = Msg(ApiKeys.DESCRIBE_GROUPS, 5)
    with WireClient(b.bootstrap_servers) as c:
        r = c.request(ApiKeys.DESCRIBE_GROUPS, 5, m(groups=(group,), include_authorized_operations=False))
    return r.groups[0].group_state


def test_an_offset_fetch_never_sees_an_uncommitted_offset_and_sees_it_once_committed(node):
    """Kafka reads at the partition's last committed offset: an OffsetCommit appended but not
    committed is invisible to OffsetFetch; once the HW passes it (the commit is answered) every
    read sees it, also through a committed view that was built before (caught up, not rebuilt)."""
    gc = node._server.group_coordinator
    with WireClient(node.bootstrap_servers) as c:
        hold_high_watermark(node)
        send_uncommitted_commit(node, c, 5)
        assert fetch_offset(node) == (NONE, 1)  # not 5: a failover may still lose it
        release_high_watermark(node)
        assert c.recv(ApiKeys.OFFSET_COMMIT, 8)[1].topics[0].partitions[0].error_code == NONE
        assert fetch_offset(node) == (NONE, 5)  # the read after one's own commit sees it

        hold_high_watermark(node)
        send_uncommitted_commit(node, c, 7)
        assert fetch_offset(node) == (NONE, 5)  # the view replayed what was committed since
        release_high_watermark(node)
        assert c.recv(ApiKeys.OFFSET_COMMIT, 8)[1].topics[0].partitions[0].error_code == NONE
    assert fetch_offset(node) == (NONE, 7)
    assert 0 in gc.views


def test_a_read_with_nothing_uncommitted_answers_from_the_shard_itself(node):
    """No committed view is built (nor replayed into) while the high watermark is at the log end."""
    gc = node._server.group_coordinator
    for offset in (2, 3):
        with WireClient(node.bootstrap_servers) as c:
            assert commit(c, offset).topics[0].partitions[0].error_code == NONE
        assert fetch_offset(node) == (NONE, offset)
    assert on_loop(node, lambda: gc.read_shard(GROUP)) is gc.shards[0]
    assert gc.views == {}


def test_a_group_made_by_an_uncommitted_write_is_neither_listed_nor_described(node):
    with WireClient(node.bootstrap_servers) as c:
        hold_high_watermark(node)
        send_uncommitted(node, c, "__consumer_offsets", 8, 8, commit_request(3, "g-new"))
        assert "g-new" not in listed_groups(node)
        assert GROUP in listed_groups(node)
        assert described_state(node, "g-new") == "Dead"
        assert fetch_offset(node, "g-new") == (NONE, -1)
        release_high_watermark(node)
        assert c.recv(ApiKeys.OFFSET_COMMIT, 8)[1].topics[0].partitions[0].error_code == NONE
    assert listed_groups(node)["g-new"] == "Empty"
    assert described_state(node, "g-new") == "Empty"
    assert fetch_offset(node, "g-new") == (NONE, 3)


def test_a_read_whose_coordinator_lost_leadership_gets_not_coordinator(node):
    gc = node._server.group_coordinator
    with WireClient(node.bootstrap_servers) as c:
        hold_high_watermark(node)
        send_uncommitted_commit(node, c, 9)
        assert fetch_offset(node) == (NONE, 1)
        assert 0 in gc.views
        elect(node, "__consumer_offsets", 2)
        assert c.recv(ApiKeys.OFFSET_COMMIT, 8)[1].topics[0].partitions[0].error_code == NOT_COORDINATOR
        assert fetch_offset(node)[0] == NOT_COORDINATOR
        assert 0 not in gc.views  # unloaded with the shard


def describe_txn(b: Broker, txn_id: str) -> str:
    m = Msg(ApiKeys.DESCRIBE_TRANSACTIONS, 0)
    with WireClient(b.bootstrap_servers) as c:
        r = c.request(ApiKeys.DESCRIBE_TRANSACTIONS, 0, m(transactional_ids=(txn_id,)))
    return r.transaction_states[0].transaction_state


def listed_txns(b: Broker) -> dict:
    m = Msg(ApiKeys.LIST_TRANSACTIONS, 0)
    with WireClient(b.bootstrap_servers) as c:
        r = c.request(ApiKeys.LIST_TRANSACTIONS, 0, m(state_filters=(), producer_id_filters=()))
    return {t.transactional_id: t.transaction_state for t in r.transaction_states}


def test_describe_and_list_transactions_show_only_the_committed_transaction_state(node):
    """An EndTxn whose PrepareCommit is appended but not committed: the transaction is still
    Ongoing to every reader (Kafka applies transaction state only once the write is committed)."""
    p, _data, txn_log = open_transaction(node, "tx-read")
    assert describe_txn(node, "tx-read") == "Ongoing"
    committing = commit_above_the_high_watermark(node, p, txn_log)
    try:
        tc = node._server.txn_coordinator
        assert on_loop(node, lambda: tc.shard_for("tx-read").txns["tx-read"].state.kafka_name) == "PrepareCommit"
        assert describe_txn(node, "tx-read") == "Ongoing"
        assert listed_txns(node)["tx-read"] == "Ongoing"
    finally:
        release_high_watermark(node, "__transaction_state")
        committing.join(30)
    assert not committing.is_alive()
    deadline = time.monotonic() + 10
    while describe_txn(node, "tx-read") != "CompleteCommit":
        assert time.monotonic() < deadline, "the committed transaction state never showed"
        time.sleep(0.01)


def test_a_classic_group_in_the_committed_view_is_described_as_it_is_now():
    """Kafka's describeGroups/listGroups look a classic group up at the committed offset but
    describe the live object (a classic group keeps its join state in memory only); a group
    only the uncommitted state has is not there."""
    from kesque.coordinator.group.classic import PREPARING_REBALANCE, STABLE, ClassicGroup
    from kesque.coordinator.group.runtime import GroupCoordinator

    gc = GroupCoordinator.__new__(GroupCoordinator)
    live = type("Shard", (), {})()
    live.partition, live.groups = 0, {"g": ClassicGroup("g"), "new": ClassicGroup("new")}
    live.groups["g"].state = PREPARING_REBALANCE
    view = type("Shard", (), {})()
    view.partition, view.groups = 0, {"g": ClassicGroup("g")}
    view.groups["g"].state = STABLE
    view.list_groups = lambda: [("g", "", STABLE, "classic")]
    gc.shards = {0: live}
    gc.partition_for = lambda _key: 0
    gc._read = lambda _p, _shard: view
    assert gc.read_group("g") is live.groups["g"]
    assert gc.read_group("new") is None
    assert gc.list_groups() == [("g", "", PREPARING_REBALANCE, "classic")]
