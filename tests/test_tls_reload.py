"""A TLS listener's key and trust stores altered dynamically (issue 27), as Kafka allows per
listener with IncrementalAlterConfigs on the broker: the new stores are validated on the broker
(they must load; the key store must keep the subject DN unless ssl.allow.dn.changes and the
subject alternative names unless ssl.allow.san.changes; a trust store cannot be added to a
listener without one; the inter-broker listener's old and new settings must still connect) and the
connections accepted after the change use them, those open keep theirs."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from cryptography.hazmat.primitives import serialization

from kesque.config import BrokerConfig, ConfigError
from kesque.server import tls
from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.cluster import Cluster
from kesque.testing.kafka import free_port

KEY = "listener.name.ssl.ssl.keystore.location"
TRUST = "listener.name.mtls.ssl.truststore.location"
HOSTS = ["localhost", "127.0.0.1"]
API_VERSIONS_V0 = b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x07\x00\x00"  # correlation id 7


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("reload")
    ca = CertificateAuthority()
    stores = {
        "first": ca.issue("localhost", hosts=HOSTS),
        "renewed": ca.issue("localhost", hosts=HOSTS),  # a new key, the same DN and names
        "other_dn": ca.issue("someone-else", hosts=HOSTS),
        "fewer_names": ca.issue("localhost", hosts=["localhost"]),
    }
    paths = {name: issued.write_pem(d / f"{name}.pem") for name, issued in stores.items()}
    # the mTLS listener trusts the first CA; a client of another CA is trusted once its CA is added
    other_ca = CertificateAuthority("another-ca")
    clients = {"trusted": ca.issue("alice"), "other_ca": other_ca.issue("bob")}
    for name, issued in clients.items():
        (d / f"{name}.crt").write_text(issued.chain_pem())
        (d / f"{name}.key").write_text(issued.key_pem())
    (d / "both-cas.pem").write_text(ca.pem() + other_ca.pem())
    port, mtls_port = free_port(), free_port()
    broker = Broker(
        data_dir=str(d / "data"),
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{port},MTLS://127.0.0.1:{mtls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            KEY: paths["first"],
            "listener.name.mtls.ssl.keystore.type": "PEM",
            "listener.name.mtls.ssl.keystore.location": paths["first"],
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.truststore.type": "PEM",
            TRUST: ca.write_pem(d / "ca.pem"),
        },
    ).start()
    yield {
        "ca": str(d / "ca.pem"),
        "both_cas": str(d / "both-cas.pem"),
        "dir": d,
        "stores": stores,
        "paths": paths,
        "port": port,
        "mtls_port": mtls_port,
        "broker": broker,
    }
    broker.stop()
    broker.close()


def served_certificate(s) -> bytes:
    """The certificate a new TLS connection to the SSL listener gets (DER)."""
    ctx = ssl.create_default_context(cafile=s["ca"])
    with (
        socket.create_connection(("127.0.0.1", s["port"]), 5) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.getpeercert(binary_form=True)


def der(issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.DER)


def alter(s, value: str, key: str = KEY) -> None:
    admin = AdminClient({"bootstrap.servers": s["broker"].bootstrap_servers})
    resource = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(15)


def test_new_connections_use_a_key_store_altered_dynamically(setup):
    s = setup
    assert served_certificate(s) == der(s["stores"]["first"])
    open_before = ssl.create_default_context(cafile=s["ca"]).wrap_socket(
        socket.create_connection(("127.0.0.1", s["port"]), 5), server_hostname="localhost"
    )
    try:
        alter(s, s["paths"]["renewed"])
        deadline = time.monotonic() + 10
        while served_certificate(s) != der(s["stores"]["renewed"]) and time.monotonic() < deadline:
            time.sleep(0.1)  # applied once the config record commits
        assert served_certificate(s) == der(s["stores"]["renewed"])
        assert open_before.getpeercert(binary_form=True) == der(s["stores"]["first"])  # kept its session
    finally:
        open_before.close()


@pytest.mark.parametrize(
    "store,message",
    [
        (
            "other_dn",
            "Keystore DistinguishedName does not match:  existing={alias=kafka, DN=CN=localhost}, "
            "new={alias=kafka, DN=CN=someone-else}",
        ),
        ("fewer_names", "Keystore SubjectAltNames do not match:  existing={alias=kafka, SAN=[127.0.0.1, localhost]}"),
        ("missing", "/no/such/store.pem"),
    ],
)
def test_a_key_store_that_does_not_match_is_refused(setup, store, message):
    s = setup
    before = served_certificate(s)
    with pytest.raises(KafkaException) as e:
        alter(s, s["paths"].get(store, "/no/such/store.pem"))
    error = e.value.args[0]
    assert error.name() == "INVALID_REQUEST" and message in error.str(), error.str()
    assert served_certificate(s) == before  # nothing was stored: the listener keeps its store


def test_kesque_configs_replaces_the_key_store_as_the_readme_says(setup):
    s = setup
    # whichever of the two same-DN stores the listener does not serve now
    target = "first" if served_certificate(s) == der(s["stores"]["renewed"]) else "renewed"
    out = subprocess.run(
        [sys.executable, "-m", "kesque", "configs", "--bootstrap-server", s["broker"].bootstrap_servers]
        + [
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--alter",
            "--add-config",
            f"{KEY}={s['paths'][target]}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 10
    while served_certificate(s) != der(s["stores"][target]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served_certificate(s) == der(s["stores"][target])


# ------------------------------------------------------------------------------------ trust store
def mtls_client(s, name: str) -> ssl.SSLSocket:
    """A TLS connection to the mTLS listener with client certificate ``name``."""
    ctx = ssl.create_default_context(cafile=s["ca"])
    ctx.load_cert_chain(s["dir"] / f"{name}.crt", s["dir"] / f"{name}.key")
    raw = socket.create_connection(("127.0.0.1", s["mtls_port"]), 5)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def answers(tls: ssl.SSLSocket) -> bool:
    """ApiVersions v0 on the connection is answered (False: the broker refused the certificate;
    over TLS 1.3 the client learns it on its first read)."""

    def read(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = tls.recv(n - len(out))
            if not chunk:
                raise ConnectionResetError("closed")
            out += chunk
        return out

    try:
        tls.sendall(API_VERSIONS_V0)
        (size,) = struct.unpack(">i", read(4))
        return read(size)[:4] == b"\x00\x00\x00\x07"
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return False


def test_a_trust_store_altered_dynamically_trusts_a_new_ca_for_new_connections(setup):
    s = setup
    with mtls_client(s, "other_ca") as refused:
        assert not answers(refused)  # bob's CA is not trusted yet
    open_before = mtls_client(s, "trusted")
    try:
        assert answers(open_before)
        alter(s, s["both_cas"], TRUST)
        deadline = time.monotonic() + 10
        while True:  # applied once the config record commits
            with mtls_client(s, "other_ca") as c:
                if answers(c):
                    break
            assert time.monotonic() < deadline, "a client of the added CA is still refused"
            time.sleep(0.1)
        with mtls_client(s, "trusted") as c:
            assert answers(c)  # the first CA is still trusted
        assert answers(open_before)  # the connection open before the change is served on
    finally:
        open_before.close()


@pytest.mark.parametrize(
    "key,value,message",
    [
        (  # Kafka 4.4's whole message (tests/test_oracle_tls_reload.py compares them)
            "listener.name.ssl.ssl.truststore.location",
            "ca",
            "Invalid value org.apache.kafka.common.config.ConfigException: "
            "Validation of dynamic config update of SSLFactory failed: "
            "org.apache.kafka.common.config.ConfigException: "
            "Cannot add SSL truststore to an existing listener for which no truststore was configured. "
            "for configuration Invalid dynamic configuration",
        ),
        (TRUST, "/no/such/truststore.pem", "Failed to load SSL truststore /no/such/truststore.pem"),
        (TRUST, "not_pem", "Invalid PEM truststore configs: At least one certificate expected, but none found"),
    ],
    ids=["added-to-a-listener-without-one", "missing-file", "not-a-trust-store"],
)
def test_a_trust_store_that_cannot_be_used_is_refused(setup, key, value, message):
    s = setup
    if value == "ca":
        value = s["ca"]
    elif value == "not_pem":
        value = str(s["dir"] / "not-a-store.pem")
        (s["dir"] / "not-a-store.pem").write_text("hello\n")
    with pytest.raises(KafkaException) as e:
        alter(s, value, key)
    error = e.value.args[0]
    assert error.name() == "INVALID_REQUEST" and message in error.str(), error.str()
    assert error.str().startswith("Invalid value org.apache.kafka.common.config.ConfigException: Validation")
    with mtls_client(s, "trusted") as c:
        assert answers(c)  # nothing was stored: the listener keeps its stores


# ------------------------------------------------------------------------------------ in process
def _config(s, **extra) -> BrokerConfig:
    return BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:0",
            "listener.security.protocol.map": "SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SSL",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            KEY: s["paths"]["first"],
            **extra,
        }
    )


@pytest.mark.parametrize(
    "store,allowed_by,message",
    [
        ("other_dn", "ssl.allow.dn.changes", "Keystore DistinguishedName does not match"),
        ("fewer_names", "ssl.allow.san.changes", "Keystore SubjectAltNames do not match"),
    ],
)
@pytest.mark.parametrize("level", ["broker", "listener"])
def test_a_key_store_change_kafka_refuses_is_accepted_when_allowed(setup, store, allowed_by, message, level):
    s = setup
    refusing = _config(s)
    current = tls.server_context(refusing, "SSL")
    refusing.dynamic_broker[KEY] = s["paths"][store]
    with pytest.raises(ConfigError) as e:
        tls.reconfigured_server_context(refusing, "SSL", current)
    assert str(e.value).startswith(
        "org.apache.kafka.common.config.ConfigException: Validation of dynamic config update of SSLFactory failed: "
        f"org.apache.kafka.common.config.ConfigException: {message}:  existing={{alias=kafka, "
    ), str(e.value)
    allowing = _config(s, **{(allowed_by if level == "broker" else f"listener.name.ssl.{allowed_by}"): "true"})
    allowing.dynamic_broker[KEY] = s["paths"][store]
    new = tls.reconfigured_server_context(allowing, "SSL", current)
    assert new.keystore_certificate == s["stores"][store].cert
    # each allowance covers its own check only
    other = "fewer_names" if store == "other_dn" else "other_dn"
    allowing.dynamic_broker[KEY] = s["paths"][other]
    with pytest.raises(ConfigError):
        tls.reconfigured_server_context(allowing, "SSL", current)


def test_the_inter_broker_listener_keeps_trusting_its_own_certificates(setup, tmp_path):
    s = setup
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_text(CertificateAuthority("unrelated").pem())
    mtls = {
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": s["ca"],
    }
    cfg = _config(s, **mtls)
    current = tls.ListenerContexts(cfg).server["SSL"]
    assert current.validation_client is not None  # its server and client sides connect
    cfg.dynamic_broker["listener.name.ssl.ssl.truststore.location"] = str(other_ca)
    # as Kafka's SslEngineValidator: the brokers' own certificates would no longer be trusted
    with pytest.raises(ConfigError) as e:
        tls.reconfigured_server_context(cfg, "SSL", current, inter_broker=True)
    assert "failed: javax.net.ssl.SSLHandshakeException: " in str(e.value), str(e.value)
    # another listener is not checked so
    tls.reconfigured_server_context(cfg, "SSL", current, inter_broker=False)
    # a trust store that adds a CA to the brokers' own is fine
    cfg.dynamic_broker["listener.name.ssl.ssl.truststore.location"] = s["both_cas"]
    new = tls.reconfigured_server_context(cfg, "SSL", current, inter_broker=True)
    assert new.validation_client is not None


# ------------------------------------------------------------------------------------ a cluster
def test_a_cluster_rotates_its_inter_broker_ca_without_a_restart(tmp_path):
    """Every broker first trusts the old and the new CA (listener.name.<l>.ssl.truststore.*),
    then takes a key store from the new CA: the brokers' own client side (replica fetchers) is
    rebuilt with the new trust store too, as Kafka reconfigures its channel builders, so a
    follower's new connection to a leader serving the new CA's certificate succeeds."""
    old_ca, new_ca = CertificateAuthority("old-ca"), CertificateAuthority("new-ca")
    old_store = old_ca.issue("localhost", hosts=HOSTS).write_pem(tmp_path / "old.pem")
    new_issued = new_ca.issue("localhost", hosts=HOSTS)
    new_store = new_issued.write_pem(tmp_path / "new.pem")
    (tmp_path / "both.pem").write_text(old_ca.pem() + new_ca.pem())
    both = str(tmp_path / "both.pem")
    config = {  # the inter-broker (and client) listener PLAINTEXT is SSL; the controllers' is not
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": old_store,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": old_ca.write_pem(tmp_path / "old-ca.pem"),
        "ssl.endpoint.identification.algorithm": "https",
    }
    with Cluster(nodes=2, config=config) as cluster:
        client = {"bootstrap.servers": cluster.bootstrap_servers, "security.protocol": "SSL", "ssl.ca.location": both}
        admin = AdminClient(client)

        def alter_each(key: str, value: str) -> None:
            for node in sorted(cluster.nodes):
                resource = ConfigResource(
                    ResourceType.BROKER,
                    str(node),
                    incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
                )
                admin.incremental_alter_configs([resource])[resource].result(15)

        alter_each("listener.name.plaintext.ssl.truststore.location", both)
        deadline = time.monotonic() + 15
        while True:  # refused until the trust store is applied (the brokers must trust the new key store)
            try:
                alter_each("listener.name.plaintext.ssl.keystore.location", new_store)
                break
            except KafkaException:
                assert time.monotonic() < deadline, "the new key store was refused"
                time.sleep(0.2)
        deadline = time.monotonic() + 15
        for node in cluster.nodes.values():
            port = int(node.bootstrap_servers.rsplit(":", 1)[1])
            while True:
                ctx = ssl.create_default_context(cafile=both)
                with ctx.wrap_socket(
                    socket.create_connection(("127.0.0.1", port), 5), server_hostname="localhost"
                ) as t:
                    if t.getpeercert(binary_form=True) == der(new_issued):
                        break
                assert time.monotonic() < deadline, "the new key store was not taken"
                time.sleep(0.1)
        # a topic made now: each follower opens a new connection to its leader, which serves the
        # new CA's certificate; without the rebuilt client side the follower would not trust it
        topic = "rotated"
        admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(15)
        producer = Producer({**client, "acks": "all"})
        for i in range(100):
            producer.produce(topic, b"x" * 100, partition=i % 2)
        assert producer.flush(20) == 0
        deadline = time.monotonic() + 15
        while True:
            parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
            if all(sorted(p.isrs) == [1, 2] for p in parts.values()):
                break
            assert time.monotonic() < deadline, {p: parts[p].isrs for p in parts}
            time.sleep(0.2)
