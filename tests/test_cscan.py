"""The compiled record scan (kesque/records/_cscan.c) agrees with the Python reference.

Both are run on the same inputs — valid batches, and batches with bytes flipped, cut or
inserted — and must accept the same ones with the same result and refuse the same ones.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples
from kesque.records import batch as rb
from kesque.records import records as rr

pytestmark = pytest.mark.skipif(not rr.COMPILED_SCAN, reason="compiled scan not built (no C compiler)")

SETTINGS = settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])

values = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
records = st.lists(st.tuples(values, values, headers), min_size=1, max_size=40)


def _outcome(fn, buf, pos, end, count):
    try:
        r = fn(buf, pos, end, count)
    except rb.InvalidRecordError:
        return "invalid"
    return None if r is None else (r.count, r.null_key, r.offsets_ok)


def _both(buf, count):
    end = len(buf)
    scan = (
        _outcome(rr.scan_records, buf, rb.HEADER_SIZE, end, count),
        _outcome(rr._scan_py, buf, rb.HEADER_SIZE, end, count),
    )
    walk = (
        _outcome(rr.walk_record_lengths, buf, rb.HEADER_SIZE, end, count),
        _outcome(rr._walk_py, buf, rb.HEADER_SIZE, end, count),
    )
    return scan, walk


@SETTINGS
@given(records)
def test_valid_batches_agree(recs):
    buf = rr.build_batch(recs)
    (c, p), (wc, wp) = _both(buf, len(recs))
    assert c == p == (len(recs), any(k is None for k, _v, _h in recs), True)
    assert wc == wp is None


@SETTINGS
@given(records, st.data())
def test_damaged_batches_agree(recs, data):
    buf = bytearray(rr.build_batch(recs))
    kind = data.draw(st.sampled_from(["flip", "cut", "insert", "count"]))
    if kind == "flip":
        i = data.draw(st.integers(rb.HEADER_SIZE, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        del buf[data.draw(st.integers(rb.HEADER_SIZE + 1, len(buf) - 1)) :]
    elif kind == "insert":
        i = data.draw(st.integers(rb.HEADER_SIZE, len(buf)))
        buf[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    count = len(recs) + (data.draw(st.integers(-2, 2)) if kind == "count" else 0)
    (c, p), (wc, wp) = _both(bytes(buf), count)
    assert (c == "invalid") == (p == "invalid")
    if c != "invalid":
        assert c == p
    assert (wc == "invalid") == (wp == "invalid")


def test_out_of_range_positions_are_refused_not_read():
    buf = rr.build_batch([(b"k", b"v", ())])
    with pytest.raises(rb.InvalidRecordError):
        rr.scan_records(buf, 0, len(buf) + 10, 1)
    with pytest.raises(rb.InvalidRecordError):
        rr.walk_record_lengths(buf, -1, len(buf), 1)


def test_varints_longer_than_kafka_allows_are_refused():
    # a record length written with 6 bytes (Kafka's int varints are at most 5)
    body = bytes([0x82, 0x80, 0x80, 0x80, 0x80, 0x00]) + b"\x00" * 2
    buf = bytes(rb.HEADER_SIZE) + body
    for fn in (rr.scan_records, rr._scan_py, rr.walk_record_lengths, rr._walk_py):
        with pytest.raises(rb.InvalidRecordError):
            fn(buf, rb.HEADER_SIZE, len(buf), 1)


# ---------------------------------------------------------------------- columns (the Spark reader)


def _columns_outcome(fn, payload, count):
    try:
        return fn(payload, count)
    except ValueError:
        return "invalid"


@SETTINGS
@given(records, st.data())
def test_record_columns_agree_with_iter_records(recs, data):
    """Compiled and Python column buffers are identical, and decode to what iter_records reads;
    damaged payloads are refused by both or read identically by both."""
    import array

    buf = rr.build_batch(recs, timestamp=1_700_000_000_000)
    h = rb.read_header(buf, 0)
    payload = bytes(rr.records_payload(buf, 0, h))
    got = rr._cscan.columns(payload, h.records_count)
    assert got == rr._record_columns_py(payload, h.records_count)
    n, ts, off, kv, ko, kd, vv, vo, vd = got
    ko, vo = array.array("i", ko), array.array("i", vo)
    for i, r in enumerate(rr.iter_records(buf, 0, h)):
        assert h.base_offset + array.array("q", off)[i] == r.offset
        assert h.base_timestamp + array.array("q", ts)[i] == r.timestamp
        assert (kd[ko[i] : ko[i + 1]] if kv[i >> 3] >> (i & 7) & 1 else None) == r.key
        assert (vd[vo[i] : vo[i + 1]] if vv[i >> 3] >> (i & 7) & 1 else None) == r.value
    damaged = bytearray(payload)
    if damaged:
        i = data.draw(st.integers(0, len(damaged) - 1))
        damaged[i] = data.draw(st.integers(0, 255))
    cut = bytes(damaged[: data.draw(st.integers(0, len(damaged)))])
    for p in (bytes(damaged), cut):
        assert _columns_outcome(rr._cscan.columns, p, n) == _columns_outcome(rr._record_columns_py, p, n)


# ---------------------------------------------------------------------- encode (the Spark writer)


def _column(vals, offset: int = 0):
    """Arrow binary buffers by hand: (validity, int32 offsets, data, slice offset), with
    ``offset`` leading rows that are not part of the column."""
    import array

    vals = [b"junk"] * offset + vals
    valid = bytearray((len(vals) + 7) // 8)
    offs, data = array.array("i", [0]), bytearray()
    for i, v in enumerate(vals):
        if v is not None:
            valid[i >> 3] |= 1 << (i & 7)
            data += v
        offs.append(len(data))
    return bytes(valid), offs.tobytes(), bytes(data), offset


@SETTINGS
@given(st.lists(st.tuples(values, values), min_size=1, max_size=40), st.integers(0, 9), st.data())
def test_encode_columns_agree_with_the_record_encoder(rows, offset, data):
    import array

    picked = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=40))
    keys = _column([k for k, _ in rows], offset)
    vals = _column([v for _, v in rows], offset)
    idx = array.array("i", picked).tobytes()
    body = bytearray()
    for i, r in enumerate(picked):
        rr.encode_record(body, i, 0, rows[r][0], rows[r][1])
    assert rr._cscan.encode(keys, vals, idx) == rr._encode_columns_py(keys, vals, idx) == bytes(body)
    assert rr._cscan.encode(None, vals, idx) == rr._encode_columns_py(None, vals, idx)
    parts = rr._cscan.murmur2_partitions(keys, len(rows), 7)
    assert parts == rr._murmur2_partitions_py(keys, len(rows), 7)
    from kesque.utils import murmur2

    expected = [-1 if k is None else (murmur2(k) & 0x7FFFFFFF) % 7 for k, _ in rows]
    assert list(array.array("i", parts)) == expected


def test_encode_refuses_rows_outside_the_columns():
    import array

    col = _column([b"a", b"b"])
    with pytest.raises(ValueError):
        rr._cscan.encode(col, col, array.array("i", [2]).tobytes())
    with pytest.raises(ValueError):
        rr._cscan.encode(col, col, array.array("i", [-1]).tobytes())
