"""Kafka's SaslServerAuthenticator as a sans-IO state machine: which requests a connection of a
SASL listener may send before it is authenticated, the handshake's answer, each SaslAuthenticate
token through the mechanism's server, the session lifetime (KIP-368) and re-authentication.

The driver (kesque/server/sasl.py) decodes the frames and calls :meth:`api_versions`,
:meth:`handshake`, :meth:`authenticate` (or :meth:`unexpected` for any other API); each returns
the fields of the response to send, or raises :class:`AuthenticationFailure` carrying the
response Kafka sends after ``connection.failed.authentication.delay.ms`` before it closes the
connection (None: it closes without one). Time is passed in (milliseconds).

States, as Kafka's SaslState: HANDSHAKE_OR_VERSIONS_REQUEST (ApiVersions or SaslHandshake),
HANDSHAKE_REQUEST (ApiVersions answered: SaslHandshake), AUTHENTICATE (SaslAuthenticate tokens),
COMPLETE, FAILED; a re-authentication starts in REAUTH_PROCESS_HANDSHAKE and goes through
REAUTH_BAD_MECHANISM when the client asks for another mechanism than the first time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..errors import ErrorCode, KafkaError
from .principal import USER_TYPE, KafkaPrincipal
from .sasl import IllegalSaslState, SaslAuthenticationFailed, SaslServerError, client_error

__all__ = ["AuthenticationFailure", "MechanismServer", "SaslServerAuthenticator", "UnsupportedSaslMechanism"]


class MechanismServer(Protocol):
    """What a mechanism's server offers (PlainSaslServer, ScramSaslServer, OAuthBearerSaslServer)."""

    complete: bool
    authorization_id: str | None

    def evaluate(self, response: bytes) -> bytes: ...


class UnsupportedSaslMechanism(KafkaError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.unsupported_sasl_mechanism, message)


class AuthenticationFailure(Exception):
    """The authentication failed: after the delay, ``response`` (the response's fields; None:
    nothing) is sent and the connection closed. ``error`` says why (the broker logs it)."""

    def __init__(self, error: Exception, response: dict | None = None):
        super().__init__(str(error))
        self.error = error
        self.response = response


