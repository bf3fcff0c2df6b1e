"""API registry, request/response headers and kio glue.

The version table here is what ApiVersions advertises: an API appears only when a handler
is registered for it, with the version range that handler serves. Flexible versions (which
decide request header v2 / response header v1) come from the Kafka schemas; a unit test
checks this table against kio.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from .api_keys import ApiKeys
from .primitives import INT32, ProtocolError, skip_tagged_fields
from .tagged import check_counts, strip_unknown_tagged_fields

# api key -> (name, first flexible version or None). From Kafka's message schemas.
FLEXIBLE_FROM: dict[int, tuple[str, int | None]] = {
    0: ("Produce", 9),
    1: ("Fetch", 12),
    2: ("ListOffsets", 6),
    3: ("Metadata", 9),
    8: ("OffsetCommit", 8),
    9: ("OffsetFetch", 6),
    10: ("FindCoordinator", 3),
    11: ("JoinGroup", 6),
    12: ("Heartbeat", 4),
    13: ("LeaveGroup", 4),
    14: ("SyncGroup", 4),
    15: ("DescribeGroups", 5),
    16: ("ListGroups", 3),
    17: ("SaslHandshake", None),
    18: ("ApiVersions", 3),
    19: ("CreateTopics", 5),
    20: ("DeleteTopics", 4),
    21: ("DeleteRecords", 2),
    22: ("InitProducerId", 2),
    23: ("OffsetForLeaderEpoch", 4),
    24: ("AddPartitionsToTxn", 3),
    25: ("AddOffsetsToTxn", 3),
    26: ("EndTxn", 3),
    27: ("WriteTxnMarkers", 1),
    28: ("TxnOffsetCommit", 3),
    29: ("DescribeAcls", 2),
    30: ("CreateAcls", 2),
    31: ("DeleteAcls", 2),
    32: ("DescribeConfigs", 4),
    33: ("AlterConfigs", 2),
    34: ("AlterReplicaLogDirs", 2),
    35: ("DescribeLogDirs", 2),
    36: ("SaslAuthenticate", 2),
    37: ("CreatePartitions", 2),
    38: ("CreateDelegationToken", 2),
    39: ("RenewDelegationToken", 2),
    40: ("ExpireDelegationToken", 2),
    41: ("DescribeDelegationToken", 2),
    42: ("DeleteGroups", 2),
    43: ("ElectLeaders", 2),
    44: ("IncrementalAlterConfigs", 1),
    45: ("AlterPartitionReassignments", 0),
    46: ("ListPartitionReassignments", 0),
    47: ("OffsetDelete", None),
    48: ("DescribeClientQuotas", 1),
    49: ("AlterClientQuotas", 1),
    50: ("DescribeUserScramCredentials", 0),
    51: ("AlterUserScramCredentials", 0),
    52: ("Vote", 0),
    53: ("BeginQuorumEpoch", 1),
    54: ("EndQuorumEpoch", 1),
    55: ("DescribeQuorum", 0),
    56: ("AlterPartition", 0),
    57: ("UpdateFeatures", 0),
    58: ("Envelope", 0),
    59: ("FetchSnapshot", 0),
    60: ("DescribeCluster", 0),
    61: ("DescribeProducers", 0),
    62: ("BrokerRegistration", 0),
    63: ("BrokerHeartbeat", 0),
    64: ("UnregisterBroker", 0),
    65: ("DescribeTransactions", 0),
    66: ("ListTransactions", 0),
    67: ("AllocateProducerIds", 0),
    68: ("ConsumerGroupHeartbeat", 0),
    69: ("ConsumerGroupDescribe", 0),
    70: ("ControllerRegistration", 0),
    71: ("GetTelemetrySubscriptions", 0),
    72: ("PushTelemetry", 0),
    73: ("AssignReplicasToDirs", 0),
    74: ("ListConfigResources", 0),
    75: ("DescribeTopicPartitions", 0),
    76: ("ShareGroupHeartbeat", 0),
    77: ("ShareGroupDescribe", 0),
    78: ("ShareFetch", 0),
    79: ("ShareAcknowledge", 0),
    80: ("AddRaftVoter", 0),
    81: ("RemoveRaftVoter", 0),
    82: ("UpdateRaftVoter", 0),
    83: ("InitializeShareGroupState", 0),
    84: ("ReadShareGroupState", 0),
    85: ("WriteShareGroupState", 0),
    86: ("DeleteShareGroupState", 0),
    87: ("ReadShareGroupStateSummary", 0),
    88: ("StreamsGroupHeartbeat", 0),
    89: ("StreamsGroupDescribe", 0),
    90: ("DescribeShareGroupOffsets", 0),
    91: ("AlterShareGroupOffsets", 0),
    92: ("DeleteShareGroupOffsets", 0),
}


# kesque-only APIs, far above Kafka's keys (docs/compatibility.md): served but never advertised
# in ApiVersions, so a Kafka client sees Kafka's table
KESQUE_CLUSTER_LINKS = 10000  # the cluster-link and mirror-topic admin API (protocol/cluster_links.py)
KESQUE_APIS: dict[int, tuple[str, int | None]] = {KESQUE_CLUSTER_LINKS: ("KesqueClusterLinks", 0)}
_ALL_APIS = {**FLEXIBLE_FROM, **KESQUE_APIS}


def is_flexible(api_key: int, version: int) -> bool:
    first = _ALL_APIS.get(api_key, ("", None))[1]
    return first is not None and version >= first


def api_name(api_key: int) -> str:
    return _ALL_APIS.get(api_key, (f"Unknown({api_key})", None))[0]


@dataclass
class ApiSpec:
    key: int
    min_version: int
    max_version: int
    handler: Callable
    raw: bool = False  # handler decodes the body itself (hot path)
    # versions inside [min, max] that are advertised but refused (Produce v0-2, see KAFKA-18659)
    refused_below: int = -1
    advertised: bool = True  # in ApiVersions (kesque-only APIs are not)


@dataclass(frozen=True)
class Api:
    """An API a handler class declares it serves (``APIS``, or ``apis(config)`` when the set
    depends on the config): the server turns these into :class:`ApiSpec` entries bound to the
    handler object's method ``method``, and ``served_versions`` reads them without building
    any handler."""

    key: ApiKeys
    min_version: int
    max_version: int
    method: str
    raw: bool = False
    refused_below: int = -1
    # served on the controller listeners only (as Kafka's raft and controller RPCs), not advertised on the others
    controller_only: bool = False
    advertised: bool = True  # False: a kesque-only API, left out of ApiVersions


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int
    flexible: bool


_HEADER_V1 = struct.Struct(">hhih")  # api key, api version, correlation id, client id length


def parse_request_header(frame) -> RequestHeader:
    """Header v1 (key, version, correlation id, client id) or v2 (+ tagged fields)."""
    size = len(frame)
    if size >= 10:
        api_key, api_version, correlation_id, n = _HEADER_V1.unpack_from(frame, 0)
    elif size >= 8:
        api_key, api_version, correlation_id = _HEADER_V1.unpack_from(bytes(frame) + b"\xff\xfe", 0)[:3]
        n = -2
    else:
        raise ProtocolError("request header too short")
    if n < -1:
        raise ProtocolError("bad client id length")
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise ProtocolError("truncated client id")
        client_id = bytes(frame[pos : pos + n]).decode("utf-8", "replace")
        pos += n
    flexible = is_flexible(api_key, api_version)
    if flexible:
        if pos < size and frame[pos] == 0:
            pos += 1  # no tagged fields
        else:
            pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, flexible)


@cache
def request_class(api_key: int, version: int):
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int):
    return load_response_schema(api_key, version)


@cache
def _reader(cls):
    return entity_reader(cls)


@cache
def _writer(cls):
    return entity_writer(cls)


def decode_request(api_key: int, version: int, body) -> Any:
    cls = request_class(api_key, version)
    if isinstance(body, memoryview) and not body.readonly:
        body = body.toreadonly()  # kio's compiled reader insists on read-only buffers
    check_counts(cls, body)  # before kio, which reserves room for whatever count it is told
    try:
        obj, size = _reader(cls)(body, 0)
    except Exception as e:
        if "Unknown tagged field" not in str(e):
            raise ProtocolError(f"cannot parse {api_name(api_key)} v{version}: {e}") from e
        # KIP-482: unknown tagged fields are skipped, never rejected (kio refuses them)
        try:
            obj, size = _reader(cls)(strip_unknown_tagged_fields(cls, body), 0)
        except Exception as e2:
            raise ProtocolError(f"cannot parse {api_name(api_key)} v{version}: {e2}") from e2
    _check_nulls(obj)
    return obj


@cache
def _null_rules(cls) -> tuple:
    """(field, nullable, entity class of its items or None) for the fields of a kio entity
    that may read as null (arrays, strings, bytes) or hold entities that have such fields:
    kio reads a null length even where the schema does not allow null, so the check is here."""

    hints = typing.get_type_hints(cls)
    rules = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = typing.get_args(t)
        nullable = isinstance(t, types.UnionType) and type(None) in args
        if nullable:
            t = next(a for a in args if a is not type(None))
        is_array = typing.get_origin(t) is tuple
        if is_array:
            t = typing.get_args(t)[0]
        while hasattr(t, "__supertype__"):  # NewType
            t = t.__supertype__
        child = t if dataclasses.is_dataclass(t) and _null_rules(t) else None
        may_be_null = is_array or (isinstance(t, type) and issubclass(t, (str, bytes)))
        if (may_be_null and not nullable) or child is not None:
            rules.append((f.name, nullable, child))
    return tuple(rules)


def _check_nulls(obj) -> None:
    """A null where the schema has no nullable version is an invalid request (Kafka's
    generated readers throw "non-nullable field ... was serialized as null")."""
    for name, nullable, child in _null_rules(type(obj)):
        value = getattr(obj, name)
        if value is None:
            if not nullable:
                raise ProtocolError(f"non-nullable field {name} was serialized as null")
        elif child is not None:
            for item in value if isinstance(value, tuple) else (value,):
                _check_nulls(item)


def encode_body(obj) -> bytes:
    buf = io.BytesIO()
    _writer(type(obj))(buf, obj)
    return buf.getvalue()


def response_header(correlation_id: int, api_key: int, version: int) -> bytes:
    """Response header v0, or v1 (with empty tagged fields) for flexible versions.
    ApiVersions responses always use v0 so clients can parse them before negotiating."""
    if api_key != ApiKeys.API_VERSIONS and is_flexible(api_key, version):
        return INT32.pack(correlation_id) + b"\x00"
    return INT32.pack(correlation_id)
