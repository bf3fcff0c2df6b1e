"""The safety properties of the quorum, checked after every simulated event.

- **single leader**: at most one leader per epoch, across the durable quorum-state of every disk
  and the in-memory state of every running node;
- **monotonic epoch**: a disk's epoch never goes back, and a running node's epoch is the one on
  its disk (a replaced disk is a new replica, with a new directory id, and starts again at 0);
- **monotonic high watermark**: a running node's high watermark never goes back. Kafka does not
  store the high watermark (KRaft has no HW checkpoint), so after a restart a node starts at 0
  and re-learns it from the leader; what never goes back is the *committed* prefix: the high
  watermark of a leader, once known, is never below one reached in an earlier epoch;
- **committed on a majority**: every committed record is on the durable log of a majority of
  the voters (checked at the end of the committed prefix; log matching covers the rest);
- **committed prefix identical**: below its high watermark, every node's log is the one committed
  history (the *ledger* this module keeps), and no running node truncates below that point; the
  client appends each value once, so no value is committed twice;
- **applied only once committed**: the records a node hands to its application arrive in offset
  order, each the ledger's record at that offset.

``Invariants(cluster, majority=False)`` drops the majority check, for a scenario whose fault is
exactly the loss of a committed copy (a replaced disk), as Kafka's simulation does.
"""

from __future__ import annotations

from ..raft.log import NO_TRUNCATION, LeaderChange
from .scheduler import InvariantViolation


