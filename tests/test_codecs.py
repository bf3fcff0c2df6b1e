"""The hand-written hot-path codecs, byte for byte against kio.

kio is generated from Kafka's message schemas, so agreeing with it byte for byte means
agreeing with Kafka: the Produce request decoder (v3-13), the Produce response encoder
(v3-13), the Fetch response encoder (v4-18, records both as bytes and as FileRegions over
a real file), the request header parser, the flexible-version table, and the wire
primitives' behaviour on truncated input.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import os
import re
import struct
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from conftest import examples
from kesque.protocol import primitives as pr
from kesque.protocol.api import FLEXIBLE_FROM, decode_request, is_flexible, parse_request_header
from kesque.protocol.api_keys import ApiKeys
from kesque.protocol.fetch import FetchPartitionResponse, FileRegion, encode_fetch_response, flatten, total_size
from kesque.protocol.offset_commit import encode_offset_commit_response
from kesque.protocol.produce import PartitionResponse, decode_produce_request, encode_produce_response
from kesque.testing import kafka

SETTINGS = settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])

PRODUCE_VERSIONS = sorted(schema_name_map["produce"])
FETCH_VERSIONS = sorted(schema_name_map["fetch"])


def test_kio_versions_cover_what_the_brief_expects():
    assert PRODUCE_VERSIONS[0] <= 3 and PRODUCE_VERSIONS[-1] >= 13
    assert FETCH_VERSIONS[0] <= 4 and FETCH_VERSIONS[-1] >= 18


# ------------------------------------------------------------------------ kio helpers


def kio_encode(obj) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def kio_decode(cls, data: bytes):
    obj, size = entity_reader(cls)(memoryview(data).toreadonly(), 0)
    return obj, size


def nested(cls, name: str):
    return getattr(sys.modules[cls.__module__], name)


def make(cls, **kw):
    """Build a kio entity passing only the fields this version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kw.items() if k in names})


def ms_to_dt(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms)


def ms_delta(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


# ------------------------------------------------------------------------ strategies

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(min_size=0, max_size=20)
TOPIC_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-0123456789", min_size=1, max_size=30)
RECORDS = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=200))
UUIDS = st.uuids()
ERRORS = st.sampled_from(list(ErrorCode))
RACKS = st.one_of(st.none(), NAMES)
NODE_ENDPOINTS = st.lists(st.tuples(I32, NAMES, I32, RACKS), max_size=3)


# ======================================================================== Produce request


@st.composite
def produce_requests(draw):
    version = draw(st.sampled_from(PRODUCE_VERSIONS))
    txn = draw(st.one_of(st.none(), NAMES))
    acks = draw(st.one_of(st.sampled_from([-1, 0, 1]), I16))
    timeout = draw(st.integers(0, 2**31 - 1))
    topics = draw(
        st.lists(
            st.tuples(UUIDS if version >= 13 else TOPIC_NAMES, st.lists(st.tuples(I32, RECORDS), max_size=4)),
            max_size=4,
        )
    )
    return version, txn, acks, timeout, topics


def kio_produce_request(version, txn, acks, timeout, topics) -> bytes:
    cls = load_request_schema(0, version)
    TopicData = nested(cls, "TopicProduceData")
    PartData = nested(cls, "PartitionProduceData")
    req = cls(
        transactional_id=txn,
        acks=acks,
        timeout=ms_delta(timeout),
        topic_data=tuple(
            make(TopicData, name=t, topic_id=t, partition_data=tuple(PartData(index=i, records=r) for i, r in parts))
            for t, parts in topics
        ),
    )
    return kio_encode(req)


@SETTINGS
@given(produce_requests())
def test_decode_produce_request_matches_kio(case):
    version, txn, acks, timeout, topics = case
    data = kio_produce_request(*case)
    req = decode_produce_request(memoryview(data), version)
    assert req.transactional_id == txn
    assert req.acks == acks
    assert req.timeout_ms == timeout
    assert len(req.topics) == len(topics)
    for got, (t, parts) in zip(req.topics, topics):
        if version >= 13:
            assert got.topic_id == t and got.name is None
        else:
            assert got.name == t and got.topic_id is None
        assert [p.index for p in got.partitions] == [i for i, _ in parts]
        for gp, (_i, records) in zip(got.partitions, parts):
            if records is None:
                assert gp.records is None
            else:
                assert isinstance(gp.records, memoryview)  # zero-copy slice of the frame
                assert bytes(gp.records) == records


