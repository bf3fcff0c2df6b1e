"""kesque.records (RecordBatch v2) and kesque.storage.validator.

Round trips through build_batch / read_header / iter_records for every codec, CRC rules,
in-place patching, the lean framing scans against a reference parser that follows Kafka's
DefaultRecord.readFrom, byte-for-byte agreement with kio's record writer/reader, and every
error path of the produce-time validator with the error code Kafka returns.
"""

from __future__ import annotations

import datetime
import io
import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch as kio_read_batch
from kio.records.schema import NewRecordBatch as KioNewBatch
from kio.records.schema import Record as KioRecord
from kio.records.schema import RecordHeader as KioHeader
from kio.records.writers import write_new_batch as kio_write_new_batch
from kio.static.primitive import TZAwareMicros

from conftest import examples
from kesque.config.topic import LogConfig
from kesque.errors import KafkaError
from kesque.records import batch as rb
from kesque.records import compression
from kesque.records.records import (
    build_batch,
    encode_record,
    iter_records,
    records_payload,
    scan_records,
    walk_record_lengths,
)
from kesque.storage.validator import RecordValidationError, validate_batch

SETTINGS = settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP = 2, 87, 10, 32
NOW = 1_700_000_000_000
CODECS = [0, 1, 2, 3, 4]

# ----------------------------------------------------------------------- strategies

BYTES_OR_NONE = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=64))
HEADERS = st.lists(st.tuples(st.text(max_size=8), BYTES_OR_NONE), max_size=3)


@st.composite
def record_lists(draw, min_size=1, max_size=8, stamps=True):
    n = draw(st.integers(min_size, max_size))
    base = draw(st.integers(20_000, 2**41))
    out = []
    for _ in range(n):
        ts = base + draw(st.integers(-10_000, 10_000)) if stamps else None
        out.append((draw(BYTES_OR_NONE), draw(BYTES_OR_NONE), draw(HEADERS), ts))
    return out


