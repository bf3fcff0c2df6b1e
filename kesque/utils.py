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


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int: the hash of the
    default partitioner (``(murmur2(key) & 0x7fffffff) % partitions``)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= (1 << 31) else h


def hash_set_order(ids) -> list[int]:
    """The distinct broker ids in the iteration order of a Java HashSet (or Scala HashSet) of
    Integers: by bucket (the spread hash modulo the table size), then by value. For ids below 16
    this is ascending order. Kafka's ELR and the ISR a Kafka leader sends in AlterPartition come
    out of such sets."""
    ids = list(dict.fromkeys(ids))
    cap = 16
    while len(ids) > cap * 3 // 4:
        cap *= 2
    return sorted(ids, key=lambda h: ((h ^ (h >> 16)) & (cap - 1), h))
