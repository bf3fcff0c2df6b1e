"""The SASL failures a client sees, against Apache Kafka 4.4 configured the same way: a wrong
PLAIN password, an unknown SCRAM user and a wrong SCRAM password, an unknown mechanism (the error
code, message and enabled mechanisms of each response, and the connection closed after)."""

from __future__ import annotations

import pytest

import oracle
from kesque.errors import ErrorCode
from kesque.protocol.api_keys import ApiKeys
from kesque.security.scram import ScramFormatter, ScramMechanism
from kesque.testing.broker import Broker
from kesque.testing.kafka import KafkaBroker, free_port
from test_sasl import PLAIN_JAAS, SCRAM_JAAS, sasl_authenticate, sasl_handshake, scram_login
from wire import Msg, WireClient

pytestmark = oracle.MARKS

MAP = "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
SASL = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
}


class SaslKafka(KafkaBroker):
    """Kafka with a SASL_PLAINTEXT listener beside its PLAINTEXT one."""

    def __init__(self, sasl_port: int, **kw):
        super().__init__(**kw)
        self.sasl_port = sasl_port

    def _props(self):
        props = super()._props()
        props["listeners"] += f",SASL_PLAINTEXT://{self.host}:{self.sasl_port}"
        props["listener.security.protocol.map"] = MAP
        return props


def add_alice(address: str) -> None:
    mech = ScramMechanism.SCRAM_SHA_256
    salt = b"0123456789abcdef"
    salted = ScramFormatter(mech).salted_password("alice-secret", salt, 4096)
    m = Msg(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0)
    up = m("ScramCredentialUpsertion", name="alice", mechanism=1, iterations=4096, salt=salt, salted_password=salted)
    with WireClient(address) as c:
        resp = c.request(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, 0, m(deletions=(), upsertions=(up,)))
    assert [r.error_code for r in resp.results] == [ErrorCode.none]


@pytest.fixture(scope="module")
def pair():
    kp, ks = free_port(), free_port()
    kafka = SaslKafka(ks, config=SASL)
    kesque = Broker(
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:{kp},SASL_PLAINTEXT://127.0.0.1:{free_port()}",
            "listener.security.protocol.map": MAP,
            **SASL,
        }
    )
    kesque_sasl = int(kesque.config["listeners"].rsplit(":", 1)[1])
    kafka.start()
    kesque.start()
    try:
        for plain in (kafka.bootstrap_servers, kesque.bootstrap_servers):
            add_alice(plain)
        yield {"kafka": f"127.0.0.1:{ks}", "kesque": f"127.0.0.1:{kesque_sasl}"}
    finally:
        kesque.stop()
        kafka.stop()


def failures(address: str) -> dict:
    out = {}
    with WireClient(address) as c:
        r = sasl_handshake(c, "GSSAPI")
        out["unknown mechanism"] = (r.error_code, tuple(r.mechanisms), c.is_closed(5))
    with WireClient(address) as c:
        sasl_handshake(c, "PLAIN")
        r = sasl_authenticate(c, b"\0alice\0wrong")
        out["wrong password"] = (r.error_code, r.error_message, c.is_closed(5))
    for user, password in (("alice", "wrong"), ("nobody", "x")):
        with WireClient(address) as c:
            r = scram_login(c, "SCRAM-SHA-256", user, password)
            out[f"scram {user}"] = (r.error_code, r.error_message, c.is_closed(5))
    with WireClient(address) as c:
        r = scram_login(c, "SCRAM-SHA-256")
        out["scram ok"] = (r.error_code, r.session_lifetime.total_seconds())
    return out


def test_sasl_failures_as_kafka(pair):
    kafka, kesque = failures(pair["kafka"]), failures(pair["kesque"])
    assert kesque == kafka
    assert kafka["wrong password"][:2] == (
        ErrorCode.sasl_authentication_failed,
        "Authentication failed: Invalid username or password",
    )
