"""SSL listeners (issue 27, TLS): clients over SSL and mTLS against a real `kesque serve`, the
certificate's principal, the ssl.* configs and their errors, bad clients closing only their own
connection, and a cluster whose inter-broker and controller traffic is SSL."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kesque.config import BrokerConfig, ConfigError
from kesque.protocol.fetch import FileRegion
from kesque.server import tls
from kesque.server.context import ANONYMOUS
from kesque.server.network import SocketServer
from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.cluster import Cluster
from kesque.testing.kafka import free_port

N = 200  # records per client run


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    alice = ca.issue("alice", org="kesque", unit="tests", country="FR")
    stranger = CertificateAuthority("another-ca").issue("mallory")
    files = {
        "dir": d,
        "ca": ca.write_pem(d / "ca.pem"),
        "server": server.write_pem(d / "server.pem"),
        "server_p12": server.write_pkcs12(d / "server.p12", "s3cret"),
        "trust_p12": ca.write_pkcs12_truststore(d / "trust.p12", "trustpw"),
        "alice_crt": str(d / "alice.crt"),
        "alice_key": str(d / "alice.key"),
        "mallory_crt": str(d / "mallory.crt"),
        "mallory_key": str(d / "mallory.key"),
    }
    (d / "alice.crt").write_text(alice.chain_pem())
    (d / "alice.key").write_text(alice.key_pem())
    (d / "mallory.crt").write_text(stranger.chain_pem())
    (d / "mallory.key").write_text(stranger.key_pem())
    files.update(ca=files["ca"], ca_obj=ca, server_obj=server, alice_obj=alice)
    return files


PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_alice="alice-secret";'
)


def _ssl_broker_config(pki, ports) -> dict:
    ssl_port, mtls_port, plain_port, sasl_port = ports
    return {
        "listeners": f"SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port},PLAINTEXT://127.0.0.1:{plain_port},"
        f"SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "SSL:SSL,MTLS:SSL,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        # SASL over TLS: PLAIN users, the TLS settings the broker's
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        # PKCS12 key store and PEM trust store for the broker, PEM inline for the mTLS listener
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": pki["server_p12"],
        "ssl.keystore.password": "s3cret",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki["ca"],
        "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.location": pki["server"],
        "listener.name.mtls.ssl.keystore.password": "",
        "connections.max.idle.ms": "2000",
    }


@pytest.fixture(scope="module")
def broker(pki):
    ports = [free_port() for _ in range(4)]
    b = Broker(port=ports[0], config=_ssl_broker_config(pki, ports))
    b.start()
    b.ssl_port, b.mtls_port, b.plain_port, b.sasl_port = ports
    yield b
    b.stop()


def _client_ssl(pki, port, cert=False) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL", "ssl.ca.location": pki["ca"]}
    if cert:
        conf.update({"ssl.certificate.location": pki["alice_crt"], "ssl.key.location": pki["alice_key"]})
    return conf


def _topic(bootstrap_conf: dict, rf: int = 1) -> str:
    name = f"tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(bootstrap_conf)
    admin.create_topics([NewTopic(name, 1, rf)])[name].result(15)
    return name


# ============================================================================ clients over SSL and mTLS
def test_confluent_kafka_large_and_small_records_over_ssl(pki, broker):
    """Batches of 40 kB records and of small ones, through the TLS chunking of the responses.
    Producing, a group and transactions over SSL, mTLS and SASL_SSL, for every client stack, are
    tests/test_security_matrix.py's."""
    conf = _client_ssl(pki, broker.ssl_port)
    topic = _topic(conf)
    p = Producer(conf)
    for i in range(N):
        p.produce(topic, os.urandom(600 if i % 2 else 40_000), key=str(i))  # small and large batches
    assert p.flush(15) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    keys, deadline = [], time.monotonic() + 20
    while len(keys) < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            keys.append(int(m.key()))
    c.close()
    assert keys == list(range(N))


