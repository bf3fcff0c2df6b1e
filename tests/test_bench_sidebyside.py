"""bench/run.py --against kafka: the side-by-side table runs and reports both brokers (no timing
is asserted: a benchmark is not a test), and two runs give one line per figure with the spread."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import oracle

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))

import sidebyside  # noqa: E402


def run_row(figure, kesque, kafka, load=1.0):
    return {
        "figure": figure,
        "unit": "MB/s",
        "better": "higher",
        "ratio": kesque / kafka,
        "kesque": {"value": kesque, "load": load, "note": ""},
        "kafka": {"value": kafka, "load": load, "note": ""},
    }


def test_two_runs_give_each_figure_both_values_and_the_ratio_spread():
    runs = [
        {"rows": [run_row("produce", 100.0, 200.0), run_row("consume", 50.0, 50.0)]},
        {"rows": [run_row("produce", 110.0, 200.0, 2.0)]},
    ]
    lines = {x["figure"]: x for x in sidebyside.combine(runs)}
    assert lines["produce"]["ratio_spread"] == pytest.approx(0.55 / 0.5 - 1)
    assert [r["kesque"]["value"] for r in lines["produce"]["runs"]] == [100.0, 110.0]
    assert lines["consume"]["runs"][1] is None and lines["consume"]["ratio_spread"] is None
    md = sidebyside.markdown(list(lines.values())).splitlines()
    assert md[0].count("kesque #") == 2
    assert md[2].startswith("| produce | MB/s (higher is better) | 100.0 | 200.0 | 0.50 | 110.0 | 200.0 | 0.55 | 10% |")


@oracle.MARKS[0]
@oracle.MARKS[1]
def test_quick_small_figure_runs_on_both_brokers(tmp_path):
    out = tmp_path / "sbs.json"
    r = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "bench", "run.py"),
            "--against",
            "kafka",
            "--quick",
            "--only",
            "small",
            "--load-wait",
            "0",
            "--data-dir",
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["errors"] == []
    rows = {x["figure"]: x for x in report["runs"][0]["rows"]}
    small = rows["small produce, one at a time (raw socket, window 1)"]
    for broker in ("kesque", "kafka"):
        assert small[broker]["value"] > 0 and small[broker]["load"] is not None
        assert small[broker]["detail"]["cpu_seconds"] >= 0
    assert small["ratio"] == pytest.approx(small["kesque"]["value"] / small["kafka"]["value"])
    assert rows["start-up time (spawn to serving)"]["kafka"]["value"] > 0
    assert (tmp_path / "sbs.md").read_text().startswith("| figure |")
    assert "kesque/Kafka" in r.stdout
