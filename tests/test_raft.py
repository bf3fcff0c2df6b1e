"""RaftNode, sans-IO: each rule of Kafka's KRaft quorum (KIP-595, KIP-996 pre-vote, KIP-853
voter keys), driven one message at a time; the simulator (tests/test_sim.py) checks them together."""

from __future__ import annotations

import random

import pytest

from kesque.errors import KafkaError
from kesque.raft import (
    ElectionState,
    IllegalTransition,
    Knobs,
    MemoryQuorumStateStore,
    MemoryRaftLog,
    QuorumConfig,
    RaftNode,
    Record,
)
from kesque.raft import messages as m
from kesque.raft.log import LeaderChange
from kesque.raft.state import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    RESIGNED,
    UNATTACHED,
    LeaderState,
    UnattachedState,
    check_transition,
)

VOTERS = {1: "d1", 2: "d2", 3: "d3"}
CFG = QuorumConfig()


class Node:
    """One RaftNode with its disk, the messages it sent, and a clock. It is the node's driver:
    a flush the node asks for is done at once (``auto_flush``), or held until :meth:`flush`."""

    def __init__(self, node_id=1, voters=VOTERS, directory_id=None, log=None, store=None, knobs=None, auto_flush=True):
        self.now = 0
        self.log = log or MemoryRaftLog()
        self.store = store or MemoryQuorumStateStore()
        self.sent: list = []
        self.committed: list = []
        self.auto_flush = auto_flush
        self.flush_asked = False
        self.raft = RaftNode(
            node_id,
            directory_id or voters.get(node_id, f"d{node_id}"),
            voters,
            self.log,
            self.store,
            CFG,
            random.Random(0),
            self.now,
            knobs,
        )
        self._take(self.raft.tick(self.now))

    def _take(self, out):
        self.sent += out.messages
        self.committed += out.committed
        if out.flush:
            self.flush_asked = True
            if self.auto_flush:
                self.flush()
        return out

    def flush(self, job=None):
        """Complete a flush (``job``, begun earlier, or one begun now) and tell the node."""
        self.flush_asked = False
        self.log.end_flush(job or self.log.begin_flush())
        self._take(self.raft.flushed(self.now))

    def tick(self, ms=0):
        self.now += ms
        return self._take(self.raft.tick(self.now))

    def timeout(self):
        """Jump to the node's state deadline (election, fetch or check-quorum timeout)."""
        self.now = self.raft.state.deadline
        return self._take(self.raft.tick(self.now))

    def recv(self, src, msg):
        return self._take(self.raft.handle(src, msg, self.now))

    def take(self, kind, dest=None):
        """The messages of this type sent since the last take (to ``dest``), removed from ``sent``."""
        got = [(d, x) for d, x in self.sent if isinstance(x, kind) and (dest is None or d == dest)]
        self.sent = [p for p in self.sent if p not in got]
        return got

    def reply(self, kind, dest=None):
        ((_, msg),) = self.take(kind, dest)
        return msg

    @property
    def state(self):
        return self.raft.state


def vote_req(epoch, cand=2, last_epoch=0, last_offset=0, pre=False, voter=1, voter_dir="d1", corr=7):
    return m.VoteRequest(corr, epoch, cand, f"d{cand}", voter, voter_dir, last_epoch, last_offset, pre)


def elect(node: Node) -> Node:
    """Drive ``node`` (id 1) from Unattached to Leader with votes from node 2."""
    node.timeout()
    pre = node.reply(m.VoteRequest, 2)
    node.recv(2, m.VoteResponse(pre.correlation_id, m.NONE, -1, pre.replica_epoch, True, True))
    req = node.reply(m.VoteRequest, 2)
    node.recv(2, m.VoteResponse(req.correlation_id, m.NONE, -1, req.replica_epoch, True))
    assert node.state.name == LEADER
    node.take(m.VoteRequest)
    return node


def follower(epoch=1, leader=2, log=None) -> Node:
    node = Node(log=log)
    node.recv(leader, m.BeginQuorumEpochRequest(1, leader, epoch, 1, "d1"))
    node.take(m.BeginQuorumEpochResponse)
    return node


def fill(log, *epochs):
    for e in epochs:
        log.append(e, [f"v{log.end_offset()}"])
    log.flush()
    return log


# -- election --------------------------------------------------------------------------------------


def test_starts_unattached_and_prevotes_without_bumping_the_epoch():
    n = Node()
    assert (n.state.name, n.state.epoch) == (UNATTACHED, 0)
    assert n.raft.next_deadline() >= CFG.election_timeout_ms
    n.timeout()
    assert (n.state.name, n.state.epoch) == (PROSPECTIVE, 0)
    reqs = n.take(m.VoteRequest)
    assert sorted(d for d, _ in reqs) == [2, 3]
    assert all(r.pre_vote and r.replica_epoch == 0 for _, r in reqs)
    assert n.store.state.epoch == 0


