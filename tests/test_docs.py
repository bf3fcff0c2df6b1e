"""The documentation states facts the code can check."""

from __future__ import annotations

import pathlib
import re

from kesque.protocol.api import api_name
from kesque.server.apis import served_versions

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_compatibility_table_matches_the_advertised_versions():
    text = (ROOT / "docs" / "compatibility.md").read_text()
    rows = {int(k): (name, int(lo), int(hi))
            for k, name, lo, hi in re.findall(r"^\| (\d+) \| (\w+) \| (\d+)–(\d+) \|", text, re.M)}
    served = served_versions()
    assert set(rows) == set(served)
    for key, (lo, hi) in served.items():
        assert rows[key] == (api_name(key), lo, hi), key


def test_share_group_table_matches_the_versions_served_with_share_groups_on():
    text = (ROOT / "docs" / "compatibility.md").read_text()
    rows = {int(k): (name, int(lo), int(hi or lo))
            for k, name, lo, hi in re.findall(r"^\| (\d+) \| (\w+) \| v(\d+)(?:–(\d+))? \|", text, re.M)}
    extra = {k: v for k, v in served_versions({"group.share.enable": "true"}).items() if k not in served_versions()}
    assert set(rows) == set(extra)
    for key, (lo, hi) in extra.items():
        assert rows[key] == (api_name(key), lo, hi), key


def test_readme_first_screen_has_the_two_commands():
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "make serve" in first and "make test" in first


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
