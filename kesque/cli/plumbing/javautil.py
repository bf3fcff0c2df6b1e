"""What Kafka's tools print through Java's library and ToolsUtils, reproduced: java.util.HashMap
iteration order (:func:`java_hash_order`), hash codes, Uuid and SimpleDateFormat text, log4j's
time stamp, ``Properties.load`` (:func:`load_props`), ``prettyPrintTable``."""

from __future__ import annotations

import base64
import re
import sys
import time
import uuid

from ...utils import java_string_hash


def load_props(path: str) -> dict[str, str]:
    """Java ``Properties.load`` for the simple cases (key=value / key: value, # comments)."""
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        pending = ""
        for raw in f.read().splitlines():
            line = pending + raw.lstrip() if pending else raw.strip()
            if not pending and (not line or line[0] in "#!"):
                continue
            if line.endswith("\\") and not line.endswith("\\\\"):
                pending = line[:-1]
                continue
            pending = ""
            m = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
            if m:
                props[m.group(1).replace("\\", "")] = m.group(2)
            else:
                props[line] = ""
    return props


def parse_key_value_args(items: list[str] | None) -> dict[str, str]:
    """CommandLineUtils.parseKeyValueArgs: ``k=v`` (a missing value becomes empty)."""
    out: dict[str, str] = {}
    for item in items or []:
        k, _, v = item.partition("=")
        out[k] = v
    return out


def kafka_uuid(u) -> str:
    """Kafka's Uuid.toString (URL-safe base64, no padding) of a uuid.UUID, a confluent
    Uuid or 16 bytes."""
    if u is None:
        return "AAAAAAAAAAAAAAAAAAAAAA"
    if isinstance(u, uuid.UUID):
        raw = u.bytes
    elif isinstance(u, (bytes, bytearray)):
        raw = bytes(u)
    else:
        msb = u.get_most_significant_bits() & (2**64 - 1)
        lsb = u.get_least_significant_bits() & (2**64 - 1)
        raw = msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def java_hash_order(items: list, hash_fn, initial_capacity: int | None = None) -> list:
    """Iteration order of a java.util.HashMap whose keys were put in ``items`` order:
    bucket index (of the table after any resizes), then insertion order. Kafka's tools
    print maps and JSON built from HashMaps, so this reproduces their ordering."""
    if initial_capacity is None:
        capacity = 16
    else:
        capacity = 1
        while capacity < initial_capacity:
            capacity *= 2
    while len(items) > capacity * 0.75:
        capacity *= 2

    def bucket(item) -> int:
        h = hash_fn(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    indexed = list(enumerate(items))
    indexed.sort(key=lambda t: (bucket(t[1]), t[0]))
    return [x for _i, x in indexed]


def java_hashmap_order(keys: list[str]) -> list[str]:
    """Iteration order of a small HashMap<String, ?> filled with ``keys`` in that order."""
    return java_hash_order(keys, java_string_hash)


def topic_partition_hash(tp: tuple[str, int]) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode()."""
    h = (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def log4j_stamp() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


def java_simple_date(fmt: str, ms: int) -> str:
    """Format ``ms`` with a java.text.SimpleDateFormat pattern (the letters the tools use)."""
    lt = time.localtime(ms / 1000.0)
    repl = {
        "yyyy": f"{lt.tm_year:04d}",
        "yy": f"{lt.tm_year % 100:02d}",
        "MM": f"{lt.tm_mon:02d}",
        "dd": f"{lt.tm_mday:02d}",
        "HH": f"{lt.tm_hour:02d}",
        "mm": f"{lt.tm_min:02d}",
        "ss": f"{lt.tm_sec:02d}",
        "SSS": f"{ms % 1000:03d}",
    }
    return re.sub(r"yyyy|yy|MM|dd|HH|mm|ss|SSS", lambda m: repl[m.group(0)], fmt)


def bootstrap_check(value: str | None) -> str | None:
    """ToolsUtils.validateBootstrapServer: an error message or None."""
    if value is None or not value.strip():
        return "Error while validating the bootstrap address\n"
    for part in value.split(","):
        part = part.strip()
        if not re.match(r"^\[?[^\s\]]*\]?:\d+$", part):
            return "Please provide valid host:port like host1:9091,host2:9092\n "
    return None


def tp_str(tp: tuple[str, int]) -> str:
    """TopicPartition.toString(): ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"


def long_hash(v: int) -> int:
    """java.lang.Long.hashCode."""
    v &= 0xFFFFFFFFFFFFFFFF
    h = (v ^ (v >> 32)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def pretty_print_table(headers: list[str], rows: list[list[str]], out=None) -> None:
    """ToolsUtils.prettyPrintTable: cells padded to the column width, each followed by a tab."""
    out = out or sys.stdout
    widths = [len(h) for h in headers]
    for row in rows:
        for i in range(len(headers)):
            widths[i] = max(widths[i], len(row[i]))
    for row in [headers, *rows]:
        out.write("".join(v.ljust(widths[i]) + "\t" for i, v in enumerate(row)) + "\n")
