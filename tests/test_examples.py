"""Issue 6, test 5: the Spark examples run to completion on small data (``make examples``
runs the same script on more)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from conftest import java_missing  # noqa: E402

if java_missing():
    pytest.skip(f"Spark {java_missing()}", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow  # 28 s: `make examples` runs them, and `make slow`
def test_spark_examples_run_to_completion():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "run_all.py"), "--events", "600"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "offline load: 600 of 600 records in Parquet" in out.stdout
    assert "exactly once" in out.stdout