def test_majority_of_prevotes_makes_a_candidate_that_votes_for_itself_durably():
    n = Node()
    n.timeout()
    pre = n.reply(m.VoteRequest, 2)
    n.recv(2, m.VoteResponse(pre.correlation_id, m.NONE, -1, 0, True, True))
    assert (n.state.name, n.state.epoch) == (CANDIDATE, 1)
    assert n.store.state == ElectionState(1, -1, 1, "d1")
    reqs = [(d, r) for d, r in n.take(m.VoteRequest) if not r.pre_vote]
    assert {d for d, _ in reqs} == {2, 3}
    assert all(r.replica_epoch == 1 for _, r in reqs)


def test_candidate_with_a_majority_leads_and_writes_leader_change_and_begin_epoch():
    n = elect(Node())
    assert n.state.epoch == 1 and n.store.state.leader_id == 1
    assert n.log.read(0, 10)[0].value == LeaderChange(1, (1, 2, 3), (1, 2)) and n.log.read(0, 10)[0].epoch == 1
    assert {d for d, _ in n.take(m.BeginQuorumEpochRequest)} == {2, 3}


def test_rejected_prevote_from_a_voter_that_knows_the_leader_makes_a_follower():
    n = Node()
    n.recv(2, m.BeginQuorumEpochRequest(1, 2, 3, 1, "d1"))
    n.timeout()  # fetch timeout -> Prospective
    assert n.state.name == PROSPECTIVE
    pre = n.reply(m.VoteRequest, 3)
    n.recv(3, m.VoteResponse(pre.correlation_id, m.NONE, 2, 3, False, True))
    assert (n.state.name, n.state.epoch, n.state.leader_id) == (FOLLOWER, 3, 2)


def test_single_voter_elects_itself():
    n = Node(voters={1: "d1"})
    n.timeout()
    assert (n.state.name, n.state.epoch) == (LEADER, 1)


def test_observer_never_stands_for_election():
    n = Node(node_id=9)
    assert not n.raft.is_voter
    n.tick(100 * CFG.election_timeout_ms)
    assert n.state.name == UNATTACHED
    assert not n.take(m.VoteRequest)
    assert n.take(m.FetchRequest)  # it asks a voter who leads


def test_candidate_election_timeout_starts_a_new_prevote_round():
    n = Node()
    n.timeout()
    pre = n.reply(m.VoteRequest, 2)
    n.recv(2, m.VoteResponse(pre.correlation_id, m.NONE, -1, 0, True, True))
    n.timeout()
    assert (n.state.name, n.state.epoch, n.state.voted_id) == (PROSPECTIVE, 1, 1)


# -- voting ----------------------------------------------------------------------------------------


class WatchedStore(MemoryQuorumStateStore):
    """Records, at each write, whether the node had already answered a vote."""

    def __init__(self):
        super().__init__()
        self.node = None
        self.answered_before_write = []

    def write(self, state):
        out = self.node.raft._out.messages if self.node and hasattr(self.node, "raft") else []
        self.answered_before_write.append(any(isinstance(x, m.VoteResponse) for _, x in out))
        super().write(state)


def test_vote_is_durable_before_the_answer_and_given_once_per_epoch():
    store = WatchedStore()
    n = Node(store=store)
    store.node = n
    n.recv(2, vote_req(1))
    resp = n.reply(m.VoteResponse)
    assert resp.vote_granted and resp.leader_epoch == 1
    assert n.store.state.voted_id == 2
    assert store.writes >= 2 and not any(store.answered_before_write)
    n.recv(3, vote_req(1, cand=3))
    assert not n.reply(m.VoteResponse).vote_granted
    n.recv(2, vote_req(1))  # the same candidate again: same answer
    assert n.reply(m.VoteResponse).vote_granted


@pytest.mark.parametrize("last_epoch,last_offset", [(1, 3), (2, 2)])
def test_vote_refused_to_a_candidate_with_a_shorter_log(last_epoch, last_offset):
    n = Node(log=fill(MemoryRaftLog(), 1, 1, 2))  # ours: last epoch 2, end offset 3
    n.recv(2, vote_req(5, last_epoch=last_epoch, last_offset=last_offset))
    assert not n.reply(m.VoteResponse).vote_granted
    assert n.store.state.voted_id == -1


def test_vote_granted_to_a_candidate_with_a_log_as_long():
    n = Node(log=fill(MemoryRaftLog(), 1, 1, 2))
    n.recv(2, vote_req(5, last_epoch=2, last_offset=3))
    assert n.reply(m.VoteResponse).vote_granted


def test_vote_with_an_older_epoch_is_fenced():
    n = follower(epoch=4)
    n.recv(3, vote_req(3, cand=3, last_epoch=1))
    r = n.reply(m.VoteResponse)
    assert (r.error_code, r.leader_epoch, r.leader_id, r.vote_granted) == (m.FENCED_LEADER_EPOCH, 4, 2, False)


