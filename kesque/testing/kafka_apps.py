"""Kafka's own exactly-once applications, run against any cluster (kesque's or Kafka's): the
harness of tests/test_streams_eos.py, tests/test_txn_copier_chaos.py and bench/eos_apps.py.

* :class:`WordCount` runs the Kafka Streams word count of ``oracle/streams`` (``make kafka``
  builds it into ``build/kafka/streams``): lines in, (word, count) out, ``exactly_once_v2``,
  a repartition topic (groupBy) and a changelog topic (count). Its log (log4j2: the Streams
  classes at INFO, the rest at WARN) is read by :meth:`WordCount.events` for what a test counts:
  ``OutOfOrderSequenceException``, threads fenced, threads replaced.
* :class:`Copier` runs ``org.apache.kafka.tools.TransactionalMessageCopier`` (kafka-tools), as
  Kafka's system test ``tests/kafkatest/tests/core/transactions_test.py`` does: one copier per
  input partition, its JSON progress lines on stdout.
* :class:`Tail` reads topics with ``read_committed`` for the whole run: what was served, in order.

Nothing here asserts: tests and benchmarks decide what the figures mean.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from . import kafka as K
from .broker import terminate

STREAMS_ENV = "KESQUE_STREAMS_DIR"
COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
APP_JVM = ["-Xmx384m", "-Xms64m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
COPIER_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]

STREAMS_LOG4J = """\
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p [%t] %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.streams.name = org.apache.kafka.streams
logger.streams.level = INFO
"""

# one log event per match (the first line of an event: "[date] LEVEL [thread] message (logger)")
EVENT = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] (\w+) ", re.M)


def streams_dir() -> Path:
    return Path(os.environ.get(STREAMS_ENV) or K.libs_dir().parent / "streams")


def streams_jar() -> Path:
    return streams_dir() / "kesque-streams-wordcount.jar"


def streams_unavailable() -> str | None:
    """Why the Streams app cannot run here (one line), or None."""
    reason = K.unavailable()
    if reason:
        return reason
    if not streams_jar().exists() or not list((streams_dir() / "libs").glob("kafka-streams-*.jar")):
        return f"the Kafka Streams word count is not built in {streams_dir()}: run `make kafka`"
    return None


def _read(path) -> str:
    """A file's text, or "" when it is not there (yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _stop(process: subprocess.Popen | None, timeout: float) -> None:
    if process is not None:
        terminate(process, timeout)


