"""SASL on SASL_PLAINTEXT listeners (issue 27): PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER as Kafka
4.4 serves them, SCRAM credentials in the metadata log (AlterUserScramCredentials,
DescribeUserScramCredentials, `kesque configs` for users, `kesque storage format --add-scram`),
and each bad input closing only its own connection."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import time

import jwt
import pytest
import scramp
from cryptography.hazmat.primitives.asymmetric import rsa

from kesque.errors import ErrorCode
from kesque.protocol.api_keys import ApiKeys
from kesque.security.authenticator import AuthenticationFailure, SaslServerAuthenticator
from kesque.security.oauthbearer import OAuthBearerSaslServer, validate_unsecured
from kesque.security.plain import PlainSaslServer
from kesque.security.principal import KafkaPrincipal
from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port
from wire import Api, Msg, WireClient, build_batch

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
PLAIN_JAAS = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)
SCRAM_JAAS = f'{SCRAM_MODULE} required username="admin" password="admin-secret";'
OAUTH_JAAS = f"{OAUTH_MODULE} required;"
WRONG_PASSWORD = "Authentication failed: Invalid username or password"


def unsecured_token(sub: str, exp_s: float) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'none'})}.{enc({'sub': sub, 'exp': int(exp_s), 'iat': int(time.time()) - 1})}."


def oauth_message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


# ---------------------------------------------------------------------- the authenticator, sans-IO


def authenticator(max_reauth=0, previous=None):
    servers = {
        "PLAIN": lambda: PlainSaslServer({"alice": "alice-secret"}),
        "OAUTHBEARER": lambda: OAuthBearerSaslServer(lambda t: validate_unsecured(t, int(time.time() * 1000))),
    }
    return SaslServerAuthenticator(["PLAIN", "OAUTHBEARER"], lambda m: servers[m](), lambda m: max_reauth, previous)


def test_states_as_kafkas_authenticator():
    a = authenticator()
    a.api_versions()
    with pytest.raises(AuthenticationFailure) as e:
        a.api_versions()  # once, before the handshake
    assert e.value.response is None
    a = authenticator()
    with pytest.raises(AuthenticationFailure) as e:
        a.unexpected("METADATA")
    assert str(e.value) == "Unexpected Kafka request of type METADATA during SASL handshake."
    a = authenticator()
    with pytest.raises(AuthenticationFailure) as e:
        a.handshake("GSSAPI", 1)
    assert e.value.response == {
        "error_code": ErrorCode.unsupported_sasl_mechanism,
        "mechanisms": ["PLAIN", "OAUTHBEARER"],
    }
    a = authenticator(max_reauth=5000)
    assert a.handshake("PLAIN", 1)["error_code"] == ErrorCode.none
    out = a.authenticate(b"\0alice\0alice-secret", 2, now_ms=1000)
    assert out["session_lifetime"] == 5000 and a.complete and a.principal == KafkaPrincipal("User", "alice")
    assert a.session_expiration_ms == 6000


def test_reauthentication_keeps_mechanism_and_principal():
    alice = KafkaPrincipal("User", "alice")
    a = authenticator(previous=("PLAIN", alice))
    a.handshake("OAUTHBEARER", 1)  # answered, then refused on the token, as Kafka
    with pytest.raises(AuthenticationFailure) as e:
        a.authenticate(b"x", 2, 0)
    assert "not supported for re-authentication of mechanism 'PLAIN'" in str(e.value)
    a = authenticator(previous=("OAUTHBEARER", alice))
    a.handshake("OAUTHBEARER", 1)
    with pytest.raises(AuthenticationFailure) as e:
        a.authenticate(oauth_message(unsecured_token("bob", time.time() + 60)), 2, 0)
    assert "Cannot change principals during re-authentication from User.alice: User.bob" in str(e.value)


def test_oauthbearer_token_lifetime_bounds_the_session():
    a = authenticator(max_reauth=3_600_000)
    a.handshake("OAUTHBEARER", 1)
    now = int(time.time() * 1000)
    out = a.authenticate(oauth_message(unsecured_token("alice", now / 1000 + 10)), 2, now)
    assert 9000 <= out["session_lifetime"] <= 10000


def test_wrong_password_message_hides_nothing_more_than_kafka():
    a = authenticator()
    a.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailure) as e:
        a.authenticate(b"\0alice\0nope", 2, 0)
    assert e.value.response["error_code"] == ErrorCode.sasl_authentication_failed
    assert e.value.response["error_message"] == WRONG_PASSWORD


# ---------------------------------------------------------------------- a broker


def jwks_keys(tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update(kid="k1", alg="RS256", use="sig")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public]}))
    return key, other, f"file://{path}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sasl")
    key, other, jwks_url = jwks_keys(tmp)
    sasl_port, jwt_port = free_port(), free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port},JWT://127.0.0.1:{jwt_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,JWT:SASL_PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        # a session of 1.5 s for SCRAM-SHA-512 (KIP-368)
        "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms": "1500",
        "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.jwt.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "listener.name.jwt.sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "listener.name.jwt.sasl.oauthbearer.expected.audience": "kesque",
        "sasl.server.max.receive.size": "4096",
        "offsets.topic.num.partitions": "2",
    }
    b = Broker(config=config).start()
    b.sasl = f"127.0.0.1:{sasl_port}"
    b.jwt = f"127.0.0.1:{jwt_port}"
    b.jwt_key, b.jwt_other_key = key, other
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        kesque_configs(
            b,
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            f"{mech}=[iterations=4096,password=alice-secret]",
        )
    yield b
    b.stop()
    b.close()


def kesque_configs(broker, *args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kesque", "configs", "--bootstrap-server", broker.bootstrap_servers, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def sasl_handshake(c: WireClient, mechanism: str, version: int = 1):
    return c.request(ApiKeys.SASL_HANDSHAKE, version, Msg(ApiKeys.SASL_HANDSHAKE, version)(mechanism=mechanism))


def sasl_authenticate(c: WireClient, token: bytes, version: int = 2):
    return c.request(ApiKeys.SASL_AUTHENTICATE, version, Msg(ApiKeys.SASL_AUTHENTICATE, version)(auth_bytes=token))


def metadata(c: WireClient):
    m = Msg(ApiKeys.METADATA, 12)
    return c.request(
        ApiKeys.METADATA, 12, m(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )


def plain_login(c: WireClient, user="alice", password="alice-secret"):
    assert sasl_handshake(c, "PLAIN").error_code == ErrorCode.none
    return sasl_authenticate(c, f"\0{user}\0{password}".encode())


def scram_login(c: WireClient, mechanism: str, user="alice", password="alice-secret"):
    assert sasl_handshake(c, mechanism).error_code == ErrorCode.none
    client = scramp.ScramClient([mechanism], user, password)
    first = sasl_authenticate(c, client.get_client_first().encode())
    if first.error_code != ErrorCode.none:  # an unknown user: refused at the first message
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = sasl_authenticate(c, client.get_client_final().encode())
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())  # the server's signature checks
    return final


# ---------------------------------------------------------------------- clients


def client_settings(broker, mechanism: str) -> dict:
    base = {"bootstrap.servers": broker.sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        return {**base, "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=alice"}
    return {**base, "sasl.username": "alice", "sasl.password": "alice-secret"}


def test_confluent_kafka_reauthenticates(broker):
    """librdkafka re-authenticates (KIP-368) past the 1.5 s SCRAM-SHA-512 session of this listener.
    Producing, a group and transactions with each mechanism, over SASL_PLAINTEXT and SASL_SSL,
    for every client stack, are tests/test_security_matrix.py's."""
    from confluent_kafka import Consumer, Producer

    topic = "ck-reauth"
    settings = client_settings(broker, "SCRAM-SHA-512")
    p = Producer(settings)
    for i in range(5):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    time.sleep(2.5)  # past the session's end: a connection that did not re-authenticate is closed
    p.produce(topic, b"after-reauth")
    assert p.flush(30) == 0
    c = Consumer({**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 6 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(5)] + [b"after-reauth"]


# ---------------------------------------------------------------------- the wire, and each bad input


def test_principal_and_session_on_the_wire(broker):
    with WireClient(broker.sasl) as c:
        resp = plain_login(c)
        assert resp.error_code == ErrorCode.none and resp.session_lifetime.total_seconds() == 0
        assert metadata(c).brokers  # authenticated: served
        again = sasl_handshake(c, "PLAIN")  # no session lifetime: answered as KafkaApis does
        assert again.error_code == ErrorCode.illegal_sasl_state


def test_scram_session_ends_and_reauthenticates(broker):
    with WireClient(broker.sasl) as c:
        resp = scram_login(c, "SCRAM-SHA-512")
        assert resp.error_code == ErrorCode.none and resp.session_lifetime.total_seconds() == 1.5
        assert scram_login(c, "SCRAM-SHA-512").error_code == ErrorCode.none  # re-authentication, same connection
        assert metadata(c).brokers
        time.sleep(1.7)
        c.send(*_metadata_request())
        assert c.is_closed(5)  # a request after the session's end closes the connection


def _metadata_request():
    m = Msg(ApiKeys.METADATA, 12)
    return (
        ApiKeys.METADATA,
        12,
        m(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    )


def test_wrong_password_fails_after_the_delay_and_closes_only_that_connection(broker):
    with WireClient(broker.sasl) as good, WireClient(broker.sasl) as bad:
        assert plain_login(good).error_code == ErrorCode.none
        assert sasl_handshake(bad, "PLAIN").error_code == ErrorCode.none
        t0 = time.monotonic()
        resp = sasl_authenticate(bad, b"\0alice\0wrong")
        assert time.monotonic() - t0 >= 0.09  # connection.failed.authentication.delay.ms (100)
        assert resp.error_code == ErrorCode.sasl_authentication_failed and resp.error_message == WRONG_PASSWORD
        assert bad.is_closed(5)
        assert metadata(good).brokers


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user(broker, mechanism):
    expected = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    for user, password in (("alice", "wrong"), ("nobody", "x")):
        with WireClient(broker.sasl) as c:
            assert sasl_handshake(c, mechanism).error_code == ErrorCode.none
            client = scramp.ScramClient([mechanism], user, password)
            first = sasl_authenticate(c, client.get_client_first().encode())
            if user == "nobody":  # Kafka answers the first message already
                resp = first
            else:
                client.set_server_first(first.auth_bytes.decode())
                resp = sasl_authenticate(c, client.get_client_final().encode())
            assert (resp.error_code, resp.error_message) == (ErrorCode.sasl_authentication_failed, expected)
            assert c.is_closed(5)


def test_unknown_mechanism_lists_the_enabled_ones(broker):
    with WireClient(broker.sasl) as c:
        resp = sasl_handshake(c, "GSSAPI")
        assert resp.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        assert c.is_closed(5)
    with WireClient(broker.jwt) as c:  # per listener
        assert list(sasl_handshake(c, "PLAIN").mechanisms) == ["OAUTHBEARER"]


def test_request_before_authentication_closes(broker):
    with WireClient(broker.sasl) as c, WireClient(broker.sasl) as other:
        c.send(*_metadata_request())
        assert c.is_closed(5)
        assert plain_login(other).error_code == ErrorCode.none
    with WireClient(broker.sasl) as c:  # after the handshake too
        assert sasl_handshake(c, "PLAIN").error_code == ErrorCode.none
        c.send(*_metadata_request())
        assert c.is_closed(5)


def test_oversized_token_closes(broker):
    with WireClient(broker.sasl) as c:
        assert sasl_handshake(c, "PLAIN").error_code == ErrorCode.none
        c.send(ApiKeys.SASL_AUTHENTICATE, 2, Msg(ApiKeys.SASL_AUTHENTICATE, 2)(auth_bytes=b"\0alice\0" + b"x" * 5000))
        assert c.is_closed(5)
    with WireClient(broker.sasl) as c:  # a size prefix alone is enough
        c.send_raw(struct.pack(">i", 10_000_000))
        assert c.is_closed(5)
    with WireClient(broker.sasl) as c:
        assert plain_login(c).error_code == ErrorCode.none  # afterwards socket.request.max.bytes applies
        assert metadata(c).brokers


def test_expired_and_badly_signed_oauthbearer_tokens(broker):
    with WireClient(broker.sasl) as c:
        assert sasl_handshake(c, "OAUTHBEARER").error_code == ErrorCode.none
        challenge = sasl_authenticate(c, oauth_message(unsecured_token("alice", time.time() - 60)))
        assert challenge.error_code == ErrorCode.none and challenge.auth_bytes == b'{"status":"invalid_token"}'
        resp = sasl_authenticate(c, b"\x01")
        assert (resp.error_code, resp.error_message) == (
            ErrorCode.sasl_authentication_failed,
            '{"status":"invalid_token"}',
        )
        assert c.is_closed(5)
    claims = {"sub": "alice", "aud": "kesque", "exp": int(time.time()) + 60, "iat": int(time.time()) - 1}
    good = jwt.encode(claims, broker.jwt_key, algorithm="RS256", headers={"kid": "k1"})
    forged = jwt.encode(claims, broker.jwt_other_key, algorithm="RS256", headers={"kid": "k1"})
    with WireClient(broker.jwt) as c:
        assert sasl_handshake(c, "OAUTHBEARER").error_code == ErrorCode.none
        resp = sasl_authenticate(c, oauth_message(good))
        assert resp.error_code == ErrorCode.none and 55_000 <= resp.session_lifetime.total_seconds() * 1000 <= 60_000
        assert metadata(c).brokers
    for token in (forged, unsecured_token("alice", time.time() + 60)):
        with WireClient(broker.jwt) as c:
            assert sasl_handshake(c, "OAUTHBEARER").error_code == ErrorCode.none
            assert sasl_authenticate(c, oauth_message(token)).auth_bytes == b'{"status":"invalid_token"}'
            assert sasl_authenticate(c, b"\x01").error_code == ErrorCode.sasl_authentication_failed
            assert c.is_closed(5)


def test_handshake_v0_raw_tokens(broker):
    with WireClient(broker.sasl) as c:
        assert sasl_handshake(c, "PLAIN", version=0).error_code == ErrorCode.none
        token = b"\0alice\0alice-secret"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.recv_frame(5) == b""  # PLAIN's empty answer, size-prefixed
        assert metadata(c).brokers


# ---------------------------------------------------------------------- SCRAM credentials


def test_scram_credentials_with_kesque_configs(broker):
    out = kesque_configs(
        broker,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "bob",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=bob-secret]",
    )
    assert out.returncode == 0 and out.stdout == "Completed updating config for user bob.\n", out
    with WireClient(broker.sasl) as c:
        assert scram_login(c, "SCRAM-SHA-256", "bob", "bob-secret").error_code == ErrorCode.none
    out = kesque_configs(broker, "--describe", "--entity-type", "users", "--entity-name", "bob")
    assert out.stdout == "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192\n"
    out = kesque_configs(
        broker, "--alter", "--entity-type", "users", "--entity-name", "bob", "--delete-config", "SCRAM-SHA-256"
    )
    assert out.returncode == 0, out
    assert kesque_configs(broker, "--describe", "--entity-type", "users", "--entity-name", "bob").stdout == ""
    with WireClient(broker.sasl) as c:
        assert scram_login(c, "SCRAM-SHA-256", "bob", "bob-secret").error_code == ErrorCode.sasl_authentication_failed
    out = kesque_configs(
        broker, "--alter", "--entity-type", "users", "--entity-name", "bob", "--delete-config", "SCRAM-SHA-256"
    )
    assert out.returncode == 1
    assert "ResourceNotFoundException: Attempt to delete a user credential that does not exist" in out.stderr
    out = kesque_configs(
        broker,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "bob",
        "--add-config",
        "SCRAM-SHA-256=[iterations=100,password=x]",
    )
    assert (
        out.returncode == 1 and "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256" in out.stderr
    )


def alter_scram(c: WireClient, deletions=(), upsertions=()):
    m = Msg(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0)
    req = m(
        deletions=tuple(m("ScramCredentialDeletion", name=n, mechanism=t) for n, t in deletions),
        upsertions=tuple(
            m("ScramCredentialUpsertion", name=n, mechanism=t, iterations=i, salt=b"salt", salted_password=b"p" * 32)
            for n, t, i in upsertions
        ),
    )
    resp = c.request(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0, req)
    return {r.user: (r.error_code, r.error_message) for r in resp.results}


def test_alter_user_scram_credentials_validates_as_kafka(broker):
    with WireClient(broker.bootstrap_servers) as c:
        assert alter_scram(c, upsertions=[("carol", 1, 4096)]) == {"carol": (ErrorCode.none, None)}
        got = alter_scram(
            c,
            deletions=[("ghost", 1), ("carol", 1)],
            upsertions=[
                ("carol", 1, 4096),
                ("few", 1, 100),
                ("many", 2, 20000),
                ("", 1, 4096),
                ("odd", 3, 4096),
                ("ok", 2, 4096),
            ],
        )
        assert got == {
            "ghost": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
            "carol": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
            "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
            "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
            "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
            "odd": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
            "ok": (ErrorCode.none, None),
        }
        m = Msg(ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
        resp = c.request(
            ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS,
            0,
            m(users=(m("UserName", name="ok"), m("UserName", name="ok"), m("UserName", name="none"))),
        )
        got = {r.user: (r.error_code, r.error_message) for r in resp.results}
        assert got == {
            "ok": (
                ErrorCode.duplicate_resource,
                "Cannot describe SCRAM credentials for the same user twice in a single request: ok",
            ),
            "none": (ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: none"),
        }


def test_storage_format_add_scram_bootstraps_the_first_user(tmp_path):
    data = tmp_path / "data"
    props = tmp_path / "server.properties"
    port = free_port()
    props.write_text(
        f"process.roles=broker,controller\nnode.id=1\nlog.dirs={data}\n"
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0\ncontroller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT\n"
        "inter.broker.listener.name=SASL_PLAINTEXT\nsasl.enabled.mechanisms=SCRAM-SHA-256\n"
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256\n"
        f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kesque",
            "storage",
            "format",
            "-c",
            str(props),
            "-t",
            "q1w2e3r4t5y6u7i8o9p0aa",
            "--add-scram",
            "SCRAM-SHA-256=[name=alice,password=alice-secret]",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert os.path.exists(data / "bootstrap.checkpoint")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kesque",
            "storage",
            "format",
            "-c",
            str(props),
            "-t",
            "q1w2e3r4t5y6u7i8o9p0aa",
            "--add-scram",
            "SCRAM-SHA-256=[password=x]",
            "--ignore-formatted",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "You must supply 'name' to add-scram" in bad.stderr
    b = Broker(
        data_dir=str(tmp_path / "node"),
        config={k: v for k, v in (line.split("=", 1) for line in props.read_text().splitlines())},
        port=port,
    )
    b.config["log.dirs"] = str(data)
    with b.start():
        with WireClient(f"127.0.0.1:{port}") as c:
            assert scram_login(c, "SCRAM-SHA-256").error_code == ErrorCode.none


@pytest.mark.parametrize(
    "extra,message",
    [
        ({}, "kesque's SASL mechanisms are PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (no GSSAPI)"),
        (
            {"sasl.enabled.mechanisms": "PLAIN"},
            "SASL mechanism PLAIN is enabled on listener SASL_PLAINTEXT but it has no JAAS config",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": SCRAM_JAAS},
            f"it must hold exactly one {PLAIN_MODULE} entry for PLAIN (found 0)",
        ),
    ],
)
def test_a_sasl_listener_without_what_it_needs_is_refused(extra, message):
    from kesque.config.broker import BrokerConfig
    from kesque.config.types import ConfigError
    from kesque.server.sasl import SaslListener

    config = BrokerConfig(
        {
            "listeners": "SASL_PLAINTEXT://:9092",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
            **extra,
        }
    )
    with pytest.raises(ConfigError) as e:
        SaslListener(config, "SASL_PLAINTEXT", lambda m, u: None, lambda: 0)
    assert message in str(e.value)


@pytest.mark.slow  # a 3-node cluster: about 40 s on this machine
def test_a_scram_user_created_on_one_broker_authenticates_on_another_without_restart(tmp_path):
    from kesque.testing.cluster import Cluster

    cluster = Cluster(nodes=3, data_dir=str(tmp_path))
    sasl = {}
    for node_id, b in cluster.nodes.items():
        sasl[node_id] = free_port()
        b.config["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl[node_id]}"
        b.config["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        b.config["sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        b.config["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] = SCRAM_JAAS
    with cluster:
        out = kesque_configs(
            cluster.node(1),
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--add-config",
            "SCRAM-SHA-512=[password=dave-secret]",
        )
        assert out.returncode == 0, out
        deadline = time.monotonic() + 15
        for node_id in (2, 3):
            while True:  # the record reaches each broker's image as it commits
                with WireClient(f"127.0.0.1:{sasl[node_id]}") as c:
                    resp = scram_login(c, "SCRAM-SHA-512", "dave", "dave-secret")
                if resp.error_code == ErrorCode.none or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert resp.error_code == ErrorCode.none, (node_id, resp)


def test_a_user_and_client_id_quota_throttles_that_user_only(broker):
    """Client quotas per authenticated user (issue 27): a (user, client-id) quota set with
    `kesque configs --entity-type users ... --entity-type clients ...` throttles alice's produce
    from that client id; admin from the same client id, and alice from another, are not throttled."""
    topic = "quota-per-user"
    with WireClient(broker.bootstrap_servers) as c:
        Api(c).create_topic(topic)
    r = kesque_configs(
        broker,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--add-config",
        "producer_byte_rate=1",
    )
    assert (r.returncode, r.stdout) == (0, "Completed updating config for user alice.\n"), r.stderr
    batch = build_batch([(None, b"x" * 1000, ())])

    def throttle_ms(user: str, password: str, client_id: str) -> int:
        with WireClient(broker.sasl, client_id=client_id) as c:  # a fresh connection: a throttled one is muted
            assert plain_login(c, user, password).error_code == ErrorCode.none
            resp = c.request(ApiKeys.PRODUCE, 9, Api(c).produce_request(topic, batch))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
            return int(resp.throttle_time.total_seconds() * 1000)

    # the broker applies the committed quota record a moment after the tool's answer
    deadline = time.monotonic() + 15
    while (alice := throttle_ms("alice", "alice-secret", "app")) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alice > 60_000  # ~1 kB at 1 B/s
    assert throttle_ms("admin", "admin-secret", "app") == 0
    assert throttle_ms("alice", "alice-secret", "other") == 0
