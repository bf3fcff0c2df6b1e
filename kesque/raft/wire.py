"""The raft dataclasses (:mod:`kesque.raft.messages`) to and from kio's wire messages.

Only the network edge uses this (kio is too slow for the simulator's loop). Each RPC carries
the one partition ``__cluster_metadata-0``; this module adds and strips Kafka's nesting: the
topic (by name, or by the metadata topic id in Fetch v13+), the cluster id, the endpoints and
the replica state of Fetch v15+. ``correlation_id`` is the request header's, passed beside the
body. The versions are those Kafka 4.4's controllers serve (``VERSIONS``); Fetch below v12 has
no last fetched epoch, so a raft replica cannot use it.

``to_wire(msg, version, **extra)`` gives the kio object; ``from_wire(obj, correlation_id)``
the dataclass. VoteResponse carries no pre-vote flag on the wire: pass the request's.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import uuid
from functools import cache

from kio.schema.errors import ErrorCode

from ..storage.checkpoint import uuid_from_kafka, uuid_to_kafka
from . import batches
from . import messages as m

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ"
ZERO_UUID = uuid.UUID(int=0)

# api: (module, versions served)
VERSIONS = {
    "vote": range(0, 3),
    "begin_quorum_epoch": range(0, 2),
    "end_quorum_epoch": range(0, 2),
    "fetch": range(12, 19),
    "fetch_snapshot": range(0, 2),
    "describe_quorum": range(0, 3),
}
API = {
    m.VoteRequest: ("vote", "request"),
    m.VoteResponse: ("vote", "response"),
    m.BeginQuorumEpochRequest: ("begin_quorum_epoch", "request"),
    m.BeginQuorumEpochResponse: ("begin_quorum_epoch", "response"),
    m.EndQuorumEpochRequest: ("end_quorum_epoch", "request"),
    m.EndQuorumEpochResponse: ("end_quorum_epoch", "response"),
    m.FetchRequest: ("fetch", "request"),
    m.FetchResponse: ("fetch", "response"),
    m.FetchSnapshotRequest: ("fetch_snapshot", "request"),
    m.FetchSnapshotResponse: ("fetch_snapshot", "response"),
}


class UnsupportedVersion(ValueError):
    pass


@cache  # import_module and its f-string on every raft message cost 2% of a simulated run
def _module(api: str, version: int, kind: str):
    if version not in VERSIONS[api]:
        raise UnsupportedVersion(
            f"{api} v{version} is not served (versions {VERSIONS[api].start}-{VERSIONS[api].stop - 1})"
        )
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def _new(cls, **kw):
    """``cls`` from the fields of ``kw`` it has (one description serves every version)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in kw:
            v = kw[f.name]
            if f.metadata.get("kafka_type") == "timedelta_i32" and isinstance(v, int):
                v = datetime.timedelta(milliseconds=v)
            out[f.name] = v
    return cls(**out)


def _uuid(directory_id: str | None) -> uuid.UUID:
    return ZERO_UUID if directory_id is None else uuid_from_kafka(directory_id)


def _dir(u) -> str | None:
    return None if u is None or u == ZERO_UUID else uuid_to_kafka(u)


def _one(obj, topics: str = "topics", partitions: str = "partitions"):
    """The single partition of a single topic (Kafka's raft handles no other shape)."""
    ts = getattr(obj, topics)
    if len(ts) != 1 or len(getattr(ts[0], partitions)) != 1:
        raise ValueError(f"expected one topic with one partition, got {len(ts)} topics")
    return getattr(ts[0], partitions)[0]


# -- to the wire ---------------------------------------------------------------------------------
def to_wire(msg, version: int, *, cluster_id: str | None = None, endpoints: tuple = (), timestamp: int = 0):
    """The kio body of ``msg`` at ``version``. ``endpoints``: (name, host, port) of the leader
    (BeginQuorumEpoch/EndQuorumEpoch v1). ``timestamp``: of the batches built for records."""
    api, kind = API[type(msg)]
    mod = _module(api, version, kind)
    return _TO[type(msg)](msg, mod, cluster_id=cluster_id, endpoints=endpoints, timestamp=timestamp)


def _vote_req(r: m.VoteRequest, mod, cluster_id, **_):
    part = _new(
        mod.PartitionData,
        partition_index=0,
        replica_epoch=r.replica_epoch,
        candidate_epoch=r.replica_epoch,
        replica_id=r.replica_id,
        candidate_id=r.replica_id,
        replica_directory_id=_uuid(r.replica_directory_id),
        candidate_directory_id=_uuid(r.replica_directory_id),
        voter_directory_id=_uuid(r.voter_directory_id),
        last_offset_epoch=r.last_offset_epoch,
        last_offset=r.last_offset,
        pre_vote=r.pre_vote,
    )
    return _new(
        mod.VoteRequest,
        cluster_id=cluster_id,
        voter_id=r.voter_id,
        topics=(_new(mod.TopicData, topic_name=METADATA_TOPIC, partitions=(part,)),),
    )


