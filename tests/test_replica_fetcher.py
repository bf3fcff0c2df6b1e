"""The replica fetcher (kesque/server/drivers/replica_fetcher.py) against a fake leader: a small asyncio
server that answers Fetch and ListOffsets over TCP (framed and encoded as kesque's handlers do)
from real leader Logs, checking each follower fetch with the sans-IO leader rules
(LeaderReplication), with errors scripted per partition. Also the leader's ListOffsets for a
replica (kesque/server/apis/offsets.py). Each test names the rule it breaks."""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import uuid
from types import SimpleNamespace

import pytest

from kesque.clock import SYSTEM_CLOCK
from kesque.config.broker import BrokerConfig
from kesque.config.topic import LogConfig
from kesque.errors import ErrorCode as E
from kesque.protocol import api
from kesque.protocol.api_keys import ApiKeys
from kesque.protocol.fetch import FetchPartitionResponse, FileRegion, encode_fetch_response, flatten
from kesque.protocol.messages import Msg, to_ms
from kesque.records.records import build_batch
from kesque.replication.quota import ReplicationQuota
from kesque.replication.replica_state import WAIT_FOR_METADATA, LeaderReplication, StorageReplicaLog
from kesque.server.drivers.replica_fetcher import FETCH_VERSION, LIST_OFFSETS_VERSION, ReplicaFetcherManager, fetcher_id
from kesque.storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from kesque.storage.unified_log import UnifiedLog

TOPIC, TOPIC_ID = "t", uuid.UUID(int=0x7E57)
LEADER, FOLLOWER, BROKER_EPOCH = 1, 2, 42
NOW = 1_700_000_000_000
_I32 = struct.Struct(">i")


def new_log(path, partition: int = 0) -> UnifiedLog:
    return UnifiedLog(str(path / f"{TOPIC}-{partition}"), TOPIC, partition, LogConfig(), topic_id=TOPIC_ID, now_ms=NOW)


def batch(value: bytes) -> memoryview:
    return memoryview(bytearray(build_batch([(b"k", value, ())], timestamp=NOW)))


def values(lg: UnifiedLog) -> list[bytes]:
    """One value per batch (every batch here holds one record)."""
    from kesque.records.records import iter_records

    return [next(iter_records(data, 0, h)).value for h, data in lg.read_batches(lg.log_start_offset)]


def raw_batches(lg: UnifiedLog) -> list[bytes]:
    return [bytes(data) for _h, data in lg.read_batches(lg.log_start_offset)]


def record_truncations(lg: UnifiedLog, monkeypatch) -> list[int]:
    out: list[int] = []
    real = lg.truncate_to
    monkeypatch.setattr(lg, "truncate_to", lambda offset: (out.append(offset), real(offset)))
    return out


def checkpoint(lg: UnifiedLog) -> str:
    with open(os.path.join(lg.dir, LEADER_EPOCH_CHECKPOINT)) as f:
        return f.read()


