"""Records inside a v2 batch: the lean framing scan, full decoding, and a batch builder.

The produce path calls :func:`scan_records` — it walks the record framing with plain
integer arithmetic and builds no objects, so a malformed record is caught the way Kafka's
LogValidator catches it without paying for per-record dataclasses. :func:`iter_records`
decodes everything and is for tools, the log cleaner and coordinators replaying their
topics. :func:`build_batch` writes batches (control markers, internal topics, tests).
"""

from __future__ import annotations

import array
import struct
import time
from dataclasses import dataclass, field

from crc32c import crc32c

from ..utils import murmur2
from . import batch as rb
from . import compression

try:  # the compiled scan (setup.py builds it when a C compiler is present)
    from . import _cscan
except ImportError:  # pragma: no cover - exercised on machines without a compiler
    _cscan = None

#: True when the full per-field scan costs nanoseconds per record (the compiled scan is
#: built), so the produce path can afford it on every batch, as Kafka's LogValidator does.
COMPILED_SCAN = _cscan is not None

_U32 = struct.Struct(">I")


class ScanResult:
    __slots__ = ("count", "null_key", "offsets_ok")

    def __init__(self, count: int, null_key: bool, offsets_ok: bool):
        self.count = count
        self.null_key = null_key
        self.offsets_ok = offsets_ok


def _slow_varint(buf, p, max_bytes: int = 5):
    """Zig-zag varint of at most ``max_bytes`` bytes: 5 for Kafka's int fields, 10 for long."""
    v = 0
    shift = 0
    for _ in range(max_bytes):
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            if max_bytes == 5:
                v &= 0xFFFFFFFF
                n = (v >> 1) ^ -(v & 1)
                return n, p
            return (v >> 1) ^ -(v & 1), p
        shift += 7
    raise rb.InvalidRecordError("Varint is too long")


def walk_record_lengths(buf, pos: int, end: int, expected_count: int) -> None:
    """The records' length prefixes must tile ``[pos, end)`` and match the header's count."""
    if _cscan is not None:
        try:
            _cscan.walk(buf, pos, end, expected_count)
        except ValueError as e:
            raise rb.InvalidRecordError(str(e)) from None
        return
    _walk_py(buf, pos, end, expected_count)


def _walk_py(buf, pos: int, end: int, expected_count: int) -> None:
    """The cheap check for uncompressed batches: the records' length prefixes must tile
    ``[pos, end)`` exactly and their number must match the header. Costs one varint per
    record and builds nothing (the fields inside each record are covered by the CRC)."""
    count = 0
    try:
        while pos < end:
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                b2 = buf[pos + 1]
                if b2 < 0x80:  # records of 64 B - 8 KiB: a two-byte length, no call
                    v = (b & 0x7F) | (b2 << 7)
                    length = (v >> 1) ^ -(v & 1)
                    pos += 2
                else:
                    length, pos = _slow_varint(buf, pos)
            if length <= 0:
                raise rb.InvalidRecordError(f"record {count} has invalid length {length}")
            pos += length
            count += 1
    except IndexError as e:
        raise rb.InvalidRecordError("Incorrect declared batch size, premature EOF reached") from e
    if pos != end:
        raise rb.InvalidRecordError("Invalid record size: the last record runs past the end of the batch")
    if count != expected_count:
        raise rb.InvalidRecordError(f"batch declares {expected_count} records but contains {count}")


def scan_records(buf, pos: int, end: int, expected_count: int) -> ScanResult:
    """Check the framing of every field of every record in ``buf[pos:end]``.

    Used where the records are in hand anyway (after decompression) or a feature needs
    them (keys of compacted topics). Every framing error raises InvalidRecordError, as
    Kafka's DefaultRecord.readFrom raises InvalidRecordException for them (INVALID_RECORD):
    a record's declared length disagreeing with its fields, records overrunning the batch,
    a negative header count or header key size, a count that differs from the header's.
    Negative key/value sizes read as null (Kafka's ``Utils.readBytes``). ``offsets_ok`` is
    False when offset deltas are not 0, 1, 2, ... (Kafka then rebuilds the batch instead of
    assigning offsets in place).
    """
    if _cscan is not None:
        try:
            return ScanResult(*_cscan.scan(buf, pos, end, expected_count))
        except ValueError as e:
            raise rb.InvalidRecordError(str(e)) from None
    return _scan_py(buf, pos, end, expected_count)


