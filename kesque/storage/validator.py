"""LogValidator: the checks a leader runs on a produced batch before it is appended.

Which check runs on which path (also in docs/architecture.md):

* every batch: exactly one v2 batch per partition; size within ``max.message.bytes``;
  CRC32C; baseOffset 0; record count == lastOffsetDelta + 1 > 0; not a control batch;
  producer id implies a sequence; a LogAppendTime batch accepted on a CreateTime topic is
  rewritten to CreateTime (as Kafka does).
* Kafka's per-record checks (LogValidator.validateRecord): a key on a compacted topic,
  timestamps within ``message.timestamp.*.max.ms``, no producer-set LogAppendTime. They fail
  the whole batch with RecordValidationError, which lists each bad record's index and message
  (KIP-467: a client fails those records and tells the others apart). The header decides
  whether they can fail at all (a null key seen by the scan, the max or base timestamp out of
  bounds, the LogAppendTime flag); only then are the records decoded (in C) and checked.
* every record of every batch: the framing of each field is checked (Kafka's LogValidator
  reads every record too) by the compiled scan (kesque/records/_cscan.c, a few ns per
  record, no Python objects); compressed batches are decompressed in C first.
* without the compiled scan (no C compiler at install): compressed batches and compacted
  topics get the same full scan in Python; uncompressed batches of other topics only the
  walk over record length prefixes (one varint per record), which still catches
  truncation and a lying count.
* recompression (topic ``compression.type`` differs from the batch) and non-sequential
  offset deltas in a compressed batch: records are decoded and the batch rebuilt.

Offsets are assigned afterwards by patching baseOffset/partitionLeaderEpoch in place.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import ErrorCode, KafkaError
from ..records import batch as rb
from ..records import compression
from ..records.records import (
    COMPILED_SCAN,
    build_batch,
    iter_records,
    record_columns,
    scan_records,
    walk_record_lengths,
)

_TOPIC_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_MIN_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0: below it a batch length is corrupt
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class ValidatedBatch:
    data: memoryview  # the bytes to append (patched in place or rebuilt)
    header: rb.BatchHeader
    rebuilt: bool


class RecordValidationError(KafkaError):
    """Kafka's RecordValidationException: some records fail a per-record check, so the batch
    is refused; ``record_errors`` holds (batch index, message) of each failing record."""

    def __init__(self, record_errors: list[tuple[int, str]], bad_timestamp: bool):
        if bad_timestamp:
            super().__init__(
                ErrorCode.invalid_timestamp, "One or more records have been rejected due to invalid timestamp"
            )
        else:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
            super().__init__(
                ErrorCode.invalid_record,
                f"One or more records have been rejected due to {len(record_errors)} record errors "
                f"in total, and only showing the first three errors at most: [{shown}]",
            )
        self.record_errors = record_errors


def _invalid(msg: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, msg)


def _next_batch_size(buf, pos: int, n: int) -> int | None:
    """Kafka's ByteBufferLogInputStream.nextBatchSize: the size of the batch at ``pos``, or
    None when fewer bytes than its header up to magic are there; a length below the
    minimum record overhead or an unknown magic is CORRUPT_MESSAGE."""
    if n - pos < rb.LOG_OVERHEAD:
        return None
    length = _I32.unpack_from(buf, pos + 8)[0]
    if length < _MIN_RECORD_OVERHEAD:
        raise KafkaError(
            ErrorCode.corrupt_message,
            f"Record size {length} is less than the minimum record overhead ({_MIN_RECORD_OVERHEAD})",
        )
    if n - pos < rb.MAGIC_OFFSET + 1:
        return None
    if buf[pos + rb.MAGIC_OFFSET] > rb.MAGIC_V2:  # a byte: negative magics read as >= 128
        raise KafkaError(ErrorCode.corrupt_message, f"Invalid magic found in record: {buf[pos + rb.MAGIC_OFFSET]}")
    return length + rb.LOG_OVERHEAD


def validate_batch(buf: memoryview, config, now_ms: int, tp: str = "") -> ValidatedBatch:
    """Validate one produced partition payload; raises KafkaError with Kafka's code.

    The shape checks follow Kafka's order: ProduceRequest.validateRecords (a whole batch,
    magic 2, exactly one batch), then UnifiedLog.analyzeAndValidateRecords (baseOffset 0,
    ``max.message.bytes``, CRC), then LogValidator (header fields, records, timestamps)."""
    n = len(buf)
    size = _next_batch_size(buf, 0, n)
    if size is None or size > n:
        raise _invalid("Produce requests with version 3 and above must have at least one record batch per partition")
    if buf[rb.MAGIC_OFFSET] != rb.MAGIC_V2:
        raise _invalid(
            "Produce requests with version 3 and above are only allowed to contain record batches with magic version 2"
        )
    if size < n:
        nxt = _next_batch_size(buf, size, n)
        if nxt is not None and nxt <= n - size:
            raise _invalid("Produce requests are only allowed to contain exactly one record batch per partition")
        # a partial batch after the first is ignored and trimmed, as Kafka's trimInvalidBytes does
    base_offset = _I64.unpack_from(buf, 0)[0]
    if base_offset != 0:
        raise _invalid(f"The baseOffset of the record batch in the append to {tp} should be 0, but it is {base_offset}")
    if size > config.max_message_bytes:
        raise KafkaError(
            ErrorCode.message_too_large,
            f"The record batch size in the append to {tp} is {size} bytes which exceeds "
            f"the maximum configured value of {config.max_message_bytes}.",
        )
    if size < rb.HEADER_SIZE or not rb.is_crc_valid(buf, 0, size):
        crc = _U32.unpack_from(buf, rb.CRC_OFFSET)[0] if n >= rb.CRC_OFFSET + 4 else -1
        raise KafkaError(ErrorCode.corrupt_message, f"Record is corrupt (stored crc = {crc}) in topic partition {tp}.")
    h = rb.read_header(buf)
    count = h.records_count
    if h.last_offset_delta < 0:
        raise _invalid(f"Batch has an invalid offset range: [0, {h.last_offset_delta}] in topic partition {tp}")
    if count <= 0:
        raise _invalid(f"Invalid reported count for record batch: {count} in topic partition {tp}")
    if count != h.last_offset_delta + 1:
        raise _invalid(
            f"Inconsistent batch offset range [0, {h.last_offset_delta}] and count of records "
            f"{count} in topic partition {tp}"
        )
    if h.is_control:
        raise _invalid(f"Clients are not allowed to write control records in topic partition {tp}")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise _invalid(
            f"Invalid sequence number {h.base_sequence} in record batch with producerId "
            f"{h.producer_id} in topic partition {tp}"
        )
    codec = h.compression
    if codec > 4:
        raise KafkaError(ErrorCode.corrupt_message, f"Unknown compression codec {codec}")

    target = _TOPIC_CODECS.get(config.compression_type, codec)  # "producer" keeps the batch's codec
    offsets_ok = True
    if codec:
        try:
            payload = compression.decompress_transient(codec, buf[rb.HEADER_SIZE : size])
        except compression.CompressionError as e:
            raise KafkaError(ErrorCode.corrupt_message, str(e)) from None
        scan = _scan(payload, 0, len(payload), count)
        # Kafka assigns offsets in place only when inner offsets are 0, 1, 2, ... (compressed path)
        offsets_ok = scan.offsets_ok
        null_key = scan.null_key
    else:
        payload = buf[rb.HEADER_SIZE : size]
        if config.compact or COMPILED_SCAN:
            # the full scan: always when compiled (nanoseconds a record, Kafka's LogValidator
            # reads every record too), else only where a feature needs the keys
            null_key = _scan(buf, rb.HEADER_SIZE, size, count).null_key
        else:
            null_key = False  # not needed: only a compacted topic refuses null keys
            try:
                walk_record_lengths(buf, rb.HEADER_SIZE, size, count)
            except rb.InvalidRecordError as e:
                raise KafkaError(e.error_code, str(e)) from None
    if (config.compact and null_key) or _timestamps_need_records(h, config, now_ms):
        # Kafka's skipKeyValueIterator (sizes as written) only where it assigns in place
        _check_records(payload, h, config, now_ms, tp, sizes_as_written=bool(codec) and target == codec)

    if target != codec or not offsets_ok:
        return _rebuild(buf, h, target, config, now_ms)
    if config.log_append_time:
        rb.set_max_timestamp_and_type(buf, 0, size, now_ms)
        h.max_timestamp = now_ms
        h.attributes |= rb.TIMESTAMP_TYPE_MASK
    elif h.is_log_append_time:
        # Kafka rewrites a LogAppendTime batch accepted on a CreateTime topic to CreateTime
        rb.set_max_timestamp_and_type(buf, 0, size, None)
        h.attributes &= ~rb.TIMESTAMP_TYPE_MASK
    return ValidatedBatch(buf[:size], h, False)


def _scan(buf, pos, end, count):
    try:
        return scan_records(buf, pos, end, count)
    except (rb.CorruptRecordError, rb.InvalidRecordError) as e:
        raise KafkaError(e.error_code, str(e)) from None


def _timestamps_need_records(h: rb.BatchHeader, config, now_ms: int) -> bool:
    """Whether some record's timestamp may fail Kafka's validateTimestamp, judged from the
    header. The records of a LogAppendTime batch all carry its max timestamp and those of a
    CreateTime batch lie at or below it, so the upper bound is exact; for the lower bound the
    base timestamp stands for the smallest (exact when records are in timestamp order, as
    producers stamp them; Kafka's default bound is infinite). Reading every record's
    timestamp would cost as much as the rest of the validation."""
    if config.log_append_time:
        return h.is_log_append_time  # refused for every record
    if h.is_log_append_time:
        return h.max_timestamp == rb.NO_TIMESTAMP or _out_of_range(h.max_timestamp, config, now_ms)
    return h.max_timestamp - now_ms > config.message_timestamp_after_max_ms or (
        h.base_timestamp != rb.NO_TIMESTAMP and _out_of_range(h.base_timestamp, config, now_ms)
    )


def _out_of_range(t: int, config, now_ms: int) -> bool:
    """Kafka's recordHasInvalidTimestamp, in Java long arithmetic."""
    diff = _i64(now_ms - t)
    return diff > config.message_timestamp_before_max_ms or -diff > config.message_timestamp_after_max_ms


def _check_records(payload, h: rb.BatchHeader, config, now_ms: int, tp: str, sizes_as_written: bool) -> None:
    """Kafka's validateRecord for every record (only once the batch is known or likely to
    fail): the key on a compacted topic, then the timestamp. Raises RecordValidationError
    listing each failing record."""
    _, ts, offs, key_valid, key_offs, _, value_valid, value_offs, _ = _columns(payload, h.records_count)
    ts, offs = memoryview(ts).cast("q"), memoryview(offs).cast("q")
    create_time, lat, compact = not config.log_append_time, h.is_log_append_time, config.compact
    bounds = (
        f"[{_i64(now_ms - config.message_timestamp_before_max_ms)}, "
        f"{_i64(now_ms + config.message_timestamp_after_max_ms)}]"
    )
    errors: list[tuple[int, str]] = []
    bad_timestamp = False
    for i in range(h.records_count):
        if compact and not _bit(key_valid, i):
            errors.append((i, f"Compacted topic cannot accept message without key in topic partition {tp}"))
            continue
        t = h.max_timestamp if lat else _i64(h.base_timestamp + ts[i])
        if create_time and t != rb.NO_TIMESTAMP:
            if _out_of_range(t, config, now_ms):
                errors.append(
                    (
                        i,
                        f"Timestamp {t} of message with offset {offs[i]} is out of range. "
                        f"The timestamp should be within {bounds}",
                    )
                )
                bad_timestamp = True
        elif lat:
            record = (
                f"{'PartialDefaultRecord' if sizes_as_written else 'DefaultRecord'}(offset={offs[i]}, "
                f"timestamp={t}, key={_field_size(key_valid, key_offs, i, sizes_as_written)} bytes, "
                f"value={_field_size(value_valid, value_offs, i, sizes_as_written)} bytes)"
            )
            errors.append(
                (
                    i,
                    f"Invalid timestamp type in message {record}. Producer should not set timestamp "
                    "type to LogAppendTime.",
                )
            )
            bad_timestamp = True
    if errors:
        raise RecordValidationError(errors, bad_timestamp)


def _columns(payload, count: int):
    try:
        return record_columns(payload, count)
    except ValueError as e:  # without the compiled scan only the record lengths were walked
        raise _invalid(str(e)) from None


def _bit(bitmap, i: int) -> bool:
    return bool(bitmap[i >> 3] >> (i & 7) & 1)


def _field_size(valid, offsets, i: int, as_written: bool) -> int:
    """A key or value size as Kafka's record toString shows it: a null one is -1 in the
    sizes the record was written with, 0 in a decoded record."""
    if not _bit(valid, i):
        return -1 if as_written else 0
    offsets = memoryview(offsets).cast("i")
    return offsets[i + 1] - offsets[i]


def _i64(v: int) -> int:
    """Java long arithmetic (wraps around)."""
    return (v + 2**63) % 2**64 - 2**63


def _rebuild(buf, h: rb.BatchHeader, target: int, config, now_ms: int) -> ValidatedBatch:
    """Decode and re-encode (recompression or non-sequential inner offsets)."""
    records = [(r.key, r.value, r.headers, r.timestamp) for r in iter_records(buf, 0, h)]
    # Kafka's broker-side snappy is the Java client's xerial framing
    data = build_batch(
        records,
        compression_codec=target,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        transactional=h.is_transactional,
        log_append_time=now_ms if config.log_append_time else None,
        xerial=target == compression.SNAPPY,
    )
    mv = memoryview(bytearray(data))
    return ValidatedBatch(mv, rb.read_header(mv), True)
