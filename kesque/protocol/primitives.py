"""Wire primitives for the hand-written hot-path codecs.

Everything that is not on the hot path goes through kio. These helpers exist so the
Produce/Fetch/Metadata codecs can read and write without building kio dataclasses.
All readers take ``(buf, pos)`` and return ``(value, new_pos)``; they raise
:class:`ProtocolError` on truncated or malformed input.
"""

from __future__ import annotations

import struct
import uuid

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
I16_I32 = struct.Struct(">hi")
I32_I16 = struct.Struct(">ih")

ZERO_UUID = uuid.UUID(int=0)


class ProtocolError(ValueError):
    """A frame that cannot be parsed: the connection that sent it is closed."""


# ---------------------------------------------------------------- readers


def read_int16(buf, pos: int) -> tuple[int, int]:
    if pos + 2 > len(buf):
        raise ProtocolError("truncated int16")
    return INT16.unpack_from(buf, pos)[0], pos + 2


def read_int32(buf, pos: int) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise ProtocolError("truncated int32")
    return INT32.unpack_from(buf, pos)[0], pos + 4


def read_int64(buf, pos: int) -> tuple[int, int]:
    if pos + 8 > len(buf):
        raise ProtocolError("truncated int64")
    return INT64.unpack_from(buf, pos)[0], pos + 8


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # the one-byte case: almost every length and count
        return buf[pos], pos + 1
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtocolError("varint too long")


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Zig-zag signed varint (record format)."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_string(buf, pos: int) -> tuple[str | None, int]:
    """Legacy nullable string: int16 length, -1 = null."""
    n, pos = read_int16(buf, pos)
    if n < 0:
        if n != -1:
            raise ProtocolError("negative string length")
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ProtocolError("truncated string")
    try:
        return bytes(buf[pos:end]).decode("utf-8"), end
    except UnicodeDecodeError as e:
        raise ProtocolError("string is not utf-8") from e


def read_compact_string(buf, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise ProtocolError("truncated compact string")
    try:
        return bytes(buf[pos:end]).decode("utf-8"), end
    except UnicodeDecodeError as e:
        raise ProtocolError("string is not utf-8") from e


def read_bytes_view(buf: memoryview, pos: int, flexible: bool):
    """Nullable bytes as a zero-copy memoryview slice of ``buf``."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        n -= 1
    else:
        n, pos = read_int32(buf, pos)
        if n < 0:
            if n != -1:
                raise ProtocolError("negative bytes length")
            return None, pos
    end = pos + n
    if end > len(buf):
        raise ProtocolError("truncated bytes")
    return buf[pos:end], end


def read_array_len(buf, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return read_int32(buf, pos)


def skip_tagged_fields(buf, pos: int) -> int:
    """Skip a tagged-field section. Unknown tags are ignored, never rejected."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("truncated tagged field")
    return pos


def read_uuid(buf, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise ProtocolError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


# ---------------------------------------------------------------- writers


def uvarint(v: int) -> bytes:
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def varint(v: int) -> bytes:
    return uvarint((v << 1) ^ (v >> 63))


def string(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return INT16.pack(len(b)) + b


def compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def array_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else INT32.pack(n)


def str_for(flexible: bool):
    return compact_string if flexible else string


def tagged(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field section from ``(tag, encoded_value)`` pairs, sorted by tag."""
    if not fields:
        return b"\x00"
    out = [uvarint(len(fields))]
    for tag, value in sorted(fields):
        out.append(uvarint(tag))
        out.append(uvarint(len(value)))
        out.append(value)
    return b"".join(out)
