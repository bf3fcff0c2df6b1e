"""A transactional producer's pipelined first batches while KIP-890 verification is pending
(issue 25), under the simulator, on the real :class:`~kesque.storage.unified_log.UnifiedLog` and its
:class:`~kesque.storage.producer_state.ProducerStateManager`.

The model:

- **The producer** (node PRODUCER) runs transactions one after another. In each it sends
  one-record batches of sequences 0, 1, ... to one partition, up to ``MAX_IN_FLIGHT`` in flight
  on its connection to the leader, as librdkafka and the Java client do. An error answer makes
  it resend from the first batch not yet acknowledged (a client resends in sequence order); an
  answer that does not come within ``REQUEST_TIMEOUT_MS`` makes it reconnect and resend every
  batch not acknowledged, on a new connection, while the old connection's requests may still be
  at the leader. Once every batch of the transaction is acknowledged it commits (EndTxn), and
  the next transaction starts once the coordinator has written the COMMIT marker.
- **The leader** (node LEADER) holds the partition's real UnifiedLog in a temporary directory. A batch
  that would open the producer's transaction starts the partition's verification
  (``maybe_start_transaction_verification``) and asks the coordinator; the answer comes back
  over the network, after which the batch is appended with the guard the verification started
  (``append_as_leader``, verification required). As Kafka's AddPartitionsToTxnManager, one
  verification per transactional id is in flight to the coordinator, and a newer one queued for
  the same id pushes an older queued one out (NETWORK_EXCEPTION, which the producer sees as
  NOT_ENOUGH_REPLICAS). A connection's requests are appended in the order they arrived (Kafka
  reads a connection's next request only after answering the last; kesque's ProduceApis keeps
  that order); requests of different connections are not ordered.
- **The coordinator** (node COORDINATOR) confirms a verification once the partition is in the
  transaction, answers CONCURRENT_TRANSACTIONS now and then (it is completing something), and on
  EndTxn writes the COMMIT marker on the leader.
- **Faults**: the network delays and drops verifications and their answers; a produce request or
  answer lost breaks its connection (TCP: what follows on it is lost too; the producer's
  time-out notices), and a connection delivers in order; EndTxn and the marker always arrive (Kafka resends
  them until answered, which is not what this model tests).

The invariants, after every event: no batch next in line (the producer's first not yet
acknowledged) is told OUT_OF_ORDER_SEQUENCE_NUMBER; the producer's batches are in the log in sequence order
from 0 with no gap and none twice (its sequences go on across transactions, as a transaction
version 1 producer's do within an epoch); every acknowledged batch is in the log at the offset
its answer named. The producer commits only once every batch is acknowledged, so a committed
transaction's records are all before its marker.

The bug switches, each caught: ``--bug skip_verification_sequence_check`` (the partition
appends a sequence above the lowest one still being verified, as kesque did: librdkafka lost
committed records on it) in both scenarios, and ``--bug clear_verification_on_any_marker`` (the
previous transaction's marker ends the next one's verification, so its append is refused
INVALID_TXN_STATE: Kafka Streams' threads died on it) in ``txn_tv2_pipelined_add``. The leader's keeping of a
connection's order is not needed for safety once that check is there (``Leader.
unordered_connection_appends`` shows it: the invariants still hold, the producer only sees more
retriable errors); it is what makes the first answers successes, as Kafka's are
(tests/test_txn_verification_cluster.py).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

from ..config.topic import LogConfig
from ..errors import ErrorCode, KafkaError
from ..records.records import build_batch
from ..storage.producer_state import ProducerStateManager
from ..storage.unified_log import UnifiedLog
from .network import NetworkFaults, Router
from .scheduler import InvariantViolation, LivenessViolation, Scheduler

LEADER, COORDINATOR, PRODUCER = 1, 2, 1000
PID = 4000
MAX_IN_FLIGHT = 5
REQUEST_TIMEOUT_MS = 300
ADD_RETRY_BACKOFF_MS, ADD_RETRY_MAX_MS = 20, 100  # add.partitions.to.txn.retry.backoff(.max).ms
BOUND_MS = 60_000

TXN_BUGS = ("skip_verification_sequence_check", "clear_verification_on_any_marker")


@dataclass
class Produce:
    conn: int
    epoch: int
    seq: int
    txn: int


@dataclass
class ProduceReply:
    conn: int
    seq: int
    txn: int
    code: ErrorCode
    offset: int = -1


@dataclass
class Close:
    conn: int


@dataclass
class Verify:
    entry: int  # the leader's id of the queued verification
    epoch: int
    txn: int


@dataclass
class VerifyReply:
    entry: int
    code: ErrorCode


@dataclass
class EndTxn:
    txn: int


@dataclass
class Marker:
    epoch: int
    txn: int


@dataclass
class Waiting:
    """A request at the leader: being verified, or queued behind an earlier one of its connection."""

    req: Produce
    guard: object = None
    code: ErrorCode | None = None  # the coordinator's answer, once it came
    started: int | None = None  # when its first verification started (TV2 retries)


class Leader:
    unordered_connection_appends = False  # bug switch

    def __init__(self, sim: TxnVerificationSim, log: UnifiedLog):
        self.sim = sim
        self.log = log
        self.by_conn: dict[int, list[Waiting]] = {}
        self.in_flight: dict | None = None  # the verification sent to the coordinator: {entry: [Waiting]}
        self.queued: tuple[int, list[Waiting]] | None = None  # the next one, batched
        self.next_entry = 0
        self.closed: set[int] = set()

    def on_produce(self, msg: Produce) -> None:
        w = Waiting(msg)
        queue = self.by_conn.setdefault(msg.conn, [])
        queue.append(w)
        if self.unordered_connection_appends or len(queue) == 1:
            self._start(w)

    def _start(self, w: Waiting) -> None:
        req = w.req
        if (
            self.log.producer_state.ongoing_txn_of(PID) >= 0
            and self.log.producer_state.producers[PID].epoch == req.epoch
        ):
            self._append(w)
            return
        if w.started is None:
            w.started = self.sim.s.now
        w.guard = self.log.maybe_start_transaction_verification(
            PID, req.seq, req.epoch, self.sim.s.now, supports_epoch_bump=self.sim.tv2
        )
        # one verification per transactional id goes to the coordinator; a newer one queued
        # pushes the older queued one out (AddPartitionsToTxnManager.addTxnData)
        if self.in_flight is None:
            self._send([w])
        elif self.queued is not None:
            _entry, old = self.queued
            for o in old:
                o.code = ErrorCode.network_exception
                self._done_verifying(o)
            self.queued = (0, [w])
        else:
            self.queued = (0, [w])

    def on_close(self, msg: Close) -> None:
        """The producer dropped a connection: what the leader had not started of it is never
        read (its request being verified still completes, its answer goes nowhere)."""
        queue = self.by_conn.get(msg.conn, [])
        started = [w for w in queue[:1] if not self.unordered_connection_appends] if queue else []
        if self.unordered_connection_appends:
            return
        self.by_conn[msg.conn] = started
        self.closed.add(msg.conn)

    def _send(self, ws: list[Waiting]) -> None:
        self.next_entry += 1
        self.in_flight = {self.next_entry: ws}
        self.sim.router.send(LEADER, COORDINATOR, Verify(self.next_entry, ws[0].req.epoch, ws[0].req.txn))
        # the channel's request time-out: an answer that does not come is a NETWORK_EXCEPTION
        self.sim.s.after(
            REQUEST_TIMEOUT_MS, self.on_verify_reply, VerifyReply(self.next_entry, ErrorCode.network_exception)
        )

    def on_verify_reply(self, msg: VerifyReply) -> None:
        if self.in_flight is None or msg.entry not in self.in_flight:
            return  # answered already (or timed out)
        ws = self.in_flight.pop(msg.entry)
        self.in_flight = None
        if self.queued is not None:
            _entry, nxt = self.queued
            self.queued = None
            self._send(nxt)
        for w in ws:
            w.code = msg.code
            self._done_verifying(w)

    def _done_verifying(self, w: Waiting) -> None:
        if w.code == ErrorCode.none:
            self._append(w)
        elif (
            self.sim.tv2
            and w.code == ErrorCode.concurrent_transactions
            and self.sim.s.now - w.started < ADD_RETRY_MAX_MS
        ):
            # a TV2 add is asked again while the coordinator completes the last transaction,
            # its verification started again each time (ProduceApis._added_with_retries)
            w.code = None
            self.sim.s.after(ADD_RETRY_BACKOFF_MS, self._start, w)
        elif self.sim.tv2 and w.code == ErrorCode.concurrent_transactions:
            self._reply(w, w.code)
        else:
            code = (
                ErrorCode.not_enough_replicas
                if w.code in (ErrorCode.network_exception, ErrorCode.concurrent_transactions)
                else w.code
            )
            self._reply(w, code)

    def _append(self, w: Waiting) -> None:
        req = w.req
        batch = memoryview(
            bytearray(
                build_batch(
                    [(None, f"{req.txn}:{req.seq}".encode(), ())],
                    producer_id=PID,
                    producer_epoch=req.epoch,
                    base_sequence=req.seq,
                    transactional=True,
                    timestamp=self.sim.s.now,
                )
            )
        )
        try:
            info = self.log.append_as_leader(batch, 0, self.sim.s.now, w.guard, True)
        except KafkaError as e:
            self._reply(w, e.code)
            return
        self._reply(w, ErrorCode.none, info.first_offset)

    def _reply(self, w: Waiting, code: ErrorCode, offset: int = -1) -> None:
        req = w.req
        self.sim.on_connection(LEADER, PRODUCER, req.conn, ProduceReply(req.conn, req.seq, req.txn, code, offset))
        queue = self.by_conn.get(req.conn, [])
        if w in queue:
            head = queue[0] is w
            queue.remove(w)
            if head and queue and not self.unordered_connection_appends and req.conn not in self.closed:
                self._start(queue[0])

    def on_marker(self, msg: Marker) -> None:
        self.log.append_txn_marker(PID, msg.epoch, True, 0, 0, self.sim.s.now)
        self.sim.reliably(LEADER, COORDINATOR, msg)


@dataclass
class Producer:
    sim: TxnVerificationSim
    epoch: int = 0
    txn: int = 0
    records: int = 0  # batches in the current transaction
    base: int = 0  # the sequence of its first (sequences go on across transactions)
    acked: dict = field(default_factory=dict)  # seq -> offset
    draining: bool = False  # an error came: wait for the batches in flight, then resend
    in_flight: dict = field(default_factory=dict)  # seq -> time sent
    conn: int = 1
    committing: bool = False

    def start_txn(self) -> None:
        self.txn += 1
        self.base = 0 if self.sim.tv2 else self.base + self.records
        self.records = self.sim.s.rng.randint(1, 12)
        self.acked = {}
        self.in_flight = {}
        self.draining = False
        self.committing = False
        self.sim.adds(self.txn)  # AddPartitionsToTxn: the coordinator has the partition in a moment
        self.pump()

    def first_unacked(self) -> int:
        return min((s for s in range(self.records) if s not in self.acked), default=self.records)

    def pump(self) -> None:
        """Send what the window allows: batches from the first one not acknowledged, at most
        ``MAX_IN_FLIGHT`` ahead of it (so a batch older than the partition's last five is always
        acknowledged: its duplicate is recognized). After an error answer nothing goes out until
        the batches in flight have answered; then the unacknowledged ones go again, in order."""
        if self.draining and self.in_flight:
            return
        self.draining = False
        first = self.first_unacked()
        for seq in range(first, min(self.records, first + MAX_IN_FLIGHT)):
            if seq in self.acked or seq in self.in_flight:
                continue
            self.in_flight[seq] = self.sim.s.now
            self.sim.on_connection(
                PRODUCER, LEADER, self.conn, Produce(self.conn, self.epoch, self.base + seq, self.txn)
            )
            self.sim.s.after(REQUEST_TIMEOUT_MS, self.check_timeout, self.txn, seq, self.conn)
        if len(self.acked) == self.records and not self.committing:
            self.committing = True
            self.sim.reliably(PRODUCER, COORDINATOR, EndTxn(self.txn))

    def on_reply(self, msg: ProduceReply) -> None:
        seq = msg.seq - self.base
        if msg.txn != self.txn or msg.conn != self.conn or seq not in self.in_flight:
            return
        del self.in_flight[seq]
        if msg.code == ErrorCode.none:
            self.acked[seq] = msg.offset
            self.sim.acked.append((self.epoch, msg.seq, msg.offset))
        elif msg.code == ErrorCode.out_of_order_sequence_number and seq == self.first_unacked():
            # the Java client takes this as fatal (the transaction aborts, Kafka Streams fences
            # its thread): only a batch behind an unacknowledged one may be told it
            raise InvariantViolation(f"sequence {msg.seq}, the next in line, was told OUT_OF_ORDER_SEQUENCE_NUMBER")
        elif msg.code in (
            ErrorCode.not_enough_replicas,
            ErrorCode.out_of_order_sequence_number,
            ErrorCode.concurrent_transactions,
        ):
            self.draining = True
        else:
            raise InvariantViolation(
                f"the producer was told {msg.code.name} for sequence {msg.seq} of transaction {msg.txn}"
            )
        self.pump()

    def check_timeout(self, txn: int, seq: int, conn: int) -> None:
        if txn == self.txn and conn == self.conn and seq in self.in_flight:
            self.sim.reliably(PRODUCER, LEADER, Close(self.conn))
            self.conn += 1  # a new connection; what the old one carried may still arrive
            self.in_flight = {}
            self.draining = False
            self.pump()

    def on_end_txn_answer(self) -> None:
        """Transaction version 2: EndTxn answers once the Prepare record is written, with the
        bumped epoch; the next transaction starts at once, its markers still on their way."""
        self.epoch += 1
        self.sim.finished += 1
        self.start_txn()

    def on_committed(self) -> None:
        if not self.sim.tv2:
            self.sim.finished += 1
            self.start_txn()


class Coordinator:
    def __init__(self, sim: TxnVerificationSim):
        self.sim = sim
        self.added: set[int] = set()
        self.completed: set[int] = set()  # transactions whose marker is written

    def on_verify(self, msg: Verify) -> None:
        rng = self.sim.s.rng
        if self.sim.tv2:  # the leader adds the partition, once the last transaction is complete
            if msg.txn - 1 not in self.completed and msg.txn > 1:
                code = ErrorCode.concurrent_transactions
            else:
                self.added.add(msg.txn)
                code = ErrorCode.none
        elif msg.txn not in self.added or rng.random() < 0.2:
            code = ErrorCode.concurrent_transactions
        else:
            code = ErrorCode.none
        self.sim.s.after(rng.randint(0, 30), self.sim.router.send, COORDINATOR, LEADER, VerifyReply(msg.entry, code))

    def on_end_txn(self, msg: EndTxn) -> None:
        epoch = self.sim.producer.epoch + (1 if self.sim.tv2 else 0)  # TV2 markers carry the bumped epoch
        if self.sim.tv2:
            self.sim.s.after(self.sim.s.rng.randint(0, 5), self.sim.producer.on_end_txn_answer)
        self.sim.reliably(COORDINATOR, LEADER, Marker(epoch, msg.txn))


class TxnVerificationInvariants:
    def __init__(self, sim: TxnVerificationSim):
        self.sim = sim
        self.committed = 0
        self.scanned_to = 0  # the log is checked up to here
        self.seqs: list[int] = []  # the producer's sequences in log order
        self.at: dict[int, int] = {}  # sequence -> offset
        self.acks_checked = 0
        self.epoch, self.epoch_seqs = -1, 0

    def check(self) -> None:
        log = self.sim.log
        if log.log_end_offset > self.scanned_to:
            for h, _data in log.read_batches(self.scanned_to):
                if h.base_offset < self.scanned_to:
                    continue
                if not h.is_control:
                    if h.producer_epoch != self.epoch:  # a new epoch starts its sequences again
                        self.epoch, self.epoch_seqs = h.producer_epoch, 0
                    self.seqs.append(h.base_sequence)
                    self.at[(h.producer_epoch, h.base_sequence)] = h.base_offset
                    if h.base_sequence != self.epoch_seqs:
                        raise InvariantViolation(
                            f"sequence {h.base_sequence} of epoch {h.producer_epoch} is in the log at offset "
                            f"{h.base_offset} after sequences {self.seqs[-6:-1]}: not in order"
                        )
                    self.epoch_seqs += 1
            self.scanned_to = log.log_end_offset
        acked = self.sim.acked
        for epoch, seq, offset in acked[self.acks_checked :]:
            if self.at.get((epoch, seq)) != offset:
                raise InvariantViolation(
                    f"sequence {seq} of epoch {epoch} was acknowledged at offset {offset}, "
                    f"the log has it at {self.at.get((epoch, seq))}"
                )
        self.acks_checked = len(acked)
        self.committed = len(self.seqs)


class TxnVerificationSim:
    def __init__(self, seed: int, faults: NetworkFaults, tv2: bool = False):
        self.tv2 = tv2
        self.s = Scheduler(seed)
        self.router = Router(self.s, self.deliver, faults)
        self.dir = tempfile.mkdtemp(prefix="kesque-sim-txn-")
        self.log = UnifiedLog(self.dir, "t", 0, LogConfig())
        self.leader = Leader(self, self.log)
        self.coordinator = Coordinator(self)
        self.producer = Producer(self)
        self.acked: list[tuple[int, int, int]] = []  # (epoch, sequence, offset) acknowledged
        self.finished = 0
        self.broken: set[int] = set()  # connections that lost a message
        self.last_arrival: dict[tuple, int] = {}
        self.inv = TxnVerificationInvariants(self)
        self.s.add_invariant(self.inv.check)

    def on_connection(self, src: int, dst: int, conn: int, msg) -> None:
        """A message on one of the producer's TCP connections: in order, and a lost one loses
        the connection (nothing after it arrives either; the producer's time-out notices)."""
        if conn in self.broken:
            return
        f = self.router.faults
        if f.drop and self.s.rng.random() < f.drop:
            self.broken.add(conn)
            return
        key = (src, dst, conn)
        when = max(self.s.now + self.s.rng.randint(f.min_delay_ms, f.max_delay_ms), self.last_arrival.get(key, 0))
        self.last_arrival[key] = when
        self.s.at(when, self.deliver, src, dst, msg)

    def reliably(self, src: int, dst: int, msg) -> None:
        """EndTxn and the marker: Kafka's client and coordinator resend them until answered,
        which this model does not need to follow (they are not what it tests)."""
        self.s.after(self.s.rng.randint(1, 20), self.deliver, src, dst, msg)

    def adds(self, txn: int) -> None:
        self.s.after(self.s.rng.randint(0, 40), self.coordinator.added.add, txn)

    def deliver(self, src: int, dst: int, msg) -> None:
        if dst == LEADER:
            if isinstance(msg, Produce):
                self.leader.on_produce(msg)
            elif isinstance(msg, VerifyReply):
                self.leader.on_verify_reply(msg)
            elif isinstance(msg, Marker):
                self.leader.on_marker(msg)
            elif isinstance(msg, Close):
                self.leader.on_close(msg)
        elif dst == COORDINATOR:
            if isinstance(msg, Verify):
                self.coordinator.on_verify(msg)
            elif isinstance(msg, EndTxn):
                self.coordinator.on_end_txn(msg)
            elif isinstance(msg, Marker):  # the marker is written: the transaction is complete
                self.coordinator.completed.add(msg.txn)
                self.s.after(1, self.producer.on_committed)
        elif dst == PRODUCER:
            self.producer.on_reply(msg)

    def close(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def txn_pipelined_verification(seed: int, transactions: int = 10, tv2: bool = False) -> TxnVerificationSim:
    """Transactions of pipelined one-record batches, each transaction's first ones waiting on a
    verification that the coordinator may answer late, with CONCURRENT_TRANSACTIONS, or never."""
    rng = Scheduler(seed).rng
    faults = NetworkFaults(min_delay_ms=1, max_delay_ms=rng.choice((5, 20, 60)), drop=rng.choice((0.0, 0.02, 0.05)))
    sim = TxnVerificationSim(seed, faults, tv2)
    try:
        sim.producer.start_txn()
        while sim.finished < transactions:
            if not sim.s._queue:
                raise LivenessViolation(f"nothing left to happen after {sim.finished} transactions")
            if sim.s.now > BOUND_MS:
                raise LivenessViolation(f"{sim.finished} of {transactions} transactions in {BOUND_MS} ms")
            sim.s.step()
    finally:
        sim.close()
    return sim


def txn_tv2_pipelined_add(seed: int, transactions: int = 10) -> TxnVerificationSim:
    """Transaction version 2: EndTxn bumps the epoch and the next transaction's first batches go
    out at once, while the previous transaction's marker (carrying the bumped epoch) is still on
    its way to the leader; the coordinator answers the leader's add with CONCURRENT_TRANSACTIONS
    until that marker is written, and the leader asks again (add.partitions.to.txn.retry.*)."""
    return txn_pipelined_verification(seed, transactions, tv2=True)


def bug_switch(bug: str):
    """(owner, attribute) of a bug switch of :data:`TXN_BUGS`."""
    return ProducerStateManager, bug


TXN_SCENARIOS = {f.__name__: f for f in (txn_pipelined_verification, txn_tv2_pipelined_add)}
