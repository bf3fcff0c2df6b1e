"""Config keys: types, parsing and validation with Kafka's names and rules."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An invalid config name or value; the message names the key."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def _parse_bool(name: str, v: str) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ConfigError(name, f"Invalid value {v} for configuration {name}: Expected value to be either true or false")


def _parse_int(bits: int):
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    kind = {16: "a 16-bit integer", 32: "a 32-bit integer", 64: "a 64-bit integer"}[bits]
    type_name = {16: "SHORT", 32: "INT", 64: "LONG"}[bits]

    def parse(name: str, v: str) -> int:
        try:
            n = int(str(v).strip())
        except ValueError:
            raise ConfigError(
                name, f"Invalid value {v} for configuration {name}: Not a number of type {type_name}"
            ) from None
        if not lo <= n <= hi:
            raise ConfigError(name, f"Invalid value {v} for configuration {name}: value is not {kind}")
        return n

    return parse


def _parse_double(name: str, v: str) -> float:
    try:
        return float(str(v).strip())
    except ValueError:
        raise ConfigError(name, f"Invalid value {v} for configuration {name}: Not a number of type DOUBLE") from None


def _parse_list(name: str, v: str) -> list[str]:
    if isinstance(v, list):
        return v
    s = str(v).strip()
    return [x.strip() for x in s.split(",") if x.strip()] if s else []


_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")


def _parse_list_keeping_empty(name: str, v: str) -> list[str]:
    """Kafka's own LIST parse (ConfigDef.parseType): the trimmed value split at commas and the
    whitespace around them, empty elements kept (``"0:1,,x"`` is three elements). Keys whose
    validator reports the list as Kafka prints it use this."""
    if isinstance(v, list):
        return v
    s = str(v).strip()
    return _COMMA_WITH_WHITESPACE.split(s) if s else []


def _parse_str(name: str, v: str) -> str:
    return str(v).strip()


PARSERS: dict[str, Callable[[str, str], Any]] = {
    "BOOLEAN": _parse_bool,
    "STRING": _parse_str,
    "CLASS": _parse_str,
    "PASSWORD": _parse_str,
    "SHORT": _parse_int(16),
    "INT": _parse_int(32),
    "LONG": _parse_int(64),
    "DOUBLE": _parse_double,
    "LIST": _parse_list,
    "LIST_KEEPING_EMPTY": _parse_list_keeping_empty,
}

# DescribeConfigs config_type codes (KIP-569)
CONFIG_TYPE_CODES = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}


def at_least(n):
    def check(name, v):
        if v < n:
            raise ConfigError(name, f"Invalid value {v} for configuration {name}: Value must be at least {n}")

    return check


def between(lo, hi):
    def check(name, v):
        if not lo <= v <= hi:
            raise ConfigError(
                name,
                f"Invalid value {v} for configuration {name}: Value must be no less than {lo} and no more than {hi}",
            )

    return check


def one_of(*options, case_insensitive=False):
    def check(name, v):
        values = v if isinstance(v, list) else [v]
        for item in values:
            ok = item.lower() in [o.lower() for o in options] if case_insensitive else item in options
            if not ok:
                raise ConfigError(
                    name, f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(options)}"
                )

    return check


_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def throttled_replica_list(name, v):
    """Kafka's ThrottledReplicaListValidator (``*.replication.throttled.replicas``): the
    literal ``*`` or ``partition:broker`` entries (empty entries allowed)."""
    proposed = [str(item).strip() for item in v]
    if all(_REPLICA.fullmatch(s) for s in proposed) or "".join(proposed) == "*":
        return
    raise ConfigError(
        name,
        f"Invalid value [{', '.join(map(str, v))}] for configuration {name}: {name} must be "
        "the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


def non_empty_list(name, v):
    if not v:
        raise ConfigError(name, f"Invalid value {v} for configuration {name}: Empty list")


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str
    default: Any
    doc: str = ""
    validator: Callable[[str, Any], None] | None = None
    # broker keys whose value supplies this topic key's default, highest priority first
    synonyms: tuple[str, ...] = field(default=())
    # broker key updatable with AlterConfigs (per broker or cluster default)
    dynamic: bool = False
    # how the value is parsed when that differs from Kafka's declared type (Kafka declares
    # ``listeners`` a STRING and splits it itself; DescribeConfigs reports the declared type)
    parse_as: str | None = None

    def parse(self, value) -> Any:
        if value is None:
            return None
        v = PARSERS[self.parse_as or self.type](self.name, value)
        if self.validator is not None:
            self.validator(self.name, v)
        return v


def render(value: Any) -> str | None:
    """A parsed value as DescribeConfigs shows it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float) and math.isfinite(value) and value and not 1e-3 <= abs(value) < 1e7:
        return _java_scientific(value)
    return str(value)


def _java_scientific(value: float) -> str:
    """Java's Double.toString outside [1e-3, 1e7): shortest digits as ``d.dddE<exp>``."""
    sign, digits, exp = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(digits) - 1 + exp}"