def encode_varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def raw_batch(
    body: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    base_ts: int = NOW,
    max_ts: int = NOW,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    magic: int = 2,
    crc: int | None = None,
) -> bytearray:
    """A batch around an arbitrary records section, with a correct CRC unless told."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    head = struct.pack(
        ">qiibIhiqqqhii",
        base_offset,
        rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body),
        -1,
        magic,
        0,
        attributes,
        lod,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out = bytearray(head + body)
    struct.pack_into(">I", out, rb.CRC_OFFSET, crc32c(bytes(out[rb.ATTRIBUTES_OFFSET :])) if crc is None else crc)
    return out


def records_body(records, offset_deltas=None) -> bytes:
    body = bytearray()
    for i, (k, v, hs) in enumerate(records):
        encode_record(body, i if offset_deltas is None else offset_deltas[i], 0, k, v, hs)
    return bytes(body)


# ======================================================================== round trips


@SETTINGS
@given(
    records=record_lists(),
    codec=st.sampled_from(CODECS),
    xerial=st.booleans(),
    base_offset=st.integers(0, 2**40),
    epoch=st.integers(-1, 2**31 - 1),
    pid=st.integers(-1, 2**40),
    seq=st.integers(0, 2**31 - 1),
    txn=st.booleans(),
)
def test_build_read_iterate_round_trip(records, codec, xerial, base_offset, epoch, pid, seq, txn):
    data = build_batch(
        records,
        base_offset=base_offset,
        compression_codec=codec,
        xerial=xerial,
        partition_leader_epoch=epoch,
        producer_id=pid,
        producer_epoch=3 if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        transactional=txn and pid >= 0,
    )
    h = rb.read_header(data)
    assert h.size == len(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.compression) == (base_offset, epoch, 2, codec)
    assert h.records_count == len(records) and h.last_offset_delta == len(records) - 1
    assert h.base_timestamp == records[0][3]
    assert h.max_timestamp == max(r[3] for r in records)
    assert h.is_transactional == (txn and pid >= 0) and not h.is_control and not h.is_log_append_time
    assert rb.is_crc_valid(data, 0, len(data))
    assert list(rb.iter_batch_positions(data)) == [(0, len(data))]
    if codec == compression.SNAPPY:
        assert data[rb.HEADER_SIZE : rb.HEADER_SIZE + 8].startswith(compression.XERIAL_MAGIC) == xerial

    got = list(iter_records(data))
    assert [r.offset for r in got] == [base_offset + i for i in range(len(records))]
    for r, (k, v, hs, ts) in zip(got, records):
        assert (r.key, r.value, r.timestamp) == (k, v, ts)
        assert r.headers == [(hk, hv) for hk, hv in hs]
    payload = records_payload(data, 0, h)
    assert sum(r.size for r in got) == len(payload)
    scan = scan_records(payload, 0, len(payload), len(records))
    assert scan.count == len(records) and scan.offsets_ok
    assert scan.null_key == any(k is None for k, *_ in records)
    if codec == 0:
        walk_record_lengths(data, rb.HEADER_SIZE, len(data), len(records))


@SETTINGS
@given(st.binary(max_size=200_000), st.sampled_from([1, 2, 3, 4]), st.booleans())
def test_compression_round_trip(data, codec, xerial):
    packed = compression.compress(codec, data, xerial=xerial)
    assert bytes(compression.decompress(codec, packed)) == data


def test_xerial_snappy_multi_block():
    data = bytes(range(256)) * 1000  # 256 kB: eight 32 kB xerial blocks
    packed = compression.compress(compression.SNAPPY, data, xerial=True)
    assert packed.startswith(compression.XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    assert bytes(compression.decompress(compression.SNAPPY, packed)) == data


def _kafka_lz4_read(frame: bytes, total: int) -> bytes:
    """Kafka's Lz4BlockInputStream: magic, FLG (version 1, reserved bits 0, independent
    blocks or it refuses the stream), BD, optional content size, HC, then blocks each
    decompressed on its own (every block but the last holds the maximum block size)."""
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg, bd = frame[4], frame[5]
    version, independent, block_checksum = flg >> 6, (flg >> 5) & 1, (flg >> 4) & 1
    content_size, content_checksum, reserved = (flg >> 3) & 1, (flg >> 2) & 1, flg & 3
    assert (version, independent, reserved) == (1, 1, 0), "Kafka: Dependent block stream is unsupported"
    assert bd & 0x8F == 0 and (bd >> 4) & 7 >= 4
    max_block = 1 << (8 + 2 * ((bd >> 4) & 7))
    pos = 6 + (8 if content_size else 0) + 1
    out = []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        raw, size = size & 0x80000000, size & 0x7FFFFFFF
        block = frame[pos : pos + size]
        expect = min(max_block, total - sum(map(len, out)))
        out.append(block if raw else bytes(cramjam.lz4.decompress_block(block, output_len=expect)))
        pos += size + (4 if block_checksum else 0)
    pos += 4 if content_checksum else 0
    assert pos == len(frame)
    return b"".join(out)


@pytest.mark.parametrize("size", [0, 10, 70_000, 300_000])
def test_lz4_frames_are_readable_by_kafkas_java_reader(size):
    data = bytes((i * 31 + i // 1000) & 0xFF for i in range(size))
    assert _kafka_lz4_read(compression.compress(compression.LZ4, data), len(data)) == data
    batch = build_batch([(b"k", data, ())], compression_codec=compression.LZ4)
    assert bytes(iter_records(batch).__next__().value) == data


@pytest.mark.parametrize(
    "bad",
    [
        compression.XERIAL_MAGIC + b"\x00\x00",  # short header
        compression.XERIAL_MAGIC + b"\x00" * 8 + b"\x00\x00",  # short block length
        compression.XERIAL_MAGIC + b"\x00" * 8 + b"\x00\x00\x00\x09abc",  # overrun
        b"\xff\xff\xff\xff\xff",
    ],
)
def test_snappy_garbage_raises_compression_error(bad):
    with pytest.raises(compression.CompressionError):
        compression.decompress(compression.SNAPPY, bad)


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_other_codec_garbage_raises_compression_error(codec):
    with pytest.raises(compression.CompressionError):
        compression.decompress(codec, b"definitely not compressed data")


# ======================================================================== kio agreement


def _kio_ts(ms: int):
    return TZAwareMicros.parse(datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))


@SETTINGS
@given(records=record_lists(max_size=6), epoch=st.integers(0, 1000), base_offset=st.integers(0, 2**40))
def test_build_batch_matches_kio_writer_byte_for_byte(records, epoch, base_offset):
    # kio's writer takes datetimes: whole seconds keep its float arithmetic exact
    records = [(k, v, hs, (ts // 1000) * 1000) for k, v, hs, ts in records]
    ours = build_batch(
        records, base_offset=base_offset, partition_leader_epoch=epoch, producer_id=7, producer_epoch=1, base_sequence=5
    )
    kio_batch = KioNewBatch(
        producer_id=7,
        producer_epoch=1,
        partition_leader_epoch=epoch,
        base_sequence=5,
        attributes=0,
        records=tuple(
            KioRecord(
                attributes=0,
                timestamp=_kio_ts(ts),
                offset=base_offset + i,
                key=k,
                value=v,
                headers=tuple(KioHeader(key=hk.encode(), value=hv) for hk, hv in hs),
            )
            for i, (k, v, hs, ts) in enumerate(records)
        ),
    )
    buf = io.BytesIO()
    kio_write_new_batch(buf, kio_batch)
    assert ours == buf.getvalue()


@SETTINGS
@given(records=record_lists(max_size=6), base_offset=st.integers(0, 2**40))
def test_our_batches_read_by_kio(records, base_offset):
    data = build_batch(records, base_offset=base_offset)
    batch, size = kio_read_batch(memoryview(data), 0)
    assert size == len(data)
    assert batch.crc == rb.read_header(data).crc
    for kr, (k, v, hs, ts) in zip(batch.records, records, strict=True):
        assert (kr.key, kr.value) == (k, v)
        assert [(h.key, h.value) for h in kr.headers] == [(hk.encode(), hv) for hk, hv in hs]
        assert int(kr.timestamp.timestamp()) == ts // 1000  # kio keeps whole seconds
    assert [kr.offset for kr in batch.records] == [base_offset + i for i in range(len(records))]


# ======================================================================== CRC and patching


@SETTINGS
@given(records=record_lists(max_size=4), codec=st.sampled_from(CODECS), data=st.data())
def test_crc_covers_attributes_to_end_only(records, codec, data):
    batch = bytearray(build_batch(records, compression_codec=codec))
    i = data.draw(st.integers(0, len(batch) - 1))
    batch[i] ^= data.draw(st.integers(1, 255))
    if i < rb.CRC_OFFSET:  # baseOffset, batchLength, partitionLeaderEpoch, magic: outside the CRC
        assert rb.compute_crc(batch, 0, len(batch)) == rb.read_header(batch).crc
    else:
        assert not rb.is_crc_valid(batch, 0, len(batch))


@SETTINGS
@given(
    records=record_lists(max_size=4),
    codec=st.sampled_from(CODECS),
    base=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
)
def test_patch_offset_and_epoch_keeps_crc(records, codec, base, epoch):
    batch = bytearray(build_batch(records, compression_codec=codec))
    rb.patch_offset_and_epoch(memoryview(batch), 0, base, epoch)
    h = rb.read_header(batch)
    assert (h.base_offset, h.partition_leader_epoch) == (base, epoch)
    assert rb.is_crc_valid(batch, 0, len(batch))
    assert [r.offset for r in iter_records(batch)] == [base + i for i in range(len(records))]


@SETTINGS
@given(records=record_lists(max_size=4), codec=st.sampled_from(CODECS), lat=st.integers(0, 2**42))
def test_set_max_timestamp_and_type(records, codec, lat):
    batch = bytearray(build_batch(records, compression_codec=codec))
    rb.set_max_timestamp_and_type(batch, 0, len(batch), lat)
    h = rb.read_header(batch)
    assert rb.is_crc_valid(batch, 0, len(batch))
    assert h.is_log_append_time and h.max_timestamp == lat and h.compression == codec
    assert all(r.timestamp == lat for r in iter_records(batch))
    # back to CreateTime: flag cleared, max timestamp kept, CRC recomputed
    rb.set_max_timestamp_and_type(batch, 0, len(batch), None)
    h = rb.read_header(batch)
    assert rb.is_crc_valid(batch, 0, len(batch)) and not h.is_log_append_time and h.max_timestamp == lat
    assert [r.timestamp for r in iter_records(batch)] == [r[3] for r in records]


def test_header_properties():
    h = rb.read_header(
        build_batch([(b"k", b"v", ())] * 3, base_offset=10, producer_id=5, producer_epoch=0, base_sequence=2**31 - 2)
    )
    assert (h.last_offset, h.next_offset, h.size) == (12, 13, h.batch_length + 12)
    assert h.has_producer_id and h.last_sequence == 0  # wraps like Kafka's incrementSequence
    assert rb.read_header(build_batch([(None, b"v", ())])).last_sequence == -1


def test_iter_batch_positions_stops_at_partial_tail():
    a = build_batch([(b"a", b"1", ())])
    b = build_batch([(b"b", b"2", ())], base_offset=1)
    data = a + b + b[:30]
    assert list(rb.iter_batch_positions(data)) == [(0, len(a)), (len(a), len(b))]
    assert [h.base_offset for _p, h in rb.iter_headers(data)] == [0, 1]


# ======================================================================== framing scans


def _kafka_varint(buf: bytes, p: int, end: int, long: bool = False) -> tuple[int, int]:
    """Kafka's ByteUtils.readVarint (at most 5 bytes, 32-bit) or readVarlong (10 bytes)."""
    v = shift = 0
    while True:
        if p >= end:
            raise IndexError
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            if not long:
                v &= 0xFFFFFFFF
            return (v >> 1) ^ -(v & 1), p
        shift += 7
        if shift >= (70 if long else 35):
            raise ValueError("Varint is too long")


