"""Log compaction in a running broker: the background cleaner, seen through real clients."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clientlib import segment_batches, segment_files, wait_for_log
from conftest import running_broker
from kesque.protocol.api_keys import ApiKeys
from wire import Msg, WireClient

CLEANER = {"log.cleaner.backoff.ms": "50"}
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}


def create(bootstrap: str, topic: str, config: dict) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        f.result()


def read_all(bootstrap: str, topic: str, start: int = 0, end: int | None = None) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) from ``start`` up to the partition's end."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )  # from the log start when retention moved it past ``start``
    try:
        if end is None:
            end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        c.assign([TopicPartition(topic, 0, start)])
        out = []
        while not out or out[-1][0] < end - 1:
            m = c.poll(10)
            assert m is not None, f"no record after {out[-1:]} (end {end})"
            assert not m.error(), m.error()
            out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def test_user_email_topic_keeps_the_last_address_of_every_user(tmp_path):
    """Seed 000's example: users change addresses many times; after cleaning each user keeps
    the last one at its offset, and a fetch from a removed offset starts at the next survivor."""
    with running_broker(tmp_path / "data", CLEANER) as b:
        create(b.bootstrap_servers, "user-emails", COMPACTED)
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
        last = {}
        for rnd in range(4):  # rounds 150 ms apart: segment.ms rolls a segment per round
            for i in range(25):
                uid = b"%d" % (123 + i % 5)
                last[uid] = b"user%s@round-%d-%d.example" % (uid, rnd, i)
                p.produce("user-emails", key=uid, value=last[uid])
            p.flush(10)
            time.sleep(0.15)
        p.produce("user-emails", key=b"999", value=b"rolls the last round out of the active segment")
        p.flush(10)
        deadline = time.monotonic() + 30
        while True:  # the cleaner runs in the background: wait until it has caught up
            got = read_all(b.bootstrap_servers, "user-emails")
            survivors = [r for r in got if r[1] != b"999"]
            if len(survivors) == len(last) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sorted((k, v) for _o, k, v in survivors) == sorted(last.items())  # each user's last address
        assert [o for o, k, _v in survivors] == [95 + j for j in range(5)]  # at its offset
        text = wait_for_log(b, "Log cleaner finished user-emails-0")
        assert "no log cleaner" not in text
        assert "cleaner-recopy-percent=" in text and "uncleanable-partitions-count=0" in text
        first = survivors[0][0]
        for start in (first - 3, first - 1):  # inside the compacted gap: the next survivor
            assert read_all(b.bootstrap_servers, "user-emails", start, got[-1][0] + 1)[0][0] == first


def test_compact_delete_both_compacts_and_applies_retention(tmp_path):
    """cleanup.policy=compact,delete: the head is compacted to the last value of each key and
    segments past retention.ms go whole, whatever keys they hold."""
    with running_broker(tmp_path / "data", {**CLEANER, "log.retention.check.interval.ms": "100"}) as b:
        create(b.bootstrap_servers, "both", {**COMPACTED, "cleanup.policy": "compact,delete", "retention.ms": "600000"})
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
        hour_ago = int(time.time() * 1000) - 3_600_000
        for i in range(25):  # past retention: their segment goes, keys "old-*" with it
            p.produce("both", key=b"old-%d" % (i % 5), value=b"%d" % i, timestamp=hour_ago)
        p.flush(10)
        time.sleep(0.15)  # segment.ms: the next round starts a segment of its own
        last = {}
        for i in range(25):
            last[b"k%d" % (i % 5)] = b"%d" % i
            p.produce("both", key=b"k%d" % (i % 5), value=b"%d" % i)
        p.flush(10)
        time.sleep(0.15)
        p.produce("both", key=b"tail", value=b"rolls the last round out of the active segment")
        p.flush(10)

        def settled():
            got = read_all(b.bootstrap_servers, "both")
            return [(o, k, v) for o, k, v in got if k != b"tail"]

        assert _wait_for(lambda: len(settled()) == len(last)), settled()
        survivors = settled()
        assert sorted((k, v) for _o, k, v in survivors) == sorted(last.items())
        assert [o for o, _k, _v in survivors] == list(range(45, 50))
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g"})
        try:  # retention moved the log start past the old round (compaction alone never does)
            assert c.get_watermark_offsets(TopicPartition("both", 0), timeout=10)[0] >= 25
        finally:
            c.close()


@pytest.mark.parametrize(
    "key,value",
    [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("delete.retention.ms", "-1"),
        ("cleanup.policy", "compcat"),
        ("max.compaction.lag.ms", "0"),
        ("min.compaction.lag.ms", "-5"),
    ],
)
def test_bad_compaction_settings_are_refused(module_broker, topic_name, key, value):
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap_servers})
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic(topic_name, 1, 1, config={key: value})])[topic_name].result()
    err = e.value.args[0]
    assert err.name() == "INVALID_CONFIG" and key in err.str(), err


INTERNAL = {
    **CLEANER,
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "1048576",
    "log.cleaner.min.cleanable.ratio": "0.1",
}


def _wait_for(predicate, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def test_consumer_offsets_are_compacted_and_load_after_a_restart(tmp_path):
    """A group committing again and again keeps about one record per partition in
    __consumer_offsets once cleaned, and the coordinator loads the right offsets from it."""
    commits = 2500  # with 1000 bytes of metadata each: three segments of 1 MiB (the least segment.bytes)
    with running_broker(tmp_path / "data", INTERNAL) as b:
        create(b.bootstrap_servers, "src", {})
        early = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "early", "enable.auto.commit": False})
        early.commit(offsets=[TopicPartition("src", 0, 7)], asynchronous=False)  # lands in a cleaned segment
        early.close()
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "committer", "enable.auto.commit": False})
        for i in range(1, commits + 1):
            c.commit(offsets=[TopicPartition("src", 0, i, metadata="m" * 1000)], asynchronous=False)
        c.close()
        data_dir = str(tmp_path / "data")

        def cleaned_records():  # records left in the segments before the active one
            segs = segment_files(data_dir, "__consumer_offsets", 0)
            active = int(os.path.basename(segs[-1]).split(".")[0])
            return sum(h.count for h in segment_batches(data_dir, "__consumer_offsets", 0) if h.base_offset < active)

        assert _wait_for(lambda: cleaned_records() <= 2), cleaned_records()  # a key per group and partition
        b.restart()
        for group, offset in (("early", 7), ("committer", commits)):
            c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": group})
            try:
                assert c.committed([TopicPartition("src", 0)], timeout=10)[0].offset == offset
            finally:
                c.close()


def test_transaction_state_is_compacted_and_loads_after_a_restart(tmp_path):
    """__transaction_state keeps about the last record of each transactional id once cleaned,
    and the coordinator loads it: the producer's next generation fences the old one."""
    config = {
        **CLEANER,
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.segment.bytes": "1048576",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "log.cleaner.min.cleanable.ratio": "0.1",
    }
    txn_id = "t" * 3000  # big records: three 1 MiB segments in a few hundred transactions
    with running_broker(tmp_path / "data", config) as b:
        create(b.bootstrap_servers, "src", {})
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": txn_id, "linger.ms": 0})
        p.init_transactions(10)
        n = 150
        for i in range(n):
            p.begin_transaction()
            p.produce("src", key=b"k", value=b"%d" % i)
            p.commit_transaction(10)
        data_dir = str(tmp_path / "data")

        def cleaned_records():
            segs = segment_files(data_dir, "__transaction_state", 0)
            active = int(os.path.basename(segs[-1]).split(".")[0])
            return sum(h.count for h in segment_batches(data_dir, "__transaction_state", 0) if h.base_offset < active)

        assert len(segment_files(data_dir, "__transaction_state", 0)) > 1
        assert _wait_for(lambda: cleaned_records() <= 1), cleaned_records()
        b.restart()
        again = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": txn_id})
        again.init_transactions(10)  # loads the id's state and bumps its epoch
        again.begin_transaction()
        again.produce("src", key=b"k", value=b"after")
        again.commit_transaction(10)
        with pytest.raises(KafkaException):  # the old generation is fenced
            p.begin_transaction()
            p.produce("src", key=b"k", value=b"zombie")
            p.commit_transaction(10)
        got = read_all(b.bootstrap_servers, "src", 0, 2 * n + 1)  # each transaction: a record and its marker
        assert got[-1][2] == b"after" and b"zombie" not in [v for _o, _k, v in got]


