"""LogValidator: the checks a leader runs on a produced batch before it is appended.

Which check runs on which path (also in docs/architecture.md):

* every batch: exactly one v2 batch per partition; size within ``max.message.bytes``;
  CRC32C; baseOffset 0; record count == lastOffsetDelta + 1 > 0; not a control batch;
  producer id implies a sequence; timestamps within ``message.timestamp.*.max.ms`` (from the
  header's base and max timestamps); a producer's LogAppendTime flag is refused on a
  LogAppendTime topic and rewritten to CreateTime on a CreateTime topic (as Kafka does).
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
from ..records.records import COMPILED_SCAN, build_batch, iter_records, scan_records, walk_record_lengths

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
        raise KafkaError(ErrorCode.corrupt_message,
                         f"Record size {length} is less than the minimum record overhead ({_MIN_RECORD_OVERHEAD})")
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
        raise _invalid("Produce requests with version 3 and above must have at least one record batch per "
                       "partition")
    if buf[rb.MAGIC_OFFSET] != rb.MAGIC_V2:
        raise _invalid("Produce requests with version 3 and above are only allowed to contain record "
                       "batches with magic version 2")
    if size < n:
        nxt = _next_batch_size(buf, size, n)
        if nxt is not None and nxt <= n - size:
            raise _invalid("Produce requests are only allowed to contain exactly one record batch per partition")
        # a partial batch after the first is ignored and trimmed, as Kafka's trimInvalidBytes does
    base_offset = _I64.unpack_from(buf, 0)[0]
    if base_offset != 0:
        raise _invalid(f"The baseOffset of the record batch in the append to {tp} should be 0, but it is {base_offset}")
    if size > config.max_message_bytes:
        raise KafkaError(ErrorCode.message_too_large,
                         f"The record batch size in the append to {tp} is {size} bytes which exceeds "
                         f"the maximum configured value of {config.max_message_bytes}.")
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
        raise _invalid(f"Inconsistent batch offset range [0, {h.last_offset_delta}] and count of records "
                       f"{count} in topic partition {tp}")
    if h.is_control:
        raise _invalid(f"Clients are not allowed to write control records in topic partition {tp}")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise _invalid(f"Invalid sequence number {h.base_sequence} in record batch with producerId "
                       f"{h.producer_id} in topic partition {tp}")
    codec = h.compression
    if codec > 4:
        raise KafkaError(ErrorCode.corrupt_message, f"Unknown compression codec {codec}")

    target = _TOPIC_CODECS.get(config.compression_type, codec)  # "producer" keeps the batch's codec
    offsets_ok = True
    if codec:
        try:
            payload = compression.decompress_transient(codec, buf[rb.HEADER_SIZE:size])
        except compression.CompressionError as e:
            raise KafkaError(ErrorCode.corrupt_message, str(e)) from None
        scan = _scan(payload, 0, len(payload), count)
        # Kafka assigns offsets in place only when inner offsets are 0, 1, 2, ... (compressed path)
        offsets_ok = scan.offsets_ok
        if config.compact and scan.null_key:
            raise _invalid(f"Compacted topic cannot accept message without key in topic partition {tp}.")
    elif config.compact or COMPILED_SCAN:
        # the full scan: always when compiled (nanoseconds a record, Kafka's LogValidator
        # reads every record too), else only where a feature needs the keys
        if _scan(buf, rb.HEADER_SIZE, size, count).null_key and config.compact:
            raise _invalid(f"Compacted topic cannot accept message without key in topic partition {tp}.")
    else:
        try:
            walk_record_lengths(buf, rb.HEADER_SIZE, size, count)
        except rb.InvalidRecordError as e:
            raise KafkaError(e.error_code, str(e)) from None
    _check_timestamps(h, config, now_ms)

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


def _check_timestamps(h: rb.BatchHeader, config, now_ms: int) -> None:
    """Kafka's validateTimestamp, from the header: every record of a CreateTime batch lies
    between its base and max timestamps (exact for Kafka's defaults); the records of a
    LogAppendTime batch all carry its max timestamp."""
    if config.log_append_time:
        if h.is_log_append_time:
            raise KafkaError(ErrorCode.invalid_timestamp, "Invalid timestamp type in message. Producer should not "
                             "set timestamp type to LogAppendTime.")
        return
    if h.is_log_append_time:
        if h.max_timestamp == rb.NO_TIMESTAMP:
            raise KafkaError(ErrorCode.invalid_timestamp, "Invalid timestamp type in message. Producer should not "
                             "set timestamp type to LogAppendTime.")
        lo = h.max_timestamp
    else:
        lo = h.base_timestamp if h.base_timestamp >= 0 else h.max_timestamp
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    if h.max_timestamp >= 0 and h.max_timestamp - now_ms > after:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         f"Timestamp {h.max_timestamp} of message is out of range. The timestamp should be "
                         f"within [{now_ms - before}, {now_ms + after}]")
    if lo >= 0 and now_ms - lo > before:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         f"Timestamp {lo} of message is out of range. The timestamp should be "
                         f"within [{now_ms - before}, {now_ms + after}]")


def _rebuild(buf, h: rb.BatchHeader, target: int, config, now_ms: int) -> ValidatedBatch:
    """Decode and re-encode (recompression or non-sequential inner offsets)."""
    records = [(r.key, r.value, r.headers, r.timestamp) for r in iter_records(buf, 0, h)]
    # Kafka's broker-side snappy is the Java client's xerial framing
    data = build_batch(records, compression_codec=target, producer_id=h.producer_id,
                       producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                       transactional=h.is_transactional,
                       log_append_time=now_ms if config.log_append_time else None,
                       xerial=target == compression.SNAPPY)
    mv = memoryview(bytearray(data))
    return ValidatedBatch(mv, rb.read_header(mv), True)
