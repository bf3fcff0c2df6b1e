"""kesque's own producer: idempotent, transactional, and able to drive KIP-939 two-phase
commit, which no Python Kafka client does yet (librdkafka has no ``prepareTransaction``).

It is synchronous and small on purpose — the PySpark sink runs one per task and writes a
task's rows as a few large batches — but it follows the Java producer's protocol rules:

* an idempotent producer gets a producer id from InitProducerId and numbers each
  partition's batches from sequence 0; a batch that must be retried (lost connection,
  leader moved, NOT_ENOUGH_REPLICAS) is resent as the very same bytes, so the broker
  deduplicates it; DUPLICATE_SEQUENCE_NUMBER counts as success;
* a transactional producer finds its coordinator, registers every partition with
  AddPartitionsToTxn before its first batch there, and ends with EndTxn; the coordinator
  errors a client retries (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, LOAD_IN_PROGRESS) are
  retried until ``timeout``; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH are fatal;
* two-phase commit (KIP-939): ``Producer(..., enable_2pc=True)`` asks InitProducerId v6
  for a transaction that never times out; :meth:`Producer.prepare_transaction` flushes and
  returns the :class:`PreparedTxnState` an external coordinator stores; any process can
  later call ``init_transactions(keep_prepared_txn=True)`` with the same transactional id
  (which fences the preparer and keeps its transaction open) and then
  :meth:`Producer.complete_transaction` — commit when the stored state matches the open
  transaction, abort otherwise — exactly the Java client's contract.

Keys go to ``murmur2(key) % partitions`` (Kafka's default partitioner, so a key lands
where a Java producer would put it); records without a key stick to one random partition
per flush.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ..errors import ErrorCode, KafkaError
from ..protocol.api_keys import ApiKeys
from ..records.records import build_batch, wrap_batch
from ..utils import murmur2
from .cluster import COORDINATOR_RETRIABLE, Cluster
from .wire import WireError, make

CONCURRENT_TRANSACTIONS = 51
DUPLICATE_SEQUENCE_NUMBER = 46
# Produce errors after which the same batch is resent (to a freshly looked-up leader)
RETRY_PRODUCE = frozenset({3, 5, 6, 7, 19, 20, 56, 74, 75, 100})
# metadata is stale for these
STALE_METADATA = frozenset({3, 5, 6, 74, 75, 100})


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _add_partitions_error(resp) -> int:
    """AddPartitionsToTxn v0-3 answers per partition: the first fatal code, else a retriable
    one (OPERATION_NOT_ATTEMPTED only means another partition failed)."""
    codes = {int(p.partition_error_code) for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}
    codes.discard(0)
    if not codes:
        return 0
    fatal = codes - {CONCURRENT_TRANSACTIONS, 65} - COORDINATOR_RETRIABLE
    if fatal:
        return min(fatal)
    return min(codes & COORDINATOR_RETRIABLE or {CONCURRENT_TRANSACTIONS})


@dataclass(frozen=True)
class PreparedTxnState:
    """What KIP-939 calls PreparedTxnState: the producer id and epoch of a prepared
    transaction. An external coordinator stores it (``str()`` gives ``"pid:epoch"``)."""

    producer_id: int
    epoch: int

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}"

    @classmethod
    def parse(cls, s: str) -> PreparedTxnState:
        pid, _, epoch = s.partition(":")
        return cls(int(pid), int(epoch))


@dataclass
class _Pending:
    topic: str
    partition: int
    records: list
    batch: bytes | None = None  # built once, resent as is
    sequence: int = -1
    encoded: _Encoded | None = None  # a records section encoded elsewhere, instead of records

    @property
    def count(self) -> int:
        return self.encoded.count if self.encoded is not None else len(self.records)


@dataclass(frozen=True)
class _Encoded:
    body: bytes
    count: int


class Producer(Cluster):
    def __init__(
        self,
        bootstrap: str,
        *,
        transactional_id: str | None = None,
        enable_idempotence: bool = True,
        acks: int = -1,
        transaction_timeout_ms: int = 60000,
        enable_2pc: bool = False,
        compression: int = 0,
        batch_size: int = 1 << 20,
        request_timeout_ms: int = 30000,
        client_id: str = "kesque-producer",
        timeout: float = 60.0,
        client_props: dict | None = None,
    ):
        super().__init__(bootstrap, client_id=client_id, timeout=timeout, client_props=client_props)
        if transactional_id is not None:
            enable_idempotence = True
            acks = -1
        if enable_2pc and transactional_id is None:
            raise ValueError("enable_2pc needs a transactional_id")
        self.transactional_id = transactional_id
        self.idempotent = enable_idempotence
        self.acks = acks
        self.transaction_timeout_ms = transaction_timeout_ms
        self.enable_2pc = enable_2pc
        self.compression = compression
        self.batch_size = batch_size
        self.request_timeout_ms = request_timeout_ms
        self.producer_id = -1
        self.epoch = -1
        self._seq: dict[tuple[str, int], int] = {}
        self._buffer: dict[tuple[str, int], list] = {}
        self._buffered = 0  # approximate bytes in _buffer
        self._partitions: dict[str, list[int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._sticky: dict[str, int] = {}
        self._coordinator: int | None = None
        self._in_txn = False
        self._kept: PreparedTxnState | None = None
        self._txn_partitions: set[tuple[str, int]] = set()
        self.offsets: dict[tuple[str, int], list[int]] = {}  # base offsets written, per partition

    # ------------------------------------------------------------------ producer id
    def init_transactions(self, keep_prepared_txn: bool = False) -> PreparedTxnState | None:
        """InitProducerId. For a transactional producer this fences older incarnations and
        aborts their open transaction — unless ``keep_prepared_txn`` (KIP-939), which keeps
        it and returns its state, or None when there was nothing open."""
        if keep_prepared_txn and not self.enable_2pc:
            raise ValueError("keep_prepared_txn needs enable_2pc")
        self._seq.clear()
        self._in_txn = False
        self._txn_partitions.clear()

        def build(mod, v):
            return make(
                mod.request.InitProducerIdRequest,
                transactional_id=self.transactional_id,
                transaction_timeout=self.transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
                enable2_pc=self.enable_2pc,
                keep_prepared_txn=keep_prepared_txn,
            )

        min_version = 6 if self.enable_2pc else 0
        resp = self._coordinator_call(ApiKeys.INIT_PRODUCER_ID, build, min_version=min_version)
        self.producer_id, self.epoch = int(resp.producer_id), int(resp.producer_epoch)
        self._kept = None
        if keep_prepared_txn and int(getattr(resp, "ongoing_txn_producer_id", -1)) >= 0:
            self._in_txn = True
            self._kept = PreparedTxnState(int(resp.ongoing_txn_producer_id), int(resp.ongoing_txn_producer_epoch))
        return self._kept

    def _ensure_producer_id(self) -> None:
        if self.producer_id < 0 and self.idempotent:
            if self.transactional_id is not None:
                raise KafkaError(48, "init_transactions() must be called first")
            self.init_transactions()

    def _coordinator_call(
        self,
        api_key: int,
        build,
        min_version: int = 0,
        max_version: int | None = None,
        error_of=lambda resp: int(resp.error_code),
    ):
        """A request to the transaction coordinator (any broker for an idempotent-only
        InitProducerId), retried through lost connections, coordinator moves and
        CONCURRENT_TRANSACTIONS until ``timeout``; ``error_of`` reads the response's error."""
        deadline = time.monotonic() + self.timeout
        backoff = 0.02
        while True:
            try:
                if self.transactional_id is None:
                    conn = self._bootstrap_conn()
                else:
                    if self._coordinator is None:
                        self._coordinator = self.find_coordinator(self.transactional_id, 1, deadline)
                    conn = self._conn(self._coordinator)
                v = conn.version_for(api_key, max_version)
                if v is None or v < min_version:
                    raise KafkaError(35, f"the broker does not support API {api_key} v{min_version}+")
                resp = conn.request(api_key, build, max_version=max_version)
                code = error_of(resp)
            except (OSError, WireError):
                self._drop_all()
                self._coordinator = None
                code = 15
            if code == 0:
                return resp
            if code in COORDINATOR_RETRIABLE:
                self._coordinator = None
            elif code != CONCURRENT_TRANSACTIONS:
                raise KafkaError(code)
            if time.monotonic() > deadline:
                raise KafkaError(code, f"gave up after {self.timeout} s")
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    # ------------------------------------------------------------------ transactions
    def begin_transaction(self) -> None:
        if self.transactional_id is None:
            raise KafkaError(48, "not a transactional producer")
        if self.producer_id < 0:
            raise KafkaError(48, "init_transactions() must be called first")
        if self._in_txn:
            raise KafkaError(48, "a transaction is already open")
        self._in_txn = True
        self._txn_partitions.clear()

    def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        new = sorted(tp for tp in tps if tp not in self._txn_partitions)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)

        def build(mod, v):
            rq = mod.request
            topics = tuple(make(rq.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
            return make(
                rq.AddPartitionsToTxnRequest,
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.epoch,
                v3_and_below_topics=topics,
            )

        self._coordinator_call(ApiKeys.ADD_PARTITIONS_TO_TXN, build, max_version=3, error_of=_add_partitions_error)
        self._txn_partitions.update(new)

    def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 phase one: flush everything and return the state to commit later."""
        if not self.enable_2pc:
            raise KafkaError(48, "prepare_transaction needs enable_2pc")
        if not self._in_txn:
            raise KafkaError(48, "no transaction is open")
        self.flush()
        return PreparedTxnState(self.producer_id, self.epoch)

    def commit_transaction(self) -> None:
        self.flush()
        self._end(True)

    def abort_transaction(self) -> None:
        self._buffer.clear()
        self._buffered = 0
        self._end(False)

    def complete_transaction(self, state: PreparedTxnState) -> bool:
        """After ``init_transactions(keep_prepared_txn=True)``: commit when ``state`` is the
        kept transaction's, abort it otherwise (KIP-939's completeTransaction). True when
        it committed; False also when nothing was open (already completed)."""
        if not self._in_txn or self._kept is None:
            return False
        commit = state == self._kept
        self._end(commit)
        return commit

    def _end(self, commit: bool) -> None:
        if not self._in_txn:
            raise KafkaError(48, "no transaction is open")

        def build(mod, v):
            return make(
                mod.request.EndTxnRequest,
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.epoch,
                committed=commit,
            )

        resp = self._coordinator_call(ApiKeys.END_TXN, build)
        self._in_txn = False
        self._kept = None
        self._txn_partitions.clear()
        v = getattr(resp, "producer_epoch", -1)  # EndTxn v5 (KIP-890 part 2) may bump the epoch
        if isinstance(v, int) and v >= 0 and int(getattr(resp, "producer_id", -1)) >= 0:
            if (int(resp.producer_id), v) != (self.producer_id, self.epoch):
                self._seq.clear()  # a new epoch (or producer id) starts every sequence at 0 again
            self.producer_id, self.epoch = int(resp.producer_id), v

    # ------------------------------------------------------------------ sending
    def _topic_partitions(self, topic: str) -> list[int]:
        parts = self._partitions.get(topic)
        deadline = time.monotonic() + self.timeout
        while parts is None:
            md = self.metadata([topic], allow_auto_create=True).get(topic)
            code = md["error"] if md else 3
            if code in (5, 3) and time.monotonic() < deadline:  # being created: LEADER_NOT_AVAILABLE
                time.sleep(0.05)
                continue
            if code != 0:
                raise KafkaError(code, f"topic {topic!r} is not available")
            for p, (leader, _e) in md["partitions"].items():
                self._leaders[(topic, p)] = leader
            parts = self._partitions[topic] = sorted(md["partitions"])
        return parts

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers=(),
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Buffer one record; :meth:`flush` (or commit) writes it."""
        if self.transactional_id is not None and not self._in_txn:
            raise KafkaError(48, "send outside a transaction: call begin_transaction() first")
        if partition is None:
            parts = self._topic_partitions(topic)
            if key is not None:
                partition = parts[partition_for_key(key, len(parts))]
            else:
                partition = self._sticky.get(topic)
                if partition is None:
                    partition = self._sticky[topic] = random.choice(parts)
        else:
            self._check_partition(topic, partition)
        self._buffer.setdefault((topic, partition), []).append((key, value, tuple(headers or ()), timestamp))
        self._buffered += 24 + len(key or b"") + len(value or b"")
        if self._buffered >= self.batch_size:  # a full batch goes out now, as the Java producer sends it
            self.flush()

    def send_encoded(self, topic: str, partition: int, body: bytes, count: int) -> None:
        """Buffer ``count`` records already encoded as a batch's records section (offset
        deltas 0..count-1, timestamp deltas 0: they get the time of sending). They become one
        batch of their own, in order with the partition's other records; keep ``body`` under
        ``batch_size``."""
        if self.transactional_id is not None and not self._in_txn:
            raise KafkaError(48, "send outside a transaction: call begin_transaction() first")
        self._check_partition(topic, partition)
        self._buffer.setdefault((topic, partition), []).append(_Encoded(body, count))
        self._buffered += len(body)
        if self._buffered >= self.batch_size:
            self.flush()

    def _check_partition(self, topic: str, partition: int) -> None:
        parts = self._topic_partitions(topic)
        if not 0 <= partition <= parts[-1]:
            raise KafkaError(
                3, f"Invalid partition given with record: {partition} is not in the range [0...{len(parts)}]."
            )

    def flush(self) -> None:
        if not self._buffer:
            return
        self._ensure_producer_id()
        buffered, self._buffer = self._buffer, {}
        self._buffered = 0
        self._sticky.clear()
        pending: list[_Pending] = []
        for (t, p), recs in buffered.items():
            chunk: list = []
            size = 0
            for r in recs:
                if isinstance(r, _Encoded):  # its own batch, in its place in the partition's order
                    if chunk:
                        pending.append(_Pending(t, p, chunk))
                        chunk, size = [], 0
                    pending.append(_Pending(t, p, [], encoded=r))
                    continue
                n = 24 + len(r[0] or b"") + len(r[1] or b"") + sum(len(k) + len(v or b"") for k, v in r[2])
                if chunk and size + n > self.batch_size:
                    pending.append(_Pending(t, p, chunk))
                    chunk, size = [], 0
                chunk.append(r)
                size += n
            if chunk:
                pending.append(_Pending(t, p, chunk))
        if self.transactional_id is not None:
            self._add_partitions([(x.topic, x.partition) for x in pending])
        # one batch per partition per request keeps every partition's batches in sequence order
        while pending:
            head: dict[tuple[str, int], _Pending] = {}
            rest = []
            for x in pending:
                if (x.topic, x.partition) in head:
                    rest.append(x)
                else:
                    head[(x.topic, x.partition)] = x
            self._produce(list(head.values()))
            pending = rest

    def _build(self, x: _Pending) -> None:
        if x.batch is not None:
            return
        seq = -1
        if self.idempotent:
            seq = self._seq.get((x.topic, x.partition), 0)
            self._seq[(x.topic, x.partition)] = (seq + x.count) & 0x7FFFFFFF
        x.sequence = seq
        ids = dict(
            compression_codec=self.compression,
            producer_id=self.producer_id if self.idempotent else -1,
            producer_epoch=self.epoch if self.idempotent else -1,
            base_sequence=seq,
            transactional=self.transactional_id is not None,
        )
        if x.encoded is not None:
            now = int(time.time() * 1000)
            x.batch = wrap_batch(x.encoded.body, x.encoded.count, now, now, **ids)
        else:
            x.batch = build_batch(x.records, **ids)

    def _produce(self, batches: list[_Pending]) -> None:
        deadline = time.monotonic() + self.timeout
        for x in batches:
            self._build(x)
        todo = batches
        while todo:
            by_leader: dict[int, list[_Pending]] = {}
            for x in todo:
                leader = self._leaders.get((x.topic, x.partition), -1)
                if leader < 0:
                    self._refresh(x.topic)
                    leader = self._leaders.get((x.topic, x.partition), -1)
                by_leader.setdefault(leader, []).append(x)
            retry: list[_Pending] = []
            last = 0
            for leader, group in by_leader.items():
                if leader < 0:
                    retry += group
                    last = 5
                    continue
                try:
                    results = self._produce_to(leader, group)
                except (OSError, WireError):
                    self._drop(leader)
                    retry += group
                    last = -1
                    continue
                for x, (code, base) in zip(group, results):
                    if code in (0, DUPLICATE_SEQUENCE_NUMBER):
                        self.offsets.setdefault((x.topic, x.partition), []).append(base)
                    elif code in RETRY_PRODUCE:
                        retry.append(x)
                        last = code
                        if code in STALE_METADATA:
                            self._leaders.pop((x.topic, x.partition), None)
                    else:
                        raise KafkaError(code, f"produce to {x.topic}-{x.partition} failed: {ErrorCode(code).name}")
            if retry:
                if time.monotonic() > deadline:
                    raise KafkaError(last if last > 0 else 7, "produce retries exhausted")
                for t in {x.topic for x in retry}:
                    self._refresh(t)
                time.sleep(0.05)
            todo = retry

    def _refresh(self, topic: str) -> None:
        try:
            md = self.metadata([topic], allow_auto_create=True).get(topic)
        except (OSError, WireError):
            return
        if md and md["error"] == 0:
            for p, (leader, _e) in md["partitions"].items():
                self._leaders[(topic, p)] = leader
            self._partitions[topic] = sorted(md["partitions"])

    def _produce_to(self, leader: int, group: list[_Pending]) -> list[tuple[int, int]]:
        def build(mod, v):
            rq = mod.request
            topics: dict[str, list] = {}
            for x in group:
                topics.setdefault(x.topic, []).append(make(rq.PartitionProduceData, index=x.partition, records=x.batch))
            return make(
                rq.ProduceRequest,
                transactional_id=self.transactional_id,
                acks=self.acks,
                timeout=self.request_timeout_ms,
                topic_data=tuple(
                    make(rq.TopicProduceData, name=t, partition_data=tuple(ps)) for t, ps in topics.items()
                ),
            )

        conn = self._conn(leader)
        if self.acks == 0:
            conn.send_only(ApiKeys.PRODUCE, build)
            return [(0, -1)] * len(group)
        resp = conn.request(ApiKeys.PRODUCE, build, max_version=11)
        got = {
            (t.name, int(p.index)): (int(p.error_code), int(p.base_offset))
            for t in resp.responses
            for p in t.partition_responses
        }
        return [got.get((x.topic, x.partition), (6, -1)) for x in group]

    def close(self) -> None:
        try:
            if self._buffer and self.transactional_id is None:
                self.flush()
        finally:
            super().close()