def test_invalid_vote_requests():
    n = Node()
    n.recv(2, vote_req(1, last_epoch=1))  # a candidate's last epoch must be below its epoch
    assert n.reply(m.VoteResponse).error_code == m.INVALID_REQUEST
    n.recv(2, vote_req(1, last_offset=-1))
    assert n.reply(m.VoteResponse).error_code == m.INVALID_REQUEST


def test_voter_with_another_directory_id_has_no_vote():
    """KIP-853: a voter whose disk was replaced is not the voter the quorum knows."""
    n = Node(directory_id="new")
    assert not n.raft.is_voter
    n.recv(2, vote_req(1, voter_dir="d1"))
    r = n.reply(m.VoteResponse)
    assert (r.error_code, r.vote_granted) == (m.INVALID_VOTER_KEY, False)
    n.tick(100 * CFG.election_timeout_ms)
    assert n.state.name == UNATTACHED


def test_prevote_changes_neither_epoch_nor_vote():
    n = follower(epoch=3, leader=2)
    n.recv(3, vote_req(3, cand=3, last_epoch=0, pre=True))
    r = n.reply(m.VoteResponse)
    assert r.vote_granted and r.pre_vote and r.leader_epoch == 3
    assert (n.state.name, n.state.epoch, n.state.voted_id) == (FOLLOWER, 3, -1)
    assert n.store.state == ElectionState(3, 2, -1)


def test_prevote_from_a_newer_epoch_moves_the_voter_there():
    """Its sender stood in that epoch; left behind, it would only ever hear older epochs."""
    n = follower(epoch=3, leader=2)
    n.recv(3, vote_req(5, cand=3, last_epoch=3, pre=True))
    r = n.reply(m.VoteResponse)
    assert (n.state.name, n.state.epoch, n.state.voted_id) == (UNATTACHED, 5, -1)
    assert r.leader_epoch == 5 and r.vote_granted


def test_follower_refuses_prevotes_once_it_has_fetched():
    n = follower(epoch=1, leader=2)
    n.recv(3, vote_req(1, cand=3, pre=True))
    r = n.reply(m.VoteResponse)
    assert r.vote_granted and r.leader_id == -1  # no successful fetch yet: granted, leader not told
    n.tick()
    f = n.reply(m.FetchRequest, 2)
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 1, 0))
    n.recv(3, vote_req(1, cand=3, pre=True))
    r = n.reply(m.VoteResponse)
    assert not r.vote_granted and r.leader_id == 2


def test_leader_grants_no_vote():
    n = elect(Node())
    n.recv(3, vote_req(1, cand=3, pre=True))
    assert not n.reply(m.VoteResponse).vote_granted


def test_deliberate_bug_grants_a_vote_to_a_shorter_log():
    """The switch tests/test_sim.py uses to prove the simulator catches an unsafe vote."""
    n = Node(log=fill(MemoryRaftLog(), 1, 1, 2), knobs=Knobs(grant_vote_to_shorter_log=True))
    n.recv(2, vote_req(5, last_epoch=1, last_offset=1))
    assert n.reply(m.VoteResponse).vote_granted


# -- replication -----------------------------------------------------------------------------------


def fetch(n, src, offset, last_epoch, corr=1, wait=0, directory=None):
    n.recv(src, m.FetchRequest(corr, src, directory or f"d{src}", n.state.epoch, offset, last_epoch, 0, wait))
    return n.reply(m.FetchResponse, src)


def test_high_watermark_is_the_majority_durable_end_and_waits_for_the_leaders_own_epoch():
    n = Node(log=fill(MemoryRaftLog(), 1, 1, 1, 1, 1))  # offsets 0-4 from an older leader
    n.store.write(ElectionState(1))
    n = Node(log=n.log, store=n.store)
    elect(n)  # epoch 2: LeaderChange at offset 5
    n.tick(CFG.append_linger_ms)
    assert n.state.epoch_start_offset == 5 and n.log.durable_end_offset() == 6
    fetch(n, 2, 5, 1)  # node 2 has the old entries only: they cannot commit alone
    assert n.raft.high_watermark == 0 and n.state.high_watermark == -1
    fetch(n, 2, 6, 2)
    assert n.raft.high_watermark == 6
    assert [r.offset for r in n.committed] == list(range(6))


def test_commit_latency_is_the_leaders_append_to_its_commit_over_the_last_minute():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)
    fetch(n, 2, n.log.end_offset(), n.state.epoch)  # the LeaderChange record commits (the node's own: not timed)
    assert all(x != x for x in n.raft.commit_latency(n.now))  # NaN, as Kafka's without a sample
    n.raft.append(["a"], n.now)
    n.tick(CFG.append_linger_ms + 20)
    fetch(n, 2, n.log.end_offset(), n.state.epoch)  # node 2 has it: committed 20 ms after the linger
    avg, top = n.raft.commit_latency(n.now)
    assert top == CFG.append_linger_ms + 20 and 0 <= avg <= top
    later = n.now + 60_001
    assert all(x != x for x in n.raft.commit_latency(later))  # NaN: nothing committed in the last minute


