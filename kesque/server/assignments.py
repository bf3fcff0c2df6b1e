"""The broker's AssignReplicasToDirs sender (KIP-858, Kafka's AssignmentsManager).

A broker with several log dirs gets UNASSIGNED as the directory of each new replica (the
controller cannot know where the broker puts it); a partition written before directory
assignment has MIGRATING; after a move between log dirs the log is in another dir than the
metadata says. In each case the broker tells the controller the dir that holds the log, so that
a failed dir moves leadership off exactly its replicas. ``assign(topic_id, partition, dir_id)``
queues one (a later one for the same partition replaces it); the queue is sent as one
AssignReplicasToDirs per batch (at most ``MAX_PER_REQUEST``), one request in flight, to the
active controller through the ControllerRouter. An assignment is dropped when the partition is
gone or no longer has a replica here (Kafka's ``Assignment.valid``) or when the metadata already
has it; a failed request (or a partition answered with an error) is retried with Kafka's
exponential backoff (100 ms doubling to 10 s). Nothing is sent before the broker has registered.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

log = logging.getLogger(__name__)

MAX_PER_REQUEST = 2250  # Kafka's AssignReplicasToDirsRequest.MAX_ASSIGNMENTS_PER_REQUEST
BACKOFF_INITIAL_MS, BACKOFF_MAX_MS = 100, 10_000


class AssignmentsManager:
    def __init__(self, node_id: int, router, broker_epoch_fn, image_fn, request_timeout_ms: int = 30_000):
        self.node_id = node_id
        self.router = router
        self.broker_epoch_fn = broker_epoch_fn
        self.image_fn = image_fn
        self.request_timeout_ms = request_timeout_ms
        self.pending: dict[tuple[uuid.UUID, int], uuid.UUID] = {}
        self.failures = 0
        self.sent = 0  # requests answered without a top-level error (tests)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def assign(self, topic_id: uuid.UUID, partition: int, dir_id: uuid.UUID) -> None:
        if self.pending.get((topic_id, partition)) != dir_id:
            log.info("Queued the assignment of partition %s:%d to directory %s", topic_id, partition, dir_id)
        self.pending[(topic_id, partition)] = dir_id
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def valid(self, topic_id: uuid.UUID, partition: int, dir_id: uuid.UUID) -> bool:
        """Kafka's Assignment.valid, and not already in the metadata."""
        t = self.image_fn().topics_by_id.get(topic_id)
        p = t.partitions.get(partition) if t is not None else None
        return p is not None and self.node_id in p.replicas and p.directory(self.node_id) != dir_id

    def batch(self) -> dict:
        """The next request's assignments {dir id: {topic id: [partition]}} (the invalid ones
        leave the queue)."""
        out: dict = {}
        n = 0
        for (topic_id, p), d in list(self.pending.items()):
            if not self.valid(topic_id, p, d):
                del self.pending[(topic_id, p)]
                continue
            if n < MAX_PER_REQUEST:
                out.setdefault(d, {}).setdefault(topic_id, []).append(p)
                n += 1
        return out

    def on_answer(self, sent: dict, error_code: int, answer: dict) -> bool:
        """Handle an answer; True when every assignment of the request was accepted."""
        if error_code:
            self.failures += 1
            log.error("AssignReplicasToDirs failed with error code %d; retrying", error_code)
            return False
        self.failures = 0
        self.sent += 1
        ok = True
        for d, topics in sent.items():
            results = {(t, p): e for t, parts in answer.get(d, {}).items() for p, e in parts}
            for topic_id, parts in topics.items():
                for p in parts:
                    e = results.get((topic_id, p))
                    if e == 0:
                        if self.pending.get((topic_id, p)) == d:
                            del self.pending[(topic_id, p)]
                    else:
                        ok = False
                        log.error(
                            "Error assigning partition %s:%d to directory %s: %s",
                            topic_id,
                            p,
                            d,
                            "no result" if e is None else f"error code {e}",
                        )
        if not ok:
            self.failures += 1
        return ok

    def backoff_s(self) -> float:
        return min(BACKOFF_INITIAL_MS * 2 ** max(self.failures - 1, 0), BACKOFF_MAX_MS) / 1000.0

    async def _run(self) -> None:
        while True:
            if not self.pending or self.broker_epoch_fn() < 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), None if not self.pending else 0.1)
                except TimeoutError:
                    pass
                continue
            sent = self.batch()
            if not sent:
                continue
            try:
                error_code, answer = await self.router.assign_replicas_to_dirs(
                    self.node_id, self.broker_epoch_fn(), sent, self.request_timeout_ms
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a failed request is retried with backoff
                log.debug("AssignReplicasToDirs failed: %s", e)
                error_code, answer = -1, {}
            if not self.on_answer(sent, error_code, answer):
                await asyncio.sleep(self.backoff_s())
