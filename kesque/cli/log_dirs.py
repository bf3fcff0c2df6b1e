"""``kafka-log-dirs.sh``: log directory usage per broker (LogDirsCommand), as JSON::

    Querying brokers for log directories information
    Received log directory information from brokers 1
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":80,"offsetLag":0,
    "isFuture":false}],"error":null,"logDir":"/data/kafka-logs"}]}],"version":1}

Key order is the order Kafka's tool prints (it builds the JSON from HashMaps).
confluent-kafka has no DescribeLogDirs, so the request goes over :mod:`kesque.client.wire`.
"""

from __future__ import annotations

import json
import sys

from ..client.wire import Connection
from ..protocol.api_keys import ApiKeys
from ..utils import java_string_hash
from .plumbing import admin_client
from .plumbing.errors import BrokerError, error_message
from .plumbing.javautil import java_hash_order, java_hashmap_order, topic_partition_hash
from .plumbing.jopt import check_required, print_usage_and_exit, usage_or_version

NAME = "log-dirs"
SCRIPT = "kafka-log-dirs.sh"
DESCRIPTION = "This tool helps to query log directory usage on the specified brokers."
HELP = "describe log directories of brokers (kafka-log-dirs.sh)"


def configure(p) -> None:
    p.add_argument(
        "--bootstrap-server",
        metavar="The server(s) to use for bootstrapping",
        help="REQUIRED: the server(s) to use for bootstrapping",
    )
    p.add_argument(
        "--command-config",
        metavar="Admin client property file",
        help="Property file containing configs to be passed to Admin Client.",
    )
    p.add_argument(
        "--describe", action="store_true", help="Describe the specified log directories on the specified brokers."
    )
    p.add_argument(
        "--topic-list",
        default="",
        metavar="Topic list",
        help='The list of topics to be queried in the form "topic1,topic2,topic3". All topics will be '
        "queried if no topic list is specified",
    )
    p.add_argument(
        "--broker-list",
        default="",
        metavar="Broker list",
        help='The list of brokers to be queried in the form "0,1,2". All brokers in the cluster will be '
        "queried if no broker list is specified",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class Terse(Exception):
    pass


def _ordered(d: dict) -> dict:
    return {k: d[k] for k in java_hashmap_order(list(d))}


def describe_log_dirs(host: str, port: int, security=None) -> list[tuple[str, int, list]]:
    """[(log_dir, error_code, [(topic, partition, size, lag, is_future)])] of one broker."""
    with Connection(host, port, client_id="log-dirs-tool", security=security) as conn:
        resp = conn.request(ApiKeys.DESCRIBE_LOG_DIRS, lambda mod, v: mod.request.DescribeLogDirsRequest(topics=None))
    if hasattr(resp, "error_code") and int(resp.error_code):
        raise BrokerError(int(resp.error_code), None, resp.error_code.name)
    out = []
    for r in resp.results:
        parts = [
            (t.name, int(p.partition_index), int(p.partition_size), int(p.offset_lag), bool(p.is_future_key))
            for t in r.topics
            for p in t.partitions
        ]
        out.append((r.log_dir, int(r.error_code), parts))
    return out


_DIR_ERRORS = {
    57: "org.apache.kafka.common.errors.KafkaStorageException",
    56: "org.apache.kafka.common.errors.KafkaStorageException",
}


def run(a) -> int:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    check_required(p, a, "bootstrap-server")
    if not a.describe:
        print_usage_and_exit(p, 'Missing required argument "[describe]"')
    topics = {t for t in a.topic_list.split(",") if t}
    try:
        try:
            brokers_in = {int(b) for b in a.broker_list.split(",") if b}
        except ValueError as e:
            raise Terse(f'For input string: "{str(e).split(": ")[-1].strip(chr(39))}"') from None
        admin = admin_client.make_admin(a.bootstrap_server, a.command_config, "log-dirs-tool")
        md = admin.list_topics(timeout=admin_client.TIMEOUT)
        cluster = {b.id: (b.host, b.port) for b in md.brokers.values()}
        existing = set(cluster) if not brokers_in else brokers_in & set(cluster)
        missing = brokers_in - set(cluster)

        def ints(s):
            return ",".join(map(str, java_hash_order(sorted(s), lambda x: x)))

        if missing:
            raise Terse(
                f"ERROR: The given brokers do not exist from --broker-list: {ints(missing)}. Current "
                f"existent brokers: {ints(set(cluster))}"
            )
        print("Querying brokers for log directories information")
        sys.stdout.flush()
        infos = {}
        for b in existing:
            infos[b] = describe_log_dirs(*cluster[b], admin_client.command_security(a.command_config))
        print(f"Received log directory information from brokers {ints(existing)}")
        brokers_json = []
        for b in java_hash_order(sorted(infos), lambda x: x):
            dirs = []
            for log_dir in java_hash_order([d for d, _e, _p in infos[b]], java_string_hash):
                _d, err, parts = next(x for x in infos[b] if x[0] == log_dir)
                keep = [x for x in parts if not topics or x[0] in topics]
                by_tp = {(t, pn): (size, lag, fut) for t, pn, size, lag, fut in keep}
                plist = []
                for tp in java_hash_order(java_hash_order(list(by_tp), topic_partition_hash), topic_partition_hash):
                    size, lag, fut = by_tp[tp]
                    plist.append(
                        _ordered({"partition": f"{tp[0]}-{tp[1]}", "size": size, "offsetLag": lag, "isFuture": fut})
                    )
                dirs.append(
                    _ordered({"logDir": log_dir, "error": _DIR_ERRORS.get(err) if err else None, "partitions": plist})
                )
            brokers_json.append(_ordered({"broker": b, "logDirs": dirs}))
        print(json.dumps(_ordered({"version": 1, "brokers": brokers_json}), separators=(",", ":")))
    except Terse as e:
        sys.stdout.flush()
        print(str(e), file=sys.stderr)
        return 1
    except Exception as e:
        sys.stdout.flush()
        print(error_message(e), file=sys.stderr)
        return 1
    return 0
