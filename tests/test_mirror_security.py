"""Cluster links over TLS and SASL (issue 28, docs/mirror.md "Secured links"): a kesque source whose
listeners are SASL_SSL (PLAIN) and SSL, a kesque destination in the same process; the link's
Kafka client settings become the TLS context and the SASL login of every connection it makes.
Settings that cannot work are refused at creation naming the key; a source that refuses the
login shows on the mirror partitions and in the log, and the mirror resumes once the link is
altered back."""

from __future__ import annotations

import logging
import time

import pytest

from kesque.cli.mirrors import describe
from kesque.config.types import ConfigError
from kesque.server.drivers.mirror_fetcher import source_security
from kesque.testing import kafka as K
from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.kafka import free_port
from mirrorlib import produce_mixed, read_committed, tool, wait_mirrored

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def jaas(user: str, password: str) -> str:
    return f'{PLAIN_MODULE} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("link-pki")
    ca = CertificateAuthority()
    return {
        "ca": ca.write_pem(d / "ca.pem"),
        "server": ca.issue("localhost", hosts=["localhost", "127.0.0.1"]).write_pem(d / "server.pem"),
        "stranger": CertificateAuthority("another-ca").write_pem(d / "stranger.pem"),
        "client": ca.issue("link-client").write_pem(d / "client.pem"),
        "trust_p12": ca.write_pkcs12_truststore(d / "trust.p12", "trustpw"),
    }


@pytest.fixture(scope="module")
def secured_pair(pki):
    """A source with PLAINTEXT (the test's own clients), SASL_SSL and SSL listeners (the SSL one
    asks for a client certificate: mTLS); a plain destination."""
    sasl_port, ssl_port = free_port(), free_port()
    src = Broker(
        mode="thread",
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f'{PLAIN_MODULE} required username="admin" password="admin-secret" user_link="link-secret";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki["server"],
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.truststore.location": pki["ca"],
        },
    ).start()
    try:
        dst = Broker(mode="thread").start()
        try:
            src.sasl_ssl = f"127.0.0.1:{sasl_port}"
            src.ssl = f"127.0.0.1:{ssl_port}"
            yield src, dst
        finally:
            dst.stop()
    finally:
        src.stop()


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def test_link_security_settings_are_checked_naming_the_key(pki):
    base = {"bootstrap.servers": "127.0.0.1:1"}
    assert source_security(base) == (None, None)
    ctx, login = source_security(
        {
            **base,
            "security.protocol": "SASL_SSL",
            "ssl.truststore.location": pki["ca"],
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
            'password="p";',
        }
    )
    assert ctx.check_hostname and login.mechanism == "SCRAM-SHA-512" and login.options["username"] == "u"
    # a PKCS12 trust store (type left at Kafka's default, JKS: read as what the file holds), no host name check
    p12 = {
        "security.protocol": "SSL",
        "ssl.truststore.location": pki["trust_p12"],
        "ssl.truststore.password": "trustpw",
    }
    ctx, login = source_security({**base, **p12, "ssl.endpoint.identification.algorithm": ""})
    assert not ctx.check_hostname and ctx.get_ca_certs() and login is None
    bad = [
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nope/ca.pem"}, "ssl.truststore.location"),
        ({**p12, "ssl.truststore.password": "wrong"}, "ssl.truststore.location"),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
            "ssl.endpoint.identification.algorithm",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.type": "XYZ", "ssl.truststore.location": pki["ca"]},
            "ssl.truststore.type",
        ),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": jaas("u", "p")}, "sasl.mechanism"),  # GSSAPI
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "x"},
            "sasl.jaas.config",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f"{PLAIN_MODULE} required;",
            },
            "sasl.jaas.config",
        ),
        ({"security.protocol": "KERBEROS"}, "security.protocol"),
    ]
    for extra, key in bad:
        with pytest.raises(ConfigError) as e:
            source_security({**base, **extra})
        assert e.value.name == key and key in str(e.value), (extra, str(e.value))


