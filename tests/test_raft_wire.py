"""kesque.raft.wire: every raft message survives kio's encoder and decoder at every version
Kafka 4.4's controllers serve, with Kafka's nesting around the metadata partition."""

from __future__ import annotations

import io

import pytest
from kio.serial import entity_reader, entity_writer

from kesque.raft import Record, wire
from kesque.raft import messages as m
from kesque.raft.log import LeaderChange

D1, D2 = "b6h5d0ZkRmWkQ7cDTtSyTg", "Zm9vYmFyYmF6cXV4cXV1eA"


def through_kio(obj):
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    data = buf.getvalue()
    back, size = entity_reader(type(obj))(data, 0)
    assert size == len(data)
    return back


RECORDS = [Record(10, 3, LeaderChange(2, (1, 2, 3), (2, 3))), Record(11, 3, b"a"), Record(12, 3, b"bc")]
CASES = [  # (message, api, {version: fields that version cannot carry, reset to the value read})
    (
        m.VoteRequest(7, 4, 2, D2, 1, D1, 3, 120, False),
        "vote",
        {0: dict(replica_directory_id=None, voter_id=-1, voter_directory_id=None)},
    ),
    (m.VoteRequest(7, 4, 2, D2, 1, D1, 4, 120, True), "vote", None),  # a pre-vote: v2 only
    (m.VoteResponse(8, 0, -1, 4, True, True), "vote", None),
    (m.VoteResponse(8, int(m.FENCED_LEADER_EPOCH), 3, 5, False), "vote", {}),
    (m.BeginQuorumEpochRequest(9, 2, 5, 1, D1), "begin_quorum_epoch", {0: dict(voter_id=-1, voter_directory_id=None)}),
    (m.BeginQuorumEpochResponse(9, 0, 2, 5), "begin_quorum_epoch", {}),
    (m.EndQuorumEpochRequest(10, 2, 5, [3, 1]), "end_quorum_epoch", {}),
    (m.EndQuorumEpochResponse(10, int(m.NOT_LEADER_OR_FOLLOWER), -1, 6), "end_quorum_epoch", {}),
    (
        m.FetchRequest(11, 3, D2, 5, 130, 4, 0, 500),
        "fetch",
        {v: dict(replica_directory_id=None) for v in range(12, 17)},
    ),
    (m.FetchResponse(11, 0, 2, 5, 120, list(RECORDS)), "fetch", {}),
    (m.FetchResponse(11, 0, 2, 5, 120, diverging_epoch=3, diverging_end_offset=100), "fetch", {}),
    (m.FetchResponse(11, 0, 2, 5, 120, snapshot_end_offset=90, snapshot_epoch=3, log_start_offset=90), "fetch", {}),
    (
        m.FetchSnapshotRequest(12, 3, 5, 90, 3, 4096, 1 << 20, D2),
        "fetch_snapshot",
        {0: dict(replica_directory_id=None)},
    ),
    (m.FetchSnapshotResponse(12, 0, 2, 5, 90, 3, 10_000, 4096, b"\x00" * 64), "fetch_snapshot", {}),
]


def versions(api, per_version):
    vs = wire.VERSIONS[api]
    return [vs[-1]] if per_version is None else list(vs)


@pytest.mark.parametrize(
    "msg,version,lost",
    [
        pytest.param(msg, v, (per or {}).get(v, {}), id=f"{type(msg).__name__}-{i}-v{v}")
        for i, (msg, api, per) in enumerate(CASES)
        for v in versions(api, per)
    ],
)
def test_round_trip_through_kio(msg, version, lost):
    obj = wire.to_wire(msg, version, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", endpoints=(("CONTROLLER", "h", 9093),))
    back = wire.from_wire(through_kio(obj), msg.correlation_id, pre_vote=getattr(msg, "pre_vote", False))
    want = type(msg)(**{f: getattr(msg, f) for f in msg.__dataclass_fields__})
    for k, v in lost.items():
        setattr(want, k, v)
    assert back == want


def test_the_metadata_partition_is_named_by_topic_id_from_fetch_v13():
    old = wire.to_wire(m.FetchRequest(1, 3, None, 5, 0, 0), 12)
    new = wire.to_wire(m.FetchRequest(1, 3, None, 5, 0, 0), 18)
    assert old.topics[0].topic == "__cluster_metadata"
    assert str(new.topics[0].topic_id) == "00000000-0000-0000-0000-000000000001"  # AAAAAAAAAAAAAAAAAAAAAQ
    assert new.replica_state.replica_id == 3


def test_versions_kafka_does_not_serve_are_refused():
    with pytest.raises(wire.UnsupportedVersion, match=r"fetch v11 is not served \(versions 12-18\)"):
        wire.to_wire(m.FetchRequest(1, 3, None, 5, 0, 0), 11)
    with pytest.raises(wire.UnsupportedVersion):
        wire.to_wire(m.VoteRequest(1, 1, 1, None, 2, None, 0, 0), 3)


@pytest.mark.parametrize("version", list(wire.VERSIONS["describe_quorum"]))
def test_describe_quorum_answer_round_trip(version):
    voters = [m.ReplicaState(1, D1, 130, 1_000, 990), m.ReplicaState(2, D2, 120)]
    r = m.DescribeQuorumResponse(
        0, 1, 5, 125, voters, [m.ReplicaState(7, None, 90)], nodes=[(1, [("CONTROLLER", "localhost", 9093)])]
    )
    back = wire.describe_quorum_from_wire(through_kio(wire.describe_quorum_response(r, version)))
    if version < 2:
        r.nodes = []
        for x in r.current_voters + r.observers:
            x.replica_directory_id = None
    if version < 1:
        for x in r.current_voters + r.observers:
            x.last_fetch_timestamp = x.last_caught_up_timestamp = -1
    assert back == r


def test_describe_quorum_names_the_metadata_partition_only():
    from kio.schema.describe_quorum.v2 import request as dq

    ok = dq.DescribeQuorumRequest(
        topics=(dq.TopicData(topic_name="__cluster_metadata", partitions=(dq.PartitionData(partition_index=0),)),)
    )
    bad = dq.DescribeQuorumRequest(
        topics=(dq.TopicData(topic_name="other", partitions=(dq.PartitionData(partition_index=0),)),)
    )
    assert wire.is_metadata_partition(through_kio(ok)) and not wire.is_metadata_partition(bad)
