"""``kafka-delete-records.sh``: delete records below given offsets (DeleteRecordsCommand).

The offset JSON file is Kafka's::

    {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}

(``"offset": -1`` deletes up to the high watermark). Output::

    Executing records delete operation
    Records delete operation completed:
    partition: foo-1	low_watermark: 1
"""

from __future__ import annotations

import json
import sys

from confluent_kafka import TopicPartition

from .plumbing import admin_client
from .plumbing.errors import error_line
from .plumbing.javautil import java_hash_order, topic_partition_hash
from .plumbing.jopt import print_usage_and_exit, usage_or_version

NAME = "delete-records"
SCRIPT = "kafka-delete-records.sh"
DESCRIPTION = "This tool helps to delete records of the given partitions down to the specified offset."
HELP = "delete records below an offset (kafka-delete-records.sh)"


def configure(p) -> None:
    p.add_argument(
        "--bootstrap-server", metavar="server(s) to use for bootstrapping", help="REQUIRED: The server to connect to."
    )
    p.add_argument(
        "--offset-json-file",
        metavar="Offset json file path",
        help="REQUIRED: The JSON file with offset per partition. The format to use is:\n"
        '{"partitions":\n  [{"topic": "foo", "partition": 1, "offset": 1}],\n "version":1\n}',
    )
    p.add_argument(
        "--command-config",
        metavar="command config property file path",
        help="A property file containing configs to be passed to Admin Client.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


class CommandFailed(Exception):
    pass


def parse_offset_json(text: str) -> list[tuple[str, int, int]]:
    """[(topic, partition, offset)] in file order, duplicates kept."""
    try:
        js = json.loads(text)
    except ValueError:
        raise CommandFailed("The input string is not a valid JSON") from None
    if not isinstance(js, dict):
        raise CommandFailed("The input string is not a valid JSON")
    version = js.get("version", 1)
    if version != 1:
        raise CommandFailed(f"Not supported version field value {version}")
    if "partitions" not in js:
        raise CommandFailed("Missing partitions field")
    out = []
    for item in js["partitions"]:
        try:
            out.append((str(item["topic"]), int(item["partition"]), int(item["offset"])))
        except (KeyError, TypeError, ValueError) as e:
            raise CommandFailed(f"Invalid partition entry {json.dumps(item)}: {e}") from None
    return out


def run(a) -> int:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    for req in ("bootstrap_server", "offset_json_file"):
        if not getattr(a, req):
            print_usage_and_exit(p, f'Missing required argument "[{req.replace("_", "-")}]"')
    try:
        with open(a.offset_json_file, encoding="utf-8") as f:
            entries = parse_offset_json(f.read())
        seen: dict[tuple[str, int], int] = {}
        dups = []
        for t, pn, off in entries:
            if (t, pn) in seen and (t, pn) not in dups:
                dups.append((t, pn))
            seen.setdefault((t, pn), off)
        if dups:
            raise CommandFailed(
                "Offset json file contains duplicate topic partitions: " + ",".join(f"{t}-{pn}" for t, pn in dups)
            )
        admin = admin_client.make_admin(a.bootstrap_server, a.command_config)
        print("Executing records delete operation")
        sys.stdout.flush()
        tps = java_hash_order(list(seen), topic_partition_hash)
        futures = (
            admin.delete_records(
                [TopicPartition(t, pn, seen[(t, pn)]) for t, pn in tps], request_timeout=60, operation_timeout=30
            )
            if tps
            else {}
        )
        by_tp = {(tp.topic, tp.partition): fut for tp, fut in futures.items()}
        print("Records delete operation completed:")
        status = 0
        for tp in java_hash_order(tps, topic_partition_hash, len(tps)):
            fut = by_tp[tp]
            try:
                low = fut.result().low_watermark
                print(f"partition: {tp[0]}-{tp[1]}\tlow_watermark: {low}")
            except Exception as e:
                # Kafka's tool exits 0 here; a partition left undeleted is a failure (kesque issue 11)
                print(f"partition: {tp[0]}-{tp[1]}\terror: {error_line(e)}")
                status = 1
    except (CommandFailed, OSError) as e:
        sys.stdout.flush()
        print(str(e), file=sys.stderr)
        return 1
    return status
