"""LogLoader on its own: a LocalLog, a leader epoch cache and a producer state manager over a
partition directory written by a UnifiedLog, then damaged or left half-way through a cleaning
as a crash leaves it. The UnifiedLog tests (test_storage, test_cleaner, test_txn_log) reach
the same code through the log's constructor; these name what the loader itself returns and
leaves on disk."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from kesque.config.topic import LogConfig
from kesque.records import batch as rb
from kesque.records.records import build_batch
from kesque.storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from kesque.storage.leader_epoch import LeaderEpochFileCache
from kesque.storage.local_log import LocalLog
from kesque.storage.log_dir_failure import KafkaStorageError, LogDirFailureChannel
from kesque.storage.log_loader import LogLoader
from kesque.storage.producer_state import ProducerStateManager
from kesque.storage.segment import LogSegment
from kesque.storage.unified_log import UnifiedLog

NOW = 1_700_000_000_000
BATCH = bytes(build_batch([(b"k", b"v" * 10, ())], timestamp=NOW))
CFG = LogConfig(segment_bytes=4 * len(BATCH), index_interval_bytes=50)  # 4 batches a segment


def write(path, n: int = 12, epoch_of=lambda i: 0) -> None:
    """``n`` one-record batches (offsets 0..n-1), then the process dies: no clean close."""
    lg = UnifiedLog(str(path), "t", 0, CFG, now_ms=NOW)
    for i in range(n):
        lg.append_as_leader(memoryview(bytearray(BATCH)), epoch_of(i), NOW)
    for seg in lg.segments:
        seg.close()


def load(path, *, clean: bool = False, recovery_point: int = 0, log_start_offset: int = 0, dir_failure=None):
    local = LocalLog(str(path), CFG, "t-0", recovery_point=recovery_point, dir_failure=dir_failure)
    epochs = LeaderEpochFileCache(os.path.join(str(path), LEADER_EPOCH_CHECKPOINT), "t-0")
    ps = ProducerStateManager(str(path), "t-0")
    loaded = LogLoader(
        local, epochs, ps, log_start_offset=log_start_offset, had_clean_shutdown=clean, now_ms=NOW
    ).load()
    return local, epochs, loaded


def offsets(local: LocalLog) -> list[int]:
    return [h.base_offset for h, _ in local.read_batches(0, local.log_end_offset, 1 << 62)]


def seg_path(path, base: int, suffix: str = ".log") -> str:
    return os.path.join(str(path), "%020d%s" % (base, suffix))


def close(local: LocalLog) -> None:
    for seg in local.segments:
        seg.close()


def test_an_empty_directory_starts_at_the_log_start_offset(tmp_path):
    local, epochs, loaded = load(tmp_path, log_start_offset=7)
    assert (loaded.log_start_offset, loaded.high_watermark) == (7, 7)
    assert local.bases == [7] and local.log_end_offset == 7 and local.recovery_point == 7
    assert os.path.exists(seg_path(tmp_path, 7))
    close(local)


def test_a_tail_torn_mid_batch_is_truncated(tmp_path):
    write(tmp_path)
    with open(seg_path(tmp_path, 8), "r+b") as f:
        f.truncate(os.path.getsize(seg_path(tmp_path, 8)) - 5)
    local, _epochs, loaded = load(tmp_path, recovery_point=4)
    assert local.bases == [0, 4, 8] and local.log_end_offset == 11 and offsets(local) == list(range(11))
    assert os.path.getsize(seg_path(tmp_path, 8)) == 3 * len(BATCH)
    # only a flush moves the recovery point: the recovered segments are scanned again after a crash
    assert local.recovery_point == 4
    assert (loaded.log_start_offset, loaded.high_watermark) == (0, 0)
    close(local)


def test_a_corrupt_middle_segment_ends_the_log_and_its_epochs(tmp_path):
    write(tmp_path, epoch_of=lambda i: i // 4)  # epoch 0 from 0, 1 from 4, 2 from 8
    with open(seg_path(tmp_path, 4), "r+b") as f:
        f.seek(-10, os.SEEK_END)
        f.write(b"\xde\xad")
    local, epochs, _loaded = load(tmp_path)
    assert local.bases == [0, 4] and local.log_end_offset == 7 and offsets(local) == list(range(7))
    assert not os.path.exists(seg_path(tmp_path, 8)) and not os.path.exists(seg_path(tmp_path, 8, ".index"))
    assert epochs.entries == [(0, 0), (1, 4)]
    close(local)


def test_a_clean_shutdown_still_recovers_a_torn_active_segment(tmp_path):
    write(tmp_path)
    with open(seg_path(tmp_path, 8), "ab") as f:
        f.write(BATCH[: len(BATCH) // 2])
    local, _epochs, _loaded = load(tmp_path, clean=True)
    assert local.log_end_offset == 12 and local.recovery_point == 12
    assert os.path.getsize(seg_path(tmp_path, 8)) == 4 * len(BATCH)
    close(local)


def test_leftovers_of_a_cleaning_go_and_an_orphan_index_too(tmp_path):
    write(tmp_path)
    leftovers = [
        seg_path(tmp_path, 0, ".log.deleted"),
        seg_path(tmp_path, 4, ".index.deleted"),
        seg_path(tmp_path, 0, ".log.cleaned"),
        seg_path(tmp_path, 4, ".log.swap"),  # swap past .cleaned
        seg_path(tmp_path, 0, ".log.tmp"),
        seg_path(tmp_path, 20, ".index"),
    ]  # no 20.log
    for p in leftovers:
        with open(p, "wb") as f:
            f.write(BATCH)
    local, _epochs, _loaded = load(tmp_path)
    assert not [p for p in leftovers if os.path.exists(p)]
    assert local.bases == [0, 4, 8] and offsets(local) == list(range(12))
    close(local)


def test_a_complete_swap_replaces_the_segments_it_covers(tmp_path):
    """A crash after the ``.swap`` rename of a cleaning that merged segments 0 and 4: the swap
    file holds offsets 0-7, so the segment files based in [0, 8) go and it takes their place."""
    write(tmp_path)
    with open(seg_path(tmp_path, 0, ".log.swap"), "wb") as f:
        for base in (0, 4):
            with open(seg_path(tmp_path, base), "rb") as src:
                f.write(src.read()[len(BATCH) :])  # a cleaning dropped the first batch of each
    local, _epochs, _loaded = load(tmp_path)
    assert local.bases == [0, 8]
    assert offsets(local) == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("%020d" % 4) or n.endswith(".swap")]
    close(local)


def test_a_start_past_what_survived_starts_empty_there(tmp_path):
    write(tmp_path, epoch_of=lambda i: 3)
    local, epochs, loaded = load(tmp_path, log_start_offset=20)
    assert (loaded.log_start_offset, loaded.high_watermark) == (20, 20)
    assert local.bases == [20] and local.log_end_offset == 20 and local.recovery_point == 20
    assert epochs.entries == [] and sorted(n for n in os.listdir(tmp_path) if n.endswith(".log")) == ["%020d.log" % 20]
    close(local)


def test_a_failed_truncation_at_load_takes_the_dir_offline(tmp_path, monkeypatch):
    """The loader's one write that is not a repair of a file (deleting every segment when the
    checkpointed start is past the end) is guarded as the log's own operations are (KIP-112)."""
    root = tmp_path / "data"
    write(root / "t-0")
    channel = LogDirFailureChannel()

    def fail(_seg):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(LogSegment, "delete_files", fail)
    with pytest.raises(KafkaStorageError, match="Error while truncating the log for t-0"):
        load(root / "t-0", log_start_offset=20, dir_failure=channel)
    assert channel.has_offline_log_dir(str(root))
    shutil.rmtree(root)