def _scan_py(buf, pos: int, end: int, expected_count: int) -> ScanResult:
    """The reference implementation of :func:`scan_records` (and its fallback)."""
    try:
        return _scan(buf, pos, end, expected_count)
    except IndexError as e:
        raise rb.InvalidRecordError("Incorrect declared batch size, premature EOF reached") from e


def _scan(buf, pos, end, expected_count):  # noqa: C901 - one flat loop on purpose
    # Every varint is read inline with one- and two-byte fast paths (a 1 KiB record has a
    # two-byte length, value size and, past the 64th record, offset delta); longer ones
    # take the call. Zig-zag decoding: (v >> 1) ^ -(v & 1).
    count = 0
    null_key = False
    offsets_ok = True
    slow = _slow_varint
    while pos < end:
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif buf[pos + 1] < 0x80:
            v = (b & 0x7F) | (buf[pos + 1] << 7)
            length = (v >> 1) ^ -(v & 1)
            pos += 2
        else:
            length, pos = slow(buf, pos)
        rec_end = pos + length
        if length <= 0 or rec_end > end:
            raise rb.InvalidRecordError(f"record {count} has invalid length {length}")
        p = pos + 1  # attributes
        if buf[p] < 0x80:  # timestamp delta (value unused)
            p += 1
        elif buf[p + 1] < 0x80:
            p += 2
        else:
            _, p = slow(buf, p, 10)
        b = buf[p]  # offset delta
        if b < 0x80:
            od = (b >> 1) ^ -(b & 1)
            p += 1
        elif buf[p + 1] < 0x80:
            v = (b & 0x7F) | (buf[p + 1] << 7)
            od = (v >> 1) ^ -(v & 1)
            p += 2
        else:
            od, p = slow(buf, p)
        if od != count:
            offsets_ok = False
        b = buf[p]  # key length
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        elif buf[p + 1] < 0x80:
            v = (b & 0x7F) | (buf[p + 1] << 7)
            n = (v >> 1) ^ -(v & 1)
            p += 2
        else:
            n, p = slow(buf, p)
        if n > 0:
            p += n
        elif n < 0:  # any negative size is a null key
            null_key = True
        b = buf[p]  # value length (negative: null)
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        elif buf[p + 1] < 0x80:
            v = (b & 0x7F) | (buf[p + 1] << 7)
            n = (v >> 1) ^ -(v & 1)
            p += 2
        else:
            n, p = slow(buf, p)
        if n > 0:
            p += n
        b = buf[p]  # header count
        if b < 0x80:
            nh = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            nh, p = slow(buf, p)
        if nh:
            if nh < 0 or nh > rec_end - p:
                raise rb.InvalidRecordError(f"Found invalid number of record headers {nh} in record {count}")
            for _ in range(nh):
                b = buf[p]  # header key length: a header key is never null
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    n, p = slow(buf, p)
                if n < 0:
                    raise rb.InvalidRecordError(f"Invalid negative header key size {n} in record {count}")
                p += n
                b = buf[p]  # header value length (negative: null)
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    n, p = slow(buf, p)
                if n > 0:
                    p += n
        if p != rec_end:
            raise rb.InvalidRecordError(
                f"record {count}: expected to read {length} bytes in record payload, but read {p - pos}"
            )
        pos = rec_end
        count += 1
    if pos != end:
        raise rb.InvalidRecordError("Incorrect declared batch size, records still remaining")
    if count != expected_count:
        raise rb.InvalidRecordError(f"batch declares {expected_count} records but contains {count}")
    return ScanResult(count, null_key, offsets_ok)


# ----------------------------------------------------------------- decoding


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0
    size: int = 0  # encoded size including the length varint


