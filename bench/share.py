"""The share-group figures (issue 16, KIP-932), with confluent-kafka's ShareConsumer.

* throughput: one single-partition topic of small records is read by a share group of 1, 2
  and 4 members (threads of this process, each a confluent-kafka ``ShareConsumer``, implicit
  acknowledgement), each pass a fresh group reading from the earliest offset; and by a classic
  consumer assigned to the same partition, in the same run. The clock runs from ``assign()``
  (classic) or from starting the members (share, so their join is inside the figure) to the
  last record; the time to the first record is reported beside it. Every record must be
  delivered exactly once (checked).
* redelivery: a raw member acquires records with one ShareFetch and never acknowledges them;
  a ShareConsumer of the same group, polling, gets them when the lock runs out. The figure is
  the time from the acquiring ShareFetch's answer to the ShareConsumer receiving the records;
  the limit is the group's ``share.record.lock.duration.ms`` plus one ShareFetch round trip
  (the acquiring fetch's, measured in the same pass).

Nothing here asserts on timing. See bench/README.md, "Share groups".
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid

import figures
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition

from kesque.protocol.api_keys import ApiKeys

VALUE_SIZE = 100
LOCK_MS = 2000
# the broker must allow a lock as short as LOCK_MS (Kafka's minimum default is 15 s)
BROKER_CONFIG = {"group.share.enable": "true", "group.share.min.record.lock.duration.ms": "1000"}


def fill(bootstrap: str, topic: str, n: int) -> None:
    """``n`` records ``b"<i>"`` padded to VALUE_SIZE, into partition 0."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "log_level": 3,
        }
    )
    for i in range(n):
        p.produce(topic, str(i).encode().ljust(VALUE_SIZE), partition=0)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(120)


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
        ],
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the result: its handle serves it
    admin.incremental_alter_configs([res])[res].result(30)


# the confluent consume figure's settings (figures.confluent_consume): prefetch never stalls
CLASSIC = {
    "fetch.max.bytes": 64 << 20,
    "max.partition.fetch.bytes": 16 << 20,
    "receive.message.max.bytes": 100 << 20,
    "queued.max.messages.kbytes": 1 << 20,
    "queued.min.messages": 1000000,
    "fetch.wait.max.ms": 100,
}


def classic(bootstrap: str, topic: str, n: int) -> dict:
    """A classic consumer assigned to partition 0 from offset 0, ``assign()`` to the last record."""
    c = Consumer(figures.consumer_conf(bootstrap, **CLASSIC))
    got, first = 0, None
    try:
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, 0)])
        end = time.monotonic() + 120
        while got < n and time.monotonic() < end:
            msgs = c.consume(min(10_000, n - got), 1.0)
            if msgs and first is None:
                first = time.perf_counter()
            got += sum(1 for m in msgs if not m.error())
        last = time.perf_counter()
    finally:
        c.close()
    secs = last - t0
    return {"records": got, "seconds": secs, "rate": got / secs, "first_record_s": first - t0 if first else None}


class _Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str, shared: dict):
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic, self.shared = bootstrap, group, topic, shared
        self.values: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self):
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 3})
        try:
            c.subscribe([self.topic])
            while not self.stop.is_set():
                msgs = c.poll(0.2)
                if not msgs:
                    continue
                now = time.perf_counter()
                with self.shared["lock"]:
                    self.shared["first"] = min(self.shared.get("first", now), now)
                    self.shared["last"] = now
                    self.shared["got"] += len(msgs)
                for m in msgs:
                    if m.error():
                        if len(self.errors) < 5:
                            self.errors.append(str(m.error()))
                    else:
                        self.values.append(m.value())
            c.commit_sync()
        finally:
            c.close()


def share(bootstrap: str, topic: str, n: int, members: int) -> dict:
    """A fresh share group of ``members`` ShareConsumers reading the ``n`` records once."""
    group = f"bench-share-{members}-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    shared = {"lock": threading.Lock(), "got": 0}
    ms = [_Member(bootstrap, group, topic, shared) for _ in range(members)]
    t0 = time.perf_counter()
    for m in ms:
        m.start()
    end = time.monotonic() + 180
    while shared["got"] < n and time.monotonic() < end and any(m.is_alive() for m in ms):
        time.sleep(0.02)
    time.sleep(0.3)  # a duplicate delivery would come with the next fetches
    for m in ms:
        m.stop.set()
    for m in ms:
        m.join(60)
    values = [v for m in ms for v in m.values]
    distinct = len(set(values))
    secs = shared.get("last", t0) - t0
    return {
        "first_record_s": shared["first"] - t0 if "first" in shared else None,
        "members": members,
        "records": len(values),
        "distinct": distinct,
        "duplicates": len(values) - distinct,
        "per_member": [len(m.values) for m in ms],
        "errors": [e for m in ms for e in m.errors][:5],
        "seconds": secs,
        "rate": distinct / secs if secs > 0 else float("nan"),
    }


