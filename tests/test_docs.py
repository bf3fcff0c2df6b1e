"""The documentation states facts the code can check."""

from __future__ import annotations

import configparser
import pathlib
import re

from kesque.protocol.api import api_name
from kesque.server.apis import served_versions

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_compatibility_table_matches_the_advertised_versions():
    text = (ROOT / "docs" / "compatibility.md").read_text()
    rows = {
        int(k): (name, int(lo), int(hi))
        for k, name, lo, hi in re.findall(r"^\| (\d+) \| (\w+) \| (\d+)–(\d+) \|", text, re.M)
    }
    served = served_versions()
    assert set(rows) == set(served)
    for key, (lo, hi) in served.items():
        assert rows[key] == (api_name(key), lo, hi), key


def test_share_group_table_matches_the_versions_served_with_share_groups_on():
    text = (ROOT / "docs" / "compatibility.md").read_text()
    rows = {
        int(k): (name, int(lo), int(hi or lo))
        for k, name, lo, hi in re.findall(r"^\| (\d+) \| (\w+) \| v(\d+)(?:–(\d+))? \|", text, re.M)
    }
    extra = {k: v for k, v in served_versions({"group.share.enable": "true"}).items() if k not in served_versions()}
    assert set(rows) == set(extra)
    for key, (lo, hi) in extra.items():
        assert rows[key] == (api_name(key), lo, hi), key


def test_readme_first_screen_has_the_two_commands():
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "make serve" in first and "make test" in first


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def _importlinter() -> configparser.ConfigParser:
    cp = configparser.ConfigParser()
    cp.read(ROOT / ".importlinter")
    return cp


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def _architecture_layers() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text[text.index("## Layers") : text.index("## Start-up and shutdown")]


def test_architecture_layer_table_is_the_import_contract():
    """docs/architecture.md's layer table lists the contract's layers, bottom = 1, with every
    package and top-level module of each layer, and nothing else."""
    layers = _lines(_importlinter()["importlinter:contract:layers"]["layers"])
    expected = {}
    for depth, layer in enumerate(reversed(layers), start=1):
        for member in layer.split("|"):
            member = member.strip()
            path = ROOT / "kesque" / member
            expected[f"kesque/{member}/" if path.is_dir() else f"kesque/{member}.py"] = depth
    table = {}
    for num, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", _architecture_layers(), re.M):
        for name in re.findall(r"`(kesque/[^`]+)`", cell):
            table[name] = int(num)
    assert table == expected


def test_architecture_names_each_driver_left_in_a_domain_package():
    """The sans-IO contract's exceptions are the drivers the page lists, and only those."""
    ignored = {
        line.split("->")[0].strip()
        for line in _lines(_importlinter()["importlinter:contract:sans-io"].get("ignore_imports", ""))
    }
    section = _architecture_layers().split("<!-- sans-io-exceptions -->")[1].split("\n\n")[0]
    listed = {name[:-3].replace("/", ".") for name in re.findall(r"`(kesque/[^`]+\.py)`", section)}
    assert listed == ignored


def test_architecture_names_only_files_that_exist():
    """Every module docs/architecture.md names (`server/network.py`, `produce.py`, ...) is in the
    tree, so a move or a split cannot leave the page behind."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    files = [
        str(p.relative_to(ROOT)) for p in ROOT.glob("**/*.py") if ".venv" not in p.parts and "build" not in p.parts
    ]
    missing = [
        name
        for name in sorted(set(re.findall(r"`([\w/]+\.py)`", text)))
        if not any(f == name or f.endswith("/" + name) for f in files)
    ]
    assert not missing
