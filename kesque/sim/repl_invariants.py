"""The invariants of partition replication under the simulator (:mod:`kesque.sim.replication`).

Checked after every event:

- **committed history**: the *ledger* of each partition is what the current leader (the
  controller's, once it applied that leadership) has below its HW; an acks=all acknowledgement or
  a record served to the consumer is a promise that its value is at that offset in the ledger,
  for ever;
- **nothing committed is truncated**: a replica's follower logic never truncates a record of the
  ledger, and a leader holds the whole ledger (so no acks=all record is lost);
- **the ISR agrees**: every running ISR member's log is the ledger below its log end;
- **one leader per epoch**: a broker leads epoch E only if the controller elected it in E, and
  no two brokers lead the same epoch;
- **clean elections**: without ``unclean.leader.election.enable`` the controller elects only
  ISR members.

An unclean election (``unclean.leader.election.enable``) may lose committed records: the ledger
then goes back to what the new leader holds and the loss is counted (``lost``), never silent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .scheduler import InvariantViolation

if TYPE_CHECKING:
    from .replication import MemLog, ReplicationSim, SimBroker


class ReplicationInvariants:
    def __init__(self, sim: ReplicationSim):
        self.sim = sim
        self.ledger: dict[int, list[int]] = {p: [] for p in range(sim.partitions)}
        self.promised: dict[int, dict[int, tuple[int, str]]] = {p: {} for p in range(sim.partitions)}
        self.leaders: dict[tuple[int, int], int] = {}
        self.verified: dict[tuple, int] = {}  # (broker, partition) -> log prefix checked
        self.rebased: set[tuple[int, int]] = set()
        self.lost: dict[int, int] = {p: 0 for p in range(sim.partitions)}
        self.lost_promises: list = []

    @property
    def committed(self) -> int:
        return sum(len(v) for v in self.ledger.values())

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"t={self.sim.s.now}ms: {what}")

    # -- events ---------------------------------------------------------------------------------------
    def on_leader(self, pid: int, epoch: int, broker: int) -> None:
        elected = self.sim.controller.elected.get((pid, epoch))
        if elected != broker:
            self.fail(f"broker {broker} leads partition {pid} in epoch {epoch}, which the controller gave to {elected}")
        known = self.leaders.setdefault((pid, epoch), broker)
        if known != broker:
            self.fail(f"two leaders of partition {pid} in epoch {epoch}: {known} and {broker}")

    def on_leader_append(self, pid: int, broker: int, epoch: int) -> None:
        if self.leaders.get((pid, epoch)) != broker:
            self.fail(f"broker {broker} appended to partition {pid} in epoch {epoch} without leading it")

    def promise(self, pid: int, offset: int, value: int, how: str, epoch: int) -> None:
        """The leader of ``epoch`` acknowledged or served ``value`` at ``offset``: it must be
        committed there for ever, unless an unclean election of a later epoch lost it."""
        ledger = self.ledger[pid]
        if offset < len(ledger):
            if ledger[offset] != value:
                self._broken(pid, offset, (value, how, epoch), f"but {ledger[offset]} is committed")
            return
        promised = self.promised[pid]
        known = promised.setdefault(offset, (value, how, epoch))
        if known[0] != value:
            if self._lost_by_unclean(pid, known[2]):
                promised[offset] = (value, how, epoch)
                self.lost_promises.append((pid, offset, known))
            else:
                self._broken(pid, offset, (value, how, epoch), f"and {known[0]} {known[1]} in epoch {known[2]}")

    def _lost_by_unclean(self, pid: int, epoch: int) -> bool:
        return any(p == pid and e > epoch for p, e in self.sim.controller.unclean)

    def _broken(self, pid: int, offset: int, promise: tuple, why: str) -> None:
        value, how, epoch = promise
        if self._lost_by_unclean(pid, epoch):
            self.lost_promises.append((pid, offset, promise))
            return
        self.fail(f"partition {pid} offset {offset}: value {value} {how} in epoch {epoch}, {why}")

    # -- after every event -----------------------------------------------------------------------------
    def check(self) -> None:
        ctl = self.sim.controller
        for b in self.sim.brokers.values():
            for pid, log in b.logs.items():
                self._check_truncations(b, pid, log)
        for pid in range(self.sim.partitions):
            p = ctl.partition(pid)
            if p is None:
                continue
            self._extend(pid, p)
            if self._unclean_pending(pid, p.leader_epoch):
                continue  # the new leader's log is the history from now on, once it leads
            for r in p.isr:
                b = self.sim.brokers[r]
                if b.running and pid in b.logs:
                    self._verify(b, pid, b.logs[pid], len(self.ledger[pid]))

    def _check_truncations(self, b: SimBroker, pid: int, log: MemLog) -> None:
        key = (b.id, pid)
        if log.low < self.verified.get(key, 0):
            self.verified[key] = log.low
        log.low = log.log_end_offset
        if not log.truncated:
            return
        ledger = self.ledger[pid]
        for offset, removed in log.truncated:
            for i, (_, v) in enumerate(removed):
                o = offset + i
                if o < len(ledger) and ledger[o] == v:
                    self.fail(
                        f"broker {b.id} truncated committed offset {o} of partition {pid} "
                        f"(value {v}; its log is now {log.log_end_offset} long)"
                    )
        log.truncated.clear()

    def _current_leader(self, pid: int, p) -> SimBroker | None:
        if p.leader < 0:
            return None
        b = self.sim.brokers[p.leader]
        if not b.running or pid not in b.parts:
            return None
        rep = b.parts[pid].rep
        return b if rep.is_leader and rep.leader_epoch == p.leader_epoch else None

    def _extend(self, pid: int, p) -> None:
        b = self._current_leader(pid, p)
        if b is None:
            return
        log = b.logs[pid]
        if self._unclean_pending(pid, p.leader_epoch):
            self._rebase(pid, p.leader_epoch, b, log)
        ledger = self.ledger[pid]
        if log.log_end_offset < len(ledger):
            self.fail(
                f"broker {b.id}, leader of partition {pid} in epoch {p.leader_epoch}, holds "
                f"{log.log_end_offset} records: committed offsets {log.log_end_offset}..{len(ledger) - 1} "
                f"are lost"
            )
        self._verify(b, pid, log, len(ledger))
        hw = log.high_watermark
        if hw > len(ledger):
            promised = self.promised[pid]
            for o in range(len(ledger), hw):
                v = log.records[o][1]
                if o in promised:
                    promise = promised.pop(o)
                    if promise[0] != v:
                        self._broken(pid, o, promise, f"but {v} is committed")
                ledger.append(v)
            self.verified[(b.id, pid)] = hw

    def _unclean_pending(self, pid: int, epoch: int) -> bool:
        """An unclean election at or before ``epoch`` whose history the ledger has not taken yet
        (its leader may have died before leading: the next one, elected from its ISR, inherits)."""
        return any(p == pid and e <= epoch and (p, e) not in self.rebased for p, e in self.sim.controller.unclean)

    def _rebase(self, pid: int, epoch: int, b: SimBroker, log: MemLog) -> None:
        """An unclean election: the history goes back to what the new leader holds."""
        self.rebased.update((p, e) for p, e in self.sim.controller.unclean if p == pid and e <= epoch)
        ledger = self.ledger[pid]
        keep = 0
        while keep < min(len(ledger), log.log_end_offset) and log.records[keep][1] == ledger[keep]:
            keep += 1
        self.lost[pid] += len(ledger) - keep
        del ledger[keep:]
        for o in [o for o in self.promised[pid] if o >= keep]:
            self.lost_promises.append((pid, o, self.promised[pid].pop(o)))
        for key in self.verified:
            if key[1] == pid:
                self.verified[key] = min(self.verified[key], keep)

    def _verify(self, b: SimBroker, pid: int, log: MemLog, upto: int) -> None:
        key = (b.id, pid)
        start = self.verified.get(key, 0)
        end = min(upto, log.log_end_offset)
        if end <= start:
            return
        ledger = self.ledger[pid]
        recs = log.records
        for o in range(start, end):
            if recs[o][1] != ledger[o]:
                self.fail(
                    f"broker {b.id} (in the ISR of partition {pid}) has value {recs[o][1]} at committed "
                    f"offset {o}, where {ledger[o]} is committed"
                )
        self.verified[key] = end

    # -- at the end ---------------------------------------------------------------------------------------
    def check_converged(self) -> None:
        for pid, promised in self.promised.items():
            for o in sorted(promised):
                self._broken(pid, o, promised.pop(o), "and it was never committed")
            ledger = self.ledger[pid]
            for b in self.sim.brokers.values():
                log = b.logs.get(pid)
                if log is not None and [v for _, v in log.records] != ledger:
                    self.fail(
                        f"broker {b.id}: partition {pid} holds {log.log_end_offset} records, not the "
                        f"{len(ledger)} committed"
                    )
