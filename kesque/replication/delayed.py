"""Delayed operations (Kafka's purgatories): a produce with acks=all that waits for the high
watermark, and a fetch that waits for bytes.

Both wait on watch lists the :class:`~kesque.replication.replica_manager.ReplicaManager` keeps
per partition and completes from the partition's own events: a high watermark that moved (a
waiting consumer fetch, an acks=all produce), a leader append (a waiting follower fetch), a
leadership change (everything waiting on the partition is re-checked). The handlers only say what
they wait for and for how long.
"""

from __future__ import annotations

import asyncio

from ..errors import ErrorCode


class Waiter:
    """One delayed operation: ``check()`` is called on every event of a watched partition and
    returns True once the operation can complete."""

    __slots__ = ("fut", "check")

    def __init__(self, fut: asyncio.Future, check):
        self.fut = fut
        self.check = check

    def __call__(self, tp, nbytes: int) -> None:
        if not self.fut.done() and self.check(tp, nbytes):
            self.fut.set_result(None)


async def _wait(rm, tps, check, timeout_ms: int, kind: str) -> bool:
    """Wait until ``check`` says done or ``timeout_ms`` passes; True if completed in time."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    waiter = Waiter(fut, check)
    for tp in tps:
        rm.watch(tp, waiter, kind)
    timer = loop.call_later(max(timeout_ms, 0) / 1000.0, lambda: fut.done() or fut.set_result(False))
    try:
        await fut
    finally:
        timer.cancel()
        for tp in tps:
            rm.unwatch(tp, waiter, kind)
    return fut.result() is not False


async def wait_for_bytes(rm, tps, needed: int, max_wait_ms: int, replica: bool = False, skip=None) -> None:
    """Delayed fetch: until ``needed`` bytes arrived on the partitions (consumers: bytes the
    high watermark made visible; followers: bytes the leader appended), a partition changed
    role or was deleted (told with 0 bytes), or ``max_wait_ms`` passed. The bytes of a
    partition for which ``skip(tp)`` is true when they arrive do not count (a follower's
    partition held back by the leader's replication quota)."""
    got = [0]

    def check(tp, nbytes: int) -> bool:
        if nbytes and skip is not None and skip(tp):
            return False
        got[0] += nbytes
        return nbytes == 0 or got[0] >= needed

    await _wait(rm, set(tps), check, max_wait_ms, "replica" if replica else "hw")


async def wait_for_acks(rm, pending: dict, timeout_ms: int) -> dict:
    """Delayed produce (acks=all): ``pending`` maps (topic, partition) to the offset the high
    watermark must reach (the append's last offset + 1). Returns the error code of each:
    NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER (leadership lost meanwhile) or
    REQUEST_TIMED_OUT (``timeout_ms``, the request's timeout, passed first)."""
    result: dict = {}

    def settle(tp) -> bool:
        part = rm.partitions.get(tp)
        if part is None:  # gone, or its log dir failed (Kafka's DelayedProduce: the partition's error)
            offline = tp in getattr(rm, "offline_partitions", ())
            result[tp] = int(ErrorCode.kafka_storage_error if offline else ErrorCode.not_leader_or_follower)
            return True
        done, code = part.acks_all_status(pending[tp])
        if done or code:
            result[tp] = code
        return tp in result

    def check(tp, _nbytes) -> bool:
        if tp in pending and tp not in result:
            settle(tp)
        return len(result) == len(pending)

    for tp in pending:
        settle(tp)
    if len(result) < len(pending):
        await _wait(rm, [tp for tp in pending if tp not in result], check, timeout_ms, "hw")
    for tp in pending:
        result.setdefault(tp, int(ErrorCode.request_timed_out))
    return result
