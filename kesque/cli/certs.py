"""``kesque certs --dir DIR [--host HOST ...] [--port PORT]``: what a SASL_SSL broker and its
clients need, in one command (kesque's own; Kafka's docs do it with keytool and openssl).

Writes into DIR:

* ``ca.pem``: a new CA's certificate (the clients' and the brokers' trust store:
  ``ssl.ca.location``, ``ssl.truststore.type=PEM`` + ``ssl.truststore.location``);
* ``broker.pem``: the brokers' key and certificate chain, for every ``--host`` (default
  ``localhost`` and ``127.0.0.1``), signed by that CA (``ssl.keystore.type=PEM``);
* ``server.properties``: one combined node serving SASL_SSL on HOST:PORT (``kesque serve
  DIR/server.properties``), PLAIN users ``admin`` (the broker's own login) and ``alice``, data in
  ``DIR/data``;
* ``cluster.properties``: the same security for every node of ``kesque cluster up --config
  DIR/cluster.properties`` (its client and controller listeners SASL_SSL, the brokers logging in
  to each other and to the controllers as ``admin``);
* ``client.properties`` (Kafka's Java clients and tools, ``--command-config``) and ``client.conf``
  (librdkafka: confluent-kafka, kcat ``-F``) for ``alice``.

The passwords are random, the keys are new on every run, and the files holding secrets are
readable by their owner only.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from ..testing.certs import CertificateAuthority

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kesque certs",
        description="Write a CA, a broker key store and the properties of a SASL_SSL broker, cluster and client.",
    )
    p.add_argument("--dir", required=True, help="directory to write the files into (created if missing)")
    p.add_argument(
        "--host",
        action="append",
        help="a host name or address the brokers' certificate is valid for (repeatable; default: localhost "
        "and 127.0.0.1); the first is server.properties' listener host",
    )
    p.add_argument("--port", type=int, default=9093, help="server.properties' SASL_SSL port (default 9093)")
    p.add_argument("--days", type=int, default=365, help="validity of the certificates in days (default 365)")
    return p


def _write(path: str, text: str, secret: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if secret:
        os.chmod(path, 0o600)


def _properties(header: str, props: dict[str, str]) -> str:
    return f"# {header}\n# written by kesque certs\n" + "".join(f"{k}={v}\n" for k, v in props.items())


def security(listeners: list[str], d: str, admin: str, alice: str) -> dict[str, str]:
    """Every node's SASL_SSL settings for ``listeners`` (by name): PLAIN on each, the JAAS entry
    per listener as Kafka's brokers take it, the PEM key and trust stores."""
    jaas = f'{PLAIN_MODULE} required username="admin" password="{admin}" user_admin="{admin}" user_alice="{alice}";'
    props = {}
    for name in listeners:
        props[f"listener.name.{name.lower()}.sasl.enabled.mechanisms"] = "PLAIN"
        props[f"listener.name.{name.lower()}.plain.sasl.jaas.config"] = jaas
    props.update(
        {
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": os.path.join(d, "broker.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": os.path.join(d, "ca.pem"),
        }
    )
    return props


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    hosts = args.host or ["localhost", "127.0.0.1"]
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    ca = CertificateAuthority("kesque-ca", days=args.days)
    broker = ca.issue(hosts[0], hosts=hosts, days=args.days)
    ca.write_pem(os.path.join(d, "ca.pem"))
    _write(os.path.join(d, "broker.pem"), broker.key_pem() + broker.chain_pem(), secret=True)
    admin, alice = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    listener = f"{hosts[0]}:{args.port}"
    server = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"SASL_SSL://{listener}",
        "advertised.listeners": f"SASL_SSL://{listener}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "log.dirs": os.path.join(d, "data"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        **security(["SASL_SSL", "CONTROLLER"], d, admin, alice),
    }
    _write(os.path.join(d, "server.properties"), _properties("a single SASL_SSL node: kesque serve", server), True)
    cluster = {
        "listener.security.protocol.map": "PLAINTEXT:SASL_SSL,CONTROLLER:SASL_SSL",
        **security(["PLAINTEXT", "CONTROLLER"], d, admin, alice),
    }
    _write(
        os.path.join(d, "cluster.properties"),
        _properties("every node of kesque cluster up --config over SASL_SSL", cluster),
        True,
    )
    java = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="alice" password="{alice}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": os.path.join(d, "ca.pem"),
    }
    _write(os.path.join(d, "client.properties"), _properties("a Kafka (Java) client as alice", java), True)
    rdkafka = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": alice,
        "ssl.ca.location": os.path.join(d, "ca.pem"),
    }
    _write(
        os.path.join(d, "client.conf"),
        _properties("a librdkafka client (confluent-kafka, kcat -F) as alice", rdkafka),
        True,
    )
    print(f"CA and broker certificate for {', '.join(hosts)} (valid {args.days} days) in {d}:")
    for name, what in (
        ("ca.pem", "the trust store of clients and brokers"),
        ("broker.pem", "the brokers' key store (PEM)"),
        ("server.properties", f"kesque serve {os.path.join(args.dir, 'server.properties')}: SASL_SSL on {listener}"),
        ("cluster.properties", "kesque cluster up --config: every node's security settings"),
        ("client.properties", "Kafka's Java clients and tools (--command-config), user alice"),
        ("client.conf", "librdkafka clients (confluent-kafka, kcat -F), user alice"),
    ):
        print(f"  {name:<19} {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
