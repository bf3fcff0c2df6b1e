"""Kafka's own exactly-once applications on a 3-node kesque beside a 3-node Apache Kafka in the same
run (issue 25, section 3; ``--only eos-apps``). The applications and their harness are those of
tests/test_streams_eos.py and tests/test_txn_copier_chaos.py (``kesque.testing.kafka_apps``).

* **Kafka Streams word count, exactly_once_v2**: ``eos_lines`` lines of three words (a vocabulary
  of 20,000) written to a 4-partition input topic before the app starts; the figure is lines per
  second from the app's start (its JVM, the group join, the internal topics' creation included)
  until a read_committed consumer of the output has the exact count of every word. The time to the
  first output record, the app's OutOfOrderSequence and fenced-thread events, and whether the
  counts were exact are in the details (a ``CHECK:`` in the note when they were not).
* **TransactionalMessageCopier**: ``copier_records`` integers in a 2-partition input topic, one
  copier per partition (750 records a transaction, as Kafka's system test), records per second
  from the copiers' start until both have copied everything; once on the calm cluster, once with
  every broker in turn SIGKILLed and restarted (after ``broker.session.timeout.ms``) while they
  copy; and once with each copier SIGKILLed when it has copied 20% and started again at once (its
  initTransactions fences the killed one's transaction, which must be aborted before it goes on).
  The output is checked (read_committed: the input set, no duplicate, order per partition);
  the OUT_OF_ORDER_SEQUENCE_NUMBER answers the copiers logged are in the details.

Both clusters are three combined KRaft nodes with the same settings; the clients are the same
JVM applications with the same options. Every function returns plain dicts; nothing asserts.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time

from kesque.testing import kafka as K
from kesque.testing import kafka_apps as A
from kesque.testing.cluster import Cluster

SETTINGS = {
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "auto.create.topics.enable": "false",
}
WORDS = 20_000
SESSION_S = 3.0


class _Kesque:
    def __init__(self, data_dir: str):
        self.c = Cluster(nodes=3, data_dir=data_dir, config=SETTINGS).start()
        self.bootstrap = self.c.bootstrap_servers
        self.ids = [1, 2, 3]

    def kill(self, n):
        self.c.kill(n)

    def restart(self, n):
        self.c.restart(n)

    def close(self):
        self.c.close()


class _Kafka:
    def __init__(self, _data_dir: str):
        self.c = K.KafkaCluster(3, config=SETTINGS).start()
        self.bootstrap = self.c.bootstrap_servers
        self.ids = [1, 2, 3]

    def kill(self, n):
        self.c.node(n).kill()

    def restart(self, n):
        self.c.node(n).start()

    def close(self):
        self.c.close()


def word_count(cl, lines: int, work: str, run: int) -> dict:
    values = A.word_lines(lines, WORDS, seed=run)
    expected = A.word_counts(values)
    inp, out = f"wc-in-{run}", f"wc-out-{run}"
    A.create_topics(cl.bootstrap, {inp: 4, out: 4}, 3, {"min.insync.replicas": "2"})
    A.produce(cl.bootstrap, inp, values)
    tail = A.Tail(cl.bootstrap, out, 4)
    app = A.WordCount(cl.bootstrap, inp, out, f"wordcount-{run}", os.path.join(work, f"wc-{run}"))
    tail.start()
    app.start()
    t0 = time.monotonic()
    first = None
    exact = False
    try:
        while time.monotonic() - t0 < 600 and app.alive():
            if first is None and tail.count:
                first = time.monotonic() - t0
            if A.latest_counts(tail) == expected:
                exact = True
                break
            time.sleep(0.2)
        seconds = time.monotonic() - t0
    finally:
        app.stop()
        tail.stop()
    return {
        "lines": lines,
        "words": sum(expected.values()),
        "seconds": seconds,
        "rate": lines / seconds,
        "first_output_s": first,
        "exact": exact,
        "served": tail.count,
        "events": app.events(),
    }


def copier(cl, records: int, work: str, run: str, bounce: bool = False, kill_copiers: bool = False) -> dict:
    inp, out = f"copy-in-{run}", f"copy-out-{run}"
    A.create_topics(cl.bootstrap, {inp: 2, out: 3}, 3, {"min.insync.replicas": "2"})
    values = [str(i).encode() for i in range(records)]
    A.produce(cl.bootstrap, inp, values, partition_of=lambda i: i % 2)
    copiers = [
        A.Copier(
            cl.bootstrap, f"copier-{run}-{p}", f"copier-{run}", inp, p, out, os.path.join(work, f"copier-{run}-{p}")
        )
        for p in range(2)
    ]
    bounces = []
    t0 = time.monotonic()
    try:
        for c in copiers:
            c.start()
        if bounce:
            rng = random.Random(run)
            for n in rng.sample(cl.ids, len(cl.ids)):
                if all(c.done() for c in copiers):
                    break
                bounces.append(f"SIGKILL {n} at {[round(c.progress_percent()) for c in copiers]}%")
                cl.kill(n)
                time.sleep(SESSION_S + 1.0)
                cl.restart(n)
                deadline = time.monotonic() + 120
                while A.under_replicated(cl.bootstrap) and time.monotonic() < deadline:
                    time.sleep(0.25)
        if kill_copiers:  # each copier SIGKILLed once it has copied 20% and started again at once
            for c in copiers:
                deadline = time.monotonic() + 300
                while c.progress_percent() < 20 and not c.done() and not c.failed() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not c.done() and not c.failed():
                    bounces.append(f"SIGKILL {c.transactional_id} at {c.progress_percent():.0f}%")
                    c.bounce(clean=False)
        deadline = time.monotonic() + 600
        while not all(c.done() for c in copiers) and time.monotonic() < deadline:
            if any(c.failed() for c in copiers):  # exited on an error: it will not finish
                break
            time.sleep(0.1)
        seconds = time.monotonic() - t0
        finished = all(c.done() for c in copiers)
        failed = [f"{c.transactional_id} exited {c.process.returncode}" for c in copiers if c.failed()]
        oos = [c.count("OUT_OF_ORDER_SEQUENCE_NUMBER") for c in copiers]
    finally:
        for c in copiers:
            c.stop(clean=False)
    tail = A.Tail(cl.bootstrap, out, 3)
    tail.start()
    deadline = time.monotonic() + 120
    while tail.count < records and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    tail.stop()
    got = {p: [v for _, v in tail.served[p]] for p in range(3)}
    ok = finished and got == {0: values[0::2], 1: values[1::2], 2: []}
    return {
        "records": records,
        "seconds": seconds,
        "rate": records / seconds,
        "finished": finished,
        "exact": ok,
        "read": tail.count,
        "bounces": bounces,
        "failed": failed,
        "out_of_order_answers": oos,
    }


def measure(kind: str, scale: dict, log=print) -> dict:
    """Both applications on one fresh 3-node cluster of ``kind`` ("kesque" or "kafka")."""
    work = tempfile.mkdtemp(prefix=f"bench-eos-{kind}-")
    out: dict = {"errors": []}
    cl = None
    try:
        cl = (_Kesque if kind == "kesque" else _Kafka)(os.path.join(work, "cluster"))
        for name, fn in (
            ("streams", lambda: word_count(cl, scale["eos_lines"], work, 1)),
            ("copier", lambda: copier(cl, scale["copier_records"], work, "calm", False)),
            ("copier_bounced", lambda: copier(cl, scale["copier_records"], work, "bounced", bounce=True)),
            ("copier_killed", lambda: copier(cl, scale["copier_records"], work, "killed", kill_copiers=True)),
        ):
            log(f"eos-apps: {kind}: {name} ...")
            try:
                out[name] = fn()
                log(f"eos-apps: {kind}: {name}: {out[name]['rate']:,.0f}/s")
            except Exception as e:  # noqa: BLE001 (one part failing leaves the others)
                out["errors"].append(f"{kind} {name}: {e!r}")
                log(f"eos-apps: {kind}: {name} FAILED: {e!r}")
    finally:
        if cl is not None:
            cl.close()
        shutil.rmtree(work, ignore_errors=True)
    return out
