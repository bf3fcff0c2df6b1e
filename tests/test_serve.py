"""`kesque serve FILE [--override k=v]`: a Kafka user's server.properties starts kesque."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kesque.testing.broker import Broker

# Keys as a Kafka 3.x/4.x KRaft server.properties carries them: some kesque uses, some it
# does not (thread pools, socket buffers, ZooKeeper leftovers), all of them Kafka's.
KAFKA_STYLE = """\
# written the way Kafka's sample configuration is laid out
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={data}
num.partitions=2
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
inter.broker.protocol.version=3.7
"""


def _free_port() -> int:
    from kesque.testing.kafka import free_port  # below the ephemeral range: no client takes it meanwhile

    return free_port()


def _serve(args, timeout=20):
    return subprocess.Popen(
        [sys.executable, "-m", "kesque", "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_kafka_server_properties_start_kesque(tmp_path):
    port, cport = _free_port(), _free_port()
    cfg = tmp_path / "server.properties"
    cfg.write_text(KAFKA_STYLE.format(port=port, cport=cport, data=tmp_path / "data"))
    proc = _serve([str(cfg), "--override", "num.partitions=3"])
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        deadline = time.time() + 20
        while True:
            try:
                md = admin.list_topics(timeout=1)
                break
            except Exception:
                assert time.time() < deadline, "broker did not come up"
                assert proc.poll() is None, proc.stdout.read()
        assert 1 in md.brokers
        # a topic created without a partition count gets num.partitions: the override's 3,
        # not the file's 2 nor the default 1
        admin.create_topics([NewTopic("default-partitions")])["default-partitions"].result(10)
        assert len(admin.list_topics("default-partitions", timeout=10).topics["default-partitions"].partitions) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, out
    # Kafka keys kesque does not use are warnings naming each key
    for key in (
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "inter.broker.protocol.version",
    ):
        assert key in out, f"no warning naming {key}:\n{out}"
    assert "clean shutdown" in out.lower() or "Shutdown complete" in out
    assert os.path.exists(tmp_path / "data" / "meta.properties")


def _wait_up(proc, port: int, timeout: float = 20):
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    deadline = time.time() + timeout
    while True:
        try:
            return admin.list_topics(timeout=1)
        except Exception:
            assert time.time() < deadline, "broker did not come up"
            assert proc.poll() is None, proc.stdout.read()


def _stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, out
    return out


def test_unknown_key_is_a_warning_naming_it(tmp_path):
    # as Kafka: a key it does not know (a plugin's, a typo) is named and ignored, the node starts
    port = _free_port()
    proc = _serve(
        [
            "--override",
            f"log.dirs={tmp_path}",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            "not.a.kafka.key=1",
        ]
    )
    try:
        _wait_up(proc, port)
    finally:
        out = _stop(proc)
    line = next(line for line in out.splitlines() if "not.a.kafka.key" in line)
    assert " WARNING The configuration 'not.a.kafka.key' was supplied but isn't a known config." in line, out


# Kafka 4.x's config/server.properties (KRaft, combined, a dynamic quorum of one through
# controller.quorum.bootstrap.servers), as shipped, plus keys of plugins it passes on.
KAFKA_4_SERVER_PROPERTIES = """process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
controller.listener.names=CONTROLLER
listener.security.protocol.map={protocols}
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={data}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
confluent.support.metrics.enable=false
my.plugin.setting=42
"""


def test_kafka_4_server_properties_start_kesque(tmp_path):
    port, cport = _free_port(), _free_port()
    cfg = tmp_path / "server.properties"
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    cfg.write_text(
        KAFKA_4_SERVER_PROPERTIES.format(port=port, cport=cport, data=tmp_path / "data", protocols=protocols)
    )
    proc = _serve([str(cfg)])
    try:
        assert 1 in _wait_up(proc, port).brokers
    finally:
        out = _stop(proc)
    for key in ("confluent.support.metrics.enable", "my.plugin.setting"):
        assert f"The configuration '{key}' was supplied but isn't a known config." in out, out
    assert "Kafka config num.io.threads is not used by kesque" in out  # known to Kafka: the other warning
    assert (tmp_path / "data" / "meta.properties").exists()  # a lone node formats itself


def _group_and_transaction(bootstrap: str) -> None:
    """A consumer group commits an offset and a transaction commits: both need their
    coordinator, so their internal topic."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-1"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce("t", b"v")
    p.commit_transaction(20)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe(["t"])
        deadline = time.time() + 30
        msg = None
        while msg is None or msg.error():
            assert time.time() < deadline, "no record consumed"
            msg = c.poll(0.5)
        assert msg.value() == b"v"
        c.commit(msg, asynchronous=False)
        assert c.committed([TopicPartition("t", 0)], timeout=10)[0].offset == msg.offset() + 1
    finally:
        c.close()


