"""The share coordinator shard (sans-IO): ShareSnapshot / ShareUpdate records of
``__share_group_state``, merging, snapshots every N writes, and replay after a move."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from kesque.coordinator.runtime import CoordinatorResult, append_and_replay
from kesque.coordinator.share import records as R
from kesque.coordinator.share.runtime import coordinator_key
from kesque.coordinator.share.shard import ShareCoordinatorShard, merge
from kesque.share.partition import ACKNOWLEDGED, ARCHIVED, AVAILABLE, SharePartition, StateBatch

TID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
KEY = ("g", TID, 3)


class Shard:
    """A shard as its runtime runs it: each operation's records are appended to ``log`` and
    replayed; reads and attributes are the shard's."""

    def __init__(self, **kw):
        self.shard = ShareCoordinatorShard(0, **kw)
        self.log: list = []

    def __getattr__(self, name):
        attr = getattr(self.shard, name)
        if not callable(attr):
            return attr

        def run(*args, **kwargs):
            result = attr(*args, **kwargs)
            if isinstance(result, CoordinatorResult):
                return append_and_replay(self.shard, lambda records, *_pid: self.log.extend(records), result)
            return result

        return run


def replayed(log: list) -> ShareCoordinatorShard:
    shard = ShareCoordinatorShard(0)
    for k, v in log:
        shard.replay(k, v)
    return shard


def test_merge_lays_new_batches_over_old_and_drops_below_start():
    old = [StateBatch(0, 9, AVAILABLE, 1)]
    new = [StateBatch(3, 4, ACKNOWLEDGED, 1), StateBatch(12, 12, ARCHIVED, 2)]
    assert merge(2, old, new) == [
        StateBatch(2, 2, AVAILABLE, 1),
        StateBatch(3, 4, ACKNOWLEDGED, 1),
        StateBatch(5, 9, AVAILABLE, 1),
        StateBatch(12, 12, ARCHIVED, 2),
    ]


_batch = st.builds(
    lambda f, n, state, count: StateBatch(f, f + n, state, count),
    st.integers(0, 40),
    st.integers(0, 10),
    st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
    st.integers(0, 3),
)


@given(st.integers(0, 20), st.lists(_batch, max_size=6), st.lists(_batch, max_size=6))
def test_merge_is_the_per_offset_overlay(start, old, new):
    """merge works on ranges; per offset it is: the latest batch holding the offset wins,
    nothing below ``start``, equal neighbours joined into one batch."""
    per_offset = {}
    for b in [*old, *new]:
        for o in range(max(b.first, start), b.last + 1):
            per_offset[o] = (b.state, b.delivery_count)
    got = merge(start, old, new)
    assert {o: (b.state, b.delivery_count) for b in got for o in range(b.first, b.last + 1)} == per_offset
    assert all(a.last < b.first for a, b in zip(got, got[1:]))  # sorted, no overlap
    assert not any(
        a.last + 1 == b.first and (a.state, a.delivery_count) == (b.state, b.delivery_count)
        for a, b in zip(got, got[1:])
    )  # joined


def test_writes_are_updates_then_a_snapshot_and_replay_rebuilds_the_state():
    shard = Shard(records_per_snapshot=3)
    log = shard.log
    shard.initialize(KEY, 0)
    p = SharePartition(0)
    p.acquire("m", 9, 100, 0)
    kinds = []
    for o in range(5):
        p.acknowledge("m", [(o, o, [1])], 0)
        shard.write_state(KEY, p.start_offset, p.state_batches())
        kinds.append(R.decode_key(log[-1][0])[0])
    assert kinds == [R.SHARE_UPDATE, R.SHARE_UPDATE, R.SHARE_SNAPSHOT, R.SHARE_UPDATE, R.SHARE_UPDATE]
    state = replayed(log).read(KEY)
    assert (state.start_offset, state.batches) == (5, [StateBatch(5, 9, AVAILABLE, 1)])
    assert (state.snapshot_epoch, state.state_epoch) == (shard.read(KEY).snapshot_epoch, 0)
    q = SharePartition.restore(state.start_offset, state.batches)
    assert q.acquire("n", 20, 100, 0)[0].first == 5


def test_initialize_again_bumps_the_state_epoch_and_delete_leaves_nothing():
    shard = Shard()
    log = shard.log
    shard.initialize(KEY, 0)
    shard.write_state(KEY, 4, [StateBatch(4, 6, ACKNOWLEDGED, 1)])
    s = shard.initialize(KEY, 100)
    assert (s.state_epoch, s.start_offset, s.batches) == (1, 100, [])
    assert replayed(log).read(KEY).state_epoch == 1
    shard.delete(KEY)
    assert replayed(log).read(KEY) is None


def test_key_layout_is_kafkas():
    k = R.encode_key(R.SHARE_UPDATE, *KEY)
    assert k[:2] == b"\x00\x01" and R.decode_key(k) == (1, {"group_id": "g", "topic_id": TID, "partition": 3})
    assert coordinator_key(*KEY) == "g:a6e4EJ2tEdGAtADAT9QwyA:3"


def test_an_operation_changes_nothing_until_its_records_are_replayed():
    """Kafka's CoordinatorRuntime shape: a write returns its records; the state changes when
    they are replayed (an append that fails leaves it as it was), and the live state is what a
    new leader replays from the log."""
    shard = Shard(records_per_snapshot=3)
    shard.initialize(KEY, 0)
    before = shard.read(KEY)
    result = shard.shard.write_state(KEY, 2, [StateBatch(2, 4, ACKNOWLEDGED, 1)], 5)
    assert shard.read(KEY) is before and [R.decode_key(k)[0] for k, _v in result.records] == [R.SHARE_UPDATE]
    assert shard.shard.delete(KEY).records and shard.read(KEY) is before
    for o in range(4):
        shard.write_state(KEY, o, [StateBatch(o, o, ARCHIVED, 1)], 5)
    live, loaded = shard.read(KEY), replayed(shard.log).read(KEY)
    assert (live.start_offset, live.leader_epoch, live.batches, live.snapshot_epoch, live.updates) == (
        loaded.start_offset,
        loaded.leader_epoch,
        loaded.batches,
        loaded.snapshot_epoch,
        loaded.updates,
    )
    shard.delete(KEY)
    assert shard.read(KEY) is None and replayed(shard.log).read(KEY) is None
    assert shard.shard.delete(KEY).records == []
