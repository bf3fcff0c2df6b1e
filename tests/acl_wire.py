"""CreateAcls, DescribeAcls and DeleteAcls over the wire (tests/wire.py's client), for the ACL
tests against kesque and against Kafka 4.4."""

from __future__ import annotations

import socket

from kesque.protocol.api_keys import ApiKeys
from kesque.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from wire import Msg, WireClient

VERSION = 3


def _code(enum, value) -> int:
    return int(value) if isinstance(value, int) else int(enum[value])


def acl(rtype, name, op, perm="ALLOW", principal="User:ANONYMOUS", host="*", pattern="LITERAL") -> dict:
    """One ACL as the CreateAcls creation fields (names or codes)."""
    return {
        "resource_type": _code(ResourceType, rtype),
        "resource_name": name,
        "resource_pattern_type": _code(PatternType, pattern),
        "principal": principal,
        "host": host,
        "operation": _code(AclOperation, op),
        "permission_type": _code(AclPermissionType, perm),
    }


def create_acls(c: WireClient, acls: list[dict], version: int = VERSION):
    m = Msg(ApiKeys.CREATE_ACLS, version)
    return c.request(ApiKeys.CREATE_ACLS, version, m(creations=tuple(m("AclCreation", **a) for a in acls)))


def _filter_fields(rtype="ANY", name=None, pattern="ANY", principal=None, host=None, op="ANY", perm="ANY") -> dict:
    return {
        "resource_type_filter": _code(ResourceType, rtype),
        "resource_name_filter": name,
        "pattern_type_filter": _code(PatternType, pattern),
        "principal_filter": principal,
        "host_filter": host,
        "operation": _code(AclOperation, op),
        "permission_type": _code(AclPermissionType, perm),
    }


def describe_acls(c: WireClient, version: int = VERSION, **filt):
    m = Msg(ApiKeys.DESCRIBE_ACLS, version)
    return c.request(ApiKeys.DESCRIBE_ACLS, version, m(**_filter_fields(**filt)))


def delete_acls(c: WireClient, filters: list[dict], version: int = VERSION):
    m = Msg(ApiKeys.DELETE_ACLS, version)
    return c.request(
        ApiKeys.DELETE_ACLS,
        version,
        m(filters=tuple(m("DeleteAclsFilter", **_filter_fields(**f)) for f in filters)),
    )


def described(resp) -> set[tuple]:
    """A DescribeAcls response as a set of (type, name, pattern, principal, host, op, perm) names."""
    return {
        (
            ResourceType(r.resource_type).name,
            r.resource_name,
            PatternType(r.pattern_type).name,
            a.principal,
            a.host,
            AclOperation(a.operation).name,
            AclPermissionType(a.permission_type).name,
        )
        for r in resp.resources
        for a in r.acls
    }


class BoundWireClient(WireClient):
    """A wire client whose connection comes from ``source`` (another loopback address: ACLs
    are per host, so a client from 127.0.0.2 is told apart from one from 127.0.0.1)."""

    def __init__(self, address, source: str, timeout: float = 10.0, client_id: str | None = "kesque-test"):
        if isinstance(address, str):
            host, _, port = address.rpartition(":")
            address = (host, int(port))
        self.address = address
        self.timeout = timeout
        self.client_id = client_id
        self.sock = socket.create_connection(address, timeout=timeout, source_address=(source, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._next_corr = 1
