"""The replication rules of one partition (kesque/replication/replica_state.py), leader and
follower side, on the simulator's in-memory log and on the real UnifiedLog. Each test names the rule it
breaks when that rule is removed."""

from __future__ import annotations

import pytest

from kesque.errors import ErrorCode as E
from kesque.records.records import build_batch
from kesque.replication.replica_state import (
    FETCHING,
    TRUNCATING,
    WAIT_FOR_METADATA,
    AlterPartitionReply,
    FetchPartitionResponse,
    FollowerFetch,
    LeaderReplication,
    StorageReplicaLog,
)
from kesque.sim.replication import MemLog

LAG = 1000


def leader_log(*epochs_values) -> MemLog:
    """A log holding ``(epoch, count)`` runs of records."""
    log = MemLog()
    v = 0
    for epoch, n in epochs_values:
        for _ in range(n):
            v += 1
            log.append(epoch, v)
    return log


def leader(isr=(1, 2, 3), replicas=(1, 2, 3), min_isr=2, epoch=0, log=None, now=0, epochs=None):
    """Broker 1 leading, every follower having fetched up to the log end (so in sync)."""
    log = log if log is not None else leader_log((0, 5))
    rep = LeaderReplication(
        1,
        min_insync_replicas=min_isr,
        replica_lag_time_max_ms=LAG,
        broker_epoch_of=(lambda b: (epochs or {}).get(b, 10)),
    )
    rep.make_leader(list(replicas), list(isr), epoch, 0, log, now)
    return rep, log


def fetch(rep, log, b, offset, now, last_epoch=-1, current_epoch=0, broker_epoch=10):
    return rep.on_follower_fetch(b, offset, last_epoch, current_epoch, 0, broker_epoch, log, now)


# -- the high watermark -------------------------------------------------------------------------------
def test_hw_is_the_lowest_log_end_of_the_isr():
    rep, log = leader()
    assert log.high_watermark == 0  # a new leader knows no follower's position
    fetch(rep, log, 2, 5, 1)
    assert log.high_watermark == 0  # 3 is in the ISR and unknown
    fetch(rep, log, 3, 3, 2)
    assert log.high_watermark == 3
    fetch(rep, log, 3, 5, 3)
    assert log.high_watermark == 5


def test_hw_does_not_move_while_the_isr_is_below_min_insync_replicas():
    """KIP-966: with ISR {1} and min.insync.replicas 2 an append stays above the HW."""
    rep, log = leader(isr=(1,), replicas=(1, 2, 3))
    log.append(0, 99)
    assert not rep.after_append(log, 1)
    assert log.high_watermark == 0
    rep2, log2 = leader(isr=(1,), replicas=(1,), min_isr=2)  # effective min ISR: min(2, RF 1)
    assert log2.high_watermark == 5


def test_a_caught_up_follower_outside_the_isr_holds_the_hw_back_unless_ineligible():
    rep, log = leader(isr=(1, 2))
    fetch(rep, log, 3, 4, 1)
    fetch(rep, log, 2, 5, 1)  # 3 is within the lag: the HW waits for it
    assert log.high_watermark == 4
    rep, log = leader(isr=(1, 2), epochs={3: None})  # 3 is fenced: not eligible, not waited for
    fetch(rep, log, 3, 4, 1, broker_epoch=10)
    fetch(rep, log, 2, 5, 1)
    assert log.high_watermark == 5


# -- acks -------------------------------------------------------------------------------------------------
def test_acks_all_rules():
    rep, log = leader(isr=(1,), replicas=(1, 2, 3))
    assert rep.check_append(-1) == E.not_enough_replicas
    assert rep.check_append(1) == 0
    rep, log = leader()
    fetch(rep, log, 2, 5, 1)
    assert rep.acks_all_status(5, log) == (False, 0)
    fetch(rep, log, 3, 5, 1)
    assert rep.acks_all_status(5, log) == (True, 0)
    rep.isr = [1]  # the ISR shrank after the append
    assert rep.acks_all_status(5, log) == (True, E.not_enough_replicas_after_append)
    rep.make_follower(2, [1, 2, 3], 1, 1)
    assert rep.acks_all_status(5, log) == (False, E.not_leader_or_follower)
    assert rep.check_append(1) == E.not_leader_or_follower


