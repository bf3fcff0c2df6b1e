"""The partition replication figures (issue 14), on a 3-node kesque beside a 3-node Apache Kafka in
the same run, both with :data:`TEST_SETTINGS` (the timings of tests/test_replication.py).

* **Produce cost of replication**: confluent-kafka produce MB/s (figures.produce_confluent: the
  produce group's client and batching) of a fixed amount of 1 KiB records into a topic of RF 3
  with acks=all against one of RF 1 with acks=1, on the same three brokers; passes interleaved,
  best of each.
* **Follower catch-up**: a follower of every partition of an RF 3 topic is stopped (SIGTERM),
  ``catchup_bytes`` are produced with acks=1, the follower is started again; the figure is the
  bytes it was behind over the time from its first fetched byte to its logs' sizes equal to the
  leaders' (every ``*.log`` file of the topic in its ``log.dirs``); the time until it is back in
  every ISR (Metadata) is in the details.
* **Leader failover**: the leader of a 1-partition RF 3 topic (never the active controller) is
  SIGKILLed, or SIGTERMed (controlled shutdown); the figure is the time from the signal to the
  first acks=all Produce acknowledged by another broker (Metadata from the survivors and a
  1-record Produce, retried every ``PAUSE`` s). The node is started again and the next run waits
  until it is back in the ISR. p50 and p99 (nearest rank) over ``failover_runs`` runs.

Every function returns plain dicts; nothing asserts on timing. A failure of one part is recorded
(``errors``) with the lines of the brokers' logs that name an error, and the other parts still run.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import threading
import time
import uuid

import controller as C
import figures as F

from kesque.protocol.api_keys import ApiKeys

# the timings of tests/test_replication.py: a dead broker is fenced after 3 s without heartbeat
TEST_SETTINGS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "auto.create.topics.enable": "false",
}
PAUSE = 0.01  # between two probes of the failover
PROBE_TIMEOUT_MS = 2000  # the Produce's own timeout (acks=all waits at most this long for the ISR)
PROBLEM = re.compile(r"^Traceback|\] (ERROR|CRITICAL) ")  # kesque's and Kafka's log layout
TIMESTAMP = re.compile(r"^\[[^]]*\] ")


# ------------------------------------------------------------------ a small raw client
class Client:
    """Kept connections per node: Metadata (leader and ISR per partition), CreateTopics with explicit
    assignments, and a 1-record Produce."""

    def __init__(self, nodes: C.Nodes):
        from kesque.records.records import build_batch

        self.nodes = nodes
        self.conns: dict[int, object] = {}
        self.batch = build_batch([(None, b"p" * 100, ())])

    def conn(self, node_id: int):
        from kesque.client.wire import Connection

        c = self.conns.get(node_id)
        if c is None:
            host, _, port = self.nodes.address(node_id).rpartition(":")
            c = self.conns[node_id] = Connection(host, int(port), "bench-replication", 5.0, connect_timeout=1.0)
        return c

    def drop(self, node_id: int) -> None:
        c = self.conns.pop(node_id, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        for n in list(self.conns):
            self.drop(n)

    def call(self, via, api_key: int, build, max_version: int | None = None):
        """The answer of the first node of ``via`` that gives one (connections dropped on errors)."""
        last = None
        for n in via:
            try:
                return self.conn(n).request(api_key, build, max_version=max_version)
            except Exception as e:  # noqa: BLE001 - refused, timed out, closed: the next node
                self.drop(n)
                last = e
        raise ConnectionError(f"no node of {list(via)} answered: {last!r}")

    def partitions(self, topic: str, via=None) -> dict[int, tuple[int, tuple[int, ...]]]:
        """partition -> (leader, isr); empty while the topic is unknown."""
        from kesque.client.wire import make

        def build(mod, v):
            rq = mod.request
            return make(
                rq.MetadataRequest,
                topics=(make(rq.MetadataRequestTopic, name=topic, topic_id=None),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
                include_cluster_authorized_operations=False,
            )

        resp = self.call(via or self.nodes.ids, ApiKeys.METADATA, build, max_version=12)
        t = next((t for t in resp.topics if t.name == topic), None)
        if t is None or int(t.error_code) != 0:
            return {}
        return {
            int(p.partition_index): (int(p.leader_id), tuple(sorted(int(x) for x in p.isr_nodes))) for p in t.partitions
        }

    def create(self, topic: str, assignments: list[list[int]]) -> None:
        """CreateTopics with replicas given per partition (the first is the preferred leader), then
        until every partition has its first replica as leader and every replica in the ISR."""
        from kesque.client.wire import make

        def build(mod, v):
            rq = mod.request
            return make(
                rq.CreateTopicsRequest,
                timeout=30000,
                validate_only=False,
                topics=(
                    make(
                        rq.CreatableTopic,
                        name=topic,
                        num_partitions=-1,
                        replication_factor=-1,
                        configs=(),
                        assignments=tuple(
                            make(rq.CreatableReplicaAssignment, partition_index=i, broker_ids=tuple(r))
                            for i, r in enumerate(assignments)
                        ),
                    ),
                ),
            )

        code = int(self.call(self.nodes.ids, ApiKeys.CREATE_TOPICS, build).topics[0].error_code)
        if code != 0:
            raise RuntimeError(f"CreateTopics {topic}: error {code}")
        want = {i: (r[0], tuple(sorted(r))) for i, r in enumerate(assignments)}
        wait(lambda: self.partitions(topic) == want, 60, f"{topic}: leaders and full ISRs {want}")

    def produce(self, node_id: int, topic: str, partition: int = 0) -> int:
        """One acks=all Produce of one record to ``node_id``: its error code (-1: no answer)."""
        from kesque.client.wire import make

        def build(mod, v):
            rq = mod.request
            return make(
                rq.ProduceRequest,
                transactional_id=None,
                acks=-1,
                timeout=PROBE_TIMEOUT_MS,
                topic_data=(
                    make(
                        rq.TopicProduceData,
                        name=topic,
                        partition_data=(make(rq.PartitionProduceData, index=partition, records=self.batch),),
                    ),
                ),
            )

        try:
            resp = self.conn(node_id).request(ApiKeys.PRODUCE, build, max_version=11)
        except Exception:  # noqa: BLE001 - the node is gone or closed the connection
            self.drop(node_id)
            return -1
        return int(resp.responses[0].partition_responses[0].error_code)


def wait(predicate, timeout: float, what: str, pause: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # noqa: BLE001 - a node restarting: ask again
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(pause)


def spread(ids: list[int], partitions: int, rf: int) -> list[list[int]]:
    """Round-robin replica lists, as both brokers place them by default (explicit, so equal on both)."""
    return [[ids[(p + k) % len(ids)] for k in range(rf)] for p in range(partitions)]


def log_bytes(data_dir: str, topic: str, partitions: int) -> list[int]:
    """The size of every partition's ``*.log`` files (the record batches, byte for byte as the leader's)."""
    out = []
    for p in range(partitions):
        d = os.path.join(data_dir, f"{topic}-{p}")
        try:
            out.append(sum(e.stat().st_size for e in os.scandir(d) if e.name.endswith(".log")))
        except OSError:
            out.append(0)
    return out


def cpu_seconds(nodes: C.Nodes) -> float:
    """CPU seconds of the live nodes' processes so far."""
    return sum(cpu_split(nodes))