def _reference_scan(buf: bytes, expected: int):
    """Kafka's DefaultRecord.readFrom over a records section: ("ok", null_key, offsets_ok)
    or ("invalid",). The timestamp delta is a varlong, every other field a varint."""
    pos, end = 0, len(buf)

    def varint(p, long=False):
        return _kafka_varint(buf, p, end, long)

    null_key, offsets_ok, count = False, True, 0
    try:
        for count in range(expected):
            if pos >= end:
                return ("invalid",)
            length, pos = varint(pos)
            if length <= 0 or pos + length > end:
                return ("invalid",)
            rec_end = pos + length
            sub_end, end = end, rec_end
            try:
                p = pos + 1
                _ts, p = varint(p, long=True)
                od, p = varint(p)
                offsets_ok &= od == count
                n, p = varint(p)
                if n < 0:
                    null_key = True
                else:
                    p += n
                n, p = varint(p)
                p += max(n, 0)
                nh, p = varint(p)
                if nh < 0 or nh > rec_end - p:
                    return ("invalid",)
                for _ in range(nh):
                    n, p = varint(p)
                    if n < 0:
                        return ("invalid",)
                    p += n
                    n, p = varint(p)
                    p += max(n, 0)
                if p != rec_end:
                    return ("invalid",)
            finally:
                end = sub_end
            pos = rec_end
        if pos != end:
            return ("invalid",)
        return ("ok", null_key, offsets_ok)
    except (IndexError, ValueError):
        return ("invalid",)


