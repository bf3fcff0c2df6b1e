"""A listener's SSL stores altered dynamically, against Apache Kafka 4.4 configured the same way
(issue 27): the refusals of Kafka's SslFactory reach the client as the same error code and
message from both brokers (a trust store added to a listener without one, a key store with
another subject DN, an inter-broker listener's trust store that no longer trusts the brokers'
own certificate), and a trust store adding a CA is accepted by both."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import oracle
from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.kafka import KafkaBroker, free_port

pytestmark = oracle.MARKS

MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,CONTROLLER:PLAINTEXT"
HOSTS = ["localhost", "127.0.0.1"]


class SslKafka(KafkaBroker):
    """Kafka with an SSL and an mTLS (inter-broker) listener beside its PLAINTEXT one."""

    def __init__(self, ssl_port: int, mtls_port: int, **kw):
        super().__init__(**kw)
        self.extra = f",SSL://{self.host}:{ssl_port},MTLS://{self.host}:{mtls_port}"

    def _props(self):
        props = super()._props()
        props["listeners"] += self.extra
        props["advertised.listeners"] += self.extra
        return props


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("oracle-tls-reload")
    ca = CertificateAuthority()
    files = {
        "ca": ca.write_pem(d / "ca.pem"),
        "store": ca.issue("localhost", hosts=HOSTS).write_pem(d / "store.pem"),
        "other_dn": ca.issue("someone-else", hosts=HOSTS).write_pem(d / "other-dn.pem"),
        "unrelated_ca": CertificateAuthority("unrelated").write_pem(d / "unrelated-ca.pem"),
    }
    (d / "both-cas.pem").write_text(ca.pem() + CertificateAuthority("added").pem())
    files["both_cas"] = str(d / "both-cas.pem")
    config = {
        "listener.security.protocol.map": MAP,
        "inter.broker.listener.name": "MTLS",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": files["store"],
        "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.location": files["store"],
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": files["ca"],
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.endpoint.identification.algorithm": "",
    }
    kafka = SslKafka(free_port(), free_port(), config=config)
    kesque = Broker(
        data_dir=str(d / "kesque"),
        config={"listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{free_port()},MTLS://127.0.0.1:{free_port()}"}
        | config,
    )
    kafka.start(120)
    try:
        kesque.start()
        try:
            yield {"kafka": kafka.bootstrap_servers, "kesque": kesque.bootstrap_servers, **files}
        finally:
            kesque.stop()
            kesque.close()
    finally:
        kafka.close()


def alter(bootstrap: str, entries: dict) -> tuple[str, str]:
    """(error name, message) of an IncrementalAlterConfigs of broker 1, ("NONE", "") when done."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()
        ],
    )
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
    except KafkaException as e:
        return e.args[0].name(), e.args[0].str()
    return "NONE", ""


def test_refused_store_updates_answer_as_kafkas(pair):
    cases = {
        "a trust store added": {
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.location": pair["ca"],
        },
        "another subject DN": {"listener.name.ssl.ssl.keystore.location": pair["other_dn"]},
    }
    for case, entries in cases.items():
        got = {side: alter(pair[side], entries) for side in ("kafka", "kesque")}
        assert got["kesque"] == got["kafka"], case
        assert got["kafka"][0] == "INVALID_REQUEST", got


def test_the_inter_broker_listener_must_still_trust_its_own_certificate_as_in_kafka(pair):
    entries = {"listener.name.mtls.ssl.truststore.location": pair["unrelated_ca"]}
    got = {side: alter(pair[side], entries) for side in ("kafka", "kesque")}
    for name, message in got.values():
        # the handshake's reason is the TLS library's own (Java's PKIX, OpenSSL's), the rest Kafka's
        assert name == "INVALID_REQUEST", got
        assert message.startswith(
            "Invalid value org.apache.kafka.common.config.ConfigException: Validation of dynamic config update "
            "of SSLFactory failed: javax.net.ssl.SSLHandshakeException: "
        ), got
        assert message.endswith(" for configuration Invalid dynamic configuration"), got
    # a trust store that adds a CA to the one the brokers' certificates come from is taken by both
    entries = {"listener.name.mtls.ssl.truststore.location": pair["both_cas"]}
    assert {side: alter(pair[side], entries) for side in ("kafka", "kesque")} == {
        "kafka": ("NONE", ""),
        "kesque": ("NONE", ""),
    }
