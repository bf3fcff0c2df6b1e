"""kesque's own wire client over TLS and SASL (kesque/client/wire.py, kesque/security/client_props.py):
Kafka's client properties (``security.protocol``, ``ssl.*``, ``sasl.mechanism``,
``sasl.jaas.config``) read as the Java client reads them, the web console's admin and the console
consumer against SSL and SASL_SSL (SCRAM-SHA-256) listeners, and a wrong password, an untrusted
broker or an unknown mechanism ending as Kafka's clients end: its exception and message, no
traceback. One broker thread serves every test."""

from __future__ import annotations

import http.client
import os

import pytest

from kesque.cli.main import main as kesque_main
from kesque.cli.plumbing.rdkafka import librdkafka_props
from kesque.client.consumer import EARLIEST, WireConsumer
from kesque.client.producer import Producer
from kesque.client.wire import AuthenticationError, ClientSecurity, Connection, make
from kesque.config import ConfigError
from kesque.console.admin import ConsoleAdmin, ConsoleError
from kesque.protocol.api_keys import ApiKeys
from kesque.security.client_props import sasl_login, ssl_context
from kesque.security.scram import ScramFormatter, ScramMechanism
from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.kafka import free_port

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
PLAIN_JAAS = f'{PLAIN_MODULE} required username="admin" password="admin-secret" user_alice="alice-secret";'
TOPIC = "secured"


def scram_jaas(user: str, password: str) -> str:
    return f'{SCRAM_MODULE} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    return {
        "ca": ca.write_pem(d / "ca.pem"),
        "ca_pem": ca.pem(),
        "server": server.write_pem(d / "server.pem"),
        "dir": d,
    }


