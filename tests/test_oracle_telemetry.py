"""KIP-714 against Kafka 4.4 (the oracle): kafka-client-metrics.sh and ``kesque client-metrics``
print the same on both brokers, DescribeConfigs and ListConfigResources of CLIENT_METRICS
resources answer alike, and GetTelemetrySubscriptions / PushTelemetry give the same answers
(fields and error codes) to the same sequence of requests.

Kafka 4.4 advertises the two telemetry APIs only with a ClientTelemetryReceiver plugin, but
answers them without one; kesque serves them with ``metrics.listener`` set, so the kesque broker
here has it."""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import oracle
from kesque.protocol.api_keys import ApiKeys
from kesque.testing import kafka as K
from wire import Msg, WireClient

pytestmark = oracle.MARKS

STEPS = [
    ("alter", "--alter --name sub-a --metrics org.apache.kafka.producer.,org.apache.kafka.consumer. --interval 2000"),
    ("alter-match", "--alter --name sub-a --match client_software_name=librdkafka,client_id=app.*"),
    ("alter-b", "--alter --name sub-b --metrics * --interval 1000"),
    ("describe-name", "--describe --name sub-a"),
    ("describe-all", "--describe"),
    ("list", "--list"),
    ("bad-interval", "--alter --name sub-c --interval 50"),
    ("not-an-interval", "--alter --name sub-c --interval abc"),
    ("bad-match", "--alter --name sub-c --match nope=1"),
    ("reset-interval", "--alter --name sub-b --interval="),
    ("describe-b", "--describe --name sub-b"),
    ("delete", "--delete --name sub-a"),
    ("describe-gone", "--describe --name sub-a"),
    ("list-after", "--list"),
    ("no-name", "--alter --metrics x"),
    ("two-actions", "--list --describe"),
    # kafka-configs.sh's view of the same resources
    (
        "configs-alter",
        "configs: --alter --entity-type client-metrics --entity-name sub-d --add-config metrics=org.,interval.ms=500",
    ),
    ("configs-describe", "configs: --describe --entity-type client-metrics --entity-name sub-d"),
    ("configs-describe-all", "configs: --describe --entity-type client-metrics"),
    ("configs-delete", "configs: --alter --entity-type client-metrics --entity-name sub-d --delete-config interval.ms"),
    ("configs-bad", "configs: --alter --entity-type client-metrics --entity-name sub-d --add-config interval.ms=5"),
]


def argv(tool: str, bootstrap: str, args: str) -> list[str]:
    name, _, args = args.rpartition(": ")
    name = name or "client-metrics"
    rest = ["--bootstrap-server", bootstrap, *shlex.split(args)]
    if tool == "j":
        return K.java_command(K.TOOLS[f"kafka-{name}.sh"], rest)
    return [sys.executable, "-m", "kesque", name, *rest]


def run_steps(tool: str, broker) -> dict[str, tuple[int, str, str]]:
    out = {}
    for step, args in STEPS:
        r = subprocess.run(argv(tool, broker.bootstrap_servers, args), capture_output=True, text=True, timeout=120)
        # usage errors print jopt's option table, whose layout the tools' own tests compare
        err = r.stderr.splitlines()[0] if r.stderr.strip() else ""
        err = re.sub(r"^\[[-\d :,]+\] ", "[<time>] ", err).replace(broker.bootstrap_servers, "<bs>")
        out[step] = (r.returncode, r.stdout, err)
    return out


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """A Kafka and a kesque broker per tool family (each sequence starts from no subscription)."""
    with contextlib.ExitStack() as stack:
        yield {
            tool: stack.enter_context(
                oracle.brokers(tmp_path_factory, kesque_config={"metrics.listener": "http://127.0.0.1:0"})
            )
            for tool in ("j", "k")
        }


@pytest.fixture(scope="module")
def wire_pair(tmp_path_factory):
    with oracle.brokers(tmp_path_factory, kesque_config={"metrics.listener": "http://127.0.0.1:0"}) as b:
        yield b


@pytest.fixture(scope="module")
def transcripts(pairs):
    runs = [(tool, name) for tool in ("j", "k") for name in ("kafka", "kesque")]
    with ThreadPoolExecutor(len(runs)) as pool:
        return dict(zip(runs, pool.map(lambda run: run_steps(run[0], pairs[run[0]][run[1]]), runs)))


@pytest.mark.parametrize("run", [("j", "kesque"), ("k", "kafka"), ("k", "kesque")], ids="-".join)
@pytest.mark.parametrize("step", [s[0] for s in STEPS])
def test_client_metrics_tool_prints_what_kafkas_prints(transcripts, step, run):
    want_code, want_out, want_err = transcripts["j", "kafka"][step]
    code, out, err = transcripts[run][step]
    assert (code, out) == (want_code, want_out)
    if run[0] == "k":
        # the first line of stderr: Kafka's message (the rest is a Java stack trace or the usage)
        assert err == want_err


def _describe(c: WireClient, name: str):
    m = Msg(ApiKeys.DESCRIBE_CONFIGS, 4)
    res = m("DescribeConfigsResource", resource_type=16, resource_name=name, configuration_keys=None)
    r = c.request(
        ApiKeys.DESCRIBE_CONFIGS, 4, m(resources=(res,), include_synonyms=True, include_documentation=True)
    ).results[0]
    return (
        int(r.error_code),
        r.error_message,
        sorted(
            (
                e.name,
                e.value,
                int(e.config_source),
                e.read_only,
                e.is_sensitive,
                int(e.config_type),
                e.documentation,
                [(s.name, s.value, int(s.source)) for s in e.synonyms],
            )
            for e in r.configs
        ),
    )


