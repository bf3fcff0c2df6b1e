"""A file layer that fails chosen writes with ENOSPC or EIO (the simulator's and the tests').

Like :mod:`kesque.sim.powerloss` it wraps, in-process, the calls kesque's storage makes (with
pytest's monkeypatch, :meth:`FaultFS.install`, or for the time of a ``with`` block,
:meth:`FaultFS.patched`), and acts only on files under one root (the log dir made to fail). A
fault is armed for one *point*:

* ``segment-append`` — ``os.pwrite`` to a ``.log`` file: half the bytes are written first (a
  partial batch, as a file system that fills mid-write leaves), then the call fails;
* ``index-append`` — ``os.pwrite``/``os.ftruncate`` of a ``.index``/``.timeindex`` file (the
  mapping of an index being grown, or the page an entry is stored into);
* ``roll`` — ``os.open`` creating a new ``.log`` file;
* ``checkpoint`` — writing one of the log dir's offset checkpoint files;
* ``partition-metadata`` — writing a partition's ``partition.metadata``;
* ``producer-snapshot`` — writing a ``.snapshot`` file;
* ``fsync`` — ``os.fsync``/``os.fdatasync`` of a file or directory under the root (EIO: the
  page cache could not be written back).

``skip`` calls matching the point go through before the first failure; every later matching
call fails too (a full disk stays full) until :meth:`FaultFS.clear`. ``hits`` counts failures,
and ``late_writes`` the writes under the root that went through after the first failure (Kafka
takes the dir offline at its first I/O error: nothing is written there after it).
"""

from __future__ import annotations

import builtins
import contextlib
import errno as errno_mod
import os
from dataclasses import dataclass, field

from ..storage import checkpoint, producer_state

_REAL = {name: getattr(os, name) for name in ("pwrite", "write", "open", "ftruncate", "fsync", "fdatasync")}
_REAL_OPEN = builtins.open

POINTS = (
    "segment-append",
    "index-append",
    "roll",
    "checkpoint",
    "partition-metadata",
    "producer-snapshot",
    "fsync",
)
_CHECKPOINTS = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint")


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@dataclass
class FaultFS:
    root: str
    point: str | None = None
    err: int = errno_mod.ENOSPC
    skip: int = 0
    hits: int = 0
    late_writes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = os.path.abspath(self.root)

    def arm(self, point: str, err: int = errno_mod.ENOSPC, skip: int = 0) -> FaultFS:
        assert point in POINTS, point
        self.point, self.err, self.skip, self.hits = point, err, skip, 0
        self.late_writes = []
        return self

    def clear(self) -> None:
        self.point = None

    def install(self, monkeypatch) -> FaultFS:
        """Wrap the calls with ``monkeypatch.setattr`` (undone by its owner)."""
        monkeypatch.setattr(os, "pwrite", self._pwrite)
        monkeypatch.setattr(os, "open", self._open)
        monkeypatch.setattr(os, "ftruncate", self._ftruncate)
        monkeypatch.setattr(os, "fsync", self._fsync)
        monkeypatch.setattr(os, "fdatasync", self._fdatasync)
        # the text files are written with the builtin open: wrap it where those modules look it up
        monkeypatch.setattr(checkpoint, "open", self._builtin_open, raising=False)
        monkeypatch.setattr(producer_state, "open", self._builtin_open, raising=False)
        return self

    @contextlib.contextmanager
    def patched(self):
        """:meth:`install` for the time of a ``with`` block (no pytest): the calls are restored after."""
        saved = []

        class _Patch:
            @staticmethod
            def setattr(owner, name, value, raising=True):
                saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
                setattr(owner, name, value)

        self.install(_Patch)
        try:
            yield self
        finally:
            for owner, name, value in reversed(saved):
                if value is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, value)

    # ------------------------------------------------------------------ matching
    def _under(self, path: str) -> bool:
        return os.path.abspath(path).startswith(self.root + os.sep)

    def _fire(self, point: str, path: str) -> bool:
        if self.point != point or not self._under(path):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        self.hits += 1
        return True

    def _error(self, path: str) -> OSError:
        return OSError(self.err, os.strerror(self.err), path)

    def _wrote(self, path: str) -> None:
        """A write under the root went through: after a failure there, the dir should be offline."""
        if self.hits and self.point is not None and self._under(path):
            self.late_writes.append(path)

    # ------------------------------------------------------------------ wrappers
    def _pwrite(self, fd, data, pos):
        path = _fd_path(fd)
        if path.endswith(".log") and self._fire("segment-append", path):
            half = len(data) // 2
            if half:
                _REAL["pwrite"](fd, memoryview(data)[:half], pos)
            raise self._error(path)
        if path.endswith((".index", ".timeindex")) and self._fire("index-append", path):
            raise self._error(path)
        self._wrote(path)
        return _REAL["pwrite"](fd, data, pos)

    def _ftruncate(self, fd, length):
        path = _fd_path(fd)
        if path.endswith((".index", ".timeindex")) and self._fire("index-append", path):
            raise self._error(path)
        self._wrote(path)
        return _REAL["ftruncate"](fd, length)

    def _fsync(self, fd):
        path = _fd_path(fd)
        if self._fire("fsync", path):
            raise self._error(path)
        return _REAL["fsync"](fd)

    def _fdatasync(self, fd):
        path = _fd_path(fd)
        if self._fire("fsync", path):
            raise self._error(path)
        return _REAL["fdatasync"](fd)

    def _open(self, path, flags, mode=0o777, *, dir_fd=None):
        p = os.fspath(path)
        if flags & os.O_CREAT and p.endswith(".log") and not os.path.exists(p) and self._fire("roll", p):
            raise self._error(p)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            self._wrote(p)
        return _REAL["open"](path, flags, mode, dir_fd=dir_fd)

    def _builtin_open(self, file, mode="r", *args, **kwargs):
        p = os.fspath(file) if isinstance(file, (str, bytes, os.PathLike)) else ""
        if isinstance(p, str) and any(c in mode for c in "wax+"):
            name = os.path.basename(p)
            if name.endswith(".tmp"):
                name = name[:-4]
            point = (
                "checkpoint"
                if name in _CHECKPOINTS
                else "partition-metadata"
                if name == "partition.metadata"
                else "producer-snapshot"
                if name.endswith(".snapshot")
                else None
            )
            if point is not None and self._fire(point, p):
                raise self._error(p)
            self._wrote(p)
        return _REAL_OPEN(file, mode, *args, **kwargs)


_MISSING = object()