@SETTINGS
@given(produce_requests())
def test_decode_produce_request_records_are_views_into_the_frame(case):
    version = case[0]
    frame = bytearray(kio_produce_request(*case))
    req = decode_produce_request(memoryview(frame), version)
    for t in req.topics:
        for p in t.partitions:
            if p.records is not None and len(p.records):
                # patching the view patches the frame: what the log does to assign offsets
                p.records[0] = p.records[0] ^ 0xFF
                assert p.records.obj is frame


@settings(max_examples=examples(60))
@given(produce_requests())
def test_decode_produce_request_truncated_raises_protocol_error(case):
    version = case[0]
    data = kio_produce_request(*case)
    for cut in range(len(data)):
        with pytest.raises(pr.ProtocolError):
            decode_produce_request(memoryview(data[:cut]), version)


def _tagged_unknown(n: int) -> bytes:
    """A tagged-field section with ``n`` unknown tags (values of various sizes)."""
    if n == 0:
        return b"\x00"
    out = [pr.uvarint(n)]
    for i in range(n):
        value = bytes(range(i * 3 % 7 + (200 if i == 1 else 0)))
        out += [pr.uvarint(1000 + i * 37), pr.uvarint(len(value)), value]
    return b"".join(out)


@pytest.mark.parametrize("version", [v for v in PRODUCE_VERSIONS if v >= 9])
def test_decode_produce_request_skips_unknown_tagged_fields(version):
    tid = uuid.UUID(int=0x1234)
    body = [pr.compact_string("txn"), struct.pack(">hi", -1, 3000), pr.uvarint(3)]  # 2 topics
    body.append(tid.bytes if version >= 13 else pr.compact_string("topic"))
    body += [pr.uvarint(3), struct.pack(">i", 7), pr.uvarint(4), b"abc", _tagged_unknown(2)]
    body += [struct.pack(">i", 8), b"\x00", _tagged_unknown(1)]
    body.append(_tagged_unknown(3))
    body += [tid.bytes if version >= 13 else pr.compact_string("topic"), pr.uvarint(2)]
    body += [struct.pack(">i", 0), pr.uvarint(1), b"\x00"]  # empty records, no tags
    body.append(b"\x00")
    body.append(_tagged_unknown(2))
    req = decode_produce_request(memoryview(b"".join(body)), version)
    assert req.transactional_id == "txn" and req.acks == -1 and req.timeout_ms == 3000
    p0, p1 = req.topics[0].partitions
    assert (p0.index, bytes(p0.records)) == (7, b"abc")
    assert (p1.index, p1.records) == (8, None)
    assert bytes(req.topics[1].partitions[0].records) == b""


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_decode_produce_request_rejects_null_topic_array(version):
    flexible = version >= 9
    body = (pr.compact_string(None) if flexible else pr.string(None)) + struct.pack(">hi", 1, 100)
    body += b"\x00" if flexible else b"\xff\xff\xff\xff"
    with pytest.raises(pr.ProtocolError):
        decode_produce_request(memoryview(body), version)


# ======================================================================== Produce response


