"""A TLS listener's key store altered dynamically (issue 27), as Kafka allows per listener with
IncrementalAlterConfigs on the broker: the new store is validated on the broker (it must load,
keep the subject DN unless ssl.allow.dn.changes, keep the subject alternative names unless
ssl.allow.san.changes) and the connections accepted after the change use it."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from cryptography.hazmat.primitives import serialization

from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.kafka import free_port

KEY = "listener.name.ssl.ssl.keystore.location"
HOSTS = ["localhost", "127.0.0.1"]


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
    port = free_port()
    broker = Broker(
        data_dir=str(d / "data"),
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            KEY: paths["first"],
        },
    ).start()
    yield {"ca": ca.write_pem(d / "ca.pem"), "stores": stores, "paths": paths, "port": port, "broker": broker}
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


def alter(s, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": s["broker"].bootstrap_servers})
    resource = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry(KEY, value, incremental_operation=AlterConfigOpType.SET)],
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
