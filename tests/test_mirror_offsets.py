"""Consumer offsets copied over a cluster link (issue 28, docs/mirror.md "Consumer offsets"): the
group filters and the transactional rule, sans-IO; kesque → kesque in-process: a group's offsets
copied and resumed from at the destination, an active destination group left alone, a source
transaction's sendOffsetsToTransaction offsets held until its commit marker is mirrored, and a
plain consumer group failing over (issue test 5: nothing lost, the duplicates measured)."""

from __future__ import annotations

import logging
import tempfile
import time

import pytest

from kesque.mirror import links as link_rules
from kesque.mirror import offsets as rules
from mirrorlib import read_committed, thread_brokers, tool

# ------------------------------------------------------------------ sans-IO


def test_group_filters_as_confluent_writes_them():
    f = rules.parse_group_filters(
        '{"groupFilters": [{"name": "app-", "patternType": "PREFIXED", "filterType": "INCLUDE"},'
        ' {"name": "app-test", "patternType": "LITERAL", "filterType": "EXCLUDE"},'
        ' {"name": "billing"}]}'
    )
    assert [g for g in ("app-a", "app-test", "billing", "billing2", "x") if rules.chosen(g, f)] == ["app-a", "billing"]
    every = rules.parse_group_filters('{"groupFilters": [{"name": "*", "patternType": "LITERAL"}]}')
    assert rules.chosen("anything", every)
    assert not rules.chosen("g", rules.parse_group_filters(None))  # no filters: no group
    for bad in ("{", '{"groupFilters": 3}', '{"groupFilters": [{"name": "a", "patternType": "REGEX"}]}'):
        with pytest.raises(ValueError):
            rules.parse_group_filters(bad)
    # a link with bad offset settings is refused at creation
    base = {"bootstrap.servers": "h:1"}
    assert link_rules.check_link_configs({**base, rules.GROUP_FILTERS: "{"}).startswith(rules.GROUP_FILTERS)
    assert link_rules.check_link_configs({**base, rules.SYNC_MS: "0"}) is not None
    assert link_rules.check_link_configs({**base, rules.SYNC_MS: "100", rules.SYNC_ENABLE: "true"}) is None
    assert rules.sync_enabled({rules.SYNC_ENABLE: "TRUE"}) and not rules.sync_enabled({})
    assert rules.sync_interval_ms({}) == 30000


def test_the_transactional_rule():
    copy = rules.OffsetCopy({"g": {("in", 0): 5, ("in", 1): 9}}, {("in", 0): 5, ("in", 1): 9, ("out", 0): 12})
    # the output partition's LSO at the destination is below the source's HW read after the
    # offsets: a transaction that committed them may have its marker there still to come
    assert copy.waiting_on({("in", 0): 5, ("in", 1): 9, ("out", 0): 11}) == [("out", 0, 11, 12)]
    assert copy.waiting_on({("in", 0): 5, ("in", 1): 9}) == [("out", 0, -1, 12)]  # unknown: waits
    assert copy.waiting_on({("in", 0): 5, ("in", 1): 10, ("out", 0): 12}) == []
    # never past the mirror's own log end
    assert copy.to_apply("g", {("in", 0): 5, ("in", 1): 8}) == {("in", 0): 5}
    assert copy.to_apply("other", {("in", 0): 5}) == {}
    # a topic failed over meanwhile is the destination's own: left out of the copy
    left = copy.restricted({("in", 0), ("in", 1)})
    assert left.source_hw == {("in", 0): 5, ("in", 1): 9} and left.offsets == copy.offsets
    assert copy.restricted({("out", 0)}) == rules.OffsetCopy({}, {("out", 0): 12})


# ------------------------------------------------------------------ kesque → kesque


@pytest.fixture
def pair():
    with thread_brokers() as brokers:
        yield brokers


def _link(src, dst, sync_ms=100, groups='[{"name": "*", "patternType": "LITERAL", "filterType": "INCLUDE"}]'):
    d = dst.bootstrap_servers
    cfg = ",".join(
        [
            f"bootstrap.servers={src.bootstrap_servers}",
            "consumer.offset.sync.enable=true",
            f"consumer.offset.sync.ms={sync_ms}",
            "metadata.max.age.ms=500",
        ]
    )
    # --config splits on commas: the JSON filters go in a file
    with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as f:
        f.write(cfg.replace(",", "\n") + f'\nconsumer.offset.group.filters={{"groupFilters": {groups}}}\n')
    assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "L", "--config-file", f.name)[0] == 0


