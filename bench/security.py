"""What security costs on kesque (issue 27), as ratios of figures measured in the same run. A
benchmark, not a test: it prints and asserts nothing on timing (exit code 0 unless the harness
breaks); what each figure checks (every record landed, ACLs in force) is printed beside it.

authz  The small-request rate (run.py's ``small``: pre-encoded 1-record ProduceRequests of
       100 B on one raw socket, window 64) on a broker whose StandardAuthorizer holds 10,000 ACLs
       (bench/authorizer.py's multi-tenant set, plus the ANONYMOUS principal's WRITE on the
       topic and CREATE on the cluster, so every request is checked against the full index and
       allowed) against a broker without an authorizer. Both run at once; passes alternate
       between them, best of N each. Bar: >= 90%. Beside the rates, requests per second of the
       broker's CPU (steadier than a rate on a machine shared with other work). The ACLs are
       shown in force: the count DescribeAcls answers, and a produce to a topic the principal
       may not write refused with TOPIC_AUTHORIZATION_FAILED.
sasl   Produce and consume MB/s (confluent-kafka, 1 KiB records, run.py's produce/consume
       settings) over a SASL_PLAINTEXT listener with SCRAM-SHA-512 against the PLAINTEXT listener
       of the same broker, passes alternating, best of N each.
sasl_ssl  The same figures over SASL_SSL (SCRAM-SHA-512, TLS 1.3, a PEM key store made by
       kesque.testing.certs) on one kesque broker against its PLAINTEXT listener, and on Apache
       Kafka 4.4 (build/kafka, heap 1g as run.py's, the same listeners, key store and SCRAM user)
       in the same run: both brokers up, the four sides' passes alternating, best of N each.
       Kafka loses sendfile under TLS (it encrypts each fetch response in the JVM) and so does
       kesque (pread, then OpenSSL through an ssl.SSLObject; Python 3.11 has no kernel TLS).

    python bench/security.py [--quick] [--only authz,sasl,sasl_ssl] [--passes N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import figures  # noqa: E402
from authorizer import many_acls  # noqa: E402
from confluent_kafka import admin as ck  # noqa: E402
from run import proc_cpu_seconds  # noqa: E402

from kesque.config.broker import STANDARD_AUTHORIZER  # noqa: E402
from kesque.errors import ErrorCode  # noqa: E402
from kesque.testing.broker import Broker  # noqa: E402
from kesque.testing.certs import CertificateAuthority  # noqa: E402
from kesque.testing.kafka import KafkaBroker, free_port  # noqa: E402

SCALES = {
    "full": {"small_requests": 200_000, "records": 1_000_000, "passes": 3},
    "quick": {"small_requests": 20_000, "records": 50_000, "passes": 1},
}
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret";'
)
SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";'
)
MAP = "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
SMALL_TOPIC = "bench-small"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def start_broker(name: str, data_dir: str, config: dict) -> Broker:
    d = tempfile.mkdtemp(prefix=f"kesque-bench-{name}-", dir=data_dir)
    b = Broker(data_dir=d, config={"log.dirs": d, "auto.create.topics.enable": "false", **config})
    b.start(60)
    b.sasl = next(
        (f"127.0.0.1:{v.rsplit(':', 1)[1]}" for v in config.get("listeners", "").split(",") if v.startswith("SASL")),
        None,
    )
    return b


def sasl_listener(mechanism: str, jaas: str) -> tuple[int, dict]:
    port = free_port()
    return port, {
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": MAP,
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": mechanism,
        f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config": jaas,
    }


# ================================================================== authz


def binding(acl) -> ck.AclBinding:
    """bench/authorizer.py's StandardAcl as a confluent-kafka AclBinding."""
    return ck.AclBinding(
        ck.ResourceType[acl.resource_type.name],
        acl.resource_name,
        ck.ResourcePatternType[acl.pattern_type.name],
        acl.principal,
        acl.host,
        ck.AclOperation[acl.operation.name],
        ck.AclPermissionType[acl.permission_type.name],
    )