def _leader_resp(cls_name: str):
    def build(r, mod, **_):
        part = _new(
            mod.PartitionData,
            partition_index=0,
            error_code=ErrorCode(r.error_code),
            leader_id=r.leader_id,
            leader_epoch=r.leader_epoch,
            vote_granted=getattr(r, "vote_granted", False),
        )
        return _new(
            getattr(mod, cls_name),
            error_code=ErrorCode.none,
            topics=(_new(mod.TopicData, topic_name=METADATA_TOPIC, partitions=(part,)),),
        )

    return build


def _leader_endpoints(mod, endpoints):
    if not hasattr(mod, "LeaderEndpoint"):
        return ()
    return tuple(_new(mod.LeaderEndpoint, name=n, host=h, port=p) for n, h, p in endpoints)


def _begin_req(r: m.BeginQuorumEpochRequest, mod, cluster_id, endpoints, **_):
    part = _new(
        mod.PartitionData,
        partition_index=0,
        voter_directory_id=_uuid(r.voter_directory_id),
        leader_id=r.leader_id,
        leader_epoch=r.leader_epoch,
    )
    return _new(
        mod.BeginQuorumEpochRequest,
        cluster_id=cluster_id,
        voter_id=r.voter_id,
        topics=(_new(mod.TopicData, topic_name=METADATA_TOPIC, partitions=(part,)),),
        leader_endpoints=_leader_endpoints(mod, endpoints),
    )


def _end_req(r: m.EndQuorumEpochRequest, mod, cluster_id, endpoints, **_):
    names = {f.name for f in dataclasses.fields(mod.PartitionData)}
    if "preferred_candidates" in names:  # v1: replica keys (directory ids not known here)
        cands = {
            "preferred_candidates": tuple(
                _new(mod.ReplicaInfo, candidate_id=c, candidate_directory_id=ZERO_UUID) for c in r.preferred_candidates
            )
        }
    else:
        cands = {"preferred_successors": tuple(r.preferred_candidates)}
    part = _new(mod.PartitionData, partition_index=0, leader_id=r.leader_id, leader_epoch=r.leader_epoch, **cands)
    return _new(
        mod.EndQuorumEpochRequest,
        cluster_id=cluster_id,
        topics=(_new(mod.TopicData, topic_name=METADATA_TOPIC, partitions=(part,)),),
        leader_endpoints=_leader_endpoints(mod, endpoints),
    )


def _fetch_req(r: m.FetchRequest, mod, cluster_id, **_):
    part = _new(
        mod.FetchPartition,
        partition=0,
        current_leader_epoch=r.current_leader_epoch,
        fetch_offset=r.fetch_offset,
        last_fetched_epoch=r.last_fetched_epoch,
        log_start_offset=r.log_start_offset,
        partition_max_bytes=0x7FFFFFFF,
        replica_directory_id=_uuid(r.replica_directory_id),
    )
    topic = _new(mod.FetchTopic, topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=(part,))
    kw = {}
    if hasattr(mod, "ReplicaState"):
        kw["replica_state"] = mod.ReplicaState(replica_id=r.replica_id, replica_epoch=-1)
    return _new(
        mod.FetchRequest,
        cluster_id=cluster_id,
        replica_id=r.replica_id,
        max_wait=r.max_wait_ms,
        min_bytes=0,
        max_bytes=0x7FFFFFFF,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
        **kw,
    )


def _fetch_resp(r: m.FetchResponse, mod, timestamp, **_):
    part = _new(
        mod.PartitionData,
        partition_index=0,
        error_code=ErrorCode(r.error_code),
        high_watermark=r.high_watermark,
        last_stable_offset=-1,
        log_start_offset=r.log_start_offset,
        diverging_epoch=mod.EpochEndOffset(epoch=r.diverging_epoch, end_offset=r.diverging_end_offset),
        current_leader=mod.LeaderIdAndEpoch(leader_id=r.leader_id, leader_epoch=r.leader_epoch),
        snapshot_id=mod.SnapshotId(end_offset=r.snapshot_end_offset, epoch=r.snapshot_epoch),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=batches.encode(r.records, timestamp) if r.records else None,
    )
    topic = _new(mod.FetchableTopicResponse, topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=(part,))
    return _new(mod.FetchResponse, throttle_time=0, error_code=ErrorCode.none, session_id=0, responses=(topic,))


