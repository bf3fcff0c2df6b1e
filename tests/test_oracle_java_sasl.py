"""Kafka 4.4's own clients and tools against a kesque broker over SASL_PLAINTEXT (issue 27).

Kafka's Java producer, consumer group and transactional producer log in with each of PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (Kafka's unsecured token), and a wrong password
fails with Kafka's exception and message, all in one JVM (the ``sasl`` scenario of oracle/java's
Clients). Marked ``oracle``: it needs the Kafka jars
(``make kafka``), not a Kafka broker.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import oracle
from kesque.testing import kafka as K
from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port
from test_oracle_java_clients import JAR
from test_sasl import OAUTH_JAAS, PLAIN_JAAS, SCRAM_JAAS

pytestmark = [
    *oracle.MARKS,
    pytest.mark.skipif(not JAR.exists() and oracle.REASON is None, reason=f"{JAR} not built: run `make kafka`"),
]

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
WRONG_PASSWORD = {
    "PLAIN": "Authentication failed: Invalid username or password",
    **{
        m: f"Authentication failed during authentication due to invalid credentials with SASL mechanism {m}"
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    },
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    sasl_port = free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
    }
    data = tmp_path_factory.mktemp("java-sasl") / "data"
    data.mkdir()
    b = Broker(data_dir=str(data), config=config).start()
    b.sasl = f"127.0.0.1:{sasl_port}"
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        r = kesque_configs(
            b,
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            f"{mech}=[iterations=4096,password=alice-secret]",
        )
        assert r.returncode == 0, r.stderr
    yield b
    b.stop()
    b.close()


def kesque_configs(broker, *args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kesque", "configs", "--bootstrap-server", broker.bootstrap_servers, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_java_producer_group_and_transactions_with_each_mechanism(broker):
    argv = [
        "java",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile={K._tools_log4j()}",
        "-cp",
        os.pathsep.join([str(JAR), K.classpath()]),
        "io.kesque.oracle.Clients",
        "sasl",
        broker.sasl,
        "alice",
        "alice-secret",
        *MECHANISMS,
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
    expected = []
    for mech in MECHANISMS:
        expected += [
            f"sasl {mech}",
            "group consumer: members 2, partitions per member [2, 2], consumed 400, committed 400",
            "read_committed: 20 records, 0 aborted, end offset 33, position 33",
            "read_uncommitted: 30 records, 10 aborted, end offset 33, position 33",
        ]
        if mech != "OAUTHBEARER":  # Kafka 4.4's messages (tests/test_oracle_sasl.py compares them on the wire)
            expected.append(f"wrong password: SaslAuthenticationException: {WRONG_PASSWORD[mech]}")
    assert r.stdout.splitlines() == expected, r.stderr[-3000:]
