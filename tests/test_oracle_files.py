"""The files on disk after the same produce sequence on Apache Kafka and on kesque.

Both brokers get the same batches (built here, fixed timestamps, one idempotent producer), roll
segments at the same sizes, apply DeleteRecords and size-based retention, and are stopped cleanly.
Then every file of the test topics' partition directories and the log directory's checkpoints are
compared: segment, ``.index`` and ``.timeindex`` bytes, producer snapshots, ``leader-epoch-checkpoint``,
``partition.metadata`` (topic id masked), ``replication-offset-checkpoint``,
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and ``meta.properties`` (ids
masked). Files only one broker writes are listed in docs/compatibility.md.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import oracle
from kesque.protocol.api_keys import ApiKeys
from wire import Api, Msg, WireClient, build_batch

pytestmark = oracle.MARKS

# Kafka's smallest segment (segment.bytes >= 1 MiB); index entries every 4 KiB (the default);
# retention checked every 500 ms; checkpoints at shutdown
CONFIG = {"log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0"}
SEGMENT = 1 << 20
PLAIN, IDEMPOTENT, DELETED, RETAINED = "plain", "idem", "deleted", "retained"
TOPICS = {
    PLAIN: {"segment.bytes": str(SEGMENT)},
    IDEMPOTENT: {"segment.bytes": str(SEGMENT)},
    DELETED: {"segment.bytes": str(SEGMENT)},
    RETAINED: {"segment.bytes": str(SEGMENT)},
}
BATCHES = 500  # 2750 records, ~2.8 segments
# root files Kafka and kesque both keep, compared by content
ROOT_CHECKPOINTS = (
    "replication-offset-checkpoint",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def batches(t0: int, producer_id: int = -1):
    """1 to 10 records of ~1 KB a batch, so some batches cross index.interval.bytes and some do not."""
    n = 0
    for i in range(BATCHES):
        records = [(b"k%d" % (n + j), (b"%06d" % (n + j)) * 170, (), t0 + i * 100 + j) for j in range(1 + i % 10)]
        if producer_id < 0:
            yield build_batch(records)
        else:
            yield build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=n)
        n += len(records)


def init_producer_id(client: WireClient) -> int:
    m = Msg(ApiKeys.INIT_PRODUCER_ID, 4)
    request = m(transactional_id=None, transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
    r = wait_until(
        lambda: (r := client.request(ApiKeys.INIT_PRODUCER_ID, 4, request)).error_code not in (14, 15) and r,
        "the producer id manager",
    )  # COORDINATOR_LOAD_IN_PROGRESS / _NOT_AVAILABLE while starting
    assert r.error_code == 0, r
    return r.producer_id


def delete_records(client: WireClient, topic: str, offset: int) -> int:
    m = Msg(ApiKeys.DELETE_RECORDS, 2)
    r = client.request(
        ApiKeys.DELETE_RECORDS,
        2,
        m(
            topics=(
                m(
                    "DeleteRecordsTopic",
                    name=topic,
                    partitions=(m("DeleteRecordsPartition", partition_index=0, offset=offset),),
                ),
            ),
            timeout=10000,
        ),
    )
    return r.topics[0].partitions[0].error_code


def alter_topic(client: WireClient, topic: str, key: str, value: str) -> int:
    m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
    r = client.request(
        ApiKeys.INCREMENTAL_ALTER_CONFIGS,
        1,
        m(
            resources=(
                m(
                    "AlterConfigsResource",
                    resource_type=2,
                    resource_name=topic,
                    configs=(m("AlterableConfig", name=key, config_operation=0, value=value),),
                ),
            ),
            validate_only=False,
        ),
    )
    return r.responses[0].error_code


def wait_until(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def segments(broker, topic: str) -> list[str]:
    path = os.path.join(broker.data_dir, f"{topic}-0")
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def produce_sequence(broker, t0: int, names: dict[str, str]) -> dict:
    """The same sequence on one broker; returns what the requests answered."""
    answers = {}
    with WireClient(broker.bootstrap_servers, timeout=30) as c:
        api = Api(c)
        for kind, configs in TOPICS.items():
            api.create_topic(names[kind], configs=configs)
            while api.list_offsets(names[kind], -1).error_code:  # Kafka: until the leader serves it
                time.sleep(0.05)
        pid = init_producer_id(c)
        answers["producer_id"] = pid
        for kind in TOPICS:
            codes = {api.produce(names[kind], b).error_code for b in batches(t0, pid if kind == IDEMPOTENT else -1)}
            answers[f"produce {kind}"] = codes
        answers["delete records"] = delete_records(c, names[DELETED], 1234)
        answers["retention"] = alter_topic(c, names[RETAINED], "retention.bytes", str(SEGMENT + SEGMENT // 2))
    # retention removes the oldest segments until the rest fits in 1.5 segments (active one kept)
    wait_until(lambda: len(segments(broker, names[RETAINED])) <= 2, f"retention on {broker}")
    # removed segments are renamed *.deleted, then deleted after log.segment.delete.delay.ms (0 here)
    wait_until(
        lambda: (
            not any(
                e.endswith(".deleted")
                for kind in (DELETED, RETAINED)
                for e in os.listdir(os.path.join(broker.data_dir, f"{names[kind]}-0"))
            )
        ),
        f"the *.deleted files to go on {broker}",
    )
    return answers


def snapshot(directory: str, names: dict[str, str], topic_id: str | None = None) -> dict[str, bytes]:
    """{relative path: content} of the test topics' partition directories and the root checkpoints,
    topic names (and ids) replaced by their kind."""
    out = {}
    for kind, name in names.items():
        part = os.path.join(directory, f"{name}-0")
        for entry in sorted(os.listdir(part)):
            with open(os.path.join(part, entry), "rb") as f:
                out[f"{kind}-0/{entry}"] = f.read()
    topic_dirs = {f"{name}-0" for name in names.values()}
    out["/"] = "\n".join(sorted(e for e in os.listdir(directory) if e not in topic_dirs)).encode()
    for entry in (*ROOT_CHECKPOINTS, "meta.properties"):
        path = os.path.join(directory, entry)
        if os.path.exists(path):
            with open(path, "rb") as f:
                out[entry] = f.read()
    return out


def checkpoint_entries(text: bytes, names: dict[str, str]) -> tuple[list[str], list[str]]:
    """(header lines, sorted entries of the test topics with their kind for the name)."""
    lines = text.decode().splitlines()
    kinds = {name: kind for kind, name in names.items()}
    entries = sorted(" ".join([kinds[ln.split()[0]], *ln.split()[1:]]) for ln in lines[2:] if ln.split()[0] in kinds)
    return lines[:2], entries


@pytest.fixture(scope="module")
def disks(tmp_path_factory):
    """{"kafka": files, "kesque": files} after the sequence and a clean stop of both."""
    t0 = int(time.time() * 1000) - 3_600_000  # an hour ago: valid for both, the same on both
    out, answers = {}, {}
    with oracle.brokers(tmp_path_factory, CONFIG) as pair:
        names = {name: {kind: f"{kind}-{oracle.new_topic()}" for kind in TOPICS} for name in pair}

        def on(name):  # both brokers at once: the client and the retention waits mostly wait
            broker = pair[name]
            answers[name] = produce_sequence(broker, t0, names[name])
            broker.stop()
            out[name] = snapshot(broker.data_dir, names[name])

        with ThreadPoolExecutor(len(pair)) as pool:
            list(pool.map(on, pair))
    return out, answers, names


def test_same_answers(disks):
    _, answers, _ = disks
    assert answers["kesque"] == answers["kafka"]


def test_same_files(disks):
    files, _, _ = disks
    assert sorted(files["kesque"]) == sorted(files["kafka"])


# in the log directory besides the partitions (after a clean stop); docs/compatibility.md
ONLY_KAFKA: set[str] = set()
# kesque.Broker's log file (KafkaBroker keeps server.log outside); the log dir's .lock, which
# Kafka deletes at shutdown and kesque keeps (docs/compatibility.md)
ONLY_KESQUE = {"kesque.log", ".lock"}


def test_same_log_directory_entries(disks):
    files, _, _ = disks
    kafka, kesque = (set(files[name]["/"].decode().split("\n")) for name in ("kafka", "kesque"))
    assert (kafka - kesque, kesque - kafka) == (ONLY_KAFKA, ONLY_KESQUE)


@pytest.mark.parametrize("suffix", [".log", ".index", ".timeindex", ".snapshot", "leader-epoch-checkpoint"])
def test_same_bytes(disks, suffix):
    files, _, _ = disks
    paths = sorted(p for p in files["kafka"] if p.endswith(suffix) and "/" in p)
    assert paths, f"Kafka wrote no {suffix} files"
    differ = [p for p in paths if files["kesque"].get(p) != files["kafka"][p]]
    assert differ == []


@pytest.mark.parametrize("name", ROOT_CHECKPOINTS)
def test_same_checkpoints(disks, name):
    files, _, names = disks
    assert checkpoint_entries(files["kesque"][name], names["kesque"]) == checkpoint_entries(
        files["kafka"][name], names["kafka"]
    )


def test_same_meta_properties(disks):
    files, _, _ = disks

    def props(data: bytes) -> dict[str, str]:
        lines = [ln for ln in data.decode().splitlines() if ln and not ln.startswith("#")]
        return {
            k: ("<id>" if k.endswith(".id") and k != "node.id" else v) for k, v in (ln.split("=", 1) for ln in lines)
        }

    assert props(files["kesque"]["meta.properties"]) == props(files["kafka"]["meta.properties"])


def test_same_partition_metadata(disks):
    files, _, _ = disks
    for path in sorted(p for p in files["kafka"] if p.endswith("/partition.metadata")):

        def masked(data: bytes) -> list[str]:
            return [ln.split(":")[0] for ln in data.decode().splitlines()]

        assert masked(files["kesque"][path]) == masked(files["kafka"][path])
