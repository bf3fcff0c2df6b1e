"""Mirror topics (issue 28): how fast a mirror copies, how far it lags, and how long a failover takes.

Two kesque brokers (processes): a source and a destination with a cluster link to it.

* ``copy``: ``--records`` 1 KiB records are produced to a ``--partitions``-partition source topic
  (figure 1's confluent-kafka producer: the source's produce rate), then a mirror topic is
  created at the destination and timed until its end offsets equal the source's: the mirror's
  catch-up MB/s, and its ratio to the source's produce rate.
* ``lag``: records produced at ``--rate`` records/s for ``--seconds``, each carrying its send
  time; a consumer of the mirror notes when each arrives: the time behind the source, p50/p99.
* ``failover``: the source is SIGKILLed and ``kesque mirrors --failover`` run at once: the time
  from the command's start to the first record the destination accepts on that topic.

* ``mm2``: with ``make mm2`` done (build/mm2: Apache Kafka's MirrorMaker 2, 4.3.1), MirrorMaker 2
  copies the same topic between the same brokers (to ``A.copied``, its default replication
  policy), timed from its start (a JVM and a Connect worker) and from its first copied record to
  its last: its MB/s beside the mirror's.

``--destination-nodes 3`` makes the destination a 3-node cluster (kesque.Cluster, combined
nodes) whose mirror topics have replication factor 3: a consumer there reads a record once the
destination's followers have it (the high watermark), so the lag figure includes the
destination's own replication. ``--steps`` runs some of the steps only.

Nothing asserts on timing.

    .venv/bin/python bench/mirror.py --records 200000
    .venv/bin/python bench/mirror.py --destination-nodes 3 --steps lag
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import figures  # noqa: E402 - bench/ is no package
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from kesque.testing.broker import Broker  # noqa: E402
from kesque.testing.cluster import Cluster  # noqa: E402

_TS = struct.Struct(">d")


def kesque(*argv: str) -> str:
    r = subprocess.run([sys.executable, "-m", "kesque", *argv], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"kesque {' '.join(argv)}: {r.stderr or r.stdout}")
    return r.stdout


def caught_up(src: str, dst: str, topic: str, partitions: int) -> bool:
    try:
        return figures.end_offsets(dst, topic, partitions) == figures.end_offsets(src, topic, partitions)
    except KafkaException:
        return False


def create_mirror(dst: str, topic: str, rf: int) -> None:
    kesque("mirrors", "--bootstrap-server", dst, "--create", "--mirror-topic", topic, "--link", "L",
           "--replication-factor", str(rf))  # fmt: skip


def copy(src: str, dst: str, records: int, partitions: int, rf: int = 1) -> dict:
    figures.create_topic(src, "copied", partitions)
    produced = figures.produce_confluent(src, "copied", records)
    t0 = time.perf_counter()
    create_mirror(dst, "copied", rf)
    while not caught_up(src, dst, "copied", partitions):
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    mb_s = produced["payload_bytes"] / seconds / figures.MB
    return {
        "source_produce_mb_s": produced["mb_s"],
        "mirror_mb_s": mb_s,
        "ratio": mb_s / produced["mb_s"],
        "payload_bytes": produced["payload_bytes"],
    }


MM2_DIR = os.path.join(os.path.dirname(HERE), "build", "mm2")


def mirror_maker(src: str, dst: str, partitions: int, payload_bytes: int, work: str) -> dict | None:
    """MirrorMaker 2 (dedicated mode) copying ``copied`` from ``src`` to ``dst``; None without build/mm2."""
    if not os.path.exists(os.path.join(MM2_DIR, ".resolved")):
        print("mm2: build/mm2 missing (make mm2): MirrorMaker 2 not measured", file=sys.stderr)
        return None
    internal = ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage", "status.storage")
    props = os.path.join(work, "mm2.properties")
    with open(props, "w") as f:
        f.write(
            f"clusters=A,B\nA.bootstrap.servers={src}\nB.bootstrap.servers={dst}\nA->B.enabled=true\n"
            "A->B.topics=copied\nB->A.enabled=false\nreplication.factor=1\nconfig.storage.replication.factor=1\n"
            + "".join(f"{k}.replication.factor=1\n" for k in internal)
            + "sync.topic.acls.enabled=false\nsync.topic.configs.enabled=false\n"
            + f"tasks.max={partitions}\n"
        )
    want = sum(figures.end_offsets(src, "copied", partitions).values())
    log = open(os.path.join(work, "mm2.log"), "w")
    t0 = time.perf_counter()
    mm = subprocess.Popen(
        ["java", "-Xmx512m", "-cp", os.path.join(MM2_DIR, "*"), "org.apache.kafka.connect.mirror.MirrorMaker", props],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    first = None
    got = 0
    try:
        while got < want and time.perf_counter() - t0 < 600:
            try:
                got = sum(figures.end_offsets(dst, "A.copied", partitions).values())
            except KafkaException:
                got = 0
            if got and first is None:
                first = time.perf_counter()
            time.sleep(0.05)
    finally:
        mm.kill()
        mm.wait()
        log.close()
    end = time.perf_counter()
    if got < want:
        return {"copied": got, "of": want, "error": "not done in 600 s (see mm2.log)"}
    return {
        "from_start_s": end - t0,
        "mb_s_from_start": payload_bytes / (end - t0) / figures.MB,
        "mb_s_after_first_record": payload_bytes / (end - first) / figures.MB,
    }


def lag(src: str, dst: str, rate: int, seconds: float, rf: int = 1) -> dict:
    figures.create_topic(src, "lagged", 1)
    create_mirror(dst, "lagged", rf)
    behind: list[float] = []
    total = int(rate * seconds)
    done = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": dst, "group.id": "bench-mirror-lag", "enable.auto.commit": False})
        c.assign([TopicPartition("lagged", 0, 0)])
        while len(behind) < total and not done.is_set():
            m = c.poll(0.2)
            if m is not None and not m.error():
                behind.append(time.time() - _TS.unpack_from(m.value())[0])
        c.close()

    reader = threading.Thread(target=consume)
    reader.start()
    p = Producer({"bootstrap.servers": src, "linger.ms": 0, "log_level": 3})
    pad = os.urandom(100 - _TS.size)
    t0 = time.perf_counter()
    for i in range(total):
        p.produce("lagged", _TS.pack(time.time()) + pad, partition=0)
        p.poll(0)
        delay = t0 + (i + 1) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    p.flush(30)
    reader.join(seconds + 60)
    done.set()
    reader.join()
    ms = sorted(1000 * b for b in behind)
    return {
        "records": len(ms),
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
    }


def failover(source: Broker, dst: str) -> dict:
    source.kill()
    t0 = time.perf_counter()
    kesque("mirrors", "--bootstrap-server", dst, "--failover", "--topics", "lagged")
    command = time.perf_counter() - t0
    p = Producer({"bootstrap.servers": dst, "linger.ms": 0, "log_level": 3, "message.timeout.ms": 30000})
    acked: list[bool] = []
    while not acked:
        p.produce("lagged", b"after failover", partition=0, on_delivery=lambda err, _m: acked.append(err is None))
        p.flush(30)
        acked = [a for a in acked if a]
    return {"failover_command_s": command, "first_write_accepted_s": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the lag figure")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--destination-nodes", type=int, default=1, help="1, or a cluster of N nodes with RF min(N, 3)")
    ap.add_argument("--steps", default="copy,mm2,lag,failover", help="which of copy,mm2,lag,failover to run")
    args = ap.parse_args(argv)
    steps = set(args.steps.split(","))
    rf = min(args.destination_nodes, 3)
    with tempfile.TemporaryDirectory(prefix="kesque-bench-mirror-") as d:
        conf = {"auto.create.topics.enable": "false"}
        src = Broker(data_dir=os.path.join(d, "src"), config=conf).start(60)
        if args.destination_nodes > 1:
            dst = Cluster(nodes=args.destination_nodes, data_dir=os.path.join(d, "dst"), config=conf).start(90)
        else:
            dst = Broker(data_dir=os.path.join(d, "dst"), config=conf).start(60)
        try:
            link = os.path.join(d, "link.properties")
            with open(link, "w") as f:
                f.write(f"bootstrap.servers={src.bootstrap_servers}\nmetadata.max.age.ms=1000\n")
            kesque("cluster-links", "--bootstrap-server", dst.bootstrap_servers, "--create", "--link", "L",
                   "--config-file", link)  # fmt: skip
            out: dict = {"destination_nodes": args.destination_nodes, "replication_factor": rf}
            if "copy" in steps:
                out["copy"] = copy(src.bootstrap_servers, dst.bootstrap_servers, args.records, args.partitions, rf)
                print(json.dumps(out["copy"]), flush=True)
            if "mm2" in steps and "copy" in steps:
                out["mm2"] = mirror_maker(
                    src.bootstrap_servers, dst.bootstrap_servers, args.partitions, out["copy"]["payload_bytes"], d
                )
                print(json.dumps(out["mm2"]), flush=True)
            if "lag" in steps:
                out["lag"] = lag(src.bootstrap_servers, dst.bootstrap_servers, args.rate, args.seconds, rf)
                print(json.dumps({**out["lag"], "replication_factor": rf}), flush=True)
            if "failover" in steps and "lag" in steps:
                out["failover"] = failover(src, dst.bootstrap_servers)
                print(json.dumps(out["failover"]), flush=True)
        finally:
            dst.stop()
            src.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