def test_cleaning_while_producers_and_consumers_run(tmp_path):
    """Producers keep updating keys and a consumer keeps reading from the start while the
    cleaner swaps segments under them: offsets only go up, nothing fails, and the last value
    of every key is there in the end."""
    with running_broker(tmp_path / "data", CLEANER) as b:
        create(b.bootstrap_servers, "live", {**COMPACTED, "segment.ms": "50"})
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 5})
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "reader", "enable.auto.commit": False})
        c.assign([TopicPartition("live", 0, 0)])
        last, seen, offsets = {}, {}, []
        for rnd in range(30):
            for i in range(50):
                key = b"k%d" % (i % 10)
                last[key] = b"%d-%d" % (rnd, i)
                p.produce("live", key=key, value=last[key])
            p.flush(10)
            for m in c.consume(200, 0.02):
                assert not m.error(), m.error()
                offsets.append(m.offset())
                seen[m.key()] = m.value()
        p.produce("live", key=b"end", value=b"end")
        p.flush(10)
        while seen.get(b"end") != b"end":
            for m in c.consume(200, 1):
                assert not m.error(), m.error()
                offsets.append(m.offset())
                seen[m.key()] = m.value()
        c.close()
        assert offsets == sorted(set(offsets))
        assert {k: seen[k] for k in last} == last
        wait_for_log(b, "Log cleaner finished live-0")
        assert len(read_all(b.bootstrap_servers, "live")) < 30 * 50 + 1  # the cleaner did remove records


