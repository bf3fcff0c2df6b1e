"""What a handler knows about the request it is answering: the request header, the connection
and its listener, the listener's security protocol, the client's address and the authenticated
principal (``User:ANONYMOUS`` on PLAINTEXT), and whether that principal may do what it asks
(:meth:`RequestContext.authorize`, Kafka's ``authHelper.authorize(request.context, ...)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..protocol.api import RequestHeader
from ..security.acl import CLUSTER_NAME as CLUSTER_NAME  # the handlers' names, re-exported
from ..security.acl import AclOperation, ResourceType
from ..security.principal import ANONYMOUS, KafkaPrincipal


class NoResponse:
    """Returned by a handler when the request gets no answer (acks=0 produce)."""


NO_RESPONSE = NoResponse()


class CloseConnection(Exception):
    """Raised by a handler to drop the connection after logging (e.g. acks=0 errors)."""


PLAINTEXT = "PLAINTEXT"


class Authorizer(Protocol):
    """What a broker asks before it acts on a request (Kafka's ``authorizer.class.name``). None
    configured: every action is allowed, as in Kafka without an authorizer."""

    def authorize(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool: ...

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool: ...


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    connection: object  # network.Connection
    listener: str
    security_protocol: str = PLAINTEXT
    principal: KafkaPrincipal = ANONYMOUS
    authorizer: Authorizer | None = None  # None: everything is allowed
    # client quotas: when the request started (perf_counter_ns; 0 when no request-time
    # quota is configured), the throttle time its response carries, and whether its
    # request time has been recorded (a handler that encodes its own response does it)
    start_ns: int = 0
    throttle_ms: int = 0
    recorded: bool = False
    # the handler's own time so far: finished steps, and when the running one began (0: none)
    busy_ns: int = 0
    step_ns: int = 0
    # when the request was parsed, for the request log (kesque/server/request_log.py); 0: off
    log_ns: int = 0
    # when the frame was parsed, for the request time metric (kesque/metrics/); 0: metrics off
    recv_ns: int = 0
    follower: bool = False  # a replica's Fetch (the FetchFollower request metrics, not FetchConsumer)
    # with metrics: when a handler that waits returned (its local time ends; 0: it answered at
    # once, its local time ends with its response queued), and when the wait ended (remote time)
    local_ns: int = 0
    remote_ns: int = 0

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def client_address(self) -> tuple:
        """The client's (host, port), ("?", 0) when unknown."""
        return getattr(self.connection, "peer", None) or ("?", 0)

    @property
    def client_host(self) -> str:
        peer = getattr(self.connection, "peer", None)
        return peer[0] if peer else "?"

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May this request's principal do ``operation`` on the resource? Handlers on the
        produce and fetch paths test ``ctx.authorizer is not None`` first, so that no
        authorizer costs one attribute test."""
        a = self.authorizer
        return a is None or a.authorize(self, operation, resource_type, name)

    def authorize_by_resource_type(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May this request's principal do ``operation`` on at least one resource of this type?
        (Kafka's ``authorizeByResourceType``: InitProducerId without a transactional id.)"""
        a = self.authorizer
        return a is None or a.authorize_by_resource_type(self.principal, self.client_host, operation, resource_type)
