"""TLS for SSL listeners and the broker's own client side, from Kafka's ``ssl.*`` configs.

Kafka's DefaultSslEngineFactory builds an SSLEngine from a listener's settings; here the same
settings build an :class:`ssl.SSLContext`. A listener's settings are its
``listener.name.<listener>.ssl.*`` keys where set, else the broker's ``ssl.*`` keys (Kafka's
per-listener override). The broker's client side (replica fetchers, controller and
coordinator RPCs) uses the settings of the listener it connects to: the inter-broker
listener's, or the controller listener's, as Kafka's ChannelBuilders do.

The key and trust stores, protocols and cipher suites are read as every client side reads them
(kesque/security/tls.py: KIP-651 PEM stores, PKCS12, JKS refused with a way to convert it).

``ssl.client.auth`` none / requested / required; ``ssl.enabled.protocols`` (the lowest and highest
of them bound what OpenSSL negotiates); ``ssl.protocol`` (checked; on the client side a version
caps the highest, as Kafka documents); ``ssl.cipher.suites`` in Java's (IANA) names or OpenSSL's:
the TLS 1.2 suites are set exactly, while Python cannot narrow the TLS 1.3 suites, so a list
naming only TLS 1.3 suites means TLS 1.3 only and a list naming none means TLS 1.2 at most;
``ssl.endpoint.identification.algorithm`` ``https`` (the broker checks the host name of the node
it connects to) or empty. TLS renegotiation is refused, as Kafka's SslTransportLayer does.

Every bad value is a :class:`ConfigError` naming the key, with Kafka's message where Kafka has
one, raised while the context is built (at start-up, before any listener is bound).

The principal of a client that presented a certificate is ``User:`` and its subject DN in RFC
2253 form as Java's ``X500Principal.getName()`` prints it (:func:`rfc2253`), mapped by the
listener's ``ssl.principal.mapping.rules`` (kesque/security/principal.py; DEFAULT: the DN).
"""

from __future__ import annotations

import os
import re
import ssl

from cryptography import x509
from cryptography.x509.oid import NameOID

from ..config import ConfigError
from ..security.principal import SslPrincipalMapper
from ..security.tls import (
    KEYSTORE_KEYS,
    TLS_PROTOCOLS,
    TRUSTSTORE_KEYS,
    SslSettings,
    common,
    load_keystore,
    load_truststore,
    truststore_configured,
)
from ..security.tls import client_context as tls_client_context
from .context import ANONYMOUS, KafkaPrincipal

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


# ---------------------------------------------------------------------------------------- contexts
class ListenerContexts:
    """The node's TLS contexts, built (and so checked) once at start: one per SSL or SASL_SSL
    listener, and the client contexts for the inter-broker and controller listeners when they
    are over TLS (SASL on those channels: kesque/server/sasl.py's client_login)."""

    def __init__(self, config):
        protocols = config.security_protocol_map()
        self.server = {
            lis.name: server_context(config, lis.name)
            for lis in config.listeners()
            if protocols.get(lis.name) in TLS_PROTOCOLS
        }
        # the principal builder of each SSL listener (its ssl.principal.mapping.rules); on a
        # SASL_SSL listener the principal is SASL's
        self.principal = {name: principal_builder(config, name) for name in self.server if protocols.get(name) == "SSL"}
        inter = config.inter_broker_listener()
        self.inter_broker = client_context(config, inter) if protocols.get(inter) in TLS_PROTOCOLS else None
        if inter in self.server:  # what a dynamic update of its stores is checked with
            self.server[inter].validation_client = self_validating_client(config, inter, self.server[inter])
        names = [n.upper() for n in config.get("controller.listener.names")]
        self.controller = (
            client_context(config, names[0]) if names and protocols.get(names[0]) in TLS_PROTOCOLS else None
        )
        # the client sides (attribute -> listener), rebuilt when a dynamic update changes its stores
        self.client_listeners = {
            side: name
            for side, name in (("inter_broker", inter), ("controller", names[0] if names else None))
            if getattr(self, side) is not None
        }


