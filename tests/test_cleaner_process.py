"""The background cleaner's forked child (kesque.storage.cleaner_process): the cleaning runs in
another process, the swap on the broker's event loop, and the child holds nothing of the broker."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import time

import pytest

from kesque.server.drivers.log_cleaner import LogCleaner
from kesque.storage import cleaner_process
from kesque.storage.segment import CLEANED_SUFFIX
from test_cleaner import NOW, last_per_key, new_log, put, records, user_emails

TP = ("t", 0)


class Config:
    def __init__(self, **values):
        self.values = {
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 1 << 20,
            "log.cleaner.io.max.bytes.per.second": 1.7976931348623157e308,
            **values,
        }

    def get(self, key):
        return self.values[key]


class Logs:
    """The LogManager as the cleaner sees it: one log."""

    def __init__(self, lg):
        self.logs = {TP: lg}
        self.log_dirs = [os.path.dirname(lg.dir)]

    def _by_dir(self, value):
        return {self.log_dirs[0]: {tp: value(lg) for tp, lg in self.logs.items()}}


class Clock:
    @staticmethod
    def now_ms() -> int:
        return NOW


def on_a_loop(test):
    """Run the async test on a fresh event loop (the broker's loop, here)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


def dirty_log(path):
    lg = new_log(path, min_cleanable_dirty_ratio=0.01)
    user_emails(lg, updates=40)
    lg.roll(NOW)
    return lg


async def start_cleaner(lg, hook=None, **config) -> LogCleaner:
    cleaner = LogCleaner(Config(**config), Logs(lg), Clock(), asyncio.get_running_loop(), lambda _jobs: None)
    cleaner.hook = hook
    cleaner.kick()
    assert cleaner.running
    return cleaner


async def run_cleaner(lg, hook=None, **config) -> LogCleaner:
    cleaner = await start_cleaner(lg, hook, **config)
    while cleaner.running:
        await asyncio.sleep(0.01)
    await cleaner.stop()
    return cleaner


def wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


async def wait_for_file_async(path: str) -> None:
    while not os.path.exists(path):
        await asyncio.sleep(0.01)


def stage_log(path: str):
    """A hook writing ``stage pid`` lines to ``path`` (from whichever process runs it)."""

    def hook(stage):
        with open(path, "a") as f:
            f.write(f"{stage} {os.getpid()}\n")

    return hook


@on_a_loop
async def test_the_cleaning_runs_in_a_child_and_the_swap_on_the_loop(tmp_path):
    lg = dirty_log(tmp_path / "t-0")
    before = records(lg)
    stages = str(tmp_path / "stages")
    cleaner = await run_cleaner(lg, stage_log(stages))
    assert records(lg) == last_per_key(before)
    assert cleaner.manager.checkpoints[TP] == lg.active_segment.base_offset
    pids = {}
    for line in open(stages):
        stage, pid = line.split()
        pids.setdefault(stage, set()).add(int(pid))
    assert set(pids) == {"copy", "cleaned", "swap", "deleted", "done"}
    child = pids["copy"] | pids["cleaned"]
    assert len(child) == 1 and os.getpid() not in child
    assert pids["swap"] == pids["deleted"] == pids["done"] == {os.getpid()}
    assert not [n for n in os.listdir(lg.dir) if n.endswith(CLEANED_SUFFIX)]
    reopened_records = records(lg, 0)  # the swapped-in segment reads as the load would open it
    assert reopened_records == last_per_key(before)


@pytest.mark.timeout(60)
@on_a_loop
async def test_stopping_kills_the_child_and_removes_its_cleaned_files(tmp_path):
    lg = dirty_log(tmp_path / "t-0")
    before = records(lg)
    started = str(tmp_path / "started")

    def hook(stage):
        if stage == "copy":
            open(started, "w").close()
            time.sleep(3600)  # only a kill ends this

    cleaner = await start_cleaner(lg, hook)
    await wait_for_file_async(started)
    [child] = cleaner.children
    assert [n for n in os.listdir(lg.dir) if n.endswith(CLEANED_SUFFIX)]
    await cleaner.stop()
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # killed and reaped
    assert not [n for n in os.listdir(lg.dir) if n.endswith(CLEANED_SUFFIX)]
    assert records(lg) == before
    assert TP not in cleaner.manager.uncleanable and TP not in cleaner.manager.checkpoints


@pytest.mark.timeout(60)
@on_a_loop
async def test_an_error_in_the_child_marks_the_log_uncleanable(tmp_path, caplog):
    lg = new_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.01)
    put(lg, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    lg.roll(NOW)
    before = records(lg)
    cleaner = await run_cleaner(lg, **{"log.cleaner.dedupe.buffer.size": 48})  # a one-key map
    assert TP in cleaner.manager.uncleanable
    assert "increase log.cleaner.dedupe.buffer.size" in caplog.text
    assert records(lg) == before


@pytest.mark.timeout(60)
@on_a_loop
async def test_the_child_keeps_no_descriptor_of_the_broker(tmp_path):
    """A connection the broker closes while a cleaning runs closes for its peer then, not when
    the child ends."""
    lg = dirty_log(tmp_path / "t-0")
    ours, peer = socket.socketpair()
    started, go_on = str(tmp_path / "started"), str(tmp_path / "go-on")

    def hook(stage):
        if stage == "copy":
            open(started, "w").close()
            wait_for_file(go_on)

    cleaner = await start_cleaner(lg, hook)
    await wait_for_file_async(started)
    ours.close()
    peer.settimeout(30)
    try:
        assert peer.recv(1) == b""
    finally:
        open(go_on, "w").close()
        peer.close()
    while cleaner.running:
        await asyncio.sleep(0.01)
    await cleaner.stop()
    assert TP in cleaner.manager.checkpoints


@on_a_loop
async def test_the_child_reports_its_io_to_the_brokers_throttler(tmp_path, monkeypatch):
    lg = dirty_log(tmp_path / "t-0")
    cleanable = sum(seg.size for seg in lg.segments[:-1])
    monkeypatch.setattr(cleaner_process, "IO_REPORT_S", 0)
    cleaner = LogCleaner(Config(), Logs(lg), Clock(), asyncio.get_running_loop(), lambda _jobs: None)
    reported = []
    cleaner.throttler.pause_for = lambda nbytes: reported.append(nbytes) or 0.0
    cleaner.kick()
    while cleaner.running:
        await asyncio.sleep(0.01)
    await cleaner.stop()
    assert TP in cleaner.manager.checkpoints
    # the offset map's pass and the copy's: every batch of the cleaned segments, twice
    assert sum(reported) == 2 * cleanable
