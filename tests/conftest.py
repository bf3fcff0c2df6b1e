"""Shared fixtures: real kesque brokers (subprocess, temp dir, free port)."""

from __future__ import annotations

import shutil
import uuid

import pytest

from kesque.testing.broker import Broker


@pytest.fixture
def broker(tmp_path):
    """A fresh broker per test (subprocess, its own data dir)."""
    b = Broker(data_dir=str(tmp_path / "data"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    """One broker shared by the tests of a module (use unique topic names)."""
    b = Broker(data_dir=str(tmp_path_factory.mktemp("kesque") / "data"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic_name():
    return "t-" + uuid.uuid4().hex[:10]


def has_kcat() -> bool:
    return shutil.which("kcat") is not None