class FakeLeader:
    """Broker ``node_id`` leading partitions of ``t`` (followers 2), answering Fetch and
    ListOffsets from its logs. ``errors[p]``: codes answered (one per fetch) before the rules."""

    def __init__(self, path, partitions: int = 1, node_id: int = LEADER):
        self.node_id = node_id
        self.logs = {p: new_log(path, p) for p in range(partitions)}
        self.reps = {p: LeaderReplication(node_id, min_insync_replicas=1) for p in range(partitions)}
        self.errors: dict[int, list[int]] = {}
        self.top_errors: list[int] = []  # top-level error codes answered first, one per fetch
        self.fetches: list = []  # (client id, kio request)
        self.list_offsets: list = []
        self.server = None
        self.port = None

    # -- the leader's data
    def lead(self, epoch: int, isr=(LEADER, FOLLOWER)) -> None:
        for p, rep in self.reps.items():
            rep.make_leader([self.node_id, FOLLOWER], list(isr), epoch, epoch, StorageReplicaLog(self.logs[p]), 0)

    def commit(self) -> None:
        """The HW to where the ISR allows (a real leader tries after each append)."""
        for p, rep in self.reps.items():
            rep.maybe_increment_high_watermark(StorageReplicaLog(self.logs[p]), 0)

    def produce(self, p: int, *vals: bytes) -> None:
        for v in vals:
            self.logs[p].append_as_leader(batch(v), self.reps[p].leader_epoch, NOW)

    def fetched_partitions(self, i: int) -> set[int]:
        return {fp.partition for t in self.fetches[i][1].topics for fp in t.partitions}

    # -- the server
    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close_server(self) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def stop(self) -> None:
        await self.close_server()
        for lg in self.logs.values():
            lg.close()

    async def serve(self, reader, writer) -> None:
        try:
            while True:
                size = _I32.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                h = api.parse_request_header(frame)
                req = api.decode_request(h.api_key, h.api_version, memoryview(frame)[h.body_offset :])
                if h.api_key == ApiKeys.FETCH:
                    body = flatten(await self.fetch(h, req))
                else:
                    body = api.encode_body(self.list_offset(h, req))
                out = api.response_header(h.correlation_id, h.api_key, h.api_version) + body
                writer.write(_I32.pack(len(out)) + out)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def fetch(self, h, req):
        self.fetches.append((h.client_id, req))
        if self.top_errors:
            return encode_fetch_response(h.api_version, self.top_errors.pop(0), 0, [])
        parts = self.answer(req)
        if not any(p.records_size or p.error_code or p.diverging_epoch for p in parts):
            await asyncio.sleep(to_ms(req.max_wait) / 1000)  # the long poll, without a wake-up
            parts = self.answer(req)
        return encode_fetch_response(h.api_version, 0, 0, [(TOPIC_ID, parts)])

    def answer(self, req) -> list[FetchPartitionResponse]:
        rs = req.replica_state
        out = []
        for t in req.topics:
            assert t.topic_id == TOPIC_ID
            for fp in t.partitions:
                p = fp.partition
                scripted = self.errors.get(p)
                if scripted:
                    out.append(FetchPartitionResponse(p, scripted.pop(0), -1, -1, -1, []))
                    continue
                lg = self.logs[p]
                chk = self.reps[p].on_follower_fetch(
                    rs.replica_id,
                    fp.fetch_offset,
                    fp.last_fetched_epoch,
                    fp.current_leader_epoch,
                    fp.log_start_offset,
                    rs.replica_epoch,
                    StorageReplicaLog(lg),
                    0,
                )
                if chk.error_code or chk.diverging_epoch:
                    out.append(
                        FetchPartitionResponse(
                            p,
                            chk.error_code,
                            chk.high_watermark,
                            -1,
                            chk.log_start_offset,
                            [],
                            diverging_epoch=chk.diverging_epoch,
                        )
                    )
                    continue
                data = lg.read(fp.fetch_offset, fp.partition_max_bytes, lg.log_end_offset, True)
                out.append(
                    FetchPartitionResponse(
                        p,
                        0,
                        chk.high_watermark,
                        -1,
                        chk.log_start_offset,
                        [FileRegion(*r) for r in data.regions],
                        data.size,
                    )
                )
        return out

    def list_offset(self, h, req):
        self.list_offsets.append(req)
        m = Msg(ApiKeys.LIST_OFFSETS, h.api_version)
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                lg = self.logs[p.partition_index]
                off = lg.log_start_offset if p.timestamp == -2 else lg.log_end_offset  # a replica: the LEO
                parts.append(
                    m(
                        "ListOffsetsPartitionResponse",
                        partition_index=p.partition_index,
                        error_code=E.none,
                        timestamp=-1,
                        offset=off,
                        leader_epoch=-1,
                    )
                )
            topics.append(m("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
        return m(throttle_time=0, topics=tuple(topics))


class Part:
    """What the fetcher uses of a Partition (hashable, as Partition is)."""

    def __init__(self, partition: int, log: UnifiedLog):
        self.topic, self.partition, self.topic_id, self.log = TOPIC, partition, TOPIC_ID, log
        self.rlog = StorageReplicaLog(log)  # the view the fetcher shares with the partition
        self.tp = f"{TOPIC}-{partition}"


class Follower:
    """Broker 2's partitions of ``t`` and its fetcher manager."""

    def __init__(self, path, partitions: int = 1, **config):
        self.parts = [Part(p, new_log(path, p)) for p in range(partitions)]
        self.ports: dict[int, int] = {}
        self.progress: list[str] = []
        props = {"node.id": str(FOLLOWER), "replica.fetch.backoff.ms": "20", "replica.fetch.wait.max.ms": "20"}
        props.update({k.replace("_", "."): str(v) for k, v in config.items()})
        self.mgr = ReplicaFetcherManager(
            FOLLOWER,
            BrokerConfig(props),
            SYSTEM_CLOCK,
            self.resolve,
            lambda: BROKER_EPOCH,
            lambda part: self.progress.append(part.tp),
        )

    def resolve(self, broker_id: int):
        port = self.ports.get(broker_id)
        return None if port is None else ("127.0.0.1", port)

    def log(self, p: int = 0) -> UnifiedLog:
        return self.parts[p].log

    def follow(self, leader: FakeLeader, epoch: int, *ps: int) -> None:
        self.ports[leader.node_id] = leader.port
        self.mgr.add_partitions({self.parts[p]: (leader.node_id, epoch) for p in ps or (0,)})

    def state(self, p: int = 0) -> str | None:
        f = self.mgr.where.get((TOPIC, p))
        return None if f is None else f.entries[(TOPIC, p)].fetch.state

    async def close(self) -> None:
        await self.mgr.shutdown()
        for part in self.parts:
            part.log.close()


async def until(cond, what: str, timeout_s: float = 20.0) -> None:
    """Wait for ``cond()`` (a deadlock guard, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def caught_up(f: Follower, ld: FakeLeader, p: int = 0):
    return lambda: (
        f.log(p).log_end_offset == ld.logs[p].log_end_offset and f.log(p).high_watermark == ld.logs[p].log_end_offset
    )


def run(tmp_path, scenario, partitions: int = 1, leaders: int = 1, **config):
    async def main():
        lds = [FakeLeader(tmp_path / f"leader{i}", partitions, node_id=i) for i in (1, 3)[:leaders]]
        for ld in lds:
            await ld.start()
        f = Follower(tmp_path / "follower", partitions, **config)
        try:
            await scenario(f, *lds)
        finally:
            await f.close()
            for ld in lds:
                await ld.stop()

    asyncio.run(main())


# -- catch-up ------------------------------------------------------------------------------------------------
def test_catch_up_across_rounds_keeps_offsets_epochs_and_the_epoch_checkpoint(tmp_path, monkeypatch):
    """2.5 batches a fetch: two whole batches a round, the partial third dropped, rounds across
    the epoch changes, never a truncation. Breaks with a wrong first offset (every answer looks
    stale), the epoch of another batch than the last (a false divergence), or without the HW
    from the answers."""
    size = len(batch(b"v0"))

    async def scenario(f, ld):
        for epoch in (0, 1, 3):
            ld.lead(epoch)
            ld.produce(0, *[b"v%d-%d" % (epoch, i) for i in range(5)])
        truncations = record_truncations(f.log(), monkeypatch)
        f.follow(ld, 3)
        await until(caught_up(f, ld), "catch-up")
        assert raw_batches(f.log()) == raw_batches(ld.logs[0])  # offsets and epochs kept
        assert checkpoint(f.log()) == checkpoint(ld.logs[0]) == "0\n3\n0 0\n1 5\n3 10\n"
        assert truncations == [] and len(ld.fetches) >= 8
        client, req = ld.fetches[0]
        assert client == f"replica-fetcher-{FOLLOWER}-{LEADER}-0"
        assert (req.replica_state.replica_id, req.replica_state.replica_epoch) == (FOLLOWER, BROKER_EPOCH)
        assert (
            to_ms(req.max_wait),
            req.min_bytes,
            req.max_bytes,
            req.isolation_level,
            req.session_id,
            req.session_epoch,
        ) == (20, 1, 10485760, 0, 0, -1)
        fp = req.topics[0].partitions[0]
        assert (
            fp.fetch_offset,
            fp.last_fetched_epoch,
            fp.current_leader_epoch,
            fp.log_start_offset,
            fp.partition_max_bytes,
        ) == (0, -1, 3, 0, size * 5 // 2)
        assert f.progress and set(f.progress) == {"t-0"}
        assert f.mgr.leader_of(f.parts[0]) == LEADER

    run(tmp_path, scenario, replica_fetch_max_bytes=size * 5 // 2)


def test_fetch_versions_are_served_by_kesque():
    from kesque.server.apis.fetch import MAX_VERSION

    assert 15 <= FETCH_VERSION <= MAX_VERSION
    assert api.request_class(ApiKeys.FETCH, FETCH_VERSION) and api.request_class(
        ApiKeys.LIST_OFFSETS, LIST_OFFSETS_VERSION
    )
    assert LIST_OFFSETS_VERSION <= 11  # OffsetApis registers ListOffsets 1..11


def test_fetcher_id_is_kafkas():
    """Java's 31 * hashCode + partition in 32 bits, and Utils.abs(MIN_VALUE) == 0."""
    assert fetcher_id("t", 0, 7) == (31 * 116) % 7
    assert fetcher_id("polygenelubricants", 0, 3) == 0  # hashCode == Integer.MIN_VALUE
    assert fetcher_id("polygenelubricants", 1, 3) == (2**31 - 1) % 3


def test_partitions_spread_over_fetchers_each_with_its_connection(tmp_path):
    async def scenario(f, ld):
        ld.lead(0)
        for p in range(4):
            ld.produce(p, b"a%d" % p, b"b%d" % p)
        f.follow(ld, 0, 0, 1, 2, 3)
        for p in range(4):
            await until(caught_up(f, ld, p), f"catch-up of {p}")
        by_client: dict[str, set[int]] = {}
        for i, (client, _req) in enumerate(ld.fetches):
            by_client.setdefault(client, set()).update(ld.fetched_partitions(i))
        expect: dict[str, set[int]] = {}
        for p in range(4):
            expect.setdefault(f"replica-fetcher-2-1-{fetcher_id(TOPIC, p, 2)}", set()).add(p)
        assert by_client == expect and len(expect) == 2

    run(tmp_path, scenario, partitions=4, num_replica_fetchers=2)


# -- truncation ----------------------------------------------------------------------------------------------
def test_diverging_epoch_truncates_to_the_epoch_end_and_keeps_message2(tmp_path, monkeypatch):
    """Seed 001 §4.1.5: the follower holds message1, message2 (epoch 0) but learned only HW 1, and
    a message3 of epoch 0 the leader never had. The leader wrote message3' in epoch 1 from
    offset 2. The follower truncates to 2 (never to its HW 1): message2 survives. Breaks with
    FollowerFetch.truncate_to_high_watermark, or without the diverging epoch from the answer."""

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"message1", b"message2")
        ld.lead(1)
        ld.produce(0, b"message3'")
        lg = f.log()
        for v in (b"message1", b"message2", b"message3"):
            lg.append_as_leader(batch(v), 0, NOW)
        lg.update_high_watermark(1)
        truncations = record_truncations(lg, monkeypatch)
        f.follow(ld, 1)
        await until(caught_up(f, ld), "catch-up")
        assert values(lg) == [b"message1", b"message2", b"message3'"]
        assert raw_batches(lg) == raw_batches(ld.logs[0])
        assert checkpoint(lg) == checkpoint(ld.logs[0]) == "0\n2\n0 0\n1 2\n"
        assert truncations == [2]

    run(tmp_path, scenario)


def test_offset_out_of_range_asks_list_offsets_and_truncates_to_the_leader_end(tmp_path):
    """An unclean leader behind the follower: OFFSET_OUT_OF_RANGE, then ListOffsets as replica 2
    (EARLIEST, LATEST), then truncation to the leader's end. Breaks without the ListOffsets
    round or with the leader's HW instead of its end."""

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"a", b"b", b"c")
        for v in (b"a", b"b", b"c", b"d", b"e"):
            f.log().append_as_leader(batch(v), 0, NOW)
        f.log().update_high_watermark(2)
        ld.errors[0] = [int(E.offset_out_of_range)]
        f.follow(ld, 0)
        await until(lambda: f.log().log_end_offset == 3 and f.log().high_watermark == 3, "truncation")
        ld.produce(0, b"f")
        await until(caught_up(f, ld), "catch-up")
        assert values(f.log()) == [b"a", b"b", b"c", b"f"]
        asked = [
            (r.replica_id, p.timestamp, p.current_leader_epoch)
            for r in ld.list_offsets
            for t in r.topics
            for p in t.partitions
        ]
        assert asked == [(FOLLOWER, -2, 0), (FOLLOWER, -1, 0)]

    run(tmp_path, scenario)


