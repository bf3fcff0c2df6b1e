"""``kesque storage`` (``kafka-storage.sh``): format a node's storage before its first start.

    kesque storage random-uuid
    kesque storage format --cluster-id ID --config server.properties [--ignore-formatted] [--standalone]
    kesque storage info --config server.properties

As Kafka's StorageTool (argparse4j: usage errors print the usage and ``kafka-storage: error: ...``
on stderr, exit 1). ``format`` writes ``meta.properties`` (version 1, cluster.id, node.id, a new
directory.id) into every log dir and the metadata log dir, and nothing else: kesque's
controller writes the bootstrap records (feature levels) into the metadata log at first start.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..config import BrokerConfig, ConfigError, parse_properties
from ..controller.controller import FEATURES, METADATA_VERSION_LEVEL
from ..metadata.snapshot import scram_record
from ..security.scram import parse_add_scram
from ..server import bootstrap
from ..storage.dirs import LogDirError, read_meta_properties, storage_dirs
from ..storage.format import format_storage, random_uuid

PROG = "kafka-storage"
# Kafka's name of kesque's metadata.version feature level
METADATA_VERSIONS = {25: "4.0-IV3"}


class _Exit(Exception):
    def __init__(self, code: int):
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse4j's behaviour: the usage and ``prog: error: message`` on stderr, exit 1."""

    def error(self, message):
        m = re.match(r"the following arguments are required: ([^,]+)", message)
        if m:
            message = f"argument {m.group(1)} is required"
        sys.stderr.write(self.format_usage())
        sys.stderr.write(f"{PROG}: error: {message}\n")
        raise _Exit(1)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="The Kafka storage tool.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    info = sub.add_parser("info", help="Get information about the Kafka log directories on this node.")
    info.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt = sub.add_parser("format", help="Format the Kafka log directories on this node.")
    fmt.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    fmt.add_argument(
        "--add-scram",
        "-S",
        action="append",
        help="A SCRAM_CREDENTIAL to add to the SCRAM credential database, e.g. "
        "'SCRAM-SHA-256=[name=alice,password=alice-secret]'",
    )
    fmt.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="When this option is passed, the format command will skip over already formatted "
        "directories rather than failing.",
    )
    fmt.add_argument(
        "--release-version",
        "-r",
        help="The release version to use for the initial feature settings (kesque has one: 4.0-IV3).",
    )
    fmt.add_argument(
        "--feature",
        "-f",
        action="append",
        help="The setting to use for a specific feature, "
        "NAME=LEVEL (kesque formats at its own levels: a "
        "level it does not use is refused).",
    )
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="Used to initialize a controller as a single-node dynamic quorum.",
    )
    quorum.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="Used to initialize a server without specifying a dynamic quorum.",
    )
    quorum.add_argument(
        "--initial-controllers",
        "-I",
        help="Used to initialize a server with the specified dynamic quorum (id@hostname:port:directory,...).",
    )
    sub.add_parser("random-uuid", help="Print a random UUID.")
    return p


def load(path: str) -> BrokerConfig:
    with open(path) as f:
        return BrokerConfig(parse_properties(f.read()), strict=False)


def run_info(config: BrokerConfig) -> int:
    dirs = sorted(storage_dirs(config))
    metas = read_meta_properties(dirs)
    problems = []
    for d in dirs:
        if not os.path.isdir(d):
            problems.append(f"{d} does not exist")
        elif metas[d] is None:
            problems.append(f"{d} is not formatted.")
    found = [d for d in dirs if os.path.isdir(d)]
    formatted = [metas[d] for d in dirs if metas[d] is not None]
    out = []
    if found:
        out.append(f"Found log director{'y' if len(found) == 1 else 'ies'}:")
        out += [f"  {d}" for d in found]
        out.append("")
    if formatted:
        shown = ", ".join(f"{k}={formatted[0][k]}" for k in sorted(formatted[0]))
        out.append(f"Found metadata: {{{shown}}}")
        out.append("")
        if len({props.get("cluster.id") for props in formatted}) > 1:
            problems.append("Mismatched cluster IDs between storage directories.")
    if problems:
        out.append(f"Found problem{'' if len(problems) == 1 else 's'}:")
        out += [f"  {p}" for p in problems]
        out.append("")
    print("\n".join(out))
    return 1 if problems else 0