def test_deliberate_bug_commits_an_older_epoch_alone():
    log = fill(MemoryRaftLog(), 1, 1, 1)
    n = Node(log=log, knobs=Knobs(commit_without_own_epoch=True))
    elect(n)
    n.tick(CFG.append_linger_ms)
    fetch(n, 2, 3, 1)
    assert n.raft.high_watermark == 3


def test_high_watermark_counts_only_the_leaders_flushed_end():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)  # LeaderChange flushed: end offset 1
    fetch(n, 2, 1, 1)
    assert n.raft.high_watermark == 1
    n.raft.append(["a", "b"], n.now)  # not flushed until the linger expires
    resp = fetch(n, 2, 1, 1, corr=2)
    assert [r.value for r in resp.records] == ["a", "b"]
    fetch(n, 2, 3, 1, corr=3)  # node 2 holds them durably, the leader does not
    assert n.raft.high_watermark == 1
    n.tick(CFG.append_linger_ms)
    assert n.raft.high_watermark == 3


# -- asynchronous flushes: the node asks, the driver flushes off the loop, the node is told ------------


def test_leader_counts_its_end_only_once_the_flush_it_asked_for_completes():
    n = elect(Node(auto_flush=False))
    n.tick(CFG.append_linger_ms)  # the LeaderChange: a flush is asked for, not done
    assert n.flush_asked and n.log.durable_end_offset() == 0
    job = n.log.begin_flush()  # the driver begins it (end offset 1)...
    n.raft.append(["a"], n.now)  # ...the loop appends meanwhile
    fetch(n, 2, 1, 1)
    assert n.raft.high_watermark == 0  # node 2 holds offset 0 durably, the leader not yet
    n.flush(job)
    assert n.log.durable_end_offset() == 1 and n.raft.high_watermark == 1  # not past the job's end
    n.tick(CFG.append_linger_ms)
    assert n.flush_asked
    n.flush()
    fetch(n, 2, 2, 1, corr=2)
    assert n.raft.high_watermark == 2


def test_a_voter_fetches_again_only_once_its_log_is_durable():
    n = follower(epoch=1, leader=2)
    n.auto_flush = False
    n.tick()
    f = n.reply(m.FetchRequest, 2)
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 1, 0, [Record(0, 1, "a"), Record(1, 1, "b")]))
    assert n.flush_asked and n.log.end_offset() == 2 and n.log.durable_end_offset() == 0
    n.tick(CFG.retry_backoff_ms)
    assert not n.take(m.FetchRequest)  # its fetch offset would count records not durable
    n.flush()
    ((_, f),) = n.take(m.FetchRequest)
    assert f.fetch_offset == 2


def test_deliberate_bug_fetches_with_the_unflushed_end():
    n = follower(epoch=1, leader=2)
    n.raft.knobs.report_unflushed_fetch_offset = True
    n.auto_flush = False
    n.tick()
    f = n.reply(m.FetchRequest, 2)
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 1, 0, [Record(0, 1, "a")]))
    assert n.reply(m.FetchRequest, 2).fetch_offset == 1 and n.log.durable_end_offset() == 0


def test_an_observer_fetches_on_while_its_flush_runs():
    n = Node(node_id=9, auto_flush=False)  # not a voter: it asks a voter who leads
    ((dest, f),) = n.take(m.FetchRequest)
    n.recv(dest, m.FetchResponse(f.correlation_id, m.NONE, dest, 1, 0))
    assert n.state.name == FOLLOWER and n.state.leader_id == dest
    n.tick()
    f = n.reply(m.FetchRequest, dest)
    n.recv(dest, m.FetchResponse(f.correlation_id, m.NONE, dest, 1, 0, [Record(0, 1, "a")]))
    assert n.flush_asked and n.log.durable_end_offset() == 0
    assert n.reply(m.FetchRequest, dest).fetch_offset == 1


def test_memory_log_flush_is_durable_only_up_to_its_start_and_a_truncation_meanwhile():
    log = MemoryRaftLog()
    log.append(1, list(range(10)))
    job = log.begin_flush()
    log.append(1, [10, 11])  # written after the flush began: not covered
    assert log.end_flush(job) == 10
    job = log.begin_flush()  # covers up to 12
    log.truncate_to(5)  # a follower's divergence meanwhile
    log.append(2, ["x"] * 9)  # offsets 5-13 written again: new writes
    assert log.end_flush(job) == 5
    log.crash()
    assert log.end_offset() == 5


def test_observers_do_not_count_for_the_high_watermark():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)
    fetch(n, 9, 1, 1)
    assert n.raft.high_watermark == 0
    fetch(n, 2, 1, 1, directory="not-d2")  # a voter id with the wrong directory: an observer
    assert n.raft.high_watermark == 0