# -- ISR expansion and shrink ---------------------------------------------------------------------------
def test_expand_once_at_the_hw_and_the_epoch_start_then_the_hw_waits_for_the_new_member():
    log = leader_log((0, 5))
    log.high_watermark = 3
    rep, log = leader(isr=(1, 2), log=log, epoch=1)  # epoch 1 starts at 5
    assert fetch(rep, log, 3, 4, 1, current_epoch=1).alter is None  # >= HW but below the epoch start
    chk = fetch(rep, log, 3, 5, 2, current_epoch=1)
    assert chk.alter is not None and chk.alter.kind == "expand" and chk.alter.isr == [1, 2, 3]
    assert chk.alter.new_isr == ((1, -1), (2, -1), (3, 10))
    assert rep.maximal_isr == [1, 2, 3] and rep.isr == [1, 2]
    assert fetch(rep, log, 2, 5, 3, current_epoch=1).alter is None  # one proposal at a time
    log.append(1, 50)
    fetch(rep, log, 2, 6, 4, current_epoch=1)
    assert log.high_watermark == 5  # the pending member counts: it is at 5


def test_no_expansion_with_another_broker_epoch():
    rep, log = leader(isr=(1, 2), epochs={3: 11})
    assert fetch(rep, log, 3, 5, 1, broker_epoch=10).error_code == E.not_leader_or_follower  # stale
    rep, log = leader(isr=(1, 2), epochs={3: 11})  # a newer epoch than the image's: not yet
    assert fetch(rep, log, 3, 5, 1, broker_epoch=12).alter is None
    rep, log = leader(isr=(1, 2), epochs={3: 10})
    assert fetch(rep, log, 3, 5, 1, broker_epoch=10).alter is not None


def test_no_expansion_below_the_hw_and_one_proposal_at_a_time():
    rep, log = leader(isr=(1, 2), replicas=(1, 2, 3, 4))  # the epoch starts at 5
    log.append(0, 6)
    log.append(0, 7)
    fetch(rep, log, 2, 7, 1)
    assert log.high_watermark == 7
    assert fetch(rep, log, 3, 6, 2).alter is None  # past the epoch start, below the HW
    assert fetch(rep, log, 3, 7, 3).alter is not None
    assert fetch(rep, log, 4, 7, 4).alter is None  # 3's expansion is in flight


def test_shrink_after_the_lag_and_the_leaving_member_still_holds_the_hw():
    rep, log = leader()
    fetch(rep, log, 2, 5, 100)
    fetch(rep, log, 3, 5, 100)
    log.append(0, 60)
    fetch(rep, log, 2, 6, 200)
    assert rep.maybe_shrink_isr(log, 100 + LAG) is None  # 3 caught up at 100: within the lag
    p = rep.maybe_shrink_isr(log, 101 + LAG)
    assert p.kind == "shrink" and p.isr == [1, 2] and p.changed == {3}
    log.append(0, 61)
    fetch(rep, log, 2, 7, 1200)
    assert log.high_watermark == 5  # still waiting for 3 until the shrink commits
    retry, hw = rep.on_alter_partition_response(p, 0, AlterPartitionReply(0, 1, [1, 2], 0, 1), log, 1200)
    assert (retry, hw) == (False, True) and log.high_watermark == 7 and rep.partition_epoch == 1


def test_caught_up_time_counts_a_fetch_that_reached_the_previous_leader_end():
    """Kafka's Replica: a follower that fetches up to the leader's end of its previous fetch was
    caught up at that previous fetch, even if the leader has appended since."""
    rep, log = leader()
    fetch(rep, log, 2, 5, 100)
    log.append(0, 6)
    fetch(rep, log, 2, 5, 900)  # reached the end seen at 100 (5): caught up at 100
    log.append(0, 7)
    fetch(rep, log, 2, 6, 1500)  # reached the end seen at 900 (6): caught up at 900
    assert rep.followers[2].last_caught_up_time == 900


@pytest.mark.parametrize(
    "error,retry,pending",
    [
        (E.ineligible_replica, False, False),
        (E.operation_not_attempted, False, False),
        (E.invalid_update_version, False, True),
        (E.fenced_leader_epoch, False, True),
        (E.new_leader_elected, False, True),
        (E.unknown_server_error, True, True),
    ],
)
def test_alter_partition_errors(error, retry, pending):
    rep, log = leader(isr=(1, 2))
    p = fetch(rep, log, 3, 5, 1).alter
    assert rep.on_alter_partition_response(p, int(error), None, log, 2) == (retry, False)
    assert (rep.pending is p) == pending


def test_alter_partition_answers_that_are_stale_are_ignored():
    rep, log = leader(isr=(1, 2))
    p = fetch(rep, log, 3, 5, 1).alter
    assert rep.on_alter_partition_response(p, 0, AlterPartitionReply(0, 1, [1, 2, 3], 1, 1), log, 2) == (False, False)
    assert rep.pending is p  # another leader epoch: ignored
    rep.make_leader([1, 2, 3], [1, 2], 0, 2, log, 3)  # newer metadata replaced the state
    assert rep.pending is None
    assert rep.on_alter_partition_response(p, 0, AlterPartitionReply(0, 1, [1, 2, 3], 0, 3), log, 4) == (False, False)
    assert rep.isr == [1, 2] and rep.partition_epoch == 2
    assert not rep.make_leader([1, 2, 3], [1], 0, 1, log, 5)  # an older partition epoch is skipped
    assert rep.isr == [1, 2]


