"""What a handler knows about the request it is answering."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.api import RequestHeader


class NoResponse:
    """Returned by a handler when the request gets no answer (acks=0 produce)."""


NO_RESPONSE = NoResponse()


class CloseConnection(Exception):
    """Raised by a handler to drop the connection after logging (e.g. acks=0 errors)."""


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    connection: object  # network.Connection
    listener: str
    # client quotas: when the request started (perf_counter_ns; 0 when no request-time
    # quota is configured), the throttle time its response carries, and whether its
    # request time has been recorded (a handler that encodes its own response does it)
    start_ns: int = 0
    throttle_ms: int = 0
    recorded: bool = False
    # the handler's own time so far: finished steps, and when the running one began (0: none)
    busy_ns: int = 0
    step_ns: int = 0

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def client_host(self) -> str:
        peer = getattr(self.connection, "peer", None)
        return peer[0] if peer else "?"