def test_leader_answers_a_diverging_epoch():
    log = MemoryRaftLog()
    fill(log, 1, 1, 1, 1, 1)
    n = Node(log=log)
    n.store.write(ElectionState(2))
    n = Node(log=log, store=n.store)
    elect(n)  # epoch 3 from offset 5
    resp = fetch(n, 2, 8, 2)  # node 2 wrote epoch 2 entries we never had
    assert (resp.diverging_epoch, resp.diverging_end_offset) == (1, 5) and not resp.records
    resp = fetch(n, 2, 7, 1, corr=2)  # epoch 1 ends at 5 here
    assert (resp.diverging_epoch, resp.diverging_end_offset) == (1, 5)
    resp = fetch(n, 2, 5, 1, corr=3)
    assert resp.diverging_epoch == -1 and [r.epoch for r in resp.records] == [3]


def test_follower_truncates_to_the_diverging_epoch_then_appends_and_flushes():
    log = fill(MemoryRaftLog(), 1, 1, 1, 1, 1, 2, 2, 2)
    n = follower(epoch=3, leader=2, log=log)
    n.tick()
    f = n.reply(m.FetchRequest, 2)
    assert (f.fetch_offset, f.last_fetched_epoch) == (8, 2)
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 3, 5, diverging_epoch=1, diverging_end_offset=5))
    assert n.log.end_offset() == 5
    f = n.reply(m.FetchRequest, 2)
    assert (f.fetch_offset, f.last_fetched_epoch) == (5, 1)
    recs = [Record(5, 3, None), Record(6, 3, "x")]
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 3, 9, recs))
    assert n.log.end_offset() == 7 and n.log.durable_end_offset() == 7
    assert n.raft.high_watermark == 7  # capped at our log end
    assert [r.offset for r in n.committed] == list(range(7))


def test_follower_high_watermark_never_goes_back():
    n = follower(epoch=1, leader=2)
    n.tick()
    f = n.reply(m.FetchRequest, 2)
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 1, 2, [Record(0, 1, None), Record(1, 1, "a")]))
    assert n.raft.high_watermark == 2
    f = n.reply(m.FetchRequest, 2)
    n.recv(2, m.FetchResponse(f.correlation_id, m.NONE, 2, 1, 1))
    assert n.raft.high_watermark == 2 and len(n.committed) == 2


def test_stale_and_duplicated_responses_are_ignored():
    n = follower(epoch=1, leader=2)
    n.tick()
    f = n.reply(m.FetchRequest, 2)
    resp = m.FetchResponse(f.correlation_id, m.NONE, 2, 1, 1, [Record(0, 1, None)])
    n.recv(2, resp)
    n.recv(2, resp)  # duplicate: not appended twice
    assert n.log.end_offset() == 1
    n.recv(2, m.FetchResponse(999, m.NONE, 2, 1, 1, [Record(1, 1, "x")]))
    assert n.log.end_offset() == 1


def test_fetch_to_a_non_leader_or_with_a_wrong_epoch():
    n = follower(epoch=2, leader=2)
    n.recv(3, m.FetchRequest(1, 3, "d3", 2, 0, 0))
    r = n.reply(m.FetchResponse, 3)
    assert (r.error_code, r.leader_id, r.leader_epoch) == (m.NOT_LEADER_OR_FOLLOWER, 2, 2)
    n.recv(3, m.FetchRequest(2, 3, "d3", 1, 0, 0))
    assert n.reply(m.FetchResponse, 3).error_code == m.FENCED_LEADER_EPOCH
    n.recv(3, m.FetchRequest(3, 3, "d3", 5, 0, 0))
    assert n.reply(m.FetchResponse, 3).error_code == m.UNKNOWN_LEADER_EPOCH


def test_leader_parks_an_empty_fetch_until_new_data_or_max_wait():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)
    fetch(n, 2, 1, 1)  # learns the current high watermark
    n.recv(2, m.FetchRequest(5, 2, "d2", 1, 1, 1, 0, 500))
    assert not n.take(m.FetchResponse)
    n.raft.append(["a"], n.now)
    n.tick(CFG.append_linger_ms)
    assert [r.value for r in n.reply(m.FetchResponse, 2).records] == ["a"]
    n.recv(3, m.FetchRequest(6, 3, "d3", 1, 2, 1, 0, 500))
    n.recv(3, m.FetchRequest(7, 3, "d3", 1, 2, 1, 0, 500))
    n.take(m.FetchResponse)
    n.tick(500)
    assert n.take(m.FetchResponse, 3)


