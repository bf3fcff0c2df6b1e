"""Loaded by every Python process that a test starts (a broker, a CLI tool, a client script):
tests/conftest.py puts this folder first on their PYTHONPATH.

kio, the protocol library, imports hypothesis whenever it is importable, to register strategies for
its typed integers. In production hypothesis is not installed; in the test environment it is, and
importing it costs a broker or a tool 0.15-0.2 s of CPU at start-up, thousands of times per suite.
These processes never use it, so it is marked absent here: ``import hypothesis`` raises
ImportError, as it would where kesque is deployed."""

import sys

sys.modules.setdefault("hypothesis", None)
