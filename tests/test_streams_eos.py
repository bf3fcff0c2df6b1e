"""Issue 25, section 1: Kafka Streams 4.4 with ``processing.guarantee=exactly_once_v2`` on a 3-node
kesque cluster, Apache Kafka 4.4 as the oracle.

The application is Kafka's word count (``oracle/streams``, built by ``make kafka``): two stream
threads, ``groupBy(word)`` (a repartition topic) then ``count()`` (a changelog topic), the counts
written to an output topic. Its input is :data:`LINES` lines of three words each from a
vocabulary of :data:`WORDS`; the expected counts are computed here from the lines written. The
vocabulary is large so that the count's cache holds many words when a commit flushes it: each
commit writes bursts to the changelog and output partitions (more than one batch in flight to a
partition), and the first of them go to partitions the thread's producer has not written before,
while its previous transaction may still be completing (KIP-890 verification of pipelined first
batches: what kesque got wrong, seen as OutOfOrderSequenceException, with 500 words it did not show).

* :func:`test_word_count_exactly_once_kesque_and_kafka`: no fault, the input written before the
  app starts (it reads it as fast as it can). On kesque the app's log must show
  no ``OutOfOrderSequenceException`` and no fenced stream thread ("Detected that the thread is
  being fenced": StreamThread's handling of a TaskMigratedException, which an out-of-order
  sequence, a fenced producer or an invalid epoch of a task's producer becomes; nor a thread
  replaced after an uncaught exception); the output read with read_committed must hold the exact
  counts, and the same app on a 3-node Kafka must end with the same counts.
* :func:`test_word_count_exactly_once_brokers_killed`: the input written while the app runs, two
  brokers SIGKILLed and restarted mid-run, one after the other. The counts must be exact at the
  end, and for every word the counts a read_committed consumer saw in the output must never
  decrease (an aborted transaction's counts, or a count replayed from a stale changelog, would).

Three brokers and a Streams JVM take minutes on two cores: marked ``slow`` (and ``oracle``).
"""

from __future__ import annotations

import os
import random
import struct
import threading
import time

import pytest

from kesque.testing import kafka as K
from kesque.testing import kafka_apps as A
from kesque.testing.cluster import Cluster

REASON = A.streams_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.oracle, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

LINES = int(os.environ.get("KESQUE_STREAMS_LINES", 30_000))
WORDS = int(os.environ.get("KESQUE_STREAMS_WORDS", 20_000))
PARTITIONS = 4
SEED = int(os.environ.get("KESQUE_STREAMS_SEED", random.randrange(1 << 30)))
# the same on both clusters: a dead broker is fenced after 3 s (tests/test_replication.py's
# timings), few coordinator partitions (their creation is most of a fresh cluster's start)
CONFIG = {
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "auto.create.topics.enable": "false",
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}
FINISH_TIMEOUT = float(os.environ.get("KESQUE_STREAMS_TIMEOUT", 420))


def lines(n: int, seed: int) -> list[bytes]:
    return A.word_lines(n, WORDS, seed)


counts_of = A.word_counts
latest = A.latest_counts


def decreases(tail: A.Tail) -> list[str]:
    """Every word whose served counts went down, with the two counts."""
    seen: dict[str, int] = {}
    bad = []
    for records in tail.served.values():
        for k, v in list(records):
            word, n = k.decode(), struct.unpack(">q", v)[0]
            if n < seen.get(word, 0):
                bad.append(f"{word}: {seen[word]} then {n}")
            seen[word] = max(n, seen.get(word, 0))
    return bad


def run_word_count(
    bootstrap: str, work_dir: str, values: list[bytes], during=None, timeout: float = FINISH_TIMEOUT
) -> dict:
    """Create the topics, start the app (and a read_committed tail of its output), write the input
    (before the app, or with ``during(produce_all)`` running beside it), wait until the output holds
    the expected count of every word (or ``timeout``), stop the app. What was seen, and the app's log
    events."""
    expected = counts_of(values)
    A.create_topics(bootstrap, {"input": PARTITIONS, "output": PARTITIONS}, 3, TOPIC_CONFIG)
    tail = A.Tail(bootstrap, "output", PARTITIONS)
    app = A.WordCount(bootstrap, "input", "output", "wordcount", os.path.join(work_dir, "app"))

    def produce_all(pace: tuple[int, float] | None = None):
        if pace is None:
            A.produce(bootstrap, "input", values)
            return
        step, pause = pace
        for i in range(0, len(values), step):
            A.produce(bootstrap, "input", values[i : i + step])
            time.sleep(pause)

    result = {"finished": False}
    t0 = time.monotonic()
    try:
        if during is None:
            produce_all()
        tail.start()
        app.start()
        t0 = time.monotonic()
        worker = None
        if during is not None:
            worker = threading.Thread(target=lambda: result.update(during=during(produce_all, tail)), daemon=True)
            worker.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if latest(tail) == expected and (worker is None or not worker.is_alive()):
                result["finished"] = True
                break
            if not app.alive():
                result["died"] = app.process.returncode
                break
            time.sleep(0.5)
        result["seconds"] = time.monotonic() - t0
        if worker is not None:
            worker.join(60)
    finally:
        app.stop()
        tail.stop()
    got = latest(tail)
    result.update(
        expected=expected,
        counts=got,
        decreases=decreases(tail),
        served=tail.count,
        events=app.events(),
        app=app,
        missing=sorted(w for w in expected if got.get(w) != expected[w])[:10],
    )
    return result


