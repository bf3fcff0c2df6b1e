"""The writer side: every task writes its rows in a kesque transaction that it *prepares*
(KIP-939 two-phase commit) but does not commit; the driver commits them all.

Protocol (``deliveryGuarantee=exactly-once``, the default):

1. **Task** (executor): transactional id ``<prefix>.s<writer uuid>.<partition>.<attempt>``
   (``.b`` for a batch write) — one per attempt of a task, so attempts never fence each
   other, and the same ids serve every micro-batch of a run (the coordinator keeps a
   bounded set of ids, not one per task ever run). ``init_transactions`` with 2PC, write
   every row, ``prepare_transaction``; the commit message carries (transactional id,
   producer id, epoch). A failing task aborts its transaction on the way out (best effort;
   step 4 catches the rest).
2. **Driver, commit(messages, batchId)**: read this sink's last record from the sink log
   (topic ``sinkLogTopic``, key ``transactionalIdPrefix``).
   * batchId already *committed*: a replay — the new transactions are aborted, nothing
     else happens.
   * a batch left *committing* (the driver died inside step 3): its transactions are
     committed first (roll forward: a transaction already committed is simply no longer
     open), then it is marked committed; if it was this batchId, the new transactions are
     aborted — the first run's output stands.
3. Otherwise: check that every prepared transaction is still open as prepared (a
   transaction a later attempt took over fails the commit, and the batch is replayed), append
   ``{batchId, committing, transactions}`` (acks=all), commit every
   transaction — ``init_transactions(keep_prepared_txn=True)`` under its id, which fences
   the (finished) task and returns the prepared state, then ``complete_transaction`` —
   and append ``{batchId, committed}``.
4. **Sweep**: every transaction of this sink still open (ListTransactions, state Ongoing,
   id prefix) and not just committed is aborted: failed and speculative attempts, and the
   tasks of a run whose driver died before committing. A prepared transaction never times
   out, so without the sweep it would hold the partition's last stable offset back and
   stall every read_committed reader.

``abort(messages, batchId)`` aborts the given transactions and sweeps.
What is guaranteed, and to whom, is spelled out in docs/spark.md.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from ..client.cluster import Cluster
from ..client.consumer import EARLIEST, LATEST, WireConsumer
from ..client.producer import PreparedTxnState, Producer
from ..client.wire import WireError, make
from ..errors import KafkaError
from ..protocol.api_keys import ApiKeys
from ..records.records import encode_columns, murmur2_partitions
from .options import PRODUCER_PARAMS, SinkOptions, client_kwargs

log = logging.getLogger("kesque.spark")


COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class KesqueSinkError(RuntimeError):
    pass


try:  # the commit message must be a WriterCommitMessage for Spark to accept it
    from pyspark.sql.datasource import WriterCommitMessage as _Base
except ImportError:  # pragma: no cover - the sink always runs under pyspark
    _Base = object


@dataclass
class KesqueCommitMessage(_Base):
    transactional_id: str | None
    producer_id: int = -1
    epoch: int = -1
    rows: int = 0
    partitions: list = field(default_factory=list)

    @property
    def state(self) -> PreparedTxnState:
        return PreparedTxnState(self.producer_id, self.epoch)


# ---------------------------------------------------------------------- validation
def check_schema(schema, o: SinkOptions) -> None:
    """Spark's KafkaWriter.validateQuery, on the driver, before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if o.topic is None:
        if "topic" not in fields:
            raise KesqueSinkError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
            )
        if not isinstance(fields["topic"], StringType):
            raise KesqueSinkError(f"Topic type must be a StringType, got {fields['topic'].simpleString()}")
    if "value" not in fields:
        raise KesqueSinkError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise KesqueSinkError(
                f"{name} attribute type must be a StringType or BinaryType, got {fields[name].simpleString()}"
            )
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise KesqueSinkError(
            f"partition attribute type must be an IntegerType, got {fields['partition'].simpleString()}"
        )
    if "headers" in fields:
        h = fields["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in h.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]
        )
        if not ok:
            raise KesqueSinkError(
                f"headers attribute type must be array<struct<key:string,value:binary>>, got {h.simpleString()}"
            )


