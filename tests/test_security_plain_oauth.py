"""SASL/PLAIN with JAAS users, and OAUTHBEARER tokens: Kafka's unsecured ones and JWTs against
a JWKS (keys made here with cryptography, tokens signed with pyjwt)."""

from __future__ import annotations

import base64
import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from kesque.errors import ErrorCode
from kesque.security.oauthbearer import InvalidToken, JwksValidator, parse_client_response, validate_unsecured
from kesque.security.plain import PlainSaslServer, parse_jaas_config, plain_users
from kesque.security.sasl import IllegalSaslState, SaslAuthenticationFailed

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
    '  username="admin" password="admin-secret"\n  user_admin="admin-secret" user_alice="alice-\\"secret";'
)


def test_jaas_users():
    assert plain_users(JAAS) == {"admin": "admin-secret", "alice": 'alice-"secret'}
    (entry,) = parse_jaas_config("com.example.Module optional debug=true;")
    assert (entry.login_module, entry.flag, entry.options) == ("com.example.Module", "optional", {"debug": "true"})
    for bad in ("", "x required a=1", "x sometimes;", "x required a=;"):
        with pytest.raises(ValueError):
            parse_jaas_config(bad)
    with pytest.raises(ValueError, match="exactly 1"):
        plain_users("com.example.Module required;")


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0a\0b\0c\0d", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0\0pw", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0pw", "Authentication failed: Invalid username or password"),
        (
            b"admin\0alice\0alice-secret",
            "Authentication failed: Client requested an authorization id that is different",
        ),
    ],
)
def test_plain_failures(token, message):
    with pytest.raises(SaslAuthenticationFailed, match=message.replace("(", r"\(")) as e:
        PlainSaslServer({"alice": "alice-secret"}).evaluate(token)
    assert e.value.code == ErrorCode.sasl_authentication_failed


def test_plain_success():
    server = PlainSaslServer(plain_users(JAAS))
    assert server.evaluate(b'alice\0alice\0alice-"secret') == b"" and server.complete
    assert server.authorization_id == "alice"
    with pytest.raises(IllegalSaslState):
        server.evaluate(b"\0alice\0x")


def b64(d) -> str:
    return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()


def unsecured(claims, header=None, sig=""):
    return f"{b64(header or {'alg': 'none'})}.{b64(claims)}.{sig}"


NOW_MS = 1_700_000_000_000


def test_unsecured_tokens():
    t = validate_unsecured(
        unsecured({"sub": "alice", "exp": NOW_MS / 1000 + 60, "iat": NOW_MS / 1000, "scope": "a b"}), NOW_MS
    )
    assert (t.principal_name, t.scope, t.lifetime_ms, t.start_time_ms) == ("alice", {"a", "b"}, NOW_MS + 60_000, NOW_MS)
    opts = {"unsecuredValidatorPrincipalClaimName": "user", "unsecuredValidatorRequiredScope": "a"}
    assert (
        validate_unsecured(
            unsecured({"user": "bob", "exp": NOW_MS / 1000 + 1, "scope": ["a"]}), NOW_MS, opts
        ).principal_name
        == "bob"
    )
    exp = NOW_MS / 1000 + 60
    cases = [
        (unsecured({"sub": "a", "exp": exp}, {"alg": "HS256"}), "Unsecured JWS must have 'none' for an algorithm", {}),
        (unsecured({"sub": "a", "exp": exp}, sig="c2ln"), "Unsecured JWS must not contain a digital signature", {}),
        ("a.b", "must have 3 dot-separated", {}),
        ("a..b", "contains '..'", {}),
        (unsecured({"sub": "a"}), "No expiration time in JWT", {}),
        (unsecured({"exp": exp}), "No principal name in JWT claim: sub", {}),
        (unsecured({"sub": "a", "exp": NOW_MS / 1000}), "was on or after the Expiration Time value", {}),
        (unsecured({"sub": "a", "exp": exp, "iat": exp - 1 + 120}), "The Issued At value", {}),
        ("e30.!!.", "malformed", {}),
    ]
    for token, message, options in cases:
        with pytest.raises(InvalidToken, match=message) as e:
            validate_unsecured(token, NOW_MS, options)
        assert e.value.status == "invalid_token"
    with pytest.raises(InvalidToken, match=r"was missing a required scope \(c\)") as e:
        validate_unsecured(
            unsecured({"sub": "a", "exp": exp, "scope": "a"}), NOW_MS, {"unsecuredValidatorRequiredScope": "a c"}
        )
    assert e.value.status == "insufficient_scope"
    # the clock skew allowance
    late = unsecured({"sub": "a", "exp": NOW_MS / 1000 - 1})
    assert validate_unsecured(late, NOW_MS, {"unsecuredValidatorAllowableClockSkewMs": "2000"}).principal_name == "a"


