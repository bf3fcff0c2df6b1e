"""The share-state persister: how a share-partition leader (and the group coordinator) reach
the share coordinator that keeps a share-partition's durable state (Kafka's Persister,
DefaultStatePersister and PersisterStateManager).

The state of share-partition ``(group, topic id, partition)`` lives in the
``__share_group_state`` partition that key ``group:topic id:partition`` maps to, on whichever
broker leads that partition: the share coordinator. The share-partition leader, the share
coordinator and the group's coordinator may be three different brokers, so the callers see one
narrow, asynchronous interface:

* ``read(key, leader_epoch)`` -> ShareState or None (never initialized)
* ``read_summary(key)``       -> ShareSummary or None (start offset, epochs, delivery-complete count)
* ``initialize(key, start_offset, leader_epoch, state_epoch)`` (a new state epoch: an offset reset)
* ``write(key, start_offset, batches, leader_epoch, state_epoch)``
* ``delete(key)``

Two implementations:

* :class:`LocalPersister`: this broker leads the state partition; the in-process shard is
  called directly and the call completes once the write is committed (the high watermark
  passed it), as the coordinator answers a remote writer. Its synchronous half (``shard``)
  lets the manager keep its fast path on a single node.
* :class:`DefaultStatePersister`: finds the coordinator as FindCoordinator key type 2 (SHARE)
  does (the leader of the key's state partition in the metadata image) and sends it
  ReadShareGroupState / ReadShareGroupStateSummary / InitializeShareGroupState /
  WriteShareGroupState / DeleteShareGroupState over the inter-broker channel (or uses the
  local persister when the coordinator is this broker). NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and channel failures are retried
  (the coordinator looked up again each time, after a backoff doubling from 100 ms to 1 s) until
  ``request.timeout.ms`` has passed; any other error is the caller's.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ...coordinator.share.runtime import coordinator_key
from ...coordinator.share.shard import ShareState, ShareSummary, summary
from ...errors import ErrorCode, KafkaError
from ...protocol.api_keys import ApiKeys
from ...protocol.messages import Msg
from ...share.partition import StateBatch
from ..apis.committed import committed, first_error
from ..channel import ChannelError

log = logging.getLogger(__name__)

INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = (
    ApiKeys.INITIALIZE_SHARE_GROUP_STATE,
    ApiKeys.READ_SHARE_GROUP_STATE,
    ApiKeys.WRITE_SHARE_GROUP_STATE,
    ApiKeys.DELETE_SHARE_GROUP_STATE,
    ApiKeys.READ_SHARE_GROUP_STATE_SUMMARY,
)
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 0, DELETE: 0, READ_SUMMARY: 1}

BACKOFF_MS, BACKOFF_MAX_MS = 100, 1000  # between retries: doubling, up to the ceiling

RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.network_exception,
        ErrorCode.request_timed_out,
    }
)


class LocalPersister:
    """The share coordinator shards of this broker."""

    def __init__(self, share_coordinator):
        self.sc = share_coordinator

    def shard(self, key: tuple):
        """The loaded shard keeping ``key`` (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS if
        this broker does not have it)."""
        if self.sc is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "The share coordinator is not enabled.")
        return self.sc.shard_for(coordinator_key(*key))

    def committed_shard(self, key: tuple):
        """The committed state of the shard keeping ``key`` (what a read answers from:
        ``CoordinatorRuntime.read_shard``)."""
        if self.sc is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "The share coordinator is not enabled.")
        return self.sc.read_shard(coordinator_key(*key))

    async def _committed(self, shard) -> None:

        code = first_error(await committed(self.sc, self.sc.uncommitted([shard.partition])))
        if code:
            raise KafkaError(code)

    def caught_up_shard(self, key: tuple):
        """The loaded shard keeping ``key`` if everything in its partition's log is committed
        (its state is then the committed one), else None: a coordinator that has just taken the
        partition over holds records the previous one wrote above its high watermark, and a
        committed view would answer with an older state (acknowledgements that are durable
        missing from it)."""
        shard = self.shard(key)
        part = self.sc.host.replica_manager.partitions.get((self.sc.TOPIC, shard.partition))
        if part is None or not part.is_leader:
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        return shard if part.log.high_watermark >= part.log.log_end_offset else None

    async def read(self, key: tuple, leader_epoch: int = -1) -> ShareState | None:
        """The state of ``key`` as its shard has it (everything its log holds), answered once
        all of that log is committed: as Kafka's ReadShareGroupState, which its share
        coordinator runs as a write, it never answers with an older state than a write made."""

        shard = self.shard(key)
        state = shard.read(key)
        part = self.sc.host.replica_manager.partitions.get((self.sc.TOPIC, shard.partition))
        if part is None or not part.is_leader:
            raise KafkaError(ErrorCode.not_coordinator, "This is not the correct coordinator.")
        end = part.log.log_end_offset
        if part.log.high_watermark < end:
            code = first_error(await committed(self.sc, {(self.sc.TOPIC, shard.partition): end}))
            if code:
                raise KafkaError(code)
        return state

    async def read_summary(self, key: tuple) -> ShareSummary | None:
        s = self.committed_shard(key).read(key)
        return summary(s) if s is not None else None

    async def initialize(self, key: tuple, start_offset: int, leader_epoch: int = -1, state_epoch: int = -1) -> None:
        shard = self.shard(key)
        self.sc.apply(shard, shard.initialize(key, start_offset, leader_epoch, state_epoch))
        await self._committed(shard)

    async def write(
        self, key: tuple, start_offset: int, batches: list[StateBatch], leader_epoch: int = -1, state_epoch: int = -1
    ) -> None:
        shard = self.shard(key)
        self.sc.apply(shard, shard.write_state(key, start_offset, batches, leader_epoch, state_epoch))
        await self._committed(shard)

    async def delete(self, key: tuple) -> None:
        shard = self.shard(key)
        if key in shard.states:
            self.sc.apply(shard, shard.delete(key))
            await self._committed(shard)


def _batches(items) -> list[StateBatch]:
    return [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in items]


class DefaultStatePersister:
    """Route each call to the key's share coordinator: in-process or over ``channel``."""

    def __init__(self, node_id: int, local: LocalPersister, locate, channel, config):
        self.node_id = node_id
        self.local = local
        self.locate = locate  # ckey -> (node or None, error code, message), as FindCoordinator
        self.channel = channel
        self.timeout_ms = config.get("request.timeout.ms")
        self.backoff_ms = BACKOFF_MS

    # ------------------------------------------------------------------ the interface
    async def read(self, key: tuple, leader_epoch: int = -1) -> ShareState | None:
        def body(m):
            return m(
                group_id=key[0],
                topics=(
                    m(
                        "ReadStateData",
                        topic_id=key[1],
                        partitions=(m("PartitionData", partition=key[2], leader_epoch=leader_epoch),),
                    ),
                ),
            )

        def result(p):
            if p.error_code == ErrorCode.unknown_topic_or_partition:  # never initialized
                return None
            return ShareState(p.state_epoch, p.start_offset, leader_epoch, _batches(p.state_batches))

        return await self._call(
            key,
            READ,
            body,
            result,
            lambda: self.local.read(key, leader_epoch),
            absent=ErrorCode.unknown_topic_or_partition,
        )

    async def read_summary(self, key: tuple) -> ShareSummary | None:
        def body(m):
            return m(
                group_id=key[0],
                topics=(
                    m(
                        "ReadStateSummaryData",
                        topic_id=key[1],
                        partitions=(m("PartitionData", partition=key[2], leader_epoch=-1),),
                    ),
                ),
            )

        def result(p):
            if p.error_code == ErrorCode.unknown_topic_or_partition:
                return None
            return ShareSummary(p.state_epoch, p.leader_epoch, p.start_offset, p.delivery_complete_count)

        return await self._call(
            key,
            READ_SUMMARY,
            body,
            result,
            lambda: self.local.read_summary(key),
            absent=ErrorCode.unknown_topic_or_partition,
        )

    async def initialize(self, key: tuple, start_offset: int, leader_epoch: int = -1, state_epoch: int = -1) -> None:
        """A new state at ``start_offset``, with ``state_epoch`` (-1: the coordinator's next)."""

        def body(m):
            return m(
                group_id=key[0],
                topics=(
                    m(
                        "InitializeStateData",
                        topic_id=key[1],
                        partitions=(
                            m("PartitionData", partition=key[2], state_epoch=state_epoch, start_offset=start_offset),
                        ),
                    ),
                ),
            )

        await self._call(
            key,
            INITIALIZE,
            body,
            lambda p: None,
            lambda: self.local.initialize(key, start_offset, leader_epoch, state_epoch),
        )

    async def write(
        self, key: tuple, start_offset: int, batches: list[StateBatch], leader_epoch: int = -1, state_epoch: int = -1
    ) -> None:
        def body(m):
            return m(
                group_id=key[0],
                topics=(
                    m(
                        "WriteStateData",
                        topic_id=key[1],
                        partitions=(
                            m(
                                "PartitionData",
                                partition=key[2],
                                state_epoch=state_epoch,
                                leader_epoch=leader_epoch,
                                start_offset=start_offset,
                                state_batches=tuple(
                                    m(
                                        "StateBatch",
                                        first_offset=b.first,
                                        last_offset=b.last,
                                        delivery_state=b.state,
                                        delivery_count=b.delivery_count,
                                    )
                                    for b in batches
                                ),
                            ),
                        ),
                    ),
                ),
            )

        await self._call(
            key,
            WRITE,
            body,
            lambda p: None,
            lambda: self.local.write(key, start_offset, batches, leader_epoch, state_epoch),
        )

    async def delete(self, key: tuple) -> None:
        def body(m):
            return m(
                group_id=key[0],
                topics=(m("DeleteStateData", topic_id=key[1], partitions=(m("PartitionData", partition=key[2]),)),),
            )

        await self._call(key, DELETE, body, lambda p: None, lambda: self.local.delete(key))

    # ------------------------------------------------------------------ routing and retries
    async def _call(self, key: tuple, api_key: int, body, result, local, absent=None):

        ckey = coordinator_key(*key)
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        version = VERSIONS[api_key]
        backoff = self.backoff_ms
        while True:
            node, code, msg = self.locate(ckey)
            try:
                if code:
                    raise KafkaError(code, msg)
                if node == self.node_id:
                    return await local()
                resp = await self.channel.send(
                    node, api_key, version, body(Msg(api_key, version, request=True)), self.timeout_ms
                )
                p = resp.results[0].partitions[0]
                if p.error_code and p.error_code != absent:
                    raise KafkaError(p.error_code, p.error_message)
                return result(p)
            except ChannelError as e:
                code, msg = ErrorCode.network_exception, str(e)
            except KafkaError as e:
                if e.code not in RETRIABLE:
                    raise
                code, msg = e.code, e.message
            if time.monotonic() >= deadline:
                raise KafkaError(code, msg)
            log.debug("share state %s of %s: %s, retrying", ckey, api_key, code.name)
            await asyncio.sleep(backoff / 1000.0)
            backoff = min(backoff * 2, BACKOFF_MAX_MS)
