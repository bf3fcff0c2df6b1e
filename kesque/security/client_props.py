"""A client's security from Kafka's client properties (``--command-config``,
``--consumer.config``, a cluster link's configs), sans-IO: what kesque's own wire client
(kesque/client/wire.py) connects with.

* ``security.protocol``: PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL
  (:func:`security_protocol`);
* :func:`ssl_context`: for SSL and SASL_SSL, the ``ssl.*`` settings as Kafka's Java client reads
  them (kesque/security/tls.py: PEM and PKCS12 stores, inline PEM certificates, a key store for
  mutual TLS, ``ssl.endpoint.identification.algorithm`` https by default, empty for no host name
  check);
* :func:`sasl_login`: for SASL_PLAINTEXT and SASL_SSL, ``sasl.mechanism`` (PLAIN,
  SCRAM-SHA-256/512, OAUTHBEARER with an unsecured token) and the options of that mechanism's
  login module in ``sasl.jaas.config``.

A bad value raises :class:`ConfigError` (a ValueError) naming the key.
"""

from __future__ import annotations

import ssl

from ..config import ConfigError
from ..config.broker import SASL_MECHANISMS
from .plain import PLAIN_LOGIN_MODULE, parse_jaas_config
from .sasl_client import SaslLogin
from .tls import TLS_PROTOCOLS, SslSettings, client_context

__all__ = ["LOGIN_MODULES", "SECURITY_PROTOCOLS", "login_options", "sasl_login", "security_protocol", "ssl_context"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
    "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE,
}


def security_protocol(props: dict) -> str:
    """``security.protocol`` (PLAINTEXT when unset), as Kafka's ConfigDef checks it."""
    value = str(props.get("security.protocol") or "PLAINTEXT").strip()
    if value.upper() not in SECURITY_PROTOCOLS:
        raise ConfigError(
            "security.protocol",
            f"Invalid value {value} for configuration security.protocol: String must be one of: "
            + ", ".join(SECURITY_PROTOCOLS),
        )
    return value.upper()


def ssl_context(props: dict) -> ssl.SSLContext | None:
    """The client SSLContext of ``props`` when its security protocol is SSL or SASL_SSL."""
    if security_protocol(props) not in TLS_PROTOCOLS:
        return None
    return client_context(SslSettings.of_props(props))


def login_options(text: str, mechanism: str, key: str) -> dict[str, str]:
    """The options of ``mechanism``'s login module in the JAAS config ``text`` (the value of
    ``key``): ConfigError naming ``key`` when it does not parse or has not exactly one entry for
    the mechanism's login module."""
    try:
        entries = parse_jaas_config(text)
    except ValueError as e:
        raise ConfigError(key, f"Invalid value for configuration {key}: {e}") from None
    entries = [e for e in entries if e.login_module == LOGIN_MODULES[mechanism]]
    if len(entries) != 1:
        raise ConfigError(
            key,
            f"Invalid value for configuration {key}: it must hold exactly one {LOGIN_MODULES[mechanism]} entry "
            f"for {mechanism} (found {len(entries)})",
        )
    return entries[0].options


def sasl_login(props: dict) -> SaslLogin | None:
    """What a client of ``props`` logs in with when its security protocol is SASL_PLAINTEXT or
    SASL_SSL: ``sasl.mechanism`` (Kafka's client default, GSSAPI, is not one of kesque's) and its
    login module's options in ``sasl.jaas.config``."""
    if security_protocol(props) not in SASL_PROTOCOLS:
        return None
    mechanism = str(props.get("sasl.mechanism") or "GSSAPI").strip()
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            "sasl.mechanism",
            f"Invalid value {mechanism} for configuration sasl.mechanism: kesque's SASL mechanisms are "
            + ", ".join(SASL_MECHANISMS),
        )
    text = props.get("sasl.jaas.config")
    if not text:
        raise ConfigError(
            "sasl.jaas.config",
            f"sasl.jaas.config must be set for SASL mechanism {mechanism} ({LOGIN_MODULES[mechanism]} required ...;)",
        )
    options = login_options(str(text), mechanism, "sasl.jaas.config")
    try:
        return SaslLogin(mechanism, options)
    except ValueError as e:
        message = f"The {mechanism} login module in sasl.jaas.config cannot log in ({e})"
        raise ConfigError("sasl.jaas.config", message) from None
