"""ProducerStateManager: per-partition state of idempotent producers (seed 003).

For each producer id the partition remembers its epoch and the sequence/offset ranges of
its last five batches. A batch whose sequence range matches one of them is a retry: it is
acknowledged with the offsets it got the first time and not written again. Otherwise the
first sequence must follow the last one (or be 0 for a new epoch), else the batch is
refused with OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch gets INVALID_PRODUCER_EPOCH.

Transactions (seed 004): a producer's first transactional batch opens a transaction at its
offset; the COMMIT/ABORT marker closes it. The first offset of the oldest transaction not
yet decided — or decided by a marker not yet below the high watermark — is the partition's
first unstable offset, which bounds the last stable offset (LSO) read_committed readers see.

KIP-890 verification: a transactional batch that would open the producer's transaction here is
appended only once the transaction coordinator confirms the partition is in the transaction.
While that answer is pending the partition keeps a :class:`VerificationStateEntry` for the
producer (Kafka's, kept in memory only): a unique guard that the append must present (so a
verification that raced with a marker cannot open a stale transaction), and the lowest sequence
seen while verifying. A batch with a higher first sequence is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER until the lower one is appended, so pipelined first batches (the
first failed verification with a retriable error, a later one passed) are never appended out of
order: the client resends from the lowest sequence. A transaction-version-2 producer with no
state here must start at sequence 0. The entry goes with any transactional append of the
producer (data, or a marker: not the marker of a transaction version 2 producer's previous
transaction, which carries the epoch its next transaction is being verified at) and with
producer expiration.

State survives restarts through ``<offset>.snapshot`` files in Kafka's ProducerSnapshot
layout (version, CRC32C, entries), written on segment roll and clean shutdown; on load the
newest snapshot at or below the log end is read and the batches after it are replayed.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from dataclasses import dataclass, field

from crc32c import crc32c

from ..errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")  # pid, epoch, lastSeq, lastOffset, offsetDelta, timestamp, coordEpoch, txnFirst
NO_EPOCH = -1


@dataclass(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return (self.last_seq - self.offset_delta) & 0x7FFFFFFF if self.last_seq >= 0 else -1

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class VerificationGuard:
    """A unique token of one verification (Kafka's VerificationGuard): an append presents the
    guard its verification started with, and it must still be the producer's current one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"VerificationGuard({id(self):#x})"


@dataclass(slots=True)
class VerificationStateEntry:
    """A producer's pending KIP-890 verification on this partition (Kafka's VerificationStateEntry)."""

    timestamp: int
    lowest_sequence: int
    epoch: int
    supports_epoch_bump: bool = False
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        """A lower sequence of the same epoch lowers the bar; a higher epoch starts it again
        (its sequences restart, and the older epoch's no longer matter)."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == 0x7FFFFFFF)


def snapshot_path(dir_path: str, offset: int) -> str:
    return os.path.join(dir_path, f"{offset:020d}{SNAPSHOT_SUFFIX}")


class ProducerStateManager:
    # simulator bug switches (kesque.sim.txn_verification): kesque's two bugs of issue 25
    skip_verification_sequence_check = False
    clear_verification_on_any_marker = False

    def __init__(self, dir_path: str, tp: str = "", expiration_ms: int = 86_400_000):
        self.dir = dir_path
        self.tp = tp
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.last_map_offset = 0  # next offset not yet reflected in the state
        self.ongoing_txns: dict[int, int] = {}  # first offset -> producer id (undecided)
        self.unreplicated_txns: dict[int, int] = {}  # first offset -> marker offset (marker above HW)
        self.verification_states: dict[int, VerificationStateEntry] = {}  # producer id -> pending verification

    # ------------------------------------------------------------------ KIP-890 verification
    def maybe_create_verification_state(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int, supports_epoch_bump: bool = False
    ) -> VerificationStateEntry:
        """Start (or continue) a verification for the producer's first transactional batch here;
        the entry's guard goes with the append once the coordinator has answered."""
        entry = self.verification_states.get(producer_id)
        if entry is None:
            entry = self.verification_states[producer_id] = VerificationStateEntry(
                now_ms, sequence, epoch, supports_epoch_bump
            )
        entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return entry

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        entry = self.verification_states.get(producer_id)
        return entry.guard if entry is not None else None

    def clear_verification_state(self, producer_id: int) -> None:
        self.verification_states.pop(producer_id, None)

    # ------------------------------------------------------------------ leader appends
    def check(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        offset_hint: int,
        transactional: bool = False,
        missing_verification=None,
    ):
        """Validate a client batch. Returns the BatchMetadata of the original when the batch is a
        duplicate, None when it may be appended; raises KafkaError otherwise.
        ``missing_verification``: a callable telling whether a transactional batch lacks the
        KIP-890 verification it needs, asked once the batch is known not to be a duplicate."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch == entry.epoch:
            dup = entry.find_duplicate(first_seq, last_seq)
            if dup is not None:
                return dup
        if missing_verification is not None and missing_verification():
            raise KafkaError(ErrorCode.invalid_txn_state, "Record was not part of an ongoing transaction")
        self._check_verification_sequence(producer_id, first_seq, offset_hint, entry)
        if entry is None:
            return None  # unknown producer (new, or its state expired): accept any sequence
        if not transactional and entry.current_txn_first_offset >= 0 and epoch >= entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"Expected transactional write from producer {producer_id} at offset {offset_hint} in "
                f"partition {self.tp}",
            )
        self._check_epoch(entry, epoch, offset_hint)
        if epoch == entry.epoch:
            # no remembered batch (only a marker): the sequence must start again at 0, as Kafka's
            # inSequence(NO_SEQUENCE, seq) requires
            if not _in_sequence(entry.last_seq, first_seq) if entry.batches else first_seq != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Out of order sequence number for producer {producer_id} at offset {offset_hint} in "
                    f"partition {self.tp}: {first_seq} (incoming seq. number), {entry.last_seq} "
                    "(current end sequence number)",
                )
        elif first_seq != 0 and entry.epoch != NO_EPOCH:
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"Invalid sequence number for new epoch of producer {producer_id} at offset "
                f"{offset_hint} in partition {self.tp}: {epoch} (request epoch), {first_seq} (seq. "
                f"number), {entry.epoch} (current producer epoch)",
            )
        return None

    def _check_verification_sequence(
        self, producer_id: int, first_seq: int, offset_hint: int, entry: ProducerStateEntry | None
    ) -> None:
        """Kafka's ProducerAppendInfo.checkSequence against a pending verification: no batch
        overtakes a lower sequence still being verified (or retried after a failed verification)."""
        v = self.verification_states.get(producer_id)
        if v is None or self.skip_verification_sequence_check:
            return
        if v.supports_epoch_bump and first_seq != 0 and entry is None:
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"Invalid sequence number for producer {producer_id} at offset {offset_hint} in partition "
                f"{self.tp}: {first_seq} (incoming seq. number). Expected sequence 0 for transactions v2 "
                "idempotent producer with no existing state.",
            )
        if first_seq > v.lowest_sequence:
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {producer_id} at offset {offset_hint} in "
                f"partition {self.tp}: {first_seq} (incoming seq. number), {v.lowest_sequence} (earliest "
                "seen sequence)",
            )

    def update(
        self,
        producer_id: int,
        epoch: int,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
        transactional: bool = False,
    ) -> None:
        """Record an appended batch (leader, follower or recovery replay)."""
        entry = self._entry(producer_id, epoch)
        if last_seq >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if transactional:
            # the transaction has its first offset here now (or was already open): the
            # verification that let it start is done (Kafka's updateProducers)
            self.verification_states.pop(producer_id, None)
        if transactional and entry.current_txn_first_offset < 0:
            first = last_offset - offset_delta
            entry.current_txn_first_offset = first
            self.ongoing_txns[first] = producer_id
        self.last_map_offset = max(self.last_map_offset, last_offset + 1)

    def _entry(self, producer_id: int, epoch: int) -> ProducerStateEntry:
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        return entry

    def _check_epoch(self, entry: ProducerStateEntry, epoch: int, offset_hint: int) -> None:
        if epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"Epoch of producer {entry.producer_id} at offset {offset_hint} in {self.tp} is {epoch}, "
                f"which is smaller than the last seen epoch {entry.epoch}",
            )

    # ------------------------------------------------------------------ transactions
    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, offset_hint: int) -> None:
        """Kafka's checks of an end-transaction marker written by a coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        self._check_epoch(entry, epoch, offset_hint)
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"Invalid coordinator epoch for producer {producer_id} at offset {offset_hint} in "
                f"partition {self.tp}: {coordinator_epoch} (zombie), {entry.coordinator_epoch} "
                "(current)",
            )

    def append_marker(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Record a COMMIT/ABORT marker at ``offset``; returns the transaction it completes
        (None for a marker of a producer with no data in this partition's transaction).
        The caller indexes an aborted one and then calls :meth:`complete_txn`."""
        entry = self._entry(producer_id, epoch)
        # a marker ends what was being verified, except a transaction version 2 producer's next
        # transaction: its verification started at the bumped epoch the marker carries, before
        # the marker landed here (Kafka's isV2NextTransactionStarted)
        v = self.verification_states.get(producer_id)
        if v is None or not (v.supports_epoch_bump and v.epoch == epoch) or self.clear_verification_on_any_marker:
            self.verification_states.pop(producer_id, None)
        completed = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, offset, not commit)
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        self.last_map_offset = max(self.last_map_offset, offset + 1)
        return completed

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is decided: the first offset of the oldest other open
        transaction, else the offset after the marker (Kafka's lastStableOffset(completedTxn))."""
        others = [first for first, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn, high_watermark: int | None = None) -> None:
        self.ongoing_txns.pop(completed.first_offset, None)
        if high_watermark is None or completed.last_offset >= high_watermark:
            self.unreplicated_txns[completed.first_offset] = completed.last_offset

    def on_high_watermark(self, hw: int) -> None:
        if self.unreplicated_txns:
            for first in [f for f, last in self.unreplicated_txns.items() if last < hw]:
                del self.unreplicated_txns[first]

    def first_unstable_offset(self) -> int | None:
        if not self.ongoing_txns and not self.unreplicated_txns:
            return None
        return min(min(self.ongoing_txns, default=1 << 63), min(self.unreplicated_txns, default=1 << 63))

    def ongoing_txn_of(self, producer_id: int) -> int:
        entry = self.producers.get(producer_id)
        return entry.current_txn_first_offset if entry is not None else -1

    def remove_expired(self, now_ms: int) -> int:
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        # verifications never answered (the producer gave up) go after the same time
        for pid in [pid for pid, v in self.verification_states.items() if now_ms - v.timestamp >= self.expiration_ms]:
            del self.verification_states[pid]
        return len(expired)

    # ------------------------------------------------------------------ snapshots
    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                try:
                    out.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        return sorted(out)

    def take_snapshot(self, offset: int | None = None, sync: bool = True) -> None:
        offset = self.last_map_offset if offset is None else offset
        entries = []
        for pid, e in self.producers.items():
            last = e.batches[-1] if e.batches else None
            entries.append(
                _ENTRY.pack(
                    pid,
                    e.epoch,
                    last.last_seq if last else -1,
                    last.last_offset if last else -1,
                    last.offset_delta if last else 0,
                    e.last_timestamp,
                    e.coordinator_epoch,
                    e.current_txn_first_offset,
                )
            )
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        crc = crc32c(body)
        data = struct.pack(">hI", SNAPSHOT_VERSION, crc) + body
        path = snapshot_path(self.dir, offset)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)

    @staticmethod
    def read_snapshot(path: str) -> list[tuple]:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _HEAD.size:
            raise ValueError(f"snapshot {path} is truncated")
        version, crc, count = _HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot {path} has unknown version {version}")
        if crc32c(memoryview(data)[6:]) != crc:
            raise ValueError(f"snapshot {path} is corrupt (CRC mismatch)")
        if len(data) != _HEAD.size + count * _ENTRY.size:
            raise ValueError(f"snapshot {path} has the wrong size")
        return [_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size) for i in range(count)]

    def clear(self, offset: int = 0) -> None:
        self.producers.clear()
        self.verification_states.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self.last_map_offset = offset

    def load_latest(self, max_offset: int) -> int:
        """Load the newest valid snapshot at or below ``max_offset``; returns its offset
        (0 when none: the whole log must be replayed). Newer snapshots are deleted."""
        self.clear()
        for off in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.dir, off)
            if off > max_offset:
                os.unlink(path)
                continue
            try:
                entries = self.read_snapshot(path)
            except (OSError, ValueError) as e:
                log.warning("%s: deleting unusable producer snapshot %s: %s", self.tp, path, e)
                os.unlink(path)
                continue
            for pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first in entries:
                e = ProducerStateEntry(
                    pid, epoch, coordinator_epoch=coord_epoch, last_timestamp=ts, current_txn_first_offset=txn_first
                )
                if last_offset >= 0:
                    e.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
                self.producers[pid] = e
                if txn_first >= 0:
                    self.ongoing_txns[txn_first] = pid
            self.last_map_offset = off
            return off
        return 0

    def truncate_and_reload(self, log_start: int, log_end: int) -> None:
        for off in self.snapshot_offsets():
            if off < log_start or off > log_end:
                os.unlink(snapshot_path(self.dir, off))

    def delete_snapshots_below(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off < offset:
                try:
                    os.unlink(snapshot_path(self.dir, off))
                except FileNotFoundError:
                    pass