@pytest.fixture(scope="module")
def broker(pki):
    ssl_port, sasl_port = free_port(), free_port()
    b = Broker(
        mode="thread",
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki["server"],
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram_jaas("admin", "admin-secret"),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            # a session lifetime in SCRAM's answer (KIP-368): kept, not renewed
            "listener.name.sasl_ssl.scram-sha-256.connections.max.reauth.ms": "600000",
        },
    ).start()
    b.ssl, b.sasl = f"127.0.0.1:{ssl_port}", f"127.0.0.1:{sasl_port}"
    with Connection.to_any(b.bootstrap_servers) as c:
        _add_scram_user(c, "alice", "alice-secret")
        c.request(
            ApiKeys.CREATE_TOPICS,
            lambda m, v: make(
                m.request.CreateTopicsRequest,
                topics=(
                    make(
                        m.request.CreatableTopic,
                        name=TOPIC,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout_ms=10000,
                validate_only=False,
            ),
        )
    with Producer(b.bootstrap_servers) as p:
        p.send(TOPIC, b"hello over TLS", key=b"k", partition=0)
        p.flush()
    yield b
    b.stop()
    b.close()


def _add_scram_user(conn: Connection, user: str, password: str) -> None:
    mechanism = ScramMechanism.for_name("SCRAM-SHA-256")
    salt = os.urandom(16)
    salted = ScramFormatter(mechanism).salted_password(password, salt, 4096)

    def build(m, v):
        upsert = make(
            m.request.ScramCredentialUpsertion,
            name=user,
            mechanism=1,
            iterations=4096,
            salt=salt,
            salted_password=salted,
        )
        return make(m.request.AlterUserScramCredentialsRequest, deletions=(), upsertions=(upsert,))

    resp = conn.request(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, build)
    assert [int(r.error_code) for r in resp.results] == [0]


def ssl_props(pki, **extra) -> dict:
    return {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca"], **extra}


def scram_props(pki, password="alice-secret", **extra) -> dict:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": scram_jaas("alice", password),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki["ca_pem"],  # inline, KIP-651
        **extra,
    }


def _write_props(path, props: dict) -> str:
    if "ssl.truststore.certificates" in props:  # a file names its trust store (a PEM is many lines)
        props = {k: v for k, v in props.items() if k != "ssl.truststore.certificates"}
        props["ssl.truststore.location"] = str(path.parent / "ca.pem")
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


# ---------------------------------------------------------------------- client properties
def test_client_properties_as_the_java_client_reads_them(pki):
    assert ClientSecurity.of({}).protocol == "PLAINTEXT" and ssl_context({}) is None and sasl_login({}) is None
    ctx = ssl_context(ssl_props(pki))
    assert ctx.check_hostname  # ssl.endpoint.identification.algorithm: https by default
    assert not ssl_context(ssl_props(pki, **{"ssl.endpoint.identification.algorithm": ""})).check_hostname
    login = sasl_login(scram_props(pki))
    assert login.mechanism == "SCRAM-SHA-256" and login.options == {"username": "alice", "password": "alice-secret"}
    assert sasl_login({"security.protocol": "SSL", "sasl.mechanism": "PLAIN"}) is None  # no SASL on SSL
    bad = [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": scram_jaas("a", "b")}, "sasl.mechanism"),  # GSSAPI
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        # a SCRAM module for PLAIN
        ({**scram_props(pki), "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        ({**ssl_props(pki), "ssl.truststore.location": str(pki["dir"] / "missing.pem")}, "ssl.truststore.location"),
        ({**ssl_props(pki), "ssl.truststore.certificates": pki["ca_pem"]}, "ssl.truststore.location"),  # both
    ]
    for props, key in bad:
        with pytest.raises(ConfigError) as e:
            ClientSecurity.of(props)
        assert e.value.name == key, (props, e.value)


# ---------------------------------------------------------------------- the wire client
def test_connections_over_ssl_and_sasl_ssl(pki, broker):
    with Connection.to_any(broker.ssl, security=ssl_props(pki)) as c:
        assert c.version_for(ApiKeys.METADATA) is not None
    with Connection.to_any(broker.sasl, security=scram_props(pki)) as c:
        assert c.version_for(ApiKeys.METADATA) is not None
        assert 0 < c.session_lifetime_ms <= 600_000
    plain_login = f'{PLAIN_MODULE} required username="alice" password="alice-secret";'
    plain = {**scram_props(pki), "sasl.mechanism": "PLAIN", "sasl.jaas.config": plain_login}
    with Connection.to_any(broker.sasl, security=plain) as c:
        assert c.version_for(ApiKeys.METADATA) is not None


def test_refusals_are_kafkas_exceptions(pki, broker):
    with pytest.raises(AuthenticationError) as e:
        Connection.to_any(broker.sasl, security=scram_props(pki, password="wrong"))
    assert e.value.java_name == "SaslAuthenticationException"
    assert str(e.value) == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )
    oauth = {**scram_props(pki), "sasl.mechanism": "OAUTHBEARER"}
    oauth["sasl.jaas.config"] = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=a;"
    )
    with pytest.raises(AuthenticationError) as e:
        Connection.to_any(broker.sasl, security=oauth)
    assert e.value.java_name == "UnsupportedSaslMechanismException"
    assert str(e.value) == (
        "Client SASL mechanism 'OAUTHBEARER' not enabled in the server, enabled mechanisms are [SCRAM-SHA-256, PLAIN]"
    )
    # a broker whose certificate no trusted authority signed
    other = CertificateAuthority("another-ca").write_pem(pki["dir"] / "other-ca.pem")
    with pytest.raises(AuthenticationError) as e:
        Connection.to_any(broker.ssl, security=ssl_props(pki, **{"ssl.truststore.location": other}))
    assert e.value.java_name == "SslAuthenticationException" and str(e.value).startswith("SSL handshake failed")


# ---------------------------------------------------------------------- the console and the tools
@pytest.mark.parametrize("which", ["ssl", "sasl_ssl"])
def test_console_admin_lists_topics_and_browses_a_message(pki, broker, which):
    props = ssl_props(pki) if which == "ssl" else scram_props(pki)
    admin = ConsoleAdmin(getattr(broker, "ssl" if which == "ssl" else "sasl"), client_props=props)
    try:
        assert TOPIC in [t["name"] for t in admin.topics()]
        got = admin.messages(TOPIC, 0, offset=0)
        assert [(m["key"], m["value"]) for m in got["records"]][:1] == [(b"k", b"hello over TLS")], got
    finally:
        admin.close()


def test_console_admin_wrong_password_is_a_502_with_kafkas_message(pki, broker):
    admin = ConsoleAdmin(broker.sasl, client_props=scram_props(pki, password="wrong"))
    with pytest.raises(ConsoleError) as e:
        admin.topics()
    assert e.value.status == 502
    assert "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed" in str(e.value)


def test_console_consumer_reads_over_sasl_ssl_with_its_consumer_config(pki, broker, tmp_path, capfd):
    (tmp_path / "ca.pem").write_text(pki["ca_pem"])
    config = _write_props(tmp_path / "consumer.properties", scram_props(pki))
    args = ["--bootstrap-server", broker.sasl, "--topic", TOPIC, "--from-beginning", "--max-messages", "1"]
    status = kesque_main(["console-consumer", *args, "--consumer.config", config])
    out, err = capfd.readouterr()
    assert status == 0 and out == "hello over TLS\n", err
    _write_props(tmp_path / "consumer.properties", scram_props(pki, password="wrong"))
    status = kesque_main(["console-consumer", *args, "--consumer.config", config, "--timeout-ms", "5000"])
    out, err = capfd.readouterr()
    # as Kafka 4.4's kafka-console-consumer.sh ends on a wrong password: logged, exit status 0
    assert status == 0 and out == "" and err.endswith("Processed a total of 0 messages\n"), err
    assert "ERROR Error processing message, terminating consumer process:  (org.apache.kafka.tools.consumer" in err
    assert (
        "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during authentication "
        "due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    ) in err
    assert "Traceback" not in err


def test_wire_consumer_reads_over_ssl(pki, broker):
    c = WireConsumer(broker.ssl, client_props=ssl_props(pki), auto_offset_reset="earliest")
    try:
        assert c.list_offsets([(TOPIC, 0)], EARLIEST) == {(TOPIC, 0): 0}
    finally:
        c.close()


def _sasl_ssl_node(pki, tmp_path, port, **config) -> Broker:
    """A node whose only broker listener is SASL_SSL (PLAIN: admin, the node itself, and alice)."""
    jaas = f'{PLAIN_MODULE} required username="admin" password="admin-secret" user_admin="admin-secret" '
    return Broker(
        data_dir=str(tmp_path / "d"),
        mode="thread",
        config={
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:0",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas + 'user_alice="alice-secret";',
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki["server"],
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki["ca"],
            "console.listener": "http://127.0.0.1:0",
            **config,
        },
    )


def test_serve_console_reads_a_node_whose_only_broker_listener_is_sasl_ssl(pki, tmp_path):
    """console.listener on a node without a PLAINTEXT broker listener: the console reads it over
    the inter-broker listener with the node's own TLS context and SASL login."""
    port = free_port()
    node = _sasl_ssl_node(pki, tmp_path, port).start()
    try:
        console = node._server.console
        assert console is not None and console.bootstrap == f"127.0.0.1:{port}"
        assert console.security.protocol == "SASL_SSL" and console.security.sasl.options["username"] == "admin"
        assert isinstance(console.console.admin.topics(), list)  # Metadata over SASL_SSL, as the node's admin
        conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
        conn.request("GET", "/", headers={"Host": f"127.0.0.1:{console.port}"})
        r = conn.getresponse()
        assert r.status == 200 and b"did not answer" not in r.read()
        conn.close()
    finally:
        node.stop()


def _console_client(pki, user: str, password: str, **extra) -> dict[str, str]:
    return {
        "console.client.security.protocol": "SASL_SSL",
        "console.client.sasl.mechanism": "PLAIN",
        "console.client.sasl.jaas.config": f'{PLAIN_MODULE} required username="{user}" password="{password}";',
        "console.client.ssl.truststore.type": "PEM",
        "console.client.ssl.truststore.location": pki["ca"],
        **extra,
    }


def test_serve_console_logs_in_with_its_own_console_client_properties(pki, tmp_path):
    """console.client.*: the console inside a node reads it as a principal of its own (here alice,
    not the node's admin), over the node's listener of that security protocol; the keys are not
    broker configs (DescribeConfigs never shows them: they hold passwords)."""
    port = free_port()
    node = _sasl_ssl_node(pki, tmp_path, port, **_console_client(pki, "alice", "alice-secret")).start()
    try:
        console = node._server.console
        assert console is not None and console.bootstrap == f"127.0.0.1:{port}"
        assert console.security.protocol == "SASL_SSL" and console.security.sasl.options["username"] == "alice"
        assert isinstance(console.console.admin.topics(), list)  # logged in as alice
        assert not any(k.startswith("console.client") for k in node._server.config.static)
    finally:
        node.stop()


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        (
            {"console.client.security.protocol": "SASL_TLS"},
            "console.client.security.protocol",
            "Invalid value SASL_TLS for configuration security.protocol",
        ),
        (
            {"console.client.security.protocol": "SSL"},
            "console.client.security.protocol",
            "No broker listener of this node speaks SSL",
        ),
        ({"console.client.sasl.mechanism": "GSSAPI"}, "console.client.sasl.mechanism", "GSSAPI"),
    ],
)
def test_a_bad_console_client_property_stops_the_start_naming_the_key(pki, tmp_path, extra, key, message):
    node = _sasl_ssl_node(pki, tmp_path, free_port(), **_console_client(pki, "alice", "alice-secret", **extra))
    with pytest.raises(ConfigError) as e:
        node.start()
    node.close()
    assert e.value.name == key and message in str(e.value) and key in str(e.value), str(e.value)


# ---------------------------------------------------------------------- the tools on confluent-kafka
def test_kafkas_security_properties_in_librdkafkas_names(pki, tmp_path):
    conf = librdkafka_props(scram_props(pki, **{"ssl.endpoint.identification.algorithm": ""}))
    assert conf["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----") and "ssl.truststore.certificates" not in conf
    assert (conf["sasl.mechanism"], conf["sasl.username"], conf["sasl.password"]) == (
        "SCRAM-SHA-256",
        "alice",
        "alice-secret",
    )
    assert conf["ssl.endpoint.identification.algorithm"] == "none" and "sasl.jaas.config" not in conf
    oauth = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="alice" unsecuredLoginLifetimeSeconds="60" '
        'unsecuredLoginListClaim_scope=",a,b";',
    }
    assert librdkafka_props(oauth)["sasl.oauthbearer.config"] == "principal=alice lifeSeconds=60 scope=a,b"
    # a PEM key store file for mutual TLS; librdkafka's own names pass unchanged
    keystore = CertificateAuthority().issue("alice").write_pem(tmp_path / "alice.pem")
    conf = librdkafka_props({**ssl_props(pki), "ssl.keystore.location": keystore, "linger.ms": "5"})
    assert conf["ssl.certificate.location"] == conf["ssl.key.location"] == keystore and conf["linger.ms"] == "5"
    assert "ssl.keystore.location" not in conf and "ssl.truststore.location" not in conf
    plain = {"security.protocol": "SASL_SSL", "sasl.username": "u", "ssl.ca.location": pki["ca"]}
    assert librdkafka_props(plain) == plain