def _mirror(dst, *topics):
    for t in topics:
        code, out, err = tool("mirrors", "--bootstrap-server", dst.bootstrap_servers, "--create", "--mirror-topic", t,
                              "--link", "L")  # fmt: skip
        assert code == 0, err


def _create(bootstrap, *topics, partitions=2):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _t, fut in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).items():
        fut.result(15)


def _produce(bootstrap, topic, n, partitions=2, prefix="r"):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"{prefix}-{i}".encode(), partition=i % partitions)
    assert p.flush(15) == 0


def _committed(bootstrap, group, topic, partitions=2) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def _wait(fn, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def _consume(bootstrap, group, topic, n_max, commit_every=0, timeout=10.0) -> list:
    """(partition, offset, value) of the records a member of ``group`` reads until ``n_max`` or
    idle; commits synchronously every ``commit_every`` records (0: at the end)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )
    out = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        idle = None
        while len(out) < n_max and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if out and idle and time.monotonic() - idle > 1.5:
                    break
                continue
            idle = time.monotonic()
            assert not m.error(), m.error()
            out.append((m.partition(), m.offset(), m.value()))
            if commit_every and len(out) % commit_every == 0:
                c.commit(message=m, asynchronous=False)
        if not commit_every and out:
            c.commit(asynchronous=False)
    finally:
        c.close()
    return out


def test_offsets_are_copied_and_an_active_group_is_left_alone(pair, caplog):
    from confluent_kafka import Consumer

    caplog.set_level(logging.INFO, logger="kesque.server.drivers.mirror_offsets")

    src, dst = pair
    s, d = src.bootstrap_servers, dst.bootstrap_servers
    _create(s, "ev")
    _produce(s, "ev", 20)
    _link(src, dst)
    _mirror(dst, "ev")
    first = _consume(s, "app", "ev", 12)  # commits its position at the end
    assert len(first) == 12
    src_offsets = _committed(s, "app", "ev")
    assert _wait(lambda: _committed(d, "app", "ev") == src_offsets), (_committed(d, "app", "ev"), src_offsets)
    # kesque consumer-groups --describe at the destination shows them
    code, out, _ = tool("consumer-groups", "--bootstrap-server", d, "--describe", "--group", "app")
    cells = [line.split() for line in out.splitlines()]
    rows = {(r[1], int(r[2]), int(r[3])) for r in cells if len(r) > 3 and r[2].isdigit()}
    assert code == 0 and {("ev", p, o) for p, o in src_offsets.items()} <= rows, out
    # a consumer at the destination resumes from them: the 8 records the source's did not read
    rest = _consume(d, "app", "ev", 100)
    assert sorted(v for _p, _o, v in rest) == sorted(
        {f"r-{i}".encode() for i in range(20)} - {v for _p, _o, v in first}
    )
    # an active group at the destination is not overwritten
    member = Consumer({"bootstrap.servers": d, "group.id": "busy", "enable.auto.commit": False,
                       "auto.offset.reset": "latest"})  # fmt: skip
    member.subscribe(["ev"])
    deadline = time.monotonic() + 15
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.1)
    assert member.assignment()
    assert len(_consume(s, "busy", "ev", 5)) == 5  # the source's "busy" commits
    end = time.monotonic() + 1.0  # ten intervals, the member polling all along
    while time.monotonic() < end:
        member.poll(0.1)
    assert _committed(d, "busy", "ev") == {}
    assert "group busy not copied: it has 1 member(s) here (active)" in caplog.text
    member.close()  # empty now: copied
    want = _committed(s, "busy", "ev")
    assert _wait(lambda: _committed(d, "busy", "ev") == want)


def test_a_transactions_offsets_wait_for_its_commit_marker(pair, caplog):
    """A read-process-write transaction at the source commits its input offsets with its output
    (sendOffsetsToTransaction). While the output's mirror is paused, its commit marker is not at
    the destination: the offsets are not applied there (a consumer failing over would skip input
    whose output it cannot read); once the mirror resumes and the marker is copied, they are."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    caplog.set_level(logging.INFO, logger="kesque.server.drivers.mirror_offsets")
    src, dst = pair
    s, d = src.bootstrap_servers, dst.bootstrap_servers
    _create(s, "in", "out")
    _produce(s, "in", 10)
    _link(src, dst)
    _mirror(dst, "in", "out")
    assert tool("mirrors", "--bootstrap-server", d, "--pause", "--topics", "out")[0] == 0
    time.sleep(0.3)
    proc = Consumer({"bootstrap.servers": s, "group.id": "pipe", "enable.auto.commit": False})
    txn = Producer({"bootstrap.servers": s, "transactional.id": "pipe-1", "linger.ms": 0})
    txn.init_transactions(15)
    txn.begin_transaction()
    for i in range(10):
        txn.produce("out", f"out-{i}".encode(), partition=i % 2)
    txn.send_offsets_to_transaction(
        [TopicPartition("in", 0, 5), TopicPartition("in", 1, 5)], proc.consumer_group_metadata(), 15
    )
    txn.commit_transaction(15)
    proc.close()
    assert _committed(s, "pipe", "in") == {0: 5, 1: 5}
    time.sleep(1.5)  # fifteen sync intervals: the copy read the offsets and waits for "out"
    assert _committed(d, "pipe", "in") == {}
    assert caplog.text.count("consumer offsets wait for the mirror") == 1, caplog.text  # said once
    assert tool("mirrors", "--bootstrap-server", d, "--resume", "--topics", "out")[0] == 0
    assert _wait(lambda: _committed(d, "pipe", "in") == {0: 5, 1: 5})
    # and the output is readable at the destination with them: whole
    got = read_committed(d, "out", 2)
    assert sorted(v for recs in got.values() for _o, v in recs) == sorted(f"out-{i}".encode() for i in range(10))


def test_a_plain_consumer_group_fails_over(pair, capsys):
    """Issue test 5: a group consuming at the source fails over to the destination: no record is
    lost, and the records it reads twice are at most those after the last offset copy (measured,
    printed)."""
    src, dst = pair
    s, d = src.bootstrap_servers, dst.bootstrap_servers
    n = 200
    _create(s, "feed")
    _produce(s, "feed", n, prefix="f")
    _link(src, dst, sync_ms=300)
    _mirror(dst, "feed")
    # the group reads 80 records committing every 10, and its offsets are copied; then it reads 40
    # more, committing every 10, and the source dies at once (its last commits not copied yet)
    before = _consume(s, "feed-app", "feed", 80, commit_every=10)
    assert len(before) == 80
    want = _committed(s, "feed-app", "feed")
    assert _wait(lambda: _committed(d, "feed-app", "feed") == want)
    more = _consume(s, "feed-app", "feed", 40, commit_every=10)
    assert len(more) == 40
    before += more
    src_committed = _committed(s, "feed-app", "feed")
    src.stop()  # the source is gone
    copied = _committed(d, "feed-app", "feed")
    code, out, err = tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", "feed")
    assert code == 0, err
    after = _consume(d, "feed-app", "feed", 1000)
    seen_before = {(p, o) for p, o, _v in before}
    seen_after = {(p, o) for p, o, _v in after}
    # nothing lost
    assert {v for _p, _o, v in before} | {v for _p, _o, v in after} == {f"f-{i}".encode() for i in range(n)}
    dupes = len(seen_before & seen_after)
    # read twice: at most what the source's group had read past the last copied offsets
    assert copied
    bound = sum(1 for p, o, _v in before if o >= copied.get(p, 0))
    with capsys.disabled():
        print(
            f"\nfailover of a plain group: source committed {src_committed}, copied {copied} "
            f"(sync every 300 ms), {dupes} records read twice (bound {bound}), none lost"
        )
    assert dupes <= bound


@pytest.mark.mirror
def test_a_three_node_destination():
    """The destination has 3 nodes (replication factor 3): the copier on the group's coordinator
    reads the LSO of the mirror partitions other nodes lead over the inter-broker listener; the
    transactional rule holds there too."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from kesque.testing.broker import Broker
    from kesque.testing.cluster import Cluster

    src, dest = Broker(mode="thread").start(), Cluster(nodes=3)
    try:
        dest.start()
        s, d = src.bootstrap_servers, dest.bootstrap_servers
        _create(s, "in", "out", partitions=3)
        _produce(s, "in", 30, partitions=3)
        _link(src, dest)
        for t in ("in", "out"):
            code, _out, err = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", t,
                                   "--link", "L", "--replication-factor", "3")  # fmt: skip
            assert code == 0, err
        md = AdminClient({"bootstrap.servers": d}).list_topics("out", timeout=15).topics["out"].partitions
        assert len({p.leader for p in md.values()}) > 1  # the leaders are spread over the nodes
        assert tool("mirrors", "--bootstrap-server", d, "--pause", "--topics", "out")[0] == 0
        time.sleep(0.5)
        proc = Consumer({"bootstrap.servers": s, "group.id": "pipe", "enable.auto.commit": False})
        txn = Producer({"bootstrap.servers": s, "transactional.id": "pipe-3", "linger.ms": 0})
        txn.init_transactions(15)
        txn.begin_transaction()
        for i in range(6):
            txn.produce("out", f"out-{i}".encode(), partition=i % 3)
        txn.send_offsets_to_transaction([TopicPartition("in", p, 4) for p in range(3)], proc.consumer_group_metadata())
        txn.commit_transaction(15)
        proc.close()
        time.sleep(2.0)
        assert _committed(d, "pipe", "in", 3) == {}
        assert tool("mirrors", "--bootstrap-server", d, "--resume", "--topics", "out")[0] == 0
        assert _wait(lambda: _committed(d, "pipe", "in", 3) == {0: 4, 1: 4, 2: 4}, timeout=30)
        first = _consume(s, "app", "in", 12)
        assert len(first) == 12
        want = _committed(s, "app", "in", 3)
        assert _wait(lambda: _committed(d, "app", "in", 3) == want, timeout=30)
    finally:
        dest.stop()
        src.stop()


def test_the_offset_log_replay_applies_what_its_markers_commit():
    """The offsets mirror's replay, as a group coordinator loads its partition: plain commits at
    once, transactional ones at their COMMIT marker, dropped at ABORT or when still open at the
    end (the failover aborts those records), tombstones delete."""
    r = rules.OffsetLogReplay()
    r.commit(-1, "g", ("in", 0), (3, 1, ""))
    r.commit(7, "pipe", ("in", 0), (5, 1, "m"))
    r.commit(8, "pipe", ("in", 1), (9, 1, ""))
    assert r.offsets == {"g": {("in", 0): (3, 1, "")}}
    r.marker(7, True)
    r.marker(8, False)
    assert r.offsets["pipe"] == {("in", 0): (5, 1, "m")}
    r.commit(7, "pipe", ("in", 0), (8, 1, ""))  # the next transaction, never ended
    r.commit(-1, "g", ("in", 0), None)
    assert r.offsets == {"g": {}, "pipe": {("in", 0): (5, 1, "m")}} and r.open_transactions() == 1


def test_a_failover_applies_the_offsets_of_the_last_transaction_the_destination_holds(pair, capsys):
    """The offsets a read-process-write pipeline commits in its transactions travel with its
    output: the link mirrors the source's __consumer_offsets, and the failover replays it. The
    periodic copy is made never to run after the pipeline starts (an interval of ten minutes), so
    only the replay can give the destination the offsets of the last committed transaction; the
    transaction left open when the source dies counts neither its output nor its offsets."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    src, dst = pair
    s, d = src.bootstrap_servers, dst.bootstrap_servers
    _create(s, "in", "out")
    _produce(s, "in", 20)
    assert len(_consume(s, "warm-up", "in", 1)) == 1  # the source's __consumer_offsets exists now
    _link(src, dst, sync_ms=600_000)
    _mirror(dst, "in", "out")
    offsets_mirror = "_link.L.consumer_offsets"
    # the copier's first round created the offsets mirror; its next round is ten minutes away
    describe = lambda: tool("mirrors", "--bootstrap-server", d, "--describe", "--topics", offsets_mirror)  # noqa: E731
    assert _wait(lambda: describe()[0] == 0, 20), describe()
    assert "SourceTopic: __consumer_offsets" in describe()[1]
    proc = Consumer({"bootstrap.servers": s, "group.id": "pipe", "enable.auto.commit": False})
    txn = Producer({"bootstrap.servers": s, "transactional.id": "pipe-1", "linger.ms": 0})
    txn.init_transactions(15)
    for i, (end, commit) in enumerate([(3, True), (6, True), (9, False)]):
        txn.begin_transaction()
        for p in range(2):
            txn.produce("out", f"out-{i}-{p}".encode(), partition=p)
        offsets = [TopicPartition("in", p, end) for p in range(2)]
        txn.send_offsets_to_transaction(offsets, proc.consumer_group_metadata(), 15)
        if commit:
            txn.commit_transaction(15)
        else:
            txn.flush(15)  # left open: the source dies in the middle of it
        if i == 1:
            assert _committed(s, "pipe", "in") == {0: 6, 1: 6}
    # the mirror holds what the source has (the open transaction's records included)
    assert _wait(lambda: len(read_committed(d, "out", 2)[0]) == 2)
    time.sleep(0.5)
    src.stop()
    assert _committed(d, "pipe", "in") == {}  # never copied periodically
    code, out, err = tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", "in,out")
    assert code == 0, (out, err)
    assert "Group: pipe\tConsumer offsets applied: in-0:6, in-1:6" in out, out
    assert _committed(d, "pipe", "in") == {0: 6, 1: 6}
    got = read_committed(d, "out", 2)
    assert sorted(v for recs in got.values() for _o, v in recs) == sorted(
        f"out-{i}-{p}".encode() for i in range(2) for p in range(2)
    )
    proc.close()
