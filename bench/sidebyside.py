"""Side-by-side benchmarks: the same workloads, the same clients, kesque and Apache Kafka in one
run (``bench/run.py --against kafka``). Every figure is reported for both brokers with the
kesque/Kafka ratio, the 1-minute load average when it was taken, and, over several runs
(``--runs 2``), the spread between the runs.

Both brokers run at the same time (one partition count, log flush defaults, data dirs under the
same ``--data-dir``); each workload runs on one, then on the other, the order flipping from one
workload to the next, so a neighbour's burst cannot always land on the same broker. Before each
measured run the harness waits (up to ``--load-wait`` seconds) for the 1-minute load average to
fall below ``--max-load``.

The clients: confluent-kafka (librdkafka, Python), kcat (librdkafka, C) for the consume figure,
and Kafka's own perf tools (org.apache.kafka.tools.ProducerPerformance, ConsumerPerformance,
EndToEndLatency) in a JVM of their own. Nothing here asserts on timing.

    python bench/sidebyside.py a.json b.json   # the table of two result files, with the spread
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time

import figures

MB = 1e6
BROKERS = ("kesque", "kafka")
SBS_GROUPS = ("startup", "produce", "consume", "small", "latency")

SCALES = {  # bytes per produce figure (confluent; perf_bytes: Kafka's tool, about 5x slower), the consume
    # topic, small round trips, latency run
    "full": {
        "produce_bytes": 1 << 30,
        "perf_bytes": 256 << 20,
        "consume_bytes": 1 << 30,
        "small": 5000,
        "latency_seconds": 15.0,
        "latency_warmup": 2.0,
        "e2e_records": 5000,
        "load_wait": 30.0,
    },
    "quick": {
        "produce_bytes": 24 << 20,
        "perf_bytes": 24 << 20,
        "consume_bytes": 96 << 20,
        "small": 1000,
        "latency_seconds": 3.0,
        "latency_warmup": 0.5,
        "e2e_records": 500,
        "load_wait": 10.0,
    },
}
PRODUCE_CASES = [(size, acks, codec) for size in (1024, 16384) for acks in ("1", "all") for codec in ("none", "lz4")]
LATENCY_RATE = 10_000
WARM_UP_RECORDS, WARM_UP_REQUESTS = 64_000, 5_000  # per broker after its start, unmeasured
PERF_JVM = ["-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]  # Kafka's scripts' perf tools, full JIT
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


# ================================================================== machine state


def loadavg() -> float:
    return os.getloadavg()[0]


def settle(max_load: float, max_wait: float) -> tuple[float, float]:
    """Wait (at most ``max_wait`` s) for the 1-minute load average to fall below ``max_load``:
    (load average when measuring starts, seconds waited)."""
    t0 = time.monotonic()
    while loadavg() > max_load and time.monotonic() - t0 < max_wait:
        time.sleep(2)
    return loadavg(), time.monotonic() - t0


# ================================================================== brokers


class Side:
    """One running broker of the comparison: its process, start-up time, CPU and memory."""

    def __init__(self, kind: str, data_dir: str, results: str, partitions: int):
        self.kind = kind
        self.partitions = partitions
        self.dir = tempfile.mkdtemp(prefix=f"sbs-{kind}-", dir=data_dir)
        self.results = results
        self.broker = None

    def start(self) -> None:
        cfg = {"auto.create.topics.enable": "false", "num.partitions": str(self.partitions)}
        if self.kind == "kafka":
            from kesque.testing.kafka import KafkaBroker

            self.broker = KafkaBroker(data_dir=self.dir, heap="1g", config=cfg)
            t0 = time.monotonic()
            self.broker.format()
            self.format_seconds = time.monotonic() - t0
            self.broker.start(120)
        else:
            from kesque.testing.broker import Broker

            log = os.path.join(self.results, "broker-sidebyside-kesque.log")
            if os.path.exists(log):
                os.unlink(log)
            self.broker = Broker(data_dir=self.dir, log_file=log, config={"log.dirs": self.dir, **cfg})
            self.format_seconds = 0.0
            self.broker.start(60)
        self.start_seconds = self.broker.start_seconds  # spawn -> serving (Kafka: Metadata lists the broker)
        self.pid = self.broker.process.pid
        self.idle = figures.rss_mib(self.pid)
        figures.warm_up_consumer_path(self.bootstrap)  # __consumer_offsets created, unmeasured
        self.warm_up()

    def warm_up(self) -> None:
        """Unmeasured traffic on both paths (a JVM's JIT compiles Kafka's hot paths in the first
        seconds of load; a cold one answered small requests 3-4x slower)."""
        import groups as G

        figures.create_topic(self.bootstrap, "sbs-warm-up", 1)
        t0 = time.monotonic()
        figures.produce_raw(self.bootstrap, "sbs-warm-up", 1, WARM_UP_RECORDS)
        G.produce_raw_sync(self.bootstrap, "sbs-warm-up", WARM_UP_REQUESTS, 1)
        figures.consume_raw(self.bootstrap, "sbs-warm-up", figures.end_offsets(self.bootstrap, "sbs-warm-up", 1))
        self.warm_up_seconds = time.monotonic() - t0
        delete_topic(self.bootstrap, "sbs-warm-up")

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    def cpu(self) -> float:
        from run import proc_cpu_seconds

        return proc_cpu_seconds(self.pid)

    def alive(self) -> bool:
        return self.broker.process is not None and self.broker.process.poll() is None

    def close(self) -> None:
        if self.broker is not None:
            try:
                self.broker.stop(60)
            finally:
                if self.kind == "kafka":
                    self.broker.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ================================================================== clients


def text_values(size: int, count: int = 64, seed: int = 1) -> list[bytes]:
    """Values LZ4 halves (a random half, repeated), in ASCII letters so that Kafka's
    ProducerPerformance (which reads its payloads as UTF-8 text lines) sends the same bytes."""
    rnd = random.Random(seed)
    half = size // 2
    out = []
    for _ in range(count):
        h = "".join(rnd.choices(string.ascii_letters + string.digits, k=half))
        out.append((h * 2 + "x" * (size - 2 * half)).encode())
    return out


def payload_file(size: int) -> str:
    path = os.path.join(tempfile.gettempdir(), f"kesque-sbs-payload-{size}-{os.getuid()}.txt")
    if not os.path.exists(path):
        with open(path + ".tmp", "wb") as f:
            f.write(b"\n".join(text_values(size)))
        os.replace(path + ".tmp", path)
    return path


def java(main_class: str, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    from kesque.testing import kafka

    argv = kafka.java_command(f"org.apache.kafka.tools.{main_class}", args, jvm=PERF_JVM)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def tool_failed(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}"


def produce_confluent(bootstrap: str, topic: str, records: int, size: int, acks: str, codec: str) -> dict:
    r = figures.produce_confluent(
        bootstrap, topic, records, value_size=size, compression=codec, acks=acks, values=text_values(size)
    )
    r["ok"] = not r["errors"] and not r["undelivered"]
    return r


def produce_perf_test(bootstrap: str, topic: str, records: int, size: int, acks: str, codec: str) -> dict:
    """Kafka's ProducerPerformance, the settings of the confluent figure (linger 5 ms, 1 MiB batches)."""
    props = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": codec,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "max.request.size": 16 << 20,
        "buffer.memory": 256 << 20,
        "enable.idempotence": "false",
    }
    t0 = time.perf_counter()
    r = java(
        "ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        records,
        "--throughput",
        -1,
        "--payload-file",
        payload_file(size),
        "--reporting-interval",
        600000,
        "--producer-props",
        *(f"{k}={v}" for k, v in props.items()),
    )
    wall = time.perf_counter() - t0
    m = re.search(r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"ProducerPerformance {tool_failed(r)}")
    rate = float(m.group(2))
    return {
        "records": int(m.group(1)),
        "rate": rate,
        "mb_s": rate * size / MB,
        "seconds": int(m.group(1)) / rate,
        "wall_seconds": wall,
        "avg_latency_ms": float(m.group(3)),
        "ok": int(m.group(1)) == records,
    }