def _ours_scan(buf: bytes, expected: int):
    try:
        r = scan_records(buf, 0, len(buf), expected)
    except (rb.InvalidRecordError, rb.CorruptRecordError):
        return ("invalid",)
    assert r.count == expected
    return ("ok", r.null_key, r.offsets_ok)


def _ours_walk(buf: bytes, expected: int) -> bool:
    try:
        walk_record_lengths(buf, 0, len(buf), expected)
        return True
    except (rb.InvalidRecordError, rb.CorruptRecordError):
        return False


def _walk_reference(buf: bytes, expected: int) -> bool:
    pos = count = 0
    while pos < len(buf):
        try:
            length, pos = _kafka_varint(buf, pos, len(buf))
        except (IndexError, ValueError):
            return False
        if length <= 0:
            return False
        pos += length
        count += 1
    return pos == len(buf) and count == expected


@SETTINGS
@given(records=record_lists(max_size=5, stamps=False))
def test_scans_accept_every_valid_section(records):
    body = records_body([(k, v, hs) for k, v, hs, _ in records])
    assert _ours_scan(body, len(records)) == _reference_scan(body, len(records))
    assert _ours_scan(body, len(records))[0] == "ok"
    assert _ours_walk(body, len(records))


@SETTINGS
@given(records=record_lists(max_size=5, stamps=False))
def test_scans_reject_every_truncation(records):
    body = records_body([(k, v, hs) for k, v, hs, _ in records])
    n = len(records)
    for cut in range(len(body)):
        short = body[:cut]
        assert _ours_scan(short, n) == ("invalid",)
        assert not _ours_walk(short, n)
        # the end bound says cut, but the buffer goes on: the scan must not read past it
        with pytest.raises((rb.InvalidRecordError, rb.CorruptRecordError)):
            scan_records(body, 0, cut, n)
    for wrong in (n - 1, n + 1):
        assert _ours_scan(body, wrong) == ("invalid",)
        assert not _ours_walk(body, wrong)


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(max_size=4, stamps=False), data=st.data())
def test_scans_on_altered_bytes_agree_with_reference(records, data):
    body = bytearray(records_body([(k, v, hs) for k, v, hs, _ in records]))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    body = bytes(body)
    n = len(records)
    assert _ours_scan(body, n) == _reference_scan(body, n)
    assert _ours_walk(body, n) == _walk_reference(body, n)


def test_scan_rules_from_kafka():
    def rec(*fields: bytes) -> bytes:
        body = b"\x00" + b"".join(fields)
        return encode_varint(len(body)) + body

    ts, od = encode_varint(0), encode_varint(0)
    # a negative key/value size other than -1 still reads as null (Kafka's Utils.readBytes)
    body = rec(ts, od, encode_varint(-5), encode_varint(-7), encode_varint(0))
    r = scan_records(body, 0, len(body), 1)
    assert r.null_key and r.count == 1
    # a null header key is invalid; a null header value is fine
    with pytest.raises(rb.InvalidRecordError):
        body = rec(
            ts, od, encode_varint(1), b"k", encode_varint(-1), encode_varint(1), encode_varint(-1), encode_varint(-1)
        )
        scan_records(body, 0, len(body), 1)
    body = rec(
        ts, od, encode_varint(1), b"k", encode_varint(-1), encode_varint(1), encode_varint(1), b"h", encode_varint(-1)
    )
    assert scan_records(body, 0, len(body), 1).count == 1
    # a header count larger than what is left of the record
    with pytest.raises(rb.InvalidRecordError):
        body = rec(ts, od, encode_varint(-1), encode_varint(-1), encode_varint(1000))
        scan_records(body, 0, len(body), 1)
    # negative header count
    with pytest.raises(rb.InvalidRecordError):
        body = rec(ts, od, encode_varint(-1), encode_varint(-1), encode_varint(-1))
        scan_records(body, 0, len(body), 1)
    # offset deltas not 0, 1, 2: accepted, flagged for rebuild
    body = records_body([(b"a", b"1", ()), (b"b", b"2", ())], offset_deltas=[0, 5])
    assert not scan_records(body, 0, len(body), 2).offsets_ok


# ======================================================================== validator


def cfg(**kw) -> LogConfig:
    return LogConfig(**kw)