def jwks_of(*keys):
    out = []
    for kid, private, alg in keys:
        jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(private.public_key()))
        out.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
    return {"keys": out}


def test_jwt_against_a_jwks():
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    v = JwksValidator(
        jwks_of(("r1", rsa_key, "RS256"), ("e1", ec_key, "ES256")), expected_audience=["kafka"], expected_issuer="idp"
    )
    now = 1_700_000_000
    good = {"sub": "svc", "aud": "kafka", "iss": "idp", "exp": now + 300, "iat": now, "scope": "write"}
    t = v.validate(jwt.encode(good, rsa_key, "RS256", headers={"kid": "r1"}), now)
    assert (t.principal_name, t.scope) == ("svc", {"write"})
    assert v.validate(jwt.encode(good, ec_key, "ES256", headers={"kid": "e1"}), now).principal_name == "svc"
    bad = [
        (jwt.encode(good, other, "RS256", headers={"kid": "r1"}), "Signature verification failed"),
        (jwt.encode(good, rsa_key, "RS256", headers={"kid": "zz"}), "No key with kid"),
        (jwt.encode({**good, "aud": "other"}, rsa_key, "RS256", headers={"kid": "r1"}), "(?i)audience"),
        (jwt.encode({**good, "iss": "evil"}, rsa_key, "RS256", headers={"kid": "r1"}), "(?i)issuer"),
        (jwt.encode({**good, "exp": now - 31}, rsa_key, "RS256", headers={"kid": "r1"}), "expired"),
        (jwt.encode({**good, "nbf": now + 100}, rsa_key, "RS256", headers={"kid": "r1"}), "not yet valid"),
        (jwt.encode({k: v for k, v in good.items() if k != "sub"}, rsa_key, "RS256", headers={"kid": "r1"}), "sub"),
        (unsecured(good, {"alg": "none", "kid": "r1"}), "algorithm"),
        ("not-a-jwt", "Malformed JWT"),
    ]
    for token, message in bad:
        with pytest.raises(InvalidToken, match=message):
            v.validate(token, now)
    assert v.validate(jwt.encode({**good, "exp": now - 29}, rsa_key, "RS256", headers={"kid": "r1"}), now)  # skew
    v.update_keys(jwks_of(("r2", other, "RS256")))  # a rotated JWKS
    with pytest.raises(InvalidToken, match="No key with kid"):
        v.validate(jwt.encode(good, rsa_key, "RS256", headers={"kid": "r1"}), now)


def test_client_response():
    assert parse_client_response(b"n,,\x01auth=Bearer abc.def.\x01\x01") == ("", "abc.def.", {})
    assert parse_client_response(b"n,a=alice,\x01auth=Bearer t\x01traceId=42\x01\x01") == (
        "alice",
        "t",
        {"traceId": "42"},
    )
    for bad in (b"n,,\x01auth=Basic abc\x01\x01", b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01"):
        with pytest.raises(ValueError):
            parse_client_response(bad)