def cpu_split(nodes: C.Nodes) -> tuple[float, float]:
    """(user, system) CPU seconds of the live nodes' processes so far."""
    from run import proc_cpu_times

    times = [proc_cpu_times(pid) for pid in map(nodes.pid, nodes.ids) if pid is not None]
    return sum(u for u, _s in times), sum(s for _u, s in times)


def kernel_ceiling(out: dict) -> dict:
    """The RF 3 / RF 1 throughput ratio if the brokers' user-space CPU cost nothing. On a machine
    whose cores the brokers and the client keep busy, throughput is cores / CPU per MB, so the
    ratio is bounded by (kernel + client CPU per MB of RF 1) / (the same of RF 3): the kernel's
    part (page-cache writes, loopback copies, TCP) and the client's are what no broker code
    removes. ``ratio``: from the best passes (the pair the figure compares); ``passes``: per pass
    pair, (measured ratio, ceiling)."""

    def floor(r):
        return r["kernel_ms_per_mb"] + r["client_ms_per_mb"]

    b1, b3 = out["rf1"]["best"], out["rf3"]["best"]
    return {
        "ratio": floor(b1) / floor(b3) if floor(b3) else float("nan"),
        "ms_per_mb": {"rf1": floor(b1), "rf3": floor(b3)},
        "busy": {"rf1": b1["busy"], "rf3": b3["busy"]},
        "passes": [
            (r3["mb_s"] / r1["mb_s"], floor(r1) / floor(r3) if floor(r3) else float("nan"))
            for r1, r3 in zip(out["rf1"]["passes"], out["rf3"]["passes"])
        ],
    }


