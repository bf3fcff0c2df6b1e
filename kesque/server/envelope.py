"""Kafka's Envelope (ApiKeys.ENVELOPE, 58): how a broker sends a client's admin request on to the
active controller with the client's identity, and how the controller reads it back.

The broker (:class:`kesque.server.forwarding.ControllerRouter`) wraps the client's request, its
header included, in an EnvelopeRequest with the client's principal, serialized as Kafka's
DefaultKafkaPrincipalBuilder does (a version-prefixed DefaultPrincipalData: int16 version 0, then
the flexible struct type, name, token_authenticated and empty tagged fields), and the client's IP
address in network byte order. The controller (``KesqueServer._envelope``) accepts an Envelope
only from a principal allowed CLUSTER_ACTION on the cluster (the brokers, the super users), runs
the inner request as the client's, with the client's principal and address, and answers an
EnvelopeResponse with the serialized inner response (response header included); the broker
unwraps it for the client. The errors are Kafka's EnvelopeUtils': INVALID_REQUEST for an API that
is not forwarded (an Envelope inside an Envelope too) or a bad client address,
UNSUPPORTED_VERSION for an inner header or request that does not parse,
PRINCIPAL_DESERIALIZATION_FAILURE for principal bytes that do not read.
"""

from __future__ import annotations

import inspect
import socket
import struct

from ..errors import ErrorCode
from ..protocol import api as protocol
from ..protocol.api_keys import ApiKeys
from ..protocol.primitives import ProtocolError, skip_tagged_fields
from ..security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..security.principal import KafkaPrincipal
from .context import NO_RESPONSE

__all__ = [
    "FORWARDABLE",
    "EnvelopeApis",
    "EnvelopeError",
    "client_address_bytes",
    "deserialize_principal",
    "encode_inner_request",
    "envelope_request",
    "envelope_response",
    "inner_response",
    "parse_client_address",
    "serialize_principal",
]

# the APIs Kafka 4.4 marks forwardable (ApiKeys' "forwardable": the broker sends them on)
FORWARDABLE = frozenset(
    {
        ApiKeys.CREATE_TOPICS,
        ApiKeys.DELETE_TOPICS,
        ApiKeys.CREATE_ACLS,
        ApiKeys.DELETE_ACLS,
        ApiKeys.ALTER_CONFIGS,
        ApiKeys.CREATE_PARTITIONS,
        ApiKeys.CREATE_DELEGATION_TOKEN,
        ApiKeys.RENEW_DELEGATION_TOKEN,
        ApiKeys.EXPIRE_DELEGATION_TOKEN,
        ApiKeys.ELECT_LEADERS,
        ApiKeys.INCREMENTAL_ALTER_CONFIGS,
        ApiKeys.ALTER_PARTITION_REASSIGNMENTS,
        ApiKeys.LIST_PARTITION_REASSIGNMENTS,
        ApiKeys.ALTER_CLIENT_QUOTAS,
        ApiKeys.ALTER_USER_SCRAM_CREDENTIALS,
        ApiKeys.UPDATE_FEATURES,
        ApiKeys.UNREGISTER_BROKER,
        ApiKeys.DESCRIBE_QUORUM,
        ApiKeys.ADD_RAFT_VOTER,
        ApiKeys.REMOVE_RAFT_VOTER,
    }
)

ENVELOPE_VERSION = 0
_PRINCIPAL_DATA_VERSION = 0
_I16 = struct.Struct(">h")
_HEAD = struct.Struct(">hhih")
_V4_MAPPED = b"\x00" * 10 + b"\xff\xff"


