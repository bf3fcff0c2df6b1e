"""TLS for SSL listeners and the broker's own client side, from Kafka's ``ssl.*`` configs.

Kafka's DefaultSslEngineFactory builds an SSLEngine from a listener's settings; here the same
settings build an :class:`ssl.SSLContext`. A listener's settings are its
``listener.name.<listener>.ssl.*`` keys where set, else the broker's ``ssl.*`` keys (Kafka's
per-listener override). The broker's client side (replica fetchers, controller and
coordinator RPCs) uses the settings of the listener it connects to: the inter-broker
listener's, or the controller listener's, as Kafka's ChannelBuilders do.

Key stores (KIP-651 and PKCS12):

* ``ssl.keystore.type=PEM``: ``ssl.keystore.location`` names a file with the private key and the
  certificate chain, or ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain`` hold them
  inline; an encrypted key is opened with ``ssl.key.password``;
* ``PKCS12``: ``ssl.keystore.location`` and ``ssl.keystore.password`` (read with ``cryptography``;
  the key goes to OpenSSL re-encrypted under a one-time password, never in clear on disk);
* the trust store the same way: ``ssl.truststore.certificates`` inline or a PEM file, or a
  PKCS12 file; none: the system's certificate authorities, as Java's default trust store.

Kafka's default store type is JKS, which only a JVM reads: a JKS file stops the start with a
message saying how to convert it; a store whose type is left at its default but whose file is
PEM or PKCS12 is read as what it is (as the JDK reads PKCS12 for type JKS).

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
import secrets
import ssl
import tempfile
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from ..config import ConfigError
from ..security.principal import SslPrincipalMapper
from .context import ANONYMOUS, KafkaPrincipal

PEM = "PEM"
TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # the security protocols over TLS
PKCS12 = "PKCS12"
JKS = "JKS"

_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# SSLContext.getInstance names Java knows (ssl.protocol)
_CONTEXT_PROTOCOLS = {"TLS", "SSL", "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", "Default"}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

_LIST_KEYS = ("ssl.enabled.protocols", "ssl.cipher.suites")
SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules",
)


@dataclass
class SslSettings:
    """One listener's ``ssl.*`` values (its ``listener.name.<l>.`` overrides applied), each with
    the key it came from, so that an error names the key the user wrote."""

    listener: str
    values: dict
    keys: dict

    @classmethod
    def of(cls, config, listener: str) -> SslSettings:
        values, keys = {}, {}
        prefix = f"listener.name.{listener.lower()}."
        for key in SSL_KEYS:
            own = config.listener_value(prefix + key)
            if own is not None:
                values[key], keys[key] = own, prefix + key
            else:
                values[key], keys[key] = config.get(key), key
        return cls(listener, values, keys)

    @classmethod
    def of_client(cls, configs: dict[str, str]) -> SslSettings:
        """A client's ``ssl.*`` settings given as plain strings (a cluster link's, with Kafka's
        client config names and defaults: the lists comma-separated, the host name checked unless
        ``ssl.endpoint.identification.algorithm`` is set empty)."""
        values = {}
        for key in SSL_KEYS:
            v = configs.get(key)
            if key in _LIST_KEYS and v is not None:
                v = [x.strip() for x in v.split(",") if x.strip()]
            values[key] = v
        if "ssl.endpoint.identification.algorithm" not in configs:
            values["ssl.endpoint.identification.algorithm"] = "https"  # Kafka's client default
        return cls("client", values, {key: key for key in SSL_KEYS})

    def __getitem__(self, key: str):
        v = self.values[key]
        return None if v == "" else v

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError naming the key as the user wrote it (its listener prefix kept)."""
        name = self.keys[key]
        return ConfigError(name, message if name in message else f"{name}: {message}")


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
    _common(ctx, s, client=False)
    if not _load_keystore(ctx, s):
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
    ctx.truststore_configured = _truststore_configured(s)
    if ctx.truststore_configured or ctx.verify_mode != ssl.CERT_NONE:
        _load_truststore(ctx, s)
    return ctx


def client_context(config, listener: str) -> ssl.SSLContext:
    """The SSLContext with which this node connects to another's SSL ``listener``."""
    return _client_context(SslSettings.of(config, listener))


