"""Helpers of the differential suite: the same scenario on Apache Kafka and on kesque.

The oracle modules (``tests/test_oracle_*.py``) set ``pytestmark = oracle.MARKS``: marker
``oracle``, and a one-line skip when Kafka cannot run here (no ``java``, or no jars: ``make
kafka``). Each module shares one Kafka and one kesque (module-scoped :func:`pair`); tests use
fresh topic names. Outputs are compared after :func:`mask` replaces what differs by nature
(topic ids, cluster ids, ports, hosts, data directories, timestamps, producer ids).
"""

from __future__ import annotations

import contextlib
import re
import uuid

import pytest

from kesque.testing import kafka as K
from kesque.testing.broker import Broker

REASON = K.unavailable()
MARKS = [pytest.mark.oracle, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

# what both brokers run with (kesque.testing.broker.DEFAULTS has the same single-node settings)
CONFIG = {"group.initial.rebalance.delay.ms": "0"}


@contextlib.contextmanager
def brokers(tmp_path_factory, config: dict | None = None, kesque_config: dict | None = None):
    """{"kafka": KafkaBroker, "kesque": Broker}, both started with ``config`` (kesque also with
    ``kesque_config``: what Kafka has on by default and kesque does not)."""
    cfg = {**CONFIG, **(config or {})}
    kafka = K.KafkaBroker(config=cfg)
    data = tmp_path_factory.mktemp("kesque") / "data"
    data.mkdir()
    kesque = Broker(data_dir=str(data), config={**cfg, **(kesque_config or {})})
    try:
        kafka.launch()  # the JVM starts while kesque does
        kesque.start()
        K.wait_ready([kafka], 120)
        yield {"kafka": kafka, "kesque": kesque}
    finally:
        kesque.stop()
        kafka.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    with brokers(tmp_path_factory) as b:
        yield b


def new_topic(prefix: str = "o") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------- normalising output
_MASKS = [
    (re.compile(r"\b[A-Za-z0-9_-]{22}\b(?=\s|$|,|\)|\])"), "<id>"),  # topic / cluster ids (base64 uuid)
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+\b"), "<host:port>"),
    (re.compile(r"/[\w./-]*?/(?:data|kafka-logs)(?=/|\b)"), "<data>"),
    (re.compile(r"\b1[6-9]\d{11}\b"), "<ts>"),  # epoch milliseconds (2020s-2030s)
]


def mask(text: str, extra: dict[str, str] | None = None) -> str:
    for old, new in (extra or {}).items():
        text = text.replace(old, new)
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text
