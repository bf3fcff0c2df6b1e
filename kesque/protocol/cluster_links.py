"""KesqueClusterLinks (API key 10000, kesque-only): the admin requests of ``kesque cluster-links``
and ``kesque mirrors`` (docs/mirror.md says why an API of its own, as Confluent added theirs).

One request type with an ``operation``; version 0, flexible (request header v2, response header
v1), the body in Kafka's compact encoding (:mod:`kesque.protocol.schema`). Not advertised in
ApiVersions: a client sends version 0 to a kesque broker it knows.
"""

from __future__ import annotations

from . import schema

VERSION = 0

# operations
LIST_LINKS = 0  # the links (all, or ``link_name``), with their configs (sensitive ones masked)
CREATE_LINK = 1
DELETE_LINK = 2
CREATE_MIRROR = 3  # ``topics[0]`` mirrors ``source_topic`` (default: the same name) over ``link_name``
DESCRIBE_MIRRORS = 4  # the mirror topics (all, or ``topics``), with the lag of the partitions this broker leads
ALTER_MIRRORS = 5  # ``mirror_op`` (pause, resume, failover, promote) on ``topics``
GROW_MIRROR = 6  # a broker's own: ``topics[0]`` to ``num_partitions`` partitions, as its source grew
ALTER_LINK = 7  # ``link_name``'s configs: each of ``configs`` set, or removed when its value is null
SYNC_CONFIGS = 8  # a broker's own: ``topics[0]``'s synced topic configs as its source's (null: none)


def offsets_mirror_topic(link_name: str) -> str:
    """The destination topic that mirrors the source's ``__consumer_offsets`` over a link with
    consumer offset sync enabled (docs/mirror.md; the brokers create it, the tools replay it at
    a failover, the controller deletes it with its link)."""
    return f"_link.{link_name}.consumer_offsets"


_CONFIG = [("name", "string", None, ""), ("value", "nstring", None, None)]

REQUEST = [
    ("operation", "int8", None, 0),
    ("link_name", "nstring", None, None),
    ("configs", _CONFIG, None, []),
    ("topics", "[string]", None, []),
    ("source_topic", "nstring", None, None),
    ("mirror_op", "nstring", None, None),
    ("validate_only", "bool", None, False),
    ("timeout_ms", "int32", None, 30000),
    # filled in by the broker that asked the source before it forwards a CREATE_MIRROR
    ("source_topic_id", "uuid", None, None),
    ("num_partitions", "int32", None, -1),
    ("replication_factor", "int16", None, -1),
    # a failover's: the highest producer id and leader epoch in the mirrored partitions' logs
    ("max_producer_id", "int64", None, -1),
    ("max_epoch", "int32", None, -1),
]

_PARTITION = [
    ("partition", "int32", None, 0),
    ("leader", "int32", None, -1),
    ("log_end_offset", "int64", None, -1),
    ("source_high_watermark", "int64", None, -1),  # at the last answer from the source
    ("lag", "int64", None, -1),  # offsets behind the source
    ("time_lag_ms", "int64", None, -1),  # time behind: the age of the last answer that had no more to copy
    ("error", "nstring", None, None),  # the last fetch error, while it lasts
    ("lost_records", "int64", None, 0),  # records the source deleted before the mirror copied them
    ("fetching", "bool", None, False),  # a fetcher of this broker copies the partition now
    ("caught_up", "bool", None, False),  # all the source had at its last answer, no transaction open
    ("max_producer_id", "int64", None, -1),  # the highest producer id of the leader's log
    ("latest_epoch", "int32", None, -1),  # the latest leader epoch of the leader's log
]

RESPONSE = [
    ("error_code", "int16", None, 0),
    ("error_message", "nstring", None, None),
    (
        "links",
        [
            ("link_name", "string", None, ""),
            ("link_id", "uuid", None, None),
            ("configs", _CONFIG + [("sensitive", "bool", None, False)], None, []),
            ("mirror_topics", "[string]", None, []),
        ],
        None,
        [],
    ),
    (
        "mirrors",
        [
            ("topic", "string", None, ""),
            ("error_code", "int16", None, 0),
            ("error_message", "nstring", None, None),
            ("link_name", "string", None, ""),
            ("source_topic", "string", None, ""),
            ("source_topic_id", "uuid", None, None),
            ("state", "string", None, ""),
            ("partitions", _PARTITION, None, []),
        ],
        None,
        [],
    ),
]


def encode_request(req: dict) -> bytes:
    return schema.encode(REQUEST, req, flexible=True)


def decode_request(body) -> dict:
    return schema.decode(REQUEST, bytes(body), 0, flexible=True)


def encode_response(resp: dict) -> bytes:
    return schema.encode(RESPONSE, resp, flexible=True)


def decode_response_body(body, pos: int = 0) -> dict:
    return schema.decode(RESPONSE, bytes(body), pos, flexible=True)


def decode_response(_api_key: int, _version: int, frame) -> tuple[int, dict]:
    """The channel's decoder: (correlation id, response) of a frame (header v1: its tagged fields)."""
    corr = int.from_bytes(bytes(frame[:4]), "big", signed=True)
    pos = 4
    n = frame[pos]
    if n != 0:
        raise ValueError("unexpected tagged fields in a KesqueClusterLinks response header")
    return corr, decode_response_body(frame, pos + 1)
