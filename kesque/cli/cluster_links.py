"""``kesque cluster-links``: create, list, describe and delete cluster links, with the names and
flags of Confluent's ``kafka-cluster-links`` (docs/mirror.md says where it differs)::

    kesque cluster-links --bootstrap-server DEST --create --link NAME --config-file F
    kesque cluster-links --bootstrap-server DEST --list
    kesque cluster-links --bootstrap-server DEST --describe [--link NAME]
    kesque cluster-links --bootstrap-server DEST --delete --link NAME
    kesque cluster-links --bootstrap-server DEST --alter --link NAME [--config-file F] [--config k=v,...]
        [--delete-config k1,k2]

The requests are kesque's KesqueClusterLinks API (:mod:`kesque.protocol.cluster_links`), over
the security of ``--command-config`` (Kafka's client properties: ``security.protocol``,
``ssl.*``, ``sasl.*``), as Confluent's tool takes it.
"""

from __future__ import annotations

import argparse
import sys

from ..client.wire import PLAINTEXT, AuthenticationError, ClientSecurity, Connection, WireError
from ..errors import error_name
from ..mirror import links as link_rules
from ..protocol import cluster_links as cl
from ..protocol.api import KESQUE_CLUSTER_LINKS
from ..storage.checkpoint import uuid_to_kafka
from .plumbing.javautil import load_props


class ToolError(Exception):
    pass


# the security of each destination the tool talks to (its --command-config), by bootstrap string
_SECURITY: dict[str, ClientSecurity] = {}


def use_command_config(bootstrap: str, path: str | None) -> None:
    """Connect to ``bootstrap`` with the client properties of the file ``path`` (None: PLAINTEXT);
    ConfigError naming the key for a bad value."""
    _SECURITY[bootstrap] = ClientSecurity.of(load_props(path)) if path else PLAINTEXT


def security_of(bootstrap: str) -> ClientSecurity:
    return _SECURITY.get(bootstrap, PLAINTEXT)


def _refused(bootstrap: str, e: AuthenticationError) -> ToolError:
    return ToolError(f"Error while talking to {bootstrap}: org.apache.kafka.common.errors.{e.java_name}: {e}")


def call(bootstrap: str, req: dict, conn: Connection | None = None) -> dict:
    """One KesqueClusterLinks request to any of ``bootstrap`` (or ``conn``); raises ToolError with
    the broker's message when it failed."""
    own = conn is None
    try:
        if own:
            conn = Connection.to_any(bootstrap, client_id="kesque-cluster-links", security=security_of(bootstrap))
        body = conn.raw_request(KESQUE_CLUSTER_LINKS, cl.VERSION, cl.encode_request(req))
    except AuthenticationError as e:
        raise _refused(bootstrap, e) from None
    except (OSError, WireError) as e:
        raise ToolError(f"Error while talking to {bootstrap}: {e}") from None
    finally:
        if own and conn is not None:
            conn.close()
    resp = cl.decode_response_body(body)
    if resp["error_code"]:
        raise ToolError(resp["error_message"] or error_name(resp["error_code"]))
    return resp


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kesque cluster-links", description="Create, list, describe and delete cluster links."
    )
    p.add_argument("--bootstrap-server", required=True, help="REQUIRED: the destination cluster's server(s)")
    p.add_argument("--command-config", help="Property file of the client settings to reach the destination with.")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="Create a cluster link.")
    action.add_argument("--list", action="store_true", help="List the cluster links.")
    action.add_argument("--describe", action="store_true", help="Describe cluster links and their configs.")
    action.add_argument("--delete", action="store_true", help="Delete a cluster link.")
    action.add_argument(
        "--alter",
        action="store_true",
        help="Change a link's configs: those of --config-file and --config set, those of --delete-config removed.",
    )
    p.add_argument("--link", help="The name of the cluster link.")
    p.add_argument("--config-file", help="Properties of the link: the source's bootstrap.servers and client settings.")
    p.add_argument("--config", help="Link configs as key=value[,key=value], after those of --config-file.")
    p.add_argument("--delete-config", help="With --alter: link config keys to remove, k1[,k2].")
    p.add_argument("--validate-only", action="store_true", help="Check the link's configs without creating it.")
    p.add_argument("--include-topics", action="store_true", help="List the mirror topics of each link.")
    return p


def _configs(a) -> dict[str, str]:
    out: dict[str, str] = {}
    if a.config_file:
        with open(a.config_file, encoding="utf-8") as f:
            out.update(link_rules.parse_properties(f.read()))
    for item in (a.config or "").split(","):
        if item.strip():
            k, sep, v = item.partition("=")
            if not sep:
                raise ToolError(f"Invalid config: {item} (expected key=value)")
            out[k.strip()] = v.strip()
    return out


def run(a) -> int:
    if (a.create or a.delete or a.alter) and not a.link:
        raise ToolError("--link is required with --create, --alter and --delete")
    if a.alter:
        updates: dict[str, str | None] = dict(_configs(a))
        for k in (a.delete_config or "").split(","):
            if k.strip():
                updates[k.strip()] = None
        if not updates:
            raise ToolError("--alter needs --config-file, --config or --delete-config")
        req = {
            "operation": cl.ALTER_LINK,
            "link_name": a.link,
            "configs": [{"name": k, "value": v} for k, v in sorted(updates.items())],
        }
        call(a.bootstrap_server, req)
        print(f"Completed updating config for cluster link {a.link}.")
        return 0
    if a.create:
        configs = _configs(a)
        why = link_rules.check_link_configs(configs)
        if why:
            raise ToolError(why)
        req = {
            "operation": cl.CREATE_LINK,
            "link_name": a.link,
            "configs": [{"name": k, "value": v} for k, v in sorted(configs.items())],
            "validate_only": a.validate_only,
        }
        call(a.bootstrap_server, req)
        what = "validation" if a.validate_only else "creation"
        print(f"Cluster link '{a.link}' {what} successfully completed.")
        return 0
    if a.delete:
        call(a.bootstrap_server, {"operation": cl.DELETE_LINK, "link_name": a.link})
        print(f"Cluster link '{a.link}' deletion successfully completed.")
        return 0
    resp = call(a.bootstrap_server, {"operation": cl.LIST_LINKS, "link_name": a.link})
    for lk in resp["links"]:
        line = f"Link name: '{lk['link_name']}', link ID: '{uuid_to_kafka(lk['link_id'])}'"
        if a.include_topics or a.describe:
            line += f", topics: [{', '.join(lk['mirror_topics'])}]"
        print(line)
        if a.describe:
            for c in lk["configs"]:
                value = link_rules.MASK if c["sensitive"] else c["value"]
                print(f"  {c['name']}={value} sensitive={str(c['sensitive']).lower()}")
    return 0


def main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    try:
        use_command_config(a.bootstrap_server, a.command_config)
        return run(a)
    except AuthenticationError as e:
        sys.stdout.flush()
        print(f"Error: {_refused(a.bootstrap_server, e)}", file=sys.stderr)
        return 1
    except (ToolError, OSError, ValueError) as e:
        sys.stdout.flush()
        print(f"Error: {e}", file=sys.stderr)
        return 1