def _bytes(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


# ---------------------------------------------------------------------- executor side
def write_task(o: SinkOptions, batches, id_prefix: str) -> KesqueCommitMessage:
    """Write one task's Arrow batches; returns the commit message (prepared transaction)."""
    ctx = TaskContext.get()
    # one id per (partition, attempt) of this writer: a bounded set of ids, reused batch after
    # batch (the driver has committed batch N's before batch N+1's tasks start)
    attempt = f"{ctx.partitionId()}.{ctx.attemptNumber()}" if ctx is not None else uuid.uuid4().hex[:8]
    kw = client_kwargs(
        o.params,
        PRODUCER_PARAMS,
        client_id="kesque-spark-writer",
        timeout=o.api_timeout_ms / 1000,
        compression=COMPRESSION[o.params.get("compression.type", "none")],
    )
    if o.exactly_once:
        txn_id = f"{id_prefix}.{attempt}"
        p = Producer(o.bootstrap, transactional_id=txn_id, enable_2pc=True, **kw)
    else:
        txn_id = None
        p = Producer(o.bootstrap, **kw)
    rows = 0
    sticky = Sticky(int(o.params.get("batch.size", STICKY_BATCH_SIZE)))
    try:
        if txn_id is not None:
            try:
                p.init_transactions()
            except KafkaError as e:
                if int(e.code) == 53:
                    raise KesqueSinkError(
                        "the kesque sink writes exactly once with two-phase commit, which the brokers refused "
                        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED): set transaction.two.phase.commit.enable=true on "
                        "the brokers, or the option deliveryGuarantee=at-least-once"
                    ) from None
                raise
            p.begin_transaction()
        for batch in batches:
            if not _write_columns(p, o, batch, sticky):
                _write_rows(p, o, batch, sticky)
            rows += batch.num_rows
        if txn_id is None or rows == 0:  # nothing written: no transaction was opened
            p.flush()
            return KesqueCommitMessage(None, rows=rows)
        state = p.prepare_transaction()
        return KesqueCommitMessage(txn_id, state.producer_id, state.epoch, rows)
    except BaseException:
        if txn_id is not None and p.producer_id >= 0:
            try:
                p.abort_transaction()
            except Exception:  # the sweep aborts it later
                pass
        raise
    finally:
        p.close()


def _write_rows(p: Producer, o: SinkOptions, batch, sticky: Sticky) -> None:
    """Row by row: any topic column, headers."""
    cols = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    n = batch.num_rows
    values = cols["value"]
    keys = cols.get("key") or [None] * n
    topics = [o.topic] * n if o.topic is not None else cols["topic"]
    parts = cols.get("partition") or [None] * n
    headers = cols.get("headers") or [None] * n
    parts = list(parts)
    unkeyed: dict[str, list[int]] = {}
    for i in range(n):
        if keys[i] is None and parts[i] is None and topics[i] is not None:
            unkeyed.setdefault(topics[i], []).append(i)
    for topic, rows in unkeyed.items():
        sizes = np.array([_row_size(values[i], headers[i]) for i in rows], dtype=np.int64)
        for i, part in zip(rows, sticky.place(topic, sizes, len(p._topic_partitions(topic)))):
            parts[i] = int(part)
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise KesqueSinkError("null topic present in the data. Use the topic option for setting a topic.")
        hs = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else ()
        p.send(topic, _bytes(values[i]), key=_bytes(keys[i]), headers=hs, partition=parts[i])


def _row_size(value, headers) -> int:
    hs = sum(len(_bytes(h["key"])) + len(h["value"] or b"") for h in headers) if headers else 0
    return 16 + len(_bytes(value) or b"") + hs