class EnvelopeError(Exception):
    """An Envelope the controller refuses, with the error code its EnvelopeResponse carries."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------- the principal
def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7


def _compact_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _uvarint(len(raw) + 1) + raw


def serialize_principal(principal: KafkaPrincipal, token_authenticated: bool = False) -> bytes:
    """DefaultKafkaPrincipalBuilder.serialize: version-prefixed DefaultPrincipalData v0."""
    return (
        _I16.pack(_PRINCIPAL_DATA_VERSION)
        + _compact_string(principal.type)
        + _compact_string(principal.name)
        + (b"\x01" if token_authenticated else b"\x00")
        + b"\x00"  # no tagged fields
    )


def deserialize_principal(data: bytes) -> KafkaPrincipal:
    """DefaultKafkaPrincipalBuilder.deserialize; ValueError for bytes that do not read."""
    if len(data) < 2:
        raise ValueError("principal data too short")
    version = _I16.unpack_from(data, 0)[0]
    if version != _PRINCIPAL_DATA_VERSION:
        raise ValueError(f"Invalid principal data version {version}")
    pos = 2
    parts = []
    for _ in range(2):
        n, pos = _read_uvarint(data, pos)
        if n == 0 or pos + n - 1 > len(data):
            raise ValueError("bad principal string")
        parts.append(bytes(data[pos : pos + n - 1]).decode("utf-8"))
        pos += n - 1
    if pos >= len(data):
        raise ValueError("truncated principal data")
    pos += 1  # token_authenticated: kesque has no delegation tokens
    skip_tagged_fields(memoryview(data), pos)
    return KafkaPrincipal(parts[0], parts[1])


# ---------------------------------------------------------------------- the client's address
def client_address_bytes(host: str) -> bytes:
    """InetAddress.getAddress(): 4 bytes for IPv4, 16 for IPv6 (empty when unknown)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
    return b""


def parse_client_address(raw: bytes) -> str:
    """InetAddress.getByAddress: 4 or 16 bytes (an IPv4-mapped IPv6 address reads as the IPv4
    one, as Java's does), else INVALID_REQUEST."""
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    if len(raw) == 16 and raw[:12] == _V4_MAPPED:
        return socket.inet_ntop(socket.AF_INET, raw[12:])
    if len(raw) == 16:
        return socket.inet_ntop(socket.AF_INET6, raw)
    raise EnvelopeError(ErrorCode.invalid_request, "Failed to parse client address from envelope")


# ---------------------------------------------------------------------- the broker side
def encode_inner_request(header, body) -> bytes:
    """The client's request header and body as Kafka's RequestUtils serializes them (no size)."""
    cid = None if header.client_id is None else header.client_id.encode("utf-8")
    head = _HEAD.pack(header.api_key, header.api_version, header.correlation_id, -1 if cid is None else len(cid))
    if cid:
        head += cid
    if protocol.is_flexible(header.api_key, header.api_version):
        head += b"\x00"
    return head + protocol.encode_body(body)


def envelope_request(header, body, principal: KafkaPrincipal, client_host: str):
    cls = protocol.request_class(ApiKeys.ENVELOPE, ENVELOPE_VERSION)
    return cls(
        request_data=encode_inner_request(header, body),
        request_principal=serialize_principal(principal),
        client_host_address=client_address_bytes(client_host),
    )


def inner_response(api_key: int, version: int, data: bytes):
    """The kio response in an EnvelopeResponse's response_data (response header first)."""
    view = memoryview(data).toreadonly()
    pos = 4
    if api_key != ApiKeys.API_VERSIONS and protocol.is_flexible(api_key, version):
        pos = skip_tagged_fields(view, pos)
    obj, _ = protocol._reader(protocol.response_class(api_key, version))(view, pos)
    return obj


# ---------------------------------------------------------------------- the controller side
def parse_inner(data: bytes):
    """(inner header, inner body view) of an Envelope's request_data, Kafka's checks in order."""
    view = memoryview(data)
    try:
        header = protocol.parse_request_header(view)
    except ProtocolError as e:
        raise EnvelopeError(
            ErrorCode.unsupported_version, f"Failed to parse request header from envelope: {e}"
        ) from None
    if header.api_key not in FORWARDABLE:
        name = protocol.api_name(header.api_key) if header.api_key in protocol.FLEXIBLE_FROM else header.api_key
        raise EnvelopeError(ErrorCode.invalid_request, f"API {name} is not enabled or is not eligible for forwarding")
    return header, view[header.body_offset :]


