"""Issue 25, section 2: Kafka's own transactional copy test on kesque, as Kafka's system test
``tests/kafkatest/tests/core/transactions_test.py`` runs it (``make chaos``, marked slow).

:data:`RECORDS` integers are written (idempotent, acks=all) to an input topic of 2 partitions; one
``org.apache.kafka.tools.TransactionalMessageCopier`` per input partition (Kafka 4.4's kafka-tools,
each ``--transactional-id copier-<p>``, :data:`TXN_SIZE` records a transaction, the consumer's
offsets committed in the transaction) copies its partition to the same partition of an output
topic of 3 partitions, both topics RF 3 with ``min.insync.replicas=2``, on 3 brokers and a
controller of their own (Kafka's test runs one controller). Meanwhile, as Kafka's test matrix
does, either

* ``brokers``: every broker in turn is stopped, hard (SIGKILL, then a pause longer than
  ``broker.session.timeout.ms`` so that the controller fences it) or clean (SIGTERM: controlled
  shutdown), started again, and the next waits until no partition is under-replicated; or
* ``clients``: three times, each copier is stopped (SIGKILL or SIGTERM) once it has copied 20% of
  what it had left, and started again (it resumes from its committed offsets).

Then the output read with read_committed, by a consumer that read it during the whole run and
by a fresh one afterwards, must hold exactly the input: no duplicate, nothing missing, and each
partition in the input partition's order.

The seed (``KESQUE_CHAOS_SEED``) only picks the order of the brokers bounced and the pauses.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from kesque.testing import kafka as K
from kesque.testing import kafka_apps as A
from kesque.testing.cluster import Cluster

REASON = K.unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

RECORDS = int(os.environ.get("KESQUE_COPIER_RECORDS", 100_000))
INPUT_PARTITIONS, OUTPUT_PARTITIONS = 2, 3
TXN_SIZE = 750
TXN_TIMEOUT_MS = 40_000  # Kafka's test: below its progress timeout, above the request timeout
PROGRESS_TIMEOUT = 90  # s without a copier reaching 20% (Kafka's test: 60)
COPY_TIMEOUT = 300  # s for every copier to finish after the bounces (Kafka's test: 120)
SEED = int(os.environ.get("KESQUE_CHAOS_SEED", random.randrange(1 << 30)))
# tests/test_replication.py's timings (a broker is fenced 3 s after its last heartbeat); Kafka's
# test waits out an 18 s session timeout after each hard kill
CONFIG = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "replica.high.watermark.checkpoint.interval.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "auto.create.topics.enable": "false",
}
SESSION_S = 3.0


COPIERS: list[A.Copier] = []  # of the running test: a copier that exits on an error fails it at once


def wait_for(predicate, timeout: float, what: str, pause: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for c in COPIERS:
            if c.failed():
                raise AssertionError(
                    f"{c.transactional_id} exited {c.process.returncode} before copying everything "
                    f"({c.progress_percent():.0f}% of its last start), "
                    f"{c.count('OUT_OF_ORDER_SEQUENCE_NUMBER')} OUT_OF_ORDER_SEQUENCE_NUMBER "
                    f"answers (seed {SEED}):\n{c.stderr()[-1500:]}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s (seed {SEED})")
        time.sleep(pause)


def seed_input(bootstrap: str) -> dict[int, list[bytes]]:
    """RECORDS integers, i to partition i % 2: per partition, ascending."""
    values = [str(i).encode() for i in range(RECORDS)]
    A.produce(bootstrap, "input-topic", values, partition_of=lambda i: i % INPUT_PARTITIONS)
    return {p: values[p::INPUT_PARTITIONS] for p in range(INPUT_PARTITIONS)}


def copying(copiers) -> bool:
    return any(not c.done() for c in copiers)


def bounce_brokers(
    cluster: Cluster, rng: random.Random, clean: bool, copiers, log: list[str], mid_copy: list[bool]
) -> None:
    for node in rng.sample([s.node_id for s in cluster.specs if s.is_broker], 3):
        mid_copy.append(copying(copiers))
        log.append(
            f"{'SIGTERM' if clean else 'SIGKILL'} broker {node} at "
            f"{[round(c.progress_percent()) for c in copiers]}% copied"
        )
        if clean:
            cluster.restart(node)
        else:
            cluster.kill(node)
            time.sleep(SESSION_S + rng.uniform(0.5, 2.0))  # fenced by the controller, as Kafka's test waits
            cluster.restart(node)
        wait_for(
            lambda: not A.under_replicated(cluster.bootstrap_servers),
            120,
            f"no under-replicated partition after bouncing broker {node}",
        )


def bounce_copiers(copiers, clean: bool, log: list[str], mid_copy: list[bool]) -> None:
    for _ in range(3):
        for c in copiers:
            wait_for(
                lambda: c.progress_percent() >= 20.0 or c.done(),
                PROGRESS_TIMEOUT,
                f"{c.transactional_id} copying 20% of what it had left ({c.progress_percent():.0f}%)",
            )
            mid_copy.append(not c.done())
            if c.done():
                log.append(f"{c.transactional_id} done")
                continue
            log.append(f"{'SIGTERM' if clean else 'SIGKILL'} {c.transactional_id} at {c.progress_percent():.0f}%")
            c.bounce(clean)


def read_output(bootstrap: str, at_least: int, timeout: float = 120) -> A.Tail:
    """A fresh read_committed consumer of the output, until it has ``at_least`` records and one
    more second has brought nothing (a duplicate would come after)."""
    tail = A.Tail(bootstrap, "output-topic", OUTPUT_PARTITIONS)
    tail.start()
    try:
        wait_for(lambda: tail.count >= at_least, timeout, f"reading {at_least} committed records ({tail.count})")
        settled = -1
        while settled != tail.count:
            settled = tail.count
            time.sleep(1.0)
    finally:
        tail.stop()
    return tail


def check_copy(inputs: dict[int, list[bytes]], tail: A.Tail, who: str) -> None:
    flat = [v for p in range(OUTPUT_PARTITIONS) for _, v in tail.served[p]]
    dups = len(flat) - len(set(flat))
    assert dups == 0, f"{who}: {dups} duplicates in the output (seed {SEED})"
    want = {v for vs in inputs.values() for v in vs}
    missing, extra = want - set(flat), set(flat) - want
    assert not missing and not extra, (
        f"{who}: {len(missing)} input records missing, {len(extra)} not from the input (seed {SEED})"
    )
    for p in range(OUTPUT_PARTITIONS):
        got = [v for _, v in tail.served[p]]
        if got != inputs.get(p, []):
            first = next(i for i, (a, b) in enumerate(zip(got, inputs[p])) if a != b)
            pytest.fail(
                f"{who}: output partition {p} out of order at {first}: {got[first : first + 3]} "
                f"where the input has {inputs[p][first : first + 3]} (seed {SEED})"
            )


@pytest.mark.parametrize("target", ["brokers", "clients"])
@pytest.mark.parametrize("failure", ["hard_bounce", "clean_bounce"])
def test_transactional_copy(tmp_path, failure, target):
    clean = failure == "clean_bounce"
    rng = random.Random(f"{SEED}-{failure}-{target}")
    log: list[str] = []
    mid_copy: list[bool] = []  # per bounce: was a copy in progress
    with Cluster(nodes=3, controllers=1, data_dir=str(tmp_path / "kesque"), config=CONFIG) as cluster:
        bs = cluster.bootstrap_servers
        A.create_topics(bs, {"input-topic": INPUT_PARTITIONS}, 3, {"min.insync.replicas": "2"})
        A.create_topics(bs, {"output-topic": OUTPUT_PARTITIONS}, 3, {"min.insync.replicas": "2"})
        inputs = seed_input(bs)
        copiers = [
            A.Copier(
                bs,
                f"copier-{p}",
                "transactions-test-consumer-group",
                "input-topic",
                p,
                "output-topic",
                str(tmp_path / f"copier-{p}"),
                TXN_SIZE,
                TXN_TIMEOUT_MS,
            )
            for p in range(INPUT_PARTITIONS)
        ]
        COPIERS[:] = copiers
        concurrent = A.Tail(bs, "output-topic", OUTPUT_PARTITIONS)
        t0 = time.monotonic()
        try:
            for c in copiers:
                c.start()
            concurrent.start()
            wait_for(lambda: concurrent.count > 0, 60, "the first committed output record")
            if target == "brokers":
                bounce_brokers(cluster, rng, clean, copiers, log, mid_copy)
            else:
                bounce_copiers(copiers, clean, log, mid_copy)
            for c in copiers:
                wait_for(
                    c.done,
                    COPY_TIMEOUT,
                    f"{c.transactional_id} copying everything ({c.progress_percent():.0f}%, "
                    f"exits {c.exits}; bounces {log}):\n{c.stderr()[-1500:]}",
                )
            seconds = time.monotonic() - t0
            wait_for(
                lambda: concurrent.count >= RECORDS,
                120,
                f"the concurrent consumer reading {RECORDS} ({concurrent.count})",
            )
            time.sleep(1.0)
        finally:
            COPIERS.clear()
            for c in copiers:
                c.stop(clean=False)
            concurrent.stop()
        final = read_output(bs, RECORDS)
    print(
        f"\n{failure} {target}: {RECORDS} copied in {seconds:.1f}s ({RECORDS / seconds:.0f} records/s), "
        f"copier starts {[c.starts for c in copiers]}, OUT_OF_ORDER_SEQUENCE_NUMBER answers "
        f"{[c.count('OUT_OF_ORDER_SEQUENCE_NUMBER') for c in copiers]}, bounces {log} (seed {SEED})"
    )
    # the bounces hit a copy in progress (else the test would only have copied on a calm cluster)
    assert mid_copy and mid_copy[0], f"the first bounce came after the copy: {log}"
    check_copy(inputs, concurrent, "the consumer reading during the copy")
    check_copy(inputs, final, "a consumer reading after the copy")