def server_context(config, listener: str) -> ssl.SSLContext:
    """The SSLContext of an SSL listener (ConfigError naming the key on a bad value)."""
    s = SslSettings.of(config, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    common(ctx, s, client=False)
    if not load_keystore(ctx, s):
        raise s.error(
            "ssl.keystore.location",
            f"Listener {listener} uses SSL but no key store is configured: set ssl.keystore.location "
            "(PEM or PKCS12), or ssl.keystore.type=PEM with ssl.keystore.certificate.chain and "
            "ssl.keystore.key",
        )
    client_auth = s["ssl.client.auth"] or "none"
    if client_auth not in _CLIENT_AUTH:
        raise s.error(
            "ssl.client.auth",
            f"Invalid value {client_auth} for configuration {s.keys['ssl.client.auth']}: "
            "String must be one of: required, requested, none",
        )
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    # a configured trust store is loaded (and so checked) whatever ssl.client.auth says, as Kafka's
    # DefaultSslEngineFactory does; without one, client certificates (if asked for) are checked
    # against the system's authorities
    ctx.truststore_configured = truststore_configured(s)
    if ctx.truststore_configured or ctx.verify_mode != ssl.CERT_NONE:
        load_truststore(ctx, s)
    return ctx


def client_context(config, listener: str) -> ssl.SSLContext:
    """The SSLContext with which this node connects to another's SSL ``listener``."""
    return tls_client_context(SslSettings.of(config, listener))


# ---------------------------------------------------------------------------------------- principal
# the attribute keywords of Java's X500Principal.getName() (RFC 2253); any other attribute is
# written as its OID and the hex of its DER value
_RFC2253_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_ESCAPED = set(',=+<>#;"\\')
_STRING_ENCODING = {12: "utf-8", 19: "ascii", 22: "ascii", 20: "latin-1", 26: "ascii", 30: "utf-16-be", 28: "utf-32-be"}


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _ESCAPED else c for c in value)
    if out.startswith(" "):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_hex(attr: x509.NameAttribute) -> str:
    tag = getattr(getattr(attr, "_type", None), "value", 12)
    content = attr.value.encode(_STRING_ENCODING.get(tag, "utf-8"))
    n = len(content)
    length = (
        bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8)
    )
    return "#" + (bytes([tag]) + length + content).hex()