@st.composite
def produce_responses(draw):
    version = draw(st.sampled_from(PRODUCE_VERSIONS))
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        key = draw(UUIDS if version >= 13 else TOPIC_NAMES)
        parts = []
        for _ in range(draw(st.integers(0, 3))):
            leader = draw(st.one_of(st.just((-1, -1)), st.tuples(I32, I32)))
            parts.append(
                PartitionResponse(
                    index=draw(I32),
                    error_code=draw(ERRORS).value,
                    base_offset=draw(I64),
                    log_append_time=draw(st.one_of(st.just(-1), st.integers(0, 2**42))),
                    log_start_offset=draw(I64),
                    error_message=draw(st.one_of(st.none(), NAMES)),
                    record_errors=draw(
                        st.one_of(st.none(), st.lists(st.tuples(I32, st.one_of(st.none(), NAMES)), max_size=3))
                    ),
                    leader_id=leader[0],
                    leader_epoch=leader[1],
                )
            )
        topics.append((key, parts))
    throttle = draw(st.integers(0, 2**31 - 1))
    endpoints = draw(NODE_ENDPOINTS)
    return version, topics, throttle, endpoints


def kio_produce_response(version, topics, throttle, endpoints) -> bytes:
    cls = load_response_schema(0, version)
    TopicResp = nested(cls, "TopicProduceResponse")
    PartResp = nested(cls, "PartitionProduceResponse")
    fields = {f.name for f in dataclasses.fields(PartResp)}
    kw_cls = {}
    if "record_errors" in fields:
        BatchErr = nested(cls, "BatchIndexAndErrorMessage")
    if "current_leader" in fields:
        Leader = nested(cls, "LeaderIdAndEpoch")
    if "node_endpoints" in {f.name for f in dataclasses.fields(cls)}:
        Endpoint = nested(cls, "NodeEndpoint")
        kw_cls["node_endpoints"] = tuple(Endpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints)

    def part(p: PartitionResponse):
        kw = dict(
            index=p.index,
            error_code=ErrorCode(p.error_code),
            base_offset=p.base_offset,
            log_append_time=None if p.log_append_time == -1 else ms_to_dt(p.log_append_time),
            log_start_offset=p.log_start_offset,
            error_message=p.error_message,
        )
        if "record_errors" in fields:
            kw["record_errors"] = tuple(
                BatchErr(batch_index=i, batch_index_error_message=m) for i, m in (p.record_errors or ())
            )
        if "current_leader" in fields:
            kw["current_leader"] = Leader(leader_id=p.leader_id, leader_epoch=p.leader_epoch)
        return make(PartResp, **kw)

    resp = make(
        cls,
        responses=tuple(
            make(TopicResp, name=t, topic_id=t, partition_responses=tuple(part(p) for p in parts))
            for t, parts in topics
        ),
        throttle_time=ms_delta(throttle),
        **kw_cls,
    )
    return kio_encode(resp)


@SETTINGS
@given(produce_responses())
def test_encode_produce_response_matches_kio(case):
    version, topics, throttle, endpoints = case
    ours = encode_produce_response(version, topics, throttle, endpoints)
    assert ours == kio_produce_response(version, topics, throttle, endpoints)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_encode_produce_response_decodes_with_kio(version):
    topic = uuid.uuid4() if version >= 13 else "orders"
    parts = [
        PartitionResponse(0, 0, 42, -1, 0),
        PartitionResponse(1, 6, -1, -1, -1, "not leader", [(0, "bad"), (3, None)], 2, 7),
    ]
    data = encode_produce_response(version, [(topic, parts)], 5, [(2, "h", 9092, None)])
    obj, size = kio_decode(load_response_schema(0, version), data)
    assert size == len(data)
    p = obj.responses[0].partition_responses[1]
    assert p.error_code == ErrorCode.not_leader_or_follower
    if version >= 10:
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (2, 7)
        assert obj.node_endpoints[0].host == "h"


@pytest.mark.parametrize("version", [v for v in PRODUCE_VERSIONS if v >= 8])
def test_encode_produce_response_with_record_errors_matches_kio(version):
    # a KIP-467 answer as the validator gives it: many record errors, messages longer than a
    # one-byte length varint, a null message, a summary error_message, beside a good partition
    topic = uuid.uuid4() if version >= 13 else "topïc-ü"
    msg = "Compacted topic cannot accept message without key in topic partition topïc-ü-0" + "…" * 60
    errs = [(i, msg) for i in range(3, 1000, 10)] + [(1001, None), (-1, "")]
    bad = PartitionResponse(1, 87, -1, -1, 17, "One or more records have been rejected " + "x" * 500, errs)
    case = [(topic, [PartitionResponse(0, 0, 42, -1, 0), bad])]
    assert encode_produce_response(version, case, 3) == kio_produce_response(version, case, 3, ())


