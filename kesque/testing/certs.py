"""Certificates for TLS tests and benchmarks: a CA, and certificates it signs, written as PEM
(and PKCS12) files, generated with ``cryptography`` in a fraction of a second (EC P-256 keys).

    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    server.write_pem(dir / "server.pem")         # key + chain: ssl.keystore.type=PEM
    ca.write_pem(dir / "ca.pem")                  # ssl.truststore.location / ssl.ca.location

``kesque certs`` (kesque/cli/certs.py) writes the same files, and the properties of a SASL_SSL
broker, cluster and client, for the README's secure quickstart.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID


def _name(cn: str, org: str | None = None, unit: str | None = None, country: str | None = None) -> x509.Name:
    attrs = []
    if country:
        attrs.append(x509.NameAttribute(NameOID.COUNTRY_NAME, country))
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    chain: list[x509.Certificate]  # the issuers above it

    def key_pem(self, password: str | None = None) -> str:
        enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc).decode()

    def chain_pem(self) -> str:
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in [self.cert, *self.chain])

    def write_pem(self, path, password: str | None = None) -> str:
        """Key and certificate chain in one file (Kafka's PEM key store file)."""
        with open(path, "w") as f:
            f.write(self.key_pem(password) + self.chain_pem())
        return str(path)

    def write_pkcs12(self, path, password: str) -> str:
        data = pkcs12.serialize_key_and_certificates(
            b"kafka", self.key, self.cert, self.chain or None, serialization.BestAvailableEncryption(password.encode())
        )
        with open(path, "wb") as f:
            f.write(data)
        return str(path)


class CertificateAuthority:
    def __init__(self, cn: str = "kesque-test-ca", days: int = 30):
        now = datetime.datetime.now(datetime.UTC)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(cn)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write_pem(self, path) -> str:
        with open(path, "w") as f:
            f.write(self.pem())
        return str(path)

    def write_pkcs12_truststore(self, path, password: str) -> str:
        data = pkcs12.serialize_key_and_certificates(
            None, None, None, [self.cert], serialization.BestAvailableEncryption(password.encode())
        )
        with open(path, "wb") as f:
            f.write(data)
        return str(path)

    def issue(
        self,
        cn: str,
        hosts: list[str] = (),
        org: str | None = None,
        unit: str | None = None,
        country: str | None = None,
        days: int = 30,
    ) -> Issued:
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        sans = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org, unit, country))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return Issued(key, builder.sign(self.key, hashes.SHA256()), [self.cert])
