"""Optional py-spy sampling of the broker during a figure group (``run.py --profile``) and a
text summary of the hottest functions (self and inclusive time over busy samples)."""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import sys

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy_path() -> str | None:
    cand = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return cand if os.path.exists(cand) else shutil.which("py-spy")


class Sampler:
    def __init__(self, pid: int, out_path: str, rate: int = 250):
        self.out_path = out_path
        exe = py_spy_path()
        self.proc = None
        self.error = None
        if exe is None:
            self.error = "py-spy not installed (pip install py-spy into the venv)"
            return
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--nonblocking",
                "--idle",
                "-o",
                out_path,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not os.path.exists(self.out_path):
            self.error = (err or b"").decode(errors="replace").strip()[-500:] or "py-spy wrote no output"


def _short(path: str) -> str:
    if not path.startswith("/"):
        return path  # py-spy already shortened it (kesque/server/network.py, asyncio/events.py)
    for marker in ("/site-packages/", "/kesque/", "/lib/python3"):
        i = path.find(marker)
        if i >= 0:
            return path[i + 1 :] if marker != "/kesque/" else path[i + 1 :]
    return os.path.basename(path)


def _name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m.group('func')} ({_short(m.group('file'))})"


# a thread pool worker waiting for work (queue.get is C: no deeper Python frame) is idle too
IDLE_LEAVES = (
    "EpollSelector.select (selectors.py)",
    "select (selectors.py)",
    "PollSelector.select (selectors.py)",
    "_worker (concurrent/futures/thread.py)",
)


def summarize(raw_path: str, top: int = 15) -> dict:
    """Self and inclusive shares of the *busy* samples (the event loop waiting in
    epoll is counted as idle), plus the busy share of all samples."""
    self_counts: collections.Counter = collections.Counter()
    incl_counts: collections.Counter = collections.Counter()
    total = 0
    everything = 0
    with open(raw_path) as f:
        for line in f:
            line = line.rstrip("\n")
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            n = int(n)
            frames = [
                _name(x) for x in stack.split(";") if x and not x.startswith("process ") and not x.startswith("thread ")
            ]
            if not frames:
                continue
            everything += n
            if frames[-1] in IDLE_LEAVES:
                continue
            total += n
            self_counts[frames[-1]] += n
            for fr in set(frames):
                incl_counts[fr] += n
    return {
        "samples": total,
        "all_samples": everything,
        "self": [(f, c / total * 100.0) for f, c in self_counts.most_common(top)] if total else [],
        "inclusive": [(f, c / total * 100.0) for f, c in incl_counts.most_common(top * 2)] if total else [],
    }


_PLUMBING = (
    "<module> (kesque/__main__.py",
    "main (kesque/cli/main.py",
    "run (kesque/cli/serve.py",
    "run (asyncio/runners.py",
    "Runner.run (asyncio/runners.py",
    "BaseEventLoop.run_",
    "BaseEventLoop._run_once",
    "Handle._run (asyncio/events.py",
)


def format_summary(name: str, s: dict, top: int = 15) -> str:
    busy = s["samples"] / s["all_samples"] * 100.0 if s.get("all_samples") else 0.0
    lines = [
        f"broker profile, {name}: {s['samples']} busy samples of {s.get('all_samples', 0)} "
        f"({busy:.0f}% of the group's wall time; epoll wait counted as idle)"
    ]
    lines.append("  self%   function")
    for f, pct in s["self"][:top]:
        lines.append(f"  {pct:5.1f}   {f}")
    incl = [(f, p) for f, p in s["inclusive"] if ("kesque/" in f or "asyncio/" in f) and not f.startswith(_PLUMBING)][
        :top
    ]
    if incl:
        lines.append("  incl%   function (kesque / asyncio frames)")
        for f, pct in incl:
            lines.append(f"  {pct:5.1f}   {f}")
    return "\n".join(lines)