def test_produce_response_current_leader_tag_only_when_set():
    unset = encode_produce_response(10, [("t", [PartitionResponse(0, 6)])])
    the_set = encode_produce_response(10, [("t", [PartitionResponse(0, 6, leader_id=1, leader_epoch=3)])])
    # one tag: count 1, tag 0, size 9, leader int32, epoch int32, empty nested tags
    assert len(the_set) - len(unset) == 1 + 1 + 8 + 1


# ======================================================================== Fetch response


@pytest.fixture(scope="module")
def segment_file(tmp_path_factory):
    """A real file the FileRegions point into; its content is a known byte pattern."""
    path = tmp_path_factory.mktemp("fetch") / "00000000000000000000.log"
    data = bytes((i * 7 + 3) & 0xFF for i in range(64 * 1024))
    path.write_bytes(data)

    class Handle:
        def __init__(self, fd):
            self.fd = fd

    class Segment(tuple):
        def __repr__(self):
            return "<segment file>"

    fd = os.open(path, os.O_RDONLY)
    try:
        yield Segment((Handle(fd), data))
    finally:
        os.close(fd)


@st.composite
def record_pieces(draw):
    """None, or a list of pieces: bytes or ('file', position, size)."""
    kind = draw(st.sampled_from(["none", "empty", "bytes", "file", "mixed"]))
    if kind == "none":
        return None
    if kind == "empty":
        return []
    n = draw(st.integers(1, 3))
    pieces = []
    for _ in range(n):
        if kind == "bytes" or (kind == "mixed" and draw(st.booleans())):
            pieces.append(draw(st.binary(min_size=1, max_size=100)))
        else:
            pos = draw(st.integers(0, 60000))
            pieces.append(("file", pos, draw(st.integers(1, 4000))))
    return pieces


@st.composite
def fetch_responses(draw):
    version = draw(st.sampled_from(FETCH_VERSIONS))
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        key = draw(UUIDS if version >= 13 else TOPIC_NAMES)
        parts = []
        for _ in range(draw(st.integers(0, 3))):
            parts.append(
                dict(
                    index=draw(I32),
                    error_code=draw(ERRORS).value,
                    high_watermark=draw(I64),
                    last_stable_offset=draw(I64),
                    log_start_offset=draw(I64),
                    aborted=draw(
                        st.one_of(st.none(), st.just([]), st.lists(st.tuples(I64, I64), min_size=1, max_size=3))
                    ),
                    preferred_read_replica=draw(I32),
                    diverging=draw(st.one_of(st.none(), st.just((-1, -1)), st.tuples(I32, I64))),
                    leader=draw(st.one_of(st.none(), st.just((-1, -1)), st.tuples(I32, I32))),
                    records=draw(record_pieces()),
                )
            )
        topics.append((key, parts))
    return (version, draw(ERRORS).value, draw(I32), topics, draw(st.integers(0, 2**31 - 1)), draw(NODE_ENDPOINTS))


def _resolve(pieces, handle, data):
    """(list for the encoder, the bytes kio should see)."""
    if pieces is None:
        return None, None
    items, raw = [], []
    for p in pieces:
        if isinstance(p, tuple):
            _, pos, size = p
            items.append(FileRegion(handle, pos, size))
            raw.append(data[pos : pos + size])
        else:
            items.append(p)
            raw.append(p)
    return items, b"".join(raw)


