"""The share-state persister (kesque/server/drivers/share_persister.py) and the share-partition manager's remote
writes, without processes: a fake channel and coordinator lookup, one event loop."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kesque.errors import ErrorCode, KafkaError
from kesque.protocol.messages import Msg, known_fields
from kesque.server.channel import Disconnected
from kesque.server.drivers import share_persister as P
from kesque.server.drivers.share_manager import SharePartitionManager
from kesque.share.partition import ACCEPT, SharePartition, StateBatch
from test_share_coordinator import Shard

TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
KEY = ("g", TID, 0)


class Config:
    def __init__(self, **kw):
        self.kw = {"request.timeout.ms": 2000, **kw}

    def get(self, name):
        return self.kw[name]


class FakeChannel:
    """Answers each request with the next scripted error code (0: success), or raises."""

    def __init__(self, script):
        self.script = list(script)
        self.sent = []

    async def send(self, node, api_key, version, body, timeout_ms=None):
        self.sent.append((node, api_key, body))
        step = self.script.pop(0) if self.script else 0
        if isinstance(step, Exception):
            raise step
        m = Msg(api_key, version)
        part = {
            P.READ: "PartitionResult",
            P.WRITE: "PartitionResult",
            P.INITIALIZE: "PartitionResult",
            P.DELETE: "PartitionResult",
            P.READ_SUMMARY: "PartitionResult",
        }[api_key]
        result = {
            P.READ: "ReadStateResult",
            P.WRITE: "WriteStateResult",
            P.INITIALIZE: "InitializeStateResult",
            P.DELETE: "DeleteStateResult",
            P.READ_SUMMARY: "ReadStateSummaryResult",
        }[api_key]
        # one description serves the five APIs: each takes the fields its schema has (strict Msg refuses others)
        batches = (
            (m("StateBatch", first_offset=7, last_offset=9, delivery_state=0, delivery_count=1),)
            if api_key == P.READ
            else ()
        )
        fields = dict(
            partition=0,
            error_code=step,
            error_message=None,
            state_epoch=2,
            leader_epoch=4,
            start_offset=7,
            delivery_complete_count=3,
            state_batches=batches,
        )
        p = m(part, **{k: v for k, v in fields.items() if k in known_fields(api_key, False)[part]})
        return m(results=(m(result, topic_id=TID, partitions=(p,)),))


class FakeLocal:
    def __init__(self):
        self.calls = []

    def shard(self, key):
        raise KafkaError(ErrorCode.not_coordinator)

    async def write(self, *args):
        self.calls.append(("write", args))


def persister(script, node=2, local=None):
    p = P.DefaultStatePersister(
        1, local or FakeLocal(), lambda ckey: (node, ErrorCode.none, None), FakeChannel(script), Config()
    )
    p.backoff_ms = 1
    return p


def run(coro):
    return asyncio.run(coro)


def test_a_remote_write_goes_to_the_coordinator_and_retries_on_coordinator_errors():
    p = persister([ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, Disconnected("gone"), 0])
    run(p.write(KEY, 7, [StateBatch(7, 9, 2, 1)], 4))
    sent = p.channel.sent
    assert [(n, k) for n, k, _ in sent] == [(2, P.WRITE)] * 4
    body = sent[-1][2]
    part = body.topics[0].partitions[0]
    assert (body.group_id, body.topics[0].topic_id, part.partition, part.start_offset, part.leader_epoch) == (
        "g",
        TID,
        0,
        7,
        4,
    )
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in part.state_batches] == [
        (7, 9, 2, 1)
    ]


def test_other_errors_are_the_callers_at_once():
    p = persister([ErrorCode.fenced_leader_epoch, 0])
    with pytest.raises(KafkaError) as e:
        run(p.write(KEY, 7, [], 4))
    assert e.value.code == ErrorCode.fenced_leader_epoch and len(p.channel.sent) == 1


def test_retries_end_with_the_last_error_after_the_request_timeout():
    p = persister([ErrorCode.coordinator_not_available] * 1000)
    p.timeout_ms = 50
    with pytest.raises(KafkaError) as e:
        run(p.write(KEY, 7, [], 4))
    assert e.value.code == ErrorCode.coordinator_not_available and len(p.channel.sent) > 1


def test_a_local_coordinator_is_called_in_process():
    local = FakeLocal()
    p = persister([], node=1, local=local)
    run(p.write(KEY, 7, [], 4))
    assert p.channel.sent == [] and local.calls == [("write", (KEY, 7, [], 4, -1))]


def test_reads_and_summaries_from_a_remote_coordinator():
    p = persister([0, ErrorCode.unknown_topic_or_partition, 0])
    s = run(p.read(KEY, 4))
    assert (s.state_epoch, s.start_offset, s.batches) == (2, 7, [StateBatch(7, 9, 0, 1)])
    assert run(p.read(KEY, 4)) is None  # never initialized
    sm = run(p.read_summary(KEY))
    assert (sm.state_epoch, sm.leader_epoch, sm.start_offset, sm.delivery_complete_count) == (2, 4, 7, 3)


# ---------------------------------------------------------------------------- the coordinator's fencing


def test_a_write_from_an_older_leader_epoch_is_fenced_and_changes_nothing():
    shard = Shard()
    written = shard.log
    shard.write_state(KEY, 5, [StateBatch(5, 6, 2, 1)], 3)
    with pytest.raises(KafkaError) as e:
        shard.write_state(KEY, 9, [], 2)
    assert e.value.code == ErrorCode.fenced_leader_epoch
    s = shard.read(KEY)
    assert (s.start_offset, s.leader_epoch, len(written)) == (5, 3, 1)
    shard.write_state(KEY, 7, [], 3)  # the same leader goes on
    assert shard.read(KEY).start_offset == 7


# ---------------------------------------------------------------------------- the manager's remote writes


class SlowPersister:
    """Remote writes that take until released; records what each carried."""

    def __init__(self):
        self.local = FakeLocal()
        self.writes = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate = asyncio.Event()

    async def initialize(self, key, start, epoch=-1, state_epoch=-1):
        pass

    async def write(self, key, start, batches, epoch=-1, state_epoch=-1):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.writes.append((start, list(batches)))
        await self.gate.wait()
        self.in_flight -= 1


class StubImage:
    topics_by_id: dict = {}


def manager(persister) -> SharePartitionManager:
    m = object.__new__(SharePartitionManager)
    m.image = StubImage()
    m.partitions, m._uninitialized, m._writers, m.waiters = {}, set(), {}, {}
    m.persister = persister
    return m


def test_remote_writes_go_one_at_a_time_and_the_next_carries_the_latest_state():
    """Writes asked for while one is in flight are coalesced into one next write carrying the
    window as it is then: an older state can never overtake a newer one at the coordinator."""

    async def scenario():
        per = SlowPersister()
        m = manager(per)
        sp = m.partitions[KEY] = SharePartition(0)
        sp.acquire("a", 9, 10, 0)
        f1 = m._persist(KEY, sp)
        await asyncio.sleep(0)  # the first write is in flight
        sp.acknowledge("a", [(0, 1, [ACCEPT])], 0)
        f2 = m._persist(KEY, sp)
        sp.acknowledge("a", [(2, 4, [ACCEPT])], 0)
        f3 = m._persist(KEY, sp)
        per.gate.set()
        assert await asyncio.wait_for(asyncio.gather(f1, f2, f3), 5) == [None, None, None]
        return per

    per = run(scenario())
    assert per.max_in_flight == 1
    assert [start for start, _ in per.writes] == [0, 5]
    assert per.writes[-1][1] == [StateBatch(5, 9, 0, 1)]


def test_a_write_read_before_the_state_was_initialized_again_is_fenced():
    """An offset reset initializes the state again with a new state epoch: a leader still
    writing the window it read before gets FENCED_STATE_EPOCH and changes nothing."""
    shard = Shard()
    assert shard.initialize(KEY, 0, 1, 0).state_epoch == 0
    shard.write_state(KEY, 4, [StateBatch(4, 5, 2, 1)], 1, 0)
    assert shard.initialize(KEY, 0).state_epoch == 1  # AlterShareGroupOffsets: the next epoch
    with pytest.raises(KafkaError) as e:
        shard.write_state(KEY, 6, [], 1, 0)
    assert e.value.code == ErrorCode.fenced_state_epoch
    with pytest.raises(KafkaError) as e:
        shard.initialize(KEY, 9, 1, 1)  # a leader initializing an epoch that is not newer
    assert e.value.code == ErrorCode.fenced_state_epoch
    s = shard.read(KEY)
    assert (s.start_offset, s.state_epoch, s.batches) == (0, 1, [])


class FencingPersister(SlowPersister):
    async def write(self, key, start, batches, epoch=-1, state_epoch=-1):
        raise KafkaError(ErrorCode.fenced_state_epoch)


def test_a_fenced_remote_write_drops_the_share_partition():
    async def scenario():
        m = manager(FencingPersister())
        sp = m.partitions[KEY] = SharePartition(0)
        sp.acquire("a", 9, 10, 0)
        err = await asyncio.wait_for(m._persist(KEY, sp), 5)
        return m, err

    m, err = run(scenario())
    assert err.code == ErrorCode.fenced_state_epoch
    assert KEY not in m.partitions  # the next fetch reads the state again


class LocalShard:
    def __init__(self, shard):
        self._shard = shard

    def shard(self, key):
        return self._shard


def test_a_new_session_rereads_a_share_partition_only_when_its_state_moved():
    """With the coordinator on this broker, a new share session drops (to reread) an idle share
    partition only if its state was initialized again (another state epoch) or deleted; one
    holding acquired records is kept."""
    shard = Shard()
    per = SlowPersister()
    per.local = LocalShard(shard)
    m = manager(per)
    shard.initialize(KEY, 0, 1, 0)
    sp = m.partitions[KEY] = SharePartition(0)
    m.session_opened("g", [(TID, 0)])
    assert m.partitions.get(KEY) is sp  # nothing moved
    shard.initialize(KEY, 0)  # an offset reset answered elsewhere: state epoch 1
    sp.acquire("a", 3, 10, 0)
    m.session_opened("g", [(TID, 0)])
    assert m.partitions.get(KEY) is sp  # records acquired: kept (its next write is fenced)
    sp.release_member("a", 0)
    m.session_opened("g", [(TID, 0)])
    assert KEY not in m.partitions
