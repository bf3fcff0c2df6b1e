"""The quorum settings a node starts from, the combinations that cannot work, and the
settings kesque accepts but cannot act on yet.

``controller.quorum.voters`` names the controllers (``id@host:port``, their controller
listeners). A node that runs the controller role must be one of them; a broker-only node must
be able to find them (voters, or ``controller.quorum.bootstrap.servers``: it then asks them for
the voters with DescribeQuorum). Without voters, a
combined node is the only voter of its own single-node quorum, as ``kesque serve`` has always
run. Each refusal is a :class:`ConfigError` naming the setting; what kesque does not do yet
gets one warning at start.
"""

from __future__ import annotations

import logging
import re

from .types import ConfigError

log = logging.getLogger("kesque.config")

VOTERS = "controller.quorum.voters"
BOOTSTRAP = "controller.quorum.bootstrap.servers"

_VOTER = re.compile(r"^(\d+)@(\[[^\]]*\]|[^:]*):(\d+)$")


def check(config) -> None:
    """Refuse what cannot work, warn once about each feature kesque does not do yet."""
    node_id = config.node_id if config.node_id >= 0 else 1
    _check_quorum(config, node_id)


def parse_voters(entries: list[str]) -> list[tuple[int, str, int]]:
    out = []
    for entry in entries:
        m = _VOTER.match(entry.strip())
        if not m:
            raise ConfigError(
                VOTERS, f"Invalid value {entry} for configuration {VOTERS}: expected the form {{id}}@{{host}}:{{port}}"
            )
        out.append((int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    return out


def _roles(config) -> set[str]:
    return set(config.get("process.roles") or ("broker", "controller"))


def voter_addresses(config, node_id: int) -> dict[int, tuple[str, int] | None]:
    """{voter id: (host, port) of its controller listener}. Without voters, a node with the
    controller role is the single voter of its own quorum (no address needed)."""
    voters = {v: (host or "localhost", port) for v, host, port in parse_voters(config.get(VOTERS) or [])}
    if not voters and "controller" in _roles(config):
        return {node_id: None}
    return voters


def _check_quorum(config, node_id: int) -> None:
    voters = parse_voters(config.get(VOTERS) or [])
    ids = [v[0] for v in voters]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(
            VOTERS,
            f"Invalid value {','.join(config.get(VOTERS))} for configuration {VOTERS}: "
            f"node id {dup} appears more than once",
        )
    roles = _roles(config)
    if "controller" in roles and ids and node_id not in ids:
        raise ConfigError(
            VOTERS,
            f"If process.roles contains just the 'controller' role, the node id {node_id} "
            f"must be included in the set of voters {VOTERS}={set(ids)}"
            if roles == {"controller"}
            else f"The node id {node_id} runs the controller role (process.roles="
            f"{','.join(sorted(roles))}) but is not in the set of voters {VOTERS}={set(ids)}",
        )
    servers = [s.strip() for s in config.get(BOOTSTRAP) or [] if s.strip()]
    if roles == {"broker"} and not ids and not servers:
        raise ConfigError(VOTERS, f"process.roles=broker needs the controllers: set {VOTERS} or {BOOTSTRAP}")
    if servers and not ids and "controller" in roles:
        own = {lis.port for lis in config.listeners()}
        others = [s for s in servers if not (s.rsplit(":", 1)[-1].isdigit() and int(s.rsplit(":", 1)[-1]) in own)]
        if others:
            raise ConfigError(
                BOOTSTRAP,
                f"{BOOTSTRAP} names {', '.join(others)}, not this node: kesque does not "
                f"join a dynamic quorum yet; list the controllers in {VOTERS}",
            )
    if servers and ids:
        log.warning("%s is ignored: %s names the controllers", BOOTSTRAP, VOTERS)