def _fetch_snapshot_req(r: m.FetchSnapshotRequest, mod, cluster_id, **_):
    part = _new(
        mod.PartitionSnapshot,
        partition=0,
        current_leader_epoch=r.current_leader_epoch,
        snapshot_id=mod.SnapshotId(end_offset=r.snapshot_end_offset, epoch=r.snapshot_epoch),
        position=r.position,
        replica_directory_id=_uuid(r.replica_directory_id),
    )
    return _new(
        mod.FetchSnapshotRequest,
        cluster_id=cluster_id,
        replica_id=r.replica_id,
        max_bytes=r.max_bytes,
        topics=(mod.TopicSnapshot(name=METADATA_TOPIC, partitions=(part,)),),
    )


def _fetch_snapshot_resp(r: m.FetchSnapshotResponse, mod, **_):
    part = _new(
        mod.PartitionSnapshot,
        index=0,
        error_code=ErrorCode(r.error_code),
        snapshot_id=mod.SnapshotId(end_offset=r.snapshot_end_offset, epoch=r.snapshot_epoch),
        current_leader=mod.LeaderIdAndEpoch(leader_id=r.leader_id, leader_epoch=r.leader_epoch),
        size=r.size,
        position=r.position,
        unaligned_records=bytes(r.unaligned_records),
    )
    return _new(
        mod.FetchSnapshotResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        topics=(mod.TopicSnapshot(name=METADATA_TOPIC, partitions=(part,)),),
    )


def describe_quorum_response(r: m.DescribeQuorumResponse, version: int):
    """DescribeQuorum's answer at ``version`` (it has no correlation with a raft request)."""
    mod = _module("describe_quorum", version, "response")

    def replica(x: m.ReplicaState):
        return _new(
            mod.ReplicaState,
            replica_id=x.replica_id,
            replica_directory_id=_uuid(x.replica_directory_id),
            log_end_offset=x.log_end_offset,
            last_fetch_timestamp=x.last_fetch_timestamp,
            last_caught_up_timestamp=x.last_caught_up_timestamp,
        )

    part = _new(
        mod.PartitionData,
        partition_index=0,
        error_code=ErrorCode(r.error_code),
        error_message=r.error_message,
        leader_id=r.leader_id,
        leader_epoch=r.leader_epoch,
        high_watermark=r.high_watermark,
        current_voters=tuple(map(replica, r.current_voters)),
        observers=tuple(map(replica, r.observers)),
    )
    nodes = ()
    if hasattr(mod, "Node"):
        nodes = tuple(
            mod.Node(node_id=n, listeners=tuple(mod.Listener(name=a, host=h, port=p) for a, h, p in ls))
            for n, ls in r.nodes
        )
    return _new(
        mod.DescribeQuorumResponse,
        error_code=ErrorCode.none,
        error_message=None,
        topics=(mod.TopicData(topic_name=METADATA_TOPIC, partitions=(part,)),),
        nodes=nodes,
    )


def describe_quorum_from_wire(o) -> m.DescribeQuorumResponse:
    p = _one(o)

    def replica(x):
        return m.ReplicaState(
            x.replica_id,
            _dir(getattr(x, "replica_directory_id", None)),
            x.log_end_offset,
            getattr(x, "last_fetch_timestamp", -1),
            getattr(x, "last_caught_up_timestamp", -1),
        )

    return m.DescribeQuorumResponse(
        _code(o, p),
        p.leader_id,
        p.leader_epoch,
        p.high_watermark,
        [replica(x) for x in p.current_voters],
        [replica(x) for x in p.observers],
        getattr(p, "error_message", None),
        [(n.node_id, [(x.name, x.host, x.port) for x in n.listeners]) for n in getattr(o, "nodes", ())],
    )


def is_metadata_partition(request) -> bool:
    """Does a DescribeQuorum (or any raft) request name ``__cluster_metadata-0`` alone?
    Kafka answers anything else with UNKNOWN_TOPIC_OR_PARTITION."""
    ts = request.topics
    return (
        len(ts) == 1
        and getattr(ts[0], "topic_name", METADATA_TOPIC) == METADATA_TOPIC
        and [p.partition_index for p in ts[0].partitions] == [0]
    )


_TO = {
    m.VoteRequest: _vote_req,
    m.VoteResponse: _leader_resp("VoteResponse"),
    m.BeginQuorumEpochRequest: _begin_req,
    m.BeginQuorumEpochResponse: _leader_resp("BeginQuorumEpochResponse"),
    m.EndQuorumEpochRequest: _end_req,
    m.EndQuorumEpochResponse: _leader_resp("EndQuorumEpochResponse"),
    m.FetchRequest: _fetch_req,
    m.FetchResponse: _fetch_resp,
    m.FetchSnapshotRequest: _fetch_snapshot_req,
    m.FetchSnapshotResponse: _fetch_snapshot_resp,
}