# -- follower fetches at the leader -------------------------------------------------------------------------
def test_follower_fetch_errors_and_diverging_epoch():
    rep, log = leader(log=leader_log((0, 5), (2, 3)), epoch=3)  # epochs (0,0) (2,5) (3,8)
    assert fetch(rep, log, 2, 8, 1, current_epoch=2).error_code == E.fenced_leader_epoch
    assert fetch(rep, log, 2, 8, 1, current_epoch=4).error_code == E.unknown_leader_epoch
    assert fetch(rep, log, 9, 8, 1, current_epoch=3).error_code == E.unknown_leader_epoch  # not a replica
    assert fetch(rep, log, 2, 9, 1, current_epoch=3).error_code == E.offset_out_of_range
    chk = fetch(rep, log, 2, 7, 1, last_epoch=1, current_epoch=3)
    assert chk.diverging_epoch == (0, 5) and rep.followers[2].log_end_offset == -1  # no state update
    assert fetch(rep, log, 2, 7, 1, last_epoch=2, current_epoch=3).diverging_epoch is None
    assert fetch(rep, log, 2, 6, 1, last_epoch=0, current_epoch=3).diverging_epoch == (0, 5)  # past epoch 0's end
    rep.make_follower(2, [1, 2, 3], 4, 1)
    assert fetch(rep, log, 2, 8, 1, current_epoch=4).error_code == E.not_leader_or_follower


def test_the_hw_answered_is_the_one_before_the_fetch():
    rep, log = leader(isr=(1, 2), replicas=(1, 2))
    chk = fetch(rep, log, 2, 5, 1)
    assert chk.hw_changed and log.high_watermark == 5 and chk.high_watermark == 0


# -- the follower ------------------------------------------------------------------------------------------
def follower_after_seed_4_1_5(log):
    """Seed 001 §4.1.5: the follower fetched message2 (offset 1) but learned only HW 1."""
    log.append_as_follower([(0, 1), (0, 2)])
    log.update_high_watermark(1)


def test_a_restarted_follower_keeps_message2():
    log = MemLog()
    follower_after_seed_4_1_5(log)
    f = FollowerFetch(1, 1, log)  # back, following the leader of epoch 1
    req = f.request(log)
    assert (req.fetch_offset, req.last_fetched_epoch, req.current_leader_epoch) == (2, 0, 1)
    assert log.log_end_offset == 2


def test_the_test_only_switch_truncates_to_the_hw(monkeypatch):
    monkeypatch.setattr(FollowerFetch, "truncate_to_high_watermark", True)
    log = MemLog()
    follower_after_seed_4_1_5(log)
    f = FollowerFetch(1, 1, log)
    assert log.log_end_offset == 1 and f.request(log).last_fetched_epoch == -1


def test_truncation_by_diverging_epoch_takes_several_round_trips():
    """Follower epochs (0,0) (1,3) (3,6), end 8; leader (0,0) (2,4) (4,10), end 12."""
    flog = leader_log((0, 3), (1, 3), (3, 2))
    llog = leader_log((0, 4), (2, 6))
    rep, llog = leader(log=llog, epoch=4)
    f = FollowerFetch(1, 4, flog)
    chk = fetch(
        rep, llog, 2, *[f.request(flog).fetch_offset], 1, last_epoch=f.request(flog).last_fetched_epoch, current_epoch=4
    )
    assert chk.diverging_epoch == (2, 10)
    assert f.on_response(FetchPartitionResponse(diverging_epoch=chk.diverging_epoch), flog, None) == TRUNCATING
    assert flog.log_end_offset == 6  # the end of epoch 1, the largest below 2
    req = f.request(flog)
    chk = fetch(rep, llog, 2, req.fetch_offset, 2, last_epoch=req.last_fetched_epoch, current_epoch=4)
    assert chk.diverging_epoch == (0, 4)
    assert f.on_response(FetchPartitionResponse(diverging_epoch=chk.diverging_epoch), flog, None) == FETCHING
    assert flog.log_end_offset == 3 and flog.epochs.entries == [(0, 0)]
    req = f.request(flog)
    assert fetch(rep, llog, 2, req.fetch_offset, 3, last_epoch=req.last_fetched_epoch, current_epoch=4).error_code == 0


def test_an_epoch_begun_without_a_write_does_not_loop_the_follower():
    """The follower led epoch 1 from offset 5 without writing; the leader of epoch 2 never saw
    epoch 1: the follower's truncation to 5 must drop its (1, 5) entry, or it asks forever."""
    flog = leader_log((0, 5))
    flog.assign_epoch(1, 5)
    f = FollowerFetch(3, 2, flog)
    f.on_response(FetchPartitionResponse(diverging_epoch=(0, 5)), flog, None)
    assert f.request(flog).last_fetched_epoch == 0