def _alter(c: WireClient, name: str, ops):
    m = Msg(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1)
    configs = tuple(m("AlterableConfig", name=k, config_operation=op, value=v) for k, op, v in ops)
    res = m("AlterConfigsResource", resource_type=16, resource_name=name, configs=configs)
    r = c.request(ApiKeys.INCREMENTAL_ALTER_CONFIGS, 1, m(resources=(res,), validate_only=False)).responses[0]
    return int(r.error_code), r.error_message


def _list(c: WireClient, version: int, types=()):
    m = Msg(ApiKeys.LIST_CONFIG_RESOURCES, version)
    r = c.request(ApiKeys.LIST_CONFIG_RESOURCES, version, m.loose(resource_types=types))
    return int(r.error_code), sorted(
        (x.resource_name, int(getattr(x, "resource_type", 16))) for x in r.config_resources
    )


def _get(c: WireClient, instance=None):
    m = Msg(ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS, 0)
    r = c.request(ApiKeys.GET_TELEMETRY_SUBSCRIPTIONS, 0, m(client_instance_id=instance or uuid.UUID(int=0)))
    shape = (
        int(r.error_code),
        list(r.accepted_compression_types),
        int(r.push_interval.total_seconds() * 1000),
        int(r.telemetry_max_bytes),
        r.delta_temporality,
        sorted(r.requested_metrics),
    )
    return r.client_instance_id, int(r.subscription_id), shape


def _push(c: WireClient, instance, sub: int, data: bytes = b"", codec: int = 0, terminating: bool = False) -> int:
    m = Msg(ApiKeys.PUSH_TELEMETRY, 0)
    req = m(
        client_instance_id=instance, subscription_id=sub, terminating=terminating, compression_type=codec, metrics=data
    )
    return int(c.request(ApiKeys.PUSH_TELEMETRY, 0, req).error_code)


def _wire_session(broker) -> list:
    """The same requests to one broker, the answers in a list."""
    host, port = broker.bootstrap_servers.split(":")
    out = []
    with WireClient((host, int(port)), client_id="app-1") as c:
        out.append(("alter-bad-key", _alter(c, "w", [("nope", 0, "1")])))
        out.append(("alter-empty-name", _alter(c, "", [("metrics", 0, "x")])))
        out.append(("describe-unset", _describe(c, "w")))
        out.append(("describe-empty-name", _describe(c, "")[:1]))
        out.append(
            ("alter", _alter(c, "w", [("metrics", 0, "org.apache.kafka.producer."), ("interval.ms", 0, "60000")]))
        )
        out.append(("alter-match", _alter(c, "w", [("match", 0, " client_id = app-.* ")])))
        # Kafka's broker answers the alter before it applies it from the metadata log:
        # describe until the match shows (or 10 s), as a client reading its own write would
        deadline = time.monotonic() + 10
        described = _describe(c, "w")
        while time.monotonic() < deadline and not any(e[0] == "match" and e[1] for e in described[2]):
            time.sleep(0.2)
            described = _describe(c, "w")
        out.append(("describe", described))
        out.append(("list-v0", _list(c, 0)))
        out.append(("list-v1-client-metrics", _list(c, 1, (16,))))
        out.append(("list-v1-bad-type", _list(c, 1, (99,))[:1]))
        # a client that matches: the subscription's metrics and interval
        iid, sub, shape = _get(c)
        out.append(("get", (shape, iid != uuid.UUID(int=0))))
        out.append(("get-again-early", _get(c, iid)[2]))
        out.append(("push", _push(c, iid, sub)))
        out.append(("push-early", _push(c, iid, sub)))
        out.append(("push-terminating-wrong-sub", _push(c, iid, sub + 1, terminating=True)))
        out.append(("push-after-terminating", _push(c, iid, sub)))
        iid, sub, _ = _get(c)
        out.append(("push-unknown-codec", _push(c, iid, sub, codec=9)))
        iid, sub, _ = _get(c)
        out.append(("push-too-large", _push(c, iid, sub, data=b"\x00" * 1048577)))
        out.append(("push-zero-id", _push(c, uuid.UUID(int=0), sub)))
        out.append(("push-unknown-instance-wrong-sub", _push(c, uuid.uuid4(), 12345)))
    with WireClient((host, int(port)), client_id="other") as c:
        # a client no subscription matches: nothing to push, the default interval
        out.append(("get-unmatched", _get(c)[2]))
        out.append(("delete", _alter(c, "w", [("metrics", 1, None), ("interval.ms", 1, None), ("match", 1, None)])))
        # Kafka's broker applies the deletion from the metadata log a moment later
        deadline = time.monotonic() + 10
        while _list(c, 1, (16,))[1] and time.monotonic() < deadline:
            time.sleep(0.2)
        out.append(("list-after-delete", _list(c, 1, (16,))))
    return out


def test_telemetry_requests_answer_as_kafkas(wire_pair):
    want = _wire_session(wire_pair["kafka"])
    got = _wire_session(wire_pair["kesque"])
    assert dict(got) == dict(want)
