"""The file-backed raft log (``__cluster_metadata-0``) and ``quorum-state`` store: Kafka's
layout and bytes, the in-memory log's contract, and crash consistency."""

from __future__ import annotations

import os
import random

import pytest

from kesque.raft import ElectionState, MemoryRaftLog, QuorumConfig, RaftNode, Record, batches
from kesque.raft.file_log import FileQuorumStateStore, FileRaftLog
from kesque.raft.log import NO_TRUNCATION, LeaderChange
from kesque.records import batch as rb
from kesque.records.records import iter_records

DIR = "b6h5d0ZkRmWkQ7cDTtSyTg"

# written by Kafka 4.4.0's FileQuorumStateStore.writeElectionState (kafka-raft-4.4.0.jar), one
# line each, no newline: (ElectionState, KRaftVersion) -> file content
KAFKA_QUORUM_STATE = [
    (
        ElectionState(5, -1, 2, DIR),
        '{"leaderId":-1,"leaderEpoch":5,"votedId":2,"votedDirectoryId":"b6h5d0ZkRmWkQ7cDTtSyTg","data_version":1}',
    ),
    (
        ElectionState(6, 1, 1, DIR),
        '{"leaderId":1,"leaderEpoch":6,"votedId":1,"votedDirectoryId":"b6h5d0ZkRmWkQ7cDTtSyTg","data_version":1}',
    ),
    (
        ElectionState(7, 3),
        '{"leaderId":3,"leaderEpoch":7,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}',
    ),
    (
        ElectionState(8),
        '{"leaderId":-1,"leaderEpoch":8,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}',
    ),
    (
        ElectionState(9, -1, 2),
        '{"leaderId":-1,"leaderEpoch":9,"votedId":2,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}',
    ),
]
KAFKA_QUORUM_STATE_V0 = [  # kraft.version 0 (static controller.quorum.voters), read only
    (
        ElectionState(5, -1, 2),
        '{"clusterId":"","leaderId":-1,"leaderEpoch":5,"votedId":2,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}',
    ),
    (
        ElectionState(7, 3),
        '{"clusterId":"","leaderId":3,"leaderEpoch":7,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}',
    ),
]


# -- quorum-state ------------------------------------------------------------------------------
@pytest.mark.parametrize("state,kafka", KAFKA_QUORUM_STATE)
def test_quorum_state_file_is_byte_for_byte_what_kafka_writes(tmp_path, state, kafka):
    store = FileQuorumStateStore(str(tmp_path))
    store.write(state)
    assert (tmp_path / "quorum-state").read_bytes() == kafka.encode()
    assert os.listdir(tmp_path) == ["quorum-state"]  # the .tmp was renamed
    assert store.read() == state


@pytest.mark.parametrize("state,kafka", KAFKA_QUORUM_STATE + KAFKA_QUORUM_STATE_V0)
def test_quorum_state_written_by_kafka_is_read(tmp_path, state, kafka):
    (tmp_path / "quorum-state").write_text(kafka)
    assert FileQuorumStateStore(str(tmp_path)).read() == state


