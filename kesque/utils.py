"""Small helpers shared across layers."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (signed 32-bit), which Kafka uses to place group and
    transactional ids on internal-topic partitions. Java hashes UTF-16 code units
    (lone surrogates included, hence ``surrogatepass``)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h
