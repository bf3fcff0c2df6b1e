"""The transaction coordinator's inter-broker requests (Kafka's TransactionMarkerChannelManager
and AddPartitionsToTxnManager).

- :class:`TxnMarkerSender` writes a transaction's COMMIT/ABORT markers on the leader of each
  partition: directly when this broker leads it, else with WriteTxnMarkers to the leader. Either
  way a marker counts only once committed (acks=all, as Kafka appends markers with acks=-1).
- :class:`TxnVerifier` asks the coordinator of a transactional id whether partitions were added
  to the transaction (KIP-890 part 1): the local coordinator synchronously, another broker's with
  AddPartitionsToTxn verify_only. For a transaction version 2 producer (KIP-890 part 2) it adds
  them instead (AddPartitionsToTxn v5 without verify_only, Kafka's ``addPartition`` operation),
  answering once the coordinator's record is committed.

Both keep one request in flight per destination broker; what is queued meanwhile goes out in
the next request, batched (:class:`NodeQueue`). A broker's address is its inter-broker listener
in the metadata image. Channel failures come back as NETWORK_EXCEPTION (disconnected) or
REQUEST_TIMED_OUT, which the callers retry or map as Kafka's managers do.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ..coordinator.transaction.requests import AddPartitionsToTxn
from ..errors import ErrorCode, KafkaError
from ..protocol.api_keys import ApiKeys
from ..protocol.messages import Msg
from .apis.committed import committed, first_error
from .channel import Channel, ChannelError, RequestTimedOut
from .drivers.delayed import wait_for_acks
from .drivers.txn_markers import TxnMarkerChannelManager

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
ADD_PARTITIONS_TO_TXN_VERSION = 5


def broker_resolver(image, config):
    """``node id -> (host, port)`` of an unfenced broker's inter-broker listener (``image`` is a
    getter of the current metadata image)."""
    listener = config.inter_broker_listener()

    def resolve(node: int):
        reg = image().brokers.get(node)
        if reg is None or reg.fenced:
            return None
        ep = reg.endpoint(listener)
        return (ep.host, ep.port) if ep is not None else None

    return resolve


def channel_error(exc: ChannelError) -> ErrorCode:
    return ErrorCode.request_timed_out if isinstance(exc, RequestTimedOut) else ErrorCode.network_exception


def by_topic(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


@dataclass(eq=False)
class _Entry:
    fut: asyncio.Future
    data: tuple
    tps: list = field(default_factory=list)

    def settle(self, codes: dict) -> None:
        if not self.fut.done():  # its waiter may be gone (cancelled at shutdown)
            self.fut.set_result(codes)


class NodeQueue:
    """Entries for one destination broker queue up while a request to it is in flight, and go
    out together in the next: ``send_batch(node, entries)`` sends one request and settles every
    entry's future."""

    def __init__(self, send_batch):
        self.send_batch = send_batch
        self.queued: dict[int, list[_Entry]] = {}
        self._busy: set[int] = set()
        self._tasks: set[asyncio.Task] = set()

    def add(self, node: int, data: tuple, tps: list) -> asyncio.Future:
        entry = _Entry(asyncio.get_running_loop().create_future(), data, list(tps))
        self.queued.setdefault(node, []).append(entry)
        if node not in self._busy:
            self._busy.add(node)
            task = asyncio.get_running_loop().create_task(self._drain(node))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return entry.fut

    async def _drain(self, node: int) -> None:
        try:
            while self.queued.get(node):
                entries = self.queued.pop(node)
                try:
                    await self.send_batch(node, entries)
                except Exception:  # noqa: BLE001 - settle what is left, never leave a waiter hanging
                    log.exception("request to broker %d failed", node)
                for e in entries:
                    e.settle({tp: ErrorCode.unknown_server_error for tp in e.tps})
        finally:
            self._busy.discard(node)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def append_marker(
    rm, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
) -> int:
    """Append one marker as the partition's leader with acks=all's check (NOT_ENOUGH_REPLICAS
    below min.insync.replicas); the offset the high watermark must reach for it to count."""
    part = rm.partitions.get((topic, partition))
    if part is not None and part.is_leader and part.is_under_min_isr:
        raise KafkaError(
            ErrorCode.not_enough_replicas,
            f"The size of the current ISR {part.isr} is insufficient to satisfy the min.isr "
            f"requirement for partition {part.tp}",
        )
    try:
        info = rm.append_txn_marker(topic, partition, producer_id, producer_epoch, commit, coordinator_epoch)
    except OSError as e:
        raise KafkaError(ErrorCode.kafka_storage_error, str(e)) from None
    return info.last_offset + 1


async def markers_committed(rm, written: dict, timeout_ms: int) -> dict:
    """``{tp: error}`` of appended markers (``{tp: end offset}``) once the HW passed them."""
    waiting = {tp: end for tp, end in written.items() if rm.partitions[tp].log.high_watermark < end}
    codes = await wait_for_acks(rm, waiting, timeout_ms) if waiting else {}
    return {tp: ErrorCode(codes.get(tp, 0)) for tp in written}