def validate(buf, config=None, now=NOW):
    return validate_batch(memoryview(buf), config or cfg(), now, "t-0")


def code_of(buf, config=None, now=NOW) -> int:
    with pytest.raises(KafkaError) as e:
        validate(buf, config, now)
    return int(e.value.code)


def good(n=3, codec=0, **kw) -> bytearray:
    return bytearray(
        build_batch(
            [(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(n)], compression_codec=codec, timestamp=NOW, **kw
        )
    )


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batch_is_accepted_in_place(codec):
    buf = good(codec=codec)
    v = validate(buf)
    assert not v.rebuilt and v.data.obj is buf  # the produce frame itself: nothing copied
    assert bytes(v.data) == bytes(buf) and v.header.records_count == 3


def test_shape_errors_follow_kafka_codes():
    b = good()
    assert code_of(b[:11]) == INVALID_RECORD  # no batch at all
    assert code_of(bytearray(b"")) == INVALID_RECORD
    assert code_of(b[:16]) == INVALID_RECORD  # header up to magic incomplete
    assert code_of(b[: len(b) - 1]) == INVALID_RECORD  # truncated batch: not a whole batch
    short = bytearray(b)
    struct.pack_into(">i", short, 8, 13)  # below the minimum record overhead (14)
    assert code_of(short) == CORRUPT_MESSAGE
    for magic, code in ((0, INVALID_RECORD), (1, INVALID_RECORD), (3, CORRUPT_MESSAGE), (0xFF, CORRUPT_MESSAGE)):
        m = bytearray(b)
        m[rb.MAGIC_OFFSET] = magic
        assert code_of(m) == code, magic
    two = b + good()
    assert code_of(two) == INVALID_RECORD  # exactly one batch per partition
    tiny = bytearray(b)
    struct.pack_into(">i", tiny, 8, 30)  # a plausible length, but below the v2 header: not valid
    assert code_of(tiny) == CORRUPT_MESSAGE


def test_trailing_partial_batch_is_trimmed():
    b = good()
    for tail in (b[:5], b[:20], b[: len(b) - 1]):
        v = validate(b + tail)
        assert bytes(v.data) == bytes(b)


def test_trailing_garbage_with_a_corrupt_length_is_corrupt():
    b = good()
    tail = bytearray(b[:20])
    struct.pack_into(">i", tail, 8, 3)
    assert code_of(b + tail) == CORRUPT_MESSAGE


def test_header_field_errors():
    b = good()
    off = bytearray(b)
    struct.pack_into(">q", off, 0, 5)
    assert code_of(off) == INVALID_RECORD  # baseOffset must be 0
    assert code_of(good(), cfg(max_message_bytes=len(b) - 1)) == MESSAGE_TOO_LARGE
    validate(good(), cfg(max_message_bytes=len(b)))
    crc = bytearray(b)
    crc[-1] ^= 1
    assert code_of(crc) == CORRUPT_MESSAGE
    # Kafka's order: baseOffset before size before CRC
    both = bytearray(crc)
    struct.pack_into(">q", both, 0, 5)
    assert code_of(both) == INVALID_RECORD
    assert code_of(crc, cfg(max_message_bytes=10)) == MESSAGE_TOO_LARGE

    body = records_body([(b"k", b"v", ())] * 2)
    assert code_of(raw_batch(body, 2, last_offset_delta=-1)) == INVALID_RECORD
    assert code_of(raw_batch(b"", 0, last_offset_delta=0)) == INVALID_RECORD  # count 0
    assert code_of(raw_batch(body, 2, last_offset_delta=3)) == INVALID_RECORD  # count != delta + 1
    assert code_of(raw_batch(body, 2, attributes=rb.CONTROL_FLAG)) == INVALID_RECORD
    assert code_of(raw_batch(body, 2, producer_id=9, producer_epoch=0, base_sequence=-1)) == INVALID_RECORD
    validate(raw_batch(body, 2, producer_id=9, producer_epoch=0, base_sequence=0))
    assert code_of(raw_batch(body, 2, attributes=5)) == CORRUPT_MESSAGE  # unknown codec


def test_record_framing_errors_are_invalid_record():
    body = records_body([(b"k", b"v", ())] * 3)
    assert code_of(raw_batch(body, 4, last_offset_delta=3)) == INVALID_RECORD  # count lies (too many)
    assert code_of(raw_batch(body, 2)) == INVALID_RECORD  # records still remaining
    assert code_of(raw_batch(body[:-1], 3)) == INVALID_RECORD  # last record runs past the batch
    assert code_of(raw_batch(body + b"\x00", 3)) == INVALID_RECORD
    for codec in (1, 2, 3, 4):
        packed = compression.compress(codec, body[:-2])
        assert code_of(raw_batch(packed, 3, attributes=codec)) == INVALID_RECORD
    garbage = raw_batch(b"\x01\x02\x03 not compressed", 3, attributes=compression.LZ4)
    assert code_of(garbage) == CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_topic_needs_keys(codec):
    no_key = bytearray(build_batch([(b"k", b"v", ()), (None, b"v", ())], compression_codec=codec, timestamp=NOW))
    assert code_of(no_key, cfg(cleanup_policy=("compact",))) == INVALID_RECORD
    validate(bytearray(no_key))  # fine on a delete topic
    validate(good(codec=codec), cfg(cleanup_policy=("compact", "delete")))


def test_timestamp_bounds():
    after, before = 3_600_000, 86_400_000
    c = cfg(message_timestamp_after_max_ms=after, message_timestamp_before_max_ms=before)
    ok = bytearray(build_batch([(b"k", b"v", (), NOW - before), (b"k", b"v", (), NOW + after)]))
    validate(ok, c)
    late = bytearray(build_batch([(b"k", b"v", (), NOW), (b"k", b"v", (), NOW + after + 1)]))
    assert code_of(late, c) == INVALID_TIMESTAMP
    early = bytearray(build_batch([(b"k", b"v", (), NOW - before - 1), (b"k", b"v", (), NOW)]))
    assert code_of(early, c) == INVALID_TIMESTAMP
    # Kafka's defaults: no lower bound, one hour ahead
    validate(bytearray(build_batch([(b"k", b"v", (), 0)])))
    assert code_of(bytearray(build_batch([(b"k", b"v", (), NOW + 3_600_001)]))) == INVALID_TIMESTAMP
    # records without a timestamp (-1) are not checked
    validate(raw_batch(records_body([(b"k", b"v", ())]), 1, base_ts=-1, max_ts=-1), c)


def test_log_append_time_flag_from_a_producer():
    body = records_body([(b"k", b"v", ())] * 2)
    flagged = raw_batch(body, 2, attributes=rb.TIMESTAMP_TYPE_MASK, base_ts=NOW - 5, max_ts=NOW)
    # a LogAppendTime topic refuses it
    assert code_of(bytearray(flagged), cfg(message_timestamp_type="LogAppendTime")) == INVALID_TIMESTAMP
    # a CreateTime topic takes every record's timestamp as the max timestamp, checks it and
    # stores the batch as CreateTime (Kafka's setMaxTimestamp(CREATE_TIME, max))
    v = validate(bytearray(flagged))
    assert not v.header.is_log_append_time and not rb.read_header(v.data).is_log_append_time
    assert rb.is_crc_valid(v.data, 0, len(v.data))
    too_new = raw_batch(body, 2, attributes=rb.TIMESTAMP_TYPE_MASK, base_ts=NOW, max_ts=NOW + 3_600_001)
    assert code_of(too_new) == INVALID_TIMESTAMP
    no_ts = raw_batch(body, 2, attributes=rb.TIMESTAMP_TYPE_MASK, base_ts=-1, max_ts=-1)
    assert code_of(no_ts) == INVALID_TIMESTAMP


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_topic(codec):
    buf = bytearray(
        build_batch([(b"k%d" % i, b"v", (), NOW - 10_000_000 + i) for i in range(3)], compression_codec=codec)
    )
    v = validate(buf, cfg(message_timestamp_type="LogAppendTime"), now=NOW + 7)
    h = rb.read_header(v.data)
    assert h.is_log_append_time and h.max_timestamp == NOW + 7 and h.compression == codec
    assert v.header.is_log_append_time and v.header.max_timestamp == NOW + 7
    assert rb.is_crc_valid(v.data, 0, len(v.data)) and not v.rebuilt
    assert [r.timestamp for r in iter_records(v.data)] == [NOW + 7] * 3


def record_errors_of(buf, config=None, now=NOW) -> RecordValidationError:
    with pytest.raises(RecordValidationError) as e:
        validate(buf, config, now)
    return e.value


def no_key_error(i: int) -> tuple[int, str]:
    return i, "Compacted topic cannot accept message without key in topic partition t-0"


@pytest.mark.parametrize("codec", CODECS)
def test_keyless_records_on_a_compacted_topic_are_listed(codec):
    # KIP-467: Kafka lists each failing record (index, message), and sums up the first three
    records = [(None if i % 10 == 3 else b"k%d" % i, b"v", ()) for i in range(100)]
    e = record_errors_of(
        bytearray(build_batch(records, compression_codec=codec, timestamp=NOW)), cfg(cleanup_policy=("compact",))
    )
    assert e.code == INVALID_RECORD
    assert e.record_errors == [no_key_error(i) for i in range(3, 100, 10)]
    assert e.message == (
        "One or more records have been rejected due to 10 record errors in total, and only showing the first "
        "three errors at most: [RecordError(batchIndex=3, message='Compacted topic cannot accept message without "
        "key in topic partition t-0'), RecordError(batchIndex=13, message='Compacted topic cannot accept message "
        "without key in topic partition t-0'), RecordError(batchIndex=23, message='Compacted topic cannot accept "
        "message without key in topic partition t-0')]"
    )
    one = record_errors_of(bytearray(build_batch([(None, b"v", ())], timestamp=NOW)), cfg(cleanup_policy=("compact",)))
    assert one.message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        "showing the first three errors at most: [RecordError(batchIndex=0, message='Compacted "
        "topic cannot accept message without key in topic partition t-0')]"
    )