def run_format(config: BrokerConfig, args) -> int:
    scram = []
    for argument in args.add_scram or ():
        try:
            scram.append(scram_record(*parse_add_scram(argument)))
        except ValueError as e:
            raise LogDirError(str(e)) from None
    if (args.standalone or args.initial_controllers) and config.get("controller.quorum.voters"):
        raise LogDirError(
            "You cannot specify controller.quorum.voters and format the node with --initial-controllers "
            "or --standalone. If you want to use dynamic quorum, please remove "
            "controller.quorum.voters and specify controller.quorum.bootstrap.servers instead."
        )
    check_features(args.feature or [])
    version = METADATA_VERSIONS[METADATA_VERSION_LEVEL]
    if args.release_version and args.release_version != version:
        print(
            f"kesque's metadata.version is {version}; --release-version {args.release_version} is not used",
            file=sys.stderr,
        )
    meta_dir = os.path.abspath(config.metadata_log_dir)

    def pre_write(d: str) -> None:
        # Kafka's bootstrap.checkpoint, written before the metadata dir's meta.properties (so a
        # failed write leaves that dir unformatted, to format again): the first active controller
        # writes these records first
        if scram and d == meta_dir:
            features = [{"type": "FeatureLevelRecord", "name": k, "feature_level": v} for k, v in FEATURES.items()]
            bootstrap.write(meta_dir, features + scram)

    formatted = format_storage(config, args.cluster_id, ignore_formatted=args.ignore_formatted, pre_write=pre_write)
    if not formatted:
        print("All of the log directories are already formatted.")
    for kind, d in formatted:
        if kind == "metadata" and (args.standalone or args.initial_controllers):
            kind = "dynamic metadata voter"
        print(f"Formatting {kind} directory {d} with metadata.version {version}.")
    return 0


# the features Kafka 4.4's format names as supported (metadata.version aside)
KAFKA_FEATURES = (
    "eligible.leader.replicas.version",
    "group.version",
    "kraft.version",
    "share.version",
    "streams.version",
    "transaction.version",
)


def check_features(settings: list[str]) -> None:
    """``--feature NAME=LEVEL``: kesque's controller finalizes its own levels (``FEATURES``) when
    the cluster first starts, and storing other levels at format time (Kafka's bootstrap
    checkpoint) is not built yet. So a level kesque would not use is refused, naming the feature,
    rather than formatting a cluster that silently behaves otherwise (e.g. transaction.version 1
    asked, 2 finalized); a feature kesque does not finalize at all is named on stderr."""
    for setting in settings:
        name, sep, level = setting.partition("=")
        name = name.strip()
        try:
            level_value = int(level.strip())
        except ValueError:
            level_value = None
        if not sep or not name or level_value is None:
            raise LogDirError(f"--feature {setting}: expected NAME=LEVEL with an integer level")
        if name not in FEATURES and name not in KAFKA_FEATURES:
            raise LogDirError(f"Unsupported feature: {name}. Supported features are: {', '.join(KAFKA_FEATURES)}")
        if name in FEATURES:
            if level_value != FEATURES[name]:
                raise LogDirError(
                    f"--feature {name}={level_value}: kesque formats a new cluster with {name} "
                    f"{FEATURES[name]} only (other levels at format time are not implemented)"
                )
        else:
            print(f"--feature {name}={level_value} is not used: kesque does not finalize {name}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().error("too few arguments")
        if args.command == "random-uuid":
            print(random_uuid())
            return 0
        try:
            config = load(args.config)
        except OSError as e:
            print(f"Error: cannot read {args.config}: {e.strerror}", file=sys.stderr)
            return 1
        if args.command == "info":
            return run_info(config)
        return run_format(config, args)
    except _Exit as e:
        return e.code
    except (LogDirError, ConfigError, bootstrap.BootstrapWriteError) as e:
        print(e, file=sys.stderr)
        return 1


def kafka_storage() -> None:
    """The ``kafka-storage.sh`` console script."""
    sys.exit(main())
