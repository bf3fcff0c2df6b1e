"""OAUTHBEARER token validation on the broker, sans-IO (time passed in):

* :func:`validate_unsecured`: Kafka's development tokens, as its
  OAuthBearerUnsecuredValidatorCallbackHandler checks them (``alg: none`` and no signature, an
  expiry, the principal claim ``sub`` or ``unsecuredValidatorPrincipalClaimName``, the scope
  claim, ``unsecuredValidatorRequiredScope``, ``unsecuredValidatorAllowableClockSkewMs``), with
  its failure messages;
* :class:`JwksValidator`: real tokens, signed JWTs checked against a JWKS document (the driver
  fetches ``sasl.oauthbearer.jwks.endpoint.url`` and hands the keys in), as Kafka's broker JWT
  validator: the key by ``kid``, the signature, ``exp``/``iat``/``nbf`` within
  ``sasl.oauthbearer.clock.skew.seconds``, the expected audience and issuer, the subject claim;
* :class:`RefreshingJwks`: when the driver fetches the JWKS again, as Kafka's RefreshingHttpsJwks
  (every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at once for a token whose ``kid`` is
  unknown, once a minute per kid at most), and :class:`Retry`, Kafka's exponential backoff of a
  fetch (``...retry.backoff.ms`` doubling, within ``...retry.backoff.max.ms``);
* :func:`parse_client_response`: the client's GS2 message ``n,,\\x01auth=Bearer <token>\\x01...\\x01\\x01``;
* :class:`OAuthBearerSaslServer`: one connection's exchange, as Kafka's OAuthBearerSaslServer (a
  refused token is answered with RFC 7628's JSON error as a challenge; the client's ``%x01``
  acknowledgement then fails the authentication with that JSON as the message).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import jwt

from .sasl import IllegalSaslState, SaslAuthenticationFailed, SaslServerError

__all__ = [
    "BearerToken",
    "OAuthBearerSaslServer",
    "InvalidToken",
    "JwksValidator",
    "RefreshingJwks",
    "Retry",
    "parse_client_response",
    "validate_unsecured",
]


class InvalidToken(ValueError):
    """A token refused; ``scope`` set when a required scope was missing (insufficient_scope)."""

    def __init__(self, message: str, scope: str | None = None):
        super().__init__(message)
        self.scope = scope

    @property
    def status(self) -> str:
        """The OAuth error the server's challenge reports (RFC 7628)."""
        return "insufficient_scope" if self.scope is not None else "invalid_token"


@dataclass(frozen=True)
class BearerToken:
    value: str
    principal_name: str
    scope: frozenset[str]
    lifetime_ms: int
    start_time_ms: int | None
    claims: dict = field(default_factory=dict, compare=False)


def _b64url_json(part: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw)
    except ValueError:
        raise InvalidToken("malformed JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("malformed JSON")
    return value


def _scope_of(claims: dict, name: str) -> frozenset[str]:
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split()) if value.strip() else frozenset()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise InvalidToken(f"The '{name}' claim was not of type String or List: {value}")


