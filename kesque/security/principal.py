"""Kafka's KafkaPrincipal and the SSL principal mapper (``ssl.principal.mapping.rules``).

The mapper reads Kafka's rule grammar: a comma-separated list of ``DEFAULT`` (the distinguished
name as it is) and ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last
slash to lower- or upper-case the result. The first rule whose pattern matches the whole DN
(RFC 2253 form, as Java's ``X500Principal.getName()``) gives the name; none matching is
:class:`NoMatchingRule`. The patterns are Java regular expressions; Python's ``re`` reads the
common subset the same, and the replacement keeps Java's ``$n`` group references (a reference
to a group the pattern does not have stays literal text, as Kafka escapes it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ANONYMOUS",
    "USER_TYPE",
    "KafkaPrincipal",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "parse_principal",
]

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Kafka's KafkaPrincipal: a type (``User``) and a name, written ``type:name``."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


# the principal of every request on a PLAINTEXT listener (Kafka's KafkaPrincipal.ANONYMOUS)
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def parse_principal(text: str | None) -> KafkaPrincipal:
    """Kafka's SecurityUtils.parseKafkaPrincipal: ``type:name``, split at the first colon."""
    if text:
        ptype, sep, name = text.partition(":")
        if sep:
            return KafkaPrincipal(ptype, name)
    raise ValueError(f"expected a string in format principalType:principalName but got {text}")


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a DN (Kafka's NoMatchingRule)."""


DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)


class _Rule:
    __slots__ = ("is_default", "pattern", "regex", "replacement", "lower", "upper", "_parts")

    def __init__(self, pattern: str | None = None, replacement: str | None = None, lower=False, upper=False):
        self.is_default = pattern is None
        self.pattern = pattern
        self.replacement = replacement
        self.lower = lower
        self.upper = upper
        self.regex = None
        self._parts: list[str | int] = []
        if pattern is not None:
            try:
                self.regex = re.compile(pattern)
            except re.error as e:
                raise ValueError(f"Invalid rule pattern `{pattern}`: {e}") from None
            self._parts = _java_replacement(replacement or "", self.regex.groups)

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        if self.regex.fullmatch(dn) is None:
            return None
        parts = self._parts
        result = self.regex.sub(lambda m: "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        out = "RULE:" + self.pattern
        if self.replacement is not None:
            out += "/" + self.replacement
        if self.lower:
            out += "/L"
        elif self.upper:
            out += "/U"
        return out


def _java_replacement(text: str, groups: int) -> list[str | int]:
    """Java's Matcher.replaceAll replacement: ``\\x`` is a literal x, ``$n`` a group reference
    (digits taken while the number stays a group), after Kafka's escaping of references to
    groups the pattern lacks (kept as literal text when the pattern has any group at all)."""
    parts: list[str | int] = []
    lit = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 1
            if i == n:
                raise ValueError("character to be escaped is missing")
            lit.append(text[i])
            i += 1
        elif c == "$":
            i += 1
            if i == n or not text[i].isdigit():
                raise ValueError("Illegal group reference")
            ref = int(text[i])
            if ref > groups and groups > 0:  # Kafka escapes it: the $ and its digits stay text
                lit.append("$")
                continue
            if ref > groups:
                raise ValueError(f"No group {ref}")
            i += 1
            while i < n and text[i].isdigit() and ref * 10 + int(text[i]) <= groups:
                ref = ref * 10 + int(text[i])
                i += 1
            if lit:
                parts.append("".join(lit))
                lit = []
            parts.append(ref)
        else:
            lit.append(c)
            i += 1
    if lit:
        parts.append("".join(lit))
    return parts


class SslPrincipalMapper:
    """Kafka's SslPrincipalMapper: ``ssl.principal.mapping.rules`` applied to a certificate's DN."""

    def __init__(self, rules: str | None = DEFAULT_SSL_PRINCIPAL_MAPPING_RULES):
        if rules is None:
            rules = DEFAULT_SSL_PRINCIPAL_MAPPING_RULES
        self.rules = [r for r in map(self._parse, self._split(rules)) if r is not None]

    @staticmethod
    def _split(rules: str) -> list[str]:
        text = rules.strip()
        out, pos = [], 0
        while pos <= len(text):  # Java's Matcher.find: an empty match moves on by one
            m = _RULE_SPLITTER.search(text, pos)
            if m is None:
                break
            out.append(m.group(1))
            pos = m.end() if m.end() > m.start() else m.end() + 1
        return out

    @staticmethod
    def _parse(rule: str) -> _Rule | None:
        m = _RULE_PARSER.match(rule)
        if m is None:
            raise ValueError(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`")
        if m.group(1) is not None:
            return _Rule()
        if m.group(2) is not None:
            return _Rule(m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U")
        return None  # empty rules are ignored

    def name(self, distinguished_name: str) -> str:
        """The principal name of a DN (Kafka's getName)."""
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"
