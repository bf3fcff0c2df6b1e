"""A read-process-write (exactly-once) processor, run as a script by
tests/test_transactions_eos.py so that the test can SIGKILL / SIGSTOP it.

    python tests/eos_processor.py '<json spec>'

The spec: bootstrap, group, input, output, txn_id, consumer (extra consumer config), batch
(records per transaction), txn_delay (seconds slept inside each transaction, between the
produce and the offsets, so that a kill lands inside a transaction), pause_file (when that
file exists, the next transaction stops itself with SIGSTOP after producing and before
sending its offsets, once: a zombie whose group membership expires while it holds an open
transaction).

The loop is the one of confluent-kafka's EOS example: consume a batch (isolation.level
read_committed, no auto commit), begin_transaction, produce f"out-{value}" for each record,
send_offsets_to_transaction(position(assignment()), consumer_group_metadata()),
commit_transaction. On an abortable error the transaction is aborted and the consumer
rewound to the committed offsets; a retriable error of commit_transaction is retried; a
fatal error ends the process (exit code 3).

With EOS_DEBUG_DIR set in its environment, the producer's librdkafka debug log (eos, protocol,
broker) goes to EOS_DEBUG_DIR/proc-<pid>.log.

It prints one line per event on stdout (the test reads them):
    READY <txn_id>                              init_transactions done
    ASSIGN <partitions> / REVOKE <partitions> / LOST <partitions>
    COMMITTED <records> <total records committed by this process>
    COMMIT-FAILED <error name> <code> abortable=<0|1> retriable=<0|1> fatal=<0|1> <message>
    ABORTED                                     abort_transaction done
    PAUSE <records> / RESUMED                   around the self-SIGSTOP
    FATAL <message>
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer

TIMEOUT = 30.0


def say(*parts) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def producer_config(spec: dict, debug: bool = False) -> dict:
    """The transactional producer's configuration (also used by the regression test of the
    librdkafka hang below, tests/test_replication_chaos.py)."""
    return {
        "bootstrap.servers": spec["bootstrap"],
        "transactional.id": spec["txn_id"],
        "linger.ms": 5,
        "transaction.timeout.ms": spec.get("transaction_timeout_ms", 20000),
        "client.id": spec["txn_id"] + "-producer",
        # librdkafka 2.16 (its issues #5511 and #5456): a broker that leaves the Metadata
        # (fenced after a crash) is decommissioned but stays cached as the group coordinator;
        # send_offsets_to_transaction then waits for that dead handle to come up, past its
        # timeout, and looks the coordinator up again only when some broker connection goes
        # up or down. Closing idle connections makes that happen (Kafka drops fenced brokers
        # from Metadata too: the same hang happens against it).
        "connections.max.idle.ms": spec.get("producer_idle_ms", 3000),
        **({"debug": "eos,protocol,broker"} if debug else {}),
    }


def main(spec: dict) -> int:
    bootstrap, out_topic = spec["bootstrap"], spec["output"]
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": spec["group"],
        "client.id": spec["txn_id"],
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 50,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    conf.update(spec.get("consumer", {}))
    debug_dir = os.environ.get("EOS_DEBUG_DIR")
    if debug_dir:  # librdkafka's debug log (it writes to stderr, which the tests discard)
        fd = os.open(os.path.join(debug_dir, f"proc-{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 2)
    consumer = Consumer(conf)
    producer = Producer(producer_config(spec, debug=bool(debug_dir)))
    producer.init_transactions(TIMEOUT)
    say("READY", spec["txn_id"])

    def names(parts):
        return ",".join(str(p.partition) for p in parts) or "-"

    consumer.subscribe(
        [spec["input"]],
        on_assign=lambda _c, ps: say("ASSIGN", names(ps)),
        on_revoke=lambda _c, ps: say("REVOKE", names(ps)),
        on_lost=lambda _c, ps: say("LOST", names(ps)),
    )

    def rewind() -> None:
        """Back to the committed offsets (the aborted batch is processed again)."""
        assignment = consumer.assignment()
        if not assignment:
            return
        try:
            for tp in consumer.committed(assignment, timeout=TIMEOUT):
                tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(tp)
        except KafkaException as e:
            say("REWIND-FAILED", json.dumps(str(e)))

    def failed(err: KafkaError) -> None:
        say(
            "COMMIT-FAILED",
            err.name(),
            err.code(),
            f"abortable={int(err.txn_requires_abort())}",
            f"retriable={int(err.retriable())}",
            f"fatal={int(err.fatal())}",
            json.dumps(err.str()),
        )

    batch = spec.get("batch", 50)
    txn_delay = spec.get("txn_delay", 0.0)
    pause_file = spec.get("pause_file")
    paused = False
    total = 0
    while True:
        msgs = consumer.consume(batch, 0.2)
        records = []
        for m in msgs:
            if m.error():
                say("CONSUME-ERROR", json.dumps(str(m.error())))
                if m.error().fatal():
                    say("FATAL", json.dumps(str(m.error())))
                    return 3
                continue
            records.append(m)
        if not records:
            continue
        try:
            producer.begin_transaction()
            for m in records:
                producer.produce(out_topic, key=m.key(), value=b"out-" + m.value())
            if txn_delay:
                time.sleep(txn_delay)
            if pause_file and not paused and os.path.exists(pause_file):
                paused = True
                producer.flush(TIMEOUT)  # the records are in the log, in the open transaction
                say("PAUSE", len(records))
                os.kill(os.getpid(), signal.SIGSTOP)
                say("RESUMED")
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT
            )
            while True:
                try:
                    producer.commit_transaction(TIMEOUT)
                    break
                except KafkaException as e:
                    if e.args[0].retriable() and not e.args[0].txn_requires_abort():
                        failed(e.args[0])
                        continue
                    raise
        except KafkaException as e:
            err = e.args[0]
            failed(err)
            if not err.txn_requires_abort():
                say("FATAL", json.dumps(err.str()))
                return 3
            producer.abort_transaction(TIMEOUT)
            say("ABORTED")
            rewind()
            continue
        total += len(records)
        say("COMMITTED", len(records), total)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(main(json.loads(sys.argv[1])))
