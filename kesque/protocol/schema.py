"""A small schema codec for the record types kesque writes itself.

Metadata records (``__cluster_metadata``) and group-coordinator records
(``__consumer_offsets``) are Kafka "data" messages: a list of fields encoded the way Kafka's
generated code encodes them, legacy (int16 string lengths, int32 array lengths) or
flexible (compact lengths, tagged fields). kio does not cover these types, so they are
described here as field lists written from Kafka's schema JSONs:

    (name, type, tag or None, default)

types: ``int8 int16 uint16 int32 int64 float64 bool uuid string nstring bytes nbytes [int32]
[int32]? [uuid] [string]``, a list of field tuples (an array of structs), or
``("struct", fields)`` (one nested struct, used for tagged fields) or ``("nstruct", fields)``
(a nullable nested struct: a presence varint, 1, before it; 0 or less reads as null — how
Kafka's generator carries nullable tagged structs). Values are dicts keyed by field name.
"""

from __future__ import annotations

import struct
import uuid

from .primitives import ProtocolError, read_uvarint, uvarint

_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_I16 = _FIXED["int16"]
_I32 = _FIXED["int32"]
ZERO_UUID = uuid.UUID(int=0)


# ------------------------------------------------------------------ encoding
def _length(n: int, flexible: bool, width: int = 4) -> bytes:
    """An array/bytes length (-1: null)."""
    if flexible:
        return uvarint(n + 1)
    return (_I16 if width == 2 else _I32).pack(n)


def _enc_value(typ, value, out: list, flexible: bool) -> None:
    if isinstance(typ, tuple):  # ("struct" | "nstruct", fields)
        if typ[0] == "nstruct":
            if value is None:
                out.append(uvarint(0))
                return
            out.append(uvarint(1))
        encode_struct(typ[1], value or {}, out, flexible)
        return
    if isinstance(typ, list):
        value = value or []
        out.append(_length(len(value), flexible))
        for item in value:
            encode_struct(typ, item, out, flexible)
        return
    if typ in _FIXED:
        out.append(_FIXED[typ].pack(value))
    elif typ == "bool":
        out.append(b"\x01" if value else b"\x00")
    elif typ == "uuid":
        out.append((value or ZERO_UUID).bytes)
    elif typ in ("string", "nstring"):
        if value is None:
            out.append(_length(-1, flexible, 2))
        else:
            b = value.encode()
            out.append(_length(len(b), flexible, 2))
            out.append(b)
    elif typ in ("bytes", "nbytes"):
        if value is None:
            out.append(_length(-1, flexible))
        else:
            out.append(_length(len(value), flexible))
            out.append(bytes(value))
    elif typ in ("[int32]", "[int32]?"):
        if value is None:
            out.append(_length(-1, flexible))
        else:
            out.append(_length(len(value), flexible))
            out.extend(_I32.pack(v) for v in value)
    elif typ == "[uuid]":
        out.append(_length(len(value), flexible))
        out.extend(u.bytes for u in value)
    elif typ == "[string]":
        out.append(_length(len(value), flexible))
        for s in value:
            _enc_value("string", s, out, flexible)
    else:  # pragma: no cover - a typo in a schema table
        raise ValueError(f"unknown type {typ}")


def encode_struct(fields, rec: dict, out: list, flexible: bool) -> None:
    tagged = []
    for name, typ, tag, default in fields:
        value = rec.get(name, default)
        if tag is None:
            _enc_value(typ, value, out, flexible)
        elif value != default:
            part: list = []
            _enc_value(typ, value, part, flexible)
            tagged.append((tag, b"".join(part)))
    if flexible:
        out.append(uvarint(len(tagged)))
        for tag, data in sorted(tagged):
            out.append(uvarint(tag))
            out.append(uvarint(len(data)))
            out.append(data)


def encode(fields, rec: dict, flexible: bool) -> bytes:
    out: list = []
    encode_struct(fields, rec, out, flexible)
    return b"".join(out)


# ------------------------------------------------------------------ decoding
def _need(buf, pos: int, n: int) -> None:
    if n < 0 or pos + n > len(buf):
        raise ProtocolError("truncated record")


def _read_length(buf, pos: int, flexible: bool, width: int = 4) -> tuple[int, int]:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    s = _I16 if width == 2 else _I32
    _need(buf, pos, s.size)
    return s.unpack_from(buf, pos)[0], pos + s.size


def _dec_value(typ, buf, pos, flexible: bool):
    if isinstance(typ, tuple):
        if typ[0] == "nstruct":
            present, pos = read_uvarint(buf, pos)
            if present <= 0:
                return None, pos
        return decode_struct(typ[1], buf, pos, flexible)
    if isinstance(typ, list):
        n, pos = _read_length(buf, pos, flexible)
        items = []
        for _ in range(max(n, 0)):
            item, pos = decode_struct(typ, buf, pos, flexible)
            items.append(item)
        return items, pos
    if typ in _FIXED:
        s = _FIXED[typ]
        _need(buf, pos, s.size)
        return s.unpack_from(buf, pos)[0], pos + s.size
    if typ == "bool":
        _need(buf, pos, 1)
        return buf[pos] != 0, pos + 1
    if typ == "uuid":
        _need(buf, pos, 16)
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if typ in ("string", "nstring"):
        n, pos = _read_length(buf, pos, flexible, 2)
        if n < 0:
            return None, pos
        _need(buf, pos, n)
        try:
            return bytes(buf[pos : pos + n]).decode(), pos + n
        except UnicodeDecodeError as e:
            raise ProtocolError("record string is not UTF-8") from e
    if typ in ("bytes", "nbytes"):
        n, pos = _read_length(buf, pos, flexible)
        if n < 0:
            return None, pos
        _need(buf, pos, n)
        return bytes(buf[pos : pos + n]), pos + n
    if typ in ("[int32]", "[int32]?"):
        n, pos = _read_length(buf, pos, flexible)
        if n < 0:
            return None, pos
        _need(buf, pos, 4 * n)
        return [_I32.unpack_from(buf, pos + 4 * i)[0] for i in range(n)], pos + 4 * n
    if typ == "[uuid]":
        n, pos = _read_length(buf, pos, flexible)
        if n < 0:
            return None, pos
        _need(buf, pos, 16 * n)
        return [uuid.UUID(bytes=bytes(buf[pos + 16 * i : pos + 16 * i + 16])) for i in range(n)], pos + 16 * n
    if typ == "[string]":
        n, pos = _read_length(buf, pos, flexible)
        out = []
        for _ in range(max(n, 0)):
            s, pos = _dec_value("string", buf, pos, flexible)
            out.append(s)
        return out, pos
    raise ValueError(f"unknown type {typ}")  # pragma: no cover


def decode_struct(fields, buf, pos: int, flexible: bool):
    rec = {}
    by_tag = {}
    for name, typ, tag, default in fields:
        if tag is None:
            rec[name], pos = _dec_value(typ, buf, pos, flexible)
        else:
            rec[name] = default
            by_tag[tag] = (name, typ)
    if flexible:
        n, pos = read_uvarint(buf, pos)
        for _ in range(n):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            _need(buf, pos, size)
            if tag in by_tag:  # unknown tags (newer versions) are skipped
                name, typ = by_tag[tag]
                rec[name], _ = _dec_value(typ, buf[: pos + size], pos, flexible)
            pos += size
    return rec, pos


def decode(fields, buf, pos: int, flexible: bool) -> dict:
    return decode_struct(fields, buf, pos, flexible)[0]
