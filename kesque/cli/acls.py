"""``kafka-acls.sh``: add, remove and list ACLs (Kafka's AclCommand).

    kafka-acls.sh --bootstrap-server B (--add | --remove | --list)
        [--allow-principal P]... [--deny-principal P]... [--allow-host H]... [--deny-host H]...
        [--operation OP]... [--topic T]... [--group G]... [--cluster] [--transactional-id X]...
        [--delegation-token D]... [--user-principal U]... [--resource-pattern-type TYPE]
        [--producer [--idempotent]] [--consumer] [--force] [--principal P]...

The requests are Kafka's admin client's (CreateAcls, DescribeAcls, DeleteAcls, to any broker);
the output is AclCommand's, byte for byte where Kafka's is deterministic::

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

AclCommand keeps resources and entries in Java hash sets, whose order changes from one JVM to
the next (enum hash codes): kesque prints resources and entries in the order it builds them (for
``--list``, the order DescribeAcls answers).
"""

from __future__ import annotations

import argparse
import sys

from ..client.wire import make
from ..protocol.api_keys import ApiKeys
from ..security.acl import (
    WILDCARD_HOST,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from .plumbing import admin_client
from .plumbing.errors import BrokerError, error_line
from .plumbing.jopt import check_invalid, jopt_help, print_usage_and_exit, usage_or_version
from .plumbing.run import ToolExit

NAME = "acls"
SCRIPT = "kafka-acls.sh"
DESCRIPTION = "This tool helps to manage acls on kafka."
HELP = "add, remove and list ACLs (kafka-acls.sh)"
CLUSTER_NAME = "kafka-cluster"

# AclEntry.supportedOperations: what an ACL on each resource type may name (ALL besides)
_SUPPORTED = {
    ResourceType.TOPIC: ("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    ResourceType.GROUP: ("READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    ResourceType.CLUSTER: (
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    ),
    ResourceType.TRANSACTIONAL_ID: ("DESCRIBE", "WRITE", "TWO_PHASE_COMMIT"),
    ResourceType.DELEGATION_TOKEN: ("DESCRIBE",),
    ResourceType.USER: ("CREATE_TOKENS", "DESCRIBE_TOKENS"),
}
_OPERATIONS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]
# how Kafka 4.4's tool listed a type's operations in its usage error (a Java HashSet of enums:
# the order of their hash codes, seen here for the TOPIC and GROUP sets; the rest by code)
_SHOWN_ORDER = ("DESCRIBE", "DESCRIBE_CONFIGS", "WRITE", "CREATE", "ALTER_CONFIGS", "ALTER", "ALL", "READ", "DELETE")


def _shown(op: AclOperation) -> tuple:
    return (_SHOWN_ORDER.index(op.name), 0) if op.name in _SHOWN_ORDER else (len(_SHOWN_ORDER), int(op))


def operation_name(op: AclOperation) -> str:
    """SecurityUtils.operationName: ``IDEMPOTENT_WRITE`` -> ``IdempotentWrite``."""
    return "".join(w.capitalize() for w in op.name.split("_"))


def parse_operation(name: str) -> AclOperation:
    """SecurityUtils.operation: the Pascal-case or the enum name, as given or upper-cased."""
    names = {operation_name(op): op for op in _OPERATIONS} | {op.name: op for op in _OPERATIONS}
    return names.get(name) or names.get(name.upper()) or AclOperation.UNKNOWN


class _HelpOnStderr(argparse._HelpAction):
    """AclCommand prints its help on stderr and exits 1 (CommandLineUtils.maybePrintHelpOrVersion)."""

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.flush()
        sys.stderr.write(DESCRIPTION + "\n" + jopt_help(parser, with_description=False))
        raise ToolExit(1)


def configure(p) -> None:
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            action.__class__ = _HelpOnStderr
    many = {"action": "append", "default": None}
    p.add_argument("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    p.add_argument(
        "--allow-host",
        metavar="allow-host",
        help="Host from which principals listed in --allow-principal will have access. If you have specified "
        "--allow-principal then the default for this option will be set to '*' which allows access from all hosts.",
        **many,
    )
    p.add_argument(
        "--allow-principal",
        metavar="allow-principal",
        help="principal is in principalType:name format. Note that principalType must be supported by the "
        "Authorizer being used. For example, User:'*' is the wild card indicating all users.",
        **many,
    )
    servers = (
        "A list of host/port pairs to use for establishing the connection to the Kafka cluster. This list should "
        "be in the form host1:port1,host2:port2,... This config is required for acl management using admin "
        "client API."
    )
    p.add_argument("--bootstrap-controller", metavar="controller to connect to", help=servers)
    p.add_argument("--bootstrap-server", metavar="server to connect to", help=servers)
    p.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    p.add_argument(
        "--command-config",
        nargs="?",
        metavar="command-config",
        help="A property file containing configs to be passed to Admin Client.",
    )
    p.add_argument(
        "--consumer",
        action="store_true",
        help="Convenience option to add/remove ACLs for consumer role. This will generate ACLs that allows "
        "READ,DESCRIBE on topic and READ on group.",
    )
    p.add_argument(
        "--delegation-token",
        metavar="delegation-token",
        help="Delegation token to which ACLs should be added or removed. A value of '*' indicates ACL should "
        "apply to all tokens.",
        **many,
    )
    p.add_argument(
        "--deny-host",
        metavar="deny-host",
        help="Host from which principals listed in --deny-principal will be denied access. If you have specified "
        "--deny-principal then the default for this option will be set to '*' which denies access from all hosts.",
        **many,
    )
    p.add_argument(
        "--deny-principal",
        metavar="deny-principal",
        help="principal is in principalType:name format. By default anyone not added through --allow-principal "
        "is denied access. You only need to use this option as negation to already allowed set. Note that "
        "principalType must be supported by the Authorizer being used. For example if you wanted to allow "
        "access to all users in the system but not test-user you can define an ACL that allows access to "
        "User:'*' and specify --deny-principal=User:test@EXAMPLE.COM. AND PLEASE REMEMBER DENY RULES TAKES "
        "PRECEDENCE OVER ALLOW RULES.",
        **many,
    )
    p.add_argument("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    p.add_argument(
        "--group",
        metavar="group",
        help="Consumer Group to which the ACLs should be added or removed. A value of '*' indicates the ACLs "
        "should apply to all groups.",
        **many,
    )
    p.add_argument(
        "--idempotent",
        action="store_true",
        help="Enable idempotence for the producer. This should be used in combination with the --producer "
        "option. Note that idempotence is enabled automatically if the producer is authorized to a particular "
        "transactional-id.",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="List ACLs for the specified resource, use --topic <topic> or --group <group> or --cluster to "
        "specify a resource.",
    )
    p.add_argument(
        "--operation",
        metavar="operation",
        help="Operation that is being allowed or denied. Valid operation names are: \n"
        + "\n".join("\t" + operation_name(op) for op in _OPERATIONS)
        + "\n (default: All)",
        **many,
    ).jopt_kind = "String"
    p.add_argument(
        "--principal",
        nargs="?",
        action="append",
        default=None,
        metavar="principal",
        help="List ACLs for the specified principal. principal is in principalType:name format. Note that "
        "principalType must be supported by the Authorizer being used. Multiple --principal option can be passed.",
    )
    p.add_argument(
        "--producer",
        action="store_true",
        help="Convenience option to add/remove ACLs for producer role. This will generate ACLs that allows "
        "WRITE,DESCRIBE and CREATE on topic.",
    )
    p.add_argument("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    p.add_argument(
        "--resource-pattern-type",
        default="LITERAL",
        metavar="resource-pattern-type",
        help="The type of the resource pattern or pattern filter. When adding acls, this should be a specific "
        "pattern type, e.g. 'literal' or 'prefixed'. When listing or removing acls, a specific pattern type can "
        "be used to list or remove acls from specific resource patterns, or use the filter values of 'any' or "
        "'match', where 'any' will match any pattern type, but will match the resource name exactly, where as "
        "'match' will perform pattern matching to list or remove all acls that affect the supplied "
        "resource(s). WARNING: 'match', when used in combination with the '--remove' switch, should be used "
        "with care.",
    ).jopt_kind = "ANY|MATCH|LITERAL|PREFIXED"
    p.add_argument(
        "--topic",
        metavar="topic",
        help="topic to which ACLs should be added or removed. A value of '*' indicates ACL should apply to all topics.",
        **many,
    )
    p.add_argument(
        "--transactional-id",
        metavar="transactional-id",
        help="The transactionalId to which ACLs should be added or removed. A value of '*' indicates the ACLs "
        "should apply to all transactionalIds.",
        **many,
    )
    p.add_argument(
        "--user-principal",
        metavar="user-principal",
        help="Specifies a user principal as a resource in relation with the operation. For instance one could "
        "grant CreateTokens or DescribeTokens permission on a given user principal.",
        **many,
    )
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


# -- Kafka's toString forms -------------------------------------------------------------------


def pattern_str(rtype, name, ptype) -> str:
    return (
        f"ResourcePattern(resourceType={ResourceType(rtype).name}, name={name}, patternType={PatternType(ptype).name})"
    )


def filter_str(rtype, name, ptype) -> str:
    """ResourcePatternFilter.toString (which Kafka words as a pattern's)."""
    return pattern_str(rtype, name, ptype)


def entry_str(e: tuple) -> str:
    principal, host, op, perm = e
    return (
        f"(principal={principal}, host={host}, operation={AclOperation(op).name}, "
        f"permissionType={AclPermissionType(perm).name})"
    )


# -- the command line -------------------------------------------------------------------------


class CommandFailed(Exception):
    """Printed as ``Error while executing ACL command: <message>`` (exit 1)."""

    def __init__(self, message: str, trace: list[str] | None = None):
        super().__init__(message)
        self.trace = trace or []


def _check_args(p, a) -> None:
    if a.bootstrap_server and a.bootstrap_controller:
        print_usage_and_exit(p, "Only one of --bootstrap-server or --bootstrap-controller must be specified")
    if not a.bootstrap_server and not a.bootstrap_controller:
        print_usage_and_exit(p, "One of --bootstrap-server or --bootstrap-controller must be specified")
    if [a.add, a.remove, a.list].count(True) != 1:
        print_usage_and_exit(p, "Command must include exactly one action: --list, --add, --remove. ")
    check_invalid(p, a, "list", "producer", "consumer", "allow-host", "allow-principal", "deny-host", "deny-principal")
    check_invalid(p, a, "producer", "operation", "deny-principal", "deny-host")
    check_invalid(p, a, "consumer", "operation", "deny-principal", "deny-host")
    if a.principal is not None and not a.list:
        print_usage_and_exit(p, "The --principal option is only available if --list is set")
    if a.producer and not a.topic:
        print_usage_and_exit(p, "With --producer you must specify a --topic")
    if a.idempotent and not a.producer:
        print_usage_and_exit(p, "The --idempotent option is only available if --producer is set")
    if a.consumer and (
        not a.topic or not a.group or (not a.producer and (a.cluster or a.transactional_id is not None))
    ):
        print_usage_and_exit(
            p,
            "With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id "
            "option should be specified.",
        )


def _pattern_type(p, a) -> PatternType:
    value = a.resource_pattern_type
    for pt in PatternType:
        if pt != PatternType.UNKNOWN and pt.name.lower() == value.lower():
            return pt
    print_usage_and_exit(
        p,
        f"Cannot convert argument '{value}' of option ['resource-pattern-type']. "
        f"Value [{value}] is not one of [ANY|MATCH|LITERAL|PREFIXED]",
    )
    raise AssertionError  # not reached


def parse_principal(s: str) -> str:
    """SecurityUtils.parseKafkaPrincipal, as its string (``type:name``)."""
    s = s.strip()
    kind, sep, name = s.partition(":")
    if not sep or not kind or not name:
        message = f"expected a string in format principalType:principalName but got {s}"
        raise CommandFailed(message, [f"java.lang.IllegalArgumentException: {message}"])
    return f"{kind}:{name}"


def _filters(p, a, die: bool = True) -> list[tuple]:
    """AclCommand.getResourceFilter: (type, name, pattern type) of every resource named."""
    pt = _pattern_type(p, a)
    out: list[tuple] = []
    for t in a.topic or ():
        out.append((ResourceType.TOPIC, t.strip(), pt))
    if pt == PatternType.LITERAL and (a.cluster or a.idempotent):
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    for g in a.group or ():
        out.append((ResourceType.GROUP, g.strip(), pt))
    for x in a.transactional_id or ():
        out.append((ResourceType.TRANSACTIONAL_ID, x, pt))
    for d in a.delegation_token or ():
        out.append((ResourceType.DELEGATION_TOKEN, d.strip(), pt))
    for u in a.user_principal or ():
        out.append((ResourceType.USER, u.strip(), pt))
    if not out and die:
        print_usage_and_exit(
            p,
            "You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
            "--delegation-token <Delegation Token ID>",
        )
    return list(dict.fromkeys(out))


def _entries(a, operations) -> list[tuple]:
    """AclCommand.getAcl: (principal, host, operation, permission) of every principal x operation x host."""
    out = []
    for principals, hosts, perm in (
        (a.allow_principal, a.allow_host, AclPermissionType.ALLOW),
        (a.deny_principal, a.deny_host, AclPermissionType.DENY),
    ):
        names = [parse_principal(x) for x in principals or ()]
        hs = [h.strip() for h in hosts] if hosts else ([WILDCARD_HOST] if names else [])
        out += [(pr, h, op, perm) for pr in dict.fromkeys(names) for op in operations for h in dict.fromkeys(hs)]
    return list(dict.fromkeys(out))


def _filter_to_entries(p, a) -> dict[tuple, list[tuple]]:
    """AclCommand.getResourceFilterToAcls: the --producer / --consumer shorthands, or else the
    operations given, on each resource."""
    out: dict[tuple, list[tuple]] = {}
    if not a.producer and not a.consumer:
        ops = [parse_operation(o.strip()) for o in (a.operation or ["All"])]
        entries = _entries(a, list(dict.fromkeys(ops)))
        for f in _filters(p, a):
            out[f] = entries
    if a.producer:
        for f in _filters(p, a):
            if f[0] == ResourceType.TOPIC:
                out[f] = _entries(a, [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE])
            elif f[0] == ResourceType.TRANSACTIONAL_ID:
                out[f] = _entries(a, [AclOperation.WRITE, AclOperation.DESCRIBE])
        if a.idempotent:
            cluster = (ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            out[cluster] = _entries(a, [AclOperation.IDEMPOTENT_WRITE])
    if a.consumer:
        for f in _filters(p, a):
            if f[0] == ResourceType.TOPIC:
                mine = _entries(a, [AclOperation.READ, AclOperation.DESCRIBE])
            elif f[0] == ResourceType.GROUP:
                mine = _entries(a, [AclOperation.READ])
            else:
                continue
            out[f] = list(dict.fromkeys(mine + out.get(f, [])))
    for f, entries in out.items():  # AclCommand.validateOperation
        valid = {AclOperation[n] for n in _SUPPORTED.get(f[0], ())} | {AclOperation.ALL}
        if any(e[2] not in valid for e in entries):
            names = ", ".join(op.name for op in sorted(valid, key=_shown))
            print_usage_and_exit(p, f"ResourceType {ResourceType(f[0]).name} only supports operations [{names}]")
    return out


# -- the requests -----------------------------------------------------------------------------


def _request(a, api_key: int, build):
    props = admin_client.client_config(a.bootstrap_server or a.bootstrap_controller, a.command_config)
    return admin_client.any_broker_request(props, api_key, build)


def _failed(code: int, message: str | None, name: str = "") -> CommandFailed:
    err = BrokerError(code, message, name)
    line = error_line(err)
    return CommandFailed(line, [f"java.util.concurrent.ExecutionException: {line}", f"Caused by: {line}"])


def describe(a, filt: tuple | None) -> list[tuple]:
    """DescribeAcls of one resource pattern filter (None: every ACL): [(pattern, entry)]."""
    rtype, name, ptype = filt if filt is not None else (ResourceType.ANY, None, PatternType.ANY)

    def build(mod, v):
        return make(
            mod.request.DescribeAclsRequest,
            resource_type_filter=int(rtype),
            resource_name_filter=name,
            pattern_type_filter=int(ptype),
            principal_filter=None,
            host_filter=None,
            operation=int(AclOperation.ANY),
            permission_type=int(AclPermissionType.ANY),
        )

    resp = _request(a, ApiKeys.DESCRIBE_ACLS, build)
    if int(resp.error_code):
        raise _failed(int(resp.error_code), resp.error_message, resp.error_code.name)
    return [
        (
            (int(r.resource_type), r.resource_name, int(r.pattern_type)),
            (x.principal, x.host, int(x.operation), int(x.permission_type)),
        )
        for r in resp.resources
        for x in r.acls
    ]


def create(a, pattern: tuple, entries: list[tuple]) -> None:
    def build(mod, v):
        creation = mod.request.AclCreation
        return make(
            mod.request.CreateAclsRequest,
            creations=tuple(
                make(
                    creation,
                    resource_type=int(pattern[0]),
                    resource_name=pattern[1],
                    resource_pattern_type=int(pattern[2]),
                    principal=e[0],
                    host=e[1],
                    operation=int(e[2]),
                    permission_type=int(e[3]),
                )
                for e in entries
            ),
        )

    resp = _request(a, ApiKeys.CREATE_ACLS, build)
    for r in resp.results:
        if int(r.error_code):
            raise _failed(int(r.error_code), r.error_message, r.error_code.name)


def delete(a, filt: tuple, entries: list[tuple] | None) -> None:
    """DeleteAcls of ``filt`` with each entry (None: any entry)."""
    wanted = [(None, None, AclOperation.ANY, AclPermissionType.ANY)] if entries is None else entries

    def build(mod, v):
        f = mod.request.DeleteAclsFilter
        return make(
            mod.request.DeleteAclsRequest,
            filters=tuple(
                make(
                    f,
                    resource_type_filter=int(filt[0]),
                    resource_name_filter=filt[1],
                    pattern_type_filter=int(filt[2]),
                    principal_filter=e[0],
                    host_filter=e[1],
                    operation=int(e[2]),
                    permission_type=int(e[3]),
                )
                for e in wanted
            ),
        )

    resp = _request(a, ApiKeys.DELETE_ACLS, build)
    for r in resp.filter_results:
        if int(r.error_code):
            raise _failed(int(r.error_code), r.error_message, r.error_code.name)


# -- the actions ------------------------------------------------------------------------------


def add_acls(p, a) -> None:
    pt = _pattern_type(p, a)
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        print_usage_and_exit(p, f"A '--resource-pattern-type' value of '{pt.name}' is not valid when adding acls.")
    todo = _filter_to_entries(p, a)
    if any(not entries for entries in todo.values()):
        print_usage_and_exit(p, "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    for pattern, entries in todo.items():
        existing = {e for _p, e in describe(a, pattern)}
        new = []
        for e in entries:
            if e in existing:
                print(f"Acl (pattern={pattern_str(*pattern)}, entry={entry_str(e)}) already exists.")
            else:
                new.append(e)
        if new:
            lines = "\n".join("\t" + entry_str(e) for e in new)
            print(f"Adding ACLs for resource `{pattern_str(*pattern)}`: \n {lines}\n")
            create(a, pattern, new)


_NO_CONSOLE = (
    'Cannot invoke "java.io.Console.readLine()" because the return value of "java.lang.System.console()" is null'
)


def _confirm(a, message: str) -> bool:
    """AclCommand.confirmAction: the answer is read from the console (Java's System.console(),
    none unless both ends are a terminal: Kafka's tool then fails on it, as here)."""
    if a.force:
        return True
    print(message, flush=True)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CommandFailed(_NO_CONSOLE, [f"java.lang.NullPointerException: {_NO_CONSOLE}"])
    line = sys.stdin.readline()
    return line.rstrip("\r\n").lower() == "y"


def remove_acls(p, a) -> None:
    for filt, entries in _filter_to_entries(p, a).items():
        if not entries:
            if _confirm(
                a, f"Are you sure you want to delete all ACLs for resource filter `{filter_str(*filt)}`? (y/n)"
            ):
                delete(a, filt, None)
        else:
            lines = "\n".join("\t" + entry_str(e) for e in entries)
            msg = (
                f"Are you sure you want to remove ACLs: \n {lines}\n from resource filter `{filter_str(*filt)}`? (y/n)"
            )
            if _confirm(a, msg):
                delete(a, filt, entries)


def _print_resources(by_pattern: dict) -> None:
    for pattern, entries in by_pattern.items():
        lines = "\n".join("\t" + entry_str(e) for e in entries)
        print(f"Current ACLs for resource `{pattern_str(*pattern)}`:\n{lines}\n")


def list_acls(p, a) -> None:
    filters = _filters(p, a, die=False)
    principals = [parse_principal(x or "") for x in a.principal or ()]
    found = []
    for filt in filters or [None]:
        found += describe(a, filt)
    by_pattern: dict[tuple, list] = {}
    for pattern, entry in found:
        mine = by_pattern.setdefault(pattern, [])
        if entry not in mine:
            mine.append(entry)
    if not principals:
        _print_resources(by_pattern)
        return
    for principal in dict.fromkeys(principals):
        print(f"ACLs for principal `{principal}`")
        _print_resources(
            {
                pt: [e for e in es if e[0] == principal]
                for pt, es in by_pattern.items()
                if any(e[0] == principal for e in es)
            }
        )


def run(a) -> int:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    _check_args(p, a)
    try:
        if a.add:
            add_acls(p, a)
        elif a.remove:
            remove_acls(p, a)
        else:
            list_acls(p, a)
    except CommandFailed as e:
        print(f"Error while executing ACL command: {e}")
        for line in e.trace:  # (Utils.stackTrace, less its frames)
            print(line)
        print()
        return 1
    return 0
