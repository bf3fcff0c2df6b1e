"""One command line, four ways: Kafka's tools and kesque's tools, each against Apache Kafka and kesque.

The command lines are those of the seeds (001/002, the single-broker part that tests/test_seeds.py
also runs, typos corrected as there) and of the README tour. Each tool family runs the whole
sequence against brokers of its own (topics named ``<topic>-j`` for Kafka's tools, ``<topic>-k`` for
kesque's), so the four transcripts are independent; outputs are compared line by line after
:func:`oracle.mask`. Three comparisons per step, all against Kafka's tools on Kafka:

* ``broker``: Kafka's tools on kesque (is kesque the broker Kafka's tools expect?);
* ``tools``: kesque's tools on Kafka (do kesque's tools print what Kafka's print?);
* ``both``: kesque's tools on kesque.

Known differences are xfails naming them (docs/compatibility.md, "Differences from Apache Kafka").
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import oracle
from kesque.testing import kafka as K

pytestmark = oracle.MARKS

TOOLS = {"j": "Kafka's tools", "k": "kesque's tools"}

# (step id, command line as the seed/README writes it, stdin). {bs}: bootstrap servers, {data}: log dir.
STEPS = [
    # seed 001 §4.1.1
    (
        "411-create-rf3",
        "kafka-topics.sh --bootstrap-server {bs} --create --topic peter-test01 --partitions 1 --replication-factor 3",
        None,
    ),
    (
        "411-create",
        "kafka-topics.sh --bootstrap-server {bs} --create --topic peter-test01 --partitions 1 --replication-factor 1",
        None,
    ),
    ("411-describe", "kafka-topics.sh --bootstrap-server {bs} --topic peter-test01 --describe", None),
    ("411-produce", "kafka-console-producer.sh --bootstrap-server {bs} --topic peter-test01", "test message1\n"),
    ("411-dump-log", "kafka-dump-log.sh --print-data-log --files {data}/peter-test01-0/00000000000000000000.log", None),
    # §4.1.5
    (
        "415-create-rf2",
        "kafka-topics.sh --bootstrap-server {bs} --create --topic peter-test02 --partitions 1 --replication-factor 2",
        None,
    ),
    (
        "415-create",
        "kafka-topics.sh --bootstrap-server {bs} --create --topic peter-test02 --partitions 1 --replication-factor 1",
        None,
    ),
    ("415-describe", "kafka-topics.sh --bootstrap-server {bs} --topic peter-test02 --describe", None),
    (
        "415-produce",
        "kafka-console-producer.sh --bootstrap-server {bs} --topic peter-test02",
        "a message for peter-test02\n",
    ),
    # §4.2
    ("42-broker-configs", "kafka-configs.sh --bootstrap-server {bs} --broker 1 --describe --all", None),
    # §4.3.1 (the seed stops the console consumer with Ctrl-C; --max-messages ends it here)
    (
        "431-create",
        "kafka-topics.sh --bootstrap-server {bs} --create --topic peter-test03 --partitions 1 --replication-factor 1",
        None,
    ),
    ("431-produce", "kafka-console-producer.sh --bootstrap-server {bs} --topic peter-test03", "log1\n"),
    (
        "431-consume",
        "kafka-console-consumer.sh --bootstrap-server {bs} --topic peter-test03 --from-beginning --max-messages 1",
        None,
    ),
    (
        "431-retention",
        "kafka-configs.sh --bootstrap-server {bs} --topic peter-test03 --add-config retention.ms=0 --alter",
        None,
    ),
    ("431-describe", "kafka-topics.sh --bootstrap-server {bs} --topic peter-test03 --describe", None),
    ("431-get-offsets", "kafka-get-offsets.sh --bootstrap-server {bs} --topic peter-test03 --time -1", None),
    # README tour
    ("tour-create", "kafka-topics.sh --bootstrap-server {bs} --create --topic orders --partitions 3", None),
    ("tour-describe", "kafka-topics.sh --bootstrap-server {bs} --describe --topic orders", None),
    (
        "tour-produce",
        "kafka-console-producer.sh --bootstrap-server {bs} --topic orders --property parse.key=true "
        "--property key.separator=:",
        "k1:first order\nk2:second order\n",
    ),
    (
        "tour-consume",
        "kafka-console-consumer.sh --bootstrap-server {bs} --topic orders --from-beginning "
        "--max-messages 2 --property print.key=true --property print.offset=true "
        "--property print.partition=true",
        None,
    ),
    ("tour-get-offsets", "kafka-get-offsets.sh --bootstrap-server {bs} --topic orders", None),
    ("tour-dump-log", "kafka-dump-log.sh --print-data-log --files {data}/orders-0/00000000000000000000.log", None),
    (
        "tour-retention",
        "kafka-configs.sh --bootstrap-server {bs} --topic orders --alter --add-config retention.ms=3600000",
        None,
    ),
    ("tour-topic-configs", "kafka-configs.sh --bootstrap-server {bs} --topic orders --describe", None),
    ("tour-groups", "kafka-consumer-groups.sh --bootstrap-server {bs} --list", None),
    ("tour-transactions", "kafka-transactions.sh --bootstrap-server {bs} list", None),
]

# the differences found (docs/compatibility.md, "Differences from Apache Kafka"): step id ->
# (comparisons it fails, the difference it waits for)
RF = (
    "Kafka 4.4's replication-factor error adds 'or some brokers have all their log directories cordoned' "
    "(KIP-1066); kesque keeps the wording the seeds print"
)
ELR = (
    "Kafka 4.4 finalizes eligible.leader.replicas.version 1, which stores min.insync.replicas as a cluster-level "
    "dynamic config: every topic's describe shows 'Configs: min.insync.replicas=1'; kesque has no ELR"
)
IDEMPOTENT = (
    "kesque's console-producer is not idempotent (producer id -1); Kafka's is, as the Java producer "
    "defaults to enable.idempotence=true"
)
PROPERTY = (
    "Kafka 4.4's console tools print that --property is deprecated (--reader-property, --formatter-property) "
    "on stdout; kesque's do not"
)
PARTITIONER = "kesque's console-producer places keys with librdkafka's CRC32 partitioner, Kafka's with murmur2"
BROKER_CONFIGS = "kesque describes fewer broker configs than Kafka 4.4 (test_broker_configs_both_know_agree)"
SYNONYMS = (
    "kesque lists the broker default (DEFAULT_CONFIG:log.retention.hours=168) among a topic config's "
    "synonyms; Kafka 4.4 lists only the topic's own"
)
ON_KESQUE = {"broker", "both"}  # a broker difference shows with either tool on kesque
BY_KESQUE_TOOLS = {"tools", "both"}  # a tool difference shows with kesque's tools on either broker
KNOWN: dict[str, tuple[set[str], str]] = {
    "411-create-rf3": (ON_KESQUE, RF),
    "415-create-rf2": (ON_KESQUE, RF),
    **{step: (ON_KESQUE, ELR) for step in ("411-describe", "415-describe", "431-describe", "tour-describe")},
    "411-dump-log": (BY_KESQUE_TOOLS, IDEMPOTENT),
    "tour-dump-log": (BY_KESQUE_TOOLS, IDEMPOTENT),
    "42-broker-configs": (ON_KESQUE, BROKER_CONFIGS),
    "tour-produce": (BY_KESQUE_TOOLS, PROPERTY),
    "tour-consume": (BY_KESQUE_TOOLS, f"{PROPERTY}; {PARTITIONER}"),
    "tour-get-offsets": (BY_KESQUE_TOOLS, PARTITIONER),
    "tour-topic-configs": (ON_KESQUE, SYNONYMS),
    "tour-groups": (
        BY_KESQUE_TOOLS,
        "kesque's console-consumer leaves no group behind; Kafka's joins group "
        "console-consumer-<n>, commits, and the group stays listed (Empty)",
    ),
}

TOPICS = ("peter-test01", "peter-test02", "peter-test03", "orders")


def argv(tool: str, command: str) -> list[str]:
    script, *args = shlex.split(command)
    if tool == "j":
        return K.java_command(K.TOOLS[script], args)
    name = re.fullmatch(r"kafka-(.+)\.sh", script).group(1)
    return [sys.executable, "-m", "kesque", name, *args]


def suffixed(command: str, tool: str) -> str:
    for topic in TOPICS:
        command = re.sub(rf"\b{topic}\b", f"{topic}-{tool}", command)
    return command


def normalise(text: str, tool: str, broker) -> str:
    back = {f"{t}-{tool}": t for t in TOPICS}
    text = re.sub(r"console-consumer-\d+", "console-consumer-<n>", text)
    text = oracle.mask(text, {broker.data_dir: "<data>", **back})
    text = re.sub(r"\b(crc|CreateTime|LogAppendTime): -?\d+", r"\1: <n>", text)
    return re.sub(r"\bproducerId: \d+", "producerId: <pid>", text)


def run_steps(tool: str, broker) -> dict[str, tuple[int, list[str], str]]:
    out = {}
    for step, command, stdin in STEPS:
        line = suffixed(command, tool).format(bs=broker.bootstrap_servers, data=broker.data_dir)
        r = subprocess.run(argv(tool, line), input=stdin, capture_output=True, text=True, timeout=120)
        out[step] = (r.returncode, normalise(r.stdout, tool, broker).splitlines(), r.stderr)
    return out


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory):
    """{(tool, broker name): {step: (exit code, stdout lines, stderr)}}: each tool family on brokers of
    its own (group listings show every group of a broker), the four transcripts at once (tools mostly wait)."""
    with contextlib.ExitStack() as stack:
        pairs = {tool: stack.enter_context(oracle.brokers(tmp_path_factory)) for tool in TOOLS}
        runs = [(tool, name) for tool in TOOLS for name in pairs[tool]]
        with ThreadPoolExecutor(len(runs)) as pool:
            return dict(zip(runs, pool.map(lambda run: run_steps(run[0], pairs[run[0]][run[1]]), runs)))


COMPARISONS = {"broker": ("j", "kesque"), "tools": ("k", "kafka"), "both": ("k", "kesque")}


@pytest.mark.parametrize("comparison", sorted(COMPARISONS))
@pytest.mark.parametrize("step", [s[0] for s in STEPS])
def test_same_output(transcripts, step, comparison):
    want_code, want, _ = transcripts["j", "kafka"][step]
    code, got, err = transcripts[COMPARISONS[comparison]][step]
    fails, why = KNOWN.get(step, (set(), ""))
    if comparison in fails:
        if (code, got) == (want_code, want):
            pytest.fail(f"known difference no longer seen, remove it from KNOWN: {why}")
        pytest.xfail(why)
    assert got == want, f"{TOOLS[COMPARISONS[comparison][0]]} on {COMPARISONS[comparison][1]}\n{err}"
    assert code == want_code, err


def _configs(lines: list[str]) -> dict[str, str]:
    return {line.split("=", 1)[0].strip(): line for line in lines[1:]}


# set by KafkaBroker (a controller listener, static voters), not by kesque.Broker: only their
# defaults (the DEFAULT_CONFIG synonym) are compared
HARNESS = {
    "advertised.listeners",
    "controller.listener.names",
    "controller.quorum.voters",
    "inter.broker.listener.name",
    "listener.security.protocol.map",
    "listeners",
    # kesque.Broker sets Kafka's default explicitly: `kesque serve` without a file turns it on
    "transaction.two.phase.commit.enable",
}
# broker configs both describe, differently (docs/compatibility.md)
CONFIG_DIFFERENCES = {
    "group.consumer.assignors": "Kafka 4.4's default names the assignors (uniform,range), kesque's the classes",
    "group.coordinator.rebalance.protocols": "Kafka 4.4's default adds streams (KIP-1071), kesque has none",
    "listener.security.protocol.map": "kesque's default adds CONTROLLER:PLAINTEXT and orders the entries otherwise",
    "controller.listener.names": "kesque lists a DEFAULT_CONFIG synonym (CONTROLLER); Kafka's has no default",
    "min.insync.replicas": "Kafka 4.4 with ELR stores it as a cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG)",
    "node.id": "kesque lists a DEFAULT_CONFIG synonym (-1); Kafka's node.id has no default",
    "process.roles": "kesque lists a DEFAULT_CONFIG synonym; Kafka's process.roles has no default",
    "queued.max.request.bytes": "kesque bounds request memory by default (256 MiB); Kafka's -1 leaves it to the heap",
}


# broker configs kesque describes and Kafka 4.4 no longer has (docs/compatibility.md)
KESQUE_ONLY_CONFIGS = {
    "group.share.enable": "kesque keeps Kafka 4.0's switch for share groups (off by default); Kafka 4.2+ turns "
    "them on with the share.version feature instead",
}


def _default(line: str) -> str | None:
    m = re.search(r"DEFAULT_CONFIG:([^,}]*)", line)
    return m and m.group(1)


def test_broker_configs_both_know_agree(transcripts):
    """Of the broker configs (--describe --all), those both brokers have are described alike but for
    the documented differences, and kesque has none Kafka does not know."""
    kafka = _configs(transcripts["j", "kafka"]["42-broker-configs"][1])
    kesque = _configs(transcripts["j", "kesque"]["42-broker-configs"][1])
    differ = {
        name
        for name in set(kesque) & set(kafka)
        if (_default(kesque[name]) != _default(kafka[name]) if name in HARNESS else kesque[name] != kafka[name])
    }
    assert differ == set(CONFIG_DIFFERENCES), {n: (kesque[n], kafka[n]) for n in differ ^ set(CONFIG_DIFFERENCES)}
    extra = sorted(set(kesque) - set(kafka) - set(KESQUE_ONLY_CONFIGS))
    assert extra == [], extra