class TxnMarkerSender:
    """Markers of one transaction for the partitions one broker leads: ``write`` answers
    ``{tp: error}`` once each marker is committed there (or failed)."""

    # test-only switch (the simulator's --bug skip_last_marker): the last partition of each call
    # is reported written without its marker
    skip_last_marker = False

    def __init__(self, node_id: int, replica_manager, channel, timeout_ms: int):
        self.node_id = node_id
        self.rm = replica_manager
        self.channel = channel
        self.timeout_ms = timeout_ms
        self.queue = NodeQueue(self._send)

    async def write(
        self, node: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, tps: list
    ) -> dict:
        if self.skip_last_marker and tps:
            codes = await self._write(node, producer_id, producer_epoch, commit, coordinator_epoch, tps[:-1])
            return {**codes, tps[-1]: ErrorCode.none}
        return await self._write(node, producer_id, producer_epoch, commit, coordinator_epoch, tps)

    async def _write(
        self, node: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, tps: list
    ) -> dict:
        if not tps:
            return {}
        if node != self.node_id:
            return await self.queue.add(node, (producer_id, producer_epoch, commit, coordinator_epoch), tps)
        codes, written = {}, {}
        for topic, p in tps:
            try:
                written[(topic, p)] = append_marker(
                    self.rm, topic, p, producer_id, producer_epoch, commit, coordinator_epoch
                )
            except KafkaError as e:
                codes[(topic, p)] = e.code
        codes.update(await markers_committed(self.rm, written, self.timeout_ms))
        return codes

    async def _send(self, node: int, entries: list[_Entry]) -> None:
        m = Msg(ApiKeys.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request=True)
        body = m(
            markers=tuple(
                m(
                    "WritableTxnMarker",
                    producer_id=e.data[0],
                    producer_epoch=e.data[1],
                    transaction_result=e.data[2],
                    coordinator_epoch=e.data[3],
                    topics=tuple(
                        m("WritableTxnMarkerTopic", name=t, partition_indexes=ps) for t, ps in by_topic(e.tps).items()
                    ),
                )
                for e in entries
            )
        )
        try:
            resp = await self.channel.send(
                node, ApiKeys.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, self.timeout_ms + 5000
            )
        except ChannelError as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", node, exc)
            for e in entries:
                e.settle({tp: channel_error(exc) for tp in e.tps})
            return
        for e, result in zip(entries, resp.markers):
            codes = {(t.name, p.partition_index): ErrorCode(p.error_code) for t in result.topics for p in t.partitions}
            e.settle({tp: codes.get(tp, ErrorCode.unknown_server_error) for tp in e.tps})

    def close(self) -> None:
        self.queue.close()


