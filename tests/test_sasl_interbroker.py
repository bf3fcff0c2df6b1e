"""The broker's SASL client side (issue 27): what a node sends when its inter-broker or controller
listener is SASL_PLAINTEXT or SASL_SSL. The mechanisms' clients against kesque's servers
(sans-IO), the inter-node channel against a real SASL listener (PLAIN, SCRAM-SHA-512 and
OAUTHBEARER logins, KIP-368 re-authentication on the same connection, a wrong password and an
unknown mechanism failing with Kafka's messages and backing off), and clusters whose client,
inter-broker and controller listeners are all SASL_SSL (or SASL_PLAINTEXT)."""

from __future__ import annotations

import asyncio
import base64
import logging
import subprocess
import sys
import time

import pytest

from kesque.config import BrokerConfig, ConfigError
from kesque.protocol.api_keys import ApiKeys
from kesque.protocol.messages import Msg
from kesque.security.oauthbearer import OAuthBearerSaslServer, validate_unsecured
from kesque.security.plain import PlainSaslServer
from kesque.security.sasl_client import SaslClientError, SaslLogin, ScramSaslClient, unsecured_login_token
from kesque.security.scram import ScramFormatter, ScramMechanism, ScramSaslServer
from kesque.server.channel import AuthenticationFailed, Channel
from kesque.server.sasl import client_login
from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
WRONG_PASSWORD = "Authentication failed: Invalid username or password"


# ---------------------------------------------------------------------- the clients, sans-IO


def exchange(client, server) -> bytes:
    """Run one client against one server to the end; the server's last token."""
    token = client.evaluate(None)
    while True:
        answer = server.evaluate(token)
        token = client.evaluate(answer)
        if client.complete:
            return answer
        assert token is not None


def test_plain_client_logs_in():
    server = PlainSaslServer({"alice": "alice-secret"})
    exchange(SaslLogin("PLAIN", {"username": "alice", "password": "alice-secret"}).new_client(0), server)
    assert server.complete and server.authorization_id == "alice"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_scram_client_proves_and_checks_the_server_signature(mechanism):
    credential = ScramFormatter(mechanism).generate_credential("s3cret", 4096)
    server = ScramSaslServer(mechanism, lambda user: credential if user == "bro=ker,1" else None)
    login = SaslLogin(mechanism.mechanism_name, {"username": "bro=ker,1", "password": "s3cret"})
    final = exchange(login.new_client(0), server)
    assert server.complete and server.authorization_id == "bro=ker,1" and final.startswith(b"v=")
    # a server that does not know the password cannot sign: the client refuses its last answer
    server = ScramSaslServer(mechanism, lambda user: credential)
    client = ScramSaslClient(mechanism, "bro=ker,1", "s3cret")
    final_message = client.evaluate(server.evaluate(client.evaluate(None)))
    server.evaluate(final_message)
    forged = b"v=" + base64.b64encode(b"\0" * len(base64.b64decode(final[2:])))
    with pytest.raises(SaslClientError, match="Invalid server signature"):
        client.evaluate(forged)
    # a server nonce that does not extend the client's, or too few iterations
    client = ScramSaslClient(mechanism, "u", "p", nonce="abc")
    client.evaluate(None)
    with pytest.raises(SaslClientError, match="does not start with client nonce"):
        client.evaluate(b"r=xyz,s=c2FsdA==,i=4096")
    client = ScramSaslClient(mechanism, "u", "p", nonce="abc")
    client.evaluate(None)
    with pytest.raises(SaslClientError, match="less than the minimum 4096"):
        client.evaluate(b"r=abcdef,s=c2FsdA==,i=10")


def test_oauthbearer_client_sends_an_unsecured_token():
    options = {
        "unsecuredLoginStringClaim_sub": "broker",
        "unsecuredLoginLifetimeSeconds": "60",
        "unsecuredLoginListClaim_scope": ",a,b",
    }
    now = int(time.time() * 1000)
    token = validate_unsecured(unsecured_login_token(options, now), now)
    assert token.principal_name == "broker" and token.scope == {"a", "b"} and token.lifetime_ms == now + 60_000
    server = OAuthBearerSaslServer(lambda t: validate_unsecured(t, now))
    exchange(SaslLogin("OAUTHBEARER", options).new_client(now), server)
    assert server.complete and server.authorization_id == "broker"
    # an expired token: the server's JSON challenge is acknowledged, then the server fails it
    server = OAuthBearerSaslServer(lambda t: validate_unsecured(t, now + 120_000))
    client = SaslLogin("OAUTHBEARER", options).new_client(now)
    challenge = server.evaluate(client.evaluate(None))
    assert challenge == b'{"status":"invalid_token"}' and client.evaluate(challenge) == b"\x01"
    with pytest.raises(ValueError, match="unsecuredLoginStringClaim_sub"):
        SaslLogin("OAUTHBEARER", {})


def sasl_config(listener="SASL_PLAINTEXT", **extra) -> BrokerConfig:
    return BrokerConfig(
        {
            "listeners": f"{listener}://:9092,CONTROLLER://:9093",
            "listener.security.protocol.map": f"{listener}:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": listener,
            **extra,
        }
    )