def test_offset_out_of_range_below_the_leader_log_start_starts_over_there(tmp_path):
    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, *[b"%d" % i for i in range(6)])
        ld.logs[0].update_high_watermark(6)
        ld.logs[0].maybe_increment_log_start_offset(4)
        f.follow(ld, 0)
        await until(caught_up(f, ld), "catch-up")
        assert f.log().log_start_offset == 4 and values(f.log()) == [b"4", b"5"]

    run(tmp_path, scenario)


# -- the follower's replication quota (KIP-73) ---------------------------------------------------------------
def throttle(f: Follower, bound: int | None, *partitions: int) -> ReplicationQuota:
    q = ReplicationQuota("follower")
    q.mark_throttled(TOPIC, set(partitions))
    q.set_bound(bound)
    f.mgr.quota = q
    return q


def test_a_throttled_replica_out_of_sync_is_left_out_while_the_quota_is_exceeded(tmp_path):
    """A new replica (not in the leader's ISR) of a follower-throttled partition: once its first
    batch took the quota over its bound it is in no request, while the other partition goes on;
    only its bytes count; once the bound is lifted it catches up. Breaks without the check in
    the request building, or if an unthrottled partition's bytes count."""
    size = len(batch(b"x" * 100))

    async def scenario(f, ld):
        ld.lead(0, isr=[LEADER])
        ld.produce(0, *[b"a" * 100] * 5)
        ld.produce(1, *[b"b" * 100] * 5)
        ld.commit()
        q = throttle(f, 1, 0)
        f.follow(ld, 0, 0, 1)
        await until(caught_up(f, ld, 1), "catch-up of the partition not throttled")
        assert f.log(0).log_end_offset == 1 and q.is_exceeded(f.mgr.quota_now_ms())
        assert q.rate.total == size  # partition 0's one batch only
        asked = [ld.fetched_partitions(i) for i in range(len(ld.fetches))]
        assert asked[0] == {0, 1} and all(ps == {1} for ps in asked[1:]), asked
        q.set_bound(None)
        await until(caught_up(f, ld, 0), "catch-up once the quota is lifted")
        assert q.rate.total == 5 * size

    run(tmp_path, scenario, partitions=2, replica_fetch_max_bytes=size)


