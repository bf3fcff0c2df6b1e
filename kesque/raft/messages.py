"""The KRaft RPCs as plain dataclasses, field names as Kafka's message schemas (snake_case).

Each message is the single-partition body of ``__cluster_metadata-0`` of Kafka's request or
response (``VoteRequest.json``, ``BeginQuorumEpochRequest.json``, ``EndQuorumEpochRequest.json``,
``FetchRequest.json`` as a replica sends it, ``FetchSnapshotRequest.json``), flattened, with
the field names of kio's generated classes (``kio.schema.vote.v2`` and so on). The
topic/partition nesting, the cluster id and the endpoints are added when the server wiring maps
them to kio's wire messages (kio is too slow to encode inside the simulator's loop).

``correlation_id`` pairs a response with its request: a node only accepts the response to the
request it has in flight to that destination (Kafka's ``RequestManager``), which makes duplicated
and reordered responses harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

NONE = int(ErrorCode.none)
FENCED_LEADER_EPOCH = int(ErrorCode.fenced_leader_epoch)
UNKNOWN_LEADER_EPOCH = int(ErrorCode.unknown_leader_epoch)
NOT_LEADER_OR_FOLLOWER = int(ErrorCode.not_leader_or_follower)
INVALID_REQUEST = int(ErrorCode.invalid_request)
INVALID_VOTER_KEY = int(ErrorCode.invalid_voter_key)
BROKER_NOT_AVAILABLE = int(ErrorCode.broker_not_available)
SNAPSHOT_NOT_FOUND = int(ErrorCode.snapshot_not_found)
POSITION_OUT_OF_RANGE = int(ErrorCode.position_out_of_range)


@dataclass(slots=True)
class VoteRequest:
    correlation_id: int
    replica_epoch: int  # CandidateEpoch before KIP-996; the prospective's epoch for a pre-vote
    replica_id: int  # the candidate (CandidateId before KIP-996)
    replica_directory_id: str | None
    voter_id: int  # top level in the wire request
    voter_directory_id: str | None  # KIP-853: the voter key the candidate believes in
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(slots=True)
class VoteResponse:
    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    pre_vote: bool = False


@dataclass(slots=True)
class BeginQuorumEpochRequest:
    correlation_id: int
    leader_id: int
    leader_epoch: int
    voter_id: int
    voter_directory_id: str | None


@dataclass(slots=True)
class BeginQuorumEpochResponse:
    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(slots=True)
class EndQuorumEpochRequest:
    correlation_id: int
    leader_id: int
    leader_epoch: int
    preferred_candidates: list[int] = field(default_factory=list)  # v1: ids (directory ids later)


@dataclass(slots=True)
class EndQuorumEpochResponse:
    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(slots=True)
class FetchRequest:
    correlation_id: int
    replica_id: int  # ReplicaState.ReplicaId
    replica_directory_id: str | None
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int = 0
    max_wait_ms: int = 0


@dataclass(slots=True)
class FetchResponse:
    correlation_id: int
    error_code: int
    leader_id: int  # CurrentLeader.LeaderId
    leader_epoch: int  # CurrentLeader.LeaderEpoch
    high_watermark: int = -1
    records: list = field(default_factory=list)
    # DivergingEpoch: set when the fetcher's log diverges from the leader's
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    # SnapshotId: set when the fetch offset is below the log start offset (KIP-630)
    snapshot_end_offset: int = -1
    snapshot_epoch: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchSnapshotRequest:
    """KIP-630: a follower told to fetch a snapshot reads it in chunks from ``position``."""

    correlation_id: int
    replica_id: int
    current_leader_epoch: int
    snapshot_end_offset: int
    snapshot_epoch: int
    position: int
    max_bytes: int = 0x7FFFFFFF
    replica_directory_id: str | None = None


@dataclass(slots=True)
class FetchSnapshotResponse:
    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int
    snapshot_end_offset: int = -1
    snapshot_epoch: int = -1
    size: int = 0
    position: int = 0
    unaligned_records: bytes = b""


REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest)


@dataclass(slots=True)
class ReplicaState:
    """One replica in a DescribeQuorum answer (timestamps -1 where unknown)."""

    replica_id: int
    replica_directory_id: str | None
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(slots=True)
class DescribeQuorumResponse:
    """The ``__cluster_metadata-0`` partition of DescribeQuorum's answer (the request has no
    fields of its own: it names the partition). ``nodes``: (id, [(listener, host, port)]), v2."""

    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: list = field(default_factory=list)
    observers: list = field(default_factory=list)
    error_message: str | None = None
    nodes: list = field(default_factory=list)
