"""Progress where a person waits (issue 29): the tools draw a bar on a terminal (a pty here) and
nothing when their output is captured, so that what they print stays byte for byte the same."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from kesque.cli.plumbing import progress
from kesque.records.records import build_batch

SEGMENT_BATCHES = 300


@pytest.fixture(scope="module")
def segment(tmp_path_factory) -> str:
    """A log segment of SEGMENT_BATCHES batches (offsets set as a log would)."""
    path = tmp_path_factory.mktemp("seg") / "00000000000000000000.log"
    with open(path, "wb") as f:
        for i in range(SEGMENT_BATCHES):
            batch = bytearray(build_batch([(b"k%d" % i, b"v" * 200, ())]))
            batch[0:8] = i.to_bytes(8, "big")  # base offset
            f.write(batch)
    return str(path)


def run_with_stderr_on_a_pty(cmd: list[str], stdout_path: str) -> tuple[int, bytes]:
    """``cmd`` with its stderr on a terminal and its stdout in a file: (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    env = dict(os.environ)
    env.pop("KESQUE_PROGRESS", None)
    with open(stdout_path, "wb") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return p.wait(60), seen


DUMP = [sys.executable, "-m", "kesque", "dump-log", "--print-data-log", "--files"]


def test_dump_log_draws_a_bar_on_a_terminal_and_prints_the_same(segment, tmp_path):
    piped = subprocess.run([*DUMP, segment], capture_output=True, timeout=60)
    assert piped.returncode == 0 and piped.stderr == b""  # captured: no bar, not a byte more
    assert piped.stdout.count(b"baseOffset:") == SEGMENT_BATCHES
    code, terminal = run_with_stderr_on_a_pty([*DUMP, segment], str(tmp_path / "out"))
    assert code == 0
    assert b"00000000000000000000.log" in terminal and b"%|" in terminal  # tqdm's bar, named by the file
    assert (tmp_path / "out").read_bytes() == piped.stdout


def test_storage_format_draws_a_bar_over_its_dirs_on_a_terminal(tmp_path):
    dirs = [str(tmp_path / f"d{i}") for i in range(6)]
    props = tmp_path / "server.properties"
    props.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={','.join(dirs)}\n"
    )
    cmd = [sys.executable, "-m", "kesque", "storage", "format", "-t", "q1Sh-9_ISia_zwGINzRvyQ", "-c", str(props)]
    code, terminal = run_with_stderr_on_a_pty(cmd, str(tmp_path / "out"))
    assert code == 0, (tmp_path / "out").read_text()
    assert b"Formatting" in terminal and b"dir" in terminal
    assert (tmp_path / "out").read_text().count("Formatting ") == 6  # Kafka's lines, one per dir
    # captured, the same command prints what it printed and nothing on stderr
    props.write_text(props.read_text().replace(str(tmp_path / "d"), str(tmp_path / "e")))
    piped = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and piped.stderr == ""


def test_a_bar_is_drawn_only_on_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(sys, "stdout", Tty())
    assert not progress.shown() and progress.bar(10, "x").disable
    monkeypatch.setattr(sys, "stderr", Tty())
    assert progress.shown()
    assert not progress.shown(quiet=False)  # the tool's own lines go to that terminal
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert progress.shown(quiet=False)  # they go to a file: the bar shows the wait
    monkeypatch.setenv(progress.ENV, "0")
    assert not progress.shown()
