"""Shared fixtures: real kesque brokers (subprocess, temp dir, free port)."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import resource
import shutil
import subprocess
import uuid

import pytest
from hypothesis import settings

from kesque.testing.broker import Broker

# Hypothesis profiles. "ci", the default, is derandomized: every run explores the same examples,
# so what fails once fails again. "fuzz" (make fuzz) explores fresh examples, 20 times as many.
# Choose with HYPOTHESIS_PROFILE=fuzz or --hypothesis-profile=fuzz. No example database: a test
# depends on nothing left on the machine (a fuzz failure prints its example and a blob to replay
# it with @reproduce_failure).
CI_EXAMPLES = 100
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=CI_EXAMPLES)
settings.register_profile(
    "fuzz", derandomize=False, database=None, deadline=None, max_examples=20 * CI_EXAMPLES, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The longest files first. `make test` gives whole files to two xdist workers (--dist loadfile) in
# collection order; a long file collected late (test_spark.py, alphabetically near the end) leaves
# one worker running it alone while the other has finished. Longest-first is the classic fix for
# that tail. The order is by their total time in a clean-clone run (the durations make test prints);
# files not listed come after these.
HEAVY_FIRST = (
    "test_spark.py",
    "test_sim_real_sweep.py",
    "test_sim_real.py",
    "test_sim_real_sweep_quorum.py",
    "test_oracle_cli.py",
    "test_reassign_partitions.py",
    "test_compaction.py",
    "test_oracle_java_sasl.py",
    "test_oracle_java_clients.py",
    "test_security_matrix.py",
    "test_clients.py",
    "test_elections_cluster.py",
    "test_sim_replication.py",
    "test_sim.py",
)


# The Python processes that tests start run without hypothesis (tests/subprocess_site/sitecustomize.py
# says why): set in each process that runs tests (an xdist worker, or pytest without workers), not in
# xdist's controller, whose workers import hypothesis themselves.
SUBPROCESS_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "subprocess_site")


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (SUBPROCESS_SITE, os.environ.get("PYTHONPATH"))))


def without_subprocess_site(env: dict) -> dict:
    """``env`` for a child that runs pytest itself (and so needs hypothesis)."""
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SUBPROCESS_SITE]
    return {
        **{k: v for k, v in env.items() if k != "PYTHONPATH"},
        **({"PYTHONPATH": os.pathsep.join(path)} if path else {}),
    }


# KESQUE_TEST_CPU=FILE: each test's CPU (its process's and its reaped children's: brokers, tools,
# JVMs) appended to FILE as "file<TAB>test<TAB>seconds" lines, to find what a suite spends its
# cores on (wall time hides it: on two cores a test's wait overlaps another's work)
_CPU_FILE = os.environ.get("KESQUE_TEST_CPU")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _CPU_FILE:
        yield
        return
    before = _cpu_seconds()
    yield
    with open(_CPU_FILE, "a") as f:
        f.write(f"{item.path.name}\t{item.name}\t{_cpu_seconds() - before:.2f}\n")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    tests_in = collections.Counter(item.path for item in items)
    # then, as xdist's own --loadscope-reorder (which the Makefile turns off so that this order
    # holds), the files with more tests first; sorting is stable: a file's own order stays
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests_in[item.path], str(item.path)))


def examples(n: int) -> int:
    """A suite's own example count (slow suites ask fewer, cheap ones more): ``n`` in the ci
    profile, scaled as the loaded profile scales the default."""
    return max(1, n * settings.default.max_examples // CI_EXAMPLES)


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


def java_missing(min_major: int = 17) -> str | None:
    """Why the JVM that Spark would start cannot be used (None when it can): the ``java`` of
    ``JAVA_HOME`` or else of ``PATH``, at least ``min_major``."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        return f"needs a JDK {min_major}+ (no java in JAVA_HOME or on PATH)"
    try:
        r = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"needs a JDK {min_major}+ ({java} -version failed: {e})"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', r.stderr + r.stdout)
    major = int(m.group(1)) if m else 0
    major = int(m.group(2)) if m and major == 1 and m.group(2) else major  # "1.8" is 8
    if major < min_major:
        return f"needs a JDK {min_major}+ ({java} is Java {major or 'of an unknown version'})"
    return None
