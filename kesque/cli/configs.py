"""``kafka-configs.sh``: describe and alter topic, broker, group and client quota configs.

Follows Kafka's ConfigCommand: ``--entity-type/--entity-name`` or the shorthands ``--topic``,
``--broker``, ``--broker-defaults`` (and the other entity flags); ``--describe [--all]``
prints ``Dynamic configs for topic X are:`` / ``All configs for broker 1 are:`` followed by
``  key=value sensitive=false synonyms={SOURCE:key=value, ...}``; ``--alter`` with
``--add-config k=v,k2=[a,b]`` / ``--add-config-file`` / ``--delete-config k1,k2`` uses
IncrementalAlterConfigs and prints ``Completed updating config for topic X.``. Users, clients
and ips are client quotas (DescribeClientQuotas / AlterClientQuotas): ``Quota configs for
client-id 'app' are producer_byte_rate=1024.0``.

Describe goes over the wire directly (DescribeConfigs) because confluent-kafka keys a
config's synonyms by name and so loses a key that is set at two levels (e.g. both
STATIC_BROKER_CONFIG and DEFAULT_CONFIG), which ConfigCommand prints.
"""

from __future__ import annotations

import argparse
import decimal
import re
import sys

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from ..client.wire import Connection, make
from ..controller.controller import validate_topic_name
from ..errors import ErrorCode, KafkaError
from ..protocol.api_keys import ApiKeys
from ..quotas import CLIENT_QUOTA_KEYS, IP_QUOTA_KEYS
from ..security.scram import ScramFormatter, ScramMechanism, parse_credential_config, secure_random_string
from ..utils import java_string_hash
from .plumbing import admin_client
from .plumbing.errors import BrokerError, error_line
from .plumbing.javautil import load_props
from .plumbing.jopt import print_usage_and_exit, usage_or_version
from .plumbing.run import ToolExit

NAME = "configs"
SCRIPT = "kafka-configs.sh"
DESCRIPTION = (
    "This tool helps to manipulate and describe entity config for a topic, client, user, broker, ip, "
    "client-metrics or group"
)
HELP = "describe or alter topic, broker, group and client quota configs (kafka-configs.sh)"

TOPIC, CLIENT, USER, BROKER, BROKER_LOGGER, IP, CLIENT_METRICS, GROUP = (
    "topics",
    "clients",
    "users",
    "brokers",
    "broker-loggers",
    "ips",
    "client-metrics",
    "groups",
)
SUPPORTED_TYPES = [TOPIC, CLIENT, USER, BROKER, BROKER_LOGGER, IP, CLIENT_METRICS, GROUP]

# ConfigResource.Type codes
_RESOURCE = {TOPIC: 2, BROKER: 4, BROKER_LOGGER: 8, CLIENT_METRICS: 16, GROUP: 32}
# ConfigEntry.ConfigSource ids -> names
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",  # the Admin client's ConfigEntry.ConfigSource name
    8: "GROUP_CONFIG",
}
_DYNAMIC_SOURCE = {TOPIC: 1, BROKER: 2, CLIENT_METRICS: 7, GROUP: 8}

_ENTITY_FLAGS = (
    ("topic", TOPIC),
    ("client", CLIENT),
    ("user", USER),
    ("broker", BROKER),
    ("broker_logger", BROKER_LOGGER),
    ("ip", IP),
    ("client_metrics", CLIENT_METRICS),
    ("group", GROUP),
)
_DEFAULT_FLAGS = (
    ("client_defaults", CLIENT),
    ("user_defaults", USER),
    ("broker_defaults", BROKER),
    ("ip_defaults", IP),
)