def test_a_wrong_password_over_sasl_ssl_fails_with_kafkas_message(pki, broker):
    # SASL's failure (Kafka's message), after TLS, and that connection only
    conf = {
        **_client_ssl(pki, broker.sasl_port),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "wrong",
    }
    errors = []
    bad = AdminClient({**conf, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=3)
    bad.poll(1)  # the error callbacks are served here
    assert any("Authentication failed: Invalid username or password" in e.str() for e in errors), errors
    _still_serves(pki, broker)


# ============================================================================ bad clients
def _still_serves(pki, broker) -> None:
    admin = AdminClient(_client_ssl(pki, broker.ssl_port))
    assert admin.list_topics(timeout=10).brokers


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def test_plaintext_client_on_an_ssl_listener_is_closed(pki, broker):
    header = struct.pack(">hhih", 18, 0, 1, 3) + b"abc"  # ApiVersions v0, client id "abc"
    with socket.create_connection(("127.0.0.1", broker.ssl_port)) as s:
        s.sendall(struct.pack(">i", len(header)) + header)
        data = s.recv(100)  # a TLS alert at most, never a Kafka response
        assert data == b"" or data[:1] == b"\x15"
        assert _closed_within(s, 5)
    _still_serves(pki, broker)


def test_a_clients_close_notify_closes_its_connection_at_once(pki, broker):
    # not after connections.max.idle.ms (2 s here): asyncio's SSL shutdown, as aiokafka's stop,
    # waits up to 30 s for the broker's close_notify (CPython's SSLObject.read answers the
    # client's with 0 bytes, not SSLZeroReturnError)
    context = ssl.create_default_context(cafile=pki["ca"])
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", broker.ssl_port)), server_hostname="localhost"
    ) as s:
        s.settimeout(5)
        header = struct.pack(">hhih", 18, 0, 1, 3) + b"abc"  # ApiVersions v0
        s.sendall(struct.pack(">i", len(header)) + header)
        assert _recv_frame(s)[:4] == struct.pack(">i", 1)  # answered: the handshake is behind us
        t0 = time.monotonic()
        s.unwrap()  # our close_notify, then the broker's
        assert time.monotonic() - t0 < 1


def test_ssl_client_on_a_plaintext_listener_is_closed(pki, broker):
    context = ssl.create_default_context(cafile=pki["ca"])
    with socket.create_connection(("127.0.0.1", broker.plain_port)) as raw:
        raw.settimeout(5)
        with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)):
            context.wrap_socket(raw, server_hostname="localhost")
    _still_serves(pki, broker)


def test_half_finished_handshakes_are_closed_after_the_idle_timeout(pki, broker):
    # the first bytes of a ClientHello, then nothing: connections.max.idle.ms (2 s) closes them
    socks = [socket.create_connection(("127.0.0.1", broker.ssl_port)) for _ in range(20)]
    try:
        for s in socks:
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        _still_serves(pki, broker)
        t0 = time.monotonic()
        assert all(_closed_within(s, 8) for s in socks)
        assert time.monotonic() - t0 < 8
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("cert", [None, "mallory"], ids=["no-certificate", "untrusted-certificate"])
def test_mtls_listener_refuses_a_client_without_a_trusted_certificate(pki, broker, cert):
    context = ssl.create_default_context(cafile=pki["ca"])
    if cert:
        context.load_cert_chain(pki[f"{cert}_crt"], pki[f"{cert}_key"])
    with socket.create_connection(("127.0.0.1", broker.mtls_port)) as raw:
        raw.settimeout(5)
        # TLS 1.3: the client finishes first and learns of the refusal on its first read
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            s = context.wrap_socket(raw, server_hostname="localhost")
            s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
            if not s.recv(100):
                raise ConnectionResetError("closed")
    _still_serves(pki, broker)