@pytest.mark.parametrize("codec", CODECS)
def test_out_of_range_timestamps_are_listed(codec):
    after, before = 3_600_000, 86_400_000
    c = cfg(message_timestamp_after_max_ms=after, message_timestamp_before_max_ms=before)
    stamps = [NOW - before - 1, NOW, NOW + after + 1, NOW + after, -1, NOW - before]
    e = record_errors_of(bytearray(build_batch([(b"k", b"v", (), t) for t in stamps], compression_codec=codec)), c)
    assert e.code == INVALID_TIMESTAMP
    assert e.message == "One or more records have been rejected due to invalid timestamp"
    bounds = f"[{NOW - before}, {NOW + after}]"
    assert e.record_errors == [
        (
            0,
            f"Timestamp {NOW - before - 1} of message with offset 0 is out of range. The timestamp should be "
            f"within {bounds}",
        ),
        (
            2,
            f"Timestamp {NOW + after + 1} of message with offset 2 is out of range. The timestamp should be "
            f"within {bounds}",
        ),
    ]
    # Kafka's defaults: the lower bound is Long.MAX_VALUE ms back, computed in Java longs
    e = record_errors_of(bytearray(build_batch([(b"k", b"v", (), NOW + after + 1)], compression_codec=codec)))
    assert e.record_errors == [
        (
            0,
            f"Timestamp {NOW + after + 1} of message with offset 0 is out of range. The "
            f"timestamp should be within [{NOW - 2**63 + 1}, {NOW + after}]",
        )
    ]
    # ... and an upper bound of Long.MAX_VALUE ms ahead wraps around, as in Java
    e = record_errors_of(
        bytearray(build_batch([(b"k", b"v", (), NOW - 2)], compression_codec=codec)),
        cfg(message_timestamp_before_max_ms=1, message_timestamp_after_max_ms=2**63 - 1),
    )
    assert e.record_errors[0][1].endswith(f"within [{NOW - 1}, {NOW - 2**63 - 1}]")


