"""Progress where a person waits (issue 29): a bar on the terminal for the tools' long steps
(dump-log of a large segment, storage format over many dirs, reset-offsets over many groups, the
perf tests), and nothing at all when the output goes to a pipe or a file, so that every tool's
output stays byte for byte what Kafka's prints when it is captured.

tqdm rather than rich: one small pure-Python package with no dependencies, a bar on stderr in
one line, and its own rate and ETA; rich would bring pygments and markdown-it for a progress bar.

The bar is drawn on stderr, and only when stderr is a terminal. A tool that prints on stdout
while it works (``quiet=False``: dump-log's lines, the perf tests' reports) shows it only when
stdout is not that terminal (``kesque dump-log ... > out.txt``), so that the bar never cuts
through its lines. ``KESQUE_PROGRESS=0`` turns every bar off.
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm

ENV = "KESQUE_PROGRESS"


def shown(quiet: bool = True) -> bool:
    """Whether a bar is drawn: stderr a terminal, and stdout not one unless the tool is quiet
    there while it works."""
    if os.environ.get(ENV, "") == "0":
        return False
    try:
        if not sys.stderr.isatty():
            return False
        return quiet or not sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def bar(total: int | None, desc: str, unit: str = "it", *, quiet: bool = True, unit_scale: bool = False) -> tqdm:
    """A tqdm bar on stderr, disabled (every call a no-op) unless :func:`shown`. It leaves no
    line behind when it closes."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        file=sys.stderr,
        disable=not shown(quiet),
        leave=False,
        mininterval=0.2,
        dynamic_ncols=True,
    )