def test_confluent_kafka_tools_read_kafkas_command_config(pki, broker, tmp_path, capfd):
    (tmp_path / "ca.pem").write_text(pki["ca_pem"])
    config = _write_props(tmp_path / "client.properties", scram_props(pki))
    status = kesque_main(["topics", "--bootstrap-server", broker.sasl, "--list", "--command-config", config])
    out, err = capfd.readouterr()
    assert status == 0 and TOPIC in out.split(), err
    status = kesque_main(
        ["get-offsets", "--bootstrap-server", broker.sasl, "--topic", TOPIC, "--command-config", config]
    )
    out, err = capfd.readouterr()
    assert status == 0 and out == f"{TOPIC}:0:1\n", err


def test_cluster_links_and_the_console_take_a_command_config(pki, broker, tmp_path, capfd):
    (tmp_path / "ca.pem").write_text(pki["ca_pem"])
    good = _write_props(tmp_path / "good.properties", scram_props(pki))
    bad = _write_props(tmp_path / "bad.properties", scram_props(pki, password="wrong"))
    assert kesque_main(["cluster-links", "--bootstrap-server", broker.sasl, "--list", "--command-config", good]) == 0
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # no links, and the list came back over SASL_SSL
    assert kesque_main(["cluster-links", "--bootstrap-server", broker.sasl, "--list", "--command-config", bad]) == 1
    out, err = capfd.readouterr()
    assert err == (
        f"Error: Error while talking to {broker.sasl}: org.apache.kafka.common.errors.SaslAuthenticationException: "
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256\n"
    )
    # a bad property stops `kesque console` before it listens, naming the key
    wrong = _write_props(tmp_path / "wrong.properties", {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    status = kesque_main(
        ["console", "--bootstrap-server", broker.sasl, "--command-config", wrong, "--listen", "http://127.0.0.1:0"]
    )
    out, err = capfd.readouterr()
    assert status == 1 and err.startswith("kesque console: sasl.jaas.config must be set for SASL mechanism PLAIN"), err