def _binary_column(batch, name: str):
    """An Arrow column as encode_columns' (validity, offsets, data, slice offset), or None."""
    names = [x.lower() for x in batch.schema.names]
    if name not in names:
        return None
    arr = batch.column(names.index(name))
    if arr.type != pa.binary():
        arr = arr.cast(pa.binary())  # string -> binary shares the buffers
    valid, offsets, data = arr.buffers()[:3]
    return valid, offsets, data if data is not None else b"", arr.offset


STICKY_BATCH_SIZE = 16384  # the Java producer's batch.size default


class Sticky:
    """Where a task's unkeyed rows go, as the Java producer's sticky partitioner places them
    (BuiltInPartitioner without adaptive load statistics): a partition drawn uniformly at
    random takes the rows until about ``batch.size`` bytes have gone to it, then the next is
    drawn (it may be the same one). Kept per topic across the task's Arrow batches, computed
    per batch from the rows' cumulative sizes (no work per row in Python)."""

    def __init__(self, size: int, rng: np.random.Generator | None = None):
        self.size = max(1, size)
        self.rng = rng if rng is not None else np.random.default_rng()
        self._state: dict[str, tuple[int, int]] = {}  # topic -> (partition, bytes sent to it)

    def place(self, topic: str, sizes: np.ndarray, nparts: int) -> np.ndarray:
        """The partition of each row of ``sizes`` (bytes per row, in the order they are sent)."""
        if not len(sizes):
            return np.zeros(0, dtype=np.int32)
        current, carry = self._state.get(topic, (-1, 0))
        if current < 0 or current >= nparts:
            current, carry = int(self.rng.integers(nparts)), 0
        start = carry + np.cumsum(sizes) - sizes  # bytes sent to the sticky run before each row
        run = start // self.size  # a row that starts at or past batch.size opens a new run
        opens = np.empty(len(run), dtype=bool)
        opens[0] = False
        np.not_equal(run[1:], run[:-1], out=opens[1:])
        index = np.cumsum(opens)  # runs numbered 0, 1, ... (a row over several batch.size opens one)
        switches = int(index[-1])
        table = np.empty(switches + 1, dtype=np.int32)
        table[0] = current
        if switches:
            table[1:] = self.rng.integers(nparts, size=switches)
        self._state[topic] = (int(table[-1]), int(start[-1] + sizes[-1] - run[-1] * self.size))
        return table[index]


def _write_columns(p: Producer, o: SinkOptions, batch, sticky: Sticky) -> bool:
    """Column-wise, when every row goes to one topic and there are no headers: partitions
    from the partition column, murmur2 of the keys (compiled) or, without a key, the sticky
    partitioner's choice (``Sticky``), rows grouped by partition
    (a stable sort, so each partition keeps the rows' order) and encoded straight from the
    Arrow buffers into batch bodies. False when the batch needs the row path."""

    names = [x.lower() for x in batch.schema.names]
    n = batch.num_rows
    if n == 0:
        return True
    if "headers" in names:
        return False
    topic = o.topic
    if topic is None:
        col = batch.column(names.index("topic"))
        if col.null_count or len(col.unique()) != 1:
            return False
        topic = col[0].as_py()
    keys, values = _binary_column(batch, "key"), _binary_column(batch, "value")
    nparts = len(p._topic_partitions(topic))
    parts = np.frombuffer(murmur2_partitions(keys, n, nparts), dtype=np.int32).copy()
    sizes = 16 + _lengths(keys, n) + _lengths(values, n)
    unkeyed = parts < 0
    if "partition" in names:  # a partition given wins: such rows are not the sticky partitioner's
        unkeyed &= ~np.asarray(batch.column(names.index("partition")).is_valid())
    if unkeyed.any():  # no key: a new sticky partition about every batch.size bytes, as the Java producer
        parts[unkeyed] = sticky.place(topic, sizes[unkeyed], nparts)
    if "partition" in names:
        given = batch.column(names.index("partition"))
        mask = np.asarray(given.is_valid())
        if mask.any():
            parts[mask] = np.asarray(given.fill_null(0), dtype=np.int32)[mask]
        bad = parts[(parts < 0) | (parts >= nparts)]
        if len(bad):
            raise KesqueSinkError(
                f"Invalid partition given with record: {int(bad[0])} is not in the range [0...{nparts}]."
            )
    order = np.argsort(parts, kind="stable").astype(np.int32)
    sorted_parts = parts[order]
    cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
    for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [n]))):
        rows = order[lo:hi]
        total = np.cumsum(sizes[rows])
        # chunks of at most batch_size bytes with room for the batch header (one row at least)
        limit = max(1, p.batch_size - 1024)
        starts = [0]
        while True:
            nxt = int(np.searchsorted(total, total[starts[-1]] - sizes[rows[starts[-1]]] + limit, "right"))
            nxt = max(nxt, starts[-1] + 1)
            if nxt >= len(rows):
                break
            starts.append(nxt)
        for a, b in zip(starts, starts[1:] + [len(rows)]):
            chunk = rows[a:b]
            p.send_encoded(topic, int(sorted_parts[lo]), encode_columns(keys, values, chunk.tobytes()), len(chunk))
    return True


