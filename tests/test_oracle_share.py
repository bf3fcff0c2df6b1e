"""Share groups (KIP-932) on Kafka 4.4 and on kesque: the same requests, the same answers.

A member's share session belongs to the partition leader and to the connection that opened
it, not to the group: leaving the share group (ShareGroupHeartbeat epoch -1) leaves the session
open, so the final ShareAcknowledge (epoch -1) a closing consumer sends with its leave is
applied. librdkafka sends both at once: kesque used to end the session with the leave and
answer SHARE_SESSION_NOT_FOUND ("ShareAcknowledge reply error: The share session was not
found" on every close of a confluent-kafka ShareConsumer).
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

import oracle
from kesque.protocol.api_keys import ApiKeys
from test_groups_bad_input import find_coordinator
from wire import Msg, WireClient

ck = pytest.importorskip("confluent_kafka")

pytestmark = oracle.MARKS


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    # share groups are on by default in Kafka 4.4
    with oracle.brokers(tmp_path_factory, kesque_config={"group.share.enable": "true"}) as both:
        yield both


def _group_on(broker, records: int) -> tuple[str, str]:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    bs = broker.bootstrap_servers
    topic, group = oracle.new_topic("st"), "sg-" + uuid.uuid4().hex[:8]
    a = AdminClient({"bootstrap.servers": bs})
    a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    res = ConfigResource(
        "GROUP",
        group,
        incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    a.incremental_alter_configs([res])[res].result(30)
    # one batch, whatever the machine's load: nothing leaves before flush() (which ignores the
    # linger); with linger.ms=0 a loaded machine sent the first records alone, and the
    # batch_optimized acquisition below (whole batches) then saw two batches
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 10000, "batch.num.messages": 10000})
    for i in range(records):
        p.produce(topic, str(i).encode())
    p.flush(30)
    find_coordinator(bs, group, 60)
    return topic, group


def _fetch(
    c, group, member, epoch, tid, acks=(), max_wait=0, version=1, max_records=500, min_bytes=1, max_bytes=1 << 20, **v2
):
    """ShareFetch of partition 0; ``v2``: share_acquire_mode, is_renew_ack."""
    m = Msg(ApiKeys.SHARE_FETCH, version)
    batches = tuple(
        m("AcknowledgementBatch", first_offset=f, last_offset=last, acknowledge_types=(t,)) for f, last, t in acks
    )
    body = m(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_records=max_records,
        batch_size=max_records,
        **v2,
        topics=(
            m(
                "FetchTopic",
                topic_id=tid,
                partitions=(m("FetchPartition", partition_index=0, acknowledgement_batches=batches),),
            ),
        ),
        forgotten_topics_data=(),
    )
    return c.request(ApiKeys.SHARE_FETCH, version, body)


def _ack(c, group, member, epoch, tid, acks, version=1, **v2):
    m = Msg(ApiKeys.SHARE_ACKNOWLEDGE, version)
    batches = tuple(
        m("AcknowledgementBatch", first_offset=f, last_offset=last, acknowledge_types=(t,)) for f, last, t in acks
    )
    return c.request(
        ApiKeys.SHARE_ACKNOWLEDGE,
        version,
        m(
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            **v2,
            topics=(
                m(
                    "AcknowledgeTopic",
                    topic_id=tid,
                    partitions=(m("AcknowledgePartition", partition_index=0, acknowledgement_batches=batches),),
                ),
            ),
        ),
    )


def _answer(r):
    """Top-level code, message and (v2) acquisition lock timeout, then per partition: code,
    acknowledge code (ShareFetch), acquired."""
    lock = getattr(r, "acquisition_lock_timeout", None)
    return (
        int(r.error_code),
        r.error_message,
        None if lock is None else lock.total_seconds(),
        [
            (
                int(p.error_code),
                int(getattr(p, "acknowledge_error_code", 0)),
                [(a.first_offset, a.last_offset, a.delivery_count) for a in getattr(p, "acquired_records", ())],
            )
            for t in r.responses
            for p in t.partitions
        ],
    )


def _join(c, group, topic, member):
    """ShareGroupHeartbeat until the member has its assignment: the topic id."""
    hb = Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, 1)
    r = c.request(
        ApiKeys.SHARE_GROUP_HEARTBEAT,
        1,
        hb(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=(topic,)),
    )
    end = time.monotonic() + 30
    while not (r.assignment and r.assignment.topic_partitions):
        assert r.error_code == 0 and time.monotonic() < end, r
        time.sleep(0.1)
        r = c.request(
            ApiKeys.SHARE_GROUP_HEARTBEAT, 1, hb(group_id=group, member_id=member, member_epoch=r.member_epoch)
        )
    return r.assignment.topic_partitions[0].topic_id


def _leave_then_final_ack(broker):
    topic, group = _group_on(broker, 10)
    out = []
    with WireClient(broker.bootstrap_servers) as c:
        tid = _join(c, group, topic, "m1")
        out.append(("open", _answer(_fetch(c, group, "m1", 0, tid, max_wait=5000))))
        r = c.request(
            ApiKeys.SHARE_GROUP_HEARTBEAT,
            1,
            Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, 1)(group_id=group, member_id="m1", member_epoch=-1),
        )
        out.append(("leave", int(r.error_code)))
        # the session outlives the membership: the final acknowledgement is applied
        out.append(("final ack after leave", _answer(_ack(c, group, "m1", -1, tid, [(0, 4, 1)]))))
        out.append(("fetch after the final ack", _answer(_fetch(c, group, "m1", 1, tid))))
        out.append(("ack without a session", _answer(_ack(c, group, "m3", 1, tid, [(0, 0, 1)]))))
        out.append(("final fetch without a session", _answer(_fetch(c, group, "m3", -1, tid, [(0, 0, 1)]))))
        out.append(("m4 open", _answer(_fetch(c, group, "m4", 0, tid))[0]))
        out.append(("wrong epoch", _answer(_fetch(c, group, "m4", 7, tid))))
    return out


def test_leaving_the_group_keeps_the_share_session_for_the_final_acknowledgement(pair):
    got = {name: _leave_then_final_ack(b) for name, b in pair.items()}
    assert got["kesque"] == got["kafka"], "\n".join(f"{a}\n{b}" for a, b in zip(got["kesque"], got["kafka"]))
    assert dict(got["kafka"])["final ack after leave"] == (0, None, None, [(0, 0, [])])  # not vacuous


def _version_2(broker):
    """ShareFetch and ShareAcknowledge v2: the acquire modes (KIP-1206) and renewing locks
    (KIP-1222), the requests right and wrong."""
    topic, group = _group_on(broker, 10)  # one batch of ten records
    out = []
    with WireClient(broker.bootstrap_servers) as c:
        tid = _join(c, group, topic, "m1")
        _join(c, group, topic, "m2")
        zeros = {"max_records": 0, "min_bytes": 0, "max_bytes": 0}
        out.append(
            (
                "record_limit",
                _answer(_fetch(c, group, "m1", 0, tid, max_wait=5000, version=2, max_records=3, share_acquire_mode=1)),
            )
        )
        out.append(
            (
                "batch_optimized",
                _answer(_fetch(c, group, "m2", 0, tid, max_wait=5000, version=2, max_records=2, share_acquire_mode=0)),
            )
        )
        out.append(
            (
                "renew that would fetch",
                _answer(_fetch(c, group, "m1", 1, tid, [(0, 0, 4)], version=2, is_renew_ack=True)),
            )
        )
        out.append(
            ("renew", _answer(_fetch(c, group, "m1", 1, tid, [(0, 1, 4)], version=2, is_renew_ack=True, **zeros)))
        )
        out.append(("RENEW without IsRenewAck", _answer(_fetch(c, group, "m1", 2, tid, [(2, 2, 4)], version=2))))
        out.append(("ack renew", _answer(_ack(c, group, "m1", 3, tid, [(2, 2, 4)], version=2, is_renew_ack=True))))
        out.append(("ack RENEW without IsRenewAck", _answer(_ack(c, group, "m1", 4, tid, [(2, 2, 4)], version=2))))
        out.append(("ack RENEW in v1", _answer(_ack(c, group, "m1", 5, tid, [(2, 2, 4)], version=1))))
        out.append(("ack type 5", _answer(_ack(c, group, "m1", 6, tid, [(2, 2, 5)], version=2))))
        out.append(
            ("accept with IsRenewAck", _answer(_ack(c, group, "m1", 7, tid, [(0, 2, 1)], version=2, is_renew_ack=True)))
        )
        out.append(("final accept", _answer(_ack(c, group, "m2", -1, tid, [(3, 9, 1)], version=2))))
        out.append(("nothing left", _answer(_fetch(c, group, "m1", 8, tid, version=2))))
    return out


def test_share_fetch_and_acknowledge_version_2(pair):
    got = {name: _version_2(b) for name, b in pair.items()}
    assert got["kesque"] == got["kafka"], "\n".join(f"{a}\n{b}" for a, b in zip(got["kesque"], got["kafka"]))
    assert dict(got["kafka"])["batch_optimized"][3] == [(0, 0, [(3, 9, 1)])]  # not vacuous


def _close_errors(broker, tmp_path) -> tuple[int, list[str]]:
    """A confluent-kafka ShareConsumer reads 20 records and closes: (records read, the
    share-acknowledgement errors librdkafka logged)."""
    topic, group = _group_on(broker, 20)
    log = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    path = tmp_path / f"{log.name}.log"
    handler = logging.FileHandler(path)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    c = ck.ShareConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "debug": "cgrp", "logger": log}
    )
    try:
        c.subscribe([topic])
        got = []
        end = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < end:
            got += [m for m in c.poll(0.5) if not m.error()]
    finally:
        c.close()
        handler.close()
        log.removeHandler(handler)
    text = path.read_text()
    assert "Sent ShareGroupHeartbeat" in text or "ShareGroupHeartbeat" in text  # the log is librdkafka's
    return len(got), [ln for ln in text.splitlines() if "reply error" in ln or "share session was not found" in ln]


def test_a_confluent_share_consumer_closes_without_an_acknowledgement_error(pair, tmp_path):
    for name, broker in pair.items():
        assert _close_errors(broker, tmp_path) == (20, []), name


def _bad_member_ids(broker):
    """ShareGroupHeartbeat, ShareFetch and ShareAcknowledge with a member id that is empty or
    longer than 36 characters: what Kafka 4.4's handlers answer before the coordinator or the
    share partitions see them (after READ on the group, before DESCRIBE/READ on the topics)."""
    topic, group = _group_on(broker, 1)
    out = []
    with WireClient(broker.bootstrap_servers) as c:
        tid = _join(c, group, topic, "m1")
        hb = Msg(ApiKeys.SHARE_GROUP_HEARTBEAT, 1)
        for member in ("", "m" * 37):
            r = c.request(
                ApiKeys.SHARE_GROUP_HEARTBEAT,
                1,
                hb(group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=(topic,)),
            )
            out.append(("heartbeat", len(member), int(r.error_code), r.error_message, r.member_id, r.member_epoch))
            out.append(("fetch", len(member), _answer(_fetch(c, group, member, 0, tid))))
            out.append(("ack", len(member), _answer(_ack(c, group, member, 1, tid, [(0, 0, 1)]))))
    return out


def test_a_share_member_id_empty_or_too_long_is_an_invalid_request(pair):
    got = {name: _bad_member_ids(b) for name, b in pair.items()}
    assert got["kesque"] == got["kafka"], "\n".join(f"{a}\n{b}" for a, b in zip(got["kesque"], got["kafka"]))
    assert got["kafka"][1][2][0] == 42  # not vacuous: INVALID_REQUEST