# ------------------------------------------------------------------ 1. produce cost of replication
CASES = (("rf1", 1, 1), ("rf3", 3, "all"))


def throughput(nodes: C.Nodes, client: Client, records: int, partitions: int, passes: int, log=print) -> dict:
    """Best of ``passes`` interleaved passes of RF 1 acks=1 and RF 3 acks=all, each into a fresh topic."""
    from run import self_cpu_seconds

    values = F.value_pool(F.KIB)
    out: dict = {key: {"passes": []} for key, _rf, _acks in CASES}
    for i in range(passes):
        for key, rf, acks in CASES:
            topic = f"repl-{key}-{i}"
            client.create(topic, spread(nodes.ids, partitions, rf))
            (u0, s0), c0 = cpu_split(nodes), self_cpu_seconds()  # the client runs in this process
            r = F.produce_confluent(nodes.bootstrap(), topic, records, acks=acks, values=values)
            (u1, s1), c1 = cpu_split(nodes), self_cpu_seconds()
            mb = r["payload_bytes"] / F.MB
            r["cluster_cpu_seconds"] = (u1 - u0) + (s1 - s0)
            r["cluster_user_seconds"], r["cluster_system_seconds"] = u1 - u0, s1 - s0
            r["kernel_ms_per_mb"] = (s1 - s0) / mb * 1000
            r["client_ms_per_mb"] = (c1 - c0) / mb * 1000
            r["busy"] = (r["cluster_cpu_seconds"] + c1 - c0) / (r["seconds"] * (os.cpu_count() or 1))
            r["stored"] = sum(F.end_offsets(nodes.bootstrap(), topic, partitions).values())
            out[key]["passes"].append(r)
            log(
                f"    {nodes.kind} pass {i + 1}/{passes}: RF {rf} acks={acks}: {r['mb_s']:.0f} MB/s "
                f"({r['stored']:,}/{records:,} stored, cluster CPU {r['cluster_cpu_seconds']:.1f} s, "
                f"{r['cluster_system_seconds'] / (r['cluster_cpu_seconds'] or 1):.0%} system; client "
                f"{r['client_ms_per_mb']:.1f} ms/MB; cores busy {r['busy']:.0%})"
            )
    for key, _rf, _acks in CASES:
        best = max(out[key]["passes"], key=lambda r: r["mb_s"])
        out[key].update(mb_s=best["mb_s"], best=best)
        out[key]["checks"] = [
            f"{r['stored']:,} of {records:,} stored, {r['undelivered']} undelivered, errors {r['errors'][:2]}"
            for r in out[key]["passes"]
            if r["stored"] != records or r["undelivered"] or r["errors"]
        ]
    out["ceiling"] = kernel_ceiling(out)
    return out


