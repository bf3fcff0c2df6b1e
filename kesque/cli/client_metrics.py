"""``kafka-client-metrics.sh``: KIP-714 client metrics subscriptions (ClientMetricsCommand).

``--alter --name N [--metrics m1,m2] [--interval ms] [--match k=v,...]`` (or ``--generate-name``)
sets a CLIENT_METRICS config resource with IncrementalAlterConfigs (an empty value deletes the
key) and prints ``Altered client metrics config for N.``; ``--describe [--name N]`` prints
``Client metrics configs for N are:`` and ``  key=value`` per key; ``--list`` the names, one a
line; ``--delete --name N`` deletes every key (``Deleted client metrics config for N.``). Errors
print ``Error while executing client metrics command : <message>`` on stdout, exit 1.

It speaks the wire protocol (DescribeConfigs, IncrementalAlterConfigs, ListConfigResources):
confluent-kafka's admin client has no CLIENT_METRICS resource type.
"""

from __future__ import annotations

import sys
import traceback
import uuid

from ..client.wire import make
from ..metrics.telemetry import kafka_uuid
from ..protocol.api_keys import ApiKeys
from ..utils import java_string_hash
from .plumbing.admin_client import Retry, WireAdmin, admin_properties
from .plumbing.errors import JavaError, TerseException, kafka_error
from .plumbing.javautil import java_hash_order, log4j_stamp
from .plumbing.jopt import check_invalid, print_usage_and_exit, usage_or_version

NAME = "client-metrics"
SCRIPT = "kafka-client-metrics.sh"
DESCRIPTION = "This tool helps to manipulate and describe client metrics configurations."
HELP = "KIP-714 client metrics subscriptions (kafka-client-metrics.sh)"

CLIENT_METRICS = 16
OP_SET, OP_DELETE = 0, 1
SELECTORS = (
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)


def configure(p) -> None:
    p.add_argument(
        "--bootstrap-server", metavar="server to connect to", help="REQUIRED: The Kafka server to connect to."
    )
    p.add_argument(
        "--command-config",
        metavar="command config property file",
        help="Property file containing configs to be passed to Admin Client.",
    )
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the client metrics resource.")
    p.add_argument("--delete", action="store_true", help="Delete the configuration for the client metrics resource.")
    p.add_argument("--describe", action="store_true", help="List configurations for the client metrics resource.")
    p.add_argument("--list", action="store_true", help="List the client metrics resources.")
    p.add_argument("--name", metavar="name", help="Name of client metrics configuration resource.")
    p.add_argument("--generate-name", action="store_true", help="Generate a UUID to use as the name.")
    p.add_argument("--interval", metavar="push interval", help="The metrics push interval in milliseconds.")
    p.add_argument(
        "--match",
        metavar="k1=v1,k2=v2",
        help="Matching selector 'k1=v1,k2=v2'. The following is a list of valid selector names: \n"
        + "\n".join("\t" + s for s in SELECTORS),
    )
    p.add_argument("--metrics", metavar="m1,m2", help="Telemetry metric name prefixes 'm1,m2'.")
    p.add_argument("--version", action="store_true", help="Display Kafka version.")


def _check(a) -> None:
    p = a._parser
    usage_or_version(a, p, DESCRIPTION)
    if sum(bool(x) for x in (a.alter, a.delete, a.describe, a.list)) != 1:
        print_usage_and_exit(p, "Command must include exactly one action: --alter, --delete, --describe or --list.")
    if not a.bootstrap_server:
        raise IllegalArgument("--bootstrap-server must be specified.")
    for used in ("delete", "describe"):
        check_invalid(p, a, used, "generate-name", "interval", "match", "metrics")
    check_invalid(p, a, "list", "name", "generate-name", "interval", "match", "metrics")
    if a.alter and bool(a.name) == bool(a.generate_name):
        raise IllegalArgument("One of --name or --generate-name must be specified with --alter.")
    if a.delete and not a.name:
        raise IllegalArgument("A client metrics resource name must be specified with --delete.")


class IllegalArgument(Exception):
    pass