# ---------------------------------------------------------------------- Kafka Streams
class WordCount:
    """One instance of the word count (a JVM with ``threads`` stream threads)."""

    def __init__(
        self,
        bootstrap: str,
        input_topic: str,
        output_topic: str,
        application_id: str,
        work_dir: str,
        threads: int = 2,
        replication: int = 3,
    ):
        self.args = [
            bootstrap,
            input_topic,
            output_topic,
            application_id,
            os.path.join(work_dir, "state"),
            threads,
            replication,
        ]
        self.work_dir = work_dir
        os.makedirs(work_dir, exist_ok=True)
        self.log_path = os.path.join(work_dir, "streams.log")
        self.stdout_path = os.path.join(work_dir, "stdout.log")
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None

    def start(self) -> WordCount:
        log4j = os.path.join(self.work_dir, "log4j2.properties")
        with open(log4j, "w") as f:
            f.write(STREAMS_LOG4J.format(log=self.log_path))
        cp = os.pathsep.join(
            [str(streams_jar()), *sorted(str(p) for p in (streams_dir() / "libs").glob("*.jar")), K.classpath()]
        )
        argv = [
            "java",
            *APP_JVM,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            cp,
            "io.kesque.streams.WordCount",
            *map(str, self.args),
        ]
        with open(self.stdout_path, "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.started_at = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (the app closes its KafkaStreams), SIGKILL past ``timeout``."""
        _stop(self.process, timeout)

    def __enter__(self) -> WordCount:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def text(self) -> str:
        parts = []
        for path in (self.log_path, self.stdout_path):
            try:
                with open(path, errors="replace") as f:
                    parts.append(f.read())
            except OSError:
                pass
        return "\n".join(parts)

    def events(self, until: float | None = None) -> dict[str, int]:
        """Counts of what the exactly-once tests look for, from the app's log and stdout:

        - ``out_of_order``: log events naming ``OutOfOrderSequenceException`` (the producer's
          error, and Streams' "Error encountered sending record ..." that turns it into a
          TaskMigratedException);
        - ``fenced``: "Detected that the thread is being fenced" (StreamThread.handleTaskMigrated:
          the thread drops every task and rejoins the group; what a TaskMigratedException,
          ProducerFencedException, InvalidProducerEpochException or OutOfOrderSequenceException
          of a task's producer ends in);
        - ``task_migrated`` and ``producer_fenced``: log events naming those exceptions;
        - ``replaced``: stream threads that died of an exception and were replaced (the app's
          handler prints "uncaught ... (replacing the thread)");
        - ``errors``: ERROR log events.

        ``until`` (a ``time.time()``): only the log events before it; the threads replaced are then
        counted from KafkaStreams' "Replacing thread" log event rather than from stdout.
        """
        events = _events(_read(self.log_path), until)
        out = _read(self.stdout_path)
        return {
            "out_of_order": sum("OutOfOrderSequenceException" in e for _, e in events),
            "fenced": sum("Detected that the thread is being fenced" in e for _, e in events),
            "task_migrated": sum("TaskMigratedException" in e for _, e in events),
            "producer_fenced": sum("ProducerFencedException" in e for _, e in events),
            "replaced": out.count("(replacing the thread)")
            if until is None
            else sum("Replacing thread in the streams uncaught exception handler" in e for _, e in events),
            "errors": sum(level == "ERROR" for level, _ in events),
        }

    def samples(self, what: str, limit: int = 3, until: float | None = None) -> list[str]:
        """The first lines of up to ``limit`` log events naming ``what`` (for a failure message)."""
        try:
            with open(self.log_path, errors="replace") as f:
                log = f.read()
        except OSError:
            return []
        return [e[:600] for _, e in _events(log, until) if what in e][:limit]


def _events(log: str, until: float | None = None) -> list[tuple[str, str]]:
    """(level, whole event text: message and stack trace) of every event of a log4j file (before
    ``until``, a ``time.time()``, when given: the layout's date is local time, to the millisecond)."""
    starts = list(EVENT.finditer(log))
    out = []
    for i, m in enumerate(starts):
        if until is not None:
            stamp = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
            if stamp >= until:
                break
        out.append((m.group(3), log[m.start() : starts[i + 1].start() if i + 1 < len(starts) else len(log)]))
    return out


# ---------------------------------------------------------------------- the transactional copier
class Copier:
    """One TransactionalMessageCopier process (restartable), as Kafka's system test runs it:
    ``--input-partition`` of the input topic copied to the same partition of the output topic,
    ``--transaction-size`` records per transaction, offsets committed in the transaction."""

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        group: str,
        input_topic: str,
        partition: int,
        output_topic: str,
        work_dir: str,
        transaction_size: int = 750,
        transaction_timeout: int = 40000,
        use_group_metadata: bool = False,
    ):
        self.transactional_id = transactional_id
        self.args = [
            "--broker-list",
            bootstrap,
            "--transactional-id",
            transactional_id,
            "--consumer-group",
            group,
            "--input-topic",
            input_topic,
            "--output-topic",
            output_topic,
            "--input-partition",
            partition,
            "--transaction-size",
            transaction_size,
            "--transaction-timeout",
            transaction_timeout,
        ]
        if use_group_metadata:
            self.args.append("--use-group-metadata")
        self.work_dir = work_dir
        os.makedirs(work_dir, exist_ok=True)
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.consumed = 0  # of this process (the copier counts since its start)
        self.remaining = -1
        self.total = 0  # over every process
        self.finished = False  # a process shut down with nothing remaining
        self.starts = 0
        self.exits: list[int] = []
        self._reader: threading.Thread | None = None

    def start(self) -> Copier:
        with self.lock:
            self.consumed, self.remaining = 0, -1
        err = open(os.path.join(self.work_dir, f"stderr-{self.starts}.log"), "wb")
        self.process = subprocess.Popen(
            K.java_command(COPIER, self.args, jvm=COPIER_JVM), stdout=subprocess.PIPE, stderr=err
        )
        err.close()
        self.starts += 1
        self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        self._reader.start()
        return self

    def _read(self, process: subprocess.Popen) -> None:
        with open(os.path.join(self.work_dir, "stdout.log"), "ab") as keep:
            for line in process.stdout:
                keep.write(line)
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                with self.lock:
                    self.remaining = int(data["remaining"])
                    self.consumed = int(data["consumed"])
                    if data["stage"] == "ShutdownComplete" and self.remaining == 0:
                        self.finished = True
        process.wait()
        with self.lock:
            self.exits.append(process.returncode)

    def progress_percent(self) -> float:
        with self.lock:
            if self.remaining < 0:
                return 0.0
            if self.consumed + self.remaining == 0:
                return 100.0
            return 100.0 * self.consumed / (self.consumed + self.remaining)

    def done(self) -> bool:
        return self.finished and self.process is not None and self.process.poll() is not None

    def failed(self) -> bool:
        """The running process exited before copying everything (the copier exits 1 on an error it
        does not abort and retry, e.g. ProducerFencedException after its transaction timed out)."""
        return self.process is not None and self.process.poll() not in (None, 0) and not self.finished

    def count(self, what: str) -> int:
        """Lines of the copiers' stderr (its WARN log) naming ``what``, over every start."""
        n = 0
        for i in range(self.starts):
            try:
                with open(os.path.join(self.work_dir, f"stderr-{i}.log"), errors="replace") as f:
                    n += sum(what in line for line in f)
            except OSError:
                pass
        return n

    def bounce(self, clean: bool) -> None:
        """SIGTERM (the copier's shutdown hook prints ShutdownComplete) or SIGKILL, then start again."""
        self.stop(clean)
        self.start()

    def stop(self, clean: bool = True, timeout: float = 60.0) -> None:
        if self.process is None:
            return
        if clean:
            _stop(self.process, timeout)
        elif self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self._reader is not None:
            self._reader.join(10)

    def stderr(self) -> str:
        out = []
        for i in range(self.starts):
            try:
                with open(os.path.join(self.work_dir, f"stderr-{i}.log"), errors="replace") as f:
                    out.append("".join(line for line in f if not line.startswith("\tat "))[-2000:])
            except OSError:
                pass
        return "\n".join(out)