def consume_kcat(bootstrap: str, topic: str, ends: dict[int, int], size: int) -> dict:
    total = sum(ends.values())
    argv = [
        KCAT,
        "-C",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-c",
        str(total),
        "-X",
        "fetch.max.bytes=67108864",
        "-X",
        "max.partition.fetch.bytes=16777216",
        "-X",
        "receive.message.max.bytes=104857600",
        "-X",
        "queued.max.messages.kbytes=1048576",
    ]
    with open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        r = subprocess.run(argv, stdout=null, stderr=subprocess.PIPE, timeout=600)
        secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"kcat exit {r.returncode}: {r.stderr.decode()[-400:]}")
    return {
        "records": total,
        "seconds": secs,
        "mb_s": total * size / secs / MB,
        "ok": True,
        "method": "kcat -C -e to /dev/null, from spawn to exit",
    }


def consume_perf_test(bootstrap: str, topic: str, ends: dict[int, int], size: int, group: str) -> dict:
    total = sum(ends.values())
    r = java(
        "ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        total,
        "--group",
        group,
        "--timeout",
        30000,
        "--fetch-size",
        16 << 20,
        "--hide-header",
    )
    rows = [ln.split(",") for ln in r.stdout.splitlines() if ln.count(",") >= 9]
    if r.returncode != 0 or not rows:
        raise RuntimeError(f"ConsumerPerformance {tool_failed(r)}")
    row = [x.strip() for x in rows[-1]]
    mib, msgs, fetch_ms = float(row[2]), int(row[4]), float(row[7])
    return {
        "records": msgs,
        "seconds": fetch_ms / 1000,
        "mb_s": mib * (1 << 20) / MB / (fetch_ms / 1000),
        "rebalance_ms": float(row[6]),
        "ok": msgs >= total,
        "method": "fetch time (after the group's join), as the tool's fetch.MB.sec",
    }