# ------------------------------------------------------------------ 2. follower catch-up
def catch_up(nodes: C.Nodes, client: Client, nbytes: int, partitions: int, log=print) -> dict:
    """A follower (of every partition, never the active controller) stopped, ``nbytes`` produced with
    acks=1, the follower restarted: bytes behind / (first fetched byte -> logs equal the leaders')."""
    active = C.leader(nodes.bootstrap())
    follower = next(n for n in reversed(nodes.ids) if n != active)
    leaders = [n for n in nodes.ids if n != follower]
    topic = "repl-catchup"
    # leadership alternates between the two others: the follower fetches from both (one fetcher each)
    client.create(topic, [[leaders[p % 2], leaders[(p + 1) % 2], follower] for p in range(partitions)])
    t = time.monotonic()
    nodes.stop(follower)
    wait(
        lambda: all(follower not in isr for _l, isr in client.partitions(topic, leaders).values()),
        120,
        f"node {follower} out of the ISRs of {topic} after its SIGTERM",
    )
    shrink = time.monotonic() - t
    records = nbytes // F.KIB
    log(
        f"    {nodes.kind}: node {follower} stopped (out of the ISRs after {shrink:.1f} s), "
        f"{records:,} x 1 KiB acks=1 ..."
    )
    r = F.produce_confluent(nodes.bootstrap(leaders), topic, records, acks=1)
    wait(
        lambda: sum(F.end_offsets(nodes.bootstrap(leaders), topic, partitions).values()) >= records,
        300,
        f"{topic}: high watermarks at {records:,} (the other follower caught up)",
    )
    owner = {p: leader for p, (leader, _isr) in client.partitions(topic, leaders).items()}
    target = [log_bytes(nodes.data_dir(owner[p]), topic, partitions)[p] for p in range(partitions)]
    start = log_bytes(nodes.data_dir(follower), topic, partitions)
    behind = sum(target) - sum(start)

    seen: dict[str, float] = {}
    done = threading.Event()

    def watch():  # the follower's log sizes every 10 ms, its ISR membership every 100 ms
        last_isr = 0.0
        while not done.is_set():
            now = time.monotonic()
            sizes = log_bytes(nodes.data_dir(follower), topic, partitions)
            if "first_byte" not in seen and sum(sizes) > sum(start):
                seen["first_byte"] = now
            if "equal" not in seen and all(s >= t for s, t in zip(sizes, target)):
                seen["equal"] = now
            if "isr" not in seen and now - last_isr > 0.1:
                last_isr = now
                try:
                    if all(follower in isr for _l, isr in client.partitions(topic, leaders).values()):
                        seen["isr"] = time.monotonic()
                except Exception:  # noqa: BLE001
                    pass
            if "equal" in seen and "isr" in seen:
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    t0 = time.monotonic()
    watcher.start()
    try:
        nodes.restart(follower)
        ready = time.monotonic() - t0
        watcher.join(600)
    finally:
        done.set()
    if "equal" not in seen or "isr" not in seen:
        raise TimeoutError(
            f"node {follower} not caught up within 600 s of its restart: {sorted(seen)} "
            f"(log bytes {sum(log_bytes(nodes.data_dir(follower), topic, partitions)):,} of "
            f"{sum(target):,})"
        )
    first = seen.get("first_byte", t0)
    seconds = seen["equal"] - first
    log(
        f"    {nodes.kind}: node {follower} {behind / 1e6:.0f} MB behind, caught up in {seconds:.2f} s after its "
        f"first fetched byte ({first - t0:.2f} s after the restart), back in the ISRs after {seen['isr'] - t0:.2f} s"
    )
    return {
        "follower": follower,
        "leaders": sorted(set(owner.values())),
        "bytes_behind": behind,
        "seconds": seconds,
        "mb_s": behind / seconds / F.MB,
        "restart_to_first_byte": first - t0,
        "restart_ready": ready,
        "restart_to_isr": seen["isr"] - t0,
        "restart_to_equal": seen["equal"] - t0,
        "isr_shrink_after_stop": shrink,
        "produce": {k: r[k] for k in ("mb_s", "undelivered", "errors")},
    }


# ------------------------------------------------------------------ 3. leader failover
def first_ack(client: Client, topic: str, victim: int, survivors: list[int], t0: float, timeout: float = 120.0) -> dict:
    """From ``t0``: Metadata from the survivors, then an acks=all Produce to the leader it names,
    until one is acknowledged by a leader other than ``victim``."""
    codes: collections.Counter = collections.Counter()
    tries = 0
    while time.monotonic() - t0 < timeout:
        try:
            leader = client.partitions(topic, survivors).get(0, (-1, ()))[0]
        except Exception:  # noqa: BLE001 - no survivor answered: again
            leader = -1
        if leader >= 0 and leader != victim:
            tries += 1
            code = client.produce(leader, topic)
            if code == 0:
                return {
                    "seconds": time.monotonic() - t0,
                    "new_leader": leader,
                    "produce_tries": tries,
                    "errors": dict(codes),
                }
            codes[code] += 1
        time.sleep(PAUSE)
    raise TimeoutError(
        f"{topic}: no acks=all write acknowledged by a new leader within {timeout:.0f} s of "
        f"node {victim}'s signal (answers {dict(codes)})"
    )