def test_with_every_partition_held_back_the_fetcher_waits_the_backoff(tmp_path):
    """Nothing left to fetch: Kafka's fetcher waits replica.fetch.backoff.ms, then looks again.
    Breaks if it spins (a fetch per loop turn) or if it waits for a wake-up that never comes."""
    size = len(batch(b"x" * 100))

    async def scenario(f, ld):
        ld.lead(0, isr=[LEADER])
        ld.produce(0, *[b"a" * 100] * 3)
        ld.commit()
        q = throttle(f, 1, 0)
        f.follow(ld, 0)
        await until(lambda: f.log().log_end_offset == 1, "the first batch")
        await asyncio.sleep(0.5)
        assert len(ld.fetches) == 1 and q.held >= 2  # held back at every look, 100 ms apart
        q.set_bound(None)
        await until(caught_up(f, ld), "catch-up after a backoff")

    run(tmp_path, scenario, replica_fetch_max_bytes=size, replica_fetch_backoff_ms=100)


def test_a_replica_in_sync_is_never_held_back(tmp_path):
    """A follower in the ISR holds the leader's HW back, so its lag to the HW is 0: in sync, it
    fetches though its partition is throttled and the quota far exceeded. Breaks if the in-sync
    check is left out."""
    size = len(batch(b"x" * 100))

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, *[b"a" * 100] * 6)
        ld.commit()
        q = throttle(f, 1, 0)
        f.follow(ld, 0)
        await until(caught_up(f, ld), "catch-up")
        assert q.rate.total == 6 * size and q.held == 0  # counted all the same

    run(tmp_path, scenario, replica_fetch_max_bytes=size)


