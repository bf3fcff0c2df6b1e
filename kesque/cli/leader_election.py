"""``kafka-leader-election.sh``: preferred or unclean leader elections (Kafka's LeaderElectionCommand).

    kafka-leader-election.sh --bootstrap-server B --election-type PREFERRED|UNCLEAN
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)

The JSON file is Kafka's ``{"partitions": [{"topic": "foo", "partition": 1}]}``. Output, as
Kafka 4.4 prints it (partitions in Java HashSet order)::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: org.apache...Exception: ...

then, when some failed, ``N replica(s) could not be elected`` on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import ElectionType, KafkaException, TopicPartition

from .plumbing import admin_client
from .plumbing.errors import error_line
from .plumbing.javautil import java_hash_order, topic_partition_hash
from .plumbing.jopt import jopt_help, print_usage_and_exit, usage_or_version
from .plumbing.run import ToolExit

NAME = "leader-election"
SCRIPT = "kafka-leader-election.sh"
DESCRIPTION = (
    "This tool attempts to elect a new leader for a set of topic partitions. The type of elections "
    "supported are preferred replicas and unclean replicas."
)
HELP = "elect preferred or unclean partition leaders (kafka-leader-election.sh)"
ELECTION_TYPES = ("PREFERRED", "UNCLEAN")
ELECTION_NOT_NEEDED = 84


class _HelpOnStderr(argparse._HelpAction):
    """LeaderElectionCommand prints its help on stderr and exits 1."""

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.flush()
        sys.stderr.write(jopt_help(parser))
        raise ToolExit(1)


def configure(p) -> None:
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            action.__class__ = _HelpOnStderr
    p.add_argument(
        "--admin.config",
        dest="admin_config",
        metavar="config file",
        help="(DEPRECATED) Configuration properties files to pass to the admin client. This option will "
        "be removed in a future version. Use --command-config instead.",
    )
    p.add_argument(
        "--all-topic-partitions",
        action="store_true",
        help="Perform election on all of the eligible topic partitions based on the type of election "
        "(see the --election-type flag). Not allowed if --topic or --path-to-json-file is specified.",
    )
    p.add_argument(
        "--bootstrap-server",
        metavar="host:port",
        help="A hostname and port for the broker to connect to, in the form host:port. Multiple comma "
        "separated URLs can be given. REQUIRED.",
    )
    p.add_argument(
        "--command-config", metavar="Config file", help="Config properties file to pass to the admin client."
    )
    p.add_argument(
        "--election-type",
        metavar="election type",
        help='Type of election to attempt. Possible values are "preferred" for preferred leader '
        'election or "unclean" for unclean leader election. If preferred election is selection, '
        "the election is only performed if the current leader is not the preferred leader for the "
        "topic partition. If unclean election is selected, the election is only performed if there "
        "are no leader for the topic partition. REQUIRED.",
    ).jopt_kind = "[PREFERRED,UNCLEAN]"
    p.add_argument(
        "--partition",
        type=int,
        metavar="partition id",
        help="Partition id for which to perform an election. REQUIRED if --topic is specified.",
    )
    p.add_argument(
        "--path-to-json-file",
        metavar="Path to JSON file",
        help="The JSON file with the list  of partition for which leader elections should be performed. "
        'This is an example format. \n{"partitions":\n\t[{"topic": "foo", "partition": 1},'
        '\n\t {"topic": "foobar", "partition": 2}]\n}\nNot allowed if --all-topic-partitions '
        "or --topic flags are specified.",
    )
    p.add_argument(
        "--topic",
        metavar="topic name",
        help="Name of topic for which to perform an election. Not allowed if --path-to-json-file or "
        "--all-topic-partitions is specified.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class CommandFailed(Exception):
    pass


def parse_json(text: str) -> list[tuple[str, int]]:
    try:
        js = json.loads(text)
    except ValueError as e:
        raise CommandFailed(str(e)) from None
    if not isinstance(js, dict) or "partitions" not in js:
        raise CommandFailed('Replica election data is missing "partitions" field')
    out = [(str(item["topic"]), int(item["partition"])) for item in js["partitions"]]
    dups = sorted({tp for tp in out if out.count(tp) > 1})
    if dups:
        raise CommandFailed(
            "Replica election data contains duplicate partitions: " + "[" + ", ".join(f"{t}-{p}" for t, p in dups) + "]"
        )
    return list(dict.fromkeys(out))


def _validate(a, p) -> None:
    if not a.bootstrap_server:
        raise CommandFailed("Missing required option(s): bootstrap-server")
    if not a.election_type:
        raise CommandFailed("Missing required option(s): election-type")
    if a.election_type.upper() not in ELECTION_TYPES:
        print_usage_and_exit(
            p,
            f"Cannot convert argument '{a.election_type}' of option ['election-type']. "
            f"Value [{a.election_type}] is not one of [[PREFERRED, UNCLEAN]]",
        )
    chosen = [a.topic is not None, a.all_topic_partitions, a.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise CommandFailed(
            "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"
        )
    if a.topic is not None and a.partition is None:
        raise CommandFailed("Missing required option(s): partition")
    if a.partition is not None and a.topic is None:
        raise CommandFailed("Option partition is only allowed if topic is used")


def elect(admin, election: str, partitions: list[tuple[str, int]] | None) -> int:
    tps = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    results = admin.elect_leaders(ElectionType[election], tps).result()
    done, noop, failed = [], [], []
    for tp, err in results.items():
        key = (tp.topic, tp.partition)
        if err is None:
            done.append(key)
        elif _code(err) == ELECTION_NOT_NEEDED:
            noop.append(key)
        else:
            failed.append((key, err if isinstance(err, BaseException) else KafkaException(err)))
    order = lambda keys: java_hash_order(keys, topic_partition_hash)  # noqa: E731
    if done:
        print(
            f"Successfully completed leader election ({election}) for partitions "
            + ", ".join(f"{t}-{p}" for t, p in order(done))
        )
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in order(noop)))
    if not failed:
        return 0
    errors = dict(failed)
    for t, p in order(list(errors)):
        print(f"Error completing leader election ({election}) for partition: {t}-{p}: {error_line(errors[(t, p)])}")
    sys.stdout.flush()
    print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
    return 1


def _code(err) -> int:
    """The error code of a per-partition result (a KafkaError, or a KafkaException holding one)."""
    inner = err if hasattr(err, "code") else (err.args[0] if getattr(err, "args", None) else None)
    return inner.code() if hasattr(inner, "code") else -1


def run(a) -> int:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    try:
        _validate(a, p)
        election = a.election_type.upper()
        if a.path_to_json_file is not None:
            with open(a.path_to_json_file, encoding="utf-8") as f:
                partitions = parse_json(f.read())
        elif a.topic is not None:
            partitions = [(a.topic, a.partition)]
        else:
            partitions = None
        admin = admin_client.make_admin(a.bootstrap_server, a.command_config or a.admin_config)
        return elect(admin, election, partitions)
    except (CommandFailed, OSError) as e:
        sys.stdout.flush()
        print(str(e), file=sys.stderr)
        return 1
