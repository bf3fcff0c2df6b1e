"""TLS contexts from Kafka's ``ssl.*`` settings, sans-IO: the parsing and checking of the key and
trust stores, protocols and cipher suites that a broker's listeners (kesque/server/tls.py) and
every client side share - the broker's own channels, its cluster links, and kesque's wire client
(kesque/client/wire.py, kesque/security/client_props.py).

Key stores (KIP-651 and PKCS12):

* ``ssl.keystore.type=PEM``: ``ssl.keystore.location`` names a file with the private key and the
  certificate chain, or ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain`` hold them
  inline; an encrypted key is opened with ``ssl.key.password``;
* ``PKCS12``: ``ssl.keystore.location`` and ``ssl.keystore.password`` (read with ``cryptography``;
  the key goes to OpenSSL re-encrypted under a one-time password, never in clear on disk);
* the trust store the same way: ``ssl.truststore.certificates`` inline or a PEM file, or a
  PKCS12 file; none: the system's certificate authorities, as Java's default trust store.

Kafka's default store type is JKS, which only a JVM reads: a JKS file is refused with a message
saying how to convert it; a store whose type is left at its default but whose file is PEM or
PKCS12 is read as what it is (as the JDK reads PKCS12 for type JKS).

Every bad value is a :class:`ConfigError` (a ValueError) naming the key, with Kafka's message
where Kafka has one, raised while the context is built.
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

from ..config import ConfigError

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
SSL_KEYS = (
    KEYSTORE_KEYS
    + TRUSTSTORE_KEYS
    + (
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "ssl.principal.mapping.rules",
    )
)
_LIST_KEYS = ("ssl.enabled.protocols", "ssl.cipher.suites")


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
    def of_props(cls, props: dict) -> SslSettings:
        """A client's ``ssl.*`` settings as Kafka's client properties (strings: the lists
        comma-separated), with the Java client's defaults: the server's host name is checked
        unless ``ssl.endpoint.identification.algorithm`` is set empty."""
        values = {}
        for key in SSL_KEYS:
            v = props.get(key)
            if key in _LIST_KEYS and isinstance(v, str):
                v = [x.strip() for x in v.split(",") if x.strip()]
            values[key] = v
        if props.get("ssl.endpoint.identification.algorithm") is None:
            values["ssl.endpoint.identification.algorithm"] = "https"
        return cls("client", values, {key: key for key in SSL_KEYS})

    def __getitem__(self, key: str):
        v = self.values[key]
        return None if v == "" else v

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError naming the key as the user wrote it (its listener prefix kept)."""
        name = self.keys[key]
        return ConfigError(name, message if name in message else f"{name}: {message}")


def client_context(s: SslSettings) -> ssl.SSLContext:
    """The SSLContext of a client side whose settings are ``s``: the server's certificate checked
    against the trust store (and its host name, with ``ssl.endpoint.identification.algorithm``
    https), the key store's certificate presented when the server asks for one."""
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
    common(ctx, s, client=True)
    load_keystore(ctx, s)  # optional: a client certificate for listeners that want one
    load_truststore(ctx, s)
    return ctx


def common(ctx: ssl.SSLContext, s: SslSettings, client: bool) -> None:
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


def load_keystore(ctx: ssl.SSLContext, s: SslSettings) -> bool:
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


def truststore_configured(s: SslSettings) -> bool:
    """A trust store of the listener's own (Kafka's ``truststore() != null``)."""
    return s["ssl.truststore.location"] is not None or s["ssl.truststore.certificates"] is not None


def load_truststore(ctx: ssl.SSLContext, s: SslSettings) -> None:
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


def keystore_kind(s: SslSettings) -> str | None:
    """What the key store at ``ssl.keystore.location`` is, PEM or PKCS12 (its declared type, or
    for the default JKS what the file holds); None without one."""
    if s["ssl.keystore.location"] is None:
        return None
    return _store_type(s, "ssl.keystore.type", "ssl.keystore.location", _read(s, "ssl.keystore.location"))
