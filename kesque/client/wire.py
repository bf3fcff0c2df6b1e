"""A tiny synchronous Kafka protocol client for the few requests confluent-kafka's
AdminClient does not expose (or exposes lossily): DescribeLogDirs, DescribeTopicPartitions
(eligible leader replicas) and DescribeConfigs with every synonym kept.

Requests and responses are encoded/decoded with kio; the version of each API is the
highest one both this client (kio) and the broker (ApiVersions) support.

A connection speaks the security protocol of its :class:`ClientSecurity`, built from Kafka's
client properties (``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``:
kesque/security/client_props.py): TLS wraps the socket before the first request, SASL
authenticates after ApiVersions with SaslHandshake and SaslAuthenticate requests, as Kafka's
SaslClientAuthenticator does. A failed TLS handshake or SASL exchange raises
:class:`AuthenticationError` with the message Kafka's clients report (the bootstrap servers are
not tried in turn: Kafka's clients fail on an authentication error at once). A session lifetime
the broker answers (KIP-368) is kept in ``session_lifetime_ms``; the connection does not
re-authenticate.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from functools import cache

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from .. import __version__
from ..protocol.api_keys import ApiKeys
from ..security.client_props import sasl_login, security_protocol, ssl_context
from ..security.sasl_client import SaslClientError, SaslLogin

_I32 = struct.Struct(">i")

CLIENT_SOFTWARE_NAME = "kesque-tools"


class WireError(Exception):
    pass


class Unreachable(WireError):
    """None of the bootstrap servers answered: the one-line message names each with its reason
    (Kafka's clients retry them silently until a timeout; the tools say so at once)."""

    java_name = "TimeoutException"  # what a Kafka client reports in the end

    def __init__(self, failures: dict[str, str]):
        self.failures = failures
        if not failures:
            text = "No resolvable bootstrap urls given in bootstrap.servers"
        else:
            which = "the bootstrap server" if len(failures) == 1 else "any of the bootstrap servers"
            text = f"Could not connect to {which} " + ", ".join(f"{a} ({r})" for a, r in failures.items())
        super().__init__(text)


class AuthenticationError(Exception):
    """The broker refused this client's SASL login (Kafka's SaslAuthenticationException), or
    the client refused the broker's answer. Not a :class:`WireError`: it is not retried (Kafka's
    clients fail the call at once), nor another bootstrap server tried."""

    java_name = "SaslAuthenticationException"


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed (Kafka's SslAuthenticationException)."""

    java_name = "SslAuthenticationException"


class UnsupportedSaslMechanism(AuthenticationError):
    java_name = "UnsupportedSaslMechanismException"


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: its security protocol, the TLS context (SSL, SASL_SSL) and the
    SASL login (SASL_PLAINTEXT, SASL_SSL), built once from Kafka's client properties."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @classmethod
    def of(cls, props: dict | None) -> ClientSecurity:
        """From Kafka's client properties (ConfigError, a ValueError naming the key, on a bad
        value); PLAINTEXT without them."""
        if not props:
            return PLAINTEXT
        return cls(security_protocol(props), ssl_context(props), sasl_login(props))


PLAINTEXT = ClientSecurity()


def client_security(security: ClientSecurity | dict | None) -> ClientSecurity:
    """``security`` as a :class:`ClientSecurity` (client properties are read here)."""
    return security if isinstance(security, ClientSecurity) else ClientSecurity.of(security)


def _reason(e: Exception, connect_timeout: float) -> str:
    if isinstance(e, socket.gaierror):
        return f"unknown host: {e.strerror or e}"
    if isinstance(e, TimeoutError):
        return f"connection not established within {round(connect_timeout * 1000)} ms"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def make(cls, **kw):
    """Build a kio message/struct from plain values: fields this version lacks are dropped,
    integer milliseconds become kio's timedelta/datetime where the schema wants them."""
    fields = {f.name: f.metadata.get("kafka_type", "") for f in dataclasses.fields(cls)}
    args = {}
    for k, v in kw.items():
        if k not in fields:
            continue
        kind = fields[k]
        if isinstance(v, int) and not isinstance(v, bool):
            if kind in ("timedelta_i32", "timedelta_i64"):
                v = datetime.timedelta(milliseconds=v)
            elif kind == "datetime_i64":
                v = None if v < 0 else _EPOCH + datetime.timedelta(milliseconds=v)
        args[k] = v
    return cls(**args)


# kio resolves a schema by its dotted name on every call (tens of microseconds): once per version
_response_class = cache(load_response_schema)


@cache
def _request_module(api_key: int, version: int):
    """kio.schema.<api>.v<N>: the module of a request version, its request and response both."""
    return importlib.import_module(load_request_schema(api_key, version).__module__.rsplit(".", 1)[0])


@cache
def _kio_versions(api_key: int) -> tuple[int, ...]:
    """The request versions kio has for ``api_key``, read from kio's index: loading each
    version's schema to find out imported every version's modules (a Metadata request
    loaded 28 of them, 60 ms of a fresh process's start)."""
    versions = schema_name_map.get(api_key_map.get(api_key), {})
    return tuple(sorted(v for v, entities in versions.items() if EntityType.request in entities))


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    return [addr for _text, addr in _bootstrap_entries(servers)]


def _bootstrap_entries(servers: str) -> list[tuple[str, tuple[str, int]]]:
    """``(as written, (host, port))`` for each entry of a bootstrap list."""
    out = []
    for part in servers.split(","):
        part = part.strip()
        if not part:
            continue
        host, _, port = part.rpartition(":")
        out.append((part, (host.strip("[]") or "localhost", int(port))))
    return out


def connect_any(bootstrap: str, connect, connect_timeout: float):
    """``connect(host, port)`` for each bootstrap server in turn until one succeeds, or
    :class:`Unreachable` naming every one with its reason: one attempt each, so a refused
    connection fails at once and a silent one after ``connect_timeout`` seconds."""
    failures: dict[str, str] = {}
    for text, (host, port) in _bootstrap_entries(bootstrap):
        try:
            return connect(host, port)
        except (OSError, WireError) as e:
            failures[text] = _reason(e, connect_timeout)
    raise Unreachable(failures)


class Connection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str = "kesque-tools",
        timeout: float = 30.0,
        connect_timeout: float | None = None,
        security: ClientSecurity | dict | None = None,
    ):
        """``timeout`` bounds each request, ``connect_timeout`` (default: ``timeout``) the TCP
        connection setup and the TLS handshake; ``security``: a :class:`ClientSecurity` or Kafka's
        client properties (PLAINTEXT without)."""
        security = client_security(security)
        self.sock = socket.create_connection((host, port), timeout=connect_timeout or timeout)
        self.client_id = client_id
        self._corr = 0
        self.awaiting = False  # a request was sent and its answer not read (a call cut short)
        self._consumed = 0  # bytes of that answer read so far
        self.versions: dict[int, tuple[int, int]] = {}
        self.session_lifetime_ms = 0  # of the SASL session, when the broker gave one (KIP-368)
        try:
            if security.ssl_context is not None:
                self._start_tls(security.ssl_context, host)
            self.sock.settimeout(timeout)
            self._negotiate()
            if security.sasl is not None:
                self._authenticate(security.sasl)
        except TimeoutError:
            self.close()
            raise WireError(f"no answer within {round(timeout * 1000)} ms") from None
        except BaseException:
            self.close()
            raise

    @classmethod
    def to_any(
        cls,
        bootstrap: str,
        client_id: str = "kesque-tools",
        timeout: float = 30.0,
        connect_timeout: float | None = None,
        security: ClientSecurity | dict | None = None,
    ) -> Connection:
        """A connection to the first bootstrap server that answers ApiVersions (see
        :func:`connect_any`)."""
        security = client_security(security)
        return connect_any(
            bootstrap,
            lambda host, port: cls(host, port, client_id, timeout, connect_timeout, security),
            connect_timeout or timeout,
        )

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ framing
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise WireError("connection closed by the broker")
            buf += chunk
            self._consumed += len(chunk)
        return bytes(buf)

    def _send(self, api_key: int, version: int, body_obj) -> None:
        self._corr += 1
        req_cls = type(body_obj)
        header_cls = req_cls.__header_schema__
        header = header_cls(
            request_api_key=api_key, request_api_version=version, correlation_id=self._corr, client_id=self.client_id
        )
        out = io.BytesIO()
        entity_writer(header_cls)(out, header)
        entity_writer(req_cls)(out, body_obj)
        payload = out.getvalue()
        self.sock.sendall(_I32.pack(len(payload)) + payload)

    def _roundtrip(self, api_key: int, version: int, body_obj, reader=None) -> object:
        self._send(api_key, version, body_obj)
        self.awaiting, self._consumed = True, 0
        size = _I32.unpack(self._recv_exact(4))[0]
        frame = self._recv_exact(size)
        self.awaiting = False
        resp_cls = _response_class(api_key, version)
        rh_cls = resp_cls.__header_schema__
        if api_key == ApiKeys.API_VERSIONS:  # ApiVersions responses always carry header v0
            rh_cls = ResponseHeaderV0
        mv = memoryview(frame).toreadonly()
        rh, pos = entity_reader(rh_cls)(mv, 0)
        if rh.correlation_id != self._corr:
            raise WireError(f"correlation id mismatch: {rh.correlation_id} != {self._corr}")
        if reader is not None:
            return reader(mv, pos, version)
        obj, _ = entity_reader(resp_cls)(mv, pos)
        return obj

    def _negotiate(self) -> None:
        req_cls = load_request_schema(18, 3)
        resp = self._roundtrip(
            ApiKeys.API_VERSIONS,
            3,
            req_cls(client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=__version__),
        )
        if int(resp.error_code) != 0:
            raise WireError(f"ApiVersions failed with error {int(resp.error_code)}")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    def _start_tls(self, context: ssl.SSLContext, host: str) -> None:
        try:
            self.sock = context.wrap_socket(self.sock, server_hostname=host)
        except ssl.SSLError as e:
            reason = getattr(e, "verify_message", None) or e.reason or str(e)
            raise SslAuthenticationError(f"SSL handshake failed ({reason})") from None
        except ConnectionError as e:  # the broker closed a handshake it did not understand
            raise SslAuthenticationError(f"SSL handshake failed ({e.strerror or e})") from None

    def _authenticate(self, login: SaslLogin) -> None:
        """SaslHandshake then SaslAuthenticate tokens until the mechanism's client completes, as
        Kafka's SaslClientAuthenticator (ApiVersions was sent already)."""
        mechanism = login.mechanism
        resp = self.request(ApiKeys.SASL_HANDSHAKE, lambda m, v: m.request.SaslHandshakeRequest(mechanism=mechanism))
        code = int(resp.error_code)
        if code == 33:  # UNSUPPORTED_SASL_MECHANISM
            raise UnsupportedSaslMechanism(
                f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled mechanisms are "
                f"[{', '.join(resp.mechanisms)}]"
            )
        if code != 0:
            raise AuthenticationError(f"SaslHandshake failed with error {code}")
        client = login.new_client(int(time.time() * 1000))
        try:
            token = client.evaluate(None)
            while True:
                resp = self.request(
                    ApiKeys.SASL_AUTHENTICATE, lambda m, v: m.request.SaslAuthenticateRequest(auth_bytes=token or b"")
                )
                if int(resp.error_code) != 0:
                    raise AuthenticationError(resp.error_message or f"SASL authentication failed ({resp.error_code})")
                token = client.evaluate(resp.auth_bytes)
                if client.complete:
                    break
            lifetime = getattr(resp, "session_lifetime", None)  # v1+: a timedelta
            if lifetime:
                self.session_lifetime_ms = round(lifetime.total_seconds() * 1000)
        except SaslClientError as e:
            raise AuthenticationError(
                f"An error: ({e}) occurred when evaluating SASL token received from the Kafka Broker. "
                "Kafka Client will go to AUTHENTICATION_FAILED state."
            ) from None

    def settle(self) -> bool:
        """Read and drop the answer of a call cut short (a signal mid-request), so that the
        connection can carry the next one; False when it cannot (close it then)."""
        if not self.awaiting:
            return True
        if self._consumed:  # cut short in the middle of the answer: the framing is lost
            return False
        try:
            size = _I32.unpack(self._recv_exact(4))[0]
            self._recv_exact(size)
        except (OSError, WireError):
            return False
        self.awaiting = False
        return True

    def version_for(self, api_key: int, max_version: int | None = None) -> int | None:
        rng = self.versions.get(api_key)
        if rng is None:
            return None
        common = [
            v for v in _kio_versions(api_key) if rng[0] <= v <= rng[1] and (max_version is None or v <= max_version)
        ]
        return max(common) if common else None

    def _build(self, api_key: int, build, max_version: int | None):
        version = self.version_for(api_key, max_version)
        if version is None:
            raise WireError(f"the broker does not support API {api_key}")
        return version, build(_request_module(api_key, version), version)

    def request(self, api_key: int, build, max_version: int | None = None, reader=None) -> object:
        """``build(module_of_version, version) -> request object``; returns the response,
        decoded by kio or by ``reader(body_view, pos, version)`` where kio cannot read it."""
        version, body = self._build(api_key, build, max_version)
        return self._roundtrip(api_key, version, body, reader)

    def raw_request(self, api_key: int, version: int, body: bytes) -> memoryview:
        """A request whose body is encoded already (a kesque-only API kio does not know), with
        request header v2; returns the response body after its header v1 (no tagged fields)."""
        self._corr += 1
        cid = self.client_id.encode()
        head = struct.pack(">hhih", api_key, version, self._corr, len(cid)) + cid + b"\x00"
        self.sock.sendall(_I32.pack(len(head) + len(body)) + head + body)
        self.awaiting, self._consumed = True, 0
        size = _I32.unpack(self._recv_exact(4))[0]
        frame = self._recv_exact(size)
        self.awaiting = False
        if _I32.unpack_from(frame, 0)[0] != self._corr:
            raise WireError("correlation id mismatch")
        if frame[4] != 0:
            raise WireError("unexpected tagged fields in a response header")
        return memoryview(frame)[5:]

    def send_only(self, api_key: int, build, max_version: int | None = None) -> None:
        """A request the broker does not answer (Produce with acks=0)."""
        version, body = self._build(api_key, build, max_version)
        self._send(api_key, version, body)
