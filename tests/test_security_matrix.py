"""The security client matrix (issue 27, "Tests that must pass" 1): each client stack
(confluent-kafka/librdkafka, kafka-python, aiokafka, Kafka's Java client) produces, consumes in a
group with a commit and runs a transaction over SSL, mTLS, SASL_PLAINTEXT and SASL_SSL with PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER: on one broker serving all four protocols at once,
and on a 3-node cluster whose inter-broker and controller listeners are SASL_SSL, with the
StandardAuthorizer on, the nodes logged in as ``User:broker`` (a super user) and the clients
granted what they need with ACLs (replication factor 3, min.insync.replicas 2, acks=all).

Each run, whatever its stack, gives one line (the Java harness prints it, the Python stacks format
it the same way): RECORDS records by an acks=all producer, consumed by a group member that commits
(its committed offset read back), then a committed and an aborted transaction of TXN records, and
every value a read_committed consumer reads from the beginning to the end offset: exactly the
plain and the committed records.

The default suite runs a slice: every stack once per protocol, the SASL mechanisms rotated across
the stacks so that every (protocol, mechanism) pair is covered, and the cluster with one client per
protocol. ``make security`` runs the whole matrix (marker ``security_matrix``: the rest). Kafka's
Java client runs its configurations of both targets in one JVM, a thread each (the JVM's start
is the cost); the slice's in one, the rest's in another.

What each stack lacks is said where it matters: nothing of the matrix. kafka-python and aiokafka
make no OAUTHBEARER token themselves (each takes a token provider object; an unsecured JWT is
given, as Kafka's development login makes), librdkafka and Kafka's Java client make the unsecured
token from their settings.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import time
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as ATopicPartition
from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaTokenProvider
from kafka.structs import OffsetAndMetadata

from kesque.cli.storage import main as storage_main
from kesque.config.broker import STANDARD_AUTHORIZER
from kesque.errors import ErrorCode
from kesque.testing import kafka as K
from kesque.testing.broker import Broker
from kesque.testing.certs import CertificateAuthority
from kesque.testing.cluster import Cluster
from kesque.testing.kafka import free_port
from test_oracle_java_clients import JAR
from test_sasl import OAUTH_MODULE, PLAIN_MODULE, SCRAM_MODULE, metadata, plain_login, unsecured_token
from wire import WireClient

RECORDS, TXN = 20, 5  # plain records, then records per transaction (one committed, one aborted)
USER, PASSWORD = "alice", "alice-secret"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
STACKS = ["confluent", "kafka-python", "aiokafka", "java"]
LISTENERS = ["SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"]  # MTLS: an SSL listener with ssl.client.auth=required
PROTOCOL_MAP = "SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
END_OFFSET = RECORDS + 2 * TXN + 2  # the two transaction markers
EXPECTED = (
    f"produced {RECORDS}, group consumed {RECORDS}, committed {RECORDS}, read_committed "
    + ",".join([f"v{i}" for i in range(RECORDS)] + [f"c{i}" for i in range(TXN)])
    + f", end offset {END_OFFSET}"
)


@dataclass(frozen=True)
class Security:
    listener: str
    mechanism: str | None = None

    @property
    def protocol(self) -> str:
        return "SSL" if self.listener == "MTLS" else self.listener

    @property
    def name(self) -> str:
        return self.listener.lower() + (f"-{self.mechanism.lower()}" if self.mechanism else "")


CONFIGS = [
    Security("SSL"),
    Security("MTLS"),
    *(Security(listener, m) for listener in ("SASL_PLAINTEXT", "SASL_SSL") for m in MECHANISMS),
]


def in_slice(stack: str, sec: Security) -> bool:
    """The default suite's share of one broker's matrix: every stack over each protocol once, the
    mechanism rotated (SASL_PLAINTEXT: confluent PLAIN, kafka-python SCRAM-SHA-256, aiokafka
    SCRAM-SHA-512, java OAUTHBEARER; SASL_SSL shifted by two), so each (protocol, mechanism) pair
    is run by some stack."""
    if sec.mechanism is None:
        return True
    shift = 0 if sec.listener == "SASL_PLAINTEXT" else 2
    return MECHANISMS[(STACKS.index(stack) + shift) % len(MECHANISMS)] == sec.mechanism


# the cluster in the default suite: one client per protocol
CLUSTER_SLICE = {
    ("kafka-python", "ssl"),
    ("aiokafka", "mtls"),
    ("confluent", "sasl_plaintext-oauthbearer"),
    ("java", "sasl_ssl-scram-sha-256"),
}


def matrix_params(selected) -> list:
    return [
        pytest.param(stack, sec, id=f"{stack}-{sec.name}", marks=() if selected(stack, sec) else [MATRIX])
        for stack in STACKS
        if stack != "java"
        for sec in CONFIGS
    ]


MATRIX = pytest.mark.security_matrix
JAVA_REASON = K.unavailable() or (None if JAR.exists() else f"{JAR} not built: run `make kafka`")


# ---------------------------------------------------------------------- certificates and JAAS


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    client = ca.issue(USER)  # its principal on the mTLS listener: User:CN=alice
    (d / "alice.crt").write_text(client.chain_pem())
    (d / "alice.key").write_text(client.key_pem())
    return {
        "dir": d,
        "ca": ca.write_pem(d / "ca.pem"),
        "server": server.write_pem(d / "server.pem"),
        "client_pem": client.write_pem(d / "alice.pem"),  # Java's PEM key store: key and chain
        "client_crt": str(d / "alice.crt"),
        "client_key": str(d / "alice.key"),
    }


def sasl_listener_settings(listener: str, plain_users: dict[str, str]) -> dict:
    """All four mechanisms on one SASL listener, each with its JAAS entry."""
    users = " ".join(f'user_{u}="{p}"' for u, p in plain_users.items())
    name = listener.lower()
    return {
        f"listener.name.{name}.sasl.enabled.mechanisms": ",".join(MECHANISMS),
        f"listener.name.{name}.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {users};",
        f"listener.name.{name}.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        f"listener.name.{name}.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        f"listener.name.{name}.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
    }


def tls_settings(pki) -> dict:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki["server"],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki["ca"],
        "listener.name.mtls.ssl.client.auth": "required",
    }


# consumers and producers: quick group joins, no waiting on idle sessions
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@dataclass
class Target:
    """Where a client connects: the listener addresses, the PKI, and an admin that makes a topic."""

    bootstrap: dict[str, str]  # listener -> bootstrap servers
    pki: dict
    admin: AdminClient
    replication: int
    ready: object = None  # callable(topic): wait until every broker serves it

    def topic(self, name: str) -> str:
        self.admin.create_topics([NewTopic(name, 1, self.replication)])[name].result(30)
        if self.ready:
            self.ready(name)
        return name


# ---------------------------------------------------------------------- one broker, four protocols


@pytest.fixture(scope="module")
def broker(pki, tmp_path_factory):
    ports = {listener: free_port() for listener in ["PLAINTEXT", *LISTENERS]}
    config = {
        "listeners": ",".join(f"{listener}://127.0.0.1:{port}" for listener, port in ports.items()),
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{PROTOCOL_MAP}",
        "inter.broker.listener.name": "PLAINTEXT",
        **tls_settings(pki),
        **sasl_listener_settings("SASL_PLAINTEXT", {USER: PASSWORD}),
        **sasl_listener_settings("SASL_SSL", {USER: PASSWORD}),
        **GROUP_SETTINGS,
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    data = tmp_path_factory.mktemp("matrix-broker") / "data"
    data.mkdir()
    b = Broker(data_dir=str(data), port=ports["PLAINTEXT"], config=config).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    upsert_scram_users(admin)
    target = Target({k: f"127.0.0.1:{v}" for k, v in ports.items()}, pki, admin, 1)
    yield target
    target.admin = admin = None  # librdkafka's handle goes with its last reference: no reconnecting to a stopped broker
    b.stop()
    b.close()


def upsert_scram_users(admin: AdminClient, iterations: int = 4096) -> None:
    """The client user for both SCRAM mechanisms (AlterUserScramCredentials): a request each, as
    Kafka's controller refuses a user altered twice in one request."""
    for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(m, iterations), PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)


