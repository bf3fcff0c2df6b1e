"""The broker's AlterPartition client (Kafka's DefaultAlterPartitionManager) and the RPC's wire form.

A partition leader proposes ISR changes (:class:`~kesque.replication.replica_state.AlterPartition`)
with :meth:`AlterPartitionManager.submit`. The manager keeps at most one item per partition (a
second submission while one is pending is answered OPERATION_NOT_ATTEMPTED), sends every pending
item as one request when no request is in flight, through ``router.alter_partition`` (the local
controller when it is active, else the RPC to the active controller, resent on NOT_CONTROLLER and
while unreachable), and calls each item's ``callback(error_code, reply)`` on the loop: ``reply``
an :class:`~kesque.replication.replica_state.AlterPartitionReply` on success, None with the
partition's error, or with the request's top-level error (STALE_BROKER_EPOCH, NOT_CONTROLLER,
REQUEST_TIMED_OUT) for each of its partitions. After a top-level error the next request waits
``retry_backoff_ms`` (Kafka's 50 ms). A partition the answer leaves out stays pending and is sent
again. ``sender()`` is the callable ``ReplicaManager.send_alter_partition`` takes: it hands the
answer to ``Partition.on_alter_partition_response`` and resubmits when that asks for a retry.

The wire form (API key 56, versions 2-3 as Kafka 4.x; v3 carries each ISR member's broker
epoch): ``request_to_kio`` / ``request_from_kio`` and ``response_to_kio`` / ``response_from_kio``
map kio bodies to :class:`~kesque.controller.replication_control.AlterPartitionRequest` and
AlterPartitionReply lists.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ...controller.replication_control import AlterPartitionRequest
from ...errors import ErrorCode, KafkaError
from ...replication.replica_state import AlterPartition, AlterPartitionReply

log = logging.getLogger(__name__)

VERSIONS = range(2, 4)
LATEST = 3


@cache
def _mod(version: int, kind: str):
    return importlib.import_module(f"kio.schema.alter_partition.v{version}.{kind}")


# -- wire form -----------------------------------------------------------------------------------------
def request_to_kio(broker_id: int, broker_epoch: int, reqs: list, version: int = LATEST):
    m = _mod(version, "request")
    topics: dict[uuid.UUID, list] = {}
    for r in reqs:
        if version >= 3:
            isr = {"new_isr_with_epochs": tuple(m.BrokerState(broker_id=b, broker_epoch=e) for b, e in r.new_isr)}
        else:
            isr = {"new_isr": tuple(b for b, _ in r.new_isr)}
        topics.setdefault(r.topic_id, []).append(
            m.PartitionData(
                partition_index=r.partition_id,
                leader_epoch=r.leader_epoch,
                leader_recovery_state=r.leader_recovery_state,
                partition_epoch=r.partition_epoch,
                **isr,
            )
        )
    return m.AlterPartitionRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=tuple(m.TopicData(topic_id=tid, partitions=tuple(parts)) for tid, parts in topics.items()),
    )


def request_from_kio(req, version: int) -> list:

    out = []
    for t in req.topics:
        for p in t.partitions:
            if version >= 3:
                isr = [(int(b.broker_id), int(b.broker_epoch)) for b in p.new_isr_with_epochs]
            else:
                isr = [(int(b), -1) for b in p.new_isr]
            out.append(
                AlterPartitionRequest(
                    int(req.broker_id),
                    int(req.broker_epoch),
                    t.topic_id,
                    int(p.partition_index),
                    int(p.leader_epoch),
                    int(p.partition_epoch),
                    isr,
                    int(p.leader_recovery_state),
                )
            )
    return out


def response_to_kio(error_code: int, reqs: list, replies: list, version: int):
    """The response to ``reqs``: a top-level error with no topics, or a reply per partition."""

    m = _mod(version, "response")
    topics: dict[uuid.UUID, list] = {}
    if not error_code:
        for r, reply in zip(reqs, replies):
            topics.setdefault(r.topic_id, []).append(
                m.PartitionData(
                    partition_index=r.partition_id,
                    error_code=ErrorCode(reply.error_code),
                    leader_id=reply.leader if not reply.error_code else 0,
                    leader_epoch=max(reply.leader_epoch, 0),
                    isr=tuple(reply.isr),
                    leader_recovery_state=reply.leader_recovery_state,
                    partition_epoch=max(reply.partition_epoch, 0),
                )
            )
    return m.AlterPartitionResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode(error_code),
        topics=tuple(m.TopicData(topic_id=tid, partitions=tuple(parts)) for tid, parts in topics.items()),
    )


def response_from_kio(resp, reqs: list) -> list:
    """A reply (or None: left out of the answer) per request partition; raises the top-level
    error."""
    if resp.error_code:
        raise KafkaError(resp.error_code, f"AlterPartition failed: {ErrorCode(resp.error_code).name}")
    got = {}
    for t in resp.topics:
        for p in t.partitions:
            got[(t.topic_id, int(p.partition_index))] = AlterPartitionReply(
                int(p.error_code),
                int(p.leader_id),
                [int(b) for b in p.isr],
                int(p.leader_epoch),
                int(p.partition_epoch),
                int(p.leader_recovery_state),
            )
    return [got.get((r.topic_id, r.partition_id)) for r in reqs]


# -- the client ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Item:
    topic_id: uuid.UUID
    topic_name: str
    partition: int
    proposal: AlterPartition
    callback: Callable


class AlterPartitionManager:
    def __init__(self, router, node_id: int, broker_epoch_fn, timeout_ms: int = 30000, retry_backoff_ms: int = 50):
        self.router = router
        self.node_id = node_id
        self.broker_epoch_fn = broker_epoch_fn
        self.timeout_ms = timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.pending: dict[tuple[uuid.UUID, int], _Item] = {}  # unsent and in flight
        self._task: asyncio.Task | None = None

    def submit(
        self,
        topic_id: uuid.UUID,
        topic_name: str,
        partition: int,
        proposal: AlterPartition,
        callback: Callable[[int, AlterPartitionReply | None], None],
    ) -> bool:
        """Queue ``proposal``; False (and OPERATION_NOT_ATTEMPTED to ``callback``) if the
        partition already has one pending."""
        key = (topic_id, partition)
        if key in self.pending:
            asyncio.get_running_loop().call_soon(callback, int(ErrorCode.operation_not_attempted), None)
            return False
        self.pending[key] = _Item(topic_id, topic_name, partition, proposal, callback)
        self._maybe_send()
        return True

    def sender(self) -> Callable:
        """A ``ReplicaManager.send_alter_partition``: ``(partition, proposal)`` is submitted, the
        answer goes to ``partition.on_alter_partition_response``, and the proposal is submitted
        again when that asks for a retry (as Kafka's Partition resubmits)."""

        def send(part, proposal: AlterPartition) -> None:
            def answered(code: int, reply: AlterPartitionReply | None) -> None:
                if part.on_alter_partition_response(proposal, code, reply):
                    send(part, proposal)

            self.submit(part.topic_id, part.topic, part.partition, proposal, answered)

        return send

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _maybe_send(self) -> None:
        if self.pending and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._send())

    def _request(self, item: _Item, broker_epoch: int):

        p = item.proposal
        return AlterPartitionRequest(
            self.node_id,
            broker_epoch,
            item.topic_id,
            item.partition,
            p.leader_epoch,
            p.partition_epoch,
            list(p.new_isr),
            p.leader_recovery_state,
            item.topic_name,
        )

    async def _send(self) -> None:
        batch = list(self.pending.values())  # what was submitted until the task runs
        epoch = self.broker_epoch_fn()
        error, replies = 0, [None] * len(batch)
        try:
            replies = await self.router.alter_partition(
                self.node_id, epoch, [self._request(i, epoch) for i in batch], timeout_ms=self.timeout_ms
            )
        except KafkaError as e:
            error = int(e.code)
            log.warning("AlterPartition of %d partition(s) failed: %s", len(batch), e)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not stop every later ISR change
            log.exception("AlterPartition failed")
            error = int(ErrorCode.unknown_server_error)
        left_out = False
        for item, reply in zip(batch, replies):
            if not error and reply is None:
                left_out = True  # sent again
                continue
            if self.pending.get((item.topic_id, item.partition)) is item:
                del self.pending[(item.topic_id, item.partition)]
            code = error or reply.error_code
            try:
                item.callback(code, None if code else reply)
            except Exception:
                log.exception("AlterPartition callback of %s-%d failed", item.topic_name, item.partition)
        if error or left_out:
            await asyncio.sleep(self.retry_backoff_ms / 1000.0)
        self._task = None
        self._maybe_send()
