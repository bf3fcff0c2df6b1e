"""Kafka 4.4's own clients and tools against a kesque broker over SASL_PLAINTEXT (issue 27).

Kafka's Java AdminClient logs in with each of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and
OAUTHBEARER (Kafka's unsecured token), and a wrong password fails with Kafka's exception and
message, all in one JVM (the ``sasl`` scenario of oracle/java's Clients); its producers, groups
and transactions with each mechanism, over SASL_PLAINTEXT and SASL_SSL, are
tests/test_security_matrix.py's. Kafka's kafka-configs.sh adds, describes and deletes SCRAM users on kesque with the
answers of ``kesque configs``, and a user it made logs in. Marked ``oracle``: it needs the Kafka jars
(``make kafka``), not a Kafka broker.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import oracle
from kesque.errors import ErrorCode
from kesque.testing import kafka as K
from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port
from test_oracle_java_clients import JAR
from test_sasl import OAUTH_JAAS, PLAIN_JAAS, SCRAM_JAAS, scram_login
from wire import WireClient

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


def test_java_logs_in_with_each_mechanism_and_not_with_a_wrong_password(broker):
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
        expected += [f"sasl {mech}", "logged in: nodes 1"]
        if mech != "OAUTHBEARER":  # Kafka 4.4's messages (tests/test_oracle_sasl.py compares them on the wire)
            expected.append(f"wrong password: SaslAuthenticationException: {WRONG_PASSWORD[mech]}")
    assert r.stdout.splitlines() == expected, r.stderr[-3000:]


# ---------------------------------------------------------------------- Kafka's kafka-configs.sh


def both_configs(broker, *args) -> dict[str, subprocess.CompletedProcess]:
    """The same kafka-configs.sh command by Kafka's tool and by ``kesque configs``."""
    return {
        "kafka": K.run_tool("kafka-configs.sh", "--bootstrap-server", broker.bootstrap_servers, *args),
        "kesque": kesque_configs(broker, *args),
    }


def alter_user(tool, broker, user: str, *args) -> subprocess.CompletedProcess:
    argv = ["--alter", *args, "--entity-type", "users", "--entity-name", user]
    if tool == "kafka":
        return K.run_tool("kafka-configs.sh", "--bootstrap-server", broker.bootstrap_servers, *argv)
    return kesque_configs(broker, *argv)


def test_kafka_configs_manages_scram_users(broker, tmp_path):
    # bob by Kafka's tool, carol by kesque's: the same answers (an alter changes the broker, so
    # each tool gets its own user)
    for tool, user in (("kafka", "bob"), ("kesque", "carol")):
        for spec in ("SCRAM-SHA-256=[iterations=8192,password=secret]", "SCRAM-SHA-512=[password=secret]"):
            r = alter_user(tool, broker, user, "--add-config", spec)
            assert (r.returncode, r.stdout, r.stderr) == (0, f"Completed updating config for user {user}.\n", "")
    # below the minimum iterations: refused by the broker, the tool's message the same
    out = {
        tool: alter_user(tool, broker, "dave", "--add-config", "SCRAM-SHA-256=[iterations=1000,password=x]")
        for tool in ("kafka", "kesque")
    }
    message = "Iterations 1000 is less than the minimum 4096 required for SCRAM-SHA-256\n"
    assert [(r.returncode, r.stdout, r.stderr) for r in out.values()] == [(1, "", message)] * 2

    described = "SCRAM credential configs for user-principal '{}' are SCRAM-SHA-256=iterations=8192, "
    described += "SCRAM-SHA-512=iterations=4096\n"
    for user in ("bob", "carol"):
        out = both_configs(broker, "--describe", "--entity-type", "users", "--entity-name", user)
        assert out["kesque"].stdout == out["kafka"].stdout == described.format(user)
        assert out["kesque"].returncode == out["kafka"].returncode == 0
    everyone = both_configs(broker, "--describe", "--entity-type", "users")
    assert everyone["kesque"].stdout == everyone["kafka"].stdout
    assert described.format("bob") in everyone["kafka"].stdout and "'alice'" in everyone["kafka"].stdout

    # bob logs in with SCRAM-SHA-256: Kafka's tool itself, over SASL_PLAINTEXT as bob
    bob = tmp_path / "bob.properties"
    bob.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" '
        'password="secret";\n'
    )
    r = K.run_tool(
        "kafka-configs.sh", "--bootstrap-server", broker.sasl, "--command-config", str(bob),
        "--describe", "--entity-type", "users", "--entity-name", "bob",
    )  # fmt: skip
    assert (r.returncode, r.stdout) == (0, described.format("bob")), r.stderr[-2000:]

    r = alter_user("kafka", broker, "bob", "--delete-config", "SCRAM-SHA-256")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for user bob.\n"), r.stderr[-2000:]
    out = both_configs(broker, "--describe", "--entity-type", "users", "--entity-name", "bob")
    only_512 = "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096\n"
    assert out["kesque"].stdout == out["kafka"].stdout == only_512
    with WireClient(broker.sasl) as c:  # the deleted mechanism refuses bob, the other lets him in
        assert scram_login(c, "SCRAM-SHA-256", "bob", "secret").error_code == ErrorCode.sasl_authentication_failed
    with WireClient(broker.sasl) as c:
        assert scram_login(c, "SCRAM-SHA-512", "bob", "secret").error_code == ErrorCode.none