def test_spark_sink_log_reads_the_last_commit_of_each_query_after_cleaning(tmp_path):
    """The Spark sink's commit log is a compacted topic read backwards in windows: once cleaned
    (gaps where older commits were), each query's last commit is still the one found."""
    from kesque.spark import sink
    from kesque.spark.options import sink_options

    config = {**CLEANER, "log.roll.ms": "100", "log.cleaner.min.cleanable.ratio": "0.01"}
    with running_broker(tmp_path / "data", config) as b:
        opts = {
            q: sink_options(
                {"kafka.bootstrap.servers": b.bootstrap_servers, "topic": "out", "transactionalIdPrefix": q}
            )
            for q in ("qa", "qb")
        }
        assert sink.SinkLog(opts["qa"]).last() is None  # as a commit does first: creates the compacted topic
        for batch in range(300):  # qb commits rarely: its last record lies far behind qa's
            sink.SinkLog(opts["qa"]).append({"batchId": batch, "state": "committed"})
            if batch % 100 == 0:
                sink.SinkLog(opts["qb"]).append({"batchId": batch, "state": "committed"})
            if batch % 50 == 49:
                time.sleep(0.12)  # log.roll.ms: a segment per round, cleanable behind the active one
        sink.SinkLog(opts["qa"]).append({"batchId": 300, "state": "committed"})
        topic = opts["qa"].sink_log_topic
        data_dir = str(tmp_path / "data")
        assert _wait_for(lambda: sum(h.count for h in segment_batches(data_dir, topic, 0)) < 20)
        assert sink.SinkLog(opts["qa"]).last() == {"batchId": 300, "state": "committed"}
        assert sink.SinkLog(opts["qb"]).last() == {"batchId": 200, "state": "committed"}


def test_share_group_state_is_compacted_and_loads_after_a_restart(tmp_path):
    """Acknowledgements one at a time write a ShareUpdate each (a ShareSnapshot every 500):
    once __share_group_state is cleaned, the share coordinator still loads every one of them,
    so after a restart no accepted record comes again and every held one does."""
    from test_share_groups import SHARE_CONFIG, _acquired, _share_ack, _share_fetch, _wire_group

    config = {
        **CLEANER,
        **SHARE_CONFIG,
        "share.coordinator.state.topic.num.partitions": "1",
        "share.coordinator.state.topic.segment.bytes": "1048576",
        "log.cleaner.min.cleanable.ratio": "0.1",
    }
    group = "s" * 3000  # big state records: a 1 MiB segment in about 340 writes
    n = 1100
    with running_broker(tmp_path / "data", config) as b:
        _topic, group, tid = _wire_group(b, n, group, **{"share.record.lock.duration.ms": "60000"})
        with WireClient(b.bootstrap_servers) as c:
            epoch, acquired = 0, 0
            while acquired < n:
                ranges = _acquired(_share_fetch(c, group, "m1", epoch, tid))
                acquired += sum(last - first + 1 for first, last, _ in ranges)
                epoch += 1
            held = set(range(0, n, 10))  # acquired, never acknowledged: the start offset stays at 0
            for o in sorted(set(range(n)) - held):  # ~1000 writes: the updates after the last snapshot span segments
                epoch += 1
                _share_ack(c, group, "m1", epoch - 1, tid, [(o, o, 1)])
        data_dir = str(tmp_path / "data")

        def cleaned_records():  # a ShareSnapshot and a ShareUpdate once cleaned
            segs = segment_files(data_dir, "__share_group_state", 0)
            active = int(os.path.basename(segs[-1]).split(".")[0])
            return sum(h.count for h in segment_batches(data_dir, "__share_group_state", 0) if h.base_offset < active)

        assert len(segment_files(data_dir, "__share_group_state", 0)) > 2
        assert _wait_for(lambda: cleaned_records() <= 2), cleaned_records()
        b.restart()
        with WireClient(b.bootstrap_servers) as c:
            r = c.request(
                ApiKeys.SHARE_GROUP_HEARTBEAT,
                1,
                Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, 1)(
                    group_id=group, member_id="m2", member_epoch=0, subscribed_topic_names=(_topic,)
                ),
            )
            assert r.error_code == 0, r
            got, epoch = [], 0
            while True:
                ranges = _acquired(_share_fetch(c, group, "m2", epoch, tid, max_wait=500))
                epoch += 1
                if not ranges:
                    break
                got += [(o, count) for first, last, count in ranges for o in range(first, last + 1)]
    assert sorted(o for o, _ in got) == sorted(held), f"accepted again: {sorted({o for o, _ in got} - held)[:20]}"
    assert {count for _, count in got} == {2}