def test_describe_quorum_is_the_leaders_view_and_refused_elsewhere():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)
    n.recv(2, m.FetchRequest(5, 2, "d2", 1, 1, 1, 0, 0))
    n.recv(7, m.FetchRequest(6, 7, "d7", 1, 0, 0, 0, 0))
    d = n.raft.describe_quorum()
    assert (d.error_code, d.leader_id, d.leader_epoch, d.high_watermark) == (m.NONE, 1, 1, 1)
    assert [(r.replica_id, r.replica_directory_id, r.log_end_offset) for r in d.current_voters] == [
        (1, "d1", 1),
        (2, "d2", 1),
        (3, "d3", -1),
    ]
    assert [(r.replica_id, r.log_end_offset) for r in d.observers] == [(7, 0)]
    f = follower().raft.describe_quorum()
    assert (f.error_code, f.leader_id, f.leader_epoch) == (m.NOT_LEADER_OR_FOLLOWER, 2, 1)


def test_append_on_a_non_leader_is_refused():
    n = Node()
    with pytest.raises(KafkaError) as e:
        n.raft.append(["x"], 0)
    assert e.value.code.name == "not_leader_or_follower"


# -- timeouts, resignation, restart ----------------------------------------------------------------


def test_follower_fetch_timeout_starts_a_prevote():
    n = follower(epoch=1)
    n.timeout()
    assert (n.state.name, n.state.epoch, n.state.leader_id) == (PROSPECTIVE, 1, 2)


def test_leader_without_fetches_from_a_majority_resigns():
    n = elect(Node())
    n.timeout()  # nobody fetched within 1.5 x fetch timeout
    assert n.state.name == RESIGNED


def test_leader_with_fetches_from_a_majority_stays():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)
    fetch(n, 2, 0, 0)
    n.timeout()
    assert n.state.name == LEADER


def test_graceful_resign_sends_end_quorum_epoch_with_successors_by_progress():
    n = elect(Node())
    n.tick(CFG.append_linger_ms)
    fetch(n, 3, 1, 1)
    n.take(m.BeginQuorumEpochRequest)
    n._take(n.raft.resign(n.now))
    assert n.state.name == RESIGNED
    reqs = n.take(m.EndQuorumEpochRequest)
    assert {d for d, _ in reqs} == {2, 3}
    assert reqs[0][1].preferred_candidates == [3, 2]


def test_a_resigned_lone_voter_never_elects_itself_again():
    """Graceful shutdown of a one-voter quorum: its election deadline is "now", so before
    ``shutting_down`` the first input after resign (the flush it asks for) elected it again, and
    the new leader's controller wrote to the metadata log its driver was closing (kesque serve
    stopped with SIGINT: OSError EBADF from the NoOp timer)."""
    n = Node(voters={1: "d1"})
    n.tick()
    assert (n.state.name, n.state.epoch) == (LEADER, 1)
    n._take(n.raft.resign(n.now))  # the flush resign asks for is done at once (auto_flush)
    assert (n.state.name, n.state.epoch) == (RESIGNED, 1)
    assert n.raft.next_deadline() >= 1 << 62  # no timer to run
    n.tick(10 * CFG.election_timeout_ms)
    n.flush()
    assert (n.state.name, n.state.epoch) == (RESIGNED, 1)
    with pytest.raises(KafkaError):
        n.raft.append(["after"], n.now)


def test_a_stopping_leader_retries_end_quorum_epoch_but_stands_for_no_election():
    n = elect(Node())
    n._take(n.raft.resign(n.now))
    assert {d for d, _ in n.take(m.EndQuorumEpochRequest)} == {2, 3}
    n.tick(CFG.request_timeout_ms)  # unanswered: asked again, after the request timeout
    assert {d for d, _ in n.take(m.EndQuorumEpochRequest)} == {2, 3}
    n.tick(10 * CFG.election_timeout_ms)
    assert n.state.name == RESIGNED and not n.take(m.VoteRequest)
    # a successor's election is answered (the vote granted: it does not stand itself)
    n.recv(2, vote_req(2, cand=2, last_epoch=1, last_offset=n.log.end_offset()))
    assert n.reply(m.VoteResponse).vote_granted


def test_end_quorum_epoch_lets_the_first_successor_run_at_once():
    n = follower(epoch=1, leader=2)
    n.recv(2, m.EndQuorumEpochRequest(1, 2, 1, [1, 3]))
    assert n.reply(m.EndQuorumEpochResponse).error_code == m.NONE
    assert (n.state.name, n.state.epoch, n.state.leader_id) == (PROSPECTIVE, 1, -1)
    assert {d for d, r in n.take(m.VoteRequest) if r.pre_vote} == {2, 3}
    n = follower(epoch=1, leader=2)
    n.recv(2, m.EndQuorumEpochRequest(1, 2, 1, [3, 1]))
    assert (n.state.name, n.state.deadline - n.now) == (UNATTACHED, 2 * CFG.retry_backoff_ms)


def test_restart_after_leading_is_resigned_in_that_epoch():
    n = elect(Node())
    again = Node(log=n.log, store=n.store)
    assert (again.state.name, again.state.epoch) == (RESIGNED, 1)
    again.timeout()
    assert (again.state.name, again.state.epoch) == (PROSPECTIVE, 1)


