"""Kafka's client security properties in librdkafka's names, for the tools built on
confluent-kafka: a ``--command-config`` (or ``--consumer.config``, ``--producer.config``) holds
what Kafka's Java tools read, which librdkafka refuses (``sasl.jaas.config``, ``ssl.truststore.*``).

The properties are read by kesque/security/client_props.py first, as kesque's own wire client
reads them (a bad value raises ConfigError naming the key), then written in librdkafka's terms:

* the trust store (a PEM file, inline PEM or PKCS12): its certificates as ``ssl.ca.pem``;
* the key store: PEM file -> ``ssl.certificate.location`` and ``ssl.key.location``, inline PEM ->
  ``ssl.certificate.pem`` and ``ssl.key.pem``, PKCS12 -> ``ssl.keystore.location`` and
  ``ssl.keystore.password`` (librdkafka's own PKCS12 keys);
* ``ssl.endpoint.identification.algorithm`` empty -> ``none``;
* PLAIN and SCRAM's JAAS ``username`` and ``password`` -> ``sasl.username``, ``sasl.password``;
  OAUTHBEARER's unsecured login -> ``enable.sasl.oauthbearer.unsecure.jwt`` and
  ``sasl.oauthbearer.config`` (``principal=``, ``principalClaimName=``, ``lifeSeconds=``,
  ``scope=``, ``extension_<name>=``).

Properties already in librdkafka's names pass unchanged.
"""

from __future__ import annotations

import ssl

from ...client.wire import ClientSecurity
from ...security.tls import PEM, PKCS12, SslSettings, keystore_kind

# Java-only keys: dropped once their meaning is carried by librdkafka's
_JAVA_SSL = (
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.keystore.type",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.enabled.protocols",
    "ssl.protocol",
)


def librdkafka_props(props: dict) -> dict:
    """``props`` with Kafka's security properties written as librdkafka's (see the module)."""
    java = "sasl.jaas.config" in props or any(k in props for k in _JAVA_SSL)
    if not java:
        return dict(props)
    security = ClientSecurity.of(props)
    out = {k: v for k, v in props.items() if k not in _JAVA_SSL and k != "sasl.jaas.config"}
    if security.ssl_context is not None:
        _ssl(props, security.ssl_context, out)
    if security.sasl is not None:
        out.update(_sasl(security.sasl.mechanism, security.sasl.options))
    return out


def _ssl(props: dict, ctx: ssl.SSLContext, out: dict) -> None:
    if props.get("ssl.truststore.location") or props.get("ssl.truststore.certificates"):
        out["ssl.ca.pem"] = "".join(ssl.DER_cert_to_PEM_cert(der) for der in ctx.get_ca_certs(binary_form=True))
    if props.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    s = SslSettings.of_props(props)
    if s["ssl.keystore.key"] is not None:
        out["ssl.key.pem"] = s["ssl.keystore.key"]
        out["ssl.certificate.pem"] = s["ssl.keystore.certificate.chain"]
        return
    kind = keystore_kind(s)
    if kind == PEM:
        out.pop("ssl.keystore.location", None)
        out.pop("ssl.keystore.password", None)
        out["ssl.certificate.location"] = out["ssl.key.location"] = s["ssl.keystore.location"]
    elif kind == PKCS12:
        out["ssl.keystore.location"] = s["ssl.keystore.location"]
        out["ssl.keystore.password"] = s["ssl.keystore.password"]


def _sasl(mechanism: str, options: dict[str, str]) -> dict:
    if mechanism != "OAUTHBEARER":
        return {"sasl.mechanism": mechanism, "sasl.username": options["username"], "sasl.password": options["password"]}
    claim = (options.get("unsecuredLoginPrincipalClaimName") or "").strip() or "sub"
    parts = [f"principal={options[f'unsecuredLoginStringClaim_{claim}']}"]
    if claim != "sub":
        parts.append(f"principalClaimName={claim}")
    if options.get("unsecuredLoginLifetimeSeconds"):
        parts.append(f"lifeSeconds={options['unsecuredLoginLifetimeSeconds']}")
    scope = options.get("unsecuredLoginListClaim_scope")
    if scope:
        parts.append("scope=" + ",".join(v for v in scope[1:].split(scope[0]) if v))
    for key, value in sorted(options.items()):
        if key.startswith("unsecuredLoginExtension_"):
            parts.append(f"extension_{key[len('unsecuredLoginExtension_') :]}={value}")
    return {
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": " ".join(parts),
    }
