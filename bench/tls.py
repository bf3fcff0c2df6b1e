"""Produce and consume MB/s over SSL against PLAINTEXT on the same kesque broker (issue 27).

One broker with a PLAINTEXT and an SSL listener (a PEM key store made by
kesque.testing.certs); confluent-kafka produces 1 KiB records (linger 5 ms, batch 1 MiB,
acks=1) and consumes them with assign() from offset 0, as bench/run.py's produce and consume
figures, on each listener in turn, interleaved, best of ``--passes``. Under TLS the broker
decrypts each produce and encrypts each fetch response (file regions read with pread: no
sendfile), and so does the client.

    python bench/tls.py                   # 300,000 records, 2 passes
    python bench/tls.py --records 1000000 --passes 3

A benchmark, not a test: it prints figures and ratios and never fails on a timing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import figures  # noqa: E402

from kesque.testing.broker import Broker  # noqa: E402
from kesque.testing.certs import CertificateAuthority  # noqa: E402
from kesque.testing.kafka import free_port  # noqa: E402


def broker_cpu(pid: int) -> float:
    """CPU seconds (user + system) the broker process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--protocol", default="TLSv1.3", help="ssl.enabled.protocols of the SSL listener")
    args = ap.parse_args(argv)

    d = tempfile.mkdtemp(prefix="kesque-bench-tls-")
    ca = CertificateAuthority()
    ca_file = ca.write_pem(os.path.join(d, "ca.pem"))
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"]).write_pem(os.path.join(d, "server.pem"))
    plain, secure = free_port(), free_port()
    broker = Broker(
        port=plain,
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": server,
            "ssl.enabled.protocols": args.protocol,
        },
    ).start()
    sides = {
        "PLAINTEXT": (f"127.0.0.1:{plain}", {}),
        "SSL": (f"127.0.0.1:{secure}", {"security.protocol": "SSL", "ssl.ca.location": ca_file}),
    }
    best: dict[tuple[str, str], dict] = {}
    try:
        for n in range(args.passes):
            for name, (bootstrap, client) in sides.items():
                topic = f"bench-{name.lower()}-{n}"
                figures.create_topic(sides["PLAINTEXT"][0], topic, args.partitions)
                cpu = broker_cpu(broker.process.pid)
                r = figures.produce_confluent(bootstrap, topic, args.records, client=client)
                r["cpu_ms_mb"] = (broker_cpu(broker.process.pid) - cpu) * 1000 / (r["payload_bytes"] / figures.MB)
                ok = not r["errors"] and not r["undelivered"]
                check = "" if ok else f" CHECK {r['errors'][:2]}"
                print(
                    f"pass {n + 1} {name:9} produce {r['mb_s']:7.1f} MB/s, broker {r['cpu_ms_mb']:.2f} CPU ms/MB{check}"
                )
                if ok and r["mb_s"] > best.get((name, "produce"), {}).get("mb_s", 0):
                    best[(name, "produce")] = r
                ends = figures.end_offsets(sides["PLAINTEXT"][0], topic, args.partitions)
                time.sleep(0.5)
                cpu = broker_cpu(broker.process.pid)
                r = figures.consume_confluent(bootstrap, topic, ends, client=client)
                r["cpu_ms_mb"] = (broker_cpu(broker.process.pid) - cpu) * 1000 / (r["payload_bytes"] / figures.MB)
                ok = r["records"] == r["expected"] and not r["errors"]
                check = "" if ok else " CHECK"
                print(
                    f"pass {n + 1} {name:9} consume {r['mb_s']:7.1f} MB/s, broker {r['cpu_ms_mb']:.2f} CPU ms/MB{check}"
                )
                if ok and r["mb_s"] > best.get((name, "consume"), {}).get("mb_s", 0):
                    best[(name, "consume")] = r
    finally:
        broker.stop()
    print(f"\n{args.records:,} x 1 KiB, {args.partitions} partitions, best of {args.passes}, {args.protocol}")
    print("(broker CPU: ms of user + system CPU per MB of payload, in the pass with the best MB/s)")
    print(f"{'figure':10} {'PLAINTEXT':>12} {'SSL':>12} {'SSL/PLAINTEXT':>14} {'CPU ms/MB PT':>13} {'SSL':>6}")
    for what in ("produce", "consume"):
        p, s = best.get(("PLAINTEXT", what)), best.get(("SSL", what))
        if p and s:
            print(
                f"{what:10} {p['mb_s']:7.1f} MB/s {s['mb_s']:7.1f} MB/s {s['mb_s'] / p['mb_s']:13.0%} "
                f"{p['cpu_ms_mb']:13.2f} {s['cpu_ms_mb']:6.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