class Service:
    """ClientMetricsService over :class:`WireAdmin`."""

    def __init__(self, admin: WireAdmin):
        self.admin = admin

    def _call(self, api_key: int, build, call: str):
        deadline = self.admin.deadline()
        while True:
            try:
                return self.admin.send_any(api_key, build)
            except Retry:
                self.admin.pause(deadline, call)  # Kafka's TimeoutException past the deadline

    def names(self) -> list[str]:
        def build(mod, v):
            return make(mod.request.ListConfigResourcesRequest, resource_types=(CLIENT_METRICS,))

        resp = self._call(ApiKeys.LIST_CONFIG_RESOURCES, build, "listConfigResources")
        if int(resp.error_code):
            raise kafka_error(int(resp.error_code))
        return [r.resource_name for r in resp.config_resources]

    def configs(self, name: str) -> list[tuple[str, str | None]]:
        def build(mod, v):
            res = make(
                mod.request.DescribeConfigsResource,
                resource_type=CLIENT_METRICS,
                resource_name=name,
                configuration_keys=None,
            )
            return make(
                mod.request.DescribeConfigsRequest,
                resources=(res,),
                include_synonyms=False,
                include_documentation=False,
            )

        resp = self._call(ApiKeys.DESCRIBE_CONFIGS, build, "describeConfigs")
        r = resp.results[0]
        if int(r.error_code):
            raise kafka_error(int(r.error_code), r.error_message)
        entries = [(c.name, c.value) for c in r.configs]
        # Kafka's Config keeps its entries in a HashMap sized for them
        return java_hash_order(entries, lambda e: java_string_hash(e[0]), len(entries))

    def alter(self, name: str, ops: list[tuple[str, int, str]]) -> None:
        def build(mod, v):
            configs = tuple(
                make(mod.request.AlterableConfig, name=k, config_operation=op, value=val) for k, op, val in ops
            )
            res = make(
                mod.request.AlterConfigsResource, resource_type=CLIENT_METRICS, resource_name=name, configs=configs
            )
            return make(mod.request.IncrementalAlterConfigsRequest, resources=(res,), validate_only=False)

        resp = self._call(ApiKeys.INCREMENTAL_ALTER_CONFIGS, build, "incrementalAlterConfigs")
        r = resp.responses[0]
        if int(r.error_code):
            raise kafka_error(int(r.error_code), r.error_message)


def _ops(a) -> list[tuple[str, int, str]]:
    """The keys --alter sets, in the HashMap order Kafka's tool builds them in; an empty value
    deletes its key."""
    values = {}
    if a.interval is not None:
        try:
            values["interval.ms"] = str(int(a.interval.strip())) if a.interval.strip() else ""
        except ValueError:
            raise IllegalArgument("Invalid interval value. Enter an integer, or leave empty to reset.") from None
    if a.metrics is not None:
        values["metrics"] = a.metrics
    if a.match is not None:
        values["match"] = a.match
    keys = java_hash_order(list(values), java_string_hash)
    return [(k, OP_DELETE if values[k] == "" else OP_SET, values[k]) for k in keys]


def run(a) -> int:
    try:
        _check(a)
        ops = _ops(a) if a.alter else []
    except IllegalArgument as e:
        sys.stdout.flush()
        print(e, file=sys.stderr)
        return 1
    admin = None
    try:
        admin = WireAdmin(a.bootstrap_server, admin_properties(a.command_config))
        svc = Service(admin)
        if a.alter:
            name = kafka_uuid(uuid.uuid4()) if a.generate_name else a.name
            svc.alter(name, ops)
            print(f"Altered client metrics config for {name}.")
        elif a.delete:
            old = svc.configs(a.name)
            svc.alter(a.name, [(k, OP_DELETE, v) for k, v in old])
            print(f"Deleted client metrics config for {a.name}.")
        elif a.describe:
            names = svc.names()
            if a.name:
                if a.name not in names:
                    print(f"The client metric resource {a.name} doesn't exist and doesn't have dynamic config.")
                    return 0
                names = [a.name]
            for name in names:
                print(f"Client metrics configs for {name} are:")
                for k, v in svc.configs(name):
                    print(f"  {k}={v}")
        else:
            print("\n".join(svc.names()))
    except TerseException as e:
        sys.stdout.flush()
        print(e, file=sys.stderr)
        return 1
    except JavaError as e:
        print(f"Error while executing client metrics command : {e.message}")
        sys.stdout.flush()
        # and LOG.error(Utils.stackTrace(e)): its first line (the frames and the logger's name follow in Kafka's)
        print(f"[{log4j_stamp()}] ERROR {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - Kafka's tool prints any failure this way
        print(f"Error while executing client metrics command : {e}")
        traceback.print_exc()
        return 1
    finally:
        if admin is not None:
            admin.close()
    return 0
