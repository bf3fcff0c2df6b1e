"""A file layer that can lose power (the simulator's and the tests').

SIGKILL keeps the page cache, so a crash test run by killing the broker never sees what an
fsync left out. This layer wraps the ``os`` calls kesque's storage makes (in-process: with
pytest's monkeypatch, :meth:`PowerLossFS.install`, or for the time of a ``with`` block,
:meth:`PowerLossFS.patched`) and remembers what a power cut would keep, by POSIX's rules:

* a regular file's content is durable as of its last ``fsync``/``fdatasync`` (or ``flush``
  of an mmap over it); one never synced comes back empty;
* a directory's entries are durable as of its last ``fsync``: a file created, renamed or
  unlinked since comes back as it was (a new name disappears, an unlinked one returns with
  its own durable content, a rename is undone). ``os.replace`` of an fsynced tmp file keeps
  the inode, so the new name carries the tmp file's durable content once the directory is
  synced.

Files are tracked by inode while they live; an inode whose last name goes (unlink, replace
over it, rmdir) is retired, so a reused inode number starts a new record and durable
directory entries keep pointing at the old one. :meth:`PowerLossFS.lose_power` rewrites the
tree under the root (or under one directory of it: one machine's disk, in a simulated cluster
that shares the root) to its durable state (callers first drop their open descriptors, as a
rebooted process would have none). Sync calls are recorded, not performed: the point is
the model, and the tests stay fast.
"""

from __future__ import annotations

import contextlib
import mmap as _mmap
import os
import shutil
import stat
from dataclasses import dataclass, field

_REAL = {name: getattr(os, name) for name in ("fsync", "fdatasync", "unlink", "remove", "replace", "rename", "rmdir")}
_REAL_MMAP = _mmap.mmap


@dataclass(eq=False)
class Node:
    """One inode: a file's durable content, or a directory's durable entries (name -> Node)."""

    is_dir: bool
    content: bytes | None = None
    entries: dict[str, Node] | None = None
    syncs: int = 0