def consume_python(bootstrap: str, topic: str, ends: dict[int, int], size: int) -> dict:
    r = figures.consume_confluent(bootstrap, topic, ends)
    r["ok"] = r["records"] == r["expected"] and not r["errors"]
    return r


def e2e_java(bootstrap: str, topic: str, records: int) -> dict:
    r = java("EndToEndLatency", bootstrap, topic, records, "1", 1024)
    m = re.search(r"50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", r.stdout)
    avg = re.search(r"Avg latency: ([\d.]+) ms", r.stdout)  # a double; the percentiles are whole ms
    if r.returncode != 0 or not m:
        raise RuntimeError(f"EndToEndLatency {tool_failed(r)}")
    return {
        "records": records,
        "p50_ms": float(m.group(1)),
        "p99_ms": float(m.group(2)),
        "p999_ms": float(m.group(3)),
        "avg_ms": float(avg.group(1)) if avg else None,
        "ok": True,
    }


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer is in
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result(60)


# ================================================================== one run of the table


def codec_text(size, acks, codec) -> str:
    return f"{size // 1024} KiB, acks={acks}, {codec}"


class Table:
    """The figures of one run: name -> {kesque: {...}, kafka: {...}, unit, better}."""

    def __init__(self, log, errors: list, max_load: float, load_wait: float):
        self.rows: dict[str, dict] = {}
        self.log = log
        self.errors = errors
        self.max_load = max_load
        self.load_wait = load_wait
        self.flip = False

    def row(self, name: str, unit: str, better: str) -> dict:
        return self.rows.setdefault(name, {"figure": name, "unit": unit, "better": better})

    def put(self, name: str, unit: str, better: str, kind: str, value, load=None, note: str = "", detail=None):
        self.row(name, unit, better)[kind] = {"value": value, "load": load, "note": note, "detail": detail}

    def measure(
        self, name: str, sides: list[Side], fn, value_of, unit: str, better: str = "higher", note_of=None, extra_rows=()
    ):
        """Run ``fn(side)`` on each broker (the order flips each call), after the load settles;
        broker CPU around the call goes into the detail (``cpu_seconds``)."""
        order = sides if not self.flip else list(reversed(sides))
        self.flip = not self.flip
        out = {}
        _, waited = settle(self.max_load, self.load_wait)  # once per pair: the two runs follow each other
        for s in order:
            load = loadavg()
            c0 = s.cpu()
            try:
                r = fn(s)
            except Exception as e:  # one broken figure is reported, the others still run
                self.errors.append(f"{name} on {s.kind}: {e!r}")
                self.log(f"  {name} on {s.kind} FAILED: {e!r}")
                self.put(name, unit, better, s.kind, float("nan"), load, f"FAILED: {e!r}"[:200])
                continue
            r["cpu_seconds"] = s.cpu() - c0
            r["load"], r["load_waited"] = round(load, 2), round(waited, 1)
            waited = 0.0
            note = note_of(r) if note_of else ""
            if r.get("ok") is False:
                note = (note + "; " if note else "") + "CHECK: records missing or errors"
            self.put(name, unit, better, s.kind, value_of(r), load, note, r)
            for xname, xunit, xbetter, xvalue in extra_rows:
                self.put(xname, xunit, xbetter, s.kind, xvalue(r), load, "", None)
            out[s.kind] = r
            self.log(
                f"  {name} [{s.kind}]: {value_of(r):,.2f} {unit} (load {load:.2f}"
                f"{f', waited {waited:.0f} s' if waited >= 1 else ''})"
            )
        return out


