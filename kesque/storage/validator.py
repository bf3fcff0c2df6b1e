"""LogValidator: the checks a leader runs on a produced batch before it is appended.

Which check runs on which path (also in docs/architecture.md):

* every batch: exactly one v2 batch per partition; size within ``max.message.bytes``;
  CRC32C; baseOffset 0; record count == lastOffsetDelta + 1 > 0; not a control batch;
  producer id implies a sequence; timestamps within ``message.timestamp.*.max.ms`` (from the
  header's base and max timestamps); no LogAppendTime flag on a CreateTime topic.
* uncompressed: the record length prefixes must tile the batch exactly (one varint per
  record, no objects), so truncation or a lying count is caught cheaply.
* compressed: decompressed in C, then every field of every record is framed-checked in a
  lean scan (Kafka does the same; the records are in hand anyway).
* compacted topics: the full scan also runs on uncompressed batches, to find null keys.
* recompression (topic ``compression.type`` differs from the batch) and non-sequential
  offset deltas: records are decoded and the batch rebuilt.

Offsets are assigned afterwards by patching baseOffset/partitionLeaderEpoch in place.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ErrorCode, KafkaError
from ..records import batch as rb
from ..records import compression
from ..records.records import build_batch, iter_records, scan_records, walk_record_lengths

_TOPIC_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(slots=True)
class ValidatedBatch:
    data: memoryview  # the bytes to append (patched in place or rebuilt)
    header: rb.BatchHeader
    rebuilt: bool


def _invalid(msg: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, msg)


def validate_batch(buf: memoryview, config, now_ms: int, tp: str = "") -> ValidatedBatch:
    """Validate one produced partition payload; raises KafkaError with Kafka's code."""
    n = len(buf)
    if n < rb.LOG_OVERHEAD + 5:
        raise KafkaError(ErrorCode.corrupt_message, f"Record batch in {tp} is too short ({n} bytes)")
    if buf[rb.MAGIC_OFFSET] != rb.MAGIC_V2:
        raise _invalid("Produce requests with version 3 and above are only allowed to contain record "
                       "batches with magic version 2")
    if n < rb.HEADER_SIZE:
        raise KafkaError(ErrorCode.corrupt_message, f"Record batch in {tp} is shorter than its header")
    h = rb.read_header(buf)
    size = h.size
    if size < rb.HEADER_SIZE or size > n:
        raise KafkaError(ErrorCode.corrupt_message,
                         f"Record batch size {size} in {tp} does not match the {n} bytes received")
    if size < n:
        raise _invalid("Produce requests are only allowed to contain exactly one record batch per partition")
    if size > config.max_message_bytes:
        raise KafkaError(ErrorCode.message_too_large,
                         f"The record batch size in the append to {tp} is {size} bytes which exceeds "
                         f"the maximum configured value of {config.max_message_bytes}.")
    if not rb.is_crc_valid(buf, 0, size):
        raise KafkaError(ErrorCode.corrupt_message, f"Record is corrupt (stored crc = {h.crc}) in topic partition {tp}.")
    if h.base_offset != 0:
        raise _invalid(f"The baseOffset of the record batch in the append to {tp} should be 0, but it is {h.base_offset}")
    count = h.records_count
    if h.last_offset_delta < 0 or count <= 0:
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
    _check_timestamps(h, config, now_ms)

    target = _TOPIC_CODECS.get(config.compression_type.lower(), codec)
    if config.compression_type.lower() == "producer":
        target = codec
    offsets_ok = True
    if codec:
        try:
            payload = compression.decompress(codec, buf[rb.HEADER_SIZE:size])
        except compression.CompressionError as e:
            raise KafkaError(ErrorCode.corrupt_message, str(e)) from None
        scan = _scan(payload, 0, len(payload), count)
        offsets_ok = scan.offsets_ok
        if config.compact and scan.null_key:
            raise _invalid(f"Compacted topic cannot accept message without key in topic partition {tp}.")
    elif config.compact:
        scan = _scan(buf, rb.HEADER_SIZE, size, count)
        offsets_ok = scan.offsets_ok
        if scan.null_key:
            raise _invalid(f"Compacted topic cannot accept message without key in topic partition {tp}.")
    else:
        walk_record_lengths(buf, rb.HEADER_SIZE, size, count)

    if target != codec or not offsets_ok:
        return _rebuild(buf, h, target, config, now_ms)
    if config.log_append_time:
        rb.set_max_timestamp_and_type(buf, 0, size, now_ms)
        h.max_timestamp = now_ms
        h.attributes |= rb.TIMESTAMP_TYPE_MASK
    return ValidatedBatch(buf[:size], h, False)


def _scan(buf, pos, end, count):
    try:
        return scan_records(buf, pos, end, count)
    except (rb.CorruptRecordError, rb.InvalidRecordError) as e:
        raise KafkaError(e.error_code, str(e)) from None


def _check_timestamps(h: rb.BatchHeader, config, now_ms: int) -> None:
    if config.log_append_time:
        return
    if h.is_log_append_time:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime.")
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    lo = h.base_timestamp if h.base_timestamp >= 0 else h.max_timestamp
    if h.max_timestamp >= 0 and after < (1 << 62) and h.max_timestamp > now_ms + after:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         f"Timestamp {h.max_timestamp} of message is out of range. The timestamp should be "
                         f"within [{now_ms - before}, {now_ms + after}]")
    if lo >= 0 and before < (1 << 62) and lo < now_ms - before:
        raise KafkaError(ErrorCode.invalid_timestamp,
                         f"Timestamp {lo} of message is out of range. The timestamp should be "
                         f"within [{now_ms - before}, {now_ms + after}]")


def _rebuild(buf, h: rb.BatchHeader, target: int, config, now_ms: int) -> ValidatedBatch:
    """Decode and re-encode (recompression or non-sequential inner offsets)."""
    records = [(r.key, r.value, r.headers, r.timestamp) for r in iter_records(buf, 0, h)]
    data = build_batch(records, compression_codec=target, producer_id=h.producer_id,
                       producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                       transactional=h.is_transactional,
                       log_append_time=now_ms if config.log_append_time else None)
    mv = memoryview(bytearray(data))
    return ValidatedBatch(mv, rb.read_header(mv), True)