def _number(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        if value is None:
            return None
        raise InvalidToken(f"The '{name}' claim was not of type Number: {value}")
    return float(value)


def validate_unsecured(token: str, now_ms: int, options: dict[str, str] | None = None) -> BearerToken:
    """Kafka's unsecured-token validation; ``options`` are the JAAS options of the listener's
    ``OAuthBearerLoginModule`` (``unsecuredValidator*``)."""
    options = options or {}
    principal_claim = (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub"
    scope_claim = (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope"
    required_scope = (options.get("unsecuredValidatorRequiredScope") or "").split()
    skew_text = (options.get("unsecuredValidatorAllowableClockSkewMs") or "").strip()
    skew = int(skew_text) if skew_text else 0
    if skew < 0:
        raise ValueError(f"Allowable clock skew millis must not be negative: {skew_text}")
    if ".." in token:
        raise InvalidToken("Malformed compact serialization contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    if header.get("alg") != "none":
        raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
    if parts[2]:
        raise InvalidToken("Unsecured JWS must not contain a digital signature")
    scope = _scope_of(claims, scope_claim)
    exp = _number(claims, "exp")
    if exp is None:
        raise InvalidToken("No expiration time in JWT")
    principal = claims.get(principal_claim)
    if principal is not None and not isinstance(principal, str):
        raise InvalidToken(f"The '{principal_claim}' claim was not of type String: {principal}")
    if not principal or not principal.strip():
        raise InvalidToken(f"No principal name in JWT claim: {principal_claim}")
    iat = _number(claims, "iat")
    if iat is not None and 1000 * iat > now_ms + skew:
        raise InvalidToken(
            f"The Issued At value ({iat:f} seconds) was after the indicated time ({now_ms} ms) plus allowable "
            f"clock skew ({skew} ms)"
        )
    if now_ms - skew >= 1000 * exp:
        raise InvalidToken(
            f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or after the "
            f"Expiration Time value ({exp:f} seconds)"
        )
    if iat is not None and exp <= iat:
        raise InvalidToken(
            f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time ({iat:f} seconds)"
        )
    for element in required_scope:
        if element not in scope:
            raise InvalidToken(
                f"The provided scope ([{', '.join(sorted(scope))}]) was missing a required scope ({element}).  "
                f"All required scope elements: [{', '.join(required_scope)}]",
                scope=f"[{', '.join(required_scope)}]",
            )
    return BearerToken(token, principal, scope, int(exp * 1000), int(iat * 1000) if iat is not None else None, claims)


class JwksValidator:
    """Signed JWTs against the keys of a JWKS document (``{"keys": [...]}``)."""

    def __init__(
        self,
        jwks: dict,
        expected_audience: list[str] | None = None,
        expected_issuer: str | None = None,
        clock_skew_s: int = 30,
        sub_claim: str = "sub",
        scope_claim: str = "scope",
    ):
        self.expected_audience = expected_audience or None
        self.expected_issuer = expected_issuer
        self.clock_skew_s = clock_skew_s
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        # called with the kid of a token no key matches (a refreshing driver fetches the JWKS again)
        self.on_unknown_kid: Callable[[str], None] | None = None
        self.update_keys(jwks)

    def update_keys(self, jwks: dict) -> None:
        """A refreshed JWKS document (``sasl.oauthbearer.jwks.endpoint.refresh.ms``)."""
        keys = {}
        for k in jwt.PyJWKSet.from_dict(jwks).keys:
            keys[k.key_id] = k
        self._keys = keys

    def validate(self, token: str, now_s: float) -> BearerToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise InvalidToken(f"Malformed JWT provided: {e}") from None
        key = self._keys.get(header.get("kid"))
        if key is None:
            if header.get("kid") is None and len(self._keys) == 1:
                key = next(iter(self._keys.values()))
            else:
                kid = header.get("kid")
                if isinstance(kid, str) and self.on_unknown_kid is not None:
                    self.on_unknown_kid(kid)
                raise InvalidToken(f"No key with kid {kid!r} in the JWKS")
        if header.get("alg") in (None, "none") or (key.algorithm_name and header["alg"] != key.algorithm_name):
            raise InvalidToken(f"Unsupported algorithm {header.get('alg')!r}")
        required = ["exp", self.sub_claim] + (["iss"] if self.expected_issuer else [])
        try:  # the signature, audience and issuer by pyjwt; the times below, against now_s
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[header["alg"]],
                audience=self.expected_audience,
                issuer=self.expected_issuer,
                options={
                    "require": required,
                    "verify_aud": self.expected_audience is not None,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError as e:
            raise InvalidToken(f"Unable to validate the JWT: {e}") from None
        exp, iat, nbf = _number(claims, "exp"), _number(claims, "iat"), _number(claims, "nbf")
        if now_s - self.clock_skew_s >= exp:
            raise InvalidToken("The JWT has expired")
        if iat is not None and iat > now_s + self.clock_skew_s:
            raise InvalidToken("The JWT was issued in the future")
        if nbf is not None and nbf > now_s + self.clock_skew_s:
            raise InvalidToken("The JWT is not yet valid")
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise InvalidToken(f"No principal name in JWT claim: {self.sub_claim}")
        scope = _scope_of(claims, self.scope_claim)
        return BearerToken(
            token, sub, scope, int(exp * 1000), int(float(iat) * 1000) if iat is not None else None, claims
        )


class Retry:
    """Kafka's oauthbearer Retry: attempts until one succeeds or ``retry_backoff_max_ms`` has
    passed since the first, waiting ``retry_backoff_ms`` doubling after each failure (cut to what
    is left); the first error is raised when none succeeded. Time passed in: ``now_ms()`` and
    ``sleep_ms(ms)``."""

    def __init__(self, retry_backoff_ms: int, retry_backoff_max_ms: int, now_ms, sleep_ms):
        if retry_backoff_ms < 0:
            raise ValueError(f"retryBackoffMs value ({retry_backoff_ms}) must be non-negative")
        if retry_backoff_max_ms < 0:
            raise ValueError(f"retryBackoffMaxMs value ({retry_backoff_max_ms}) must be non-negative")
        if retry_backoff_max_ms < retry_backoff_ms:
            raise ValueError(
                f"retryBackoffMaxMs value ({retry_backoff_max_ms}) is less than "
                f"retryBackoffMs value ({retry_backoff_ms})"
            )
        self.backoff_ms, self.backoff_max_ms = retry_backoff_ms, retry_backoff_max_ms
        self.now_ms, self.sleep_ms = now_ms, sleep_ms

    def execute(self, call: Callable[[], object], on_error: Callable[[int, Exception, int], None] | None = None):
        """``call()``'s result; ``on_error(attempt, error, wait_ms)`` after each failure."""
        end = self.now_ms() + self.backoff_max_ms
        attempt, error = 0, None
        while self.now_ms() <= end:
            attempt += 1
            try:
                return call()
            except Exception as e:  # noqa: BLE001 - any failure of the fetch is retried, as Kafka's
                error = error or e
                wait = min(self.backoff_ms * 2 ** (attempt - 1), end - self.now_ms())
                if on_error is not None:
                    on_error(attempt, e, max(wait, 0))
                if wait <= 0:
                    break
                self.sleep_ms(wait)
        raise error or RuntimeError(
            "Exhausted all retry attempts but no attempt returned value or encountered exception"
        )


class RefreshingJwks:
    """When a JWKS endpoint is fetched again, as Kafka's RefreshingHttpsJwks: every
    ``refresh_ms`` (the driver's timer), and at once when a token names a ``kid`` the keys do not
    have (:meth:`maybe_expedite_refresh`), at most once per kid every
    ``MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`` (the last 16 kids remembered; a kid over 1,000
    characters is taken for a malformed token and never fetched for). One refresh at a time."""

    MISSING_KEY_ID_CACHE_MAX_ENTRIES = 16
    MISSING_KEY_ID_CACHE_IN_FLIGHT_MS = 60_000
    MISSING_KEY_ID_MAX_KEY_LENGTH = 1000

    def __init__(self, refresh_ms: int):
        if refresh_ms <= 0:
            raise ValueError("JWKS validation key refresh configuration value retryWaitMs value must be positive")
        self.refresh_ms = refresh_ms
        self._missing: dict[str, int] = {}  # kid -> when it may ask again (ms), oldest use first
        self.in_progress = False

    def maybe_expedite_refresh(self, kid: str, now_ms: int) -> bool:
        """True when a refresh should start now for the unknown ``kid``."""
        if len(kid) > self.MISSING_KEY_ID_MAX_KEY_LENGTH:
            return False
        next_check = self._missing.pop(kid, None)
        if next_check is not None and next_check > now_ms:
            self._missing[kid] = next_check  # most recently used last
            return False
        self._missing[kid] = now_ms + self.MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
        while len(self._missing) > self.MISSING_KEY_ID_CACHE_MAX_ENTRIES:
            del self._missing[next(iter(self._missing))]
        return True

    def start(self) -> bool:
        """A refresh begins: False when one is already in progress (this one is skipped)."""
        if self.in_progress:
            return False
        self.in_progress = True
        return True

    def finished(self, jwks: dict | None) -> None:
        """The refresh ended: the keys fetched (None: it failed, the keys stay)."""
        self.in_progress = False
        for k in (jwks or {}).get("keys", ()):
            self._missing.pop(k.get("kid"), None)


_GS2 = re.compile(r"n,(?:a=(?P<authzid>[^,]*))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01")


def parse_client_response(response: bytes) -> tuple[str, str, dict[str, str]]:
    """(authzid, token, extensions) of OAUTHBEARER's client message (RFC 7628, Kafka's
    OAuthBearerClientInitialResponse); ValueError when malformed."""
    text = response.decode("utf-8", "replace")
    m = _GS2.fullmatch(text)
    if m is None:
        raise ValueError(f"Invalid OAUTHBEARER client first message: {text!r}")
    pairs = dict(kv.split("=", 1) for kv in m.group("kvpairs").split("\x01") if kv)
    auth = pairs.pop("auth", "")
    am = re.fullmatch(r"[Bb][Ee][Aa][Rr][Ee][Rr] ([-_.a-zA-Z0-9+/=]+)", auth)
    if am is None:
        raise ValueError("Invalid OAUTHBEARER client first message: no auth=Bearer <token>")
    return m.group("authzid") or "", am.group(1), pairs


class OAuthBearerSaslServer:
    """One connection's OAUTHBEARER exchange. ``validate(token)`` returns the
    :class:`BearerToken` or raises :class:`InvalidToken` (the unsecured validator, or a
    :class:`JwksValidator`, with the time bound in). Once complete: ``authorization_id`` (the
    token's principal) and ``credential_expiration_ms`` (its lifetime, which bounds the session)."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validate: Callable[[str], BearerToken]):
        self._validate = validate
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_expiration_ms: int | None = None
        self.extensions: dict[str, str] = {}
        self._error: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslState("Authentication exchange has completed")
        if response == b"\x01" and self._error is not None:
            raise SaslAuthenticationFailed(self._error)
        self._error = None
        try:
            authzid, token_value, extensions = parse_client_response(response)
        except ValueError as e:
            raise SaslServerError(str(e)) from None
        try:
            token = self._validate(token_value)
        except InvalidToken as e:
            error = f'{{"status":"{e.status}"'
            if e.scope is not None:
                error += f', "scope":"{e.scope}"'
            self._error = error + "}"
            return self._error.encode()
        if authzid and authzid != token.principal_name:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from "
                f"the token's principal name ({token.principal_name})"
            )
        self.extensions = extensions  # Kafka's validators accept every extension
        self.authorization_id = token.principal_name
        self.credential_expiration_ms = token.lifetime_ms
        self.complete = True
        return b""
