"""The client side of SASL, sans-IO: what a broker sends when it authenticates to another
node's SASL_PLAINTEXT or SASL_SSL listener (inter-broker, controller), as Kafka's SaslClient
mechanisms do.

Each client is one exchange: ``evaluate(challenge)`` returns the next token to send (the first
call, with None, the initial response), or raises :class:`SaslClientError` when the server's
answer is wrong (a SCRAM server whose signature does not check); ``complete`` once the server's
last token was accepted.

* :class:`PlainSaslClient`: ``\\0user\\0password``;
* :class:`ScramSaslClient`: RFC 5802 over :class:`ScramFormatter` (client-first, client-final
  with the proof, the server's signature verified), as Kafka's ScramSaslClient;
* :class:`OAuthBearerSaslClient`: an unsecured token (``alg: none``) built as Kafka's
  OAuthBearerUnsecuredLoginCallbackHandler builds it from the login module's
  ``unsecuredLogin*`` options, sent in RFC 7628's GS2 message.

:class:`SaslLogin` is what a channel logs in with: the mechanism and the JAAS options of the
login module, and a fresh client for each (re-)authentication.
"""

from __future__ import annotations

import base64
import hmac
import json
import re

from .scram import ScramFormatter, ScramMechanism, sasl_name, secure_random_string

__all__ = [
    "OAuthBearerSaslClient",
    "PlainSaslClient",
    "SaslClientError",
    "SaslLogin",
    "ScramSaslClient",
    "unsecured_login_token",
]


class SaslClientError(Exception):
    """The server's answer fails the exchange on the client side."""


class PlainSaslClient:
    mechanism = "PLAIN"

    def __init__(self, username: str, password: str):
        self._token = b"\x00" + username.encode() + b"\x00" + password.encode()
        self.complete = False
        self._sent = False

    def evaluate(self, challenge: bytes | None) -> bytes | None:
        if self._sent:
            self.complete = True  # the server's empty answer
            return None
        self._sent = True
        return self._token


_SERVER_FIRST = re.compile(r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+),s=(?P<salt>[a-zA-Z0-9/+=]+),i=(?P<iterations>[0-9]+)")