def _lengths(col, n: int):
    if col is None:
        return np.zeros(n, dtype=np.int64)
    offsets = np.frombuffer(col[1], dtype=np.int32)[col[3] : col[3] + n + 1]
    return np.diff(offsets).astype(np.int64)


# ---------------------------------------------------------------------- driver side
class SinkLog:
    """This sink's commit records in a compacted kesque topic, key = transactional id prefix."""

    WINDOW = 256

    def __init__(self, o: SinkOptions):
        self.o = o
        self.key = o.transactional_id_prefix.encode()

    def _ensure_topic(self) -> None:
        with Cluster(self.o.bootstrap, client_id="kesque-spark-driver") as c:
            if c.partitions_for(self.o.sink_log_topic) is not None:
                return

            def build(mod, v):
                rq = mod.request
                cfg = (make(rq.CreatableTopicConfig, name="cleanup.policy", value="compact"),)
                return make(
                    rq.CreateTopicsRequest,
                    topics=(
                        make(
                            rq.CreatableTopic,
                            name=self.o.sink_log_topic,
                            num_partitions=1,
                            replication_factor=-1,
                            assignments=(),
                            configs=cfg,
                        ),
                    ),
                    timeout=30000,
                    validate_only=False,
                )

            resp = c._bootstrap_conn().request(ApiKeys.CREATE_TOPICS, build)
            code = int(resp.topics[0].error_code)
            if code not in (0, 36):  # TOPIC_ALREADY_EXISTS: another driver won the race
                raise KafkaError(code, f"cannot create the sink log topic {self.o.sink_log_topic}")
            deadline = time.monotonic() + 30
            while c.partitions_for(self.o.sink_log_topic) is None and time.monotonic() < deadline:
                time.sleep(0.05)

    def last(self) -> dict | None:
        self._ensure_topic()
        c = WireConsumer(
            self.o.bootstrap, client_id="kesque-spark-driver", auto_offset_reset="earliest", max_wait_ms=100
        )
        try:
            tp = (self.o.sink_log_topic, 0)
            first = c.list_offsets([tp], EARLIEST)[tp]
            end = c.list_offsets([tp], LATEST)[tp]
            window = self.WINDOW
            hi = end
            while hi > first:
                lo = max(first, hi - window)
                c.assign({tp: lo})
                found = None
                while c.assignment[tp].position < hi:
                    for m in c.poll(1.0):
                        if m.offset < hi and m.key == self.key and m.value is not None:
                            found = m.value
                if found is not None:
                    return json.loads(found)
                hi, window = lo, window * 4
            return None
        finally:
            c.close()

    def append(self, record: dict) -> None:
        with Producer(self.o.bootstrap, client_id="kesque-spark-driver") as p:
            p.send(self.o.sink_log_topic, json.dumps(record).encode(), key=self.key, partition=0)
            p.flush()