def test_client_login_reads_the_listeners_jaas_entry():
    config = sasl_config(
        **{
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f'{SCRAM_MODULE} required username="b" '
            'password="bp";',
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN_MODULE} required username="c" password="cp";',
        }
    )
    inter = client_login(config, "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol")
    assert inter.mechanism == "SCRAM-SHA-512" and inter.options == {"username": "b", "password": "bp"}
    ctrl = client_login(config, "CONTROLLER", "sasl.mechanism.controller.protocol")
    assert ctrl.mechanism == "PLAIN" and ctrl.options["username"] == "c"
    assert client_login(BrokerConfig({}), "PLAINTEXT", "sasl.mechanism.inter.broker.protocol") is None


@pytest.mark.parametrize(
    "extra,key,message",
    [
        (
            {"sasl.enabled.mechanisms": "PLAIN"},
            "sasl.mechanism.inter.broker.protocol",
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used for "
            "inter-broker communication",
        ),
        ({}, "sasl.mechanism.inter.broker.protocol", "Invalid value GSSAPI for configuration"),
        (
            {"sasl.mechanism.inter.broker.protocol": "PLAIN", "sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "has no JAAS config",
        ),
        (
            {
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": f'{PLAIN_MODULE} required user_admin="x";',
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "cannot log this node in (The PLAIN login module has no username and password)",
        ),
    ],
)
def test_a_login_kesque_cannot_make_names_its_key(extra, key, message):
    with pytest.raises(ConfigError) as e:
        client_login(sasl_config(**extra), "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol")
    assert e.value.name == key and message in str(e.value), e.value


# ---------------------------------------------------------------------- the channel against a broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    port = free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": f'{PLAIN_MODULE} required user_admin="admin-secret";',
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
        # PLAIN sessions last 1.2 s (KIP-368): the channel re-authenticates before they end
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "1200",
    }
    b = Broker(data_dir=str(tmp_path_factory.mktemp("sasl-channel")), config=config).start()
    b.sasl_port = port
    out = subprocess.run(
        [sys.executable, "-m", "kesque", "configs", "--bootstrap-server", b.bootstrap_servers, "--alter"]
        + ["--entity-type", "users", "--entity-name", "broker", "--add-config", "SCRAM-SHA-512=[password=bp]"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out
    yield b
    b.stop()
    b.close()


METADATA = Msg(ApiKeys.METADATA, 12, request=True)(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def channel(broker, login) -> Channel:
    return Channel(lambda _n: ("127.0.0.1", broker.sasl_port), client_id="test", sasl=login, request_timeout_ms=5000)


@pytest.mark.parametrize(
    "login",
    [
        SaslLogin("SCRAM-SHA-512", {"username": "broker", "password": "bp"}),
        SaslLogin("OAUTHBEARER", {"unsecuredLoginStringClaim_sub": "broker"}),
    ],
    ids=lambda login: login.mechanism,
)
def test_channel_authenticates_before_its_first_request(broker, login):
    async def run():
        ch = channel(broker, login)
        try:
            for _ in range(30):  # the SCRAM user reaches the image a moment after configs answers
                try:
                    return await ch.send(0, ApiKeys.METADATA, 12, METADATA)
                except AuthenticationFailed:
                    await asyncio.sleep(0.2)
        finally:
            ch.close()

    resp = asyncio.run(run())
    assert [b.node_id for b in resp.brokers] == [1]


def test_channel_reauthenticates_on_the_same_connection(broker):
    async def run():
        ch = channel(broker, SaslLogin("PLAIN", {"username": "admin", "password": "admin-secret"}))
        try:
            await ch.send(0, ApiKeys.METADATA, 12, METADATA)
            conn = ch._conns[0]
            first = conn.reauth_at
            assert first is not None  # 85-95% of the 1.2 s session
            await asyncio.sleep(1.25)  # past the session's end: without re-authenticating, the broker closes it
            resp = await ch.send(0, ApiKeys.METADATA, 12, METADATA)
            assert ch._conns[0] is conn and conn.reauth_at > first
            return resp
        finally:
            ch.close()

    assert asyncio.run(run()).brokers


def test_a_refused_login_logs_kafkas_message_and_backs_off(broker, caplog):
    async def run(login):
        ch = channel(broker, login)
        ch.backoff_ms = ch.backoff_max_ms = 60_000
        try:
            with pytest.raises(AuthenticationFailed) as e:
                await ch.send(0, ApiKeys.METADATA, 12, METADATA)
            assert ch.backing_off(0) and not ch._conns  # the next attempt waits out the backoff
            return str(e.value)
        finally:
            ch.close()

    with caplog.at_level(logging.ERROR, logger="kesque.server.channel"):
        wrong = asyncio.run(run(SaslLogin("PLAIN", {"username": "admin", "password": "nope"})))
        unknown = asyncio.run(run(SaslLogin("SCRAM-SHA-256", {"username": "broker", "password": "bp"})))
    assert wrong == WRONG_PASSWORD
    assert unknown == (
        "Unexpected handshake request with client mechanism SCRAM-SHA-256, enabled mechanisms are "
        "[PLAIN, SCRAM-SHA-512, OAUTHBEARER]"
    )
    assert f"Connection to node 0 (127.0.0.1:{broker.sasl_port}) failed authentication due to: {WRONG_PASSWORD}" in (
        caplog.text
    )
