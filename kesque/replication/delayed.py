"""Delayed operations (Kafka's purgatories): a produce with acks=all that waits for the high
watermark, and a fetch that waits for bytes, as sans-IO checks.

Both wait on watch lists the :class:`~kesque.replication.replica_manager.ReplicaManager` keeps
per partition and complete from the partition's own events: a high watermark that moved (a
waiting consumer fetch, an acks=all produce), a leader append (a waiting follower fetch), a
leadership change (everything waiting on the partition is re-checked). An operation here says
when it can complete (``try_complete(tp, nbytes)``, called on every event of a watched
partition, as Kafka's DelayedOperation.tryComplete) and what it answers; ``ReplicaManager
.watch``/``unwatch`` put it on the watch lists. Waiting itself (a future, the timeout) is the
driver's, kesque.server.drivers.delayed, which the handlers call.
"""

from __future__ import annotations

from ..errors import ErrorCode


class DelayedFetch:
    """A fetch waiting for ``needed`` bytes on its partitions (consumers: bytes the high
    watermark made visible; followers: bytes the leader appended). It completes once they
    arrived or a partition changed role or was deleted (told with 0 bytes). The bytes of a
    partition for which ``skip(tp)`` is true when they arrive do not count (a follower's
    partition held back by the leader's replication quota)."""

    __slots__ = ("needed", "skip", "got")

    def __init__(self, needed: int, skip=None):
        self.needed = needed
        self.skip = skip
        self.got = 0

    def try_complete(self, tp, nbytes: int) -> bool:
        if nbytes and self.skip is not None and self.skip(tp):
            return False
        self.got += nbytes
        return nbytes == 0 or self.got >= self.needed


class DelayedProduce:
    """An acks=all produce: ``pending`` maps (topic, partition) to the offset the high
    watermark must reach (the append's last offset + 1). ``result`` collects the error code of
    each as it settles: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER (leadership
    lost meanwhile) or KAFKA_STORAGE_ERROR (its log dir failed); :meth:`expire` gives the rest
    REQUEST_TIMED_OUT. Each partition is checked once at creation (:meth:`waiting` is what is
    left to watch)."""

    __slots__ = ("rm", "pending", "result")

    def __init__(self, rm, pending: dict):
        self.rm = rm
        self.pending = pending
        self.result: dict = {}
        for tp in pending:
            self._settle(tp)

    def _settle(self, tp) -> None:
        rm = self.rm
        part = rm.partitions.get(tp)
        if part is None:  # gone, or its log dir failed (Kafka's DelayedProduce: the partition's error)
            offline = tp in getattr(rm, "offline_partitions", ())
            self.result[tp] = int(ErrorCode.kafka_storage_error if offline else ErrorCode.not_leader_or_follower)
            return
        done, code = part.acks_all_status(self.pending[tp])
        if done or code:
            self.result[tp] = code

    @property
    def completed(self) -> bool:
        return len(self.result) == len(self.pending)

    def waiting(self) -> list:
        return [tp for tp in self.pending if tp not in self.result]

    def try_complete(self, tp, _nbytes) -> bool:
        if tp in self.pending and tp not in self.result:
            self._settle(tp)
        return len(self.result) == len(self.pending)

    def expire(self) -> dict:
        """The answer: every partition not settled in time is REQUEST_TIMED_OUT."""
        result = self.result
        for tp in self.pending:
            result.setdefault(tp, int(ErrorCode.request_timed_out))
        return result
