"""``kafka-cluster.sh``: the cluster's id, its endpoints, and unregistering a broker (Kafka's ClusterTool).

    kafka-cluster.sh cluster-id     (--bootstrap-server B | --bootstrap-controller C) [--command-config F]
    kafka-cluster.sh list-endpoints (--bootstrap-server B | --bootstrap-controller C) [--include-fenced-brokers]
    kafka-cluster.sh unregister     (--bootstrap-server B | --bootstrap-controller C) --id N

``cluster-id`` and ``list-endpoints`` send DescribeCluster (endpoint type 1 to brokers, 2 to
controllers, KIP-919); ``unregister`` sends UnregisterBroker, which the active controller answers
once the broker's registration is gone (its leaderships move first). ``unregister-controller``
and ``api-versions`` are parsed as in Kafka 4.4 but not done: kesque has no dynamic controller
membership, and prints so.
"""

from __future__ import annotations

import sys

from ..client.wire import make
from ..protocol.api_keys import ApiKeys
from .plumbing.admin_client import ControllerAdmin, admin_for, run_admin
from .plumbing.argparse4j import ArgParser, ArgumentParserException, ParserExit
from .plumbing.errors import ERRORS_PKG, JavaError, kafka_error
from .plumbing.run import exit_flushed, run_tool

PROG = "kafka-cluster"
DESCRIPTION = "The Kafka cluster tool."
COMMANDS = "{cluster-id,unregister,unregister-controller,list-endpoints,api-versions}"
ENDPOINT_HEADERS = ["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"]


def _connection_options(p: ArgParser) -> None:
    g = p.add_mutex_group(required=True)
    p.add_argument(
        "--bootstrap-server",
        "-b",
        group=g,
        help="A list of host/port pairs to use for establishing the connection to the Kafka cluster.",
    )
    p.add_argument(
        "--bootstrap-controller",
        "-C",
        group=g,
        help="A list of host/port pairs to use for establishing the connection to the KRaft controllers.",
    )
    p.add_argument(
        "--config",
        help="(DEPRECATED) A property file containing configurations for the Admin client. This option "
        "will be removed in a future version. Use --command-config instead.",
    )
    p.add_argument("--command-config", "-c", help="Config properties file for the Admin client.")


def build_parser() -> ArgParser:
    p = ArgParser(PROG, DESCRIPTION)
    p.add_subparsers(dest="command", title="positional arguments", metavar=COMMANDS)
    s = p.add_parser("cluster-id", help="Get information about the ID of a cluster.")
    _connection_options(s)
    s = p.add_parser("unregister", help="Unregister a broker.")
    _connection_options(s)
    s.add_argument("--id", "-i", type="Integer", required=True, help="The ID of the broker to unregister.")
    s = p.add_parser("unregister-controller", help="Unregister a controller.")
    _connection_options(s)
    s.add_argument("--id", "-i", type="Integer", required=True, help="The ID of the controller to unregister.")
    s = p.add_parser("list-endpoints", help="List endpoints")
    _connection_options(s)
    s.add_argument(
        "--include-fenced-brokers",
        action="store_true",
        help="Whether to include fenced brokers when listing broker endpoints",
    )
    s = p.add_parser("api-versions", help="Get information about the api versions of the brokers or controllers.")
    _connection_options(s)
    return p


class ClusterAdmin(ControllerAdmin):
    def describe(self, include_fenced: bool = False):
        def build(mod, v):
            return make(
                mod.request.DescribeClusterRequest,
                include_cluster_authorized_operations=False,
                endpoint_type=2 if self.controllers else 1,
                include_fenced_brokers=include_fenced,
            )

        def once():
            resp = self.send_any(ApiKeys.DESCRIBE_CLUSTER, build)
            if int(resp.error_code):
                raise self.error_for(int(resp.error_code), resp.error_message)
            return resp

        return self.retrying("listNodes", once)

    def unregister(self, broker_id: int) -> None:
        def once():
            resp = self.send_any(
                ApiKeys.UNREGISTER_BROKER, lambda mod, v: make(mod.request.UnregisterBrokerRequest, broker_id=broker_id)
            )
            if int(resp.error_code):
                raise self.error_for(int(resp.error_code), resp.error_message)

        self.retrying("unregisterBroker", once)


def endpoints_text(resp, controllers: bool) -> str:
    """ClusterTool's table: fixed-width columns (the host column as wide as the longest host),
    one space apart, a missing rack as ``null``."""
    kind = "controller" if controllers else "broker"
    nodes = sorted(resp.brokers, key=lambda b: int(b.broker_id))
    width = max([len("HOST")] + [len(b.host) for b in nodes])
    line = "{:<10} {:<%d} {:<10} {:<10} {:<10} {:<15}\n" % width
    out = [line.format(*ENDPOINT_HEADERS)]
    for b in nodes:
        out.append(
            line.format(
                int(b.broker_id),
                b.host,
                int(b.port),
                "null" if b.rack is None else b.rack,
                "fenced" if b.is_fenced else "unfenced",
                kind,
            )
        )
    return "".join(out)


def execute(argv: list[str]) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except ArgumentParserException as e:
        parser.handle_error(e)
        return 1  # --help too: ClusterTool exits 1 after argparse4j's help screen
    except ParserExit as e:
        return e.code

    def command(admin) -> None:
        name = ns["command"]
        if name == "cluster-id":
            cluster_id = admin.describe().cluster_id
            print(
                f"Cluster ID: {cluster_id}"
                if cluster_id
                else "No cluster ID found. The Kafka version is probably too old."
            )
        elif name == "list-endpoints":
            resp = admin.describe(bool(ns.get("include_fenced_brokers")))
            sys.stdout.write(endpoints_text(resp, admin.controllers))
        elif name == "unregister":
            admin.unregister(ns["id"])
            print(f"Broker {ns['id']} is no longer registered.")
        else:
            raise JavaError(
                ERRORS_PKG + "UnsupportedVersionException",
                f"kesque does not support {name} (no dynamic controller membership, no per-node "
                "ApiVersions listing yet)",
            )

    return run_admin(lambda: admin_for(ClusterAdmin, ns, ns.get("command_config") or ns.get("config")), command)


def main(argv: list[str] | None = None) -> int:
    """``kesque cluster-tool ...`` (the arguments after the subcommand)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return run_tool(execute, argv)


def kafka_cluster() -> None:
    """The ``kafka-cluster.sh`` console script."""
    exit_flushed(main())


__all__ = ["main", "kafka_cluster", "execute", "kafka_error"]