# -- errors --------------------------------------------------------------------------------------------------
def test_not_leader_backs_off_that_partition_only_then_resumes(tmp_path):
    """NOT_LEADER_OR_FOLLOWER: the partition waits replica.fetch.backoff.ms while the other keeps
    fetching. Breaks without the backoff (the partition would be in the next request)."""
    backoff_ms = 300

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"x")
        ld.produce(1, b"y")
        ld.errors[0] = [int(E.not_leader_or_follower)]
        f.follow(ld, 0, 0, 1)
        await until(caught_up(f, ld, 0), "catch-up after the backoff")
        asked = [ld.fetched_partitions(i) for i in range(len(ld.fetches))]
        first_error = next(i for i, ps in enumerate(asked) if 0 in ps)
        resumed = next(i for i in range(first_error + 1, len(asked)) if 0 in asked[i])
        assert resumed > first_error + 1 and all(asked[i] == {1} for i in range(first_error + 1, resumed))

    run(tmp_path, scenario, partitions=2, replica_fetch_backoff_ms=backoff_ms)


def test_fenced_leader_epoch_stops_until_added_again(tmp_path):
    """A follower behind the leader epoch gets FENCED_LEADER_EPOCH and sends nothing more for it
    until add_partitions names it again. Breaks if WAIT_FOR_METADATA is fetched again."""

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"x")
        ld.lead(1)
        f.follow(ld, 0)  # metadata not yet at epoch 1
        await until(lambda: f.state() == WAIT_FOR_METADATA, "fenced")
        n = len(ld.fetches)
        await asyncio.sleep(0.2)  # 10 backoffs, 10 long polls
        assert len(ld.fetches) == n and f.log().log_end_offset == 0
        f.follow(ld, 1)
        await until(caught_up(f, ld), "catch-up")

    run(tmp_path, scenario)


