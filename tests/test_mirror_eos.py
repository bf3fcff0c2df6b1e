"""Issue 28, test 4: exactly once across a failover, consumer offsets included (docs/mirror.md,
"Exactly once across a failover"). Marker ``mirror`` (``make mirror``): about 20 s a cut point.

A read-process-write pipeline (tests/eos_processor.py: confluent-kafka, each transaction writes
``out-<value>`` for a batch of input records and commits the input offsets with
send_offsets_to_transaction) runs against a kesque source whose input and output topics are
mirrored to a kesque destination over a link that also mirrors the source's
``__consumer_offsets``. At a random point the pipeline is SIGKILLed (mostly inside a
transaction), then the source broker is SIGKILLed once the mirror has copied what it had; the
topics are failed over at the destination (the tool aborts the transaction the pipeline left
open and applies the offsets replayed from the offsets mirror) and the pipeline resumes there
with the same group and transactional id. The destination's read_committed output must hold
every input value exactly once. The periodic offset copy is set to ten minutes, so it never
runs while the pipeline does: only the replay at the failover can give the exact offsets.

Repeated for ``CUT_POINTS`` random cut points (seeded; the seed is printed), each with a new
source and link, against one destination broker.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import uuid

import pytest

from kesque.testing import kafka as K
from kesque.testing import kafka_apps as A
from kesque.testing.broker import Broker
from mirrorlib import tool
from test_transactions_eos import BROKER_CONFIG, Cluster, Processor, wait_until

pytestmark = pytest.mark.mirror

CUT_POINTS = int(os.environ.get("MIRROR_EOS_CUT_POINTS", "20"))
COPIER_CUT_POINTS = int(os.environ.get("MIRROR_EOS_COPIER_CUT_POINTS", "5"))
# MIRROR_EOS_AT_ONCE=1: the source is killed right after the pipeline, without waiting for the
# mirror to catch up (a measurement of the window docs/mirror.md describes, not a default run)
AT_ONCE = os.environ.get("MIRROR_EOS_AT_ONCE") == "1"
N = 600
PARTITIONS = 3


def _spec(bootstrap: str, suffix: str) -> dict:
    return {
        "bootstrap": bootstrap,
        "group": f"pipe-{suffix}",
        "input": f"in-{suffix}",
        "output": f"out-{suffix}",
        "txn_id": f"pipe-{suffix}",
        "batch": 20,
        "txn_delay": 0.02,
        "consumer": {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300},
    }


def _describe(d: str, topics: list[str]) -> list[dict]:
    """(topic, partition, log end, source HW at the last answer) of every mirror partition."""
    code, out, err = tool("mirrors", "--bootstrap-server", d, "--describe", "--topics", ",".join(topics))
    assert code == 0, (out, err)
    rows = []
    topic = None
    for line in out.splitlines():
        cells = dict(c.split(": ", 1) for c in line.strip().split("\t") if ": " in c)
        if "Topic" in cells:
            topic = cells["Topic"]
        elif "Partition" in cells:
            hw = cells["LastFetchSourceHighWatermark"]
            rows.append((topic, int(cells["Partition"]), cells["DestLogEndOffset"], hw))
    return rows


def _caught_up(d: str, topics: list[str]) -> bool:
    rows = _describe(d, topics)
    return bool(rows) and all(end == hw and hw != "-" for _t, _p, end, hw in rows)


class _Processors:
    """tests/eos_processor.py (confluent-kafka, transaction version 1), one process."""

    name = "eos_processor"

    def __init__(self, spec: dict, tmp: str):
        self.spec = spec
        self.procs: list[Processor] = []

    def start(self, bootstrap: str) -> None:
        self.procs.append(Processor({**self.spec, "bootstrap": bootstrap}))

    def transactions(self) -> int:
        return len(self.procs[-1].events("COMMITTED"))

    def check_alive(self) -> None:
        self.procs[-1].check_alive()

    def kill(self) -> None:
        for p in self.procs:
            p.kill()

    def finished(self, destination: Cluster) -> bool:
        q = self.procs[-1]
        return len(destination.read_all(self.spec["output"], PARTITIONS, "read_committed")) >= N or not q.alive()

    def expected(self, values: list[str]) -> list[str]:
        return [f"out-{v}" for v in values]


class _Copiers:
    """Kafka's TransactionalMessageCopier (the Java client, transaction version 2 against kesque),
    one per input partition, as Kafka's transactions system test runs it."""

    name = "TransactionalMessageCopier"

    def __init__(self, spec: dict, tmp: str):
        self.spec = spec
        self.tmp = tmp
        self.copiers: list[A.Copier] = []

    def start(self, bootstrap: str) -> None:
        s, run = self.spec, len(self.copiers) // PARTITIONS
        self.copiers += [
            A.Copier(bootstrap, f"{s['txn_id']}-{p}", s["group"], s["input"], p, s["output"],
                     os.path.join(self.tmp, f"copier-{s['txn_id']}-{run}-{p}"), transaction_size=s["batch"]).start()
            for p in range(PARTITIONS)
        ]  # fmt: skip

    def _running(self) -> list[A.Copier]:
        return self.copiers[-PARTITIONS:]

    def transactions(self) -> int:
        return sum(c.consumed for c in self._running()) // self.spec["batch"]

    def check_alive(self) -> None:
        for c in self._running():  # a copier whose partition is all copied exits 0 (finished): fine
            assert not c.failed(), f"copier {c.transactional_id} exited: {c.exits}"

    def kill(self) -> None:
        for c in self.copiers:
            c.stop(clean=False)

    def finished(self, destination: Cluster) -> bool:
        return all(c.done() or c.failed() for c in self._running())

    def expected(self, values: list[str]) -> list[str]:
        return list(values)


