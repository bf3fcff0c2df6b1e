"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker does them, sans-IO.

* :class:`ScramFormatter`: the key derivation (Hi = PBKDF2-HMAC, ClientKey, StoredKey, ServerKey,
  signatures, proof) and credential generation as Kafka's ScramFormatter: a salt of the UTF-8
  bytes of a random base-36 number (130 bits), as Kafka makes both its salts and its nonces.
* :class:`ScramSaslServer`: the server's state machine, client-first -> server-first ->
  client-final -> server-final, with Kafka's message grammar (ScramMessages) and errors
  (ScramSaslServer). Credentials come from a lookup by user name (the metadata image's
  UserScramCredentialRecords, when wired); the random nonce source can be passed in.
* :func:`parse_credential_config`: ``kafka-configs.sh``'s ``[iterations=8192,password=...]``
  value of a ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` config, and the stored form
  ``salt=...,stored_key=...,server_key=...,iterations=...`` (ScramCredentialUtils).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from .sasl import IllegalSaslState, SaslAuthenticationFailed, SaslServerError

__all__ = [
    "DEFAULT_ITERATIONS",
    "ScramCredential",
    "ScramFormatter",
    "ScramMechanism",
    "ScramSaslServer",
    "credential_from_string",
    "credential_to_string",
    "parse_add_scram",
    "parse_credential_config",
    "sasl_name",
    "secure_random_string",
    "username",
]

DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default when the value names none


class ScramMechanism(Enum):
    """Kafka's ScramMechanism: the type code UserScramCredentialRecord stores, the hash, and
    the iteration bounds."""

    SCRAM_SHA_256 = (1, "sha256", 4096, 16384)
    SCRAM_SHA_512 = (2, "sha512", 4096, 16384)

    def __init__(self, type_code: int, hash_name: str, min_iterations: int, max_iterations: int):
        self.type_code = type_code
        self.hash_name = hash_name
        self.min_iterations = min_iterations
        self.max_iterations = max_iterations

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @classmethod
    def for_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    @classmethod
    def from_type(cls, code: int) -> ScramMechanism | None:
        return next((m for m in cls if m.type_code == code), None)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def secure_random_string() -> str:
    """Kafka's ScramFormatter.secureRandomString: a random 130-bit number in base 36."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out)) or "0"


class ScramFormatter:
    def __init__(self, mechanism: ScramMechanism):
        self.mechanism = mechanism
        self._hash = getattr(hashlib, mechanism.hash_name)

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.mechanism.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return self._hash(data).digest()

    def hi(self, data: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.mechanism.hash_name, data, salt, iterations)

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        # Kafka's normalize is the UTF-8 bytes (no SASLprep)
        return self.hi(password.encode(), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.hash(client_key)

    def credential_from_salted(self, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
        """What the controller stores for an AlterUserScramCredentials upsertion (the client
        sends the salt and the salted password)."""
        return ScramCredential(
            salt, self.stored_key(self.client_key(salted_password)), self.server_key(salted_password), iterations
        )

    def generate_credential(self, password: str, iterations: int, salt: bytes | None = None) -> ScramCredential:
        if salt is None:
            salt = secure_random_string().encode()
        return self.credential_from_salted(salt, self.salted_password(password, salt, iterations), iterations)


def sasl_name(name: str) -> str:
    """A user name as a SCRAM message carries it: ``=`` as ``=3D``, ``,`` as ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def username(name: str) -> str:
    """ScramFormatter.username: the user name of a SCRAM ``saslname``."""
    out = name.replace("=2C", ",")
    if "=" in out.replace("=3D", ""):
        raise ValueError(f"Invalid username: {name}")
    return out.replace("=3D", "=")


# ScramMessages' grammar (Java's [a&&[^b]] written as Python classes)
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # [\x01-\x7F] but ','
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_B64C = r"[a-zA-Z0-9/+]"
_BASE64 = rf"(?:{_B64C}{{4}})*(?:{_B64C}{{3}}=|{_B64C}{{2}}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})"
)
_CLIENT_FINAL = re.compile(rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})")


class ScramSaslServer:
    """One connection's SCRAM exchange. ``evaluate(token)`` returns the server's next token or
    raises (:class:`SaslServerError`: the client sees Kafka's generic message;
    :class:`SaslAuthenticationFailed`: the client sees this message). ``complete`` and
    ``authorization_id`` (the user name) once the proof checked."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] = secure_random_string,
    ):
        self.mechanism = mechanism
        self.formatter = ScramFormatter(mechanism)
        self._credentials = credentials
        self._nonce = nonce
        self.state = "RECEIVE_CLIENT_FIRST_MESSAGE"
        self.authorization_id: str | None = None
        self.extensions: dict[str, str] = {}
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce_value = ""

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    def evaluate(self, response: bytes) -> bytes:
        try:
            if self.state == "RECEIVE_CLIENT_FIRST_MESSAGE":
                return self._client_first(response)
            if self.state == "RECEIVE_CLIENT_FINAL_MESSAGE":
                return self._client_final(response)
            raise IllegalSaslState(f"Unexpected challenge in Sasl server state {self.state}")
        except (SaslServerError, SaslAuthenticationFailed, IllegalSaslState):
            self._credential = None
            self.state = "FAILED"
            raise

    def _client_first(self, response: bytes) -> bytes:
        message = response.decode("utf-8", "replace")
        m = _CLIENT_FIRST.fullmatch(message)
        if m is None:
            raise SaslServerError(f"Invalid SCRAM client first message format: {message}")
        ext = m.group("extensions")
        self.extensions = dict(e.split("=", 1) for e in ext[1:].split(",")) if ext else {}
        if self.extensions.get("tokenauth", "").lower() == "true":
            raise SaslServerError("Token Authentication failed: delegation tokens are not supported")
        try:
            user = username(m.group("saslname"))
            credential = self._credentials(user)
        except Exception as e:
            raise SaslServerError("Authentication failed: Credentials could not be obtained") from e
        if credential is None:
            raise SaslServerError("Authentication failed: Invalid user credentials")
        authzid = m.group("authzid") or ""
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < self.mechanism.min_iterations:
            raise SaslServerError(
                f"Iterations {credential.iterations} is less than the minimum {self.mechanism.min_iterations} "
                f"for {self.mechanism.mechanism_name}"
            )
        self.authorization_id = user
        self._credential = credential
        # the bare client-first message, as Kafka rebuilds it: n=, r= and the extensions
        self._client_first_bare = f"n={m.group('saslname')},r={m.group('nonce')}{ext}"
        self._nonce_value = m.group("nonce") + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce_value},s={salt},i={credential.iterations}"
        self.state = "RECEIVE_CLIENT_FINAL_MESSAGE"
        return self._server_first.encode()

    def _client_final(self, response: bytes) -> bytes:
        message = response.decode("utf-8", "replace")
        m = _CLIENT_FINAL.fullmatch(message)
        if m is None:
            raise SaslServerError(f"Invalid SCRAM client final message format: {message}")
        if not m.group("nonce").endswith(self._nonce_value):
            raise SaslServerError("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(m.group("proof"), validate=True)
        except binascii.Error:
            raise SaslServerError(f"Invalid SCRAM client final message format: {message}") from None
        f, cred = self.formatter, self._credential
        # Kafka's ClientFinalMessage.clientFinalMessageWithoutProof: c= and r= re-encoded
        without_proof = f"c={m.group('channel')},r={m.group('nonce')}"
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = f.hmac(cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslServerError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_signature, proof, strict=True))
        if not hmac.compare_digest(f.hash(client_key), cred.stored_key):
            raise SaslServerError("Invalid client credentials")
        server_signature = f.hmac(cred.server_key, auth_message)
        self._credential = None
        self.state = "COMPLETE"
        return b"v=" + base64.b64encode(server_signature)


def credential_to_string(c: ScramCredential) -> str:
    """ScramCredentialUtils.credentialToString."""
    b64 = base64.b64encode
    return (
        f"salt={b64(c.salt).decode()},stored_key={b64(c.stored_key).decode()},"
        f"server_key={b64(c.server_key).decode()},iterations={c.iterations}"
    )


def credential_from_string(text: str) -> ScramCredential:
    """ScramCredentialUtils.credentialFromString."""
    props = dict(t.split("=", 1) for t in text.split(",") if "=" in t)
    if set(props) != {"salt", "stored_key", "server_key", "iterations"} or len(text.split(",")) != 4:
        raise ValueError(f"Credentials not valid: {text}")
    b64 = base64.b64decode
    return ScramCredential(
        b64(props["salt"]), b64(props["stored_key"]), b64(props["server_key"]), int(props["iterations"])
    )


_CREDENTIAL_CONFIG = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)


def parse_credential_config(mechanism: ScramMechanism, value: str) -> tuple[int, str]:
    """The (iterations, password) of a ``kafka-configs.sh --add-config`` SCRAM value, as its
    alterUserScramCredentialConfigs reads it: ``[iterations=8192,password=secret]`` (the
    brackets optional, as the tool strips them), iterations 4096 when absent or -1."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    m = _CREDENTIAL_CONFIG.fullmatch(value)
    if m is None:
        raise ValueError(f"Invalid credential property {mechanism.name}={value}")
    raw, password = m.groups()
    iterations = int(raw) if raw not in (None, "-1") else DEFAULT_ITERATIONS  # "" fails as Kafka's toInt
    if iterations < mechanism.min_iterations:
        raise ValueError(
            f"Iterations {iterations} is less than the minimum {mechanism.min_iterations} "
            f"required for {mechanism.mechanism_name}"
        )
    return iterations, password


def parse_add_scram(argument: str) -> tuple[ScramMechanism, str, ScramCredential]:
    """``kafka-storage.sh format --add-scram 'SCRAM-SHA-256=[name=alice,password=secret]'`` as
    Kafka's ScramParser: ``name`` and ``password`` (or ``saltedpassword`` with ``salt``, both
    base64), ``iterations`` (4096 when absent); ValueError with Kafka's message."""
    argument = argument.strip()
    mechanism_name, eq, config = argument.partition("=")
    if not eq:
        raise ValueError(f"Failed to find equals sign in SCRAM argument '{argument}'")
    mechanism = ScramMechanism.for_name(mechanism_name)
    if mechanism is None:
        raise ValueError(f"The add-scram mechanism {mechanism_name} is not supported.")
    if not config.startswith("["):
        raise ValueError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ValueError("Expected configuration string to end with ]")
    components: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, eq, value = component.partition("=")
        if not eq:
            raise ValueError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        components[key] = value
    name = components.pop("name", None)
    if name is None:
        raise ValueError("You must supply 'name' to add-scram")
    salt_text = components.pop("salt", None)
    try:
        salt = base64.b64decode(salt_text, validate=True) if salt_text is not None else None
    except binascii.Error:
        raise ValueError(f"Failed to decode given salt: {salt_text}") from None
    iterations_text = components.pop("iterations", None)
    try:
        iterations = int(iterations_text) if iterations_text is not None else DEFAULT_ITERATIONS
    except ValueError:
        raise ValueError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    salted = None
    if password is None:
        if salted_text is None:
            raise ValueError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        if salt is None:
            raise ValueError("You must supply 'salt' with 'saltedpassword' to add-scram")
        try:
            salted = base64.b64decode(salted_text, validate=True)
        except binascii.Error:
            raise ValueError(f"Failed to decode given saltedPassword: {salted_text}") from None
    if components:
        raise ValueError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    if iterations < mechanism.min_iterations:
        raise ValueError(
            f"The 'iterations' value must be >= {mechanism.min_iterations} for add-scram using {mechanism.name}"
        )
    if iterations > mechanism.max_iterations:
        raise ValueError(
            f"The 'iterations' value must be <= {mechanism.max_iterations} for add-scram using {mechanism.name}"
        )
    formatter = ScramFormatter(mechanism)
    if salt is None:
        salt = secure_random_string().encode()
    if salted is None:
        salted = formatter.salted_password(password, salt, iterations)
    return mechanism, name, formatter.credential_from_salted(salt, salted, iterations)