class Invariants:
    def __init__(self, cluster, majority: bool = True):
        self.cluster = cluster
        self.check_majority = majority
        self.ledger: list = []  # committed (epoch, value) by offset
        self.values: set = set()  # the client's values in the ledger (each appended once)
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.disk_epoch: dict[str, int] = {}  # directory id -> epoch last seen
        self.node_hw: dict[tuple, int] = {}  # (node id, incarnation) -> high watermark
        self.verified: dict[tuple, int] = {}  # (node id, incarnation) -> log checked up to
        self.leader_hw: dict[int, int] = {}  # epoch -> its leader's high watermark
        self.store_seen: dict = {}  # store -> its write count at the last check
        cluster.on_commit.append(self.on_applied)
        cluster.on_snapshot.append(self.on_snapshot)
        cluster.scheduler.add_invariant(self.check)

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"t={self.cluster.scheduler.now}ms: {what}")

    def check(self) -> None:
        for sn in self.cluster.nodes.values():
            self._check_disk(sn)
            if sn.raft is not None:
                self._check_node(sn)
        if self.check_majority:
            self._check_majority()

    def _check_disk(self, sn) -> None:
        store = sn.disk.store
        es = store.state
        if es is None or self.store_seen.get(store) == store.writes:
            return  # unchanged since the last check (a running node changes epoch only by a write)
        self.store_seen[store] = store.writes
        if es.leader_id >= 0:
            self._leader(es.epoch, es.leader_id)
        d = sn.disk.directory_id
        if es.epoch < self.disk_epoch.get(d, 0):
            self.fail(f"node {sn.node_id}: epoch went back {self.disk_epoch[d]} -> {es.epoch}")
        self.disk_epoch[d] = es.epoch
        if sn.raft is not None and sn.raft.epoch != es.epoch:
            self.fail(f"node {sn.node_id}: epoch {sn.raft.epoch} in memory, {es.epoch} on disk")

    def _leader(self, epoch: int, leader: int) -> None:
        known = self.leaders.setdefault(epoch, leader)
        if known != leader:
            self.fail(f"two leaders in epoch {epoch}: {known} and {leader}")

    def _check_node(self, sn) -> None:
        r = sn.raft
        if r.is_leader():
            self._leader(r.epoch, r.node_id)
            self._check_leader_hw(r)
        key = (sn.node_id, sn.incarnation)
        hw = r.high_watermark
        if hw < self.node_hw.get(key, 0):
            self.fail(f"node {sn.node_id}: high watermark went back {self.node_hw[key]} -> {hw}")
        self.node_hw[key] = hw
        log = sn.disk.log
        done = self.verified.get(key, 0)
        start = log.log_start_offset()
        if start > done:
            # below its log start a node holds a snapshot, checked against the ledger when it
            # was taken or installed (on_snapshot)
            if start > len(self.ledger):
                self.fail(f"node {sn.node_id}: log starts at {start}, past the committed offset {len(self.ledger)}")
            done = start
        if log.truncated_to != NO_TRUNCATION:
            if log.truncated_to < done:
                self.fail(f"node {sn.node_id}: truncated its log to {log.truncated_to}, below committed offset {done}")
            log.truncated_to = NO_TRUNCATION
        if hw > done:
            if hw > log.end_offset():
                self.fail(f"node {sn.node_id}: high watermark {hw} above its log end {log.end_offset()}")
            self._verify(sn.node_id, log, done, hw)
            self.verified[key] = hw

    def _verify(self, node_id: int, log, start: int, end: int) -> None:
        ledger = self.ledger
        for rec in log.read(start, end - start):
            o = rec.offset
            if o < len(ledger):
                if ledger[o] != (rec.epoch, rec.value):
                    self.fail(
                        f"node {node_id}: committed offset {o} is {(rec.epoch, rec.value)}, elsewhere {ledger[o]}"
                    )
            else:
                if not isinstance(rec.value, LeaderChange):
                    if rec.value in self.values:
                        self.fail(f"node {node_id}: value {rec.value!r} committed twice (offset {o})")
                    self.values.add(rec.value)
                ledger.append((rec.epoch, rec.value))

    def _check_leader_hw(self, r) -> None:
        """A leader's high watermark, once known, is never below one a leader of an earlier epoch
        reached (the committed prefix carries over), and never goes back within its epoch. A
        deposed leader still running in an older epoch may lag: that is no violation."""
        hw = r.state.high_watermark
        if hw < 0:
            return
        e = r.epoch
        before = max((h for ep, h in self.leader_hw.items() if ep < e), default=0)
        if hw < before or hw < self.leader_hw.get(e, 0):
            self.fail(
                f"leader {r.node_id} of epoch {e}: high watermark {hw} below "
                f"{max(before, self.leader_hw.get(e, 0))} reached before"
            )
        self.leader_hw[e] = hw

    def _check_majority(self) -> None:
        c = len(self.ledger)
        if c == 0:
            return
        epoch = self.ledger[c - 1][0]
        have = 0
        for nid, directory in self.cluster.voters.items():
            disk = self.cluster.nodes[nid].disk
            log = disk.log
            if disk.directory_id == directory and log.durable_end_offset() >= c and log.epoch_at(c - 1) == epoch:
                have += 1
        if have < self.cluster.majority():
            self.fail(f"committed offset {c - 1} is durable on {have} voters, fewer than a majority")

    def on_snapshot(self, sn, sid, values, installed: bool) -> None:
        """A snapshot (taken by the node's application, or fetched from the leader) is the
        committed prefix below its end offset, and the application goes on from there."""
        self._check_node(sn)
        end = sid.end_offset
        how = "installed" if installed else "took"
        if end > len(self.ledger):
            self.fail(f"node {sn.node_id} {how} a snapshot to {end}, past the committed offset {len(self.ledger)}")
        if values != self.ledger[:end]:
            bad = next(i for i, (a, b) in enumerate(zip(values + [None] * end, self.ledger[:end])) if a != b)
            got = values[bad] if bad < len(values) else None
            self.fail(f"node {sn.node_id} {how} snapshot {sid}: offset {bad} is {got}, committed {self.ledger[bad]}")
        if sid.epoch != self.ledger[end - 1][0]:
            self.fail(f"node {sn.node_id} {how} snapshot {sid}: epoch of offset {end - 1} is {self.ledger[end - 1][0]}")
        if installed:
            sn.applied = max(sn.applied, end)

    def on_applied(self, sn, records) -> None:
        self._check_node(sn)  # learn the ledger up to this node's high watermark first
        for rec in records:
            if rec.offset != sn.applied:
                self.fail(f"node {sn.node_id}: applied offset {rec.offset}, expected {sn.applied}")
            sn.applied += 1
            if rec.offset >= len(self.ledger) or self.ledger[rec.offset] != (rec.epoch, rec.value):
                got = self.ledger[rec.offset] if rec.offset < len(self.ledger) else "nothing committed"
                self.fail(
                    f"node {sn.node_id}: applied {(rec.epoch, rec.value)} at offset {rec.offset}, committed: {got}"
                )
