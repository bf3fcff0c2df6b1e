"""Partition on a real UnifiedLog with followers (no network): the leader-side wiring of the
replication rules — follower fetches move the high watermark, a moved HW wakes what waits on it
(acks=all produces, consumer fetches) with the bytes it made visible, and KIP-320's diverging
epoch comes back instead of records."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from kesque.config.topic import LogConfig
from kesque.errors import ErrorCode, KafkaError
from kesque.records.records import build_batch
from kesque.replication.delayed import DelayedFetch, DelayedProduce
from kesque.replication.partition import FETCH_HIGH_WATERMARK, Partition, ReplicaEnv
from kesque.server.drivers.delayed import wait_for_acks, wait_for_bytes
from kesque.storage.unified_log import UnifiedLog

NOW = 1_700_000_000_000


class Env(ReplicaEnv):
    """The broker side of a Partition, and the watch lists of a ReplicaManager."""

    def __init__(self):
        self.now = 0
        self.proposals = []
        self.moved = []
        self.partitions = {}
        self.watchers = defaultdict(set)

    def now_ms(self) -> int:
        return self.now

    def alter_partition(self, part, proposal) -> None:
        self.proposals.append(proposal)

    def hw_moved(self, part, visible_bytes: int) -> None:
        self.moved.append(visible_bytes)
        for cb in list(self.watchers[("hw", part.topic, part.partition)]):
            cb((part.topic, part.partition), visible_bytes)

    # the ReplicaManager interface delayed.py uses
    def watch(self, tp, cb, kind="hw"):
        self.watchers[(kind, *tp)].add(cb)

    def unwatch(self, tp, cb, kind="hw"):
        self.watchers[(kind, *tp)].discard(cb)


@pytest.fixture
def leader(tmp_path):
    env = Env()
    lg = UnifiedLog(str(tmp_path / "t-0"), "t", 0, LogConfig(), now_ms=NOW)
    part = Partition("t", 0, None, lg, 1, env)
    part.make_leader([1, 2], [1, 2], 0, 0)
    env.partitions[("t", 0)] = part
    return part, env


def append(part, value: bytes, acks: int = -1):
    return part.append_records_to_leader(
        memoryview(bytearray(build_batch([(None, value, ())], timestamp=NOW))), acks, NOW
    )


def follower_fetch(part, offset: int, last_epoch: int = 0, current_epoch: int = 0):
    return part.read_for_follower(2, offset, last_epoch, current_epoch, 0, -1, 1 << 20, True)


def test_the_hw_waits_for_the_follower_and_wakes_waiters_with_the_visible_bytes(leader):
    part, env = leader
    info = append(part, b"message1")
    assert part.log.high_watermark == 0 and env.moved == []
    check, data = follower_fetch(part, 0)
    assert check.error_code == 0 and data.size == info.size and check.high_watermark == 0
    check, data = follower_fetch(part, 1)  # the follower has offset 0: HW 1
    assert part.log.high_watermark == 1 and env.moved == [info.size]
    assert check.high_watermark == 0  # answered with the HW from before this fetch
    assert part.read(0, 1 << 20, FETCH_HIGH_WATERMARK, True).data.size == info.size


def test_acks_all_completes_once_the_follower_fetched_past_it(leader):
    part, env = leader
    info = append(part, b"m")

    async def run():
        waiting = asyncio.ensure_future(wait_for_acks(env, {("t", 0): info.last_offset + 1}, 5000))
        await asyncio.sleep(0)
        assert not waiting.done()
        follower_fetch(part, 1)
        return await asyncio.wait_for(waiting, 1)

    assert asyncio.run(run()) == {("t", 0): 0}


def test_acks_all_times_out_and_a_consumer_fetch_waits_for_the_hw_not_the_append(leader):
    part, env = leader

    async def run():
        fetch = asyncio.ensure_future(wait_for_bytes(env, [("t", 0)], 1, 5000))
        info = append(part, b"m")
        codes = await wait_for_acks(env, {("t", 0): info.last_offset + 1}, 50)
        assert not fetch.done()  # appended, not yet visible
        follower_fetch(part, 1)
        await asyncio.wait_for(fetch, 1)
        return codes

    assert asyncio.run(run()) == {("t", 0): int(ErrorCode.request_timed_out)}


def test_acks_all_is_refused_below_min_isr_and_accepted_at_rf1(leader, tmp_path):
    part, env = leader
    part.log.config = LogConfig(min_insync_replicas=2)
    part.make_leader([1, 2], [1], 0, 1)  # the follower left the ISR
    with pytest.raises(KafkaError) as e:
        append(part, b"m")
    assert e.value.code == ErrorCode.not_enough_replicas
    assert append(part, b"m", acks=1).first_offset == 0
    # Kafka's effective min ISR is min(min.insync.replicas, replication factor)
    lg = UnifiedLog(str(tmp_path / "u-0"), "u", 0, LogConfig(min_insync_replicas=2), now_ms=NOW)
    single = Partition("u", 0, None, lg, 1, Env())
    single.make_leader([1], [1], 0, 0)
    assert append(single, b"m").first_offset == 0 and lg.high_watermark == 1


def test_a_diverging_follower_gets_the_epoch_end_instead_of_records(leader):
    part, env = leader
    append(part, b"a")
    follower_fetch(part, 1)
    part.make_leader([1, 2], [1, 2], 1, 1)  # epoch 1 starts at offset 1
    append(part, b"b")
    # the follower says it has epoch 0 up to offset 2 (it wrote offset 1 in epoch 0 as a leader)
    check, data = follower_fetch(part, 2, last_epoch=0, current_epoch=1)
    assert data is None and check.diverging_epoch == (0, 1)
    check, _ = follower_fetch(part, 1, last_epoch=0, current_epoch=0)
    assert check.error_code == ErrorCode.fenced_leader_epoch


def test_a_caught_up_follower_outside_the_isr_is_proposed_back(leader):
    part, env = leader
    part.make_leader([1, 2], [1], 0, 1)
    append(part, b"a")
    follower_fetch(part, 1)
    assert [p.kind for p in env.proposals] == ["expand"] and env.proposals[0].isr == [1, 2]
    assert not part.on_alter_partition_response(env.proposals[0], int(ErrorCode.operation_not_attempted), None)
    assert part.repl.pending is None


def test_a_new_leader_answers_offset_not_available_until_its_hw_reaches_its_epoch_start(tmp_path):
    """KIP-207: a follower that becomes leader with records its high watermark has not reached
    (the old leader's HW was ahead) tells a consumer's ListOffsets(latest) OFFSET_NOT_AVAILABLE
    rather than an end below records the old leader already served; timestamps not found below
    the HW likewise; earliest and a replica's request are answered. A TransactionalMessageCopier
    took such an end as 'done' after a broker kill and stopped short."""
    from types import SimpleNamespace

    from kesque.server.apis.offsets import EARLIEST, LATEST, OffsetApis

    env = Env()
    lg = UnifiedLog(str(tmp_path / "t-0"), "t", 0, LogConfig(), now_ms=NOW)
    part = Partition("t", 0, None, lg, 2, env)
    part.make_follower(1, [1, 2], 0, 0)
    part.log.append_raw(build_batch([(None, b"a", ()), (None, b"b", ())], timestamp=NOW), NOW)  # HW stays 0
    part.make_leader([1, 2], [1, 2], 1, 1)
    env.partitions[("t", 0)] = part
    apis = OffsetApis(replica_manager=SimpleNamespace(get_partition=lambda t, p: part))

    def ask(timestamp, replica_id=-1):
        try:
            return apis._offset_for("t", 0, timestamp, -1, False, replica_id)[1]
        except KafkaError as e:
            return e.code

    assert part.log.high_watermark == 0 and part.log.log_end_offset == 2
    assert ask(LATEST) == ErrorCode.offset_not_available
    assert ask(NOW + 1) == ErrorCode.offset_not_available  # nothing at or after it below the HW
    assert ask(EARLIEST) == 0
    assert ask(LATEST, replica_id=1) == 2  # a follower asks for the log end
    part.read_for_follower(1, 2, 0, 1, 0, -1, 1 << 20, True)  # the follower (node 1) has everything: HW 2
    assert part.log.high_watermark == 2 and ask(LATEST) == 2


def test_delayed_operations_are_checks_without_a_loop():
    """replication.delayed, sans-IO: a fetch completes on its bytes (a held-back partition's do
    not count) or on a role change (0 bytes); an acks=all produce settles each partition from
    its status, a gone partition as NOT_LEADER_OR_FOLLOWER or (offline) KAFKA_STORAGE_ERROR, and
    what is left at expiry is REQUEST_TIMED_OUT."""
    fetch = DelayedFetch(10, skip=lambda tp: tp == ("held", 0))
    assert not fetch.try_complete(("t", 0), 6)
    assert not fetch.try_complete(("held", 0), 100)
    assert fetch.try_complete(("t", 1), 4)
    assert DelayedFetch(10).try_complete(("t", 0), 0)

    class Part:
        def __init__(self, status):
            self.status = status

        def acks_all_status(self, end):
            return self.status

    class RM:
        partitions = {("a", 0): Part((False, 0)), ("a", 1): Part((True, 0)), ("a", 2): Part((False, 0))}
        offline_partitions = {("off", 0)}

    pending = {("a", 0): 5, ("a", 1): 5, ("a", 2): 5, ("gone", 0): 1, ("off", 0): 1}
    op = DelayedProduce(RM, pending)
    assert not op.completed
    assert op.waiting() == [("a", 0), ("a", 2)]
    assert op.result == {
        ("a", 1): ErrorCode.none,
        ("gone", 0): ErrorCode.not_leader_or_follower,
        ("off", 0): ErrorCode.kafka_storage_error,
    }
    RM.partitions[("a", 0)].status = (False, int(ErrorCode.not_enough_replicas_after_append))
    assert not op.try_complete(("a", 0), 0)
    assert not op.try_complete(("other", 0), 0)
    assert op.expire() == {
        **op.result,
        ("a", 0): ErrorCode.not_enough_replicas_after_append,
        ("a", 2): ErrorCode.request_timed_out,
    }
    RM.partitions[("a", 2)].status = (True, 0)
    assert DelayedProduce(RM, {("a", 2): 5}).completed
