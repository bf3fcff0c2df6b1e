"""The purgatories on the event loop: a delayed operation of ``replication.delayed`` (its
checks, on the replica manager's watch lists) waits on a future, completed by its check or by
its timeout (Kafka's DelayedOperationPurgatory and its timer). The Produce and Fetch handlers
and the coordinators' answers wait here; nothing else stands between a request and its wait."""

from __future__ import annotations

import asyncio

from ...replication.delayed import DelayedFetch, DelayedProduce


class _Waiter:
    """On the watch lists: completes ``fut`` once ``try_complete`` says so."""

    __slots__ = ("fut", "try_complete")

    def __init__(self, fut: asyncio.Future, try_complete):
        self.fut = fut
        self.try_complete = try_complete

    def __call__(self, tp, nbytes: int) -> None:
        if not self.fut.done() and self.try_complete(tp, nbytes):
            self.fut.set_result(None)


async def _wait(rm, tps, try_complete, timeout_ms: int, kind: str) -> None:
    """Wait until ``try_complete`` says done or ``timeout_ms`` passes."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    waiter = _Waiter(fut, try_complete)
    for tp in tps:
        rm.watch(tp, waiter, kind)
    timer = loop.call_later(max(timeout_ms, 0) / 1000.0, lambda: fut.done() or fut.set_result(False))
    try:
        await fut
    finally:
        timer.cancel()
        for tp in tps:
            rm.unwatch(tp, waiter, kind)


async def wait_for_bytes(rm, tps, needed: int, max_wait_ms: int, replica: bool = False, skip=None) -> None:
    """Delayed fetch (:class:`~kesque.replication.delayed.DelayedFetch`): until ``needed``
    bytes arrived on the partitions, a partition changed role or was deleted, or
    ``max_wait_ms`` passed. ``replica``: a follower's fetch (the leader's appends count)."""
    await _wait(rm, set(tps), DelayedFetch(needed, skip).try_complete, max_wait_ms, "replica" if replica else "hw")


async def wait_for_acks(rm, pending: dict, timeout_ms: int) -> dict:
    """Delayed produce (:class:`~kesque.replication.delayed.DelayedProduce`): ``pending`` maps
    (topic, partition) to the offset the high watermark must reach. Returns the error code of
    each: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR or
    REQUEST_TIMED_OUT (``timeout_ms``, the request's timeout, passed first)."""
    op = DelayedProduce(rm, pending)
    if not op.completed:
        await _wait(rm, op.waiting(), op.try_complete, timeout_ms, "hw")
    return op.expire()