def client_context_of(configs: dict[str, str]) -> ssl.SSLContext:
    """The SSLContext of a client whose settings are Kafka's client configs as strings (a
    cluster link's to its source): the same checks and messages as a listener's."""
    return _client_context(SslSettings.of_client(configs))


def _client_context(s: SslSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    algorithm = s["ssl.endpoint.identification.algorithm"]
    if algorithm is not None and algorithm.lower() != "https":
        raise s.error(
            "ssl.endpoint.identification.algorithm",
            f"Invalid value {algorithm} for configuration {s.keys['ssl.endpoint.identification.algorithm']}: "
            "Unsupported endpoint identification algorithm (https, or empty for none)",
        )
    ctx.check_hostname = algorithm is not None
    ctx.verify_mode = ssl.CERT_REQUIRED
    _common(ctx, s, client=True)
    _load_keystore(ctx, s)  # optional: a client certificate for listeners that want one
    _load_truststore(ctx, s)
    return ctx


def _common(ctx: ssl.SSLContext, s: SslSettings, client: bool) -> None:
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    protocol = s["ssl.protocol"] or "TLSv1.3"
    if protocol not in _CONTEXT_PROTOCOLS:
        raise s.error(
            "ssl.protocol",
            f"Invalid value {protocol} for configuration {s.keys['ssl.protocol']}: {protocol} SSLContext not available",
        )
    enabled = s["ssl.enabled.protocols"] or ["TLSv1.2", "TLSv1.3"]
    versions = []
    for name in enabled:
        if name not in _PROTOCOLS:
            raise s.error(
                "ssl.enabled.protocols",
                f"Invalid value {','.join(enabled)} for configuration {s.keys['ssl.enabled.protocols']}: "
                f"Unsupported protocol {name} (supported: {', '.join(_PROTOCOLS)})",
            )
        versions.append(_PROTOCOLS[name])
    lowest, highest = min(versions), max(versions)
    if client and protocol in _PROTOCOLS:
        highest = min(highest, _PROTOCOLS[protocol])
    suites = s["ssl.cipher.suites"] or []
    if suites:
        tls12, tls13 = _cipher_suites(s, suites)
        if tls12:
            ctx.set_ciphers(":".join(tls12))
        else:
            lowest = max(lowest, ssl.TLSVersion.TLSv1_3)
        if not tls13:
            highest = min(highest, ssl.TLSVersion.TLSv1_2)
    if lowest > highest:
        raise s.error(
            "ssl.enabled.protocols",
            f"Invalid value {','.join(enabled)} for configuration {s.keys['ssl.enabled.protocols']}: "
            "no protocol left to negotiate with ssl.protocol and ssl.cipher.suites",
        )
    try:
        ctx.minimum_version, ctx.maximum_version = lowest, highest
    except (ValueError, ssl.SSLError) as e:
        raise s.error("ssl.enabled.protocols", f"{s.keys['ssl.enabled.protocols']}: {e}") from None


_KX = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA", "DHE_RSA": "DHE-RSA", "DHE_DSS": "DHE-DSS"}
_all_ciphers: dict[str, str] | None = None


def _openssl_ciphers() -> dict[str, str]:
    """OpenSSL's suite names this OpenSSL knows -> its protocol (``TLSv1.3`` or older)."""
    global _all_ciphers
    if _all_ciphers is None:
        scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        scratch.set_ciphers("ALL:@SECLEVEL=0")
        _all_ciphers = {c["name"]: c["protocol"] for c in scratch.get_ciphers()}
    return _all_ciphers


def openssl_cipher_name(name: str) -> str | None:
    """OpenSSL's name of a suite in Java's (IANA) or OpenSSL's own naming, None if unknown:
    ``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``."""
    known = _openssl_ciphers()
    if name in known:
        return name
    m = re.fullmatch(r"(?:TLS|SSL)_(\w+?)_WITH_(\w+)", name)
    if not m or m.group(1) not in _KX:
        return None
    enc = m.group(2)
    enc = re.sub(r"^AES_(128|256)", r"AES\1", enc)
    enc = enc.replace("_CBC_", "_").replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305").replace("_", "-")
    candidate = "-".join(p for p in (_KX[m.group(1)], enc) if p)
    return candidate if candidate in known else None


def _cipher_suites(s: SslSettings, suites: list[str]) -> tuple[list[str], list[str]]:
    tls12, tls13 = [], []
    for name in suites:
        openssl = openssl_cipher_name(name)
        if openssl is None:
            raise s.error(
                "ssl.cipher.suites",
                f"Invalid value {','.join(suites)} for configuration {s.keys['ssl.cipher.suites']}: "
                f"Unsupported CipherSuite: {name}",
            )
        (tls13 if _openssl_ciphers()[openssl] == "TLSv1.3" else tls12).append(openssl)
    return tls12, tls13


# ---------------------------------------------------------------------------------------- stores
def _read(s: SslSettings, key: str) -> bytes:
    path = s[key]
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise s.error(key, f"Failed to load SSL {key.split('.')[1]} {path}: {e.strerror or e}") from None


def _store_type(s: SslSettings, type_key: str, location_key: str, data: bytes | None) -> str:
    """The store's type: the configured one, or for the default JKS what the file holds."""
    declared = (s[type_key] or JKS).upper()
    if declared not in (PEM, PKCS12, JKS):
        raise s.error(
            type_key, f"Invalid value {s[type_key]} for configuration {s.keys[type_key]}: {declared} not found"
        )
    if data is None or declared != JKS:
        return declared
    if data[:4] == b"\xfe\xed\xfe\xed":
        raise s.error(
            type_key,
            f"{s[location_key]} is a JKS key store, which only a JVM reads: convert it with "
            "keytool -importkeystore -deststoretype PKCS12, and set "
            f"{s.keys[type_key]}=PKCS12 (or PEM)",
        )
    return PEM if b"-----BEGIN" in data[:4096] else PKCS12


def _load_keystore(ctx: ssl.SSLContext, s: SslSettings) -> bool:
    """Load the key store into ``ctx``; False when none is configured."""
    location, password = s["ssl.keystore.location"], s["ssl.keystore.password"]
    key, chain, key_password = s["ssl.keystore.key"], s["ssl.keystore.certificate.chain"], s["ssl.key.password"]
    declared = (s["ssl.keystore.type"] or JKS).upper()
    if key is not None:
        if declared != PEM:
            raise s.error(
                "ssl.keystore.key",
                f"SSL private key can be specified only for PEM, but key store type is {declared}.",
            )
        if chain is None:
            raise s.error("ssl.keystore.key", "SSL private key is specified, but certificate chain is not specified.")
        if location is not None:
            raise s.error(
                "ssl.keystore.location", "Both SSL key store location and separate private key are specified."
            )
        if password is not None:
            raise s.error(
                "ssl.keystore.password",
                "SSL key store password cannot be specified with PEM format, only key password may be specified.",
            )
        _load_pem_pair(ctx, s, chain.encode(), key.encode(), key_password, "ssl.keystore.key")
        return True
    if chain is not None:
        raise s.error(
            "ssl.keystore.certificate.chain", "SSL certificate chain is specified, but private key is not specified"
        )
    if location is None:
        if password is not None:
            raise s.error(
                "ssl.keystore.password", "SSL key store is not specified, but key store password is specified."
            )
        return False
    data = _read(s, "ssl.keystore.location")
    kind = _store_type(s, "ssl.keystore.type", "ssl.keystore.location", data)
    if kind == PEM:
        if password is not None and declared == PEM:
            raise s.error(
                "ssl.keystore.password",
                "SSL key store password cannot be specified with PEM format, only key password may be specified",
            )
        _load_pem_pair(ctx, s, data, data, key_password, "ssl.keystore.location")
        return True
    if password is None:
        raise s.error("ssl.keystore.password", "SSL key store is specified, but key store password is not specified.")
    try:
        pkey, cert, extra = pkcs12.load_key_and_certificates(data, password.encode())
    except ValueError as e:
        raise s.error(
            "ssl.keystore.location",
            f"Failed to load SSL keystore {location} of type PKCS12: {e} (wrong ssl.keystore.password?)",
        ) from None
    if pkey is None or cert is None:
        raise s.error("ssl.keystore.location", f"Failed to load SSL keystore {location}: no private key entry")
    certs = [cert, *(extra or [])]
    _use_key(ctx, s, pkey, certs, "ssl.keystore.location")
    return True


def _load_pem_pair(ctx, s: SslSettings, chain_pem: bytes, key_pem: bytes, key_password, key: str) -> None:
    try:
        certs = x509.load_pem_x509_certificates(chain_pem)
    except ValueError:
        raise s.error(key, "Invalid PEM keystore configs: At least one certificate expected, but none found") from None
    blocks = re.findall(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", key_pem, re.S)
    if not blocks:
        raise s.error(key, "Invalid PEM keystore configs: Private key not provided")
    if len(blocks) > 1:
        raise s.error(key, f"Invalid PEM keystore configs: Expected one private key, but found {len(blocks)}")
    try:
        pkey = serialization.load_pem_private_key(blocks[0], key_password.encode() if key_password else None)
    except (ValueError, TypeError) as e:
        raise s.error(key, f"Invalid PEM keystore configs: Private key could not be loaded ({e})") from None
    _use_key(ctx, s, pkey, certs, key)


def _use_key(ctx: ssl.SSLContext, s: SslSettings, pkey, certs: list, key: str) -> None:
    """Hand the key and chain to OpenSSL through a private temporary file, the key encrypted
    under a one-time password (``load_cert_chain`` reads files only)."""
    once = secrets.token_urlsafe(24)
    blob = pkey.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once.encode()),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    fd, path = tempfile.mkstemp(prefix="kesque-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        ctx.load_cert_chain(path, password=once)
        ctx.keystore_certificate = certs[0]  # what a dynamic key store update is compared with
    except ssl.SSLError as e:
        raise s.error(key, f"Invalid key store: the private key does not match the certificate ({e})") from None
    finally:
        os.unlink(path)


def _truststore_configured(s: SslSettings) -> bool:
    """A trust store of the listener's own (Kafka's ``truststore() != null``)."""
    return s["ssl.truststore.location"] is not None or s["ssl.truststore.certificates"] is not None


def _load_truststore(ctx: ssl.SSLContext, s: SslSettings) -> None:
    certs, location, password = (
        s["ssl.truststore.certificates"],
        s["ssl.truststore.location"],
        s["ssl.truststore.password"],
    )
    declared = (s["ssl.truststore.type"] or JKS).upper()
    if certs is not None:
        if declared != PEM:
            raise s.error(
                "ssl.truststore.certificates",
                f"SSL trust store certs can be specified only for PEM, but trust store type is {declared}.",
            )
        if location is not None:
            raise s.error(
                "ssl.truststore.location",
                "Both SSL trust store location and separate trust certificates are specified.",
            )
        if password is not None:
            raise s.error("ssl.truststore.password", "SSL trust store password cannot be specified for PEM format.")
        _trust_pem(ctx, s, certs.encode(), "ssl.truststore.certificates")
        return
    if location is None:
        if password is not None:
            raise s.error(
                "ssl.truststore.password", "SSL trust store is not specified, but trust store password is specified."
            )
        # the system's authorities, for the purpose this side checks (a client's, or a server's)
        server_side = ctx.protocol == ssl.PROTOCOL_TLS_SERVER
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if server_side else ssl.Purpose.SERVER_AUTH)
        return
    data = _read(s, "ssl.truststore.location")
    kind = _store_type(s, "ssl.truststore.type", "ssl.truststore.location", data)
    if kind == PEM:
        if password is not None and declared == PEM:
            raise s.error("ssl.truststore.password", "SSL trust store password cannot be specified for PEM format.")
        _trust_pem(ctx, s, data, "ssl.truststore.location")
        return
    try:
        p12 = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise s.error(
            "ssl.truststore.location",
            f"Failed to load SSL truststore {location} of type PKCS12: {e} (wrong ssl.truststore.password?)",
        ) from None
    found = [c.certificate for c in p12.additional_certs] + ([p12.cert.certificate] if p12.cert else [])
    if not found:
        raise s.error("ssl.truststore.location", f"Failed to load SSL truststore {location}: no certificate in it")
    ctx.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in found))


def _trust_pem(ctx: ssl.SSLContext, s: SslSettings, pem: bytes, key: str) -> None:
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise s.error(
            key, "Invalid PEM truststore configs: At least one certificate expected, but none found"
        ) from None
    ctx.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))


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
KEYSTORE_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
)
TRUSTSTORE_KEYS = (
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
)
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
