"""The quorum states of one KRaft node and the only place where a node changes state.

Theory of operation
-------------------
Time is cut into *epochs* (Raft's terms). In each epoch at most one node is leader; a node
learns the epoch and leader from every message it receives and never goes back to a smaller
epoch. The voters (a fixed set of ``(node id, directory id)``, KIP-853's replica keys) elect the
leader; observers (brokers) only fetch. A voter that hears nothing from a leader for
``fetch_timeout_ms`` (or nothing at all for a random election timeout) becomes *Prospective* and
asks for pre-votes without bumping the epoch (KIP-996); only with a majority of pre-votes does it
become *Candidate* in epoch + 1, vote for itself and ask for real votes. A voter grants at most
one real vote per epoch, only to a candidate whose log is at least as long as its own (compared
as ``(last epoch, end offset)``), and writes the vote to the ``quorum-state`` store *before* it
answers. With a majority of votes the candidate becomes *Leader*, writes a LeaderChange control
record, and tells the others with BeginQuorumEpoch.

Followers pull from the leader with Fetch (KIP-595). Each fetch carries the follower's end offset
and the epoch of its last record; the leader checks them against its leader epoch cache and
answers either records, or a *diverging epoch* to which the follower truncates. The leader's high
watermark is the largest end offset that a majority of voters (itself included) hold durably, and
it only moves once an offset of the leader's own epoch is in that majority (Raft's commit rule:
older entries are committed indirectly). Followers learn the high watermark from fetch responses.
Records below the high watermark are committed: they are handed to the application once.

A leader that does not hear fetches from a majority within 1.5 × ``fetch_timeout_ms`` resigns
(check quorum). A leader that shuts down resigns gracefully with EndQuorumEpoch so that the others
start an election at once. A node restarting after being leader starts *Resigned* in that epoch:
it must never lead that epoch again, since its unflushed records of that epoch may be lost.

States and transitions (as Kafka's ``QuorumState``; E = the current epoch)
-------------------------------------------------------------------------

==============  ==========================================  =============================================
from            to                                          when
==============  ==========================================  =============================================
Unattached      Unattached (E' > E, or E and voted)         higher epoch seen (a pre-vote from E' too);
                                                            vote granted in E
Unattached      Prospective (E)                             election timeout (voters only)
Unattached      Follower (E' >= E)                          leader of E' discovered
Prospective     Candidate (E + 1)                           majority of pre-votes
Prospective     Prospective (E)                             election timeout: new pre-vote round
Prospective     Follower (E' >= E)                          leader discovered (a pre-vote rejected by a
                                                            voter that knows the leader)
Prospective     Unattached (E' > E)                         higher epoch without a leader
Candidate       Leader (E)                                  majority of votes
Candidate       Prospective (E)                             election timeout
Candidate       Follower (E' >= E) / Unattached (E' > E)    leader discovered / higher epoch
Leader          Resigned (E)                                graceful shutdown, or check quorum failed
Leader          Follower (E' > E) / Unattached (E' > E)     higher epoch
Follower        Prospective (E)                             fetch timeout (voters only)
Follower        Unattached (E)                              EndQuorumEpoch from its leader; observer's
                                                            fetch timeout
Follower        Follower (E' > E) / Unattached (E' > E)     new leader / higher epoch
Resigned        Prospective (E)                             election timeout
Resigned        Follower (E' >= E) / Unattached (E' > E)    leader discovered / higher epoch
==============  ==========================================  =============================================

Observers use only Unattached and Follower. Every change goes through :func:`check_transition`,
called by ``RaftNode._transition``, which also writes the new election state to the store
before anything else happens (so a vote is durable before it is answered).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .log import ElectionState

UNATTACHED = "Unattached"
PROSPECTIVE = "Prospective"
CANDIDATE = "Candidate"
LEADER = "Leader"
FOLLOWER = "Follower"
RESIGNED = "Resigned"

# from -> {to: epoch rule}; "same" = same epoch only, "higher" = larger epoch only,
# "any" = same or larger, "next" = exactly E + 1
TRANSITIONS: dict[str, dict[str, str]] = {
    UNATTACHED: {UNATTACHED: "any", PROSPECTIVE: "same", FOLLOWER: "any"},
    PROSPECTIVE: {CANDIDATE: "next", PROSPECTIVE: "same", FOLLOWER: "any", UNATTACHED: "higher"},
    CANDIDATE: {LEADER: "same", PROSPECTIVE: "same", FOLLOWER: "any", UNATTACHED: "higher"},
    LEADER: {RESIGNED: "same", FOLLOWER: "higher", UNATTACHED: "higher"},
    FOLLOWER: {PROSPECTIVE: "same", UNATTACHED: "any", FOLLOWER: "any"},
    RESIGNED: {PROSPECTIVE: "same", FOLLOWER: "any", UNATTACHED: "higher"},
}
VOTER_ONLY = {PROSPECTIVE, CANDIDATE, LEADER, RESIGNED}


class IllegalTransition(Exception):
    pass


@dataclass(slots=True)
class EpochState:
    """What every state has. ``deadline`` is the state's one timer: election timeout for
    Unattached/Prospective/Candidate/Resigned, fetch timeout for Follower, check quorum for Leader."""

    name: str
    epoch: int
    deadline: int
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: str | None = None

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, self.voted_directory_id)


@dataclass(slots=True)
class UnattachedState(EpochState):
    pass


@dataclass(slots=True)
class ProspectiveState(EpochState):
    granted: set = field(default_factory=set)
    rejected: set = field(default_factory=set)


@dataclass(slots=True)
class CandidateState(EpochState):
    granted: set = field(default_factory=set)
    rejected: set = field(default_factory=set)


@dataclass(slots=True)
class FollowerState(EpochState):
    has_fetched: bool = False  # a successful fetch since becoming follower (KIP-996)
    high_watermark: int = -1
    fetching_snapshot: object = None  # SnapshotId the leader told us to fetch (KIP-630)
    snapshot_buf: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class LeaderState(EpochState):
    epoch_start_offset: int = 0
    high_watermark: int = -1  # unknown until an offset of this epoch is committed
    voter_end: dict = field(default_factory=dict)  # voter id -> durable end offset (-1 unknown)
    observer_end: dict = field(default_factory=dict)
    fetched: set = field(default_factory=set)  # voters that fetched since the last check quorum
    unacked: set = field(default_factory=set)  # voters not yet aware of this leader
    parked: dict = field(default_factory=dict)  # replica id -> (FetchRequest, expiry)
    sent_hw: dict = field(default_factory=dict)  # replica id -> high watermark last sent to it
    flush_at: int = -1
    granting_voters: set = field(default_factory=set)  # for the LeaderChange record


@dataclass(slots=True)
class ResignedState(EpochState):
    preferred_successors: list = field(default_factory=list)
    unacked: set = field(default_factory=set)


def check_transition(old: EpochState | None, new: EpochState, is_voter: bool) -> None:
    """Raise :class:`IllegalTransition` unless the move is in the table above."""
    if new.name in VOTER_ONLY and not is_voter:
        raise IllegalTransition(f"an observer cannot become {new.name}")
    if old is None:
        return
    rule = TRANSITIONS[old.name].get(new.name)
    if rule is None:
        raise IllegalTransition(f"{old.name} -> {new.name} is not allowed")
    e0, e1 = old.epoch, new.epoch
    ok = {"same": e1 == e0, "higher": e1 > e0, "any": e1 >= e0, "next": e1 == e0 + 1}[rule]
    if not ok:
        raise IllegalTransition(f"{old.name}({e0}) -> {new.name}({e1}): epoch rule '{rule}'")
    if e1 == e0:
        if old.leader_id >= 0 and new.leader_id >= 0 and old.leader_id != new.leader_id:
            raise IllegalTransition(f"two leaders in epoch {e0}: {old.leader_id} and {new.leader_id}")
        if old.voted_id >= 0 and new.voted_id != old.voted_id:
            raise IllegalTransition(f"vote changed in epoch {e0}: {old.voted_id} -> {new.voted_id}")
