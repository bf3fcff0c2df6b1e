"""The follower's hand-written Fetch codec (kesque/protocol/replica_fetch.py), against kio.

The request encoder must write the bytes kio writes for the same request, for every version
it serves; the response decoder must read what kio reads from any response kio (or kesque's
own Fetch encoder) writes, with the records as views of the frame, and reject truncated
frames with a ProtocolError.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from conftest import examples
from kesque.protocol.api_keys import ApiKeys
from kesque.protocol.fetch import FetchPartitionResponse, encode_fetch_response, flatten
from kesque.protocol.messages import Msg
from kesque.protocol.primitives import ProtocolError
from kesque.protocol.replica_fetch import MAX_VERSION, MIN_VERSION, decode_fetch_response, encode_replica_fetch_request
from kesque.server.channel import decode_response

SETTINGS = settings(
    max_examples=examples(150),
    suppress_health_check=[HealthCheck.too_slow],
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
VERSIONS = list(range(MIN_VERSION, MAX_VERSION + 1))

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


def kio_encode(obj) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def nested(cls, name: str):
    return getattr(sys.modules[cls.__module__], name)


# ------------------------------------------------------------------------ request
@st.composite
def replica_fetches(draw):
    version = draw(st.sampled_from(VERSIONS))
    topics = draw(
        st.lists(
            st.tuples(
                st.uuids(),
                st.lists(
                    st.tuples(
                        st.integers(0, 2**31 - 1), i32, st.integers(0, 2**63 - 1), i32, i64, st.integers(0, 2**31 - 1)
                    ),
                    max_size=4,
                ),
            ),
            max_size=3,
        )
    )
    return (
        version,
        draw(st.integers(0, 2**31 - 1)),
        draw(i64),
        draw(st.integers(0, 2**31 - 1)),
        draw(i32),
        draw(i32),
        draw(st.sampled_from([0, 1])),
        topics,
        draw(st.sampled_from(["", "rack-a", "机架"])),
    )


def kio_request(version, replica_id, replica_epoch, max_wait, min_bytes, max_bytes, isolation, topics, rack):
    """The request as the fetcher built it with kio before the hand-written encoder."""
    m = Msg(ApiKeys.FETCH, version, request=True)
    return kio_encode(
        m(
            replica_state=m("ReplicaState", replica_id=replica_id, replica_epoch=replica_epoch),
            max_wait=max_wait,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation,
            session_id=0,
            session_epoch=-1,
            topics=tuple(
                m(
                    "FetchTopic",
                    topic_id=tid,
                    partitions=tuple(
                        m(
                            "FetchPartition",
                            partition=p,
                            current_leader_epoch=ce,
                            fetch_offset=fo,
                            last_fetched_epoch=le,
                            log_start_offset=ls,
                            partition_max_bytes=mb,
                        )
                        for p, ce, fo, le, ls, mb in parts
                    ),
                )
                for tid, parts in topics
            ),
            forgotten_topics_data=(),
            rack_id=rack,
        )
    )


@SETTINGS
@given(replica_fetches())
def test_the_replica_fetch_request_is_the_bytes_kio_writes(case):
    assert encode_replica_fetch_request(*case) == kio_request(*case)


def test_the_replica_fetch_request_refuses_versions_it_does_not_encode():
    for v in (MIN_VERSION - 1, MAX_VERSION + 1):
        with pytest.raises(ValueError):
            encode_replica_fetch_request(v, 1, 1, 500, 1, 1 << 20, 0, [])


# ------------------------------------------------------------------------ response
@st.composite
def fetch_responses(draw):
    version = draw(st.sampled_from([13, 14, 15, 16, 17, 18]))
    part = st.fixed_dictionaries(
        {
            "partition_index": i32,
            "error_code": st.sampled_from([0, 1, 6, 74, 75, 3]),
            "high_watermark": i64,
            "last_stable_offset": i64,
            "log_start_offset": i64,
            "aborted": st.one_of(st.none(), st.lists(st.tuples(i64, i64), max_size=3)),
            "preferred_read_replica": i32,
            "records": st.one_of(st.none(), st.binary(max_size=300)),
            "diverging": st.one_of(st.none(), st.tuples(st.integers(0, 2**31 - 1), i64)),
            "leader": st.one_of(st.none(), st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))),
            "snapshot": st.one_of(st.none(), st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1))),
        }
    )
    topics = draw(st.lists(st.tuples(st.uuids(), st.lists(part, max_size=3)), max_size=3))
    endpoints = draw(
        st.lists(
            st.tuples(
                st.integers(0, 100),
                st.text(max_size=5),
                st.integers(0, 65535),
                st.one_of(st.none(), st.text(max_size=3)),
            ),
            max_size=2,
        )
    )
    return version, draw(st.integers(0, 2**31 - 1)), draw(st.sampled_from([0, 1, 3])), draw(i32), topics, endpoints


def kio_response_frame(version, throttle, error_code, session_id, topics, endpoints, corr=12345) -> bytes:
    cls = load_response_schema(1, version)
    P, T = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    names = {f.name for f in dataclasses.fields(P)}
    parts_of = []
    for tid, parts in topics:
        ps = []
        for p in parts:
            kw = dict(
                partition_index=p["partition_index"],
                error_code=ErrorCode(p["error_code"]),
                high_watermark=p["high_watermark"],
                last_stable_offset=p["last_stable_offset"],
                log_start_offset=p["log_start_offset"],
                preferred_read_replica=p["preferred_read_replica"],
                records=p["records"],
                aborted_transactions=None
                if p["aborted"] is None
                else tuple(nested(cls, "AbortedTransaction")(producer_id=a, first_offset=b) for a, b in p["aborted"]),
            )
            if p["diverging"] is not None:
                e, o = p["diverging"]
                kw["diverging_epoch"] = nested(cls, "EpochEndOffset")(epoch=e, end_offset=o)
            if p["leader"] is not None:
                i, e = p["leader"]
                kw["current_leader"] = nested(cls, "LeaderIdAndEpoch")(leader_id=i, leader_epoch=e)
            if p["snapshot"] is not None and "snapshot_id" in names:
                o, e = p["snapshot"]
                kw["snapshot_id"] = nested(cls, "SnapshotId")(end_offset=o, epoch=e)
            ps.append(P(**{k: v for k, v in kw.items() if k in names}))
        parts_of.append(T(topic_id=tid, partitions=tuple(ps)))
    top = {f.name for f in dataclasses.fields(cls)}
    kw = dict(
        throttle_time=throttle, error_code=ErrorCode(error_code), session_id=session_id, responses=tuple(parts_of)
    )
    if "node_endpoints" in top:
        kw["node_endpoints"] = tuple(
            nested(cls, "NodeEndpoint")(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints
        )
    from datetime import timedelta

    from kio.static.primitive import i32Timedelta

    kw["throttle_time"] = i32Timedelta.parse(timedelta(milliseconds=throttle))
    return corr.to_bytes(4, "big") + b"\x00" + kio_encode(cls(**kw))


def assert_same(ours, theirs, version):
    assert ours.error_code == int(theirs.error_code)
    assert ours.session_id == theirs.session_id
    assert len(ours.responses) == len(theirs.responses)
    for ot, tt in zip(ours.responses, theirs.responses):
        assert ot.topic_id == tt.topic_id
        assert len(ot.partitions) == len(tt.partitions)
        for op, tp in zip(ot.partitions, tt.partitions):
            for f in (
                "partition_index",
                "high_watermark",
                "last_stable_offset",
                "log_start_offset",
                "preferred_read_replica",
            ):
                assert getattr(op, f) == getattr(tp, f), f
            assert op.error_code == int(tp.error_code)
            assert (op.records is None) == (tp.records is None)
            if op.records is not None:
                assert isinstance(op.records, memoryview) and bytes(op.records) == bytes(tp.records)
            assert op.aborted_transactions == (
                None
                if tp.aborted_transactions is None
                else [(a.producer_id, a.first_offset) for a in tp.aborted_transactions]
            )
            de = tp.diverging_epoch
            assert (
                None if op.diverging_epoch is None else (op.diverging_epoch.epoch, op.diverging_epoch.end_offset)
            ) == (None if (de.epoch, de.end_offset) == (-1, -1) else (de.epoch, de.end_offset))
            cl = tp.current_leader
            assert (
                None if op.current_leader is None else (op.current_leader.leader_id, op.current_leader.leader_epoch)
            ) == (None if (cl.leader_id, cl.leader_epoch) == (-1, -1) else (cl.leader_id, cl.leader_epoch))
            sid = getattr(tp, "snapshot_id", None)
            if sid is not None:
                assert (None if op.snapshot_id is None else (op.snapshot_id.end_offset, op.snapshot_id.epoch)) == (
                    None if (sid.end_offset, sid.epoch) == (-1, -1) else (sid.end_offset, sid.epoch)
                )


@SETTINGS
@given(fetch_responses())
def test_the_fetch_response_decoder_reads_what_kio_reads(case):
    version = case[0]
    frame = kio_response_frame(*case)
    corr, ours = decode_fetch_response(ApiKeys.FETCH, version, frame)
    kcorr, theirs = decode_response(ApiKeys.FETCH, version, frame)
    assert corr == kcorr == 12345
    assert_same(ours, theirs, version)


def test_records_are_views_of_the_frame_and_kesques_own_encoder_decodes():
    """What a kesque leader sends (encode_fetch_response), with a diverging epoch on one
    partition and records on another: the records are a view of the frame, not a copy."""
    tid = uuid.uuid4()
    records = bytes(range(256)) * 40
    body = flatten(
        encode_fetch_response(
            18,
            0,
            0,
            [
                (
                    tid,
                    [
                        FetchPartitionResponse(0, 0, 10, 10, 0, [records], len(records)),
                        FetchPartitionResponse(1, 0, 5, 5, 0, [], 0, diverging_epoch=(3, 42)),
                        FetchPartitionResponse(2, 6, -1, -1, -1, [], 0, current_leader=(2, 9)),
                    ],
                )
            ],
        )
    )
    frame = bytearray(b"\x00\x00\x00\x07\x00" + body)
    corr, resp = decode_fetch_response(ApiKeys.FETCH, 18, frame)
    p0, p1, p2 = resp.responses[0].partitions
    assert corr == 7 and resp.responses[0].topic_id == tid
    assert bytes(p0.records) == records and p0.high_watermark == 10 and p0.diverging_epoch is None
    assert (p1.diverging_epoch.epoch, p1.diverging_epoch.end_offset) == (3, 42) and p1.records is not None
    assert len(p1.records) == 0 and not p1.records
    assert p2.error_code == 6 and (p2.current_leader.leader_id, p2.current_leader.leader_epoch) == (2, 9)
    frame[len(frame) - len(body) + body.index(records)] ^= 0xFF  # a view: the change shows through
    assert bytes(p0.records) != records
    _c, theirs = decode_response(ApiKeys.FETCH, 18, bytes(frame))
    assert_same(decode_fetch_response(ApiKeys.FETCH, 18, frame)[1], theirs, 18)


@SETTINGS
@given(fetch_responses())
def test_a_truncated_or_padded_response_is_a_protocol_error(case):
    frame = kio_response_frame(*case)
    for cut in sorted({0, 1, 3, 4, 5, len(frame) // 2, len(frame) - 1}):
        if 0 <= cut < len(frame):
            with pytest.raises(ProtocolError):
                decode_fetch_response(ApiKeys.FETCH, case[0], frame[:cut])
    with pytest.raises(ProtocolError):
        decode_fetch_response(ApiKeys.FETCH, case[0], frame + b"\x00")


def test_versions_without_topic_ids_are_not_decoded():
    with pytest.raises(ValueError):
        decode_fetch_response(ApiKeys.FETCH, 12, b"\x00" * 16)


def test_request_classes_have_the_fields_the_encoder_writes():
    """If a new Fetch version adds a non-tagged field, the encoder's range must not cover it."""
    for v in VERSIONS:
        cls = load_request_schema(1, v)
        assert [f.name for f in dataclasses.fields(cls) if "tag" not in f.metadata] == [
            "max_wait",
            "min_bytes",
            "max_bytes",
            "isolation_level",
            "session_id",
            "session_epoch",
            "topics",
            "forgotten_topics_data",
            "rack_id",
        ]