class ScramSaslClient:
    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None):
        self.mechanism = mechanism.mechanism_name
        self._scram = mechanism
        self._formatter = ScramFormatter(mechanism)
        self._username = username
        self._password = password
        self._nonce = nonce or secure_random_string()
        self.state = "SEND_CLIENT_FIRST_MESSAGE"
        self._client_first_bare = ""
        self._server_signature = b""

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    def evaluate(self, challenge: bytes | None) -> bytes | None:
        if self.state == "SEND_CLIENT_FIRST_MESSAGE":
            self._client_first_bare = f"n={sasl_name(self._username)},r={self._nonce}"
            self.state = "RECEIVE_SERVER_FIRST_MESSAGE"
            return f"n,,{self._client_first_bare}".encode()
        if self.state == "RECEIVE_SERVER_FIRST_MESSAGE":
            return self._client_final(challenge or b"")
        if self.state == "RECEIVE_SERVER_FINAL_MESSAGE":
            self._server_final(challenge or b"")
            return None
        raise SaslClientError(f"Unexpected challenge in Sasl client state {self.state}")

    def _client_final(self, challenge: bytes) -> bytes:
        server_first = challenge.decode("utf-8", "replace")
        m = _SERVER_FIRST.fullmatch(server_first)
        if m is None:
            self.state = "FAILED"
            raise SaslClientError(f"Invalid SCRAM server first message format: {server_first}")
        nonce, iterations = m.group("nonce"), int(m.group("iterations"))
        if not nonce.startswith(self._nonce):
            self.state = "FAILED"
            raise SaslClientError("Invalid server nonce: does not start with client nonce")
        if iterations < self._scram.min_iterations:
            self.state = "FAILED"
            raise SaslClientError(
                f"Requested iterations {iterations} is less than the minimum {self._scram.min_iterations} "
                f"for {self.mechanism}"
            )
        f = self._formatter
        salted = f.salted_password(self._password, base64.b64decode(m.group("salt")), iterations)
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the GS2 header "n,,"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key = f.client_key(salted)
        signature = f.hmac(f.stored_key(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = f.hmac(f.server_key(salted), auth_message)
        self.state = "RECEIVE_SERVER_FINAL_MESSAGE"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _server_final(self, challenge: bytes) -> None:
        text = challenge.decode("utf-8", "replace")
        self.state = "FAILED"
        if text.startswith("e="):
            raise SaslClientError(f"Sasl authentication using {self.mechanism} failed with error: {text[2:]}")
        if not text.startswith("v="):
            raise SaslClientError(f"Invalid SCRAM server final message format: {text}")
        try:
            signature = base64.b64decode(text[2:], validate=True)
        except ValueError:
            raise SaslClientError(f"Invalid SCRAM server final message format: {text}") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("Invalid server signature in server final message")
        self.state = "COMPLETE"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsecured_login_token(options: dict[str, str], now_ms: int) -> str:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an ``alg: none`` JWS whose claims are
    ``iat``, ``exp`` (``unsecuredLoginLifetimeSeconds`` later, 3600 by default), the principal
    claim (``unsecuredLoginPrincipalClaimName``, ``sub`` by default) and the
    ``unsecuredLoginStringClaim_<name>``, ``unsecuredLoginNumberClaim_<name>`` and
    ``unsecuredLoginListClaim_<name>`` options (a list's first character is its separator)."""
    principal_claim = (options.get("unsecuredLoginPrincipalClaimName") or "").strip() or "sub"
    lifetime_s = float(options.get("unsecuredLoginLifetimeSeconds") or 3600)
    claims: dict = {"iat": now_ms / 1000.0, "exp": now_ms / 1000.0 + lifetime_s}
    for key, value in options.items():
        if key.startswith("unsecuredLoginStringClaim_"):
            claims[key[len("unsecuredLoginStringClaim_") :]] = value
        elif key.startswith("unsecuredLoginNumberClaim_"):
            claims[key[len("unsecuredLoginNumberClaim_") :]] = float(value)
        elif key.startswith("unsecuredLoginListClaim_") and value:
            claims[key[len("unsecuredLoginListClaim_") :]] = [v for v in value[1:].split(value[0]) if v]
    name = claims.get(principal_claim)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(
            f"No principal name in the unsecured login options: set unsecuredLoginStringClaim_{principal_claim}"
        )
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    return f"{header}.{_b64url(json.dumps(claims, separators=(',', ':')).encode())}."


class OAuthBearerSaslClient:
    mechanism = "OAUTHBEARER"

    def __init__(self, token: str, extensions: dict[str, str] | None = None):
        self._token = token
        self._extensions = extensions or {}
        self.state = "SEND_CLIENT_FIRST_MESSAGE"

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    def evaluate(self, challenge: bytes | None) -> bytes | None:
        if self.state == "SEND_CLIENT_FIRST_MESSAGE":
            ext = "".join(f"{k}={v}\x01" for k, v in sorted(self._extensions.items()))
            self.state = "RECEIVE_SERVER_FIRST_MESSAGE"
            return f"n,,\x01auth=Bearer {self._token}\x01{ext}\x01".encode()
        if self.state == "RECEIVE_SERVER_FIRST_MESSAGE":
            if challenge:  # RFC 7628's error: acknowledged with %x01, the server then fails
                self.state = "RECEIVE_SERVER_MESSAGE_AFTER_FAILURE"
                return b"\x01"
            self.state = "COMPLETE"
            return None
        raise SaslClientError(f"Unexpected challenge in Sasl client state {self.state}")


class SaslLogin:
    """A mechanism and its login module's JAAS options: a fresh client per authentication
    (``username``/``password`` for PLAIN and SCRAM, ``unsecuredLogin*`` for OAUTHBEARER)."""

    def __init__(self, mechanism: str, options: dict[str, str]):
        self.mechanism = mechanism
        self.options = options
        if mechanism == "OAUTHBEARER":
            unsecured_login_token(options, 0)  # a login without a principal is refused now
        elif options.get("username") is None or options.get("password") is None:
            raise ValueError(f"The {mechanism} login module has no username and password")
        elif mechanism != "PLAIN" and ScramMechanism.for_name(mechanism) is None:
            raise ValueError(f"Unsupported SASL mechanism {mechanism}")

    def new_client(self, now_ms: int):
        o = self.options
        if self.mechanism == "PLAIN":
            return PlainSaslClient(o["username"], o["password"])
        if self.mechanism == "OAUTHBEARER":
            ext = {
                k[len("unsecuredLoginExtension_") :]: v
                for k, v in o.items()
                if k.startswith("unsecuredLoginExtension_")
            }
            return OAuthBearerSaslClient(unsecured_login_token(o, now_ms), ext)
        return ScramSaslClient(ScramMechanism.for_name(self.mechanism), o["username"], o["password"])
