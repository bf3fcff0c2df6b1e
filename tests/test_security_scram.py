"""The SCRAM server against RFC 7677's exchange, against scramp (an independent client), and
with Kafka's errors; credential generation and the kafka-configs.sh value syntax."""

from __future__ import annotations

import base64

import pytest
import scramp

from kesque.errors import ErrorCode
from kesque.security.sasl import IllegalSaslState, SaslAuthenticationFailed, SaslServerError, client_error
from kesque.security.scram import (
    ScramCredential,
    ScramFormatter,
    ScramMechanism,
    ScramSaslServer,
    credential_from_string,
    credential_to_string,
    parse_credential_config,
    sasl_name,
    secure_random_string,
    username,
)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def test_rfc7677_exchange():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramFormatter(SHA256).generate_credential("pencil", 4096, salt)
    server = ScramSaslServer(SHA256, {"user": cred}.get, nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"
    with pytest.raises(IllegalSaslState, match="Unexpected challenge in Sasl server state COMPLETE"):
        server.evaluate(b"n,,n=user,r=x")


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_credentials_match_scramp(mechanism):
    salt = b"0123456789abcdef"
    ours = ScramFormatter(mechanism).generate_credential("secret", 8192, salt)
    theirs = scramp.ScramMechanism(mechanism.mechanism_name).make_auth_info("secret", iteration_count=8192, salt=salt)
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == theirs
    # from the salted password an AlterUserScramCredentials upsertion carries
    f = ScramFormatter(mechanism)
    assert f.credential_from_salted(salt, f.salted_password("secret", salt, 8192), 8192) == ours


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize("user", ["alice", "we,ird=name"])
def test_scramp_client_authenticates(mechanism, user):
    creds = {user: ScramFormatter(mechanism).generate_credential("alice-secret", 4096)}
    server = ScramSaslServer(mechanism, creds.get)
    client = scramp.ScramClient([mechanism.mechanism_name], user, "alice-secret")  # it escapes the name itself
    first = client.get_client_first()
    assert f"n={sasl_name(user)}," in first
    client.set_server_first(server.evaluate(first.encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())  # checks v=
    assert server.complete and server.authorization_id == user


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_wrong_password_fails_with_kafkas_generic_message(mechanism):
    creds = {"alice": ScramFormatter(mechanism).generate_credential("right", 4096)}
    server = ScramSaslServer(mechanism, creds.get)
    client = scramp.ScramClient([mechanism.mechanism_name], "alice", "wrong")
    client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
    with pytest.raises(SaslServerError, match="Invalid client credentials") as e:
        server.evaluate(client.get_client_final().encode())
    assert server.state == "FAILED"
    err = client_error(e.value, mechanism.mechanism_name)
    assert err.code == ErrorCode.sasl_authentication_failed
    generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism"
    assert err.message == f"{generic} {mechanism.mechanism_name}"
    assert "re-authentication" in client_error(e.value, "X", reauthentication=True).message


def test_unknown_user_bad_messages_and_authzid():
    cred = ScramFormatter(SHA256).generate_credential("pw", 4096)
    with pytest.raises(SaslServerError, match="Authentication failed: Invalid user credentials"):
        ScramSaslServer(SHA256, {}.get).evaluate(b"n,,n=bob,r=abc")
    with pytest.raises(SaslServerError, match="Invalid SCRAM client first message format: y,,n=a,r=abc"):
        ScramSaslServer(SHA256, {"a": cred}.get).evaluate(b"y,,n=a,r=abc")
    with pytest.raises(SaslAuthenticationFailed, match="authorization id that is different from username"):
        ScramSaslServer(SHA256, {"a": cred}.get).evaluate(b"n,a=b,n=a,r=abc")
    ScramSaslServer(SHA256, {"a": cred}.get).evaluate(b"n,a=a,n=a,r=abc")  # the same authzid is fine
    low = ScramFormatter(SHA256).generate_credential("pw", 1000)
    with pytest.raises(SaslServerError, match="Iterations 1000 is less than the minimum 4096 for SCRAM-SHA-256"):
        ScramSaslServer(SHA256, {"a": low}.get).evaluate(b"n,,n=a,r=abc")

    def broken(_):
        raise OSError("store down")

    with pytest.raises(SaslServerError, match="Credentials could not be obtained"):
        ScramSaslServer(SHA256, broken).evaluate(b"n,,n=a,r=abc")
    server = ScramSaslServer(SHA256, {"a": cred}.get, nonce=lambda: "S")
    server.evaluate(b"n,,n=a,r=abc")
    with pytest.raises(SaslServerError, match="Invalid client nonce"):
        server.evaluate(b"c=biws,r=abcX,p=" + base64.b64encode(b"x" * 32))
    server = ScramSaslServer(SHA256, {"a": cred}.get)
    server.evaluate(b"n,,n=a,r=abc")
    with pytest.raises(SaslServerError, match="Invalid SCRAM client final message format"):
        server.evaluate(b"c=biws,r=abc")


def test_names_and_nonces():
    assert sasl_name("a=b,c") == "a=3Db=2Cc" and username("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ValueError, match="Invalid username"):
        username("a=4")
    nonces = {secure_random_string() for _ in range(50)}
    assert len(nonces) == 50 and all(n.isalnum() and n.islower() or n.isdigit() for n in nonces)


def test_credential_string_round_trip():
    c = ScramCredential(b"salt", b"k" * 32, b"s" * 32, 8192)
    text = credential_to_string(c)
    assert text.startswith("salt=c2FsdA==,stored_key=") and text.endswith(",iterations=8192")
    assert credential_from_string(text) == c
    with pytest.raises(ValueError):
        credential_from_string("salt=c2FsdA==,iterations=1")


def test_kafka_configs_value_syntax():
    assert parse_credential_config(SHA256, "[iterations=8192,password=alice-secret]") == (8192, "alice-secret")
    assert parse_credential_config(SHA512, "[password=a,b=c]") == (4096, "a,b=c")
    assert parse_credential_config(SHA512, "iterations=-1,password=x") == (4096, "x")
    with pytest.raises(ValueError, match="Invalid credential property SCRAM_SHA_256=iterations=8192"):
        parse_credential_config(SHA256, "[iterations=8192]")
    with pytest.raises(ValueError, match="Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-512"):
        parse_credential_config(SHA512, "[iterations=100,password=x]")
    assert ScramMechanism.for_name("SCRAM-SHA-512") is SHA512 and ScramMechanism.from_type(1) is SHA256
    assert ScramMechanism.for_name("PLAIN") is None