def kio_fetch_response(version, error_code, session_id, topics, throttle, endpoints, data) -> bytes:
    cls = load_response_schema(1, version)
    TopicResp = nested(cls, "FetchableTopicResponse")
    Part = nested(cls, "PartitionData")
    Aborted = nested(cls, "AbortedTransaction")
    pfields = {f.name for f in dataclasses.fields(Part)}
    kw_top = {}
    if "node_endpoints" in {f.name for f in dataclasses.fields(cls)}:
        Endpoint = nested(cls, "NodeEndpoint")
        kw_top["node_endpoints"] = tuple(Endpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints)

    def part(p):
        kw = dict(
            partition_index=p["index"],
            error_code=ErrorCode(p["error_code"]),
            high_watermark=p["high_watermark"],
            last_stable_offset=p["last_stable_offset"],
            log_start_offset=p["log_start_offset"],
            preferred_read_replica=p["preferred_read_replica"],
            aborted_transactions=None
            if p["aborted"] is None
            else tuple(Aborted(producer_id=a, first_offset=b) for a, b in p["aborted"]),
            records=p["kio_records"],
        )
        if "diverging_epoch" in pfields and p["diverging"] is not None:
            kw["diverging_epoch"] = nested(cls, "EpochEndOffset")(epoch=p["diverging"][0], end_offset=p["diverging"][1])
        if "current_leader" in pfields and p["leader"] is not None:
            kw["current_leader"] = nested(cls, "LeaderIdAndEpoch")(
                leader_id=p["leader"][0], leader_epoch=p["leader"][1]
            )
        return make(Part, **kw)

    resp = make(
        cls,
        throttle_time=ms_delta(throttle),
        error_code=ErrorCode(error_code),
        session_id=session_id,
        responses=tuple(
            make(TopicResp, topic=t, topic_id=t, partitions=tuple(part(p) for p in parts)) for t, parts in topics
        ),
        **kw_top,
    )
    return kio_encode(resp)


@SETTINGS
@given(fetch_responses())
def test_encode_fetch_response_matches_kio(segment_file, case):
    handle, data = segment_file
    version, error_code, session_id, topics, throttle, endpoints = case
    ours_topics = []
    for key, parts in topics:
        ours_parts = []
        for p in parts:
            items, raw = _resolve(p["records"], handle, data)
            p["kio_records"] = raw
            ours_parts.append(
                FetchPartitionResponse(
                    p["index"],
                    p["error_code"],
                    p["high_watermark"],
                    p["last_stable_offset"],
                    p["log_start_offset"],
                    items,
                    len(raw) if raw is not None else 0,
                    p["aborted"],
                    p["preferred_read_replica"],
                    p["diverging"],
                    p["leader"],
                )
            )
        ours_topics.append((key, ours_parts))
    out = encode_fetch_response(version, error_code, session_id, ours_topics, throttle, endpoints)
    expected = kio_fetch_response(version, error_code, session_id, topics, throttle, endpoints, data)
    assert flatten(out) == expected
    assert total_size(out) == len(expected)
    # record bytes that live in the file stay FileRegions: nothing was copied into Python
    n_regions = sum(
        1 for _k, parts in topics for p in parts if p["records"] for piece in p["records"] if isinstance(piece, tuple)
    )
    assert sum(isinstance(x, FileRegion) for x in out) == n_regions


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_empty_records_are_zero_length_not_null(version):
    out = flatten(
        encode_fetch_response(
            version,
            0,
            0,
            [
                (
                    uuid.uuid4() if version >= 13 else "t",
                    [FetchPartitionResponse(0, 0, 10, 10, 0, records=[], records_size=0)],
                )
            ],
        )
    )
    obj, size = kio_decode(load_response_schema(1, version), out)
    assert size == len(out)
    assert obj.responses[0].partitions[0].records == b""


