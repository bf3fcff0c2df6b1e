"""The log side of transactions (sans-IO, real files): open transactions in the producer
state, COMMIT/ABORT markers, the last stable offset, the ``.txnindex`` of aborted
transactions, and all of it rebuilt after a crash (from a snapshot plus the log, or from the
log alone) and after truncation. Kafka's rules: ProducerStateManager, ProducerAppendInfo,
TransactionIndex and UnifiedLog.collectAbortedTransactions."""

from __future__ import annotations

import os

import pytest

from kesque.config.topic import LogConfig
from kesque.errors import ErrorCode, KafkaError
from kesque.records.records import build_batch
from kesque.storage.txn_index import AbortedTxn, TransactionIndex
from kesque.storage.unified_log import UnifiedLog

NOW = 1_700_000_000_000


def new_log(path, cfg: LogConfig | None = None) -> UnifiedLog:
    return UnifiedLog(str(path), "t", 0, cfg or LogConfig(), now_ms=NOW)


def txn_batch(log: UnifiedLog, pid: int, seq: int, n: int = 1, epoch: int = 0, transactional: bool = True):
    b = bytearray(
        build_batch(
            [(b"k", f"{pid}-{seq + i}".encode(), ()) for i in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=transactional,
            timestamp=NOW,
        )
    )
    info = log.append_as_leader(memoryview(b), 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    return info


def marker(log: UnifiedLog, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0):
    info = log.append_txn_marker(pid, epoch, commit, coordinator_epoch, 0, NOW)
    log.update_high_watermark(log.log_end_offset)
    return info


def reopen(log: UnifiedLog, clean: bool) -> UnifiedLog:
    if clean:
        log.close()
    else:
        for seg in log.segments:
            seg.close()
    lg = UnifiedLog(log.dir, "t", 0, log.config, had_clean_shutdown=clean, now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def test_lso_follows_the_oldest_open_transaction(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 1, 0, 2)  # offsets 0-1, txn of producer 1 starts at 0
    assert lg.last_stable_offset == 0
    txn_batch(lg, 2, 0)  # offset 2, producer 2 starts at 2
    txn_batch(lg, 1, 2)  # offset 3
    assert lg.high_watermark == 4 and lg.last_stable_offset == 0
    m = marker(lg, 1, commit=True)  # offset 4
    assert m.first_offset == 4
    assert lg.last_stable_offset == 2  # producer 2 is still open
    marker(lg, 2, commit=False)  # offset 5
    assert lg.last_stable_offset == 6 == lg.high_watermark
    assert lg.collect_aborted_transactions(0, 6) == [AbortedTxn(2, 2, 5, 6)]
    assert lg.collect_aborted_transactions(6, 7) == []


def test_lso_waits_for_the_marker_to_be_replicated(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 1, 0)
    lg.append_txn_marker(1, 0, True, 0, 0, NOW)  # marker at 1, HW still 1
    assert lg.high_watermark == 1 and lg.last_stable_offset == 0
    lg.update_high_watermark(2)
    assert lg.last_stable_offset == 2


def test_non_transactional_write_inside_a_transaction_is_refused(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 7, 0)
    with pytest.raises(KafkaError) as e:
        txn_batch(lg, 7, 1, transactional=False)
    assert e.value.code == ErrorCode.invalid_txn_state
    marker(lg, 7, commit=True)
    txn_batch(lg, 7, 1, transactional=False)  # allowed once the transaction is over


def test_marker_with_stale_producer_or_coordinator_epoch_is_refused(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 3, 0, epoch=2)
    with pytest.raises(KafkaError) as e:
        lg.append_txn_marker(3, 1, True, 0, 0, NOW)
    assert e.value.code == ErrorCode.invalid_producer_epoch
    marker(lg, 3, commit=False, epoch=3, coordinator_epoch=5)  # a fencing abort bumps the epoch
    txn_batch(lg, 3, 0, epoch=3)
    with pytest.raises(KafkaError) as e:
        lg.append_txn_marker(3, 3, True, 4, 0, NOW)
    assert e.value.code == ErrorCode.transaction_coordinator_fenced
    end = lg.log_end_offset
    assert lg.collect_aborted_transactions(0, end) == [AbortedTxn(3, 0, 1, 2)]


def test_marker_without_data_completes_nothing(tmp_path):
    lg = new_log(tmp_path)
    marker(lg, 9, commit=False)
    assert lg.last_stable_offset == 1
    assert lg.collect_aborted_transactions(0, 1) == []
    assert not os.path.exists(lg.active_segment.txn_index.path)  # created lazily, as Kafka's


def test_txnindex_file_layout(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 0x0102030405060708, 0)
    marker(lg, 0x0102030405060708, commit=False)
    raw = open(lg.active_segment.txn_index.path, "rb").read()
    assert raw == (
        b"\x00\x00"
        + bytes.fromhex("0102030405060708")
        + (0).to_bytes(8, "big")
        + (1).to_bytes(8, "big")
        + (2).to_bytes(8, "big")
    )
    assert TransactionIndex(lg.active_segment.txn_index.path, 0).entries == [AbortedTxn(0x0102030405060708, 0, 1, 2)]


def test_read_committed_stops_at_lso_and_lists_aborted(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 1, 0, 3)  # 0-2 aborted below
    marker(lg, 1, commit=False)  # 3
    txn_batch(lg, 2, 0, 2)  # 4-5 open
    data = lg.read(0, 1 << 20, lg.last_stable_offset, True)
    assert lg.last_stable_offset == 4
    assert data.size > 0 and data.upper_bound == 4
    assert lg.collect_aborted_transactions(0, data.upper_bound) == [AbortedTxn(1, 0, 3, 4)]


@pytest.mark.parametrize("clean", [True, False])
def test_open_transactions_and_aborts_survive_restart(tmp_path, clean):
    lg = new_log(tmp_path)
    txn_batch(lg, 1, 0, 2)  # 0-1 open, producer 1
    txn_batch(lg, 2, 0)  # 2 producer 2
    marker(lg, 2, commit=False)  # 3 abort of producer 2
    lso, aborted = lg.last_stable_offset, lg.collect_aborted_transactions(0, lg.log_end_offset)
    assert lso == 0 and aborted == [AbortedTxn(2, 2, 3, 0)]
    lg = reopen(lg, clean)
    assert lg.last_stable_offset == lso
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == aborted
    marker(lg, 1, commit=True)
    assert lg.last_stable_offset == lg.log_end_offset == 5


def test_lost_snapshot_and_txnindex_are_rebuilt_from_the_log(tmp_path):
    lg = new_log(tmp_path, LogConfig(segment_bytes=1024 * 1024))
    txn_batch(lg, 1, 0)
    marker(lg, 1, commit=False)
    lg.roll(NOW)
    txn_batch(lg, 2, 0)  # open across the roll and crash
    txn_batch(lg, 3, 0)
    marker(lg, 3, commit=False)
    expected = lg.collect_aborted_transactions(0, lg.log_end_offset)
    assert len(expected) == 2
    for seg in lg.segments:
        seg.close()
    for name in os.listdir(tmp_path):
        if name.endswith((".snapshot", ".txnindex")):
            os.unlink(tmp_path / name)
    lg = UnifiedLog(str(tmp_path), "t", 0, lg.config, had_clean_shutdown=False, now_ms=NOW)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == expected
    assert lg.last_stable_offset == 2  # producer 2's transaction is still open
    assert lg.producer_state.ongoing_txn_of(2) == 2


def test_truncation_reopens_a_transaction_whose_marker_is_cut(tmp_path):
    lg = new_log(tmp_path)
    txn_batch(lg, 1, 0)
    m = marker(lg, 1, commit=False)
    assert lg.collect_aborted_transactions(0, 2)
    lg.truncate_to(m.first_offset)
    assert lg.collect_aborted_transactions(0, 2) == []
    assert lg.producer_state.ongoing_txn_of(1) == 0
    assert lg.last_stable_offset == 0
