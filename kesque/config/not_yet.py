"""Settings kesque accepts but cannot act on yet, and the ones it must refuse.

A Kafka user's ``server.properties`` may ask for things kesque does not do yet: a
multi-node controller quorum, separate broker and controller nodes, a log cleaner, unclean
leader election. Each of those gets one warning at start saying so (not
the generic "not used" line), so nobody believes a lone node is a cluster or that a
compacted topic is compacted. A voter set or bootstrap list naming several controllers is
refused: starting would form a cluster of one where the file describes a quorum.
"""

from __future__ import annotations

import logging
import re

from .types import ConfigError

log = logging.getLogger("kesque.config")

VOTERS = "controller.quorum.voters"
BOOTSTRAP = "controller.quorum.bootstrap.servers"
CLEANER_PREFIX = "log.cleaner."
UNCLEAN = "unclean.leader.election.enable"

_VOTER = re.compile(r"^(\d+)@(\[[^\]]*\]|[^:]*):(\d+)$")


def covers(name: str) -> bool:
    """A key whose not-yet warning replaces the generic "Kafka config ... is not used" one."""
    return name.startswith(CLEANER_PREFIX)


def check(config) -> None:
    """Refuse what would mislead, warn once about each feature kesque does not do yet."""
    node_id = config.node_id if config.node_id >= 0 else 1
    _check_voters(config, node_id)
    _check_bootstrap_servers(config)
    _check_roles(config)
    _check_cleaner(config)
    _check_unclean(config)


def parse_voters(entries: list[str]) -> list[tuple[int, str, int]]:
    out = []
    for entry in entries:
        m = _VOTER.match(entry.strip())
        if not m:
            raise ConfigError(VOTERS, f"Invalid value {entry} for configuration {VOTERS}: expected the form "
                                      "{id}@{host}:{port}")
        out.append((int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    return out


def _check_voters(config, node_id: int) -> None:
    voters = parse_voters(config.get(VOTERS) or [])
    ids = sorted({v[0] for v in voters})
    if len(ids) > 1:
        raise ConfigError(VOTERS, f"{VOTERS} names {len(ids)} controllers (node ids {', '.join(map(str, ids))}): "
                                  "kesque does not run a multi-node controller quorum yet, and does not start "
                                  "rather than form a cluster of one")
    if ids and ids[0] != node_id:
        log.warning("%s names node %d only, not this node (node.id=%d): kesque does not join another node's "
                    "controller quorum yet; node %d runs as the only controller of a single-node cluster",
                    VOTERS, ids[0], node_id, node_id)


def _check_bootstrap_servers(config) -> None:
    servers = [s.strip() for s in config.get(BOOTSTRAP) or [] if s.strip()]
    if len(servers) > 1:
        raise ConfigError(BOOTSTRAP, f"{BOOTSTRAP} names {len(servers)} controllers ({', '.join(servers)}): kesque "
                                     "does not run a multi-node controller quorum yet, and does not start rather "
                                     "than form a cluster of one")
    if servers:
        own_ports = {lis.port for lis in config.listeners()}
        port = servers[0].rsplit(":", 1)[-1]
        if not (port.isdigit() and int(port) in own_ports):
            log.warning("%s names %s, which is not one of this node's listeners: kesque does not join another "
                        "node's controller quorum yet; this node runs as the only controller of a single-node "
                        "cluster", BOOTSTRAP, servers[0])


def _check_roles(config) -> None:
    roles = config.get("process.roles")
    if config.is_set("process.roles") and set(roles) != {"broker", "controller"}:
        log.warning("process.roles=%s: kesque does not run separate broker and controller nodes yet; this node "
                    "runs both roles (its controller in-process) as a single-node cluster", ",".join(roles))


def _check_cleaner(config) -> None:
    keys = [k for k in config.raw if k.startswith(CLEANER_PREFIX)
            and not (k == "log.cleaner.enable" and config.get(k) is False)]
    if "compact" in (config.get("log.cleanup.policy") or []) and config.is_set("log.cleanup.policy"):
        keys.append("log.cleanup.policy")
    if keys:
        log.warning("kesque has no log cleaner yet (log compaction is not implemented): %s %s no effect, and "
                    "topics with cleanup.policy=compact keep every record", ", ".join(sorted(keys)),
                    "has" if len(keys) == 1 else "have")


def _check_unclean(config) -> None:
    if config.static.get(UNCLEAN) is True:
        log.warning("kesque does not replicate between brokers yet, so there is no leader election, clean or "
                    "unclean: %s=true has no effect", UNCLEAN)


class CompactionWarnings:
    """One warning per compacted topic (at start for the topics there are, then as topics
    are created or altered to cleanup.policy=compact): kesque never compacts them."""

    def __init__(self, is_compacted):
        self.is_compacted = is_compacted  # callable(topic) -> bool
        self.warned: set[str] = set()

    def check(self, topics) -> None:
        from ..controller.controller import INTERNAL_TOPICS

        fresh = sorted(t for t in set(topics) - self.warned if t not in INTERNAL_TOPICS and self.is_compacted(t))
        if fresh:
            self.warned.update(fresh)
            log.warning("Topic%s %s %s cleanup.policy=compact, but kesque has no log cleaner yet: %s records are "
                        "never compacted (only deleted by retention when the policy also says delete)",
                        "s" if len(fresh) > 1 else "", ", ".join(fresh), "have" if len(fresh) > 1 else "has",
                        "their" if len(fresh) > 1 else "its")