def _complete(
    o: SinkOptions, txn_id: str, state: PreparedTxnState | None, commit: bool, rolling_forward: bool = False
) -> None:
    """Commit ``txn_id``'s prepared transaction when it is still ``state``, or abort what it
    has open. Committing a transaction that is no longer open is an error — unless rolling
    a logged commit forward, where it means that commit went through before the crash."""
    with Producer(
        o.bootstrap,
        transactional_id=txn_id,
        enable_2pc=True,
        client_id="kesque-spark-driver",
        timeout=o.api_timeout_ms / 1000,
    ) as p:
        kept = p.init_transactions(keep_prepared_txn=True)
        if not commit:
            if kept is not None:
                p.abort_transaction()
            return
        if kept is None and rolling_forward:
            return
        if kept != state:
            raise _taken_over(txn_id, state, kept)
        p.complete_transaction(state)


def _each(fn, items) -> None:
    """``fn(item)`` for every item, at the same time (each opens its own connections: the
    driver's commit is a handful of round trips per transaction, waited on together rather
    than one after the other); the first failure is raised once all have finished."""
    items = list(items)
    if len(items) <= 1:
        for x in items:
            fn(x)
        return
    with ThreadPoolExecutor(max_workers=min(8, len(items)), thread_name_prefix="kesque-sink") as pool:
        futures = [pool.submit(fn, x) for x in items]
    for f in futures:
        f.result()


def _taken_over(txn_id: str, state: PreparedTxnState, kept: PreparedTxnState | None) -> KesqueSinkError:
    return KesqueSinkError(
        f"the prepared transaction {txn_id} ({state}) is no longer open "
        f"({'nothing' if kept is None else kept} is): another attempt of the task took its id "
        "over; the batch is not committed and will be replayed"
    )


def _verify(o: SinkOptions, txns) -> None:
    """Before a commit is logged: each prepared transaction is still open as prepared."""

    def check(txn) -> None:
        txn_id, pid, epoch = txn
        with Producer(
            o.bootstrap,
            transactional_id=txn_id,
            enable_2pc=True,
            client_id="kesque-spark-driver",
            timeout=o.api_timeout_ms / 1000,
        ) as p:
            kept = p.init_transactions(keep_prepared_txn=True)
        if kept != PreparedTxnState(pid, epoch):
            raise _taken_over(txn_id, PreparedTxnState(pid, epoch), kept)

    _each(check, txns)


def open_transactions(o: SinkOptions, prefix: str) -> list[str]:
    """Ids starting with ``prefix`` whose transaction is open, from every broker."""
    out: set[str] = set()
    with Cluster(o.bootstrap, client_id="kesque-spark-driver") as c:
        c.metadata([])
        for node in list(c.brokers):

            def build(mod, v):
                return make(
                    mod.request.ListTransactionsRequest,
                    state_filters=("Ongoing",),
                    producer_id_filters=(),
                    duration_filter=-1,
                    transactional_id_pattern=None,
                )

            try:
                resp = c._conn(node).request(ApiKeys.LIST_TRANSACTIONS, build)
            except (OSError, WireError) as e:
                raise KesqueSinkError(f"ListTransactions on broker {node} failed: {e}") from None
            out.update(s.transactional_id for s in resp.transaction_states if s.transactional_id.startswith(prefix))
    return sorted(out)


def sweep(o: SinkOptions, prefix: str, keep: set[str] = frozenset()) -> int:
    left = [t for t in open_transactions(o, prefix) if t not in keep]
    _each(lambda txn_id: _complete(o, txn_id, None, commit=False), left)
    n = len(left)
    if n:
        log.info("kesque sink %s: aborted %d leftover transaction(s)", o.transactional_id_prefix, n)
    return n


def _txns(messages) -> list[tuple[str, int, int]]:
    return [
        (m.transactional_id, m.producer_id, m.epoch)
        for m in messages
        if isinstance(m, KesqueCommitMessage) and m.transactional_id
    ]