def failover(nodes: C.Nodes, client: Client, runs: int, how: str, log=print) -> dict:
    """``how``: "kill" (SIGKILL) or "term" (SIGTERM: controlled shutdown). ``runs`` times on a fresh
    1-partition RF 3 topic led by a node that is not the active controller."""
    out = []
    for i in range(runs):
        active = C.leader(nodes.bootstrap())
        others = [n for n in nodes.ids if n != active]
        victim = others[i % len(others)]
        survivors = [n for n in nodes.ids if n != victim]
        topic = f"repl-failover-{how}-{i}-{uuid.uuid4().hex[:6]}"
        client.create(topic, [[victim] + survivors])
        # the leader may answer UNKNOWN_TOPIC_OR_PARTITION until it has applied the topic's records itself
        wait(lambda: client.produce(victim, topic) == 0, 30, f"{topic}: an acks=all write to node {victim}")
        stopper = None
        t0 = time.monotonic()
        if how == "kill":
            nodes.kill(victim)
        else:
            stopper = threading.Thread(target=nodes.stop, args=(victim,))
            stopper.start()
        r = first_ack(client, topic, victim, survivors, t0)
        if stopper is not None:
            stopper.join()
            r["exited_after"] = time.monotonic() - t0
        client.drop(victim)
        r.update(run=i + 1, victim=victim, active_controller=active)
        out.append(r)
        log(
            f"    {nodes.kind} {how} {i + 1}/{runs}: leader {victim} -> {r['new_leader']} acknowledged after "
            f"{r['seconds']:.2f} s ({r['produce_tries']} tries, errors {r['errors']})"
        )
        nodes.restart(victim)
        wait(
            lambda: victim in client.partitions(topic, survivors).get(0, (-1, ()))[1],
            120,
            f"{topic}: node {victim} back in the ISR after its restart",
        )
    seconds = [r["seconds"] for r in out]
    return {"runs": out, "seconds": seconds, "p50": C.percentile(seconds, 50), "p99": C.percentile(seconds, 99)}


# ------------------------------------------------------------------ all of one kind
def log_problems(nodes: C.Nodes, limit: int = 20) -> list[str]:
    """The ERROR lines of each node's log and, for kesque, the exception line ending each traceback;
    repeats counted (timestamps stripped)."""
    seen: collections.Counter = collections.Counter()
    for n in nodes.ids:
        try:
            with open(nodes.log_path(n), errors="replace") as f:
                in_traceback = False
                for line in f:
                    line = line.rstrip()
                    if in_traceback and line and not line[0].isspace():
                        in_traceback = False
                        seen[f"node {n}: {line[:300]}"] += 1
                    elif PROBLEM.search(line):
                        in_traceback = nodes.kind == "kesque" and line.startswith("Traceback")
                        if not in_traceback:
                            seen[f"node {n}: {TIMESTAMP.sub('', line)[:300]}"] += 1
        except OSError:
            pass
    return [f"{line} (x{count})" if count > 1 else line for line, count in list(seen.items())[:limit]]


def keep_logs(nodes: C.Nodes, results: str) -> list[str]:
    """Each node's log copied to ``results`` (the cluster's directories go with it)."""
    os.makedirs(results, exist_ok=True)
    paths = []
    for n in nodes.ids:
        dst = os.path.join(results, f"broker-replication-{nodes.kind}-node{n}.log")
        try:
            shutil.copyfile(nodes.log_path(n), dst)
            paths.append(dst)
        except OSError:
            pass
    return paths


def measure(kind: str, scale: dict, partitions: int, results: str, log=print) -> dict:
    """Every figure of one broker kind on one 3-node cluster with :data:`TEST_SETTINGS`:
    {"throughput", "catch_up", "kill", "term", "errors", "log_problems", "logs"}; a part that
    fails is in ``errors`` and the others still run."""
    out: dict = {"errors": []}
    log(f"  {kind}: 3 nodes, test settings ...")
    with C.CLUSTERS[kind](3, TEST_SETTINGS) as nodes:
        client = Client(nodes)
        parts = (
            (
                "throughput",
                lambda: throughput(nodes, client, scale["repl_records"], partitions, scale["repl_passes"], log),
            ),
            ("catch_up", lambda: catch_up(nodes, client, scale["catchup_bytes"], partitions, log)),
            ("kill", lambda: failover(nodes, client, scale["failover_runs"], "kill", log)),
            ("term", lambda: failover(nodes, client, scale["failover_runs"], "term", log)),
        )
        try:
            for name, fn in parts:
                try:
                    out[name] = fn()
                except Exception as e:  # noqa: BLE001 - reported; the cluster may be broken now
                    out[name] = None
                    out["errors"].append(f"{kind} {name}: {type(e).__name__}: {e}")
                    log(f"  {kind} {name} FAILED: {type(e).__name__}: {e}")
                    for n in nodes.ids:  # a node left down by the failed part is started again
                        if nodes.pid(n) is None:
                            try:
                                nodes.restart(n)
                            except Exception as e2:  # noqa: BLE001
                                out["errors"].append(f"{kind}: restart of node {n}: {e2!r}")
        finally:
            client.close()
            out["log_problems"] = log_problems(nodes)
            out["logs"] = keep_logs(nodes, results)
            for n in nodes.ids:  # SIGKILL: the last nodes' controlled shutdown would wait for a lost quorum
                if nodes.pid(n) is not None:
                    nodes.kill(n)
    return out