def test_remove_partitions_stops_fetching_and_a_new_leader_takes_over(tmp_path):
    """Breaks if removal leaves the partition on its fetcher, or if a new leader does not move
    it off the old leader's fetcher."""

    async def scenario(f, ld1, ld2):
        for ld in (ld1, ld2):
            ld.lead(0)
            ld.produce(0, b"a")
        f.follow(ld1, 0)
        await until(caught_up(f, ld1), "catch-up")
        f.mgr.remove_partitions([f.parts[0]])
        f.mgr.remove_partitions([f.parts[0]])  # idempotent
        assert f.mgr.leader_of(f.parts[0]) is None and not f.mgr.fetchers
        n = len(ld1.fetches)
        ld1.produce(0, b"b")
        await asyncio.sleep(0.2)
        assert len(ld1.fetches) == n and f.log().log_end_offset == 1
        ld2.lead(1)
        ld2.produce(0, b"c")
        f.follow(ld1, 0)
        f.follow(ld2, 1)  # the leader moved before the first fetch
        assert f.mgr.leader_of(f.parts[0]) == 3
        await until(caught_up(f, ld2), "catch-up from the new leader")
        assert values(f.log()) == [b"a", b"c"] and len(ld1.fetches) == n

    run(tmp_path, scenario, leaders=2)


def test_connection_refused_then_the_leader_appears(tmp_path, caplog):
    """Retries while nothing listens, with one WARNING for the whole streak."""
    caplog.set_level(logging.INFO, logger="kesque.server.drivers.replica_fetcher")

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"a", b"b")
        port = ld.port
        await ld.close_server()
        f.follow(ld, 0)
        await until(lambda: any(r.levelno == logging.WARNING for r in caplog.records), "a failure")
        await asyncio.sleep(0.3)  # several attempts (20 ms backoff)
        await ld.start(port)
        await until(caught_up(f, ld), "catch-up")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "cannot connect" in warnings[0].getMessage()
        assert any("fetching from broker 1 again" in r.getMessage() for r in caplog.records)

    run(tmp_path, scenario)