def replica_records(cluster, node: int, topic: str) -> dict[int, tuple[bytes, bytes]]:
    """offset -> (key, value) of every record in one replica's segment files (dump-log)."""
    import re
    import subprocess
    import sys

    d = os.path.join(cluster.data_dir, f"node-{node}", "data", f"{topic}-0")
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".log"))
    r = subprocess.run(
        [sys.executable, "-m", "kesque", "dump-log", "--print-data-log", "--files", ",".join(files)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return {
        int(m.group(1)): (m.group(2).encode(), m.group(3).encode())
        for m in re.finditer(r"\| offset: (\d+) .* key: (\S+) payload: (\S+)", r.stdout)
    }


def latest_by_key(records: dict) -> dict:
    out = {}
    for offset in sorted(records):
        k, v = records[offset]
        out[k] = (offset, v)
    return out


def test_every_replica_of_a_compacted_topic_cleans_its_own_copy(tmp_path):
    """Issue 15 test 6: on a replicated compacted topic (RF 3) each replica's cleaner compacts
    its own log, and a follower that was down catches up from the compacted leader (fetching
    across the offsets cleaning removed): every replica ends with the same last value of every
    key at the same offset, and no replica holds an offset with a record another does not agree on."""
    from kesque.testing.cluster import Cluster
    from test_replication import create as create_replicated

    topic = "replicated-emails"
    with Cluster(
        nodes=3,
        data_dir=str(tmp_path),
        config={**CLEANER, "broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000"},
    ) as c:
        try:
            create_replicated(c, topic, 3, *(f"{k}={v}" for k, v in COMPACTED.items()), assignment="1:2:3")
            p = Producer({"bootstrap.servers": c.bootstrap_servers, "linger.ms": 0, "acks": "all"})

            def rounds(first: int, n: int) -> None:
                for rnd in range(first, first + n):  # segment.ms rolls a segment per round
                    for i in range(20):
                        p.produce(topic, key=b"user%d" % (i % 4), value=b"r%d-%d" % (rnd, i))
                    p.flush(10)
                    time.sleep(0.15)

            rounds(0, 3)
            c.kill(3)  # a follower misses the next rounds and their cleaning
            rounds(3, 3)
            p.produce(topic, key=b"last", value=b"rolls-the-last-round-out")
            p.flush(10)
            for node in (1, 2):
                wait_for_log(c.node(node), f"Log cleaner finished {topic}-0", timeout=30)
            c.restart(3)
            deadline = time.monotonic() + 30
            while True:
                replicas = {n: replica_records(c, n, topic) for n in (1, 2, 3)}
                latest = {n: latest_by_key(r) for n, r in replicas.items()}
                if latest[1] == latest[2] == latest[3] or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert latest[1] == latest[2] == latest[3] and len(latest[1]) == 5
            assert len(replicas[1]) < 6 * 20  # the leader's copy was cleaned
            for offset in set(replicas[1]) & set(replicas[3]):  # no divergence where both hold an offset
                assert replicas[1][offset] == replicas[3][offset]
        finally:
            for b in c.nodes.values():
                if b.process is not None:
                    b.kill()
