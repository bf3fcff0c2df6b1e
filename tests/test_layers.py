"""The wiring's shape holds (issue 26): the import contract in .importlinter (layers, sans-IO
cores), a ceiling on imports hidden inside functions, which only goes down, and no reach into the
server object outside the entry points that start and stop one."""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import codeshape  # noqa: E402 - bench/ is no package

# imports inside functions (bench/codeshape.py counts them): issue 26's target is 40 or fewer, each
# with a comment saying why (those left load something heavy only when it is used: the broker from
# the tools, the tools from `kesque`, the fixtures' clusters from the pytest plugin). Lower this as
# they go; never raise it.
IN_FUNCTION_IMPORTS_CEILING = 9


def test_import_contract_is_kept():
    importlinter = pytest.importorskip("importlinter.cli", reason="import-linter is not installed (make install-test)")
    out = io.StringIO()
    cwd = os.getcwd()
    # import-linter configures logging with disable_existing_loggers: every logger this worker
    # created before (kesque.config.broker's ...) would stay disabled for the tests that follow
    # and their caplog would see nothing
    loggers = [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    disabled = [lg.disabled for lg in loggers]
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out):
            status = importlinter.lint_imports(config_filename=str(ROOT / ".importlinter"), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
        for lg, was in zip(loggers, disabled):
            lg.disabled = was
    assert status == 0, out.getvalue()


def test_in_function_imports_only_go_down():
    shape = codeshape.measure(str(ROOT))
    assert shape["in_function_imports"] <= IN_FUNCTION_IMPORTS_CEILING


# the modules that start and stop a server object (server.py, which builds and wires it, is not counted)
SERVER_ENTRY_POINTS = {"kesque/cli/serve.py", "kesque/testing/broker.py", "kesque/sim/real.py"}


def test_only_entry_points_reach_into_the_server():
    """Handlers and drivers take their collaborators; only what starts and stops a server holds it."""
    reaching = set()
    for rel, path in codeshape.modules(str(ROOT)):
        if rel in codeshape.WIRING:
            continue
        if codeshape.server_reaches(ast.parse(pathlib.Path(path).read_text(encoding="utf-8"), rel)):
            reaching.add(rel)
    assert reaching <= SERVER_ENTRY_POINTS, sorted(reaching - SERVER_ENTRY_POINTS)


def test_no_event_loop_in_the_domain_packages():
    """What the import contract cannot see: no coroutine and no loop scheduling (call_later,
    create_task ...) in the domain packages either; their drivers are in server/drivers/."""
    shape = codeshape.measure(str(ROOT))
    assert shape["asyncio_modules_in_domain_packages"] == {}
