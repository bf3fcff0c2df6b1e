"""SASL on SASL_PLAINTEXT and SASL_SSL listeners (the latter over network.py's TlsConnection):
the driver of Kafka's SaslServerAuthenticator (kesque/security/authenticator.py) on a network
connection.

A connection accepted on a SASL listener hands its frames to its :class:`SaslConnection` until
it is authenticated: ApiVersions is answered by the broker's own handler (once, before the
handshake), SaslHandshake and SaslAuthenticate by the authenticator, anything else fails the
connection. Until then a frame may be ``sasl.server.max.receive.size`` bytes at most (a larger one
closes the connection). A failure is answered, if Kafka answers it, after
``connection.failed.authentication.delay.ms``, and the connection closes; other connections are
not held up. Once authenticated the connection's frames go straight to the broker again with its
principal (``User:<name>``) in every request's context; when the session has a lifetime
(``connections.max.reauth.ms``, an OAUTHBEARER token's expiry: KIP-368) a request after it ends
closes the connection, and a SaslHandshake on it starts a re-authentication.

:class:`SaslListener` is what one listener's config says: its enabled mechanisms
(``listener.name.<l>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms``) and, per
mechanism, the JAAS config (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else
``sasl.jaas.config``) with the login module Kafka names for it: PLAIN's users are its
``user_<name>`` options, SCRAM's credentials are the metadata image's, OAUTHBEARER's tokens are
Kafka's unsecured ones unless ``sasl.oauthbearer.jwks.endpoint.url`` names a JWKS: read at start
(a ``file://`` URL only then, as Kafka's JwksFileVerificationKeyResolver), an ``http(s)://`` one
fetched again as Kafka's RefreshingHttpsJwks (:class:`JwksRefresher`: every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, at once for a token with an unknown ``kid``, with
``...retry.backoff.ms``/``...retry.backoff.max.ms``; the blocking fetches in the event loop's
default executor, never on the loop). The same JAAS entry's ``username`` and ``password`` are what this
broker logs in with when it is the client (:func:`client_login`: the channels to the inter-broker
and controller listeners, kesque/server/channel.py).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable

from ..config.broker import SASL_MECHANISMS
from ..config.types import ConfigError
from ..protocol import api as protocol
from ..protocol.api_keys import ApiKeys
from ..protocol.messages import Msg
from ..protocol.primitives import INT32, ProtocolError
from ..security.authenticator import AuthenticationFailure, SaslServerAuthenticator
from ..security.client_props import LOGIN_MODULES, SASL_PROTOCOLS, login_options
from ..security.oauthbearer import JwksValidator, OAuthBearerSaslServer, RefreshingJwks, Retry, validate_unsecured
from ..security.plain import PlainSaslServer
from ..security.sasl_client import SaslLogin
from ..security.scram import ScramCredential, ScramMechanism, ScramSaslServer

log = logging.getLogger(__name__)

# the versions Kafka 4.4 serves (SaslApis declares the same)
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)


def jaas_key(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def jaas_options(config, listener: str, mechanism: str) -> dict[str, str]:
    """The options of the mechanism's login module in the listener's JAAS config
    (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``)."""
    text = config.listener_get(listener, "sasl.jaas.config", mechanism)
    key = jaas_key(listener, mechanism)
    if not text:
        raise ConfigError(
            key,
            f"SASL mechanism {mechanism} is enabled on listener {listener} but it has no JAAS config: "
            f"set {key} (or sasl.jaas.config) to {LOGIN_MODULES[mechanism]} required ...;",
        )
    return login_options(str(text), mechanism, key)


def client_login(config, listener: str, mechanism_key: str) -> SaslLogin | None:
    """What this node logs in with on the channels to ``listener`` (the inter-broker or the
    controller listener), when that listener is SASL_PLAINTEXT or SASL_SSL: the mechanism
    ``mechanism_key`` names (``sasl.mechanism.inter.broker.protocol``,
    ``sasl.mechanism.controller.protocol``) and its login module's options in the listener's JAAS
    config, as Kafka's ChannelBuilders read them; None for a listener without SASL. A mechanism
    kesque has not, or a login without credentials, stops the start naming the key."""
    if config.security_protocol_map().get(listener.upper()) not in SASL_PROTOCOLS:
        return None
    mechanism = config.get(mechanism_key)
    enabled = [m.strip() for m in config.listener_get(listener, "sasl.enabled.mechanisms") or ()]
    if mechanism_key == "sasl.mechanism.inter.broker.protocol" and mechanism not in enabled:
        # Kafka's KafkaConfig.validateValues
        raise ConfigError(
            mechanism_key,
            f"{mechanism_key} must be included in sasl.enabled.mechanisms when SASL is used for inter-broker "
            "communication",
        )
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            mechanism_key,
            f"Invalid value {mechanism} for configuration {mechanism_key}: kesque's SASL mechanisms are "
            f"{', '.join(SASL_MECHANISMS)} (listener {listener} is {config.security_protocol_map()[listener.upper()]})",
        )
    options = jaas_options(config, listener, mechanism)
    try:
        return SaslLogin(mechanism, options)
    except ValueError as e:
        key = jaas_key(listener, mechanism)
        raise ConfigError(
            key, f"The {mechanism} JAAS config of listener {listener} cannot log this node in ({e})"
        ) from None


class SaslListener:
    def __init__(
        self,
        config,
        listener: str,
        scram_credentials: Callable[[ScramMechanism, str], ScramCredential | None],
        now_ms: Callable[[], int],
    ):
        """``scram_credentials(mechanism, user)``: the image's credential, None without one."""
        self.config = config
        self.listener = listener
        self._scram_credentials = scram_credentials
        self.now_ms = now_ms
        key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
        self.mechanisms = [m.strip() for m in config.listener_get(listener, "sasl.enabled.mechanisms") if m.strip()]
        for m in self.mechanisms:
            if m not in SASL_MECHANISMS:
                raise ConfigError(
                    key,
                    f"Invalid value {','.join(self.mechanisms)} for configuration sasl.enabled.mechanisms of "
                    f"listener {listener}: kesque's SASL mechanisms are {', '.join(SASL_MECHANISMS)} (no {m})",
                )
        if not self.mechanisms:
            raise ConfigError(key, f"No SASL mechanism is enabled on listener {listener}")
        self.options: dict[str, dict[str, str]] = {m: self._jaas_options(m) for m in self.mechanisms}
        plain = self.options.get("PLAIN", {})
        self.plain_users = {k[5:]: v for k, v in plain.items() if k.startswith("user_")}
        self.jwks_refresher: JwksRefresher | None = None
        self._jwks = self._jwks_validator() if "OAUTHBEARER" in self.mechanisms else None

    def _jaas_options(self, mechanism: str) -> dict[str, str]:
        return jaas_options(self.config, self.listener, mechanism)

    def _jwks_validator(self) -> JwksValidator | None:
        url = self.config.listener_get(self.listener, "sasl.oauthbearer.jwks.endpoint.url")
        if not url:
            return None
        try:  # at start, before the listener is served (Kafka's init() fetches the same way)
            jwks = fetch_jwks(url)
        except (OSError, ValueError) as e:
            key = "sasl.oauthbearer.jwks.endpoint.url"
            raise ConfigError(key, f"Unable to read the JWKS at {url} for listener {self.listener}: {e}") from None
        get = self.config.listener_get
        validator = JwksValidator(
            jwks,
            expected_audience=list(get(self.listener, "sasl.oauthbearer.expected.audience") or []),
            expected_issuer=get(self.listener, "sasl.oauthbearer.expected.issuer"),
            clock_skew_s=get(self.listener, "sasl.oauthbearer.clock.skew.seconds"),
            sub_claim=get(self.listener, "sasl.oauthbearer.sub.claim.name"),
            scope_claim=get(self.listener, "sasl.oauthbearer.scope.claim.name"),
        )
        if not url.lower().startswith("file:"):
            try:
                self.jwks_refresher = JwksRefresher(
                    url,
                    validator,
                    RefreshingJwks(get(self.listener, "sasl.oauthbearer.jwks.endpoint.refresh.ms")),
                    get(self.listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
                    get(self.listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"),
                    self.now_ms,
                )
            except ValueError as e:
                raise ConfigError("sasl.oauthbearer.jwks.endpoint.refresh.ms", str(e)) from None
        return validator

    def start(self, loop) -> None:
        """Start the listener's periodic work on ``loop`` (an http(s) JWKS's refreshes)."""
        if self.jwks_refresher is not None:
            self.jwks_refresher.start(loop)

    def stop(self) -> None:
        if self.jwks_refresher is not None:
            self.jwks_refresher.stop()

    # ------------------------------------------------------------------ the authenticator's parts
    def new_server(self, mechanism: str):
        if mechanism == "PLAIN":
            return PlainSaslServer(self.plain_users)
        scram = ScramMechanism.for_name(mechanism)
        if scram is not None:
            return ScramSaslServer(scram, lambda user: self._scram_credentials(scram, user))
        if self._jwks is not None:
            jwks = self._jwks
            return OAuthBearerSaslServer(lambda token: jwks.validate(token, self.now_ms() / 1000.0))
        options = self.options["OAUTHBEARER"]
        return OAuthBearerSaslServer(lambda token: validate_unsecured(token, self.now_ms(), options))

    def max_reauth_ms(self, mechanism: str) -> int:
        return self.config.listener_get(self.listener, "connections.max.reauth.ms", mechanism) or 0

    def authenticator(self, previous=None) -> SaslServerAuthenticator:
        return SaslServerAuthenticator(self.mechanisms, self.new_server, self.max_reauth_ms, previous)


def fetch_jwks(url: str) -> dict:
    """The JWKS document at ``url`` (blocking: at start, or in an executor)."""
    with urllib.request.urlopen(url, timeout=30) as f:  # noqa: S310 - the operator's URL (file:// or https://)
        jwks = json.load(f)
    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
        raise ValueError("not a JWKS document (no keys list)")
    return jwks


class JwksRefresher:
    """The driver of an http(s) JWKS's :class:`RefreshingJwks` on the event loop: a refresh every
    ``refresh.ms`` (at a fixed rate, the first one ``refresh.ms`` after start, as Kafka's), and one
    at once when a token names an unknown ``kid`` (the token itself is refused; the client's next
    login finds the key). A refresh fetches in the loop's default executor with Kafka's
    :class:`Retry` (its waits sleep that thread, not the loop), then hands the keys to the
    validator on the loop; a refresh that fails keeps the keys, as Kafka's."""

    def __init__(self, url, validator: JwksValidator, core: RefreshingJwks, backoff_ms, backoff_max_ms, now_ms):
        self.url, self.validator, self.core = url, validator, core
        self.backoff_ms, self.backoff_max_ms = backoff_ms, backoff_max_ms
        Retry(backoff_ms, backoff_max_ms, now_ms, time.sleep)  # its checks, at start
        self.now_ms = now_ms
        self.loop = None
        self._timer = None
        self.refreshes = 0  # completed, for tests and logs
        validator.on_unknown_kid = self._unknown_kid

    def start(self, loop) -> None:
        self.loop = loop
        self._timer = loop.call_later(self.core.refresh_ms / 1000, self._scheduled)
        log.info("JWKS validation key refresh thread started with a refresh interval of %d ms", self.core.refresh_ms)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.loop = None

    def _scheduled(self) -> None:
        self._timer = self.loop.call_later(self.core.refresh_ms / 1000, self._scheduled)
        self.refresh()

    def _unknown_kid(self, kid: str) -> None:
        if self.loop is not None and self.core.maybe_expedite_refresh(kid, self.now_ms()):
            log.debug("Refreshing JWKs from %s as no suitable verification key for kid %s was found", self.url, kid)
            self.loop.call_soon(self.refresh)

    def refresh(self) -> None:
        if self.loop is None:
            return
        if not self.core.start():
            log.debug("OAuth JWKS refresh is already in progress; ignoring concurrent refresh")
            return
        log.info("OAuth JWKS refresh of %s starting", self.url)
        self.loop.run_in_executor(None, self._fetch).add_done_callback(self._done)

    def _fetch(self) -> dict:
        """In the executor: the fetch, retried with backoff (monotonic time, this thread sleeping)."""

        def warn(attempt: int, e: Exception, wait_ms: int) -> None:
            log.warning(
                "Attempt %d to make call resulted in an error; sleeping %d ms before retrying: %s", attempt, wait_ms, e
            )

        retry = Retry(
            self.backoff_ms, self.backoff_max_ms, lambda: int(time.monotonic() * 1000), lambda ms: time.sleep(ms / 1000)
        )
        return retry.execute(lambda: fetch_jwks(self.url), warn)

    def _done(self, fut) -> None:
        if fut.cancelled():  # the loop is closing
            self.core.finished(None)
            return
        try:
            jwks = fut.result()
            self.validator.update_keys(jwks)
        except Exception as e:  # noqa: BLE001 - the fetch's or the document's error: logged, keys kept
            self.core.finished(None)
            log.warning("OAuth JWKS refresh of %s encountered an error; not updating local JWKS cache: %s", self.url, e)
            return
        self.core.finished(jwks)
        self.refreshes += 1
        log.info("OAuth JWKS refresh of %s complete", self.url)


def _respond(conn, header, body) -> None:
    payload = protocol.encode_body(body)
    head = protocol.response_header(header.correlation_id, header.api_key, header.api_version)
    conn.complete(conn.new_slot(), [INT32.pack(len(head) + len(payload)) + head, payload])


def _ignore(conn, frame) -> None:
    """Frames of a connection whose authentication failed and that is about to close."""


class SaslConnection:
    """One connection of a SASL listener: its frames until it is authenticated (and while it
    re-authenticates), its session's end after."""

    def __init__(self, sasl: SaslListener, conn, handle_frame, delay_ms: int, max_receive: int, max_request: int):
        """``handle_frame(conn, frame)``: the broker's (ApiVersions before authentication, every
        request after)."""
        self.sasl = sasl
        self.conn = conn
        self._broker_frame = handle_frame
        self._delay = delay_ms / 1000.0
        self._max_receive = max_receive
        self._max_request = max_request
        self.auth = sasl.authenticator()
        self._authenticating()

    def _authenticating(self) -> None:
        conn = self.conn
        conn.handle_frame = self.handle_frame
        conn.max_request = self._max_receive
        conn.max_request_key = "sasl.server.max.receive.size"

    def now_ms(self) -> int:
        return self.sasl.now_ms()

    # ------------------------------------------------------------------ before authentication
    def handle_frame(self, conn, frame: memoryview) -> None:
        auth, header = self.auth, None
        try:
            if auth.raw_tokens and auth.state == "AUTHENTICATE":  # after SaslHandshake v0: bare tokens
                out = auth.authenticate(frame, 0, self.now_ms())["auth_bytes"]
                conn.complete(conn.new_slot(), [INT32.pack(len(out)), out])
                if auth.complete:
                    self._authenticated()
                return
            try:
                header = protocol.parse_request_header(frame)
            except ProtocolError as e:
                log.info("%s: closing connection: malformed request header during SASL authentication (%s)", conn.id, e)
                conn.close()
                return
            key = header.api_key
            if key == ApiKeys.API_VERSIONS:
                auth.api_versions()
                self._broker_frame(conn, frame)
                return
            if key == ApiKeys.SASL_HANDSHAKE:
                request = self._decode(header, frame, HANDSHAKE_VERSIONS)
                if request is not None:
                    self._handshake(header, request)
                return
            if key == ApiKeys.SASL_AUTHENTICATE:
                request = self._decode(header, frame, AUTHENTICATE_VERSIONS)
                if request is not None:
                    fields = auth.authenticate(request.auth_bytes, header.api_version, self.now_ms())
                    _respond(conn, header, Msg(ApiKeys.SASL_AUTHENTICATE, header.api_version)(**fields))
                    if auth.complete:
                        self._authenticated()
                return
            try:
                name = ApiKeys(key).name
            except ValueError:
                name = str(key)
            auth.unexpected(name)
        except AuthenticationFailure as failure:
            self._failed(failure, header)

    def _decode(self, header, frame, versions):
        lo, hi = versions
        if not lo <= header.api_version <= hi:
            log.info(
                "%s: closing connection: unsupported version %d of %s during SASL authentication",
                self.conn.id,
                header.api_version,
                protocol.api_name(header.api_key),
            )
            self.conn.close()
            return None
        try:
            return protocol.decode_request(header.api_key, header.api_version, frame[header.body_offset :])
        except ProtocolError as e:
            log.info("%s: closing connection: %s", self.conn.id, e)
            self.conn.close()
            return None

    def _handshake(self, header, request) -> None:
        fields = self.auth.handshake(request.mechanism, header.api_version)
        _respond(self.conn, header, Msg(ApiKeys.SASL_HANDSHAKE, header.api_version)(**fields))

    def _failed(self, failure: AuthenticationFailure, header) -> None:
        conn = self.conn
        # Kafka's Selector: "Failed authentication with /<ip> (channelId=<id>) (<message>)"
        log.info("Failed authentication with /%s (channelId=%s) (%s)", conn.peer[0], conn.id, failure.error)
        items = None
        if failure.response is not None and header is not None:
            msg = Msg(header.api_key, header.api_version)
            fields = {k: v for k, v in failure.response.items() if msg.has(None, k)}
            body = protocol.encode_body(msg(**fields))
            head = protocol.response_header(header.correlation_id, header.api_key, header.api_version)
            items = [INT32.pack(len(head) + len(body)) + head, body]
        conn.handle_frame = _ignore
        conn.close_after(self._delay, items)

    def _authenticated(self) -> None:
        conn, auth = self.conn, self.auth
        log.debug(
            "%s: %s as %s with %s",
            conn.id,
            "re-authenticated" if auth.reauthenticating else "authenticated",
            auth.principal,
            auth.mechanism,
        )
        conn.principal = auth.principal
        conn.max_request = self._max_request
        conn.max_request_key = type(conn).max_request_key
        conn.handle_frame = self._broker_frame if auth.session_expiration_ms is None else self.handle_session_frame

    # ------------------------------------------------------------------ after authentication
    def handle_session_frame(self, conn, frame: memoryview) -> None:
        """A request on an authenticated connection whose session ends (KIP-368). A
        SaslHandshake re-authenticates, even once the session has ended (as Kafka's SocketServer
        asks for it before checking the expiry); any other request after the end closes it."""
        if len(frame) >= 2 and (frame[0] << 8 | frame[1]) == ApiKeys.SASL_HANDSHAKE:
            self.auth = self.sasl.authenticator((self.auth.mechanism, self.auth.principal))
            self._authenticating()
            self.handle_frame(conn, frame)
            return
        if self.now_ms() > self.auth.session_expiration_ms:
            log.debug("%s: disconnecting expired channel (principal %s)", conn.id, conn.principal)
            conn.close()
            return
        self._broker_frame(conn, frame)