@dataclass
class PowerLossFS:
    root: str
    live: dict[tuple[int, int], Node] = field(default_factory=dict)
    cuts: int = 0

    def __post_init__(self) -> None:
        self.root = os.path.abspath(self.root)
        self._mark_all_durable()

    # ------------------------------------------------------------------ installing
    def install(self, monkeypatch) -> PowerLossFS:
        """Wrap the ``os`` calls with ``monkeypatch.setattr`` (undone by its owner)."""
        layer = self

        class TrackedMmap(_REAL_MMAP):
            """An mmap whose ``flush`` (msync) makes the mapped file's content durable."""

            def __new__(cls, fileno, *args, **kwargs):
                m = super().__new__(cls, fileno, *args, **kwargs)
                m._powerloss_fd = os.dup(fileno) if fileno >= 0 else -1
                return m

            def flush(self, *args):
                out = super().flush(*args)
                if self._powerloss_fd >= 0:
                    layer._sync(self._powerloss_fd)
                return out

            def close(self):
                if getattr(self, "_powerloss_fd", -1) >= 0:
                    os.close(self._powerloss_fd)
                    self._powerloss_fd = -1
                super().close()

        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._sync)
        monkeypatch.setattr(os, "unlink", self._unlink)
        monkeypatch.setattr(os, "remove", self._unlink)
        monkeypatch.setattr(os, "rmdir", self._rmdir)
        monkeypatch.setattr(os, "replace", self._replace)
        monkeypatch.setattr(os, "rename", self._rename)
        monkeypatch.setattr(_mmap, "mmap", TrackedMmap)
        return self

    @contextlib.contextmanager
    def patched(self):
        """:meth:`install` for the time of a ``with`` block (no pytest): the calls are restored after."""
        saved = []

        class _Patch:
            @staticmethod
            def setattr(owner, name, value):
                saved.append((owner, name, getattr(owner, name)))
                setattr(owner, name, value)

        self.install(_Patch)
        try:
            yield self
        finally:
            for owner, name, value in reversed(saved):
                setattr(owner, name, value)

    # ------------------------------------------------------------------ tracking
    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int]:
        return st.st_dev, st.st_ino

    def _node(self, st: os.stat_result) -> Node:
        key = self._key(st)
        node = self.live.get(key)
        if node is None or node.is_dir != stat.S_ISDIR(st.st_mode):
            node = self.live[key] = Node(stat.S_ISDIR(st.st_mode))
        return node

    def _sync(self, fd: int) -> None:
        st = os.fstat(fd)
        node = self._node(st)
        node.syncs += 1
        if node.is_dir:
            path = os.readlink(f"/proc/self/fd/{fd}")
            node.entries = {}
            for entry in os.scandir(path):
                node.entries[entry.name] = self._node(entry.stat(follow_symlinks=False))
        elif stat.S_ISREG(st.st_mode):
            rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)  # the fd may be write-only
            try:
                node.content = _read_all(rfd, st.st_size)
            finally:
                os.close(rfd)

    def _retire(self, path, dir_fd=None) -> None:
        """Forget the inode at ``path`` if this name is its last link (it is about to go)."""
        try:
            st = os.lstat(path, dir_fd=dir_fd)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            self.live.pop(self._key(st), None)

    def _unlink(self, path, *, dir_fd=None):
        self._retire(path, dir_fd)
        return _REAL["unlink"](path, dir_fd=dir_fd)

    def _rmdir(self, path, *, dir_fd=None):
        self._retire(path, dir_fd)
        return _REAL["rmdir"](path, dir_fd=dir_fd)

    def _replace(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        self._retire_target(src, dst, src_dir_fd, dst_dir_fd)
        return _REAL["replace"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def _rename(self, src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        self._retire_target(src, dst, src_dir_fd, dst_dir_fd)
        return _REAL["rename"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def _retire_target(self, src, dst, src_dir_fd, dst_dir_fd) -> None:
        try:
            same = os.path.samestat(os.lstat(src, dir_fd=src_dir_fd), os.lstat(dst, dir_fd=dst_dir_fd))
        except FileNotFoundError:
            same = False
        if not same:
            self._retire(dst, dst_dir_fd)

    # ------------------------------------------------------------------ power
    def lose_power(self, path: str | None = None) -> dict:
        """Rewrite the tree under the root (or under ``path``, a directory below it whose own
        entry is durable: one machine's disk) to what a power cut would have left; returns that
        tree as nested dicts (name -> bytes or dict) for the test's own checks."""
        top = self.root if path is None else os.path.abspath(path)
        tree = _durable_tree(self._node(os.stat(top)))
        for name in os.listdir(top):
            child = os.path.join(top, name)
            if os.path.isdir(child) and not os.path.islink(child):
                shutil.rmtree(child)
            else:
                _REAL["unlink"](child)
        _write_tree(top, tree)
        self.cuts += 1
        if path is None:
            self.live.clear()
        self._mark_all_durable(top)
        return tree

    def _mark_all_durable(self, top: str | None = None) -> None:
        """Everything now on disk under the root (or ``top``) is durable (at start and after a reboot)."""
        for dirpath, _dirnames, filenames in os.walk(top or self.root):
            fd = os.open(dirpath, os.O_RDONLY)
            try:
                self._sync(fd)
            finally:
                os.close(fd)
            for name in filenames:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                try:
                    self._sync(fd)
                finally:
                    os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    chunks, pos = [], 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def _durable_tree(node: Node) -> dict:
    out = {}
    for name, child in (node.entries or {}).items():
        out[name] = _durable_tree(child) if child.is_dir else (child.content or b"")
    return out


def _write_tree(path: str, tree: dict) -> None:
    for name, value in tree.items():
        target = os.path.join(path, name)
        if isinstance(value, dict):
            os.mkdir(target)
            _write_tree(target, value)
        else:
            with open(target, "wb") as f:
                f.write(value)
