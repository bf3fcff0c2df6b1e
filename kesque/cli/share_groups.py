"""``kafka-share-groups.sh``: list, describe and delete share groups, reset and delete their
start offsets (Kafka's ShareGroupCommand, KIP-932).

Output follows Kafka 4.4's tool: ``--list`` (``--state`` adds the STATE column), ``--describe``
prints GROUP TOPIC PARTITION START-OFFSET LAG (``--verbose``: LEADER-EPOCH too; ``-`` where the
share-partition has no state yet), ``--members`` GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
ASSIGNMENT (``--verbose``: MEMBER-EPOCH), ``--state`` GROUP COORDINATOR (ID) STATE #MEMBERS
(``--verbose``: GROUP-EPOCH ASSIGNMENT-EPOCH); text columns are as wide as their longest value
and at least 15. ``--reset-offsets`` prints the NEW-OFFSET plan (or ``--export`` CSV) and
works on empty share groups only; ``--delete`` and ``--delete-offsets`` print Kafka's
messages. Errors ("Error: ...") go to stdout, notes to stderr; as kesque's consumer-groups
tool, any error makes the exit status 1 (Kafka's tool exits 0 after an error it reported).

Requests go over :mod:`kesque.client.wire` (ListGroups with the ``share`` type filter,
ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups); ListOffsets and topic descriptions reuse the
consumer-groups tool's service.
"""

from __future__ import annotations

import argparse
import sys

from ..client.wire import make
from ..protocol.api_keys import ApiKeys
from .consumer_groups import (
    GroupService,
    Reported,
    Usage,
    UsageExit,
    execution,
    hash_order,
    java_datetime,
    java_text,
    parse_topic_partitions,
    print_error,
    reset_plan_from_file,
    wrapped,
)
from .plumbing.errors import ERRORS_PKG, JavaError, group_error
from .plumbing.javautil import java_hashmap_order, log4j_stamp, tp_str
from .plumbing.jopt import print_usage_and_exit, usage_or_version
from .plumbing.run import ToolExit

NAME = "share-groups"
SCRIPT = "kafka-share-groups.sh"
DESCRIPTION = "This tool helps to list, describe, delete and manage the offsets of share groups."
HELP = "list, describe and delete share groups, reset their offsets (kafka-share-groups.sh)"
MISSING = "-"
STATES = ("Empty", "Stable", "Dead")
_RESETTER = "org.apache.kafka.tools.GroupOffsetsResetter"
_SCENARIOS = ("to-datetime", "to-earliest", "to-latest", "from-file", "to-current", "to-offset")