# ============================================================================ the network layer, in process
class _Echo:
    """A SocketServer whose handler answers each frame with the principal and the frame's size
    (and, for a frame starting with b"F", a file region of the requested size)."""

    def __init__(self, context, path=None, principal_of=tls.ssl_principal):
        self.loop = asyncio.new_event_loop()
        self.principals = []
        self.path = path
        self.server = SocketServer(self.loop, self.handle, 100 * 1024 * 1024, queued_max_bytes=4 * 1024 * 1024)
        self.port = self.server.listen("127.0.0.1", 0, "SSL", "SSL", ssl_context=context, principal_of=principal_of)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def handle(self, conn, frame):
        self.principals.append(conn.principal)
        slot = conn.new_slot()
        body = str(conn.principal).encode() + b"|" + str(len(frame)).encode()
        items = [struct.pack(">i", len(body)) + body]
        if bytes(frame[:1]) == b"F":
            size = int(bytes(frame[1:]))
            handle = type("H", (), {"fd": os.open(self.path, os.O_RDONLY), "closed": False})()
            items = [struct.pack(">i", size), FileRegion(handle, 0, size)]
        conn.complete(slot, items)

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _recv_frame(s) -> bytes:
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    size = struct.unpack(">i", head)[0]
    out = bytearray()
    while len(out) < size:
        chunk = s.recv(min(1 << 20, size - len(out)))
        assert chunk
        out += chunk
    return bytes(out)


def _server_context(pki, client_auth="requested"):
    cfg = BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki["server"],
            "ssl.truststore.certificates": pki["ca_obj"].pem(),
            "ssl.truststore.type": "PEM",
            "ssl.client.auth": client_auth,
        }
    )
    return tls.ListenerContexts(cfg).server["SSL"]


def test_principal_is_the_certificate_dn_and_frames_and_file_regions_cross_tls(pki, tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 7)
    path = tmp_path / "segment"
    path.write_bytes(data)
    echo = _Echo(_server_context(pki), str(path))
    try:
        client = ssl.create_default_context(cafile=pki["ca"])
        client.load_cert_chain(pki["alice_crt"], pki["alice_key"])
        with client.wrap_socket(socket.create_connection(("127.0.0.1", echo.port)), server_hostname="localhost") as s:
            big = os.urandom(2 * 1024 * 1024)  # a large frame: the memory pool's buffers
            s.sendall(struct.pack(">i", 5) + b"hello" + struct.pack(">i", len(big)) + big)
            assert _recv_frame(s) == b"User:CN=alice,OU=tests,O=kesque,C=FR|5"
            assert _recv_frame(s) == f"User:CN=alice,OU=tests,O=kesque,C=FR|{len(big)}".encode()
            req = b"F" + str(len(data)).encode()
            s.sendall(struct.pack(">i", len(req)) + req)
            assert _recv_frame(s) == data  # read with pread and encrypted: no sendfile under TLS
        anonymous = ssl.create_default_context(cafile=pki["ca"])
        with anonymous.wrap_socket(
            socket.create_connection(("127.0.0.1", echo.port)), server_hostname="localhost"
        ) as s:
            s.sendall(struct.pack(">i", 2) + b"hi")
            assert _recv_frame(s) == b"User:ANONYMOUS|2"
        assert echo.principals[-1] == ANONYMOUS
    finally:
        echo.close()


def test_ssl_principal_mapping_rules(pki):
    cfg = BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.principal.mapping.rules": (
                "RULE:^CN=([^,]*),OU=tests,.*$/$1@tests/U,RULE:^CN=bob,.*$/b/"
            ),
        }
    )
    mapped = tls.principal_builder(cfg, "SSL")
    assert mapped(pki["alice_obj"].cert.public_bytes(serialization.Encoding.DER)).name == "ALICE@TESTS"
    assert mapped(None) == ANONYMOUS
    # a DN no rule maps: the handshake fails and the connection closes, as Kafka's authentication
    echo = _Echo(
        _server_context(pki),
        principal_of=tls.principal_builder(BrokerConfig({"ssl.principal.mapping.rules": "RULE:^CN=bob,.*$/b/"}), "SSL"),
    )
    try:
        client = ssl.create_default_context(cafile=pki["ca"])
        client.load_cert_chain(pki["alice_crt"], pki["alice_key"])
        raw = socket.create_connection(("127.0.0.1", echo.port))
        with client.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(struct.pack(">i", 2) + b"hi")
            assert _closed_within(s, 5)
        assert echo.principals == []
    finally:
        echo.close()


