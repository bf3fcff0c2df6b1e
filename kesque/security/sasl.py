"""What the SASL server cores raise, and the message a client sees for it (Kafka's
SaslServerAuthenticator): a :class:`SaslAuthenticationFailed` carries its own message to the
client (SASL_AUTHENTICATION_FAILED); a :class:`SaslServerError` is Kafka's plain SaslException,
whose text may tell whether a user exists, so the client sees only "Authentication failed
during authentication due to invalid credentials with SASL mechanism <m>"."""

from __future__ import annotations

from ..errors import ErrorCode, KafkaError

__all__ = ["IllegalSaslState", "SaslAuthenticationFailed", "SaslServerError", "client_error"]


class SaslAuthenticationFailed(KafkaError):
    """Kafka's SaslAuthenticationException: the client gets this message."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.sasl_authentication_failed, message)


class SaslServerError(Exception):
    """Kafka's SaslException: logged on the broker, never shown to the client."""


class IllegalSaslState(KafkaError):
    """Kafka's IllegalSaslStateException: a token after the exchange ended."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.illegal_sasl_state, message)


def client_error(exc: Exception, mechanism: str, reauthentication: bool = False) -> KafkaError:
    """The error a SaslAuthenticate response carries for a failure of a mechanism's server."""
    if isinstance(exc, KafkaError):
        return exc
    what = "re-authentication" if reauthentication else "authentication"
    return SaslAuthenticationFailed(
        f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"
    )
