"""The "consumer" embedded protocol: subscriptions and assignments inside JoinGroup/SyncGroup.

The coordinator never needs these to run the classic protocol (clients assign), but reads
them where Kafka does: to know which topics an Empty or Stable classic group is subscribed
to (OffsetDelete, lag in ``consumer-groups --describe``), and to describe members.
Layout: ``int16 version`` + ConsumerProtocolSubscription/Assignment (kio's schemas).
"""

from __future__ import annotations

import io
import struct
import sys
from functools import cache

from kio.serial import entity_reader, entity_writer

_I16 = struct.Struct(">h")
MAX_VERSION = 3


@cache
def _cls(kind: str, version: int):
    module = f"kio.schema.consumer_protocol_{kind}.v{version}.data"
    __import__(module)
    name = "ConsumerProtocolSubscription" if kind == "subscription" else "ConsumerProtocolAssignment"
    return getattr(sys.modules[module], name)


def _decode(kind: str, data: bytes | None):
    if not data or len(data) < 2:
        return None
    version = min(_I16.unpack_from(data, 0)[0], MAX_VERSION)  # newer versions keep the older prefix
    if version < 0:
        return None
    try:
        obj, _ = entity_reader(_cls(kind, version))(memoryview(bytes(data[2:])).toreadonly(), 0)
    except Exception:
        return None
    return obj


def decode_subscription(data: bytes | None):
    return _decode("subscription", data)


def decode_subscription_topics(data: bytes | None) -> set[str] | None:
    sub = decode_subscription(data)
    return None if sub is None else set(sub.topics)


def decode_assignment(data: bytes | None) -> dict[str, list[int]] | None:
    """{topic: [partitions]} of a ConsumerProtocolAssignment (None if it does not parse)."""
    a = _decode("assignment", data)
    if a is None:
        return None
    return {tp.topic: list(tp.partitions) for tp in a.assigned_partitions}


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (used when the coordinator answers classic members of
    a KIP-848 group, and by tests)."""
    cls = _cls("assignment", version)
    mod = sys.modules[cls.__module__]
    tps = tuple(mod.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in sorted(partitions.items()))
    buf = io.BytesIO()
    kwargs = {"assigned_partitions": tps}
    if "user_data" in cls.__dataclass_fields__:
        kwargs["user_data"] = None
    entity_writer(cls)(buf, cls(**kwargs))
    return _I16.pack(version) + buf.getvalue()