# ============================================================================ the principal's DN
def test_rfc2253_as_java_prints_it():
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "john@example.com"),
            x509.NameAttribute(NameOID.COMMON_NAME, " a+b=c#d "),
        ]
    )
    # Java's X500Principal.getName(): most specific first; escapes , + = # and edge spaces; an
    # attribute without an RFC 2253 keyword as its OID and the hex of its DER value
    assert tls.rfc2253(name) == (
        "CN=\\ a\\+b\\=c\\#d\\ ,1.2.840.113549.1.9.1=#16106a6f686e406578616d706c652e636f6d,O=Acme\\, Inc.,C=US"
    )
    multi = x509.Name(
        [
            x509.RelativeDistinguishedName(
                [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "a"), x509.NameAttribute(NameOID.USER_ID, "u1")]
            ),
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example")]),
        ]
    )
    assert tls.rfc2253(multi) == "DC=example,OU=a+UID=u1"


# ============================================================================ configs and their errors
def _contexts(pki, **overrides) -> tls.ListenerContexts:
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki["server"],
    }
    props.update({k.replace("__", "."): v for k, v in overrides.items()})
    return tls.ListenerContexts(BrokerConfig({k: v for k, v in props.items() if v is not None}))


def test_key_stores_as_kafka_reads_them(pki):
    server = pki["server_obj"]
    inline = _contexts(
        pki,
        **{
            "ssl.keystore.location": None,
            "ssl.keystore.certificate.chain": server.chain_pem(),
            "ssl.keystore.key": server.key_pem("kpw"),
            "ssl.key.password": "kpw",
        },
    )
    assert inline.server["SSL"].verify_mode == ssl.CERT_NONE  # ssl.client.auth=none
    assert inline.server["SSL"].options & ssl.OP_NO_RENEGOTIATION  # refused, as Kafka's SslTransportLayer
    p12 = _contexts(
        pki,
        **{
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": pki["server_p12"],
            "ssl.keystore.password": "s3cret",
            "ssl.client.auth": "required",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": pki["trust_p12"],
            "ssl.truststore.password": "trustpw",
        },
    )
    assert p12.server["SSL"].verify_mode == ssl.CERT_REQUIRED
    # the default type (JKS) with a PEM or PKCS12 file: read as what it is, as the JDK does
    assert _contexts(pki, **{"ssl.keystore.type": None}).server["SSL"]
    ctx = _contexts(
        pki,
        **{"ssl.enabled.protocols": "TLSv1.3", "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"},
    ).server["SSL"]
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    ctx = _contexts(pki, **{"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}).server["SSL"]
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == ["ECDHE-ECDSA-AES128-GCM-SHA256"]


def _jks(path):
    path.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    return str(path)


BAD = [
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth", "String must be one of: required, requested, none"),
    (
        {"listener.name.ssl.ssl.client.auth": "sometimes"},
        "listener.name.ssl.ssl.client.auth",
        "String must be one of",
    ),
    ({"ssl.enabled.protocols": "TLSv1.2,SSLv2"}, "ssl.enabled.protocols", "Unsupported protocol SSLv2"),
    ({"ssl.protocol": "TLSv9"}, "ssl.protocol", "TLSv9 SSLContext not available"),
    ({"ssl.cipher.suites": "TLS_FANCY_WITH_NOTHING"}, "ssl.cipher.suites", "Unsupported CipherSuite"),
    ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "ssl.keystore.location", "Failed to load SSL keystore"),
    ({"ssl.keystore.location": None}, "ssl.keystore.location", "no key store is configured"),
    (
        {"ssl.keystore.password": "x"},
        "ssl.keystore.password",
        "SSL key store password cannot be specified with PEM format",
    ),
    (
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "P12"},
        "ssl.keystore.password",
        "SSL key store is specified, but key store password is not specified.",
    ),
    (
        {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "P12", "ssl.keystore.password": "wrong"},
        "ssl.keystore.location",
        "Failed to load SSL keystore",
    ),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "JKSFILE"}, "ssl.keystore.type", "JKS key store"),
    ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type", "BKS not found"),
    ({"ssl.keystore.key": "KEY"}, "ssl.keystore.key", "SSL private key is specified, but certificate chain is not"),
    (
        {"ssl.keystore.key": "KEY", "ssl.keystore.certificate.chain": "CHAIN"},
        "ssl.keystore.location",
        "Both SSL key store location and separate private key",
    ),
    (
        {"ssl.keystore.location": None, "ssl.keystore.certificate.chain": "CHAIN"},
        "ssl.keystore.certificate.chain",
        "SSL certificate chain is specified, but private key is not specified",
    ),
    (
        {"ssl.keystore.location": None, "ssl.keystore.certificate.chain": "CHAIN", "ssl.keystore.key": "KEY"},
        "ssl.keystore.key",
        "Private key could not be loaded",
    ),
    (
        {"ssl.client.auth": "required", "ssl.truststore.type": "PKCS12", "ssl.truststore.certificates": "CA"},
        "ssl.truststore.certificates",
        "SSL trust store certs can be specified only for PEM, but trust store type is PKCS12.",
    ),
    (
        {"ssl.client.auth": "required", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "junk"},
        "ssl.truststore.certificates",
        "At least one certificate expected",
    ),
    (
        {"security.inter.broker.protocol": "SSL", "inter.broker.listener.name": "SSL"},
        "inter.broker.listener.name",
        "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
    ),
    (
        {"security.inter.broker.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
        "ssl.endpoint.identification.algorithm",
        "Unsupported endpoint identification algorithm",
    ),
    ({"ssl.principal.mapping.rules": "RULE:oops"}, "ssl.principal.mapping.rules", "Invalid rule"),
    (
        {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": None},
        "ssl.keystore.location",
        "Listener SASL_SSL uses SSL but no key store is configured",
    ),
]


@pytest.mark.parametrize("overrides,key,message", BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_a_bad_ssl_value_names_its_key(pki, tmp_path, overrides, key, message):
    server = pki["server_obj"]
    subst = {
        "P12": pki["server_p12"],
        "JKSFILE": _jks(tmp_path / "ks.jks"),
        "KEY": server.key_pem("kpw"),
        "CHAIN": server.chain_pem(),
        "CA": pki["ca_obj"].pem(),
    }
    overrides = {k: subst.get(v, v) for k, v in overrides.items()}
    with pytest.raises(ConfigError) as e:
        _contexts(pki, **overrides)
    assert e.value.name == key and key in str(e.value), e.value
    assert message in str(e.value)


def test_serve_stops_on_a_bad_ssl_value(pki, tmp_path):
    b = Broker(
        data_dir=str(tmp_path),
        config={"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/nope.pem"},
    )
    try:
        with pytest.raises(RuntimeError) as e:
            b.start()
    finally:
        b.stop()
    assert "ssl.keystore.location" in str(e.value) and "/nope.pem" in str(e.value)


# ============================================================================ a cluster over SSL
def test_cluster_with_ssl_inter_broker_and_controller_listeners(pki, caplog):
    config = {
        # the client, inter-broker and controller listeners all SSL; the broker's own client side
        # checks the other node's certificate and host name (ssl.endpoint.identification.algorithm)
        "listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki["server"],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki["ca"],
        "ssl.client.auth": "required",
        "ssl.endpoint.identification.algorithm": "https",
    }
    with caplog.at_level(logging.WARNING), Cluster(nodes=3, config=config) as cluster:
        conf = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": pki["ca"],
            "ssl.certificate.location": pki["alice_crt"],
            "ssl.key.location": pki["alice_key"],
        }
        topic = _topic(conf, rf=3)
        p = Producer({**conf, "acks": "all"})
        for i in range(N):
            p.produce(topic, b"r" * 500, key=str(i))
        assert p.flush(20) == 0
        admin = AdminClient(conf)
        md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        deadline = time.monotonic() + 15
        while len(md.isrs) < 3 and time.monotonic() < deadline:  # followers fetch over SSL
            time.sleep(0.2)
            md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        assert sorted(md.isrs) == [1, 2, 3]
        c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        keys, deadline = [], time.monotonic() + 20
        while len(keys) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                keys.append(int(m.key()))
        c.close()
        assert keys == list(range(N))
        for node in cluster.nodes.values():  # the last of three voters would wait out its controlled shutdown
            node.kill()