# ---------------------------------------------------------------------- the stacks


def confluent_settings(target: Target, sec: Security) -> dict:
    conf = {"bootstrap.servers": target.bootstrap[sec.listener], "security.protocol": sec.protocol}
    if sec.protocol != "SASL_PLAINTEXT":
        conf["ssl.ca.location"] = target.pki["ca"]
    if sec.listener == "MTLS":
        conf.update(
            {"ssl.certificate.location": target.pki["client_crt"], "ssl.key.location": target.pki["client_key"]}
        )
    if sec.mechanism == "OAUTHBEARER":  # librdkafka's unsecured JWT (its development token, as Kafka's)
        conf.update({"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True})
        conf["sasl.oauthbearer.config"] = f"principal={USER}"
    elif sec.mechanism:
        conf.update({"sasl.mechanism": sec.mechanism, "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def python_settings(target: Target, sec: Security, aio: bool) -> dict:
    """kafka-python's and aiokafka's keyword arguments (the same names; aiokafka takes an
    SSLContext, and an async token provider for OAUTHBEARER)."""
    s = {"bootstrap_servers": target.bootstrap[sec.listener], "security_protocol": sec.protocol}
    if sec.protocol != "SASL_PLAINTEXT":
        cert = (target.pki["client_crt"], target.pki["client_key"]) if sec.listener == "MTLS" else None
        if aio:
            context = ssl.create_default_context(cafile=target.pki["ca"])
            if cert:
                context.load_cert_chain(*cert)
            s["ssl_context"] = context
        else:
            s["ssl_cafile"] = target.pki["ca"]
            if cert:
                s["ssl_certfile"], s["ssl_keyfile"] = cert
    if sec.mechanism == "OAUTHBEARER":
        # neither library makes a token: each takes a provider object; an unsecured JWT (alg none),
        # as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes, with sub=alice
        token = unsecured_token(USER, time.time() + 3600)
        if aio:

            class AsyncProvider(AioTokenProvider):
                async def token(self):
                    return token

            provider = AsyncProvider()
        else:

            class Provider(KafkaTokenProvider):
                def token(self):
                    return token

            provider = Provider()
        s.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=provider)
    elif sec.mechanism:
        s.update(sasl_mechanism=sec.mechanism, sasl_plain_username=USER, sasl_plain_password=PASSWORD)
    return s


def eventually_end(end_offset) -> int:
    """The partition's end offset once past both transaction markers: a coordinator writes them
    after it answered EndTxn (Kafka's too), so a read_committed end offset (the last stable
    offset) can stop at the aborted transaction's first record for a moment."""
    end, deadline = end_offset(), time.monotonic() + 30
    while end < END_OFFSET and time.monotonic() < deadline:
        time.sleep(0.05)
        end = end_offset()
    return end


def outcome(consumed: int, committed: int, values: list[str], end: int) -> str:
    return (
        f"produced {RECORDS}, group consumed {consumed}, committed {committed}, "
        f"read_committed {','.join(values)}, end offset {end}"
    )


def run_confluent(target: Target, sec: Security, topic: str) -> str:
    conf = confluent_settings(target, sec)
    tp = TopicPartition(topic, 0)
    p = Producer({**conf, "acks": "all"})
    for i in range(RECORDS):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    group = {"group.id": f"{topic}-g", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    c = Consumer({**conf, **group, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    consumed, deadline = 0, time.monotonic() + 30
    while consumed < RECORDS and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            consumed += 1
    c.commit(asynchronous=False)
    committed = c.committed([tp], 30)[0].offset
    c.close()
    t = Producer({**conf, "transactional.id": f"{topic}-txn"})
    t.init_transactions(30)
    for commit in (True, False):
        t.begin_transaction()
        for i in range(TXN):
            t.produce(topic, f"{'c' if commit else 'a'}{i}".encode(), partition=0)
        if commit:
            t.commit_transaction(30)
        else:
            assert t.flush(30) == 0
            t.abort_transaction(30)
    rc = Consumer({**conf, "group.id": f"{topic}-rc", "isolation.level": "read_committed", "enable.auto.commit": False})
    end = eventually_end(lambda: rc.get_watermark_offsets(tp, 30, cached=False)[1])
    rc.assign([TopicPartition(topic, 0, 0)])
    values, deadline = [], time.monotonic() + 30
    while rc.position([tp])[0].offset < end and time.monotonic() < deadline:
        m = rc.poll(0.2)
        if m is not None and m.error() is None:
            values.append(m.value().decode())
    rc.close()
    return outcome(consumed, committed, values, end)


def run_kafka_python(target: Target, sec: Security, topic: str) -> str:
    s = python_settings(target, sec, aio=False)
    tp = KTopicPartition(topic, 0)
    p = KafkaProducer(acks="all", **s)
    for i in range(RECORDS):
        p.send(topic, f"v{i}".encode(), partition=0).get(timeout=30)
    p.close()
    c = KafkaConsumer(
        group_id=f"{topic}-g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **s,
    )
    c.subscribe([topic])
    consumed, deadline = 0, time.monotonic() + 30
    while consumed < RECORDS and time.monotonic() < deadline:
        # a long poll: kafka-python 3.0.12 loses a join whose SyncGroup answer comes after its
        # poll's timeout (the coordinator then stays "rebalancing" and the commit fails)
        consumed += sum(len(v) for v in c.poll(3000).values())
    c.commit({tp: OffsetAndMetadata(consumed, "", -1)})
    committed = c.committed(tp)
    c.close()
    t = KafkaProducer(transactional_id=f"{topic}-txn", **s)
    t.init_transactions()
    for commit in (True, False):
        t.begin_transaction()
        for i in range(TXN):
            t.send(topic, f"{'c' if commit else 'a'}{i}".encode(), partition=0)
        if commit:
            t.commit_transaction()
        else:
            t.flush(30)
            t.abort_transaction()
    t.close()
    rc = KafkaConsumer(isolation_level="read_committed", enable_auto_commit=False, **s)
    end = eventually_end(lambda: rc.end_offsets([tp])[tp])
    rc.assign([tp])
    rc.seek_to_beginning(tp)
    values, deadline = [], time.monotonic() + 30
    while rc.position(tp) < end and time.monotonic() < deadline:
        values += [r.value.decode() for r in rc.poll(200).get(tp, [])]
    rc.close()
    return outcome(consumed, committed, values, end)


def run_aiokafka(target: Target, sec: Security, topic: str) -> str:
    tp = ATopicPartition(topic, 0)

    async def run() -> str:
        s = python_settings(target, sec, aio=True)
        p = AIOKafkaProducer(acks="all", **s)
        await p.start()
        try:
            for i in range(RECORDS):
                await p.send_and_wait(topic, f"v{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            group_id=f"{topic}-g",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            **s,
        )
        c.subscribe([topic])
        await c.start()
        try:
            consumed, deadline = 0, time.monotonic() + 30
            while consumed < RECORDS and time.monotonic() < deadline:
                consumed += sum(len(v) for v in (await c.getmany(timeout_ms=200)).values())
            await c.commit()
            committed = await c.committed(tp)
        finally:
            await c.stop()
        t = AIOKafkaProducer(transactional_id=f"{topic}-txn", **s)
        await t.start()
        try:
            for commit in (True, False):
                await t.begin_transaction()
                for i in range(TXN):
                    await t.send(topic, f"{'c' if commit else 'a'}{i}".encode(), partition=0)
                if commit:
                    await t.commit_transaction()
                else:
                    await t.flush()
                    await t.abort_transaction()
        finally:
            await t.stop()
        rc = AIOKafkaConsumer(isolation_level="read_committed", enable_auto_commit=False, **s)
        await rc.start()
        try:
            end = (await rc.end_offsets([tp]))[tp]
            deadline = time.monotonic() + 30
            while end < END_OFFSET and time.monotonic() < deadline:  # as eventually_end
                await asyncio.sleep(0.05)
                end = (await rc.end_offsets([tp]))[tp]
            rc.assign([tp])
            await rc.seek_to_beginning(tp)
            values, deadline = [], time.monotonic() + 30
            while await rc.position(tp) < end and time.monotonic() < deadline:
                batch = await rc.getmany(tp, timeout_ms=200)
                values += [r.value.decode() for r in batch.get(tp, [])]
        finally:
            await rc.stop()
        return outcome(consumed, committed, values, end)

    return asyncio.run(run())


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def java_properties(target: Target, sec: Security, topic: str) -> dict[str, str]:
    """Kafka's Java client settings: PEM trust and key stores (KIP-651), the JAAS login."""
    props = {"bootstrap.servers": target.bootstrap[sec.listener], "security.protocol": sec.protocol}
    if sec.protocol != "SASL_PLAINTEXT":
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": target.pki["ca"]})
    if sec.listener == "MTLS":
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": target.pki["client_pem"]})
    if sec.mechanism:
        props["sasl.mechanism"] = sec.mechanism
        props["sasl.jaas.config"] = {
            "PLAIN": f'{PLAIN_MODULE} required username="{USER}" password="{PASSWORD}";',
            "SCRAM-SHA-256": f'{SCRAM_MODULE} required username="{USER}" password="{PASSWORD}";',
            "SCRAM-SHA-512": f'{SCRAM_MODULE} required username="{USER}" password="{PASSWORD}";',
            "OAUTHBEARER": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="{USER}";',
        }[sec.mechanism]
    props.update(
        {
            "matrix.topic": topic,
            "matrix.group": f"{topic}-g",
            "matrix.transactional.id": f"{topic}-txn",
            "matrix.records": str(RECORDS),
            "matrix.transaction.records": str(TXN),
        }
    )
    return props


def run_java(runs: list[tuple[Target, str, Security]]) -> dict[str, str]:
    """Every (target, topic prefix, configuration) in one JVM (the Clients harness's matrix
    scenario, a thread each): its line by topic."""
    files = []
    for target, prefix, sec in runs:
        topic = target.topic(f"{prefix}-java-{sec.name}")
        path = target.pki["dir"] / f"{topic}.properties"
        props = {**java_properties(target, sec, topic), "matrix.name": topic}
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))  # no value holds a backslash
        files.append(str(path))
    argv = [
        "java",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # a short run: C1 only starts sooner
        f"-Dlog4j2.configurationFile={K._tools_log4j()}",
        "-cp",
        os.pathsep.join([str(JAR), K.classpath()]),
        "io.kesque.oracle.Clients",
        "matrix",
        "-",
        *files,
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
    return dict(line.split(": ", 1) for line in r.stdout.splitlines())


# ---------------------------------------------------------------------- one broker


@pytest.mark.parametrize("stack,sec", matrix_params(in_slice))
def test_one_broker(broker, stack, sec):
    topic = broker.topic(f"mx-1-{stack}-{sec.name}")
    assert RUNNERS[stack](broker, sec, topic) == EXPECTED


# ---------------------------------------------------------------------- a 3-node cluster over SASL_SSL

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
CLIENT_PRINCIPALS = [
    f"User:{USER}",  # SASL, every mechanism (OAUTHBEARER's token has sub=alice)
    f"User:CN={USER}",  # mTLS: the certificate's DN
    # SSL without a client certificate: every client of that listener is ANONYMOUS, as in Kafka
    "User:ANONYMOUS",
]


def client_acls() -> list[AclBinding]:
    """What the matrix's clients need, on the prefix of its topics, groups and transactional ids:
    WRITE and READ on the topics (each implies DESCRIBE; WRITE on a topic also lets an idempotent
    producer init, KIP-679), READ on the groups, WRITE on the transactional ids."""
    grants = [
        (ResourceType.TOPIC, AclOperation.WRITE),
        (ResourceType.TOPIC, AclOperation.READ),
        (ResourceType.GROUP, AclOperation.READ),
        (ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE),
    ]
    return [
        AclBinding(rtype, "mx-", ResourcePatternType.PREFIXED, principal, "*", op, AclPermissionType.ALLOW)
        for principal in CLIENT_PRINCIPALS
        for rtype, op in grants
    ]


@pytest.fixture(scope="module")
def cluster(pki, tmp_path_factory):
    """Three combined nodes: INTERNAL (inter-broker) and CONTROLLER listeners SASL_SSL, the nodes
    logging in as User:broker (SCRAM-SHA-512 between brokers, bootstrapped by storage format
    --add-scram; PLAIN to the controllers), host names checked; the four client listeners of the
    one broker beside them; the StandardAuthorizer with User:broker its only super user."""
    config = {
        **tls_settings(pki),
        "ssl.endpoint.identification.algorithm": "https",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": f"User:{BROKER_USER}",
        "min.insync.replicas": "2",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": f'{SCRAM_MODULE} required username="{BROKER_USER}" '
        f'password="{BROKER_PASSWORD}";',
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": f'{PLAIN_MODULE} required username="{BROKER_USER}" '
        f'password="{BROKER_PASSWORD}" user_{BROKER_USER}="{BROKER_PASSWORD}";',
        # the test's own checks log in as the broker on SASL_PLAINTEXT (super user: sees every topic)
        **sasl_listener_settings("SASL_PLAINTEXT", {USER: PASSWORD, BROKER_USER: BROKER_PASSWORD}),
        **sasl_listener_settings("SASL_SSL", {USER: PASSWORD}),
        **GROUP_SETTINGS,
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    c = Cluster(nodes=3, data_dir=str(tmp_path_factory.mktemp("matrix-cluster")), config=config)
    ports = {}
    for node_id, b in c.nodes.items():
        ports[node_id] = {listener: free_port() for listener in LISTENERS}
        extra = "".join(f",{listener}://127.0.0.1:{port}" for listener, port in ports[node_id].items())
        for key in ("listeners", "advertised.listeners"):
            b.config[key] = b.config[key].replace("PLAINTEXT://", "INTERNAL://") + extra
        b.config["inter.broker.listener.name"] = "INTERNAL"
        b.config["listener.security.protocol.map"] = f"INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL,{PROTOCOL_MAP}"
    scram = [f"SCRAM-SHA-512=[name={BROKER_USER},password={BROKER_PASSWORD}]"]
    scram += [f"{m}=[name={USER},password={PASSWORD}]" for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
    for b in c.nodes.values():  # kesque storage format --add-scram, in this process (3 interpreters' start saved)
        with open(b.properties_file, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in b.config.items())
        argv = ["format", "-c", b.properties_file, "-t", c.cluster_id, *(a for u in scram for a in ("--add-scram", u))]
        assert storage_main(argv) == 0
    c.start()
    try:
        admin = AdminClient(
            {
                "bootstrap.servers": c.bootstrap_servers,  # the INTERNAL listeners
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": pki["ca"],
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": BROKER_USER,
                "sasl.password": BROKER_PASSWORD,
            }
        )
        for future in admin.create_acls(client_acls()).values():
            future.result(30)

        def ready(topic: str) -> None:
            """Every broker serves the topic, so it has applied the ACLs too (created before it,
            they come earlier in the metadata log)."""
            for node_id in c.nodes:
                deadline = time.monotonic() + 15
                while True:
                    with WireClient(f"127.0.0.1:{ports[node_id]['SASL_PLAINTEXT']}") as w:
                        assert plain_login(w, BROKER_USER, BROKER_PASSWORD).error_code == ErrorCode.none
                        if any(t.name == topic and t.error_code == 0 for t in metadata(w).topics):
                            break
                    assert time.monotonic() < deadline, f"node {node_id} does not serve {topic}"
                    time.sleep(0.1)

        bootstrap = {
            listener: ",".join(f"127.0.0.1:{ports[node_id][listener]}" for node_id in c.nodes) for listener in LISTENERS
        }
        target = Target(bootstrap, pki, admin, 3, ready)
        yield target
        target.admin = admin = None
    finally:
        for node in c.nodes.values():  # killed: the last voter's controlled shutdown would wait
            if node.process is not None:
                node.kill()
        c.close()


def full_isr(target: Target, topic: str) -> list[int]:
    """The topic's ISR once the followers caught up. A follower's Fetch needs CLUSTER_ACTION, which
    no ACL grants: a full ISR shows the nodes log in to each other as User:broker, the super user
    (over the SASL_SSL inter-broker listener), not as ANONYMOUS."""
    deadline = time.monotonic() + 15
    while True:
        isr = sorted(target.admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)
        if len(isr) == 3 or time.monotonic() > deadline:
            return isr


@pytest.mark.parametrize("stack,sec", matrix_params(lambda stack, sec: (stack, sec.name) in CLUSTER_SLICE))
def test_cluster(cluster, stack, sec):
    topic = cluster.topic(f"mx-3-{stack}-{sec.name}")
    assert RUNNERS[stack](cluster, sec, topic) == EXPECTED
    assert full_isr(cluster, topic) == [1, 2, 3]


# ---------------------------------------------------------------------- Kafka's Java client


@pytest.mark.skipif(JAVA_REASON is not None, reason=JAVA_REASON or "")
@pytest.mark.parametrize("part", ["slice", pytest.param("rest", marks=MATRIX)])
def test_java(broker, cluster, part):
    """Kafka's Java client: every configuration of this part, on the broker and on the cluster,
    in one JVM (a thread each)."""
    runs = [
        (target, prefix, sec)
        for target, prefix, selected in (
            (broker, "mx-1", lambda sec: in_slice("java", sec)),
            (cluster, "mx-3", lambda sec: ("java", sec.name) in CLUSTER_SLICE),
        )
        for sec in CONFIGS
        if selected(sec) == (part == "slice")
    ]
    got = run_java(runs)
    assert got == {f"{prefix}-java-{sec.name}": EXPECTED for _, prefix, sec in runs}
    for target, prefix, sec in runs:
        if target is cluster:
            assert full_isr(cluster, f"{prefix}-java-{sec.name}") == [1, 2, 3]