def test_restart_keeps_the_vote():
    n = Node()
    n.recv(2, vote_req(1))
    again = Node(log=n.log, store=n.store)
    assert (again.state.name, again.state.epoch, again.state.voted_id) == (UNATTACHED, 1, 2)
    again.recv(3, vote_req(1, cand=3))
    assert not again.reply(m.VoteResponse).vote_granted


def test_restart_with_a_log_ahead_of_the_quorum_state_takes_the_logs_epoch():
    n = Node(log=fill(MemoryRaftLog(), 1, 4))
    assert (n.state.name, n.state.epoch) == (UNATTACHED, 4)


# -- the transition table and the stores -----------------------------------------------------------


def test_transition_table_refuses_illegal_moves():
    lead = LeaderState(LEADER, 3, 0, leader_id=1, voted_id=1)
    with pytest.raises(IllegalTransition):
        check_transition(lead, UnattachedState(UNATTACHED, 3, 0), True)  # same epoch
    with pytest.raises(IllegalTransition):
        check_transition(UnattachedState(UNATTACHED, 3, 0), UnattachedState(UNATTACHED, 2, 0), True)
    with pytest.raises(IllegalTransition):
        check_transition(
            UnattachedState(UNATTACHED, 3, 0, voted_id=1), UnattachedState(UNATTACHED, 3, 0, voted_id=2), True
        )
    with pytest.raises(IllegalTransition):
        check_transition(None, lead, False)  # observers never lead


def test_quorum_state_json_uses_kafkas_fields():
    import json

    es = ElectionState(5, 2, 2, "dir")
    d = json.loads(es.to_json())
    assert d["leaderEpoch"] == 5 and d["leaderId"] == 2 and d["votedId"] == 2 and d["data_version"] == 1
    assert ElectionState.from_json(es.to_json()) == es


def test_memory_log_crash_loses_the_unflushed_tail_and_a_torn_tail_keeps_a_prefix():
    log = fill(MemoryRaftLog(), 1, 1)
    log.append(2, ["a", "b", "c"])
    log.crash()
    assert log.end_offset() == 2 and log.last_fetched_epoch() == 1
    log.append(2, ["a", "b", "c"])
    log.crash(keep_unflushed=2)
    assert log.end_offset() == 4 and log.durable_end_offset() == 4


def test_leader_epoch_cache_end_offsets():
    log = fill(MemoryRaftLog(), 1, 1, 3, 3, 3, 6)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 5)
    assert log.end_offset_for_epoch(7) == (6, 6)
    assert log.end_offset_for_epoch(0) == (0, 0)
    log.truncate_to(3)
    assert log.end_offset_for_epoch(6) == (3, 3)


# -- learning about epochs and leaders ---------------------------------------------------------------


def test_observer_finds_the_leader_through_any_voter():
    n = Node(node_id=9)
    ((dest, f),) = n.take(m.FetchRequest)
    n.recv(dest, m.FetchResponse(f.correlation_id, m.FENCED_LEADER_EPOCH, 2, 4))
    assert (n.state.name, n.state.epoch, n.state.leader_id) == (FOLLOWER, 4, 2)
    n.tick()
    assert n.take(m.FetchRequest, 2)


def test_leader_steps_down_on_a_newer_epoch():
    n = elect(Node())
    n.recv(3, vote_req(2, cand=3, last_epoch=1, last_offset=1))
    assert (n.state.name, n.state.epoch) == (UNATTACHED, 2)
    assert n.reply(m.VoteResponse).vote_granted


def test_candidate_follows_a_leader_of_its_epoch():
    n = Node()
    n.timeout()
    pre = n.reply(m.VoteRequest, 2)
    n.recv(2, m.VoteResponse(pre.correlation_id, m.NONE, -1, 0, True, True))
    ((_, req),) = [(d, r) for d, r in n.take(m.VoteRequest, 3) if not r.pre_vote]
    n.recv(3, m.VoteResponse(req.correlation_id, m.NONE, 2, 1, False))  # 2 won epoch 1
    assert (n.state.name, n.state.epoch, n.state.leader_id, n.state.voted_id) == (FOLLOWER, 1, 2, 1)


def test_a_resigned_leader_names_no_leader():
    n = elect(Node())
    again = Node(log=n.log, store=n.store)
    again.recv(2, m.FetchRequest(1, 2, "d2", 1, 0, 0))
    r = again.reply(m.FetchResponse, 2)
    assert (r.error_code, r.leader_id, r.leader_epoch) == (m.NOT_LEADER_OR_FOLLOWER, -1, 1)


# -- snapshots (KIP-630) ---------------------------------------------------------------------------


