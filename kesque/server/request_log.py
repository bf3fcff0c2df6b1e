"""Kafka's request log: with the ``kafka.request.logger`` logger at DEBUG, every completed
request is logged as Kafka's RequestChannel logs it, one ``Completed request:{...}`` JSON line
naming the request header, the connection, the times, the security protocol, the authenticated
principal, the listener and the client's software (from its ApiVersions request).

kesque renders ``request`` and ``response`` as "" (Kafka renders their bodies as JSON) and
counts the whole time as local time; it says so once, when the logger is first found enabled.
Off (the default), it costs each request one level check."""

from __future__ import annotations

import json
import logging
import time

from ..protocol.api_keys import ApiKeys

REQUEST_LOG = logging.getLogger("kafka.request.logger")
UNKNOWN = "unknown"  # Kafka's ClientInformation.UNKNOWN_NAME_OR_VERSION
_said = False


def enabled() -> bool:
    return REQUEST_LOG.isEnabledFor(logging.DEBUG)


def completed(ctx, conn, start_ns: int) -> None:
    """Log one completed request (``start_ns``: perf_counter_ns when its frame was parsed)."""
    global _said
    if not _said:
        _said = True
        REQUEST_LOG.info(
            "kesque's request log leaves the request and response bodies empty and counts a "
            "request's whole time as local time (Kafka renders the bodies as JSON and splits the time)"
        )
    header = ctx.header
    total_ms = (time.perf_counter_ns() - start_ns) / 1e6
    try:
        name = ApiKeys(header.api_key).name
    except ValueError:
        name = str(header.api_key)
    software = getattr(conn, "client_software", None) or (UNKNOWN, UNKNOWN)
    desc = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": header.api_key,
            "requestApiVersion": header.api_version,
            "correlationId": header.correlation_id,
            "clientId": header.client_id,
            "requestApiKeyName": name,
        },
        "request": "",
        "response": "",
        "connection": conn.id,
        "totalTimeMs": total_ms,
        "requestQueueTimeMs": 0.0,
        "localTimeMs": total_ms,
        "remoteTimeMs": 0.0,
        "throttleTimeMs": ctx.throttle_ms,
        "responseQueueTimeMs": 0.0,
        "sendTimeMs": 0.0,
        "securityProtocol": ctx.security_protocol,
        "principal": str(ctx.principal),
        "listener": ctx.listener,
        "clientInformation": {"softwareName": software[0], "softwareVersion": software[1]},
    }
    REQUEST_LOG.debug("Completed request:%s", json.dumps(desc, separators=(",", ":")))