def summary(r: dict) -> str:
    return (
        f"finished {r['finished']} in {r.get('seconds', 0):.0f}s, served {r['served']}, events {r['events']}, "
        f"words off {r['missing']} (seed {SEED})"
    )


class Nodes:
    """kill/restart of a kesque or a Kafka cluster's node by id (1, 2, 3)."""

    def __init__(self, kind: str, cluster):
        self.kind, self.cluster = kind, cluster
        self.bootstrap_servers = cluster.bootstrap_servers

    def kill(self, node: int) -> None:
        self.cluster.node(node).kill()

    def restart(self, node: int) -> None:
        if self.kind == "kesque":
            self.cluster.restart(node)
        else:
            self.cluster.node(node).start()


@pytest.fixture(params=["kesque", "kafka"])
def nodes(request, tmp_path):
    if request.param == "kesque":
        with Cluster(nodes=3, data_dir=str(tmp_path / "kesque"), config=CONFIG) as c:
            yield Nodes("kesque", c)
    else:
        with K.KafkaCluster(3, config=CONFIG) as c:
            yield Nodes("kafka", c)


def test_word_count_exactly_once_kesque_and_kafka(tmp_path):
    values = lines(LINES, SEED)
    with Cluster(nodes=3, data_dir=str(tmp_path / "kesque"), config=CONFIG) as c:
        kesque = run_word_count(c.bootstrap_servers, str(tmp_path / "kesque-run"), values)
    with K.KafkaCluster(3, config=CONFIG) as kc:
        kafka = run_word_count(kc.bootstrap_servers, str(tmp_path / "kafka-run"), values)
    print(f"\nkesque: {summary(kesque)}\nkafka:  {summary(kafka)}")

    # the oracle first: Kafka's run is what this test means by a clean run
    assert kafka["finished"] and kafka["counts"] == kafka["expected"], f"Kafka: {summary(kafka)}"
    ev = kesque["events"]
    app = kesque["app"]
    assert ev["out_of_order"] == 0, (
        f"kesque: OutOfOrderSequenceException in the Streams log: {summary(kesque)}\n"
        + "\n".join(app.samples("OutOfOrderSequenceException"))
    )
    assert ev["fenced"] == ev["replaced"] == ev["task_migrated"] == ev["producer_fenced"] == 0, (
        f"kesque: stream threads fenced: {summary(kesque)}\n" + "\n".join(app.samples("fenced"))
    )
    assert kesque["finished"] and kesque["counts"] == kesque["expected"], f"kesque: {summary(kesque)}"
    assert kesque["decreases"] == [], f"kesque: counts went down: {kesque['decreases'][:10]}"
    assert kesque["counts"] == kafka["counts"]


def test_word_count_exactly_once_brokers_killed(nodes, tmp_path):
    """The input written in steps (2,000 lines a second) while the app runs; once the output
    moves, one broker is SIGKILLed, restarted after a pause, and once the output moves again after
    it is back, a second broker the same way. On kesque, and on Kafka (the reference: what a kill
    costs the app there is printed beside kesque's).

    Before the first kill the run is calm, and held to test 1's bar: no OutOfOrderSequence, no
    thread fenced or dead. After it, threads may be fenced (a transaction cut by a dead leader
    times out and the coordinator bumps the epoch); the data must stay exact."""
    c = nodes
    rng = random.Random(SEED)
    victims = rng.sample([1, 2, 3], 2)
    values = lines(LINES, SEED)
    done: list[str] = []
    kill_times: list[float] = []

    def during(produce_all, tail):
        feeder = threading.Thread(target=produce_all, args=((2000, 1.0),), daemon=True)
        feeder.start()
        for v in victims:
            before = tail.count
            deadline = time.monotonic() + 120
            while tail.count < before + 1000 and time.monotonic() < deadline:
                time.sleep(0.2)
            if not kill_times:
                kill_times.append(time.time())
            c.kill(v)
            done.append(f"killed {v} at {tail.count} served")
            time.sleep(rng.uniform(2.0, 6.0))
            c.restart(v)
            done.append(f"restarted {v}")
        feeder.join(600)
        return done

    r = run_word_count(c.bootstrap_servers, str(tmp_path / "run"), values, during=during)
    calm = r["app"].events(until=kill_times[0]) if kill_times else {}
    print(f"\n{c.kind} with kills {done}: {summary(r)}; before the first kill {calm}")
    assert len(done) == 4, f"the kills did not all happen: {done}; {summary(r)}"
    bad = {k: n for k, n in calm.items() if k != "errors" and n}
    assert not bad, f"{c.kind}: before any kill: {bad}; {summary(r)}\n" + "\n".join(
        r["app"].samples("Exception", 4, until=kill_times[0])
    )
    assert r["finished"] and r["counts"] == r["expected"], f"{done}: {summary(r)}"
    assert r["decreases"] == [], f"{done}: counts went down: {r['decreases'][:10]}; {summary(r)}"