def test_a_top_level_fetch_error_backs_off_and_retries(tmp_path, caplog):
    """A Fetch answered with a top-level error (today's handler refuses replica fetches with
    UNKNOWN_SERVER_ERROR): one WARNING for the streak, retries, then catch-up."""
    caplog.set_level(logging.INFO, logger="kesque.server.drivers.replica_fetcher")

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"a")
        ld.top_errors = [int(E.unknown_server_error)] * 3
        f.follow(ld, 0)
        await until(caught_up(f, ld), "catch-up")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "UNKNOWN_SERVER_ERROR" in warnings[0] and len(ld.fetches) >= 4

    run(tmp_path, scenario)


def test_a_failed_append_backs_off_that_partition_and_refetches_from_the_log(tmp_path, monkeypatch, caplog):
    """The local log fails after appending one batch of three: ERROR with the tp, backoff, then
    the fetch goes on from the log end. Breaks without restarting from the log (every later
    answer is taken for a stale one) or without catching the error."""
    caplog.set_level(logging.INFO, logger="kesque.server.drivers.replica_fetcher")

    async def scenario(f, ld):
        ld.lead(0)
        ld.produce(0, b"a", b"b", b"c")
        lg = f.log()
        real = lg.append_raw

        def fail_once(data, now_ms):
            monkeypatch.setattr(lg, "append_raw", real)
            first = memoryview(data)[: len(batch(b"a"))]
            real(first, now_ms)
            raise OSError("No space left on device")

        monkeypatch.setattr(lg, "append_raw", fail_once)
        f.follow(ld, 0)
        await until(caught_up(f, ld), "catch-up")
        assert values(lg) == [b"a", b"b", b"c"]
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "t-0" in errors[0] and "No space left" in errors[0]

    run(tmp_path, scenario)


def test_shutdown_stops_every_fetcher(tmp_path):
    async def scenario(f, ld):
        ld.lead(0)
        f.follow(ld, 0, 0, 1)
        await until(lambda: len(ld.fetches) >= 2, "fetching")
        tasks = [x.task for x in f.mgr.fetchers.values()]
        await asyncio.wait_for(f.mgr.shutdown(), 10)  # a deadlock guard
        assert all(t.done() for t in tasks) and not f.mgr.fetchers
        n = len(ld.fetches)
        await asyncio.sleep(0.1)
        assert len(ld.fetches) == n

    run(tmp_path, scenario, partitions=2)


# -- the leader's ListOffsets for a replica ------------------------------------------------------------------
@pytest.mark.parametrize("replica_id,latest", [(-1, 0), (2, 3), (-2, 3)])
def test_list_offsets_latest_for_a_replica_is_the_log_end(tmp_path, replica_id, latest):
    """A follower (and the debugging id) gets the leader's log end for LATEST; a consumer the HW."""
    from kesque.replication.partition import Partition
    from kesque.server.apis.offsets import OffsetApis

    lg = new_log(tmp_path)
    part = Partition(TOPIC, 0, TOPIC_ID, lg, LEADER)
    part.make_leader([1, 2], [1, 2], 0, 0)
    for v in (b"a", b"b", b"c"):
        lg.append_as_leader(batch(v), 0, NOW)  # the followers have not fetched: HW 0
    assert lg.high_watermark == 0
    apis = OffsetApis(replica_manager=SimpleNamespace(get_partition=lambda t, p: part))
    m = Msg(ApiKeys.LIST_OFFSETS, 10, request=True)

    def ask(timestamp, rid=replica_id, target=part):
        apis.replica_manager.get_partition = lambda t, p: target
        req = m(
            replica_id=rid,
            isolation_level=0,
            timeout=0,
            topics=(
                m(
                    "ListOffsetsTopic",
                    name=TOPIC,
                    partitions=(
                        m("ListOffsetsPartition", partition_index=0, current_leader_epoch=0, timestamp=timestamp),
                    ),
                ),
            ),
        )
        p = apis.list_offsets(SimpleNamespace(api_version=10, authorizer=None), req).topics[0].partitions[0]
        return int(p.error_code), p.offset

    assert ask(-1) == (0, latest)
    assert ask(-2) == (0, 0)
    follower = Partition(TOPIC, 0, TOPIC_ID, lg, FOLLOWER)
    follower.make_follower(LEADER, [1, 2], 0, 0)
    assert ask(-1, target=follower)[0] == (0 if replica_id == -2 else int(E.not_leader_or_follower))
    lg.close()
