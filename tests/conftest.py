"""Shared fixtures: real kesque brokers (subprocess, temp dir, free port)."""

from __future__ import annotations

import contextlib
import shutil
import uuid

import pytest

from kesque.testing.broker import Broker


@contextlib.contextmanager
def running_broker(data_dir, config: dict | None = None):
    """A broker subprocess on ``data_dir`` for the duration of the block."""
    b = Broker(data_dir=str(data_dir), config=config)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def broker(tmp_path):
    """A fresh broker per test (subprocess, its own data dir)."""
    with running_broker(tmp_path / "data") as b:
        yield b


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    """One broker shared by the tests of a module (use unique topic names)."""
    with running_broker(tmp_path_factory.mktemp("kesque") / "data") as b:
        yield b


@pytest.fixture
def topic_name():
    return "t-" + uuid.uuid4().hex[:10]


def has_kcat() -> bool:
    return shutil.which("kcat") is not None
