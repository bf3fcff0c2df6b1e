"""SASL/PLAIN on the broker, as Kafka's PlainSaslServer and PlainServerCallbackHandler: the
client's ``authzid NUL authcid NUL password`` message with Kafka's error messages, checked
against the ``user_<name>="<password>"`` options of the listener's JAAS config
(``listener.name.<l>.plain.sasl.jaas.config``), which :func:`parse_jaas_config` reads."""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass, field

from .sasl import IllegalSaslState, SaslAuthenticationFailed

__all__ = ["JaasEntry", "PlainSaslServer", "parse_jaas_config", "plain_users"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


_TOKEN = re.compile(r'\s*(?:(?P<q>"(?:[^"\\]|\\.)*")|(?P<eq>=)|(?P<semi>;)|(?P<word>[^\s=;"]+))', re.S)


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """The login modules of a ``sasl.jaas.config`` value: ``<class> <flag> key="value" ...;``
    (flags required, requisite, sufficient, optional; values quoted or bare)."""
    tokens: list[tuple[str, str]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"Unexpected character in JAAS config at {pos}: {text[pos : pos + 10]!r}")
        pos = m.end()
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "q":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        tokens.append((kind, value))
    entries, i = [], 0
    while i < len(tokens):
        if tokens[i][0] != "word" or i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise ValueError("Invalid JAAS config: a login module name and a control flag expected")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in ("required", "requisite", "sufficient", "optional"):
            raise ValueError(f"Invalid control flag '{tokens[i + 1][1]}' in JAAS config")
        entry, i = JaasEntry(module, flag), i + 2
        while i < len(tokens) and tokens[i][0] != "semi":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "eq" or tokens[i + 2][0] == "semi":
                raise ValueError(f"Value not specified for key '{tokens[i][1]}' in JAAS config")
            entry.options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError("Invalid JAAS config: the login module's entry does not end with ';'")
        entries.append(entry)
        i += 1
    if not entries:
        raise ValueError("JAAS config entry not terminated by semi-colon")
    return entries


def plain_users(jaas_config: str) -> dict[str, str]:
    """The ``user_<name>`` options of the PlainLoginModule entry: name -> password."""
    entries = [e for e in parse_jaas_config(jaas_config) if e.login_module == PLAIN_LOGIN_MODULE]
    if len(entries) != 1:
        raise ValueError(f"Must supply exactly 1 non-null JAAS mechanism configuration (size was {len(entries)})")
    return {k[5:]: v for k, v in entries[0].options.items() if k.startswith("user_")}


class PlainSaslServer:
    """One connection's PLAIN exchange: one token in, an empty token out, or
    :class:`SaslAuthenticationFailed` with Kafka's message."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]):
        self._users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslState("Authentication exchange has completed")
        message = response.decode("utf-8", "replace")
        tokens = message.split("\0", 3)  # Kafka reads up to 4 and wants exactly 3
        if len(tokens) != 3:
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}")
        authzid, user, password = tokens
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.authorization_id = user
        self.complete = True
        return b""
