"""bench/controller.py's parts: one that fails (a Kafka node that does not come back) costs that
part's figures only, and run.py prints what the other parts measured."""

from __future__ import annotations

import contextlib
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))

import controller as C  # noqa: E402
import run as R  # noqa: E402


def test_a_failed_part_keeps_the_others_and_their_rows(monkeypatch):
    @contextlib.contextmanager
    def cluster(size, config):
        if config is C.TEST_SETTINGS:
            raise RuntimeError("Kafka node 2 exited (code 1)")
        yield size

    monkeypatch.setitem(C.CLUSTERS, "kafka", cluster)
    monkeypatch.setattr(C, "failover", lambda nodes, runs, log: {"p50": 2.0, "p99": 3.0})
    monkeypatch.setattr(C, "commit_latency", lambda nodes, n: {"p50": 30.0 + nodes, "p99": 40.0})
    failed = []
    kafka = C.measure("kafka", 20, 200, log=lambda *_: None, failed=lambda part, e: failed.append(part))
    assert failed == ["kafka test"]
    assert set(kafka["failover"]) == {"defaults"} and set(kafka["commit"]) == {1, 3}

    kesque = {
        "failover": {"defaults": {"p50": 2.1, "p99": 2.2}, "test": {"p50": 0.5, "p99": 0.9}},
        "commit": {3: {"p50": 33.0, "p99": 41.0}},
    }  # its commit1 part not asked
    report = {"figures": []}
    monkeypatch.setattr(
        R,
        "add_figure",
        lambda report, name, group, value, unit, limit_name=None, limit_value=None, *a, **kw: report["figures"].append(
            (name, value, limit_value)
        ),
    )
    R.add_controller_figures(report, {"kafka": kafka, "kesque": kesque}, 20, 200, "")
    rows = {name: (value, limit) for name, value, limit in report["figures"]}
    assert rows["controller failover p50, Kafka's default timeouts (SIGKILL -> CreateTopics)"] == (2.1, 2.0)
    assert rows["controller failover p99, test timeouts (SIGKILL -> CreateTopics)"] == (0.9, None)
    assert rows["metadata commit p50, 1 controller (CreateTopics round trip) [Apache Kafka]"] == (31.0, None)
    assert len(rows) == 8