def envelope_response(response_data: bytes | None, code: ErrorCode = ErrorCode.none):
    cls = protocol.response_class(ApiKeys.ENVELOPE, ENVELOPE_VERSION)
    return cls(response_data=response_data, error_code=code)


class _ForwardedConnection:
    """The broker's connection seen as the client's: the client's address as its peer (the
    forwarded request's ``client_host``), everything else the broker connection's."""

    __slots__ = ("_conn", "peer")

    def __init__(self, conn, host: str):
        self._conn = conn
        self.peer = (host, 0)

    def __getattr__(self, name):
        return getattr(self._conn, name)


class EnvelopeApis:
    """ENVELOPE on the controller listeners, Kafka's ControllerApis.handleEnvelopeRequest.

    ``tables``: the dispatch tables to look the inner API up in (controller listener's first);
    ``authorizer``: the controller's (None: everyone may send an Envelope, as without an
    authorizer in Kafka); ``throttler``: fills the inner response's throttle time."""

    def __init__(self, *, tables, authorizer, throttler, context_cls):
        self.tables = tables
        self.authorizer = authorizer
        self.throttler = throttler
        self.context_cls = context_cls

    def envelope(self, ctx, req):
        if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return envelope_response(None, ErrorCode.cluster_authorization_failed)
        try:
            header, inner, principal, host = self._unwrap(req)
        except EnvelopeError as e:
            return envelope_response(None, e.code)
        spec = self._spec(header.api_key)
        inner_ctx = self.context_cls(
            header,
            _ForwardedConnection(ctx.connection, host),
            ctx.listener,
            ctx.security_protocol,
            principal,
            self.authorizer,
        )
        result = spec.handler(inner_ctx, inner)
        if inspect.isawaitable(result):
            return self._wrap_later(inner_ctx, result)
        return self._wrap(inner_ctx, result)

    def _spec(self, api_key: int):
        for table in self.tables:
            spec = table.get(api_key)
            if spec is not None:
                return spec
        return None

    def _unwrap(self, req):
        """EnvelopeUtils' order: the principal, the client address, the header, the API, the body."""
        if req.request_principal is None:
            raise EnvelopeError(ErrorCode.principal_deserialization_failure, "no principal in the envelope")
        try:
            principal = deserialize_principal(req.request_principal)
        except (ValueError, UnicodeDecodeError) as e:
            raise EnvelopeError(
                ErrorCode.principal_deserialization_failure,
                f"Failed to deserialize client principal from envelope: {e}",
            ) from None
        host = parse_client_address(req.client_host_address)
        header, body = parse_inner(req.request_data)
        spec = self._spec(header.api_key)
        if spec is None or spec.raw or not spec.min_version <= header.api_version <= spec.max_version:
            raise EnvelopeError(ErrorCode.unsupported_version, f"Failed to parse forwarded request {header}")
        try:
            inner = protocol.decode_request(header.api_key, header.api_version, body)
        except ProtocolError as e:
            raise EnvelopeError(ErrorCode.unsupported_version, f"Failed to parse forwarded request: {e}") from None
        return header, inner, principal, host

    async def _wrap_later(self, ctx, awaitable):
        return self._wrap(ctx, await awaitable)

    def _wrap(self, ctx, result):
        """The inner response serialized with its header (the client's correlation id). Its
        throttle time is in it; the broker's connection is not muted for it."""
        if result is NO_RESPONSE:
            return envelope_response(None, ErrorCode.unknown_server_error)
        if ctx.throttle_ms:
            result = self.throttler.throttled(ctx, result)
        header = ctx.header
        if isinstance(result, (bytes, bytearray)):
            body = bytes(result)
        elif isinstance(result, list):
            body = b"".join(bytes(x) for x in result)
        else:
            body = protocol.encode_body(result)
        head = protocol.response_header(header.correlation_id, header.api_key, header.api_version)
        return envelope_response(head + body)
