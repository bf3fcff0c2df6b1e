"""KRaft: the metadata quorum as a sans-IO state machine (see :mod:`kesque.raft.state`)."""

from .log import ElectionState, MemoryQuorumStateStore, MemoryRaftLog, QuorumStateStore, RaftLog, Record
from .node import Knobs, Output, QuorumConfig, RaftNode, StateChange
from .state import IllegalTransition

__all__ = [
    "ElectionState",
    "IllegalTransition",
    "Knobs",
    "MemoryQuorumStateStore",
    "MemoryRaftLog",
    "Output",
    "QuorumConfig",
    "QuorumStateStore",
    "RaftLog",
    "RaftNode",
    "Record",
    "StateChange",
]
