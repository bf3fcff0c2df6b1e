"""Produce: decode by hand, append each partition's batch, answer by hand.

Produce v0-v2 are advertised (librdkafka decides what it may send from the advertised
minimum, KAFKA-18659) but refused with UNSUPPORTED_VERSION per partition, as Kafka 4 does.
acks=0 requests get no response; if any partition failed, the connection is closed so the
client notices (Kafka's behaviour). An acks=all request whose appends the high watermark has
not passed yet waits for it (``server.drivers.delayed.wait_for_acks``) up to the request's timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging

from ...errors import ErrorCode, KafkaError
from ...metrics.stats import PRODUCED_ITEMS
from ...metrics.stats import extend as extend_pending
from ...protocol.api import Api
from ...protocol.api_keys import ApiKeys
from ...protocol.produce import PartitionResponse, decode_produce_request, encode_produce_response
from ...records import batch as rb
from ...storage.validator import RecordValidationError
from ..context import NO_RESPONSE, AclOperation, CloseConnection, ResourceType
from ..drivers.delayed import wait_for_acks

log = logging.getLogger(__name__)

MIN_VERSION = 0
MIN_USABLE_VERSION = 3
MAX_VERSION = 13
ZSTD_MIN_VERSION = 7


class ProduceApis:
    """Appends keep each connection's order. Kafka reads a connection's next request only once
    it has answered the last, so a client's pipelined batches (sequence n, n+1, ... to one
    leader) are appended in the order sent. kesque starts every request as it arrives, and a
    produce that must first hear from the transaction coordinator (KIP-890) appends later; while
    one does, the connection's later produce requests wait for its appends (``_appending``: a
    connection's last produce not yet past its appends), so none of them can overtake it."""

    APIS = (Api(ApiKeys.PRODUCE, MIN_VERSION, MAX_VERSION, "produce", raw=True, refused_below=MIN_USABLE_VERSION),)

    def __init__(
        self,
        *,
        image,
        replica_manager,
        config,
        node_id: int,
        txn_coordinator,
        txn_verifier,
        throttler,
        topic_stats=None,
        request_metrics=None,
    ):
        """``topic_stats``, ``request_metrics``: kesque.metrics' counters (None: metrics off)."""
        self.image = image
        self.replica_manager = replica_manager
        self.config = config
        self.node_id = node_id
        self.txn_coordinator = txn_coordinator
        self.txn_verifier = txn_verifier  # asks other brokers' transaction coordinators (KIP-890)
        self.throttler = throttler
        self._throttle = throttler.throttle
        self._produce_quota = throttler.quotas.produce
        self._appending: dict = {}  # connection -> asyncio.Future set once that request has appended
        self.topic_stats = topic_stats
        self.request_metrics = request_metrics

    def produce(self, ctx, body):
        conn = ctx.connection
        before = self._appending.get(conn)
        if before is not None:  # the request's buffer is the connection's: keep a copy while waiting
            return self._produce_after(ctx, memoryview(bytearray(body)), before, self._hold(conn))
        v = ctx.api_version
        req = decode_produce_request(body, v)
        guards: dict = {}
        asked = self._pre_verifications(req, v, guards)
        if asked is None or isinstance(asked, dict):
            return self._append(ctx, req, len(body), asked, guards)
        return self._produce_verified(ctx, memoryview(bytearray(body)), asked, guards, self._hold(conn))

    def _hold(self, conn):
        """Make ``conn``'s later produce requests wait until the returned future is settled."""
        held = asyncio.get_running_loop().create_future()
        self._appending[conn] = held
        return held

    def _release(self, conn, held) -> None:
        if not held.done():
            held.set_result(None)
        if self._appending.get(conn) is held:
            del self._appending[conn]

    async def _produce_verified(self, ctx, body, asked, guards: dict, held):
        try:
            verdicts = await asked
            res = self._append(ctx, decode_produce_request(body, ctx.api_version), len(body), verdicts, guards)
        finally:
            self._release(ctx.connection, held)
        return await res if inspect.isawaitable(res) else res

    async def _produce_after(self, ctx, body, before, held):
        try:
            await asyncio.wait([before])  # not cancelled with this request: others wait on it too
            if getattr(ctx.connection, "closed", False):
                # Kafka would never have read it: a connection's next request is read only
                # once the last is answered, and nothing more once it has closed
                return NO_RESPONSE
            req = decode_produce_request(body, ctx.api_version)
            guards: dict = {}
            asked = self._pre_verifications(req, ctx.api_version, guards)
            if asked is not None and not isinstance(asked, dict):
                asked = await asked
            res = self._append(ctx, req, len(body), asked, guards)
        finally:
            self._release(ctx.connection, held)
        return await res if inspect.isawaitable(res) else res

    def _append(self, ctx, req, size: int, verdicts: dict | None, guards: dict):
        """The appends of a decoded request of ``size`` bytes, with its KIP-890 ``verdicts`` asked before
        (``_pre_verifications``) and the verification ``guards`` those started."""
        v = ctx.api_version
        require_verification = self.txn_coordinator.verification_enabled
        rm = self.replica_manager
        image = self.image
        authorizer = ctx.authorizer  # None: no authorizer, everything is allowed
        topics_out = []
        failed = False
        stats = self.topic_stats
        waiting: dict = {}  # acks=all: (topic, partition) -> the offset the HW must pass, and its response
        # KafkaApis.handleProduceRequest: transactional records (markers included) without a
        # transactional id fail the whole request
        unauthorized = req.transactional_id is None and any(
            p.records is not None and len(p.records) >= rb.HEADER_SIZE and p.records[22] & rb.TRANSACTIONAL_FLAG
            for t in req.topics
            for p in t.partitions
        )
        for topic in req.topics:
            name = topic.name
            key = name
            if v >= 13:
                t = image.topics_by_id.get(topic.topic_id)
                name = t.name if t else None
                key = topic.topic_id
            parts_out = []
            denied = (
                authorizer is not None
                and name is not None
                and not authorizer.authorize(ctx, AclOperation.WRITE, ResourceType.TOPIC, name)
            )
            # a mirror topic is read-only until promoted or failed over (docs/mirror.md)
            mirror = image.mirror_topics and name is not None and image.mirror_of(name)
            mirrored = mirror and mirror.mirroring
            for p in topic.partitions:
                r = PartitionResponse(p.index)
                if unauthorized and v >= MIN_USABLE_VERSION:
                    r.error_code = int(ErrorCode.transactional_id_authorization_failed)
                elif v < MIN_USABLE_VERSION:
                    r.error_code = int(ErrorCode.unsupported_version)
                    r.error_message = f"Produce v{v} is not supported; use v{MIN_USABLE_VERSION} or later"
                elif name is None:
                    r.error_code = int(ErrorCode.unknown_topic_id)
                elif denied:
                    r.error_code = int(ErrorCode.topic_authorization_failed)
                elif mirrored:
                    r.error_code = int(ErrorCode.invalid_request)
                    r.error_message = f"Cannot produce to mirror topic {name}: it is read-only (see kesque mirrors)"
                elif p.records is None or len(p.records) == 0:
                    r.error_code = int(ErrorCode.invalid_record)
                    r.error_message = (
                        f"Produce requests with version {v} must have at least one record batch per partition"
                    )
                elif req.acks not in (0, 1, -1):
                    r.error_code = int(ErrorCode.invalid_required_acks)
                elif v < ZSTD_MIN_VERSION and len(p.records) > 22 and (p.records[22] & 0x07) == 4:
                    r.error_code = int(ErrorCode.unsupported_compression_type)
                    r.error_message = f"Produce requests with version {v} are not allowed to use ZStandard compression"
                elif (
                    len(p.records) >= rb.HEADER_SIZE
                    and p.records[22] & (rb.TRANSACTIONAL_FLAG | rb.CONTROL_FLAG) == rb.TRANSACTIONAL_FLAG
                    and not self._verified(req.transactional_id, name, p, r, v, verdicts, guards)
                ):
                    pass  # the coordinator does not know this partition is in the transaction
                else:
                    try:
                        info = rm.append(
                            name, p.index, p.records, req.acks, guards.get((name, p.index)), require_verification
                        )
                        if req.acks == -1 and rm.partitions[(name, p.index)].log.high_watermark <= info.last_offset:
                            waiting[(name, p.index)] = (info.last_offset + 1, r)
                        r.base_offset = info.first_offset
                        r.log_append_time = info.log_append_time
                        r.log_start_offset = info.log_start_offset
                        if stats is not None and extend_pending(  # counted in bulk (BrokerTopicStats.fold)
                            stats.pending, PRODUCED_ITEMS, name, len(p.records), info.num_records
                        ):
                            stats.fold()
                    except RecordValidationError as e:
                        # KIP-467: the batch is refused; the client learns which records failed
                        r.error_code = int(e.code)
                        r.error_message = e.message
                        r.record_errors = e.record_errors
                        r.log_start_offset = self._log_start_offset(name, p.index)
                        if stats is not None:
                            stats.produce_failed(name, len(p.records), True)
                    except KafkaError as e:
                        # as Kafka, no message: only record validation errors (above) carry one
                        # (ReplicaManager's hasCustomErrorMessage); it goes to the debug log
                        r.error_code = int(e.code)
                        log.debug("Produce to %s-%d failed: %s", name, p.index, e.message)
                        self._current_leader(r, name, p.index)
                        if stats is not None:
                            stats.produce_failed(name, len(p.records), False)
                if r.error_code:
                    failed = True
                    if r.error_code not in (ErrorCode.unknown_topic_or_partition,):
                        log.debug("Produce to %s-%d failed: %s %s", name, p.index, r.error_code, r.error_message)
                parts_out.append(r)
            topics_out.append((key, parts_out))
        m = self.request_metrics
        if m is not None:
            # ErrorsPerSec{request=Produce}: a partition appended is a NONE, counted with its topic's
            # appends (BrokerTopicStats); the errors are counted here, or once the acks are in
            # (_after_acks), which counts an acks=all append NONE or not once it has its answer
            if waiting:
                m.produce_none -= len(waiting)
            elif failed:
                self._count_errors(topics_out)
        throttle_ms = 0
        quota = self._produce_quota
        if quota.enabled or ctx.start_ns:  # the request's size, as Kafka's produce quota counts it
            throttle_ms = self._throttle(ctx, quota, ctx.header.body_offset + size)
        if req.acks == 0:
            if failed:
                raise CloseConnection("acks=0 produce request failed; closing connection to notify the client")
            return NO_RESPONSE  # a throttled acks=0 producer is muted all the same
        if waiting:
            return self._after_acks(v, topics_out, throttle_ms, waiting, req.timeout_ms)
        return encode_produce_response(v, topics_out, throttle_ms)

    def _count_errors(self, topics_out, none: int = 0) -> None:
        """The partitions' error codes in the request metrics (Kafka's ProduceResponse.errorCounts),
        but NONE: ``none`` of them (the appends are counted as NONE with their topics' counts)."""
        counts: dict[int, int] = {0: none} if none else {}
        for _key, parts in topics_out:
            for r in parts:
                if r.error_code:
                    counts[r.error_code] = counts.get(r.error_code, 0) + 1
        self.request_metrics.errors_of(ApiKeys.PRODUCE, counts)

    async def _after_acks(self, v, topics_out, throttle_ms: int, waiting: dict, timeout_ms: int):
        """Kafka's DelayedProduce: answered once every acks=all append is below the high
        watermark (or failed over, or timed out)."""
        codes = await wait_for_acks(self.replica_manager, {tp: off for tp, (off, _r) in waiting.items()}, timeout_ms)
        for tp, (_off, r) in waiting.items():
            code = codes[tp]
            if code:
                r.error_code = code
                r.error_message = None
                self._current_leader(r, *tp)
                if code == ErrorCode.request_timed_out:
                    log.debug("Produce to %s-%d timed out waiting for the ISR", *tp)
        if self.request_metrics is not None:  # the acks=all appends answered NONE count again
            self._count_errors(topics_out, sum(1 for _off, r in waiting.values() if not r.error_code))
        return encode_produce_response(v, topics_out, throttle_ms)

    def _current_leader(self, r: PartitionResponse, topic: str, partition: int) -> None:
        """KIP-951: NOT_LEADER_OR_FOLLOWER carries the leader the image names, so that the
        client can go there without a metadata round trip."""
        if r.error_code == ErrorCode.not_leader_or_follower:
            reg = self.replica_manager.image_partition(topic, partition)
            if reg is not None:
                r.leader_id, r.leader_epoch = reg.leader, reg.leader_epoch

    def _log_start_offset(self, topic: str, partition: int) -> int:
        part = self.replica_manager.partitions.get((topic, partition))
        return part.log.log_start_offset if part is not None else -1

    def _verified(
        self, txn_id: str | None, topic: str, p, r: PartitionResponse, version: int, verdicts: dict | None, guards: dict
    ) -> bool:
        """KIP-890 part 1: the first transactional batch a producer sends to a partition in a
        transaction is appended only once the coordinator confirms the partition was added
        (part 2, Produce v12+ of a TV2 producer: once the coordinator added it, asked before in
        ``_pre_verifications``). A verification asked here (a local coordinator) starts the
        partition's verification state first, as one asked before did, and leaves its guard in
        ``guards`` for the append."""
        tp = (topic, p.index)
        h = self._to_verify(topic, p, tp in verdicts if verdicts is not None else False)
        if h is None:
            return True
        if verdicts is not None and tp in verdicts:
            code, msg = verdicts[tp]
        else:
            guards[tp] = self._start_verification(tp, h, False)
            code, msg = self.txn_coordinator.verify_produce(
                txn_id, h.producer_id, h.producer_epoch, topic, p.index, version > 10
            )
        if code == ErrorCode.none:
            return True
        r.error_code = int(code)
        r.error_message = msg
        return False

    def _to_verify(self, topic: str | None, p, add: bool = False):
        """The header of a transactional batch that needs the coordinator's verification (the
        first of its transaction here), else None. ``add``: a TV2 producer's batch, which the
        leader adds to the transaction whether or not verification is enabled."""
        if (
            topic is None
            or not (add or self.txn_coordinator.verification_enabled)
            or p.records is None
            or len(p.records) < rb.HEADER_SIZE
            or p.records[22] & (rb.TRANSACTIONAL_FLAG | rb.CONTROL_FLAG) != rb.TRANSACTIONAL_FLAG
        ):
            return None
        part = self.replica_manager.partitions.get((topic, p.index))
        if part is None:
            return None
        h = rb.read_header(p.records)
        ps = part.log.producer_state
        if ps.ongoing_txn_of(h.producer_id) >= 0 and ps.producers[h.producer_id].epoch == h.producer_epoch:
            # already verified when the transaction's first batch arrived here. Of the same
            # epoch only (Kafka's hasOngoingTransaction(producerId, epoch)): a TV2 producer's next
            # transaction, one epoch up, must not join the previous one before its marker lands
            return None
        return h

    def _start_verification(self, tp: tuple[str, int], h, supports_epoch_bump: bool):
        """Kafka's maybeStartTransactionVerification: the partition remembers the producer's
        pending verification (and the lowest sequence it saw) before the coordinator is asked."""
        return self.replica_manager.start_transaction_verification(
            *tp, h.producer_id, h.base_sequence, h.producer_epoch, supports_epoch_bump
        )

    def _pre_verifications(self, req, version: int, guards: dict):
        """What this request needs from the transaction coordinator before its appends (Kafka's
        AddPartitionsToTxnManager): ``{(topic, partition): (error, message)}`` or an awaitable of
        it, or None when there is nothing to ask beforehand (a local coordinator's verification
        answers inline in ``_verified``). A TV2 producer's Produce v12+ has its partitions added
        (KIP-890 part 2), by the local coordinator or with AddPartitionsToTxn to a remote one;
        otherwise only a coordinator on another broker is asked here (verify_only)."""
        verifier = self.txn_verifier
        tc = self.txn_coordinator
        if not req.transactional_id:
            return None
        add = tc.tv2(version >= 12)
        if not add and not tc.verification_enabled:
            return None
        node = verifier.coordinator_node(req.transactional_id)
        if not add and (node is None or node == self.node_id):
            return None
        tps, h, headers = [], None, {}
        for name, p in self._partitions(req, version):
            ph = self._to_verify(name, p, add)
            if ph is not None:
                tps.append((name, p.index))
                guards[(name, p.index)] = self._start_verification((name, p.index), ph, add)
                headers[(name, p.index)] = h = ph
        if not tps:
            return None
        answer = verifier.verify(req.transactional_id, h.producer_id, h.producer_epoch, tps, version > 10, add)
        if not add or (
            isinstance(answer, dict)
            and ErrorCode.concurrent_transactions not in (code for code, _msg in answer.values())
        ):
            return answer
        return self._added_with_retries(answer, req.transactional_id, version, guards, headers)

    async def _added_with_retries(self, answer, txn_id: str, version: int, guards: dict, headers: dict) -> dict:
        """A TV2 producer's add that the coordinator answers CONCURRENT_TRANSACTIONS (it is still
        completing the producer's previous transaction) is asked again every
        add.partitions.to.txn.retry.backoff.ms for up to add.partitions.to.txn.retry.backoff.max.ms
        (bounded by request.timeout.ms), each time starting the partitions' verification again
        (the previous transaction's marker ends the one started before); what is still
        CONCURRENT_TRANSACTIONS then reaches the producer as it is, which retries it (Kafka's
        maybeRetryOnConcurrentTransactions)."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = (
            loop.time()
            + min(cfg.get("add.partitions.to.txn.retry.backoff.max.ms"), cfg.get("request.timeout.ms")) / 1000
        )
        backoff = cfg.get("add.partitions.to.txn.retry.backoff.ms") / 1000
        tps = list(headers)
        h = next(iter(headers.values()))
        while True:
            if not isinstance(answer, dict):
                answer = await answer
            if (
                all(code != ErrorCode.concurrent_transactions for code, _msg in answer.values())
                or loop.time() >= deadline
            ):
                return answer
            await asyncio.sleep(backoff)
            # the batch headers were read before the first wait: the request's buffer is the
            # connection's, and holds other bytes by now (a guard of None: the transaction is
            # open at this epoch now, the append needs none)
            for tp, ph in headers.items():
                guards[tp] = self._start_verification(tp, ph, True)
            if all(guards[tp] is None for tp in tps):
                return {tp: (ErrorCode.none, None) for tp in tps}
            answer = self.txn_verifier.verify(txn_id, h.producer_id, h.producer_epoch, tps, version > 10, True)

    def _partitions(self, req, version: int):
        """(topic name, partition data) of a request (the name None for an unknown topic id)."""
        image = self.image
        for topic in req.topics:
            if version >= 13:
                t = image.topics_by_id.get(topic.topic_id)
                name = t.name if t else None
            else:
                name = topic.name
            for p in topic.partitions:
                yield name, p