def test_file_region_short_read_is_an_error(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")

    class H:
        fd = os.open(p, os.O_RDONLY)

    try:
        with pytest.raises(OSError):
            FileRegion(H, 1, 10).read()
        assert FileRegion(H, 1, 2).read() == b"bc"
    finally:
        os.close(H.fd)


# ======================================================================== request header


def kio_header(version: int, api_key: int, api_version: int, corr: int, client_id) -> bytes:
    mod = __import__(f"kio.schema.request_header.v{version}.header", fromlist=["RequestHeader"])
    return kio_encode(
        mod.RequestHeader(
            request_api_key=api_key, request_api_version=api_version, correlation_id=corr, client_id=client_id
        )
    )


@SETTINGS
@given(
    api_key=st.sampled_from(sorted(FLEXIBLE_FROM)),
    api_version=st.integers(0, 20),
    corr=I32,
    client_id=st.one_of(st.none(), NAMES),
    body=st.binary(max_size=20),
)
def test_parse_request_header_v1_v2(api_key, api_version, corr, client_id, body):
    flexible = is_flexible(api_key, api_version)
    frame = kio_header(2 if flexible else 1, api_key, api_version, corr, client_id) + body
    h = parse_request_header(memoryview(frame))
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (api_key, api_version, corr, client_id)
    assert h.flexible == flexible
    assert bytes(frame[h.body_offset :]) == body


@SETTINGS
@given(n_tags=st.integers(1, 4), client_id=st.one_of(st.none(), NAMES), body=st.binary(max_size=10))
def test_parse_request_header_skips_unknown_tagged_fields(n_tags, client_id, body):
    # Metadata v12 is flexible: header v2; unknown tags must be skipped, never rejected
    head = kio_header(2, ApiKeys.METADATA, 12, 99, client_id)
    assert head.endswith(b"\x00")
    frame = head[:-1] + _tagged_unknown(n_tags) + body
    h = parse_request_header(memoryview(frame))
    assert h.client_id == client_id and h.correlation_id == 99
    assert bytes(frame[h.body_offset :]) == body


def test_parse_request_header_truncated():
    frame = kio_header(2, ApiKeys.METADATA, 12, 99, "client")
    for cut in range(len(frame)):
        with pytest.raises(pr.ProtocolError):
            parse_request_header(memoryview(frame[:cut]))
    bad_tags = frame[:-1] + b"\x01\x05\x10abc"  # tag claims 16 bytes, 3 follow
    with pytest.raises(pr.ProtocolError):
        parse_request_header(memoryview(bad_tags))


def test_null_where_the_schema_does_not_allow_it_is_refused():
    # ListOffsets v1: replica id, then a null topics array (never nullable); Metadata v1's is nullable
    with pytest.raises(pr.ProtocolError, match="non-nullable field topics was serialized as null"):
        decode_request(ApiKeys.LIST_OFFSETS, 1, memoryview(struct.pack(">ii", -1, -1)))
    assert decode_request(ApiKeys.METADATA, 1, memoryview(struct.pack(">i", -1))).topics is None


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_flexible_table_matches_kio_for_every_known_version():
    """For every API key and version kio knows, FLEXIBLE_FROM agrees with the schema's
    ``__flexible__`` (request and response)."""
    checked = 0
    for key, name in api_key_map.items():
        assert key in FLEXIBLE_FROM, f"API {key} ({name}) missing from FLEXIBLE_FROM"
        for version in schema_name_map[name]:
            req = load_request_schema(key, version)
            resp = load_response_schema(key, version)
            assert req.__flexible__ == resp.__flexible__
            assert is_flexible(key, version) == req.__flexible__, (key, name, version)
            checked += 1
    assert checked > 300
    # and nothing in the table that kio does not know
    assert set(FLEXIBLE_FROM) <= set(api_key_map)


@pytest.mark.parametrize("key", sorted(FLEXIBLE_FROM))
def test_flexible_table_names_match_kio(key):
    name = FLEXIBLE_FROM[key][0]
    kio_name = api_key_map[key]
    # kio uses newer names where Kafka renamed an API (74: ListClientMetricsResources)
    assert _snake(name) == kio_name or key == 74


# Kafka's request/response schemas, from the kafka-clients jar resolved by `make kafka`
KAFKA_MESSAGES = kafka.jar_resources("kafka-clients", "common/message")


@pytest.mark.skipif(KAFKA_MESSAGES is None, reason=kafka.jars_missing() or "")
def test_flexible_table_matches_kafka_request_schemas():
    """Every API in kesque's table is flexible from the version Kafka's schema says. (APIs of the
    resolved Kafka that kesque does not have are the ApiVersions oracle test's business.)"""
    checked = set()
    for name, text in KAFKA_MESSAGES.items():
        if not name.endswith("Request.json"):
            continue
        spec = json.loads(re.sub(r"//.*", "", text))
        key = spec["apiKey"]
        if spec["validVersions"] == "none" or key not in FLEXIBLE_FROM:  # removed from Kafka / not in kesque
            continue
        fv = spec["flexibleVersions"]
        first = None if fv == "none" else int(fv.rstrip("+"))
        assert FLEXIBLE_FROM[key][1] == first, (name, fv)
        checked.add(key)
    assert checked == set(FLEXIBLE_FROM) - {4, 5, 6, 7}  # the four inter-broker APIs Kafka 4.0 removed


# ======================================================================== primitives


def _readers():
    return [
        ("int16", lambda b: pr.read_int16(b, 0)),
        ("int32", lambda b: pr.read_int32(b, 0)),
        ("int64", lambda b: pr.read_int64(b, 0)),
        ("uvarint", lambda b: pr.read_uvarint(b, 0)),
        ("varint", lambda b: pr.read_varint(b, 0)),
        ("string", lambda b: pr.read_string(b, 0)),
        ("compact_string", lambda b: pr.read_compact_string(b, 0)),
        ("bytes", lambda b: pr.read_bytes_view(memoryview(b), 0, False)),
        ("compact_bytes", lambda b: pr.read_bytes_view(memoryview(b), 0, True)),
        ("array_len", lambda b: pr.read_array_len(b, 0, False)),
        ("compact_array_len", lambda b: pr.read_array_len(b, 0, True)),
        ("tagged", lambda b: pr.skip_tagged_fields(b, 0)),
        ("uuid", lambda b: pr.read_uuid(b, 0)),
    ]


VALID = {  # name: (encoding, the value it decodes to)
    "int16": (struct.pack(">h", -2), -2),
    "int32": (struct.pack(">i", 7), 7),
    "int64": (struct.pack(">q", -9), -9),
    "uvarint": (pr.uvarint(300000), 300000),
    "varint": (pr.varint(-150000), -150000),
    "string": (pr.string("héllo"), "héllo"),
    "compact_string": (pr.compact_string("héllo"), "héllo"),
    "bytes": (struct.pack(">i", 3) + b"xyz", b"xyz"),
    "compact_bytes": (pr.uvarint(4) + b"xyz", b"xyz"),
    "array_len": (struct.pack(">i", 5), 5),
    "compact_array_len": (pr.uvarint(6), 5),
    "tagged": (_tagged_unknown(3), None),  # skipped: no value, only where it ends
    "uuid": (uuid.UUID(int=12345).bytes, uuid.UUID(int=12345)),
}


def _value(name: str, result):
    """(value, end) of one of our readers, views as bytes; the tagged-field skipper has no value."""
    if name == "tagged":
        return None, result
    value, end = result
    return (bytes(value) if isinstance(value, memoryview) else value), end


def _kio_readers():
    """kio's reader for each of ours, normalised to our conventions: the reference for values."""
    from kio.serial import readers as kr

    def compact_len(b, pos):
        n, end = kr.read_compact_array_length(b, pos)
        return (-1 if n is None else n), end

    def uuid_(b, pos):
        u, end = kr.read_uuid(b, pos)
        return (uuid.UUID(int=0) if u is None else u), end

    return {
        "int16": kr.read_int16,
        "int32": kr.read_int32,
        "int64": kr.read_int64,
        "uvarint": kr.read_unsigned_varint,
        "varint": kr.read_signed_varint,
        "string": kr.read_nullable_legacy_string,
        "compact_string": kr.read_compact_string_nullable,
        "bytes": kr.read_nullable_legacy_bytes,
        "compact_bytes": kr.read_compact_string_as_bytes_nullable,
        "array_len": kr.read_legacy_array_length,
        "compact_array_len": compact_len,
        "uuid": uuid_,
    }


@pytest.mark.parametrize("name,reader", _readers(), ids=[n for n, _ in _readers()])
def test_primitive_readers_on_truncated_input(name, reader):
    data, expected = VALID[name]
    assert _value(name, reader(data)) == (expected, len(data))
    for cut in range(len(data)):
        with pytest.raises(pr.ProtocolError):
            reader(data[:cut])


@SETTINGS
@given(data=st.binary(max_size=40))
def test_primitive_readers_agree_with_kio_or_raise_protocol_error(data):
    """On any bytes a reader returns what kio reads there (value and end) or raises
    ProtocolError, never anything else; where kio reads nothing, ProtocolError or a value
    (our varints take up to 10 bytes, kio's 5) is fine."""
    kio = _kio_readers()
    for name, reader in _readers():
        try:
            ours = _value(name, reader(data))
        except pr.ProtocolError:
            ours = None
        if name not in kio:
            continue
        try:
            ref = _value(name, kio[name](memoryview(data), 0))
        except Exception:  # noqa: BLE001  (kio has no single error type for bad input)
            continue
        assert ours == ref, (name, data)


def test_primitive_readers_reject_bad_values():
    with pytest.raises(pr.ProtocolError):
        pr.read_string(struct.pack(">h", -2), 0)
    with pytest.raises(pr.ProtocolError):
        pr.read_bytes_view(memoryview(struct.pack(">i", -5)), 0, False)
    with pytest.raises(pr.ProtocolError):
        pr.read_string(struct.pack(">h", 2) + b"\xff\xfe", 0)  # not UTF-8
    with pytest.raises(pr.ProtocolError):
        pr.read_compact_string(pr.uvarint(3) + b"\xc3\x28", 0)
    with pytest.raises(pr.ProtocolError):
        pr.read_uvarint(b"\xff" * 11, 0)
    assert pr.read_string(struct.pack(">h", -1), 0) == (None, 2)
    assert pr.read_compact_string(b"\x00", 0) == (None, 1)
    assert pr.read_array_len(b"\x00", 0, True) == (-1, 1)


@SETTINGS
@given(st.integers(0, 2**63 - 1))
def test_uvarint_round_trip(v):
    enc = pr.uvarint(v)
    assert pr.read_uvarint(enc + b"junk", 0) == (v, len(enc))


@SETTINGS
@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(v):
    enc = pr.varint(v)
    assert pr.read_varint(enc, 0) == (v, len(enc))


def test_tagged_sorts_by_tag():
    assert pr.tagged([(5, b"x"), (1, b"yz")]) == b"\x02\x01\x02yz\x05\x01x"
    assert pr.tagged([]) == b"\x00"


# ------------------------------------------------------------------------ OffsetCommitResponse
OFFSET_COMMIT_VERSIONS = sorted(schema_name_map["offset_commit"])


@st.composite
def offset_commit_responses(draw):
    version = draw(st.sampled_from(OFFSET_COMMIT_VERSIONS))
    topic = st.uuids() if version >= 10 else st.text(max_size=20)
    parts = st.lists(st.tuples(I32, st.sampled_from([int(e) for e in ErrorCode])), max_size=4)
    topics = draw(st.lists(st.tuples(topic, parts), max_size=4))
    return version, topics, draw(st.integers(0, 2**31 - 1))


def kio_offset_commit_response(version, topics, throttle) -> bytes:
    cls = load_response_schema(8, version)
    Topic, Part = nested(cls, "OffsetCommitResponseTopic"), nested(cls, "OffsetCommitResponsePartition")
    resp = make(
        cls,
        throttle_time=ms_delta(throttle),
        topics=tuple(
            make(
                Topic,
                name=t,
                topic_id=t,
                partitions=tuple(Part(partition_index=p, error_code=ErrorCode(e)) for p, e in parts),
            )
            for t, parts in topics
        ),
    )
    return kio_encode(resp)


@SETTINGS
@given(offset_commit_responses())
def test_encode_offset_commit_response_matches_kio(case):
    version, topics, throttle = case
    assert encode_offset_commit_response(version, topics, throttle) == kio_offset_commit_response(
        version, topics, throttle
    )