def run_once(args, sc: dict, log, errors: list) -> dict:
    """Start both brokers, run every workload on each, stop them: one table."""
    import groups as G

    os.makedirs(args.results, exist_ok=True)
    table = Table(log, errors, args.max_load, args.load_wait if args.load_wait is not None else sc["load_wait"])
    parts = args.partitions
    sides = [Side(k, args.data_dir, args.results, parts) for k in BROKERS]
    profiles: dict = {}
    cpu = {k: {"produce_s": 0.0, "produce_bytes": 0, "consume_s": 0.0, "consume_bytes": 0} for k in BROKERS}
    try:
        for s in sides:  # one after the other, so neither start-up competes with the other
            load, _ = settle(table.max_load, table.load_wait)
            log(f"starting {s.kind} (load {load:.2f}) ...")
            s.start()
            table.put(
                "start-up time (spawn to serving)",
                "s",
                "lower",
                s.kind,
                s.start_seconds,
                load,
                f"+ {s.format_seconds:.1f} s kafka-storage format before"
                if s.kind == "kafka"
                else "python -m kesque serve until it listens",
                None,
            )
            log(f"  {s.kind} serving after {s.start_seconds:.2f} s")
        groups = args.groups

        # ------------------------------------------------------------ produce
        if "produce" in groups:
            sampler = profile_start(args, sides[0], "produce")
            for size, acks, codec in PRODUCE_CASES:
                for client, fn, nbytes in (
                    ("confluent", produce_confluent, sc["produce_bytes"]),
                    ("perf-test", produce_perf_test, sc["perf_bytes"]),
                ):
                    records = max(1, nbytes // size)
                    name = f"produce {codec_text(size, acks, codec)} ({client})"
                    log(f"produce: {records:,} x {size} B, acks={acks}, {codec}, {client} ...")

                    def one(s, fn=fn, name=name, records=records, size=size, acks=acks, codec=codec):
                        topic = "sbs-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
                        figures.create_topic(s.bootstrap, topic, parts)
                        r = fn(s.bootstrap, topic, records, size, acks, codec)
                        r["stored"] = sum(figures.end_offsets(s.bootstrap, topic, parts).values())
                        r["ok"] = r["ok"] and r["stored"] == records
                        r["topic"] = topic
                        return r

                    out = table.measure(
                        name,
                        sides,
                        one,
                        lambda r: r["mb_s"],
                        "MB/s",
                        note_of=lambda r: f"broker CPU {r['cpu_seconds']:.1f} s",
                    )
                    for kind, r in out.items():
                        cpu[kind]["produce_s"] += r["cpu_seconds"]
                        cpu[kind]["produce_bytes"] += records * size
                        side = next(x for x in sides if x.kind == kind)
                        try:  # keep the disk from filling with 16 x 256 MiB per broker
                            delete_topic(side.bootstrap, r["topic"])
                        except Exception as e:
                            errors.append(f"delete {r['topic']} on {kind}: {e!r}")
            profiles["produce"] = profile_stop(sampler)

        # ------------------------------------------------------------ consume
        if "consume" in groups:
            size = 1024
            records = sc["consume_bytes"] // size
            topic = "sbs-consume"
            ends = {}
            for s in sides:
                # confluent-kafka, acks=all (the raw pipelined producer left Kafka's topic half
                # filled under load: its answers are not retried)
                log(f"consume: filling {topic} on {s.kind} with {records:,} x 1 KiB (unmeasured) ...")
                figures.create_topic(s.bootstrap, topic, parts)
                figures.produce_confluent(
                    s.bootstrap, topic, records, value_size=size, acks="all", values=text_values(size)
                )
                ends[s.kind] = figures.end_offsets(s.bootstrap, topic, parts)
                if sum(ends[s.kind].values()) != records:
                    errors.append(f"consume fill on {s.kind}: {sum(ends[s.kind].values()):,} of {records:,} records")
            gb = sum(ends["kesque"].values()) * size / 1e9
            clients = [("confluent-kafka, Python", lambda s: consume_python(s.bootstrap, topic, ends[s.kind], size))]
            if KCAT:
                clients.append(("kcat", lambda s: consume_kcat(s.bootstrap, topic, ends[s.kind], size)))
            else:
                errors.append("consume kcat: kcat not on PATH")
            clients.append(
                (
                    "consumer-perf-test",
                    lambda s: consume_perf_test(s.bootstrap, topic, ends[s.kind], size, f"sbs-perf-{time.time_ns()}"),
                )
            )
            for client, fn in clients:
                log(f"consume: {gb:.2f} GB from offset 0, {client} ...")
                out = table.measure(
                    f"consume 1 KiB from the start ({client})",
                    sides,
                    fn,
                    lambda r: r["mb_s"],
                    "MB/s",
                    note_of=lambda r: f"broker CPU {r['cpu_seconds']:.1f} s",
                )
                for kind, r in out.items():
                    cpu[kind]["consume_s"] += r["cpu_seconds"]
                    cpu[kind]["consume_bytes"] += sum(ends[kind].values()) * size

        # ------------------------------------------------------------ small requests, one at a time
        if "small" in groups:
            n = sc["small"]
            for s in sides:
                figures.create_topic(s.bootstrap, "sbs-small", 1)
            log(f"small: {n:,} x 100 B produce round trips, one at a time ...")
            table.measure(
                "small produce, one at a time (confluent produce+flush)",
                sides,
                lambda s: G.produce_sync(s.bootstrap, "sbs-small", n),
                lambda r: r["rate"],
                "req/s",
            )
            table.measure(
                "small produce, one at a time (raw socket, window 1)",
                sides,
                lambda s: G.produce_raw_sync(s.bootstrap, "sbs-small", n, 1),
                lambda r: r["rate"],
                "req/s",
            )

        # ------------------------------------------------------------ end-to-end latency
        if "latency" in groups:
            secs = sc["latency_seconds"]
            for s in sides:
                figures.create_topic(s.bootstrap, "sbs-latency", 1)
                figures.create_topic(s.bootstrap, "sbs-e2e", 1)
            log(f"latency: {LATENCY_RATE:,} x 1 KiB/s for {secs:.0f} s, confluent-kafka ...")
            table.measure(
                f"e2e latency p50 at {LATENCY_RATE:,}/s (confluent)",
                sides,
                lambda s: figures.latency(s.bootstrap, "sbs-latency", LATENCY_RATE, secs, warmup=sc["latency_warmup"]),
                lambda r: r["p50_ms"],
                "ms",
                "lower",
                note_of=lambda r: (
                    f"max {r['max_ms']:.0f} ms, {r['measured']:,} samples"
                    + ("" if r["received"] == r["expected"] else f"; CHECK: {r['received']}/{r['expected']}")
                ),
                extra_rows=[
                    (f"e2e latency p99 at {LATENCY_RATE:,}/s (confluent)", "ms", "lower", lambda r: r["p99_ms"])
                ],
            )
            n = sc["e2e_records"]
            log(f"latency: EndToEndLatency, {n:,} x 1 KiB one at a time, acks=1 ...")
            # the tool's percentiles are whole milliseconds (p50 prints 0 below 1 ms): its average leads
            table.measure(
                "e2e latency average, one at a time (EndToEndLatency)",
                sides,
                lambda s: e2e_java(s.bootstrap, "sbs-e2e", n),
                lambda r: r["avg_ms"],
                "ms",
                "lower",
                note_of=lambda r: f"p50 {r['p50_ms']:.0f} ms, p99.9 {r['p999_ms']:.0f} ms (whole ms)",
                extra_rows=[
                    ("e2e latency p99, one at a time (EndToEndLatency, whole ms)", "ms", "lower", lambda r: r["p99_ms"])
                ],
            )

        # ------------------------------------------------------------ CPU per GB, memory
        now = loadavg()
        for s in sides:
            c = cpu[s.kind]
            if c["produce_bytes"]:
                table.put(
                    "broker CPU per GB produced (all produce figures)",
                    "CPU s/GB",
                    "lower",
                    s.kind,
                    c["produce_s"] / (c["produce_bytes"] / 1e9),
                    None,
                    f"{c['produce_s']:.0f} CPU s for {c['produce_bytes'] / 1e9:.1f} GB of payload",
                )
            if c["consume_bytes"]:
                table.put(
                    "broker CPU per GB consumed (all consume figures)",
                    "CPU s/GB",
                    "lower",
                    s.kind,
                    c["consume_s"] / (c["consume_bytes"] / 1e9),
                    None,
                    f"{c['consume_s']:.1f} CPU s for {c['consume_bytes'] / 1e9:.1f} GB",
                )
            mem = figures.rss_mib(s.pid)
            table.put(
                "broker RSS at start",
                "MiB",
                "lower",
                s.kind,
                s.idle.get("VmRSS", float("nan")),
                None,
                "after start-up, before any client",
            )
            table.put(
                "broker RSS at the end",
                "MiB",
                "lower",
                s.kind,
                mem.get("VmRSS", float("nan")),
                now,
                f"peak {mem.get('VmHWM', float('nan')):.0f} MiB" + ("" if s.alive() else "; BROKER DIED"),
            )
    finally:
        for s in sides:
            try:
                s.close()
            except Exception as e:
                errors.append(f"stop {s.kind}: {e!r}")
    for r in table.rows.values():
        k, f = (r.get(b, {}).get("value") for b in BROKERS)
        r["ratio"] = k / f if isinstance(k, (int, float)) and isinstance(f, (int, float)) and f else None
    return {"rows": list(table.rows.values()), "profiles": profiles}


def profile_start(args, side: Side, what: str):
    """``--profile``: py-spy on the kesque broker (its busy samples are its turns of ``what``)."""
    if not args.profile or side.kind != "kesque":
        return None
    import profiling

    path = os.path.join(args.results, f"profile-sidebyside-{what}.txt")
    if os.path.exists(path):
        os.unlink(path)
    return profiling.Sampler(side.pid, path), path


def profile_stop(sampler) -> dict | None:
    if sampler is None:
        return None
    import profiling

    s, path = sampler
    s.stop()
    if s.error:
        return {"error": s.error}
    summary = profiling.summarize(path)
    print(profiling.format_summary("kesque, side-by-side produce figures", summary))
    return {"file": path, **summary}


# ================================================================== runs, spread, output


def combine(runs: list[dict]) -> list[dict]:
    """One line per figure over all runs: each run's values, ratios, loads; the ratio spread."""
    order: dict[str, dict] = {}
    for i, run in enumerate(runs):
        for r in run["rows"]:
            line = order.setdefault(
                r["figure"],
                {"figure": r["figure"], "unit": r["unit"], "better": r["better"], "runs": [None] * len(runs)},
            )
            line["runs"][i] = {
                "ratio": r.get("ratio"),
                **{b: {k: (r.get(b) or {}).get(k) for k in ("value", "load", "note")} for b in BROKERS},
            }
    for line in order.values():
        ratios = [x["ratio"] for x in line["runs"] if x and x["ratio"]]
        line["ratio_spread"] = (max(ratios) / min(ratios) - 1) if len(ratios) > 1 else None
    return list(order.values())


def fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def markdown(lines: list[dict]) -> str:
    """The README table: per run kesque, Kafka, ratio (load averages), then the ratio spread."""
    n = max(len(x["runs"]) for x in lines) if lines else 0
    head = ["figure", "unit"]
    for i in range(n):
        head += [f"kesque #{i + 1}", f"Kafka #{i + 1}", f"ratio #{i + 1}"]
    head += ["spread", "load (kesque/Kafka)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for x in lines:
        cells = [x["figure"], f"{x['unit']} ({x['better']} is better)"]
        loads = []
        for r in x["runs"]:
            if not r:
                cells += ["-", "-", "-"]
                continue
            cells += [fmt(r["kesque"]["value"]), fmt(r["kafka"]["value"]), f"{r['ratio']:.2f}" if r["ratio"] else "-"]
            lk, lf = r["kesque"]["load"], r["kafka"]["load"]
            if lk is not None or lf is not None:
                loads.append(f"{fmt(lk)}/{fmt(lf)}")
        cells.append(f"{x['ratio_spread']:.0%}" if x["ratio_spread"] is not None else "-")
        cells.append(", ".join(loads) or "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def print_table(lines: list[dict]) -> None:
    rows = [("figure", "unit", "run", "kesque", "Kafka", "kesque/Kafka", "load k/K", "note")]
    for x in lines:
        for i, r in enumerate(x["runs"]):
            if not r:
                continue
            note = "; ".join(f"{b}: {r[b]['note']}" for b in BROKERS if r[b]["note"])
            rows.append(
                (
                    x["figure"] if i == 0 else "",
                    x["unit"] if i == 0 else "",
                    f"#{i + 1}",
                    fmt(r["kesque"]["value"]),
                    fmt(r["kafka"]["value"]),
                    f"{r['ratio']:.2f}" if r["ratio"] else "-",
                    f"{fmt(r['kesque']['load'])}/{fmt(r['kafka']['load'])}",
                    note,
                )
            )
        if x["ratio_spread"] is not None:
            rows.append(("", "", "spread", "", "", f"{x['ratio_spread']:.0%}", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    print()
    for i, r in enumerate(rows):
        print(
            "  ".join(c.rjust(w) if 3 <= j <= 5 and i else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths)))
            + "  "
            + r[-1]
        )
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  ----")


def main(args, report: dict, log) -> None:
    """``run.py --against kafka``: ``args.runs`` runs of the table into ``report``."""
    from kesque.testing import kafka

    reason = kafka.unavailable()
    if reason:
        raise SystemExit(f"--against kafka: {reason}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the brokers are stopped on the way out
    sc = dict(SCALES["quick" if args.quick else "full"])
    args.results = os.path.dirname(os.path.abspath(args.out))
    report["broker"] = f"kesque and Apache Kafka {kafka.kafka_version()} side by side"
    report["parameters"] = {
        **sc,
        "partitions": args.partitions,
        "groups": args.groups,
        "runs": args.runs,
        "max_load": args.max_load,
        "load_wait": args.load_wait or sc["load_wait"],
        "kafka_heap": "1g",
        "latency_rate": LATENCY_RATE,
        "kcat": KCAT,
    }
    report["runs"] = []
    for i in range(args.runs):
        log(f"side by side: run {i + 1}/{args.runs} ({'quick' if args.quick else 'full'} scale) ...")
        report["runs"].append(run_once(args, sc, log, report["errors"]))
    report["table"] = combine(report["runs"])
    report["markdown"] = markdown(report["table"])
    print_table(report["table"])
    md = os.path.splitext(args.out)[0] + ".md"
    with open(md, "w") as f:
        f.write(report["markdown"] + "\n")
    print(f"\nmarkdown table: {md}")


if __name__ == "__main__":  # the table of several result files (separate invocations), with the spread
    runs = []
    for path in sys.argv[1:]:
        with open(path) as f:
            runs += json.load(f)["runs"]
    print(markdown(combine(runs)))