def test_record_errors_name_the_offset_the_producer_wrote():
    body = records_body([(b"k", b"v", ())] * 2, offset_deltas=[0, 7])  # a delta Kafka keeps in the message
    late = NOW + 3_600_001
    e = record_errors_of(raw_batch(body, 2, base_ts=late, max_ts=late))
    assert [m.split(" is out")[0] for _, m in e.record_errors] == [
        f"Timestamp {late} of message with offset 0",
        f"Timestamp {late} of message with offset 7",
    ]


def test_a_keyless_record_fails_on_its_key_before_its_timestamp():
    late = NOW + 3_600_001
    records = [(None, b"v", (), late), (b"k", b"v", (), late), (None, b"v", (), NOW), (b"k", b"v", (), NOW)]
    e = record_errors_of(bytearray(build_batch(records)), cfg(cleanup_policy=("compact",)))
    assert e.code == INVALID_TIMESTAMP  # any timestamp error makes the batch's error INVALID_TIMESTAMP
    assert [i for i, _ in e.record_errors] == [0, 1, 2]
    assert e.record_errors[0] == no_key_error(0) and e.record_errors[2] == no_key_error(2)
    assert e.record_errors[1][1].startswith(f"Timestamp {late} of message with offset 1 is out of range")


@pytest.mark.parametrize(
    "codec,topic_type,shown",
    [
        (0, "producer", "DefaultRecord(offset={i}, timestamp={t}, key={k} bytes, value=1 bytes)"),
        (0, "gzip", "DefaultRecord(offset={i}, timestamp={t}, key={k} bytes, value=1 bytes)"),
        (1, "lz4", "DefaultRecord(offset={i}, timestamp={t}, key={k} bytes, value=1 bytes)"),
        # compressed and kept as is: Kafka reads only the sizes (a null key is -1 bytes)
        (1, "producer", "PartialDefaultRecord(offset={i}, timestamp={t}, key={kw} bytes, value=1 bytes)"),
    ],
)
def test_log_append_time_flag_is_refused_per_record(codec, topic_type, shown):
    records = [(b"key", b"v", (), NOW - 5), (None, b"v", (), NOW)]
    flagged = bytearray(build_batch(records, compression_codec=codec))
    flagged[rb.ATTRIBUTES_OFFSET + 1] |= rb.TIMESTAMP_TYPE_MASK
    struct.pack_into(">I", flagged, rb.CRC_OFFSET, crc32c(bytes(flagged[rb.ATTRIBUTES_OFFSET :])))
    e = record_errors_of(flagged, cfg(message_timestamp_type="LogAppendTime", compression_type=topic_type))
    assert e.code == INVALID_TIMESTAMP
    assert e.message == "One or more records have been rejected due to invalid timestamp"
    expect = [shown.format(i=0, t=NOW, k=3, kw=3), shown.format(i=1, t=NOW, k=0, kw=-1)]
    assert e.record_errors == [
        (i, f"Invalid timestamp type in message {r}. Producer should not set timestamp type to LogAppendTime.")
        for i, r in enumerate(expect)
    ]
    # on a CreateTime topic only a LogAppendTime batch without a max timestamp is refused so
    e = record_errors_of(
        raw_batch(records_body([(b"k", b"v", ())]), 1, attributes=rb.TIMESTAMP_TYPE_MASK, base_ts=-1, max_ts=-1)
    )
    assert e.record_errors == [
        (
            0,
            "Invalid timestamp type in message DefaultRecord(offset=0, timestamp=-1, "
            "key=1 bytes, value=1 bytes). Producer should not set timestamp type to "
            "LogAppendTime.",
        )
    ]