def _varint(buf, p):
    b = buf[p]
    p += 1
    v = b & 0x7F
    shift = 7
    while b & 0x80:
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        shift += 7
    return (v >> 1) ^ -(v & 1), p


def _nbytes(buf, p):
    n, p = _varint(buf, p)
    if n < 0:
        return None, p
    return bytes(buf[p : p + n]), p + n


def records_payload(buf, pos: int, header: rb.BatchHeader) -> memoryview:
    """The (decompressed) records section of the batch at ``pos``."""
    mv = memoryview(buf)[pos + rb.HEADER_SIZE : pos + header.size]
    if header.compression:
        return compression.decompress(header.compression, mv)
    return mv


def iter_records(buf, pos: int = 0, header: rb.BatchHeader | None = None):
    """Decode every record of the batch at ``pos`` (tools, cleaner, coordinators)."""
    if header is None:
        header = rb.read_header(buf, pos)
    data = records_payload(buf, pos, header)
    p = 0
    end = len(data)
    for _ in range(header.records_count):
        if p >= end:
            break
        start = p
        length, p = _varint(data, p)
        body_end = p + length
        attributes = data[p]
        p += 1
        ts_delta, p = _varint(data, p)
        off_delta, p = _varint(data, p)
        key, p = _nbytes(data, p)
        value, p = _nbytes(data, p)
        nh, p = _varint(data, p)
        headers = []
        for _h in range(nh):
            hk, p = _nbytes(data, p)
            hv, p = _nbytes(data, p)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        p = body_end
        ts = header.max_timestamp if header.is_log_append_time else header.base_timestamp + ts_delta
        yield Record(header.base_offset + off_delta, ts, key, value, headers, attributes, p - start)


def record_columns(payload, count: int) -> tuple:
    """The records of one batch payload (decompressed records section) as column buffers:
    ``(count, ts_deltas, offset_deltas, key_validity, key_offsets, key_data, value_validity,
    value_offsets, value_data)`` — int64 deltas, Arrow validity bitmaps (LSB first) and int32
    offsets, native byte order. Headers are skipped. The compiled ``_cscan.columns`` does the
    same without a Python object per record; this is its reference and fallback."""
    if _cscan is not None:
        return _cscan.columns(payload, count)
    return _record_columns_py(payload, count)


