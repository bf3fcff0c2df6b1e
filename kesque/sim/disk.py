"""A node's durable state in the simulator: its log, its quorum-state store, its directory id.

``crash`` loses what was not flushed (a torn tail keeps a random prefix of it); ``wipe`` loses
everything, as a replaced disk, and the node comes back with a new directory id (KIP-853).
"""

from __future__ import annotations

from ..raft.log import MemoryQuorumStateStore, MemoryRaftLog


class Disk:
    def __init__(self, directory_id: str):
        self.directory_id = directory_id
        self.log = MemoryRaftLog()
        self.store = MemoryQuorumStateStore()

    def crash(self, rng, torn_tail: bool = False) -> None:
        unflushed = self.log.end_offset() - self.log.durable_end_offset()
        keep = rng.randint(0, unflushed) if torn_tail and unflushed else 0
        self.log.crash(keep)

    def wipe(self, directory_id: str) -> None:
        self.__init__(directory_id)