def load_acls(broker: Broker, n: int) -> int:
    """``n`` ACLs: ``n - 2`` of bench/authorizer.py's set and ANONYMOUS's two; created by the
    super user over SASL PLAIN, in requests of 1,000. The count DescribeAcls answers, once it
    is all there (a broker applies the committed records a moment after CreateAcls answers)."""
    admin = ck.AdminClient(
        {
            "bootstrap.servers": broker.sasl,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        }
    )
    T, C, LIT = ck.ResourceType.TOPIC, ck.ResourceType.BROKER, ck.ResourcePatternType.LITERAL
    allow, anon = ck.AclPermissionType.ALLOW, "User:ANONYMOUS"
    bindings = [
        ck.AclBinding(T, SMALL_TOPIC, LIT, anon, "*", ck.AclOperation.WRITE, allow),
        ck.AclBinding(C, "kafka-cluster", LIT, anon, "*", ck.AclOperation.CREATE, allow),
        *map(binding, many_acls(n - 2)),
    ]
    for i in range(0, len(bindings), 1000):
        for f in admin.create_acls(bindings[i : i + 1000], request_timeout=60).values():
            f.result()
    everything = ck.AclBindingFilter(
        ck.ResourceType.ANY,
        None,
        ck.ResourcePatternType.ANY,
        None,
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    deadline = time.monotonic() + 60
    while True:
        found = len(admin.describe_acls(everything, request_timeout=60).result())
        if found >= len(bindings) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def authz(args, sc) -> dict:
    _, sasl = sasl_listener("PLAIN", PLAIN_JAAS)
    secured = {**sasl, "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}
    brokers = {}
    try:
        brokers["none"] = start_broker("authz-none", args.data_dir, {})
        brokers["acls"] = start_broker("authz-acls", args.data_dir, secured)
        log(f"authz: loading {args.acls:,} ACLs ...")
        t0 = time.perf_counter()
        described = load_acls(brokers["acls"], args.acls)
        log(f"  {described:,} ACLs described after {time.perf_counter() - t0:.1f} s")
        for b in brokers.values():
            figures.create_topic(b.bootstrap_servers, SMALL_TOPIC, 1)
            figures.warm_up_consumer_path(b.bootstrap_servers)
        refused = figures.small_raw(brokers["acls"].bootstrap_servers, "tenant000.orders.0", 2)
        n = sc["small_requests"]
        best: dict[str, dict] = {}
        per_cpu: dict[str, float] = {}
        for p in range(args.passes):
            for name, b in brokers.items():
                log(f"authz: {n:,} 1-record ProduceRequests, window 64, {name}, pass {p + 1}/{args.passes} ...")
                cpu = proc_cpu_seconds(b.process.pid)
                r = figures.small_raw(b.bootstrap_servers, SMALL_TOPIC, n)
                r["per_cpu_second"] = n / (proc_cpu_seconds(b.process.pid) - cpu)
                log(
                    f"  {r['rate']:,.0f} req/s, {r['per_cpu_second']:,.0f} per broker CPU-second, "
                    f"first answer's errors {r['first_response_errors']}"
                )
                if name not in best or r["rate"] > best[name]["rate"]:
                    best[name] = r
                if name not in per_cpu or r["per_cpu_second"] > per_cpu[name]:
                    per_cpu[name] = r["per_cpu_second"]
        stored = {
            name: sum(figures.end_offsets(b.bootstrap_servers, SMALL_TOPIC, 1).values()) for name, b in brokers.items()
        }
    finally:
        for b in brokers.values():
            b.stop(30)
            b.close()
    return {
        "acls": args.acls,
        "acls_described": described,
        "refused_errors": refused["first_response_errors"],
        "refused_as_expected": refused["first_response_errors"] == [int(ErrorCode.topic_authorization_failed)],
        "requests": n,
        "passes": args.passes,
        "rate_no_authorizer": best["none"]["rate"],
        "rate_10k_acls": best["acls"]["rate"],
        "ratio": best["acls"]["rate"] / best["none"]["rate"],
        "per_cpu_second_no_authorizer": per_cpu["none"],
        "per_cpu_second_10k_acls": per_cpu["acls"],
        "cpu_ratio": per_cpu["acls"] / per_cpu["none"],
        "errors": {name: r["first_response_errors"] for name, r in best.items()},
        "stored_records": stored,
        "expected_records": n * args.passes,
    }


# ================================================================== sasl


def sasl(args, sc) -> dict:
    _, config = sasl_listener("SCRAM-SHA-512", SCRAM_JAAS)
    b = start_broker("sasl", args.data_dir, config)
    try:
        add_scram_user(b.bootstrap_servers)
        listeners = {
            "PLAINTEXT": (b.bootstrap_servers, None),
            "SASL_PLAINTEXT": (
                b.sasl,
                {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "bench",
                    "sasl.password": "bench",
                },
            ),
        }
        records, parts = sc["records"], args.partitions
        figures.warm_up_consumer_path(b.bootstrap_servers)
        produced: dict[str, dict] = {}
        consumed: dict[str, dict] = {}
        for p in range(args.passes):
            for name, (bootstrap, client) in listeners.items():
                t = f"bench-{name.lower()}-{p}"
                figures.create_topic(b.bootstrap_servers, t, parts)
                log(f"sasl: produce {records:,} x 1 KiB over {name}, pass {p + 1}/{args.passes} ...")
                r = figures.produce_confluent(bootstrap, t, records, client=client)
                r["stored_records"] = sum(figures.end_offsets(b.bootstrap_servers, t, parts).values())
                log(f"  {r['mb_s']:.0f} MB/s, stored {r['stored_records']:,}, errors {r['errors'][:2]}")
                if name not in produced or r["mb_s"] > produced[name]["mb_s"]:
                    produced[name] = r
        topic = "bench-plaintext-0"
        ends = figures.end_offsets(b.bootstrap_servers, topic, parts)
        for p in range(args.passes):
            for name, (bootstrap, client) in listeners.items():
                log(f"sasl: consume {sum(ends.values()):,} records over {name}, pass {p + 1}/{args.passes} ...")
                r = figures.consume_confluent(bootstrap, topic, ends, client=client)
                log(f"  {r['mb_s']:.0f} MB/s, {r['records']:,}/{r['expected']:,} records")
                if name not in consumed or r["mb_s"] > consumed[name]["mb_s"]:
                    consumed[name] = r
    finally:
        b.stop(30)
        b.close()
    keep = ("mb_s", "seconds", "records", "stored_records", "expected", "errors", "undelivered")
    return {
        "records": records,
        "partitions": parts,
        "passes": args.passes,
        "produce": {k: {x: v[x] for x in keep if x in v} for k, v in produced.items()},
        "consume": {k: {x: v[x] for x in keep if x in v} for k, v in consumed.items()},
        "produce_ratio": produced["SASL_PLAINTEXT"]["mb_s"] / produced["PLAINTEXT"]["mb_s"],
        "consume_ratio": consumed["SASL_PLAINTEXT"]["mb_s"] / consumed["PLAINTEXT"]["mb_s"],
    }


# ================================================================== sasl_ssl
SSL_MAP = "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"


def sasl_ssl_config(port: int, keystore: str) -> dict:
    """A SASL_SSL listener with SCRAM-SHA-512 and a PEM key store, beside PLAINTEXT: the same
    keys for kesque and Kafka."""
    return {
        "listener.security.protocol.map": SSL_MAP,
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": keystore,
        "listener.name.sasl_ssl.ssl.enabled.protocols": "TLSv1.3",
    }


class SaslSslKafka(KafkaBroker):
    """Apache Kafka with a SASL_SSL listener beside its PLAINTEXT one."""

    def __init__(self, sasl_port: int, **kw):
        super().__init__(**kw)
        self.sasl_port = sasl_port

    def _props(self):
        props = super()._props()
        props["listeners"] += f",SASL_SSL://{self.host}:{self.sasl_port}"
        props["advertised.listeners"] += f",SASL_SSL://{self.host}:{self.sasl_port}"
        return props


def add_scram_user(bootstrap: str) -> None:
    """User bench (SCRAM-SHA-512) with kesque configs (AlterUserScramCredentials: Kafka too)."""
    r = subprocess.run(
        [sys.executable, "-m", "kesque", "configs", "--bootstrap-server", bootstrap, "--alter"]
        + ["--entity-type", "users", "--entity-name", "bench", "--add-config", "SCRAM-SHA-512=[password=bench]"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr


def sasl_ssl(args, sc) -> dict:
    d = tempfile.mkdtemp(prefix="kesque-bench-sasl-ssl-", dir=args.data_dir)
    ca = CertificateAuthority()
    ca_file = ca.write_pem(os.path.join(d, "ca.pem"))
    keystore = ca.issue("localhost", hosts=["localhost", "127.0.0.1"]).write_pem(os.path.join(d, "broker.pem"))
    kesque_port, kafka_port = free_port(), free_port()
    kesque = start_broker(
        "sasl-ssl",
        args.data_dir,
        {
            "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:{kesque_port}",
            **sasl_ssl_config(kesque_port, keystore),
        },
    )
    kafka = None
    try:
        kafka = SaslSslKafka(
            kafka_port,
            data_dir=os.path.join(d, "kafka"),
            heap="1g",
            config={"auto.create.topics.enable": "false", **sasl_ssl_config(kafka_port, keystore)},
        )
        kafka.start(120)
        secured = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca_file,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "bench",
            "sasl.password": "bench",
        }
        brokers = {"kesque": kesque, "kafka": kafka}
        for b in brokers.values():
            add_scram_user(b.bootstrap_servers)
            figures.warm_up_consumer_path(b.bootstrap_servers)
        sides = {
            "kesque PLAINTEXT": ("kesque", kesque.bootstrap_servers, None),
            "kesque SASL_SSL": ("kesque", f"127.0.0.1:{kesque_port}", secured),
            "Kafka SASL_SSL": ("kafka", f"127.0.0.1:{kafka_port}", secured),
            "Kafka PLAINTEXT": ("kafka", kafka.bootstrap_servers, None),
        }
        records, parts = sc["records"], args.partitions
        produced: dict[str, dict] = {}
        consumed: dict[str, dict] = {}
        for p in range(args.passes):
            for name, (which, bootstrap, client) in sides.items():
                admin = brokers[which].bootstrap_servers
                t = f"bench-{name.split()[1].lower()}-{p}"
                figures.create_topic(admin, t, parts)
                log(f"sasl_ssl: produce {records:,} x 1 KiB over {name}, pass {p + 1}/{args.passes} ...")
                cpu = proc_cpu_seconds(brokers[which].process.pid)
                r = figures.produce_confluent(bootstrap, t, records, client=client)
                r["broker_cpu_ms_per_mb"] = (
                    (proc_cpu_seconds(brokers[which].process.pid) - cpu)
                    * 1000
                    / max(r["payload_bytes"] / figures.MB, 1e-9)
                )
                r["stored_records"] = sum(figures.end_offsets(admin, t, parts).values())
                log(f"  {r['mb_s']:.0f} MB/s, stored {r['stored_records']:,}, errors {r['errors'][:2]}")
                if name not in produced or r["mb_s"] > produced[name]["mb_s"]:
                    produced[name] = r
        ends = {
            which: figures.end_offsets(b.bootstrap_servers, "bench-plaintext-0", parts) for which, b in brokers.items()
        }
        for p in range(args.passes):
            for name, (which, bootstrap, client) in sides.items():
                n = sum(ends[which].values())
                log(f"sasl_ssl: consume {n:,} records over {name}, pass {p + 1}/{args.passes} ...")
                cpu = proc_cpu_seconds(brokers[which].process.pid)
                r = figures.consume_confluent(bootstrap, "bench-plaintext-0", ends[which], client=client)
                r["broker_cpu_ms_per_mb"] = (
                    (proc_cpu_seconds(brokers[which].process.pid) - cpu)
                    * 1000
                    / max(r["payload_bytes"] / figures.MB, 1e-9)
                )
                log(f"  {r['mb_s']:.0f} MB/s, {r['records']:,}/{r['expected']:,} records")
                if name not in consumed or r["mb_s"] > consumed[name]["mb_s"]:
                    consumed[name] = r
    finally:
        kesque.stop(30)
        kesque.close()
        if kafka is not None:
            kafka.close()
    keep = ("mb_s", "seconds", "records", "stored_records", "expected", "errors", "undelivered", "broker_cpu_ms_per_mb")
    out = {
        "records": records,
        "partitions": parts,
        "passes": args.passes,
        "produce": {k: {x: v[x] for x in keep if x in v} for k, v in produced.items()},
        "consume": {k: {x: v[x] for x in keep if x in v} for k, v in consumed.items()},
    }
    for what, best in (("produce", produced), ("consume", consumed)):
        out[f"{what}_ratio_vs_plaintext"] = best["kesque SASL_SSL"]["mb_s"] / best["kesque PLAINTEXT"]["mb_s"]
        out[f"{what}_ratio_vs_kafka"] = best["kesque SASL_SSL"]["mb_s"] / best["Kafka SASL_SSL"]["mb_s"]
        out[f"{what}_kafka_ratio_vs_plaintext"] = best["Kafka SASL_SSL"]["mb_s"] / best["Kafka PLAINTEXT"]["mb_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke scale")
    ap.add_argument("--only", default="authz,sasl,sasl_ssl", help="authz, sasl, sasl_ssl (default: all)")
    ap.add_argument("--passes", type=int, help="passes per side (best of; default 3, 1 with --quick)")
    ap.add_argument("--acls", type=int, default=10_000)
    ap.add_argument("--records", type=int, help="records per produce pass (default 1,000,000; 50,000 with --quick)")
    ap.add_argument("--requests", type=int, help="small requests per pass (default 200,000; 20,000 with --quick)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--data-dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    sc = dict(SCALES["quick" if args.quick else "full"])
    sc["records"] = args.records or sc["records"]
    sc["small_requests"] = args.requests or sc["small_requests"]
    args.passes = args.passes or sc["passes"]
    only = args.only.split(",")
    report: dict = {"scale": sc}
    if "authz" in only:
        a = report["authz"] = authz(args, sc)
        print(
            f"small requests, StandardAuthorizer with {a['acls']:,} ACLs vs none: {a['rate_10k_acls']:,.0f} / "
            f"{a['rate_no_authorizer']:,.0f} req/s = {a['ratio']:.1%} (bar >= 90%); per broker CPU-second "
            f"{a['per_cpu_second_10k_acls']:,.0f} / {a['per_cpu_second_no_authorizer']:,.0f} = {a['cpu_ratio']:.1%}; "
            f"ACLs described {a['acls_described']:,}, refused produce "
            f"{'TOPIC_AUTHORIZATION_FAILED' if a['refused_as_expected'] else a['refused_errors']}"
        )
        if set(a["stored_records"].values()) != {a["expected_records"]} or any(any(e) for e in a["errors"].values()):
            print(f"  CHECK: stored {a['stored_records']} of {a['expected_records']}, errors {a['errors']}")
    if "sasl" in only:
        s = report["sasl"] = sasl(args, sc)
        for what in ("produce", "consume"):
            r = s[what]
            print(
                f"{what} over SASL_PLAINTEXT (SCRAM-SHA-512) vs PLAINTEXT, same broker: "
                f"{r['SASL_PLAINTEXT']['mb_s']:.0f} / {r['PLAINTEXT']['mb_s']:.0f} MB/s = {s[what + '_ratio']:.1%}"
            )
            for name, x in r.items():
                got, want = x.get("stored_records", x.get("records")), x.get("expected", s["records"])
                if got != want or x.get("errors") or x.get("undelivered"):
                    print(f"  CHECK {name}: {got} of {want} records, errors {x.get('errors')}")
    if "sasl_ssl" in only:
        s = report["sasl_ssl"] = sasl_ssl(args, sc)
        print(f"best of {s['passes']}, {s['records']:,} x 1 KiB, {s['partitions']} partitions, SCRAM-SHA-512, TLSv1.3")
        print(f"{'':8} {'side':17} {'MB/s':>7} {'broker CPU ms/MB':>17}")
        for what in ("produce", "consume"):
            for name, x in s[what].items():
                print(f"{what:8} {name:17} {x['mb_s']:7.1f} {x['broker_cpu_ms_per_mb']:17.2f}")
                got, want = x.get("stored_records", x.get("records")), x.get("expected", s["records"])
                if got != want or x.get("errors") or x.get("undelivered"):
                    print(f"  CHECK {name}: {got} of {want} records, errors {x.get('errors')}")
            print(
                f"{what}: kesque SASL_SSL / kesque PLAINTEXT {s[what + '_ratio_vs_plaintext']:.1%}, "
                f"kesque SASL_SSL / Kafka SASL_SSL {s[what + '_ratio_vs_kafka']:.1%} "
                f"(Kafka SASL_SSL / Kafka PLAINTEXT {s[what + '_kafka_ratio_vs_plaintext']:.1%})"
            )
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "security.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
