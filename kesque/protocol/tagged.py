"""Walk a request body by its kio schema class: bound its array counts, drop unknown tags.

kio's compiled reader reserves room for an array's declared count before reading a single
element, so a few bytes claiming billions of entries make it ask for gigabytes and abort
the whole process. Every request body is walked here first, guided by the same kio schema
classes, and an array count larger than the bytes left is refused the way Kafka's
generated readers refuse it ("Tried to allocate a collection of size ...").

KIP-482 says a receiver skips tagged fields it does not understand; kio's compiled reader
refuses them instead ("Unknown tagged field tag"). When that happens the request is walked
once more, every field copied through byte-for-byte and each tagged-field section keeping
only the tags the schema declares; the rewritten buffer then goes to kio as usual.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from .primitives import INT16, INT32, ProtocolError, read_uvarint, uvarint

_FIXED = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = ("string", "bytes", "records")


@cache
def _plan(cls):
    """[(kind, kafka_type or nested class, optional)] for untagged fields, and the known tags."""
    fields = []
    known_tags = set()
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            known_tags.add(int(tag))
            continue
        kind = classify_field(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            fields.append((type(kind).__name__, kind.type_, is_optional(f)))
        else:
            fields.append((type(kind).__name__, get_schema_field_type(f), is_optional(f)))
    return fields, frozenset(known_tags)


class _Walker:
    def __init__(self, buf):
        self.buf = memoryview(buf)
        self.pos = 0
        self.out: list = []
        self.mark = 0  # start of bytes not yet copied to out

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise ProtocolError("request truncated")

    def _flush_to(self, pos: int) -> None:
        if pos > self.mark:
            self.out.append(bytes(self.buf[self.mark : pos]))
        self.mark = pos

    def length(self, flexible: bool, width: int) -> int:
        if flexible:
            n, self.pos = read_uvarint(self.buf, self.pos)
            return n - 1
        self._need(width)
        n = (INT16 if width == 2 else INT32).unpack_from(self.buf, self.pos)[0]
        self.pos += width
        return n

    def count(self, flexible: bool) -> int:
        """An array's element count, at most one element per byte left (as Kafka's readers)."""
        n = self.length(flexible, 4)
        left = len(self.buf) - self.pos
        if n > left:
            raise ProtocolError(
                f"Tried to allocate a collection of size {n}, but there are only {left} bytes remaining."
            )
        return n

    def primitive(self, kafka_type: str, flexible: bool) -> None:
        size = _FIXED.get(kafka_type)
        if size is not None:
            self._need(size)
            self.pos += size
            return
        if kafka_type in _LENGTH_PREFIXED:
            n = self.length(flexible, 2 if kafka_type == "string" else 4)
            if n > 0:
                self._need(n)
                self.pos += n
            return
        raise ProtocolError(f"cannot walk field type {kafka_type}")

    def entity(self, cls) -> None:
        flexible = cls.__flexible__
        fields, known = _plan(cls)
        for kind, typ, optional in fields:
            if kind == "PrimitiveField":
                self.primitive(typ, flexible)
            elif kind == "PrimitiveTupleField":
                n = self.count(flexible)
                for _ in range(max(n, 0)):
                    self.primitive(typ, flexible)
            elif kind == "EntityTupleField":
                n = self.count(flexible)
                for _ in range(max(n, 0)):
                    self.entity(typ)
            else:  # nested struct, possibly nullable (int8 marker)
                if optional:
                    self._need(1)
                    present = self.buf[self.pos] != 0xFF
                    self.pos += 1
                    if not present:
                        continue
                self.entity(typ)
        if flexible:
            self.tagged_section(known)

    def tagged_section(self, known: frozenset) -> None:
        start = self.pos
        count, p = read_uvarint(self.buf, self.pos)
        kept = []
        for _ in range(count):
            tag, q = read_uvarint(self.buf, p)
            size, q = read_uvarint(self.buf, q)
            end = q + size
            if end > len(self.buf):
                raise ProtocolError("tagged field truncated")
            if tag in known:
                kept.append(bytes(self.buf[p:end]))
            p = end
        if len(kept) != count:
            self._flush_to(start)
            self.out.append(uvarint(len(kept)))
            self.out.extend(kept)
            self.mark = p
        self.pos = p


def strip_unknown_tagged_fields(cls, buf) -> bytes:
    """``buf`` re-encoded without the tagged fields ``cls``'s schema does not declare."""
    w = _Walker(buf)
    w.entity(cls)
    w._flush_to(len(w.buf))
    return b"".join(w.out)


def check_counts(cls, buf) -> None:
    """Raise ProtocolError when an array of ``buf`` (a ``cls`` body) claims more elements
    than there are bytes left, or the body ends before the schema does."""
    _Walker(buf).entity(cls)
