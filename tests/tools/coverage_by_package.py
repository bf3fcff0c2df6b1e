"""Combine the coverage data of a `make test` run and print the line coverage of each package.

`make test` runs pytest under `coverage run` with ``patch = ["subprocess"]`` (pyproject.toml):
every measured process (pytest, its xdist workers, the brokers and tools the tests start) leaves
a ``.coverage.*`` file in the checkout. This script combines them into ``.coverage``, writes
``coverage.json`` and prints statements, missed lines and percentages per package of kesque
(``kesque/<package>/``, and the modules directly under ``kesque/`` as one row). It exits 2 when
the total is under ``[tool.coverage.report] fail_under``, as ``coverage report`` does.

    .venv/bin/python tests/tools/coverage_by_package.py            # combine, then report
    .venv/bin/python tests/tools/coverage_by_package.py --no-combine
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import coverage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def package_of(path: str) -> str:
    """``kesque/storage/log.py`` -> ``kesque/storage``; ``kesque/errors.py`` -> ``kesque/*.py``."""
    parts = os.path.relpath(path, ROOT).split(os.sep)
    if len(parts) > 2 and parts[0] == "kesque":
        return f"kesque/{parts[1]}"
    return "kesque/*.py" if parts[0] == "kesque" else parts[0]


def by_package(report: dict) -> dict[str, list[int]]:
    """{package: [statements, missed]} from a ``coverage json`` report."""
    out: dict[str, list[int]] = {}
    for path, f in report["files"].items():
        s = f["summary"]
        row = out.setdefault(package_of(path), [0, 0])
        row[0] += s["num_statements"]
        row[1] += s["missing_lines"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-combine", action="store_true", help="report the .coverage already combined")
    ap.add_argument("--json", default=os.path.join(ROOT, "coverage.json"), help="where to write the JSON report")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    cov = coverage.Coverage()
    if not args.no_combine:
        cov.combine(keep=False)
        cov.save()
    cov.load()
    if not cov.get_data().measured_files():
        print("coverage: no data (was the suite run under `coverage run`?)", file=sys.stderr)
        return 1
    cov.json_report(outfile=args.json)
    with open(args.json) as f:
        report = json.load(f)
    rows = by_package(report)
    width = max(len(p) for p in rows)
    print(f"\n{'package':<{width}}  {'stmts':>7}  {'miss':>6}  {'cover':>6}")
    for pkg in sorted(rows):
        n, miss = rows[pkg]
        print(f"{pkg:<{width}}  {n:>7}  {miss:>6}  {100.0 * (n - miss) / max(n, 1):>5.1f}%")
    totals = report["totals"]
    total = totals["percent_covered"]
    print(f"{'total':<{width}}  {totals['num_statements']:>7}  {totals['missing_lines']:>6}  {total:>5.1f}%")
    floor = float(cov.get_option("report:fail_under"))
    if total < floor:
        print(f"coverage: the total {total:.2f}% is under the floor of {floor}% (pyproject.toml)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
