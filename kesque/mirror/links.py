"""Cluster-link settings: the config file ``kesque cluster-links --create`` reads, the checks a
link's settings pass, and which of them are secrets (masked wherever a link is described)."""

from __future__ import annotations

from ..config import ConfigError
from ..metadata.image import MIRROR_SYNCED_CONFIGS
from ..security.client_props import security_protocol
from .offsets import check_offset_configs

# Kafka's client configs of type PASSWORD (ConfigDef.Type.PASSWORD: shown as [hidden]), and every
# ``*.password``: never printed by describe nor dump-log
_SENSITIVE = frozenset(
    {
        "sasl.jaas.config",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
        "basic.auth.user.info",
    }
)
MASK = "[hidden]"  # what Kafka's tools print for a PASSWORD config (ConfigDef.convertToString)
REDACTED = "[redacted]"
CONFIG_SYNC_MS = "topic.config.sync.ms"  # Confluent's name and default
DEFAULT_CONFIG_SYNC_MS = 5000  # what Kafka's metadata tools print for a sensitive record value


def is_sensitive(name: str) -> bool:
    return name in _SENSITIVE or name.endswith(".password")


def masked(configs: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_sensitive(k) else v) for k, v in configs.items()}


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties file as Kafka's tools read ``--config-file``/``--command-config``: ``#``
    and ``!`` comments, ``key=value`` or ``key:value``, a trailing ``\\`` continues the line."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            out[line] = ""
        else:
            out[line[:cut].strip()] = line[cut + 1 :].strip()
    if pending:
        out[pending] = ""
    return out


def check_link_configs(configs: dict[str, str]) -> str | None:
    """Why a link's settings cannot work (None when they can): the message a refused
    ``--create`` prints."""
    servers = (configs.get("bootstrap.servers") or "").strip()
    if not servers:
        return "Cluster link configs must set bootstrap.servers."
    for s in servers.split(","):
        host, _, port = s.strip().rpartition(":")
        if not host or not port.isdigit():
            return f"Invalid url in bootstrap.servers: {s.strip()}"
    try:
        security_protocol(configs)
    except ConfigError as e:
        return str(e)
    try:
        if int(configs.get(CONFIG_SYNC_MS, DEFAULT_CONFIG_SYNC_MS)) <= 0:
            raise ValueError
    except ValueError:
        return (
            f"Invalid value {configs.get(CONFIG_SYNC_MS)} for configuration {CONFIG_SYNC_MS}: a positive number of ms"
        )
    return check_offset_configs(configs)


def config_sync_s(configs: dict[str, str]) -> float:
    """How often a link's mirror topics take their synced configs from their source topics."""
    try:
        return max(int(configs.get(CONFIG_SYNC_MS, DEFAULT_CONFIG_SYNC_MS)), 1) / 1000.0
    except ValueError:
        return DEFAULT_CONFIG_SYNC_MS / 1000.0


def config_changes(source: dict[str, str], mirror: dict[str, str]) -> dict[str, str | None]:
    """The synced configs a mirror topic must change to be as its source topic: ``source`` holds
    the source topic's own overrides, ``mirror`` the mirror's; a synced key the source does not
    override is removed from the mirror (None), so both fall back to their cluster's default."""
    return {k: source.get(k) for k in MIRROR_SYNCED_CONFIGS if source.get(k) != mirror.get(k)}


def bootstrap_addresses(configs: dict[str, str]) -> list[tuple[str, int]]:
    out = []
    for s in (configs.get("bootstrap.servers") or "").split(","):
        host, _, port = s.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


def altered(configs: dict[str, str], updates: dict[str, str | None]) -> dict[str, str]:
    """A link's configs after an alter: each update set, or removed when its value is None."""
    out = dict(configs)
    for k, v in updates.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out