# ---------------------------------------------------------------------------- redelivery after a lock expiry


def _raw_acquire(bootstrap: str, group: str, topic: str) -> tuple[float, float, int]:
    """Join as a raw member and acquire with one ShareFetch; (answer time, round trip, records)."""
    from kesque.client.wire import Connection, make

    with Connection.to_any(bootstrap, client_id="bench-share-holder") as conn:
        hb = conn.request(
            ApiKeys.SHARE_GROUP_HEARTBEAT,
            lambda mod, v: make(
                mod.request.ShareGroupHeartbeatRequest,
                group_id=group,
                member_id=uuid.uuid4().hex[:22],
                member_epoch=0,
                subscribed_topic_names=(topic,),
            ),
        )
        if int(hb.error_code):
            raise RuntimeError(f"ShareGroupHeartbeat: {hb.error_code.name}")
        member, tid = hb.member_id, hb.assignment.topic_partitions[0].topic_id

        def fetch(mod, v):
            rq = mod.request
            return make(
                rq.ShareFetchRequest,
                group_id=group,
                member_id=member,
                share_session_epoch=0,
                max_wait=0,
                min_bytes=1,
                max_bytes=1 << 20,
                max_records=500,
                batch_size=500,
                topics=(
                    make(
                        rq.FetchTopic,
                        topic_id=tid,
                        partitions=(make(rq.FetchPartition, partition_index=0, acknowledgement_batches=()),),
                    ),
                ),
                forgotten_topics_data=(),
            )

        t0 = time.perf_counter()
        r = conn.request(ApiKeys.SHARE_FETCH, fetch)
        t1 = time.perf_counter()
    # the connection closes, the session does not: the share session outlives its connection
    acquired = sum(
        a.last_offset - a.first_offset + 1 for t in r.responses for p in t.partitions for a in p.acquired_records
    )
    return t1, t1 - t0, acquired


def redelivery(bootstrap: str, topic: str, records: int = 10) -> dict:
    """One pass: ``records`` new records, acquired by a raw member that never acknowledges; the
    time until a polling ShareConsumer of the same group gets them."""
    group = f"bench-redeliver-{uuid.uuid4().hex[:8]}"
    set_group_configs(
        bootstrap, group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS)}
    )
    figures.create_topic(bootstrap, topic, 1)
    fill(bootstrap, topic, records)
    acquired_at, rtt, acquired = _raw_acquire(bootstrap, group, topic)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    got, got_at, counts = 0, None, set()
    try:
        c.subscribe([topic])
        end = time.monotonic() + LOCK_MS / 1000 + 30
        while got < acquired and time.monotonic() < end:
            msgs = [m for m in c.poll(0.1) if not m.error()]
            if msgs and got_at is None:
                got_at = time.perf_counter()
            got += len(msgs)
            counts |= {m.delivery_count() for m in msgs}
        joined = time.perf_counter()
        c.commit_sync()
    finally:
        c.close()
    latency = (got_at - acquired_at) if got_at else float("nan")
    return {
        "acquired": acquired,
        "redelivered": got,
        "delivery_counts": sorted(counts),
        "latency_s": latency,
        "fetch_rtt_s": rtt,
        "limit_s": LOCK_MS / 1000 + rtt,
        "consumer_done_s": joined - acquired_at,
    }


def summary_redelivery(passes: list[dict]) -> dict:
    ok = [p for p in passes if p["latency_s"] == p["latency_s"]]
    return {
        "median_s": statistics.median(p["latency_s"] for p in ok) if ok else float("nan"),
        "max_s": max((p["latency_s"] for p in ok), default=float("nan")),
        "limit_s": statistics.median(p["limit_s"] for p in ok) if ok else float("nan"),
    }