def _cut(dest: Broker, tmp: str, rng: random.Random, k: int, pipeline_class) -> str:
    """One cut point; a line for the report."""
    d = dest.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    link = f"L{k}-{suffix}"
    spec = _spec("", suffix)
    inp, out, group = spec["input"], spec["output"], spec["group"]
    src = Broker(data_dir=os.path.join(tmp, f"src-{k}"), config=BROKER_CONFIG).start()
    pipeline = pipeline_class(spec, tmp)
    try:
        s = src.bootstrap_servers
        source = Cluster(src)
        source.create_topic(inp, PARTITIONS)
        source.create_topic(out, PARTITIONS)
        values = [f"v{i:04d}-{suffix}" for i in range(N)]
        source.produce(inp, values)
        source.committed(group, inp, PARTITIONS)  # the source's __consumer_offsets exists now
        with tempfile.NamedTemporaryFile("w", suffix=".properties", dir=tmp, delete=False) as f:
            f.write(
                f"bootstrap.servers={s}\nconsumer.offset.sync.enable=true\nconsumer.offset.sync.ms=600000\n"
                "metadata.max.age.ms=500\nretry.backoff.ms=100\nreconnect.backoff.max.ms=200\n"
                f'consumer.offset.group.filters={{"groupFilters": [{{"name": "{group}"}}]}}\n'
            )
        code, o, e = tool("cluster-links", "--bootstrap-server", d, "--create", "--link", link, "--config-file", f.name)
        assert code == 0, (o, e)
        for t in (inp, out):
            code, o, e = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", t, "--link", link)
            assert code == 0, (o, e)
        offsets_mirror = f"_link.{link}.consumer_offsets"
        wait_until(lambda: _describe(d, [offsets_mirror]) != [], 20, "the offsets mirror")

        pipeline.start(s)
        want = rng.randint(1, 25)  # of the 30 transactions the input makes
        wait_until(lambda: pipeline.transactions() >= want, 60, f"{want} transactions at the source")
        pipeline.check_alive()
        time.sleep(rng.uniform(0, 0.06))
        pipeline.kill()
        transactions = pipeline.transactions()
        if not AT_ONCE:
            wait_until(lambda: _caught_up(d, [inp, out, offsets_mirror]), 30, "the mirror to catch up")
        src.kill()  # the source is gone

        code, o, e = tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", f"{inp},{out}")
        assert code == 0, (o, e)
        applied = [line for line in o.splitlines() if line.startswith("Group:")]

        pipeline.start(d)
        destination = Cluster(dest)
        wait_until(lambda: pipeline.finished(destination), 120, "the pipeline to finish at the destination",
                   interval=0.5)  # fmt: skip
        pipeline.kill()
        committed = destination.read_all(out, PARTITIONS, "read_committed")
        uncommitted = destination.read_all(out, PARTITIONS, "read_uncommitted")
        expected = sorted(pipeline.expected(values))
        twice = sorted(v for v in set(committed) if committed.count(v) > 1)
        assert not twice, f"{len(twice)} outputs committed more than once, e.g. {twice[:5]} ({applied})"
        assert sorted(committed) == expected, f"missing {sorted(set(expected) - set(committed))[:5]} ({applied})"
        # the link is deleted with its offsets mirror once its topics are failed over
        code, o, e = tool("cluster-links", "--bootstrap-server", d, "--delete", "--link", link)
        assert code == 0, (o, e)
        return (
            f"cut {k}: {pipeline.name} killed after {transactions} transactions, {applied or 'no offsets applied'}, "
            f"resumed: {len(committed)} outputs exactly once ({len(uncommitted) - len(committed)} aborted records)"
        )
    finally:
        pipeline.kill()
        src.stop()


@pytest.mark.parametrize(
    "pipeline_class, cut_points",
    [
        pytest.param(_Processors, CUT_POINTS, id="eos_processor"),
        pytest.param(_Copiers, COPIER_CUT_POINTS, id="copier", marks=pytest.mark.skipif(
            K.unavailable() is not None, reason=K.unavailable() or "")),
    ],
)  # fmt: skip
def test_a_pipeline_fails_over_exactly_once(tmp_path, capsys, pipeline_class, cut_points):
    seed = int(os.environ.get("MIRROR_EOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    dest = Broker(data_dir=str(tmp_path / "dest"), config=BROKER_CONFIG).start()
    lines = []
    try:
        for k in range(cut_points):
            try:
                lines.append(_cut(dest, str(tmp_path), rng, k, pipeline_class))
            except BaseException:
                with capsys.disabled():
                    print(f"\nseed {seed} (MIRROR_EOS_SEED), failed at cut point {k}; before it:", *lines, sep="\n")
                raise
    finally:
        dest.stop()
    with capsys.disabled():
        print(f"\nseed {seed}:", *lines, sep="\n")
    assert len(lines) == cut_points