# ---------------------------------------------------------------------- reading
class Tail(threading.Thread):
    """A read_committed consumer of every partition of ``topic`` from offset 0 for the whole run:
    ``served[partition]`` is what it was served, (key, value) in offset order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed"):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions, self.isolation = bootstrap, topic, partitions, isolation
        self.served: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(partitions)}
        self.offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.count = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tail-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "isolation.level": self.isolation,
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        try:
            c.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            while not self.stopping.is_set():
                for m in c.consume(1000, 0.2):
                    if m.error():
                        continue
                    self.served[m.partition()].append((m.key(), m.value()))
                    self.offsets[m.partition()].append(m.offset())
                    self.count += 1
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            self.error = e
        finally:
            c.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def create_topics(
    bootstrap: str, topics: dict[str, int], replication: int = 3, config: dict | None = None, timeout: float = 60.0
) -> None:
    """CreateTopics through the AdminClient (both clusters), then wait until every partition has
    a leader in Metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, n, replication, config=dict(config or {})) for t, n in topics.items()], operation_timeout=30
    )
    for f in futures.values():
        f.result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=10)
        if all(
            t in md.topics
            and len(md.topics[t].partitions) == n
            and all(p.leader >= 0 for p in md.topics[t].partitions.values())
            for t, n in topics.items()
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics {list(topics)} without leaders after {timeout}s")
        time.sleep(0.2)


def under_replicated(bootstrap: str) -> list[str]:
    """Partitions (every topic, internal ones included) whose ISR is smaller than their replica set."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return [
        f"{t}-{p.id}"
        for t, tm in md.topics.items()
        for p in tm.partitions.values()
        if len(p.isrs) < len(p.replicas) or p.leader < 0
    ]


def produce(bootstrap: str, topic: str, values, partition_of=None, timeout: float = 300.0) -> int:
    """An idempotent acks=all producer writing ``values`` (bytes), each to ``partition_of(i)`` when
    given; returns how many were acknowledged (raises if any failed)."""
    errors: list[str] = []
    acked = [0]

    def report(err, _msg):
        if err is None:
            acked[0] += 1
        else:
            errors.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": int(timeout * 1000),
            "queue.buffering.max.messages": 200000,
        }
    )
    for i, v in enumerate(values):
        kw = {} if partition_of is None else {"partition": partition_of(i)}
        while True:
            try:
                p.produce(topic, v, on_delivery=report, **kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(timeout)
    if errors or left:
        raise RuntimeError(f"producing to {topic}: {left} not delivered, errors {Counter(errors).most_common(3)}")
    return acked[0]


# ---------------------------------------------------------------------- the word count's data
def word_lines(n: int, words: int, seed: int) -> list[bytes]:
    """``n`` lines of three words ``wNNNNN`` drawn (seeded) from a vocabulary of ``words``."""

    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(words):05d}" for _ in range(3)).encode() for _ in range(n)]


def word_counts(lines: list[bytes]) -> Counter:
    return Counter(w for v in lines for w in v.decode().split())


def latest_counts(tail: Tail) -> dict[str, int]:
    """word -> the last count the tail was served (the count's output: String key, Long value)."""

    out = {}
    for records in tail.served.values():
        for k, v in list(records):
            out[k.decode()] = struct.unpack(">q", v)[0]
    return out