def test_serve_without_a_file_runs_the_single_node_settings(tmp_path):
    # Kafka's defaults (internal topics with 3 replicas) could never create __consumer_offsets
    # or __transaction_state on one node: groups and transactions would wait forever
    port = _free_port()
    proc = _serve(["--override", f"log.dirs={tmp_path}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"])
    try:
        _wait_up(proc, port)
        _group_and_transaction(f"127.0.0.1:{port}")
    finally:
        out = _stop(proc)
    assert " ERROR " not in out, out


@pytest.mark.parametrize(
    "key,client",
    [
        ("offsets.topic.replication.factor", "group"),
        ("transaction.state.log.replication.factor", "transaction"),
    ],
)
def test_internal_topic_replication_factor_above_the_brokers_is_an_error_naming_it(tmp_path, key, client):
    from confluent_kafka import Consumer, KafkaException, Producer

    port = _free_port()
    proc = _serve(
        [
            "--override",
            f"log.dirs={tmp_path}",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"{key}=3",
        ]
    )
    try:
        _wait_up(proc, port)
        bootstrap = f"127.0.0.1:{port}"
        if client == "transaction":
            with pytest.raises(KafkaException):
                Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx"}).init_transactions(3)
        else:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
            c.subscribe(["t"])
            c.poll(3)
            c.close()
    finally:
        out = _stop(proc)
    errors = [line for line in out.splitlines() if " ERROR " in line]
    assert any(f"(configured via '{key}')" in line and "required replication factor '3'" in line for line in errors), (
        out
    )


def test_invalid_value_is_an_error_naming_the_key(tmp_path):
    proc = _serve(["--override", f"log.dirs={tmp_path}", "--override", "num.partitions=zero"])
    out = proc.communicate(timeout=20)[0]
    assert proc.returncode != 0
    assert "num.partitions" in out


def test_missing_config_file_is_a_clear_error(tmp_path):
    proc = _serve([str(tmp_path / "nope.properties")])
    out = proc.communicate(timeout=20)[0]
    assert proc.returncode != 0
    assert "nope.properties" in out


# ------------------------------------------------------------------ listeners kesque cannot serve

BIN = os.path.dirname(sys.executable)
_MAP = "listener.security.protocol.map"


def _refused(overrides: dict, data) -> str:
    """``kesque serve`` with these settings: it must exit non-zero before listening; its output."""
    args = ["--override", f"log.dirs={data}"]
    for k, v in overrides.items():
        args += ["--override", f"{k}={v}"]
    proc = _serve(args)
    try:
        out = proc.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"kesque serve started with {overrides}:\n{proc.communicate()[0]}")
    assert proc.returncode != 0, out
    assert "Listening on" not in out, out
    return out


REFUSED_PROTOCOLS = [
    (
        {"listeners": "PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:0"},
        "Invalid value CLIENTS://127.0.0.1:0 for configuration listeners: No security protocol defined "
        "for listener CLIENTS (listener.security.protocol.map)",
    ),
    (
        {"listeners": "PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:0", _MAP: "PLAINTEXT:PLAINTEXT,CLIENTS:TLS"},
        "Invalid value CLIENTS:TLS for configuration listener.security.protocol.map: TLS is not a security protocol",
    ),
    (
        {"security.inter.broker.protocol": "TLS"},
        "Invalid value TLS for configuration security.inter.broker.protocol: String must be one of: "
        "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
    ),
]