def test_follower_learns_the_hw_and_ignores_a_stale_answer():
    log = leader_log((0, 3))
    f = FollowerFetch(1, 0, log)
    got = []
    resp = FetchPartitionResponse(0, 10, 0, None, [(0, 4), (0, 5)], 3, 0)
    assert f.on_response(resp, log, log.append_as_follower) == FETCHING
    assert log.log_end_offset == 5 and log.high_watermark == 5 and f.fetch_offset == 5
    f.on_response(FetchPartitionResponse(0, 10, 0, None, [(0, 4)], 3, 0), log, got.append)
    assert got == [] and log.log_end_offset == 5
    assert f.on_response(FetchPartitionResponse(int(E.fenced_leader_epoch)), log, None) == WAIT_FOR_METADATA


def test_an_empty_follower_starts_again_at_the_base_of_the_batch_that_holds_its_start(tmp_path):
    """The leader's log start is inside a batch (DeleteRecords at 61 of a batch 60-62, or a
    mirror leader restarted at its source's): a follower whose empty log starts at 61 is answered
    the whole batch from 60. It starts its log again at 60 and appends it, as Kafka's follower
    after UnexpectedAppendOffsetException (seed 24 of real_mirror_short: taken as a stale answer,
    the follower asked at 61 forever and the destination never converged)."""
    from test_storage import new_log

    raw = new_log(tmp_path / "f")
    raw.truncate_fully_and_start_at(61)
    log = StorageReplicaLog(raw)
    f = FollowerFetch(1, 0, log)
    assert f.request(log).fetch_offset == 61
    batch = build_batch([(None, b"a", ()), (None, b"b", ()), (None, b"c", ())], base_offset=60, timestamp=1)
    resp = FetchPartitionResponse(0, 63, 61, None, memoryview(batch), 60, 0, request_offset=61)
    assert f.on_response(resp, log, lambda buf: raw.append_raw(buf, 1)) == FETCHING
    # the batch from 60 appended; the log start is the leader's again once the HW passed it
    assert (raw.log_end_offset, f.fetch_offset, raw.high_watermark, raw.log_start_offset) == (63, 63, 63, 61)
    assert [h.base_offset for h, _ in raw.read_batches(61)] == [60]
    # a log that holds records is not restarted by an answer from below its end: a stale answer
    stale = FetchPartitionResponse(0, 63, 61, None, memoryview(batch), 60, 0, request_offset=63)
    f.on_response(stale, log, lambda buf: raw.append_raw(buf, 1))
    assert (raw.log_start_offset, raw.log_end_offset) == (61, 63)


def test_out_of_range_truncates_to_the_leader_end():
    log = leader_log((0, 8))
    f = FollowerFetch(1, 3, log)
    f.on_out_of_range(0, 6, log)
    assert log.log_end_offset == 6 and f.fetch_offset == 6


# -- the real UnifiedLog through StorageReplicaLog ------------------------------------------------------------------
def test_storage_log_truncation_past_the_end_drops_an_epoch_begun_without_a_write(tmp_path):
    from test_storage import append, new_log

    raw = new_log(tmp_path / "l")
    append(raw, epoch=0)
    log = StorageReplicaLog(raw)
    log.assign_epoch(1, 1)
    log.truncate_to(1)
    assert raw.leader_epoch_cache.entries == [(0, 0)] and log.latest_epoch() == 0


def test_storage_log_follower_keeps_message2_and_truncates_by_epoch(tmp_path):
    from test_storage import append, new_log

    leader_raw = new_log(tmp_path / "l")
    append(leader_raw, epoch=0)
    append(leader_raw, epoch=0)  # message1, message2 (epoch 0)
    llog = StorageReplicaLog(leader_raw)
    follower_raw = new_log(tmp_path / "f")
    for _, data in leader_raw.read_batches(0):
        follower_raw.append_raw(bytes(data), 0)
    flog = StorageReplicaLog(follower_raw)
    flog.update_high_watermark(1)
    f = FollowerFetch(1, 1, flog)  # the follower restarts, epoch 1
    assert flog.log_end_offset == 2
    rep = LeaderReplication(1, min_insync_replicas=1)
    rep.make_leader([1, 2], [1, 2], 1, 0, llog, 0)
    assert leader_raw.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    req = f.request(flog)
    chk = rep.on_follower_fetch(2, req.fetch_offset, req.last_fetched_epoch, 1, 0, -1, llog, 1)
    assert chk.error_code == 0 and chk.diverging_epoch is None and leader_raw.high_watermark == 2