def configure(p) -> None:
    p.add_argument("--all-groups", action="store_true", help="Apply to all share groups.")
    p.add_argument("--all-topics", action="store_true", help="Apply to all topics. Supported operation: reset-offsets.")
    p.add_argument("--bootstrap-server", metavar="server to connect to", help="REQUIRED: The server(s) to connect to.")
    p.add_argument(
        "--command-config",
        metavar="command config property file",
        help="Property file containing configs to be passed to Admin Client.",
    )
    p.add_argument("--delete", action="store_true", help="Delete share group.")
    p.add_argument(
        "--delete-offsets",
        action="store_true",
        help="Delete offsets of share group. Supports one share group at a time, and multiple topics.",
    )
    p.add_argument("--describe", action="store_true", help="Describe share group, members and offset information.")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="Output offset reset information without executing the operation. Supported operation: reset-offsets.",
    )
    p.add_argument(
        "--execute", action="store_true", help="Execute the offset reset operation. Supported operation: reset-offsets."
    )
    p.add_argument(
        "--export",
        action="store_true",
        help="Generate offset reset information in CSV format for export to a file. Supported operation: "
        "reset-offsets.",
    )
    p.add_argument("--from-file", metavar="path to CSV file", help="Reset offsets to values defined in CSV file.")
    p.add_argument("--group", action="append", metavar="group id", help="The share group id.")
    p.add_argument("--list", action="store_true", help="List all share groups.")
    p.add_argument(
        "--members",
        action="store_true",
        help="Describe members of the group. This option may be used with the --describe option only.",
    )
    p.add_argument(
        "--offsets",
        action="store_true",
        help="Describe the group and list all topic partitions in the group along with their offset "
        "information. This is the default sub-action and may be used with the --describe option "
        "only.",
    )
    p.add_argument(
        "--reset-offsets",
        action="store_true",
        help="Reset offsets of share group. Supports one share group at a time, and instances must be inactive.",
    )
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="String",
        help="When specified with --describe, it displays the state of the group. When specified with "
        "--list, it displays the state of all groups. It can also be used to list groups with "
        "specific states. Valid values are Empty, Stable and Dead.",
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=30000,
        metavar="timeout (ms)",
        help="The timeout that can be set for some use cases. For example, it can be used when describing "
        "the group to specify the maximum amount of time in milliseconds to wait before the group "
        "stabilizes.",
    )
    p.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    p.add_argument(
        "--to-datetime",
        metavar="datetime",
        help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDThh:mm:ss.sss'",
    )
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--to-offset", type=int, metavar="offset", help="Reset offsets to a specific offset.")
    p.add_argument(
        "--topic",
        action="append",
        metavar="topic",
        help="The topic whose offset information should be deleted or reset. When resetting offsets, "
        "partitions can be specified using this format: `topic:0,1,2`, where 0,1,2 are the "
        "partitions to be included.",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="Provide additional information, if any, when describing the group. This option may be used "
        "with the --describe option only.",
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


# ----------------------------------------------------------------- argument checks


def _check_args(p, a) -> None:
    usage_or_version(a, p, DESCRIPTION)
    actions = sum(1 for x in (a.list, a.describe, a.delete, a.reset_offsets, a.delete_offsets) if x)
    if actions != 1:
        print_usage_and_exit(
            p,
            "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets.",
        )
    if not a.bootstrap_server:
        print_usage_and_exit(p, 'Missing required argument "[bootstrap-server]"')
    groups = bool(a.group) or a.all_groups
    if (a.describe or a.delete) and not groups:
        what = "describe" if a.describe else "delete"
        print_usage_and_exit(p, f"Option [{what}] takes one of these options: [all-groups], [group]")
    if a.reset_offsets:
        if not groups:
            print_usage_and_exit(p, "Option [reset-offsets] takes one of these options: [all-groups], [group]")
        if not (a.dry_run or a.execute):
            print_usage_and_exit(p, "Option [reset-offsets] takes the option: [execute] or [dry-run]")
        if a.dry_run and a.execute:
            print_usage_and_exit(p, "Option [reset-offsets] only accepts one of [execute], [dry-run]")
        if not (a.topic or a.all_topics or a.from_file):
            print_usage_and_exit(p, "Option [reset-offsets] takes one of these options: [all-topics], [topic]")
    if a.delete_offsets and (not a.group or not a.topic):
        print_usage_and_exit(p, "Option [delete-offsets] takes the following options: [group], [topic]")
    if a.describe and sum(1 for x in (a.members, a.offsets, a.state is not None) if x) > 1:
        print_usage_and_exit(p, "Option [describe] takes at most one of these options: [members], [offsets], [state]")
    if (a.members or a.offsets or a.verbose) and not a.describe:
        name = "members" if a.members else "offsets" if a.offsets else "verbose"
        print_usage_and_exit(p, f"Option [{name}] can be used only with [describe]")


# ----------------------------------------------------------------- the service


class Unwrapped(JavaError):
    """An exception Kafka's tool meets unwrapped (not inside an ExecutionException): its
    ``Error:`` line shows only the message."""


class ShareGroupService(GroupService):
    """What Kafka's ShareGroupService asks of its Admin client."""

    def list_share_groups(self, states: list[str] | None = None) -> list[tuple[str, str]]:
        """ListGroups (type ``share``) on every broker: (group id, state), in the Admin client's order."""
        listings: dict[str, str] = {}
        for node, host, port in self.brokers():

            def build(mod, v):
                return make(mod.request.ListGroupsRequest, states_filter=tuple(states or ()), types_filter=("share",))

            resp = self._conn(host, port).request(ApiKeys.LIST_GROUPS, build)
            if int(resp.error_code):
                raise group_error(
                    int(resp.error_code), f"Error listing groups on {host}:{port} (id: {node} rack: null)"
                )
            for g in resp.groups:
                if (getattr(g, "group_type", "") or "share").lower() == "share" and g.protocol_type == "share":
                    listings[g.group_id] = getattr(g, "group_state", "") or "Unknown"
        return [(g, listings[g]) for g in java_hashmap_order(list(listings))]

    def _coordinator_call(self, group: str, api_key: int, build):
        node = self.coordinators([group])[group]
        return node, self._conn(node[1], node[2]).request(api_key, build)

    def describe_share_group(self, group: str) -> dict:
        """ShareGroupDescribe: the group (a missing one raises GroupIdNotFoundException)."""

        def build(mod, v):
            return make(mod.request.ShareGroupDescribeRequest, group_ids=(group,), include_authorized_operations=False)

        node, resp = self._coordinator_call(group, ApiKeys.SHARE_GROUP_DESCRIBE, build)
        g = resp.groups[0]
        if int(g.error_code):
            raise group_error(int(g.error_code), g.error_message)
        members = [
            {
                "id": m.member_id,
                "host": m.client_host,
                "client": m.client_id,
                "epoch": int(m.member_epoch),
                "assignment": [(tp.topic_name, int(p)) for tp in m.assignment.topic_partitions for p in tp.partitions],
            }
            for m in g.members
        ]
        return {
            "group": group,
            "state": g.group_state,
            "epoch": int(g.group_epoch),
            "assignment_epoch": int(g.assignment_epoch),
            "coordinator": node,
            "members": members,
        }

    def share_offsets(self, group: str) -> list[tuple[str, int, int, int, int]]:
        """DescribeShareGroupOffsets for every topic of the group: (topic, partition, start
        offset, leader epoch, lag), -1 where unknown."""

        def build(mod, v):
            rq = mod.request
            return make(
                rq.DescribeShareGroupOffsetsRequest,
                groups=(make(rq.DescribeShareGroupOffsetsRequestGroup, group_id=group, topics=None),),
            )

        _node, resp = self._coordinator_call(group, ApiKeys.DESCRIBE_SHARE_GROUP_OFFSETS, build)
        g = resp.groups[0]
        if int(g.error_code):
            raise group_error(int(g.error_code), g.error_message)
        out = []
        for t in g.topics:
            for p in t.partitions:
                if int(p.error_code):
                    raise group_error(int(p.error_code), p.error_message)
                out.append(
                    (
                        t.topic_name,
                        int(p.partition_index),
                        int(p.start_offset),
                        int(p.leader_epoch),
                        int(getattr(p, "lag", -1)),
                    )
                )
        return sorted(out)

    def alter_share_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        def build(mod, v):
            rq = mod.request
            topics: dict[str, list] = {}
            for (t, p), o in offsets.items():
                topics.setdefault(t, []).append(
                    make(rq.AlterShareGroupOffsetsRequestPartition, partition_index=p, start_offset=o)
                )
            return make(
                rq.AlterShareGroupOffsetsRequest,
                group_id=group,
                topics=tuple(
                    make(rq.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(ps))
                    for t, ps in topics.items()
                ),
            )

        _node, resp = self._coordinator_call(group, ApiKeys.ALTER_SHARE_GROUP_OFFSETS, build)
        if int(resp.error_code):
            raise group_error(int(resp.error_code), resp.error_message)
        for t in resp.responses:
            for p in t.partitions:
                if int(p.error_code):
                    raise group_error(int(p.error_code), p.error_message)

    def delete_share_offsets(self, group: str, topics: list[str]) -> dict[str, JavaError | None]:
        def build(mod, v):
            rq = mod.request
            return make(
                rq.DeleteShareGroupOffsetsRequest,
                group_id=group,
                topics=tuple(make(rq.DeleteShareGroupOffsetsRequestTopic, topic_name=t) for t in topics),
            )

        _node, resp = self._coordinator_call(group, ApiKeys.DELETE_SHARE_GROUP_OFFSETS, build)
        if int(resp.error_code):
            raise group_error(int(resp.error_code), resp.error_message)
        return {
            t.topic_name: group_error(int(t.error_code), t.error_message) if int(t.error_code) else None
            for t in resp.responses
        }

    def delete_group(self, group: str) -> JavaError | None:
        def build(mod, v):
            return make(mod.request.DeleteGroupsRequest, groups_names=(group,))

        _node, resp = self._coordinator_call(group, ApiKeys.DELETE_GROUPS, build)
        code = int(resp.results[0].error_code)
        return group_error(code) if code else None


# ----------------------------------------------------------------- main


def run(a) -> int:
    p = a._parser
    _check_args(p, a)
    svc = ShareGroupService(a)
    Reported.errors = 0
    try:
        if a.list:
            list_groups(svc, a)
        elif a.describe:
            describe_groups(svc, a)
        elif a.delete:
            delete_groups(svc, a)
        elif a.reset_offsets:
            reset_offsets(svc, a)
        else:
            delete_offsets(svc, a)
    except Usage as e:
        print_usage_and_exit(p, str(e))
    except ToolExit:
        raise
    except Exception as e:  # noqa: BLE001 - Kafka's tool reports every failure the same way
        if isinstance(e, Unwrapped):
            detail, trace = e.message, str(e)
        elif isinstance(e, JavaError):
            detail, trace = str(e), execution(e)
        else:
            detail = trace = java_text(e)
        print_error(f"Executing share group command failed due to {detail}")
        sys.stdout.flush()
        print(trace, file=sys.stderr)
    finally:
        sys.stdout.flush()
        svc.close()
    return 1 if Reported.errors else 0


def _groups(svc: ShareGroupService, a) -> list[str]:
    return [g for g, _s in svc.list_share_groups()] if a.all_groups else list(dict.fromkeys(a.group))


# ----------------------------------------------------------------- --list


def _states_from(value: str) -> list[str]:
    out = []
    for s in value.split(","):
        match = [x for x in STATES if x.lower() == s.strip().lower()]
        if not match:
            raise Usage(f"Invalid state list '{value}'. Valid states are: {', '.join(STATES)}")
        out.append(match[0])
    return list(dict.fromkeys(out))


def list_groups(svc: ShareGroupService, a) -> None:
    if a.state is None:
        for g, _state in svc.list_share_groups():
            print(g)
        return
    listings = svc.list_share_groups(_states_from(a.state) if a.state else None)
    width = max([15] + [len(g) for g, _s in listings])
    print(f"{'GROUP':<{width}} STATE")
    for g, state in listings:
        print(f"{g:<{width}} {state}")


# ----------------------------------------------------------------- --describe


def _no_members(d: dict) -> None:
    if d["state"] == "Empty":
        sys.stdout.flush()
        print(f"\nShare group '{d['group']}' has no active members.", file=sys.stderr)
        sys.stderr.flush()


def describe_groups(svc: ShareGroupService, a) -> None:
    for gid in _groups(svc, a):
        d = svc.describe_share_group(gid)
        if a.members:
            print_members(d, a.verbose)
        elif a.state is not None:
            print_state(d, a.verbose)
        else:
            print_offsets(gid, svc.share_offsets(gid), a.verbose)


def _cell(v: int) -> str:
    return MISSING if v < 0 else str(v)


def print_offsets(gid: str, rows: list, verbose: bool) -> None:
    if not rows:
        print(f"\nShare group '{gid}' has no offset information.")
        return
    gw = max(15, len(gid))
    tw = max([15] + [len(r[0]) for r in rows])
    out = []
    if verbose:
        out.append(f"\n{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} {'LEADER-EPOCH':<13} {'START-OFFSET':<13} LAG")
    else:
        out.append(f"\n{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} {'START-OFFSET':<13} LAG")
    for topic, part, start, epoch, lag in rows:
        lag_text = _cell(lag) if start >= 0 else MISSING
        if verbose:
            out.append(f"\n{gid:<{gw}} {topic:<{tw}} {part!s:<10} {_cell(epoch):<13} {_cell(start):<13} {lag_text}")
        else:
            out.append(f"\n{gid:<{gw}} {topic:<{tw}} {part!s:<10} {_cell(start):<13} {lag_text}")
    print("".join(out))


def _assignment_text(tps: list[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return ";".join(f"{t}:" + ",".join(str(p) for p in sorted(ps)) for t, ps in sorted(by_topic.items()))


def print_members(d: dict, verbose: bool) -> None:
    members = d["members"]
    if not members:
        _no_members(d)
        return
    gw = max(15, len(d["group"]))
    cw = max([15] + [len(m["id"]) for m in members])
    hw = max([15] + [len(m["host"]) for m in members])
    lw = max([15] + [len(m["client"]) for m in members])
    epoch = [f"{'MEMBER-EPOCH':<13} "] if verbose else [""]
    out = [
        f"\n{'GROUP':<{gw}} {'CONSUMER-ID':<{cw}} {'HOST':<{hw}} {'CLIENT-ID':<{lw}} {'#PARTITIONS':<12} "
        f"{epoch[0]}ASSIGNMENT"
    ]
    for m in members:
        ep = f"{m['epoch']!s:<13} " if verbose else ""
        out.append(
            f"\n{d['group']:<{gw}} {m['id']:<{cw}} {m['host']:<{hw}} {m['client']:<{lw}} "
            f"{len(m['assignment'])!s:<12} {ep}{_assignment_text(m['assignment'])}"
        )
    print("".join(out))


def print_state(d: dict, verbose: bool) -> None:
    gw = max(15, len(d["group"]))
    node, host, port = d["coordinator"]
    coordinator = f"{host}:{port}  ({node})"
    cw = max(25, len(coordinator))
    if verbose:
        head = (
            f"\n{'GROUP':<{gw}} {'COORDINATOR (ID)':<{cw}} {'STATE':<15} {'GROUP-EPOCH':<12} "
            f"{'ASSIGNMENT-EPOCH':<17} #MEMBERS"
        )
        row = (
            f"\n{d['group']:<{gw}} {coordinator:<{cw}} {d['state']:<15} {d['epoch']!s:<12} "
            f"{d['assignment_epoch']!s:<17} {len(d['members'])}"
        )
    else:
        head = f"\n{'GROUP':<{gw}} {'COORDINATOR (ID)':<{cw}} {'STATE':<15} #MEMBERS"
        row = f"\n{d['group']:<{gw}} {coordinator:<{cw}} {d['state']:<15} {len(d['members'])}"
    print(head + row)
    _no_members(d)


# ----------------------------------------------------------------- --delete


def delete_groups(svc: ShareGroupService, a) -> None:
    listed = dict(svc.list_share_groups())
    groups = list(listed) if a.all_groups else list(dict.fromkeys(a.group))
    failed: dict[str, JavaError] = {}
    for g in groups:
        if g not in listed:
            failed[g] = JavaError(ERRORS_PKG + "GroupIdNotFoundException", f"Group '{g}' is not a share group.")
        elif listed[g] != "Empty":
            failed[g] = JavaError(ERRORS_PKG + "GroupNotEmptyException", f"Share group '{g}' is not EMPTY.")
        else:
            err = svc.delete_group(g)
            if err is not None:
                failed[g] = err
    deleted = [g for g in groups if g not in failed]
    if not failed:
        print("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in deleted) + ") was successful.")
        return
    print_error(
        "Deletion of some share groups failed:\n"
        + "\n".join(f"* Group '{g}' could not be deleted due to: {e}" for g, e in failed.items())
    )
    if deleted:
        print("\nThese share groups were deleted successfully: " + ", ".join(f"'{g}'" for g in deleted))


# ----------------------------------------------------------------- --delete-offsets


def delete_offsets(svc: ShareGroupService, a) -> None:
    gid = a.group[0]
    topics = list(dict.fromkeys(a.topic))
    try:
        results = svc.delete_share_offsets(gid, topics)
    except JavaError as e:
        if e.code is None:
            raise
        print_error(e.message)  # Kafka's tool reports the group's error, then every topic with it
        results = {t: e for t in topics}
    if any(results.get(t) is not None for t in topics) and not Reported.errors:
        Reported.errors += 1  # a topic that failed fails the command (Kafka's tool exits 0)
    width = max([15] + [len(t) for t in topics])
    out = [f"\n{'TOPIC':<{width}} STATUS"]
    for t in topics:
        err = results.get(t)
        out.append(f"\n{t:<{width}} " + ("Successful" if err is None else f"Error: {err.message}"))
    print("".join(out))


# ----------------------------------------------------------------- --reset-offsets


def _warn(msg: str) -> None:
    sys.stdout.flush()
    print(f"[{log4j_stamp()}] WARN {msg} ({_RESETTER})", file=sys.stderr)


def reset_offsets(svc: ShareGroupService, a) -> None:
    gid = a.group[0] if a.group else None
    for g in _groups(svc, a):
        gid = g
        try:
            state = svc.describe_share_group(g)["state"]
        except JavaError as e:
            if e.code != 69:  # GROUP_ID_NOT_FOUND: resetting a new group creates it, as in Kafka
                raise
            state = "Dead"
        if state not in ("Empty", "Dead"):
            sys.stdout.flush()
            print(f"Share group '{g}' is not empty.", file=sys.stderr)
            raise ToolExit(1)
        plan = _prepare(svc, a, g, _partitions_to_reset(svc, a, g))
        if a.execute:
            wrapped(svc.alter_share_offsets, g, plan)
        if a.export:
            print("".join(f"{t},{p},{o}\n" for (t, p), o in plan.items()))
        else:
            _print_plan(g, plan)
    return gid


def _print_plan(gid: str, plan: dict[tuple[str, int], int]) -> None:
    gw = max(15, len(gid))
    tw = max([15] + [len(t) for t, _p in plan])
    out = [f"\n{'GROUP':<{gw}} {'TOPIC':<{tw}} {'PARTITION':<10} NEW-OFFSET"]
    for (t, p), o in plan.items():
        out.append(f"\n{gid:<{gw}} {t:<{tw}} {p!s:<10} {o}")
    print("".join(out))


def _partitions_to_reset(svc: ShareGroupService, a, gid: str) -> list[tuple[str, int]]:
    if a.from_file and not (a.topic or a.all_topics):
        return []
    if a.all_topics:
        try:
            topics = sorted({t for t, *_ in svc.share_offsets(gid)})
        except JavaError as e:
            if e.code != 69:
                raise
            topics = []
        a = _with_topics(a, topics)
    specified: list[tuple[str, int]] = []
    plain: list[str] = []
    for t in a.topic or ():
        if ":" in t:
            specified += parse_topic_partitions(t)
        else:
            plain.append(t)
    described = svc.topic_partitions(plain)
    for t in java_hashmap_order(list(dict.fromkeys(plain))):
        parts = described[t]
        if isinstance(parts, JavaError):
            raise Unwrapped(parts.java_class, parts.message, parts.code)
        specified += [(t, p) for p in parts]
    return specified


def _with_topics(a, topics: list[str]):
    b = argparse.Namespace(**vars(a))
    b.topic = topics
    return b


def _check_range(svc, requested: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    starts = wrapped(svc.log_offsets, requested, "earliest")
    ends = wrapped(svc.log_offsets, requested, "latest")
    out = {}
    for tp in hash_order(requested):
        offset, start, end = requested[tp], starts.get(tp, 0), ends.get(tp, 0)
        if offset > end:
            _warn(
                f"New offset ({offset}) is higher than latest offset for topic partition {tp_str(tp)}. "
                f"Value will be set to {end}."
            )
            offset = end
        elif offset < start:
            _warn(
                f"New offset ({offset}) is lower than earliest offset for topic partition {tp_str(tp)}. "
                f"Value will be set to {start}."
            )
            offset = start
        out[tp] = offset
    return out


def _prepare(svc: ShareGroupService, a, gid: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    partitions = list(dict.fromkeys(partitions))
    if a.to_offset is not None:
        return _check_range(svc, {tp: a.to_offset for tp in partitions})
    if a.to_earliest or a.to_latest:
        found = wrapped(svc.log_offsets, partitions, "earliest" if a.to_earliest else "latest")
        return {tp: found[tp] for tp in hash_order(partitions)}
    if a.to_datetime is not None:
        ts = java_datetime(a.to_datetime)
        found = wrapped(svc.log_offsets, partitions, "timestamp", ts)
        empty = [tp for tp in hash_order(found) if found[tp] == -1]
        for tp in empty:
            print(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
        found.update(wrapped(svc.log_offsets, empty, "latest"))
        return {tp: found[tp] for tp in hash_order(partitions)}
    if a.to_current:
        current = {(t, p): s for t, p, s, _e, _l in svc.share_offsets(gid) if s >= 0}
        ends = wrapped(svc.log_offsets, [tp for tp in partitions if tp not in current], "latest")
        return {tp: current.get(tp, ends.get(tp, 0)) for tp in hash_order(partitions)}
    if a.from_file is not None:
        mine = reset_plan_from_file(a).get(gid)
        if mine is None:
            print_error(f"No reset plan for group {gid} found")
            return {}
        return _check_range(svc, mine)
    raise UsageExit(
        "Option '[reset-offsets]' requires one of the following scenarios: ["
        + ", ".join(f"[{s}]" for s in _SCENARIOS)
        + "]"
    )