# -- from the wire -------------------------------------------------------------------------------
def from_wire(obj, correlation_id: int, *, pre_vote: bool = False):
    """The raft dataclass of a kio body. A top-level error (for example CLUSTER_ID mismatch
    answered by the peer) becomes the partition's error code."""
    name = type(obj).__name__
    return _FROM[name](obj, correlation_id, pre_vote)


def _first(*values):
    for v in values:
        if v is not None:
            return v
    return None


def _vote_req_from(o, corr, _pv):
    p = _one(o)
    return m.VoteRequest(
        corr,
        _first(getattr(p, "replica_epoch", None), getattr(p, "candidate_epoch", None)),
        _first(getattr(p, "replica_id", None), getattr(p, "candidate_id", None)),
        _dir(_first(getattr(p, "replica_directory_id", None), getattr(p, "candidate_directory_id", None))),
        o.voter_id if hasattr(o, "voter_id") else -1,
        _dir(getattr(p, "voter_directory_id", None)),
        p.last_offset_epoch,
        p.last_offset,
        getattr(p, "pre_vote", False),
    )


def _code(o, p) -> int:
    top = int(getattr(o, "error_code", 0))
    return top if top else int(p.error_code)


def _vote_resp_from(o, corr, pre_vote):
    p = _one(o)
    return m.VoteResponse(corr, _code(o, p), p.leader_id, p.leader_epoch, p.vote_granted, pre_vote)


def _leader_resp_from(cls):
    def read(o, corr, _pv):
        p = _one(o)
        return cls(corr, _code(o, p), p.leader_id, p.leader_epoch)

    return read


def _begin_req_from(o, corr, _pv):
    p = _one(o)
    return m.BeginQuorumEpochRequest(
        corr, p.leader_id, p.leader_epoch, getattr(o, "voter_id", -1), _dir(getattr(p, "voter_directory_id", None))
    )


def _end_req_from(o, corr, _pv):
    p = _one(o)
    if hasattr(p, "preferred_candidates"):
        cands = [c.candidate_id for c in p.preferred_candidates]
    else:
        cands = list(p.preferred_successors)
    return m.EndQuorumEpochRequest(corr, p.leader_id, p.leader_epoch, cands)


def _fetch_req_from(o, corr, _pv):
    p = _one(o)
    rid = o.replica_state.replica_id if hasattr(o, "replica_state") else o.replica_id
    return m.FetchRequest(
        corr,
        rid,
        _dir(getattr(p, "replica_directory_id", None)),
        p.current_leader_epoch,
        p.fetch_offset,
        p.last_fetched_epoch,
        p.log_start_offset,
        int(o.max_wait.total_seconds() * 1000),
    )


def _fetch_resp_from(o, corr, _pv):
    p = _one(o, "responses")
    return m.FetchResponse(
        corr,
        _code(o, p),
        p.current_leader.leader_id,
        p.current_leader.leader_epoch,
        p.high_watermark,
        batches.decode(p.records) if p.records else [],
        p.diverging_epoch.epoch,
        p.diverging_epoch.end_offset,
        p.snapshot_id.end_offset,
        p.snapshot_id.epoch,
        log_start_offset=p.log_start_offset,
    )


def _fetch_snapshot_req_from(o, corr, _pv):
    p = _one(o)
    return m.FetchSnapshotRequest(
        corr,
        o.replica_id,
        p.current_leader_epoch,
        p.snapshot_id.end_offset,
        p.snapshot_id.epoch,
        p.position,
        o.max_bytes,
        _dir(getattr(p, "replica_directory_id", None)),
    )


def _fetch_snapshot_resp_from(o, corr, _pv):
    p = _one(o)
    return m.FetchSnapshotResponse(
        corr,
        _code(o, p),
        p.current_leader.leader_id,
        p.current_leader.leader_epoch,
        p.snapshot_id.end_offset,
        p.snapshot_id.epoch,
        p.size,
        p.position,
        bytes(p.unaligned_records),
    )


_FROM = {
    "VoteRequest": _vote_req_from,
    "VoteResponse": _vote_resp_from,
    "BeginQuorumEpochRequest": _begin_req_from,
    "BeginQuorumEpochResponse": _leader_resp_from(m.BeginQuorumEpochResponse),
    "EndQuorumEpochRequest": _end_req_from,
    "EndQuorumEpochResponse": _leader_resp_from(m.EndQuorumEpochResponse),
    "FetchRequest": _fetch_req_from,
    "FetchResponse": _fetch_resp_from,
    "FetchSnapshotRequest": _fetch_snapshot_req_from,
    "FetchSnapshotResponse": _fetch_snapshot_resp_from,
}
