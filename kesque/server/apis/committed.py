"""Coordinator answers wait for their writes to be committed.

A coordinator (group, transaction, share) applies a write to its state at once and appends it
to its partition; the answer goes out only once the partition's high watermark has passed the
write, as Kafka's CoordinatorRuntime completes a write operation. On one node the high
watermark moves with the append, and the answer is synchronous as before. A write that fails
to commit answers as Kafka's coordinators map append failures (CoordinatorOperationExceptionHelper,
TransactionStateManager): the client retries, or looks the coordinator up again.
"""

from __future__ import annotations

from ...coordinator.runtime import coordinator_error
from ...errors import ErrorCode
from ..drivers.delayed import wait_for_acks


async def committed(runtime, pending: dict, timeout_ms: int | None = None) -> dict:
    """``{tp: coordinator error}`` once every write of ``pending`` (``runtime.uncommitted()``)
    is committed, failed or timed out."""
    if not pending:
        return {}
    codes = await wait_for_acks(
        runtime.host.replica_manager, pending, runtime.write_timeout_ms() if timeout_ms is None else timeout_ms
    )
    return {tp: coordinator_error(c) for tp, c in codes.items()}


def first_error(codes: dict) -> ErrorCode:
    return next((c for c in codes.values() if c), ErrorCode.none)


def when_committed(runtime, partitions, response, failed, timeout_ms: int | None = None):
    """``response`` once the writes to ``partitions`` are committed (at once when they are),
    else ``failed(error)``."""
    pending = runtime.uncommitted(partitions)
    if not pending:
        return response
    return _answer(runtime, pending, response, failed, timeout_ms)


async def _answer(runtime, pending, response, failed, timeout_ms):
    code = first_error(await committed(runtime, pending, timeout_ms))
    return failed(code) if code else response