class TxnVerifier:
    """KIP-890 verification of a producer's partitions wherever its coordinator lives.
    ``verify`` answers ``{tp: (error, message)}`` (as the produce path maps them), at once
    when the coordinator is local and answers at once, else as an awaitable."""

    def __init__(self, node_id: int, txn_coordinator, image, channel, timeout_ms: int):
        self.node_id = node_id
        self.tc = txn_coordinator
        self.image = image
        self.channel = channel
        self.timeout_ms = timeout_ms
        self.queue = NodeQueue(self._send)

    def coordinator_node(self, txn_id: str) -> int | None:
        t = self.image().topic(self.tc.TOPIC)
        reg = t.partitions.get(self.tc.partition_for(txn_id)) if t is not None else None
        return reg.leader if reg is not None and reg.leader >= 0 else None

    def verify(
        self,
        txn_id: str | None,
        producer_id: int,
        producer_epoch: int,
        tps: list,
        supports_abortable: bool,
        add: bool = False,
        produce: bool = True,
    ):
        """``add``: add the partitions to the transaction (a TV2 producer's Produce v12+ or
        TxnOffsetCommit v5+) rather than check they were added. A TV2 producer's produce
        (``add`` and ``produce``) is told CONCURRENT_TRANSACTIONS as it is: the produce path
        asks again while it lasts (ProduceApis, as Kafka's appendRecords)."""
        if not txn_id:
            return {
                tp: self.tc.verify_produce(txn_id, producer_id, producer_epoch, *tp, supports_abortable) for tp in tps
            }
        codes = self._ask(txn_id, producer_id, producer_epoch, tps, add)
        if isinstance(codes, dict):
            return self._mapped(codes, supports_abortable, add and produce)
        return self._mapped_later(codes, supports_abortable, add and produce)

    def _mapped(self, codes: dict, supports_abortable: bool, tv2: bool) -> dict:
        return {tp: self.tc.verification_error(code, supports_abortable, tv2) for tp, code in codes.items()}

    async def _mapped_later(self, codes, supports_abortable: bool, tv2: bool) -> dict:
        return self._mapped(await codes, supports_abortable, tv2)

    def _ask(self, txn_id: str, producer_id: int, producer_epoch: int, tps: list, add: bool):
        """The coordinator's raw answer ``{tp: ErrorCode}``, or an awaitable of it."""
        node = self.coordinator_node(txn_id)
        if node is None or node == self.node_id:
            if add:
                return self._local_add(txn_id, producer_id, producer_epoch, tps)
            return self.tc.verify(txn_id, producer_id, producer_epoch, list(tps))
        return self._remote(node, txn_id, producer_id, producer_epoch, tps, add)

    def _local_add(self, txn_id: str, producer_id: int, producer_epoch: int, tps: list):
        """The local coordinator adds the partitions; the answer waits for its record to commit."""
        try:
            self.tc.add_partitions(AddPartitionsToTxn(txn_id, producer_id, producer_epoch, frozenset(tps), 2))
        except KafkaError as e:
            return {tp: e.code for tp in tps}
        pending = self.tc.uncommitted([self.tc.partition_for(txn_id)])
        if not pending:
            return {tp: ErrorCode.none for tp in tps}
        return self._added_when_committed(pending, tps)

    async def _added_when_committed(self, pending: dict, tps: list) -> dict:

        code = first_error(await committed(self.tc, pending))
        return {tp: code for tp in tps}

    async def _remote(self, node, txn_id, producer_id, producer_epoch, tps, add: bool = False) -> dict:
        # one verification per transactional id in a request: an older one queued for the same
        # id gives way (Kafka's AddPartitionsToTxnManager.addTxnData)
        for e in list(self.queue.queued.get(node, ())):
            if e.data[0] != txn_id:
                continue
            if e.data[2] > producer_epoch:
                return {tp: ErrorCode.invalid_producer_epoch for tp in tps}
            self.queue.queued[node].remove(e)
            code = ErrorCode.invalid_producer_epoch if e.data[2] < producer_epoch else ErrorCode.network_exception
            e.settle({tp: code for tp in e.tps})
        return await self.queue.add(node, (txn_id, producer_id, producer_epoch, add), tps)

    async def _send(self, node: int, entries: list[_Entry]) -> None:
        v = ADD_PARTITIONS_TO_TXN_VERSION
        m = Msg(ApiKeys.ADD_PARTITIONS_TO_TXN, v, request=True)
        body = m(
            transactions=tuple(
                m(
                    "AddPartitionsToTxnTransaction",
                    transactional_id=e.data[0],
                    producer_id=e.data[1],
                    producer_epoch=e.data[2],
                    verify_only=not e.data[3],
                    topics=tuple(
                        m("AddPartitionsToTxnTopic", name=t, partitions=ps) for t, ps in by_topic(e.tps).items()
                    ),
                )
                for e in entries
            )
        )
        try:
            resp = await self.channel.send(node, ApiKeys.ADD_PARTITIONS_TO_TXN, v, body, self.timeout_ms)
        except ChannelError as exc:
            log.info("AddPartitionsToTxn (verification or KIP-890 add) to broker %d failed: %s", node, exc)
            for e in entries:
                e.settle({tp: ErrorCode.network_exception for tp in e.tps})
            return
        if resp.error_code:
            code = ErrorCode(resp.error_code)
            if code == ErrorCode.cluster_authorization_failed:
                code = ErrorCode.invalid_txn_state
            for e in entries:
                e.settle({tp: code for tp in e.tps})
            return
        results = {
            r.transactional_id: {
                (t.name, p.partition_index): ErrorCode(p.partition_error_code)
                for t in r.topic_results
                for p in t.results_by_partition
            }
            for r in resp.results_by_transaction
        }
        for e in entries:
            codes = results.get(e.data[0], {})
            e.settle({tp: codes.get(tp, ErrorCode.none) for tp in e.tps})

    def close(self) -> None:
        self.queue.close()


def wire(*, config, node_id: int, image, replica_manager, txn_coordinator, ssl_context=None, sasl=None) -> tuple:
    """Give ``txn_coordinator`` its marker writer (``markers``: a TxnMarkerChannelManager over a
    TxnMarkerSender), and build the broker's verifier
    (KIP-890), each on its own channel (a WriteTxnMarkers waiting for its markers to be
    committed must not hold up a verification); returns the verifier and the channels, for the
    server to close. ``image`` is the broker's metadata image (updated in place); ``ssl_context``:
    the inter-broker listener's client TLS context when it is over TLS, ``sasl`` its SASL login
    when it is a SASL listener."""

    resolve = broker_resolver(lambda: image, config)
    timeout = config.get("request.timeout.ms")
    markers = Channel(
        resolve,
        client_id=f"txn-marker-sender-{node_id}",
        request_timeout_ms=timeout,
        ssl_context=ssl_context,
        sasl=sasl,
    )
    verify = Channel(
        resolve,
        client_id=f"add-partitions-to-txn-sender-{node_id}",
        request_timeout_ms=timeout,
        ssl_context=ssl_context,
        sasl=sasl,
    )
    txn_coordinator.markers = TxnMarkerChannelManager(
        txn_coordinator, TxnMarkerSender(node_id, replica_manager, markers, timeout)
    )
    verifier = TxnVerifier(node_id, txn_coordinator, lambda: image, verify, timeout)
    return verifier, (markers, verify)