def rfc2253(name: x509.Name) -> str:
    """A DN as Java's ``X500Principal.getName()`` writes it: the most specific RDN first, the
    RFC 2253 keywords, other attributes as ``OID=#<DER hex>``, and Java's escapes."""
    rdns = []
    for rdn in reversed(name.rdns):
        parts = []
        for attr in rdn:
            keyword = _RFC2253_KEYWORDS.get(attr.oid)
            if keyword is None:
                parts.append(f"{attr.oid.dotted_string}={_der_hex(attr)}")
            else:
                parts.append(f"{keyword}={_escape(attr.value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def peer_dn(der: bytes) -> str:
    """The subject DN of a peer certificate (DER), RFC 2253 form."""
    return rfc2253(x509.load_der_x509_certificate(der).subject)


def principal_builder(config, listener: str):
    """``der -> KafkaPrincipal`` for a TLS client of ``listener``, as Kafka's
    DefaultKafkaPrincipalBuilder: ``User:<name>`` where the name is the certificate's subject DN
    (RFC 2253) mapped by ``ssl.principal.mapping.rules`` (DEFAULT: the DN itself);
    ``User:ANONYMOUS`` without a certificate. A DN no rule maps raises NoMatchingRule (the
    handshake then fails, as Kafka's authentication does)."""
    s = SslSettings.of(config, listener)
    rules = s["ssl.principal.mapping.rules"]
    try:
        mapper = SslPrincipalMapper(rules)
    except ValueError as e:
        raise s.error(
            "ssl.principal.mapping.rules",
            f"Invalid value {rules} for configuration {s.keys['ssl.principal.mapping.rules']}: {e}",
        ) from None

    def principal(der: bytes | None) -> KafkaPrincipal:
        if der is None:
            return ANONYMOUS
        return KafkaPrincipal("User", mapper.name(peer_dn(der)))

    return principal


def ssl_principal(der: bytes | None) -> KafkaPrincipal:
    """The principal with Kafka's DEFAULT rules: ``User:<subject DN>``, ``User:ANONYMOUS``
    without a certificate."""
    if der is None:
        return ANONYMOUS
    return KafkaPrincipal("User", peer_dn(der))


# ---------------------------------------------------------------------------------------- dynamic update
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: what a listener's SSL factory is rebuilt from
RECONFIGURABLE_KEYS = KEYSTORE_KEYS + TRUSTSTORE_KEYS
_RECONFIGURABLE = re.compile(r"listener\.name\.([^.]+)\.(ssl\.(?:keystore|key|truststore)\.\w+)$")


def reconfigured_listeners(updates, tls_listeners) -> set[str]:
    """The TLS listeners among ``tls_listeners`` whose store settings an alteration of
    ``updates`` (keys) touches: ``listener.name.<l>.ssl.{keystore,key,truststore}.*``."""
    names = set()
    for key in updates:
        m = _RECONFIGURABLE.match(key)
        if m and m.group(2) in RECONFIGURABLE_KEYS:
            names.add(m.group(1).upper())
    return names & set(tls_listeners)


def _file_state(location) -> tuple:
    try:
        st = os.stat(location) if location else None
    except OSError:
        st = None
    return (st.st_size, st.st_mtime_ns) if st else (None, None)


def store_state(config, listener: str) -> tuple:
    """What a listener's key and trust stores are read from: their settings, and each file's
    size and modification time (the same location altered again re-reads a file replaced in
    place, as Kafka's SslFactory rebuilds when a store file was modified)."""
    s = SslSettings.of(config, listener)
    values = tuple(s[k] for k in RECONFIGURABLE_KEYS)
    return values + _file_state(s["ssl.keystore.location"]) + _file_state(s["ssl.truststore.location"])


def _sans(cert: x509.Certificate) -> set:
    try:
        return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        return set()


def validation_client_context(config, listener: str) -> ssl.SSLContext:
    """The client side Kafka's SslEngineValidator builds from a listener's settings: its key and
    trust stores, no host name check."""
    ctx = client_context(config, listener)
    ctx.check_hostname = False
    return ctx


def handshake(server_side: ssl.SSLContext, client_side: ssl.SSLContext) -> None:
    """A TLS handshake between a server and a client context in memory (Kafka's
    SslEngineValidator.validate); ssl.SSLError when it fails."""
    bios = [ssl.MemoryBIO() for _ in range(4)]
    s_end = server_side.wrap_bio(bios[0], bios[1], server_side=True)
    c_end = client_side.wrap_bio(bios[2], bios[3], server_side=False)
    done = {"s": False, "c": False}
    for _ in range(16):
        for name, end in (("c", c_end), ("s", s_end)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        bios[0].write(bios[3].read())  # client -> server
        bios[2].write(bios[1].read())  # server -> client
        if all(done.values()):
            return
    raise ssl.SSLError("the handshake did not complete")


def self_validating_client(config, listener: str, server_side: ssl.SSLContext) -> ssl.SSLContext | None:
    """The inter-broker listener's validation client when its server and client sides, built from
    the same settings, can connect (Kafka refuses the start otherwise: SslFactory's
    keystoreVerifiableUsingTruststore); None when they cannot, and a dynamic update is then not
    checked by a handshake."""
    try:
        client = validation_client_context(config, listener)
        handshake(server_side, client)
    except (ConfigError, ssl.SSLError):
        return None
    return client


class SslReconfigurationError(ConfigError):
    """A dynamic update of a listener's stores refused, with Kafka's message: ``ConfigException:
    Validation of dynamic config update of SSLFactory failed: <the cause>``."""


def reconfigured_server_context(
    config, listener: str, current: ssl.SSLContext, inter_broker: bool = False
) -> ssl.SSLContext:
    """The listener's SSLContext from its settings as they are now, checked against the one it
    replaces as Kafka's SslFactory.createNewSslEngineFactory does: the new stores must load; the
    key store must keep its certificate's subject DN (unless ``ssl.allow.dn.changes``) and subject
    alternative names (unless ``ssl.allow.san.changes``); a trust store cannot be added to a
    listener that had none; on the inter-broker listener the old and new settings must connect
    to each other both ways (SslEngineValidator), so that the brokers still trust each other.
    SslReconfigurationError with Kafka's message otherwise."""
    prefix = f"listener.name.{listener.lower()}."

    def refused(message: str, key: str = "ssl.keystore.location", exception: str = "") -> ConfigError:
        return SslReconfigurationError(
            prefix + key,
            "org.apache.kafka.common.config.ConfigException: "
            "Validation of dynamic config update of SSLFactory failed: "
            f"{exception or 'org.apache.kafka.common.config.ConfigException'}: {message}",
        )

    try:
        new = server_context(config, listener)
    except ConfigError as e:  # a store that does not load (Kafka names its own exception class)
        raise refused(
            str(e), e.name.removeprefix(prefix), "org.apache.kafka.common.errors.InvalidConfigurationException"
        ) from None
    old_cert = getattr(current, "keystore_certificate", None)
    new_cert = getattr(new, "keystore_certificate", None)
    if old_cert is not None and new_cert is not None:
        if not config.listener_get(listener, "ssl.allow.dn.changes") and old_cert.subject != new_cert.subject:
            raise refused(
                "Keystore DistinguishedName does not match:  existing={alias=kafka, DN=%s}, new={alias=kafka, DN=%s}"
                % (rfc2253(old_cert.subject), rfc2253(new_cert.subject))
            )
        if not config.listener_get(listener, "ssl.allow.san.changes") and not _sans(old_cert) <= _sans(new_cert):
            names = lambda c: "[" + ", ".join(sorted(str(n.value) for n in _sans(c))) + "]"  # noqa: E731
            raise refused(
                "Keystore SubjectAltNames do not match:  existing={alias=kafka, SAN=%s}, new={alias=kafka, SAN=%s}"
                % (names(old_cert), names(new_cert))
            )
    if not getattr(current, "truststore_configured", False) and new.truststore_configured:
        raise refused(
            "Cannot add SSL truststore to an existing listener for which no truststore was configured.",
            "ssl.truststore.location",
        )
    old_client = getattr(current, "validation_client", None)
    if inter_broker and old_client is not None:
        new_client = validation_client_context(config, listener)
        try:
            handshake(current, new_client)
            handshake(new, old_client)
        except ssl.SSLError as e:
            handshake_failed = "javax.net.ssl.SSLHandshakeException"
            raise refused(e.reason or str(e), "ssl.truststore.location", handshake_failed) from None
        new.validation_client = new_client
    return new