def test_mirror_over_sasl_ssl_survives_a_refused_login(secured_pair, pki, tmp_path, caplog):
    src, dst = secured_pair
    d, n = dst.bootstrap_servers, 2
    _create_topic(src.bootstrap_servers, "secure", n)
    produce_mixed(src.bootstrap_servers, "secure", n)
    good = (
        f"bootstrap.servers={src.sasl_ssl}\nsecurity.protocol=SASL_SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki['ca']}\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas('link', 'link-secret')}\n"
    )
    props = tmp_path / "link.properties"
    # wrong settings are refused at creation, the message naming the key
    for wrong, key in (
        (good.replace(pki["ca"], "/nope/ca.pem"), "ssl.truststore.location"),
        (good.replace("sasl.mechanism=PLAIN", "sasl.mechanism=NTLM"), "sasl.mechanism"),
        (good.replace("password=", "pass="), "sasl.jaas.config"),
    ):
        props.write_text(wrong)
        code, _out, err = tool(
            "cluster-links", "--bootstrap-server", d, "--create", "--link", "S", "--config-file", str(props)
        )
        assert code == 1 and key in err, err
    props.write_text(good)
    assert (
        tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "S", "--config-file", str(props))[0] == 0
    )
    code, out, _ = tool("cluster-links", "--bootstrap-server", d, "--describe", "--link", "S")
    assert "link-secret" not in out and "sasl.jaas.config=[hidden] sensitive=true" in out
    # the mirror's creation asks the source over the link (SASL_SSL), then the fetcher copies
    assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "secure", "--link", "S")[0] == 0
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "secure", n)
    assert dst_b == src_b and all(len(b) >= 9 for b in src_b.values())
    # a wrong password: the source refuses the login; reported on the partitions and logged, not fatal
    with caplog.at_level(logging.ERROR, logger="kesque.server.channel"):
        assert tool("cluster-links", "--bootstrap-server", d, "--alter", "--link", "S", "--config",
                    "sasl.jaas.config=" + jaas("link", "wrong"))[:2] == (
            0, "Completed updating config for cluster link S.\n")  # fmt: skip
        produce_mixed(src.bootstrap_servers, "secure", n)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            (m,) = describe(d, ["secure"])
            if all(p.get("error") and "Authentication failed" in p["error"] for p in m["partitions"]):
                break
            time.sleep(0.1)
        assert all("Authentication failed" in (p.get("error") or "") for p in m["partitions"]), m
    assert "failed authentication due to: Authentication failed" in caplog.text
    out = tool("mirrors", "--bootstrap-server", d, "--describe", "--topics", "secure")[1]
    assert "Authentication failed" in out and "wrong" not in out
    assert "wrong" not in tool("cluster-links", "--bootstrap-server", d, "--describe", "--link", "S")[1]
    # fixed: the mirror resumes where it stopped, byte for byte
    assert tool("cluster-links", "--bootstrap-server", d, "--alter", "--link", "S", "--config-file", str(props))[0] == 0
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "secure", n)
    assert dst_b == src_b
    assert read_committed(src.bootstrap_servers, "secure", n) == read_committed(d, "secure", n)
    (m,) = describe(d, ["secure"])
    assert all(p["lag"] == 0 and not p["error"] for p in m["partitions"]), m
    # an alter that leaves settings that cannot work is refused, the link unchanged
    code, _o, err = tool(
        "cluster-links", "--bootstrap-server", d, "--alter", "--link", "S", "--delete-config", "sasl.mechanism"
    )
    assert code == 1 and "sasl.mechanism" in err
    assert tool("mirrors", "--bootstrap-server", d, "--failover", "--topics", "secure")[0] == 0


def test_mirror_over_mutual_tls(secured_pair, pki):
    """SSL with the source's certificate and host name checked, and the link's own certificate
    (``ssl.keystore.*``) for a source listener that requires one."""
    src, dst = secured_pair
    d = dst.bootstrap_servers
    _create_topic(src.bootstrap_servers, "tls", 1)
    produce_mixed(src.bootstrap_servers, "tls", 1)
    # a trust store of another authority: the link's settings are sound, but the source's
    # certificate does not verify, so the mirror cannot be created
    stranger = f"bootstrap.servers={src.ssl},security.protocol=SSL,ssl.truststore.location={pki['stranger']}"
    assert tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "T", "--config", stranger)[0] == 0
    code, _o, err = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "tls", "--link", "T")
    assert code == 1 and "Cannot reach the source cluster of link 'T'" in err
    # the right authority, but no certificate of the link's own: the source refuses the connection
    right = f"ssl.truststore.location={pki['ca']}"
    assert tool("cluster-links", "--bootstrap-server", d, "--alter", "--link", "T", "--config", right)[0] == 0
    code, _o, err = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "tls", "--link", "T")
    assert code == 1 and "Cannot reach the source cluster of link 'T'" in err
    mine = f"ssl.keystore.type=PEM,ssl.keystore.location={pki['client']}"
    assert tool("cluster-links", "--bootstrap-server", d, "--alter", "--link", "T", "--config", mine)[0] == 0
    assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "tls", "--link", "T")[0] == 0
    src_b, dst_b = wait_mirrored(src.data_dir, dst.data_dir, "tls", 1)
    assert dst_b == src_b and len(src_b[0]) >= 9