@pytest.mark.parametrize("overrides,message", REFUSED_PROTOCOLS)
def test_serve_refuses_a_listener_without_a_known_protocol(tmp_path, overrides, message):
    out = _refused(overrides, tmp_path)
    assert f"kesque: configuration error: {message}" in out, out


@pytest.mark.parametrize("overrides,message", REFUSED_PROTOCOLS)
def test_kafka_server_start_refuses_a_listener_without_a_known_protocol(tmp_path, overrides, message):
    exe = os.path.join(BIN, "kafka-server-start.sh")
    if not os.path.exists(exe):
        pytest.skip("console scripts not installed")
    cfg = tmp_path / "server.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in {"log.dirs": tmp_path / "data", **overrides}.items()))
    r = subprocess.run([exe, str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and message in r.stderr, r


@pytest.mark.parametrize("overrides,message", REFUSED_PROTOCOLS)
def test_broker_class_refuses_a_listener_without_a_known_protocol(tmp_path, overrides, message):
    b = Broker(data_dir=str(tmp_path), config=overrides)
    try:
        with pytest.raises(RuntimeError) as e:
            b.start()
    finally:
        b.stop()  # if it did start
    assert re.search(r"exited during start \(code [1-9]\d*\)", str(e.value)) and message in str(e.value)


@pytest.mark.parametrize(
    "overrides",
    [
        {"listeners": "PLAINTEXT://127.0.0.1:0"},
        {"listeners": "CLIENTS://127.0.0.1:0", _MAP: "CLIENTS:PLAINTEXT,CONTROLLER:PLAINTEXT"},
    ],
)
def test_plaintext_listeners_still_serve(tmp_path, overrides):
    with Broker(data_dir=str(tmp_path), config=overrides) as b:
        md = AdminClient({"bootstrap.servers": b.bootstrap_servers}).list_topics(timeout=10)
        assert 1 in md.brokers
        # the listener is advertised under its own name
        assert f"Listening on {overrides['listeners'].split(':')[0]}://127.0.0.1:{b.port}" in open(b.log_path).read()


# ------------------------------------------------------------------ unclean.leader.election.enable


def test_unclean_leader_election_enable_is_taken_without_a_warning(tmp_path):
    """The controller acts on it now (elections on fencing, unfencing and every
    unclean.leader.election.interval.ms): no "has no effect" warning at start."""
    with Broker(data_dir=str(tmp_path), config={"unclean.leader.election.enable": "true"}) as b:
        pass
    log = open(b.log_path).read()
    assert "has no effect" not in log and "Kafka config unclean.leader.election.enable is not used" not in log


def test_sigint_stops_a_lone_voter_without_writing_after_its_logs_close(tmp_path):
    """``kesque serve`` of one combined node with a CONTROLLER listener (a lone voter, an active
    controller with its NoOp timer), stopped with SIGINT, several times over the same data: the
    node resigns and nothing moves after that. It used to elect itself again as soon as it
    had resigned (a lone voter's election deadline is "now"), its controller became active and
    its NoOp timer wrote to the closed metadata log (ERROR: OSError EBADF) in 3 stops of 5."""
    port, cport = _free_port(), _free_port()
    cfg = tmp_path / "server.properties"
    cfg.write_text(KAFKA_STYLE.format(port=port, cport=cport, data=tmp_path / "data"))
    for _ in range(3):
        proc = _serve([str(cfg), "--override", "metadata.max.idle.interval.ms=20"])
        lines = []
        for line in proc.stdout:  # until it serves clients
            lines.append(line)
            if "started in" in line:
                break
        assert proc.poll() is None, "".join(lines)
        time.sleep(0.1)  # a few NoOp records
        proc.send_signal(signal.SIGINT)
        out = "".join(lines) + proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, out
        assert "ERROR" not in out and "Traceback" not in out, out
        after = out.split("Shutting down", 1)[1]
        assert "Leader -> Resigned" in after, out
        assert "-> Leader" not in after and "-> Candidate" not in after and "is active in epoch" not in after, out
        assert os.path.exists(tmp_path / "data" / ".kafka_cleanshutdown")
