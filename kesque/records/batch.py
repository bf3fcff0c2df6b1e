"""RecordBatch v2 (magic 2): header view, validation, offset patching.

Layout of the 61-byte header (big-endian), as in Kafka's DefaultRecordBatch::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field
   12  partitionLeaderEpoch  int32
   16  magic                 int8
   17  crc                   uint32  CRC32C of bytes [21, end)
   21  attributes            int16
   23  lastOffsetDelta       int32
   27  baseTimestamp         int64
   35  maxTimestamp          int64
   43  producerId            int64
   51  producerEpoch         int16
   53  baseSequence          int32
   57  recordsCount          int32
   61  records...

baseOffset and partitionLeaderEpoch sit outside the CRC, so the broker assigns offsets
and stamps the leader epoch by patching bytes without recomputing the checksum. Every
other change (LogAppendTime, recompression) needs a new CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
MAGIC_V2 = 2

# attributes
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COMPRESSION_IDS = {v: k for k, v in COMPRESSION_NAMES.items()}

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LEN = struct.Struct(">qi")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class InvalidRecordError(ValueError):
    """A batch that breaks the format rules: Kafka answers INVALID_RECORD (87)."""

    error_code = 87


class CorruptRecordError(ValueError):
    """A batch whose CRC or framing is wrong: Kafka answers CORRUPT_MESSAGE (2)."""

    error_code = 2


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Decode the 61-byte header at ``pos`` (caller ensures it is there)."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def offset_and_size(buf, pos: int) -> tuple[int, int]:
    """(baseOffset, total batch size) from the first 12 bytes at ``pos``."""
    base, length = _OFFSET_LEN.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD


def last_offset_delta(buf, pos: int) -> int:
    """lastOffsetDelta of the batch header at ``pos`` (its 27 first bytes are there)."""
    return _I32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)[0]


def compute_crc(buf, pos: int, size: int) -> int:
    mv = memoryview(buf)
    return crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def is_crc_valid(buf, pos: int, size: int) -> bool:
    stored = _U32.unpack_from(buf, pos + CRC_OFFSET)[0]
    return stored == compute_crc(buf, pos, size)


def patch_offset_and_epoch(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Assign offsets and stamp the leader epoch: both fields are outside the CRC."""
    _I64.pack_into(buf, pos, base_offset)
    _I32.pack_into(buf, pos + 12, leader_epoch)


def set_max_timestamp_and_type(buf: bytearray | memoryview, pos: int, size: int, log_append_time: int | None) -> None:
    """Kafka's ``setMaxTimestamp``: with ``log_append_time`` the batch becomes LogAppendTime
    with that max timestamp; with None it becomes CreateTime keeping its max timestamp.
    The CRC is recomputed."""
    attrs = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    if log_append_time is not None:
        attrs |= TIMESTAMP_TYPE_MASK
        _I64.pack_into(buf, pos + 35, log_append_time)
    else:
        attrs &= ~TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs)
    _U32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def iter_batch_positions(buf, start: int = 0, end: int | None = None):
    """Yield (position, size) of each complete batch; stops at a partial tail."""
    if end is None:
        end = len(buf)
    pos = start
    while pos + LOG_OVERHEAD <= end:
        _base, size = offset_and_size(buf, pos)
        if size < HEADER_SIZE or pos + size > end:
            return
        yield pos, size
        pos += size


def iter_headers(buf, start: int = 0, end: int | None = None):
    """Yield (position, BatchHeader) of each complete batch in ``buf``."""
    for pos, _size in iter_batch_positions(buf, start, end):
        yield pos, read_header(buf, pos)