@pytest.mark.mirror
@pytest.mark.skipif(K.unavailable() is not None, reason=K.unavailable() or "")
def test_kafka_44_source_over_sasl_ssl_with_scram(pki, tmp_path):
    """Apache Kafka 4.4 as the source, its SASL_SSL listener with SCRAM-SHA-512 (kesque's SCRAM
    client against Kafka's server, TLS with the host name checked): the mirror byte for byte, a
    wrong password refused with Kafka's message, and the source topic's retention.ms synced."""
    from confluent_kafka.admin import AdminClient

    sasl_port = free_port()
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    kafka = K.KafkaBroker(
        config={
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{scram} required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki["server"],
        },
        extra_listeners=f"SASL_SSL://127.0.0.1:{sasl_port}",
    )
    dst = Broker(mode="thread")
    try:
        kafka.launch()  # the JVM starts while kesque does
        dst.start()
        K.wait_ready([kafka], 120)
        s, d, n = kafka.bootstrap_servers, dst.bootstrap_servers, 2
        assert tool("configs", "--bootstrap-server", s, "--alter", "--entity-type", "users", "--entity-name",
                    "link", "--add-config", "SCRAM-SHA-512=[iterations=4096,password=link-secret]")[0] == 0  # fmt: skip
        _create_topic(s, "ksecure", n)
        admin = AdminClient({"bootstrap.servers": s})
        _alter_topic(admin, "ksecure", "retention.ms", "86400000")
        produce_mixed(s, "ksecure", n)
        props = tmp_path / "link.properties"
        props.write_text(
            f"bootstrap.servers=127.0.0.1:{sasl_port}\nsecurity.protocol=SASL_SSL\nssl.truststore.location={pki['ca']}\n"
            f'sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={scram} required username="link" password="wrong";\n'
            "topic.config.sync.ms=300\n"
        )
        assert (
            tool("cluster-links", "--bootstrap-server", d, "--create", "--link", "K", "--config-file", str(props))[0]
            == 0
        )
        code, _o, err = tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "ksecure", "--link", "K")
        assert code == 1 and "Authentication failed during authentication due to invalid credentials" in err, err
        props.write_text(props.read_text().replace('"wrong"', '"link-secret"'))
        assert (
            tool("cluster-links", "--bootstrap-server", d, "--alter", "--link", "K", "--config-file", str(props))[0]
            == 0
        )
        assert tool("mirrors", "--bootstrap-server", d, "--create", "--mirror-topic", "ksecure", "--link", "K")[0] == 0
        produce_mixed(s, "ksecure", n)
        src_b, dst_b = wait_mirrored(kafka.data_dir, dst.data_dir, "ksecure", n, timeout=30)
        assert dst_b == src_b and all(len(b) >= 18 for b in src_b.values())
        assert read_committed(s, "ksecure", n) == read_committed(d, "ksecure", n)
        d_admin = AdminClient({"bootstrap.servers": d})
        deadline = time.monotonic() + 10
        while _topic_config(d_admin, "ksecure", "retention.ms") != "86400000" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _topic_config(d_admin, "ksecure", "retention.ms") == "86400000"
    finally:
        dst.stop()
        kafka.close()


def _alter_topic(admin, topic: str, key: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(
        "topic", topic, incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)]
    )
    admin.incremental_alter_configs([res])[res].result(15)


def _topic_config(admin, topic: str, key: str) -> str | None:
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource("topic", topic)
    entry = admin.describe_configs([res])[res].result(15).get(key)
    return entry.value if entry is not None and entry.source == 1 else None