class SaslServerAuthenticator:
    def __init__(
        self,
        enabled_mechanisms: list[str],
        new_server: Callable[[str], MechanismServer],
        max_reauth_ms: Callable[[str], int],
        previous: tuple[str, KafkaPrincipal] | None = None,
    ):
        """``new_server(mechanism)``: a fresh mechanism server; ``max_reauth_ms(mechanism)``:
        ``connections.max.reauth.ms`` for it (0: no limit); ``previous``: the (mechanism,
        principal) of the session a re-authentication renews."""
        self.enabled_mechanisms = list(enabled_mechanisms)
        self._new_server = new_server
        self._max_reauth_ms = max_reauth_ms
        self.previous = previous
        self.state = "REAUTH_PROCESS_HANDSHAKE" if previous else "HANDSHAKE_OR_VERSIONS_REQUEST"
        self.mechanism: str | None = None
        self.mechanism_server: MechanismServer | None = None
        self.raw_tokens = False  # SaslHandshake v0: the tokens come without a Kafka request header
        self.supports_reauthentication = False  # a SaslAuthenticate v1+ was seen
        self.principal: KafkaPrincipal | None = None
        self.session_expiration_ms: int | None = None  # when the session ends (KIP-368), None: never
        self._bad_mechanism = ""

    @property
    def reauthenticating(self) -> bool:
        return self.previous is not None

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    def _text(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    def _fail(self, error: Exception, response: dict | None = None):
        self.state = "FAILED"
        raise AuthenticationFailure(error, response)

    # ------------------------------------------------------------------ requests
    def api_versions(self) -> None:
        """An ApiVersions request: answered (by the broker's handler) before the handshake only."""
        if self.state != "HANDSHAKE_OR_VERSIONS_REQUEST":
            self._fail(IllegalSaslState(f"Unexpected ApiVersions request received during SASL {self._text()} state"))
        self.state = "HANDSHAKE_REQUEST"

    def unexpected(self, api_name: str) -> None:
        """Any other request before authentication completes: the connection closes."""
        during = "SASL authentication" if self.state == "AUTHENTICATE" else "SASL handshake"
        self._fail(IllegalSaslState(f"Unexpected Kafka request of type {api_name} during {during}."))

    def handshake(self, mechanism: str, version: int) -> dict:
        """SaslHandshake: the response's fields (the enabled mechanisms, and an error for an
        unknown one, sent after the delay before the connection closes)."""
        if self.state not in ("HANDSHAKE_OR_VERSIONS_REQUEST", "HANDSHAKE_REQUEST", "REAUTH_PROCESS_HANDSHAKE"):
            self.unexpected("SASL_HANDSHAKE")
        self.raw_tokens = version < 1
        if mechanism not in self.enabled_mechanisms:
            self._fail(
                UnsupportedSaslMechanism(f"Unsupported SASL mechanism {mechanism}"),
                {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": self.enabled_mechanisms},
            )
        if self.reauthenticating and mechanism != self.previous[0]:
            self._bad_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                f"of mechanism '{self.previous[0]}'"
            )
            self.state = "REAUTH_BAD_MECHANISM"
        else:
            self.mechanism = mechanism
            self.mechanism_server = self._new_server(mechanism)
            self.state = "AUTHENTICATE"
        return {"error_code": ErrorCode.none, "mechanisms": self.enabled_mechanisms}

    def authenticate(self, token: bytes, version: int, now_ms: int) -> dict:
        """One SaslAuthenticate token (or, after a v0 handshake, one raw token): the response's
        fields (``auth_bytes``, ``session_lifetime`` once complete)."""
        if self.state == "REAUTH_BAD_MECHANISM":
            self._fail(SaslAuthenticationFailed(self._bad_mechanism))
        if self.state != "AUTHENTICATE":
            self.unexpected("SASL_AUTHENTICATE")
        if version > 0:
            self.supports_reauthentication = True
        try:
            out = self.mechanism_server.evaluate(bytes(token))
            if self.mechanism_server.complete:
                principal = KafkaPrincipal(USER_TYPE, self.mechanism_server.authorization_id)
                if self.reauthenticating and principal != self.previous[1]:
                    before, after = self.previous[1], principal
                    raise SaslAuthenticationFailed(
                        f"Cannot change principals during re-authentication from {before.type}.{before.name}: "
                        f"{after.type}.{after.name}"
                    )
                self.principal = principal
        except (SaslAuthenticationFailed, SaslServerError) as e:
            err = client_error(e, self.mechanism, self.reauthenticating)
            self._fail(
                e,
                None
                if self.raw_tokens
                else {"error_code": err.code, "error_message": err.message, "auth_bytes": b"", "session_lifetime": 0},
            )
        except KafkaError as e:  # IllegalSaslState: a token after the exchange ended
            self._fail(e, None if self.raw_tokens else {"error_code": e.code, "error_message": e.message})
        lifetime = 0
        if self.mechanism_server.complete:
            lifetime = self._session_lifetime_ms(now_ms)
            self.state = "COMPLETE"
        return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": out, "session_lifetime": lifetime}

    def _session_lifetime_ms(self, now_ms: int) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the credential's expiry (an
        OAUTHBEARER token's) and connections.max.reauth.ms, whichever comes first."""
        expires = getattr(self.mechanism_server, "credential_expiration_ms", None)
        max_reauth = self._max_reauth_ms(self.mechanism) or 0
        if expires is None and max_reauth <= 0:
            return 0
        if expires is None:
            lifetime = max_reauth
        elif max_reauth <= 0:
            lifetime = expires - now_ms
        else:
            lifetime = min(expires - now_ms, max_reauth)
        lifetime = max(lifetime, 0)
        self.session_expiration_ms = now_ms + lifetime
        return lifetime