def leader_with_snapshot():
    """Leader of epoch 1 with offsets 0-5 committed and a snapshot of 0-3."""
    n = elect(Node())
    n.raft.append(["a", "b", "c", "d", "e"], n.now)
    n.tick(CFG.append_linger_ms)
    fetch(n, 2, 6, 1)
    assert n.raft.high_watermark == 6
    sid = n.raft.snapshot(4, ["state"])
    assert (sid.end_offset, sid.epoch, n.log.log_start_offset()) == (4, 1, 4)
    return n, sid


def test_a_fetch_below_the_log_start_is_told_the_snapshot_id():
    n, sid = leader_with_snapshot()
    r = fetch(n, 3, 0, 0)
    assert (r.snapshot_end_offset, r.snapshot_epoch, r.records) == (4, 1, [])
    assert fetch(n, 3, 4, 1).records[0].offset == 4  # at the snapshot's end: records
    with pytest.raises(ValueError):
        n.raft.snapshot(7, ["past the applied offset"])


def test_a_fetcher_diverging_at_the_log_start_truncates_there_instead_of_loading_the_snapshot():
    """Kafka's validateOffsetAndEpoch: a fetcher whose epoch is at least the snapshot's and
    whose log diverges right at our log start is told the diverging epoch (it truncates to the
    log start), not the snapshot it may already start at; only an older epoch, or the log start
    with another epoch, or an offset below it needs the snapshot."""
    log = fill(MemoryRaftLog(), 1, 1, 1, 1)
    log.create_snapshot(4, ["state"])
    store = MemoryQuorumStateStore()
    store.write(ElectionState(2, 3))  # epoch 2 was led by node 3, whose tail we lack
    n = elect(Node(log=log, store=store))
    assert (n.state.epoch, n.log.log_start_offset()) == (3, 4)
    r = fetch(n, 2, 9, 2)  # node 2 holds epoch 2's records 4-8
    assert (r.diverging_epoch, r.diverging_end_offset, r.snapshot_end_offset) == (1, 4, -1)
    assert (fetch(n, 2, 4, 0).snapshot_end_offset, fetch(n, 2, 3, 1).snapshot_end_offset) == (4, 4)
    assert fetch(n, 2, 4, 2).snapshot_end_offset == 4  # at the start with another epoch


def test_fetch_snapshot_serves_chunks_and_refuses_unknown_ids_and_positions():
    n, sid = leader_with_snapshot()
    data = n.log.snapshot_bytes(sid)
    n.recv(3, m.FetchSnapshotRequest(9, 3, 1, 4, 1, 0, 10, "d3"))
    r = n.reply(m.FetchSnapshotResponse, 3)
    assert (r.error_code, r.size, r.position, r.unaligned_records) == (m.NONE, len(data), 0, data[:10])
    n.recv(3, m.FetchSnapshotRequest(10, 3, 1, 4, 2, 0, 10, "d3"))
    assert n.reply(m.FetchSnapshotResponse, 3).error_code == m.SNAPSHOT_NOT_FOUND
    n.recv(3, m.FetchSnapshotRequest(11, 3, 1, 4, 1, len(data) + 1, 10, "d3"))
    assert n.reply(m.FetchSnapshotResponse, 3).error_code == m.POSITION_OUT_OF_RANGE
    n.recv(3, m.FetchSnapshotRequest(12, 3, 0, 4, 1, 0, 10, "d3"))
    assert n.reply(m.FetchSnapshotResponse, 3).error_code == m.FENCED_LEADER_EPOCH


def test_a_follower_loads_the_snapshot_in_chunks_and_goes_on_from_its_end():
    leader, sid = leader_with_snapshot()
    data = leader.log.snapshot_bytes(sid)
    f = Node(node_id=2)
    f.recv(1, m.BeginQuorumEpochRequest(1, 1, 1, 2, "d2"))
    f.take(m.BeginQuorumEpochResponse)
    f.raft.config = QuorumConfig(fetch_snapshot_max_bytes=16)
    req = f.reply(m.FetchRequest, 1)
    out = f.recv(1, m.FetchResponse(req.correlation_id, m.NONE, 1, 1, 6, snapshot_end_offset=4, snapshot_epoch=1))
    chunks = 0
    while True:
        ((_, fs),) = f.take(m.FetchSnapshotRequest)
        assert (fs.snapshot_end_offset, fs.snapshot_epoch, fs.position, fs.max_bytes) == (4, 1, 16 * chunks, 16)
        leader.recv(2, fs)
        out = f.recv(1, leader.reply(m.FetchSnapshotResponse, 2))
        chunks += 1
        if out.snapshot:
            break
    assert chunks == -(-len(data) // 16) and out.snapshot == (sid, ["state"])
    assert (f.log.log_start_offset(), f.log.end_offset(), f.raft.applied) == (4, 4, 4)
    req = f.reply(m.FetchRequest, 1)
    assert (req.fetch_offset, req.last_fetched_epoch) == (4, 1)
    leader.recv(2, req)
    out = f.recv(1, leader.reply(m.FetchResponse, 2))
    assert [r.offset for r in out.committed] == [4, 5]