def configure(p) -> None:

    class NameAction(argparse.Action):
        def __call__(self, parser, ns, values, option_string=None):
            seq = list(getattr(ns, "entity_seq", None) or [])
            seq.append(values if self.nargs != 0 else "")
            ns.entity_seq = seq
            if self.nargs == 0:
                ns.entity_default = True
            else:
                names = list(getattr(ns, "entity_name", None) or [])
                names.append(values)
                ns.entity_name = names

    p.add_argument("--bootstrap-server", metavar="server to connect to", help="The Kafka servers to connect to.")
    p.add_argument(
        "--bootstrap-controller", metavar="controller to connect to", help="The Kafka controllers to connect to."
    )
    p.add_argument(
        "--command-config",
        metavar="command config property file",
        help="Property file containing configs to be passed to Admin Client. This is used only with "
        "--bootstrap-server option for describing and altering broker configs.",
    )
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument(
        "--all",
        action="store_true",
        help="List all configs for the given entity, including static configs if available.",
    )
    p.add_argument(
        "--entity-type",
        action="append",
        metavar="entity-type",
        help="Type of entity (topics/clients/users/brokers/broker-loggers/ips/client-metrics/groups)",
    )
    p.add_argument(
        "--entity-name",
        action=NameAction,
        metavar="entity-name",
        help="Name of entity (topic name/client id/user principal name/broker id/ip/client metrics/group id)",
    )
    p.add_argument(
        "--entity-default",
        action=NameAction,
        nargs=0,
        help="Default entity name for clients/users/brokers/ips (applies to corresponding entity type)",
    )
    p.add_argument(
        "--add-config",
        metavar="add-config",
        help="Key Value pairs of configs to add. Square brackets can be used to group values which "
        "contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.",
    )
    p.add_argument(
        "--add-config-file",
        metavar="add-config-file",
        help="Path to a properties file with configs to add. See add-config for a list of valid configurations.",
    )
    p.add_argument("--delete-config", action="append", metavar="delete-config", help="config keys to remove 'k1,k2'")
    p.add_argument("--force", action="store_true", help="Suppress console prompts")
    p.add_argument("--topic", metavar="topic", help="The topic's name.")
    p.add_argument("--client", metavar="client", help="The client's ID.")
    p.add_argument("--client-defaults", action="store_true", help="The config defaults for all clients.")
    p.add_argument("--user", metavar="user", help="The user's principal name.")
    p.add_argument("--user-defaults", action="store_true", help="The config defaults for all users.")
    p.add_argument("--broker", metavar="broker", help="The broker's ID.")
    p.add_argument("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    p.add_argument("--broker-logger", metavar="broker-logger", help="The broker's ID for its logger config.")
    p.add_argument("--ip-defaults", action="store_true", help="The config defaults for all IPs.")
    p.add_argument("--ip", metavar="ip", help="The IP address.")
    p.add_argument("--group", metavar="group", help="The group's ID.")
    p.add_argument("--client-metrics", metavar="client-metrics", help="The client metrics config resource name.")
    p.add_argument("--version", action="store_true", help="Display Kafka version.")
    p.set_defaults(entity_seq=None, entity_default=False)


class Fail(Exception):
    """IllegalArgumentException / InvalidConfigurationException: message alone on stderr."""


def entity_types(a) -> list[str]:
    out = list(a.entity_type or [])
    out += [t for flag, t in _ENTITY_FLAGS + _DEFAULT_FLAGS if getattr(a, flag)]
    return out


def entity_names(a) -> list[str]:
    out = list(a.entity_seq or [])
    out += [getattr(a, flag) for flag, _t in _ENTITY_FLAGS if getattr(a, flag)]
    out += ["" for flag, _t in _DEFAULT_FLAGS if getattr(a, flag)]
    return out


def _check_args(p, a) -> None:
    usage_or_version(a, p, DESCRIPTION)
    if int(a.alter) + int(a.describe) != 1:
        print_usage_and_exit(p, "Command must include exactly one action: --describe, --alter")
    if a.describe:
        for bad in ("alter", "add_config", "delete_config"):
            if getattr(a, bad):
                print_usage_and_exit(p, f'Option "[describe]" can\'t be used with option "[{bad.replace("_", "-")}]"')
    types = entity_types(a)
    dup = sorted({t for t in types if types.count(t) > 1})
    if dup:
        raise Fail(f"Duplicate entity type(s) specified: {','.join(dup)}")
    for t in types:
        if t not in SUPPORTED_TYPES:
            raise Fail(
                f"Invalid entity type {t}, the entity type must be one of {', '.join(SUPPORTED_TYPES)} with "
                "a --bootstrap-server or --bootstrap-controller argument"
            )
    if not types:
        raise Fail("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USER, CLIENT}:
        raise Fail(f"Only '{USER}' and '{CLIENT}' entity types may be specified together")
    uses_generic = bool(a.entity_name or a.entity_type or a.entity_default)
    uses_flags = any(getattr(a, f) for f, _t in _ENTITY_FLAGS + _DEFAULT_FLAGS)
    if uses_generic and uses_flags:
        raise Fail("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    names = entity_names(a)
    has_name = any(names)
    has_default = any(n == "" for n in names)
    n_connect = int(bool(a.bootstrap_server)) + int(bool(a.bootstrap_controller))
    if n_connect == 0:
        raise Fail(
            "One of the required --bootstrap-server, --boostrap-controller, or --zookeeper arguments must be specified"
        )
    if n_connect > 1:
        raise Fail("Only one of --bootstrap-server, --boostrap-controller, and --zookeeper can be specified")
    if has_name and (BROKER in types or BROKER_LOGGER in types):
        for v in [x for x in (a.entity_name or [])] + [a.broker, a.broker_logger]:
            if v is None:
                continue
            try:
                int(v)
            except ValueError:
                raise Fail(
                    f"The entity name for {types[0]} must be a valid integer broker id, but it is: {v}"
                ) from None
    if a.describe:
        if not ({USER, CLIENT, BROKER, IP} & set(types)) and a.entity_default:
            raise Fail(f"--entity-default must not be specified with --describe of {','.join(types)}")
        if BROKER_LOGGER in types and not has_name:
            raise Fail(f"An entity name must be specified with --describe of {','.join(types)}")
    if a.alter:
        if {USER, CLIENT, BROKER, IP} & set(types):
            if not has_name and not has_default:
                raise Fail(
                    "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"
                )
        elif not has_name:
            raise Fail(f"An entity name must be specified with --alter of {','.join(types)}")
        if a.add_config and a.add_config_file:
            raise Fail("Only one of --add-config or --add-config-file must be specified")
        if not a.add_config and not a.add_config_file and not a.delete_config:
            raise Fail(
                "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"
            )


# ----------------------------------------------------------------- config parsing


def parse_configs_to_add(a) -> dict[str, str]:
    props: dict[str, str] = {}
    if a.add_config_file:
        props.update(load_props(a.add_config_file))
    if a.add_config:
        outside = r"(?=[^\]]*(?:\[|$))"
        pairs = [re.split(r"\s*=\s*" + outside, item) for item in re.split("," + outside, a.add_config)]
        if not all(len(x) == 2 for x in pairs):
            raise Fail(
                'requirement failed: Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        for k, v in pairs:
            props[k.strip()] = re.sub(r"\[?\]?", "", v).strip()
    for k in props:
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", k):
            raise Fail(f"Invalid character found for config key: {k}")
    return props


def parse_configs_to_delete(a) -> list[str]:
    out: list[str] = []
    for item in a.delete_config or []:
        out += [x.strip() for x in item.split(",")]
    return out


# ----------------------------------------------------------------- describe over the wire


def describe_resource(a, rtype: int, name: str, include_synonyms: bool = True, node_id: int | None = None):
    """[(name, value, sensitive, source, [(syn_source, syn_name, syn_value)])] for one resource."""
    bootstrap = a.bootstrap_server or a.bootstrap_controller
    target = None
    if node_id is not None:
        admin = admin_client.make_admin(bootstrap, a.command_config)
        target = admin_client.node_address(admin, node_id)
    with Connection.to_any(
        target or bootstrap, client_id="kafka-configs", security=admin_client.command_security(a.command_config)
    ) as conn:

        def build(mod, v):
            rq = mod.request
            return rq.DescribeConfigsRequest(
                resources=(
                    rq.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None),
                ),
                include_synonyms=include_synonyms,
                include_documentation=False,
            )

        resp = conn.request(ApiKeys.DESCRIBE_CONFIGS, build)
    res = resp.results[0]
    code = int(res.error_code)
    if code:
        raise BrokerError(code, res.error_message, res.error_code.name)
    out = []
    for c in res.configs:
        syns = [(int(s.source), s.name, s.value) for s in c.synonyms]
        out.append((c.name, c.value, bool(c.is_sensitive), int(c.config_source), syns))
    return out


def _validate_topic(name: str) -> None:

    try:
        validate_topic_name(name)
    except KafkaError as e:
        raise BrokerError(17, e.message, "INVALID_TOPIC_EXCEPTION") from None


def get_resource_config(a, etype: str, name: str, include_synonyms: bool, describe_all: bool):
    node = None
    if etype == TOPIC:
        if name:
            _validate_topic(name)
        source = None if describe_all else 1
    elif etype == BROKER:
        if name == "":
            source = None if describe_all else 3
        else:
            try:
                node = int(name)
            except ValueError:
                raise Fail(f"The entity name for {etype} must be a valid integer broker id, found: {name}") from None
            source = None if describe_all else 2
    elif etype == BROKER_LOGGER:
        if name:
            try:
                node = int(name)
            except ValueError:
                raise Fail(f"The entity name for {etype} must be a valid integer broker id, found: {name}") from None
        source = None
    elif etype in (CLIENT_METRICS, GROUP):
        source = None if describe_all else _DYNAMIC_SOURCE[etype]
    else:
        raise Fail(f"Invalid entity type: {etype}")
    entries = describe_resource(a, _RESOURCE[etype], name, include_synonyms, node)
    if source is not None:
        entries = [e for e in entries if e[3] == source]
    return sorted(entries, key=lambda e: e[0])


def _fmt(v) -> str:
    return "null" if v is None else str(v)


def describe(a) -> None:
    types = entity_types(a)
    names = entity_names(a)
    etype = types[0]
    if etype in (USER, CLIENT, IP):
        describe_quotas(a, types, names)
        # ConfigCommand lists SCRAM credentials unless clients or a default entity are described
        if etype == USER and CLIENT not in types and "" not in names:
            describe_scram(a, names)
        return
    if etype not in (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP):
        raise Fail(f"Invalid entity type: {etype}")
    if names:
        entities = [names[0]]
    else:
        admin = admin_client.make_admin(a.bootstrap_server or a.bootstrap_controller, a.command_config)
        if etype == TOPIC:
            entities = admin_client.list_topic_names(admin)
        elif etype in (BROKER, BROKER_LOGGER):
            entities = [str(n.id) for n in admin_client.cluster_nodes(admin)] + [""]
        elif etype == GROUP:  # as ConfigCommand: the consumer groups there are
            groups = admin.list_consumer_groups(request_timeout=admin_client.TIMEOUT).result(admin_client.TIMEOUT)
            entities = [g.group_id for g in groups.valid]
        elif etype == CLIENT_METRICS:  # as ConfigCommand: listConfigResources(CLIENT_METRICS)
            with Connection.to_any(
                a.bootstrap_server or a.bootstrap_controller,
                client_id="kafka-configs",
                security=admin_client.command_security(a.command_config),
            ) as conn:
                resp = conn.request(
                    ApiKeys.LIST_CONFIG_RESOURCES,
                    lambda mod, v: make(mod.request.ListConfigResourcesRequest, resource_types=(16,)),
                )
            entities = [r.resource_name for r in resp.config_resources]
        else:
            entities = []
    for entity in entities:
        if entity == "":
            print(f"Default configs for {etype} in the cluster are:")
        else:
            print(f"{'All' if a.all else 'Dynamic'} configs for {etype[:-1]} {entity} are:")
        for name, value, sensitive, _src, syns in get_resource_config(a, etype, entity, True, a.all):
            syn = ", ".join(f"{SOURCE_NAMES.get(s, 'UNKNOWN')}:{n}={_fmt(v)}" for s, n, v in syns)
            print(f"  {name}={_fmt(value)} sensitive={'true' if sensitive else 'false'} synonyms={{{syn}}}")


# ----------------------------------------------------------------- alter


def alter(a) -> None:
    types = entity_types(a)
    names = entity_names(a)
    if len(types) != len(names):
        raise Fail("An entity name must be specified for every entity type")
    etype, name = types[0], names[0]
    to_add = parse_configs_to_add(a)
    to_delete = parse_configs_to_delete(a)
    if etype not in (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP, USER, CLIENT, IP):
        raise Fail(f"Unsupported entity type: {etype}")
    if etype in (USER, CLIENT, IP):
        alter_quotas(a, types, names, to_add, to_delete)
        _print_completed(etype, name)
        return
    current = {e[0]: e for e in get_resource_config(a, etype, name, False, False)}
    if etype == BROKER_LOGGER:
        invalid = [k for k in to_delete if k not in current] + [k for k in to_add if k not in current]
        if invalid:
            raise Fail(f"Invalid broker logger(s): {','.join(invalid)}")
    else:
        invalid = [k for k in to_delete if k not in current]
        if invalid:
            raise Fail(f"Invalid config(s): {','.join(invalid)}")
    rtype = {TOPIC: ResourceType.TOPIC, BROKER: ResourceType.BROKER}.get(etype)
    if rtype is None:
        rtype = {BROKER_LOGGER: "BROKER_LOGGER", GROUP: "GROUP"}.get(etype)
        rtype = getattr(ResourceType, rtype or "UNKNOWN", ResourceType.UNKNOWN)
    if name == "" or etype in (TOPIC, GROUP, CLIENT_METRICS):
        # confluent-kafka refuses a ConfigResource with an empty name (the cluster-wide broker
        # defaults), and sends a topic's or group's to "the controller" of its metadata, possibly a
        # broker that just died (see admin_client.any_broker_request), and has no CLIENT_METRICS
        # resource type: these go to any broker over the wire
        _incremental_alter_wire(a, _RESOURCE[etype], name, to_add, to_delete)
    else:
        ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_add.items()]
        ops += [ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE) for k in to_delete]
        admin = admin_client.make_admin(a.bootstrap_server or a.bootstrap_controller, a.command_config)
        futures = admin.incremental_alter_configs(
            [ConfigResource(rtype, name, incremental_configs=ops)], request_timeout=30
        )
        for f in futures.values():
            f.result()
    _print_completed(etype, name)


def _print_completed(etype: str, name: str) -> None:
    if name:
        print(f"Completed updating config for {etype[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {etype} in the cluster.")


# ----------------------------------------------------------------- client quotas (users, clients, ips)

_QUOTA_ENTITY = {USER: "user", CLIENT: "client-id", IP: "ip"}
_QUOTA_LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def _quota_filter(types: list[str], names: list[str]) -> list[tuple[str, int, str | None]]:
    """ConfigCommand's filter: per type, its name (exact), '' (the default) or none given (any name)."""
    if len(names) > len(types):
        raise Fail("More entity names specified than entity types")
    out = []
    for i, t in enumerate(types):
        name = names[i] if i < len(names) else None
        out.append((_QUOTA_ENTITY[t], 2 if name is None else 1 if name == "" else 0, name or None))
    return out


def describe_client_quotas(a, components) -> list[tuple[list[tuple[str, str | None]], list[tuple[str, float]]]]:
    """[(entity [(type, name or None)], [(key, value)])] of a strict DescribeClientQuotas."""
    with Connection.to_any(
        a.bootstrap_server or a.bootstrap_controller,
        client_id="kafka-configs",
        security=admin_client.command_security(a.command_config),
    ) as conn:

        def build(mod, v):
            rq = mod.request
            return make(
                rq.DescribeClientQuotasRequest,
                strict=True,
                components=tuple(
                    make(rq.ComponentData, entity_type=t, match_type=mt, match=n) for t, mt, n in components
                ),
            )

        resp = conn.request(ApiKeys.DESCRIBE_CLIENT_QUOTAS, build)
    if int(resp.error_code):
        raise BrokerError(int(resp.error_code), resp.error_message, resp.error_code.name)
    return [
        ([(e.entity_type, e.entity_name) for e in entry.entity], [(v.key, v.value) for v in entry.values])
        for entry in resp.entries or ()
    ]


def java_double(v: float) -> str:
    """Java's Double.toString."""

    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        text = repr(float(v))
        return text if "e" not in text else f"{v:.1f}"
    sign, digits, exp = decimal.Decimal(repr(float(v))).normalize().as_tuple()
    mantissa = str(digits[0]) + "." + ("".join(map(str, digits[1:])) or "0")
    return ("-" if sign else "") + f"{mantissa}E{exp + len(digits) - 1}"


def java_hashmap_order(keys: list[str]) -> list[str]:
    """The iteration order of a java.util.HashMap(n) holding ``keys`` (as the admin client
    builds a quota entity's values): by bucket of the final table, then insertion order."""

    cap = 1
    while cap < len(keys):
        cap *= 2
    size = 0
    for _k in keys:
        size += 1
        if size > cap * 0.75:
            cap *= 2

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(keys, key=lambda k: (bucket(k), keys.index(k)))


def describe_quotas(a, types: list[str], names: list[str]) -> None:
    """``Quota configs for user-principal 'u', the default client-id are k=v, ...`` per entity
    (ConfigCommand.describeQuotaConfigs); the SCRAM credentials are :func:`describe_scram`'s."""
    for entity, values in describe_client_quotas(a, _quota_filter(types, names)):
        given = dict(entity)
        parts = [
            f"{_QUOTA_LABEL[t]} '{given[t]}'" if given[t] is not None else f"the default {_QUOTA_LABEL[t]}"
            for t in ("user", "client-id", "ip")
            if t in given
        ]
        by_key = dict(values)
        entries = ", ".join(f"{k}={java_double(by_key[k])}" for k in java_hashmap_order(list(by_key)))
        print(f"Quota configs for {', '.join(parts)} are {entries}")


def alter_quotas(a, types: list[str], names: list[str], to_add: dict[str, str], to_delete: list[str]) -> None:
    """ConfigCommand's checks for users/clients/ips, then AlterClientQuotas."""

    etype = types[0]
    if etype == IP:
        unknown = [k for k in list(to_add) + to_delete if k not in IP_QUOTA_KEYS]
        if unknown:
            raise Fail(
                "Only connection quota configs can be added for 'ips' using --bootstrap-server. Unexpected "
                f"config names: {','.join(unknown)}"
            )
    else:
        users_only = not (etype == CLIENT or len(types) == 2)
        scram_ok = SCRAM_MECHANISMS if users_only else ()
        bad_add = [k for k in to_add if k not in CLIENT_QUOTA_KEYS and k not in scram_ok]
        bad_del = [k for k in to_delete if k not in CLIENT_QUOTA_KEYS and k not in scram_ok]
        what = "quota and SCRAM credential configs" if users_only else "quota configs"
        target = USER if users_only else CLIENT
        if bad_add:
            raise Fail(
                f"Only {what} can be added for '{target}' using --bootstrap-server. Unexpected config names: "
                f"Set({', '.join(bad_add)})"
            )
        if bad_del:
            raise Fail(
                f"Only {what} can be deleted for '{target}' using --bootstrap-server. Unexpected config "
                f"names: List({', '.join(bad_del)})"
            )
        scram_add = {k: v for k, v in to_add.items() if k in scram_ok}
        scram_del = [k for k in to_delete if k in scram_ok]
        if scram_add or scram_del:
            if "" in names:
                raise Fail(
                    "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials "
                    "using --bootstrap-server."
                )
            if len(scram_add) != len(to_add) or len(scram_del) != len(to_delete):
                raise Fail(
                    f"Cannot alter both quota and SCRAM credential configs simultaneously for '{USER}' "
                    "using --bootstrap-server."
                )
            alter_scram(a, names[0], scram_add, scram_del)
            return
    if len(types) != len(names):
        raise Fail("Exactly one entity name must be specified for every entity type")
    found = describe_client_quotas(a, _quota_filter(types, names))
    current = dict(found[0][1]) if found else {}
    invalid = [k for k in to_delete if k not in current]
    if invalid:
        raise Fail(f"Invalid config(s): {','.join(invalid)}")
    ops = []
    for k, v in to_add.items():
        try:
            ops.append((k, float(v)))
        except ValueError:
            raise Fail(f"Cannot parse quota configuration value for {k}: {v}") from None
    ops += [(k, None) for k in to_delete]
    entity = [(_QUOTA_ENTITY[t], n or None) for t, n in zip(types, names)]
    with Connection.to_any(
        a.bootstrap_server or a.bootstrap_controller,
        client_id="kafka-configs",
        security=admin_client.command_security(a.command_config),
    ) as conn:

        def build(mod, v):
            rq = mod.request
            return make(
                rq.AlterClientQuotasRequest,
                validate_only=False,
                entries=(
                    make(
                        rq.EntryData,
                        entity=tuple(make(rq.EntityData, entity_type=t, entity_name=n) for t, n in entity),
                        ops=tuple(
                            make(rq.OpData, key=k, value=0.0 if val is None else val, remove=val is None)
                            for k, val in ops
                        ),
                    ),
                ),
            )

        resp = conn.request(ApiKeys.ALTER_CLIENT_QUOTAS, build)
    for r in resp.entries:
        if int(r.error_code):
            raise BrokerError(int(r.error_code), r.error_message, r.error_code.name)


# ----------------------------------------------------------------- SCRAM credentials (users)

SCRAM_MECHANISMS = tuple(m.mechanism_name for m in ScramMechanism)


def alter_scram(a, user: str, to_add: dict[str, str], to_delete: list[str]) -> None:
    """ConfigCommand.alterUserScramCredentialConfigs: the admin client salts the password (a
    random salt, ``iterations`` rounds) and sends the salted password in an
    AlterUserScramCredentials with the deletions."""
    upsertions = []
    for name, value in to_add.items():
        mechanism = ScramMechanism.for_name(name)
        try:
            iterations, password = parse_credential_config(mechanism, value)
        except ValueError as e:
            raise Fail(str(e)) from None
        salt = secure_random_string().encode()
        salted = ScramFormatter(mechanism).salted_password(password, salt, iterations)
        upsertions.append((mechanism.type_code, iterations, salt, salted))
    with Connection.to_any(
        a.bootstrap_server or a.bootstrap_controller,
        client_id="kafka-configs",
        security=admin_client.command_security(a.command_config),
    ) as conn:

        def build(mod, v):
            rq = mod.request
            return make(
                rq.AlterUserScramCredentialsRequest,
                deletions=tuple(
                    make(rq.ScramCredentialDeletion, name=user, mechanism=ScramMechanism.for_name(m).type_code)
                    for m in to_delete
                ),
                upsertions=tuple(
                    make(rq.ScramCredentialUpsertion, name=user, mechanism=t, iterations=i, salt=s, salted_password=p)
                    for t, i, s, p in upsertions
                ),
            )

        resp = conn.request(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, build)
    for r in resp.results:
        if int(r.error_code):
            raise BrokerError(int(r.error_code), r.error_message, r.error_code.name)


def describe_scram(a, names: list[str]) -> None:
    """``SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192``
    per user with credentials (ConfigCommand.describeClientQuotaAndUserScramCredentialConfigs;
    the admin client's ``users()`` leaves out the users that have none)."""
    with Connection.to_any(
        a.bootstrap_server or a.bootstrap_controller,
        client_id="kafka-configs",
        security=admin_client.command_security(a.command_config),
    ) as conn:

        def build(mod, v):
            rq = mod.request
            return make(rq.DescribeUserScramCredentialsRequest, users=tuple(make(rq.UserName, name=n) for n in names))

        resp = conn.request(ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, build)
    if int(resp.error_code):
        raise BrokerError(int(resp.error_code), resp.error_message, resp.error_code.name)
    for r in resp.results:
        code = int(r.error_code)
        if code == int(ErrorCode.resource_not_found):
            continue
        if code:
            err = BrokerError(code, r.error_message, r.error_code.name)
            print(
                f"Error retrieving SCRAM credential configs for user-principal '{r.user}': ExecutionException: "
                f"org.apache.kafka.common.errors.{err.java_name}: {err.message}"
            )
            continue
        text = ", ".join(
            f"{ScramMechanism.from_type(i.mechanism).mechanism_name}=iterations={i.iterations}"
            for i in r.credential_infos
        )
        print(f"SCRAM credential configs for user-principal '{r.user}' are {text}")


def _incremental_alter_wire(a, rtype: int, name: str, to_add: dict, to_delete: list) -> None:
    with Connection.to_any(
        a.bootstrap_server or a.bootstrap_controller,
        client_id="kafka-configs",
        security=admin_client.command_security(a.command_config),
    ) as conn:

        def build(mod, v):
            rq = mod.request
            configs = [make(rq.AlterableConfig, name=k, config_operation=0, value=val) for k, val in to_add.items()]
            configs += [make(rq.AlterableConfig, name=k, config_operation=1, value=None) for k in to_delete]
            return make(
                rq.IncrementalAlterConfigsRequest,
                validate_only=False,
                resources=(
                    make(rq.AlterConfigsResource, resource_type=rtype, resource_name=name, configs=tuple(configs)),
                ),
            )

        resp = conn.request(ApiKeys.INCREMENTAL_ALTER_CONFIGS, build)
    for r in resp.responses:
        if int(r.error_code):
            raise BrokerError(int(r.error_code), r.error_message, r.error_code.name)


def run(a) -> int:
    p = a._parser
    argv = getattr(a, "_argv", None) or sys.argv[1:]
    try:
        _check_args(p, a)
        if a.alter:
            alter(a)
        else:
            describe(a)
    except ToolExit as e:
        return e.code
    except Fail as e:
        print(str(e), file=sys.stderr)
        return 1
    except Exception as e:
        sys.stdout.flush()
        print(f"Error while executing config command with args '{' '.join(argv)}'", file=sys.stderr)
        print(f"java.util.concurrent.ExecutionException: {error_line(e)}", file=sys.stderr)
        return 1
    return 0