def _pause_point(stage: str) -> None:
    """Fault injection for the crash tests: with KESQUE_SPARK_PAUSE=<stage>:<file>[:<seconds>]
    the commit touches <file> at <stage> and waits there — to be killed, or for <seconds>
    (tests/test_spark.py)."""
    spec = os.environ.get("KESQUE_SPARK_PAUSE", "")
    if spec.startswith(stage + ":"):
        path, _, seconds = spec.split(":", 1)[1].partition(":")
        with open(path, "w"):
            pass
        time.sleep(float(seconds) if seconds else 3600)


def _commit_stream(o: SinkOptions, messages, batch_id: int) -> None:
    if not o.exactly_once:
        return
    _pause_point("before-commit")
    sink_log = SinkLog(o)
    new = _txns(messages)
    stream_prefix = f"{o.transactional_id_prefix}.s"
    last = sink_log.last()
    if last is not None and last.get("state") == "committing":
        _each(
            lambda t: _complete(o, t[0], PreparedTxnState(t[1], t[2]), commit=True, rolling_forward=True),
            last["txns"],
        )
        sink_log.append({"batchId": last["batchId"], "state": "committed"})
        last = {"batchId": last["batchId"], "state": "committed"}
    if last is not None and last["batchId"] >= batch_id:
        log.info(
            "kesque sink %s: batch %d is already committed; this replay writes nothing",
            o.transactional_id_prefix,
            batch_id,
        )
        _each(lambda t: _complete(o, t[0], None, commit=False), new)
        sweep(o, stream_prefix)
        return
    _verify(o, new)
    sink_log.append({"batchId": batch_id, "state": "committing", "txns": new})
    # the first alone, so the crash tests can stop the driver with some committed, some not
    for i, part in enumerate((new[:1], new[1:])):
        _each(lambda t: _complete(o, t[0], PreparedTxnState(t[1], t[2]), commit=True), part)
        if i == 0 and part:
            _pause_point("mid-commit")
    sink_log.append({"batchId": batch_id, "state": "committed"})
    sweep(o, stream_prefix)


def _abort_stream(o: SinkOptions, messages) -> None:
    if not o.exactly_once:
        return
    _each(lambda t: _complete(o, t[0], None, commit=False), _txns(messages))
    sweep(o, f"{o.transactional_id_prefix}.s")


def _commit_batch(o: SinkOptions, messages, id_prefix: str) -> None:
    if not o.exactly_once:
        return
    new = _txns(messages)
    _verify(o, new)
    _each(lambda t: _complete(o, t[0], PreparedTxnState(t[1], t[2]), commit=True), new)
    sweep(o, id_prefix + ".")


def _abort_batch(o: SinkOptions, messages, id_prefix: str) -> None:
    if not o.exactly_once:
        return
    _each(lambda t: _complete(o, t[0], None, commit=False), _txns(messages))
    sweep(o, id_prefix + ".")


def _driver_step(step):
    """A driver-side step, retried through broker restarts and coordinator moves until
    ``kafka.default.api.timeout.ms``, as a Kafka client retries. Every step may run again
    from the start: the sink log makes a repeated commit a roll-forward, then a replay."""

    def run(o: SinkOptions, *args) -> None:
        deadline = time.monotonic() + o.api_timeout_ms / 1000
        while True:
            try:
                return step(o, *args)
            except (OSError, WireError, KafkaError) as e:
                if isinstance(e, KafkaError) and not e.retriable and int(e.code) != 15:
                    raise
                if time.monotonic() >= deadline:
                    raise KesqueSinkError(
                        f"{step.__name__.strip('_')} gave up after kafka.default.api.timeout.ms="
                        f"{o.api_timeout_ms} ms: {e}"
                    ) from e
                log.warning(
                    "kesque sink %s: %s failed (%s); retrying", o.transactional_id_prefix, step.__name__.strip("_"), e
                )
                time.sleep(0.5)

    run.__name__ = step.__name__.strip("_")
    run.__doc__ = step.__doc__
    return run


commit_stream = _driver_step(_commit_stream)
abort_stream = _driver_step(_abort_stream)
commit_batch = _driver_step(_commit_batch)
abort_batch = _driver_step(_abort_batch)