def _record_columns_py(payload, count: int) -> tuple:
    data = memoryview(payload)
    ts, off = array.array("q"), array.array("q")
    kv, vv = bytearray((count + 7) // 8), bytearray((count + 7) // 8)
    ko, vo = array.array("i", [0]), array.array("i", [0])
    kd, vd = bytearray(), bytearray()
    p, end = 0, len(data)
    i = 0

    def varint(p, lim, max_bytes=5):
        try:
            v, q = _slow_varint(data, p, max_bytes)
        except IndexError:
            q = lim + 1
        if q > lim:
            raise ValueError(f"record {i}: a varint runs past the end of the record")
        return v, q

    while i < count and p < end:
        length, p = varint(p, end)
        if length <= 0 or length > end - p:
            raise ValueError(f"record {i} has invalid length {length}")
        rec_end = p + length
        p += 1
        t, p = varint(p, rec_end, 10)
        o, p = varint(p, rec_end)
        ts.append(t)
        off.append(o)
        for valid, offsets, out in ((kv, ko, kd), (vv, vo, vd)):
            n, p = varint(p, rec_end)
            if n >= 0:
                if n > rec_end - p:
                    raise ValueError(f"record {i}: a field runs past the end of the record")
                valid[i >> 3] |= 1 << (i & 7)
                out += data[p : p + n]
                p += n
            offsets.append(len(out))
        p = rec_end
        i += 1
    if i != count:
        raise ValueError(f"batch declares {count} records but contains {i}")
    return (count, ts.tobytes(), off.tobytes(), bytes(kv), ko.tobytes(), bytes(kd), bytes(vv), vo.tobytes(), bytes(vd))


# A binary column for encode_columns / murmur2_partitions: (validity bitmap or None, int32
# offsets, data, slice offset) — an Arrow binary array's buffers — or None (all values null).


def _column_value(col, i: int):
    valid, offsets, data, off = col
    j = i + off
    if valid is not None and not (valid[j >> 3] >> (j & 7)) & 1:
        return None
    a, b = struct.unpack_from("=ii", offsets, 4 * j)
    return bytes(data[a:b])


def encode_columns(keys, values, rows) -> bytes:
    """The records section of a batch holding ``rows`` (int32 row numbers, in order) of two
    binary columns: offset deltas 0..n-1, timestamp deltas 0, no headers. Compiled in
    ``_cscan.encode``; this is its reference and fallback."""
    if _cscan is not None:
        return _cscan.encode(keys, values, rows)
    return _encode_columns_py(keys, values, rows)


def _encode_columns_py(keys, values, rows) -> bytes:
    body = bytearray()
    for i, r in enumerate(array.array("i", bytes(rows))):
        encode_record(
            body,
            i,
            0,
            None if keys is None else _column_value(keys, r),
            None if values is None else _column_value(values, r),
        )
    return bytes(body)


def murmur2_partitions(keys, n: int, partitions: int) -> bytes:
    """int32 per row: Kafka's default partition of its key, -1 for a null key."""
    if _cscan is not None:
        return _cscan.murmur2_partitions(keys, n, partitions)
    return _murmur2_partitions_py(keys, n, partitions)


def _murmur2_partitions_py(keys, n: int, partitions: int) -> bytes:

    out = array.array("i")
    for i in range(n):
        k = None if keys is None else _column_value(keys, i)
        out.append(-1 if k is None else (murmur2(k) & 0x7FFFFFFF) % partitions)
    return out.tobytes()


# ----------------------------------------------------------------- log cleaner


def record_spans(payload, count: int) -> list[tuple]:
    """(start, end, body_start, ts_end, ts_delta, offset_delta, key, value_is_null) of each
    record of a batch payload: the framing the log cleaner needs to keep records verbatim."""
    out = []
    p, end = 0, len(payload)
    for _ in range(count):
        if p >= end:
            break
        start = p
        length, p = _varint(payload, p)
        rec_end = p + length
        q = p + 1
        ts_delta, q = _varint(payload, q)
        ts_end = q
        off_delta, q = _varint(payload, q)
        klen, q = _varint(payload, q)
        key = bytes(payload[q : q + klen]) if klen >= 0 else None
        q += max(klen, 0)
        vlen, q = _varint(payload, q)
        out.append((start, rec_end, p, ts_end, ts_delta, off_delta, key, vlen < 0))
        p = rec_end
    return out


def map_keys_py(payload, count: int, base_offset: int, start: int, mapping: dict, max_entries: int):
    """``mapping[key] = offset`` for each keyed record at or past ``start`` while ``mapping``
    holds fewer than ``max_entries`` keys; returns (records looked at, full). The reference of
    ``_cscan.map_keys`` (which keeps the map in a table of key hashes, without the GIL) and the
    fallback without a compiler."""
    spans = record_spans(payload, count)
    for i, r in enumerate(spans):
        offset = base_offset + r[5]
        if r[6] is None or offset < start:
            continue
        if r[6] not in mapping and len(mapping) >= max_entries:
            return i, True
        mapping[r[6]] = offset
    return len(spans), False


def retain_py(payload, count: int, base_offset: int, mapping: dict, latest_offset: int, drop_tombstones: bool):
    """The records of a batch payload the log cleaner keeps, verbatim: those past
    ``latest_offset`` (the offset map's end), and keyed ones that are the latest of their key
    (tombstones only when not ``drop_tombstones``). Returns (records, how many, whether a
    tombstone is among them). The reference of ``_cscan.retain`` and its fallback."""
    mv = memoryview(payload)
    out = bytearray()
    kept = 0
    tombstone = False
    for start, end, _b, _t, _ts, od, key, null in record_spans(payload, count):
        offset = base_offset + od
        if offset > latest_offset or (
            key is not None and mapping.get(key, -1) <= offset and not (null and drop_tombstones)
        ):
            out += mv[start:end]
            kept += 1
            tombstone |= null
    return bytes(out), kept, tombstone


# ----------------------------------------------------------------- building


def _uvarint(v: int, out: bytearray) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _svarint(v: int, out: bytearray) -> None:
    _uvarint((v << 1) ^ (v >> 63), out)


def encode_record(out: bytearray, offset_delta: int, ts_delta: int, key, value, headers=()) -> None:
    body = bytearray(b"\x00")
    _svarint(ts_delta, body)
    _svarint(offset_delta, body)
    for part in (key, value):
        if part is None:
            _svarint(-1, body)
        else:
            _svarint(len(part), body)
            body += part
    _svarint(len(headers), body)
    for hk, hv in headers:
        hkb = hk.encode() if isinstance(hk, str) else hk
        _svarint(len(hkb), body)
        body += hkb
        if hv is None:
            _svarint(-1, body)
        else:
            _svarint(len(hv), body)
            body += hv
    _svarint(len(body), out)
    out += body


_HEADER = struct.Struct(">qiibIhiqqqhii")


def build_batch(
    records,
    *,
    base_offset: int = 0,
    compression_codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    log_append_time: int | None = None,
    timestamp: int | None = None,
    xerial: bool = False,
) -> bytes:
    """Build one v2 batch. ``records`` is a list of (key, value, headers) or
    (key, value, headers, timestamp_ms) tuples."""
    now = int(time.time() * 1000) if timestamp is None else timestamp
    stamps = [r[3] if len(r) > 3 and r[3] is not None else now for r in records]
    base_ts = stamps[0] if stamps else now
    body = bytearray()
    for i, rec in enumerate(records):
        encode_record(body, i, stamps[i] - base_ts, rec[0], rec[1], rec[2] if len(rec) > 2 else ())
    return wrap_batch(
        body,
        len(records),
        base_ts,
        max(stamps) if stamps else now,
        base_offset=base_offset,
        compression_codec=compression_codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
        partition_leader_epoch=partition_leader_epoch,
        log_append_time=log_append_time,
        xerial=xerial,
    )


def wrap_batch(
    body,
    count: int,
    base_ts: int,
    max_ts: int,
    *,
    base_offset: int = 0,
    compression_codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    log_append_time: int | None = None,
    xerial: bool = False,
) -> bytes:
    """A v2 batch around an encoded records section of ``count`` records (compressed here
    when ``compression_codec`` says so): the header, the attributes and the CRC."""
    if compression_codec:
        body = compression.compress(compression_codec, bytes(body), xerial=xerial)
    attrs = compression_codec
    if log_append_time is not None:
        attrs |= rb.TIMESTAMP_TYPE_MASK
        max_ts = log_append_time
    if transactional:
        attrs |= rb.TRANSACTIONAL_FLAG
    if control:
        attrs |= rb.CONTROL_FLAG
    header = bytearray(
        _HEADER.pack(
            base_offset,
            rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            2,
            0,
            attrs,
            max(count - 1, 0),
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    out = header + body
    _U32.pack_into(out, rb.CRC_OFFSET, crc32c(memoryview(out)[rb.ATTRIBUTES_OFFSET :]))
    return bytes(out)


# ------------------------------------------------------------------ transaction markers
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A COMMIT or ABORT control batch (Kafka's EndTransactionMarker): transactional and
    control flags set, one record with key (0, type) and value (0, coordinator epoch)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, ())],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        timestamp=timestamp,
        partition_leader_epoch=partition_leader_epoch,
    )


def read_end_txn_marker(data, header: rb.BatchHeader) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a control batch; None when it holds no marker
    (an unknown control type: Kafka skips those too)."""
    for r in iter_records(data, 0, header):
        if r.key is None or len(r.key) < _CONTROL_KEY.size:
            return None
        _version, ctype = _CONTROL_KEY.unpack_from(r.key)
        if ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        epoch = _MARKER_VALUE.unpack_from(r.value)[1] if r.value is not None and len(r.value) >= 6 else -1
        return ctype, epoch
    return None