def test_quorum_state_missing_is_none_and_unknown_versions_are_refused(tmp_path):
    store = FileQuorumStateStore(str(tmp_path))
    assert store.read() is None
    (tmp_path / "quorum-state.tmp").write_text("{torn")  # a crash before the rename
    assert store.read() is None
    (tmp_path / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":2}')
    with pytest.raises(ValueError, match=r"data_version \(2\) is not within the min \(0\) and max \(1\)"):
        store.read()
    (tmp_path / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":2}')
    with pytest.raises(ValueError, match="does not have data_version"):
        store.read()


# -- the log -----------------------------------------------------------------------------------
def v(i: int) -> bytes:
    return b"value-%d" % i


def fill(log) -> None:
    """Three epochs as a leader writes them (LeaderChange first), then a follower's append."""
    log.append(1, [LeaderChange(1, (1, 2, 3), (1, 2))])
    log.append(1, [v(1), v(2), v(3)])
    log.append(3, [LeaderChange(2, (1, 2, 3), (2, 3))])
    log.append(3, [v(4)])
    log.append_as_follower([Record(6, 4, LeaderChange(3, (1, 2, 3), (1, 3))), Record(7, 4, v(5)), Record(8, 4, v(6))])


def test_log_round_trip_in_kafkas_layout(tmp_path):
    log = FileRaftLog(str(tmp_path))
    fill(log)
    mem = MemoryRaftLog()
    fill(mem)
    assert log.read(0, 100) == mem.read(0, 100)
    log.flush()
    log.close()
    part = tmp_path / "__cluster_metadata-0"
    assert {"00000000000000000000.log", "00000000000000000000.index", "leader-epoch-checkpoint"} <= set(
        os.listdir(part)
    )
    assert (part / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 4\n4 6\n"
    # the segment is plain RecordBatch v2: LeaderChange is a control batch of its own, key (0, 2)
    data = (part / "00000000000000000000.log").read_bytes()
    heads = [h for _, h in rb.iter_headers(data)]
    assert [(h.base_offset, h.records_count, h.is_control, h.partition_leader_epoch) for h in heads] == [
        (0, 1, True, 1),
        (1, 3, False, 1),
        (4, 1, True, 3),
        (5, 1, False, 3),
        (6, 1, True, 4),
        (7, 2, False, 4),
    ]
    (key,) = [r.key for r in iter_records(data, 0, heads[0])]
    assert key == b"\x00\x00\x00\x02"
    again = FileRaftLog(str(tmp_path))
    assert again.read(0, 100) == mem.read(0, 100)
    assert again.read(2, 3) == mem.read(2, 3)
    assert (again.end_offset(), again.durable_end_offset(), again.last_fetched_epoch()) == (9, 9, 4)
    for e in range(6):
        assert again.end_offset_for_epoch(e) == mem.end_offset_for_epoch(e), e
    assert [again.epoch_at(o) for o in range(9)] == [mem.epoch_at(o) for o in range(9)]


def test_log_matches_the_memory_log_under_random_appends_truncations_and_reopens(tmp_path):
    rng = random.Random(7)
    path = str(tmp_path)
    log, mem = FileRaftLog(path, segment_bytes=300), MemoryRaftLog()
    epoch, n = 1, 0
    for step in range(200):
        op = rng.random()
        if op < 0.6:
            vals = [v(n + i) for i in range(rng.randint(1, 4))]
            n += len(vals)
            log.append(epoch, vals)
            mem.append(epoch, vals)
        elif op < 0.75:
            epoch += rng.randint(1, 2)
            log.append(epoch, [LeaderChange(1)])
            mem.append(epoch, [LeaderChange(1)])
        elif op < 0.85:
            to = rng.randint(0, mem.end_offset())
            log.truncate_to(to)
            mem.truncate_to(to)
            epoch = max(epoch, mem.last_fetched_epoch())
        else:
            log.flush()
            log.close()
            log = FileRaftLog(path, segment_bytes=300)
        assert log.end_offset() == mem.end_offset(), step
        assert log.last_fetched_epoch() == mem.last_fetched_epoch(), step
        for e in range(epoch + 2):
            assert log.end_offset_for_epoch(e) == mem.end_offset_for_epoch(e), (step, e)
    assert log.read(0, 10_000) == mem.read(0, 10_000)
    assert len([f for f in os.listdir(log.path) if f.endswith(".log")]) > 1  # it rolled


def test_flush_moves_the_durable_end_offset(tmp_path):
    log = FileRaftLog(str(tmp_path))
    log.append(1, [v(0), v(1)])
    assert (log.end_offset(), log.durable_end_offset()) == (2, 0)
    log.flush()
    assert log.durable_end_offset() == 2
    log.truncate_to(1)
    assert (log.end_offset(), log.durable_end_offset()) == (1, 1)


def test_a_flush_in_flight_covers_what_was_written_before_it_began(tmp_path):
    """begin_flush on the loop notes the end and duplicates the descriptors; the appends and
    segment rolls made while its fsyncs run (a worker thread in the server) are not counted."""
    log = FileRaftLog(str(tmp_path), segment_bytes=300)
    log.append(1, [v(i) for i in range(5)])
    job = log.begin_flush()
    assert job.end == 5
    for i in range(5, 40):  # several rolls while it is in flight
        log.append(1, [v(i)])
    assert len([f for f in os.listdir(log.path) if f.endswith(".log")]) > 2
    job.run()
    assert log.end_flush(job) == 5 and log.durable_end_offset() == 5
    job = log.begin_flush()
    job.run()
    assert log.end_flush(job) == 40


@pytest.mark.parametrize("cut", [3, 20])  # inside the first segment; deleting later ones
def test_a_truncation_while_a_flush_is_in_flight_is_not_reported_durable(tmp_path, cut):
    log = FileRaftLog(str(tmp_path), segment_bytes=300)
    for i in range(30):
        log.append(1, [v(i)])
    job = log.begin_flush()  # covers up to 30
    log.truncate_to(cut)  # a follower's divergence: segments may go
    log.append(2, [v(100 + i) for i in range(30)])  # written again past the cut: new writes
    job.run()  # its descriptors are duplicates: no EBADF
    assert log.end_flush(job) == cut
    job = log.begin_flush()
    job.run()
    assert log.end_flush(job) == cut + 30
    log.close()
    assert [r.value for r in FileRaftLog(str(tmp_path)).read(cut, 2)] == [v(100), v(101)]


@pytest.mark.parametrize("tear", ["cut", "garbage", "bad_crc"])
def test_a_torn_tail_is_truncated_on_open(tmp_path, tear):
    log = FileRaftLog(str(tmp_path))
    log.append(1, [LeaderChange(1)])
    log.append(1, [v(1), v(2)])
    log.flush()
    log.append(1, [v(3), v(4)])  # the batch the crash tears
    log.flush()
    seg = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    whole = len(data)
    last = list(rb.iter_headers(data))[-1][0]
    if tear == "cut":
        data = data[:-7]
    elif tear == "garbage":
        data += b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x01\x00garbage"
    else:
        data[-1] ^= 0xFF
    seg.write_bytes(bytes(data))
    again = FileRaftLog(str(tmp_path))
    want = 5 if tear == "garbage" else 3
    assert again.end_offset() == want
    assert [r.value for r in again.read(0, 10)][1:] == [v(i) for i in range(1, want)]
    assert seg.stat().st_size == (whole if tear == "garbage" else last)  # cut in the file too
    again.append(1, [v(9)])
    assert again.read(want, 1) == [Record(want, 1, v(9))]


def test_control_records_kesque_does_not_interpret_survive_verbatim(tmp_path):
    log = FileRaftLog(str(tmp_path))
    log.append(1, [batches.ControlRecord(6, b"\x00voters")])  # a KRaft Voters record
    log.close()
    assert FileRaftLog(str(tmp_path)).read(0, 1) == [Record(0, 1, batches.ControlRecord(6, b"\x00voters"))]


def flushing(node, out, now):
    """A driver's part: the flush a node asks for (begin, the fsyncs the server runs in a worker
    thread, end), then the node's answer to it. Returns the outputs in order."""
    outs = [out]
    if out.flush:
        job = node.log.begin_flush()
        job.run()
        node.log.end_flush(job)
        outs += flushing(node, node.flushed(now), now)
    return outs


def test_a_single_voter_quorum_runs_and_restarts_on_files(tmp_path):
    d = str(tmp_path)

    def start(now):
        return RaftNode(
            1, "d1", {1: "d1"}, FileRaftLog(d), FileQuorumStateStore(d), QuorumConfig(), random.Random(0), now
        )

    def tick(node, now):
        return [r for out in flushing(node, node.tick(now), now) for r in out.committed]

    node = start(0)
    committed = tick(node, node.next_deadline())
    assert node.is_leader()
    node.append([v(1), v(2)], 3000)
    while len(committed) < 3 and node.next_deadline() < 10_000:  # the linger, then the flush commits
        committed += tick(node, node.next_deadline())
    assert [r.value for r in committed] == [LeaderChange(1, (1,), (1,)), v(1), v(2)]
    node.log.close()
    again = start(5000)  # a restarted leader never leads its old epoch again
    assert (again.state.name, again.epoch) == ("Resigned", 1)
    assert again.log.read(0, 10) == committed
    assert (tmp_path / "quorum-state").read_text() == ElectionState(1, 1, 1, "d1").to_json()


# -- snapshots (KIP-630) -------------------------------------------------------------------------
def test_snapshot_file_in_kafkas_layout_moves_the_log_start(tmp_path):
    log = FileRaftLog(str(tmp_path), segment_bytes=200)
    fill(log)
    log.append(4, [v(i) for i in range(7, 30)])
    log.flush()
    sid = log.create_snapshot(20, [b"state-a", b"state-b"])
    assert (sid.end_offset, sid.epoch) == (20, 4)
    part = tmp_path / "__cluster_metadata-0"
    data = (part / "00000000000000000020-0000000004.checkpoint").read_bytes()
    heads = [h for _, h in rb.iter_headers(data)]
    assert [(h.base_offset, h.records_count, h.is_control, h.partition_leader_epoch) for h in heads] == [
        (0, 1, True, 4),
        (1, 2, False, 4),
        (3, 1, True, 4),
    ]
    keys = [next(iter_records(data[p : p + h.size], 0, h)).key for p, h in rb.iter_headers(data) if h.is_control]
    assert keys == [b"\x00\x00\x00\x03", b"\x00\x00\x00\x04"]  # SnapshotHeader, SnapshotFooter
    assert log.log_start_offset() == 20 and log.read(20, 1)[0].offset == 20
    assert min(int(f[:20]) for f in os.listdir(part) if f.endswith(".log")) <= 20 < log.end_offset()
    log.close()
    again = FileRaftLog(str(tmp_path), segment_bytes=200)
    assert (again.log_start_offset(), again.latest_snapshot()) == (20, sid)
    assert again.snapshot_values(sid) == [b"state-a", b"state-b"]
    assert again.epoch_at(19) == 4 and again.end_offset_for_epoch(4) == (4, again.end_offset())


def test_segments_below_the_snapshot_are_deleted(tmp_path):
    log = FileRaftLog(str(tmp_path), segment_bytes=200)
    log.append(1, [v(i) for i in range(40)])
    for i in range(40, 80):
        log.append(1, [v(i)])
    log.flush()
    part = tmp_path / "__cluster_metadata-0"
    before = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    log.create_snapshot(70, [b"s"])
    after = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    assert len(after) < len(before) and int(after[0][:20]) <= 70
    assert log.read(70, 100) == [Record(o, 1, v(o)) for o in range(70, 80)]


def test_installed_snapshot_replaces_the_log_and_partial_files_are_dropped(tmp_path):
    leader = FileRaftLog(str(tmp_path / "a"))
    leader.append(1, [v(i) for i in range(10)])
    leader.flush()
    sid = leader.create_snapshot(8, [b"x", b"y"])
    follower = FileRaftLog(str(tmp_path / "b"))
    follower.append(1, [v(0), v(1)])
    assert follower.install_snapshot(sid, leader.snapshot_bytes(sid)) == [b"x", b"y"]
    assert (follower.log_start_offset(), follower.end_offset(), follower.last_fetched_epoch()) == (8, 8, 1)
    follower.append_as_follower(leader.read(8, 2))
    (tmp_path / "b" / "__cluster_metadata-0" / "00000000000000000009-0000000001.checkpoint.part").write_bytes(b"torn")
    follower.flush()
    follower.close()
    again = FileRaftLog(str(tmp_path / "b"))
    assert again.latest_snapshot() == sid and again.read(8, 5) == leader.read(8, 5)
    assert not [f for f in os.listdir(again.path) if f.endswith(".part")]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_snapshot_not_ahead_of_the_log_leaves_it_consistent(tmp_path, kind):
    """A follower told to load the snapshot it already starts at (its tail is of an epoch the
    leader does not have) drops the tail: both logs then end at the snapshot, durable there, and
    the in-memory one reports the truncation to the simulator (the simulator found the in-memory
    log still durable to the dropped tail's end, past its own end)."""
    log = MemoryRaftLog() if kind == "memory" else FileRaftLog(str(tmp_path))
    log.append(1, [v(i) for i in range(10)])
    log.flush()
    sid = log.create_snapshot(6, [v(i) for i in range(6)])
    log.append(2, [v(i) for i in range(10, 20)])
    log.flush()
    assert log.durable_end_offset() == 20
    data = log.snapshot_bytes(sid)
    if kind == "memory":
        log.truncated_to = NO_TRUNCATION
    log.install_snapshot(sid, data)
    assert (log.log_start_offset(), log.end_offset(), log.durable_end_offset()) == (6, 6, 6)
    assert log.epoch_at(5) == 1 and log.last_fetched_epoch() == 1
    if kind == "memory":
        assert log.truncated_to == 6
    log.append_as_follower([Record(6, 3, v(6))])
    log.flush()
    assert log.durable_end_offset() == 7 and log.read(6, 5) == [Record(6, 3, v(6))]


def test_a_torn_or_headless_snapshot_is_refused():
    from kesque.raft import snapshot
    from kesque.raft.log import SnapshotId

    data = snapshot.encode(SnapshotId(5, 2), [b"a"], 0)
    assert snapshot.decode(data) == [b"a"]
    for bad in (data[:-3], data[len(data) // 2 :], b""):
        with pytest.raises(ValueError):
            snapshot.decode(bad)


# -- all together --------------------------------------------------------------------------------
def test_three_voters_on_files_talking_through_kios_wire_messages(tmp_path):
    """Three RaftNodes on FileRaftLog and FileQuorumStateStore whose every message goes through
    wire.to_wire, kio's encoder and decoder, and wire.from_wire at the latest version: they
    elect, commit, snapshot, and a node that was down catches up through FetchSnapshot."""
    import io
    import uuid

    from kio.serial import entity_reader, entity_writer

    from kesque.raft import messages as m
    from kesque.raft import wire
    from kesque.storage.checkpoint import uuid_to_kafka

    dirs = {i: uuid_to_kafka(uuid.UUID(int=i * 7919)) for i in (1, 2, 3)}
    latest = {api: vs[-1] for api, vs in wire.VERSIONS.items()}
    pre_votes: dict = {}
    now = [0]
    nodes: dict = {}

    def start(i):
        d = str(tmp_path / f"node{i}")
        nodes[i] = RaftNode(
            i,
            dirs[i],
            dirs,
            FileRaftLog(d, segment_bytes=2048),
            FileQuorumStateStore(d),
            QuorumConfig(fetch_snapshot_max_bytes=300),
            random.Random(i),
            now[0],
        )

    def over_the_wire(msg):
        api, _kind = wire.API[type(msg)]
        obj = wire.to_wire(msg, latest[api], cluster_id="MkU3OEVBNTcwNTJENDM2Qg")
        buf = io.BytesIO()
        entity_writer(type(obj))(buf, obj)
        back, _ = entity_reader(type(obj))(buf.getvalue(), 0)
        if isinstance(msg, m.VoteRequest):
            pre_votes[msg.correlation_id] = msg.pre_vote
        return wire.from_wire(back, msg.correlation_id, pre_vote=pre_votes.get(msg.correlation_id, False))

    def run(until_ms):
        budget = 20_000  # messages: a pair spinning at one instant fails the test
        while now[0] < until_ms:
            queue = [
                (i, d, msg)
                for i, n in nodes.items()
                for out in flushing(n, n.tick(now[0]), now[0])
                for d, msg in out.messages
            ]
            while queue:
                budget -= 1
                assert budget > 0, f"no progress past t={now[0]}ms"
                src, dst, msg = queue.pop(0)
                if dst in nodes:
                    n = nodes[dst]
                    queue += [
                        (dst, d, x)
                        for out in flushing(n, n.handle(src, over_the_wire(msg), now[0]), now[0])
                        for d, x in out.messages
                    ]
            now[0] = min([n.next_deadline() for n in nodes.values()] + [until_ms])

    for i in (1, 2, 3):
        start(i)
    run(5_000)
    (leader,) = [n for n in nodes.values() if n.is_leader()]
    down = next(i for i in nodes if i != leader.node_id)
    nodes.pop(down).log.close()
    for k in range(30):
        leader.append([v(k)], now[0])
        run(now[0] + 50)
    assert leader.high_watermark >= 31
    image = [b"image-%d" % k * 10 for k in range(30)]  # ~2 KB: several 300-byte chunks
    sid = leader.snapshot(leader.applied, image)
    assert leader.log.log_start_offset() == sid.end_offset
    start(down)
    run(now[0] + 5_000)
    back = nodes[down]
    assert back.log.latest_snapshot() == sid and back.log.snapshot_values(sid) == image
    assert back.high_watermark == leader.high_watermark and back.log.end_offset() == leader.log.end_offset()
    values = [r.value for r in leader.log.read(sid.end_offset, 100)]
    assert [r.value for r in back.log.read(sid.end_offset, 100)] == values
    assert (tmp_path / f"node{down}" / "__cluster_metadata-0" / snapshot_name(sid)).exists()


def snapshot_name(sid):
    from kesque.raft import snapshot

    return snapshot.file_name(sid)