def test_framing_errors_are_not_record_errors():
    # Kafka's record iterator throws before any record error is reported: a plain INVALID_RECORD
    body = records_body([(None, b"v", ())] * 3)
    with pytest.raises(KafkaError) as e:
        validate(raw_batch(body[:-1], 3), cfg(cleanup_policy=("compact",)))
    assert e.value.code == INVALID_RECORD and not isinstance(e.value, RecordValidationError)


TOPIC_TYPES = ["uncompressed", "gzip", "snappy", "lz4", "zstd", "producer"]


@pytest.mark.parametrize("src", CODECS)
@pytest.mark.parametrize("topic_type", TOPIC_TYPES)
def test_recompression_when_topic_compression_differs(src, topic_type):
    records = [(b"key-%d" % i, b"value-%d" % i * 20, [("h%d" % i, b"x"), ("n", None)], NOW + i) for i in range(5)]
    buf = bytearray(
        build_batch(
            records, compression_codec=src, producer_id=4, producer_epoch=2, base_sequence=10, transactional=True
        )
    )
    target = src if topic_type == "producer" else TOPIC_TYPES.index(topic_type)
    v = validate(buf, cfg(compression_type=topic_type))
    h = rb.read_header(v.data)
    assert h.compression == target
    assert v.rebuilt == (target != src)
    assert rb.is_crc_valid(v.data, 0, len(v.data)) and h.size == len(v.data)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (4, 2, 10, True)
    assert (h.base_timestamp, h.max_timestamp, h.records_count) == (NOW, NOW + 4, 5)
    got = [(r.key, r.value, r.headers, r.timestamp) for r in iter_records(v.data)]
    assert got == [(k, v_, list(hs), ts) for k, v_, hs, ts in records]
    if target == compression.SNAPPY and v.rebuilt:
        assert bytes(v.data[rb.HEADER_SIZE : rb.HEADER_SIZE + 8]) == compression.XERIAL_MAGIC  # as Kafka writes


def test_recompression_with_log_append_time():
    buf = good(codec=0)
    v = validate(buf, cfg(compression_type="zstd", message_timestamp_type="LogAppendTime"), now=NOW + 99)
    h = rb.read_header(v.data)
    assert v.rebuilt and h.compression == 4 and h.is_log_append_time and h.max_timestamp == NOW + 99


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batch_with_non_sequential_offsets_is_rebuilt(codec):
    body = records_body([(b"a", b"1", ()), (b"b", b"2", ()), (b"c", b"3", ())], offset_deltas=[0, 2, 4])
    buf = raw_batch(compression.compress(codec, body), 3, attributes=codec)
    v = validate(buf)
    assert v.rebuilt
    assert [r.offset for r in iter_records(v.data)] == [0, 1, 2]


def test_uncompressed_batch_with_non_sequential_offsets_is_kept_in_place():
    # Kafka's assignOffsetsNonCompressed patches the header and keeps the records
    body = records_body([(b"a", b"1", ()), (b"b", b"2", ())], offset_deltas=[0, 3])
    for c in (cfg(), cfg(cleanup_policy=("compact",))):
        v = validate(raw_batch(body, 2), c)
        assert not v.rebuilt


def test_negative_timestamp_deltas_and_no_timestamp():
    data = build_batch([(b"a", b"1", (), 5000), (b"b", b"2", (), 1000), (b"c", b"3", (), -1)])
    h = rb.read_header(data)
    assert (h.base_timestamp, h.max_timestamp) == (5000, 5000)
    assert [r.timestamp for r in iter_records(data)] == [5000, 1000, -1]


def test_transient_decompression_buffers_are_per_thread():
    """Several nodes may run in one process, each on its own thread: a view one thread holds
    must not be overwritten by another thread's decompression."""
    import threading

    from kesque.records import compression as comp

    payloads = [bytes([i]) * 100_000 for i in range(2)]
    frames = [comp.compress(comp.ZSTD, p) for p in payloads]
    held = comp.decompress_transient(comp.ZSTD, frames[0])
    other = threading.Thread(target=lambda: comp.decompress_transient(comp.ZSTD, frames[1]))
    other.start()
    other.join()
    assert bytes(held) == payloads[0]
