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
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

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
from kesque.testing.certs import CertificateAuthority
from kesque.testing.cluster import Cluster
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


# ---------------------------------------------------------------------- clusters over SASL

N = 200  # records produced
# the killed leader is fenced (and a follower elected) 3 s after its last heartbeat, not 9
FAST_FENCING = {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000"}


def format_with_scram(cluster, *users: str) -> None:
    """``kesque storage format --add-scram`` on every node, with the cluster's id, before its
    first start (as a Kafka operator bootstraps the first SCRAM users)."""
    procs = []
    for b in cluster.nodes.values():
        with open(b.properties_file, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in b.config.items())
        cmd = [sys.executable, "-m", "kesque", "storage", "format", "-c", b.properties_file, "-t", cluster.cluster_id]
        for user in users:
            cmd += ["--add-scram", user]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, out


def replicate_and_survive_a_leader_kill(cluster, conf: dict) -> None:
    """RF 3 produce (acks=all), the ISR full (the followers fetch through the authenticated
    inter-broker channels), the leader killed, every record read back from the new leader."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    topic = f"sasl-{time.monotonic_ns() % 10**8}"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(20)
    p = Producer({**conf, "acks": "all"})
    for i in range(N):
        p.produce(topic, b"r" * 500, key=str(i))
    assert p.flush(20) == 0
    md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    deadline = time.monotonic() + 15
    while len(md.isrs) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    assert sorted(md.isrs) == [1, 2, 3]
    leader = md.leader
    cluster.kill(leader)
    c = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])  # no group coordinator needed: from offset 0
    keys, deadline = [], time.monotonic() + 30
    while len(keys) < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            keys.append(int(m.key()))
    c.close()
    assert keys == list(range(N))
    for node in cluster.nodes.values():  # the last of the voters would wait out its controlled shutdown
        if node.process is not None:
            node.kill()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    return {"ca": ca.write_pem(d / "ca.pem"), "server": server.write_pem(d / "server.pem")}


def test_cluster_whose_client_inter_broker_and_controller_listeners_are_sasl_ssl(pki, tmp_path):
    """SCRAM-SHA-512 between brokers (its user bootstrapped by storage format), PLAIN to the
    controllers, TLS under both with the host names checked; clients over SASL_SSL with SCRAM."""
    config = {
        **FAST_FENCING,
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,PLAINTEXT:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki["server"],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki["ca"],
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.plaintext.scram-sha-512.sasl.jaas.config": f'{SCRAM_MODULE} required username="broker" '
        'password="broker-secret";',
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN_MODULE} required username="controller" '
        'password="controller-secret" user_controller="controller-secret";',
    }
    cluster = Cluster(nodes=3, data_dir=str(tmp_path), config=config)
    format_with_scram(
        cluster,
        "SCRAM-SHA-512=[name=broker,password=broker-secret]",
        "SCRAM-SHA-512=[name=alice,password=alice-secret]",
    )
    with cluster:
        conf = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": pki["ca"],
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        replicate_and_survive_a_leader_kill(cluster, conf)


def test_cluster_over_sasl_plaintext(tmp_path):
    """PLAIN between brokers, OAUTHBEARER's unsecured tokens to the controllers."""
    config = {
        **FAST_FENCING,
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.plaintext.plain.sasl.jaas.config": f'{PLAIN_MODULE} required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";',
        "sasl.mechanism.controller.protocol": "OAUTHBEARER",
        "listener.name.controller.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.controller.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required "
        'unsecuredLoginStringClaim_sub="controller";',
    }
    with Cluster(nodes=3, data_dir=str(tmp_path), config=config) as cluster:
        conf = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        replicate_and_survive_a_leader_kill(cluster, conf)


# ---------------------------------------------------------------------- the README's secure quickstart

ROOT = Path(__file__).resolve().parent.parent


def readme_quickstart() -> tuple[list[str], str, list[str]]:
    """The commands of the README's "A secure broker" section: the first shell block's lines,
    the Python block, the second shell block's lines."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### A secure broker (SASL_SSL)") :]
    section = section[: section.index("\n### ", 1)]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    assert [kind for kind, _ in blocks] == ["sh", "python", "sh"]
    return blocks[0][1].splitlines(), blocks[1][1], blocks[2][1].splitlines()


def shell(command: str, cwd, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, **kw)


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("localhost", port), 0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def read_back(conf: dict, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": "readme", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.monotonic() + 20
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m.value())
    c.close()
    return out


def test_readme_secure_broker_commands_run_as_written(tmp_path):
    """The README's commands, the port 9093 replaced by a free one (tests share the machine)."""
    port = str(free_port("localhost"))
    certs, client, _cluster = readme_quickstart()
    assert certs == ["kesque certs --dir secure --port 9093", "kesque serve secure/server.properties"]
    out = shell(certs[0].replace("9093", port), tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "broker.pem" in out.stdout and oct((tmp_path / "secure" / "broker.pem").stat().st_mode & 0o777) == "0o600"
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    log = open(tmp_path / "serve.log", "wb")
    server = subprocess.Popen(certs[1].split(), cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(int(port))
        run = subprocess.run(
            [sys.executable, "-c", client.replace("9093", port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        conf = dict(line.split("=", 1) for line in (tmp_path / "secure" / "client.conf").read_text().splitlines()[2:])
        assert read_back({"bootstrap.servers": f"localhost:{port}", **conf}, "orders", 1) == [b"over SASL_SSL"]
        # a wrong password is refused (the broker serves SASL_SSL only)
        errors = []
        bad = {"bootstrap.servers": f"localhost:{port}", **conf, "sasl.password": "nope", "error_cb": errors.append}
        from confluent_kafka import Producer

        producer, deadline = Producer(bad), time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        assert any("Authentication failed: Invalid username or password" in str(e) for e in errors), errors
    finally:
        server.terminate()
        server.wait(30)
        log.close()


@pytest.mark.slow  # three more nodes over SASL_SSL: ~7 s (the default run has two clusters already)
def test_readme_secure_cluster_command_runs_as_written(tmp_path):
    certs, _client, cluster = readme_quickstart()
    assert shell(certs[0], tmp_path, timeout=60).returncode == 0
    directory = tmp_path / "secure-cluster"
    [command] = cluster
    assert "/tmp/secure-cluster" in command
    up = shell(command.replace("/tmp/secure-cluster", str(directory)) + ' && echo "$BS"', tmp_path, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        bs = up.stdout.split()[-1]
        conf = dict(line.split("=", 1) for line in (tmp_path / "secure" / "client.conf").read_text().splitlines()[2:])
        conf["bootstrap.servers"] = bs
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(conf)
        admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(20)
        p = Producer({**conf, "acks": "all"})
        p.produce("orders", b"replicated over SASL_SSL")
        assert p.flush(20) == 0
        assert read_back(conf, "orders", 1) == [b"replicated over SASL_SSL"]
    finally:
        shell(f"kesque cluster down --dir {directory} --timeout 5", tmp_path, timeout=60)


def test_cluster_up_config_file_comes_before_the_overrides(tmp_path):
    from kesque.cli.cluster import node_config

    path = tmp_path / "nodes.properties"
    path.write_text("# the security of every node\nsasl.mechanism.controller.protocol=PLAIN\nnum.partitions=2\n")
    config = node_config(["num.partitions=3"], str(path))
    assert config["sasl.mechanism.controller.protocol"] == "PLAIN" and config["num.partitions"] == "3"
    assert config["transaction.two.phase.commit.enable"] == "true"
    with pytest.raises(ValueError, match="cannot read --config"):
        node_config([], str(tmp_path / "missing.properties"))