def test_the_producer_state_is_rebuilt_from_the_batches(tmp_path):
    lg = UnifiedLog(str(tmp_path), "t", 0, CFG, now_ms=NOW)
    b = bytearray(build_batch([(b"k", b"v", ())], timestamp=NOW, producer_id=9, producer_epoch=2, base_sequence=0))
    lg.append_as_leader(memoryview(b), 0, NOW)
    for seg in lg.segments:
        seg.close()
    local = LocalLog(str(tmp_path), CFG, "t-0")
    ps = ProducerStateManager(str(tmp_path), "t-0")
    epochs = LeaderEpochFileCache(os.path.join(str(tmp_path), LEADER_EPOCH_CHECKPOINT), "t-0")
    LogLoader(local, epochs, ps, log_start_offset=0, had_clean_shutdown=False, now_ms=NOW).load()
    assert ps.producers[9].epoch == 2 and ps.last_map_offset == 1
    assert rb.read_header(local.segments[0].pread(0, rb.HEADER_SIZE)).producer_id == 9
    close(local)


def test_a_channel_set_after_opening_guards_the_log(tmp_path):
    """The metadata log's RaftManager hands its log the broker's channel once it is open: a
    failed write then takes the dir offline and the log refuses the next one."""
    lg = UnifiedLog(str(tmp_path / "data" / "t-0"), "t", 0, CFG, now_ms=NOW)
    channel = LogDirFailureChannel()
    lg.dir_failure = channel

    def fail(*_a):
        raise OSError(errno.ENOSPC, "No space left on device")

    real = lg.active_segment.append
    lg.active_segment.append = fail
    with pytest.raises(KafkaStorageError, match="Error while appending records for t-0"):
        lg.append_as_leader(memoryview(bytearray(BATCH)), 0, NOW)
    lg.active_segment.append = real
    assert channel.has_offline_log_dir(str(tmp_path / "data")) and lg.offline
    with pytest.raises(KafkaStorageError, match="already offline"):
        lg.append_as_leader(memoryview(bytearray(BATCH)), 0, NOW)
    assert lg.log_end_offset == 0
